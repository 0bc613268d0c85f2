"""Targeted LNS windows (formulations/window_lns.py, session 21): stretches of the bypass bound's
chain ranked by the time the incumbent lost there against the bound, solved before (and then in
turns with) the critical windows."""
from __future__ import annotations

import time

import numpy as np
import pytest

from formulations.window_lns import CRITICAL_DRY, LnsStats, WindowSearch, loss_stretches, target_turn
from heuristics.baselines import greedy_fill
from placement.evaluator import check, evaluate
from placement.generate import generate
from placement.incremental import IncrementalSchedule, timing_graph
from placement.memory_path_bound import best_path
from placement.solution import SolveOptions


def _base(seed: int = 0):
    prob = generate("cnn", 600, seed=seed, devices=3, memory_fraction=None)
    ev = evaluate(prob, np.asarray(greedy_fill(prob, SolveOptions()).placement))
    base = IncrementalSchedule(prob, ev.placement, ev.start, timing_graph(prob))
    chain = np.asarray(best_path(prob, prob.time, np.zeros(prob.m)), dtype=np.int64)
    return prob, base, chain


@pytest.mark.parametrize("seed", range(3))
def test_stretches_are_disjoint_small_enough_and_ranked_by_the_time_lost_for_good(seed):
    prob, base, chain = _base(seed)
    rng = np.random.default_rng(seed)
    lead = np.cumsum(rng.exponential(1.0, len(chain)))  # a made-up lead over the bound, rising...
    lead[rng.integers(0, len(chain), 5)] += 50.0  # ...with spikes the chain catches up on
    fin = base.finish[chain] - lead
    size = 40
    got = loss_stretches(base, chain, fin, size)
    assert got
    seq = np.lexsort((base.graph.rank, base.start))
    where = np.empty(prob.n, dtype=np.int64)
    where[seq] = np.arange(prob.n)
    settled = np.minimum.accumulate(lead[::-1])[::-1]  # the lead kept for good
    covered = np.zeros(len(chain), dtype=bool)
    for loss, i, j in got:
        assert i < j
        assert where[chain[j]] - where[chain[i]] < size
        assert loss == pytest.approx(settled[j] - settled[i])
        assert not covered[i:j + 1].any()
        covered[i:j + 1] = True
    assert [g[0] for g in got] == sorted((g[0] for g in got), reverse=True)
    # the first is the best stretch anywhere (the spikes, caught up later, count for nothing)
    best = max(settled[j] - settled[i] for i in range(len(chain)) for j in range(i + 1, len(chain))
               if where[chain[j]] - where[chain[i]] < size)
    assert got[0][0] == pytest.approx(best)


def test_used_positions_are_left_out():
    prob, base, chain = _base()
    fin = base.finish[chain] - np.arange(len(chain), dtype=float)
    used = np.zeros(len(chain), dtype=bool)
    used[: len(chain) // 2] = True
    for _, i, j in loss_stretches(base, chain, fin, 40, used):
        assert not used[i:j + 1].any()


@pytest.mark.parametrize("seed", [0, pytest.param(1, marks=pytest.mark.slow)])  # seed 1: 8 s more
def test_targeted_windows_never_worsen_and_their_answer_is_the_evaluators(seed):
    prob = generate("cnn", 1500, seed=seed, devices=4, memory_fraction=0.6)
    ev = evaluate(prob, np.asarray(greedy_fill(prob, SolveOptions()).placement))
    stats = LnsStats()
    search = WindowSearch(prob, ev.placement, ev.start, SolveOptions(seed=seed, workers=2), window=60,
                          window_seconds=0.5, stats=stats, target_seconds=1.0)
    got = search.run(time.monotonic() + 8)
    assert stats.targeted > 0
    assert got.makespan <= search.stats.start_makespan + 1e-9
    again = check(prob, got.placement, got.start, "static")  # raises if it breaks a constraint
    assert again.makespan == pytest.approx(got.makespan)
    assert stats.best_makespan == pytest.approx(got.makespan)


def test_small_graphs_leave_targets_out_by_default():
    prob = generate("cnn", 600, seed=0, devices=3, memory_fraction=None)
    ev = evaluate(prob, np.asarray(greedy_fill(prob, SolveOptions()).placement))
    search = WindowSearch(prob, ev.placement, ev.start, SolveOptions(seed=0), window=60, window_seconds=0.3)
    search.run(time.monotonic() + 2)
    assert search.stats.targeted == 0


def test_targets_take_every_turn_once_the_critical_windows_run_dry():
    assert target_turn(1.0, 1.0, 0) and not target_turn(2.0, 1.0, 0)  # half and half
    assert target_turn(2.0, 1.0, CRITICAL_DRY) and not target_turn(2.0, 1.0, CRITICAL_DRY - 1)
    prob = generate("cnn", 1500, seed=0, devices=4, memory_fraction=0.6)
    ev = evaluate(prob, np.asarray(greedy_fill(prob, SolveOptions()).placement))
    search = WindowSearch(prob, ev.placement, ev.start, SolveOptions(seed=0, workers=2), window=60,
                          window_seconds=0.5, target_seconds=1.0)
    search.spent = {"target": 100.0, "critical": 0.0}  # far past their half
    search.critical_fails = CRITICAL_DRY
    search.run(time.monotonic() + 4)
    assert search.stats.targeted > 0
