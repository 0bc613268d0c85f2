"""The memory-aware makespan bound (placement.memory_path_bound) never exceeds the optimum found by
brute force on tiny instances whose capacity binds, in the static and the peak model, nor the
proved optima of msr-fiddle graphs; and it is what the CLI's run reports as a bound."""
from __future__ import annotations

import random

import numpy as np
import pytest

from formulations.bruteforce import brute
from placement.bounds import lower_bounds
from placement.formats.fiddle import read_fiddle
from placement.memory_bounds import memory_lower_bound
from placement.memory_path_bound import memory_path_bound
from placement.problem import Problem, make_problem
from placement.solution import SolveOptions


def tiny(seed: int, memory_model: str) -> Problem:
    """5-7 nodes on a chain plus random edges, 2-3 devices, sometimes one colocation pair, and a
    capacity between the memory lower bound and 1.6 times it (it binds often)."""
    r = random.Random(seed)
    n, k = r.randint(5, 7), r.randint(2, 3)
    nodes = [{"id": i, "time": r.choice([0, 1, 2, 3, 5]), "out_bytes": r.randint(0, 6), "param_bytes": r.randint(0, 6)}
             for i in range(n)]
    if seed % 3 == 0:
        a = r.randrange(n - 1)
        nodes[a]["colocate"] = nodes[a + 1]["colocate"] = "g"
    edges = [{"src": i, "dst": i + 1, "comm": r.choice([1, 2, 4, 7])} for i in range(n - 1)]
    edges += [{"src": u, "dst": v, "comm": r.choice([0, 1, 3])} for v in range(2, n) for u in range(v - 1) if r.random() < 0.25]
    p = make_problem(nodes, edges, devices=k, memory=np.inf, name=f"t{seed}")
    floor = memory_lower_bound(p, memory_model)["best"]
    return p.with_devices(k, memory=float(floor * r.uniform(1.0, 1.6)))


@pytest.mark.parametrize("memory_model", ["static", "peak"])
def test_never_above_the_brute_force_optimum(memory_model: str) -> None:
    stronger = 0
    for seed in range(40):
        p = tiny(seed, memory_model)
        ref = brute(p, SolveOptions(memory_model=memory_model, time_limit=20))
        assert ref.status in ("optimal", "infeasible"), (seed, ref.reason)
        if ref.status != "optimal":
            continue
        bound = memory_path_bound(p, memory_model)
        assert bound <= ref.objective * (1 + 1e-9) + 1e-9, (seed, bound, ref.objective)
        stronger += bound > lower_bounds(p).best + 1e-9
    assert stronger >= 3  # memory forces transfers the other bounds do not see, so the check is not vacuous


def test_peak_working_set_forces_a_transfer_params_alone_would_not() -> None:
    """a -> b, params 4 each on devices of 10 bytes. Together they hold 8 bytes of params, within
    capacity, but while b runs its device also holds a's output and its own (3 + 3): 14 > 10, so
    a and b are apart and the edge's comm 5 is paid (the brute-force optimum)."""
    nodes = [{"id": x, "time": 2, "out_bytes": 3, "param_bytes": 4} for x in "ab"]
    p = make_problem(nodes, [{"src": "a", "dst": "b", "comm": 5}], devices=2, memory=10.0)
    ref = brute(p, SolveOptions(memory_model="peak"))
    assert ref.status == "optimal" and ref.objective == pytest.approx(9)
    assert memory_path_bound(p, "peak") == pytest.approx(9)
    assert lower_bounds(p).best == pytest.approx(4)  # critical path alone


@pytest.mark.parametrize("graph, optimum", [("bert_l-3_inference", 223.650), ("bert_l-6_inference", 252.143)])
def test_never_above_proved_optima_on_msr_fiddle(workloads, graph: str, optimum: float) -> None:
    """Optima proved by CP-SAT in the static model (bench/results_exact.md). The peak model holds
    less than the static one, so its optimum is at most the static one: the peak bound is checked
    against that too (a weaker check, no peak optimum being known)."""
    p = read_fiddle(workloads / "latency-inputs" / "OperatorGraphs" / f"{graph}.json")
    static, peak = memory_path_bound(p, "static"), memory_path_bound(p, "peak")
    assert static <= optimum * (1 + 1e-6)
    assert peak <= optimum * (1 + 1e-6)
    assert static > 3 * lower_bounds(p).critical_path  # memory forces the transfers: far above the critical path


def test_run_reports_the_memory_path_bound(workloads) -> None:
    from solvers.run import run

    p = read_fiddle(workloads / "latency-inputs" / "OperatorGraphs" / "bert_l-3_inference.json")
    res = run(p, "etf", SolveOptions(memory_model="static"))
    assert res.bounds["memory_path"] == pytest.approx(memory_path_bound(p, "static"))
    assert res.lower_bound >= res.bounds["memory_path"] - 1e-9 or res.lower_bound == pytest.approx(res.evaluation.makespan)


def test_a_stop_cuts_the_search_short_with_a_valid_bound() -> None:
    import threading

    nodes = [{"id": x, "time": 2, "out_bytes": 3, "param_bytes": 4} for x in "ab"]
    p = make_problem(nodes, [{"src": "a", "dst": "b", "comm": 5}], devices=2, memory=10.0)
    stop = threading.Event()
    stop.set()
    assert memory_path_bound(p, "peak", stop) == 0.0  # no path tried: the trivial bound
    assert memory_path_bound(p, "peak", threading.Event()) == pytest.approx(9)
