"""The evaluator: FIFO executor, ordered schedules, peak memory against a naive recomputation,
and every constraint check()."""
from __future__ import annotations

import random

import numpy as np
import pytest

from placement.evaluator import ScheduleError, check, evaluate, peak_memory
from placement.problem import make_problem
from tests.conftest import random_problem


def naive_peak(problem, placement, start, finish):
    """Peak memory by the definition in docs/model.md, evaluated at every interval start."""
    k = problem.k
    intervals = [[] for _ in range(k)]  # (t0, t1, bytes)
    consumers = {}
    for u, v in zip(problem.src.tolist(), problem.dst.tolist()):
        consumers.setdefault((u, int(placement[v])), []).append(v)
    for u in range(problem.n):
        du = int(placement[u])
        local = consumers.get((u, du))
        if local:
            intervals[du].append((start[u], max(finish[u], max(finish[v] for v in local)), problem.out_bytes[u]))
        else:
            intervals[du].append((start[u], finish[u], problem.out_bytes[u]))
        for d in range(k):
            if d != du and (u, d) in consumers:
                intervals[d].append((finish[u], max(finish[v] for v in consumers[(u, d)]), problem.out_bytes[u]))
    out = []
    for d in range(k):
        base = sum(problem.param_bytes[v] for v in range(problem.n) if placement[v] == d)
        times = [t0 for t0, t1, b in intervals[d] if t1 > t0]
        level = max((sum(b for t0, t1, b in intervals[d] if t0 <= t < t1) for t in times), default=0.0)
        out.append(base + level)
    return np.array(out)


@pytest.mark.parametrize("seed", range(40))
def test_peak_memory_matches_definition(seed):
    rng = random.Random(seed)
    prob = random_problem(seed, rng.randint(2, 14), rng.randint(1, 3))
    placement = np.array([rng.randrange(prob.k) for _ in range(prob.n)])
    ev = evaluate(prob, placement, memory_model="peak")
    np.testing.assert_allclose(ev.peak_memory, naive_peak(prob, placement, ev.start, ev.finish))
    np.testing.assert_allclose(peak_memory(prob, placement, ev.start, ev.finish), ev.peak_memory)


@pytest.mark.parametrize("seed", range(30))
def test_fifo_schedule_is_valid_and_tight(seed):
    rng = random.Random(100 + seed)
    prob = random_problem(seed, rng.randint(2, 20), rng.randint(1, 4))
    placement = np.array([rng.randrange(prob.k) for _ in range(prob.n)])
    ev = evaluate(prob, placement)
    again = check(prob, placement, ev.start, check_memory=False)
    assert again.makespan == pytest.approx(ev.makespan)
    # Semi-active: every node starts at its ready time or when its device became free.
    for v in range(prob.n):
        preds = [(int(u), float(c)) for u, w, c in zip(prob.src, prob.dst, prob.comm) if w == v]
        ready = max([ev.finish[u] + (c if placement[u] != placement[v] else 0.0) for u, c in preds], default=0.0)
        frees = [ev.finish[u] for u in range(prob.n) if placement[u] == placement[v] and ev.finish[u] <= ev.start[v] + 1e-9 and u != v]
        assert ev.start[v] == pytest.approx(ready) or any(f == pytest.approx(ev.start[v]) for f in frees)
    # The order the simulation chose reproduces its schedule exactly.
    order = [sorted(np.flatnonzero(placement == d).tolist(), key=lambda v: (ev.start[v], ev.finish[v], prob.topo_rank[v])) for d in range(prob.k)]
    np.testing.assert_allclose(evaluate(prob, placement, order=order).start, ev.start)


def chain_and_fork():
    nodes = [{"id": x, "time": t, "out_bytes": 1, "param_bytes": 0} for x, t in (("s", 1), ("p", 4), ("q", 1), ("r", 2))]
    edges = [{"src": "s", "dst": "p", "comm": 0}, {"src": "s", "dst": "q", "comm": 0}, {"src": "s", "dst": "r", "comm": 3}]
    return make_problem(nodes, edges, devices=2, memory=10)


def test_fifo_runs_earliest_ready_first():
    prob = chain_and_fork()
    ev = evaluate(prob, {"s": 0, "p": 0, "q": 0, "r": 1})
    # p and q are both ready at 1 on device 0: topological tie-break runs p first.
    assert ev.start.tolist() == [0, 1, 5, 4]
    assert ev.makespan == 6


def test_given_order_is_followed():
    prob = chain_and_fork()
    ev = evaluate(prob, {"s": 0, "p": 0, "q": 0, "r": 1}, order=[["s", "q", "p"], ["r"]])
    assert ev.start.tolist() == [0, 2, 1, 4]
    assert ev.makespan == 6
    with pytest.raises(ScheduleError, match="missing from the order"):
        evaluate(prob, [0, 0, 0, 1], order=[[0, 1], [3]])
    with pytest.raises(ScheduleError, match="ordered on device 1 but placed on 0"):
        evaluate(prob, [0, 0, 0, 1], order=[[0, 1], [2, 3]])


def test_order_against_precedence_is_rejected():
    prob = chain_and_fork()
    with pytest.raises(ScheduleError, match="contradicts"):
        evaluate(prob, [0, 0, 0, 1], order=[[1, 0, 2], [3]])


def test_check_names_each_violation():
    prob = chain_and_fork()
    good = [0, 1, 5, 4]
    assert check(prob, [0, 0, 0, 1], good).makespan == 6
    with pytest.raises(ScheduleError, match="precedence 's' -> 'r'"):
        check(prob, [0, 0, 0, 1], [0, 1, 5, 3.5])
    with pytest.raises(ScheduleError, match="at the same time"):
        check(prob, [0, 0, 0, 1], [0, 1, 3, 4])
    with pytest.raises(ScheduleError, match="device 0 .* needs 3 bytes"):
        small = prob.with_devices(2, 2.0)
        check(small, [0, 0, 0, 1], good)
    with pytest.raises(ScheduleError, match="no valid start"):
        check(prob, [0, 0, 0, 1], [0, 1, float("nan"), 4])
    with pytest.raises(ScheduleError, match="not in 0..1"):
        check(prob, [0, 0, 0, 2], good)


def test_zero_time_nodes_may_coincide():
    nodes = [{"id": i, "time": t, "out_bytes": 0, "param_bytes": 0} for i, t in enumerate([2, 0, 0, 1])]
    prob = make_problem(nodes, [{"src": 1, "dst": 3, "comm": 0}], devices=1)
    assert check(prob, [0, 0, 0, 0], [0, 1, 1, 2]).makespan == 3


def test_colocation_and_allowed_devices_are_enforced():
    nodes = [{"id": "w", "time": 1, "out_bytes": 0, "param_bytes": 8, "colocate": "g"},
             {"id": "u", "time": 1, "out_bytes": 0, "param_bytes": 0, "colocate": "g"},
             {"id": "x", "time": 1, "out_bytes": 0, "param_bytes": 0, "devices": [1]}]
    prob = make_problem(nodes, [{"src": "w", "dst": "u", "comm": 1}], devices=2, memory=100)
    with pytest.raises(ScheduleError, match="colocation group 'g' is split"):
        evaluate(prob, {"w": 0, "u": 1, "x": 1})
    with pytest.raises(ScheduleError, match="node 'x' is on device 0, not one of its allowed devices"):
        evaluate(prob, {"w": 0, "u": 0, "x": 0})
    assert evaluate(prob, {"w": 1, "u": 1, "x": 1}).makespan == 3


def test_empty_graph_has_zero_makespan():
    prob = make_problem([], [], devices=2, memory=1)
    ev = evaluate(prob, [])
    assert ev.makespan == 0 and ev.static_memory.tolist() == [0, 0]


@pytest.mark.parametrize("seed", range(20))
def test_peak_time_is_when_the_peak_is_reached(seed):
    from placement.evaluator import buffers, peak_profile

    rng = random.Random(500 + seed)
    prob = random_problem(seed, rng.randint(2, 14), rng.randint(1, 3))
    placement = np.array([rng.randrange(prob.k) for _ in range(prob.n)])
    ev = evaluate(prob, placement, memory_model="peak")
    peak, when = peak_profile(prob, placement, ev.start, ev.finish)
    buf = buffers(prob, placement, ev.start, ev.finish)
    for d in range(prob.k):
        params = prob.param_bytes[placement == d].sum()
        if np.isnan(when[d]):
            assert peak[d] == pytest.approx(params)
            continue
        live = (buf.device == d) & (buf.t0 <= when[d]) & (when[d] < buf.t1)
        assert params + buf.size[live].sum() == pytest.approx(peak[d])
