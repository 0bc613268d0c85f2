"""A warm start for training graphs under the peak memory model: place, then order.

Decomposition: a small CP-SAT model chooses only the placement (a device per colocation unit):
each device's params and, for the nodes x holding the most bytes, every tensor its units force
onto it while x runs (formulations/saved_bytes.py: necessary conditions of a peak-feasible
placement, each a knapsack per device) within its capacity, minimising the comm of the edges
between units on different devices (the delay a split adds). The evaluator then schedules the
placement in FIFO order, or in the memory-aware order (heuristics/memory_order.py) when FIFO
overflows; the answer is whatever the evaluator accepts. On layer graphs where every list
scheduler and contiguous split overflows (ResNet-18 at 0.4 x its one-device peak), this finds a
placement that fits.
"""
from __future__ import annotations

import time
from dataclasses import replace

import numpy as np
from ortools.sat.python import cp_model

from heuristics.memory_order import lower_peak_order
from placement.evaluator import evaluate
from placement.problem import Problem
from placement.solution import Solution, SolveOptions

from .common import device_classes
from .cpsolver import cp_solver
from .cpsolver import solve as run_cp
from .saved_bytes import MAX_NODES, held_tensors
from .units import units

HELD_NODES = 48  # nodes x whose held tensors constrain the placement (above HELD_ALL_NODES nodes)
HELD_ALL_NODES = 400  # up to this many nodes, every x
BYTE_UNITS = 1e6  # knapsack integers: demands rounded up, capacities down (a restriction)
COMM_UNITS = 1e6  # objective integers per time unit


MAX_PLACEMENTS = 12  # the last placements CP-SAT reports per margin, judged by the evaluator cheapest first
FIRST_SHARE = 0.6  # of the time, for the full capacities (finding any placement can take most of it)
MARGINS = (1.0, 0.95, 0.9, 0.85, 0.8, 0.7)  # share of each capacity the knapsacks may fill, tried in turn


def held_split(problem: Problem, opts: SolveOptions) -> Solution:
    """The best placement (by the evaluator) of the knapsack model at capacity margins 1.0, 0.95,
    ...: the held-tensor knapsacks are necessary, not sufficient, so the cheapest placement often
    sits just over a device's peak, and a margin leaves room for what they do not count."""
    t0 = time.monotonic()
    if opts.memory_model != "peak" or problem.n > MAX_NODES or not np.all(np.isfinite(problem.memory)):
        return Solution("held-split", "unknown", reason="held-split: only for the peak model with finite capacities, "
                        f"up to {MAX_NODES} nodes", seconds=time.monotonic() - t0)
    helds = held_tensors(problem, problem.n if problem.n <= HELD_ALL_NODES else HELD_NODES)
    best: tuple[float, np.ndarray, list[list[int]] | None, float] | None = None
    why = "no placement found in time"
    for i, margin in enumerate(MARGINS):
        rem = opts.remaining()
        if opts.stop.is_set() or (rem is not None and rem <= 0.05):
            break
        share = None if rem is None else rem * (FIRST_SHARE if i == 0 else 1.0 / (len(MARGINS) - i))
        found, why = _place(problem, helds, margin, replace(opts, time_limit=share, started=time.monotonic()))
        for pl in reversed(found):  # cheapest first; the first that fits is kept
            if best is not None and (opts.out_of_time() or opts.stop.is_set()):
                break
            ev, order = evaluate(problem, pl, memory_model="peak"), None
            if not ev.feasible(problem):
                if opts.out_of_time() or opts.stop.is_set():
                    break  # the memory-aware orders take a while on hundreds of nodes
                o = lower_peak_order(problem, pl, ev)
                ev, order = o.evaluation, o.order
            if ev.feasible(problem):
                best = (ev.makespan, pl, order, margin)
                break
        if best is None:
            why = why or "the placements overflow in FIFO and memory-aware orders"
            continue
        break  # a larger margin only costs more comm
    if best is None:
        return Solution("held-split", "unknown", reason=f"held-split: {why}", seconds=time.monotonic() - t0)
    return Solution("held-split", "heuristic", placement=best[1], order=best[2], objective=best[0],
                    seconds=time.monotonic() - t0, info={"margin": best[3]})


def _place(problem: Problem, helds: list, margin: float, opts: SolveOptions) -> tuple[list[np.ndarray], str]:
    """The placements CP-SAT finds (each cheaper than the last) meeting the knapsacks at
    ``margin`` x capacity, and why there are none."""
    un = units(problem)
    k = problem.k
    mask = problem.allowed_mask()
    m = cp_model.CpModel()
    x: dict[tuple[int, int], cp_model.IntVar] = {}
    for g, mem in enumerate(un.members):
        devs = np.flatnonzero(np.logical_and.reduce(mask[mem], axis=0)).tolist()
        if not devs:
            return [], f"unit of node {problem.ids[mem[0]]} has no common device"
        for d in devs:
            x[g, d] = m.new_bool_var(f"x{g}_{d}")
        m.add_exactly_one([x[g, d] for d in devs])
    for cls in device_classes(problem):  # identical devices: the first unit goes to the first of them
        if len(cls) > 1 and (0, cls[0]) in x:
            for d in cls[1:]:
                if (0, d) in x:
                    m.add(x[0, d] == 0)
    cap = np.floor(margin * problem.memory / BYTE_UNITS).astype(np.int64)
    par = np.ceil(np.bincount(un.of, weights=problem.param_bytes, minlength=un.count) / BYTE_UNITS).astype(np.int64)
    size = np.ceil(problem.out_bytes / BYTE_UNITS).astype(np.int64)
    for d in range(k):
        m.add(sum(int(par[g]) * x[g, d] for g in range(un.count) if (g, d) in x and par[g] > 0) <= int(cap[d]))
    for h in helds:
        for d in range(k):
            terms = [(int(par[g]), x[g, d]) for g in range(un.count) if (g, d) in x and par[g] > 0]
            for u, hs in zip(h.tensors, h.holders):
                lits = [x[g, d] for g in hs if (g, d) in x]
                if not lits or size[u] <= 0:
                    continue
                lit = lits[0]
                if len(lits) > 1:
                    lit = m.new_bool_var("")
                    for a in lits:
                        m.add_implication(a, lit)
                terms.append((int(size[u]), lit))
            if terms and sum(c for c, _ in terms) > cap[d]:
                m.add(sum(c * lit for c, lit in terms) <= int(cap[d]))
    apart: dict[tuple[int, int], cp_model.IntVar] = {}
    cost: dict[tuple[int, int], int] = {}
    for e in range(problem.m):
        a, b = int(un.of[problem.src[e]]), int(un.of[problem.dst[e]])
        c = int(round(float(problem.comm[e]) * COMM_UNITS))
        if a == b or c <= 0:
            continue
        key = (min(a, b), max(a, b))
        if key not in apart:
            z = m.new_bool_var("")
            for d in range(k):
                if (a, d) in x:
                    m.add_bool_or([x[a, d].Not(), z] + ([x[b, d]] if (b, d) in x else []))
            apart[key] = z
        cost[key] = cost.get(key, 0) + c
    m.minimize(sum(cost[key] * z for key, z in apart.items()))
    found: list[np.ndarray] = []

    class _Collect(cp_model.CpSolverSolutionCallback):
        def on_solution_callback(self) -> None:
            if len(found) >= MAX_PLACEMENTS:
                found.pop(0)
            pl = np.empty(problem.n, dtype=np.int64)
            for (g, d), lit in x.items():
                if self.boolean_value(lit):
                    pl[un.members[g]] = d
            found.append(pl)

    solver = cp_solver(opts)
    status = run_cp(solver, m, opts, _Collect())
    if not found:
        return [], ("no placement meets the held-tensor knapsacks" if status == cp_model.INFEASIBLE else "no placement found in time")
    return found, ""
