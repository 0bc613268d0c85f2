"""The chain's own kin in case C of the bypass bound (session 17; placement/bypass_kin.py ``lead``,
docs/scale.md "The chain's own kin"): when the chain leaves the device d of its window's ends, the
chain before its first cut runs on d beside the pinned kin of the members that left, so the last
of them to finish still needs its way out and back (the kin's, or the chain's own through its
cuts).

Never above the exact optimum (tests/guard.py, no bound of ours) on thousands of tiny blocks
built around an explicit chain x -> c0 [-> c1] -> c_last -> y whose first edge is dear (so c0
stays with x) and whose later edges are cheap (so the chain can leave), beside 1-2 member paths
x -> h -> t -> y (static and peak, K = 1-4, zero-time nodes, colocation, allowed devices,
finite and infinite capacities), both with every (first cut, last cut) pair and with the
fallback that keeps only the chain before the first cut; never below the bound without the term;
and a hand block where the term binds (derived below)."""
from __future__ import annotations

import random

import numpy as np
import pytest

import placement.bypass_bound as bypass_bound
import placement.bypass_kin as bypass_kin
from placement.bounds import lower_bounds
from placement.bypass_bound import chain_bound
from placement.bypass_kin import lead
from placement.comm_bound import heads
from placement.memory_path_bound import best_path
from placement.problem import Problem, make_problem
from tests.guard import makespan_optimum as exact
from tests.test_bounds_adversarial import _options, _time


@pytest.fixture(autouse=True)
def kin_on_small_windows(monkeypatch):
    """The bound asks for kin only in windows of MIN_KIN_MEMBERS or more (cost); the tiny windows
    here are below that, so the term is switched on for them all: the proof does not need it."""
    monkeypatch.setattr(bypass_bound, "MIN_KIN_MEMBERS", 1)


def chained_block(seed: int, memory_model: str) -> tuple[Problem, list[str]]:
    """x -> c0 [-> c1] -> cl -> y (the chain; its first edge dear half the time, the rest cheap)
    beside 1-2 paths x -> h_j [-> t_j] -> y (first edges dear half the time), sometimes a cross
    edge or the residual x -> y; half the time near the hand block (unit times, transfers 1-2),
    else times 0-4 (zero often) and transfers 0-5; K = 1-4 and every option of the adversarial
    tests; at most 8 nodes. Returns the problem and the chain's ids."""
    rng = random.Random(f"chainkin-{memory_model}-{seed}")
    near = rng.random() < 0.7

    def node(v: str, zero: float = 0.2) -> dict:
        return {"id": v, "time": 1 if near and rng.random() < 0.8 else _time(rng, zero),
                "out_bytes": rng.randint(0, 8), "param_bytes": rng.choice([0, 0, rng.randint(0, 4)])}

    def cheap() -> int:
        return rng.choice([1, 1, 2]) if near else rng.randint(0, 5)

    def dear() -> int:
        return 50 if near or rng.random() < 0.5 else rng.randint(0, 8)

    long_chain = rng.random() < 0.3
    chain = ["x", "c0", "c1", "cl", "y"] if long_chain else ["x", "c0", "cl", "y"]
    nodes = [node(v, 0.1) for v in chain]
    edges = [{"src": "x", "dst": "c0", "comm": dear()}]
    edges += [{"src": u, "dst": v, "comm": cheap()} for u, v in zip(chain[1:], chain[2:])]
    budget = 8 - len(chain)
    paths = []
    for j in range(rng.randint(1, 2)):
        depth = min(rng.choice([1, 2, 2]), budget)
        if depth <= 0:
            break
        budget -= depth
        ids = [f"h{j}", f"t{j}"][:depth]
        paths.append(ids)
        nodes += [node(v) for v in ids]
        edges.append({"src": "x", "dst": ids[0], "comm": dear()})
        edges += [{"src": u, "dst": v, "comm": cheap()} for u, v in zip(ids, ids[1:])]
        edges.append({"src": ids[-1], "dst": "y", "comm": cheap()})
    if len(paths) == 2 and len(paths[1]) == 2 and rng.random() < 0.2:
        edges.append({"src": paths[0][0], "dst": paths[1][1], "comm": cheap()})
    if rng.random() < 0.15:
        edges.append({"src": "x", "dst": "y", "comm": cheap()})
    k = rng.choice([1, 2, 2, 3, 3, 4])
    if near and rng.random() < 0.5:
        return make_problem(nodes, edges, devices=max(k, 2), name="chained"), chain
    return _options(rng, nodes, edges, memory_model, k), chain


def _bounds(prob: Problem, chain_ids: list[str]) -> tuple[list[float], list[float]]:
    """The bypass bound on the explicit chain and on the critical one, with and without the
    chain's own kin."""
    index = {str(v): i for i, v in enumerate(prob.ids)}
    chains = [[index[v] for v in chain_ids], best_path(prob, prob.time, np.zeros(prob.m))]
    head, tail = heads(prob), heads(prob, reverse=True)
    new = [chain_bound(prob, c, head, tail) for c in chains]
    saved, bypass_bound.CHAIN_KIN = bypass_bound.CHAIN_KIN, False
    try:
        old = [chain_bound(prob, c, head, tail) for c in chains]
    finally:
        bypass_bound.CHAIN_KIN = saved
    return new, old


def run(memory_model: str, seeds: range, every: int) -> tuple[int, int]:
    """(instances solved, solved instances where the term raised a bound): every bound checked
    against the bound without the term; the optimum enumerated where the term raised a bound and
    on every ``every``-th seed (the enumeration is what costs)."""
    solved = rose = 0
    for seed in seeds:
        prob, chain = chained_block(seed, memory_model)
        new, old = _bounds(prob, chain)
        for a, b in zip(new, old):
            assert np.isfinite(a) and a >= b - 1e-9, (memory_model, seed, new, old)
        up = any(a > b + 1e-9 for a, b in zip(new, old))
        if not up and seed % every:
            continue
        best = exact(prob, memory_model)
        if best is None:
            continue
        solved += 1
        rose += up
        for a in new:
            assert a <= best * (1 + 1e-9) + 1e-9, f"{memory_model} seed {seed}: bound {a} above the optimum {best}"
        assert lower_bounds(prob, memory_model).best <= best * (1 + 1e-9) + 1e-9, (memory_model, seed)
    return solved, rose


@pytest.mark.parametrize("pairs", [pytest.param(64, marks=pytest.mark.slow), 0])  # 0: the fallback (only the chain before the first cut); 64: 10 s more
# the bound reads no memory: the peak variant (6 s) runs with the slow tests
@pytest.mark.parametrize("memory_model", ["static", pytest.param("peak", marks=pytest.mark.slow)])
def test_never_above_the_optimum_and_it_binds(memory_model, pairs, monkeypatch):
    monkeypatch.setattr(bypass_bound, "MAX_CUT_PAIRS", pairs)
    solved, rose = run(memory_model, range(500), 50)
    assert solved >= 10 and rose >= 3, (solved, rose)


@pytest.mark.slow
@pytest.mark.parametrize("pairs", [64, 0])
@pytest.mark.parametrize("memory_model", ["static", "peak"])
def test_never_above_the_optimum_many_seeds(memory_model, pairs, monkeypatch):
    monkeypatch.setattr(bypass_bound, "MAX_CUT_PAIRS", pairs)
    solved, rose = run(memory_model, range(400, 8000), 4)
    assert solved >= 1000 and rose >= 50, (solved, rose)


def hand_block(k: int = 3) -> tuple[Problem, list[str]]:
    """x -> c0 -> c1 -> y (the chain) and x -> h_j -> t_j -> y for j = 1, 2; every node takes 1;
    x's edges cost 50 (c0, h1, h2 stay with x), all the others 1."""
    nodes = [{"id": v, "time": 1, "out_bytes": 1, "param_bytes": 0} for v in ("x", "c0", "c1", "y", "h1", "t1", "h2", "t2")]
    edges = [{"src": "x", "dst": v, "comm": 50} for v in ("c0", "h1", "h2")]
    edges += [{"src": u, "dst": v, "comm": 1} for u, v in (("c0", "c1"), ("c1", "y"), ("h1", "t1"), ("t1", "y"),
                                                           ("h2", "t2"), ("t2", "y"))]
    return make_problem(nodes, edges, devices=k, name="hand"), ["x", "c0", "c1", "y"]


def test_hand_block_where_the_chains_own_kin_binds():
    """D = S(y) - F(x); x's 50 transfers keep c0, h1, h2 on x's device d in any schedule under 50.
    Case C (y on d, c1 away: the chain pays 1 + 1, D >= 4): t_j stays on d or leaves after h_j and
    comes back (1 out, t_j, 1 back: 3). The bound's covering moves x of the tails' time (0 <= x
    <= 2) for as much of their kin's (h1, h2) time. Without the term: D >= max(5 - x, 3 + x) (d's
    load c0, h1, h2 and the tails kept; the kin then the tail's way), least 4 at x = 1. With it
    the last of c0 and the kin on d also needs min(3, c1 + 2) = 3: max(5 - x, 1 + 3 + x), least
    4.5 at x = 0.5. Case A (d runs c0, c1, h1, h2 and the kept tails): max(6 - x, 3 + x), least
    4.5; case B (x's device runs c0, h1, h2 and then 2 more to reach y elsewhere): 5. So W = 4
    without the term and 4.5 with it: the bound is 1 + W + 1 = 6 -> 6.5 (the covering's halves of
    a tail are what the enumeration does not allow). Counting whole groups (bypass_kin.GROUPS):
    any x > 0 moves a tail and needs its kin's full 1, so case C gives max(5 - x, 1 + 3 + 1) = 5
    and case A max(6 - x, 3 + 1 + ...) >= 5: W = 5 and the bound 7, the optimum (d: x, h1, h2, c0,
    c1; t1, t2 on two other devices, back at 5 and 6). Without the chain's kin it stays 6 (case C:
    max(5 - x, 3 + 1) = 4 at x = 1)."""
    prob, chain = hand_block()
    path = [[str(v) for v in prob.ids].index(v) for v in chain]
    assert chain_bound(prob, path, heads(prob), heads(prob, reverse=True)) == pytest.approx(7.0, rel=1e-6)  # solved exactly
    saved = bypass_kin.GROUPS, bypass_bound.EXACT
    bypass_bound.EXACT = False  # the cases' own values
    try:
        new, old = _bounds(prob, chain)
        assert new[0] == pytest.approx(7.0) and old[0] == pytest.approx(6.0)
        bypass_kin.GROUPS = False
        new, old = _bounds(prob, chain)
    finally:
        bypass_kin.GROUPS, bypass_bound.EXACT = saved
    assert new[0] == pytest.approx(6.5) and old[0] == pytest.approx(6.0)
    assert exact(prob, "static") == pytest.approx(7.0)
    assert lower_bounds(prob, "static").best <= 7.0 + 1e-9


def test_lead_takes_the_larger_of_the_kin_alone_and_the_chain_beside_it():
    assert lead(3.0, None) == 3.0
    assert lead(3.0, (0.0, 1.0)) == 3.0  # no chain time on d: the kin alone
    assert lead(3.0, (1.0, 3.0)) == 4.0  # the last of chain and kin needs min(3, 3) more
    assert lead(3.0, (1.0, 0.5)) == 3.0  # the chain's way back is short: the kin alone count more
    assert lead(3.0, (4.0, 0.5)) == 4.5
