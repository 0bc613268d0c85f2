"""A lower bound under the peak model that sees the K devices' memory jointly: the held-tensor
relaxation, solved exactly by CP-SAT over placements only.

For any feasible placement and schedule of the real problem:

1. every path pays its nodes' times plus the comm of each of its edges whose ends are apart, so
   with start times S the precedences ``S_v >= S_u + t_u + c_uv [apart]`` hold and the makespan is
   at least every ``S_v + t_v``;
2. every device runs its own nodes one at a time: makespan >= the time placed on it;
3. while any node x of positive time runs, every device d holds its params plus every tensor one
   of its units forces onto it at x (formulations/saved_bytes.py), all within M_d.

Dropping everything else (one-at-a-time order, lifetimes other than the forced ones) leaves a
problem over the placement and start times whose optimum is at most the real one. Unlike the
path bound (formulations/pathbound.py), which lets every run of a path fill a device of its own
and looks at one x at a time, here the K devices are shared by all units and every x's knapsacks
hold at once: on a chain-like training graph a device that takes two layers far apart pays for
both layers' activations at the loss.

Times and comms are floored to integers (``cpsat.choose_scale``): a real schedule maps to a floored
one with a makespan no larger (sums of floors are at most the floor of the sum), so CP-SAT's
proved bound over the scale is a valid bound. Byte counts are whole numbers scaled exactly
(``integer_bytes.memory_ints``, as in the full model); when they are not, no bound is claimed. Identical devices are labelled
canonically (the optimum is unchanged by a relabelling).
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Any

import numpy as np
from ortools.sat.python import cp_model

from placement.problem import Problem
from placement.solution import SolveOptions

from .common import device_classes
from .cpsolver import break_device_symmetry, cp_solver, set_params, unit_placement_literals
from .cpsolver import solve as run_cp
from .integer_bytes import memory_ints
from .saved_bytes import MAX_NODES, held_tensors
from .units import units


@dataclass
class HeldBound:
    """The relaxation's proved bound (real time units) and how it was reached."""

    bound: float  # valid lower bound on the real makespan (0.0 when nothing was proved)
    proved: bool  # CP-SAT proved the relaxation's optimum (bound is that optimum, floored)
    relaxed_value: float | None  # the relaxation's best placement value (not a bound), or None
    seconds: float
    knapsacks: int  # (x, device) knapsacks in the model
    placement: np.ndarray | None = None  # the relaxation's best placement (may not fit: a candidate only)
    start: np.ndarray | None = None  # its start times in real units (floored data: an order, not a schedule)


def _scaled(problem: Problem) -> tuple[float, np.ndarray, np.ndarray]:
    """Floored integer times and comms with a factor mapping the total work to ~1e9 units."""
    ref = max(float(problem.time.sum()) + float(problem.comm.sum()), 1e-12)
    factor = 1e9 / ref
    return factor, np.floor(problem.time * factor).astype(np.int64), np.floor(problem.comm * factor).astype(np.int64)


def held_relaxation_bound(problem: Problem, opts: SolveOptions, seconds: float,
                          hint_placement: np.ndarray | None = None, no_overlap: bool = True,
                          floor: float = 0.0, target: float | None = None) -> HeldBound:
    """Solve the held-tensor relaxation (module docstring) for at most ``seconds``; its proved
    bound is a valid lower bound on the real makespan under the peak model. ``no_overlap`` adds
    one NoOverlap per device over the nodes' run intervals (still a relaxation: item 2 made exact).
    ``hint_placement``: a placement to start from (relabelled canonically by the caller or not:
    only a hint)."""
    t0 = time.monotonic()
    n, k = problem.n, problem.k
    base = _placement_model(problem)
    if base is None:
        return HeldBound(0.0, False, None, time.monotonic() - t0, 0)
    m, x, un, mask, (param, out, cap) = base
    factor, dur, comm = _scaled(problem)
    horizon = int(dur.sum() + comm.sum()) + 1
    ug = un.of
    start = [m.new_int_var(0, horizon, f"s{i}") for i in range(n)]
    mk = m.new_int_var(0, horizon, "makespan")
    same: dict[tuple[int, int], cp_model.IntVar] = {}
    for e in range(problem.m):
        u, v = int(problem.src[e]), int(problem.dst[e])
        gu, gv = int(ug[u]), int(ug[v])
        m.add(start[v] >= start[u] + int(dur[u]))
        c = int(comm[e])
        if gu == gv or c == 0:
            continue
        key = (min(gu, gv), max(gu, gv))
        z = same.get(key)
        if z is None:
            z = m.new_bool_var(f"same{key}")
            same[key] = z
            for d in range(k):
                a, b = x.get((gu, d)), x.get((gv, d))
                if a is not None and b is not None:
                    m.add_bool_or([z.Not(), a.Not(), b])
                    m.add_bool_or([z, a.Not(), b.Not()])
                elif a is not None:
                    m.add_bool_or([z.Not(), a.Not()])
        m.add(start[v] >= start[u] + int(dur[u]) + c).only_enforce_if(z.Not())
    for i in range(n):
        m.add(mk >= start[i] + int(dur[i]))
    for d in range(k):
        terms = [(int(dur[i]), x[int(ug[i]), d]) for i in range(n) if (int(ug[i]), d) in x and dur[i] > 0]
        if terms:
            m.add(sum(w * lit for w, lit in terms) <= mk)
        if no_overlap:
            ivs = [m.new_optional_fixed_size_interval_var(start[i], int(dur[i]), x[int(ug[i]), d], f"I{i}_{d}")
                   for i in range(n) if (int(ug[i]), d) in x and dur[i] > 0]
            if len(ivs) > 1:
                m.add_no_overlap(ivs)
    knapsacks = _held_knapsacks(m, problem, x, ug, param, out, cap, mask)
    if knapsacks == 0:  # no forced set can overflow: the full model already holds all of R
        return HeldBound(0.0, False, None, time.monotonic() - t0, 0)
    break_device_symmetry(m, device_classes(problem), x, un.members, mask)
    if hint_placement is not None:
        for (g, d), lit in x.items():
            m.add_hint(lit, int(hint_placement[un.members[g][0]]) == d)
    if floor > 0:
        m.add(mk >= int(math.floor(floor * factor)))
    if target is not None:
        m.add(mk <= int(math.floor(target * factor)))
    m.minimize(mk)
    solver = cp_solver(opts)
    solver.parameters.max_time_in_seconds = max(min(seconds, opts.remaining() or seconds), 0.01)
    set_params(solver.parameters, dict(opts.extra.get("held_bound_params", {})))
    status = run_cp(solver, m, opts)
    if status == cp_model.INFEASIBLE and target is not None:  # R has no solution within the target
        return HeldBound(target, False, None, time.monotonic() - t0, knapsacks)
    if status == cp_model.INFEASIBLE:  # no placement keeps every forced set within capacity
        return HeldBound(math.inf, True, None, time.monotonic() - t0, knapsacks)
    if status not in (cp_model.OPTIMAL, cp_model.FEASIBLE, cp_model.UNKNOWN):
        return HeldBound(0.0, False, None, time.monotonic() - t0, knapsacks)
    bound = max(float(solver.best_objective_bound), 0.0) / factor
    if status not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        return HeldBound(bound, False, None, time.monotonic() - t0, knapsacks)
    pl = np.empty(n, dtype=np.int64)
    for (g, d), lit in x.items():
        if solver.boolean_value(lit):
            pl[un.members[g]] = d
    st = np.array([solver.value(v) for v in start], dtype=float) / factor
    return HeldBound(bound, status == cp_model.OPTIMAL, solver.objective_value / factor, time.monotonic() - t0,
                     knapsacks, pl, st)


def _placement_model(problem: Problem) -> tuple[cp_model.CpModel, dict, Any, np.ndarray, tuple] | None:
    """A model with one literal per (unit, allowed device), the units, the allowed-device mask and
    the exact integer bytes (params, outputs, capacities); None where the relaxation is not used:
    bytes not whole after scaling, or more than MAX_NODES nodes (checked first: a 200K-node run
    pays nothing here)."""
    if problem.n > MAX_NODES or problem.n == 0:
        return None
    param, out, cap, exact = memory_ints(problem, "peak")
    if not exact:
        return None
    un = units(problem)
    mask = problem.allowed_mask()
    m = cp_model.CpModel()
    return m, unit_placement_literals(m, un.members, mask), un, mask, (param, out, cap)


def held_knapsacks_feasible(problem: Problem, opts: SolveOptions, seconds: float) -> bool | None:
    """Whether some placement meets every held-tensor knapsack (item 3 alone: no times): False is a
    proof that no placement of the real problem fits its peak memory capacities (the knapsacks are
    necessary conditions, over exact integer bytes); True, a placement meeting them was found (not
    that one fits); None, neither within ``seconds``, or the graph is out of the model's reach.
    Cheap where the full relaxation is not: on a graph whose capacity no placement meets, the
    portfolio's descents and kicks would otherwise search the whole time limit for nothing."""
    base = _placement_model(problem)
    if base is None:
        return None
    m, x, un, mask, (param, out, cap) = base
    if _held_knapsacks(m, problem, x, un.of, param, out, cap, mask) == 0:
        return True  # no forced set can overflow a device
    break_device_symmetry(m, device_classes(problem), x, un.members, mask)
    solver = cp_solver(opts)
    rem = opts.remaining()
    solver.parameters.max_time_in_seconds = max(seconds if rem is None else min(seconds, rem), 0.01)
    status = run_cp(solver, m, opts)
    if status == cp_model.INFEASIBLE:
        return False
    return True if status in (cp_model.OPTIMAL, cp_model.FEASIBLE) else None


def held_memory_bound(problem: Problem, low: float, high: float, opts: SolveOptions, seconds: float,
                      tolerance: float = 0.005, check_seconds: float = 1.0) -> float:
    """A memory lower bound at least ``low`` (itself a valid one) for K devices of equal capacity:
    the largest capacity in [low, high) at which :func:`held_knapsacks_feasible` proves that no
    placement fits, found by bisection to ``tolerance`` of it within ``seconds`` (an undecided check
    counts as "may fit"; each check gets at most ``check_seconds``: near the threshold they get
    hard). Infeasible at capacity c means infeasible at every smaller one, so every
    capacity below the answer is proved too small. On imported training graphs the knapsacks
    see what the per-device bounds (placement/memory_bounds.py) do not: a layer's weights, their
    gradient and optimizer states, and the activations its backward reads sit on one device."""
    end = time.monotonic() + seconds
    k = problem.k
    lo, hi = float(low), float(high)
    while hi - lo > tolerance * max(lo, 1.0) and not opts.stop.is_set():
        left = end - time.monotonic()
        if left <= 0.01:
            break
        mid = math.floor((lo + hi) / 2)
        if mid <= lo:
            break
        if held_knapsacks_feasible(problem.with_devices(k, [float(mid)] * k), opts, min(left, check_seconds)) is False:
            lo = float(mid)
        else:
            hi = float(mid)
    return lo


def _held_knapsacks(m: cp_model.CpModel, problem: Problem, x: dict, ug: np.ndarray, param: np.ndarray,
                    out: np.ndarray, cap: np.ndarray, mask: np.ndarray) -> int:
    """For every node x of positive time and device d: params on d + the tensors forced onto d at
    x <= capacity. A tensor forced by several units gets one literal per device, implied by each."""
    held_lit: dict[tuple[tuple[int, ...], int], cp_model.IntVar] = {}
    count = 0
    pterms: list[list[tuple[int, cp_model.IntVar]]] = [
        [(int(param[i]), x[int(ug[i]), d]) for i in range(problem.n) if (int(ug[i]), d) in x and param[i] > 0]
        for d in range(problem.k)]
    seen: set[tuple] = set()
    for h in held_tensors(problem, problem.n):
        for d in range(problem.k):
            if cap[d] < 0:
                continue
            terms = list(pterms[d])
            for u, hs in zip(h.tensors, h.holders):
                if out[u] <= 0:
                    continue
                lits = [x[g, d] for g in hs if (g, d) in x]
                if not lits:
                    continue
                if len(lits) == 1:
                    lit = lits[0]
                else:
                    key = (hs, d)
                    lit = held_lit.get(key)
                    if lit is None:
                        lit = m.new_bool_var(f"held{hs}_{d}")
                        for a in lits:
                            m.add_implication(a, lit)
                        held_lit[key] = lit
                terms.append((int(out[u]), lit))
            sig = (d, tuple(sorted((c, lit.index) for c, lit in terms)))
            if sig in seen or sum(c for c, _ in terms) <= cap[d]:
                continue
            seen.add(sig)
            m.add(sum(c * lit for c, lit in terms) <= int(cap[d]))
            count += 1
    return count
