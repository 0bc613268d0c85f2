"""Limits (issue 13), without timing anything: models too big for memory are refused naming their
size, a model whose build is cut short returns its hint (never a proof), refine and the watchdog
obey a stop, and whatever the watchdog reports is the best verified answer, honestly labelled."""
from __future__ import annotations

import argparse
import threading

import numpy as np
import pytest

import formulations.common as common
from formulations.cpsat import cpsat
from formulations.mip import mip
from placement.evaluator import check, evaluate
from placement.solution import BestSoFar, Solution, SolveOptions
from solvers.cli import Command
from solvers.refine import RefineStats, refine
from solvers.run import RunResult
from tests.conftest import random_problem


def hint_of(problem, memory_model="static") -> Solution:
    placement = np.arange(problem.n) % problem.k
    ev = evaluate(problem, placement, memory_model=memory_model)
    return Solution("test-hint", "heuristic", placement=ev.placement, start=ev.start, objective=ev.makespan)


@pytest.mark.parametrize("method", [mip, cpsat])
def test_models_too_big_for_memory_are_refused(method, monkeypatch):
    problem = random_problem(3, 9, 3)
    monkeypatch.setattr(common, "available_memory", lambda: 1e3)  # a machine with 1 KB free
    sol = method(problem, SolveOptions(time_limit=30))
    assert sol.status == "unknown" and sol.placement is None
    assert "refused" in sol.reason and "GB" in sol.reason
    hinted = method(problem, SolveOptions(time_limit=30, hint=hint_of(problem)))
    assert hinted.status == "feasible" and "refused" in hinted.reason  # the hint, never "optimal"
    assert check(problem, hinted.placement, hinted.start).makespan == pytest.approx(hinted.objective)


@pytest.mark.parametrize("method", [mip, cpsat])
@pytest.mark.parametrize("memory_model", ["static", "peak"])
def test_a_build_cut_short_returns_the_hint_and_no_proof(method, memory_model):
    problem = random_problem(5, 8, 2)
    opts = SolveOptions(time_limit=30, memory_model=memory_model, hint=hint_of(problem, memory_model))
    opts.stop.set()  # as if Ctrl-C came before the model was built
    sol = method(problem, opts)
    assert sol.status == "feasible" and "was not built" in sol.reason
    ev = check(problem, sol.placement, sol.start, memory_model)
    assert ev.makespan == pytest.approx(sol.objective)
    assert sol.lower_bound is not None and sol.lower_bound <= sol.objective
    bare = SolveOptions(time_limit=30, memory_model=memory_model)
    bare.stop.set()
    nothing = method(problem, bare)
    assert nothing.status == "unknown" and nothing.placement is None


def test_refine_obeys_a_stop():
    problem = random_problem(7, 10, 3)
    start = np.zeros(problem.n, dtype=np.int64)
    opts = SolveOptions(seed=1)
    opts.stop.set()
    stats = RefineStats()
    placement, ev = refine(problem, start, opts, deadline=float("inf"), stats=stats)
    assert stats.stopped == "stopped" and stats.evaluations <= 2
    assert ev.makespan <= evaluate(problem, start).makespan


def _args(limit: float) -> argparse.Namespace:
    return argparse.Namespace(time_limit=limit, method="auto", objective="makespan")


def test_watchdog_reports_the_best_published_answer_when_the_run_does_not_stop():
    problem = random_problem(2, 8, 2)
    opts = SolveOptions(time_limit=0.3)
    sol = hint_of(problem)
    ev = evaluate(problem, sol.placement)
    opts.best_so_far.publish_answer(problem, sol, ev)
    opts.best_so_far.publish_bound(0.5 * ev.makespan)
    release = threading.Event()

    def deaf_run() -> RunResult:  # ignores every stop request
        release.wait(60)
        raise AssertionError("the watchdog should not have waited for this")

    command = Command()
    opts.stop = command.stop
    try:
        result = command._solve(deaf_run, problem, opts, _args(0.3))
    finally:
        release.set()
    assert command.abandoned and command.stop.is_set()
    assert result.status == "heuristic" and result.evaluation is ev and result.interrupted
    assert result.lower_bound == pytest.approx(0.5 * ev.makespan) and "did not stop" in result.reason


def test_watchdog_without_an_answer_says_unknown_and_a_proved_bound_makes_optimal():
    problem = random_problem(4, 6, 2)
    release = threading.Event()
    try:
        for published, expect in ((None, "unknown"), ("tight", "optimal")):
            opts = SolveOptions(time_limit=0.2)
            if published:
                sol = hint_of(problem)
                ev = evaluate(problem, sol.placement)
                opts.best_so_far.publish_answer(problem, sol)  # no Evaluation: the watchdog re-checks it
                opts.best_so_far.publish_bound(ev.makespan)  # bound = makespan: proved
            command = Command()
            opts.stop = command.stop
            result = command._solve(lambda: release.wait(60), problem, opts, _args(0.2))
            assert result.status == expect
    finally:
        release.set()


def test_best_so_far_keeps_the_largest_bound():
    box = BestSoFar()
    box.publish_bound(3.0)
    box.publish_bound(2.0)
    box.publish_answer("p", "s", "e")
    assert box.get() == (("p", "s", "e"), 3.0)


def test_watchdog_ignores_answers_for_another_problem_or_over_memory():
    problem = random_problem(6, 8, 2, memory=60.0)
    other = random_problem(7, 8, 2)
    release = threading.Event()
    over = Solution("all-on-one", "heuristic", placement=np.zeros(problem.n, dtype=np.int64))
    assert not evaluate(problem, over.placement).feasible(problem)  # the test's premise
    try:
        for publisher_problem, sol in ((other, hint_of(other)), (problem, over)):
            opts = SolveOptions(time_limit=0.2)
            opts.best_so_far.publish_answer(publisher_problem, sol)
            command = Command()
            opts.stop = command.stop
            assert command._solve(lambda: release.wait(60), problem, opts, _args(0.2)).status == "unknown"
    finally:
        release.set()


def test_portfolio_publishes_its_best_member():
    problem = random_problem(8, 12, 3)
    from heuristics.portfolio import portfolio

    opts = SolveOptions(time_limit=30)
    sol = portfolio(problem, opts)
    (pub_problem, pub_sol, _), _ = opts.best_so_far.get()
    assert pub_problem is problem and pub_sol.objective == pytest.approx(sol.objective)


@pytest.mark.parametrize("name", ["etf", "m-etf", "heft", "critical-path"])
def test_list_schedulers_obey_a_stop(name):
    from solvers.methods import get

    problem = random_problem(9, 600, 3)  # over 256 nodes: the stop is checked every 256
    opts = SolveOptions()
    opts.stop.set()
    sol = get(name).func(problem, opts)
    assert sol.status == "unknown" and sol.placement is None and "stopped" in sol.reason
    assert get(name).func(problem, SolveOptions()).status == "heuristic"


def test_a_report_answered_by_the_watchdog_keeps_the_memory_lower_bound(monkeypatch):
    """A run cut by the watchdog once it has its bounds still reports the memory lower bound (the
    report of an interrupted peak run on an imported GNN had none)."""
    import solvers.run as run_module
    from placement.memory_bounds import memory_lower_bound

    problem = random_problem(8, 10, 3, memory=400.0)
    release = threading.Event()

    def deaf(problem_, method, opts_, say, lbs, t0):  # the search after the bounds ignores every stop
        opts_.best_so_far.publish_answer(problem_, hint_of(problem_))
        release.wait(60)
        raise AssertionError("the watchdog should not have waited for this")

    monkeypatch.setattr(run_module, "_run_makespan", deaf)
    for model in ("static", "peak"):
        opts = SolveOptions(time_limit=1.0, memory_model=model)
        command = Command()
        opts.stop = command.stop
        try:
            result = command._solve(lambda: run_module.run(problem, "auto", opts), problem, opts, _args(1.0))
        finally:
            release.set()
        release.clear()
        assert result.interrupted and command.abandoned
        expected = memory_lower_bound(problem, model)
        assert expected["best"] > 0 and result.memory_bound == expected
        assert result.report(problem, model)["memory_lower_bound"] == expected["best"]


def test_an_unknown_answer_names_each_reason_once(monkeypatch):
    """The portfolio runs in the warm start and again for the members it skipped: when neither
    finds a placement that fits, the report said the same reason twice."""
    import solvers.run as run_module
    from solvers.pipeline import PipelineResult

    same = "portfolio: no member found a memory-feasible placement"
    monkeypatch.setattr(run_module, "pipeline", lambda *a, **k: PipelineResult(None, 1.0, False, [], [same, "held-split: x", same]))
    result = run_module.run(random_problem(9, 6, 2), "auto", SolveOptions(time_limit=5.0))
    assert result.status == "unknown" and result.reason == f"{same}; held-split: x"


@pytest.mark.parametrize("memory_model", ["static", "peak"])
def test_auto_has_a_verified_answer_before_the_bounds(monkeypatch, memory_model):
    """On big graphs the bound suite takes seconds before any heuristic runs: a run cut there (time
    limit, Ctrl-C) must already have a baseline answer that fits, for the watchdog to report."""
    import solvers.run as run_module

    roomy = random_problem(30, 60, 3)
    need = float((roomy.param_bytes + roomy.out_bytes).sum())
    problem = roomy.with_devices(3, [0.8 * need] * 3)  # too small for one device (static)
    seen = {}

    def bounds_stopped_here(p, memory_model=None, stop=None, **kw):
        seen.setdefault("answer", opts.best_so_far.get()[0])
        raise KeyboardInterrupt  # the run goes no further: what was published is all a watchdog has

    monkeypatch.setattr(run_module, "BASELINE_FIRST_NODES", 10)
    monkeypatch.setattr(run_module, "lower_bounds", bounds_stopped_here)
    opts = SolveOptions(time_limit=5.0, memory_model=memory_model)
    with pytest.raises(KeyboardInterrupt):
        run_module.run(problem, "auto", opts)
    published, sol, _ = seen["answer"]
    assert published is problem
    ev = check(problem, sol.placement, sol.start, memory_model) if sol.start is not None else \
        evaluate(problem, sol.placement, order=sol.order, memory_model=memory_model)
    assert ev.feasible(problem)
    assert sol.objective == pytest.approx(ev.makespan)
