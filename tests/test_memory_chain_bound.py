"""The memory chain bound (placement/memory_chain_bound.py): never above the optimum of the exact
peak-model search (formulations/bruteforce.brute: placements and event orders, idle allowed) on
tiny running sums fed by big gradients, its value on a hand example where memory is short (the
LP relaxation's), zero when memory is unlimited, and the heavy run it picks. (On graphs this
small the forced bound's clusters see as much; it matters at scale: the 10K LSTM at 0.984 GB,
docs/peak.md.)"""
from __future__ import annotations

import random

import pytest

from formulations.bruteforce import brute
from placement.bounds import lower_bounds
from placement.comm_bound import heads
from placement.memory_chain_bound import heavy_run, memory_chain_bound
from placement.problem import Problem, make_problem
from placement.solution import SolveOptions
from tests.guard import makespan_optimum  # the event-order search alone: brute() would check against our bounds


def fed_sum(seed: int, longest: int = 3) -> Problem:
    """A source x, gradients g0..g(L-1) read from it, a running sum c0 -> c1 -> ... with c_k
    reading g_k; gradients and sums of B = 10 bytes, transfers of them 3-8, L = 2 .. ``longest``, 2-3
    devices with room for 2-5 tensors."""
    rng = random.Random(seed)
    length = rng.randint(2, longest)
    nodes = [{"id": "x", "time": rng.randint(0, 1), "out_bytes": 1, "param_bytes": 0}]
    edges = []
    for k in range(length):
        nodes += [{"id": f"g{k}", "time": rng.randint(1, 2), "out_bytes": 10, "param_bytes": 0},
                  {"id": f"c{k}", "time": rng.randint(1, 3), "out_bytes": 10, "param_bytes": rng.choice([0, 0, 3])}]
        edges += [{"src": "x", "dst": f"g{k}", "comm": rng.randint(0, 1)},
                  {"src": f"g{k}", "dst": f"c{k}", "comm": rng.randint(3, 8)}]
        if k:
            edges.append({"src": f"c{k - 1}", "dst": f"c{k}", "comm": rng.randint(3, 8)})
    cap = 10 * rng.randint(2, 5) + rng.randint(0, 9)
    return make_problem(nodes, edges, devices=rng.randint(2, 3), memory=float(cap), name=f"fed{seed}")


@pytest.mark.parametrize("longest, seeds, need", [(3, 60, 40), pytest.param(4, 60, 40, marks=pytest.mark.slow)])
def test_never_above_the_exact_peak_optimum(longest, seeds, need):
    proved = 0
    for seed in range(seeds):
        prob = fed_sum(seed, longest)
        ref = brute(prob, SolveOptions(memory_model="peak", time_limit=30))
        assert ref.status in ("optimal", "infeasible"), (seed, ref.reason)
        if ref.status != "optimal":
            continue
        proved += 1
        lbs = lower_bounds(prob, "peak")
        assert lbs.memory_chain <= ref.objective + 1e-9, f"seed {seed}: {lbs.memory_chain} above the optimum {ref.objective}"
        assert lbs.best <= ref.objective + 1e-9, f"seed {seed}: {lbs.as_dict()} above the optimum {ref.objective}"
        head, tail = heads(prob), heads(prob, reverse=True)
        path = [prob.index[v] for v in ["g0"] + [f"c{k}" for k in range(4) if f"c{k}" in prob.index]]
        assert memory_chain_bound(prob, path, head, tail) <= ref.objective + 1e-9
    assert proved >= need


def test_unlimited_memory_adds_nothing_beyond_the_chain():
    prob = fed_sum(3).with_devices(memory=float("inf"))
    assert lower_bounds(prob, "peak").memory_chain == 0.0


def test_heavy_run_is_the_chain_with_the_expensive_links():
    # a -> b costs 0.1, b -> c -> d -> e cost 5: the run is b .. e
    nodes = [{"id": v, "time": 1, "out_bytes": 1, "param_bytes": 0} for v in "abcde"]
    edges = [{"src": "a", "dst": "b", "comm": 0.1}] + [{"src": u, "dst": v, "comm": 5} for u, v in zip("bcd", "cde")]
    prob = make_problem(nodes, edges, devices=2, memory=10.0)
    assert [prob.ids[v] for v in heavy_run(prob, list(range(5)))] == list("bcde")
    assert heavy_run(prob, [0, 1, 2]) == []  # too short


def short_chain(cap: float) -> Problem:
    """x -> g_k -> c_k (k < 4), sums chained, every node 1 ms and 10 bytes (x: none), transfers 20,
    2 devices of ``cap`` bytes."""
    nodes = [{"id": "x", "time": 0, "out_bytes": 0, "param_bytes": 0}]
    edges = []
    for k in range(4):
        nodes += [{"id": f"g{k}", "time": 1, "out_bytes": 10, "param_bytes": 0},
                  {"id": f"c{k}", "time": 1, "out_bytes": 10, "param_bytes": 0}]
        edges += [{"src": "x", "dst": f"g{k}", "comm": 0}, {"src": f"g{k}", "dst": f"c{k}", "comm": 20}]
        if k:
            edges.append({"src": f"c{k - 1}", "dst": f"c{k}", "comm": 20})
    return make_problem(nodes, edges, devices=2, memory=cap)


def test_a_chain_short_of_memory_makes_a_gradient_itself():
    # x -> g_k -> c_k, sums chained, every tensor 10 bytes, transfers 20, 30 bytes per device: a
    # running sum holds its output, the previous sum and its gradient (30), so at most two other
    # gradients wait while g0 runs and none while a sum runs; a remote gradient would sit 21 in
    # memory, so g1..g3 beyond two made before the window are made inside it, or wait: the LP
    # relaxation makes 5/7 of one inside the window (5 + 5/7); the optimum is 8
    prob = short_chain(30.0)
    path = [prob.index[v] for v in ["g0", "c0", "c1", "c2", "c3"]]
    value = memory_chain_bound(prob, path, heads(prob), heads(prob, reverse=True))
    plain = float(prob.time[path].sum())  # 5: the chain alone
    assert value == pytest.approx(plain + 5 / 7)
    ref = brute(prob, SolveOptions(memory_model="peak", time_limit=60))
    assert ref.status == "optimal" and ref.objective == pytest.approx(8)


def test_a_zero_time_sum_does_not_hold_its_input_and_output_together():
    # c0 (1 ms, 4 B) -> c1 (0 ms, 12 B) -> c2 (1 ms, 3 B) -> c3 (1 ms, 3 B), transfers 5, 15 B per
    # device: c1 takes no time, so c0's output is freed at the instant c1's is allocated (4 + 12
    # never coexist); all on one device the peak is 15 and the makespan 3. The bound must not
    # call the single run impossible (it did: 3 + two transfers = 13).
    nodes = [{"id": f"c{i}", "time": t, "out_bytes": o, "param_bytes": 0}
             for i, (t, o) in enumerate([(1, 4), (0, 12), (1, 3), (1, 3)])]
    edges = [{"src": f"c{i}", "dst": f"c{i + 1}", "comm": 5} for i in range(3)]
    prob = make_problem(nodes, edges, devices=2, memory=15.0)
    assert makespan_optimum(prob, "peak") == pytest.approx(3)
    assert lower_bounds(prob, "peak").best <= 3 + 1e-9


def test_feeders_of_a_zero_time_first_sum_are_held_before_the_window():
    # x (2 ms, no output) and g (1 ms, 10 B, transfer 5) -> c0 (0 ms) -> c1 -> c2 -> c3 (1 ms, 3 B
    # each, transfers 6), 15 B per device: no sum c1..c3 has room for g's 10 B beside its input and
    # output. g's tensor is held over [S(g), F(c0)), before the window [S(c0), F(c3)) starts, since
    # c0 takes no time: the optimum is 2 + 3 = 5 (g beside x, the chain on g's device). A pre-held
    # room of 0 at the zero-time c0 (or its input counted there) would make g cost memory or time
    # inside the window: 6.
    nodes = [{"id": "x", "time": 2, "out_bytes": 0, "param_bytes": 0},
             {"id": "g", "time": 1, "out_bytes": 10, "param_bytes": 0},
             {"id": "c0", "time": 0, "out_bytes": 3, "param_bytes": 0}]
    nodes += [{"id": f"c{i}", "time": 1, "out_bytes": 3, "param_bytes": 0} for i in (1, 2, 3)]
    edges = [{"src": "g", "dst": "c0", "comm": 5}, {"src": "x", "dst": "c0", "comm": 0}]
    edges += [{"src": f"c{i}", "dst": f"c{i + 1}", "comm": 6} for i in range(3)]
    prob = make_problem(nodes, edges, devices=2, memory=15.0)
    assert makespan_optimum(prob, "peak") == pytest.approx(5)
    lbs = lower_bounds(prob, "peak")
    assert lbs.memory_chain <= 5 + 1e-9 and lbs.best <= 5 + 1e-9


def test_capacities_the_evaluator_cannot_tell_apart_give_the_same_bound():
    # check() accepts memory up to cap (1 + 1e-12) + 1e-9: with whole bytes, 30 and 30 - 5e-10
    # admit the same schedules, so the rooms (whole feeders) must be the same: 5 + 5/7 both (the
    # rooms without the tolerance dropped one feeder at 30 - 5e-10: 8)
    values = []
    for cap in (30.0, 30.0 - 5e-10):
        prob = short_chain(cap)
        path = [prob.index[v] for v in ["g0", "c0", "c1", "c2", "c3"]]
        values.append(memory_chain_bound(prob, path, heads(prob), heads(prob, reverse=True)))
    assert values[0] == pytest.approx(5 + 5 / 7) and values[1] == pytest.approx(values[0])
