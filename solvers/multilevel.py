"""Multilevel exact search for big graphs: coarsen in levels, solve the coarsest level with CP-SAT,
then uncoarsen level by level with refinement at each one (a V-cycle, as graph partitioners do).

Why: one coarse CP-SAT solve mapped straight back to the original graph was worse than the warm
start (1.7x on the issue's Inception-v3 graph): the coarse model serialises each coarse node and
every original-level decision it hides is left to a refine on the full graph where evaluations
are expensive. Here every level between the coarsest and the original gets its own refinement,
starting from the better (by that level's evaluator) of the level below's answer and the
incumbent restricted to that level, and the hierarchy is built from the incumbent's schedule so
that the critical path's costly transfers stay visible: critical nodes joined by a transfer that
matters are put in different *segments*, and no coarse node ever holds two segments
(placement/coarsen.py), so every level can still decide whether to pay that transfer.

The coarse levels preserve static memory exactly (a feasible coarse placement projects to a
feasible one) and a coarse schedule projects to an order whose makespan on the finer level is at
most the coarse one (docs/coarsening.md): every level starts no worse than the level below
promised. The answer is judged by the evaluator on the original graph and is never worse than the
incumbent it was given.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field, replace
from typing import Callable

import networkx as nx
import numpy as np

from formulations.cpsat import cpsat
from placement.coarsen import Coarsening, coarsen
from placement.evaluator import Evaluation, check, evaluate
from placement.incremental import IncrementalSchedule
from placement.problem import Problem
from placement.solution import Solution, SolveOptions

from .refine import RefineStats, refine

COARSEST = 250  # nodes of the level CP-SAT solves (bench/results_coarsen.md, "Multilevel")
RATIO = 4  # size ratio between consecutive levels
EXACT_SHARE = 0.3  # of the budget for CP-SAT on the coarsest level; the levels share the rest equally
COMM_MATTERS = 0.5  # a critical transfer matters when it costs this share of a mean critical node's time


@dataclass
class MultilevelStats:
    """What a multilevel run did; ``best_makespan`` is live (progress lines read it)."""

    sizes: list[int] = field(default_factory=list)  # nodes per level, original first
    kept_edges: int = 0  # critical transfers that matter and stay between coarse nodes at every level
    hidden_edges: int = 0  # those that a segment could not keep apart (two critical routes joined them)
    coarse_status: str = ""
    level_makespans: list[float] = field(default_factory=list)  # after refining each level, coarsest first
    start_makespan: float = 0.0
    best_makespan: float | None = None
    evaluations: int = 0
    original_start: str = ""  # which candidate the original level was refined from


def critical_segments(problem: Problem, placement: np.ndarray, start: np.ndarray, most: int,
                      comm_matters: float = COMM_MATTERS) -> tuple[np.ndarray, int, int]:
    """Segments for the ends of the schedule's costly critical transfers (-1 for every other
    node): critical nodes joined by a tight edge whose transfer does not matter share a segment,
    so the ones that matter separate segments. A transfer matters when it costs at least ``comm_matters`` of a mean critical
    node's time and is among the ``most`` costliest such (every segment is at least one coarse
    node: more would keep the coarsest level from its size). Returns (segment per node,
    transfers kept apart, transfers that ended inside one segment because another critical route
    joined their ends)."""
    p = problem
    base = IncrementalSchedule(p, placement, start)
    eps = 1e-9 * max(1.0, base.makespan)
    crit = base.start + p.time + base.tail >= base.makespan - eps
    src, dst = p.src, p.dst
    pl = base.placement
    arrive = base.finish[src] + np.where(pl[src] != pl[dst], p.comm, 0.0)
    tight = crit[src] & crit[dst] & (arrive >= base.start[dst] - eps)
    busy = crit & (p.time > 0)
    unit = float(p.time[busy].mean()) if busy.any() else 0.0
    matters = tight & (p.comm >= comm_matters * unit) & (p.comm > 0)
    heavy = np.flatnonzero(matters)
    if heavy.size > most:
        matters[heavy[np.argsort(-p.comm[heavy], kind="stable")[most:]]] = False
    g = nx.Graph()
    g.add_nodes_from(np.flatnonzero(crit).tolist())
    joins = np.flatnonzero(tight & ~matters)
    g.add_edges_from(zip(src[joins].tolist(), dst[joins].tolist()))
    comp_of = np.full(p.n, -1, dtype=np.int64)
    for i, comp in enumerate(nx.connected_components(g)):
        comp_of[list(comp)] = i
    m = np.flatnonzero(matters)
    # Only the ends of the costly transfers carry their segment: that keeps each such pair in two
    # coarse nodes, and leaves every other node free to merge (tagging every critical node kept
    # the LSTM's coarsening at 1,300 nodes for a target of 250).
    seg = np.full(p.n, -1, dtype=np.int64)
    ends = np.r_[src[m], dst[m]]
    seg[ends] = comp_of[ends]
    kept = int(np.count_nonzero(seg[src[m]] != seg[dst[m]]))
    return seg, kept, int(m.size) - kept


def hierarchy(problem: Problem, segment: np.ndarray | None, *, coarsest: int, ratio: int, seed: int,
              deadline: float) -> list[Coarsening]:
    """Coarsenings from the original down to about ``coarsest`` nodes, finest first, each level
    about ``ratio`` times smaller, the segments carried to every level (a coarse node's segment
    is its members'). Stops early when a level barely shrinks or time runs short."""
    chain: list[Coarsening] = []
    cur, seg = problem, segment
    # Coarsening costs about 40 us per node (measured, loaded machine): only when time allows.
    while cur.n > coarsest * 1.5 and deadline - time.monotonic() > 3 * 4e-5 * cur.n + 1.0:
        cz = coarsen(cur, max(coarsest, cur.n // ratio), seed=seed, segment=seg)
        if cz.coarse.n > 0.9 * cur.n:
            break
        chain.append(cz)
        if seg is not None:
            up = np.full(cz.coarse.n, -1, dtype=np.int64)
            np.maximum.at(up, cz.of, seg)
            seg = up
        cur = cz.coarse
    return chain


def _key(problem: Problem, ev: Evaluation) -> tuple[int, float]:
    return (0 if ev.feasible(problem) else 1, ev.makespan)


def multilevel(problem: Problem, placement: np.ndarray, start: np.ndarray, opts: SolveOptions, *, deadline: float,
               memory_model: str = "static", coarsest: int = COARSEST, ratio: int = RATIO,
               exact_share: float = EXACT_SHARE, protect: bool = True, stats: MultilevelStats | None = None,
               say: Callable[[str], None] | None = None) -> tuple[np.ndarray, Evaluation]:
    """Improve the schedule (``placement``, ``start``: a valid schedule of it) by a V-cycle until
    ``deadline`` (time.monotonic()). Returns the best placement and its evaluation on the original
    graph, never worse than the input schedule's. ``protect``: keep the critical path's costly
    transfers visible at every level (else the plain coarsening). Deterministic given
    ``opts.seed`` when no level is cut short by the clock."""
    p = problem
    stats = stats or MultilevelStats()
    pl0 = np.asarray(placement, dtype=np.int64)
    ev0 = check(p, pl0, start, memory_model, check_memory=False)
    stats.start_makespan = stats.best_makespan = ev0.makespan
    seg = None
    if protect:
        seg, stats.kept_edges, stats.hidden_edges = critical_segments(p, pl0, ev0.start, most=coarsest // 4)
    chain = hierarchy(p, seg, coarsest=coarsest, ratio=ratio, seed=opts.seed, deadline=deadline)
    probs = [p] + [cz.coarse for cz in chain]
    stats.sizes = [q.n for q in probs]
    if not chain or opts.stop.is_set():
        return pl0, ev0
    restricted: list[np.ndarray | None] = [pl0]
    for cz in chain:
        prev = restricted[-1]
        restricted.append(None if prev is None else cz.restrict(prev))
    top = probs[-1]
    budget = max(0.0, deadline - time.monotonic())
    hint = None if restricted[-1] is None else Solution("incumbent", "heuristic", placement=restricted[-1])
    sol = cpsat(top, replace(opts, time_limit=exact_share * budget, started=time.monotonic(), hint=hint,
                             memory_model=memory_model))
    stats.coarse_status = sol.status
    if sol.placement is not None:
        cur_pl = np.asarray(sol.placement, dtype=np.int64)
        cur_ev = evaluate(top, cur_pl, memory_model=memory_model) if sol.start is None else \
            check(top, cur_pl, sol.start, memory_model, check_memory=False)
    elif restricted[-1] is not None:
        cur_pl = restricted[-1]
        cur_ev = evaluate(top, cur_pl, memory_model=memory_model)
    else:
        return pl0, ev0
    stats.level_makespans.append(cur_ev.makespan)
    if say is not None:
        say(f"multilevel: {' > '.join(map(str, stats.sizes))} nodes; coarsest {sol.status} {cur_ev.makespan:.6g}")
    levels = len(chain)
    for j in range(levels - 1, -1, -1):  # project from level j+1 onto level j and refine there
        if opts.stop.is_set():
            break
        q, cz = probs[j], chain[j]
        proj = cz.project(cur_pl)
        cands: list[tuple[str, np.ndarray, Evaluation]] = [
            ("projected (coarse order)", proj,
             evaluate(q, proj, order=cz.project_order(cur_pl, cur_ev.start), memory_model=memory_model)),
            ("projected (FIFO)", proj, evaluate(q, proj, memory_model=memory_model))]
        if j == 0:
            cands.append(("incumbent", pl0, ev0))
        elif restricted[j] is not None:
            cands.append(("incumbent restricted", restricted[j], evaluate(q, restricted[j], memory_model=memory_model)))
        name, pl_j, ev_j = min(cands, key=lambda c: _key(q, c[2]))
        if j == 0:
            stats.original_start = name
        now = time.monotonic()
        level_deadline = now + max(0.0, deadline - now) / (j + 1)
        rs = RefineStats()
        cur_pl, cur_ev = refine(q, pl_j, opts, deadline=level_deadline, memory_model=memory_model, start=ev_j.start,
                                keep_order="auto", stats=rs)
        stats.evaluations += rs.evaluations
        stats.level_makespans.append(cur_ev.makespan)
    if len(stats.level_makespans) < levels + 1 or _key(p, cur_ev) >= _key(p, ev0):
        return pl0, ev0
    stats.best_makespan = cur_ev.makespan
    return cur_pl, cur_ev
