"""Incremental re-timing equals the full evaluator on random moves (placement/incremental.py)."""
from __future__ import annotations

import random
import time

import networkx as nx
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from placement.evaluator import evaluate
from placement.generate import generate
from heuristics.list_scheduling import etf
from placement.incremental import IncrementalSchedule, device_order
from placement.solution import SolveOptions
from solvers.refine import RefineStats, refine
from tests.conftest import random_problem
from tests.test_waits import random_order


def full(problem, placement, ref_start, memory_model="static"):
    """The one evaluator's ordered schedule of ``placement`` in the order of ``ref_start``."""
    return evaluate(problem, placement, order=device_order(problem, placement, ref_start), memory_model=memory_model)


def assert_same(trial, expected, memory_model):
    ev = trial.evaluation(memory_model)
    assert np.array_equal(ev.placement, expected.placement)
    assert np.array_equal(ev.start, expected.start)  # bit for bit: the same maxima of the same sums
    assert trial.makespan == expected.makespan
    assert np.array_equal(ev.static_memory, expected.static_memory)
    assert np.array_equal(ev.peak_memory, expected.peak_memory)


@settings(max_examples=150, deadline=None)
@given(seed=st.integers(0, 10**6), n=st.integers(2, 14), k=st.integers(2, 4), fifo=st.booleans(),
       steps=st.lists(st.tuples(st.lists(st.tuples(st.integers(0, 10**6), st.integers(0, 3)), min_size=1, max_size=5),
                                st.booleans()), min_size=1, max_size=6),
       memory_model=st.sampled_from(["static", "peak"]))
def test_random_moves_equal_the_full_evaluator(seed, n, k, fifo, steps, memory_model):
    prob = random_problem(seed, n, k, zero_time_p=0.3)  # integer times and zero-time nodes: many ties
    rng = np.random.default_rng(seed)
    pl = rng.integers(0, k, size=n)
    # The reference: the FIFO schedule, or the schedule running each device in topological order.
    ref = evaluate(prob, pl).start if fifo else full(prob, pl, np.zeros(n)).start
    inc = IncrementalSchedule(prob, pl, ref)
    base = full(prob, pl, ref)
    assert np.array_equal(inc.start, base.start)
    for move, commit in steps:
        moves = {v % n: d % k for v, d in move}
        new_pl = pl.copy()
        for v, d in moves.items():
            new_pl[v] = d
        expected = full(prob, new_pl, ref)
        # Cutoffs around the base makespan and at the new one itself (the hardest to prove).
        for cutoff in (inc.makespan * (0.5 + (seed % 7) / 10), expected.makespan):
            cut = inc.try_move(moves, cutoff=cutoff)
            if cut.complete:
                assert_same(cut, expected, memory_model)
            else:  # stopped early: only when the makespan really reaches the cutoff, and a true lower bound
                assert cutoff <= cut.makespan <= expected.makespan
        trial = inc.try_move(moves)
        assert trial.complete
        assert_same(trial, expected, memory_model)
        if commit:
            inc.commit(trial)
            pl, ref = new_pl, expected.start
            assert np.array_equal(inc.start, full(prob, pl, ref).start)


@pytest.mark.parametrize("family", ["transformer", "lstm", "cnn"])
def test_block_moves_on_a_generated_graph_equal_the_full_evaluator(family):
    prob = generate(family, 600, seed=2, devices=4)
    rng = np.random.default_rng(1)
    pl = rng.integers(0, prob.k, size=prob.n)
    for members in prob.groups:  # colocation groups move as one
        pl[members] = pl[members[0]]
    ref = evaluate(prob, pl).start
    inc = IncrementalSchedule(prob, pl, ref)
    order = np.lexsort((ref, pl))
    for step in range(30):
        # a block of consecutive nodes of one device (as refine moves them), or scattered nodes
        if step % 2:
            lo = int(rng.integers(0, prob.n - 20))
            nodes = order[lo:lo + int(rng.integers(1, 20))]
        else:
            nodes = rng.choice(prob.n, size=int(rng.integers(1, 6)), replace=False)
        moves = {}
        for v in nodes:
            d = int(rng.integers(0, prob.k))
            group = prob.groups[prob.colocate[v]] if prob.colocate[v] >= 0 else [v]
            moves.update((int(x), d) for x in group)
        trial = inc.try_move(moves)
        new_pl = pl.copy()
        for v, d in moves.items():
            new_pl[v] = d
        expected = full(prob, new_pl, ref)
        assert_same(trial, expected, "peak")
        assert trial.recomputed <= prob.n
        if trial.makespan < inc.makespan:
            inc.commit(trial)
            pl, ref = new_pl, expected.start
            order = np.lexsort((ref, pl))


def test_a_move_that_changes_nothing_recomputes_little():
    prob = generate("transformer", 400, seed=1, devices=2)
    pl = np.zeros(prob.n, dtype=np.int64)
    inc = IncrementalSchedule(prob, pl, evaluate(prob, pl).start)
    assert inc.try_move({0: 0}).recomputed == 0  # not a move
    last = int(np.argmax(inc.finish))
    trial = inc.try_move({last: 1})  # the last node to another device: only it and nothing after it
    assert trial.recomputed <= 1 + len(inc._succs[last]) + 1


@pytest.mark.parametrize("memory_model", ["static", "peak"])
def test_refine_takes_the_same_path_with_and_without_incremental_retiming(memory_model):
    prob = generate("lstm", 500, seed=4, devices=3, memory_fraction=0.6)
    sol = etf(prob, SolveOptions(memory_model=memory_model))
    pl = np.asarray(sol.placement)
    runs = []
    for incremental in (True, False):
        stats = RefineStats()
        got, ev = refine(prob, pl, SolveOptions(seed=3), deadline=time.monotonic() + 1e6, memory_model=memory_model,
                         max_evals=400, keep_order=True, stats=stats, incremental=incremental)
        runs.append((got, ev, stats))
    (a, ev_a, st_a), (b, ev_b, st_b) = runs
    assert st_a.evaluations == st_b.evaluations and st_a.accepted == st_b.accepted
    assert np.array_equal(a, b) and ev_a.makespan == ev_b.makespan
    assert st_a.accepted > 0  # the path compared is not empty


def constraint_graph(prob, inc):
    """The base schedule's constraints as a DAG: graph edges with their transfers, chain edges."""
    g = nx.DiGraph()
    g.add_nodes_from(range(prob.n))
    pl = inc.placement
    for u, v, c in zip(prob.src.tolist(), prob.dst.tolist(), prob.comm.tolist()):
        g.add_edge(u, v, w=c if pl[u] != pl[v] else 0.0)
    for seq in inc.order:
        for a, b in zip(seq, seq[1:]):
            if not g.has_edge(a, b):
                g.add_edge(a, b, w=0.0)
    return g


def longest_path(prob, g):
    finish = {}
    for x in nx.topological_sort(g):
        finish[x] = max([0.0] + [finish[u] + g[u][x]["w"] for u in g.predecessors(x)]) + float(prob.time[x])
    return max(finish.values(), default=0.0)


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 10**6), n=st.integers(2, 12), k=st.integers(2, 4), fifo=st.booleans())
def test_avoiding_is_the_longest_path_without_the_node(seed, n, k, fifo):
    """``_avoid[v]``: brute force, the longest path of the constraint graph with v deleted."""
    prob = random_problem(seed, n, k, zero_time_p=0.3)
    pl = np.random.default_rng(seed).integers(0, k, size=n)
    ref = evaluate(prob, pl).start if fifo else full(prob, pl, np.zeros(n)).start
    inc = IncrementalSchedule(prob, pl, ref)
    inc._prepare_bounds()
    g = constraint_graph(prob, inc)
    assert longest_path(prob, g) == inc.makespan
    for v in range(n):
        h = g.copy()
        h.remove_node(v)
        assert inc._avoid[v] == longest_path(prob, h)


@settings(max_examples=80, deadline=None)
@given(seed=st.integers(0, 10**6), n=st.integers(2, 14), k=st.integers(2, 4), fifo=st.booleans())
def test_a_single_node_move_is_judged_by_its_bound_alone(seed, n, k, fifo):
    """For one moved node the bound is the new makespan exactly: with the new makespan as the
    cutoff, the trial is rejected before re-timing any node, with that makespan."""
    prob = random_problem(seed, n, k, zero_time_p=0.3)
    rng = np.random.default_rng(seed)
    pl = rng.integers(0, k, size=n)
    ref = evaluate(prob, pl).start if fifo else full(prob, pl, np.zeros(n)).start
    inc = IncrementalSchedule(prob, pl, ref)
    for v in range(n):
        for d in range(k):
            if d == pl[v]:
                continue
            new_pl = pl.copy()
            new_pl[v] = d
            expected = full(prob, new_pl, ref).makespan
            trial = inc.try_move({v: d}, cutoff=expected)
            assert not trial.complete and trial.start == {} and trial.makespan == expected




@settings(max_examples=80, deadline=None)
@given(seed=st.integers(0, 10**6), n=st.integers(2, 14), k=st.integers(2, 4), memory_model=st.sampled_from(["static", "peak"]))
def test_a_trials_peak_memory_is_the_evaluators_measured_when_read(seed, n, k, memory_model):
    """A trial's Evaluation measures its peak memory only when read (refine under the static model
    never reads it), with the evaluator's function: the same array as the full evaluation, bit for
    bit, also after pickling (a plain Evaluation) and dataclasses.replace."""
    import dataclasses
    import pickle

    from placement.evaluator import Evaluation

    prob = random_problem(seed, n, k, zero_time_p=0.3)
    rng = np.random.default_rng(seed)
    pl = rng.integers(0, k, size=n)
    ref = evaluate(prob, pl).start
    inc = IncrementalSchedule(prob, pl, ref)
    moves = {int(v): int(rng.integers(0, k)) for v in rng.choice(n, size=min(3, n), replace=False)}
    new_pl = pl.copy()
    for v, d in moves.items():
        new_pl[v] = d
    expected = full(prob, new_pl, ref, memory_model)
    ev = inc.try_move(moves).evaluation(memory_model)
    if memory_model == "static":
        assert ev._peak is None  # not measured by making it
    copies = [pickle.loads(pickle.dumps(ev)), dataclasses.replace(ev, memory_model=memory_model)]
    assert type(copies[0]) is Evaluation
    for got in [ev] + copies:
        assert got.peak_memory.tobytes() == expected.peak_memory.tobytes()
        assert got.feasible(prob) == expected.feasible(prob)
        assert np.array_equal(got.overflow(prob), expected.overflow(prob))


def test_a_zero_time_node_tied_with_a_busy_one_keeps_its_place():
    """A zero-time node z that starts with a busy node m on its device ran before m. Reading the
    order off the start times by rank alone put m first (m is ranked before z), which delayed z and
    the long node it feeds: a search's copy of its incumbent was longer than the incumbent."""
    from placement.problem import make_problem

    nodes = [{"id": v, "time": t, "out_bytes": 0, "param_bytes": 0} for v, t in (("m", 1), ("a", 1), ("z", 0), ("c", 5))]
    edges = [{"src": "a", "dst": "z", "comm": 0}, {"src": "z", "dst": "c", "comm": 0}]
    prob = make_problem(nodes, edges, devices=2)
    m, a, z, c = (prob.index[v] for v in "mazc")
    assert prob.topo_rank[m] < prob.topo_rank[z]  # the tie rank alone would break the wrong way
    pl = np.array([0, 0, 0, 1])
    ev = evaluate(prob, pl, order=[[a, z, m], [c]])
    assert ev.start[z] == ev.start[m] == 1.0 and ev.makespan == 6.0
    assert device_order(prob, pl, ev.start) == [[a, z, m], [c]]
    inc = IncrementalSchedule(prob, pl, ev.start)
    assert inc.makespan == 6.0 and np.array_equal(inc.start, ev.start)
    # all-zero references are no schedule: ties stay topological (each device in rank order)
    assert device_order(prob, pl, np.zeros(4)) == [[m, a, z], [c]]


@settings(max_examples=200, deadline=None)
@given(seed=st.integers(0, 10**6), n=st.integers(2, 16), k=st.integers(1, 4), fifo=st.booleans())
def test_the_order_read_off_a_schedule_starts_no_node_later(seed, n, k, fifo):
    """The FIFO schedule, or the schedule of a random topological order: the device order read
    off its start times (placement.evaluator.schedule_ties) starts no node later (earlier only
    where zero-time nodes tied at one start changed places), and the incremental schedule built
    from them is that order's. Many zero-time nodes: many ties."""
    prob = random_problem(seed, n, k, zero_time_p=0.4)
    rng = random.Random(seed)
    pl = np.array([rng.randrange(k) for _ in range(n)])
    ev = evaluate(prob, pl) if fifo else evaluate(prob, pl, order=random_order(prob, pl, rng))
    again = evaluate(prob, pl, order=device_order(prob, pl, ev.start))
    assert np.all(again.start <= ev.start)
    assert np.array_equal(IncrementalSchedule(prob, pl, ev.start).start, again.start)
