"""auto on small graphs (solvers/pipeline.py SMALL_SEARCH_SHARE). Under the peak model: a short
CP-SAT try, the alternating search, then CP-SAT again from the search's answer; under the static
model CP-SAT first, in one run for half the phase, then the search until it runs dry. A graph the
first CP-SAT run proves keeps its proof (and its speed); otherwise the answer is never worse than
the warm start, is the evaluator's, and the phases run in that order."""
from __future__ import annotations

import math

import pytest

from placement.evaluator import check
from placement.generate import generate
from placement.memory_bounds import memory_lower_bound
from placement.solution import Solution, SolveOptions
from solvers.run import run
from tests.conftest import random_problem, tiny_optimum


@pytest.mark.parametrize("model", ["peak", "static"])
@pytest.mark.parametrize("seed", range(3))
def test_a_tiny_graph_is_still_proved_by_the_first_try(seed, model):
    roomy = random_problem(seed, 7, 2)
    need = float((roomy.param_bytes + roomy.out_bytes).sum())
    problem = roomy.with_devices(2, [0.7 * need] * 2)
    want = tiny_optimum(problem, model)
    res = run(problem, "auto", SolveOptions(memory_model=model, time_limit=20, workers=2))
    if want is None:
        assert res.status in ("infeasible", "unknown")
        return
    assert res.status == "optimal"
    assert res.evaluation.makespan == pytest.approx(want[0])
    assert "search" not in [h.get("name") for h in res.history]  # proved before the search


@pytest.mark.parametrize("model", ["peak", "static"])
def test_search_runs_between_two_exact_tries_and_is_never_worse(model, monkeypatch):
    import solvers.pipeline as pl

    # under the static model CP-SAT's one run (half the phase, 2.5 s here) proved this graph on a
    # fast machine, leaving nothing to search: cut short, it leaves the search its turn
    monkeypatch.setattr(pl, "STATIC_EXACT_SHARE", 0.02)
    problem = generate("cnn", 100, seed=4, devices=3)
    bound = memory_lower_bound(problem.with_devices(3, [math.inf] * 3), model, 3)["best"]
    problem = problem.with_devices(3, [1.3 * bound] * 3)
    res = run(problem, "auto", SolveOptions(memory_model=model, time_limit=6, workers=2))
    assert res.feasible
    names = [h.get("name") for h in res.history]
    first = names.index("exact")
    assert "search" in names[first:] and "exact" in names[names.index("search", first):]
    if model == "static":  # CP-SAT ran first, in one run: the exact phase after the search is a note
        assert res.history[first]["status"] != "skipped"
        assert res.history[names.index("exact", names.index("search", first))]["status"] == "skipped"
    warm = res.history[0]
    assert warm["name"] == "warm-start" and res.evaluation.makespan <= warm["makespan"] + 1e-9
    ev = check(problem, res.evaluation.placement, res.evaluation.start, model)
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


@pytest.mark.parametrize("stop_when_dry", [True, False])
def test_a_dry_search_hands_its_time_back(stop_when_dry):
    """A chain all on one device is optimal (every split pays a transfer): no search can gain. With
    ``stop_when_dry`` (the static model's small-graph path) the search ends after one slice of
    each search, not after its 60 s. Without it, it ends once a whole round of searches returned
    at once with nothing: before, they took turns until the budget ended (58,635 empty slices in
    8 s, each a few words of the phase's note: 1.0 MB in the report)."""
    from placement.problem import make_problem
    from solvers.pipeline import Incumbent, _alternate_phase
    from solvers.progress import Heartbeat
    from solvers.run import verify

    nodes = [{"id": f"n{i}", "time": 1.0, "out_bytes": 1.0, "param_bytes": 0.0} for i in range(40)]
    edges = [{"src": f"n{i}", "dst": f"n{i + 1}", "comm": 1.0} for i in range(39)]
    problem = make_problem(nodes, edges, devices=3)
    inc = Incumbent(problem, "static", verify)
    on_one = [0] * problem.n
    ev = check(problem, on_one, list(range(problem.n)), "static")
    inc.offer(Solution("start", "heuristic", placement=on_one, start=ev.start, objective=ev.makespan))
    with Heartbeat(None, lambda: inc.makespan, 0.0) as hb:
        phases = _alternate_phase(problem, SolveOptions(workers=2), inc, 0.0, 60.0, hb, stop_when_dry=stop_when_dry)
    note = phases[-1].note
    assert phases[-1].name == "search" and inc.makespan == 40.0
    slices = [s.split()[0] for s in note.split("in slices: ")[1].split(", ")]
    if stop_when_dry:
        assert sorted(slices) == ["exact-lns", "joins", "refine", "relist"], note
    else:
        assert len(slices) <= 3 * 4 and slices[-4:].count("refine") == 1, note
