"""The device order's chains in numpy (placement/evaluator.py `_order_chains`, session 26) against
the node-at-a-time loop that names what is wrong (`_checked_order_chains`).

A valid order of node indices gives the same predecessor per node both ways (and the same
schedule); anything the fast path declines (node ids, a node missing, twice, on another device,
out of range) goes to the loop, which raises the same error as before.
"""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from heuristics.list_scheduling import etf
from placement.evaluator import ScheduleError, _checked_order_chains, _order_chains, evaluate
from placement.generate import generate
from placement.solution import SolveOptions
from tests.conftest import random_problem


def _valid_order(seed: int, n: int, k: int):
    prob = random_problem(seed, n, k)
    rng = np.random.default_rng(seed)
    pl = rng.integers(0, k, n)
    ev = evaluate(prob, pl)
    order = [sorted(np.flatnonzero(pl == d).tolist(), key=lambda v: (ev.start[v], prob.topo_rank[v])) for d in range(k)]
    return prob, pl, order


@settings(max_examples=150, deadline=None)
@given(seed=st.integers(0, 10 ** 6), n=st.integers(1, 30), k=st.integers(1, 5),
       as_arrays=st.booleans())
def test_valid_orders_give_the_loops_chains(seed, n, k, as_arrays) -> None:
    prob, pl, order = _valid_order(seed, n, k)
    if as_arrays:
        order = [np.asarray(seq, dtype=np.int64) for seq in order]
    fast = _order_chains(prob.n, pl, order)
    assert fast is not None
    assert np.array_equal(fast, _checked_order_chains(prob, pl, order))
    ev = evaluate(prob, pl, order=order)
    assert ev.makespan == evaluate(prob, pl, order=[[prob.ids[v] for v in seq] for seq in order]).makespan


def _broken(kind: str, prob, pl, order):
    order = [list(seq) for seq in order]
    d = max(range(len(order)), key=lambda i: len(order[i]))
    if kind == "missing":
        order[d].pop()
    elif kind == "twice":
        order[d].append(order[d][0])
    elif kind == "other device":
        e = (d + 1) % len(order)
        order[e].append(order[d].pop())
    elif kind == "out of range":
        order[d].append(prob.n)
    return order


@pytest.mark.parametrize("kind, message", [("missing", "is missing from the order"),
                                           ("twice", "appears twice in the order"),
                                           ("other device", "but placed on"),
                                           ("out of range", "names node index")])
@pytest.mark.parametrize("seed", range(5))
def test_broken_orders_are_declined_and_named(kind, message, seed) -> None:
    prob, pl, order = _valid_order(seed, 12, 3)
    bad = _broken(kind, prob, pl, order)
    assert _order_chains(prob.n, pl, bad) is None
    with pytest.raises(ScheduleError, match=message):
        evaluate(prob, pl, order=bad)


def test_node_ids_go_through_the_loop() -> None:
    prob = generate("transformer", nodes=40, devices=2, seed=0)
    pl = np.asarray(etf(prob, SolveOptions()).placement)
    ev = evaluate(prob, pl)
    order = [sorted(np.flatnonzero(pl == d).tolist(), key=lambda v: (ev.start[v], prob.topo_rank[v])) for d in range(2)]
    named = [[prob.ids[v] for v in seq] for seq in order]
    assert all(isinstance(x, str) for seq in named for x in seq)
    assert _order_chains(prob.n, pl, named) is None
    assert np.array_equal(_checked_order_chains(prob, pl, named), _order_chains(prob.n, pl, order))
    assert evaluate(prob, pl, order=named).makespan == evaluate(prob, pl, order=order).makespan
