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

import time

import numpy as np
from ortools.sat.python import cp_model

from formulations.cpsolver import cp_solver
from formulations.cpsolver import solve as run_cp

from placement.objectives import evaluate_maxload
from placement.problem import Problem
from placement.solution import Solution, SolveOptions

from .common import canonical_devices, ip_data, split_from_atoms
from .cpsat_model import DEFAULT_SCALE, _order_devices, build_cpsat  # noqa: F401  (re-exported)
from .dp import finish_solution, solve_dp
from .heuristics import local_search_split
from .lns import lns_improve

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
    rem = opts.remaining()
    budget = float(opts.extra.get("ls_seconds", 0.1 * (60.0 if rem is None else rem)))
    better = local_search_split(problem, opts.seed, 1, time.monotonic() + budget, start=split)
    ev_b = evaluate_maxload(problem, better)
    tag = "dpl"
    if not ev_b.violations and ev_b.value < evaluate_maxload(problem, split).value:
        split, tag = better, "dpl+local-search"
    lns_budget = float(opts.extra.get("lns_seconds", 0.5 * (60.0 if rem is None else rem)))
    if lns_budget > 0 and opts.extra.get("objective", "max-load") == "max-load":
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


def maxload_cpsat(problem: Problem, opts: SolveOptions) -> Solution:
    return solve_cpsat(problem, opts, "maxload-cpsat", contiguous=True)


def maxload_cpsat_nc(problem: Problem, opts: SolveOptions) -> Solution:
    return solve_cpsat(problem, opts, "maxload-cpsat-nc", contiguous=False)
