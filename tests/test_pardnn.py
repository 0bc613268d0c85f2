"""PARDNN steps on hand-made graphs whose clusters, mapping and moves are worked out by hand."""
from __future__ import annotations

import math
import threading

import numpy as np
import pytest

from placement.evaluator import evaluate
from placement.problem import make_problem
from placement.solution import SolveOptions
from heuristics.pardnn.bit import LevelBIT
from heuristics.pardnn.graph import Graph, weighted_levels
from heuristics.pardnn.mapping import clustered_levels, lflam, spans
from heuristics.pardnn.memory_ii import balance_residual, eq5_holds, eq5_scores, split_critical_path
from heuristics.pardnn.memory_tracker import peak_state, static_state
from heuristics.pardnn.overflow import Units, handle_overflow, move_costs
from heuristics.pardnn.pipeline import heuristic_one, pardnn
from heuristics.pardnn.slicing import slice_graph


def build(nodes, edges, k=2, memory=math.inf):
    """nodes: {id: (time, out, param)}, edges: [(u, v, comm)]."""
    recs = [{"id": i, "time": t, "out_bytes": o, "param_bytes": p} for i, (t, o, p) in nodes.items()]
    return make_problem(recs, [{"src": u, "dst": v, "comm": c} for u, v, c in edges], devices=k, memory=memory)


def ids(problem, arr):
    return [problem.ids[int(v)] for v in arr]


# ---------- levels and slicing (Algorithm 1) ----------

def three_paths():
    nodes = {"S": (1, 0, 0), "X1": (2, 0, 0), "X2": (2, 0, 0), "X3": (2, 0, 0), "T": (1, 0, 0),
             "Y1": (1, 0, 0), "Y2": (1, 0, 0), "Z": (1, 0, 0)}
    edges = [("S", "X1", 3), ("X1", "X2", 3), ("X2", "X3", 3), ("X3", "T", 3),
             ("S", "Y1", 1), ("Y1", "Y2", 1), ("Y2", "T", 1), ("S", "Z", 0), ("Z", "T", 0)]
    return build(nodes, edges)


def test_levels_by_hand():
    p = three_paths()
    g = Graph.of(p)
    tl, bl, wl = weighted_levels(g, p.comm)
    i = p.index
    assert tl[i["X2"]] == 1 + 3 + 2 + 3
    assert bl[i["X2"]] == 2 + 3 + 2 + 3 + 1
    assert wl[i["S"]] == wl[i["T"]] == 20  # the X path: 7 compute + 12 comm + 1
    assert tl[i["Z"]] == 1 and bl[i["Z"]] == 2


def test_slicing_primaries_recomputed():
    p = three_paths()
    sl = slice_graph(Graph.of(p), 2, p.comm)
    assert sl.primaries == 2
    assert ids(p, sl.paths[0]) == ["S", "X1", "X2", "X3", "T"]
    # after removing the X path, Y1 -> Y2 (3) outweighs Z (1)
    assert ids(p, sl.paths[1]) == ["Y1", "Y2"]
    assert [ids(p, c) for c in sl.paths[2:]] == [["Z"]]
    assert set(np.unique(sl.cluster)) == {0, 1, 2}


def test_slicing_without_recomputation_for_secondaries():
    # K = 1: the one recomputation after the primary sees x -> y heavy (comm 20); removing x when
    # it is cut leaves y with a stale level that still counts the edge from x, so y (alone 1)
    # comes before the heavier isolated z (4): recomputing would put z first.
    nodes = {"a": (30, 0, 0), "x": (1, 0, 0), "y": (1, 0, 0), "w": (2, 0, 0), "z": (4, 0, 0)}
    edges = [("x", "y", 20), ("x", "w", 21)]
    p = build(nodes, edges, k=1)
    sl = slice_graph(Graph.of(p), 1, p.comm)
    assert ids(p, sl.paths[0]) == ["a"]
    order = [ids(p, c) for c in sl.paths[1:]]
    assert order[0] == ["x", "w"]  # heaviest: 1 + 21 + 2
    assert order[1] == ["y"]       # stale level 1 + 20 + 1 = 22 > z's 4
    assert order[2] == ["z"]


def test_secondary_stops_where_its_heaviest_continuation_is_taken():
    # The critical path s f1 f2 j b1 b2 t (19 work + 6 comm) is primary 0 (K = 1). x1 forks a
    # forward branch x1 -> x2 -> j back into it and a saved activation x1 -> g -> b2 (backward).
    # Levels with primary 0's comm zeroed: bl(x2) = 1 + 1 + bl(j) = 12 > bl(g) = 3 + 1 + bl(b2) = 9,
    # wl(x1) = wl(x2) = 16 (x1 first by rank), wl(g) = 13. From x1 the heaviest continuation x2 is
    # free, x2's (j) is taken: [x1, x2]; then [g]. Walking the live graph instead would follow
    # x1 -> g (comm + live bl: 1 + 3 > 1 + 1) and cut the forward branch: [x1, g], [x2].
    nodes = {"s": (1, 0, 0), "f1": (4, 0, 0), "f2": (4, 0, 0), "j": (1, 0, 0), "b1": (4, 0, 0), "b2": (4, 0, 0),
             "t": (1, 0, 0), "x1": (1, 0, 0), "x2": (1, 0, 0), "g": (3, 0, 0)}
    chain = ["s", "f1", "f2", "j", "b1", "b2", "t"]
    edges = [(a, b, 1) for a, b in zip(chain, chain[1:])]
    edges += [("s", "x1", 1), ("x1", "x2", 1), ("x2", "j", 1), ("x1", "g", 1), ("g", "b2", 1)]
    p = build(nodes, edges, k=1)
    sl = slice_graph(Graph.of(p), 1, p.comm)
    assert ids(p, sl.paths[0]) == chain
    assert [ids(p, c) for c in sl.paths[1:]] == [["x1", "x2"], ["g"]]


def span_graph():
    # Primary 0: a0 a1 a2 a3 (10 each; a2 -> a3 comm 5 makes it critical, 45 > 44 via v); primary
    # 1: b0 b1 (5 each); secondary [v] (2) with parents a0 (finish 10) and a2 (finish 30), child a3.
    nodes = {"a0": (10, 0, 0), "a1": (10, 0, 0), "a2": (10, 0, 0), "a3": (10, 0, 0), "b0": (5, 0, 0), "b1": (5, 0, 0),
             "v": (2, 0, 0)}
    edges = [("a0", "a1", 0), ("a1", "a2", 0), ("a2", "a3", 5), ("b0", "b1", 0), ("a0", "v", 1), ("a2", "v", 1), ("v", "a3", 1)]
    return build(nodes, edges)


def test_span_rules_by_hand():
    # Clustered top levels (comm inside clusters zeroed): a = 0, 10, 20, 34 (v finishes at
    # 31 + 2, + 1 comm), v = 31, b = 0, 5. v is totally communicating with primary 0 (3), w = 2,
    # and no other work is unmapped (U = 0).
    # - "latest" (the paper's last parent): span(v) = [30, 34) holds no mapped work, W = (0, 0):
    #   (a) 2 > 0 and (b) 2 > 0 fail, (c) 3 > 2, 3 > 0, 3 > 0 holds -> lookahead, primary 0.
    # - "earliest" (the authors' code): span(v) = [10, 34), W = (a1 + a2, 0) = (20, 0): (a) 22 > 0,
    #   (b) 22 > 20 and (c) 3 > 20 fail; Eq. (1): 20 + 0 against 0 + 3 -> primary 1.
    p = span_graph()
    g = Graph.of(p)
    sl = slice_graph(g, 2, p.comm)
    assert [ids(p, c) for c in sl.paths] == [["a0", "a1", "a2", "a3"], ["b0", "b1"], ["v"]]
    tl, _ = clustered_levels(g, sl, p.comm)
    assert [tl[p.index[x]] for x in ("a0", "a1", "a2", "a3", "v", "b0", "b1")] == [0, 10, 20, 34, 31, 0, 5]
    start, end = spans(p, sl, tl, 44.0, "latest")
    assert (start[2], end[2]) == (30, 34)
    start, end = spans(p, sl, tl, 44.0, "earliest")
    assert (start[2], end[2]) == (10, 34)
    latest = lflam(p, g, sl, None, p.comm, 2, span_start="latest")
    assert latest.pe[p.index["v"]] == 0 and latest.lookahead_mapped == 1 and latest.info["admitted_by"]["c"] == 1
    earliest = lflam(p, g, sl, None, p.comm, 2, span_start="earliest")
    assert earliest.pe[p.index["v"]] == 1 and earliest.lookahead_mapped == 0 and earliest.balanced == 1


def test_join_repair_pulls_the_late_input_onto_the_critical_device():
    # With v on device 1 ("earliest" rule): a0 a1 a2 run 0-30 on device 0, v waits for a2
    # (30 + 1) and runs 31-33, a3 waits for it (33 + 1) and runs 34-44: device 0 idles 30-34 and
    # v arrived last. Pulling v's cluster: v runs 30-32 after a2, a3 32-42. The "latest" rule puts
    # v there directly; "both" evaluates the two mappings (44, 42) and keeps 42.
    p = span_graph()
    off = pardnn(p, SolveOptions(extra={"span_start": "earliest", "join_rounds": 0}))
    assert off.objective == 44 and off.placement[p.index["v"]] == 1
    pulled = pardnn(p, SolveOptions(extra={"span_start": "earliest", "join_rounds": 1}))
    assert pulled.objective == 42 and pulled.placement[p.index["v"]] == 0
    assert pulled.info["joins"] == {"rounds": 1, "clusters_moved": 1}
    both = pardnn(p, SolveOptions(extra={"span_start": "both", "join_rounds": 0}))
    assert both.info["step1_makespans"] == {"latest": 42, "earliest": 44} and both.objective == 42


# ---------- binary indexed tree ----------

@pytest.mark.parametrize("size", [1, 2, 5, 16, 33, 100])
def test_bit_matches_naive_sums(size):
    rng = np.random.default_rng(size)
    bit = LevelBIT(size, 3)
    naive = np.zeros((size, 3))
    for _ in range(300):
        slots = rng.integers(0, size, size=int(rng.integers(1, 5)))
        w = rng.normal(size=slots.size)
        col = int(rng.integers(0, 3))
        if rng.random() < 0.5:
            bit.add(slots, w, col)
            np.add.at(naive[:, col], slots, w)
        else:
            other = (col + 1) % 3
            bit.move(slots, w, col, other)
            np.add.at(naive[:, other], slots, w)
            np.add.at(naive[:, col], slots, -w)
        lo, hi = sorted(int(x) for x in rng.integers(0, size + 1, size=2))
        assert np.allclose(bit.range(lo, hi), naive[lo:hi].sum(axis=0))
        assert np.allclose(bit.prefix(hi), naive[:hi].sum(axis=0))


# ---------- LFLAM mapping (Algorithm 2) ----------

def mapping_graph():
    # Primary 0: a0..a3 (times 10) with a heavy a1 -> a2 edge; primary 1: b0 -> b1.
    # h hangs off a1/a2 only (totally communicating with primary 0, comm 2 > its weight 1 and no
    # work of primary 0 or unmapped work in its span: condition (c)). z is isolated: it goes by
    # Eq. (1) to the primary with less work in its span, primary 1.
    nodes = {"a0": (10, 0, 0), "a1": (10, 0, 0), "a2": (10, 0, 0), "a3": (10, 0, 0),
             "b0": (5, 0, 0), "b1": (5, 0, 0), "h": (1, 0, 0), "z": (3, 0, 0)}
    edges = [("a0", "a1", 1), ("a1", "a2", 20), ("a2", "a3", 1), ("b0", "b1", 1), ("a1", "h", 1), ("h", "a2", 1)]
    return build(nodes, edges)


def test_lflam_lookahead_and_balancing():
    p = mapping_graph()
    g = Graph.of(p)
    sl = slice_graph(g, 2, p.comm)
    assert ids(p, sl.paths[0]) == ["a0", "a1", "a2", "a3"]
    assert ids(p, sl.paths[1]) == ["b0", "b1"]
    mp = lflam(p, g, sl, None, p.comm, 2)
    assert mp.pe[p.index["h"]] == 0
    assert mp.lookahead_mapped == 1
    assert mp.pe[p.index["z"]] == 1
    assert mp.balanced == 1


def test_lflam_ccr_threshold_admits_maximally_communicating():
    # Secondaries: m first (weighted level 25 + 26 on the graph with primary 0's comm zeroed), its
    # only successor a2 is taken, so [m]; then [q] and [s] (their successor m is taken). The
    # cluster [m] talks 30 to primary 0 and 6 to the secondaries q, s: not totally communicating,
    # but maximally (30 > 36 / 2). It is mapped in the lookahead phase only when CCR >= 10, by
    # condition (c): 30 > its weight 1, primary 0's work in its span [1, 41) (a1: 10) and the
    # other unmapped work there (none: q and s sit at level 0); (a) and (b) fail.
    nodes = {"a0": (10, 0, 0), "a1": (10, 0, 0), "a2": (10, 0, 0), "b0": (9, 0, 0), "b1": (9, 0, 0),
             "m": (1, 0, 0), "s": (1, 0, 0), "q": (1, 0, 0)}
    edges = [("a0", "a1", 40), ("a1", "a2", 40), ("b0", "b1", 1), ("a0", "m", 15), ("m", "a2", 15), ("s", "m", 1), ("q", "m", 5)]
    p = build(nodes, edges)
    g = Graph.of(p)
    sl = slice_graph(g, 2, p.comm)
    assert ids(p, sl.paths[0]) == ["a0", "a1", "a2"] and ids(p, sl.paths[1]) == ["b0", "b1"]
    assert [ids(p, c) for c in sl.paths[2:]] == [["m"], ["q"], ["s"]]
    low = lflam(p, g, sl, None, p.comm, 2, ccr_value=1.0)
    high = lflam(p, g, sl, None, p.comm, 2, ccr_value=10.0)
    m = p.index["m"]
    assert high.pe[m] == high.pe[p.index["q"]] == 0 and high.lookahead_mapped >= 1
    # with low CCR only totally-communicating clusters are looked at, and none of m, q, s is one
    assert low.lookahead_mapped == 0


# ---------- memory tracker (Eq. 2) and potentials ----------

def test_peak_and_potentials_by_hand():
    # a -> b on one device: a's output (10) lives from a's start to b's finish, b's (5) while b
    # runs; params 1 + 2. Peak 18 at t = 1; moving b frees 2 + 5 + 10 (last consumer of a), a only 1.
    p = build({"a": (1, 10, 1), "b": (1, 5, 2)}, [("a", "b", 0)], k=1)
    pl = np.zeros(2, dtype=np.int64)
    ev = evaluate(p, pl, memory_model="peak")
    st = peak_state(p, pl, ev.start, ev.finish)
    assert st.memory[0] == ev.peak_memory[0] == 18
    assert st.peak_time[0] == 1
    assert st.potential.tolist() == [1, 17]


def test_peak_state_matches_evaluator_on_random_graphs():
    rng = np.random.default_rng(7)
    for trial in range(6):
        n = 60
        nodes = {i: (float(rng.integers(0, 5)), float(rng.integers(0, 50)), float(rng.integers(0, 20))) for i in range(n)}
        edges = {(int(u), int(v)): float(rng.integers(0, 6)) for v in range(1, n) for u in rng.integers(0, v, size=2)}
        p = build(nodes, [(u, v, c) for (u, v), c in edges.items()], k=3)
        pl = rng.integers(0, 3, size=n)
        ev = evaluate(p, pl, memory_model="peak")
        st = peak_state(p, pl, ev.start, ev.finish)
        assert np.allclose(st.memory, ev.peak_memory)
        assert np.allclose(static_state(p, pl).memory, ev.static_memory)


# ---------- overflow handler (greedy 0-1 min-knapsack) ----------

def independent(sizes, times, k=2, memory=40.0):
    return build({f"x{i}": (t, 0, s) for i, (s, t) in enumerate(zip(sizes, times))}, [], k=k, memory=memory)


def test_overflow_handler_moves_cheapest_nodes():
    # 60 bytes on device 0, capacity 40: overflow 20. Cost/size: x1 .1, x2 .2, x0 .5, x3 3.3;
    # the cheapest pair x1, x2 covers it.
    p = independent([10, 10, 10, 30], [5, 1, 2, 100])
    pl = np.zeros(4, dtype=np.int64)
    units = Units.of_problem(p)
    st = static_state(p, pl)
    res = handle_overflow(p, pl, units, st.memory, st.potential, p.memory)
    assert sorted(u for u, _, _ in res.moved) == [1, 2]
    assert res.placement.tolist() == [0, 1, 1, 0]
    assert not res.left.any()


def test_overflow_handler_second_heap_prefers_cheap_single_cover():
    # overflow 20: "big" (100 bytes, cost 10) has the best cost/size, but "mid" (25 bytes, cost 5)
    # alone covers the overflow for less: the move-cost heap picks it.
    p = independent([100, 25, 5], [10, 5, 4], memory=[1000.0, 120.0][0])
    p = p.with_devices(2, [110.0, 1000.0])
    pl = np.zeros(3, dtype=np.int64)
    st = static_state(p, pl)
    res = handle_overflow(p, pl, Units.of_problem(p), st.memory, st.potential, p.memory)
    assert [u for u, _, _ in res.moved] == [1]


def test_overflow_handler_only_moves_where_it_fits():
    # device 1 has room for 15: x1 (10) moves, nothing else fits, 10 bytes of overflow remain
    p = independent([10, 10, 10, 30], [5, 1, 2, 100]).with_devices(2, [40.0, 15.0])
    pl = np.zeros(4, dtype=np.int64)
    st = static_state(p, pl)
    res = handle_overflow(p, pl, Units.of_problem(p), st.memory, st.potential, p.memory)
    assert [u for u, _, _ in res.moved] == [1]
    assert res.left.tolist() == [10.0, 0.0]


def test_move_cost_is_eq4():
    p = build({"a": (2, 0, 0), "b": (3, 0, 0), "c": (4, 0, 0)}, [("a", "b", 5), ("b", "c", 7)])
    pl = np.array([0, 0, 1])
    cost = move_costs(p, pl, Units.of_problem(p))
    assert cost.tolist() == [2 + 5, 3 + 5, 4]


def test_heuristic_one_fixes_a_chain_on_one_device():
    # one chain: slicing gives a single primary, so everything lands on device 0 (100 > 60 bytes)
    n = 10
    p = build({i: (1, 0, 10) for i in range(n)}, [(i, i + 1, 1) for i in range(n - 1)], k=2, memory=60.0)
    sol = pardnn(p, SolveOptions())
    assert sol.status == "heuristic"
    assert sol.info["overflow_moves"] >= 5  # 100 - 54 usable: at least 46 bytes move
    assert sol.info["reserve_kept"]
    ev = evaluate(p, sol.placement)
    assert ev.feasible(p) and ev.static_memory.max() <= 54 + 1e-9
    assert sol.objective == ev.makespan


def test_heuristic_one_peak_model_rounds():
    n = 10
    # all on device 0: params 100 + two live outputs = 120 > 80; the handler moves nodes over
    # several emulate/track/handle rounds until both peaks fit
    p = build({i: (1, 10, 10) for i in range(n)}, [(i, i + 1, 1) for i in range(n - 1)], k=2, memory=80.0)
    pl = np.zeros(n, dtype=np.int64)
    assert evaluate(p, pl, memory_model="peak").peak_memory[0] == 120
    new, info = heuristic_one(p, pl, p.memory, "peak")
    ev = evaluate(p, new, memory_model="peak")
    assert ev.feasible(p) and info["moves"] >= 2 and info["rounds"] >= 1
    assert info["overflow"] == [0.0, 0.0]


def test_pardnn_reports_overflow_it_cannot_fix():
    p = build({"a": (1, 0, 50), "b": (1, 0, 10)}, [("a", "b", 1)], k=2, memory=40.0)
    sol = pardnn(p, SolveOptions())
    assert sol.status == "unknown" and sol.placement is None
    assert sol.info["overflow"][int(sol.info["placement"][0])] == pytest.approx(10.0)
    assert "over capacity" in sol.reason


# ---------- memory heuristic II ----------

def test_residual_balancing_reaches_eq5_paper_example():
    # the paper's example: partition 1 holds 70% of normal and 60% of residual memory; balancing
    # moves residual nodes until it holds 70% and 30%.
    nodes = {f"n{i}": (1, 10, 0) for i in range(10)}
    nodes.update({f"r{i}": (1, 0, 10) for i in range(10)})
    p = build(nodes, [], k=2, memory=1e9)
    pl = np.array([0] * 7 + [1] * 3 + [0] * 6 + [1] * 4)
    assert not eq5_holds(p, pl)
    new, moved = balance_residual(p, pl, p.memory, tol=1e-12)
    assert moved == 3
    assert eq5_holds(p, new, tol=1e-12)
    assert np.allclose(eq5_scores(p, new), [1.0, 1.0])
    params_on_0 = p.param_bytes[new == 0].sum() / p.param_bytes.sum()
    assert params_on_0 == pytest.approx(0.3)
    assert (new[:10] == pl[:10]).all()  # normal nodes never move


def test_critical_path_chunks_go_to_short_primaries():
    nodes = {f"c{i}": (1, 0, 10) for i in range(8)}
    nodes["iso"] = (0.5, 0, 0)
    p = build(nodes, [(f"c{i}", f"c{i + 1}", 1) for i in range(7)], k=2)
    sl = slice_graph(Graph.of(p), 2, p.comm)
    assert ids(p, sl.paths[0]) == [f"c{i}" for i in range(8)] and ids(p, sl.paths[1]) == ["iso"]
    new, given = split_critical_path(p, sl, ratio=1.5)
    assert given == 1
    assert ids(p, new.paths[0]) == ["c0", "c1", "c2", "c3"]
    assert ids(p, new.paths[1]) == ["iso", "c4", "c5", "c6", "c7"]
    assert (new.cluster[[p.index[f"c{i}"] for i in range(4, 8)]] == 1).all()


def test_first_primary_is_a_full_critical_path_on_generated_graphs():
    from placement.generate import generate

    for kind in ("transformer", "lstm", "random"):
        p = generate(kind, 600, seed=2, devices=4)
        g = Graph.of(p)
        _, _, wl = weighted_levels(g, p.comm)
        sl = slice_graph(g, 4, p.comm)
        path = sl.paths[0]
        edge = {(int(u), int(v)): c for u, v, c in zip(p.src, p.dst, p.comm)}
        length = float(p.time[path].sum()) + sum(edge[(int(a), int(b))] for a, b in zip(path[:-1], path[1:]))
        assert length == pytest.approx(wl.max(), rel=1e-9), kind
        assert p.pred_ptr[0][path[0]] == p.pred_ptr[0][path[0] + 1]  # starts at a source
        assert p.succ_ptr[0][path[-1]] == p.succ_ptr[0][path[-1] + 1]  # ends at a sink


@pytest.mark.parametrize("h_time, expected_pe, admitted", [(1.0, 1, {"a": 0, "b": 1, "c": 0}), (5.0, 2, {"a": 0, "b": 0, "c": 0})])
def test_lflam_condition_b_and_its_failure(h_time, expected_pe, admitted):
    # Primaries: b-chain (3 x 12), a-chain (3 x 10), z (6). h hangs off a0 (comm 1), totally
    # communicating with the a-chain. In span(h) = [10, 36) the work is W = (24, 20, 0) and no other
    # work is unmapped. With h = 1: 20 + 1 <= 24, no new imbalance, condition (b) merges it; (a)
    # fails (z would need 21) and so does (c) (comm 1 is not > 1). With h = 5: 25 > 24 and all three
    # fail, so Eq. (1) decides: costs 24 + 1, 20 + 0, 0 + 1 -> the z primary.
    nodes = {"b0": (12, 0, 0), "b1": (12, 0, 0), "b2": (12, 0, 0), "a0": (10, 0, 0), "a1": (10, 0, 0),
             "a2": (10, 0, 0), "z": (6, 0, 0), "h": (h_time, 0, 0)}
    edges = [("b0", "b1", 0), ("b1", "b2", 0), ("a0", "a1", 0), ("a1", "a2", 0), ("a0", "h", 1)]
    p = build(nodes, edges, k=3)
    g = Graph.of(p)
    sl = slice_graph(g, 3, p.comm)
    assert [ids(p, c) for c in sl.paths] == [["b0", "b1", "b2"], ["a0", "a1", "a2"], ["z"], ["h"]]
    mp = lflam(p, g, sl, None, p.comm, 3)
    assert mp.pe[p.index["h"]] == expected_pe
    assert mp.info["admitted_by"] == admitted


@pytest.mark.parametrize("y_time, y_comm, pulled", [(1, 12, ["x", "y"]), (4, 9, ["x"])])
def test_late_inputs_pull_the_prefix_that_shortens_the_wait(y_time, y_comm, pulled):
    # Device 0 runs a (0-10) and then j, which waits for x (device 1: 0-1, + 14 -> 15) and y
    # (device 2, arrives at 13). Device 0 is free at 10. Pulling x alone: j could start at
    # max(10 + 1, 13) = 13; pulling x and y: max(10 + 1 + y_time, 10) = 12 when y takes 1 (both
    # pulled), 15 when it takes 4 (only x).
    from heuristics.pardnn.joins import late_inputs
    from heuristics.pardnn.slicing import Slicing

    p = build({"a": (10, 0, 0), "x": (1, 0, 0), "y": (y_time, 0, 0), "j": (1, 0, 0)},
              [("a", "j", 0), ("x", "j", 14), ("y", "j", y_comm)], k=3)
    i = p.index
    cluster = np.zeros(p.n, dtype=np.int64)
    cluster[i["x"]], cluster[i["y"]] = 1, 2
    sl = Slicing(cluster, [np.array([i["a"], i["j"]]), np.array([i["x"]]), np.array([i["y"]])], 1)
    placement = np.zeros(p.n, dtype=np.int64)
    placement[i["x"]], placement[i["y"]] = 1, 2
    ev = evaluate(p, placement)
    assert ev.start[i["j"]] == 15
    assert late_inputs(p, sl, placement, ev, 0) == [int(cluster[i[v]]) for v in pulled]


class _StopAfter(threading.Event):
    """A stop request that reads as set from its ``after``-th look on (counting every look)."""

    def __init__(self, after: int) -> None:
        super().__init__()
        self.after, self.looks = after, 0

    def is_set(self) -> bool:
        self.looks += 1
        return self.looks > self.after


@pytest.mark.parametrize("model", ["static", "peak"])
def test_pardnn_honours_a_stop_request_at_every_check(model):
    """A stop seen at any of PARDNN's checks (slicing, mapping, join repair, heuristic I) ends the
    run with "unknown" and no placement, never an exception; one look later than the last check
    gives the answer of a run never stopped."""
    from placement.generate import generate

    p = generate("transformer", 300, seed=3, devices=3, memory_fraction=0.4)
    full = pardnn(p, SolveOptions(memory_model=model))
    counter = _StopAfter(10**9)
    pardnn(p, SolveOptions(memory_model=model, stop=counter))
    looks = counter.looks
    assert looks >= 4  # at least the slicing, mapping, join and heuristic I checks
    for after in range(looks):
        sol = pardnn(p, SolveOptions(memory_model=model, stop=_StopAfter(after)))
        if sol.placement is not None:  # a look outside PARDNN's loops (the time left) said stop, too late to matter
            assert np.array_equal(sol.placement, full.placement)
        else:
            assert sol.status == "unknown" and "stopped" in sol.reason
    again = pardnn(p, SolveOptions(memory_model=model, stop=_StopAfter(looks)))
    assert again.status == full.status and np.array_equal(again.placement, full.placement)


def test_slicing_stops_in_its_secondary_loop():
    from placement.generate import generate
    from placement.solution import OutOfTime

    p = generate("random", 12000, seed=1, devices=2)
    g = Graph.of(p)
    stop = _StopAfter(2)  # the two primaries' looks pass; the first look in the secondary loop stops
    with pytest.raises(OutOfTime):
        slice_graph(g, 2, p.comm, stop=stop.is_set)
    assert stop.looks == 3
