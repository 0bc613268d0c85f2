"""Multilevel V-cycle (solvers/multilevel.py): never worse than the incumbent, feasible, critical
transfers kept apart at every level, segments found on the schedule's critical paths."""
from __future__ import annotations

import time

import networkx as nx
import numpy as np
import pytest

from heuristics.list_scheduling import etf
from placement.evaluator import check, evaluate
from placement.generate import generate
from placement.solution import SolveOptions
from solvers.multilevel import MultilevelStats, critical_segments, hierarchy, multilevel
from tests.conftest import random_problem


def _critical_by_networkx(prob, pl, start):
    """Critical nodes of a schedule computed independently: longest paths through the graph of its
    constraints (edges with their transfer when the devices differ, and each device's sequence)."""
    g = nx.DiGraph()
    for v in range(prob.n):
        g.add_node(v)
    for u, v, c in zip(prob.src.tolist(), prob.dst.tolist(), prob.comm.tolist()):
        g.add_edge(u, v, w=c if pl[u] != pl[v] else 0.0)
    for d in range(prob.k):
        on = sorted(np.flatnonzero(pl == d).tolist(), key=lambda v: (start[v], prob.topo_rank[v]))
        for a, b in zip(on, on[1:]):
            if not g.has_edge(a, b):
                g.add_edge(a, b, w=0.0)
    order = list(nx.topological_sort(g))
    head = {v: 0.0 for v in order}
    for v in order:
        for w in g.successors(v):
            head[w] = max(head[w], head[v] + prob.time[v] + g[v][w]["w"])
    tail = {v: 0.0 for v in order}
    for v in reversed(order):
        for w in g.successors(v):
            tail[v] = max(tail[v], g[v][w]["w"] + prob.time[w] + tail[w])
    span = max(head[v] + prob.time[v] + tail[v] for v in order)
    return {v for v in order if head[v] + prob.time[v] + tail[v] >= span - 1e-9}


@pytest.mark.parametrize("seed", range(6))
def test_segments_tag_the_ends_of_costly_critical_transfers(seed):
    prob = random_problem(seed, 30, 3, edge_p=0.15, zero_time_p=0.0)
    pl = np.random.default_rng(seed).integers(0, prob.k, size=prob.n)
    ev = evaluate(prob, pl)
    seg, kept, hidden = critical_segments(prob, pl, ev.start, most=1000, comm_matters=0.5)
    crit = _critical_by_networkx(prob, pl, ev.start)
    # the costly tight transfers between critical nodes, found independently
    unit = np.mean([prob.time[v] for v in crit if prob.time[v] > 0])
    costly = []
    for j, (u, v) in enumerate(zip(prob.src.tolist(), prob.dst.tolist())):
        c = prob.comm[j] if pl[u] != pl[v] else 0.0
        if u in crit and v in crit and ev.start[u] + prob.time[u] + c >= ev.start[v] - 1e-9 \
                and prob.comm[j] > 0 and prob.comm[j] >= 0.5 * unit:
            costly.append((u, v))
    assert kept + hidden == len(costly)
    assert {int(v) for v in np.flatnonzero(seg >= 0)} == {v for e in costly for v in e}  # only their ends are tagged
    assert kept == sum(seg[u] != seg[v] for u, v in costly)
    _, kept1, hidden1 = critical_segments(prob, pl, ev.start, most=1, comm_matters=0.5)
    assert kept1 + hidden1 == min(1, len(costly))


@pytest.mark.parametrize("family", ["transformer", "lstm"])
def test_hierarchy_keeps_segments_apart_at_every_level(family):
    prob = generate(family, 1500, seed=3, devices=4)
    sol = etf(prob, SolveOptions())
    ev = evaluate(prob, np.asarray(sol.placement), order=sol.order)
    seg, kept, _ = critical_segments(prob, ev.placement, ev.start, most=40)
    assert kept > 0
    chain = hierarchy(prob, seg, coarsest=100, ratio=4, seed=0, deadline=time.monotonic() + 60)
    assert len(chain) >= 2
    of = np.arange(prob.n)
    for cz in chain:
        assert cz.coarse.n < cz.original.n
        of = cz.of[of]  # original node -> node of this level
        for c in np.unique(of):
            tags = seg[of == c]
            assert len(set(tags[tags >= 0].tolist())) <= 1


@pytest.mark.parametrize("family,fraction", [pytest.param("transformer", None, marks=pytest.mark.slow), ("cnn", 0.35),
                                             pytest.param("lstm", 0.35, marks=pytest.mark.slow)])  # 3 s each
def test_multilevel_is_never_worse_than_its_incumbent_and_feasible(family, fraction):
    kw = {} if fraction is None else {"memory_fraction": fraction}
    prob = generate(family, 700, seed=2, devices=3, **kw)
    sol = etf(prob, SolveOptions())
    ev0 = evaluate(prob, np.asarray(sol.placement), order=sol.order)
    assert ev0.feasible(prob)
    stats = MultilevelStats()
    pl, ev = multilevel(prob, ev0.placement, ev0.start, SolveOptions(workers=2, seed=1),
                        deadline=time.monotonic() + 3, coarsest=60, stats=stats)
    assert len(stats.sizes) >= 2 and stats.sizes[-1] < prob.n
    assert ev.makespan <= ev0.makespan + 1e-9
    assert ev.feasible(prob)
    got = check(prob, pl, ev.start, "static")
    assert got.makespan == pytest.approx(ev.makespan)


def test_multilevel_returns_the_input_when_stopped():
    prob = generate("transformer", 500, seed=1, devices=2)
    sol = etf(prob, SolveOptions())
    ev0 = evaluate(prob, np.asarray(sol.placement), order=sol.order)
    opts = SolveOptions(workers=1)
    opts.stop.set()
    pl, ev = multilevel(prob, ev0.placement, ev0.start, opts, deadline=time.monotonic() + 5, coarsest=50)
    assert np.array_equal(pl, ev0.placement) and ev.makespan == ev0.makespan


@pytest.mark.slow  # a non-default mode of auto, 7 s: the default suite sits near its 10-minute cap
def test_auto_with_the_multilevel_phase_keeps_the_original_bound_and_its_warm_start():
    from placement.bounds import lower_bounds
    from solvers.run import run

    prob = generate("transformer", 400, seed=3, devices=3, memory_fraction=0.5)
    opts = SolveOptions(time_limit=8, workers=2,
                        extra={"exact_max_nodes": 50, "big_exact": "multilevel", "multilevel_coarsest": 40})
    res = run(prob, "auto", opts)
    phases = {p["name"]: p for p in res.history}
    assert phases["exact-multilevel"]["status"] == "feasible"
    assert res.evaluation.makespan <= phases["warm-start"]["makespan"] + 1e-9
    # the coarse levels prove nothing: the bound is the original graph's
    assert res.lower_bound <= res.evaluation.makespan
    assert res.lower_bound == pytest.approx(lower_bounds(prob).best) or res.status == "optimal"
    check(prob, res.evaluation.placement, res.evaluation.start, "static")
