"""Memory-aware ordering wired into the solve: a placement that overflows under the peak model in
the order a method gave (or FIFO) is re-ordered by heuristics.memory_order before it is rejected,
and the report says which per-device order the answer assumes and whether FIFO would fit too.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from heuristics.memory_order import lower_peak_order
from placement.evaluator import Evaluation, evaluate
from placement.problem import Problem
from placement.solution import Solution


def fit_by_order(problem: Problem, placement: np.ndarray, sol: Solution, memory_model: str) -> tuple[Solution, Evaluation] | None:
    """Under the peak model, ``placement`` re-ordered to fit memory, as a heuristic answer of
    ``sol``'s method carrying the order (None when no order tried fits, or in the static model,
    where the order does not change memory)."""
    if memory_model != "peak" or placement is None:
        return None
    got = lower_peak_order(problem, np.asarray(placement, dtype=np.int64))
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


def order_report(problem: Problem, ev: Evaluation, memory_model: str) -> dict[str, Any]:
    """Report fields under the peak model: ``device_order`` (device name -> node ids in the order
    the answer assumes) and ``fits_fifo`` (does the placement also fit when the runtime runs it in
    FIFO order?), with FIFO's peak per device."""
    if memory_model != "peak":
        return {}
    fifo = evaluate(problem, ev.placement, memory_model="peak")
    return {
        "device_order": {problem.device_names[d]: [problem.ids[v] for v in seq] for d, seq in enumerate(device_orders(problem, ev))},
        "fits_fifo": bool(fifo.feasible(problem)),
        "fifo_peak_memory": fifo.peak_memory.tolist(),
    }
