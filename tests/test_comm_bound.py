"""The communication-aware bound (placement/comm_bound.py): never above the brute-force optimum
(static and peak), never above the proved msr-fiddle optima, never below the critical path."""
from __future__ import annotations

import random

import pytest

from formulations.bruteforce import enumerate_best
from placement.bounds import lower_bounds
from placement.comm_bound import _join, comm_bound
from placement.formats.fiddle import read_fiddle
from placement.problem import make_problem
from tests.conftest import random_problem


def tiny(seed: int, memory_model: str):
    rng = random.Random(seed)
    prob = random_problem(seed, rng.randint(3, 7), rng.randint(2, 3), edge_p=0.5)
    need = prob.param_bytes + (prob.out_bytes if memory_model == "static" else 0.0)
    return prob.with_devices(prob.k, max(float(need.sum()) * rng.uniform(0.4, 1.2), float(prob.param_bytes.max() + prob.out_bytes.max()) * 1.2))


@pytest.mark.parametrize("memory_model", ["static", "peak"])
def test_never_above_the_brute_force_optimum(memory_model):
    stronger = 0
    for seed in range(60):
        prob = tiny(seed, memory_model)
        best, complete = enumerate_best(prob, memory_model)
        assert complete
        bound = comm_bound(prob)
        assert bound >= lower_bounds(prob).critical_path - 1e-9
        if best is not None:
            assert bound <= best[0] + 1e-9, f"seed {seed}: bound {bound} above the optimum {best[0]}"
            stronger += bound > lower_bounds(prob).critical_path + 1e-9
    assert stronger > 0  # the bound does see communication on some of them


def test_a_fork_join_pays_the_cheaper_of_transfer_and_serialisation():
    # a -> {b, c} -> d, all of time 4, transfers of 1, two devices. The critical path says 12. At d,
    # b and c either share d's device (one after the other: 4 + 4 + 4 = 12) or one of them arrives
    # by transfer (4 + 4 + 1 = 9): d starts at 9 at the earliest, ends at 13, which the schedule
    # a | b on dev0, c on dev1 from 5, d on dev1 at 9 reaches: the bound is the optimum.
    nodes = [{"id": x, "time": 4, "out_bytes": 0, "param_bytes": 0} for x in "abcd"]
    edges = [{"src": u, "dst": v, "comm": 1} for u, v in ("ab", "ac", "bd", "cd")]
    prob = make_problem(nodes, edges, devices=2)
    assert lower_bounds(prob).critical_path == 12
    assert comm_bound(prob) == 13
    best, _ = enumerate_best(prob, "static")
    assert best[0] == 13


def test_join_is_the_minimum_over_all_subsets():
    rng = random.Random(0)
    for _ in range(300):
        d = rng.randint(1, 6)
        release = [float(rng.randint(0, 9)) for _ in range(d)]
        dur = [float(rng.randint(0, 5)) for _ in range(d)]
        arrive = [r + t + rng.randint(0, 6) for r, t in zip(release, dur)]
        brute = float("inf")
        for mask in range(1 << d):
            local = [i for i in range(d) if mask >> i & 1]
            remote = max((arrive[i] for i in range(d) if not mask >> i & 1), default=0.0)
            serial = max((release[i] + sum(dur[j] for j in local if release[j] >= release[i]) for i in local), default=0.0)
            brute = min(brute, max(remote, serial))
        assert _join(arrive, release, dur) == pytest.approx(brute)


@pytest.mark.parametrize("graph, optimum", [("bert_l-3_inference", 223.650), ("bert_l-6_inference", 252.143)])
def test_never_above_the_proved_msr_fiddle_optima(workloads, graph, optimum):
    # optima proved by CP-SAT (static model, the file's devices and memory): bench/results_exact.md
    prob = read_fiddle(workloads / "latency-inputs" / "OperatorGraphs" / f"{graph}.json")
    bound = comm_bound(prob)
    assert lower_bounds(prob).critical_path - 1e-9 <= bound <= optimum * (1 + 1e-6)
