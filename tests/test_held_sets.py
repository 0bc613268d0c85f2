"""The held tensors of the peak model's knapsacks (formulations/saved_bytes.py ``held_sets``,
``spread_held``) and the knapsack check on graphs beyond the relaxation's size
(formulations/held_bound.py): the sets equal their definition on random DAGs; a term budget
keeps nodes x spread evenly, each with its full set; whatever the sampled check proves is true
by enumeration on tiny instances and by a counting argument on a 1,401-node training chain."""
from __future__ import annotations

import networkx as nx
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import formulations.held_bound as held_bound
from formulations.held_bound import check_helds, held_knapsacks_feasible
from formulations.saved_bytes import held_sets, held_tensors, spread_held
from formulations.units import units
from placement.problem import make_problem
from placement.solution import SolveOptions
from tests.test_held_bound import INSTANCES, instance, memory_infeasible_by_bound, optimum


@st.composite
def dags(draw):
    """A random DAG of 2-12 nodes, some of zero time or zero output bytes, some colocated."""
    n = draw(st.integers(2, 12))
    nodes = [{"id": f"v{i}", "time": draw(st.sampled_from([0, 1, 2])), "out_bytes": draw(st.sampled_from([0, 1, 5])), "param_bytes": 0,
              "colocate": draw(st.sampled_from([None, "a", "b"]))} for i in range(n)]
    edges = [{"src": f"v{i}", "dst": f"v{j}", "comm": 1}
             for i in range(n) for j in range(i + 1, n) if draw(st.booleans()) and draw(st.booleans())]
    for node in nodes:
        if node["colocate"] is None:
            del node["colocate"]
    return make_problem(nodes, edges, devices=2, memory=100.0)


@settings(max_examples=150, deadline=None)
@given(dags())
def test_held_sets_match_their_definition(p):
    """u is held at x when u is a strict ancestor of x and one of u's consumers is x or a
    descendant of x; its holders are those consumers' units; x's own output is held by x's unit."""
    g = nx.DiGraph()
    g.add_nodes_from(range(p.n))
    g.add_edges_from(zip(p.src.tolist(), p.dst.tolist()))
    unit = units(p).of
    xs = [x for x in range(p.n) if p.time[x] > 0]
    got = {h.x: h for h in held_sets(p, xs)}
    for x in xs:
        below = nx.descendants(g, x) | {x}
        want = {}
        for u in sorted(nx.ancestors(g, x)):
            hs = {int(unit[w]) for w in g.successors(u) if w in below}
            if p.out_bytes[u] > 0 and hs:
                want[u] = tuple(sorted(hs))
        if p.out_bytes[x] > 0:
            want[x] = (int(unit[x]),)
        if not want:
            assert x not in got
            continue
        h = got[x]
        assert dict(zip(h.tensors, h.holders)) == want
        assert h.total == pytest.approx(float(sum(p.out_bytes[u] for u in want)))


HEAVY = (70, 210, 350, 490, 630)  # the heavy layers of the 700-layer chain


def training_chain(layers: int, devices: int, capacity: float, heavy: tuple[int, ...] = ()):
    """Forward layers f_i, a loss, backward layers b_i colocated with f_i; b_i reads f_i's
    activation and b_{i+1}'s gradient. Light layers: no params, 1-byte activations; heavy ones
    (indices ``heavy``): 600 bytes of params and a 600-byte activation."""
    big = set(heavy)
    nodes = [{"id": f"f{i}", "time": 1, "out_bytes": 600 if i in big else 1, "param_bytes": 600 if i in big else 0,
              "colocate": f"L{i}"} for i in range(layers)]
    nodes.append({"id": "loss", "time": 1, "out_bytes": 1, "param_bytes": 0})
    nodes += [{"id": f"b{i}", "time": 1, "out_bytes": 1, "param_bytes": 0, "colocate": f"L{i}"} for i in range(layers)]
    edges = [{"src": f"f{i}", "dst": f"f{i + 1}", "comm": 1} for i in range(layers - 1)]
    edges.append({"src": f"f{layers - 1}", "dst": "loss", "comm": 1})
    edges.append({"src": "loss", "dst": f"b{layers - 1}", "comm": 1})
    edges += [{"src": f"b{i + 1}", "dst": f"b{i}", "comm": 1} for i in range(layers - 1)]
    edges += [{"src": f"f{i}", "dst": f"b{i}", "comm": 1} for i in range(layers)]
    return make_problem(nodes, edges, devices=devices, memory=capacity, name=f"chain{layers}")


def test_a_term_budget_keeps_nodes_spread_evenly_each_with_its_full_set():
    p = training_chain(60, 4, 1e9)
    full = {h.x: h for h in held_tensors(p, p.n)}
    assert len(full) == p.n  # every node has positive time and holds something
    every = spread_held(p, 10**9)
    assert {h.x for h in every} == set(full)
    few = spread_held(p, 2000)
    terms = sum(len(h.tensors) for h in few)
    assert 0 < len(few) < len(full) and terms <= 2000
    pos = {int(v): i for i, v in enumerate(p.topo_order.tolist())}
    steps = np.diff(sorted(pos[h.x] for h in few))
    assert steps.min() == steps.max()  # every s-th node of the topological order
    for h in few:
        assert (h.tensors, h.holders, h.total) == (full[h.x].tensors, full[h.x].holders, full[h.x].total)


@pytest.mark.parametrize("kind,seed", INSTANCES[::3])
def test_a_sampled_check_says_no_placement_fits_only_when_enumeration_agrees(kind, seed, monkeypatch):
    """With a term budget so small that only some nodes x are kept, a 'no placement fits' is
    still a proof: enumeration finds no placement with a schedule within capacity."""
    monkeypatch.setattr(held_bound, "CHECK_TERMS", 3 * instance(kind, seed).k)
    p = instance(kind, seed)
    assert len(check_helds(p)) < len(held_tensors(p, p.n))
    if held_knapsacks_feasible(p, SolveOptions(memory_model="peak"), 10.0) is False:
        assert optimum(p) is None


def test_the_check_decides_a_training_graph_beyond_the_relaxations_size():
    """1,401 nodes, 4 devices, 5 heavy layers among 700. While b_699 runs, each heavy layer's
    activation is held on the device of its backward layer, where its params also sit: some
    device has two heavy layers, 2 x (600 + 600) = 2,400 bytes. So no placement fits 2,399 bytes
    per device; the check, on a sample of the nodes, proves it (before, it stopped at 1,000
    nodes and said nothing). At 3,000 bytes a placement meets the knapsacks."""
    tight = training_chain(700, 4, 2399.0, HEAVY)
    assert tight.n == 1401
    assert held_knapsacks_feasible(tight, SolveOptions(memory_model="peak"), 30.0) is False
    roomy = training_chain(700, 4, 3000.0, HEAVY)
    assert held_knapsacks_feasible(roomy, SolveOptions(memory_model="peak"), 30.0) is True


def test_auto_proves_infeasible_before_its_warm_start_on_the_large_chain():
    """Where the memory lower bound sees nothing (the pigeonhole over units and activations is
    beyond it), auto answers infeasible from the knapsacks before any phase runs, and raises the
    report's memory lower bound to a capacity still below what a real placement needs."""
    from placement.evaluator import evaluate
    from placement.memory_bounds import memory_lower_bound
    from solvers.run import run

    tight = training_chain(700, 4, 2399.0, HEAVY)
    assert memory_infeasible_by_bound(tight) is False
    res = run(tight, "auto", SolveOptions(memory_model="peak", time_limit=60))
    assert res.status == "infeasible" and "held-tensor knapsacks" in res.reason
    assert res.history == []
    pl = np.array([int(i[1:]) * 4 // 700 if i[0] in "fb" else 3 for i in tight.ids])  # layers in 4 runs
    fits = float(evaluate(tight.with_devices(4, [1e9] * 4), pl, memory_model="peak").peak_memory.max())
    assert memory_lower_bound(tight, "peak")["best"] <= res.memory_bound["best"] < fits
    # solve's summary names the part that gave it
    from solvers.cli import summary

    line = next(x for x in summary(tight, res, "peak").splitlines() if x.startswith("memory lower bound"))
    top = max((k for k in res.memory_bound if k != "best"), key=res.memory_bound.get)
    assert line.endswith(f"from {top})"), line


@pytest.mark.parametrize("kind,seed", INSTANCES[::4])
def test_the_plain_placements_shortcut_counts_as_the_knapsacks_do(kind, seed):
    """The vectorised check of a given placement (HeldTerms.met, used before any model is built)
    agrees with the knapsacks summed tensor by tensor (Held.device_load) on every placement."""
    from formulations.bruteforce import placements
    from formulations.held_bound import HeldTerms
    from formulations.integer_bytes import memory_ints

    p = instance(kind, seed)
    helds = held_tensors(p, p.n)
    terms = HeldTerms.of(p, helds)
    param, out, cap, exact = memory_ints(p, "peak")
    assert exact
    members = units(p).members
    seen = set()
    for pl in placements(p):
        dev = np.array([pl[m[0]] for m in members])
        if tuple(dev) in seen:
            continue
        seen.add(tuple(dev))
        params = np.bincount(dev[units(p).of], weights=param, minlength=p.k)
        want = all(np.all(params + h.device_load(dev, out, p.k) <= cap) for h in helds) and np.all(params <= cap)
        assert terms.met(dev, cap, p.k) == want
