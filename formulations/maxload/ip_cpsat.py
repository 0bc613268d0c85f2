"""The max-load integer program of Tarnawski et al. (Fig. 6, Section 5.3) in CP-SAT.

Variables: x[a, i] (atom a on device i), cross[t, i] (tensor t crosses accelerator i's boundary:
its producer's side and some consumer's side differ; this is CommIn + CommOut of the paper, which
cannot both be 1), z[v, i] for contiguity (Lemma 4.1: z >= x, z non-increasing along forward edges,
z[v] <= x[v] - x[u] + 1), enforced on forward nodes for every device, CPUs included, as in the
published IP. Identical accelerators are ordered by their first atom (symmetry breaking).

CP-SAT needs integers: times and costs are scaled by ``scale`` and rounded *down*, so the solver's
bound divided by ``scale`` is a valid lower bound of the true optimum; the returned split is
re-evaluated exactly by placement.objectives. Sizes are bytes (integers in msr-fiddle; rounded up,
capacities down). Hinted by a DPL split (or ``opts.hint``).
"""
from __future__ import annotations

import math
import time

import numpy as np
from ortools.sat.python import cp_model

from formulations.cpsolver import cp_solver
from formulations.cpsolver import solve as run_cp

from placement.objectives import evaluate_maxload
from placement.problem import Problem
from placement.solution import Solution, SolveOptions
from solvers.registry import register

from .common import IPData, canonical_devices, ip_data, split_from_atoms
from .dp import finish_solution, solve_dp

DEFAULT_SCALE = 1e6


def build_cpsat(problem: Problem, data: IPData, contiguous: bool, objective: str, scale: float,
                hint_atoms: np.ndarray | None, symmetry: bool = True) -> tuple[cp_model.CpModel, dict]:
    k, l = data.k, data.l
    nd = k + l
    na = len(data.atoms)
    m = cp_model.CpModel()
    x = [[m.NewBoolVar(f"x{a}_{i}") for i in range(nd)] for a in range(na)]
    for a in range(na):
        m.AddExactlyOne(x[a])
        if not data.allowed_acc[a]:
            for i in range(k):
                m.Add(x[a][i] == 0)
    size = [int(math.ceil(b)) for b in data.nbytes]
    for i in range(k):
        if np.isfinite(problem.memory[i]):
            m.Add(sum(size[a] * x[a][i] for a in range(na) if size[a]) <= int(math.floor(problem.memory[i])))
    if contiguous:
        fw_nodes = np.flatnonzero(data.forward)
        for i in range(nd):
            z = {int(v): m.NewBoolVar("") for v in fw_nodes}
            for v, zv in z.items():
                m.AddImplication(x[data.atom_of[v]][i], zv)
            for u, v in data.fw_edges:
                au, av = data.atom_of[u], data.atom_of[v]
                m.AddImplication(z[v], z[u])
                if au != av:
                    # z[v] <= x[v] - x[u] + 1
                    m.Add(z[v] + x[au][i] - x[av][i] <= 1)
    ints = lambda arr: [int(math.floor(t * scale)) for t in arr]
    tf, tb = ints(np.where(np.isfinite(data.acc_fw), data.acc_fw, 0)), ints(np.where(np.isfinite(data.acc_bw), data.acc_bw, 0))
    cf, cb = ints(data.cpu_fw), ints(data.cpu_bw)
    tc = ints(data.t_cost)
    fw_load, bw_load = [], []
    horizon = int(sum(tf) + sum(tb) + 2 * sum(tc) + sum(cf) + sum(cb)) + 1
    for i in range(nd):
        fexpr, bexpr = [], []
        if i < k:
            fexpr += [tf[a] * x[a][i] for a in range(na) if tf[a]]
            bexpr += [tb[a] * x[a][i] for a in range(na) if tb[a]]
            for t, (pa, cons) in enumerate(zip(data.t_prod, data.t_cons)):
                if tc[t] == 0:
                    continue
                c = m.NewBoolVar("")
                for b in cons:
                    m.Add(c >= x[pa][i] - x[b][i])
                    m.Add(c >= x[b][i] - x[pa][i])
                (bexpr if data.t_back[t] else fexpr).append(tc[t] * c)
        else:
            fexpr += [cf[a] * x[a][i] for a in range(na) if cf[a]]
            bexpr += [cb[a] * x[a][i] for a in range(na) if cb[a]]
        fl = m.NewIntVar(0, horizon, f"fw{i}")
        bl = m.NewIntVar(0, horizon, f"bw{i}")
        m.Add(fl == sum(fexpr))
        m.Add(bl == sum(bexpr))
        fw_load.append(fl)
        bw_load.append(bl)
    obj = m.NewIntVar(0, 2 * horizon, "maxload")
    if objective == "max-load":
        for i in range(nd):
            m.Add(obj >= fw_load[i] + bw_load[i])
    else:
        fmax = m.NewIntVar(0, horizon, "fwmax")
        bmax = m.NewIntVar(0, horizon, "bwmax")
        m.AddMaxEquality(fmax, fw_load)
        m.AddMaxEquality(bmax, bw_load)
        m.Add(obj == fmax + bmax)
    m.Minimize(obj)
    if symmetry and data.identical_acc:
        _order_devices(m, x, range(0, k))
    if symmetry and l > 1:
        _order_devices(m, x, range(k, nd))
    if hint_atoms is not None:
        for a in range(na):
            for i in range(nd):
                m.AddHint(x[a][i], int(hint_atoms[a] == i))
    return m, {"x": x, "obj": obj, "fw": fw_load, "bw": bw_load}


def _order_devices(m: cp_model.CpModel, x: list, devices: range) -> None:
    """Identical devices: device i may take atom a only if device i-1 holds an earlier atom."""
    devs = list(devices)
    na = len(x)
    prev = {i: None for i in devs}
    for a in range(na):
        for j, i in enumerate(devs):
            if j > 0:
                p = prev[devs[j - 1]]
                if p is None:
                    m.Add(x[a][i] == 0)
                else:
                    m.AddImplication(x[a][i], p)
        for i in devs:
            seen = m.NewBoolVar("")
            if prev[i] is None:
                m.Add(seen == x[a][i])
            else:
                m.AddBoolOr([prev[i], x[a][i]]).OnlyEnforceIf(seen)
                m.AddImplication(prev[i], seen)
                m.AddImplication(x[a][i], seen)
            prev[i] = seen


def hint_split(problem: Problem, opts: SolveOptions, contiguous: bool) -> tuple[np.ndarray | None, str]:
    """A warm start: opts.hint's split, else DPL (contiguous, fast), else nothing. Non-contiguous:
    DPL improved by single-atom local search (``ls_seconds``, default 10% of the time) and by the
    device-neighbourhood LNS of lns.py (``lns_seconds``, default 50%; it stops early when stalled)."""
    if opts.hint is not None:
        from placement.objectives import as_split
        return as_split(problem, opts.hint), f"hint:{opts.hint.method}"
    try:
        split, _, _ = solve_dp(problem, linearize=True)
    except Exception:  # no DPL split fits: solve unhinted
        return None, "none"
    if contiguous:
        return split, "dpl"
    # non-contiguous: improve DPL by single-atom moves (a small share of the time budget)
    from heuristics.tarnawski import local_search_split

    rem = opts.remaining()
    budget = float(opts.extra.get("ls_seconds", 0.1 * (60.0 if rem is None else rem)))
    better = local_search_split(problem, opts.seed, 1, time.monotonic() + budget, start=split)
    ev_b = evaluate_maxload(problem, better)
    tag = "dpl"
    if not ev_b.violations and ev_b.value < evaluate_maxload(problem, split).value:
        split, tag = better, "dpl+local-search"
    lns_budget = float(opts.extra.get("lns_seconds", 0.5 * (60.0 if rem is None else rem)))
    if lns_budget > 0 and opts.extra.get("objective", "max-load") == "max-load":
        from .common import ip_data
        from .lns import lns_improve

        data = ip_data(problem)
        atoms, stats = lns_improve(problem, data, canonical_devices(data, split), time.monotonic() + lns_budget,
                                   seed=opts.seed)
        if stats["improved"]:
            split, tag = split_from_atoms(data, atoms), tag + "+lns"
    return split, tag


def solve_cpsat(problem: Problem, opts: SolveOptions, name: str, contiguous: bool) -> Solution:
    t0 = time.monotonic()
    objective = opts.extra.get("objective", "max-load")
    scale = float(opts.extra.get("scale", DEFAULT_SCALE))
    data = ip_data(problem)
    hint, hint_from = hint_split(problem, opts, contiguous)
    hint_atoms = canonical_devices(data, hint) if hint is not None else None
    model, v = build_cpsat(problem, data, contiguous, objective, scale, hint_atoms,
                           symmetry=bool(opts.extra.get("symmetry", True)))
    solver = cp_solver(opts, default_seconds=60.0, min_seconds=1.0)
    status = run_cp(solver, model, opts)
    contig = "forward" if contiguous else "none"
    info = {"hint": hint_from, "scale": scale, "cpsat_status": solver.StatusName(status), "atoms": len(data.atoms),
            "wall": solver.WallTime()}
    # Bytes are rounded up (capacities down) for CP-SAT: exact for whole bytes; otherwise the model
    # is a restriction, whose bound and infeasibility prove nothing about the real problem.
    mem_exact = bool(np.all(data.nbytes == np.round(data.nbytes)))
    info["memory_exact"] = mem_exact
    bound = solver.BestObjectiveBound() / scale if status in (cp_model.OPTIMAL, cp_model.FEASIBLE) and mem_exact else None
    if status in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        atom_dev = np.array([next(i for i, xi in enumerate(v["x"][a]) if solver.Value(xi)) for a in range(len(data.atoms))])
        split = split_from_atoms(data, atom_dev)
    elif hint is not None:
        split = hint
    else:
        proved = status == cp_model.INFEASIBLE and mem_exact
        why = "infeasible" if proved else ("the model with bytes rounded up is infeasible (not a proof)"
                                           if status == cp_model.INFEASIBLE else "no split found in time")
        return Solution(name, "infeasible" if proved else "unknown", reason=f"{name}: {why}",
                        seconds=time.monotonic() - t0, info=info)
    ev_s = evaluate_maxload(problem, split, objective=objective, contiguity=contig)
    if hint is not None:  # never return worse than the hint
        ev_h = evaluate_maxload(problem, hint, objective=objective, contiguity=contig)
        if not ev_h.violations and (ev_s.violations or ev_h.value < ev_s.value):
            split, ev_s = hint, ev_h
    if ev_s.violations:  # a split the evaluator refuses is no answer
        return Solution(name, "unknown", seconds=time.monotonic() - t0, info=info,
                        reason=f"{name}: the solver's split breaks constraints: {'; '.join(ev_s.violations)}")
    value = ev_s.value
    lb = None if bound is None else min(bound, value)
    gap = None if lb is None else (value - lb) / value if value > 0 else 0.0
    info["gap"] = gap
    proved = (status == cp_model.OPTIMAL and mem_exact) or (gap is not None and gap <= 1e-6)
    # the rounding to 1/scale costs at most this relative gap; "optimal" within it
    st = "optimal" if proved and gap is not None and gap <= 1e-5 else "feasible"
    return finish_solution(problem, name, split, st, t0, info, lower_bound=lb, contiguity=contig, objective=objective)


@register("maxload-cpsat", kind="exact", objective="max-load",
          summary="Tarnawski et al. contiguous max-load IP (Fig. 6) in CP-SAT, hinted by DPL")
def maxload_cpsat(problem: Problem, opts: SolveOptions) -> Solution:
    return solve_cpsat(problem, opts, "maxload-cpsat", contiguous=True)


@register("maxload-cpsat-nc", kind="exact", objective="max-load",
          summary="Tarnawski et al. non-contiguous max-load IP in CP-SAT, hinted by DPL")
def maxload_cpsat_nc(problem: Problem, opts: SolveOptions) -> Solution:
    return solve_cpsat(problem, opts, "maxload-cpsat-nc", contiguous=False)
