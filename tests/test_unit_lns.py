"""The unit LNS (formulations/unit_lns.py) on tiny training graphs, against enumeration: from a
poor feasible placement it returns a schedule the evaluator accepts within the peak capacities,
never worse than its start and never below the enumerated optimum; with every unit free and
memory not binding it reaches the optimum; where the memory-free model's best placement
overflows it keeps a feasible one. Also the held-tensor relaxation's floor and target options
against the enumerated optimum."""
from __future__ import annotations

import functools
import time
from dataclasses import replace

import numpy as np
import pytest

from formulations.bruteforce import placements
from formulations.cpsat import add_hint, build
from formulations.held_bound import held_relaxation_bound
from formulations.pathbound import path_lower_bound
from formulations.peak_search import best_schedule_bb
from formulations.unit_lns import critical_units, unit_lns
from formulations.units import units
from placement.evaluator import check
from placement.solution import SolveOptions
from tests.test_held_bound import instance

SEEDS = [("chain", s) for s in range(0, 30, 3)] + [("skip", s) for s in range(0, 40, 4)]


def opts(seconds: float = 20.0) -> SolveOptions:
    return SolveOptions(memory_model="peak", time_limit=seconds, workers=1, seed=0)


def _builder(q):
    return build(q, "static", symmetry=False)


@functools.lru_cache(maxsize=None)
def enumerated(p) -> float | None:
    got, complete = best_schedule_bb(p, placements(p), "peak")
    assert complete
    return None if got is None else got[0]


def worst_start(p):
    """The evaluation of the slowest placement's best schedule within capacity (a poor start),
    or None when no placement has one."""
    worst = None
    for pl in placements(p):
        got, _ = best_schedule_bb(p, [np.asarray(pl)], "peak")
        if got is not None and (worst is None or got[0] > worst[0]):
            worst = got
    return None if worst is None else check(p, worst[1], worst[2], "peak")


def run(p, ev, window: int, seconds: float = 3.0):
    return unit_lns(p, ev.placement, ev.start, opts(), time.monotonic() + seconds, "peak", _builder, add_hint,
                    window=window, window_seconds=0.5)


@pytest.mark.parametrize("kind,seed", SEEDS)
def test_unit_lns_answers_are_feasible_and_never_worse(kind, seed):
    p = instance(kind, seed)
    ev = worst_start(p)
    if ev is None:  # no schedule fits: nothing to start from (the enumeration agrees)
        assert enumerated(p) is None
        return
    pl, st, mk, stats = run(p, ev, window=2)
    got = check(p, pl, st, "peak")
    assert got.feasible(p)
    assert got.makespan == pytest.approx(mk)
    assert mk <= ev.makespan + 1e-9
    assert mk >= enumerated(p) - 1e-9
    assert stats.windows >= 1


@pytest.mark.parametrize("kind,seed", SEEDS)
def test_unit_lns_with_every_unit_free_reaches_the_optimum_when_memory_is_loose(kind, seed):
    p = replace(instance(kind, seed), memory=np.full(instance(kind, seed).k, 1e9))
    ev = worst_start(p)
    _, _, mk, stats = run(p, ev, window=units(p).count, seconds=10.0)
    assert mk == pytest.approx(enumerated(p), rel=1e-6)
    assert stats.closed >= 1


def test_unit_lns_keeps_memory_when_the_free_model_would_overflow():
    """Instances where the memory-free optimum is faster than the peak-feasible one: the search
    returns a feasible schedule, never the overflowing optimum."""
    seen = 0
    for kind, seed in SEEDS:
        p = instance(kind, seed)
        loose = replace(p, memory=np.full(p.k, 1e9))
        opt = enumerated(p)
        if opt is None or enumerated(loose) >= opt - 1e-9:
            continue
        ev = worst_start(p)
        if ev is None:
            continue
        seen += 1
        pl, st, mk, _ = run(p, ev, window=units(p).count, seconds=5.0)
        assert check(p, pl, st, "peak").feasible(p)
        assert mk >= opt - 1e-9
    assert seen >= 2


def test_critical_units_hold_the_last_finishing_node():
    p = next(q for q in (instance(*ks) for ks in SEEDS) if worst_start(q) is not None)
    ev = worst_start(p)
    crit = critical_units(p, ev.placement, ev.start, units(p))
    last = int(np.argmax(ev.start + p.time))
    assert int(units(p).of[last]) in crit


@pytest.mark.parametrize("kind,seed", [("chain", s) for s in range(0, 30, 5)] + [("skip", s) for s in range(0, 40, 5)])
def test_held_bound_floor_and_target_stay_below_the_optimum(kind, seed):
    p = instance(kind, seed)
    opt = enumerated(p)
    if opt is None:
        return
    floor = path_lower_bound(p, "peak")
    assert floor <= opt + 1e-9
    for target in (0.8 * opt, 0.95 * opt, opt, 1.2 * opt):
        hb = held_relaxation_bound(p, opts(10.0), 5.0, floor=floor, target=target)
        assert hb.bound <= opt * (1 + 1e-9) + 1e-9
        if target < opt * (1 - 1e-6) and hb.bound == target:
            assert not hb.proved  # a refuted target is a bound, not R's optimum
