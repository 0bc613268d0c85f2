"""The pipeline's re-schedule phase and its ordered refinement on big graphs: the incumbent only
improves, every phase's makespan is the evaluator's, and CP-SAT gets the auto schedule."""
from __future__ import annotations

import numpy as np
import pytest

from placement.evaluator import check
from placement.generate import generate
from placement.problem import make_problem
from placement.solution import Solution, SolveOptions
from solvers import pipeline as pipeline_mod
from solvers.pipeline import Incumbent, Phase, _reschedule_phase
from solvers.run import run, verify


def test_reschedule_phase_replaces_a_fifo_incumbent_by_the_priority_schedule() -> None:
    nodes = [{"id": x, "time": t, "out_bytes": 0.0, "param_bytes": 0.0} for x, t in (("x", 5.0), ("a", 1.0), ("b", 5.0))]
    prob = make_problem(nodes, [{"src": "a", "dst": "b", "comm": 0.0}], devices=2)
    inc = Incumbent(prob, "static", verify)
    inc.offer(Solution("fifo", "heuristic", placement=np.array([0, 0, 1])))
    assert inc.makespan == 11.0
    phases: list[Phase] = []
    _reschedule_phase(prob, SolveOptions(), inc, phases, None)
    assert inc.makespan == 6.0 and phases[0].name == "reschedule"
    assert check(prob, inc.best[1].placement, inc.best[1].start).makespan == 6.0


def test_reschedule_phase_keeps_a_better_incumbent() -> None:
    prob = generate("lstm", 200, seed=0, devices=3, memory_fraction=0.6)
    inc = Incumbent(prob, "static", verify)
    sol = run(prob, "etf", SolveOptions()).solution
    inc.offer(sol)
    before = inc.makespan
    _reschedule_phase(prob, SolveOptions(), inc, [], None)
    assert inc.makespan <= before


@pytest.mark.slow  # 11 s; the big-graph path's "never worse than the warm start" also runs by default in test_alternate_search and test_probe
def test_big_graph_path_refines_in_order_and_never_loses_the_warm_start(monkeypatch) -> None:
    """With the size thresholds lowered, a 400-node graph takes the 100K-node path: coarse exact
    phase, re-schedule, and (the incumbent's order beating FIFO) refinement keeping that order."""
    calls = []
    real = pipeline_mod._ordered_beats_fifo

    def spy(problem, ev, mm):
        calls.append(real(problem, ev, mm))
        return calls[-1]

    monkeypatch.setattr(pipeline_mod, "_ordered_beats_fifo", spy)
    prob = generate("transformer", 400, seed=1, devices=4, memory_fraction=0.6)
    opts = SolveOptions(time_limit=12, workers=2, extra={"exact_max_nodes": 50, "coarse_size": 40, "refine_multilevel_nodes": 100, "big_exact": "coarse"})
    res = run(prob, "auto", opts)
    assert res.feasible
    phases = {p["name"]: p for p in res.history}
    assert {"warm-start", "reschedule", "exact-coarse"} <= set(phases)
    assert res.evaluation.makespan <= min(p["makespan"] for p in res.history if p.get("makespan") is not None) + 1e-9
    assert check(prob, res.evaluation.placement, res.evaluation.start).makespan == pytest.approx(res.evaluation.makespan)
    if "refine" in phases:
        assert len(calls) == 1


def test_exact_phase_on_the_original_graph_asks_for_the_auto_schedule(monkeypatch) -> None:
    from solvers import pipeline as pl

    seen = []
    real = pl.cpsat

    def spy(problem, opts):
        seen.append(dict(opts.extra))
        return real(problem, opts)

    monkeypatch.setattr(pl, "cpsat", spy)
    prob = generate("cnn", 40, seed=0, devices=2, memory_fraction=0.7)
    res = run(prob, "auto", SolveOptions(time_limit=5, workers=2))
    assert res.feasible and seen and seen[0].get("schedule") == "auto"
    seen.clear()
    run(prob, "auto", SolveOptions(time_limit=5, workers=2, extra={"schedule": "single"}))
    assert seen and seen[0].get("schedule") == "single"  # the caller's choice wins
