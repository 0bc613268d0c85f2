"""Waits in the search (session 13): the incremental schedule, refine and window LNS keep an
answer's waits (control dependencies) as constraints, timed as the evaluator times them.

Every expected value here comes from the evaluator (``evaluate(..., order=..., waits=...)``,
``check``) or from tests/test_waits.py's brute-force earliest schedule, never from the code
under test."""
from __future__ import annotations

import random
import time

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from formulations.window_lns import lns
from placement.evaluator import ScheduleError, check, evaluate, wait_delay
from placement.incremental import IncrementalSchedule, device_order, kept_order_start, timing_graph
from placement.problem import Link, make_problem
from placement.solution import Solution, SolveOptions
from solvers.pipeline import Incumbent, searched
from solvers.refine import RefineStats, kept_waits, refine
from solvers.run import verify
from tests.conftest import random_problem
from tests.test_kernels import kernel_mode
from tests.test_waits import brute_earliest


def waited_case(seed: int, n: int, k: int, count: int, link: bool, zero_time_p: float = 0.3, free: float = 0.0):
    """A random problem, placement and waits that close no cycle with the graph, and the
    evaluator's schedule of the placement in topological order (by the waits' rank) with them.
    ``zero_time_p`` of the nodes take no time, ``free`` of the transfers none (ties of equal starts)."""
    prob = random_problem(seed, n, k, zero_time_p=zero_time_p)
    if link:
        prob.link = Link(latency=float(1 + seed % 3), bandwidth=1.0)
    rng = random.Random(seed)
    if free:
        prob.comm[np.asarray([rng.random() < free for _ in range(prob.m)], dtype=bool)] = 0.0
    pl = np.array([rng.randrange(k) for _ in range(n)])
    waits = []
    for _ in range(count):
        u, v = rng.sample(range(n), 2)
        try:
            timing_graph(prob, waits + [(u, v)])
        except ScheduleError:
            continue  # closes a cycle with the graph and the waits so far
        waits.append((u, v))
    g = timing_graph(prob, waits)
    ref = evaluate(prob, pl, order=device_order(prob, pl, np.zeros(n), g.rank), waits=waits).start
    return prob, pl, waits, g, ref


def assert_answer(prob, pl, ev, waits, memory: bool = True) -> None:
    """A search's answer: the evaluator's checker accepts its start times (with memory), every wait
    is met by them, and its device order by (start, finish, rank) with the same waits is a schedule
    the evaluator starts no node later than the answer (the same schedule when no zero-time node
    ties with another: then the order and the waits give it back)."""
    truth = check(prob, pl, ev.start, "peak", check_memory=memory)
    assert truth.makespan == ev.makespan
    assert kept_waits(prob, ev, waits) == [tuple(w) for w in waits]
    rank = timing_graph(prob, waits).rank  # ties of zero-time nodes: a wait's ends in its order
    idx = np.lexsort((rank, ev.finish, ev.start, pl))
    order = [idx[pl[idx] == d].tolist() for d in range(prob.k)]
    again = evaluate(prob, pl, order=order, memory_model="peak", waits=waits)
    assert np.all(again.start <= ev.start)
    if np.all(prob.time > 0):
        assert np.array_equal(again.start, ev.start)


def test_no_waits_is_the_problem_itself():
    prob = random_problem(3, 12, 3)
    g = timing_graph(prob, None)
    assert g.src is prob.src and g.dst is prob.dst and g.comm is prob.comm and g.rank is prob.topo_rank
    assert g.pred_ptr is prob.pred_ptr and g.wait_list is None
    assert timing_graph(prob, []).wait_list is None


def test_a_wait_against_the_graph_is_named_a_cycle():
    prob = make_problem([{"id": i, "time": 1.0, "out_bytes": 1, "param_bytes": 0} for i in range(3)],
                        [{"src": 0, "dst": 1, "comm": 0}, {"src": 1, "dst": 2, "comm": 0}], devices=2)
    with pytest.raises(ScheduleError, match="cycle"):
        timing_graph(prob, [(2, 0)])
    g = timing_graph(prob, [(2, 0)][:0] + [(0, 2)])
    assert g.rank.tolist() == prob.topo_rank.tolist()  # a wait forward in the rank keeps it


def test_a_wait_backward_in_the_rank_gets_a_rank_that_puts_it_forward():
    # 0 and 1 independent; topo rank puts 0 first; the wait (1, 0) needs 1 first.
    prob = make_problem([{"id": i, "time": 0.0, "out_bytes": 1, "param_bytes": 0} for i in range(3)],
                        [{"src": 0, "dst": 2, "comm": 0}], devices=1)
    assert prob.topo_rank[0] < prob.topo_rank[1]
    g = timing_graph(prob, [(1, 0)])
    assert g.rank[1] < g.rank[0] < g.rank[2]
    # All three start at 0 (zero-time): the order by (start, rank) must run 1 before 0 on the device.
    order = device_order(prob, np.zeros(3, dtype=np.int64), np.zeros(3), g.rank)
    assert order[0].index(1) < order[0].index(0)
    assert evaluate(prob, np.zeros(3, dtype=np.int64), order=order, waits=[(1, 0)]).makespan == 0.0


@settings(max_examples=120, deadline=None)
@given(seed=st.integers(0, 10**6), n=st.integers(2, 13), k=st.integers(2, 4), count=st.integers(1, 6),
       link=st.booleans(), kernels=st.sampled_from(["off", "on"]), memory_model=st.sampled_from(["static", "peak"]),
       steps=st.lists(st.tuples(st.lists(st.tuples(st.integers(0, 10**6), st.integers(0, 3)), min_size=1, max_size=4),
                                st.booleans()), min_size=1, max_size=5))
def test_incremental_with_waits_equals_the_evaluator(seed, n, k, count, link, kernels, memory_model, steps):
    """Random moves, with and without cutoffs, committed or not: every complete trial is the
    evaluator's ordered schedule with the waits (start times, makespan, memory) bit for bit; a
    trial stopped at its cutoff only when the evaluator's makespan reaches it."""
    with kernel_mode(kernels):
        prob, pl, waits, g, ref = waited_case(seed, n, k, count, link)
        inc = IncrementalSchedule(prob, pl, ref, waits)
        assert np.array_equal(inc.start, ref)
        for move, commit in steps:  # ref: the reference the base keeps its order by (the last committed trial's starts)
            moves = {v % n: d % k for v, d in move}
            new_pl = inc.placement.copy()
            for v, d in moves.items():
                new_pl[v] = d
            order = device_order(prob, new_pl, ref, graph=g)
            want = evaluate(prob, new_pl, order=order, memory_model=memory_model, waits=waits)
            lat = wait_delay(prob)
            brute = brute_earliest(prob, new_pl, order, waits, lat)
            assert brute is not None and np.allclose(want.start, brute)
            assert np.array_equal(kept_order_start(prob, new_pl, ref, g), want.start)
            for cutoff in (float("inf"), inc.makespan * 0.8, want.makespan):
                trial = inc.try_move(moves, cutoff=cutoff)
                if trial.complete:
                    ev = trial.evaluation(memory_model)
                    assert np.array_equal(ev.start, want.start)
                    assert trial.makespan == want.makespan
                    assert np.array_equal(ev.memory, want.memory)
                else:
                    assert want.makespan >= cutoff - 1e-9 and trial.makespan <= want.makespan + 1e-9
            if commit:  # the new base: the evaluator's schedule in the order of the trial's start times
                inc.commit(inc.try_move(moves))
                again = evaluate(prob, new_pl, order=device_order(prob, new_pl, want.start, graph=g), waits=waits)
                assert np.array_equal(inc.start, again.start)
                ref = want.start


def lstm_like(steps: int = 12, fillers: int = 4, capacity: float = 400.0):
    """An accumulation chain s_0 -> s_1 -> ... (3 time units a step) summing gradients g_i (1 unit,
    100 bytes each, like the sums) made from a shared loss; fillers: independent work. Made ahead
    of the chain on another device, every gradient is held, received, on the chain's device until
    its sum ends: an order cannot stop a device with nothing else to do from making them early."""
    nodes, edges = chain_records(steps, fillers)
    return make_problem(nodes, edges, devices=3, memory=capacity)


def chain_records(steps: int, fillers: int, comm: float = 0.5) -> tuple[list[dict], list[dict]]:
    """:func:`lstm_like`'s nodes and edges (``comm``: every transfer's time)."""
    nodes = [{"id": "loss", "time": 1.0, "out_bytes": 1, "param_bytes": 0}]
    edges = []
    for i in range(steps):
        nodes += [{"id": f"g{i}", "time": 1.0, "out_bytes": 100, "param_bytes": 0},
                  {"id": f"s{i}", "time": 3.0, "out_bytes": 100, "param_bytes": 0}]
        edges += [{"src": "loss", "dst": f"g{i}", "comm": comm}, {"src": f"g{i}", "dst": f"s{i}", "comm": comm}]
        if i:
            edges.append({"src": f"s{i - 1}", "dst": f"s{i}", "comm": comm})
    nodes += [{"id": f"f{j}", "time": 2.0, "out_bytes": 1, "param_bytes": 0} for j in range(fillers)]
    return nodes, edges


def held_answer(prob, steps: int = 12, fillers: int = 4):
    """Chain and fillers on device 0 (fillers first: they delay the chain), every gradient on
    device 1, each waiting for the sum two steps before its own: a held answer, as chain-pin's."""
    ix = prob.index
    pl = np.zeros(prob.n, dtype=np.int64)
    for i in range(steps):
        pl[ix[f"g{i}"]] = 1
    waits = [(ix[f"s{i - 2}"], ix[f"g{i}"]) for i in range(2, steps)]
    order = [[ix["loss"]] + [ix[f"f{j}"] for j in range(fillers)] + [ix[f"s{i}"] for i in range(steps)],
             [ix[f"g{i}"] for i in range(steps)], []]
    return pl, order, waits


@pytest.mark.parametrize("kernels", ["off", "on"])
def test_refine_from_a_held_answer_improves_and_keeps_its_waits(kernels):
    prob = lstm_like()
    pl, order, waits = held_answer(prob)
    held = evaluate(prob, pl, order=order, memory_model="peak", waits=waits)
    assert held.feasible(prob) and held.makespan == 45.0  # 1 + 4 x 2 of fillers + 12 x 3 of sums
    # The same order without the waits makes every gradient at once: 13 x 100 bytes held on device 0.
    assert evaluate(prob, pl, order=order, memory_model="peak").peak_memory[0] == 1300.0
    with kernel_mode(kernels):
        stats = RefineStats()
        got_pl, got = refine(prob, pl, SolveOptions(memory_model="peak", seed=0), deadline=time.monotonic() + 60,
                             memory_model="peak", max_evals=300, start=held.start, keep_order=True, stats=stats,
                             waits=waits)
    assert stats.judged_by == "order with 10 waits"
    assert got.makespan < held.makespan
    assert_answer(prob, got_pl, got, waits)  # fits, meets every wait, and its order with them gives it back
    # The chain's 37 units from the loss bound it from below: 1 + 36.
    assert got.makespan >= 37.0


def test_refine_is_deterministic_with_waits():
    prob = lstm_like(steps=10, fillers=5)
    pl, order, waits = held_answer(prob, steps=10, fillers=5)
    held = evaluate(prob, pl, order=order, memory_model="peak", waits=waits)
    runs = [refine(prob, pl, SolveOptions(memory_model="peak", seed=3), deadline=time.monotonic() + 60,
                   memory_model="peak", max_evals=150, start=held.start, keep_order=True, waits=waits) for _ in range(2)]
    assert np.array_equal(runs[0][0], runs[1][0]) and np.array_equal(runs[0][1].start, runs[1][1].start)


@pytest.mark.parametrize("seed", range(12))
@pytest.mark.parametrize("model", ["peak", "static"])
def test_refine_never_loses_a_wait_on_random_problems(seed, model):
    rng = random.Random(seed)
    prob, pl, waits, g, ref = waited_case(seed, rng.randint(6, 14), rng.randint(2, 3), 4, seed % 2 == 0)
    start_ev = evaluate(prob, pl, order=device_order(prob, pl, ref, graph=g), memory_model=model, waits=waits)
    prob = prob.with_devices(prob.k, float(start_ev.memory.max()))  # the start just fits: memory binds
    got_pl, got = refine(prob, pl, SolveOptions(memory_model=model, seed=seed), deadline=time.monotonic() + 60,
                         memory_model=model, max_evals=80, start=ref, keep_order=True, waits=waits)
    assert got.makespan <= start_ev.makespan
    assert check(prob, got_pl, got.start, model).makespan == got.makespan  # fits under the model searched
    assert_answer(prob, got_pl, got, waits, memory=model == "peak")


@pytest.mark.parametrize("seed", range(6))
def test_window_lns_keeps_the_waits(seed):
    rng = random.Random(100 + seed)
    prob, pl, waits, g, ref = waited_case(100 + seed, rng.randint(6, 12), 2, 4, seed % 2 == 1)
    start_ev = evaluate(prob, pl, order=device_order(prob, pl, ref, graph=g), memory_model="peak", waits=waits)
    got_pl, got = lns(prob, pl, ref, SolveOptions(memory_model="peak", seed=seed, workers=1),
                      deadline=time.monotonic() + 3.0, memory_model="peak", window=prob.n, window_seconds=1.0,
                      waits=waits)
    assert got.makespan <= start_ev.makespan + 1e-9
    assert_answer(prob, got_pl, got, waits, memory=False)  # LNS's peak is not bound here (no capacity)


def test_the_pipeline_hands_the_waits_on():
    """An incumbent with waits: the searches get the waits its schedule meets, and a search's answer
    offered with them passes the incumbent's check and carries them."""
    prob = lstm_like()
    pl, order, waits = held_answer(prob)
    held = evaluate(prob, pl, order=order, memory_model="peak", waits=waits)
    sol = Solution("chain-pin", "heuristic", placement=pl, order=order, start=held.start, waits=waits,
                   objective=held.makespan)
    inc = Incumbent(prob, "peak", verify)
    assert inc.offer(sol) is not None and inc.waits == waits
    got_pl, got = refine(prob, pl, SolveOptions(memory_model="peak", seed=0), deadline=time.monotonic() + 60,
                         memory_model="peak", max_evals=200, start=held.start, keep_order=True, waits=inc.waits)
    ans = searched("refine", prob, got_pl, got, inc.waits)
    assert ans.waits == waits
    ev = inc.offer(ans)
    assert ev is not None and inc.best[0] is ans and ev.makespan == got.makespan < held.makespan
    # A schedule that does not meet a wait (the placement's FIFO) keeps only the waits it meets.
    fifo = evaluate(prob, pl, memory_model="peak")
    met = kept_waits(prob, fifo, waits)
    assert met is None or len(met) < len(waits)


@pytest.mark.parametrize("seed", range(40))
@pytest.mark.parametrize("kernels", ["off", "on"])
def test_ordered_start_is_the_evaluators_or_none_on_a_contradiction(seed, kernels):
    """Any order (a random topological order of the graph alone, split by device) with waits: the
    evaluator's start times bit for bit, or None exactly when the evaluator names a contradiction."""
    from placement.incremental import ordered_start
    from tests.test_waits import random_order

    rng = random.Random(seed)
    prob, pl, waits, g, _ = waited_case(seed, rng.randint(3, 12), rng.randint(1, 3), 4, seed % 2 == 0)
    order = random_order(prob, pl, rng)
    with kernel_mode(kernels):
        got = ordered_start(prob, pl, order, g)
    try:
        want = evaluate(prob, pl, order=order, waits=waits).start
    except ScheduleError:
        assert got is None
    else:
        assert got is not None and np.array_equal(got, want)
