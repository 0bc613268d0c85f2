"""The auto pipeline: reaches the brute-force optimum on tiny graphs, never returns worse than its
warm start, keeps a valid bound when it solves a coarsened graph, and answers when stopped."""
from __future__ import annotations

import random
import threading

import pytest

from formulations.bruteforce import enumerate_best
from placement.bounds import lower_bounds
from placement.evaluator import check
from placement.formats import load_problem
from placement.generate import generate
from placement.solution import SolveOptions
from solvers import methods as registry
from solvers.run import run
from tests.conftest import DATA, random_problem


@pytest.mark.parametrize("seed", range(8))
def test_auto_reaches_the_brute_force_optimum(seed):
    rng = random.Random(seed)
    prob = random_problem(seed, rng.randint(4, 7), rng.randint(2, 3), colocate_p=0.2)
    need = float((prob.param_bytes + prob.out_bytes).sum())
    prob = prob.with_devices(prob.k, max(need * 0.6, float((prob.param_bytes + prob.out_bytes).max()) * 1.5))
    best, complete = enumerate_best(prob, "static")
    assert complete
    res = run(prob, "auto", SolveOptions(time_limit=30, workers=2))
    if best is None:
        assert res.status in ("infeasible", "unknown")
        return
    assert res.status == "optimal"
    assert res.evaluation.makespan == pytest.approx(best[0], rel=1e-6)
    assert res.lower_bound == pytest.approx(best[0], rel=1e-6)
    check(prob, res.evaluation.placement, res.evaluation.start, "static")


def test_auto_is_never_worse_than_its_warm_start():
    prob = load_problem(DATA / "lstm_small.json")
    warm = registry.get("portfolio").func(prob, SolveOptions(time_limit=10, seed=0))
    res = run(prob, "auto", SolveOptions(time_limit=8, workers=2))
    assert res.feasible
    assert res.evaluation.makespan <= warm.objective + 1e-9
    assert res.lower_bound <= res.evaluation.makespan
    names = [p["name"] for p in res.history]
    assert names[0] == "warm-start"


def test_coarse_exact_phase_keeps_the_original_bound():
    prob = generate("transformer", 300, seed=3, devices=3, memory_fraction=0.5)
    opts = SolveOptions(time_limit=6, workers=2, extra={"exact_max_nodes": 50, "coarse_size": 40, "big_exact": "coarse"})
    res = run(prob, "auto", opts)
    assert res.feasible
    phases = {p["name"]: p for p in res.history}
    assert "exact-coarse" in phases
    # A coarse optimum proves nothing for the original graph: the bound is the original one.
    assert res.lower_bound == pytest.approx(lower_bounds(prob).best)
    assert res.status in ("feasible", "heuristic") or res.evaluation.makespan <= res.lower_bound * (1 + 1e-9)
    check(prob, res.evaluation.placement, res.evaluation.start, "static")


def test_stop_request_returns_the_best_answer_so_far():
    prob = generate("transformer", 1500, seed=1, devices=4, memory_fraction=0.4)
    opts = SolveOptions(time_limit=300, workers=2)
    timer = threading.Timer(4.0, opts.stop.set)
    timer.start()
    try:
        res = run(prob, "auto", opts)
    finally:
        timer.cancel()
    assert res.interrupted
    assert res.feasible
    assert res.seconds < 200  # it stopped long before the limit
    check(prob, res.evaluation.placement, res.evaluation.start, "static")


def _spy_topo_split(monkeypatch):
    """Replace the pipeline's topo-split by a recorder of the problem sizes it is called on."""
    from solvers import pipeline as pl

    real = pl.WARM_START["topo-split"]
    calls: list[int] = []

    def spy(problem, opts):
        calls.append(problem.n)
        return real(problem, opts)

    monkeypatch.setitem(pl.WARM_START, "topo-split", spy)
    return calls


@pytest.mark.slow  # 3.5 s
def test_warm_start_skips_topo_split_above_its_size_cap(monkeypatch):
    from solvers import pipeline as pl

    calls = _spy_topo_split(monkeypatch)
    monkeypatch.setattr(pl, "TOPO_SPLIT_MAX_NODES", 40)
    small = generate("transformer", 30, seed=1, devices=2, memory_fraction=0.7)
    big = generate("transformer", 120, seed=1, devices=2, memory_fraction=0.7)
    assert small.n <= 40 < big.n
    opts = {"time_limit": 4, "workers": 2, "extra": {"exact_max_nodes": 0, "coarse_size": 10}}
    for prob in (small, big):
        res = run(prob, "auto", SolveOptions(**opts))
        assert res.feasible
    assert calls == [small.n]  # called on the small graph only, never on the big one
    assert "topo-split" not in pl.warm_start_methods(big)
    assert "topo-split" in pl.warm_start_methods(small)


def test_loading_that_used_the_whole_limit_still_gets_an_answer():
    """The limit counts from opts.started (the CLI's start): with nothing left, the warm start's
    linear-time baselines answer anyway and every later phase is skipped or cut to nothing."""
    import time

    prob = generate("lstm", 400, seed=2, devices=3, memory_fraction=0.6)
    opts = SolveOptions(time_limit=5, workers=2, started=time.monotonic() - 10)
    res = run(prob, "auto", opts)
    assert res.feasible
    warm = res.history[0]
    assert warm["name"] == "warm-start" and warm["note"] in ("topo-fill", "greedy-fill", "single")
    check(prob, res.evaluation.placement, res.evaluation.start, "static")


def test_finish_reserve_grows_with_the_graph_and_stays_a_fraction_of_the_limit():
    from solvers.pipeline import finish_reserve

    small = generate("cnn", 200, seed=0, devices=2)
    big = generate("cnn", 5000, seed=0, devices=2)
    assert finish_reserve(small, 60) < finish_reserve(big, 60) < 0.2 * 60
    assert finish_reserve(big, 1.0) == pytest.approx(0.2)  # a tiny limit keeps most of it for the phases


def test_warm_budget_covers_the_members_the_portfolio_runs_first():
    from types import SimpleNamespace

    from heuristics.portfolio import ORDER, estimate_seconds
    from solvers.pipeline import WARM_FIRST, WARM_MAX_SHARE, WARM_SHARE, warm_seconds

    # the budget is sized for WARM_FIRST, which only helps if the portfolio runs them first
    assert ORDER[:len(WARM_FIRST)] == WARM_FIRST
    for n, k, usable in ((1000, 4, 50.0), (100_000, 16, 110.0), (100_000, 16, 500.0), (200_000, 16, 110.0)):
        big = SimpleNamespace(n=n, m=2 * n, k=k)
        need = sum(estimate_seconds(name, n, 2 * n, k) for name in WARM_FIRST)
        got = warm_seconds(big, usable, WARM_SHARE, "static")
        assert WARM_SHARE * usable <= got <= WARM_MAX_SHARE * usable
        # with time to spare, every member of WARM_FIRST fits by its own estimate
        if 1.25 * need <= WARM_MAX_SHARE * usable:
            assert got >= need


@pytest.mark.slow  # 7 s: the default suite (CI 9:47 in all, session 42) sits near its cap
def test_warm_start_gives_the_portfolio_its_share_and_what_the_stretch_is_for(monkeypatch):
    """The portfolio's limit is the stretched warm budget; its own share (WARM_SHARE of the usable
    time) and the members the stretch is for (WARM_FIRST, and WARM_ALSO) go with it."""
    import solvers.pipeline as pl

    seen: list[SolveOptions] = []
    real = pl.WARM_START["portfolio"]

    def spy(problem, opts):
        seen.append(opts)
        return real(problem, opts)

    monkeypatch.setitem(pl.WARM_START, "portfolio", spy)
    prob = generate("transformer", nodes=300, devices=4, seed=2)
    res = run(prob, "auto", SolveOptions(time_limit=8.0))
    assert res.evaluation is not None and res.evaluation.feasible(prob)
    opts = seen[0]
    assert opts.extra["stretched_for"] == pl.WARM_FIRST + pl.WARM_ALSO
    assert 0.0 < opts.extra["own_seconds"] <= opts.time_limit + 1e-3
    assert opts.extra["own_seconds"] == pytest.approx(pl.WARM_SHARE * 8.0, rel=0.25)


@pytest.mark.slow  # 5 s
def test_fallback_reserve_is_freed_once_the_warm_start_answers():
    """A caller's fallback reserve (Tofu's plan for grouped graphs) holds the whole limit here, so
    the warm start gets no time; the linear-time baselines answer, which frees the reserve, and
    the later phases run in it instead of the run ending after the warm start."""
    prob = generate("transformer", nodes=300, devices=4, seed=2)
    res = run(prob, "auto", SolveOptions(time_limit=6.0, extra={"fallback_reserve": 6.0}))
    assert res.evaluation is not None and res.evaluation.feasible(prob)
    names = [h["name"] for h in res.history]
    assert names[0] == "warm-start" and any(n in ("exact", "exact-lns", "refine") for n in names[1:]), names
    later = [h for h in res.history if h["name"] in ("exact", "exact-lns", "refine")]
    assert sum(h["seconds"] for h in later) > 0.5
