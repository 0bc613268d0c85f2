"""The hybrid of placement and partitioning: partition the few operators that do not fit on a device,
place the rest whole.

1. The operators whose footprint (parameters, output and input tensors: what a device must hold to
   run it whole) exceeds ``fraction`` of the smallest device are partitioned over all devices;
   every other operator is to be placed whole.
2. The others are placed by PARDNN on a reduced problem: the same graph without the partitioned
   operators, each device's capacity lowered by its share (1/k) of the partitioned bytes, each
   placed consumer of a partitioned tensor charged for gathering it whole.
3. Tofu's recursive DP lays out the partitioned operators' tensors (placed operators' tensors stay
   whole on their device) and the plan evaluator measures the whole hybrid: partitioned producers
   are gathered whole by placed consumers, placed producers' regions fetched by partitioned ones,
   placed-to-placed edges cost what the problem says.
"""
from __future__ import annotations

import time

import numpy as np

from placement.partition.graph import PGraph, build_graph, with_placed
from placement.partition.plan import evaluate_plan
from placement.problem import Problem, ProblemError, make_problem
from placement.solution import Solution, SolveOptions

from heuristics.pardnn import pardnn

from .search import SearchStopped, TableTooLarge, recursive_plan
from .summary import plan_summary

DEFAULT_FRACTION = 0.5


def oversized(g: PGraph, fraction: float = DEFAULT_FRACTION) -> np.ndarray:
    """Operators whose parameters, output and inputs exceed ``fraction`` of the smallest device."""
    p = g.problem
    inputs = np.array([sum(g.tensors[t].nbytes for t in set(op.inputs) if t >= 0) for op in g.ops])
    return np.flatnonzero(p.param_bytes + p.out_bytes + inputs > fraction * float(p.memory.min()))


def rest_problem(problem: Problem, keep: np.ndarray, reserve: float, gathered: np.ndarray) -> Problem:
    """``problem`` restricted to the nodes ``keep`` (edges among them), capacities minus ``reserve``;
    ``gathered[o]`` (bytes of partitioned tensors node ``o`` gathers whole) is added to its output so
    that the placement makes room for it on ``o``'s device."""
    pos = {int(o): i for i, o in enumerate(keep)}
    nodes = []
    for o in keep.tolist():
        rec = {"id": o, "time": float(problem.time[o]), "out_bytes": float(problem.out_bytes[o] + gathered[o]),
               "param_bytes": float(problem.param_bytes[o])}
        if problem.allowed[o] is not None:
            rec["devices"] = list(problem.allowed[o])
        if problem.colocate[o] >= 0:
            rec["colocate"] = problem.colocate_names[int(problem.colocate[o])]
        nodes.append(rec)
    edges = [{"src": int(u), "dst": int(v), "comm": float(c)} for u, v, c in zip(problem.src, problem.dst, problem.comm)
             if int(u) in pos and int(v) in pos]
    memory = np.maximum(problem.memory - reserve, 0.0)
    return make_problem(nodes, edges, devices=problem.k, memory=list(memory), name=f"{problem.name}/placed-part")


def tofu_hybrid(problem: Problem, opts: SolveOptions) -> Solution:
    """Partition the operators that do not fit, place the rest with PARDNN; a partitioned plan."""
    t0 = time.monotonic()
    name = "tofu-hybrid"
    if problem.has_allowed:
        return Solution(name, "unknown", seconds=time.monotonic() - t0,
                        reason="some nodes may use only some devices; the hybrid partitions operators over every device")
    try:
        g = build_graph(problem)
    except ProblemError as exc:
        return Solution(name, "unknown", reason=str(exc), seconds=time.monotonic() - t0)
    fraction = float(opts.extra.get("hybrid_fraction", DEFAULT_FRACTION))
    big = oversized(g, fraction)
    if big.size == 0:
        return Solution(name, "unknown", seconds=time.monotonic() - t0,
                        reason=f"no operator's footprint exceeds {fraction:g} of a device: nothing to partition")
    keep = np.setdiff1d(np.arange(problem.n), big)
    reserve = float(np.sum(problem.param_bytes[big] + problem.out_bytes[big])) / problem.k
    placed: dict[int, int] = {}
    part = np.zeros(problem.n, dtype=bool)
    part[big] = True
    gathered = np.array([sum(g.tensors[t].nbytes * (1 - 1 / problem.k) for t in set(op.inputs)
                             if t >= 0 and part[g.tensors[t].producer]) for op in g.ops])
    if keep.size:
        sub = rest_problem(problem, keep, reserve, gathered)
        sol = pardnn(sub, opts)
        if sol.placement is None:
            return Solution(name, "unknown", seconds=time.monotonic() - t0,
                            reason=f"PARDNN placed no answer for the {keep.size} operators kept whole: {sol.reason}")
        placed = {int(o): int(d) for o, d in zip(keep.tolist(), np.asarray(sol.placement).tolist())}
    gh = with_placed(g, placed)
    try:
        plan, info = recursive_plan(gh, problem.k, stop=opts.out_of_time)
    except SearchStopped as exc:
        return Solution(name, "unknown", reason=f"time limit or stop request before the plan was complete: {exc}",
                        seconds=time.monotonic() - t0)
    except TableTooLarge as exc:
        return Solution(name, "unknown", reason=f"no partitioned plan: {exc}", seconds=time.monotonic() - t0)
    pe = evaluate_plan(gh, plan, opts.memory_model)
    fits = pe.feasible(problem)
    reason = "" if fits else (f"the hybrid plan needs {float(pe.memory.max()):.6g} bytes on a device, "
                              f"capacity {float(problem.memory.min()):.6g}")
    summary = plan_summary(gh, plan, pe, info)
    summary["kind"] = (f"hybrid plan: {big.size} operators partitioned over all devices, "
                       f"{len(placed)} placed whole (PARDNN)")
    summary["partitioned_operators"] = [str(problem.ids[o]) for o in big.tolist()]
    summary["placed"] = {str(problem.ids[o]): d for o, d in placed.items()}
    return Solution(name, "heuristic" if fits else "unknown", placement=None, objective=pe.makespan if fits else None,
                    reason=reason, seconds=time.monotonic() - t0,
                    info={"plan": plan, "graph": gh, "partition": summary, "plan_evaluation": pe})
