"""Pair bound of the latency (formulations/latency/pairs.py): each pair cut equals the least cost
found by enumerating two disjoint subgraphs, the pair DP without pair costs equals the closure DP,
and the bound lies between the closure bound and the brute-force optimum on every path."""
from __future__ import annotations

import itertools
from pathlib import Path

import numpy as np
import pytest

from formulations.latency.closure import RunCut, _dp, closure_path_bound
from formulations.latency.pairs import _pair_dp, crossing_weight, pair_cut, pair_path_bound
from placement.objectives import cpu_time, supported
from test_latency import all_paths, brute_force_q, tricky_problem
from test_latency_closure import subgraph_duration


@pytest.mark.parametrize("seed", range(6))
def test_pair_cut_is_the_least_cost_of_two_disjoint_subgraphs(seed):
    p = tricky_problem(300 + seed, 5, 2)
    rng = np.random.default_rng(seed)
    rc = RunCut(p, q=1)
    w = crossing_weight(p)
    for _ in range(4):
        la, lb = rng.integers(0, 3, p.n), rng.integers(0, 3, p.n)  # 0 free, 1 inside, 2 outside
        la[rng.integers(p.n)] = 1
        lb[rng.integers(p.n)] = 1
        in_a, out_a, in_b, out_b = la == 1, la == 2, lb == 1, lb == 2
        x = int(rng.integers(p.n))
        want = np.inf
        for labels in itertools.product(range(3), repeat=p.n):  # 0 neither, 1 in X_A, 2 in X_B
            lab = np.array(labels)
            xa, xb = lab == 1, lab == 2
            if (in_a & ~xa).any() or (in_b & ~xb).any() or (xa & (out_a | ~supported(p))).any() \
                    or (xb & (out_b | ~supported(p))).any():
                continue
            if any(0 < s[g].sum() < g.size for s in (xa, xb) for g in p.groups):
                continue
            cost = subgraph_duration(p, np.flatnonzero(xa)) + subgraph_duration(p, np.flatnonzero(xb))
            want = min(want, cost + (w[x] if lab[x] == 0 else 0.0))
        got = pair_cut(rc, in_a, out_a, 0.0, in_b, out_b, 0.0, x, float(w[x]))
        if np.isfinite(want):
            assert got == pytest.approx(want, abs=1e-6)
        else:
            assert not np.isfinite(got)


@pytest.mark.parametrize("seed", range(4))
def test_pair_dp_without_pair_costs_is_the_closure_dp(seed):
    p = tricky_problem(60 + seed, 7, 3)
    cpu = cpu_time(p)
    for path in sorted(all_paths(p), key=len)[-3:]:
        res = closure_path_bound(p, path, 1)
        runs = min(p.k, len(path))
        want, _ = _dp(res.cost, cpu[np.asarray(path)], runs)
        got, chosen, _ = _pair_dp(res.cost, {}, cpu[np.asarray(path)], runs)
        assert got == pytest.approx(want, abs=1e-9)
        # the runs it reports add up to its value with the CPU nodes between them
        on_cpu = set(range(len(path))) - {x for j, i in chosen for x in range(j, i + 1)}
        total = sum(res.cost[j, i] for j, i in chosen) + sum(cpu[path[x]] for x in on_cpu)
        assert total == pytest.approx(got, abs=1e-9)


@pytest.mark.parametrize("seed", range(8))
def test_pair_bound_is_valid_on_every_path(seed):
    k = 2 + seed % 2
    p = tricky_problem(seed, 5, k)
    for q in (1, 2) if k == 2 else (1,):
        opt = brute_force_q(p, q)
        if not np.isfinite(opt):
            continue
        for path in all_paths(p):
            res = closure_path_bound(p, path, q)
            pair = pair_path_bound(p, path, q, closure=res)
            assert pair.complete
            assert res.bound - 1e-9 <= pair.bound <= opt + 1e-6, (seed, q, path)


def test_pair_bound_charges_a_node_crossing_the_cut():
    # a -> b -> c -> d with a shortcut b -> x -> d; memory 10 holds two of the 5-byte nodes, two
    # accelerators: the path is cut {a, b} | {c, d}, and x (time 10) crosses that cut. The closure
    # bound leaves x out of both runs' sets (3 + 4 = 7); the pair bound makes x join a set or
    # charges its time 10 between the runs
    from placement.problem import make_problem

    nodes = [{"id": x, "time": t, "out_bytes": 0, "param_bytes": 5}
             for x, t in (("a", 1), ("b", 1), ("c", 1), ("d", 1), ("x", 10))]
    edges = [{"src": u, "dst": v, "comm": 1} for u, v in (("a", "b"), ("b", "c"), ("c", "d"), ("b", "x"), ("x", "d"))]
    p = make_problem(nodes, edges, devices=2, memory=10.0, node_attrs={"cpu_latency": [100.0] * 4 + [50.0]})
    res = closure_path_bound(p, [0, 1, 2, 3], 1)
    pair = pair_path_bound(p, [0, 1, 2, 3], 1, closure=res)
    assert res.bound == pytest.approx(7.0)
    # cheapest with x in a set: {c, d, x} reads b and computes 12 (13; its own memory is only
    # priced by the run's multiplier, here 0), after {a, b} (3): 16
    assert pair.bound == pytest.approx(16.0)
    assert pair.bound <= brute_force_q(p, 1)  # 57: x must go to a CPU


@pytest.mark.slow
def test_resnet50_pair_bound_certifies_the_sum_dp_split():
    from formulations.latency.closure import latency_closure_bound
    from formulations.maxload.dp import solve_dp
    from placement.formats.fiddle import read_fiddle
    from placement.objectives import evaluate_latency

    root = Path(__file__).resolve().parents[2] / "shared" / "workloads" / "msr-fiddle" / "latency-inputs"
    p = read_fiddle(root / "OperatorGraphs" / "resnet50_inference.json")
    split, _, _ = solve_dp(p, n_cpus=0, combine="sum", max_ideals=8000)
    value = evaluate_latency(p, split).value
    res = latency_closure_bound(p, q=1)
    pair = pair_path_bound(p, res.path, 1, closure=res)
    assert res.bound < pair.bound <= value
    assert value - pair.bound <= 1e-6 * value
