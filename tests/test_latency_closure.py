"""Closure bound of the latency (formulations/latency/closure.py): each run's min cut equals the
least duration found by enumerating subgraphs, the bound lies between the interval bound and the
brute-force optimum on every path, the lazy DP equals the DP with every run strengthened, and the
solver stops with a proved answer when the bound meets its split."""
from __future__ import annotations

import itertools
from pathlib import Path

import numpy as np
import pytest

from formulations.latency.bounds import _reach_positions, path_min_latency, run_costs
from formulations.latency.closure import (RunCut, _dp, closure_path_bound, closure_split,
                                          latency_closure_bound)
from placement.objectives import cpu_time, evaluate_latency, node_bytes, supported
from placement.solution import SolveOptions
from test_latency import all_paths, brute_force_q, tricky_problem


def subgraph_duration(p, members: np.ndarray) -> float:
    """Reads + compute + writes of ``members`` as one subgraph, by the evaluator (every other node
    on a CPU)."""
    split = np.full(p.n, -1)
    split[members] = 0
    ev = evaluate_latency(p, split)
    sub = ev.subgraphs[0]
    return sub["comm_in"] + sub["compute"] + sub["comm_out"]


def allowed_sets(p, inside: np.ndarray, outside: np.ndarray, q: int):
    """Every node set holding ``inside``, avoiding ``outside`` and unsupported nodes, and (q = 1)
    closed under colocation."""
    free = [u for u in range(p.n) if not inside[u] and not outside[u] and supported(p)[u]]
    for r in range(len(free) + 1):
        for extra in itertools.combinations(free, r):
            mask = inside.copy()
            mask[list(extra)] = True
            if (mask & ~supported(p)).any():
                continue
            if q == 1 and any(0 < mask[g].sum() < g.size for g in p.groups):
                continue
            yield np.flatnonzero(mask)


@pytest.mark.parametrize("seed", range(8))
def test_run_cut_is_the_least_subgraph_duration(seed):
    p = tricky_problem(200 + seed, 6, 2)
    rng = np.random.default_rng(seed)
    rc = RunCut(p, q=1)
    cap = float(p.memory.max())
    for _ in range(6):
        label = rng.integers(0, 3, p.n)  # 0 free, 1 inside, 2 outside
        label[rng.integers(p.n)] = 1  # a run holds at least one node
        inside, outside = label == 1, label == 2
        sets = list(allowed_sets(p, inside, outside, 1))
        want = min((subgraph_duration(p, s) for s in sets), default=np.inf)
        got, members = rc.least_duration(inside, outside)
        if not np.isfinite(want):
            assert not np.isfinite(got)
            continue
        assert got == pytest.approx(want, abs=1e-6)
        assert subgraph_duration(p, members) == pytest.approx(want, abs=1e-6)  # the cut set attains it
        fitting = [subgraph_duration(p, s) for s in sets if node_bytes(p)[s].sum() <= cap]
        lagr, _ = rc.run_bound(inside, outside)
        assert lagr >= got - 1e-9
        if fitting:
            assert lagr <= min(fitting) + 1e-6


@pytest.mark.parametrize("seed", range(12))
def test_closure_bound_is_valid_on_every_path(seed):
    n = 4 + seed % 2
    k = 1 + seed % 3
    p = tricky_problem(seed, n, k)
    for q in (1, 2) if k <= 2 and n == 4 else (1,):
        opt = brute_force_q(p, q)
        if not np.isfinite(opt):
            continue
        for path in all_paths(p):
            res = closure_path_bound(p, path, q)
            assert res.complete
            assert path_min_latency(p, path, True, q) - 1e-9 <= res.bound <= opt + 1e-6, (seed, q, path)
            split = closure_split(p, res)
            if split is not None:
                assert evaluate_latency(p, split).value >= opt - 1e-9


def test_closure_bound_reaches_optima_the_interval_bound_misses():
    # over these seeds the closure bound meets the optimum strictly more often than the interval bound
    closure_tight = interval_tight = 0
    for seed in range(12):
        p = tricky_problem(seed, 5, 2)
        opt = brute_force_q(p, 1)
        if not np.isfinite(opt):
            continue
        closure_tight += abs(latency_closure_bound(p, q=1, top=20).bound - opt) < 1e-6
        interval_tight += abs(max(path_min_latency(p, x, True, 1) for x in all_paths(p)) - opt) < 1e-6
    assert closure_tight > interval_tight


@pytest.mark.parametrize("seed", range(4))
def test_lazy_dp_equals_dp_with_every_run_strengthened(seed):
    p = tricky_problem(50 + seed, 7, 3)
    rc = RunCut(p, q=1)
    for path in sorted(all_paths(p), key=len)[-3:]:
        r = len(path)
        cost, _ = run_costs(p, path, True, 1)
        cost = cost.copy()
        first, last = _reach_positions(p, path)
        for j in range(r):
            for i in range(j, r):
                val, _ = rc.run_bound((last >= j) & (first <= i), (first < j) | (last > i))
                cost[j, i] = max(cost[j, i], val)
        full, _ = _dp(cost, cpu_time(p)[np.asarray(path)], min(p.k, r))
        assert closure_path_bound(p, path, 1, runcut=rc).bound == pytest.approx(full, abs=1e-9)


def test_solver_stops_with_a_proved_split_when_the_bound_meets_it():
    from formulations.latency.exact import solve_latency_cpsat

    for seed in range(12):
        p = tricky_problem(seed, 5, 2)
        opt = brute_force_q(p, 1)
        if not np.isfinite(opt) or abs(latency_closure_bound(p, q=1).bound - opt) > 1e-6:
            continue
        sol = solve_latency_cpsat(p, SolveOptions(time_limit=10, workers=1, seed=0))
        assert sol.info["cpsat_status"] == "not run"  # the bound alone proved it
        assert sol.status == "optimal" and sol.objective == pytest.approx(opt, abs=1e-9)
        assert sol.objective == evaluate_latency(p, sol.info["split"], sol.info["slot"]).value
        return
    pytest.fail("no instance where the closure bound meets the optimum")


def test_bert3_closure_bound_certifies_its_split():
    from placement.formats.fiddle import read_fiddle

    root = Path(__file__).resolve().parents[2] / "shared" / "workloads" / "msr-fiddle" / "latency-inputs"
    p = read_fiddle(root / "OperatorGraphs" / "bert_l-3_inference.json")
    res = latency_closure_bound(p, q=1)
    split = closure_split(p, res)
    assert res.complete and split is not None
    value = evaluate_latency(p, split).value
    interval = max(path_min_latency(p, res.path, True, 1), 0.0)
    assert interval < res.bound <= value
    assert value - res.bound <= 1e-6 * value  # the split is optimal to within 1e-6
