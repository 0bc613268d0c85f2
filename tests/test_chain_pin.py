"""heuristics/chain_pin.py and heuristics/deadline_order.py: the accumulation chains of a generated
LSTM are its weights' (one per layer and the output layer, one node per step), none on the CNN and
transformer; on a hand-built gradient-accumulation graph chain-pin fits where ETF does not, with the
makespan and peak computed by hand; its answer is what the evaluator measures on its own order;
the deadline order runs in the evaluator exactly as simulated; determinism."""
from __future__ import annotations

import math
import re
from dataclasses import replace

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from heuristics.chain_pin import (accumulation_chains, busiest_chain, chain_devices, chain_pin, descendants, kept_prefix,
                                  readers_follow)
from heuristics.deadline_order import deadline_schedule, need_times
from heuristics.layer_bands import restricted
from heuristics.list_scheduling import etf, etf_schedule
from heuristics.portfolio import PEAK_ORDER, PEAK_TIGHT_ORDER
from placement.evaluator import evaluate
from placement.generate import generate
from placement.memory_bounds import memory_lower_bound
from placement.problem import make_problem
from placement.solution import SolveOptions
from solvers.methods import get
from tests.conftest import random_problem

PEAK = SolveOptions(memory_model="peak")
B, S, T = 100.0, 1.0, 8  # gradient bytes, the loss-gradient's bytes, time steps


def accumulation(memory: float):
    """s (the loss gradient) -> g_t (a weight gradient, B bytes) -> a_t = g_t + a_(t+1): eight steps,
    unit times; transfers cheap enough that ETF makes the gradients on both devices."""
    nodes = [{"id": "s", "time": 1.0, "out_bytes": S, "param_bytes": 0.0}]
    edges = []
    for t in range(T):
        nodes += [{"id": f"g{t}", "time": 1.0, "out_bytes": B, "param_bytes": 0.0},
                  {"id": f"a{t}", "time": 1.0, "out_bytes": B, "param_bytes": 0.0}]
        edges += [{"src": "s", "dst": f"g{t}", "comm": 0.1}, {"src": f"g{t}", "dst": f"a{t}", "comm": 0.5, "bytes": B}]
        if t + 1 < T:
            edges.append({"src": f"a{t + 1}", "dst": f"a{t}", "comm": 0.5, "bytes": B})
    return make_problem(nodes, edges, devices=2, memory=memory)


CAP = 3 * B + S + 10


def test_hand_built_chain_is_found():
    p = accumulation(CAP)
    chains = accumulation_chains(p, 1.0)
    assert len(chains) == 1
    path, feeders = chains[0]
    assert [p.ids[v] for v in path] == ["g7"] + [f"a{t}" for t in range(T - 1, -1, -1)]
    assert [[p.ids[v] for v in f] for f in feeders] == [[], []] + [[f"g{t}"] for t in range(T - 2, -1, -1)]
    assert accumulation_chains(p, B + 1) == []  # tensors below min_bytes: no chain


def test_fits_where_etf_does_not_with_hand_computed_values():
    p = accumulation(CAP)
    # ETF spreads the gradients over both devices: with unlimited memory its answer holds more than
    # three gradients on the chain's device; with the capacity it finds nothing
    free = accumulation(math.inf)
    e = etf(free, PEAK)
    assert evaluate(free, e.placement, e.order, "peak").peak_memory.max() > CAP
    assert etf(p, PEAK).placement is None
    sol = chain_pin(p, PEAK)
    assert sol.status == "heuristic"
    # by hand: every node on one device, each gradient summed as it is made (s, g7, a7, g6, a6, ...):
    # 17 unit-time nodes; live at most a_(t+1), g_t, a_t and s's output (read until g0 runs)
    ev = evaluate(p, sol.placement, sol.order, "peak")
    assert len(set(sol.placement.tolist())) == 1
    assert ev.makespan == pytest.approx(17.0) and sol.objective == pytest.approx(17.0)
    assert ev.peak_memory.max() == pytest.approx(3 * B + S)
    assert ev.feasible(p)


def test_generated_lstm_chains_are_its_weights():
    p = generate("lstm", 1500, seed=0, devices=4, memory_fraction=None)
    layers, steps = p.attrs["layers"], p.attrs["steps"]
    chains = accumulation_chains(p, 2e6)  # the embedding's 256 KB sums are below
    assert len(chains) == layers + 1
    names = sorted(re.sub(r"/t\d+/", "/", re.sub(r"^step\d+/", "", str(p.ids[c[0][1]]))) for c in chains)
    assert names == sorted([f"lstm/l{l}/W/grad_accum" for l in range(layers)] + ["output/grad_accum"])
    for path, feeders in chains:
        assert path.size == steps + 1  # the last step's gradient, then one sum per step
        assert all(str(p.ids[f]).endswith("grad_weight") for group in feeders for f in group)
        assert sum(len(g) for g in feeders) == steps - 1
    allowed = chain_devices(p.with_devices(4, 1e9), chains)
    for path, feeders in chains:  # each chain with its gradients on one device
        devs = {allowed[v] for v in path.tolist() + [f for g in feeders for f in g]}
        assert len(devs) == 1 and len(next(iter(devs))) == 1
    out = [c for c in chains if "output" in str(p.ids[c[0][1]])][0]
    busiest = allowed[int(out[0][0])][0]  # the output layer's chain is the busiest: no params beside it
    assert all(allowed[v] is not None and busiest not in allowed[v] for v in np.flatnonzero(p.param_bytes > 0))


@pytest.mark.parametrize("kind", ["cnn", "transformer"])
def test_no_chains_on_other_families(kind):
    p = generate(kind, 2000, seed=0, devices=4, memory_fraction=None)
    assert accumulation_chains(p, 0.0) == []
    assert chain_pin(p.with_devices(4, 1e12), PEAK).status == "unknown"


def test_chains_too_small_for_the_capacity_are_named_by_their_threshold():
    # an LSTM has accumulation chains, but at a huge capacity none carries 0.2% of it: the reason
    # says so (it read "no chain in the graph", which is not what happened)
    p = generate("lstm", 2000, seed=0, devices=4, memory_fraction=None)
    assert accumulation_chains(p, 0.0)
    sol = chain_pin(p.with_devices(4, 1e15), PEAK)
    assert sol.status == "unknown" and sol.placement is None
    assert "2e+12 bytes or more (0.002 x the smallest capacity)" in sol.reason


@pytest.fixture(scope="module")
def lstm_tight():
    p0 = generate("lstm", 1500, seed=0, memory_fraction=None)
    return p0.with_devices(4, 1.8 * memory_lower_bound(p0, "peak", 4)["best"])


def test_answer_is_the_evaluators_on_its_order_and_deterministic(lstm_tight):
    p = lstm_tight
    a = chain_pin(p, PEAK)
    assert a.status == "heuristic"
    ev = evaluate(p, a.placement, a.order, "peak")
    assert ev.feasible(p)
    assert a.objective == pytest.approx(ev.makespan, rel=1e-12)
    assert np.allclose(a.start, ev.start)
    b = get("chain-pin").func(p, PEAK)
    assert np.array_equal(a.placement, b.placement) and a.order == b.order and a.objective == b.objective


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 10_000), k=st.integers(1, 3))
def test_deadline_order_runs_as_simulated(seed, k):
    p = random_problem(seed, 9, k)
    rng = np.random.default_rng(seed)
    pl = rng.integers(0, k, p.n)
    ref = evaluate(p, pl)
    priority = need_times(p, pl, ref.start) if seed % 2 else rng.random(p.n)
    order, start = deadline_schedule(p, pl, priority)
    ev = evaluate(p, pl, order)
    assert np.allclose(ev.start, start)
    # each start is the arrived node needed first: no later node of the device had arrived with a
    # smaller (priority, topological rank)
    delay = np.where(pl[p.src] != pl[p.dst], p.comm, 0.0)
    arrival = np.zeros(p.n)
    np.maximum.at(arrival, p.dst, ev.finish[p.src] + delay)
    for d in range(k):
        seq = order[d]
        for i, v in enumerate(seq):
            for w in seq[i + 1:]:
                if arrival[w] <= ev.start[v] - 1e-9:
                    assert (priority[w], p.topo_rank[w]) > (priority[v], p.topo_rank[v])


def test_in_the_peak_portfolio_orders():
    assert PEAK_TIGHT_ORDER.index("band-split") < PEAK_TIGHT_ORDER.index("chain-pin") < PEAK_TIGHT_ORDER.index("min-memory")
    assert PEAK_ORDER.index("etf") < PEAK_ORDER.index("chain-pin") < PEAK_ORDER.index("pardnn")


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 10_000), k=st.integers(1, 3), share=st.sampled_from([1.0, 0.8, 0.5]))
def test_kept_prefix_keeps_the_reference_order_and_runs_as_simulated(seed, k, share):
    """kept_prefix: the nodes the reference ran before the head (and not after a gradient) come
    first, on each device in the reference's order; the waits it returns close no cycle with waits
    inside ``after``; the evaluator runs the order returned, without those waits, as simulated."""
    p = random_problem(seed, 10, k)
    rng = np.random.default_rng(seed)
    pl = rng.integers(0, k, p.n)
    ref = evaluate(p, pl, order=None)
    head = int(rng.integers(0, p.n))
    grads = rng.choice(p.n, size=2, replace=False)
    after = descendants(p, np.asarray(list(grads) + [head]))
    inside = np.flatnonzero(after)
    waits = [(int(u), int(v)) for u, v in rng.choice(inside, size=(3, 2)) if u != v and p.topo_rank[u] < p.topo_rank[v]]
    need = need_times(p, pl, ref.start)
    keep = kept_prefix(p, ref, need, head, after, share)
    kept = np.flatnonzero((ref.start < share * ref.start[head]) & ~after)
    assert sorted({v for w in keep for v in w}) == sorted(v for v in kept.tolist() if any(v in w for w in keep))
    order, start = deadline_schedule(p, pl, need, waits=waits + keep)
    ev = evaluate(p, pl, order, waits=waits)
    assert np.allclose(ev.start, start)
    for d in range(k):
        mine = [v for v in order[d] if v in set(kept.tolist())]
        assert mine == sorted(mine, key=lambda v: (ref.start[v], ref.finish[v], p.topo_rank[v]))


def test_kept_prefix_keeps_the_loss_of_the_reference_on_a_generated_lstm(lstm_tight):
    """On a generated LSTM the forward pass is run in ETF's order: the loss starts when it does in
    the reference, where the deadline order alone delays it."""
    p = lstm_tight
    chains = accumulation_chains(p, 0.002 * float(p.memory.min()))
    path, feeders = busiest_chain(p, chains)
    allowed = chain_devices(p, chains)
    sched = etf_schedule(replace(p, allowed=allowed, memory=np.full(p.k, math.inf)), 0.0, "static")
    ref = evaluate(p, sched.dev, order=sched.order, memory_model="peak")
    loss = list(p.ids).index("loss/total")
    after = descendants(p, np.asarray([f for g in feeders for f in g] + [int(path[0])]))
    need = need_times(p, sched.dev, ref.start)
    _, plain = deadline_schedule(p, sched.dev, need.copy())
    keep = kept_prefix(p, ref, need, int(path[0]), after)
    _, start = deadline_schedule(p, sched.dev, need, waits=keep)
    assert start[loss] == pytest.approx(ref.start[loss])
    assert plain[loss] > ref.start[loss] + 1e-6  # what the deadline order alone does here


def test_free_shared_frees_only_the_gradients_of_a_second_chain_on_a_device(lstm_tight):
    """chain_devices(free_shared=True): every chain's nodes are pinned as before; a chain's
    gradients stay pinned with it only when it is the first chain on its device; chain-pin answers
    the faster of both ways."""
    p = lstm_tight
    chains = accumulation_chains(p, 0.002 * float(p.memory.min()))
    strict = chain_devices(p, chains)
    free = chain_devices(p, chains, free_shared=True)
    first_on: dict[int, int] = {}
    for i, (path, feeders) in enumerate(chains):
        assert all(free[v] == strict[v] for v in path.tolist())
        first_on.setdefault(strict[int(path[0])][0], i)
    shared = 0
    for i, (path, feeders) in enumerate(chains):
        grads = [f for g in feeders for f in g]
        d = strict[int(path[0])][0]
        if first_on[d] == i:
            assert all(free[f] == (d,) for f in grads)
        else:
            shared += 1
            assert all(free[f] == p.allowed[f] for f in grads)
    assert shared > 0  # nine chains on four devices
    a = chain_pin(p, PEAK)
    assert a.objective == min(x for x in (a.objective, a.info["other"]["makespan"]) if x is not None)


@pytest.mark.parametrize("model", ["static", "peak"])
@pytest.mark.parametrize("restrict,coloc", [
    ({"s3": [1]}, None),  # a sum of the chain only on device 1
    ({"g0": [2]}, None),  # a gradient only on device 2
    ({"upd": [2]}, None),  # the weight's update only on device 2
    ({"f0": [2]}, {"g0": "x", "f0": "x"}),  # a gradient colocated with a node only on device 2
    ({"f1": [1]}, {"s2": "y", "f1": "y"}),  # a sum colocated with a node only on device 1
    ({"s2": [1], "s5": [2]}, None),  # no device takes the chain whole
])
def test_respects_allowed_devices_and_colocation(restrict, coloc, model):
    """Session 14 review: chain-pin's pins ignored ``allowed`` (the evaluator raised ScheduleError on
    its answer). It answers within the restrictions, as the evaluator checks."""
    from tests.test_chain_home import restricted_chain

    p = restricted_chain(restrict, coloc)
    sol = chain_pin(p, SolveOptions(memory_model=model))
    assert sol.status == "heuristic", sol.reason  # a chain no device takes whole is left to ETF
    assert p.allowed_mask()[np.arange(p.n), sol.placement].all()
    ev = evaluate(p, sol.placement, order=sol.order, memory_model=model, waits=sol.waits)
    assert math.isclose(ev.makespan, sol.objective, rel_tol=1e-12)
    if restrict == {"s3": [1]}:
        chain = [p.index[f"s{i}"] for i in range(10)]
        assert set(sol.placement[chain].tolist()) == {1}  # the chain pinned whole where s3 may run


def reader_chain(memory: float = math.inf):
    """W (a weight, read by every step) -> r_t (its reader) -> h_t = f(h_(t-1), r_t): four steps of
    unit time, the weight's transfer 5, a reader's output's 0.5."""
    nodes = [{"id": "W", "time": 0.0, "out_bytes": 0.0, "param_bytes": 1.0}]
    edges = []
    for t in range(4):
        nodes += [{"id": f"r{t}", "time": 1.0, "out_bytes": 1.0, "param_bytes": 0.0},
                  {"id": f"h{t}", "time": 1.0, "out_bytes": 1.0, "param_bytes": 0.0}]
        edges += [{"src": "W", "dst": f"r{t}", "comm": 5.0}, {"src": f"r{t}", "dst": f"h{t}", "comm": 0.5}]
        if t:
            edges.append({"src": f"h{t - 1}", "dst": f"h{t}", "comm": 0.5})
    return make_problem(nodes, edges, devices=2, memory=memory)


def test_readers_follow_a_moved_weight_with_hand_computed_values():
    """All on device 0 (W, r0, h0, r1, ... back to back: r_t starts at 2t); W moved to device 1:
    every reader waits for its transfer (h3 starts at 12). The readers started before the transfer's
    5 (r0, r1, r2) follow it: they run at 0, 1, 2 on device 1, h0-h2 at 1.5, 2.5, 3.5, r3 at 5 (the
    weight's arrival) and h3 at 6; with share 0.75 or 0.5 only r0 and r1 follow (h3 at 8)."""
    p = reader_chain()
    ids = list(p.ids)
    ref_pl = np.zeros(p.n, dtype=np.int64)
    ref = evaluate(p, ref_pl, order=[[ids.index(x) for x in ("W", "r0", "h0", "r1", "h1", "r2", "h2", "r3", "h3")], []],
                   memory_model="peak")
    assert [ref.start[ids.index(f"r{t}")] for t in range(4)] == [0, 2, 4, 6]
    sequence = np.lexsort((p.topo_rank, ref.start))
    moved = ref_pl.copy()
    moved[ids.index("W")] = 1
    head = ids.index("h3")
    assert evaluate(p, moved, order=restricted(sequence, moved, 2), memory_model="peak").start[head] == pytest.approx(12.0)
    pl, ev, count = readers_follow(p, ref, moved, sequence, head, "peak")
    assert count == 3
    assert [p.ids[v] for v in np.flatnonzero(pl == 1)] == ["W", "r0", "r1", "r2"]
    assert ev.start[head] == pytest.approx(6.0) and ev.makespan == pytest.approx(7.0)
    again = evaluate(p, pl, order=restricted(sequence, pl, 2), memory_model="peak")
    assert np.allclose(again.start, ev.start)
    # Capacity 2.5: the move alone peaks at 3 on device 0 (h_t's output and its two inputs). With
    # r0-r2 following, device 0 holds 4 during [3, 3.5) (h1 running, h0 and r1 held for it, r2
    # received for h2): more over capacity than the move alone, so only r0 and r1 follow.
    tight = reader_chain(memory=2.5)
    base = evaluate(tight, moved, order=restricted(sequence, moved, 2), memory_model="peak")
    assert base.peak_memory[0] == pytest.approx(3.0)
    pl, ev, count = readers_follow(tight, ref, moved, sequence, head, "peak")
    assert count == 2 and ev.start[head] == pytest.approx(8.0) and ev.peak_memory[0] == pytest.approx(3.0)


def test_readers_follow_on_a_generated_lstm(lstm_tight):
    """The embedding moved off the device that runs the first lookups: with the lookups started before
    its transfer beside it again, the busiest chain starts earlier, no device is further over
    capacity than with the move alone, and only the moved unit's readers change device."""
    p = lstm_tight
    chains = accumulation_chains(p, 0.002 * float(p.memory.min()))
    head = int(busiest_chain(p, chains)[0][0])
    allowed = chain_devices(p, chains)
    sched = etf_schedule(replace(p, allowed=allowed, memory=np.full(p.k, math.inf)), 0.0, "static")
    ref = evaluate(p, sched.dev, order=sched.order, memory_model="peak")
    sequence = np.lexsort((p.topo_rank, ref.start))
    emb = list(p.ids).index("embed/weight")
    unit = np.flatnonzero(p.colocate == p.colocate[emb]) if p.colocate[emb] >= 0 else np.asarray([emb])
    moved = ref.placement.copy()
    moved[unit] = (int(ref.placement[emb]) + 1) % p.k
    base = evaluate(p, moved, order=restricted(sequence, moved, p.k), memory_model="peak")
    pl, ev, count = readers_follow(p, ref, moved, sequence, head, "peak")
    assert count > 0
    assert ev.start[head] < base.start[head] - 1.0
    assert float(np.max(ev.peak_memory / p.memory)) <= float(np.max(base.peak_memory / p.memory)) + 1e-12
    changed = np.flatnonzero(pl != moved)
    readers = set(p.dst[np.isin(p.src, unit)].tolist())
    assert set(changed.tolist()) <= readers and np.all(pl[changed] == moved[emb])
    again = evaluate(p, pl, order=restricted(sequence, pl, p.k), memory_model="peak")
    assert np.allclose(again.start, ev.start) and again.makespan == ev.makespan


def test_settled_compares_makespan_and_largest_overflow():
    """A round whose makespan and largest memory over capacity moved by at most 1e-4 (relative) is
    settled; a larger change in either is not; a change on a device below the largest is ignored."""
    from types import SimpleNamespace

    from heuristics.chain_pin import settled
    cap = np.array([10.0, 10.0])
    ref = SimpleNamespace(makespan=100.0, memory=np.array([12.0, 5.0]))
    assert settled(ref, SimpleNamespace(makespan=100.005, memory=np.array([12.0, 7.0])), cap)
    assert not settled(ref, SimpleNamespace(makespan=100.05, memory=np.array([12.0, 5.0])), cap)
    assert not settled(ref, SimpleNamespace(makespan=100.0, memory=np.array([11.9, 5.0])), cap)


@pytest.mark.parametrize("first_answers", [True, False])
def test_second_way_runs_when_the_first_found_nothing(monkeypatch, first_answers):
    """chain_pin's second (all pinned) way: skipped when the first way answered and less than 1.2 x
    its time is left, run anyway when the first found nothing (its answer is then the result)."""
    import time

    import heuristics.chain_pin as cp
    from placement.solution import Solution
    calls = []

    def fake(problem, opts, free_shared):
        calls.append(free_shared)
        if free_shared:
            time.sleep(0.3)
            yield Solution("chain-pin", "heuristic" if first_answers else "unknown",
                           objective=5.0 if first_answers else None, info={"free_shared": True})
            return
        yield Solution("chain-pin", "heuristic", objective=4.0, info={"free_shared": False})
    monkeypatch.setattr(cp, "way_stages", fake)
    got = cp.chain_pin(None, SolveOptions(memory_model="peak", time_limit=0.5))
    assert calls == ([True] if first_answers else [True, False])
    assert got.objective == (5.0 if first_answers else 4.0)


@pytest.mark.parametrize("freed_base_fits, over_freed, pinned_base_fits",
                         [(True, False, True), (False, True, True), (False, True, False), (False, False, True)])
def test_stages_of_the_two_ways_in_turn(monkeypatch, freed_base_fits, over_freed, pinned_base_fits):
    """The order of the two ways' stages (base, then the rest): the freed way whole first when its
    base fits or overflows only on devices whose chains it did not free; else the pinned way's
    base next, and the pinned way's rest before the freed way's only when the pinned base fits.
    The faster answer wins, the freed way's on a tie."""
    import heuristics.chain_pin as cp
    from placement.solution import Solution
    log = []

    def fake(problem, opts, free_shared):
        way = "freed" if free_shared else "pinned"
        fits = freed_base_fits if free_shared else pinned_base_fits
        log.append((way, "base"))
        info = {"free_shared": free_shared, "freed_devices": [1, 2], "over_devices": [] if fits else [2 if over_freed else 0]}
        yield Solution("chain-pin", "heuristic" if fits else "unknown", objective=6.0 if fits else None, info=info)
        log.append((way, "rest"))
        yield Solution("chain-pin", "heuristic", objective=5.0, info={"free_shared": free_shared})
    monkeypatch.setattr(cp, "way_stages", fake)
    got = cp.chain_pin(None, SolveOptions(memory_model="peak"))
    if freed_base_fits or not over_freed:
        assert log == [("freed", "base"), ("freed", "rest"), ("pinned", "base"), ("pinned", "rest")]
    elif pinned_base_fits:
        assert log == [("freed", "base"), ("pinned", "base"), ("pinned", "rest"), ("freed", "rest")]
    else:
        assert log == [("freed", "base"), ("pinned", "base"), ("freed", "rest"), ("pinned", "rest")]
    assert got.objective == 5.0 and got.info["free_shared"] is True  # a tie: the freed way's
    assert got.info["other"] == {"free_shared": False, "makespan": 5.0}


def test_pinned_base_before_the_freed_rest_on_a_generated_lstm(monkeypatch):
    """A generated LSTM (1500 nodes, K = 4, 1.4 x the memory lower bound) where the freed way's base
    (ETF's order, plain deadline rounds) fits nothing, over capacity on a device whose chain's
    gradients it freed, and the pinned way's base fits: with a budget of
    exactly the deadline rounds of the two bases (a count, not a clock: the stop is set once they are
    used) chain-pin answers with the pinned base's answer. Run whole one way after the other, the
    freed way's kept families took that budget and chain-pin answered nothing (the 200K LSTM at
    K = 4: bench/results_peak.md, session 17)."""
    import heuristics.chain_pin as cp
    p0 = generate("lstm", 1500, seed=0, memory_fraction=None)
    p = p0.with_devices(4, 1.4 * memory_lower_bound(p0, "peak", 4)["best"])
    count = [0]
    inner = cp.deadline_schedule

    def counted(*args, **kwargs):
        count[0] += 1
        return inner(*args, **kwargs)
    monkeypatch.setattr(cp, "deadline_schedule", counted)
    freed = next(cp.way_stages(p, PEAK, True))
    pinned = next(cp.way_stages(p, PEAK, False))
    assert freed.info["free_shared"] and freed.objective is None and freed.info["memory_over_capacity"] > 1.0
    assert set(freed.info["over_devices"]) & set(freed.info["freed_devices"])  # over where it freed gradients
    assert pinned.objective is not None and not pinned.info["free_shared"]
    budget, count[0] = count[0], 0
    opts = SolveOptions(memory_model="peak")

    def budgeted(*args, **kwargs):
        got = counted(*args, **kwargs)
        if count[0] >= budget:
            opts.stop.set()
        return got
    monkeypatch.setattr(cp, "deadline_schedule", budgeted)
    got = chain_pin(p, opts)
    assert got.status == "heuristic" and got.objective == pinned.objective
    assert not got.info["free_shared"]
    assert evaluate(p, got.placement, got.order, "peak").feasible(p)
    whole = chain_pin(p, PEAK)  # without the budget: at least as fast
    assert whole.objective <= got.objective


@pytest.mark.parametrize("tight", [True, False])
def test_portfolio_gives_chain_pin_the_rest_of_its_time_under_tight_memory(monkeypatch, lstm_tight, tight):
    """Under tight memory (PEAK_TIGHT_ORDER) chain-pin's limit is all the portfolio's time left
    (TIGHT_SHARE), elsewhere at most 0.3 of it or its estimate (MEMBER_SHARE). Every member is
    replaced by a stub that records the limit it was given (no clock is measured)."""
    import heuristics.portfolio as pf
    from placement.solution import Solution
    limits = {}

    def stub(name):
        def run(problem, opts):
            limits[name] = opts.time_limit
            return Solution(name, "unknown")
        return run
    monkeypatch.setattr(pf, "MEMBERS", {name: stub(name) for name in pf.MEMBERS})
    p = lstm_tight if tight else lstm_tight.with_devices(4, 3 * memory_lower_bound(lstm_tight, "peak", 4)["best"])
    assert (pf.member_order(p, PEAK)[0] == PEAK_TIGHT_ORDER) == tight
    pf.portfolio(p, SolveOptions(memory_model="peak", time_limit=1000.0))
    est = pf.estimate_seconds("chain-pin", p.n, p.m, p.k, "peak")
    if tight:
        assert limits["chain-pin"] > 0.9 * 1000.0
    else:
        assert limits["chain-pin"] <= max(est, 0.3 * 1000.0) + 1e-9
