"""Single-sample latency of Tarnawski et al. (Section 4, Figs. 3 and 4) in CP-SAT and as a MIP.

Slots j = (i, s): accelerator i's s-th subgraph (q per accelerator, run in slot order), plus the
CPU pool (cores unlimited). Variables per atom (colocation group or node) and slot: x; per tensor
and slot: cin (produced outside, consumed inside), cout (produced inside, consumed outside); per
slot start/finish; per node L (output available in host memory); contiguity z per node and slot
(Lemma 4.1). Constraints: start_j >= L_p when cin[t, j] for t's producer p; finish_j = start_j +
sum cost*cin + compute + sum cost*cout; L_v >= finish_j when v is in j; L_v >= L_u + cpu_v*[v on
CPU] on every edge; start_(i,s) >= finish_(i,s-1); objective max_v L_v. CP-SAT writes the two
products as enforced (half-reified) linear constraints; the MIP uses the paper's big-M form.
Colocated nodes share an accelerator (or the CPU), as the evaluator asks: for q = 1 a group is one
atom (the paper's constraint); for q > 1 every node is an atom and each group is tied to one
accelerator, its members free to use different subgraphs of it (:func:`model_atoms`).

CP-SAT coefficients are times scaled by ``scale`` and rounded down, so its bound / scale is a valid
lower bound; the returned split is re-evaluated exactly by placement.objectives.evaluate_latency.
The reported lower bound is the larger of the solver's bound and the interval path bound of
latency_bounds.py (also given to CP-SAT, less the rounding margin, as the objective's lower end).

Time budget (``opts.time_limit``, T): warm starts (``opts.hint``, greedy, the "sum" DP split
without and with one CPU core - the split minimising the total load of a chain of device
subgraphs, an upper bound of its latency - and the max-load DP split; ``opts.extra['dp_hints']``),
then iterated local search from the two best (heuristics/latency_search.py, ``ls_seconds``,
default min(0.2 T, 120 s)), CP-SAT hinted by the best, and a local-search polish of CP-SAT's
answer when it beat the hint (``polish_seconds``, default min(0.05 T, 30 s)).
"""
from __future__ import annotations

import math
import time
from dataclasses import replace

import numpy as np
from ortools.linear_solver import pywraplp
from ortools.sat.python import cp_model

from formulations.cpsolver import cp_solver
from formulations.cpsolver import solve as run_cp

from formulations.maxload.common import IPData, ip_data
from formulations.maxload.dp import solve_dp
from placement.objectives import as_split, cpu_time, evaluate_latency
from placement.problem import Problem
from placement.report import OPTIMAL_GAP
from placement.solution import Solution, SolveOptions

from .bounds import latency_lower_bound
from .closure import ClosureResult, closure_split, latency_closure_bound
from .heuristics import greedy_split, latency_solution
from .pairs import pair_path_bound
from .search import latency_local_search

DEFAULT_SCALE = 1e5
GAP_TOL = OPTIMAL_GAP["latency"]  # relative gap reported as optimal (the precision of the scaled integer models)


def latency_hints(problem: Problem, opts: SolveOptions) -> list[tuple[str, np.ndarray, np.ndarray | None, float]]:
    """Candidate warm starts (name, split, slot, latency), best first: ``opts.hint``, greedy, and
    the DP splits of ``opts.extra['dp_hints']`` (default: the "sum" DP without and with one CPU
    core, and the max-load DP)."""
    cands: list[tuple[str, np.ndarray, np.ndarray | None]] = []
    if opts.hint is not None:
        cands.append((f"hint:{opts.hint.method}", as_split(problem, opts.hint), opts.hint.info.get("slot")))
    cands.append(("greedy", greedy_split(problem), None))
    for spec in tuple(opts.extra.get("dp_hints", ("sum", "sum-cpu", "max"))):
        combine, _, cpu = str(spec).partition("-")
        try:
            split, _, _ = solve_dp(problem, n_cpus=1 if cpu else 0, combine=combine, max_ideals=8000)
            cands.append((f"dp-{spec}", split, None))
        except Exception:  # too many ideals or nothing fits: skip this warm start
            pass
    out = []
    for name, split, slot in cands:
        ev = evaluate_latency(problem, split, slot)
        if not ev.violations:
            out.append((name, split, slot, ev.value))
    out.sort(key=lambda c: c[3])
    return out


def improve_hints(problem: Problem, hints: list, q: int, seed: int, seconds: float, kicks: int) -> list:
    """Iterated local search (heuristics/latency_search.py) from the two best warm starts, half of
    ``seconds`` each (at most ``kicks`` perturbations each); the improved splits join the list."""
    out = list(hints)
    starts = hints[:2]
    for idx, (name, split, slot, _) in enumerate(starts):
        deadline = time.monotonic() + seconds / len(starts)
        s2, sl2, val, _ = latency_local_search(problem, split, slot, q=q, seed=seed + idx, deadline=deadline,
                                               max_kicks=kicks)
        out.append((f"ls({name})", s2, sl2, val))
    out.sort(key=lambda c: c[3])
    return out


def closure_hint(problem: Problem, hints: list, q: int, seconds: float) -> tuple[ClosureResult, list]:
    """The closure bound (formulations/latency_closure.py, at most ``seconds``) and the hints with
    the split built from its cut sets added when the evaluator accepts it."""
    res = latency_closure_bound(problem, q=q, deadline=time.monotonic() + seconds)
    split = closure_split(problem, res)
    out = list(hints)
    if split is not None:
        out.append(("closure", split, None, evaluate_latency(problem, split).value))
        out.sort(key=lambda c: c[3])
    return res, out


def _canonical(problem: Problem, split: np.ndarray, slot: np.ndarray | None, k: int, q: int) -> np.ndarray:
    """Slot index per node (accelerator i, subgraph s -> i*q + s; CPU -> k*q), accelerators
    renumbered by first node in topological order (the symmetry breaking of the model when q = 1)."""
    s = np.zeros(problem.n, dtype=np.int64) if slot is None else np.asarray(slot)
    remap: dict[int, int] = {}
    out = np.full(problem.n, k * q, dtype=np.int64)
    for v in problem.topo_order.tolist():
        d = int(split[v])
        if d < 0:
            continue
        if q == 1:
            d = remap.setdefault(d, len(remap))
        out[v] = d * q + min(int(s[v]), q - 1)
    return out


def model_atoms(problem: Problem, q: int) -> tuple[IPData, list[np.ndarray]]:
    """The atoms of the latency IPs, and the colocation groups the model must tie to one device.

    q = 1: a colocation group is one atom (its accelerator holds one subgraph, so the group shares
    it: the paper's constraint, the evaluator's too). q > 1: the evaluator only asks a group for
    one device, so its members may sit in different subgraphs of one accelerator; every node is
    its own atom and each group returned is tied to one accelerator (or the CPU) by the caller."""
    tied = [g for g in problem.groups if len(g) > 1]
    if q == 1 or not tied:
        return ip_data(problem, 0, keep_free=True), []
    loose = replace(problem, colocate=np.full(problem.n, -1, dtype=np.int64), colocate_names=[])
    return ip_data(loose, 0, keep_free=True), tied


def solve_latency_cpsat(problem: Problem, opts: SolveOptions, name: str = "latency-cpsat") -> Solution:
    t0 = time.monotonic()
    q = int(opts.extra.get("q", 1))
    scale = float(opts.extra.get("scale", DEFAULT_SCALE))
    hints = latency_hints(problem, opts)
    rem = opts.remaining()
    budget = 60.0 if rem is None else rem
    ls_seconds = float(opts.extra.get("ls_seconds", min(0.2 * budget, 120.0)))
    polish = float(opts.extra.get("polish_seconds", min(0.05 * budget, 30.0)))
    kicks = int(opts.extra.get("ls_kicks", 400))
    bound_seconds = float(opts.extra.get("bound_seconds", min(0.1 * budget, 60.0)))
    closure, hints = closure_hint(problem, hints, q, bound_seconds)
    if hints and ls_seconds > 0:
        hints = improve_hints(problem, hints, q, opts.seed, ls_seconds, kicks)
    path_lb = max(latency_lower_bound(problem, q=q)[0], closure.bound)
    pair_info = None
    if hints and hints[0][3] - path_lb > GAP_TOL * hints[0][3] and closure.path:
        pair = pair_path_bound(problem, closure.path, q, deadline=time.monotonic() + bound_seconds, closure=closure)
        pair_info = {"bound": pair.bound, "pairs": pair.pairs, "complete": pair.complete}
        path_lb = max(path_lb, pair.bound)
    if hints and path_lb > hints[0][3] * (1 + 1e-9) + 1e-9:
        raise AssertionError(f"{name}: lower bound {path_lb} above the latency {hints[0][3]} of a feasible split")
    if hints and hints[0][3] - path_lb <= GAP_TOL * hints[0][3]:
        # the bound already meets the best split: CP-SAT could not prove more
        info = {"hint": hints[0][0], "hints": {h[0]: h[3] for h in hints}, "q": q, "cpsat_status": "not run",
                "path_bound": path_lb, "closure_bound": closure.bound, "closure_cuts": closure.cuts,
                "pair_bound": pair_info,
                "gap": max(0.0, (hints[0][3] - path_lb) / hints[0][3]) if hints[0][3] > 0 else 0.0}
        return latency_solution(problem, name, hints[0][1], hints[0][2], "optimal", t0, info,
                                lower_bound=min(path_lb, hints[0][3]))
    data, tied = model_atoms(problem, q)
    k = problem.k
    ns = k * q
    cpu_slot = ns
    na = len(data.atoms)
    n = problem.n
    m = cp_model.CpModel()
    x = [[m.NewBoolVar("") for _ in range(ns + 1)] for _ in range(na)]
    for a in range(na):
        m.AddExactlyOne(x[a])
        if not data.allowed_acc[a]:
            for j in range(ns):
                m.Add(x[a][j] == 0)
    for members in tied:
        for u, v in zip(members.tolist(), members[1:].tolist()):
            for i in range(k):
                m.Add(sum(x[data.atom_of[u]][i * q + s] for s in range(q)) == sum(x[data.atom_of[v]][i * q + s] for s in range(q)))
    size = [int(math.ceil(b)) for b in data.nbytes]
    for i in range(k):
        if np.isfinite(problem.memory[i]):
            m.Add(sum(size[a] * x[a][i * q + s] for a in range(na) for s in range(q) if size[a]) <= int(problem.memory[i]))
    atom_of = data.atom_of
    edges = list(zip(problem.src.tolist(), problem.dst.tolist()))
    for j in range(ns):
        z = [m.NewBoolVar("") for _ in range(n)]
        for v in range(n):
            m.AddImplication(x[atom_of[v]][j], z[v])
        for u, v in edges:
            m.AddImplication(z[v], z[u])
            if atom_of[u] != atom_of[v]:
                m.Add(z[v] + x[atom_of[u]][j] - x[atom_of[v]][j] <= 1)
    fl = lambda t: int(math.floor(t * scale))
    acc = [fl(t) if np.isfinite(t) else 0 for t in data.acc_time]
    cpu = [fl(t) for t in cpu_time(problem)]
    tc = [fl(c) for c in data.t_cost]
    t_nodes = data.t_node
    horizon = sum(acc) + sum(cpu) + 2 * sum(tc) + 1
    L = [m.NewIntVar(0, horizon, f"L{v}") for v in range(n)]
    start = [m.NewIntVar(0, horizon, "") for _ in range(ns)]
    finish = [m.NewIntVar(0, horizon, "") for _ in range(ns)]
    for j in range(ns):
        terms = [acc[a] * x[a][j] for a in range(na) if acc[a]]
        for t, (pa, cons) in enumerate(zip(data.t_prod, data.t_cons)):
            cin = m.NewBoolVar("")
            cout = m.NewBoolVar("")
            for b in cons:
                m.Add(cin >= x[b][j] - x[pa][j])
                m.Add(cout >= x[pa][j] - x[b][j])
            if tc[t]:
                terms += [tc[t] * cin, tc[t] * cout]
            m.Add(start[j] >= L[t_nodes[t]]).OnlyEnforceIf(cin)
        m.Add(finish[j] == start[j] + sum(terms))
        for v in range(n):
            m.Add(L[v] >= finish[j]).OnlyEnforceIf(x[atom_of[v]][j])
        if j % q:
            m.Add(start[j] >= finish[j - 1])
    for v in range(n):
        if cpu[v]:
            m.Add(L[v] >= cpu[v]).OnlyEnforceIf(x[atom_of[v]][cpu_slot])
    for u, v in edges:
        m.Add(L[v] >= L[u] + cpu[v] * x[atom_of[v]][cpu_slot])
    # the scaled model floors every term, so a split's integer latency can fall below scale x its
    # latency by less than one unit per term of its critical chain: keep that margin under the bound
    margin = 2 * n + 2 * len(tc)
    total = m.NewIntVar(max(0, min(horizon, int(math.floor(path_lb * scale)) - margin)), horizon, "total")
    m.AddMaxEquality(total, L)
    m.Minimize(total)
    if q == 1 and np.all(problem.memory == problem.memory[0]):
        from formulations.maxload.cpsat_model import _order_devices
        _order_devices(m, x, range(0, k))
    hint_name = "none"
    if hints:
        hint_name, hsplit, hslot, _ = hints[0]
        slot_of = _canonical(problem, hsplit, hslot, k, q)
        cs = np.where(slot_of < ns, slot_of // q, -1)
        ev = evaluate_latency(problem, cs, np.where(slot_of < ns, slot_of % q, 0))
        for a in range(na):
            j0 = int(slot_of[data.atoms[a][0]])
            for j in range(ns + 1):
                m.AddHint(x[a][j], int(j == j0))
        for v in range(n):
            m.AddHint(L[v], min(horizon, int(math.floor(ev.node_ready[v] * scale))))
    solver = cp_solver(opts, default_seconds=60.0, min_seconds=1.0)
    left = opts.remaining()
    if left is not None:
        solver.parameters.max_time_in_seconds = max(1.0, left - polish)
    status = run_cp(solver, m, opts)
    info = {"hint": hint_name, "hints": {h[0]: h[3] for h in hints}, "q": q, "cpsat_status": solver.StatusName(status),
            "scale": scale, "closure_bound": closure.bound, "closure_cuts": closure.cuts, "pair_bound": pair_info}
    best = None
    if status in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        slot_of = np.array([next(j for j in range(ns + 1) if solver.Value(x[atom_of[v]][j])) for v in range(n)])
        best = _decode(problem, slot_of, ns, q)
        if best is not None and hints and best[2] < hints[0][3] - 1e-9 and polish > 0 and _groups_whole(problem, best[1]):
            s2, sl2, val, _ = latency_local_search(problem, best[0], best[1], q=q, seed=opts.seed,
                                                   deadline=time.monotonic() + polish, max_kicks=kicks)
            info["polished"] = {"from": best[2], "to": val}
            if val < best[2]:
                best = (s2, sl2, val)
    best = _better_hint(best, hints)
    # Bytes are rounded up for CP-SAT: exact for whole bytes; otherwise the model is a restriction,
    # whose bound and infeasibility prove nothing about the real problem.
    mem_exact = bool(np.all(data.nbytes == np.round(data.nbytes)))
    info["memory_exact"] = mem_exact
    if best is None:
        return Solution(name, "infeasible" if status == cp_model.INFEASIBLE and mem_exact else "unknown",
                        reason=f"{name}: {solver.StatusName(status)}", seconds=time.monotonic() - t0, info=info)
    lb = solver.BestObjectiveBound() / scale if status in (cp_model.OPTIMAL, cp_model.FEASIBLE) and mem_exact else 0.0
    info["cpsat_bound"] = lb
    info["path_bound"] = path_lb
    lb = min(max(lb, path_lb), best[2])
    info["gap"] = None if lb is None or best[2] <= 0 else (best[2] - lb) / best[2]
    st = "optimal" if info["gap"] is not None and info["gap"] <= GAP_TOL else "feasible"
    return latency_solution(problem, name, best[0], best[1], st, t0, info, lower_bound=lb)


def latency_cpsat(problem: Problem, opts: SolveOptions) -> Solution:
    return solve_latency_cpsat(problem, opts)


def solve_latency_mip(problem: Problem, opts: SolveOptions, name: str = "latency-mip") -> Solution:
    """The same model as a MIP with the paper's big-M rewriting (H = a schedule-independent upper
    bound on every L_v: all CPU and accelerator times plus every transfer twice)."""
    t0 = time.monotonic()
    q = int(opts.extra.get("q", 1))
    backend = str(opts.extra.get("mip_solver", "SCIP"))
    solver = pywraplp.Solver.CreateSolver(backend)
    if solver is None:
        return Solution(name, "unknown", reason=f"{name}: OR-Tools has no {backend} backend")
    hints = latency_hints(problem, opts)
    rem = opts.remaining()
    closure, hints = closure_hint(problem, hints, q, min(0.1 * (60.0 if rem is None else rem), 60.0))
    path_lb = max(latency_lower_bound(problem, q=q)[0], closure.bound)
    data, tied = model_atoms(problem, q)
    k, n = problem.k, problem.n
    ns = k * q
    na = len(data.atoms)
    atom_of = data.atom_of
    x = [[solver.BoolVar("") for _ in range(ns + 1)] for _ in range(na)]
    for a in range(na):
        solver.Add(sum(x[a]) == 1)
        if not data.allowed_acc[a]:
            for j in range(ns):
                solver.Add(x[a][j] == 0)
    for members in tied:
        for u, v in zip(members.tolist(), members[1:].tolist()):
            for i in range(k):
                solver.Add(sum(x[atom_of[u]][i * q + s] for s in range(q)) == sum(x[atom_of[v]][i * q + s] for s in range(q)))
    for i in range(k):
        if np.isfinite(problem.memory[i]):
            solver.Add(solver.Sum([float(data.nbytes[a]) * x[a][i * q + s] for a in range(na) for s in range(q)
                                   if data.nbytes[a]]) <= float(problem.memory[i]))
    edges = list(zip(problem.src.tolist(), problem.dst.tolist()))
    for j in range(ns):
        z = [solver.NumVar(0, 1, "") for _ in range(n)]
        for v in range(n):
            solver.Add(z[v] >= x[atom_of[v]][j])
        for u, v in edges:
            solver.Add(z[v] <= z[u])
            if atom_of[u] != atom_of[v]:
                solver.Add(z[v] <= x[atom_of[v]][j] - x[atom_of[u]][j] + 1)
    acc = np.where(np.isfinite(data.acc_time), data.acc_time, 0.0)
    cpu = cpu_time(problem)
    big = float(acc.sum() + cpu.sum() + 2 * sum(data.t_cost)) + 1.0
    t_nodes = data.t_node
    L = [solver.NumVar(0, big, "") for _ in range(n)]
    start = [solver.NumVar(0, big, "") for _ in range(ns)]
    finish = [solver.NumVar(0, big, "") for _ in range(ns)]
    for j in range(ns):
        terms = [float(acc[a]) * x[a][j] for a in range(na) if acc[a]]
        for t, (pa, cons) in enumerate(zip(data.t_prod, data.t_cons)):
            cin = solver.NumVar(0, 1, "")
            cout = solver.NumVar(0, 1, "")
            for b in cons:
                solver.Add(cin >= x[b][j] - x[pa][j])
                solver.Add(cout >= x[pa][j] - x[b][j])
            terms += [data.t_cost[t] * cin, data.t_cost[t] * cout]
            solver.Add(start[j] >= L[t_nodes[t]] - (1 - cin) * big)
        solver.Add(finish[j] == start[j] + solver.Sum(terms))
        for v in range(n):
            solver.Add(L[v] >= finish[j] - (1 - x[atom_of[v]][j]) * big)
        if j % q:
            solver.Add(start[j] >= finish[j - 1])
    for v in range(n):
        solver.Add(L[v] >= float(cpu[v]) * x[atom_of[v]][ns])
    for u, v in edges:
        solver.Add(L[v] >= L[u] + float(cpu[v]) * x[atom_of[v]][ns])
    total = solver.NumVar(0, big, "total")
    for v in range(n):
        solver.Add(total >= L[v])
    solver.Minimize(total)
    if hints:
        slot_of = _canonical(problem, hints[0][1], hints[0][2], k, q)
        solver.SetHint([x[a][j] for a in range(na) for j in range(ns + 1)],
                       [float(int(slot_of[data.atoms[a][0]]) == j) for a in range(na) for j in range(ns + 1)])
    rem = opts.remaining()
    solver.SetTimeLimit(int(1000 * (60.0 if rem is None else max(rem - (time.monotonic() - t0), 1.0))))
    status = solver.Solve()
    info = {"hint": hints[0][0] if hints else "none", "q": q, "backend": backend, "mip_status": int(status)}
    best = None
    if status in (pywraplp.Solver.OPTIMAL, pywraplp.Solver.FEASIBLE):
        slot_of = np.array([int(np.argmax([x[atom_of[v]][j].solution_value() for j in range(ns + 1)])) for v in range(n)])
        best = _decode(problem, slot_of, ns, q)
    best = _better_hint(best, hints)
    if best is None:
        return Solution(name, "unknown", reason=f"{name}: solver status {status}", seconds=time.monotonic() - t0, info=info)
    lb = solver.Objective().BestBound() if status in (pywraplp.Solver.OPTIMAL, pywraplp.Solver.FEASIBLE) else 0.0
    info["mip_bound"] = lb
    info["path_bound"] = path_lb
    lb = min(max(float(lb), path_lb), best[2])
    info["gap"] = None if lb is None or best[2] <= 0 else (best[2] - lb) / best[2]
    st = "optimal" if status == pywraplp.Solver.OPTIMAL and info["gap"] is not None and info["gap"] <= 1e-6 else "feasible"
    return latency_solution(problem, name, best[0], best[1], st, t0, info, lower_bound=lb)


def latency_mip(problem: Problem, opts: SolveOptions) -> Solution:
    return solve_latency_mip(problem, opts)


def latency_local_search_method(problem: Problem, opts: SolveOptions) -> Solution:
    """The warm starts of latency-cpsat improved by iterated local search for the whole time
    limit (60 s without one), q from ``opts.extra['q']``."""
    t0 = time.monotonic()
    q = int(opts.extra.get("q", 1))
    hints = latency_hints(problem, opts)
    if not hints:
        return Solution("latency-local-search", "unknown", reason="latency-local-search: no feasible warm start",
                        seconds=time.monotonic() - t0)
    rem = opts.remaining()
    seconds = 60.0 if rem is None else max(0.0, rem)
    hints = improve_hints(problem, hints, q, opts.seed, seconds, int(opts.extra.get("ls_kicks", 400)))
    name, split, slot, value = hints[0]
    return latency_solution(problem, "latency-local-search", split, slot, "heuristic", t0,
                            {"hint": name, "hints": {h[0]: h[3] for h in hints}, "q": q}, claimed=value)


def _groups_whole(problem: Problem, slot: np.ndarray) -> bool:
    """Does every colocation group sit in one subgraph? (The local search moves groups whole.)"""
    return all(np.unique(slot[g]).size == 1 for g in problem.groups)


def _decode(problem: Problem, slot_of: np.ndarray, ns: int, q: int) -> tuple[np.ndarray, np.ndarray, float] | None:
    """(split, slot, latency) of a model's global slot per node (slot ns = CPU), if the evaluator
    finds it valid."""
    split = np.where(slot_of < ns, slot_of // q, -1)
    slot = np.where(slot_of < ns, slot_of % q, 0)
    ev = evaluate_latency(problem, split, slot)
    return None if ev.violations else (split, slot, ev.value)


def _better_hint(best: tuple[np.ndarray, np.ndarray, float] | None, hints: list) -> tuple[np.ndarray, np.ndarray, float] | None:
    """The best warm start when it beats the solver's answer (or the solver has none)."""
    if hints and (best is None or hints[0][3] < best[2]):
        return (hints[0][1], hints[0][2], hints[0][3])
    return best
