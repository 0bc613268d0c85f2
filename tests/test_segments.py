"""Segment search (solvers/segments.py): the sub-problem of a time slice of the schedule, the splice
of its answer back into the whole schedule, the search's guarantees and its arm in ``auto``."""
from __future__ import annotations

import time

import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from formulations.window_lns import timed
from heuristics.baselines import greedy_fill
from placement.evaluator import check, evaluate
from placement.generate import generate
from placement.solution import SolveOptions
from solvers.refine import order_of
from solvers.run import run
from solvers.segments import SegmentSearch, SegmentStats, segment_problem, splice

_PROBLEMS: dict = {}


def start_of(family: str, n: int, seed: int):
    """A generated graph and greedy-fill's placement with its FIFO schedule (a non-delay schedule:
    every node starts when its inputs and its device allow)."""
    key = (family, n, seed)
    if key not in _PROBLEMS:
        prob = generate(family, n, seed=seed, devices=3, memory_fraction=0.5)
        pl = np.asarray(greedy_fill(prob, SolveOptions()).placement)
        _PROBLEMS[key] = (prob, evaluate(prob, pl))
    return _PROBLEMS[key]


def base_order(prob, ev, seq):
    on = ev.placement[seq]
    return [seq[on == d].tolist() for d in range(prob.k)]


@settings(max_examples=25, deadline=None)
@given(family=st.sampled_from(["cnn", "lstm", "transformer"]), seed=st.integers(0, 2),
       a=st.floats(0, 1), b=st.floats(0, 1))
@example(family="cnn", seed=0, a=1.0, b=1.0)  # a window at the very end (was empty: lo = n)
def test_segment_of_the_incumbent_keeps_its_pins_and_never_promises_more(family, seed, a, b):
    prob, ev = start_of(family, 300, seed)
    seq = np.lexsort((prob.topo_rank, ev.start))
    lo, hi = sorted((int(a * prob.n), int(b * prob.n)))
    lo = min(lo, prob.n - 1)
    hi = max(hi, lo + 1)
    seg = segment_problem(prob, ev.placement, ev.start, ev.finish, seq, lo, hi)
    q, k = seg.problem, prob.k
    win = seq[lo:hi]
    assert np.array_equal(seg.nodes, win)
    t0 = ev.start[win].min()
    where = np.empty(prob.n, dtype=np.int64)
    where[seq] = np.arange(prob.n)
    before = where < lo
    for d in range(k):  # release nodes: pinned, as long as the last node before the window on d runs past T0
        fin = ev.finish[before & (ev.placement == d)]
        assert q.allowed[d] == (d,)
        assert q.time[d] == pytest.approx(max(0.0, fin.max(initial=-np.inf) - t0))
    for i in range(k, seg.offset):  # input nodes: zero time, on their producer's device, edges into the window only
        assert q.time[i] == 0 and q.allowed[i] == (int(seg.placement[i]),)
        assert np.all(q.dst[q.src == i] >= seg.offset)
    in_win = np.zeros(prob.n, dtype=bool)
    in_win[win] = True
    for i, v in enumerate(win.tolist()):  # colocation with a member outside the window pins the node there
        g = int(prob.colocate[v])
        if g >= 0 and (~in_win[prob.groups[g]]).any():
            out = prob.groups[g][~in_win[prob.groups[g]]]
            assert q.allowed[seg.offset + i] == (int(ev.placement[out[0]]),)
    need = prob.param_bytes + prob.out_bytes
    outside = np.bincount(ev.placement[~in_win], weights=need[~in_win], minlength=k)
    assert np.allclose(q.memory, np.maximum(prob.memory - outside, 0.0))
    # The incumbent's order on the sub-problem: inputs never arrive earlier than in the whole
    # schedule, so no window node starts earlier and the sub-makespan is at least the window's span.
    sub = evaluate(q, seg.placement, order=order_of(q, seg.placement, seg.start))
    assert np.all(sub.start[seg.offset:] >= ev.start[win] - t0 - 1e-9)
    assert sub.makespan >= ev.finish[win].max() - t0 - 1e-9


@pytest.mark.parametrize("family", ["cnn", "lstm"])
def test_splicing_the_incumbents_own_segment_gives_back_its_schedule(family):
    prob, ev = start_of(family, 300, 1)
    seq = np.lexsort((prob.topo_rank, ev.start))
    order = base_order(prob, ev, seq)
    for lo, hi in ((0, prob.n), (0, 100), (100, 200), (250, prob.n)):
        seg = segment_problem(prob, ev.placement, ev.start, ev.finish, seq, lo, hi)
        pl, new_order = splice(prob, order, seq, lo, hi, ev.placement, seg, seg.placement, seg.start)
        assert np.array_equal(pl, ev.placement)
        assert [sorted(o) for o in new_order] == [sorted(o) for o in order]
        got = timed(prob, pl, new_order, "static")
        assert got is not None and got.makespan == pytest.approx(ev.makespan, rel=1e-12)


def test_the_whole_graph_as_one_segment_is_the_problem_itself():
    prob, ev = start_of("cnn", 300, 2)
    seq = np.lexsort((prob.topo_rank, ev.start))
    seg = segment_problem(prob, ev.placement, ev.start, ev.finish, seq, 0, prob.n)
    q = seg.problem
    assert seg.offset == prob.k and np.all(q.time[:prob.k] == 0)  # no inputs from before, no releases
    assert q.m == prob.m
    sub = evaluate(q, seg.placement, order=order_of(q, seg.placement, seg.start))
    assert sub.makespan == pytest.approx(ev.makespan - ev.start.min(), rel=1e-12)


@pytest.mark.parametrize("family", ["cnn", "lstm"])
def test_segment_search_is_never_worse_adopts_better_schedules_and_goes_on(family):
    prob, ev0 = start_of(family, 300, 0)
    stats = SegmentStats()
    search = SegmentSearch(prob, ev0.placement, ev0.start, SolveOptions(seed=1), size=100, seconds=0.3, stats=stats)
    ev1 = search.run(time.monotonic() + 2.0)
    assert stats.segments > 0
    assert ev1.makespan <= ev0.makespan + 1e-9 and ev1.feasible(prob)
    check(prob, ev1.placement, ev1.start, "static")
    assert not search.adopt(ev0) or ev0.makespan < ev1.makespan
    done = stats.segments
    ev2 = search.run(time.monotonic() + 1.0)
    assert stats.segments > done and ev2.makespan <= ev1.makespan + 1e-9
    check(prob, ev2.placement, ev2.start, "static")
    assert stats.best_makespan == ev2.makespan


def _segment_extra() -> dict:
    return {"exact_max_nodes": 50, "lns_window": 60, "lns_window_seconds": 0.5, "segment_graph_nodes": 100,
            "segment_nodes": 120, "segment_seconds": 0.5}


def test_under_the_peak_model_every_kept_schedule_fits_the_peak():
    """A capacity of 1.1x the peak of a spread-out start: the segments' sub-problems carry no
    capacity, so some of their answers overflow once spliced; only schedules that fit under the
    peak model are kept, and the search is never worse than its start."""
    prob = generate("cnn", 400, seed=1, devices=3, memory_fraction=None)
    spread = np.where(prob.colocate >= 0, prob.colocate, np.arange(prob.n)) % prob.k  # groups kept whole
    start = evaluate(prob, spread, memory_model="peak")
    prob.memory = np.full(prob.k, 1.1 * float(start.peak_memory.max()))
    start = evaluate(prob, start.placement, memory_model="peak")
    assert start.feasible(prob)
    stats = SegmentStats()
    search = SegmentSearch(prob, start.placement, start.start, SolveOptions(seed=0), memory_model="peak", size=120,
                           seconds=0.5, stats=stats)
    ev = search.run(time.monotonic() + 6)
    assert stats.segments > 0
    assert ev.makespan <= start.makespan + 1e-9
    check(prob, ev.placement, ev.start, "peak")  # raises if a device's peak exceeds its capacity
    assert stats.best_makespan == ev.makespan


def test_segment_search_refuses_an_unknown_memory_model():
    prob, ev = start_of("cnn", 300, 0)
    with pytest.raises(ValueError, match="memory model"):
        SegmentSearch(prob, ev.placement, ev.start, SolveOptions(), memory_model="resident")


@pytest.mark.slow  # 8 s: the default suite (CI 10:08 in all on a loaded machine, session 42) sits near its cap
def test_auto_runs_segments_under_the_peak_model():
    prob = generate("cnn", 400, seed=3, devices=3, memory_fraction=0.6)
    res = run(prob, "auto", SolveOptions(time_limit=9, workers=2, memory_model="peak", extra=_segment_extra()))
    assert res.feasible
    names = [h["name"] for h in res.history]
    assert "segments" in names and "search" in names
    assert res.evaluation.makespan <= res.history[0]["makespan"] + 1e-9
    check(prob, res.evaluation.placement, res.evaluation.start, "peak")


@pytest.mark.slow  # 8 s; the peak-model twin above runs by default with the same assertions
def test_auto_with_segments_is_never_worse_than_its_warm_start():
    prob = generate("cnn", 400, seed=3, devices=3, memory_fraction=0.5)
    extra = {"exact_max_nodes": 50, "lns_window": 60, "lns_window_seconds": 0.5, "segment_graph_nodes": 100,
             "segment_nodes": 120, "segment_seconds": 0.5}
    res = run(prob, "auto", SolveOptions(time_limit=9, workers=2, extra=extra))
    assert res.feasible
    names = [h["name"] for h in res.history]
    assert "segments" in names and "search" in names
    assert res.evaluation.makespan <= res.history[0]["makespan"] + 1e-9
    check(prob, res.evaluation.placement, res.evaluation.start, "static")
