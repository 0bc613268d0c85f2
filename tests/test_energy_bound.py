"""The energy bound (placement/energy_bound.py): its sorted-sum computation against a direct scan
of every time, a hand instance, and never above the enumerated optimum on tiny graphs (static and
peak, every option of the adversarial tests), above every other bound on some."""
from __future__ import annotations

import random

import numpy as np
import pytest

from placement.bounds import lower_bounds
from placement.comm_bound import heads
from placement.energy_bound import energy_bound
from placement.problem import make_problem
from tests.guard import makespan_optimum as exact
from tests.test_bounds_adversarial import random_dag, solved_cases


def _scan(h: np.ndarray, t: np.ndarray, k: int) -> float:
    """theta + E(theta) / K at every value of h and h + t, E summed node by node."""
    best = 0.0
    for theta in np.concatenate([h, h + t, [0.0]]):
        work = sum(min(tv, max(0.0, hv + tv - theta)) for hv, tv in zip(h, t))
        if work > 1e-12:
            best = max(best, theta + work / k)
    return best


def test_sorted_sums_equal_a_direct_scan():
    rng = np.random.default_rng(3)
    for _ in range(300):
        n = int(rng.integers(1, 30))
        h = rng.choice([0.0, 0.5, 1.0, 2.0, 3.5], n) * rng.integers(0, 3, n)
        t = rng.choice([0.0, 0.25, 1.0, 2.0], n)
        q = rng.choice([0.0, 1.0, 4.0], n)
        k = int(rng.integers(1, 5))
        prob = make_problem([{"id": f"v{i}", "time": float(t[i]), "out_bytes": 0, "param_bytes": 0} for i in range(n)],
                            [], devices=k)
        assert energy_bound(prob, h, q) == pytest.approx(max(_scan(h, t, k), _scan(q, t, k)), abs=1e-9)


def test_a_narrow_start_then_a_wide_layer():
    """a -> b -> six nodes -> z, every node 1, no transfer cost, K = 2. The critical path is 4 and
    the load 4.5; from theta = 2 on (the fan's heads) the fan and z, 7 in all, are left for two
    devices: 2 + 3.5 = 5.5. The optimum is 6 (a, b, then the fan in three rounds, then z)."""
    fan = [f"f{i}" for i in range(6)]
    nodes = [{"id": v, "time": 1, "out_bytes": 0, "param_bytes": 0} for v in ["a", "b", "z"] + fan]
    edges = [{"src": "a", "dst": "b", "comm": 0}] + [{"src": "b", "dst": f, "comm": 0} for f in fan]
    edges += [{"src": f, "dst": "z", "comm": 0} for f in fan]
    prob = make_problem(nodes, edges, devices=2)
    assert energy_bound(prob, heads(prob), heads(prob, reverse=True)) == pytest.approx(5.5)
    lbs = lower_bounds(prob, "static")
    assert lbs.critical_path == pytest.approx(4.0) and lbs.load == pytest.approx(4.5)
    assert 5.5 - 1e-9 <= lbs.best <= exact(prob, "static") + 1e-9
    assert exact(prob, "static") == pytest.approx(6.0)


def _shaped(rng: random.Random) -> tuple[list[dict], list[dict]]:
    """A narrow chain into a layer of 2-4 parallel nodes (into a join, mostly), times 1-3,
    transfers 0-2, or a random DAG: where the devices must idle at the start or the end."""
    if rng.random() < 0.5:
        return random_dag(rng)
    head = [f"c{i}" for i in range(rng.randint(1, 2))]
    layer = [f"w{i}" for i in range(rng.randint(2, 4))]
    ids = head + layer + (["z"] if rng.random() < 0.6 else [])
    nodes = [{"id": v, "time": rng.randint(1, 3), "out_bytes": rng.randint(0, 3), "param_bytes": rng.randint(0, 1)} for v in ids]
    edges = [{"src": u, "dst": v, "comm": rng.choice([0, 0.5, 1, 2])} for u, v in zip(head, head[1:])]
    edges += [{"src": head[-1], "dst": w, "comm": rng.choice([0, 0.5, 1])} for w in layer]
    if "z" in ids:
        edges += [{"src": w, "dst": "z", "comm": rng.choice([0, 0.5, 1])} for w in layer]
    return nodes, edges


@pytest.mark.parametrize("memory_model", ["static", "peak"])
def test_never_above_the_enumerated_optimum_and_raises_the_best(memory_model, monkeypatch):
    """Tiny graphs with every option of the adversarial tests: the energy bound and the best bound
    with it never above the enumerated optimum, and the best bound higher with it than without it
    on some (the forced bound starts from the best of the others, so it is compared whole)."""
    import placement.bounds as bounds  # noqa: PLC0415

    solved = rose = 0
    for prob, best in solved_cases(_shaped, memory_model, 400 if memory_model == "static" else 160, 41):
        solved += 1
        lbs = lower_bounds(prob, memory_model)
        assert lbs.energy <= best * (1 + 1e-9) + 1e-9, (lbs.as_dict(), best)
        assert lbs.best <= best * (1 + 1e-9) + 1e-9, (lbs.as_dict(), best)
        with monkeypatch.context() as m:
            m.setattr(bounds, "energy_bound", lambda *args: 0.0)
            without = lower_bounds(prob, memory_model).best
        rose += lbs.best > without + 1e-9
    assert solved >= (300 if memory_model == "static" else 100) and rose >= (5 if memory_model == "static" else 2), (solved, rose)
