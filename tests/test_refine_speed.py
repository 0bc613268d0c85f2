"""Session 9's faster refine: what each shortcut computes equals what it replaces.

- the list simulation's start times are the evaluator's schedule of its order, and
  ``ordered_evaluation`` accepts them only as that order's fixpoint (solvers/reschedule.py,
  placement/incremental.py);
- ``kept_order_start`` (a batch move's kept order timed in one pass) equals the evaluator's ordered
  schedule bit for bit, and refuses a reference that is not a schedule;
- ``critical_chain``'s deciders computed in numpy give the chain of a node-by-node walk;
- the incremental bound's first pass over moved nodes far apart (their inputs' old finish less the
  drops of the moved nodes before) never claims more than the true makespan, and proves moves;
- refine at a fixed evaluation budget takes the same path with these shortcuts as without,
  also with small batch moves judged by the incremental schedule (session 10).
"""
from __future__ import annotations

import time

import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

import solvers.refine as refine_mod
from heuristics.list_scheduling import etf
from placement.evaluator import edge_delay, evaluate
from placement.generate import generate
from placement.incremental import IncrementalSchedule, device_order, kept_order_start, ordered_evaluation
from placement.solution import SolveOptions
from solvers.refine import RefineStats, critical_chain, order_of, refine
from solvers.reschedule import bottom_levels, list_schedule, list_schedule_start
from tests.conftest import random_problem


@settings(max_examples=120, deadline=None)
@given(seed=st.integers(0, 10**6), n=st.integers(1, 14), k=st.integers(1, 4), zero=st.sampled_from([0.0, 0.3]),
       memory_model=st.sampled_from(["static", "peak"]))
def test_list_simulation_start_times_are_the_evaluators(seed, n, k, zero, memory_model):
    prob = random_problem(seed, n, k, zero_time_p=zero)
    pl = np.random.default_rng(seed).integers(0, k, size=n)
    prio = bottom_levels(prob, edge_delay(prob, pl))
    order, start = list_schedule_start(prob, pl, prio)
    ev = evaluate(prob, pl, order=order, memory_model=memory_model)
    assert np.array_equal(start, ev.start)  # bit for bit
    assert list_schedule(prob, pl, prio) == (order, ev.makespan)
    got = ordered_evaluation(prob, pl, order, start, memory_model)
    assert got is not None
    for field in ("placement", "start", "finish", "static_memory", "peak_memory"):
        assert np.array_equal(getattr(got, field), getattr(ev, field))
    assert got.makespan == ev.makespan and got.memory_model == memory_model
    # Any other start times are refused: a node started later than its order allows.
    late = start.copy()
    late[int(np.random.default_rng(seed + 1).integers(n))] += 0.5
    assert ordered_evaluation(prob, pl, order, late, memory_model) is None


@settings(max_examples=150, deadline=None)
@given(seed=st.integers(0, 10**6), n=st.integers(1, 14), k=st.integers(1, 4), fifo=st.booleans(),
       moved=st.lists(st.tuples(st.integers(0, 10**6), st.integers(0, 3)), max_size=8))
def test_kept_order_pass_equals_the_evaluator(seed, n, k, fifo, moved):
    """A schedule of one placement as the reference, any other placement ordered by it (refine's
    batch moves): the one-pass schedule is the evaluator's, bit for bit."""
    prob = random_problem(seed, n, k, zero_time_p=0.3)
    pl = np.random.default_rng(seed).integers(0, k, size=n)
    ref = evaluate(prob, pl).start if fifo else evaluate(prob, pl, order=device_order(prob, pl, np.zeros(n))).start
    new = pl.copy()
    for v, d in moved:
        new[v % n] = d % k
    start = kept_order_start(prob, new, ref)
    expected = evaluate(prob, new, order=order_of(prob, new, ref))
    assert start is not None and np.array_equal(start, expected.start)


def test_kept_order_pass_refuses_a_reference_that_is_not_a_schedule():
    prob = random_problem(3, 8, 2, edge_p=0.6, zero_time_p=0.0)
    assert prob.m > 0
    ref = -prob.topo_rank.astype(float)  # every edge runs backwards in this "schedule"
    assert kept_order_start(prob, np.zeros(prob.n, dtype=np.int64), ref) is None


def walk(prob, ev):
    """The critical chain node by node (session 8's code): the input arriving last if it arrives
    at the start, else the device predecessor in (start, finish) order if it finishes then."""
    start, finish, pl = ev.start, ev.finish, ev.placement
    delay = edge_delay(prob, pl)
    eps = 1e-9 * max(1.0, ev.makespan)
    order = np.lexsort((finish, start, pl))
    prev = np.full(prob.n, -1, dtype=np.int64)
    same = pl[order[1:]] == pl[order[:-1]]
    prev[order[1:][same]] = order[:-1][same]
    ptr, nbr, eid = prob.pred_ptr
    v = int(np.argmax(finish))
    chain, seen = [v], {v}
    while start[v] > eps:
        nxt = -1
        lo, hi = int(ptr[v]), int(ptr[v + 1])
        if hi > lo:
            arrive = finish[nbr[lo:hi]] + delay[eid[lo:hi]]
            j = int(np.argmax(arrive))
            if arrive[j] >= start[v] - eps:
                nxt = int(nbr[lo + j])
        if nxt < 0 and prev[v] >= 0 and finish[prev[v]] >= start[v] - eps:
            nxt = int(prev[v])
        if nxt < 0 or nxt in seen:
            break
        v = nxt
        seen.add(v)
        chain.append(v)
    return chain


@settings(max_examples=150, deadline=None)
@given(seed=st.integers(0, 10**6), n=st.integers(1, 30), k=st.integers(1, 4), zero=st.sampled_from([0.0, 0.3]))
def test_critical_chain_is_the_node_by_node_walk(seed, n, k, zero):
    prob = random_problem(seed, n, k, zero_time_p=zero)
    pl = np.random.default_rng(seed).integers(0, k, size=n)
    ev = evaluate(prob, pl)
    chain = critical_chain(prob, ev)
    assert chain == walk(prob, ev)
    assert ev.finish[chain[0]] == ev.makespan


@settings(max_examples=120, deadline=None)
@given(seed=st.integers(0, 10**6), n=st.integers(4, 16), k=st.integers(2, 4), fifo=st.booleans(),
       picks=st.lists(st.tuples(st.integers(0, 10**6), st.integers(0, 3)), min_size=2, max_size=4))
@example(seed=1333, n=13, k=3, fifo=True, picks=[(0, 0), (23, 0)])
def test_far_apart_moves_are_bounded_below_their_makespan(seed, n, k, fifo, picks):
    """Moves of a few nodes anywhere in the schedule, with the true new makespan as the cutoff
    (the hardest to prove): stopped early only with a bound between the cutoff and the truth."""
    prob = random_problem(seed, n, k, zero_time_p=0.3)
    pl = np.random.default_rng(seed).integers(0, k, size=n)
    ref = evaluate(prob, pl).start if fifo else evaluate(prob, pl, order=device_order(prob, pl, np.zeros(n))).start
    inc = IncrementalSchedule(prob, pl, ref)
    moves = {v % n: d % k for v, d in picks}
    new = pl.copy()
    for v, d in moves.items():
        new[v] = d
    # The incremental schedule keeps the order of the reference (ref start, rank), not of its own
    # start times: a FIFO reference may start a zero-time node beside its device predecessor, and
    # its ordered re-timing then moves it later (seed 1333: node 7 at 14 in ref, at 22 in inc.start).
    truth = evaluate(prob, new, order=device_order(prob, new, ref)).makespan
    for cutoff in (truth, truth - 0.5, inc.makespan):
        trial = inc.try_move(moves, cutoff=cutoff)
        if trial.complete:
            assert trial.makespan == truth
        else:
            assert cutoff <= trial.makespan <= truth


@pytest.mark.parametrize("family", ["lstm", "transformer"])
def test_pairs_far_apart_are_mostly_proved_without_retiming(family):
    """A critical node moved with a node far before it (refine's swaps and colocated pairs on
    LSTMs and transformers): the bound is valid on every pair and proves most rejected ones
    before any node is re-timed."""
    prob = generate(family, 1200, seed=1, devices=4)
    pl = np.asarray(etf(prob, SolveOptions()).placement)
    ref = evaluate(prob, pl).start
    inc = IncrementalSchedule(prob, pl, ref)
    cutoff = inc.makespan * (1 - 1e-9)
    rng = np.random.default_rng(0)
    crit = np.flatnonzero(inc.start + prob.time + inc.tail >= cutoff)
    late = crit[inc.start[crit] > 0.5 * inc.makespan]
    rejected = proved = 0
    for v in rng.choice(late, size=40).tolist():
        x = int(rng.choice(np.flatnonzero((inc.start < 0.25 * inc.makespan) & (pl != pl[v]))))
        d = int((pl[v] + 1 + rng.integers(prob.k - 1)) % prob.k)
        moves = {v: d, x: int(pl[v])}
        for y in (v, x):
            if prob.colocate[y] >= 0:
                moves.update((int(z), moves[y]) for z in prob.groups[prob.colocate[y]])
        new = pl.copy()
        for y, dy in moves.items():
            new[y] = dy
        truth = evaluate(prob, new, order=device_order(prob, new, ref)).makespan
        trial = inc.try_move(moves, cutoff=cutoff)
        if trial.complete:
            assert trial.makespan == truth
            continue
        # a bound sums the same terms in another order than the evaluator: equal up to rounding
        assert cutoff <= trial.makespan <= truth * (1 + 1e-12)
        rejected += 1
        proved += trial.recomputed == 0
    assert rejected >= 20 and proved >= rejected // 2


def test_batch_moves_use_the_one_pass_kept_order_and_the_simulations_times():
    """On a CNN from ETF (where batch moves pay) the lazy judgement times kept orders in one
    pass and takes accepted priority schedules from the simulation (never falling back), and the
    answer is a schedule the evaluator's checker accepts."""
    prob = generate("cnn", 1500, seed=1, devices=4)
    sol = etf(prob, SolveOptions())
    pl0 = np.asarray(sol.placement)
    ev0 = evaluate(prob, pl0, order=order_of(prob, pl0, np.asarray(sol.start)))
    used = {"kept": 0, "ordered": 0, "refused": 0}
    kept, ordered = refine_mod.kept_order_start, refine_mod.ordered_evaluation

    def spy_kept(*a):
        got = kept(*a)
        used["kept"] += got is not None
        return got

    def spy_ordered(*a):
        got = ordered(*a)
        used["ordered" if got is not None else "refused"] += 1
        return got

    refine_mod.kept_order_start, refine_mod.ordered_evaluation = spy_kept, spy_ordered
    try:
        stats = RefineStats()
        pl, ev = refine(prob, pl0, SolveOptions(seed=0), deadline=time.monotonic() + 1e6, max_evals=200,
                        keep_order=True, start=ev0.start, stats=stats)
    finally:
        refine_mod.kept_order_start, refine_mod.ordered_evaluation = kept, ordered
    assert used["kept"] > 0 and used["ordered"] > 0 and used["refused"] == 0
    from placement.evaluator import check
    checked = check(prob, pl, ev.start)
    assert checked.makespan == ev.makespan <= ev0.makespan and stats.accepted > 0


def test_small_batches_judged_incrementally_take_the_same_path():
    """Batch moves of at most SMALL_BATCH nodes are judged by the current incremental schedule
    (session 10): on a CNN from ETF (small batches late in the schedule) refine takes the same
    path as judging every batch's kept order in one full pass (SMALL_BATCH = 0), and the
    incremental judgement was used on batches that beat the incumbent and on batches that did not."""
    prob = generate("cnn", 1500, seed=1, devices=4)
    sol = etf(prob, SolveOptions())
    pl0 = np.asarray(sol.placement)
    ev0 = evaluate(prob, pl0, order=order_of(prob, pl0, np.asarray(sol.start)))
    kept = refine_mod._Search._kept_order
    runs = []
    for limit in (refine_mod.SMALL_BATCH, 0):
        judged = {"better": 0, "not": 0}

        def spy(self, pl, units, devs):
            ev, trial = kept(self, pl, units, devs)
            if trial is not None:
                judged["better" if ev is not None else "not"] += 1
            return ev, trial

        old = refine_mod.SMALL_BATCH
        refine_mod.SMALL_BATCH, refine_mod._Search._kept_order = limit, spy
        refine_mod.RUNS_FIRST = False  # whole chain runs first would spend the 600 evaluations before any small batch
        try:
            stats = RefineStats()
            pl, ev = refine(prob, pl0, SolveOptions(seed=0), deadline=time.monotonic() + 1e6, max_evals=600,
                            keep_order=True, start=ev0.start, stats=stats)
        finally:
            refine_mod.SMALL_BATCH, refine_mod._Search._kept_order = old, kept
            refine_mod.RUNS_FIRST = True
        runs.append((pl, ev, stats, judged))
    (pl_a, ev_a, st_a, used_a), (pl_b, ev_b, st_b, used_b) = runs
    assert used_a["better"] > 0 and used_a["not"] > 0 and used_b == {"better": 0, "not": 0}
    assert (st_a.evaluations, st_a.accepted, st_a.kicks) == (st_b.evaluations, st_b.accepted, st_b.kicks)
    assert np.array_equal(pl_a, pl_b) and np.array_equal(ev_a.start, ev_b.start) and ev_a.makespan == ev_b.makespan
    assert st_a.accepted > 0
