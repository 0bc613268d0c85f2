"""Re-homing slack colocation groups off the busy devices (solvers/rehome.py): the answer is never
longer, fits memory, keeps colocation and allowed devices, and the evaluator agrees with it; the
slack and memory rules hold a group back where moving it would cost."""
from __future__ import annotations

import time

import numpy as np
import pytest

from placement.evaluator import check, evaluate, wait_delay
from placement.incremental import timing_graph
from placement.problem import make_problem
from placement.solution import SolveOptions
from solvers import relist_sweep
from solvers.rehome import _assign, rehome, slack_groups
from solvers.relist_sweep import RelistSweep
from tests.conftest import filled_random
from tests.test_window_relist import _fan_in


def _edge_records(prob) -> list[dict]:
    """The problem's edges as make_problem records (to build a variant of it)."""
    return [{"src": prob.ids[a], "dst": prob.ids[b], "comm": float(c)}
            for a, b, c in zip(prob.src.tolist(), prob.dst.tolist(), prob.comm.tolist())]


def _chain_with_update(update_feeds_c2: float | None = None, w_bytes: float = 0.0, memory: float = float("inf")):
    """Device 0 runs the chain c0 -> c1 -> c2 (2 each) and, between c0 and c1, the update u (1) of
    the weight w (a colocation group; u reads c0's gradient). Device 1 runs nothing. With
    ``update_feeds_c2`` u also feeds c2 over an edge of that transfer time."""
    nodes = [{"id": "c0", "time": 2.0}, {"id": "c1", "time": 2.0}, {"id": "c2", "time": 2.0},
             {"id": "w", "time": 0.0, "param_bytes": w_bytes, "colocate": "g"},
             {"id": "u", "time": 1.0, "colocate": "g"}]
    for rec in nodes:
        rec.setdefault("param_bytes", 0.0)
        rec["out_bytes"] = 0.0
    edges = [{"src": "c0", "dst": "c1", "comm": 0.1}, {"src": "c1", "dst": "c2", "comm": 0.1},
             {"src": "c0", "dst": "u", "comm": 0.1}, {"src": "w", "dst": "u", "comm": 0.1}]
    if update_feeds_c2 is not None:
        edges.append({"src": "u", "dst": "c2", "comm": update_feeds_c2})
    prob = make_problem(nodes, edges, devices=2, memory=memory)
    ix = prob.index
    placement = np.zeros(prob.n, dtype=np.int64)
    ev = evaluate(prob, placement, order=[[ix[x] for x in ("w", "c0", "u", "c1", "c2")], []])
    return prob, ev


def test_an_update_in_the_chains_way_goes_to_the_idle_device() -> None:
    prob, ev = _chain_with_update()
    assert ev.makespan == pytest.approx(7.0)  # c0, u, c1, c2 one after another
    got = rehome(prob, ev)
    assert got is not None
    ix = prob.index
    assert got.placement[ix["w"]] == got.placement[ix["u"]] == 1
    assert got.placement[[ix["c0"], ix["c1"], ix["c2"]]].tolist() == [0, 0, 0]
    assert got.makespan == pytest.approx(6.0)  # the chain alone
    assert check(prob, got.placement, got.start).makespan == pytest.approx(got.makespan)


def test_a_stop_request_returns_nothing() -> None:
    prob, ev = _chain_with_update()
    assert rehome(prob, ev, stop=lambda: True) is None


def test_a_group_whose_move_would_cost_a_transfer_on_the_path_stays() -> None:
    """u feeds c2 over a transfer of 5: its slack (7 - 2 - 3 = 2) is below what a move could add."""
    prob, ev = _chain_with_update(update_feeds_c2=5.0)
    groups, busy = slack_groups(prob, ev, timing_graph(prob))
    assert busy.tolist() == [True, False] and groups == []
    assert rehome(prob, ev) is None


def test_a_device_without_room_for_the_weight_gets_nothing() -> None:
    prob, ev = _chain_with_update(w_bytes=10.0, memory=[100.0, 5.0])
    assert ev.feasible(prob)
    assert rehome(prob, ev) is None
    roomy, ev2 = _chain_with_update(w_bytes=10.0, memory=[100.0, 20.0])
    assert rehome(roomy, ev2) is not None


def test_a_group_no_idle_device_may_run_stays() -> None:
    prob0, ev0 = _chain_with_update()
    nodes = [{"id": i, "time": float(prob0.time[v]), "out_bytes": 0.0, "param_bytes": 0.0,
              "colocate": "g" if i in ("w", "u") else None} for v, i in enumerate(prob0.ids)]
    for rec in nodes:
        if rec["id"] == "u":
            rec["devices"] = [0]
        if rec["colocate"] is None:
            del rec["colocate"]
    edges = _edge_records(prob0)
    prob = make_problem(nodes, edges, devices=2)
    ev = evaluate(prob, ev0.placement, order=[[prob.index[x] for x in ("w", "c0", "u", "c1", "c2")], []])
    groups, busy = slack_groups(prob, ev, timing_graph(prob))
    assert len(groups) == 1  # it has the slack, but nowhere to go
    assert (_assign(prob, ev.placement, groups, busy, prob.allowed_mask()) == ev.placement).all()
    assert rehome(prob, ev) is None


@pytest.mark.parametrize("memory_model", ["static", "peak"])
def test_never_longer_and_always_valid_on_random_problems(memory_model: str) -> None:
    moved_some = 0
    for seed in range(12):
        prob, placement, ev0 = filled_random(seed, memory_model, 40, 0.12)
        got = rehome(prob, ev0, memory_model)
        if got is None:
            continue
        assert got.makespan <= ev0.makespan
        again = check(prob, got.placement, got.start, memory_model)  # raises on a broken schedule or memory
        assert again.makespan == pytest.approx(got.makespan) and again.feasible(prob)
        for g in prob.groups:
            assert np.unique(got.placement[g]).size == 1
        moved = np.flatnonzero(got.placement != ev0.placement)
        assert moved.size and (prob.colocate[moved] >= 0).all()  # only colocation groups move
        moved_some += 1
    assert moved_some >= 3  # 4 of the 12 static problems and 6 of the peak ones when written


def test_waits_the_start_meets_are_met_after() -> None:
    """Waits (v does not start before u ends) drawn among pairs the start meets with room for a
    transfer: the re-homed schedule meets every one of them too."""
    moved_some = 0
    for seed in range(8):
        prob, placement, ev0 = filled_random(seed, "static", 40, 0.12)
        rng = np.random.default_rng(seed)
        latency = wait_delay(prob)
        pairs = [(u, v) for u in range(prob.n) for v in range(prob.n)
                 if u != v and ev0.finish[u] + latency <= ev0.start[v] - 1e-9]
        waits = [pairs[i] for i in rng.choice(len(pairs), size=min(8, len(pairs)), replace=False)]
        got = rehome(prob, ev0, "static", waits)
        if got is None:
            continue
        moved_some += 1
        for u, v in waits:
            gap = latency if got.placement[u] != got.placement[v] else 0.0
            assert got.start[v] >= got.finish[u] + gap - 1e-9
    assert moved_some >= 2  # 2 of the 8 when written


def _fan_in_with_update():
    """tests/test_window_relist.py's fan-in (its best layout: 8.8, F's device running F, the heads,
    one tail and J) with a weight's update u (0.2) on F's device before the last tail: with u there
    no layout beats 9.0 (F's device has 9.0 of work); on the other device u fits before the tails."""
    prob0, _ = _fan_in()
    nodes = [{"id": i, "time": float(prob0.time[v]), "out_bytes": 0.0, "param_bytes": 0.0} for v, i in enumerate(prob0.ids)]
    nodes += [{"id": "w", "time": 0.0, "out_bytes": 0.0, "param_bytes": 1.0, "colocate": "g"},
              {"id": "u", "time": 0.2, "out_bytes": 0.0, "param_bytes": 0.0, "colocate": "g"}]
    edges = _edge_records(prob0)
    edges.append({"src": "w", "dst": "u", "comm": 0.1})
    prob = make_problem(nodes, edges, devices=2)
    ix = prob.index
    placement = np.zeros(prob.n, dtype=np.int64)
    for i in range(3):
        placement[ix[f"t{i}"]] = 1
    order = [[ix[x] for x in ("w", "F", "h0", "h1", "h2", "h3", "u", "t3", "J")], [ix[f"t{i}"] for i in range(3)]]
    return prob, evaluate(prob, placement, order=order)


def test_the_relist_sweep_reaches_the_fan_ins_best_only_with_the_update_rehomed(monkeypatch) -> None:
    prob, ev = _fan_in_with_update()
    assert ev.makespan == pytest.approx(9.0)
    far = time.monotonic() + 60
    search = RelistSweep(prob, ev.placement, ev.start, SolveOptions())
    got = search.run(far)
    assert got.makespan == pytest.approx(8.8) and search.stats.rehomed == 1
    assert got.placement[prob.index["u"]] == 1
    assert check(prob, got.placement, got.start).makespan == pytest.approx(8.8)
    monkeypatch.setattr(relist_sweep, "rehome", lambda *a, **k: None)
    held = RelistSweep(prob, ev.placement, ev.start, SolveOptions())
    assert held.run(far).makespan == pytest.approx(9.0)


def test_a_group_that_lands_before_a_critical_node_goes_home_and_the_rest_stay() -> None:
    """Device 0: c0 (2), an idle gap filled by u1 (1, reads c0) and u2 (0.5), then c1 (2, waits for
    z), c2 (2): 7.6. Device 1 runs z (1.4, c0 -> z -> c1, transfers 0.1): 23% of the chain, not busy.
    Moved together, u1 lands before z (by its start, 2.0 < 2.1) and delays it: 8.6. Sent home, the
    group on that chain leaves u2's move standing (it lands after z), 7.6 again."""
    nodes = [{"id": x, "time": t, "out_bytes": 0.0, "param_bytes": 0.0} for x, t in
             (("c0", 2.0), ("z", 1.4), ("c1", 2.0), ("c2", 2.0))]
    nodes += [{"id": f"w{i}", "time": 0.0, "out_bytes": 0.0, "param_bytes": 0.0, "colocate": f"g{i}"} for i in (1, 2)]
    nodes += [{"id": "u1", "time": 1.0, "out_bytes": 0.0, "param_bytes": 0.0, "colocate": "g1"},
              {"id": "u2", "time": 0.5, "out_bytes": 0.0, "param_bytes": 0.0, "colocate": "g2"}]
    edges = [{"src": a, "dst": b, "comm": 0.1} for a, b in
             (("c0", "z"), ("z", "c1"), ("c1", "c2"), ("c0", "u1"), ("w1", "u1"), ("w2", "u2"))]
    prob = make_problem(nodes, edges, devices=2)
    ix = prob.index
    placement = np.zeros(prob.n, dtype=np.int64)
    placement[ix["z"]] = 1
    ev = evaluate(prob, placement, order=[[ix[x] for x in ("w1", "w2", "c0", "u1", "u2", "c1", "c2")], [ix["z"]]])
    assert ev.makespan == pytest.approx(7.6) and ev.start[ix["u2"]] == pytest.approx(3.0)
    got = rehome(prob, ev)
    assert got is not None and got.makespan == pytest.approx(7.6)
    assert got.placement[[ix["w1"], ix["u1"]]].tolist() == [0, 0]
    assert got.placement[[ix["w2"], ix["u2"]]].tolist() == [1, 1]


def test_a_group_goes_to_the_least_loaded_device_it_may_use() -> None:
    """Three devices; the update may run on devices 0 and 2 only: it goes to 2 (busier than the
    idle 1, but allowed) and the chain gains as before (7 -> 6)."""
    nodes = [{"id": x, "time": t, "out_bytes": 0.0, "param_bytes": 0.0} for x, t in
             (("c0", 2.0), ("c1", 2.0), ("c2", 2.0), ("x", 0.5))]
    nodes += [{"id": "w", "time": 0.0, "out_bytes": 0.0, "param_bytes": 0.0, "colocate": "g", "devices": [0, 2]},
              {"id": "u", "time": 1.0, "out_bytes": 0.0, "param_bytes": 0.0, "colocate": "g", "devices": [0, 2]}]
    edges = [{"src": a, "dst": b, "comm": 0.1} for a, b in (("c0", "c1"), ("c1", "c2"), ("c0", "u"), ("w", "u"))]
    prob = make_problem(nodes, edges, devices=3)
    ix = prob.index
    placement = np.zeros(prob.n, dtype=np.int64)
    placement[ix["x"]] = 2
    ev = evaluate(prob, placement, order=[[ix[v] for v in ("w", "c0", "u", "c1", "c2")], [], [ix["x"]]])
    assert ev.makespan == pytest.approx(7.0)
    got = rehome(prob, ev)
    assert got is not None and got.makespan == pytest.approx(6.0)
    assert got.placement[[ix["w"], ix["u"]]].tolist() == [2, 2]
