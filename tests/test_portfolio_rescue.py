"""A run that found no memory-feasible placement, run again (heuristics/portfolio.py RERUN_USED):
min-memory's descents go on where they stopped, members that said no on their own are not asked
again, and the descents keep the time left when every member has had its turn."""
from __future__ import annotations

import numpy as np
import pytest

import heuristics.min_memory as mm
import heuristics.portfolio as pf
from heuristics.peak_descent import descents as real_descents
from placement.evaluator import check
from placement.generate import generate
from placement.memory_bounds import memory_lower_bound
from placement.solution import Solution, SolveOptions
from tests.conftest import random_problem


def _tight(family: str = "transformer", n: int = 200, k: int = 4, ratio: float = 1.2):
    """A generated training graph at a capacity where every min-memory pass overflows and the
    descent from them fits (tests/test_peak_descent.py measured these)."""
    p = generate(family, n, seed=1, devices=k)
    lb = memory_lower_bound(p.with_devices(k, memory=np.inf), "peak", k)["best"]
    return p.with_devices(k, memory=lb * ratio)


def _cut_after(monkeypatch, calls: int) -> None:
    """min-memory's descents stop after ``calls`` questions to their stop function (one per
    evaluation tried): a deterministic clock."""
    asked = [0]

    def counted(problem, starts, stop=None):
        def tick() -> bool:
            asked[0] += 1
            return asked[0] > calls or (stop is not None and stop())
        return real_descents(problem, starts, tick)

    monkeypatch.setattr(mm, "descents", counted)


def test_a_cut_descent_goes_on_from_where_it_stopped(monkeypatch):
    prob = _tight("cnn", 300, 3, 1.15)  # the descent fits after 40 evaluations
    opts = SolveOptions(memory_model="peak", time_limit=60)
    whole = mm.min_memory(prob, opts)
    assert whole.status == "heuristic" and whole.info["descents"]  # fits only through a descent
    _cut_after(monkeypatch, 20)
    cut = mm.min_memory(prob, opts)
    assert cut.status == "unknown" and cut.info["descents"][-1]["ended"] == "stopped"
    first = cut.info["resume"][0]
    nearest_pass = min(p["memory_over_capacity"] for p in cut.info["passes"])
    assert first[0] == pytest.approx(cut.info["descents"][-1]["to"]) and first[0] < nearest_pass
    monkeypatch.setattr(mm, "descents", real_descents)
    on = mm.min_memory(prob, SolveOptions(memory_model="peak", time_limit=60, extra={"resume_descents": cut.info["resume"]}))
    assert on.status == "heuristic", on.reason
    assert on.info["passes"] == [] and on.info["resumed"] == len(cut.info["resume"])
    ev = check(prob, on.placement, on.start, "peak")  # precedence, one node at a time, memory
    assert ev.makespan == pytest.approx(on.objective)


def test_a_descent_at_its_local_minimum_is_not_resumed(monkeypatch):
    """Only starts not yet descended, and the end of one the clock cut, are handed on as descents;
    a local minimum is handed on as where kicks start."""
    prob = _tight()
    monkeypatch.setattr(mm, "descents", lambda problem, starts, stop=None: iter(()))  # no descent runs
    sol = mm.min_memory(prob, SolveOptions(memory_model="peak", time_limit=60))
    starts = sol.info["resume"]
    assert sol.status == "unknown" and len(starts) >= 2
    assert [s[0] for s in starts] == sorted(s[0] for s in starts)  # nearest to fitting first
    assert len({np.asarray(s[1]).tobytes() for s in starts}) == len(starts)  # alike placements once

    def one_local_minimum(problem, starts_, stop=None):
        for i, got, seconds in real_descents(problem, starts_[:1], lambda: False):
            got.reason = "no move of a peak holder lowers the peaks"
            got.evaluation.peak_memory[:] = problem.memory * 1.5  # as if it ended above capacity
            yield i, got, seconds

    monkeypatch.setattr(mm, "descents", one_local_minimum)
    # under a descent share (its turn among the members) it does not kick from the minimum either
    again = mm.min_memory(prob, SolveOptions(memory_model="peak", time_limit=60,
                                             extra={"resume_descents": starts, "descent_share": 0.5}))
    assert again.status == "unknown" and "kicks" not in again.info
    assert [m[3] for m in again.info["minima"]] == [starts[0][3]] and again.info["minima"][0][0] == pytest.approx(1.5)
    assert [s[3] for s in again.info["resume"]] == [s[3] for s in starts[1:]]
    assert all(np.array_equal(a[1], b[1]) for a, b in zip(again.info["resume"], starts[1:]))


@pytest.mark.parametrize("record, skip", [
    ({"status": "unknown", "feasible": False, "seconds": 0.2, "limit": 4.0}, True),  # said no on its own
    ({"status": "unknown", "feasible": False, "seconds": 3.0, "limit": 4.0}, False),  # the clock may have cut it
    ({"status": "unknown", "feasible": False, "seconds": 9.0, "limit": None}, True),  # no limit: a plain no
    ({"status": "skipped", "feasible": False, "seconds": 0.0}, False),
    ({"status": "error", "feasible": False, "seconds": 0.1, "limit": 4.0}, False),
    ({"status": "heuristic", "feasible": True, "seconds": 0.1, "limit": 4.0}, False),
    (None, False),
])
def test_who_is_not_asked_again(record, skip):
    assert (pf._said_no(record) is not None) == skip


def test_the_rescue_skips_the_noes_resumes_min_memory_and_gives_the_descents_the_rest(monkeypatch):
    prob = _tight()
    calls: list[dict] = []
    real = pf.MEMBERS["min-memory"]

    def spy(problem, opts):
        calls.append(dict(opts.extra))
        return real(problem, opts)

    monkeypatch.setitem(pf.MEMBERS, "min-memory", spy)
    monkeypatch.setattr(pf, "member_order", lambda problem, opts: (("single", "min-memory", "m-topo"),
                                                                   float(memory_lower_bound(problem, "peak")["best"])))
    monkeypatch.setattr(pf, "DESCENT_SHARE", 0.0)  # in turn, min-memory's descents get no time
    first = pf.portfolio(prob, SolveOptions(memory_model="peak", time_limit=60))
    # the descents went on after every member had its turn, with all the time left, and fitted
    assert [c.get("descent_share") for c in calls] == [0.0, None] and "resume_descents" in calls[1]
    assert first.status == "heuristic" and first.info["members"][-1]["method"] == "min-memory"
    ev = check(prob, first.placement, first.start, "peak")
    assert ev.makespan == pytest.approx(first.objective)

    calls.clear()
    earlier = {"members": [{"method": "single", "status": "unknown", "feasible": False, "seconds": 0.01, "limit": 5.0},
                           {"method": "min-memory", "status": "unknown", "feasible": False, "seconds": 0.5, "limit": 5.0},
                           {"method": "m-topo", "status": "unknown", "feasible": False, "seconds": 4.0, "limit": 5.0}],
               "resume": [("marker", None, None, "net")]}
    monkeypatch.setitem(pf.MEMBERS, "min-memory", lambda problem, opts: (
        calls.append(dict(opts.extra)), Solution("min-memory", "unknown", reason="spy", info={"resume": []}))[1])
    again = pf.portfolio(prob, SolveOptions(memory_model="peak", time_limit=60, extra={"earlier": earlier}))
    ran = {m["method"]: m for m in again.info["members"]}
    assert ran["single"]["status"] == "skipped" and "earlier run" in ran["single"]["reason"]
    assert ran["m-topo"]["status"] != "skipped"  # it used most of its limit: asked again
    assert len(calls) == 1 and calls[0]["resume_descents"] == earlier["resume"]  # nothing left to go on with after


def test_the_pipeline_hands_the_warm_start_to_its_rescue(monkeypatch):
    """When the warm start's portfolio found nothing, the portfolio run after it gets the warm
    run's members and min-memory's descents (``extra["earlier"]``)."""
    import solvers.pipeline as pl
    from solvers.run import run

    prob = _tight()
    warm = {"members": [{"method": "single", "status": "unknown", "feasible": False, "seconds": 0.0, "limit": 1.0}],
            "resume": []}
    seen: list[dict] = []

    def fake(problem, opts):
        seen.append(opts.extra.get("earlier"))
        return Solution("portfolio", "unknown", reason="portfolio: no member found a memory-feasible placement", info=warm)

    monkeypatch.setitem(pl.WARM_START, "portfolio", fake)
    monkeypatch.setattr(pl, "portfolio", fake)
    monkeypatch.setattr(pl, "HELD_SPLIT_MAX_NODES", 0)
    monkeypatch.setattr(pl, "TOPO_SPLIT_MAX_NODES", 0)
    run(prob, "auto", SolveOptions(memory_model="peak", time_limit=3, workers=1))
    assert seen[0] is None and seen[1] is warm


def test_an_empty_answer_says_how_much_memory_its_nearest_placement_fits(monkeypatch):
    """With nothing fitting, the reason names the least overflow min-memory reached and the bytes per
    device at which that placement fits: checked by evaluating it at that capacity."""
    import re

    from heuristics.peak_holders import device_orders
    from placement.evaluator import evaluate

    prob = _tight(ratio=1.0)
    monkeypatch.setattr(mm, "descents", lambda problem, starts, stop=None: iter(()))  # no descent: nothing fits
    monkeypatch.setattr(pf, "member_order", lambda problem, opts: (("single", "min-memory"),
                                                                   float(memory_lower_bound(problem, "peak")["best"])))
    sol = pf.portfolio(prob, SolveOptions(memory_model="peak", time_limit=60))
    assert sol.status == "unknown"
    got = re.search(r"fits ([0-9.]+) x each device's capacity: (\d+) bytes per device", sol.reason)
    assert got, sol.reason
    ratio, need = float(got.group(1)), int(got.group(2))
    over, placement, seq, _ = sol.info["resume"][0]
    assert ratio >= over > 1.0 and need >= over * float(prob.memory[0])
    roomier = prob.with_devices(prob.k, memory=float(need))
    ev = evaluate(roomier, placement, order=device_orders(placement, seq, prob.k), memory_model="peak")
    assert ev.feasible(roomier) and not evaluate(prob, placement, order=device_orders(placement, seq, prob.k),
                                                 memory_model="peak").feasible(prob)


def test_the_rescue_keeps_the_lower_of_the_earlier_and_its_own_minimum(monkeypatch):
    """(Found in review.) An earlier run handed on a local minimum at 1.01 x the capacity (info["minima"], after its
    kicks) and a cut descent to resume. In the rescue, min-memory's turn resumes the cut descent
    (with a descent share, no kick_from) and it ends at a worse local minimum, 1.5 x. The kicks
    of the last turn must start from the lowest minimum (min_memory._descended's docstring, the
    portfolio's "the lowest of its local minima"), but the loop's
    ``minima = sol.info.get("minima") or minima`` drops the 1.01 one for the 1.5 one."""
    prob = random_problem(1, 6, 2, edge_p=0.3).with_devices(2, memory=100.0)
    seq = np.asarray(prob.topo_order)
    low = (1.01, np.zeros(prob.n, dtype=np.int64), seq, "low")
    high = (1.5, np.ones(prob.n, dtype=np.int64), seq, "high")
    cut = (1.2, np.zeros(prob.n, dtype=np.int64), seq, "cut")
    earlier = {"members": [{"method": "min-memory", "status": "unknown", "feasible": False, "seconds": 0.5, "limit": 5.0}],
               "resume": [cut], "minima": [low], "kicked": 3}
    calls: list[dict] = []

    def fake(problem, opts):
        calls.append(dict(opts.extra))
        if opts.extra.get("descent_share") is not None:  # its turn: the cut descent ends at a worse minimum
            return Solution("min-memory", "unknown", reason="fake", info={"resume": [], "minima": [high], "kicked": 0})
        return Solution("min-memory", "unknown", reason="fake",
                        info={"resume": [], "minima": list(opts.extra.get("kick_from") or []), "kicked": 3})

    monkeypatch.setitem(pf.MEMBERS, "min-memory", fake)
    monkeypatch.setattr(pf, "member_order", lambda problem, opts: (("min-memory",), 1.0))
    sol = pf.portfolio(prob, SolveOptions(memory_model="peak", time_limit=30, extra={"earlier": earlier}))
    assert sol.status == "unknown" and len(calls) == 2 and calls[1]["descent_share"] is None
    kick_from = [m[0] for m in calls[1]["kick_from"]]
    assert min(kick_from) == 1.01, f"the last turn kicks from {kick_from}, not the earlier run's 1.01 minimum"
