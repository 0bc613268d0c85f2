"""Restarts of the alternating search (solvers/restarts.py, solvers/pipeline.py): when a track has
stalled, which starts come next, and that every track's best reaches the pipeline's incumbent."""
from __future__ import annotations

import math

import numpy as np
import pytest

from heuristics.baselines import single
from placement.evaluator import check, evaluate
from placement.generate import generate
from placement.memory_bounds import memory_lower_bound
from placement.solution import SolveOptions
from solvers.pipeline import Incumbent, _alternate_phase, _next_track
from solvers.progress import Heartbeat
from solvers.restarts import BAND_RATIO, StallWatch, band_start, restart_starts
from solvers.run import run, verify


def test_a_track_stalls_only_when_old_enough_and_flat_over_the_window():
    w = StallWatch(window=10.0, gain=0.01)
    w.restart(0.0, 100.0)
    w.record(4.0, 99.5)
    assert not w.stalled(9.9)  # younger than the window
    w.record(10.0, 99.4)
    assert w.stalled(10.0)  # 100 -> 99.4: 0.6% < 1%
    w.restart(0.0, 100.0)
    w.record(10.0, 98.0)
    assert not w.stalled(10.0)  # 2% in the window
    w.record(21.0, 97.5)
    assert w.stalled(21.0)  # from 98.0 (at 10, the last point 10 s back) to 97.5: 0.5%
    w.restart(30.0, 97.5)  # a new track forgets the old one
    assert not w.stalled(35.0)


def _inc(prob, model="static"):
    return Incumbent(prob, model, verify)


def test_a_track_hands_only_its_better_answers_to_the_pipeline():
    prob = generate("cnn", 120, seed=1, devices=3).with_devices(3, math.inf)
    answers = [run(prob, "etf", SolveOptions()).solution, single(prob, SolveOptions())]
    (fast_ms, fast), (slow_ms, slow) = sorted(((verify(prob, a, "static").makespan, a) for a in answers),
                                              key=lambda x: x[0])
    assert fast_ms < slow_ms
    inc = _inc(prob)
    inc.offer(fast)
    child = inc.track()
    assert child.best is None and child.deadline == inc.deadline
    assert child.offer(slow) is not None
    assert child.makespan == pytest.approx(slow_ms) and inc.makespan == pytest.approx(fast_ms)  # kept its own
    inc = _inc(prob)
    inc.offer(slow)
    child = inc.track()
    child.offer(fast)
    assert inc.makespan == pytest.approx(fast_ms)  # the track's better answer is the pipeline's


def test_the_next_track_skips_starts_that_do_not_fit():
    prob = generate("cnn", 120, seed=2, devices=3, memory_fraction=0.5)
    inc = _inc(prob)
    fits = run(prob, "etf", SolveOptions()).solution
    assert inc.offer(fits) is not None
    over = single(prob.with_devices(3, math.inf), SolveOptions())  # everything on one device
    assert not evaluate(prob, np.asarray(over.placement)).feasible(prob)
    got = _next_track(inc, iter([("over", over), ("fits", fits)]), stop=lambda: False)
    assert got is not None and got[1] == "fits"
    assert _next_track(inc, iter([("over", over)]), stop=lambda: False) is None
    assert _next_track(inc, iter([("fits", fits)]), stop=lambda: True) is None
    # a start far above the incumbent is passed over
    answers = [fits, run(prob, "greedy-fill", SolveOptions()).solution]
    (fast_ms, fast), (slow_ms, slow) = sorted(((verify(prob, a, "static").makespan, a) for a in answers),
                                              key=lambda x: x[0])
    ratio = slow_ms / fast_ms - 1
    assert ratio > 0.01
    inc = _inc(prob)
    inc.offer(fast)
    assert _next_track(inc, iter([("slow", slow)]), stop=lambda: False, max_above=ratio / 2) is None
    assert _next_track(inc, iter([("slow", slow)]), stop=lambda: False, max_above=2 * ratio)[1] == "slow"


def test_band_start_fits_its_made_up_capacity_and_defers_to_a_tighter_real_one():
    prob = generate("transformer", 400, seed=1, devices=4)
    loose = prob.with_devices(4, math.inf)
    cap = BAND_RATIO * memory_lower_bound(loose, "peak", 4)["best"]
    sol = band_start(loose, SolveOptions(), 30.0)
    assert sol is not None
    pl = np.asarray(sol.placement)
    ev = evaluate(loose.with_devices(4, cap), pl, sol.order, "peak")
    assert ev.feasible(loose.with_devices(4, cap))
    check(loose.with_devices(4, cap), pl, ev.start, "peak")
    assert len(set(pl.tolist())) > 1  # spread over devices: the point of the start
    # under the peak model at a capacity already as tight, the portfolio's band-repair ran there
    assert band_start(prob.with_devices(4, cap), SolveOptions(memory_model="peak"), 30.0) is None


def test_restart_starts_come_band_first_then_the_other_candidates_in_order():
    prob = generate("cnn", 300, seed=4, devices=4).with_devices(4, math.inf)
    a, b = run(prob, "etf", SolveOptions()).solution, run(prob, "heft", SolveOptions()).solution
    labels = [label for label, _ in restart_starts(prob, SolveOptions(), [a, b], ["etf", "heft"], lambda: 20.0)]
    assert labels[0].startswith("band-repair") and labels[1:] == ["etf", "heft"]


@pytest.mark.slow  # 18 s (two 10 s runs); the restart itself runs by default in test_searches_of_an_earlier_track_keep_their_phases
def test_auto_restarts_when_stalled_and_answers_the_best_track():
    """stall_gain 1 (and no least gap): every track counts as stalled once it is a window old, so the search moves on
    to the band start and then the other candidates; the answer is the evaluator's and no worse
    than any start offered."""
    prob = generate("cnn", 400, seed=3, devices=3).with_devices(3, math.inf)
    extra = {"exact_max_nodes": 50, "lns_window": 60, "lns_window_seconds": 0.5, "stall_gain": 1.0,
             "stall_slices": 1, "restart_min_slices": 1, "restart_min_gap": 0.0,
             "restart_max_above": 10.0}
    res = run(prob, "auto", SolveOptions(time_limit=10, workers=2, extra=extra))
    note = next(p["note"] for p in res.history if p.get("name") == "search")
    assert "restart from band-repair" in note
    band = band_start(prob, SolveOptions(), 30.0)
    band_ms = evaluate(prob, np.asarray(band.placement), band.order).makespan
    assert res.evaluation.makespan <= band_ms + 1e-9
    check(prob, res.evaluation.placement, res.evaluation.start, "static")
    off = run(prob, "auto", SolveOptions(time_limit=10, workers=2, extra={**extra, "restarts": False}))
    assert "restart" not in next(p["note"] for p in off.history if p.get("name") == "search")


def test_searches_of_an_earlier_track_keep_their_phases():
    """The first track runs every search, then restarts with little time left, so the new track
    (fresh searches) may never reach window LNS: the phases still report every search that ran."""
    prob = generate("cnn", 300, seed=5, devices=3).with_devices(3, math.inf)
    start = run(prob, "etf", SolveOptions()).solution
    inc = _inc(prob)
    inc.offer(start)
    opts = SolveOptions(workers=1, extra={"lns_window": 60, "lns_window_seconds": 0.5, "stall_gain": 1.0,
                                          "stall_slices": 2.5, "restart_min_slices": 0.5, "restart_min_gap": 0.0,
                                          "restart_max_above": 10.0})
    with Heartbeat(None, lambda: inc.makespan, 0.0) as hb:
        phases = _alternate_phase(prob, opts, inc, 0.0, 6.0, hb, None, iter([("etf again", start)]))
    by_name = {ph.name: ph for ph in phases}
    note = by_name["search"].note
    assert "restart from etf again" in note
    assert "exact-lns" in note.split("restart from")[0]  # the first track ran LNS
    assert {"joins", "relist", "refine", "exact-lns"} <= set(by_name)
    assert inc.makespan <= verify(prob, start, "static").makespan + 1e-9
