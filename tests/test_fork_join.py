"""Wide fork-joins laid out path by path (heuristics/fork_join.py) and their place in the list
re-scheduling of a window (heuristics/window_relist.py) and the relist sweep."""
from __future__ import annotations

import numpy as np
import pytest

from formulations.bruteforce import enumerate_best
from formulations.window_lns import schedule_positions, timed
from heuristics.fork_join import MIN_PATHS, fork_join, layouts
from heuristics.list_scheduling import etf
from heuristics.window_relist import merged_order, relist
from placement.evaluator import evaluate
from placement.generate import generate
from placement.incremental import IncrementalSchedule, timing_graph
from placement.problem import make_problem
from placement.solution import SolveOptions
from placement.window_boundary import window_boundary
import solvers.relist_sweep as relist_sweep
from solvers.relist_sweep import RelistStats, RelistSweep


def _node(name: str, time: float) -> dict:
    return {"id": name, "time": time, "out_bytes": 0, "param_bytes": 0}


def _block(heads: list[float], tail: float = 1.0, cheap: float = 0.5, dear: float = 10.0,
           extras: bool = False, devices: int = 2):
    """A backward-like block: F -> h_i -> g_i -> J for each path i, F -> h_i and h_i -> g_i cheap,
    g_i -> J dear (the full-size gradient). With ``extras``: a weight source W_i (time 0) into
    g_i, a weight-gradient-like node w_i after h_i that does not reach J, and a node P before F."""
    nodes = [_node("F", 1.0), _node("J", 1.0)]
    edges = []
    for i, h in enumerate(heads):
        nodes += [_node(f"h{i}", h), _node(f"g{i}", tail)]
        edges += [{"src": "F", "dst": f"h{i}", "comm": cheap}, {"src": f"h{i}", "dst": f"g{i}", "comm": cheap},
                  {"src": f"g{i}", "dst": "J", "comm": dear}]
        if extras:
            nodes += [_node(f"W{i}", 0.0), _node(f"w{i}", 0.5)]
            edges += [{"src": f"W{i}", "dst": f"g{i}", "comm": 0.1}, {"src": f"h{i}", "dst": f"w{i}", "comm": 0.1}]
    if extras:
        nodes.append(_node("P", 1.0))
        edges.append({"src": "P", "dst": "F", "comm": 3.0})
    return make_problem(nodes, edges, devices=devices)


def test_the_structure_around_a_join():
    prob = _block([1.0, 1.2, 0.8, 1.1, 0.9, 1.3], extras=True, devices=3)
    ix = prob.index
    fj = fork_join(prob, ix["J"], np.arange(prob.n))
    assert fj is not None and fj.fork == ix["F"] and fj.join == ix["J"]
    assert sorted(tuple(p) for p in fj.paths) == sorted((ix[f"h{i}"], ix[f"g{i}"]) for i in range(6))
    # each path's middle: the head (in 0.5, out 0.5), not the gradient (out 10)
    assert all(seg == (0, 1) for seg in fj.segments)


def test_paths_that_meet_are_one_branch_and_too_few_are_none():
    prob = _block([1.0] * (MIN_PATHS - 1))
    assert fork_join(prob, prob.index["J"], np.arange(prob.n)) is None
    nodes = [_node("F", 1.0), _node("J", 1.0)] + [_node(f"h{i}", 1.0) for i in range(5)] + [_node("r4", 1.0)]
    edges = [{"src": "F", "dst": f"h{i}", "comm": 0.5} for i in range(5)]
    edges += [{"src": f"h{i}", "dst": "J", "comm": 5.0} for i in range(5)]
    edges.append({"src": "h0", "dst": "h1", "comm": 0.5})  # h0 and h1 meet: one branch
    # an imported in-place op: h4 feeds its ReLU r4 and the join (which reads the buffer both wrote)
    edges += [{"src": "h4", "dst": "r4", "comm": 0.5}, {"src": "r4", "dst": "J", "comm": 5.0}]
    prob = make_problem(nodes, edges, devices=2)
    ix = prob.index
    fj = fork_join(prob, ix["J"], np.arange(prob.n))
    assert fj is not None and fj.fork == ix["F"]
    assert sorted(sorted(b) for b in fj.paths) == sorted(
        [sorted([ix["h0"], ix["h1"]]), [ix["h2"]], [ix["h3"]], sorted([ix["h4"], ix["r4"]])])
    assert fj.paths[[ix["h4"] in b for b in fj.paths].index(True)] == [ix["h4"], ix["r4"]]  # topological order


def test_layouts_keep_the_dear_ends_home_and_send_whole_paths_first():
    prob = _block([1.0, 1.2, 0.8, 1.1, 0.9, 1.3], devices=4)
    ix = prob.index
    fj = fork_join(prob, ix["J"], np.arange(prob.n))
    plans = layouts(prob, fj, fork_device=0, join_device=0)
    assert len(plans) == 3 * 4  # 0 .. K - 1 whole paths, three ways to deal the middles
    for device, key in plans:
        assert device[ix["J"]] == 0
        whole = [i for i in range(6) if device[ix[f"g{i}"]] != 0]
        # the shortest paths go whole, each to a device of its own, and run before the others there
        lengths = sorted(range(6), key=lambda i: [1.0, 1.2, 0.8, 1.1, 0.9, 1.3][i] + 1.0)
        assert sorted(whole) == sorted(lengths[:len(whole)])
        assert len({device[ix[f"h{i}"]] for i in whole}) == len(whole)
        for i in whole:
            others = [v for v, d in device.items() if d == device[ix[f"h{i}"]] and v not in (ix[f"h{i}"], ix[f"g{i}"])]
            assert all(key[v] < key[ix[f"h{i}"]] for v in others)


def test_a_breadth_first_block_reaches_the_enumerated_optimum():
    """K = 2, F and J on device 0, four paths (head 1, gradient 1, 0.5 each way between F, head
    and gradient, 10 from a gradient to J). The incumbent runs everything on device 0 (10). The
    optimum (enumerated): device 0 runs F, one head, the four gradients and J; device 1 the other
    heads, each back in time for its gradient: 7."""
    prob = _block([1.0, 1.0, 1.0, 1.0])
    ix = prob.index
    best, _ = enumerate_best(prob, "static")
    assert best[0] == pytest.approx(7.0)
    order = [[ix[x] for x in ["F", "h0", "h1", "h2", "h3", "g0", "g1", "g2", "g3", "J"]], []]
    ev = evaluate(prob, np.zeros(prob.n, dtype=np.int64), order=order)
    assert ev.makespan == pytest.approx(10.0)
    base = IncrementalSchedule(prob, ev.placement, ev.start, timing_graph(prob))
    seq, where = schedule_positions(base)
    fj = fork_join(prob, ix["J"], seq[:-1])
    bd = window_boundary(base, int(where[ix["F"]]) + 1, prob.n, seq, where)
    got = relist(prob, base, bd, np.random.default_rng(0), 0, None, layouts(prob, fj, 0, 0))
    assert got is not None and got[2] == pytest.approx(7.0)
    pl, merged = merged_order(base, seq, [(int(where[ix["F"]]) + 1, prob.n, got[0], got[1])])
    assert timed(prob, pl, merged, "static").makespan == pytest.approx(7.0)


@pytest.mark.parametrize("seed", range(6))
def test_layout_answers_are_what_the_evaluator_makes_of_them(seed):
    """Random blocks (times, transfers, 4-7 paths, K = 2-4, extras): a layout answer is never worse
    than the incumbent and the evaluator times its merge exactly as promised."""
    rng = np.random.default_rng(seed)
    n_paths = int(rng.integers(4, 8))
    prob = _block(list(rng.uniform(0.2, 2.0, n_paths)), tail=float(rng.uniform(0.2, 2.0)),
                  cheap=float(rng.uniform(0.0, 1.0)), dear=float(rng.uniform(1.0, 6.0)), extras=True,
                  devices=int(rng.integers(2, 5)))
    ev = evaluate(prob, rng.integers(0, prob.k, prob.n))
    base = IncrementalSchedule(prob, ev.placement, ev.start, timing_graph(prob))
    seq, where = schedule_positions(base)
    join = prob.index["J"]
    fj = fork_join(prob, join, seq[:int(where[join])])
    assert fj is not None
    lo, hi = int(where[fj.fork]) + 1, int(where[join]) + 1
    got = relist(prob, base, window_boundary(base, lo, hi, seq, where), rng, 0, None,
                 layouts(prob, fj, int(ev.placement[fj.fork]), int(ev.placement[join])))
    if got is None:
        return
    assert got[2] < ev.makespan
    pl, merged = merged_order(base, seq, [(lo, hi, got[0], got[1])])
    assert timed(prob, pl, merged, "static").makespan == pytest.approx(got[2])


def _blocks(count: int, paths: int, devices: int):
    """``count`` blocks in a row, each a fork-join as in :func:`_block` (heads 0.8-1.2, gradients 1,
    0.5 in and between, 10 to the join), every join the next block's fork."""
    rng = np.random.default_rng(0)
    nodes, edges = [_node("J-1", 1.0)], []
    for b in range(count):
        nodes.append(_node(f"J{b}", 1.0))
        for i in range(paths):
            nodes += [_node(f"h{b}_{i}", float(rng.uniform(0.8, 1.2))), _node(f"g{b}_{i}", 1.0)]
            edges += [{"src": f"J{b - 1}", "dst": f"h{b}_{i}", "comm": 0.5},
                      {"src": f"h{b}_{i}", "dst": f"g{b}_{i}", "comm": 0.5},
                      {"src": f"g{b}_{i}", "dst": f"J{b}", "comm": 10.0}]
    return make_problem(nodes, edges, devices=devices)


@pytest.mark.parametrize("count,paths,devices", [(3, 6, 3), (4, 8, 4)])
def test_the_sweep_lays_out_a_row_of_fork_joins(monkeypatch, count, paths, devices):
    """From ETF's schedule of blocks in a row, the sweep (plain windows first, then the fork
    windows) ends far below the same sweep without fork windows (when written: 47.26 -> 26.74
    against 47.16, and 63.04 -> 43.04 against 62.74), each block's window found, and what it
    returns is the evaluator's timing of its order."""
    prob = _blocks(count, paths, devices)
    ev = evaluate(prob, np.asarray(etf(prob, SolveOptions()).placement))
    stats = RelistStats()
    got = RelistSweep(prob, ev.placement, ev.start, SolveOptions(seed=0), stats=stats).run(float("inf"))
    assert stats.forks >= count
    ranked = np.lexsort((np.arange(prob.n), got.start))
    again = evaluate(prob, got.placement, order=[ranked[got.placement[ranked] == d].tolist() for d in range(prob.k)])
    assert again.makespan == pytest.approx(got.makespan)
    monkeypatch.setattr(relist_sweep, "FORK_NODES", 0)
    plain = RelistSweep(prob, ev.placement, ev.start, SolveOptions(seed=0)).run(float("inf"))
    assert got.makespan < 0.8 * plain.makespan


@pytest.mark.slow
def test_the_sweep_lays_out_the_forks_of_a_generated_cnn(monkeypatch):
    """From ETF's schedule of a generated CNN, the sweep tries the blocks' fork windows with their
    layouts, keeps some, ends below the same sweep without them (276.6 -> 221.3 against 246.2 when
    written), and what it returns is the evaluator's timing of its order."""
    prob = generate("cnn", 3000, seed=4, devices=4, memory_fraction=None)
    ev = evaluate(prob, np.asarray(etf(prob, SolveOptions()).placement))
    stats = RelistStats()
    sweep = RelistSweep(prob, ev.placement, ev.start, SolveOptions(seed=0), stats=stats)
    got = sweep.run(float("inf"))
    assert stats.forks > 0 and stats.kept > 0
    assert got.makespan < ev.makespan
    ranked = np.lexsort((np.arange(prob.n), got.start))
    again = evaluate(prob, got.placement, order=[ranked[got.placement[ranked] == d].tolist() for d in range(prob.k)])
    assert again.makespan == pytest.approx(got.makespan)
    monkeypatch.setattr(relist_sweep, "FORK_NODES", 0)
    plain = RelistSweep(prob, ev.placement, ev.start, SolveOptions(seed=0)).run(float("inf"))
    assert got.makespan < plain.makespan
