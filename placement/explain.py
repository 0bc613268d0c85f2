"""Why a schedule's makespan is what it is: per-device load, memory peaks, and the critical path.

The critical path is traced back from the last node to finish: each node's start is explained
either by an input arriving (an edge, with its transfer time when the ends are apart) or by the
device finishing the node before it. Every step of the chain is tight, so the makespan equals the
sum of the compute and transfer times along it, plus any idle gaps (none for the executor's
schedules).

A chain of more than PATH_STEPS_LISTED steps (graphs of 100K+ nodes: a 200K-node transformer
placed by topological fill has a 198K-step chain, 30 MB of the report, 1.5 s to build and write) is
summarised instead of listed: its first and last PATH_ENDS steps, and per device its steps, compute
and transfers (:func:`explain`, ``critical_path_summary``).
"""
from __future__ import annotations

from typing import Any

import numpy as np

from .evaluator import Evaluation, edge_delay
from .problem import Problem


# Longer critical paths are summarised in explain() rather than listed step by step.
PATH_STEPS_LISTED = 10_000
PATH_ENDS = 100  # steps kept at each end of a summarised path
_BECAUSE = ("start", "input", "device")


def _chain(problem: Problem, ev: Evaluation, tol: float = 1e-9) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The critical path as arrays, earliest first: its nodes, why each started (an index into
    _BECAUSE) and the transfer time paid into it. Each node's tight predecessor is found for all
    nodes at once; only the walk back along those pointers is a Python loop."""
    n = problem.n
    delay = edge_delay(problem, ev.placement)
    ptr, nbr, eid = problem.pred_ptr
    scale = max(1.0, ev.makespan)
    # The node before v on its device: the positive-time node finishing last at or before S_v.
    device_prev = np.full(n, -1, dtype=np.int64)
    for d in range(problem.k):
        members = np.flatnonzero(ev.placement == d)
        order = members[np.lexsort((problem.topo_rank[members], ev.finish[members], ev.start[members]))]
        device_prev[order[1:]] = order[:-1]
    consumer = np.repeat(np.arange(n), np.diff(ptr))  # the node each predecessor entry belongs to
    edge_delays = delay[eid]
    tight = np.abs(ev.finish[nbr] + edge_delays - ev.start[consumer]) <= tol * scale
    # Among a node's tight inputs: the last one that pays a transfer, else the first one.
    prev = np.full(n, -1, dtype=np.int64)
    via = np.zeros(n)
    because = np.zeros(n, dtype=np.int8)
    for picks, last in ((np.flatnonzero(tight), False), (np.flatnonzero(tight & (edge_delays > 0)), True)):
        if picks.size == 0:
            continue
        owner = consumer[picks]
        edge = np.r_[owner[1:] != owner[:-1], True] if last else np.r_[True, owner[1:] != owner[:-1]]
        chosen, v = picks[edge], owner[edge]
        prev[v], via[v], because[v] = nbr[chosen], edge_delays[chosen], 1
    by_device = (because == 0) & (device_prev >= 0)
    by_device &= np.abs(ev.finish[np.maximum(device_prev, 0)] - ev.start) <= tol * scale
    prev[by_device], because[by_device] = device_prev[by_device], 2
    walk, prev_l = [int(np.argmax(ev.finish))], prev.tolist()
    while prev_l[walk[-1]] >= 0:
        walk.append(prev_l[walk[-1]])
    nodes = np.asarray(walk[::-1], dtype=np.int64)
    return nodes, because[nodes], via[nodes]


def _steps(problem: Problem, ev: Evaluation, nodes: np.ndarray, because: np.ndarray, via: np.ndarray) -> list[dict[str, Any]]:
    steps: list[dict[str, Any]] = []
    for v, why, comm in zip(nodes.tolist(), because.tolist(), via.tolist()):
        step: dict[str, Any] = {"node": str(problem.ids[v]), "device": int(ev.placement[v]),
                                "start": float(ev.start[v]), "finish": float(ev.finish[v]), "because": _BECAUSE[why]}
        if why != 0:
            step["comm"] = comm
        steps.append(step)
    return steps


def critical_path(problem: Problem, ev: Evaluation, tol: float = 1e-9) -> list[dict[str, Any]]:
    """The chain of nodes ending at the last finish, earliest first. Each step says why the node
    started when it did: ``input`` (from the previous node, ``comm`` paid), ``device`` (waited for the
    previous node on its device) or ``start`` (at time 0 or after idle time)."""
    if problem.n == 0:
        return []
    return _steps(problem, ev, *_chain(problem, ev, tol))


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


def explain(problem: Problem, ev: Evaluation, steps_listed: int = PATH_STEPS_LISTED) -> dict[str, Any]:
    """Everything a user needs to see why the makespan is what it is (goes into the report). A
    critical path of more than ``steps_listed`` steps is summarised (``critical_path`` is then
    None and ``critical_path_summary`` holds its ends and per-device totals)."""
    info: dict[str, Any] = {"devices": device_loads(problem, ev), "memory": memory_peaks(problem, ev)}
    if problem.n == 0:
        return {**info, "critical_path": [], "critical_path_steps": 0, "critical_path_compute": 0.0, "critical_path_comm": 0.0}
    nodes, because, via = _chain(problem, ev)
    compute = ev.finish[nodes] - ev.start[nodes]
    info.update(critical_path_steps=int(nodes.size), critical_path_compute=float(compute.sum()),
                critical_path_comm=float(via.sum()))
    if nodes.size <= steps_listed:
        info["critical_path"] = _steps(problem, ev, nodes, because, via)
        return info
    ends = min(PATH_ENDS, steps_listed // 2)
    dev = ev.placement[nodes]
    info["critical_path"] = None
    info["critical_path_summary"] = {
        "note": f"{nodes.size} steps: the first and last {ends} are listed",
        "first": _steps(problem, ev, nodes[:ends], because[:ends], via[:ends]),
        "last": _steps(problem, ev, nodes[-ends:], because[-ends:], via[-ends:]),
        "devices": [{"device": d, "steps": int((dev == d).sum()), "compute": float(compute[dev == d].sum()),
                     "comm": float(via[dev == d].sum())} for d in range(problem.k)],
        "because": {name: int((because == i).sum()) for i, name in enumerate(_BECAUSE)},
    }
    return info


def explain_text(problem: Problem, ev: Evaluation, limit: int = 12) -> str:
    info = explain(problem, ev)
    lines = ["device  nodes       busy       idle  util"]
    for row in info["devices"]:
        lines.append(f"{problem.device_names[row['device']]:7} {row['nodes']:6d} {row['busy']:10.4g} {row['idle']:10.4g} {100 * row['utilisation']:4.0f}%")
    chain = info["critical_path"]
    lines.append(f"critical path: {info['critical_path_steps']} nodes, compute {info['critical_path_compute']:.6g}, "
                 f"transfers {info['critical_path_comm']:.6g}, makespan {ev.makespan:.6g}")
    if chain is None:  # summarised: its listed ends
        chain = info["critical_path_summary"]["first"] + [None] + info["critical_path_summary"]["last"]
    shown = chain if len(chain) <= limit else chain[: limit // 2] + [None] + chain[-limit // 2:]
    for step in shown:
        if step is None:
            lines.append("   ...")
            continue
        via = {"start": "starts the chain", "device": "waits for its device",
               "input": f"waits for its input (+{step.get('comm', 0):.4g} transfer)" if step.get("comm") else "waits for its input"}[step["because"]]
        lines.append(f"   {step['node']} on dev{step['device']} [{step['start']:.6g}, {step['finish']:.6g}) {via}")
    return "\n".join(lines)
