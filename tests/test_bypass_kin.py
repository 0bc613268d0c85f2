"""The bypass bound's pinned kin (placement/bypass_kin.py, docs/scale.md "Pinned kin"): members
that leave the chain's device wait for the pinned members among their ancestors, one at a time.
Never above the exact optimum on thousands of tiny windows of parallel paths (static and peak,
zero-time nodes, cross edges, every option), never below the bound without the kin term, its
covering relaxation never above an enumeration of the subsets, and a hand-built block where it
binds."""
from __future__ import annotations

import itertools
import random

import numpy as np
import pytest

import placement.bypass_bound as bypass_bound
import placement.bypass_kin as bypass_kin
from formulations.bruteforce import enumerate_best
from placement.bounds import lower_bounds
from placement.bypass_bound import _away, _pinned_load, chain_bound
from placement.comm_bound import heads
from placement.memory_path_bound import best_path
from placement.problem import Problem, make_problem
from tests.guard import makespan_optimum as exact
from tests.test_bounds_adversarial import _options, _time
from tests.conftest import part_or_all, share_of, scaled


@pytest.fixture(autouse=True)
def kin_on_small_windows(monkeypatch):
    """The bound asks for kin only in windows of MIN_KIN_MEMBERS or more (cost); the tiny windows
    here are below that, so the term is switched on for them all: the proof does not need it."""
    monkeypatch.setattr(bypass_bound, "MIN_KIN_MEMBERS", 1)


def paths_window(seed: int, memory_model: str) -> Problem:
    """x -> 2-3 parallel paths of 1-2 nodes -> y (a ResNeXt block in small): the paths' first
    edges often far dearer than the rest, sometimes a cross edge between two paths, a pendant,
    zero-time nodes, 1-3 devices, and every option of the adversarial tests; at most 8 nodes."""
    rng = random.Random(f"kin-{memory_model}-{seed}")
    nodes = [{"id": v, "time": _time(rng, 0.15), "out_bytes": rng.randint(0, 10), "param_bytes": rng.randint(0, 4)}
             for v in ("x", "y")]
    edges = []
    dear = rng.choice([2, 6, 30])
    lanes = []
    budget = 6
    for j in range(rng.randint(2, 3)):
        depth = min(rng.randint(1, 2), budget)
        if depth <= 0:
            break
        budget -= depth
        ids = [f"p{j}_{i}" for i in range(depth)]
        lanes.append(ids)
        nodes += [{"id": v, "time": _time(rng, 0.15), "out_bytes": rng.randint(0, 10), "param_bytes": 0} for v in ids]
        edges.append({"src": "x", "dst": ids[0], "comm": dear if rng.random() < 0.7 else rng.randint(0, 3)})
        edges += [{"src": u, "dst": v, "comm": rng.randint(0, 3)} for u, v in zip(ids, ids[1:])]
        edges.append({"src": ids[-1], "dst": "y", "comm": rng.randint(0, 3)})
    if len(lanes) > 1 and rng.random() < 0.3:  # a cross edge: one path's head also feeds another's tail
        a, b = rng.sample(lanes, 2)
        if len(b) > 1:
            edges.append({"src": a[0], "dst": b[-1], "comm": rng.randint(0, 3)})
    if budget > 0 and rng.random() < 0.3:  # a pendant (a weight gradient) off one path
        nodes.append({"id": "w", "time": _time(rng), "out_bytes": 3, "param_bytes": 0})
        edges.append({"src": rng.choice(lanes)[0], "dst": "w", "comm": rng.randint(0, 3)})
    return _options(rng, nodes, edges, memory_model, rng.choice([1, 2, 2, 3]))


def _both(prob: Problem, path: list[int], monkeypatch) -> tuple[float, float]:
    """The chain bound with and without the pinned kin term (MAX_KIN_WORK = 0 leaves it out)."""
    head, tail = heads(prob), heads(prob, reverse=True)
    with_kin = chain_bound(prob, path, head, tail)
    with monkeypatch.context() as m:
        m.setattr(bypass_bound, "MAX_KIN_WORK", 0)
        without = chain_bound(prob, path, head, tail)
    return with_kin, without


@part_or_all
@pytest.mark.parametrize("memory_model", ["static", pytest.param("peak", marks=pytest.mark.slow)])  # peak: 12 s
def test_never_above_the_exact_optimum_on_tiny_windows(memory_model, share, monkeypatch):
    rng = random.Random(11)
    solved = rose = 0
    whole = 600 if memory_model == "static" else 300
    count = share_of(share, whole, whole // 3)
    for seed in range(count):
        prob = paths_window(seed, memory_model)
        best = exact(prob, memory_model)
        lbs = lower_bounds(prob, memory_model)
        paths = [best_path(prob, prob.time, np.zeros(prob.m))]
        ptr, nbr, _ = prob.succ_ptr
        v = prob.ids.index("x")
        path = [v]
        while ptr[v + 1] > ptr[v]:  # a random path from x as well: the bound holds for any chain
            v = int(rng.choice(nbr[ptr[v]:ptr[v + 1]].tolist()))
            path.append(v)
        paths.append(path)
        for p in paths:
            new, old = _both(prob, p, monkeypatch)
            assert new >= old - 1e-9, f"seed {seed}: the kin term lowered the bound ({new} < {old})"
            if best is not None:
                assert new <= best * (1 + 1e-9) + 1e-9, f"seed {seed}, chain {p}: {new} above the optimum {best}"
            rose += new > old + 1e-9
        if best is not None:
            solved += 1
            assert lbs.best <= best * (1 + 1e-9) + 1e-9, f"seed {seed}: {lbs.as_dict()} above {best}"
    assert solved >= scaled(400 if memory_model == "static" else 200, count, whole)


def three_paths(seed: int) -> Problem:
    """x -> h_j -> t_j -> y for j = 0, 1, 2: each head's input costs 50 to move (it stays with x),
    heads 1 ms, tails 1-4 ms, their transfers 0-3, 2-3 devices."""
    rng = random.Random(seed)
    nodes = [{"id": v, "time": 1, "out_bytes": 0, "param_bytes": 0} for v in ("x", "y", "h0", "h1", "h2")]
    edges = []
    for j in range(3):
        nodes.append({"id": f"t{j}", "time": rng.randint(1, 4), "out_bytes": 0, "param_bytes": 0})
        edges += [{"src": "x", "dst": f"h{j}", "comm": 50}, {"src": f"h{j}", "dst": f"t{j}", "comm": rng.randint(0, 3)},
                  {"src": f"t{j}", "dst": "y", "comm": rng.randint(0, 3)}]
    return make_problem(nodes, edges, devices=rng.randint(2, 3), name=f"paths{seed}")


@pytest.mark.parametrize("seed", [1005, 1855, 2417, 2881, 4053, 4342, 4455, 5193, 5450, 5643])
def test_rises_and_stays_below_the_optimum_where_it_binds(seed, monkeypatch):
    # the seeds of three_paths (10 of the 25 among the first 15,000) on which the kin term raises the bound
    prob = three_paths(seed)
    new, old = _both(prob, best_path(prob, prob.time, np.zeros(prob.m)), monkeypatch)
    assert old < new <= exact(prob, "static") + 1e-9
    assert lower_bounds(prob, "static").best <= exact(prob, "peak") + 1e-9


def test_a_block_whose_tails_wait_for_the_heads_kept_with_x(monkeypatch):
    # x -> h_j -> t_j -> y (j = 0, 1, 2), K = 2, every node 1 ms but t2 (2 ms); x -> h_j costs 50,
    # h_j -> t_j 3, t0 -> y and t1 -> y nothing, t2 -> y 3. The chain is x h2 t2 y; its cuts cost
    # 3, 3, 50, so with x and y apart S(y) - F(x) >= 3 + 3 = 6 (case B), and the chain away and back
    # 3 + 3 + 3 + 3 (case C). All on x's device (case A): the window's work is 3 (h2, t2) + h0, h1,
    # t0, t1 = 7; a tail leaving it returns after X2 = h + t + 3 = 5. Without kin: moving x of the
    # tails' time leaves max(7 - x, 5, 3 + x) (x = 2: 5), so the bound is 1 + 5 + 1 = 7. With kin: a
    # tail that leaves waits for its head, kept with x (50 to move), then 3 out, itself (1), 0 back:
    # the heads of the tails that left run one at a time, so max(7 - x, 5, 3 + x, 4 + x) over the
    # fractional x: x = 1.5, 5.5, and the bound 1 + 5.5 + 1 = 7.5. Whole groups (GROUPS): any x in
    # (0, 1] moves a tail and needs its head's full 1 (4 + 1, and 7 - x >= 6), x in (1, 2] both heads
    # (4 + 2): the least is 6 (x = 0: 7), so the bound is 1 + 6 + 1 = 8, the optimum (enumerated).
    nodes = [{"id": v, "time": 2 if v == "t2" else 1, "out_bytes": 0, "param_bytes": 0}
             for v in ("x", "y", "h0", "h1", "h2", "t0", "t1", "t2")]
    edges = []
    for j, back in enumerate((0, 0, 3)):
        edges += [{"src": "x", "dst": f"h{j}", "comm": 50}, {"src": f"h{j}", "dst": f"t{j}", "comm": 3},
                  {"src": f"t{j}", "dst": "y", "comm": back}]
    prob = make_problem(nodes, edges, devices=2, name="block")
    chain = best_path(prob, prob.time, np.zeros(prob.m))
    assert [prob.ids[v] for v in chain] == ["x", "h2", "t2", "y"]
    head, tail = heads(prob), heads(prob, reverse=True)
    assert chain_bound(prob, chain, head, tail) == pytest.approx(8.0, rel=1e-6)  # the window solved exactly
    monkeypatch.setattr(bypass_bound, "EXACT", False)  # the cases' own values
    new, old = _both(prob, chain, monkeypatch)
    assert old == pytest.approx(7.0) and new == pytest.approx(8.0)
    with monkeypatch.context() as m:
        m.setattr(bypass_kin, "GROUPS", False)
        assert _both(prob, chain, monkeypatch)[0] == pytest.approx(7.5)
    assert lower_bounds(prob, "static").bypass == pytest.approx(8.0)
    assert enumerate_best(prob, "static")[0][0] == pytest.approx(8.0)


def test_away_with_kin_is_never_above_the_minimum_over_all_subsets(monkeypatch):
    # the exact quantity: min over U of max(base + t(rest), max X over U, energy(U), and per side
    # the time of the kin of U's members not in U plus the least rho among them); a member's kin is
    # another member with a larger X (as in a window: the ancestor with the largest X); with whole
    # groups counted (bypass_kin.GROUPS) and without
    rng = random.Random(12)
    rose = grouped = 0
    for _ in range(1500):
        size, k = rng.randint(1, 7), rng.randint(2, 4)
        x = [float(rng.randint(0, 15)) for _ in range(size)]
        t = [float(rng.randint(1, 5)) for _ in range(size)]
        into = [float(rng.randint(0, 6)) for _ in range(size)]
        out = [float(rng.randint(0, 6)) for _ in range(size)]
        rho = [float(rng.randint(0, 12)) for _ in range(size)]
        base = float(rng.randint(0, 6))
        kin = []
        for u in range(size):
            sides = []
            for _side in range(2):
                higher = [g for g in range(size) if x[g] > x[u]]
                if higher and rng.random() < 0.7:
                    top = max(x[g] for g in higher)
                    g = rng.choice([g for g in higher if x[g] == top])
                    sides.append((x[g], t[g], g, rho[g]))
                else:
                    sides.append((-np.inf, 0.0, -1, 0.0))
            kin.append(tuple(sides))
        exact = base + sum(t)
        for r in range(1, size + 1):
            for away in itertools.combinations(range(size), r):
                terms = [base + sum(t) - sum(t[u] for u in away), max(x[u] for u in away),
                         min(into[u] for u in away) + min(out[u] for u in away) + sum(t[u] for u in away) / (k - 1)]
                for side in (0, 1):
                    kept = {kin[u][side][2] for u in away} - {-1} - set(away)
                    if kept:
                        terms.append(sum(t[g] for g in kept) + min(rho[g] for g in kept))
                exact = min(exact, max(terms))
        value = _away(x, t, into, out, base, k, kin)
        assert value <= exact + 1e-9
        rose += value > _away(x, t, into, out, base, k) + 1e-9
        with monkeypatch.context() as m:
            m.setattr(bypass_kin, "GROUPS", False)
            fractional = _away(x, t, into, out, base, k, kin)
        assert value >= fractional - 1e-9
        grouped += value > fractional + 1e-9
    assert rose > 50 and grouped > 20, (rose, grouped)


def test_pinned_load_with_tails_against_every_span():
    # the smallest D with D >= t(P) + min q over P, P = the members with y > D (nothing when P is
    # empty), against a scan of the candidates
    rng = random.Random(13)
    for _ in range(300):
        size = rng.randint(1, 6)
        y = [float(rng.randint(0, 15)) for _ in range(size)]
        t = [float(rng.randint(1, 5)) for _ in range(size)]
        q = [float(rng.randint(0, 5)) for _ in range(size)]

        def holds(d: float) -> bool:
            pinned = [u for u in range(size) if y[u] > d]
            return not pinned or d >= sum(t[u] for u in pinned) + min(q[u] for u in pinned)
        cands = {0.0, *y} | {sum(t[u] for u in c) + q[v] for r in range(1, size + 1)
                             for c in itertools.combinations(range(size), r) for v in c}
        brute = min(d for d in cands if holds(d))
        assert _pinned_load(y, t, q) == pytest.approx(brute)


@pytest.mark.slow
@pytest.mark.parametrize("memory_model", ["static", "peak"])
def test_never_above_the_exact_optimum_on_many_more_windows(memory_model, monkeypatch):
    for seed in range(600, 3600 if memory_model == "static" else 2100):
        prob = paths_window(seed, memory_model)
        best = exact(prob, memory_model)
        if best is None:
            continue
        new, old = _both(prob, best_path(prob, prob.time, np.zeros(prob.m)), monkeypatch)
        assert old - 1e-9 <= new <= best * (1 + 1e-9) + 1e-9, f"seed {seed}: {new} (without kin {old}), optimum {best}"
