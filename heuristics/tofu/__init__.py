"""Tofu (Wang et al., EuroSys 2019): partition every operator over all K devices instead of placing
whole operators. ``solve --method tofu`` runs :func:`tofu`; docs/partitioning.md explains the model.

The answer is a *partitioned plan*, not a placement: ``Solution.placement`` is None and
``Solution.info["plan"]`` holds the plan, ``info["partition"]`` its summary. Its objective is the
makespan placement.partition.plan.evaluate_plan computes (the one evaluator, run on the plan's
shard graph), which the orchestrator recomputes and compares.
"""
from __future__ import annotations

import time

from placement.partition.graph import build_graph
from placement.partition.plan import evaluate_plan
from placement.problem import Problem, ProblemError
from placement.solution import Solution, SolveOptions

from .hybrid import tofu_hybrid
from .search import SearchStopped, TableTooLarge, recursive_plan
from .summary import plan_summary

# Measured: evaluate_plan takes about 80 us per shard node (n x k) on the project's machine, idle
# (the imported MoE at K = 8: 0.57 s for 7,528 shards); less than doubled for a busy one. The plan is
# evaluated twice, here and by the orchestrator's check (solvers/run.py run_partitioned), so a plan
# is evaluated only with time for both: a run that went past its limit in the second (session 40).
EVAL_SECONDS_PER_SHARD = 1.5e-4

__all__ = ["tofu", "tofu_hybrid", "plan_summary", "recursive_plan", "EVAL_SECONDS_PER_SHARD"]

def tofu(problem: Problem, opts: SolveOptions) -> Solution:
    """Tofu's recursive search over all ``problem.k`` devices, evaluated as a partitioned plan."""
    t0 = time.monotonic()
    if problem.has_allowed:
        return Solution("tofu", "unknown", seconds=time.monotonic() - t0,
                        reason="some nodes may use only some devices; a partitioned plan runs every operator on every device")
    try:
        g = build_graph(problem)
    except ProblemError as exc:
        return Solution("tofu", "unknown", reason=str(exc), seconds=time.monotonic() - t0)
    tie = bool(opts.extra.get("tofu_tie", True))
    try:
        plan, info = recursive_plan(g, problem.k, tie=tie, stop=opts.out_of_time)
    except SearchStopped as exc:
        return Solution("tofu", "unknown", reason=f"time limit or stop request before the plan was complete: {exc}",
                        seconds=time.monotonic() - t0)
    except TableTooLarge as exc:
        return Solution("tofu", "unknown", reason=f"no partitioned plan: {exc}", seconds=time.monotonic() - t0)
    left = opts.remaining()
    if left is not None and left < 2 * EVAL_SECONDS_PER_SHARD * len(g.ops) * problem.k:
        return Solution("tofu", "unknown", seconds=time.monotonic() - t0,
                        reason=f"a plan was found but evaluating its {len(g.ops) * problem.k} shard nodes would outlast the time limit")
    pe = evaluate_plan(g, plan, opts.memory_model)
    summary = plan_summary(g, plan, pe, info)
    if problem.groups:
        summary["note"] = "the graph's colocation groups are not modelled: every operator runs on every device"
    fits = pe.feasible(problem)
    reason = "" if fits else (f"the partitioned plan needs {float(pe.memory.max()):.6g} bytes on a device, "
                              f"capacity {float(problem.memory.min()):.6g}")
    return Solution("tofu", "heuristic" if fits else "unknown", placement=None, objective=pe.makespan if fits else None,
                    reason=reason, seconds=time.monotonic() - t0,
                    info={"plan": plan, "graph": g, "partition": summary, "plan_evaluation": pe})

