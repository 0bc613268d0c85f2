"""List re-scheduling of schedule windows (heuristics/window_relist.py) and the window boundary it
shares with the exact LNS model (placement/window_boundary.py)."""
from __future__ import annotations

import threading

import numpy as np
import pytest

from formulations.window_lns import schedule_positions, timed
from heuristics.baselines import greedy_fill
from heuristics.window_relist import merged_order, relist
from placement.evaluator import evaluate
from placement.generate import generate
from placement.incremental import IncrementalSchedule, timing_graph
from placement.problem import make_problem
from placement.solution import SolveOptions
from tests.conftest import filled_random
from placement.window_boundary import window_boundary


def _fan_in() -> tuple:
    """A fork F, four branches (a head that must stay on F's device: its input costs 100 to move,
    then a tail of 0.3 that pays 0.5 each way when it leaves), a join J on F's device. The heads
    launched longest first (2.0, 1.9, 1.8, 0.8), the first three tails away, the last home: the
    third tail's return reaches J at 8.0, 0.2 after the last tail ends at 7.8."""
    heads = [2.0, 1.9, 1.8, 0.8]
    nodes = [{"id": "F", "time": 1.0, "out_bytes": 0, "param_bytes": 0},
             {"id": "J", "time": 1.0, "out_bytes": 0, "param_bytes": 0}]
    edges = []
    for i, h in enumerate(heads):
        nodes += [{"id": f"h{i}", "time": h, "out_bytes": 0, "param_bytes": 0},
                  {"id": f"t{i}", "time": 0.3, "out_bytes": 0, "param_bytes": 0}]
        edges += [{"src": "F", "dst": f"h{i}", "comm": 100.0}, {"src": f"h{i}", "dst": f"t{i}", "comm": 0.5},
                  {"src": f"t{i}", "dst": "J", "comm": 0.5}]
    prob = make_problem(nodes, edges, devices=2)
    ix = prob.index
    placement = np.zeros(prob.n, dtype=np.int64)
    for i in range(3):
        placement[ix[f"t{i}"]] = 1
    order = [[ix[x] for x in ("F", "h0", "h1", "h2", "h3", "t3", "J")], [ix[f"t{i}"] for i in range(3)]]
    ev = evaluate(prob, placement, order=order)
    return prob, ev


def test_the_fan_in_launches_a_long_branch_last_and_reaches_the_work_bound():
    prob, ev = _fan_in()
    assert ev.makespan == pytest.approx(9.0)  # J waits for t2's return at 8.0
    base = IncrementalSchedule(prob, ev.placement, ev.start, timing_graph(prob))
    seq, _ = schedule_positions(base)
    bd = window_boundary(base, 1, prob.n, seq)  # everything but F
    got = relist(prob, base, bd, np.random.default_rng(0), tries=1)  # the sibling plans alone
    assert got is not None
    # F's device runs F and every head one at a time (7.5), then a tail (0.3), then J (1.0): 8.8
    assert got[2] == pytest.approx(8.8)
    pl, order = merged_order(base, seq, [(1, prob.n, got[0], got[1])])
    again = timed(prob, pl, order, "static")
    assert again.makespan == pytest.approx(8.8)


def test_an_optimal_window_is_left_alone():
    prob, ev = _fan_in()
    ix = prob.index
    placement = ev.placement.copy()
    # the short head launched third: every return trip is covered, J starts at the work bound
    order = [[ix[x] for x in ("F", "h0", "h1", "h3", "h2", "t2", "J")], [ix[f"t{i}"] for i in (0, 1, 3)]]
    placement[ix["t2"]], placement[ix["t3"]] = 0, 1
    best = evaluate(prob, placement, order=order)
    assert best.makespan == pytest.approx(8.8)
    base = IncrementalSchedule(prob, best.placement, best.start, timing_graph(prob))
    seq, _ = schedule_positions(base)
    assert relist(prob, base, window_boundary(base, 0, prob.n, seq), np.random.default_rng(1), tries=20) is None


@pytest.mark.parametrize("kind,seed", [("cnn", 0), ("cnn", 1), ("transformer", 2), ("lstm", 3)])
def test_a_window_answer_is_what_the_evaluator_makes_of_it_and_beats_the_incumbent(kind, seed):
    prob = generate(kind, 500, seed=seed, devices=4, memory_fraction=None)
    ev = evaluate(prob, np.asarray(greedy_fill(prob, SolveOptions()).placement))
    base = IncrementalSchedule(prob, ev.placement, ev.start, timing_graph(prob))
    seq, _ = schedule_positions(base)
    rng = np.random.default_rng(seed)
    found = 0
    for lo in rng.integers(0, prob.n - 40, 12).tolist():
        bd = window_boundary(base, lo, lo + 40, seq)
        got = relist(prob, base, bd, rng, tries=6)
        if got is None:
            continue
        found += 1
        assert got[2] < base.makespan
        pl, order = merged_order(base, seq, [(lo, lo + 40, got[0], got[1])])
        assert (pl[seq[:lo]] == base.placement[seq[:lo]]).all() and (pl[seq[lo + 40:]] == base.placement[seq[lo + 40:]]).all()
        again = timed(prob, pl, order, "static")
        assert again is not None
        assert again.makespan == pytest.approx(got[2], rel=1e-12, abs=1e-9)
    assert found > 0


def test_merged_windows_keep_every_node_outside_them_in_its_place():
    prob = generate("cnn", 500, seed=5, devices=3, memory_fraction=None)
    ev = evaluate(prob, np.asarray(greedy_fill(prob, SolveOptions()).placement))
    base = IncrementalSchedule(prob, ev.placement, ev.start, timing_graph(prob))
    seq, where = schedule_positions(base)
    answers = []
    for lo in (40, 200, 400):
        bd = window_boundary(base, lo, lo + 30, seq)
        got = relist(prob, base, bd, np.random.default_rng(lo), tries=6)
        if got is not None:
            answers.append((lo, lo + 30, got[0], got[1]))
    assert answers
    pl, order = merged_order(base, seq, answers)
    inside = np.zeros(prob.n, dtype=bool)
    for lo, hi, dev, _ in answers:
        inside[seq[lo:hi]] = True
        assert (pl[seq[lo:hi]] == dev).all()
    assert (pl[~inside] == base.placement[~inside]).all()
    slot = where.astype(float)  # a window's nodes all sit at its first position
    for lo, hi, _, _ in answers:
        slot[seq[lo:hi]] = lo
    for d, nodes in enumerate(order):
        assert sorted(nodes) == np.flatnonzero(pl == d).tolist()
        assert np.all(np.diff(slot[nodes]) >= 0)  # the base's order, each window's nodes in its slot
    assert timed(prob, pl, order, "static") is not None


@pytest.mark.parametrize("seed", range(12))
def test_a_plan_never_promises_less_than_the_evaluator_gives(seed):
    """Random graphs with zero-time nodes, colocation groups and a capacity; windows of every kind,
    the last one past the end of the schedule: the evaluator's makespan of a kept plan is at most
    the judge's (equal on the generated graphs above; the caller confirms every answer anyway)."""
    prob, _, ev0 = filled_random(seed, "static", 60, 0.2)
    base = IncrementalSchedule(prob, ev0.placement, ev0.start, timing_graph(prob))
    seq, where = schedule_positions(base)
    rng = np.random.default_rng(seed)
    for lo in range(0, 56, 7):
        hi = lo + 15  # the last window runs past the 60 nodes
        got = relist(prob, base, window_boundary(base, lo, hi, seq, where), rng, tries=6)
        if got is None:
            continue
        assert got[2] < base.makespan
        pl, order = merged_order(base, seq, [(lo, hi, got[0], got[1])])
        again = timed(prob, pl, order, "static")
        assert again is not None and again.makespan <= got[2] + 1e-9


def test_no_plan_starts_past_its_deadline_or_after_a_stop():
    prob, ev = _fan_in()
    base = IncrementalSchedule(prob, ev.placement, ev.start, timing_graph(prob))
    seq, _ = schedule_positions(base)
    bd = window_boundary(base, 1, prob.n, seq)
    assert relist(prob, base, bd, np.random.default_rng(0), tries=1) is not None
    assert relist(prob, base, bd, np.random.default_rng(0), tries=1, until=0.0) is None
    stop = threading.Event()
    stop.set()
    assert relist(prob, base, bd, np.random.default_rng(0), tries=1, stop=stop) is None
