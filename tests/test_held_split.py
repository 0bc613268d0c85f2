"""held-split (formulations/held_split.py): every answer is a placement the evaluator accepts in
the order returned, never better than the enumerated optimum and never where enumeration finds
nothing; on the ResNet-18 layer graph at 0.4 x its one-device peak, where every list scheduler,
PARDNN and the contiguous splits overflow, it finds a placement that fits."""
from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from formulations.bruteforce import placements
from formulations.held_split import held_split
from formulations.peak_search import best_schedule_bb
from placement.evaluator import evaluate
from placement.solution import SolveOptions
from tests.test_saved_bytes import training_chain


@pytest.mark.parametrize("seed", range(12))
def test_held_split_answers_are_feasible_and_not_below_the_optimum(seed):
    p = training_chain(seed)
    got, complete = best_schedule_bb(p, placements(p), "peak")
    assert complete
    sol = held_split(p, SolveOptions(time_limit=5, workers=1, memory_model="peak"))
    if sol.placement is None:
        return
    assert got is not None, "an answer where enumeration finds none"
    ev = evaluate(p, sol.placement, order=sol.order, memory_model="peak")
    assert ev.feasible(p) and ev.makespan == pytest.approx(sol.objective)
    assert ev.makespan >= got[0] * (1 - 1e-9)


def test_held_split_is_for_the_peak_model_only():
    p = training_chain(0)
    assert held_split(p, SolveOptions(time_limit=5, workers=1, memory_model="static")).placement is None


@pytest.mark.slow
def test_held_split_fits_resnet18_where_the_heuristics_overflow():
    from placement.importers.pipedream import read_pipedream
    from solvers.run import run

    p = read_pipedream(Path(__file__).resolve().parent.parent / "data" / "layer_graphs" / "resnet18.txt")
    one = evaluate(replace(p, memory=np.array([np.inf]), device_names=["all"], allowed=[None] * p.n),
                   np.zeros(p.n, dtype=np.int64), memory_model="peak")
    p = p.with_devices(count=4, memory=0.4 * float(one.peak_memory.max()))
    for name in ("etf", "pardnn", "topo-split"):
        assert run(p, name, SolveOptions(time_limit=30, workers=2, memory_model="peak")).evaluation is None
    sol = held_split(p, SolveOptions(time_limit=60, workers=2, memory_model="peak"))
    assert sol.placement is not None
    assert evaluate(p, sol.placement, order=sol.order, memory_model="peak").feasible(p)
