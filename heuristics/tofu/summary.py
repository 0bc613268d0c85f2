"""The report's ``partition`` section for a partitioned (or hybrid) plan."""
from __future__ import annotations

from typing import Any

from placement.partition.graph import PGraph
from placement.partition.ops import REPLICA
from placement.partition.plan import Plan, PlanEvaluation

from .search import SearchInfo


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
        "placed_operators": sum(1 for op in g.ops if op.role == "placed"),
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
