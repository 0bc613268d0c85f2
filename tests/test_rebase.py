"""Session 13's cheaper accepted moves compute what they replace.

- committing a trial with the compiled kernels re-sorts only the re-timed nodes
  (IncrementalSchedule._rebase: merged positions and finish order, chains by counting, the
  fixpoint test compiled) and leaves every structure equal to a full re-base of the same schedule
  and to a schedule built afresh (random move sequences, static and peak, kernels on and off);
- a trial tried on an older base is never merged into the new one;
- the evaluator's peak memory, measured when first read (under either memory model), is the
  number the eager measurement gives;
- refine at a fixed evaluation budget takes the same path as the reference (full re-bases, eager
  peak), with the kernels and without.
"""
from __future__ import annotations

import hashlib
import time

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from heuristics.list_scheduling import etf
from placement import evaluator, kernels
from placement.evaluator import Evaluation, MeasuredOnRead, evaluate, peak_memory
from placement.generate import generate
from placement.incremental import IncrementalSchedule, device_order
from placement.solution import SolveOptions
from solvers.refine import RefineStats, refine
from tests.conftest import random_problem
from tests.test_incremental_commit import assert_same_state
from tests.test_kernels import kernel_mode, require_compiled


def moved_placement(pl: np.ndarray, moves: dict[int, int]) -> np.ndarray:
    new = pl.copy()
    for v, d in moves.items():
        new[v] = d
    return new


@settings(max_examples=150, deadline=None)
@given(seed=st.integers(0, 10**6), n=st.integers(2, 18), k=st.integers(2, 4), fifo=st.booleans(),
       steps=st.lists(st.lists(st.tuples(st.integers(0, 10**6), st.integers(0, 3)), min_size=1, max_size=4),
                      min_size=1, max_size=6),
       memory_model=st.sampled_from(["static", "peak"]), mode=st.sampled_from(["on", "off"]), bounded=st.booleans())
def test_a_rebase_of_the_moved_part_equals_a_full_rebase(seed, n, k, fifo, steps, memory_model, mode, bounded):
    prob = random_problem(seed, n, k, zero_time_p=0.3)  # zero-time nodes: ties in start times
    pl = np.random.default_rng(seed).integers(0, k, size=n)
    ref = evaluate(prob, pl).start if fifo else evaluate(prob, pl, order=device_order(prob, pl, np.zeros(n))).start
    if mode == "on":
        require_compiled()
    with kernel_mode(mode):
        inc = IncrementalSchedule(prob, pl, ref)
        full = IncrementalSchedule(prob, pl, ref)  # re-based by reset only
        for move in steps:
            if bounded:  # the bound's structures built before the commit: stale ones must go
                inc._prepare_bounds()
                inc.try_move({0: (int(pl[0]) + 1) % k}, cutoff=inc.makespan)
            moves = {v % n: d % k for v, d in move}
            trial = inc.try_move(moves)
            new_pl = moved_placement(pl, moves)
            new_start, _ = trial.times()
            trial.evaluation(memory_model)
            inc.commit(trial)
            full.reset(new_pl, new_start)
            assert_same_state(inc, full)
            assert_same_state(inc, IncrementalSchedule(prob, new_pl, new_start))
            oracle = evaluate(prob, new_pl, order=device_order(prob, new_pl, new_start), memory_model=memory_model)
            assert np.array_equal(inc.start, oracle.start)
            pl = new_pl


def test_the_rebase_of_the_moved_part_is_taken_and_a_stale_trial_is_rebased_in_full(monkeypatch):
    """Most commits on random graphs take the merged re-base (it is not dead code); a trial tried
    on an older base never does."""
    require_compiled()
    monkeypatch.setenv(kernels.MODE_VAR, "on")
    taken = []
    original = IncrementalSchedule._rebase

    off_before = []

    def spy(self, *args):
        off_before.append(self._off.size)
        got = original(self, *args)
        taken.append(got)
        return got

    monkeypatch.setattr(IncrementalSchedule, "_rebase", spy)
    for seed in range(60):
        n, k = 10 + seed % 7, 2 + seed % 3
        prob = random_problem(seed, n, k, zero_time_p=0.4)
        rng = np.random.default_rng(seed)
        pl = rng.integers(0, k, size=n)
        other = rng.integers(0, k, size=n)  # a schedule of another placement: not its order's fixpoint here
        inc = IncrementalSchedule(prob, pl, evaluate(prob, other).start)
        for _ in range(3):
            moves = {int(rng.integers(n)): int(rng.integers(k))}
            trial = inc.try_move(moves)
            pl = moved_placement(pl, moves)
            ref, _ = trial.times()
            inc.commit(trial)
            assert_same_state(inc, IncrementalSchedule(prob, pl, ref))
    assert sum(taken) >= 150
    assert sum(1 for x in off_before if x) >= 3  # bases whose start was re-timed away from the reference
    # A stale trial: tried, then the base moved on; its commit must not merge against the new base.
    prob = random_problem(7, 14, 3, zero_time_p=0.0)
    pl = np.zeros(14, dtype=np.int64)
    inc = IncrementalSchedule(prob, pl, evaluate(prob, pl).start)
    stale = inc.try_move({3: 1})
    inc.commit(inc.try_move({5: 2}))
    calls = len(taken)
    inc.commit(stale)
    assert len(taken) == calls  # no merged re-base against a base the trial was not tried on


@settings(max_examples=100, deadline=None)
@given(seed=st.integers(0, 10**6), n=st.integers(1, 16), k=st.integers(1, 4), ordered=st.booleans())
def test_the_evaluators_peak_measured_when_read_is_the_eager_one(seed, n, k, ordered):
    import dataclasses
    import pickle

    prob = random_problem(seed, n, k, zero_time_p=0.3)
    pl = np.random.default_rng(seed).integers(0, k, size=n)
    order = device_order(prob, pl, np.zeros(n)) if ordered else None
    ev = evaluate(prob, pl, order=order)  # static: measured when read
    assert isinstance(ev, MeasuredOnRead) and ev._peak is None
    eager = peak_memory(prob, ev.placement, ev.start, ev.finish)
    peak = evaluate(prob, pl, order=order, memory_model="peak")  # the peak model also measures when read
    assert isinstance(peak, MeasuredOnRead) and peak._peak is None
    assert peak.memory.tobytes() == eager.tobytes() and peak._peak is not None  # reading the memory measures it
    assert np.array_equal(ev.start, peak.start)
    copies = [pickle.loads(pickle.dumps(ev)), dataclasses.replace(ev, memory_model="peak")]
    assert type(copies[0]) is Evaluation
    for got in [ev] + copies:
        assert got.peak_memory.tobytes() == eager.tobytes() == peak.peak_memory.tobytes()
    assert np.array_equal(copies[1].memory, peak.memory) and copies[1].feasible(prob) == peak.feasible(prob)
    checked = evaluator.check(prob, pl, ev.start, check_memory=False)
    assert checked.peak_memory.tobytes() == eager.tobytes()


def test_a_peak_measured_by_another_reader_in_between_is_the_one_returned():
    """Session 14 review: two first reads at once (a report in the main thread, the abandoned search
    in its own). The interleaving is forced: the other read completes just after this one found no
    peak yet and before it reads the problem, which the other read has dropped by then (it was
    ``peak_memory(None, ...)``: AttributeError)."""
    prob = random_problem(7, 10, 3, zero_time_p=0.3)
    pl = np.arange(10) % 3
    ev = evaluate(prob, pl)
    other = {"done": False}

    class Interleaved(MeasuredOnRead):
        def __getattribute__(self, name):
            if name == "_problem" and not other["done"]:
                other["done"] = True
                MeasuredOnRead.peak_memory.fget(self)  # the other reader, from start to end
            return object.__getattribute__(self, name)

    racy = Interleaved(prob, placement=ev.placement, start=ev.start, finish=ev.finish, makespan=ev.makespan,
                       static_memory=ev.static_memory, memory_model="static")
    assert racy.peak_memory.tobytes() == peak_memory(prob, pl, ev.start, ev.finish).tobytes()
    assert other["done"]


def _eager_measure(problem, pl, start, finish, memory_model):
    return Evaluation(placement=pl, start=start, finish=finish, makespan=float(finish.max()) if problem.n else 0.0,
                      static_memory=evaluator.static_memory(problem, pl),
                      peak_memory=peak_memory(problem, pl, start, finish), memory_model=memory_model)


@pytest.mark.parametrize("family, seed, mode", [("cnn", 5, "on"), ("lstm", 3, "on"), ("transformer", 1, "on"),
                                                ("cnn", 1, "off")])
def test_refine_takes_the_same_path_as_with_full_rebases_and_eager_peaks(family, seed, mode, monkeypatch):
    """At a fixed evaluation budget: the same placement, start times, evaluations and acceptances
    as refine with every re-base a full reset and every peak measured eagerly."""
    if mode == "on":
        require_compiled()
    monkeypatch.setenv(kernels.MODE_VAR, mode)
    prob = generate(family, 1200, seed=seed, devices=4)
    pl = np.asarray(etf(prob, SolveOptions()).placement)
    fifo = evaluate(prob, pl)

    def run():
        stats = RefineStats()
        got, ev = refine(prob, pl, SolveOptions(seed=2), deadline=time.monotonic() + 1e6, max_evals=600,
                         keep_order=True, start=fifo.start, stats=stats, incremental=True)
        return (hashlib.sha1(np.asarray(got, dtype=np.int64).tobytes() + ev.start.tobytes()).hexdigest(),
                stats.evaluations, stats.accepted, stats.kicks)

    now = run()
    with monkeypatch.context() as m:
        m.setattr(IncrementalSchedule, "_rebase", lambda self, *a: False)
        m.setattr(evaluator, "_measure", _eager_measure)
        before = run()
    assert now == before
    assert now[2] > 0  # the path compared accepted moves (and so re-based)


@settings(max_examples=100, deadline=None)
@given(seed=st.integers(0, 10**6), m=st.integers(0, 120), keys=st.integers(1, 6), n_extra=st.integers(0, 20))
def test_ties_ordered_after_a_stable_sort_give_the_lexicographic_order(seed, m, keys, n_extra):
    """kernels.order_ties after numpy's stable argsort: np.lexsort's order by (key, tie), also for
    runs of equal keys longer than its insertion sort takes (few distinct keys, many nodes)."""
    require_compiled()
    fast = kernels.load()
    rng = np.random.default_rng(seed)
    n = m + n_extra
    key = rng.integers(0, keys, size=n).astype(float) * 0.5
    tie = rng.permutation(n).astype(np.int64)
    nodes = rng.choice(n, size=m, replace=False).astype(np.int64) if n else np.zeros(0, dtype=np.int64)
    got = nodes[np.argsort(key[nodes], kind="stable")]
    fast.order_ties(got, key, tie)
    assert np.array_equal(got, nodes[np.lexsort((tie[nodes], key[nodes]))])


@settings(max_examples=100, deadline=None)
@given(seed=st.integers(0, 10**6), n=st.integers(1, 40), k=st.integers(1, 4), fifo=st.booleans())
def test_the_compiled_avoid_array_is_the_numpy_one(seed, n, k, fifo):
    """IncrementalSchedule._avoiding with the kernel (kernels.avoid_jumps) and without: the same
    longest paths avoiding each node, bit for bit (integer times: many equal values)."""
    require_compiled()
    prob = random_problem(seed, n, k, zero_time_p=0.3)
    pl = np.random.default_rng(seed).integers(0, k, size=n)
    ref = evaluate(prob, pl).start if fifo else evaluate(prob, pl, order=device_order(prob, pl, np.zeros(n))).start
    got = {}
    for mode in ("off", "on"):
        with kernel_mode(mode):
            inc = IncrementalSchedule(prob, pl, ref)
            inc._prepare_bounds()
            got[mode] = (inc._avoid.tobytes(), inc._before.tobytes(), inc._after.tobytes())
    assert got["on"] == got["off"]


@settings(max_examples=100, deadline=None)
@given(seed=st.integers(0, 10**6), n=st.integers(1, 18), k=st.integers(1, 4), fifo=st.booleans())
def test_a_base_built_with_the_kernels_is_the_one_built_without(seed, n, k, fifo):
    """reset with kernels (chains by counting, the compiled fixpoint test, the kept-order pass on
    its own positions) and without: every structure the same (FIFO references with zero-time
    nodes are often not their own order's fixpoint: both branches taken)."""
    require_compiled()
    prob = random_problem(seed, n, k, zero_time_p=0.4)
    pl = np.random.default_rng(seed).integers(0, k, size=n)
    ref = evaluate(prob, pl).start if fifo else evaluate(prob, pl, order=device_order(prob, pl, np.zeros(n))).start
    with kernel_mode("on"):
        on = IncrementalSchedule(prob, pl, ref)
    with kernel_mode("off"):
        off = IncrementalSchedule(prob, pl, ref)
        assert_same_state(on, off)


def test_the_reschedule_estimate_follows_the_kernels(monkeypatch):
    """solvers.reschedule.reschedule_seconds: the compiled per-element cost where the kernels run
    (PLACEMENT_KERNELS=on), the Python loops' where they do not, per node + edge."""
    from solvers import reschedule as rs

    require_compiled()
    prob = random_problem(3, 12, 3)
    monkeypatch.setenv(kernels.MODE_VAR, "off")
    assert rs.reschedule_seconds(prob) == rs.RESCHEDULE_SECONDS_PER_ELEMENT_PYTHON * (prob.n + prob.m)
    monkeypatch.setenv(kernels.MODE_VAR, "on")
    assert rs.reschedule_seconds(prob) == rs.RESCHEDULE_SECONDS_PER_ELEMENT * (prob.n + prob.m)
    assert rs.RESCHEDULE_SECONDS_PER_ELEMENT < rs.RESCHEDULE_SECONDS_PER_ELEMENT_PYTHON
