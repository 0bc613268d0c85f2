"""The max-load integer program of Tarnawski et al. as a MIP (OR-Tools linear solver, SCIP by
default; ``opts.extra['mip_solver']`` picks another backend such as "CBC" or "HIGHS").

Same model as ip_cpsat.py, with continuous cross/z variables and exact (unscaled) coefficients:
cross[t, i] >= |x[p, i] - x[c, i]| for the producer atom p and each consumer atom c; contiguity by
Lemma 4.1 on forward nodes. The solver's best bound is reported as the lower bound (its own
tolerances apply; CP-SAT is the certifying model of this project).
"""
from __future__ import annotations

import time

import numpy as np
from ortools.linear_solver import pywraplp

from placement.objectives import evaluate_maxload
from placement.problem import Problem
from placement.solution import Solution, SolveOptions

from .common import canonical_devices, ip_data, split_from_atoms
from .dp import finish_solution
from .ip_cpsat import hint_split


def solve_mip(problem: Problem, opts: SolveOptions, name: str, contiguous: bool) -> Solution:
    t0 = time.monotonic()
    objective = opts.extra.get("objective", "max-load")
    backend = str(opts.extra.get("mip_solver", "SCIP"))
    solver = pywraplp.Solver.CreateSolver(backend)
    if solver is None:
        return Solution(name, "unknown", reason=f"{name}: OR-Tools has no {backend} backend", seconds=0.0)
    data = ip_data(problem)
    k, l = data.k, data.l
    nd = k + l
    na = len(data.atoms)
    x = [[solver.BoolVar(f"x{a}_{i}") for i in range(nd)] for a in range(na)]
    for a in range(na):
        solver.Add(sum(x[a]) == 1)
        if not data.allowed_acc[a]:
            for i in range(k):
                solver.Add(x[a][i] == 0)
    for i in range(k):
        solver.Add(solver.Sum([float(data.nbytes[a]) * x[a][i] for a in range(na) if data.nbytes[a]]) <= float(problem.memory[i]))
    if contiguous:
        fw_nodes = np.flatnonzero(data.forward)
        for i in range(nd):
            z = {int(v): solver.NumVar(0.0, 1.0, "") for v in fw_nodes}
            for v, zv in z.items():
                solver.Add(zv >= x[data.atom_of[v]][i])
            for u, v in data.fw_edges:
                au, av = data.atom_of[u], data.atom_of[v]
                solver.Add(z[v] <= z[u])
                if au != av:
                    solver.Add(z[v] <= x[av][i] - x[au][i] + 1)
    fw_load, bw_load = [], []
    for i in range(nd):
        fexpr, bexpr = [], []
        if i < k:
            fexpr += [float(data.acc_fw[a]) * x[a][i] for a in range(na) if data.acc_fw[a]]
            bexpr += [float(data.acc_bw[a]) * x[a][i] for a in range(na) if data.acc_bw[a]]
            for t, (pa, cons) in enumerate(zip(data.t_prod, data.t_cons)):
                c = solver.NumVar(0.0, 1.0, "")
                for b in cons:
                    solver.Add(c >= x[pa][i] - x[b][i])
                    solver.Add(c >= x[b][i] - x[pa][i])
                (bexpr if data.t_back[t] else fexpr).append(data.t_cost[t] * c)
        else:
            fexpr += [float(data.cpu_fw[a]) * x[a][i] for a in range(na) if data.cpu_fw[a]]
            bexpr += [float(data.cpu_bw[a]) * x[a][i] for a in range(na) if data.cpu_bw[a]]
        fw_load.append(solver.Sum(fexpr))
        bw_load.append(solver.Sum(bexpr))
    obj = solver.NumVar(0.0, solver.infinity(), "maxload")
    if objective == "max-load":
        for i in range(nd):
            solver.Add(obj >= fw_load[i] + bw_load[i])
    else:
        fm = solver.NumVar(0.0, solver.infinity(), "")
        bm = solver.NumVar(0.0, solver.infinity(), "")
        for i in range(nd):
            solver.Add(fm >= fw_load[i])
            solver.Add(bm >= bw_load[i])
        solver.Add(obj == fm + bm)
    solver.Minimize(obj)
    hint, hint_from = hint_split(problem, opts, contiguous)
    if hint is not None:
        ha = canonical_devices(data, hint)
        vars_, vals = [], []
        for a in range(na):
            for i in range(nd):
                vars_.append(x[a][i])
                vals.append(float(ha[a] == i))
        solver.SetHint(vars_, vals)
    rem = opts.remaining()
    solver.SetTimeLimit(int(1000 * (60.0 if rem is None else max(rem - (time.monotonic() - t0), 1.0))))
    if opts.workers:
        solver.SetNumThreads(int(opts.workers))
    status = solver.Solve()
    contig = "forward" if contiguous else "none"
    info = {"hint": hint_from, "backend": backend, "mip_status": int(status)}
    if status in (pywraplp.Solver.OPTIMAL, pywraplp.Solver.FEASIBLE):
        atom_dev = np.array([int(np.argmax([x[a][i].solution_value() for i in range(nd)])) for a in range(na)])
        split = split_from_atoms(data, atom_dev)
        bound = solver.Objective().BestBound()
    elif hint is not None:
        split, bound = hint, None
    else:
        return Solution(name, "infeasible" if status == pywraplp.Solver.INFEASIBLE else "unknown",
                        reason=f"{name}: solver status {status}", seconds=time.monotonic() - t0, info=info)
    es = evaluate_maxload(problem, split, objective=objective, contiguity=contig)
    if hint is not None:
        eh = evaluate_maxload(problem, hint, objective=objective, contiguity=contig)
        if not eh.violations and (es.violations or eh.value < es.value):
            split, es = hint, eh
    if es.violations:  # the solver's tolerances let through a split the evaluator refuses
        return Solution(name, "unknown", seconds=time.monotonic() - t0, info=info,
                        reason=f"{name}: the solver's split breaks constraints: {'; '.join(es.violations)}")
    value = es.value
    lb = None if bound is None else min(float(bound), value)
    info["gap"] = None if lb is None or value <= 0 else (value - lb) / value
    st = "optimal" if status == pywraplp.Solver.OPTIMAL and info["gap"] is not None and info["gap"] <= 1e-6 else "feasible"
    return finish_solution(problem, name, split, st, t0, info, lower_bound=lb, contiguity=contig, objective=objective)


def maxload_mip(problem: Problem, opts: SolveOptions) -> Solution:
    return solve_mip(problem, opts, "maxload-mip", contiguous=True)


def maxload_mip_nc(problem: Problem, opts: SolveOptions) -> Solution:
    return solve_mip(problem, opts, "maxload-mip-nc", contiguous=False)
