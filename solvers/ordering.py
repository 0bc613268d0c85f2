"""Memory-aware ordering wired into the solve: a placement that overflows under the peak model in
the order a method gave (or FIFO) is re-ordered by heuristics.memory_order before it is rejected,
and the report says which per-device order the answer assumes and whether FIFO would fit too.
"""
from __future__ import annotations

from typing import Any, Callable

import numpy as np

from heuristics.memory_order import lower_peak_order
from placement.evaluator import Evaluation, edge_delay, evaluate, wait_delay
from placement.problem import Problem
from placement.solution import Solution


def fit_by_order(problem: Problem, placement: np.ndarray, sol: Solution, memory_model: str,
                 stop: Callable[[], bool] | None = None) -> tuple[Solution, Evaluation] | None:
    """Under the peak model, ``placement`` re-ordered to fit memory, as a heuristic answer of
    ``sol``'s method carrying the order (None when no order tried fits, or in the static model,
    where the order does not change memory). The rules left unfinished when ``stop()`` turns true
    are not tried (at 200K nodes each is tens of seconds of Python)."""
    if memory_model != "peak" or placement is None:
        return None
    got = lower_peak_order(problem, np.asarray(placement, dtype=np.int64), stop=stop)
    if not got.evaluation.feasible(problem):
        return None
    info = {k: v for k, v in sol.info.items() if k not in ("placement", "overflow")}
    info.update(memory_order=got.rule, fifo_fits=got.fifo_fits)
    new = Solution(sol.method, "heuristic", placement=got.evaluation.placement, order=got.order,
                   objective=got.evaluation.makespan, seconds=sol.seconds, info=info)
    return new, got.evaluation


def overflowing_placement(sol: Solution) -> np.ndarray | None:
    """The placement a method found but rejected for memory (info["placement"]), if any."""
    pl = sol.info.get("placement") if sol.info else None
    return None if pl is None else np.asarray(pl, dtype=np.int64)


def device_orders(problem: Problem, ev: Evaluation) -> list[list[int]]:
    """Per device, its nodes in the order the schedule runs them (start, then finish, then
    topological rank): the order a user enforces with control dependencies."""
    pl = ev.placement
    idx = np.lexsort((problem.topo_rank, ev.finish, ev.start, pl))
    bounds = np.searchsorted(pl[idx], np.arange(problem.k + 1))
    return [idx[bounds[d]:bounds[d + 1]].tolist() for d in range(problem.k)]


def reproducing_waits(problem: Problem, ev: Evaluation, order: list[list[int]] | None = None) -> list[tuple[int, int]]:
    """Waits (u, v) that, with the schedule's device order, give back the schedule ``ev`` where it
    idles on purpose: for each node that starts later than its inputs and its device allow, a wait
    on the node finishing last by its start (plus the wait's latency across devices,
    placement.evaluator.wait_delay).

    Every edge of graph + order + these waits is met by ``ev``'s times and goes forward in (start,
    finish, topological rank), so they never close a cycle, and the schedule they give starts no
    node later than ``ev``. It is ``ev`` itself when each deliberate idle ends when some node
    finishes (+ latency), as in any schedule made by an order and waits; otherwise (CP-SAT's
    integer times) nodes may start earlier, and the memory must be measured again."""
    pl, st, fin = ev.placement, ev.start, ev.finish
    order = device_orders(problem, ev) if order is None else order
    scale = max(1.0, float(fin.max()) if problem.n else 1.0)
    eps = 1e-9 * scale
    ready = np.zeros(problem.n)
    np.maximum.at(ready, problem.dst, fin[problem.src] + edge_delay(problem, pl))
    for seq in order:
        if len(seq) > 1:
            a, c = np.asarray(seq[:-1]), np.asarray(seq[1:])
            ready[c] = np.maximum(ready[c], fin[a])
    idle = np.flatnonzero(st > ready + eps)
    if not idle.size:
        return []
    lat = wait_delay(problem)
    rank = problem.topo_rank
    runs = [np.asarray(seq, dtype=np.int64) for seq in order]  # each device's nodes, finishing in this order
    ends = [fin[r] for r in runs]
    waits: list[tuple[int, int]] = []
    for v in idle.tolist():
        # on every other device, the last node u with F_u + latency <= S_v and (S, F, rank) before v's;
        # of those the one finishing last (on v's own device the previous node is in ``ready`` already)
        key_v = (st[v], fin[v], rank[v])
        best = -1
        for d, run in enumerate(runs):
            if d == pl[v] or not run.size:
                continue
            j = int(np.searchsorted(ends[d], st[v] - lat + eps, side="right")) - 1
            while j >= 0 and (st[run[j]], fin[run[j]], rank[run[j]]) >= key_v:
                j -= 1
            if j >= 0 and (best < 0 or fin[run[j]] > fin[best]):
                best = int(run[j])
        if best >= 0:
            waits.append((best, v))
    return waits


def order_report(problem: Problem, ev: Evaluation, memory_model: str) -> dict[str, Any]:
    """Report fields under the peak model: ``device_order`` (device name -> node ids in the order
    the answer assumes); ``order_fits`` (does that order alone fit, each node started as soon as its
    inputs and its device allow?), with its peak per device; when it does not, the
    ``control_dependencies`` (pairs of node ids [u, v]: v does not start before u finishes) that with
    the order give back the answer's schedule (:func:`reproducing_waits`), and
    ``control_dependencies_fit`` (checked here by the evaluator, with the makespan they give; when
    False, ``control_dependencies_note`` says so plainly); and
    ``fits_fifo`` (does the placement also fit when the runtime runs it in FIFO order?), with FIFO's
    peak per device."""
    if memory_model != "peak":
        return {}
    fifo = evaluate(problem, ev.placement, memory_model="peak")
    orders = device_orders(problem, ev)
    alone = evaluate(problem, ev.placement, order=orders, memory_model="peak")
    rep: dict[str, Any] = {
        "device_order": {problem.device_names[d]: [problem.ids[v] for v in seq] for d, seq in enumerate(orders)},
        "order_fits": bool(alone.feasible(problem)),
        "order_peak_memory": alone.peak_memory.tolist(),
    }
    if not rep["order_fits"]:
        waits = reproducing_waits(problem, ev, orders)
        got = evaluate(problem, ev.placement, order=orders, memory_model="peak", waits=waits)
        rep["control_dependencies"] = [[problem.ids[u], problem.ids[v]] for u, v in waits]
        rep["control_dependencies_fit"] = bool(got.feasible(problem))
        rep["control_dependencies_makespan"] = got.makespan
        rep["control_dependencies_peak_memory"] = got.peak_memory.tolist()
        if not rep["control_dependencies_fit"]:
            rep["control_dependencies_note"] = (
                "the device order with these waits starts some nodes earlier than the answer's start times and does "
                "not fit: only the start times (\"start\") fit; a runtime must hold each node until its start time")
    rep["fits_fifo"] = bool(fifo.feasible(problem))
    rep["fifo_peak_memory"] = fifo.peak_memory.tolist()
    return rep
