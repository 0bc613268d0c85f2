"""Exact makespan models (CP-SAT, MIP) against the brute-force enumerator on tiny random instances,
plus time-outs, hints, infeasibility proofs and the symmetry breaking."""
from __future__ import annotations

import math
import random

import numpy as np
import pytest

from formulations.bruteforce import brute, enumerate_best, placements
from formulations.common import canonical_placement, device_classes
from formulations.cpsat import cpsat
from formulations.mip import mip
from heuristics.baselines import topo_fill
from placement.evaluator import evaluate
from placement.problem import Problem, make_problem
from placement.solution import Solution, SolveOptions
from tests.conftest import assert_honest
from solvers.methods import methods


def rand_problem(seed: int, *, frac: bool = False, mem_factor: float | None = None) -> Problem:
    """5-8 nodes, 2-3 devices, a random DAG, sometimes a colocation pair and a pinned node."""
    r = random.Random(seed)
    n, k = r.randint(5, 8), r.randint(2, 3)
    nodes = []
    for i in range(n):
        t = r.choice([0, 1, 2, 3, 5, 8]) + (round(r.random(), 3) if frac else 0)
        nodes.append({"id": i, "time": t, "out_bytes": r.randint(0, 4), "param_bytes": r.randint(1, 6)})
    if r.random() < 0.4:
        a, b = r.sample(range(n), 2)
        nodes[a]["colocate"] = nodes[b]["colocate"] = "g"
    if r.random() < 0.3:
        nodes[r.randrange(n)]["devices"] = [0]
    edges = [{"src": u, "dst": v, "comm": r.choice([0, 1, 2, 4, 7]) + (round(r.random(), 3) if frac else 0)}
             for v in range(1, n) for u in range(v) if r.random() < 0.35]
    total = sum(x["out_bytes"] + x["param_bytes"] for x in nodes)
    biggest = max(x["out_bytes"] + x["param_bytes"] for x in nodes)
    factor = r.uniform(1.05, 1.8) if mem_factor is None else mem_factor
    return make_problem(nodes, edges, devices=k, memory=float(int(max(total / k * factor, biggest))), name=f"r{seed}")


def chain_problem(seed: int, n: int = 150, k: int = 4) -> Problem:
    """A DNN-like random graph too large to solve to optimality in a second."""
    r = random.Random(seed)
    nodes = [{"id": i, "time": r.randint(1, 20), "out_bytes": r.randint(0, 5), "param_bytes": r.randint(1, 10)} for i in range(n)]
    edges = [{"src": u, "dst": v, "comm": r.randint(1, 15)} for v in range(1, n) for u in r.sample(range(max(0, v - 10), v), min(v, 2))]
    total = sum(x["out_bytes"] + x["param_bytes"] for x in nodes)
    return make_problem(nodes, edges, devices=k, memory=float(int(total / k * 1.3)))


def opts(**kw) -> SolveOptions:
    kw.setdefault("time_limit", 30)
    kw.setdefault("workers", 1)
    return SolveOptions(**kw)


@pytest.mark.parametrize("seed", range(30))
def test_static_optimum_equals_bruteforce_integer_data(seed: int) -> None:
    p = rand_problem(seed)
    ref = brute(p, opts())
    for method in (cpsat, mip):
        sol = method(p, opts(seed=seed))
        assert sol.status == ref.status, (sol.method, sol.reason)
        if ref.status == "optimal":
            assert sol.objective == pytest.approx(ref.objective, abs=1e-6), sol.method
            assert_honest(p, sol)


@pytest.mark.parametrize("seed", range(100, 112))
def test_static_optimum_equals_bruteforce_fractional_data(seed: int) -> None:
    """Non-integral times and comm: CP-SAT works on scaled, floored data and re-times its order
    with the real data; its bound stays valid and its optimum equals the enumerated one."""
    p = rand_problem(seed, frac=True)
    ref = brute(p, opts())
    for method in (cpsat, mip):
        sol = method(p, opts(seed=seed))
        assert sol.status == ref.status, (sol.method, sol.reason)
        if ref.status == "optimal":
            assert sol.objective == pytest.approx(ref.objective, rel=1e-9), sol.method
            assert sol.lower_bound <= ref.objective * (1 + 1e-12)
            assert_honest(p, sol)


def _peak_problem(seed: int, squeeze: float) -> Problem:
    """Capacities set below the peak of the best unconstrained schedule, so the peak model binds."""
    p = rand_problem(seed, mem_factor=100.0)
    got, _ = enumerate_best(p, "static")
    mk, pl, start = got
    peak = evaluate(p, pl, memory_model="peak").peak_memory
    return p.with_devices(memory=float(max(int(peak.max() * squeeze), 1)))


@pytest.mark.parametrize("seed", range(20))
def test_peak_model_feasible_and_never_worse_than_enumerated(seed: int) -> None:
    p = _peak_problem(seed, squeeze=[1.0, 0.9, 0.75][seed % 3])
    ref = brute(p, opts(memory_model="peak"))
    sol = cpsat(p, opts(memory_model="peak", seed=seed))
    if ref.objective is not None:
        assert sol.placement is not None, sol.reason
        assert sol.objective <= ref.objective + 1e-9
    if sol.status == "infeasible":
        assert ref.objective is None
    assert_honest(p, sol, "peak")


def test_peak_memory_can_cost_makespan() -> None:
    """Two independent producers feeding one consumer: running both at once needs both outputs
    alive; with room for one output only, the optimum serialises them (peak is tighter than
    static here: static would count both outputs as well, so give static enough room)."""
    nodes = [{"id": "a", "time": 3, "out_bytes": 5, "param_bytes": 0},
             {"id": "b", "time": 3, "out_bytes": 5, "param_bytes": 0},
             {"id": "c", "time": 1, "out_bytes": 0, "param_bytes": 0}]
    edges = [{"src": "a", "dst": "c", "comm": 10}, {"src": "b", "dst": "c", "comm": 10}]
    p = make_problem(nodes, edges, devices=2, memory=10.0)
    free = cpsat(p, opts(memory_model="peak"))
    assert free.status == "optimal" and free.objective == pytest.approx(7.0)
    tight = p.with_devices(memory=[10.0, 4.0])
    sol = cpsat(tight, opts(memory_model="peak"))
    assert sol.status == "optimal" and sol.objective == pytest.approx(7.0)
    assert_honest(tight, sol, "peak")
    assert set(sol.placement.tolist()) == {0}


def test_timeout_returns_best_feasible_not_optimal() -> None:
    p = chain_problem(1)
    hint = topo_fill(p, SolveOptions())
    sol = cpsat(p, opts(time_limit=1.0, workers=1, hint=hint))
    assert sol.status == "feasible"
    assert sol.objective <= hint.objective + 1e-9
    assert sol.lower_bound < sol.objective
    assert_honest(p, sol)
    sol = mip(p, opts(time_limit=2.0, hint=hint))
    assert sol.status == "feasible"
    assert sol.objective <= hint.objective + 1e-9
    assert_honest(p, sol)


def test_hint_is_cp_sat_first_solution() -> None:
    """With the search stopped at the first solution, a complete hint is that solution."""
    p = chain_problem(2)
    hint = topo_fill(p, SolveOptions())
    sol = cpsat(p, opts(hint=hint, extra={"cp_params": {"stop_after_first_solution": True}}))
    assert "hint" in sol.info["cp_solution_info"]
    assert not sol.info.get("returned_hint")
    assert sol.objective == pytest.approx(hint.objective)


def test_hint_with_order_or_start_and_relabelled_devices() -> None:
    """A hint whose devices are in a non-canonical order (identical devices) is relabelled: the
    solver still starts from it (stop at first solution returns its value)."""
    p = chain_problem(3, n=60, k=3)
    base = topo_fill(p, SolveOptions())
    perm = np.array([2, 0, 1])
    ev = evaluate(p, perm[base.placement])
    hint = Solution("x", "heuristic", placement=perm[base.placement], start=ev.start, objective=ev.makespan)
    sol = cpsat(p, opts(hint=hint, extra={"cp_params": {"stop_after_first_solution": True}}))
    assert "hint" in sol.info["cp_solution_info"]
    assert sol.objective == pytest.approx(ev.makespan)


def test_infeasible_memory_is_proved() -> None:
    """Three 6-byte nodes on two 10-byte devices: each fits, the total fits, no packing does."""
    nodes = [{"id": i, "time": 1, "out_bytes": 0, "param_bytes": 6} for i in range(3)]
    p = make_problem(nodes, [{"src": 0, "dst": 1, "comm": 1}], devices=2, memory=10.0)
    for method in (cpsat, mip, brute):
        sol = method(p, opts())
        assert sol.status == "infeasible", sol.method
        assert sol.reason and sol.placement is None
    sol = cpsat(p, opts(memory_model="peak"))
    assert sol.status == "infeasible" and "peak" in sol.reason


def test_simple_infeasibility_reason_names_the_node() -> None:
    nodes = [{"id": "big", "time": 1, "out_bytes": 0, "param_bytes": 20}, {"id": "s", "time": 1, "out_bytes": 0, "param_bytes": 1}]
    p = make_problem(nodes, [], devices=2, memory=10.0)
    sol = cpsat(p, opts())
    assert sol.status == "infeasible" and "big" in sol.reason


def _stirling2(n: int, k: int) -> int:
    if n == k == 0:
        return 1
    if n == 0 or k == 0:
        return 0
    return k * _stirling2(n - 1, k) + _stirling2(n - 1, k - 1)


@pytest.mark.parametrize("n,k", [(4, 2), (5, 3), (6, 3), (6, 4)])
def test_canonical_placements_count_set_partitions(n: int, k: int) -> None:
    """Identical devices, no restrictions: placements up to relabelling = partitions of the nodes
    into at most k blocks."""
    p = make_problem([{"id": i, "time": 1, "out_bytes": 0, "param_bytes": 0} for i in range(n)], [], devices=k)
    assert sum(1 for _ in placements(p)) == sum(_stirling2(n, j) for j in range(1, k + 1))


def test_canonical_relabelling_keeps_makespan_and_respects_classes() -> None:
    nodes = [{"id": i, "time": 1 + i % 3, "out_bytes": 1, "param_bytes": 1} for i in range(6)]
    edges = [{"src": i, "dst": i + 1, "comm": 2} for i in range(5)]
    p = make_problem(nodes, edges, devices=4, memory=[10, 10, 20, 10])
    assert device_classes(p) == [[0, 1, 3], [2]]
    pl = np.array([3, 3, 2, 0, 1, 0])
    can = canonical_placement(p, pl)
    assert can.tolist() == [0, 0, 2, 1, 3, 1]
    assert evaluate(p, can).makespan == pytest.approx(evaluate(p, pl).makespan)


@pytest.mark.parametrize("ablation", [{"symmetry": False}, {"redundant": False}])
def test_ablations_keep_the_optimum(ablation: dict) -> None:
    for seed in range(6):
        p = rand_problem(seed)
        ref = brute(p, opts())
        sol = cpsat(p, opts(extra=ablation))
        assert sol.status == ref.status
        if ref.objective is not None:
            assert sol.objective == pytest.approx(ref.objective)
        sol = mip(p, opts(extra=ablation))
        assert sol.status == ref.status
        if ref.objective is not None:
            assert sol.objective == pytest.approx(ref.objective)


def test_methods_registered() -> None:
    table = methods()
    for name in ("cpsat", "mip", "brute"):
        assert table[name].kind == "exact"


def test_brute_refuses_large_instances() -> None:
    sol = brute(chain_problem(0, n=30), opts())
    assert sol.status == "unknown" and "too many" in sol.reason


def test_bound_is_valid_with_scaled_data() -> None:
    """Times that no round factor makes integral: the reported bound never exceeds the true
    (enumerated) optimum, and the objective is the evaluator's."""
    for seed in range(5):
        p = rand_problem(200 + seed)
        p.time = p.time * math.pi
        p.comm = p.comm * math.e
        ref = brute(p, opts())
        sol = cpsat(p, opts())
        if ref.status == "optimal":
            assert sol.lower_bound <= ref.objective * (1 + 1e-12)
            assert sol.objective == pytest.approx(ref.objective, rel=1e-7)
            assert sol.info["exact_data"] is False
            assert_honest(p, sol)


@pytest.mark.parametrize("seed", range(30))
def test_path_bound_never_exceeds_the_optimum(seed: int) -> None:
    from formulations.pathbound import path_lower_bound

    p = rand_problem(seed, mem_factor=[0.9, 1.2, 2.0][seed % 3] if seed % 2 else None)
    for model in ("static", "peak"):  # each model's bound against its own optimum (peak memory counts received copies)
        ref = brute(p, opts(memory_model=model))
        if ref.status == "optimal":
            assert path_lower_bound(p, model) <= ref.objective + 1e-9


def test_path_bound_counts_forced_transfers() -> None:
    """A 3-node chain where no two nodes fit together: both edges must be cut."""
    from formulations.pathbound import path_lower_bound

    nodes = [{"id": i, "time": 2, "out_bytes": 0, "param_bytes": 6} for i in range(3)]
    edges = [{"src": 0, "dst": 1, "comm": 5}, {"src": 1, "dst": 2, "comm": 1}]
    p = make_problem(nodes, edges, devices=3, memory=10.0)
    assert path_lower_bound(p) == pytest.approx(6 + 5 + 1)
    assert brute(p, opts()).objective == pytest.approx(12)
    roomy = p.with_devices(memory=12.0)  # 0 and 1 (or 1 and 2) may share: cut the cheap edge only
    assert path_lower_bound(roomy) == pytest.approx(6 + 1)
    assert brute(roomy, opts()).objective == pytest.approx(7)


def test_topo_split_is_contiguous_and_feasible() -> None:
    from formulations.warmstart import pull_order, topo_split

    p = chain_problem(4, n=80, k=4)
    sol = topo_split(p, SolveOptions())
    assert sol.placement is not None
    ev = evaluate(p, sol.placement)
    assert ev.feasible(p) and sol.objective == pytest.approx(ev.makespan)
    order = pull_order(p)
    pos = np.empty(p.n, dtype=np.int64)
    pos[order] = np.arange(p.n)
    assert np.all(pos[p.src] < pos[p.dst])
    assert any(np.all(np.diff(sol.placement[o]) >= 0) for o in (p.topo_order, order))


def test_reserve_keeps_memory_free() -> None:
    p = rand_problem(3, mem_factor=1.6)
    for method in (cpsat, mip, brute):
        sol = method(p, opts(reserve=0.25))
        if sol.placement is not None:
            used = evaluate(p, sol.placement).static_memory
            assert np.all(used <= p.memory * 0.75 + 1e-9), sol.method


def test_stop_request_returns_the_hint() -> None:
    p = chain_problem(5)
    hint = topo_fill(p, SolveOptions())
    o = opts(hint=hint, time_limit=60)
    o.stop.set()
    sol = cpsat(p, o)
    assert sol.status == "feasible" and sol.objective <= hint.objective + 1e-9
    assert_honest(p, sol)


def test_times_shorter_than_one_unit_keep_the_bound_valid_and_the_order() -> None:
    """A node far shorter than the time unit still occupies its device in the model (1 unit) and
    the bound is corrected for it: the optimum is found and proved."""
    nodes = [{"id": "a", "time": 3.3, "out_bytes": 0, "param_bytes": 1},
             {"id": "tiny", "time": 1e-12, "out_bytes": 0, "param_bytes": 1},
             {"id": "b", "time": math.pi, "out_bytes": 0, "param_bytes": 1},
             {"id": "c", "time": 2.7, "out_bytes": 0, "param_bytes": 1}]
    edges = [{"src": "a", "dst": "tiny", "comm": 0.1}, {"src": "tiny", "dst": "c", "comm": 0.1},
             {"src": "b", "dst": "c", "comm": math.e}]
    p = make_problem(nodes, edges, devices=2, memory=3.0)
    ref = brute(p, opts())
    sol = cpsat(p, opts())
    assert sol.info["exact_data"] is False and sol.info["bound_slack_units"] == 1
    assert sol.status == "optimal" and sol.objective == pytest.approx(ref.objective, rel=1e-9)
    assert sol.lower_bound <= ref.objective
    assert_honest(p, sol)


@pytest.mark.slow
def test_bert3_proved_optimal_with_warm_start() -> None:
    """The msr-fiddle BERT-3 latency graph is proved optimal (13 s here with 2 workers)."""
    from pathlib import Path

    from formulations.warmstart import topo_split
    from placement.formats.fiddle import read_fiddle

    path = Path(__file__).resolve().parents[2] / "shared/workloads/msr-fiddle/latency-inputs/OperatorGraphs/bert_l-3_inference.json"
    if not path.exists():
        pytest.fail("msr-fiddle workloads not found: the tests need ../shared beside the project")
    p = read_fiddle(path)
    hint = topo_split(p, SolveOptions())
    sol = cpsat(p, SolveOptions(time_limit=300, workers=2, hint=hint))
    assert sol.status == "optimal"
    assert sol.objective <= hint.objective
    assert_honest(p, sol)
