"""Refine's batch moves judged lazily (solvers/refine.py ``_Search._try_batch``), the list
simulation's makespan it screens with (solvers/reschedule.py ``list_schedule``), the memory of the
last rejected batch move, and the vectorised colocation check (placement/evaluator.py)."""
from __future__ import annotations

import time

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import solvers.refine as refine_mod
from heuristics.list_scheduling import etf
from placement.evaluator import ScheduleError, check, check_placement, edge_delay, evaluate
from placement.generate import generate
from placement.problem import make_problem
from placement.solution import SolveOptions
from solvers.refine import RefineStats, order_of, refine
from solvers.reschedule import bottom_levels, list_schedule, priority_order
from tests.conftest import random_problem


@settings(max_examples=120, deadline=None)
@given(seed=st.integers(0, 10**6), n=st.integers(1, 14), k=st.integers(1, 4), zero=st.sampled_from([0.0, 0.3]))
def test_list_simulation_never_below_the_evaluator_of_its_order(seed, n, k, zero):
    """The screen may only reject: the simulated makespan is at least the evaluator's makespan of
    the same order (the evaluator starts every node as early as that order allows)."""
    prob = random_problem(seed, n, k, zero_time_p=zero)
    pl = np.random.default_rng(seed).integers(0, k, size=n)
    prio = bottom_levels(prob, edge_delay(prob, pl))
    order, sim = list_schedule(prob, pl, prio)
    assert order == priority_order(prob, pl, prio)
    ev = evaluate(prob, pl, order=order)
    assert sim >= ev.makespan - 1e-9
    # The simulation is non-delay list scheduling: each node starts when its device and its inputs
    # allow, so on this evaluator it is exactly the ordered schedule's makespan.
    assert sim == pytest.approx(ev.makespan, rel=1e-12, abs=1e-12)


def _etf_start(prob):
    sol = etf(prob, SolveOptions())
    pl = np.asarray(sol.placement)
    return pl, evaluate(prob, pl, order=order_of(prob, pl, np.asarray(sol.start)))


@pytest.mark.parametrize("family,seed", [("cnn", 1), ("cnn", 2), ("transformer", 1)])
def test_lazy_batch_never_worse_valid_and_deterministic(family, seed):
    prob = generate(family, 800, seed=seed, devices=4)
    pl0, ev0 = _etf_start(prob)
    runs = []
    for _ in range(2):
        stats = RefineStats()
        pl, ev = refine(prob, pl0, SolveOptions(seed=seed), deadline=time.monotonic() + 1e6, max_evals=300,
                        keep_order=True, start=ev0.start, stats=stats, batch="lazy")
        runs.append((pl, ev, stats))
    (pl, ev, stats), (pl2, ev2, stats2) = runs
    assert np.array_equal(pl, pl2) and ev.makespan == ev2.makespan and stats.accepted == stats2.accepted
    check_placement(prob, pl)
    checked = check(prob, pl, ev.start)  # the answer is a valid schedule with the claimed makespan
    assert checked.makespan == ev.makespan and checked.feasible(prob)
    assert ev.makespan <= ev0.makespan
    assert stats.accepted > 0


def test_lazy_batch_accepts_batch_moves_on_a_cnn():
    """Where batch moves pay (a generated CNN from ETF), the lazy screen still lets them through:
    batch moves are accepted, by the priority schedule or the kept order."""
    prob = generate("cnn", 1500, seed=1, devices=4)
    pl0, ev0 = _etf_start(prob)
    accepted = []
    original = refine_mod._Search._try_batch

    def spy(self, units, devs):
        got = original(self, units, devs)
        accepted.append(got)
        return got

    refine_mod._Search._try_batch = spy
    try:
        _, ev = refine(prob, pl0, SolveOptions(seed=0), deadline=time.monotonic() + 1e6, max_evals=200,
                       keep_order=True, start=ev0.start, batch="lazy")
    finally:
        refine_mod._Search._try_batch = original
    assert sum(accepted) >= 1
    assert ev.makespan < ev0.makespan


def test_a_rejected_batch_move_is_not_tried_again_unchanged():
    """The batch move a round rejected is not offered again while the memory holds (a single move
    accepted elsewhere keeps it); an accepted move of the batch kind, an adopted schedule or a
    kick clear it."""
    prob = generate("cnn", 1500, seed=1, devices=4)
    pl0 = np.asarray(etf(prob, SolveOptions()).placement)
    fifo = evaluate(prob, pl0)
    search = refine_mod._Search(prob, pl0, SolveOptions(seed=0), time.monotonic() + 1e6, "static", None, 20,
                                RefineStats(), keep_order=True, start=fifo.start)
    search.unit_dev = search._unit_dev(search.cur)
    first = next(iter(search._candidates(search.cur_ev)))
    assert len(first) == 3 and first[2] is True  # the batch move comes first
    key = (tuple(first[0]), tuple(first[1]))
    search.rejected_batch = key
    again = [mv for mv in search._candidates(search.cur_ev) if len(mv) == 3]
    assert again == []  # not offered while remembered as rejected
    search.rejected_batch = None
    assert [(tuple(a), tuple(b)) for a, b, _ in (mv for mv in search._candidates(search.cur_ev) if len(mv) == 3)] == [key]
    # Judging it records it; accepting it (the CNN's first batch move pays) clears the memory.
    assert search._try(*first)
    assert search.rejected_batch is None
    search.rejected_batch = key
    search._kick()
    assert search.rejected_batch is None


def test_colocation_check_names_the_lowest_split_group():
    nodes = [{"id": i, "time": 1.0, "out_bytes": 0, "param_bytes": 0, "colocate": ["b", "a", "b", "a", "c"][i]}
             for i in range(5)]
    prob = make_problem(nodes, [], devices=3)
    groups = prob.colocate_names
    check_placement(prob, np.array([0, 1, 0, 1, 2]))  # every group whole
    for pl in ([0, 1, 2, 0, 2], [1, 0, 2, 1, 2]):
        split = {groups[g] for g in range(len(groups))
                 if len({pl[i] for i in range(5) if prob.colocate[i] == g}) > 1}
        lowest = min(split, key=groups.index)
        with pytest.raises(ScheduleError, match=f"colocation group '{lowest}' is split"):
            check_placement(prob, np.array(pl))


@pytest.mark.parametrize("family,seed", [("cnn", 1), ("cnn", 3)])
def test_the_screen_changes_no_decision(family, seed):
    """At a fixed evaluation budget the lazy judgement of batch moves takes the same path as
    evaluating both schedules in full: the screen only skips evaluations that could not win."""
    prob = generate(family, 1500, seed=seed, devices=4)
    pl0, ev0 = _etf_start(prob)
    got = {}
    for batch in ("lazy", "full"):
        stats = RefineStats()
        pl, ev = refine(prob, pl0, SolveOptions(seed=seed), deadline=time.monotonic() + 1e6, max_evals=250,
                        keep_order=True, start=ev0.start, stats=stats, batch=batch)
        got[batch] = (pl, ev.makespan, stats.accepted, stats.evaluations)
    assert np.array_equal(got["lazy"][0], got["full"][0])
    assert got["lazy"][1:] == got["full"][1:]
    assert got["lazy"][2] > 0
