"""Join moves in refine (solvers/refine.py ``join_moves``): a node held up by several remote inputs
that land together gets them back on its device at once, where single moves see a plateau."""
from __future__ import annotations

import time

import numpy as np
import pytest

from heuristics.baselines import topo_fill
from placement.evaluator import check_placement, evaluate
from placement.problem import make_problem
from placement.solution import SolveOptions
from solvers.refine import Units, join_moves, refine
from tests.conftest import random_problem


def _fan_in(devices: list[int], allowed_last: list[int] | None = None):
    """s -> a_i -> g for inputs a_0 .. a_{m-1}: s and g on device 0, a_i on ``devices[i]``.
    Cheap edges out of s (0.1), dear edges into g (5 + i / 10: later inputs land later)."""
    m = len(devices)
    nodes = [{"id": "s", "time": 1.0, "out_bytes": 1.0, "param_bytes": 0.0}]
    nodes += [{"id": f"a{i}", "time": 1.0, "out_bytes": 1.0, "param_bytes": 0.0} for i in range(m)]
    if allowed_last is not None:
        nodes[-1]["devices"] = allowed_last
    nodes.append({"id": "g", "time": 1.0, "out_bytes": 1.0, "param_bytes": 0.0})
    edges = [{"src": "s", "dst": f"a{i}", "comm": 0.1} for i in range(m)]
    edges += [{"src": f"a{i}", "dst": "g", "comm": 5.0 + i / 10} for i in range(m)]
    prob = make_problem(nodes, edges, devices=max(devices) + 1)
    pl = np.array([0] + devices + [0])
    return prob, pl


def test_join_moves_take_the_latest_arrivals_first_in_doubling_sets() -> None:
    prob, pl = _fan_in([1, 2, 3, 4, 5])
    ev = evaluate(prob, pl)
    units = Units(prob)
    g = prob.index["g"]
    moves = join_moves(prob, ev, g, units.of, units.mask, prob.pred_ptr)
    name = {int(units.of[prob.index[f"a{i}"]]): f"a{i}" for i in range(5)}
    # arrivals: a_i lands at 1 + 0.1 + 1 + 5 + i / 10, so a4 last, then a3, ...
    assert [sorted(name[u] for u in us) for us, _ in moves] == [
        ["a3", "a4"], ["a1", "a2", "a3", "a4"], ["a0", "a1", "a2", "a3", "a4"]]
    assert all(ds == [0] * len(us) for us, ds in moves)


def test_join_moves_skip_units_not_allowed_home_and_nodes_not_held_by_inputs() -> None:
    prob, pl = _fan_in([1, 2, 3], allowed_last=[3])
    ev = evaluate(prob, pl)
    units = Units(prob)
    moves = join_moves(prob, ev, prob.index["g"], units.of, units.mask, prob.pred_ptr)
    name = {int(units.of[prob.index[f"a{i}"]]): f"a{i}" for i in range(3)}
    assert [sorted(name[u] for u in us) for us, _ in moves] == [["a0", "a1"]]  # a2 may not run on device 0
    # s has no inputs; a0 has one: nothing to join
    assert join_moves(prob, ev, prob.index["s"], units.of, units.mask, prob.pred_ptr) == []
    assert join_moves(prob, ev, prob.index["a0"], units.of, units.mask, prob.pred_ptr) == []
    # inputs that land before g's device frees it do not hold g: no join move
    slow = make_problem(
        [{"id": n, "time": t, "out_bytes": 1.0, "param_bytes": 0.0} for n, t in
         (("s", 1.0), ("a0", 1.0), ("a1", 1.0), ("w", 20.0), ("g", 1.0))],
        [{"src": "s", "dst": "a0", "comm": 0.1}, {"src": "s", "dst": "a1", "comm": 0.1},
         {"src": "a0", "dst": "g", "comm": 5.0}, {"src": "a1", "dst": "g", "comm": 5.0},
         {"src": "s", "dst": "w", "comm": 0.0}, {"src": "w", "dst": "g", "comm": 0.0}], devices=3)
    ev = evaluate(slow, np.array([0, 1, 2, 0, 0]))
    assert ev.start[slow.index["g"]] == pytest.approx(21.0)  # after w, on g's device
    units = Units(slow)
    assert join_moves(slow, ev, slow.index["g"], units.of, units.mask, slow.pred_ptr) == []


@pytest.mark.parametrize("m", [2, 3, 5])
def test_refine_leaves_the_plateau_single_moves_cannot(m: int) -> None:
    """m producers on m other devices land at g within 0.1 of each other: bringing any one home
    gains at most 0.1 - 1 < 0, so only a joint move helps. All on device 0: 1 + m + 1 (optimum:
    the m transfers of 5 cost more than running the producers one after another)."""
    prob, pl = _fan_in(list(range(1, m + 1)))
    start = evaluate(prob, pl).makespan
    assert start == pytest.approx(1 + 0.1 + 1 + 5 + (m - 1) / 10 + 1)
    out, ev = refine(prob, pl, SolveOptions(seed=0), deadline=time.monotonic() + 60, max_evals=400,
                     patience=0, keep_order=True)
    assert ev.makespan == pytest.approx(m + 2)
    assert np.all(out == 0)


@pytest.mark.parametrize("seed", range(6))
def test_refine_with_join_moves_stays_feasible_and_never_worse(seed: int) -> None:
    base = random_problem(seed, 30, 3, colocate_p=0.2, edge_p=0.3)
    need = float((base.param_bytes + base.out_bytes).sum())
    prob = base.with_devices(3, memory=0.5 * need)
    sol = topo_fill(prob, SolveOptions())
    assert sol.placement is not None
    pl = np.asarray(sol.placement)
    ev0 = evaluate(prob, pl)
    assert ev0.feasible(prob)
    out, ev = refine(prob, pl, SolveOptions(seed=seed), deadline=time.monotonic() + 60, max_evals=300,
                     keep_order=True)
    check_placement(prob, out)
    assert ev.feasible(prob)
    assert ev.makespan <= ev0.makespan + 1e-9


def test_inputs_whose_own_inputs_are_as_far_are_left_out() -> None:
    """g joins two branches s -> b_i -> c_i -> g, each whole branch on its own device and every
    edge as dear (5): brought home alone, c_i would wait for b_i's transfer instead of sending its
    own, so no join move is offered."""
    nodes = [{"id": x, "time": 1.0, "out_bytes": 1.0, "param_bytes": 0.0}
             for x in ("s", "b0", "c0", "b1", "c1", "g")]
    edges = [{"src": "s", "dst": "b0", "comm": 5.0}, {"src": "s", "dst": "b1", "comm": 5.0},
             {"src": "b0", "dst": "c0", "comm": 5.0}, {"src": "b1", "dst": "c1", "comm": 5.0},
             {"src": "c0", "dst": "g", "comm": 5.0}, {"src": "c1", "dst": "g", "comm": 5.0}]
    prob = make_problem(nodes, edges, devices=3)
    ev = evaluate(prob, np.array([0, 1, 1, 2, 2, 0]))
    units = Units(prob)
    assert join_moves(prob, ev, prob.index["g"], units.of, units.mask, prob.pred_ptr) == []
    # with the branches' first edges cheap, bringing c_i home saves its dear transfer: offered
    cheap = make_problem(nodes, [dict(e, comm=0.1) if e["dst"] in ("c0", "c1") else e for e in edges], devices=3)
    ev = evaluate(cheap, np.array([0, 1, 1, 2, 2, 0]))
    units = Units(cheap)
    moves = join_moves(cheap, ev, cheap.index["g"], units.of, units.mask, cheap.pred_ptr)
    assert [sorted(units.of[[cheap.index["c0"], cheap.index["c1"]]].tolist())] == [us for us, _ in moves]
