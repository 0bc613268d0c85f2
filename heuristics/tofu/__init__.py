"""Tofu (Wang et al., EuroSys 2019): partition every operator over all K devices instead of placing
whole operators. ``solve --method tofu`` runs :func:`tofu`; docs/partitioning.md explains the model.

The answer is a *partitioned plan*, not a placement: ``Solution.placement`` is None and
``Solution.info["plan"]`` holds the plan, ``info["partition"]`` its summary. Its objective is the
makespan placement.partition.plan.evaluate_plan computes (the one evaluator, run on the plan's
shard graph), which the orchestrator recomputes and compares.
"""
from __future__ import annotations

import time
from typing import Any

from placement.partition.graph import PGraph, build_graph
from placement.partition.ops import REPLICA
from placement.partition.plan import Plan, PlanEvaluation, evaluate_plan
from placement.problem import Problem, ProblemError
from placement.solution import Solution, SolveOptions

from .search import SearchInfo, SearchStopped, recursive_plan

# Measured: evaluate_plan takes about 80 us per shard node (n x k) on the project's machine.
EVAL_SECONDS_PER_SHARD = 1e-4

__all__ = ["tofu", "plan_summary", "recursive_plan"]

def _layout_text(lay: Any) -> str:
    return "replica" if lay == REPLICA else f"dim{lay[1]}"

def plan_summary(g: PGraph, plan: Plan, pe: PlanEvaluation, info: SearchInfo | None = None) -> dict[str, Any]:
    """The report's ``partition`` section: what was split how, and what it costs."""
    p = g.problem
    per_dev = pe.memory
    out: dict[str, Any] = {
        "kind": "partitioned plan (Tofu): every operator split over all devices, not a placement",
        "factors": plan.factors,
        "communication_bytes": pe.comm_bytes,
        "single_device_memory": pe.single_memory,
        "max_device_memory": float(per_dev.max()) if per_dev.size else 0.0,
        "memory_vs_single_over_k": float(per_dev.max() * plan.k / pe.single_memory) if pe.single_memory > 0 else None,
        "static_memory": pe.evaluation.static_memory.tolist(),
        "peak_memory": pe.evaluation.peak_memory.tolist(),
        "replicated_operators": pe.replicated_ops,
        "undescribed_operators": sorted({str((p.node_meta[o] or {}).get("op")) for o, op in enumerate(g.ops)
                                         if op.role == "op" and op.desc is None}),
        "shard_graph": {"nodes": pe.expanded.n, "edges": pe.expanded.m},
        "strategy": {str(p.ids[o]): [s for s in (plan.strategies[i][o] for i in range(len(plan.factors)))]
                     for o, op in enumerate(g.ops) if op.role == "op"},
        "layout": {f"{p.ids[t.producer]}:{t.slot}": [_layout_text(plan.layouts[i][ti]) for i in range(len(plan.factors))]
                   for ti, t in enumerate(g.tensors)},
    }
    if info is not None:
        out["search"] = {"step_costs": info.step_costs, "exact_steps": info.exact_steps,
                         "largest_dp_table": info.largest_table, "variables": info.variables, "seconds": info.seconds}
    return out

def tofu(problem: Problem, opts: SolveOptions) -> Solution:
    """Tofu's recursive search over all ``problem.k`` devices, evaluated as a partitioned plan."""
    t0 = time.monotonic()
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
    left = opts.remaining()
    if left is not None and left < EVAL_SECONDS_PER_SHARD * len(g.ops) * problem.k:
        return Solution("tofu", "unknown", seconds=time.monotonic() - t0,
                        reason=f"a plan was found but evaluating its {len(g.ops) * problem.k} shard nodes would outlast the time limit")
    pe = evaluate_plan(g, plan, opts.memory_model)
    summary = plan_summary(g, plan, pe, info)
    fits = pe.feasible(problem)
    reason = "" if fits else (f"the partitioned plan needs {float(pe.memory.max()):.6g} bytes on a device, "
                              f"capacity {float(problem.memory.min()):.6g}")
    return Solution("tofu", "heuristic" if fits else "unknown", placement=None, objective=pe.makespan if fits else None,
                    reason=reason, seconds=time.monotonic() - t0,
                    info={"plan": plan, "graph": g, "partition": summary, "plan_evaluation": pe})

