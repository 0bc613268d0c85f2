"""Refine's batch moves wait after repeated rejections (solvers/refine.py, BATCH_PATIENCE, session 13).

- from BATCH_PATIENCE rejections in a row, the next batch move waits 2, 4, 8, ... rounds, at most
  BATCH_WAIT_MAX; an accepted batch move ends the waits; BATCH_PATIENCE = None never waits;
- in a real search, batch moves are tried in rounds the rule allows only, and a search where
  batch moves never win tries fewer of them with the rule than without.
"""
from __future__ import annotations

import time

import numpy as np

import solvers.refine as refine_mod
from heuristics.list_scheduling import etf
from placement.evaluator import evaluate
from placement.generate import generate
from placement.solution import SolveOptions
from solvers.refine import RefineStats, refine
from tests.conftest import random_problem, skips_before_due


def search():
    prob = random_problem(1, 8, 2)
    return refine_mod._Search(prob, np.zeros(8, dtype=np.int64), SolveOptions(), time.monotonic() + 60, "static", None, 20,
                              RefineStats())


def due_pattern(s, outcomes):
    """For each outcome in turn: the rounds skipped before the batch move was due, then judge it."""
    return skips_before_due(s._batch_due, s._batch_judged, outcomes)


def test_waits_double_after_patience_and_end_at_an_acceptance(monkeypatch):
    monkeypatch.setattr(refine_mod, "BATCH_PATIENCE", 4)
    monkeypatch.setattr(refine_mod, "BATCH_WAIT_MAX", 32)
    s = search()
    assert due_pattern(s, [False] * 10) == [0, 0, 0, 0, 2, 4, 8, 16, 32, 32]
    s._batch_judged(True)  # e.g. an acceptance: due at once, and the count starts again
    assert due_pattern(s, [False] * 5 + [True, False]) == [0, 0, 0, 0, 2, 4, 0]
    monkeypatch.setattr(refine_mod, "BATCH_PATIENCE", None)
    s = search()
    assert due_pattern(s, [False] * 12) == [0] * 12


def test_a_search_whose_batch_moves_lose_tries_fewer_of_them(monkeypatch):
    """With every batch move rejected (judged, then refused), refine at a fixed budget tries fewer
    of them with the waits than without; single moves go on being accepted."""
    prob = generate("cnn", 1200, seed=5, devices=4)
    pl = np.asarray(etf(prob, SolveOptions()).placement)
    fifo = evaluate(prob, pl)
    tried = {}
    original = refine_mod._Search._try_batch
    for patience in (None, 4):
        monkeypatch.setattr(refine_mod, "BATCH_PATIENCE", patience)
        count = [0]

        def refused(self, units, devs, count=count):
            count[0] += 1
            cur = self.cur_key
            self.cur_key = (cur[0], 0.0)  # judged against an unbeatable makespan: never accepted
            try:
                return original(self, units, devs)
            finally:
                self.cur_key = cur

        monkeypatch.setattr(refine_mod._Search, "_try_batch", refused)
        stats = RefineStats()
        refine(prob, pl, SolveOptions(seed=2), deadline=time.monotonic() + 1e6, max_evals=600, keep_order=True,
               start=fifo.start, stats=stats)
        tried[patience] = (count[0], stats.accepted)
    assert tried[None][0] > 8 and tried[None][1] > 0  # the premise: many rounds, each with a batch move
    assert tried[4][0] < tried[None][0] and tried[4][1] > 0
