"""Annealing and LNS of the non-contiguous max-load path: incremental loads equal the evaluator's,
never worse than the start, deterministic, brute-force optimal on tiny instances, feasible."""
from __future__ import annotations

import itertools
import time

import numpy as np
import pytest

from formulations.maxload.anneal import LoadState, anneal
from formulations.maxload.common import ip_data, split_from_atoms
from formulations.maxload.lns import lns_improve
from placement.objectives import evaluate_maxload
from placement.problem import make_problem


def tiny(seed: int, n: int = 7, k: int = 2, memory_share: float = 0.6, cpus: int = 1):
    """A random DAG with per-edge costs (some producers send one tensor per edge), fan-out, a
    node unsupported on accelerators now and then, and binding memory."""
    rng = np.random.default_rng(seed)
    nodes = [{"id": i, "time": float(rng.integers(1, 10)), "out_bytes": 0, "param_bytes": float(rng.integers(1, 5))}
             for i in range(n)]
    edges = []
    uniform = rng.random(n) < 0.7
    cost = rng.integers(0, 6, n).astype(float)
    for v in range(1, n):
        for u in range(v):
            if rng.random() < 0.35 or (u == v - 1 and rng.random() < 0.6):
                c = cost[u] if uniform[u] else float(rng.integers(0, 6))
                edges.append({"src": u, "dst": v, "comm": c})
    total = sum(r["param_bytes"] for r in nodes)
    sup = (rng.random(n) > 0.1).tolist()
    return make_problem(nodes, edges, devices=k, memory=float(np.ceil(total * memory_share)),
                        node_attrs={"cpu_latency": rng.integers(5, 30, n).astype(float).tolist(), "supported": sup},
                        attrs={"max_cpus": cpus})


def brute_force(p) -> float:
    devices = list(range(p.k)) + [-1 - c for c in range(int(p.attrs["max_cpus"]))]
    best = np.inf
    for combo in itertools.product(devices, repeat=p.n):
        ev = evaluate_maxload(p, np.array(combo))
        if not ev.violations:
            best = min(best, ev.value)
    return best


def cpu_start(data) -> np.ndarray:
    return np.full(len(data.atoms), data.k)  # everything on the first CPU core: always feasible


@pytest.mark.parametrize("seed", range(5))
def test_incremental_loads_equal_the_evaluator(seed):
    p = tiny(seed, n=12, k=3, cpus=2)
    data = ip_data(p)
    rng = np.random.default_rng(seed)
    st = LoadState(data, rng.integers(0, data.k + data.l, len(data.atoms)))
    for _ in range(60):
        st.move(int(rng.integers(len(data.atoms))), int(rng.integers(data.k + data.l)))
        ev = evaluate_maxload(p, split_from_atoms(data, np.array(st.dev)), n_cpus=data.l)
        assert np.allclose(st.load, ev.load, atol=1e-9)


@pytest.mark.parametrize("seed", range(6))
def test_anneal_reaches_the_brute_force_optimum(seed):
    p = tiny(seed)
    data = ip_data(p)
    start = cpu_start(data)
    atoms, stats = anneal(data, p.memory, start, 20000, time.monotonic() + 60, seed=seed)
    ev = evaluate_maxload(p, split_from_atoms(data, atoms))
    assert not ev.violations
    assert ev.value == pytest.approx(stats["end"], abs=1e-9)
    assert ev.value <= evaluate_maxload(p, split_from_atoms(data, start)).value + 1e-9
    assert ev.value == pytest.approx(brute_force(p), rel=1e-9)


def test_anneal_is_deterministic_and_never_worse_than_its_start():
    p = tiny(11, n=14, k=3, memory_share=0.45)
    data = ip_data(p)
    start = cpu_start(data)
    runs = [anneal(data, p.memory, start, 3000, time.monotonic() + 60, seed=5)[0] for _ in range(2)]
    assert np.array_equal(runs[0], runs[1])
    other, _ = anneal(data, p.memory, runs[0], 10, time.monotonic() + 60, seed=6)  # too short to improve much
    v0 = evaluate_maxload(p, split_from_atoms(data, runs[0])).value
    assert evaluate_maxload(p, split_from_atoms(data, other)).value <= v0 + 1e-9


@pytest.mark.parametrize("seed", (2, 7))
def test_lns_improve_is_optimal_on_tiny_instances_and_reports_the_evaluator_value(seed):
    p = tiny(seed, n=7, k=2)
    data = ip_data(p)
    atoms, stats = lns_improve(p, data, cpu_start(data), time.monotonic() + 60, seed=0)
    ev = evaluate_maxload(p, split_from_atoms(data, atoms))
    assert not ev.violations and stats["end"] == ev.value
    assert ev.value == pytest.approx(brute_force(p), rel=1e-9)
