"""Linear clustering (Kim and Browne 1988) followed by GLB cluster mapping (Radulescu and van
Gemund 1998), the clustering + mapping pair PARDNN's slicing + LFLAM improves on.

Linear clustering takes the critical path of the remaining graph (levels with comm recomputed
after every removal) as a cluster, until no node is left: O(V (V + E)). That is the same walk as
PARDNN's slicing with K = |V| primaries, so it reuses :func:`slice_graph`; when the time budget
(opts.time_limit, default 60 s for this phase) runs out, the remaining clusters are cut with the
last levels, as PARDNN does for its secondaries (reported in info["recomputed_clusters"]).

GLB maps clusters in order of their start time (top level of the first node) each to the device
with the least work assigned so far among those with room for the whole cluster's static memory;
a cluster that fits on no single device is spread node by node the same way. Colocation and
allowed devices are repaired afterwards; if that overfills a device, PARDNN's overflow handler
(static memory) moves nodes out, and info["memory_fix_moves"] says how many.
"""
from __future__ import annotations

import time

import numpy as np

from placement.evaluator import evaluate
from placement.problem import Problem
from placement.solution import Solution, SolveOptions

from .pardnn.graph import Graph, top_levels
from .pardnn.pipeline import heuristic_one, repair_constraints
from .pardnn.slicing import Slicing, slice_graph

DEFAULT_BUDGET = 60.0


def linear_clusters(problem: Problem, deadline: float | None = None) -> Slicing:
    return slice_graph(Graph.of(problem), problem.n, problem.comm, deadline)


def glb(problem: Problem, sl: Slicing, capacity: np.ndarray) -> np.ndarray:
    """Guided load balancing with a static-memory check; returns a device per node."""
    k = problem.k
    tl = top_levels(Graph.of(problem), problem.comm)
    need = problem.param_bytes + problem.out_bytes
    first = np.array([p[0] for p in sl.paths], dtype=np.int64)
    order = np.lexsort((problem.topo_rank[first], tl[first]))
    load = np.zeros(k)
    used = np.zeros(k)
    mask = problem.allowed_mask()
    pl = np.zeros(problem.n, dtype=np.int64)
    for c in order.tolist():
        nodes = sl.paths[c]
        size = float(need[nodes].sum())
        ok = mask[nodes].all(axis=0) & (used + size <= capacity)
        if ok.any():
            d = int(np.argmin(np.where(ok, load, np.inf)))
            pl[nodes] = d
            load[d] += float(problem.time[nodes].sum())
            used[d] += size
            continue
        for v in nodes.tolist():
            ok = mask[v] & (used + need[v] <= capacity)
            d = int(np.argmin(np.where(ok, load, np.inf))) if ok.any() else int(np.argmin(np.where(mask[v], used, np.inf)))
            pl[v] = d
            load[d] += float(problem.time[v])
            used[d] += float(need[v])
    return pl


def linear_clustering(problem: Problem, opts: SolveOptions) -> Solution:
    t0 = time.monotonic()
    rem = opts.remaining()
    budget = DEFAULT_BUDGET if rem is None else 0.7 * rem
    sl = linear_clusters(problem, time.monotonic() + budget)
    cap = problem.memory * (1.0 - opts.reserve)
    pl = repair_constraints(problem, glb(problem, sl, cap))
    info = {"clusters": len(sl.paths), "recomputed_clusters": sl.primaries}
    pl, fix = heuristic_one(problem, pl, cap, opts.memory_model, max_rounds=4)
    info["memory_fix_moves"] = fix["moves"]
    ev = evaluate(problem, pl, memory_model=opts.memory_model)
    if not ev.feasible(problem):
        over = ev.overflow(problem)
        return Solution("linear-clustering", "unknown", reason=f"linear-clustering: placement exceeds memory by {over.tolist()} bytes per device",
                        seconds=time.monotonic() - t0, info={**info, "overflow": over.tolist(), "placement": pl})
    return Solution("linear-clustering", "heuristic", placement=ev.placement, start=ev.start, objective=ev.makespan,
                    seconds=time.monotonic() - t0, info=info)
