"""The release bound (placement/release_bound.py): never above the brute-force optimum on tiny
instances built around a weight whose consumers are slow to reach (static and peak memory) and on
random graphs, never above the proved msr-fiddle optima; its value on a hand example
(checked by brute force too) where the work behind the
weight's transfers decides. (On graphs small enough for brute force the other bounds are as
strong; it matters at scale: the 10K LSTM's forward part, docs/scale.md.)"""
from __future__ import annotations

import random

import pytest

from formulations.bruteforce import enumerate_best
from placement.bounds import lower_bounds
from placement.comm_bound import heads
from placement.formats.fiddle import read_fiddle
from placement.problem import Problem, make_problem
from placement.release_bound import release_bound
from tests.conftest import random_problem, tiny_optimum


def weighted(seed: int, memory_model: str) -> Problem:
    """A weight w (time 0-1) feeding 2-4 lookups over slow transfers (3-12), a recurrence r_0 ->
    r_1 -> ... where r_i reads lookup i, sometimes a sink after it; times 1-3, 2-3 devices,
    memory that binds on some."""
    rng = random.Random(seed)
    steps = rng.randint(2, 3 if seed % 3 else 4)
    nodes = [{"id": "w", "time": rng.randint(0, 1), "out_bytes": rng.randint(0, 20), "param_bytes": rng.randint(0, 10)}]
    edges = []
    for i in range(steps):
        nodes.append({"id": f"l{i}", "time": rng.randint(1, 3), "out_bytes": rng.randint(0, 20), "param_bytes": 0})
        edges.append({"src": "w", "dst": f"l{i}", "comm": rng.randint(3, 12)})
    for i in range(min(steps, 7 - steps)):
        nodes.append({"id": f"r{i}", "time": rng.randint(1, 3), "out_bytes": rng.randint(0, 20), "param_bytes": 0})
        edges.append({"src": f"l{i}", "dst": f"r{i}", "comm": rng.randint(0, 3)})
        if i:
            edges.append({"src": f"r{i - 1}", "dst": f"r{i}", "comm": rng.randint(0, 3)})
    if len(nodes) < 8 and rng.random() < 0.5:
        last = nodes[-1]["id"]
        nodes.append({"id": "s", "time": rng.randint(1, 3), "out_bytes": 1, "param_bytes": 0})
        edges.append({"src": last, "dst": "s", "comm": rng.randint(0, 3)})
    need = sum(x["param_bytes"] + (x["out_bytes"] if memory_model == "static" else 0) for x in nodes)
    one = max(x["param_bytes"] + x["out_bytes"] for x in nodes)
    cap = max(need * rng.uniform(0.4, 1.2), one * (1.2 if memory_model == "static" else 3.0), 1.0)
    return make_problem(nodes, edges, devices=rng.randint(2, 3), memory=cap, name=f"weighted{seed}")


@pytest.mark.parametrize("memory_model", ["static", "peak"])
def test_never_above_the_brute_force_optimum(memory_model):
    for seed in range(150 if memory_model == "static" else 80):
        prob = weighted(seed, memory_model)
        best = tiny_optimum(prob, memory_model)
        if best is None:
            continue
        lbs = lower_bounds(prob, memory_model)
        assert lbs.release <= best[0] + 1e-9, f"seed {seed}: release bound {lbs.release} above the optimum {best[0]}"
        assert lbs.best <= best[0] + 1e-9


@pytest.mark.parametrize("seed", range(80))
def test_never_above_the_brute_force_optimum_on_random_graphs(seed):
    rng = random.Random(seed)
    prob = random_problem(seed, rng.randint(3, 7), rng.randint(2, 3), edge_p=rng.choice([0.3, 0.5]))
    best, complete = enumerate_best(prob, "static")
    assert complete and best is not None
    assert release_bound(prob, heads(prob)) <= best[0] + 1e-9


def test_the_work_behind_the_transfers_waits():
    # w feeds l0..l3 (3 ms each) over 10 ms transfers; r_i (1 ms) reads l_i and r_(i-1); 2 devices.
    # By theta = 10 only w's device can have run lookups, one at a time: at most 3 of them, so r3
    # (4 lookups behind it) runs after 10, and of the 12 ms of lookups at most 10 ran before:
    # 1 + 2 = 3 ms after 10 on 2 devices. The critical path (7) does not see the lookups queue on
    # one device (the communication bound does here, at w's tail: 13, the optimum).
    nodes = [{"id": "w", "time": 0, "out_bytes": 0, "param_bytes": 0}]
    edges = []
    for i in range(4):
        nodes += [{"id": f"l{i}", "time": 3, "out_bytes": 0, "param_bytes": 0},
                  {"id": f"r{i}", "time": 1, "out_bytes": 0, "param_bytes": 0}]
        edges += [{"src": "w", "dst": f"l{i}", "comm": 10}, {"src": f"l{i}", "dst": f"r{i}", "comm": 0}]
        if i:
            edges.append({"src": f"r{i - 1}", "dst": f"r{i}", "comm": 0})
    prob = make_problem(nodes, edges, devices=2, memory=1.0)
    assert release_bound(prob, heads(prob)) == pytest.approx(10 + 3 / 2)
    lbs = lower_bounds(prob, "static")
    assert lbs.critical_path == 7 and lbs.release == pytest.approx(11.5)
    best, complete = enumerate_best(prob, "static")
    assert complete and best[0] >= 11.5


@pytest.mark.parametrize("graph, optimum", [("bert_l-3_inference", 223.650), ("bert_l-6_inference", 252.143)])
def test_never_above_the_proved_msr_fiddle_optima(workloads, graph, optimum):
    # optima proved by CP-SAT (static model, the file's devices and memory): bench/results_exact.md
    prob = read_fiddle(workloads / "latency-inputs" / "OperatorGraphs" / f"{graph}.json")
    lbs = lower_bounds(prob, "static")
    assert lbs.release <= optimum * (1 + 1e-6)
    assert lbs.best <= optimum * (1 + 1e-6)


def small_training_step(seed: int) -> Problem:
    """A tiny unrolled recurrent training step: an embedding weight feeding S lookups over slow
    transfers, a recurrence, an output weight feeding S logits over slow transfers, a loss (the
    pivot), S weight gradients and their running sum (slow transfers both ways); 2-3 devices."""
    rng = random.Random(seed)
    steps = rng.randint(2, 5)
    slow = lambda: rng.randint(4, 9)  # noqa: E731
    node = lambda v, lo, hi: {"id": v, "time": rng.randint(lo, hi), "out_bytes": 1, "param_bytes": 0}  # noqa: E731
    nodes = [node("we", 0, 0), node("wo", 0, 0), node("loss", 0, 1)]
    edges = []
    for i in range(steps):
        nodes += [node(f"l{i}", 1, 3), node(f"r{i}", 1, 2), node(f"o{i}", 1, 3), node(f"g{i}", 1, 3), node(f"a{i}", 1, 2)]
        edges += [{"src": "we", "dst": f"l{i}", "comm": slow()}, {"src": f"l{i}", "dst": f"r{i}", "comm": rng.randint(0, 2)},
                  {"src": f"r{i}", "dst": f"o{i}", "comm": rng.randint(0, 2)}, {"src": "wo", "dst": f"o{i}", "comm": slow()},
                  {"src": f"o{i}", "dst": "loss", "comm": rng.randint(0, 2)}, {"src": "loss", "dst": f"g{i}", "comm": rng.randint(0, 2)},
                  {"src": f"g{i}", "dst": f"a{i}", "comm": slow()}]
        if i:
            edges += [{"src": f"r{i - 1}", "dst": f"r{i}", "comm": rng.randint(0, 2)},
                      {"src": f"a{i}", "dst": f"a{i - 1}", "comm": slow()}]
    return make_problem(nodes, edges, devices=rng.randint(2, 3), memory=float("inf"), name=f"step{seed}")


@pytest.mark.slow  # 8.5 s; the brute-force checks above keep the bound checked by default
def test_never_above_the_cpsat_optimum_on_small_training_steps(monkeypatch):
    # CP-SAT proves the optimum with the release and pivot bounds taken out of the bounds it is
    # given (so an invalid bound could not make itself look right), then they are compared with it
    import placement.bounds
    from formulations.cpsat import cpsat
    from placement.solution import SolveOptions
    proved = stronger = 0
    for seed in range(60):
        prob = small_training_step(seed)
        with monkeypatch.context() as m:
            m.setattr(placement.bounds, "release_bound", lambda *args, **kwargs: 0.0)
            m.setattr(placement.bounds, "pivot_bound", lambda *args, **kwargs: 0.0)
            sol = cpsat(prob, SolveOptions(time_limit=30, workers=1))
            others = lower_bounds(prob, "static").best
        if sol.status != "optimal":
            continue
        proved += 1
        lbs = lower_bounds(prob, "static")
        assert lbs.release <= sol.objective + 1e-6, f"seed {seed}: {lbs.release} above the proved optimum {sol.objective}"
        assert lbs.pivot <= sol.objective + 1e-6, f"seed {seed}: {lbs.pivot} above the proved optimum {sol.objective}"
        stronger += lbs.best > others + 1e-9
    assert proved >= 45 and stronger > 0
