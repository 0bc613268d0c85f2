"""Every heuristic of issue 3 on small graphs: the evaluator accepts its placement, its reported
makespan is the evaluator's, never below the lower bound, and the same seed gives the same answer."""
from __future__ import annotations

import glob
import math
from pathlib import Path

import numpy as np
import pytest

from placement.bounds import makespan_lower_bound
from placement.evaluator import check, evaluate
from placement.formats.native import read_problem
from placement.generate import generate
from placement.problem import make_problem
from placement.solution import SolveOptions
from solvers.methods import get, methods

ROOT = Path(__file__).resolve().parent.parent
MINE = ("pardnn", "pardnn-balanced", "etf", "m-etf", "heft", "critical-path", "linear-clustering", "m-topo", "random", "portfolio")


def small_problems():
    probs = []
    for path in sorted(glob.glob(str(ROOT / "data" / "*.json"))):
        try:
            p = read_problem(path)
        except Exception:  # not a problem file
            continue
        if p.n <= 400:
            probs.append(p)
    for kind in ("transformer", "lstm", "cnn", "random"):
        probs.append(generate(kind, 250, seed=1, devices=3))
    return probs


PROBLEMS = small_problems()


def test_all_registered():
    table = methods()
    for name in MINE:
        assert name in table and table[name].kind == "heuristic"


@pytest.mark.parametrize("model", ["static", "peak"])
@pytest.mark.parametrize("name", MINE)
def test_heuristic_answers_are_checked_schedules(name, model):
    solved = 0
    for p in PROBLEMS:
        lb = makespan_lower_bound(p, model)  # the forced bound depends on the memory model
        sol = get(name).func(p, SolveOptions(memory_model=model, time_limit=30))
        if sol.placement is None:
            assert sol.status == "unknown" and sol.reason
            continue
        solved += 1
        assert sol.status == "heuristic"
        ev = evaluate(p, sol.placement, order=sol.order, memory_model=model)
        assert sol.objective == pytest.approx(ev.makespan, rel=1e-12)
        check(p, sol.placement, ev.start, model)  # precedence, exclusivity, constraints, memory
        assert ev.makespan >= lb * (1 - 1e-9)
    if model == "static":  # every small instance has room to spare in static memory
        assert solved == len(PROBLEMS)
    else:  # under the peak model some methods may honestly give up (status unknown, reason given)
        assert solved >= len(PROBLEMS) // 2


@pytest.mark.parametrize("name", MINE)
def test_deterministic_given_seed(name):
    p = PROBLEMS[-1]
    a = get(name).func(p, SolveOptions(seed=3))
    b = get(name).func(p, SolveOptions(seed=3))
    assert (a.placement is None) == (b.placement is None)
    if a.placement is not None:
        assert np.array_equal(a.placement, b.placement) and a.objective == b.objective


def test_random_depends_on_seed():
    p = PROBLEMS[-1]
    a = get("random").func(p, SolveOptions(seed=1)).placement
    b = get("random").func(p, SolveOptions(seed=2)).placement
    assert not np.array_equal(a, b)


def test_memory_check_spreads_when_one_device_is_too_small():
    # a chain where each device holds at most 3 of the 6 nodes: every list scheduler must split it
    nodes = [{"id": i, "time": 1.0, "out_bytes": 0.0, "param_bytes": 10.0} for i in range(6)]
    edges = [{"src": i, "dst": i + 1, "comm": 5.0} for i in range(5)]
    p = make_problem(nodes, edges, devices=2, memory=30.0)
    for name in ("etf", "m-etf", "heft", "critical-path", "linear-clustering", "pardnn", "m-topo"):
        sol = get(name).func(p, SolveOptions())
        assert sol.status == "heuristic", (name, sol.reason)
        ev = evaluate(p, sol.placement, order=sol.order)
        assert ev.static_memory.max() <= 30.0
        assert np.bincount(sol.placement, minlength=2).tolist() == [3, 3]


def test_unplaceable_node_is_reported_not_hidden():
    nodes = [{"id": "big", "time": 1.0, "out_bytes": 0.0, "param_bytes": 100.0},
             {"id": "small", "time": 1.0, "out_bytes": 0.0, "param_bytes": 1.0}]
    p = make_problem(nodes, [{"src": "big", "dst": "small", "comm": 1.0}], devices=2, memory=50.0)
    for name in MINE:
        sol = get(name).func(p, SolveOptions(time_limit=10))
        assert sol.status == "unknown" and sol.placement is None and sol.reason, name


def test_etf_is_optimal_on_independent_equal_tasks():
    # 4 independent unit tasks on 2 devices: ETF/HEFT reach the load bound 2
    nodes = [{"id": i, "time": 1.0, "out_bytes": 0.0, "param_bytes": 0.0} for i in range(4)]
    p = make_problem(nodes, [], devices=2)
    for name in ("etf", "m-etf", "heft"):
        assert get(name).func(p, SolveOptions()).objective == 2.0


def test_critical_path_stays_on_one_device():
    from heuristics.critical_path import critical_path_nodes
    p = PROBLEMS[-1].with_devices(memory=math.inf)  # no colocation, and memory never splits the path
    sol = get("critical-path").func(p, SolveOptions())
    cp = critical_path_nodes(p)
    assert cp.size >= 2
    # edges of the path are consecutive
    pairs = set(zip(p.src.tolist(), p.dst.tolist()))
    assert all((int(a), int(b)) in pairs for a, b in zip(cp[:-1], cp[1:]))
    assert np.unique(sol.placement[cp]).size == 1


def test_portfolio_keeps_the_best_member():
    p = PROBLEMS[-1]
    sol = get("portfolio").func(p, SolveOptions(time_limit=60))
    members = sol.info["members"]
    assert [m["method"] for m in members][:4] == ["single", "m-topo", "greedy-fill", "pardnn"]
    feasible = [m["makespan"] for m in members if m["feasible"]]
    assert sol.objective == min(feasible)
    ev = evaluate(p, sol.placement, order=sol.order)
    assert sol.objective == pytest.approx(ev.makespan)


def test_portfolio_skips_what_does_not_fit_the_budget():
    p = generate("random", 3000, seed=0, devices=4)
    sol = get("portfolio").func(p, SolveOptions(time_limit=0.5))
    skipped = [m["method"] for m in sol.info["members"] if m["status"] == "skipped"]
    assert "linear-clustering" in skipped
    assert sol.placement is not None  # the cheap anchors still answer


def test_heft_never_inserts_before_a_zero_time_predecessor():
    # a (1) -> x (0) -> v (0) on one device: v is ready exactly when x ends, at the same instant
    # x starts; the gap search must still put v after x.
    nodes = [{"id": "a", "time": 1.0, "out_bytes": 0.0, "param_bytes": 0.0},
             {"id": "x", "time": 0.0, "out_bytes": 0.0, "param_bytes": 0.0},
             {"id": "v", "time": 0.0, "out_bytes": 0.0, "param_bytes": 0.0}]
    edges = [{"src": "a", "dst": "x", "comm": 0.0}, {"src": "x", "dst": "v", "comm": 0.0}]
    p = make_problem(nodes, edges, devices=1)
    sol = get("heft").func(p, SolveOptions())
    assert sol.order == [[0, 1, 2]] and sol.objective == 1.0


def constrained_problem(seed: int = 0):
    """A random DAG with allowed-device lists and colocation groups."""
    rng = np.random.default_rng(seed)
    nodes = []
    for i in range(80):
        rec = {"id": i, "time": float(rng.integers(1, 6)), "out_bytes": float(rng.integers(0, 20)),
               "param_bytes": float(rng.integers(0, 20))}
        if i % 7 == 0:
            rec["devices"] = [int(i % 3)]
        elif i % 11 == 0:
            rec["devices"] = [1, 2]
        if i % 5 == 1:
            rec["colocate"] = f"g{i % 4}"
        nodes.append(rec)
    # keep every group's members compatible: group members may use any device
    for rec in nodes:
        if "colocate" in rec:
            rec.pop("devices", None)
    edges = {(int(u), v): float(rng.integers(0, 8)) for v in range(1, 80) for u in rng.integers(0, v, size=2)}
    total = sum(r["out_bytes"] + r["param_bytes"] for r in nodes)
    return make_problem(nodes, [{"src": u, "dst": v, "comm": c} for (u, v), c in edges.items()], devices=3,
                        memory=total / 3 * 1.5)


@pytest.mark.parametrize("name", MINE)
def test_allowed_devices_and_colocation_respected(name):
    p = constrained_problem()
    sol = get(name).func(p, SolveOptions(time_limit=20))
    assert sol.status == "heuristic", sol.reason
    ev = evaluate(p, sol.placement, order=sol.order)
    check(p, sol.placement, ev.start)  # raises on a forbidden device or a split group
    assert sol.objective == pytest.approx(ev.makespan)


@pytest.mark.parametrize("name", MINE)
def test_degenerate_graphs(name):
    one = make_problem([{"id": "a", "time": 2.0, "out_bytes": 1.0, "param_bytes": 1.0}], [], devices=3, memory=10.0)
    sol = get(name).func(one, SolveOptions())
    assert sol.status == "heuristic" and sol.objective == 2.0
    zero = make_problem([{"id": i, "time": 0.0, "out_bytes": 0.0, "param_bytes": 0.0} for i in range(3)],
                        [{"src": 0, "dst": 1, "comm": 0.0}, {"src": 1, "dst": 2, "comm": 0.0}], devices=2)
    assert get(name).func(zero, SolveOptions()).objective == 0.0


def test_linear_clustering_and_glb_by_hand():
    from heuristics.linear_clustering import glb, linear_clusters

    # S -> X1 -> X2 -> X3 -> T is the critical path (20 with comm); then Y1 -> Y2, then Z.
    recs = {"S": 1, "X1": 2, "X2": 2, "X3": 2, "T": 1, "Y1": 1, "Y2": 1, "Z": 1}
    nodes = [{"id": k, "time": float(t), "out_bytes": 0.0, "param_bytes": 1.0} for k, t in recs.items()]
    edges = [("S", "X1", 3), ("X1", "X2", 3), ("X2", "X3", 3), ("X3", "T", 3), ("S", "Y1", 1), ("Y1", "Y2", 1),
             ("Y2", "T", 1), ("S", "Z", 0), ("Z", "T", 0)]
    p = make_problem(nodes, [{"src": a, "dst": b, "comm": float(c)} for a, b, c in edges], devices=2, memory=100.0)
    sl = linear_clusters(p)
    names = [[p.ids[int(v)] for v in c] for c in sl.paths]
    assert names == [["S", "X1", "X2", "X3", "T"], ["Y1", "Y2"], ["Z"]]
    assert sl.primaries == 3  # every cluster found with recomputed levels
    # GLB: clusters by start time (X path 0, Z 1, Y 2), each to the least-loaded device
    pl = glb(p, sl, p.memory)
    assert [int(pl[p.index[k]]) for k in recs] == [0, 0, 0, 0, 0, 1, 1, 1]
    # with room for only 5 nodes per device the X path cannot stay whole on device 0
    pl = glb(p, sl, np.array([4.0, 100.0]))
    assert np.bincount(pl, minlength=2)[0] <= 4


def test_m_topo_is_topo_fill():
    p = PROBLEMS[-1]
    a = get("m-topo").func(p, SolveOptions())
    b = get("topo-fill").func(p, SolveOptions())
    assert a.method == "m-topo" and np.array_equal(a.placement, b.placement) and a.objective == b.objective


def test_random_respects_memory_with_reserve():
    p = constrained_problem(1)
    sol = get("random").func(p, SolveOptions(seed=5, reserve=0.2))
    assert sol.status == "heuristic"
    ev = evaluate(p, sol.placement)
    assert np.all(ev.static_memory <= p.memory * 0.8 + 1e-9)


@pytest.mark.parametrize("memory, seen", [(math.inf, "static"), (1e15, "peak")])
def test_portfolio_runs_members_static_when_no_device_has_a_capacity(monkeypatch, memory, seen):
    """Under the peak model with every capacity unlimited nothing is constrained, so the members
    run in the static model (no live-byte tracking); with any finite capacity they see the peak
    model. The answer is the same placement either way on this graph."""
    import heuristics.portfolio as pf

    p = generate("transformer", 250, seed=1, devices=3).with_devices(memory=memory)
    models: list[str] = []
    etf_member = pf.MEMBERS["etf"]

    def spy(problem, opts):
        models.append(opts.memory_model)
        return etf_member(problem, opts)

    monkeypatch.setitem(pf.MEMBERS, "etf", spy)
    sol = pf.portfolio(p, SolveOptions(memory_model="peak"))
    assert models == [seen]
    ev = evaluate(p, sol.placement, sol.order, memory_model="peak")
    assert ev.makespan == pytest.approx(sol.objective)
    assert ev.feasible(p)


def test_portfolio_runs_only_the_stretched_for_members_past_its_own_share():
    """A caller that stretched the portfolio's limit for some members (the pipeline's warm start)
    gives its own share: once an answer is in hand, with memory loose, the other members are
    skipped past it and the stretched-for ones still run; the answer is the best of what ran."""
    p = generate("transformer", 250, seed=1, devices=3)
    stretched = ("single", "m-topo", "etf", "heft")
    sol = get("portfolio").func(p, SolveOptions(time_limit=60, extra={"own_seconds": 0.0, "stretched_for": stretched}))
    members = sol.info["members"]
    first_ok = next(i for i, m in enumerate(members) if m["feasible"])
    after = members[first_ok + 1:]
    ran = [m["method"] for m in after if m["status"] != "skipped"]
    assert set(ran) <= set(stretched) and "etf" in ran and "heft" in ran
    skipped = [m for m in after if m["method"] not in stretched]
    assert skipped and all(m["status"] == "skipped" and "own share" in m["reason"] for m in skipped)
    assert sol.objective == min(m["makespan"] for m in members if m["feasible"])
    # without the share every member runs
    full = get("portfolio").func(p, SolveOptions(time_limit=60))
    assert not any("own share" in (m["reason"] or "") for m in full.info["members"])
    assert full.objective <= sol.objective


def test_portfolio_share_does_not_cut_members_under_tight_peak_memory():
    """Under tight memory (the peak model's tight orders) the memory-planning members keep the
    whole limit whatever share the caller gives."""
    from heuristics.portfolio import ORDER, PEAK_ORDER, member_order
    from placement.memory_bounds import memory_lower_bound

    p = generate("lstm", 300, seed=0, devices=4)
    lb = float(memory_lower_bound(p, "peak")["best"])
    tight = p.with_devices(memory=1.5 * lb)
    opts = SolveOptions(time_limit=60, memory_model="peak", extra={"own_seconds": 0.0, "stretched_for": ("single",)})
    names, _ = member_order(tight, opts)
    assert names not in (ORDER, PEAK_ORDER)
    sol = get("portfolio").func(tight, opts)
    assert not any("own share" in (m["reason"] or "") for m in sol.info["members"])
    assert sum(m["status"] != "skipped" for m in sol.info["members"]) > 3
