"""The latency baselines of Tarnawski et al. (Section 7), and the wrapper every latency method uses.

- ``greedy``: colocation classes and the strongly connected components they create contracted, a
  topological order fixed, each accelerator in turn filled with as many units as fit, the rest on
  the CPU. Ignores times and costs.
- :func:`latency_solution`: a latency split turned into a Solution whose value is the one
  placement.objectives computes.
"""
from __future__ import annotations

import time

import numpy as np

from formulations.maxload.dp import accelerator_placement
from formulations.maxload.preprocess import build_units
from placement.objectives import evaluate_latency, node_bytes, supported
from placement.problem import Problem
from placement.report import within_optimal_gap
from placement.solution import Solution, SolveOptions


# ----------------------------------------------------------------------------------------------
# greedy (latency baseline)
# ----------------------------------------------------------------------------------------------
def greedy_split(problem: Problem) -> np.ndarray:
    """Fill accelerators in topological order of the contracted units; leftovers on the CPU."""
    units = build_units(problem)  # inference graphs: units = colocation classes + SCCs
    need = node_bytes(problem)
    sup = supported(problem)
    split = np.full(problem.n, -1, dtype=np.int64)
    dev, used = 0, 0.0
    for mem in units.members:
        size = float(need[mem].sum())
        if not sup[mem].all():
            continue
        while dev < problem.k and used + size > problem.memory[dev] * (1 + 1e-12):
            dev, used = dev + 1, 0.0
        if dev >= problem.k:
            continue
        split[mem] = dev
        used += size
    return split


def latency_solution(problem: Problem, name: str, split: np.ndarray, slot: np.ndarray | None, status: str,
                     t0: float, info: dict, lower_bound: float | None = None, claimed: float | None = None) -> Solution:
    """Wrap a latency split, its value computed by placement.objectives (raise if it is infeasible
    or differs from a claimed value)."""
    ev = evaluate_latency(problem, split, slot)
    if ev.violations:
        raise AssertionError(f"{name} returned an infeasible latency split: {ev.violations}")
    if claimed is not None and abs(claimed - ev.value) > 1e-6 * max(1.0, ev.value):
        raise AssertionError(f"{name}: claimed latency {claimed} but the evaluator computes {ev.value}")
    info = dict(info)
    info.update({"split": split, "slot": slot, "cpu_nodes": np.flatnonzero(split < 0).tolist(),
                 "breakdown": ev.breakdown(problem), "objective_kind": "latency"})
    if status == "optimal" and not within_optimal_gap(ev.value, lower_bound, "latency"):
        raise AssertionError(f"{name} claims an optimal latency {ev.value} with the proved bound {lower_bound}")
    return Solution(name, status, placement=accelerator_placement(problem, split), objective=ev.value,
                    lower_bound=lower_bound, seconds=time.monotonic() - t0, info=info)


def greedy(problem: Problem, opts: SolveOptions) -> Solution:
    t0 = time.monotonic()
    return latency_solution(problem, "greedy", greedy_split(problem), None, "heuristic", t0, {})
