"""Re-basing the incremental schedule (placement/incremental.py) is exact.

- a committed trial leaves every structure (schedule, positions, chains, tails, the bound's forests,
  avoid array and witnesses) equal to a schedule built afresh from the trial's placement and start
  times, and that schedule is the evaluator's: the ordered schedule of the reference's order, the
  reference being the trial's own start times (random move sequences, static and peak);
- a reference that is not the fixpoint of its own (start, rank) order (a FIFO schedule that starts
  a zero-time node beside its device predecessor) is re-timed to the evaluator's schedule of it;
- the Euler intervals of a forest, computed by pointer doubling, answer "x lies on v's root path"
  as a brute-force walk does.
"""
from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from placement.evaluator import evaluate
from placement.incremental import IncrementalSchedule, _forest_intervals, _is_fixpoint, device_order
from tests.conftest import random_problem

STATE = ("placement", "start", "finish", "makespan", "_pl", "_s", "_f", "_at", "_pos", "_seq", "_keys", "_prev",
         "_next", "_by_finish", "_tail", "_tail_next", "_last")
BOUNDS = ("_head_tin", "_head_end", "_tail_tin", "_tail_end", "_avoid", "_before", "_after", "_witness")


def same(a, b) -> bool:
    if isinstance(a, np.ndarray):
        return a.dtype == np.asarray(b).dtype and np.array_equal(a, b)
    return a == b


def assert_same_state(got: IncrementalSchedule, fresh: IncrementalSchedule) -> None:
    for name in STATE:
        assert same(getattr(got, name), getattr(fresh, name)), name
    if not got._bounds_ready:  # built by the commit, or stale ones kept: compared as they are
        got._prepare_bounds()
    fresh._prepare_bounds()
    for name in BOUNDS:
        assert same(getattr(got, name), getattr(fresh, name)), name


@settings(max_examples=120, deadline=None)
@given(seed=st.integers(0, 10**6), n=st.integers(2, 16), k=st.integers(2, 4), fifo=st.booleans(),
       steps=st.lists(st.lists(st.tuples(st.integers(0, 10**6), st.integers(0, 3)), min_size=1, max_size=4),
                      min_size=1, max_size=6),
       memory_model=st.sampled_from(["static", "peak"]), bounded=st.booleans())
def test_a_committed_schedule_equals_a_fresh_one(seed, n, k, fifo, steps, memory_model, bounded):
    prob = random_problem(seed, n, k, zero_time_p=0.3)  # zero-time nodes: ties in start times
    pl = np.random.default_rng(seed).integers(0, k, size=n)
    ref = evaluate(prob, pl).start if fifo else evaluate(prob, pl, order=device_order(prob, pl, np.zeros(n))).start
    inc = IncrementalSchedule(prob, pl, ref)
    for move in steps:
        if bounded:  # the bound's structures built before the commit: the commit must drop them
            inc._prepare_bounds()
            inc.try_move({0: (int(pl[0]) + 1) % k}, cutoff=inc.makespan)
        moves = {v % n: d % k for v, d in move}
        trial = inc.try_move(moves)
        new_pl = pl.copy()
        for v, d in moves.items():
            new_pl[v] = d
        new_start, _ = trial.times()
        ev = trial.evaluation(memory_model)
        inc.commit(trial)
        # The oracle: the evaluator's schedule of the order of the new reference (its start times).
        oracle = evaluate(prob, new_pl, order=device_order(prob, new_pl, new_start), memory_model=memory_model)
        assert np.array_equal(inc.start, oracle.start) and inc.makespan == oracle.makespan
        assert np.array_equal(ev.peak_memory, evaluate(prob, new_pl, order=device_order(prob, new_pl, ref),
                                                       memory_model=memory_model).peak_memory)
        assert_same_state(inc, IncrementalSchedule(prob, new_pl, new_start))
        pl, ref = new_pl, new_start


def test_a_reference_that_is_not_its_orders_fixpoint_is_retimed_to_the_evaluators_schedule():
    """With zero-time nodes (many ties of equal starts): a FIFO schedule is the fixpoint of the
    order read off it (its own order: zero-time nodes first at a tie), and a schedule of another
    placement mostly is not (the branch that re-times it is taken); every base equals the
    evaluator's schedule of the order read off its reference."""
    retimed = 0
    for seed in range(300):
        n, k = 8 + seed % 9, 2 + seed % 3
        prob = random_problem(seed, n, k, zero_time_p=0.4)
        rng = np.random.default_rng(seed)
        pl = rng.integers(0, k, size=n)
        own = evaluate(prob, pl).start
        assert _is_fixpoint(prob, pl, own, device_order(prob, pl, own))
        ref = evaluate(prob, rng.integers(0, k, size=n)).start
        order = device_order(prob, pl, ref)
        retimed += not _is_fixpoint(prob, pl, ref, order)
        for start in (own, ref):
            inc = IncrementalSchedule(prob, pl, start)
            assert np.array_equal(inc.start, evaluate(prob, pl, order=device_order(prob, pl, start)).start)
    assert retimed >= 100


@settings(max_examples=150, deadline=None)
@given(n=st.integers(1, 40), seed=st.integers(0, 10**6), roots=st.floats(0.0, 0.5))
def test_forest_intervals_answer_path_membership_like_a_walk(n, seed, roots):
    rng = np.random.default_rng(seed)
    topo = rng.permutation(n)  # parents come before their children in this order
    parent = np.full(n, -1, dtype=np.int64)
    for i in range(1, n):
        if rng.random() >= roots:
            parent[topo[i]] = topo[rng.integers(0, i)]
    rank = rng.permutation(n)  # any sibling order
    tin, end = _forest_intervals(parent, rank)
    assert sorted(tin) == list(range(n))  # a preorder numbering
    for v in range(n):
        path = set()
        x = v
        while x >= 0:
            path.add(x)
            x = int(parent[x])
        for x in range(n):
            assert (tin[x] <= tin[v] < end[x]) == (x in path)
