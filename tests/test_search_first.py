"""auto on small graphs under the peak model (solvers/pipeline.py SMALL_SEARCH_SHARE): a short
CP-SAT try, the alternating search, then CP-SAT again from the search's answer. A graph the try
proves keeps its proof (and its speed); otherwise the answer is never worse than the warm start,
is the evaluator's, and the phases run in that order."""
from __future__ import annotations

import math

import pytest

from placement.evaluator import check
from placement.generate import generate
from placement.memory_bounds import memory_lower_bound
from placement.solution import Solution, SolveOptions
from solvers.run import run
from tests.conftest import random_problem, tiny_optimum


@pytest.mark.parametrize("seed", range(3))
def test_a_tiny_graph_is_still_proved_by_the_first_try(seed):
    roomy = random_problem(seed, 7, 2)
    peak = float((roomy.param_bytes + roomy.out_bytes).sum())
    problem = roomy.with_devices(2, [0.7 * peak] * 2)
    want = tiny_optimum(problem, "peak")
    res = run(problem, "auto", SolveOptions(memory_model="peak", time_limit=20, workers=2))
    if want is None:
        assert res.status in ("infeasible", "unknown")
        return
    assert res.status == "optimal"
    assert res.evaluation.makespan == pytest.approx(want[0])
    assert "search" not in [h.get("name") for h in res.history]  # proved before the search


def test_search_runs_between_two_exact_tries_and_is_never_worse():
    problem = generate("cnn", 100, seed=4, devices=3)
    bound = memory_lower_bound(problem.with_devices(3, [math.inf] * 3), "peak", 3)["best"]
    problem = problem.with_devices(3, [1.3 * bound] * 3)
    res = run(problem, "auto", SolveOptions(memory_model="peak", time_limit=6, workers=2))
    assert res.feasible
    names = [h.get("name") for h in res.history]
    first = names.index("exact")
    assert "search" in names[first:] and "exact" in names[names.index("search", first):]
    warm = res.history[0]
    assert warm["name"] == "warm-start" and res.evaluation.makespan <= warm["makespan"] + 1e-9
    ev = check(problem, res.evaluation.placement, res.evaluation.start, "peak")
    assert ev.feasible(problem) and ev.makespan == pytest.approx(res.evaluation.makespan)


def test_without_a_warm_answer_cp_sat_keeps_the_whole_phase(monkeypatch):
    """No heuristic answered (stubbed here; on real graphs, a capacity they all overflow): no
    search, which needs an incumbent (it crashed on none), and no short try either: CP-SAT gets
    the exact phase whole to find a placement."""
    import solvers.pipeline as pl

    nothing = lambda problem, opts: Solution("stub", "unknown", reason="stub: nothing fits")  # noqa: E731
    for name in list(pl.WARM_START):
        monkeypatch.setitem(pl.WARM_START, name, nothing)
    monkeypatch.setattr(pl, "portfolio", nothing)
    monkeypatch.setattr(pl, "held_split", nothing)
    monkeypatch.setattr(pl, "BASELINES", {})
    roomy = random_problem(1, 20, 3)
    need = float((roomy.param_bytes + roomy.out_bytes).sum())
    problem = roomy.with_devices(3, [0.8 * need] * 3)
    res = run(problem, "auto", SolveOptions(memory_model="peak", time_limit=4, workers=2))
    names = [h.get("name") for h in res.history]
    assert "search" not in names and names.count("exact") == 1
    assert res.feasible  # CP-SAT found it alone
    ev = check(problem, res.evaluation.placement, res.evaluation.start, "peak")
    assert ev.feasible(problem) and ev.makespan == pytest.approx(res.evaluation.makespan)
