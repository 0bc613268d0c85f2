"""The cut-vertex bound (formulations/cut_bound.py): cut vertices and gaps on hand-built graphs;
never above the enumerated optimum on tiny training graphs whose parallel branches are colocated
with their backward nodes (static and peak memory, fractional data) and on the bypass bound's
families; reaches the optimum above the other bounds on some; never above the proved optima of the
layer graphs (VGG-16, SqueezeNet, ResNet-18 at 0.4 x their one-device peak, K = 4)."""
from __future__ import annotations

import random
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from formulations.cpsat import cpsat
from formulations.cut_bound import cut_bound, cut_vertices, gap_groups, gaps
from formulations.units import units
from placement.bounds import lower_bounds
from placement.evaluator import evaluate
from placement.problem import Problem, make_problem
from placement.solution import SolveOptions
from tests.guard import makespan_optimum
from tests.test_bypass_bound import fan, ladder

ROOT = Path(__file__).resolve().parent.parent


def opts() -> SolveOptions:
    return SolveOptions(workers=1, time_limit=30)


def cell(seed: int, memory_model: str) -> Problem:
    """A training cell: f0 -> {p, q} -> f1 forward, f1 -> b1 -> {bp, bq} -> b0 backward, each
    backward node colocated with its forward node, backward nodes reading their layer's input
    activation (edges that cross from the forward gap to the backward one); a third branch r/br
    on some; fractional times on a third of them; 2-3 devices; peak: 0.8-1.5 x the one-device peak
    per device (20 of the 25 have a placement)."""
    rng = random.Random(seed)
    frac = rng.choice([0.0, 0.0, 0.25])
    top = rng.choice([2, 5, 9])
    branches = ["p", "q"] + (["r"] if seed % 3 == 0 else [])
    nodes = [{"id": "f0", "time": rng.randint(1, 3), "out_bytes": rng.randint(1, 9), "param_bytes": 0, "colocate": "L0"},
             {"id": "f1", "time": rng.randint(1, 3), "out_bytes": rng.randint(1, 9), "param_bytes": 0, "colocate": "L1"},
             {"id": "b1", "time": rng.randint(1, 4), "out_bytes": rng.randint(1, 9), "param_bytes": 0, "colocate": "L1"},
             {"id": "b0", "time": rng.randint(1, 4), "out_bytes": rng.randint(1, 9), "param_bytes": 0, "colocate": "L0"}]
    edges = [{"src": "f1", "dst": "b1", "comm": rng.randint(0, top)}, {"src": "f0", "dst": "b1", "comm": rng.randint(0, top)}]
    for x in branches:
        nodes.append({"id": x, "time": rng.randint(1, 4) + frac, "out_bytes": rng.randint(1, 9), "param_bytes": 0,
                      "colocate": f"U{x}"})
        nodes.append({"id": f"b{x}", "time": rng.randint(1, 6) + frac, "out_bytes": rng.randint(1, 9), "param_bytes": 0,
                      "colocate": f"U{x}"})
        edges += [{"src": "f0", "dst": x, "comm": rng.randint(0, top) + frac},
                  {"src": x, "dst": "f1", "comm": rng.randint(0, top)},
                  {"src": "b1", "dst": f"b{x}", "comm": rng.randint(0, top) + frac},
                  {"src": f"b{x}", "dst": "b0", "comm": rng.randint(0, top)},
                  {"src": "f0", "dst": f"b{x}", "comm": rng.randint(0, top)}]
    k = rng.choice([2, 3])
    if memory_model == "static":
        return make_problem(nodes, edges, devices=k, memory=float("inf"), name=f"cell{seed}")
    one = make_problem(nodes, edges, devices=1, memory=float("inf"))
    peak = float(evaluate(one, np.zeros(one.n, dtype=np.int64), memory_model="peak").peak_memory.max())
    return make_problem(nodes, edges, devices=k, memory=float(max(1, round(rng.uniform(0.8, 1.5) * peak))),
                        name=f"cell{seed}")


def test_cut_vertices_and_gaps_of_a_diamond_chain():
    nodes = [{"id": v, "time": 1, "out_bytes": 1, "param_bytes": 0} for v in "abxyc"]
    edges = [("a", "b"), ("b", "x"), ("b", "y"), ("x", "c"), ("y", "c"), ("a", "c")]
    p = make_problem(nodes, [{"src": u, "dst": v, "comm": 1} for u, v in edges], devices=2)
    idx = {v: i for i, v in enumerate(p.ids)}
    cuts = cut_vertices(p)
    assert cuts == [idx["a"], idx["b"], idx["c"]]
    found = gaps(p, cuts)
    assert [(g.first, g.last, sorted(g.nodes)) for g in found] == [(idx["b"], idx["c"], sorted([idx["x"], idx["y"]]))]


def test_gaps_sharing_a_unit_are_one_group():
    p = cell(1, "static")
    idx = {v: i for i, v in enumerate(p.ids)}
    cuts = cut_vertices(p)
    assert sorted(cuts) == sorted(idx[v] for v in ["f0", "f1", "b1", "b0"])
    groups = gap_groups(units(p), gaps(p, cuts))
    assert len(groups) == 1 and sorted(len(g.nodes) for g in groups[0]) == [2, 2]


def test_a_graph_without_cut_vertices_gives_none():
    p = make_problem([{"id": v, "time": 1, "out_bytes": 1, "param_bytes": 0} for v in "abcd"], [{"src": "a", "dst": "b", "comm": 1}, {"src": "c", "dst": "d", "comm": 1}], devices=2)
    assert cut_bound(p, opts(), 5.0) is None


@pytest.mark.parametrize("memory_model", ["static", "peak"])
def test_never_above_the_enumerated_optimum_on_training_cells(memory_model):
    stronger = reached = 0
    for seed in range(40 if memory_model == "static" else 25):
        p = cell(seed, memory_model)
        best = makespan_optimum(p, memory_model)
        cb = cut_bound(p, opts(), 10.0, gap_limit=0.0)
        assert cb is not None and cb.proved  # tiny: every group closed
        if best is None:
            continue
        assert cb.bound <= best + 1e-9, f"seed {seed}: {cb.bound} above the optimum {best}"
        others = lower_bounds(p, memory_model).best
        stronger += cb.bound > others + 1e-9
        reached += abs(cb.bound - best) <= 1e-9 * max(1.0, best) and best > others + 1e-9
    assert stronger > 0 and reached > 0  # it sees the coupled branches the other bounds miss


@pytest.mark.parametrize("memory_model, family", [("static", ladder), ("peak", ladder), ("static", fan),
                                                  pytest.param("peak", fan, marks=pytest.mark.slow)])  # 5.5 s
def test_never_above_the_enumerated_optimum_on_chains_with_branches(memory_model, family):
    for seed in range(40):
        p = family(seed, memory_model)
        best = makespan_optimum(p, memory_model)
        cb = cut_bound(p, opts(), 10.0)
        if best is None or cb is None:
            continue
        assert cb.bound <= best + 1e-9, f"seed {seed}: {cb.bound} above the optimum {best}"


def test_cpsat_with_it_proves_the_enumerated_optimum(monkeypatch):
    # the cut bound runs above LARGE_NODES nodes: lowered here so tiny graphs take that path
    import formulations.cpsat as cp
    monkeypatch.setattr(cp, "LARGE_NODES", 0)
    for seed in range(8):
        p = cell(seed, "peak")
        best = makespan_optimum(p, "peak")
        sol = cpsat(p, SolveOptions(memory_model="peak", time_limit=20, workers=1))
        if best is None:
            assert sol.status == "infeasible"
            continue
        assert sol.status == "optimal" and sol.objective == pytest.approx(best, rel=1e-6)
        assert "cut_bound" in sol.info


def layer_graph(name: str) -> Problem:
    from placement.importers.pipedream import read_pipedream
    p = read_pipedream(ROOT / "data" / "layer_graphs" / f"{name}.txt")
    one = replace(p, memory=np.array([np.inf]), device_names=["all"], allowed=[None] * p.n)
    cap = 0.4 * float(evaluate(one, np.zeros(p.n, dtype=np.int64), memory_model="peak").memory.max())
    return replace(p, memory=np.full(4, cap), device_names=[f"dev{i}" for i in range(4)], allowed=[None] * p.n)


@pytest.mark.parametrize("name, optimum_value", [("vgg16", 51.0449782), ("squeezenet", 8.8124498), ("resnet18", 7.8385059)])
def test_never_above_the_proved_layer_graph_optima(name, optimum_value):
    # optima proved under the peak model at 0.4 x the one-device peak, K = 4 (bench/results_peak_exact.md)
    p = layer_graph(name)
    cb = cut_bound(p, SolveOptions(workers=2), 20.0)
    assert cb is not None and cb.bound <= optimum_value * (1 + 1e-6)
    assert cb.bound >= cb.cut_time
