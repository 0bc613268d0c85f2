"""Why a schedule's makespan is what it is: per-device load, memory peaks, and the critical path.

The critical path is traced back from the last node to finish: each node's start is explained
either by an input arriving (an edge, with its transfer time when the ends are apart) or by the
device finishing the node before it. Every step of the chain is tight, so the makespan equals the
sum of the compute and transfer times along it, plus any idle gaps (none for the executor's
schedules).
"""
from __future__ import annotations

from typing import Any

import numpy as np

from .evaluator import Evaluation, edge_delay
from .problem import Problem


def critical_path(problem: Problem, ev: Evaluation, tol: float = 1e-9) -> list[dict[str, Any]]:
    """The chain of nodes ending at the last finish, earliest first. Each step says why the node
    started when it did: ``input`` (from the previous node, ``comm`` paid), ``device`` (waited for the
    previous node on its device) or ``start`` (at time 0 or after idle time)."""
    if problem.n == 0:
        return []
    delay = edge_delay(problem, ev.placement)
    ptr, nbr, eid = problem.pred_ptr
    # The node before v on its device: the positive-time node finishing last at or before S_v.
    device_prev = np.full(problem.n, -1, dtype=np.int64)
    for d in range(problem.k):
        members = np.flatnonzero(ev.placement == d)
        order = members[np.lexsort((problem.topo_rank[members], ev.finish[members], ev.start[members]))]
        device_prev[order[1:]] = order[:-1]
    v = int(np.argmax(ev.finish))
    chain: list[dict[str, Any]] = []
    scale = max(1.0, ev.makespan)
    while True:
        step: dict[str, Any] = {"node": str(problem.ids[v]), "device": int(ev.placement[v]),
                                "start": float(ev.start[v]), "finish": float(ev.finish[v])}
        why = None
        for j in range(ptr[v], ptr[v + 1]):
            u, e = int(nbr[j]), int(eid[j])
            if abs(ev.finish[u] + delay[e] - ev.start[v]) <= tol * scale:
                if why is None or delay[e] > 0:
                    why = ("input", u, float(delay[e]))
        p = int(device_prev[v])
        if why is None and p >= 0 and abs(ev.finish[p] - ev.start[v]) <= tol * scale:
            why = ("device", p, 0.0)
        if why is None:
            step["because"] = "start"
            chain.append(step)
            break
        step["because"], u, step["comm"] = why
        chain.append(step)
        v = u
    chain.reverse()
    return chain


def memory_peaks(problem: Problem, ev: Evaluation) -> list[dict[str, float]]:
    """Per device: static memory, peak memory, and the share of the peak that is parameters."""
    params = np.bincount(ev.placement, weights=problem.param_bytes, minlength=problem.k)
    return [{"device": d, "static": float(ev.static_memory[d]), "peak": float(ev.peak_memory[d]),
             "params": float(params[d]), "capacity": float(problem.memory[d])} for d in range(problem.k)]


def device_loads(problem: Problem, ev: Evaluation) -> list[dict[str, float]]:
    """Per device: nodes, busy time, idle time within the makespan, and utilisation."""
    busy = np.bincount(ev.placement, weights=problem.time, minlength=problem.k)
    count = np.bincount(ev.placement, minlength=problem.k)
    span = ev.makespan if ev.makespan > 0 else 1.0
    return [{"device": d, "nodes": int(count[d]), "busy": float(busy[d]), "idle": float(ev.makespan - busy[d]),
             "utilisation": float(busy[d] / span)} for d in range(problem.k)]


def explain(problem: Problem, ev: Evaluation) -> dict[str, Any]:
    """Everything a user needs to see why the makespan is what it is (goes into the report)."""
    chain = critical_path(problem, ev)
    return {
        "devices": device_loads(problem, ev),
        "memory": memory_peaks(problem, ev),
        "critical_path": chain,
        "critical_path_compute": float(sum(s["finish"] - s["start"] for s in chain)),
        "critical_path_comm": float(sum(s.get("comm", 0.0) for s in chain)),
    }


def explain_text(problem: Problem, ev: Evaluation, limit: int = 12) -> str:
    info = explain(problem, ev)
    lines = ["device  nodes       busy       idle  util"]
    for row in info["devices"]:
        lines.append(f"{problem.device_names[row['device']]:7} {row['nodes']:6d} {row['busy']:10.4g} {row['idle']:10.4g} {100 * row['utilisation']:4.0f}%")
    chain = info["critical_path"]
    lines.append(f"critical path: {len(chain)} nodes, compute {info['critical_path_compute']:.6g}, "
                 f"transfers {info['critical_path_comm']:.6g}, makespan {ev.makespan:.6g}")
    shown = chain if len(chain) <= limit else chain[: limit // 2] + [None] + chain[-limit // 2:]
    for step in shown:
        if step is None:
            lines.append("   ...")
            continue
        via = {"start": "starts the chain", "device": "waits for its device",
               "input": f"waits for its input (+{step.get('comm', 0):.4g} transfer)" if step.get("comm") else "waits for its input"}[step["because"]]
        lines.append(f"   {step['node']} on dev{step['device']} [{step['start']:.6g}, {step['finish']:.6g}) {via}")
    return "\n".join(lines)
