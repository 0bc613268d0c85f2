"""Coarsening: acyclic by construction, totals kept, exact mapping back, colocation and allowed
devices kept, and the coarse schedule's promise holds on the original graph."""
from __future__ import annotations

import itertools

import networkx as nx
import numpy as np
import pytest

from placement.coarsen import _State, coarsen
from placement.evaluator import check_placement, evaluate, static_memory
from placement.formats.fiddle import read_fiddle
from placement.generate import generate
from placement.problem import Problem, ProblemError, make_problem
from tests.conftest import random_problem


def _acyclic(n: int, src: np.ndarray, dst: np.ndarray) -> bool:
    g = nx.DiGraph()
    g.add_nodes_from(range(n))
    g.add_edges_from(zip(src.tolist(), dst.tolist()))
    return nx.is_directed_acyclic_graph(g)


def _random_coarse_placement(coarse: Problem, rng: np.random.Generator) -> np.ndarray:
    """A random placement of the coarse graph that respects its colocation and allowed devices."""
    mask = coarse.allowed_mask()
    pl = np.array([rng.choice(np.flatnonzero(mask[i])) for i in range(coarse.n)], dtype=np.int64)
    for members in coarse.groups:
        pl[members] = pl[members[0]]
    return pl


def _cases() -> list[tuple[Problem, int]]:
    out = []
    for seed in range(6):
        out.append((random_problem(seed, 14, 3, colocate_p=0.3, edge_p=0.3), 5))
    for kind in ("transformer", "lstm", "cnn", "random"):
        out.append((generate(kind, 400, seed=1), 60))
    return out


CASES = _cases()


@pytest.mark.parametrize("prob,target", CASES, ids=[p.name for p, _ in CASES])
def test_coarse_graph_is_acyclic_and_keeps_totals(prob: Problem, target: int) -> None:
    cz = coarsen(prob, target, seed=3)
    co = cz.coarse
    assert co.n <= target
    assert _acyclic(co.n, co.src, co.dst)
    for field in ("time", "param_bytes", "out_bytes"):
        assert getattr(co, field).sum() == pytest.approx(getattr(prob, field).sum(), rel=1e-12)
    # members partition the original nodes, and `of` agrees with them
    allm = np.concatenate(cz.members)
    assert sorted(allm.tolist()) == list(range(prob.n))
    for c, mem in enumerate(cz.members):
        assert np.all(cz.of[mem] == c)
        assert co.time[c] == pytest.approx(prob.time[mem].sum())
    # a coarse edge exists exactly where original edges cross clusters, with their max comm
    cross = cz.of[prob.src] != cz.of[prob.dst]
    want: dict[tuple[int, int], float] = {}
    for u, v, c in zip(cz.of[prob.src][cross].tolist(), cz.of[prob.dst][cross].tolist(), prob.comm[cross].tolist()):
        want[(u, v)] = max(want.get((u, v), 0.0), c)
    got = {(int(u), int(v)): float(c) for u, v, c in zip(co.src, co.dst, co.comm)}
    assert got == pytest.approx(want)


@pytest.mark.parametrize("prob,target", CASES, ids=[p.name for p, _ in CASES])
def test_mapping_back_is_exact_and_keeps_colocation(prob: Problem, target: int) -> None:
    cz = coarsen(prob, target, seed=1)
    rng = np.random.default_rng(7)
    for _ in range(5):
        cp = _random_coarse_placement(cz.coarse, rng)
        pl = cz.project(cp)
        check_placement(prob, pl)  # colocation and allowed devices hold on the original
        assert np.all(pl == cp[cz.of])
        np.testing.assert_allclose(static_memory(prob, pl), static_memory(cz.coarse, cp), rtol=1e-12)
        # restrict is the inverse of project (no repair needed: no memory limit is checked here)
        back = cz.restrict(pl, repair=False)
        assert back is not None and np.all(back == cp)


@pytest.mark.parametrize("edge_comm", ["max", "sum"])
@pytest.mark.parametrize("prob,target", CASES, ids=[p.name for p, _ in CASES])
def test_coarse_schedule_promise_holds_on_the_original(prob: Problem, target: int, edge_comm: str) -> None:
    """Members run back to back inside their coarse node's slot: the original, run in the
    projected order, finishes no later than the coarse schedule (docs/coarsening.md)."""
    cz = coarsen(prob, target, seed=2, edge_comm=edge_comm)
    rng = np.random.default_rng(11)
    for _ in range(4):
        cp = _random_coarse_placement(cz.coarse, rng)
        cev = evaluate(cz.coarse, cp)
        order = cz.project_order(cp, cev.start)
        ev = evaluate(prob, cz.project(cp), order=order)
        assert ev.makespan <= cev.makespan * (1 + 1e-9) + 1e-9
        np.testing.assert_allclose(ev.static_memory, cev.static_memory, rtol=1e-12)


def test_each_pass_keeps_the_quotient_acyclic() -> None:
    """Drive the passes one by one on random DAGs (with colocation, varied allowed devices) and
    check the quotient after every single pass."""
    for seed in range(8):
        prob = random_problem(100 + seed, 30, 3, colocate_p=0.25, edge_p=0.15)
        st = _State(prob, "max", seed)
        cap = 0.5 * float(st.w.sum())
        rng = np.random.default_rng(seed)

        def ok() -> None:
            a, b = st.label[prob.src], st.label[prob.dst]
            keep = a != b
            assert _acyclic(st.c, a[keep], b[keep])

        st.contract_sets(prob.colocate.copy(), cap, "colocate", merge_scc=True)
        ok()
        for step in range(12):
            kind = step % 4
            if kind == 3:
                sets = rng.integers(-1, max(2, st.c // 3), size=st.c)  # arbitrary candidate sets
                st.contract_sets(sets, cap, "random-sets", merge_scc=bool(step % 2))
            else:
                st.star_pass(("out", "out", "in")[kind], cap, chain=kind == 0)
            ok()
        st.blocks(max(1, st.c // 2))
        ok()


def test_chain_passes_collapse_paths_but_not_branches() -> None:
    """Chain contractions (single successor whose end has a single predecessor) collapse the
    path 0-1-2-3 and 6-7 but never merge the parallel branches 4 and 5."""
    nodes = [{"id": i, "time": 1.0, "out_bytes": 1.0, "param_bytes": 0.0} for i in range(8)]
    # 0 -> 1 -> 2 -> 3 (chain), 3 -> 4, 3 -> 5 (fork), 4 -> 6, 5 -> 6 (join), 6 -> 7
    edges = [(0, 1), (1, 2), (2, 3), (3, 4), (3, 5), (4, 6), (5, 6), (6, 7)]
    prob = make_problem(nodes, [{"src": u, "dst": v, "comm": 1.0} for u, v in edges], devices=2)
    st = _State(prob, "max", 0)
    for _ in range(30):
        st.star_pass("out", 100.0, chain=True)
    lab = st.label
    assert lab[0] == lab[1] == lab[2] == lab[3] and lab[6] == lab[7]
    assert len({lab[0], lab[4], lab[5], lab[6]}) == 4
    cz = coarsen(prob, 1, use_names=False, cap_factor=100.0)
    assert cz.coarse.n == 1 and cz.coarse.time[0] == 8.0


def test_colocated_pair_on_a_path_is_not_contracted_when_heavy() -> None:
    """u -> v -> w with u, w colocated: contracting {u, w} closes a cycle through v; the group is
    either contracted with v (Tarnawski's SCC rule, when light) or kept as a coarse colocation."""
    nodes = [{"id": "u", "time": 1, "out_bytes": 1, "param_bytes": 0, "colocate": "g"},
             {"id": "v", "time": 1, "out_bytes": 1, "param_bytes": 0},
             {"id": "w", "time": 1, "out_bytes": 1, "param_bytes": 0, "colocate": "g"},
             {"id": "x", "time": 1, "out_bytes": 1, "param_bytes": 0}]
    edges = [{"src": "u", "dst": "v", "comm": 1}, {"src": "v", "dst": "w", "comm": 1}, {"src": "u", "dst": "x", "comm": 1}]
    prob = make_problem(nodes, edges, devices=2)
    for cap_factor, merged in ((3.0, True), (0.2, False)):
        cz = coarsen(prob, 3, cap_factor=cap_factor, use_names=False)
        assert _acyclic(cz.coarse.n, cz.coarse.src, cz.coarse.dst)
        assert (cz.of[0] == cz.of[1] == cz.of[2]) == merged
        cp = _random_coarse_placement(cz.coarse, np.random.default_rng(0))
        check_placement(prob, cz.project(cp))


def test_allowed_devices_are_kept() -> None:
    rng = np.random.default_rng(5)
    nodes = []
    for i in range(40):
        rec = {"id": i, "time": float(rng.integers(1, 5)), "out_bytes": 1.0, "param_bytes": 0.0}
        if i % 3 == 0:
            rec["devices"] = [int(rng.integers(0, 3))]
        nodes.append(rec)
    edges = [{"src": i, "dst": j, "comm": 1.0} for i in range(40) for j in range(i + 1, min(40, i + 4)) if rng.random() < 0.5]
    prob = make_problem(nodes, edges, devices=3)
    cz = coarsen(prob, 8)
    assert _acyclic(cz.coarse.n, cz.coarse.src, cz.coarse.dst)
    for c, mem in enumerate(cz.members):
        allowed = {prob.allowed[v] for v in mem}
        assert len(allowed) == 1  # only equal allowed sets merge
        assert cz.coarse.allowed[c] == next(iter(allowed))
    for _ in range(5):
        check_placement(prob, cz.project(_random_coarse_placement(cz.coarse, rng)))


def test_names_group_dnn_scopes() -> None:
    """On a generated transformer, name scopes never mix forward and backward operators."""
    prob = generate("transformer", 2000, seed=0)
    cz = coarsen(prob, 200, seed=0)
    assert cz.coarse.n <= 200
    assert any(lv.step.startswith("scope") for lv in cz.levels)
    bwd = prob.node_attrs["is_backward"]
    mixed = sum(1 for mem in cz.members if mem.size > 1 and 0 < bwd[mem].sum() < mem.size)
    assert _acyclic(cz.coarse.n, cz.coarse.src, cz.coarse.dst)
    assert mixed <= len(cz.members) // 10  # only the final topological blocks may mix them


def test_restrict_repairs_memory_and_keeps_colocation() -> None:
    prob = generate("cnn", 400, seed=0, devices=4, memory_fraction=0.3)
    cz = coarsen(prob, 40)
    from heuristics.baselines import topo_fill
    from placement.solution import SolveOptions

    sol = topo_fill(prob, SolveOptions())
    assert sol.placement is not None and evaluate(prob, sol.placement).feasible(prob)
    raw = cz.restrict(sol.placement, repair=False)
    assert not evaluate(cz.coarse, raw).feasible(cz.coarse)  # majority voting overflows here
    cp = cz.restrict(sol.placement)
    assert cp is not None and evaluate(cz.coarse, cp).feasible(cz.coarse)
    check_placement(prob, cz.project(cp))
    assert np.mean(cp == raw) > 0.5  # repair moves a few units, not everything


def test_fiddle_graphs(workloads) -> None:
    for path in sorted((workloads / "latency-inputs" / "OperatorGraphs").glob("*.json")):
        prob = read_fiddle(path)
        cz = coarsen(prob, 100, seed=0)
        co = cz.coarse
        assert co.n <= 100
        assert _acyclic(co.n, co.src, co.dst)
        assert co.time.sum() == pytest.approx(prob.time.sum())
        cp = _random_coarse_placement(co, np.random.default_rng(0))
        pl = cz.project(cp)
        check_placement(prob, pl)
        np.testing.assert_allclose(static_memory(prob, pl), static_memory(co, cp))


def test_small_graph_is_returned_as_is_and_bad_target_is_refused() -> None:
    prob = random_problem(0, 6, 2)
    cz = coarsen(prob, 10)
    assert cz.coarse is prob and np.all(cz.of == np.arange(6))
    with pytest.raises(ProblemError, match="target"):
        coarsen(prob, 0)
    with pytest.raises(ProblemError, match="edge_comm"):
        coarsen(prob, 3, edge_comm="mean")


def test_deterministic_given_seed() -> None:
    prob = generate("lstm", 800, seed=0)
    a, b = coarsen(prob, 50, seed=4), coarsen(prob, 50, seed=4)
    assert np.all(a.of == b.of)
    assert list(itertools.chain(a.coarse.src)) == list(itertools.chain(b.coarse.src))


def test_candidate_clusters_are_contracted_only_where_acyclic() -> None:
    """Arbitrary candidate sets (as PARDNN's slices would be) never close a cycle, and sets that
    are safe (here: pairs along single-successor edges) do get contracted."""
    for seed in range(5):
        prob = random_problem(300 + seed, 40, 3, colocate_p=0.1, edge_p=0.12)
        rng = np.random.default_rng(seed)
        clusters = rng.integers(-1, 8, size=prob.n)
        cz = coarsen(prob, 12, seed=seed, clusters=clusters, use_names=False)
        assert cz.coarse.n <= 12 and _acyclic(cz.coarse.n, cz.coarse.src, cz.coarse.dst)
        assert any(lv.step == "clusters" for lv in cz.levels) or all(lv.step != "blocks" for lv in cz.levels)
    with pytest.raises(ProblemError, match="clusters"):
        coarsen(random_problem(0, 20, 2), 5, clusters=np.zeros(3, dtype=np.int64))


@pytest.mark.parametrize("kind", ["transformer", "lstm", "cnn", "random"])
def test_coarse_size_is_close_to_the_target(kind: str) -> None:
    """Passes stop merging once the target is reached instead of overshooting far below it."""
    prob = generate(kind, 3000, seed=0)
    cz = coarsen(prob, 300, seed=0)
    assert 0.85 * 300 <= cz.coarse.n <= 300


def test_exact_coarse_solution_keeps_its_promise_on_the_original() -> None:
    """CP-SAT's schedule of the coarse graph, projected with its order, is never slower on the
    original than the makespan CP-SAT reported for the coarse graph."""
    cpsat_mod = pytest.importorskip("formulations.cpsat")
    from placement.solution import SolveOptions

    prob = generate("lstm", 400, seed=0, devices=3)
    cz = coarsen(prob, 25, seed=0)
    sol = cpsat_mod.cpsat(cz.coarse, SolveOptions(time_limit=3.0, workers=1))
    assert sol.placement is not None and sol.start is not None
    cev = evaluate(cz.coarse, sol.placement, order=None)
    order = cz.project_order(sol.placement, sol.start)
    ev = evaluate(prob, cz.project(sol.placement), order=order)
    assert ev.makespan <= sol.objective * (1 + 1e-9) + 1e-9
    assert ev.feasible(prob) and cev.feasible(cz.coarse)


@pytest.mark.parametrize("prob,target", CASES, ids=[p.name for p, _ in CASES])
def test_segments_never_share_a_coarse_node(prob: Problem, target: int) -> None:
    """No coarse node holds two segments (the critical transfers that separate them stay coarse
    edges); the graph stays acyclic, totals and the mapping back are kept."""
    rng = np.random.default_rng(prob.n)
    seg = np.full(prob.n, -1, dtype=np.int64)
    tagged = rng.choice(prob.n, size=max(2, prob.n // 5), replace=False)
    seg[tagged] = rng.integers(0, 4, size=tagged.size)
    cz = coarsen(prob, target, seed=2, segment=seg)
    co = cz.coarse
    assert _acyclic(co.n, co.src, co.dst)
    assert co.n < prob.n  # it still coarsens
    for mem in cz.members:
        assert len(set(seg[mem][seg[mem] >= 0].tolist())) <= 1
    for field in ("time", "param_bytes", "out_bytes"):
        assert getattr(co, field).sum() == pytest.approx(getattr(prob, field).sum(), rel=1e-12)
    cp = _random_coarse_placement(co, rng)
    check_placement(prob, cz.project(cp))
    # an original edge between two segments is a coarse edge
    cross = np.flatnonzero((seg[prob.src] >= 0) & (seg[prob.dst] >= 0) & (seg[prob.src] != seg[prob.dst]))
    assert np.all(cz.of[prob.src[cross]] != cz.of[prob.dst[cross]])


def test_segment_passes_each_keep_the_rule() -> None:
    """Every pass (stars, name scopes, blocks) keeps at most one segment per cluster, on random DAGs
    where every node is tagged (the hardest case: only untagged-free merges of equal tags)."""
    for seed in range(8):
        prob = random_problem(seed, 30, 3, edge_p=0.2)
        seg = np.random.default_rng(seed).integers(0, 3, size=prob.n)
        st = _State(prob, "max", seed, target=1, segment=seg)
        cap = float(st.w.sum())
        st.star_pass("out", cap, chain=False)
        st.star_pass("in", cap, chain=False)
        st.blocks(2)
        for c in range(st.c):
            assert len(set(seg[st.label == c].tolist())) == 1
        assert _acyclic(st.c, st.qs, st.qd)


def test_bad_segment_is_refused() -> None:
    prob = generate("transformer", 200, seed=1)
    with pytest.raises(ProblemError, match="segment"):
        coarsen(prob, 20, segment=np.zeros(3, dtype=np.int64))
