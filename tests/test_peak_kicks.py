"""Kicks out of the peak descent's local minima (heuristics/peak_kicks.py) and min-memory's and the
portfolio's use of them."""
from __future__ import annotations

import numpy as np
from hypothesis import given, settings, strategies as st

from heuristics.min_memory import min_memory
from heuristics.peak_descent import descend, pressure
from heuristics.peak_holders import device_orders
from heuristics.peak_kicks import kick_descend
from placement.evaluator import check, evaluate, schedule_order
from placement.solution import SolveOptions
from tests.conftest import random_problem


def _stuck(seed: int, k: int, squeeze: float):
    """A random 9-node problem with everything on device 0 at ``squeeze`` x that placement's
    peak, and the plain descent's end from there."""
    prob = random_problem(seed, 9, k, edge_p=0.35)
    pl = np.zeros(prob.n, dtype=np.int64)
    seq = np.asarray(prob.topo_order)
    first = evaluate(prob, pl, order=device_orders(pl, seq, k), memory_model="peak")
    prob = prob.with_devices(k, memory=float(first.peak_memory.max()) * squeeze)
    return prob, descend(prob, pl, seq)


def test_kicks_fit_where_the_descent_stops_at_a_local_minimum():
    """random_problem(1, 9 nodes), K = 3, at half the one-device peak: the descent ends at a local
    minimum 2.8% over the capacity; kicks find a placement within it, and the evaluator's own
    check of its schedule confirms it."""
    prob, stuck = _stuck(1, 3, 0.5)
    assert stuck.reason.startswith("no move") and pressure(prob, stuck.evaluation)[0] > 1.02
    got, kicks = kick_descend(prob, stuck, seed=0, max_kicks=30)
    assert got.reason == "fits" and 1 <= kicks <= 30
    ev = check(prob, got.placement, got.evaluation.start, "peak")
    assert np.all(ev.peak_memory <= prob.memory * (1 + 1e-12))


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 10_000), k=st.integers(2, 3), squeeze=st.floats(0.45, 0.9), kick_seed=st.integers(0, 3))
def test_kicks_never_raise_the_pressure_and_repeat_given_the_seed(seed, k, squeeze, kick_seed):
    """From the descent's end on random problems: the pressure never rises, the evaluation returned
    is the evaluator's on the order returned, 'fits' only when it fits, and the same seed gives
    the same placement."""
    prob, stuck = _stuck(seed, k, squeeze)
    got, kicks = kick_descend(prob, stuck, seed=kick_seed, max_kicks=8)
    assert pressure(prob, got.evaluation) <= pressure(prob, stuck.evaluation)
    assert kicks <= 8
    if stuck.reason == "fits":
        assert kicks == 0 and got.reason == "fits"
    again = evaluate(prob, got.placement, order=got.order, memory_model="peak")
    assert np.array_equal(again.peak_memory, got.evaluation.peak_memory) and again.makespan == got.evaluation.makespan
    assert (got.reason == "fits") == again.feasible(prob)
    twin, _ = kick_descend(prob, stuck, seed=kick_seed, max_kicks=8)
    assert np.array_equal(twin.placement, got.placement)


def test_kicks_stop_when_told_with_the_start():
    prob, stuck = _stuck(1, 3, 0.5)
    got, kicks = kick_descend(prob, stuck, seed=0, stop=lambda: True)
    assert kicks == 0 and got.reason == "stopped" and np.array_equal(got.placement, stuck.placement)


def _earlier_minimum(prob, stuck) -> list:
    """The stuck end as min-memory's info["minima"] carries it to a later run."""
    over = float(np.max(stuck.evaluation.memory / prob.memory))
    return [(over, stuck.placement, schedule_order(prob, stuck.evaluation.start), "test")]


def test_min_memory_kicks_from_an_earlier_minimum_only_with_all_the_time():
    """Given an earlier run's local minimum and no descents left: with the time left its own
    (no descent_share: the portfolio's last turn) min-memory kicks from it and fits; without a
    time limit, or under a descent share (its turn among the other members), it leaves the
    minimum for later."""
    prob, stuck = _stuck(1, 3, 0.5)
    minima = _earlier_minimum(prob, stuck)
    opts = SolveOptions(memory_model="peak", time_limit=10, seed=0,
                        extra={"resume_descents": [], "kick_from": minima, "descent_share": None})
    sol = min_memory(prob, opts)
    assert sol.status == "heuristic" and sol.info["kicks"]["kicks"] >= 1, sol.reason
    ev = check(prob, sol.placement, sol.start, "peak")
    assert np.all(ev.peak_memory <= prob.memory * (1 + 1e-12)) and sol.objective == ev.makespan
    untimed = min_memory(prob, SolveOptions(memory_model="peak", seed=0, extra=opts.extra))
    assert untimed.status == "unknown" and "kicks" not in untimed.info  # no limit: no time to fill
    shared = min_memory(prob, SolveOptions(memory_model="peak", time_limit=10, seed=0,
                                           extra={"resume_descents": [], "kick_from": minima, "descent_share": 0.5}))
    assert shared.status == "unknown" and "kicks" not in shared.info
    assert shared.info["minima"][0][0] == minima[0][0]



def test_a_second_turn_does_not_repeat_the_first_turns_kicks(monkeypatch):
    """min-memory reports the kicks it made (info["kicked"]) and seeds its kicks with the run's
    seed and the kicks made before it, so a later turn from the same minimum makes other random
    choices than the first instead of repeating them."""
    import heuristics.min_memory as mm

    seeds = []
    real = mm.kick_descend

    def spy(problem, start, seed=0, stop=None, **kw):
        seeds.append(list(seed))
        return real(problem, start, seed=seed, stop=stop, **kw)

    monkeypatch.setattr(mm, "kick_descend", spy)
    prob, stuck = _stuck(33, 2, 0.6)
    extra = {"resume_descents": [], "kick_from": _earlier_minimum(prob, stuck), "descent_share": None}
    first = min_memory(prob, SolveOptions(memory_model="peak", time_limit=10, seed=7, extra=extra))
    made = first.info["kicks"]["kicks"]
    assert made >= 1 and first.info["kicked"] == made
    later = min_memory(prob, SolveOptions(memory_model="peak", time_limit=10, seed=7, extra={**extra, "kicked": made}))
    assert seeds == [[7, 0], [7, made]]
    assert later.info["kicked"] == made + later.info["kicks"]["kicks"]
