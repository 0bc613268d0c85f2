"""Refine's memory-aware rescue waits after rescues that fit nothing (solvers/refine.py,
RESCUE_PATIENCE, session 26).

- the rule alone: RESCUE_PATIENCE misses in a row, then 2, 4, ... up to RESCUE_WAIT_MAX skipped
  chances between rescues; a rescue that fits ends the waits; never a wait while the current
  schedule overflows;
- a rescue that fits but does not beat the current schedule is a miss (the move is rejected
  anyway), one that beats it resets the count;
- in a real search under the peak model whose rescues never fit, the answer is the same as with a
  rescue at every overflowing move (a skipped rescue could only have been rejected), with a
  fraction of the rescues; from a placement that overflows and stays so, every overflowing move
  still gets its rescue.
"""
from __future__ import annotations

import time

import numpy as np
import pytest

import solvers.refine as refine_mod
from heuristics.list_scheduling import etf
from placement.evaluator import evaluate
from placement.generate import generate
from placement.memory_bounds import memory_lower_bound
from placement.solution import SolveOptions
from solvers.refine import RefineStats, refine
from tests.conftest import random_problem, skips_before_due


def search(cur_overflow: float = 0.0):
    prob = random_problem(1, 8, 2)
    s = refine_mod._Search(prob, np.zeros(8, dtype=np.int64), SolveOptions(), time.monotonic() + 60, "static", None,
                           20, RefineStats())
    s.cur_key = (cur_overflow, s.cur_key[1])
    return s


def pattern(s, outcomes):
    """For each outcome in turn: the chances skipped before a rescue was due, then judge it."""
    return skips_before_due(s._rescue_due, s._rescue_judged, outcomes)


def test_waits_grow_after_patience_and_reset_on_a_fit() -> None:
    p = refine_mod.RESCUE_PATIENCE
    got = pattern(search(), [False] * (p + 8) + [True, False])
    cap = refine_mod.RESCUE_WAIT_MAX
    assert got[:p] == [0] * p
    assert got[p:p + 8] == [min(cap, 2 ** i) for i in range(1, 9)]
    # a fit: the next rescue waits for nothing, and the misses start counting again
    assert got[p + 8] == min(cap, 2 ** 9) and got[p + 9] == 0
    s = search()
    pattern(s, [False] * (p + 3) + [True])
    assert pattern(s, [False] * p) == [0] * p


def test_no_wait_while_the_current_schedule_overflows() -> None:
    s = search(cur_overflow=1.0)
    assert pattern(s, [False] * (3 * refine_mod.RESCUE_PATIENCE)) == [0] * (3 * refine_mod.RESCUE_PATIENCE)


def _tight_cnn():
    prob = generate("cnn", nodes=150, devices=3, seed=1)
    lb = memory_lower_bound(prob, "peak")["best"]
    return prob.with_devices(3, [1.8 * lb] * 3)  # ETF fits; many moves overflow


def _run(prob, placement, patience: int, monkeypatch, evals: int = 250):
    """Refine with a rescue that never fits (it counts its calls): answer, evaluation, calls."""
    calls = []

    def never_fits(problem, pl, stop=None):
        calls.append(1)
        return None

    monkeypatch.setattr(refine_mod, "memory_aware_order", never_fits)
    monkeypatch.setattr(refine_mod, "RESCUE_PATIENCE", patience)
    pl, ev = refine(prob, placement, SolveOptions(seed=3), deadline=time.monotonic() + 600, memory_model="peak",
                    max_evals=evals)
    return pl, ev, len(calls)


def test_skipped_rescues_that_would_not_fit_change_nothing(monkeypatch) -> None:
    prob = _tight_cnn()
    patience = refine_mod.RESCUE_PATIENCE
    sol = etf(prob, SolveOptions(memory_model="peak"))
    assert sol.placement is not None and evaluate(prob, sol.placement, memory_model="peak").feasible(prob)
    pl_always, ev_always, calls_always = _run(prob, sol.placement, 10 ** 9, monkeypatch, evals=1500)
    pl_wait, ev_wait, calls_wait = _run(prob, sol.placement, patience, monkeypatch, evals=1500)
    assert calls_always >= 40  # moves overflow often at 1.8x the memory bound
    assert np.array_equal(pl_always, pl_wait) and ev_always.makespan == ev_wait.makespan
    assert ev_wait.feasible(prob)
    assert calls_wait <= patience + 8 < calls_always


def test_an_overflowing_start_keeps_every_rescue(monkeypatch) -> None:
    prob = generate("cnn", nodes=150, devices=3, seed=1)
    lb = memory_lower_bound(prob, "peak")["best"]
    prob = prob.with_devices(3, [0.5 * lb] * 3)  # nothing fits: every schedule overflows
    start = np.zeros(prob.n, dtype=np.int64)
    patience = refine_mod.RESCUE_PATIENCE
    _, ev_always, calls_always = _run(prob, start, 10 ** 9, monkeypatch, evals=120)
    _, ev_wait, calls_wait = _run(prob, start, patience, monkeypatch, evals=120)
    assert not ev_wait.feasible(prob)
    assert calls_wait == calls_always >= 100
    assert ev_wait.makespan == ev_always.makespan


@pytest.mark.parametrize("patience", [1, 3])
def test_patience_counts_misses_in_a_row(patience, monkeypatch) -> None:
    monkeypatch.setattr(refine_mod, "RESCUE_PATIENCE", patience)
    got = pattern(search(), [False] * (patience + 2))
    assert got == [0] * patience + [2, 4]


def _overflowing_search(monkeypatch, rescued_makespan_delta: float):
    """A search on the tight CNN from ETF's feasible placement, whose rescue (stubbed) returns the
    current schedule with its makespan shifted by ``rescued_makespan_delta``, and a placement whose
    FIFO schedule overflows."""
    from dataclasses import replace

    prob = _tight_cnn()
    sol = etf(prob, SolveOptions(memory_model="peak"))
    s = refine_mod._Search(prob, np.asarray(sol.placement), SolveOptions(), time.monotonic() + 600, "peak", None, 20,
                           RefineStats())
    assert s.cur_key[0] == 0.0
    monkeypatch.setattr(refine_mod, "memory_aware_order", lambda problem, pl, stop=None: [[] for _ in range(problem.k)])
    rescued = replace(s.cur_ev, makespan=s.cur_ev.makespan + rescued_makespan_delta)
    monkeypatch.setattr(s, "_ordered", lambda pl, order: rescued)
    over = np.zeros(prob.n, dtype=np.int64)  # everything on one device: far over its capacity
    assert not evaluate(prob, over, memory_model="peak").feasible(prob)
    return s, over


def test_a_rescue_that_fits_but_does_not_beat_the_current_schedule_is_a_miss(monkeypatch) -> None:
    s, over = _overflowing_search(monkeypatch, 0.0)
    for _ in range(refine_mod.RESCUE_PATIENCE):
        assert s._eval(over, None).feasible(s.p)  # the rescue fitted ...
    assert s.rescue_waits.wait == 2  # ... but no move could have been accepted: the next ones wait


def test_a_rescue_that_beats_the_current_schedule_resets_the_wait(monkeypatch) -> None:
    s, over = _overflowing_search(monkeypatch, -1e-3)
    for _ in range(3 * refine_mod.RESCUE_PATIENCE):
        s._eval(over, None)
    assert s.rescue_waits.misses == 0 and s.rescue_waits.wait == 0
