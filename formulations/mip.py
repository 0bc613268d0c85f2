"""MIP of the makespan problem (static or peak memory), through OR-Tools' linear solver wrapper.

The same semantics as formulations/cpsat.py, as a big-M disjunctive model with real (unscaled)
data: placement binaries per (unit, device), a same-device variable per pair of units that share
an edge or may collide, precedence with comm unless on one device, and for every pair of
incomparable positive-time nodes an order binary that only binds when they share a device. The
solver is SCIP by default (``opts.extra["mip_solver"]``: "SCIP", "HIGHS" or "CBC"; all ship in the
ortools wheel). Static memory is one linear row per device; the peak model (tensor lifetimes
exactly as placement.evaluator.buffers defines them) is the event-order formulation of
formulations/mip_peak.py, whose docstring proves it sound and exact.
"""
from __future__ import annotations

import time
from dataclasses import replace

import numpy as np
from ortools.linear_solver import pywraplp

from placement.problem import Problem
from placement.solution import OutOfTime, Solution, SolveOptions, stop_watch

from .bruteforce import _reach
from .mip_peak import PeakModel, add_peak_memory
from .common import (best_schedule, canonical_placement, device_classes, device_order, finish_solution,
                     hint_schedule, infeasible_reason, judge_reserved, retime, too_big, unbuilt_solution, units,
                     with_reserve)


def _heads_tails(problem: Problem) -> tuple[np.ndarray, np.ndarray]:
    """Longest compute-time path before each node, and from each node (itself included)."""
    from placement.bounds import longest_path

    head = longest_path(problem) - problem.time
    tail = longest_path(replace(problem, src=problem.dst, dst=problem.src))
    return head, tail


def snap_schedule(problem: Problem, placement: np.ndarray, start: np.ndarray, horizon: float) -> np.ndarray | None:
    """The solver's start times without its float noise: rounded to about 1e-9 of the horizon,
    then pushed right where a precedence or the device's order (by rounded start) needs it.

    The peak model is sensitive to ties (a buffer freed at t and one allocated at t do not count
    together), so a start 1e-12 before its tie partner would fail the evaluator's check."""
    decimals = max(0, 9 - int(np.ceil(np.log10(max(horizon, 1.0)))))
    st = np.round(start, decimals)
    return retime(problem, placement, device_order(problem, placement, st), release=st)


def _solve(problem: Problem, opts: SolveOptions) -> Solution:
    t0 = time.monotonic()
    ex = opts.extra
    mm = opts.memory_model
    if mm not in ("static", "peak"):
        raise ValueError(f"mip: memory model must be 'static' or 'peak', got {mm!r}")
    why = infeasible_reason(problem, mm)
    if why:
        return Solution("mip", "infeasible", reason=why, seconds=time.monotonic() - t0)
    backend = str(ex.get("mip_solver", "SCIP")).upper()
    solver = pywraplp.Solver.CreateSolver(backend)
    if solver is None:
        raise ValueError(f"mip: linear solver {backend!r} is not available in this ortools build")
    n, k = problem.n, problem.k
    refused = _refuse(problem, mm)
    if refused:
        return unbuilt_solution(problem, opts, "mip", t0, refused)
    try:
        return _build_and_solve(problem, opts, solver, backend, t0)
    except OutOfTime as exc:
        return unbuilt_solution(problem, opts, "mip", t0, f"mip: the model of {n} nodes x {k} devices was not built "
                                f"({exc}); answer: the hint, if any")


# Memory per order pair (a binary and two big-M rows, SCIP's copy included) and per peak-model
# transitivity triple (two rows), measured roughly; for refusing what cannot fit.
MIP_BYTES_PER_PAIR = 2000
MIP_BYTES_PER_TRIPLE = 400
# The solver's time limit leaves this share of the model's build time for what follows the solve:
# on an imported 570-node UNet block at K = 4 the build took 5.2 s and reading the answer, the
# bounds and freeing the model 1.0 s, so `--method mip --time-limit 20` ended at 21.2 s (session 40).
MIP_AFTER_SHARE = 0.25


def _refuse(problem: Problem, memory_model: str) -> str | None:
    """Why the model cannot fit in memory (an upper estimate of its pairs, or triples), or None."""
    busy = int((problem.time > 0).sum())
    why = too_big("mip", "order pairs", busy * (busy - 1) / 2 * (problem.k > 1), MIP_BYTES_PER_PAIR)
    if why is None and memory_model == "peak":
        points = 2 * int((problem.out_bytes > 0).sum())
        why = too_big("mip", "event-order triples", points ** 3 / 6, MIP_BYTES_PER_TRIPLE)
    return why


def _build_and_solve(problem: Problem, opts: SolveOptions, solver: pywraplp.Solver, backend: str, t0: float) -> Solution:
    """Build the model (abandoned through OutOfTime when the limit passes) and solve it."""
    ex = opts.extra
    mm = opts.memory_model
    tick = opts.check_time
    n, k = problem.n, problem.k
    un = units(problem)
    ug = un.of
    mask = problem.allowed_mask()
    t = problem.time
    H = float(t.sum() + problem.comm.sum())
    redundant = bool(ex.get("redundant", True))
    head, tail = _heads_tails(problem) if redundant else (np.zeros(n), t.copy())

    x: dict[tuple[int, int], pywraplp.Variable] = {}
    for g, mem in enumerate(un.members):
        devs = np.flatnonzero(mask[mem[0]]).tolist()
        for d in devs:
            x[g, d] = solver.BoolVar(f"x{g}_{d}")
        solver.Add(sum(x[g, d] for d in devs) == 1)
    s = [solver.NumVar(float(head[i]), H - float(tail[i]) if redundant else H, f"s{i}") for i in range(n)]
    lbv = max(float(tail.max(initial=0.0)), float(t.sum()) / k) if redundant else 0.0
    C = solver.NumVar(lbv, H, "C")

    same: dict[tuple[int, int], pywraplp.Variable] = {}

    def same_var(ga: int, gb: int) -> pywraplp.Variable | None:
        """Exactly 1 when units ga and gb share a device (None: they never can)."""
        key = (min(ga, gb), max(ga, gb))
        if key in same:
            return same[key]
        common = np.flatnonzero(mask[un.members[ga][0]] & mask[un.members[gb][0]]).tolist()
        if not common:
            same[key] = None
            return None
        y = solver.BoolVar(f"y{key[0]}_{key[1]}")
        for d in np.flatnonzero(mask[un.members[ga][0]] | mask[un.members[gb][0]]).tolist():
            xa = x.get((ga, d))
            xb = x.get((gb, d))
            if xa is not None and xb is not None:
                solver.Add(y >= xa + xb - 1)
                solver.Add(y <= 1 - xa + xb)
            elif xa is not None:
                solver.Add(y <= 1 - xa)
        same[key] = y
        return y

    for e in range(problem.m):
        if e % 256 == 0:
            tick()
        u, v = int(problem.src[e]), int(problem.dst[e])
        c = float(problem.comm[e])
        if ug[u] == ug[v] or c == 0:
            solver.Add(s[v] >= s[u] + t[u])
            continue
        y = same_var(int(ug[u]), int(ug[v]))
        if y is None:
            solver.Add(s[v] >= s[u] + t[u] + c)
        else:
            solver.Add(s[v] >= s[u] + t[u] + c * (1 - y))

    anc = _reach(problem)
    busy = [i for i in range(n) if t[i] > 0]
    orders: list[tuple[pywraplp.Variable, int, int]] = []
    for a_pos, i in enumerate(busy):
        tick()
        for j in busy[a_pos + 1:]:
            if anc[j] >> i & 1 or anc[i] >> j & 1:
                continue  # precedence already keeps them apart
            if ug[i] == ug[j]:
                y = None
                together = True
            else:
                y = same_var(int(ug[i]), int(ug[j]))
                together = False
                if y is None:
                    continue
            o = solver.BoolVar(f"o{i}_{j}")
            apart = 0 if together else (1 - y)
            solver.Add(s[j] >= s[i] + t[i] - H * (1 - o) - H * apart)
            solver.Add(s[i] >= s[j] + t[j] - H * o - H * apart)
            orders.append((o, i, j))

    for i in range(n):
        solver.Add(C >= s[i] + float(tail[i]))
    if redundant:
        for d in range(k):
            terms = [t[i] * x[int(ug[i]), d] for i in busy if mask[i, d]]
            if terms:
                solver.Add(sum(terms) <= C)
    need = problem.param_bytes + problem.out_bytes
    peak: PeakModel | None = add_peak_memory(solver, problem, un, x, s, H, anc, tick) if mm == "peak" else None
    for d in range(k) if mm == "static" else ():
        if np.isfinite(problem.memory[d]):
            terms = [float(need[un.members[g]].sum()) * x[g, d] for g in range(un.count) if (g, d) in x]
            if terms:
                solver.Add(sum(terms) <= float(problem.memory[d]))

    used: list[tuple[pywraplp.Variable, int, int]] = []
    if ex.get("symmetry", True):
        for cls in device_classes(problem):
            if len(cls) < 2:
                continue
            prev: dict[int, pywraplp.Variable | None] = {d: None for d in cls}
            for g, mem in enumerate(un.members):
                if g % 64 == 0:
                    tick()
                if not mask[mem[0], cls[0]]:
                    continue
                for j in range(1, len(cls)):
                    p = prev[cls[j - 1]]
                    solver.Add(x[g, cls[j]] <= (0 if p is None else p))
                for d in cls[:-1]:
                    uvar = solver.NumVar(0.0, 1.0, f"u{g}_{d}")
                    p = prev[d]
                    solver.Add(uvar >= x[g, d])
                    solver.Add(uvar <= x[g, d] + (0 if p is None else p))
                    if p is not None:
                        solver.Add(uvar >= p)
                    used.append((uvar, g, d))
                    prev[d] = uvar
    solver.Minimize(C)

    info: dict = {"backend": backend, "order_vars": len(orders), "variables": solver.NumVariables(),
                  "constraints": solver.NumConstraints()}
    hint = hint_schedule(problem, opts.hint, mm) if (opts.hint is not None and ex.get("use_hint", True)) else None
    hint_found = None
    if hint is not None:
        pl = canonical_placement(problem, hint[0], un)
        st = hint[1]
        hint_found = best_schedule(problem, pl, st, mm)
        if hint_found is not None:
            st = hint_found[1]
            dev = [int(pl[mem[0]]) for mem in un.members]
            vars_, vals = [], []
            for (g, d), var in x.items():
                vars_.append(var)
                vals.append(float(dev[g] == d))
            vars_ += s
            vals += [float(v) for v in st]
            vars_.append(C)
            vals.append(float((st + t).max(initial=0.0)))
            for (ga, gb), y in same.items():
                if y is not None:
                    vars_.append(y)
                    vals.append(float(dev[ga] == dev[gb]))
            for o, i, j in orders:
                vars_.append(o)
                vals.append(float(st[i] <= st[j]))
            first: dict[int, int] = {}
            for g, d in enumerate(dev):
                first.setdefault(d, g)
            for uvar, g, d in used:
                vars_.append(uvar)
                vals.append(float(first.get(d, len(dev)) <= g))
            if peak is not None:
                pv, pval = peak.hint(problem, pl, st)
                vars_ += pv
                vals += pval
            if backend == "HIGHS":
                # ortools 9.15's HiGHS wrapper segfaults on a hint (static and peak alike); the
                # hint's schedule is still returned below when the solver does not beat it.
                info["hint_not_given"] = "HiGHS"
            else:
                solver.SetHint(vars_, vals)
            hint_found = (hint_found[0], pl, hint_found[1])

    tick()  # the hint took its time too
    rem = opts.remaining()
    if rem is not None:
        # what follows the solve (reading it, the bounds, freeing the model) takes time too
        after = MIP_AFTER_SHARE * (time.monotonic() - t0)
        solver.SetTimeLimit(max(1, int((rem - after) * 1000)))
    if opts.workers:
        solver.SetNumThreads(int(opts.workers))
    if backend == "SCIP":
        solver.SetSolverSpecificParametersAsString(
            f"randomization/randomseedshift = {int(opts.seed)}\nnumerics/feastol = 1e-9\n")
    elif backend == "HIGHS" and not ex.get("highs_presolve", False):
        # HiGHS 1.12's MIP presolve returned "infeasible" on a feasible peak model (its log showed
        # postsolved incumbents violating a row; tests/test_exact_mip.py seed 5). The wrapper
        # reports False for this string but applies it (the log says presolve is off).
        solver.SetSolverSpecificParametersAsString("presolve=off")
    params = pywraplp.MPSolverParameters()
    params.SetDoubleParam(params.RELATIVE_MIP_GAP, 1e-9)
    with stop_watch(opts, solver.InterruptSolve, settle=0.5, repeat=None):
        status = solver.Solve(params)
    names = {pywraplp.Solver.OPTIMAL: "OPTIMAL", pywraplp.Solver.FEASIBLE: "FEASIBLE", pywraplp.Solver.INFEASIBLE: "INFEASIBLE",
             pywraplp.Solver.UNBOUNDED: "UNBOUNDED", pywraplp.Solver.ABNORMAL: "ABNORMAL", pywraplp.Solver.NOT_SOLVED: "NOT_SOLVED"}
    info["mip_status"] = names.get(status, str(status))
    if status == pywraplp.Solver.INFEASIBLE:
        if hint_found is not None:
            raise RuntimeError(f"mip ({backend}): the solver claims infeasibility but the hint is a schedule "
                               f"that passes check in the {mm} memory model")
        return Solution("mip", "infeasible", seconds=time.monotonic() - t0, info=info,
                        reason=f"mip: proved that no placement and schedule fit the {mm} memory capacities")
    found = None
    bound = None
    if status in (pywraplp.Solver.OPTIMAL, pywraplp.Solver.FEASIBLE):
        bound = solver.Objective().BestBound()
        info["mip_objective"] = solver.Objective().Value()
        pl = np.empty(n, dtype=np.int64)
        for (g, d), var in x.items():
            if var.solution_value() > 0.5:
                pl[un.members[g]] = d
        st = np.array([max(0.0, v.solution_value()) for v in s])
        got = None
        for cand in ((st,) if mm == "static" else (snap_schedule(problem, pl, st, H), st)):
            got = best_schedule(problem, pl, cand, mm)
            if got is not None:
                break
        if got is not None:
            found = (got[0], pl, got[1])
    if hint_found is not None and (found is None or hint_found[0] < found[0]):
        found = hint_found
        info["returned_hint"] = True
    proved = status == pywraplp.Solver.OPTIMAL
    return finish_solution(problem, opts, "mip", t0, proved, bound, None if found is None else found[1:], info)


def mip(problem: Problem, opts: SolveOptions) -> Solution:
    return judge_reserved(problem, opts, _solve(with_reserve(problem, opts), opts))
