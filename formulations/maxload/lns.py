"""Warm start of the non-contiguous max-load IP: simulated annealing, then a device-neighbourhood LNS.

Stage 1 (anneal.py): a few annealing restarts with block moves on incrementally updated loads,
from the start and then from the best split so far; they cross the plateaus of the max-load
objective that stalled the CP-SAT neighbourhoods below (op BERT-12 inference: 134.34 -> 130.04).

Stage 2: CP-SAT's own LNS frees random variables; here a neighbourhood is a set F of devices
holding the current bottleneck device: every atom outside F stays where it is, the atoms of F may
move only among the devices of F. Such moves leave the loads outside F unchanged (a tensor crossing
a device d outside F depends only on whether its producer and some consumer are on d, which does
not change), so CP-SAT minimises the largest load within F, and the move is kept when the split's
(max-load, sum of squared loads) decreases as the evaluator computes it. The model is built once;
each neighbourhood is a copy of its proto with variable domains fixed. Deterministic given the seed
(fixed iteration counts, single-worker sub-solves with a deterministic time limit) unless the
wall-clock deadline cuts the search short.
"""
from __future__ import annotations

import itertools
import math
import time

import numpy as np
from ortools.sat.python import cp_model

from placement.objectives import evaluate_maxload
from placement.problem import Problem

from .anneal import LoadState, anneal
from .common import IPData, split_from_atoms
from .cpsat_model import build_cpsat


def _key(problem: Problem, data: IPData, atom_dev: np.ndarray) -> tuple[float, float, np.ndarray]:
    ev = evaluate_maxload(problem, split_from_atoms(data, atom_dev), n_cpus=data.l)
    load = ev.load
    return (math.inf if ev.violations else ev.value), float((load ** 2).sum()), load


def lns_improve(problem: Problem, data: IPData, atom_dev: np.ndarray, deadline: float, seed: int = 0,
                scale: float = 1e6, sub_seconds: float = 1.0, restarts: int = 4, anneal_share: float = 0.5,
                iters_per_atom: int = 7000, rate: float = 50000.0) -> tuple[np.ndarray, dict]:
    """Improve ``atom_dev`` (device per atom, CPU cores k..k+l-1) by annealing, then by
    :func:`device_lns` from the best split. Annealing gets ``anneal_share`` of the time to
    ``deadline``: up to ``restarts`` runs (the first from the start, the others from the best so
    far) of ``iters_per_atom`` x atoms block moves, as many as fit that share at ``rate`` moves per
    second (one shorter run when none fits). The run lengths depend on the time limit, never on the
    machine's speed, so the result is deterministic given the seed and the limit unless the
    deadline cuts a run. Returns the best assignment (never worse than the start by the evaluator's
    (max-load, sum of squared loads)) and counters (``best_at``: monotonic time the best was found)."""
    t0 = time.monotonic()
    best = atom_dev.copy()
    best_max, best_sq, _ = _key(problem, data, best)
    stats: dict = {"start": best_max, "anneal": [], "best_at": t0}
    kept = 0
    sa_budget = anneal_share * max(0.0, deadline - t0)
    iters = iters_per_atom * len(data.atoms)
    runs = min(restarts, int(sa_budget * rate // max(1, iters)))
    if runs == 0 and restarts > 0:
        runs, iters = 1, int(sa_budget * rate)
    sa_end = t0 + sa_budget
    state = LoadState(data, best) if runs > 0 and iters > 0 else None
    for r in range(runs if state is not None else 0):
        if time.monotonic() > sa_end - 0.5:
            break
        src = atom_dev if r == 0 else best
        cand, st = anneal(data, problem.memory, src, iters, sa_end, seed=seed * 7919 + r, state=state)
        c_max, c_sq, _ = _key(problem, data, cand)
        st.update({"from": "start" if r == 0 else "best", "value": c_max, "s": time.monotonic() - t0})
        stats["anneal"].append(st)
        if c_max < best_max - 1e-9 or (c_max <= best_max + 1e-9 and c_sq < best_sq - 1e-9):
            best, best_max, best_sq = cand, c_max, c_sq
            stats["best_at"] = st["best_at"]
            kept += 1
    stats["after_anneal"] = best_max
    best, dstats = device_lns(problem, data, best, deadline, seed, scale, sub_seconds)
    if dstats["improved"]:
        stats["best_at"] = dstats["best_at"]
    stats.update({k: v for k, v in dstats.items() if k not in ("start", "best_at")})
    stats["improved"] = kept + dstats["improved"]  # times the best split was replaced
    return best, stats


def device_lns(problem: Problem, data: IPData, atom_dev: np.ndarray, deadline: float, seed: int = 0,
               scale: float = 1e6, sub_seconds: float = 1.0) -> tuple[np.ndarray, dict]:
    """Improve ``atom_dev`` until ``deadline`` or until every neighbourhood of the schedule fails
    in a row (the bottleneck device with each other device, then with each two others, then the
    three most loaded with the two least loaded, then random sets of four holding the two most
    loaded; 2 (devices - 1) of those); returns the best assignment found and counters."""
    model, v = build_cpsat(problem, data, False, "max-load", scale, None, symmetry=False)
    nd, na = data.k + data.l, len(data.atoms)
    xidx = [[xi.Index() for xi in row] for row in v["x"]]
    load_idx = [(f.Index(), b.Index()) for f, b in zip(v["fw"], v["bw"])]
    rng = np.random.default_rng(seed)
    cur = atom_dev.copy()
    cur_max, cur_sq, load = _key(problem, data, cur)
    stats = {"steps": 0, "improved": 0, "start": cur_max}
    fails = 0
    m = nd - 1
    n_pairs, n_triples = m, m * (m - 1) // 2
    while time.monotonic() < deadline - 0.5 and fails < n_pairs + n_triples + 2 * m:
        stats["steps"] += 1
        top = int(np.argmax(load))
        others = sorted((d for d in range(nd) if d != top), key=lambda d: load[d])
        if fails < n_pairs:  # the bottleneck with each other device, least loaded first
            pick, dtime = [others[fails]], sub_seconds
        elif fails < n_pairs + n_triples:  # with each two others, least loaded pairs first
            pairs = sorted(itertools.combinations(others, 2), key=lambda q: load[q[0]] + load[q[1]])
            pick, dtime = list(pairs[fails - n_pairs]), 2 * sub_seconds
        elif fails == n_pairs + n_triples and m >= 4:  # the three most loaded with the two least loaded
            pick, dtime = others[-2:] + others[:2], 3 * sub_seconds
        else:  # with the second most loaded and two random others
            rest = others[:-1]
            pick = [others[-1]] + rng.choice(rest, size=min(2, len(rest)), replace=False).tolist()
            dtime = 3 * sub_seconds
        fset = [top] + [int(d) for d in pick]
        m2 = model.clone()
        pr = m2.Proto()
        for a in range(na):
            if cur[a] in fset:
                for i in range(nd):
                    if i not in fset:
                        _fix(pr, xidx[a][i], 0)
            else:
                _fix(pr, xidx[a][int(cur[a])], 1)
        m2.clear_objective()
        loads = [m2.GetIntVarFromProtoIndex(load_idx[i][0]) + m2.GetIntVarFromProtoIndex(load_idx[i][1]) for i in fset]
        mf = m2.NewIntVar(0, int(load.max() * scale) + 1, "maxF")
        for e in loads:
            m2.Add(mf >= e)
        m2.Minimize(mf * 1000 + sum(loads))
        for a in range(na):
            if cur[a] in fset:
                for i in fset:
                    m2.AddHint(m2.GetBoolVarFromProtoIndex(xidx[a][i]), int(cur[a] == i))
        solver = cp_model.CpSolver()
        solver.parameters.num_workers = 1
        solver.parameters.random_seed = int(seed + stats["steps"])
        solver.parameters.max_deterministic_time = dtime
        solver.parameters.max_time_in_seconds = max(0.1, deadline - time.monotonic())
        t_solve = time.monotonic()
        st = solver.Solve(m2)
        stats.setdefault("solve_s", 0.0)
        stats["solve_s"] += time.monotonic() - t_solve
        if st not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
            fails += 1
            continue
        new = cur.copy()
        for a in range(na):
            if cur[a] in fset:
                new[a] = next(i for i in fset if solver.Value(m2.GetBoolVarFromProtoIndex(xidx[a][i])))
        n_max, n_sq, n_load = _key(problem, data, new)
        if (n_max, n_sq) < (cur_max - 1e-9, cur_sq) or (abs(n_max - cur_max) <= 1e-9 and n_sq < cur_sq - 1e-9):
            cur, cur_max, cur_sq, load = new, n_max, n_sq, n_load
            stats["improved"] += 1
            stats["best_at"] = time.monotonic()
            fails = 0
        else:
            fails += 1
    stats["end"] = cur_max
    return cur, stats


def _fix(proto, index: int, value: int) -> None:
    dom = proto.variables[index].domain
    dom[0] = value
    dom[1] = value
