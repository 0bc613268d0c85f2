"""Re-scheduling a fixed placement by priority lists, and the chain-spreading batch move of refine:
the priority schedule matches an independent naive simulation, every reported makespan is the
evaluator's, hand-checked instances give the expected makespans, and refine with the spreading
move keeps its promises (never worse, valid schedule, the evaluator's value)."""
from __future__ import annotations

import time

import numpy as np
import pytest

from placement.evaluator import check, edge_delay, evaluate
from placement.generate import generate
from placement.problem import Problem, make_problem
from placement.solution import SolveOptions
from solvers.refine import RefineStats, Units, critical_chain, refine, spread_runs
from solvers.reschedule import bottom_levels, priority_order, reschedule
from tests.conftest import random_problem


def _naive_priority_order(problem: Problem, placement: np.ndarray, prio: np.ndarray) -> list[list[int]]:
    """Reference: at every step the device that can start soonest (ties: lower index) starts, among
    its nodes whose inputs have all arrived by then, the highest priority (ties: topological rank)."""
    delay = edge_delay(problem, placement)
    preds: list[list[tuple[int, float]]] = [[] for _ in range(problem.n)]
    for j, (u, v) in enumerate(zip(problem.src.tolist(), problem.dst.tolist())):
        preds[v].append((u, float(delay[j])))
    finish = [None] * problem.n
    free = [0.0] * problem.k
    order: list[list[int]] = [[] for _ in range(problem.k)]
    for _ in range(problem.n):
        best = None
        for d in range(problem.k):
            cands = [(max([finish[u] + c for u, c in preds[v]], default=0.0), v) for v in range(problem.n)
                     if placement[v] == d and finish[v] is None and all(finish[u] is not None for u, _ in preds[v])]
            if not cands:
                continue
            s = max(free[d], min(a for a, _ in cands))
            if best is None or (s, d) < best[:2]:
                best = (s, d, cands)
        s, d, cands = best
        v = min((v for a, v in cands if a <= s), key=lambda v: (-prio[v], problem.topo_rank[v]))
        finish[v] = s + float(problem.time[v])
        free[d] = finish[v]
        order[d].append(v)
    return order


@pytest.mark.parametrize("seed", range(6))
def test_priority_order_matches_a_naive_simulation(seed: int) -> None:
    prob = random_problem(seed, 25, 3, zero_time_p=0.0)
    pl = np.random.default_rng(seed).integers(0, prob.k, prob.n)
    prio = bottom_levels(prob, edge_delay(prob, pl))
    assert priority_order(prob, pl, prio) == _naive_priority_order(prob, pl, prio)


@pytest.mark.parametrize("seed", range(6))
def test_reschedule_reports_the_evaluators_values(seed: int) -> None:
    prob = random_problem(seed, 30, 3, colocate_p=0.2)
    pl = np.random.default_rng(seed).integers(0, prob.k, prob.n)
    for g in prob.groups:
        pl[g] = pl[g[0]]
    results = reschedule(prob, pl)
    assert [ev.makespan for _, _, ev in results] == sorted(ev.makespan for _, _, ev in results)
    for _, order, ev in results:
        again = evaluate(prob, pl, order=order)
        assert again.makespan == ev.makespan
        assert check(prob, pl, ev.start).makespan == pytest.approx(ev.makespan)  # a valid schedule


def test_bottom_levels_by_hand() -> None:
    # a(1) -> b(2) -> d(1), a -> c(4) -> d; comm 3 on a->c, 1 elsewhere.
    nodes = [{"id": x, "time": t, "out_bytes": 0.0, "param_bytes": 0.0} for x, t in zip("abcd", (1.0, 2.0, 4.0, 1.0))]
    edges = [{"src": "a", "dst": "b", "comm": 1.0}, {"src": "a", "dst": "c", "comm": 3.0},
             {"src": "b", "dst": "d", "comm": 1.0}, {"src": "c", "dst": "d", "comm": 1.0}]
    prob = make_problem(nodes, edges, devices=2)
    bl = bottom_levels(prob, prob.comm)
    # d: 1; c: 4 + 1 + 1 = 6; b: 2 + 1 + 1 = 4; a: 1 + max(1 + 4, 3 + 6) = 10
    assert bl[[prob.index[x] for x in "abcd"]].tolist() == [10.0, 4.0, 6.0, 1.0]


def test_priority_schedule_beats_fifo_where_fifo_starts_the_wrong_node() -> None:
    """x (5, no successor) and a (1) are both ready at 0 on device 0, x first in topological
    order; a feeds b (5) on device 1 at no transfer cost. FIFO runs x, a, b: 11; the bottom-level
    list runs a first, so b runs beside x: 6."""
    nodes = [{"id": x, "time": t, "out_bytes": 0.0, "param_bytes": 0.0} for x, t in (("x", 5.0), ("a", 1.0), ("b", 5.0))]
    prob = make_problem(nodes, [{"src": "a", "dst": "b", "comm": 0.0}], devices=2)
    pl = np.array([0, 0, 1])
    assert evaluate(prob, pl).makespan == 11.0
    name, order, ev = reschedule(prob, pl)[0]
    assert name == "bottom-level" and ev.makespan == 6.0
    assert order[0] == [prob.index["a"], prob.index["x"]]


def _heads(heads: int = 6, k: int = 4) -> Problem:
    """split (dev 0) -> `heads` independent two-node heads -> merge: PARDNN-like, all heads on one
    device, so the critical chain walks through every head on that device."""
    nodes = [{"id": "split", "time": 1.0, "out_bytes": 1.0, "param_bytes": 0.0}, {"id": "merge", "time": 1.0, "out_bytes": 1.0, "param_bytes": 0.0}]
    edges = []
    for h in range(heads):
        nodes += [{"id": f"h{h}/a", "time": 2.0, "out_bytes": 1.0, "param_bytes": 0.0}, {"id": f"h{h}/b", "time": 1.0, "out_bytes": 1.0, "param_bytes": 0.0}]
        edges += [{"src": "split", "dst": f"h{h}/a", "comm": 0.5}, {"src": f"h{h}/a", "dst": f"h{h}/b", "comm": 0.5},
                  {"src": f"h{h}/b", "dst": "merge", "comm": 0.5}]
    return make_problem(nodes, edges, devices=k, memory=100.0)


def test_spread_runs_puts_the_heads_on_idle_devices() -> None:
    prob = _heads()
    pl = np.array([0, 0] + [1] * 12)
    ev = evaluate(prob, pl)
    un = Units(prob)
    moves = spread_runs(prob, ev, critical_chain(prob, ev), un.of, un.need, un.mask)
    new = pl.copy()
    for u, d in moves.items():
        new[un.members[u]] = d
    # Six heads of 3 over four devices idle in the window: at most two heads per device, each head kept whole.
    heads = [new[[prob.index[f"h{h}/a"], prob.index[f"h{h}/b"]]] for h in range(6)]
    assert all(h[0] == h[1] for h in heads)
    assert max(np.bincount([h[0] for h in heads], minlength=4)) == 2
    assert evaluate(prob, new).makespan < ev.makespan


def test_spread_runs_respects_static_memory_and_allowed_devices() -> None:
    prob = _heads()
    mem = np.full(prob.k, 100.0)
    mem[2] = 1.0  # no head fits on device 2
    nodes = [{"id": i, "time": float(t), "out_bytes": float(o), "param_bytes": 0.0, **({"devices": [0, 1]} if str(i).startswith("h0") else {})}
             for i, t, o in zip(prob.ids, prob.time, prob.out_bytes)]
    edges = [{"src": prob.ids[u], "dst": prob.ids[v], "comm": float(c)} for u, v, c in zip(prob.src, prob.dst, prob.comm)]
    prob = make_problem(nodes, edges, devices=prob.k, memory=mem.tolist())
    pl = np.array([0, 0] + [1] * 12)
    ev = evaluate(prob, pl)
    un = Units(prob)
    moves = spread_runs(prob, ev, critical_chain(prob, ev), un.of, un.need, un.mask)
    assert moves and 2 not in moves.values()
    for v in (prob.index["h0/a"], prob.index["h0/b"]):
        assert moves.get(int(un.of[v]), 1) in (0, 1)


@pytest.mark.parametrize("mode", [False, True])
def test_refine_with_spreading_is_consistent_and_never_worse(mode: bool) -> None:
    prob = _heads(12, 4)
    pl0 = np.array([0, 0] + [1] * 24)
    fifo = evaluate(prob, pl0)
    stats = RefineStats()
    pl, ev = refine(prob, pl0, SolveOptions(seed=0), deadline=time.monotonic() + 1e9, max_evals=40,
                    keep_order=mode, stats=stats)
    assert check(prob, pl, ev.start).makespan == pytest.approx(ev.makespan)
    if not mode:
        assert evaluate(prob, pl).makespan == pytest.approx(ev.makespan)
    # 12 heads of 3 on one device (36) -> spread over four devices: at most 3 heads each (+ split, merge, transfers).
    assert ev.makespan <= 1 + 9 + 2 * 0.5 + 1 + 1e-9 < fifo.makespan


@pytest.mark.parametrize("kind", ["transformer", "lstm", "cnn"])
def test_ordered_refine_on_generated_graphs_never_worse_than_the_priority_schedule(kind: str) -> None:
    prob = generate(kind, 400, seed=1, devices=4, memory_fraction=0.6)
    from solvers import methods as registry

    sol = registry.get("pardnn").func(prob, SolveOptions())
    assert sol.placement is not None
    _, _, best = reschedule(prob, sol.placement)[0]
    pl, ev = refine(prob, sol.placement, SolveOptions(seed=0), deadline=time.monotonic() + 1e9, max_evals=30,
                    start=best.start, keep_order=True)
    assert ev.feasible(prob)
    assert ev.makespan <= best.makespan + 1e-9
    assert check(prob, pl, ev.start).makespan == pytest.approx(ev.makespan)
