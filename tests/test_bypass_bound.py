"""The bypass bound (placement/bypass_bound.py): never above the brute-force optimum on tiny
instances built around a chain with branches that leave it and rejoin it (static and peak memory,
any path as the chain), never above the proved msr-fiddle optima, never below the critical path;
its threshold split against an enumeration of the subsets."""
from __future__ import annotations

import itertools
import random
import threading

import numpy as np
import pytest

from formulations.bruteforce import enumerate_best
from placement.bounds import lower_bounds
from placement.bypass_bound import _apart_span, _away, _pinned_load, _same_device_span, _split, chain_bound
from placement.comm_bound import heads
from placement.forced_bound import forced_bound
from placement.formats.fiddle import read_fiddle
from placement.memory_path_bound import best_path
from placement.problem import Problem, make_problem
from tests.conftest import random_problem


def ladder(seed: int, memory_model: str) -> Problem:
    """A chain of 3-5 nodes and 1-3 branches (1-2 nodes each) from a chain node to a later one or
    to nowhere (a pendant, like a weight gradient); times 1-4, transfers 0-8, 2-3 devices, memory
    that binds on about half of them."""
    rng = random.Random(seed)
    length = rng.randint(3, 5)
    nodes = [{"id": f"c{i}", "time": rng.randint(1, 4), "out_bytes": rng.randint(0, 20),
              "param_bytes": rng.randint(0, 10)} for i in range(length)]
    edges = [{"src": f"c{i}", "dst": f"c{i + 1}", "comm": rng.randint(0, 8)} for i in range(length - 1)]
    budget = 8 - length  # brute force stays quick up to 8 nodes
    for b in range(rng.randint(1, 3)):
        size = min(rng.randint(1, 2), budget)
        if size <= 0:
            break
        budget -= size
        ids = [f"b{b}_{j}" for j in range(size)]
        nodes += [{"id": x, "time": rng.randint(1, 4), "out_bytes": rng.randint(0, 20),
                   "param_bytes": rng.randint(0, 10)} for x in ids]
        lo = rng.randint(0, length - 2)
        edges.append({"src": f"c{lo}", "dst": ids[0], "comm": rng.randint(0, 8)})
        edges += [{"src": x, "dst": y, "comm": rng.randint(0, 8)} for x, y in zip(ids, ids[1:])]
        if rng.random() < 0.75:
            edges.append({"src": ids[-1], "dst": f"c{rng.randint(lo + 1, length - 1)}", "comm": rng.randint(0, 8)})
    if seed % 4 == 0 and len(nodes) > 3:  # a colocation pair only removes placements
        nodes[0]["colocate"] = nodes[-1]["colocate"] = "g"
    need = sum(x["param_bytes"] + (x["out_bytes"] if memory_model == "static" else 0) for x in nodes)
    one = max(x["param_bytes"] + x["out_bytes"] for x in nodes)
    cap = max(need * rng.uniform(0.4, 1.2), one * (1.2 if memory_model == "static" else 3.0), 1.0)
    return make_problem(nodes, edges, devices=rng.randint(2, 3), memory=cap, name=f"ladder{seed}")


def fan(seed: int, memory_model: str) -> Problem:
    """A chain x -> a1 [-> a2] -> y and 2-4 one-node branches x -> b -> y (one window with several
    members, the case the energy terms are about), 2-3 devices."""
    rng = random.Random(seed)
    chain = ["x", "a1", "a2", "y"] if rng.random() < 0.5 else ["x", "a1", "y"]
    branches = [f"b{i}" for i in range(rng.randint(2, 7 - len(chain)))]
    nodes = [{"id": v, "time": rng.randint(1, 4), "out_bytes": rng.randint(0, 20), "param_bytes": rng.randint(0, 10)}
             for v in chain + branches]
    top = rng.choice([3, 6, 15])  # transfers up to a few operators, or far more
    edges = [{"src": u, "dst": v, "comm": rng.randint(0, top)} for u, v in zip(chain, chain[1:])]
    for b in branches:
        edges += [{"src": "x", "dst": b, "comm": rng.randint(0, top)}, {"src": b, "dst": "y", "comm": rng.randint(0, top)}]
    need = sum(x["param_bytes"] + (x["out_bytes"] if memory_model == "static" else 0) for x in nodes)
    one = max(x["param_bytes"] + x["out_bytes"] for x in nodes)
    cap = max(need * rng.uniform(0.5, 1.5), one * (1.2 if memory_model == "static" else 3.0), 1.0)
    return make_problem(nodes, edges, devices=rng.randint(2, 3), memory=cap, name=f"fan{seed}")


def some_paths(prob: Problem, rng: random.Random) -> list[list[int]]:
    """The longest path by time and two random maximal paths: the bound holds for any path."""
    out = [best_path(prob, prob.time, np.zeros(prob.m))]
    ptr, nbr, _ = prob.succ_ptr
    indeg = np.bincount(prob.dst, minlength=prob.n)
    for _ in range(2):
        v = rng.choice(np.flatnonzero(indeg == 0).tolist())
        path = [v]
        while ptr[v + 1] > ptr[v]:
            v = int(rng.choice(nbr[ptr[v]:ptr[v + 1]].tolist()))
            path.append(v)
        out.append(path)
    return out


@pytest.mark.parametrize("memory_model, family", [("static", ladder), pytest.param("peak", ladder, marks=pytest.mark.slow), ("static", fan),
                                                  pytest.param("peak", fan, marks=pytest.mark.slow)])  # 4 s; the bound reads no memory
def test_never_above_the_brute_force_optimum(memory_model, family):
    rng = random.Random(7)
    stronger = 0
    for seed in range(150 if memory_model == "static" else 80):
        prob = family(seed, memory_model)
        best, complete = enumerate_best(prob, memory_model)
        assert complete
        lbs = lower_bounds(prob, memory_model)
        assert lbs.bypass >= lbs.critical_path - 1e-9
        if best is None:
            continue
        assert lbs.best <= best[0] + 1e-9, f"seed {seed}: bounds {lbs.as_dict()} above the optimum {best[0]}"
        head, tail = heads(prob), heads(prob, reverse=True)
        for path in some_paths(prob, rng):
            value = chain_bound(prob, path, head, tail)
            assert value <= best[0] + 1e-9, f"seed {seed}, chain {path}: {value} above the optimum {best[0]}"
        others = max(lbs.critical_path, lbs.load, lbs.largest_node, lbs.largest_group, lbs.communication,
                     lbs.memory_path)
        stronger += lbs.bypass > others + 1e-9
    assert stronger > 0  # it does see branches the other bounds miss on some of them


def test_a_branch_pays_the_cheaper_of_sharing_the_chain_device_and_two_transfers():
    # chain x a1 a2 a3 a4 y, a branch x -> b1 -> b2 -> y; every node 1 ms, every transfer 2 ms.
    # The critical path, the communication bound (at y, b2 arrives at 5 when remote) and the
    # forced bound on its own say 6.
    # On one device the branch adds 2 (8); remote it pays 2 out and 2 back around 2 of work,
    # against 4 of chain between (8); cutting the chain pays its own transfers. So 8.
    chain = ["x", "a1", "a2", "a3", "a4", "y"]
    nodes = [{"id": v, "time": 1, "out_bytes": 0, "param_bytes": 0} for v in chain + ["b1", "b2"]]
    edges = [{"src": u, "dst": v, "comm": 2} for u, v in zip(chain, chain[1:])]
    edges += [{"src": "x", "dst": "b1", "comm": 2}, {"src": "b1", "dst": "b2", "comm": 2},
              {"src": "b2", "dst": "y", "comm": 2}]
    prob = make_problem(nodes, edges, devices=2)
    lbs = lower_bounds(prob, "static")
    assert lbs.critical_path == 6 and lbs.communication == 6 and forced_bound(prob, "static") == 6
    assert lbs.bypass == pytest.approx(8)
    assert enumerate_best(prob, "static")[0][0] == pytest.approx(8)


def test_weight_gradients_at_the_end_share_the_last_device_or_pay_a_transfer():
    # chain a -> b -> c; c feeds two pendant "weight gradients" w1, w2 (2 ms each, transfer 5).
    # Remote: 3 + 5 + 2 = 10; on c's device: 3 + 4 = 7 (or one of each: max(3 + 2, 10)); cutting
    # the chain does not help them. So 7; the critical path says 5, the communication bound 7 too
    # (c's successors), so this checks the end window is not above the optimum and finds it.
    nodes = [{"id": v, "time": 1, "out_bytes": 0, "param_bytes": 0} for v in "abc"]
    nodes += [{"id": w, "time": 2, "out_bytes": 0, "param_bytes": 0} for w in ("w1", "w2")]
    edges = [{"src": "a", "dst": "b", "comm": 1}, {"src": "b", "dst": "c", "comm": 1},
             {"src": "c", "dst": "w1", "comm": 5}, {"src": "c", "dst": "w2", "comm": 5}]
    prob = make_problem(nodes, edges, devices=3)
    assert lower_bounds(prob).bypass == pytest.approx(7)
    assert enumerate_best(prob, "static")[0][0] == pytest.approx(7)


def test_split_is_the_minimum_over_all_subsets():
    rng = random.Random(3)
    for _ in range(300):
        items = [(float(rng.randint(0, 12)), float(rng.randint(0, 5))) for _ in range(rng.randint(1, 6))]
        base = float(rng.randint(0, 6))
        brute = min(max(max((items[i][0] for i in away), default=0.0),
                        base + sum(items[i][1] for i in range(len(items)) if i not in away))
                    for k in range(len(items) + 1) for away in itertools.combinations(range(len(items)), k))
        assert _split(items, base) == pytest.approx(brute)


def test_away_is_never_above_the_minimum_over_all_subsets():
    # the exact quantity: min over U of max(base + t(rest), max X over U, the smallest transfer in
    # and out over U + t(U) / (K - 1)); _away relaxes it, so it may be lower, never higher
    rng = random.Random(4)
    tight = 0
    for _ in range(400):
        size, k = rng.randint(1, 6), rng.randint(2, 4)
        x = np.array([float(rng.randint(0, 15)) for _ in range(size)])
        t = np.array([float(rng.randint(1, 5)) for _ in range(size)])
        into = np.array([float(rng.randint(0, 6)) for _ in range(size)])
        out = np.array([float(rng.randint(0, 6)) for _ in range(size)])
        base = float(rng.randint(0, 6))
        exact = base + t.sum()
        for r in range(1, size + 1):
            for away in itertools.combinations(range(size), r):
                u = list(away)
                rest = base + t.sum() - t[u].sum()
                exact = min(exact, max(rest, x[u].max(), into[u].min() + out[u].min() + t[u].sum() / (k - 1)))
        value = _away(x.tolist(), t.tolist(), into.tolist(), out.tolist(), base, k)
        assert value <= exact + 1e-9
        tight += value >= exact - 1e-9
    assert tight > 200  # and it is the exact value most of the time


def test_spans_are_the_shortest_that_hold_the_work():
    # capacity of a span D: each device holds max(0, D - its delay); the answer is where it
    # reaches the work (checked against the capacity itself, just below and at the answer)
    rng = random.Random(5)
    for _ in range(300):
        work, k = float(rng.randint(1, 30)), rng.randint(2, 5)
        late, early = float(rng.randint(0, 10)), float(rng.randint(0, 10))
        same = lambda d, delay: d + (k - 1) * max(0.0, d - delay)  # noqa: E731
        apart = lambda d: max(0.0, d - early) + max(0.0, d - late) + (k - 2) * max(0.0, d - late - early)  # noqa: E731
        span = _same_device_span(work, late + early, k)
        assert same(span, late + early) == pytest.approx(work)
        assert same(span - 1e-6, late + early) < work
        span = _apart_span(work, late, early, k)
        assert apart(span) == pytest.approx(work)
        assert apart(span - 1e-6) < work


def test_pinned_load_is_the_smallest_span_that_holds_the_pinned_members():
    # the smallest D with D >= the time of the members whose y exceeds D, against a scan of the
    # candidates (0, every y, every sum of times)
    rng = random.Random(6)
    for _ in range(300):
        size = rng.randint(1, 6)
        y = np.array([float(rng.randint(0, 12)) for _ in range(size)])
        t = np.array([float(rng.randint(1, 5)) for _ in range(size)])
        cands = {0.0, *y.tolist()} | {float(t[list(c)].sum()) for r in range(1, size + 1)
                                      for c in itertools.combinations(range(size), r)}
        brute = min(d for d in cands if d >= t[y > d].sum())
        assert _pinned_load(y.tolist(), t.tolist()) == pytest.approx(brute)


def test_one_device_never_above_the_total_time():
    # one device runs everything one at a time and pays no transfer: the optimum is the total time
    for seed in range(200):
        prob = random_problem(seed, 1 + seed % 9, 1, zero_time_p=0.3)
        assert lower_bounds(prob).bypass <= float(prob.time.sum()) + 1e-9


def test_a_stopped_run_leaves_it_out_and_keeps_the_rest_valid():
    prob = ladder(6, "static")
    stop = threading.Event()
    stop.set()
    lbs = lower_bounds(prob, "static", stop)
    assert lbs.bypass == 0 and lbs.forced == 0
    assert lbs.communication == lower_bounds(prob, "static").communication  # computed before the check


def wide_ladder(seed: int) -> Problem:
    """A chain of 4-7 nodes and 1-3 windows of 1-4 parallel branches (1-2 nodes each), some ending
    nowhere; 8-20 nodes, 2-4 devices, transfers up to 3, 8 or 20 (beyond brute force)."""
    rng = random.Random(seed)
    length = rng.randint(4, 7)
    chain = [f"c{i}" for i in range(length)]
    nodes = [{"id": v, "time": rng.randint(1, 5), "out_bytes": rng.randint(0, 20), "param_bytes": 0} for v in chain]
    top = rng.choice([3, 8, 20])
    edges = [{"src": u, "dst": v, "comm": rng.randint(0, top)} for u, v in zip(chain, chain[1:])]
    count = 0
    for _ in range(rng.randint(1, 3)):
        lo = rng.randint(0, length - 2)
        hi = rng.randint(lo + 1, length - 1) if rng.random() < 0.8 else None
        depth = rng.randint(1, 2)
        for _ in range(rng.randint(1, 4)):
            ids = [f"b{count}_{d}" for d in range(depth)]
            count += 1
            nodes += [{"id": x, "time": rng.randint(1, 4), "out_bytes": rng.randint(0, 20), "param_bytes": 0} for x in ids]
            edges.append({"src": chain[lo], "dst": ids[0], "comm": rng.randint(0, top)})
            edges += [{"src": x, "dst": y, "comm": rng.randint(0, top)} for x, y in zip(ids, ids[1:])]
            if hi is not None:
                edges.append({"src": ids[-1], "dst": chain[hi], "comm": rng.randint(0, top)})
    cap = max(sum(x["out_bytes"] for x in nodes) * rng.uniform(0.5, 1.5), 25.0)
    return make_problem(nodes, edges, devices=rng.randint(2, 4), memory=cap, name=f"wide{seed}")


@pytest.mark.slow
def test_never_above_the_cpsat_optimum_on_wider_windows(monkeypatch):
    # CP-SAT proves the optimum with the bypass bound taken out of the bounds it is given (so an
    # invalid bound could not make itself look right), then the bound is compared with it
    import placement.bounds
    from formulations.cpsat import cpsat
    from placement.solution import SolveOptions
    proved = stronger = 0
    for seed in range(120):
        prob = wide_ladder(seed)
        with monkeypatch.context() as m:
            m.setattr(placement.bounds, "chain_bound", lambda *args, **kwargs: 0.0)
            sol = cpsat(prob, SolveOptions(time_limit=20, workers=1))
            others = lower_bounds(prob, "static").best
        if sol.status != "optimal":
            continue
        proved += 1
        head, tail = heads(prob), heads(prob, reverse=True)
        value = chain_bound(prob, best_path(prob, prob.time, np.zeros(prob.m)), head, tail)
        assert value <= sol.objective + 1e-6, f"seed {seed}: {value} above the proved optimum {sol.objective}"
        stronger += value > others + 1e-9
    assert proved >= 100 and stronger > 0


@pytest.mark.parametrize("graph, optimum", [("bert_l-3_inference", 223.650), ("bert_l-6_inference", 252.143)])
def test_never_above_the_proved_msr_fiddle_optima(workloads, graph, optimum):
    # optima proved by CP-SAT (static model, the file's devices and memory): bench/results_exact.md
    prob = read_fiddle(workloads / "latency-inputs" / "OperatorGraphs" / f"{graph}.json")
    lbs = lower_bounds(prob, "static")
    assert lbs.critical_path - 1e-9 <= lbs.bypass <= optimum * (1 + 1e-6)
    assert lbs.best <= optimum * (1 + 1e-6)


def _least_spans(prob: Problem, x: int, y: int) -> tuple[float, float]:
    """The least S(y) - F(x) over every placement (memory ignored: the bound reads none) and every
    order on each device, with x and y on one device and on two: the enumerated optimum of each
    case of the window (x, y); inf where a case has no schedule."""
    from formulations.bruteforce import _extensions, _reach, _schedule, placements
    dur = prob.time.tolist()
    anc = _reach(prob)
    src, dst = prob.src.tolist(), prob.dst.tolist()
    least = {True: np.inf, False: np.inf}
    for pl in placements(prob):
        pll = pl.tolist()
        succ: list[list[tuple[int, float]]] = [[] for _ in range(prob.n)]
        indeg0 = [0] * prob.n
        for e, (u, v) in enumerate(zip(src, dst)):
            succ[u].append((v, float(prob.comm[e]) if pll[u] != pll[v] else 0.0))
            indeg0[v] += 1
        per_dev = [[v for v in range(prob.n) if pll[v] == d and dur[v] > 0] for d in range(prob.k)]
        same = pll[x] == pll[y]
        for chains in itertools.product(*[list(_extensions(nodes, anc)) for nodes in per_dev]):
            st = _schedule(prob.n, dur, succ, indeg0, chains)
            if st is not None:
                least[same] = min(least[same], st[y] - st[x] - dur[x])
    return least[True], least[False]


def test_each_case_is_never_above_its_enumerated_optimum():
    """The window (x, y) of a fan: the bound of case B (x and y on two devices) never above the
    least span of the schedules that put them apart, the lesser of A and C never above that of
    those that keep them together, and the window's bound the least of the three."""
    binds = 0
    for seed in range(60):
        prob = fan(seed, "static")  # its memory is not read by the bound nor by the enumeration
        chain = best_path(prob, prob.time, np.zeros(prob.m))
        x, y = prob.index["x"], prob.index["y"]
        if chain[0] != x or chain[-1] != y:
            continue
        cases: dict[tuple[int, int], tuple[float, float, float]] = {}
        value = chain_bound(prob, chain, np.zeros(prob.n), np.zeros(prob.n), cases=cases)
        assert value == pytest.approx(chain_bound(prob, chain, np.zeros(prob.n), np.zeros(prob.n)))
        w_a, w_b, w_c = cases[0, len(chain) - 1]
        together, apart = _least_spans(prob, x, y)
        assert min(w_a, w_c) <= together + 1e-9, f"seed {seed}: A {w_a} / C {w_c} above {together}"
        assert w_b <= apart + 1e-9, f"seed {seed}: B {w_b} above {apart}"
        binds += w_b < min(w_a, w_c) - 1e-9
    assert binds > 0  # case B is the least on some of them

