"""memory_lower_bound never exceeds the smallest capacity at which some placement fits, found by
brute force over placements (and, under the peak model, every per-device order) on tiny graphs."""
from __future__ import annotations

import itertools

import numpy as np
import pytest

from placement.evaluator import evaluate
from placement.memory_bounds import live_cut_bytes, memory_lower_bound
from placement.problem import make_problem
from tests.conftest import part_or_all, random_problem, scaled


def _topological_orders(p):
    preds = [set() for _ in range(p.n)]
    for u, v in zip(p.src.tolist(), p.dst.tolist()):
        preds[v].add(u)

    def rec(done, seq):
        if len(seq) == p.n:
            yield list(seq)
            return
        for v in range(p.n):
            if v not in done and preds[v] <= done:
                done.add(v); seq.append(v)
                yield from rec(done, seq)
                done.discard(v); seq.pop()
    yield from rec(set(), [])


def _placements(p, k):
    for pl in itertools.product(range(k), repeat=p.n):
        pl = np.array(pl)
        if all(np.unique(pl[m]).size == 1 for m in p.groups):
            yield pl


def brute_min_capacity(p, k, model):
    q = p.with_devices(k, memory=np.inf)
    orders = list(_topological_orders(q)) if model == "peak" else [None]
    best = np.inf
    for pl in _placements(q, k):
        seen = set()
        for g in orders:
            per = None if g is None else tuple(tuple(v for v in g if pl[v] == d) for d in range(k))
            if per in seen:
                continue
            seen.add(per)
            ev = evaluate(q, pl, order=None if per is None else [list(s) for s in per], memory_model=model)
            best = min(best, float(ev.memory.max()))
    return best


@part_or_all
@pytest.mark.parametrize("model", ["static", "peak"])
def test_memory_lower_bound_never_above_brute_force(model, share):
    binding = 0
    seeds = range(10) if share == "all" else (2, 3, 4, 9)  # the part: quick seeds, 9 with colocation
    for seed in seeds:
        p = random_problem(seed, 6, 2, colocate_p=0.2 if seed % 3 == 0 else 0.0, zero_time_p=0.15, edge_p=0.4)
        for k in (1, 2, 3):
            lb = memory_lower_bound(p, model, k)["best"]
            exact = brute_min_capacity(p, k, model)
            assert lb <= exact * (1 + 1e-12) + 1e-9, (seed, k, lb, exact)
            binding += lb >= exact * (1 - 1e-9)
    assert binding >= scaled(3, len(seeds), 10)  # the bound is tight on some instances, so the check is not vacuous


def training_chain():
    """f1 -> f2 -> loss -> b2 -> b1, activations f1 -> b1 and f2 -> b2 saved for the backward pass."""
    nodes = [{"id": x, "time": 1, "out_bytes": b, "param_bytes": w}
             for x, b, w in (("f1", 40, 5), ("f2", 30, 5), ("loss", 1, 0), ("b2", 20, 0), ("b1", 10, 0))]
    edges = [{"src": a, "dst": b, "comm": 1} for a, b in
             (("f1", "f2"), ("f2", "loss"), ("loss", "b2"), ("b2", "b1"), ("f1", "b1"), ("f2", "b2"))]
    return make_problem(nodes, edges, devices=2, memory=np.inf)


def test_live_cut_counts_saved_activations():
    p = training_chain()
    loss = p.index["loss"]
    # while loss runs: f1's and f2's outputs (consumed by b1, b2 after it) and loss's own output
    assert live_cut_bytes(p, [loss]).tolist() == [40 + 30 + 1]
    # while b2 runs: f1's output (for b1), f2's and loss's (its inputs) and b2's own: 40 + 30 + 1 + 20
    assert live_cut_bytes(p, [p.index["b2"]]).tolist() == [91]
    parts = memory_lower_bound(p, "peak", 2)
    assert parts["live_cut"] == pytest.approx((10 + 91) / 2)  # params + the largest cut, over 2 devices
    assert parts["best"] <= brute_min_capacity(p, 2, "peak")


def test_run_proves_infeasible_below_the_memory_bound_and_answers_at_brute_force_minimum():
    from placement.solution import SolveOptions
    from solvers.run import run

    p = training_chain()
    lb = memory_lower_bound(p, "peak", 2)["best"]
    res = run(p.with_devices(2, memory=lb * 0.99), "etf", SolveOptions(memory_model="peak"))
    assert res.status == "infeasible" and "memory lower bound" in res.reason
    exact = brute_min_capacity(p, 2, "peak")
    res = run(p.with_devices(2, memory=exact), "auto", SolveOptions(memory_model="peak", time_limit=5))
    assert res.feasible
    rep = res.report(p.with_devices(2, memory=exact), "peak")
    assert rep["memory_lower_bound"] == pytest.approx(lb) and lb <= exact


def test_bound_with_allowed_devices_is_computed_and_valid():
    base = random_problem(5, 6, 2, edge_p=0.4)
    nodes = [{"id": v, "time": float(base.time[v]), "out_bytes": float(base.out_bytes[v]),
              "param_bytes": float(base.param_bytes[v]), **({"devices": [1]} if v == 0 else {})} for v in range(base.n)]
    edges = [{"src": int(a), "dst": int(b), "comm": float(c)} for a, b, c in zip(base.src, base.dst, base.comm)]
    p = make_problem(nodes, edges, devices=2, memory=np.inf)
    assert memory_lower_bound(p, "peak")["best"] <= brute_min_capacity(base, 2, "peak")


@pytest.mark.parametrize("seed", range(10))
def test_cut_scores_bound_every_nodes_cut(seed):
    """The pruning of _best_cuts is sound: each running node's score is at least its live cut."""
    from placement.memory_bounds import _scores

    p = random_problem(seed, 25, 1, edge_p=0.2)
    nodes, score = _scores(p)
    cut = live_cut_bytes(p, nodes.tolist()) if nodes.size <= 63 else None
    assert cut is not None and np.all(score >= cut - 1e-9)


def test_live_cut_bound_is_the_largest_over_all_nodes_on_a_small_training_graph():
    """On a generated LSTM training graph the bound's live cut is the largest over every node,
    checked by computing every node's cut."""
    from placement.generate import generate

    p = generate("lstm", 150, seed=0, devices=1)
    runs = np.flatnonzero(p.time > 0)
    every = max(float(live_cut_bytes(p, runs[i:i + 63].tolist()).max()) for i in range(0, runs.size, 63))
    total = float(p.param_bytes.sum())
    for k in (1, 4):
        assert memory_lower_bound(p, "peak", k)["live_cut"] == pytest.approx((total + every) / k)


def test_bound_on_a_graph_that_holds_no_tensor():
    """No output bytes anywhere: the live cut is empty and the bound is the params' bin packing."""
    nodes = [{"id": "a", "time": 3, "out_bytes": 0, "param_bytes": 5}, {"id": "b", "time": 6, "out_bytes": 0, "param_bytes": 7}]
    p = make_problem(nodes, [{"src": "a", "dst": "b", "comm": 1}], devices=2, memory=100, name="no-tensors")
    assert memory_lower_bound(p, "peak")["best"] == 7


@pytest.mark.parametrize("seed", range(12))
def test_pivots_are_the_nodes_comparable_with_all_and_their_cuts_are_exact(seed):
    """pivot_cuts finds exactly the running nodes that are an ancestor or a descendant of every
    other node (checked by networkx reachability), and its linear-time cut equals the bitset
    computation of live_cut_bytes."""
    import networkx as nx

    from placement.memory_bounds import pivot_cuts

    p = random_problem(seed, 14, 1, edge_p=0.5 if seed % 2 else 0.8)
    g = nx.DiGraph()
    g.add_nodes_from(range(p.n))
    g.add_edges_from(zip(p.src.tolist(), p.dst.tolist()))
    want = sorted(v for v in range(p.n) if p.time[v] > 0
                  and len(nx.ancestors(g, v)) + len(nx.descendants(g, v)) == p.n - 1)
    nodes, cuts = pivot_cuts(p)
    assert sorted(nodes.tolist()) == want
    if want:
        assert cuts == pytest.approx(live_cut_bytes(p, nodes.tolist()))


def test_pivot_cut_reaches_the_loss_of_a_training_graph():
    """On a generated LSTM the loss is a pivot and the bound includes its cut."""
    from placement.generate import generate
    from placement.memory_bounds import pivot_cuts

    p = generate("lstm", 600, seed=0, devices=4)
    nodes, cuts = pivot_cuts(p)
    names = [p.names[v] for v in nodes]
    assert "loss/total" in names
    loss_cut = float(cuts[names.index("loss/total")])
    assert loss_cut == pytest.approx(float(live_cut_bytes(p, [p.names.index("loss/total")])[0]))
    assert memory_lower_bound(p, "peak")["live_cut"] >= (float(p.param_bytes.sum()) + loss_cut) / 4 * (1 - 1e-12)
