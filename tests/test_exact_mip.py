"""The MIP with the peak memory model (formulations/mip.py + mip_peak.py) against CP-SAT and the
brute-force enumerator on tiny random instances whose capacity binds, plus hand-made cases where
the peak model must differ from static memory and where only the peak model proves infeasibility."""
from __future__ import annotations

import functools
import random

import pytest

from formulations.bruteforce import brute
from formulations.cpsat import cpsat
from formulations.mip import mip
from placement.evaluator import check
from placement.problem import Problem, make_problem
from placement.solution import SolveOptions
from tests.conftest import assert_honest, with_slow

SQUEEZES = (0.95, 0.9, 0.85, 0.8, 0.7, 0.6)


def opts(**kw) -> SolveOptions:
    kw.setdefault("time_limit", 60)
    kw.setdefault("workers", 1)
    return SolveOptions(**kw)


def tiny(seed: int, *, frac: bool = False) -> Problem:
    """5-8 nodes, 2-3 devices, random DAG; zero-time nodes, outputs larger than params (so the
    lifetimes matter), sometimes a colocated pair and a pinned node; memory unlimited for now."""
    r = random.Random(seed)
    n, k = r.randint(5, 8), r.randint(2, 3)
    nodes = []
    for i in range(n):
        t = r.choice([0, 1, 2, 3, 5]) + (round(r.random(), 3) if frac else 0)
        nodes.append({"id": i, "time": t, "out_bytes": r.randint(0, 6), "param_bytes": r.randint(0, 3)})
    if r.random() < 0.3:
        a, b = r.sample(range(n), 2)
        nodes[a]["colocate"] = nodes[b]["colocate"] = "g"
    if r.random() < 0.3:
        nodes[r.randrange(n)]["devices"] = [0]
    edges = [{"src": u, "dst": v, "comm": r.choice([0, 1, 2, 4]) + (round(r.random(), 3) if frac else 0)}
             for v in range(1, n) for u in range(v) if r.random() < 0.4]
    return make_problem(nodes, edges, devices=k, memory=1e6, name=f"t{seed}")


@functools.lru_cache(maxsize=None)
def binding_instance(seed: int, frac: bool = False) -> tuple[Problem, float, bool]:
    """(instance, unconstrained optimum, binds): the capacity is the largest of SQUEEZES times the
    peak of CP-SAT's unconstrained optimal schedule for which CP-SAT's constrained optimum is
    worse (the memory binds); if none binds before CP-SAT proves infeasibility, the last feasible
    squeeze (or the first one when even that is infeasible: then the test checks infeasibility)."""
    free = tiny(seed, frac=frac)
    sol = cpsat(free, opts(memory_model="peak", seed=seed))
    assert sol.status == "optimal"
    peak = check(free, sol.placement, sol.start, "peak").peak_memory.max()
    chosen = None
    for sq in SQUEEZES:
        p = free.with_devices(memory=float(max(int(peak * sq), 1)))
        got = cpsat(p, opts(memory_model="peak", seed=seed))
        if got.status == "infeasible":
            break
        chosen = p
        if got.status == "optimal" and got.objective > sol.objective + 1e-9:
            return p, sol.objective, True
    if chosen is None:
        chosen = free.with_devices(memory=float(max(int(peak * SQUEEZES[0]), 1)))
    return chosen, sol.objective, False


@pytest.mark.parametrize("seed", with_slow(range(14), {12, 13}))  # 12: 5 s
def test_mip_peak_optimum_equals_cpsat_and_beats_enumeration(seed: int) -> None:
    p, _, _ = binding_instance(seed)
    backend = "SCIP" if seed % 3 == 0 else "HIGHS"
    sol = mip(p, opts(memory_model="peak", seed=seed, extra={"mip_solver": backend}))
    ref = cpsat(p, opts(memory_model="peak", seed=seed))
    enum = brute(p, opts(memory_model="peak"))
    assert sol.status == ref.status, (sol.reason, ref.reason)
    assert_honest(p, sol, "peak")
    if ref.status == "optimal":
        assert sol.objective == pytest.approx(ref.objective, abs=1e-6)
    if enum.objective is not None:
        assert sol.objective is not None and sol.objective <= enum.objective + 1e-9
    if sol.status == "infeasible":
        assert enum.objective is None


def test_memory_binds_on_most_random_instances() -> None:
    """The instances above are not vacuous: on most of them the capacity changes the optimum."""
    binds = sum(binding_instance(seed)[2] for seed in range(14))
    assert binds >= 8


@pytest.mark.parametrize("seed", range(200, 204))
def test_mip_peak_fractional_data(seed: int) -> None:
    """Non-integral times and comm: the solver's float times are snapped before the check, and the
    MIP's optimum is never worse than the best enumerated semi-active schedule."""
    p, _, _ = binding_instance(seed, frac=True)
    sol = mip(p, opts(memory_model="peak", seed=seed, extra={"mip_solver": "HIGHS"}))
    enum = brute(p, opts(memory_model="peak"))
    assert_honest(p, sol, "peak")
    if enum.objective is not None:
        assert sol.status == "optimal"
        assert sol.objective <= enum.objective + 1e-9


def chain(cap: float) -> Problem:
    """a -> b -> c, each 1 time unit and 5 output bytes, comm 10, two devices of ``cap`` bytes."""
    nodes = [{"id": v, "time": 1, "out_bytes": 5, "param_bytes": 0} for v in "abc"]
    edges = [{"src": "a", "dst": "b", "comm": 10}, {"src": "b", "dst": "c", "comm": 10}]
    return make_problem(nodes, edges, devices=2, memory=cap)


def test_peak_allows_a_better_makespan_than_static() -> None:
    """With 10 bytes per device, static memory (15 bytes for the chain) forces a split and a 10-unit
    transfer (1 + 10 + 1 + 1 = 13); in the peak model at most two 5-byte outputs are alive at
    once, so one device runs the chain in 3. A MIP that used static memory for peak would answer 13."""
    p = chain(10.0)
    static = mip(p, opts())
    assert static.status == "optimal" and static.objective == pytest.approx(13.0)
    assert static.objective == pytest.approx(brute(p, opts()).objective)
    peak = mip(p, opts(memory_model="peak"))
    assert peak.status == "optimal" and peak.objective == pytest.approx(3.0)
    assert_honest(p, peak, "peak")
    assert len(set(peak.placement.tolist())) == 1


def test_peak_infeasibility_only_the_exact_model_can_prove() -> None:
    """c consumes a and b (6 bytes each): while c runs both outputs are alive on c's device, 12 >
    11 bytes, whatever the placement. Every node fits alone, so only the model proves it. Same for
    the chain with 9 bytes: whichever device runs b holds a's output and b's own (10 bytes)."""
    p = chain(9.0)
    sol = mip(p, opts(memory_model="peak"))
    assert sol.status == "infeasible" and brute(p, opts(memory_model="peak")).objective is None
    nodes = [{"id": "a", "time": 2, "out_bytes": 6, "param_bytes": 0},
             {"id": "b", "time": 2, "out_bytes": 6, "param_bytes": 0},
             {"id": "c", "time": 1, "out_bytes": 0, "param_bytes": 0}]
    edges = [{"src": "a", "dst": "c", "comm": 1}, {"src": "b", "dst": "c", "comm": 1}]
    p = make_problem(nodes, edges, devices=2, memory=11.0)
    sol = mip(p, opts(memory_model="peak"))
    assert sol.status == "infeasible" and "peak" in sol.reason
    assert brute(p, opts(memory_model="peak")).objective is None
    roomy = mip(p.with_devices(memory=12.0), opts(memory_model="peak"))
    assert roomy.status == "optimal"
    assert_honest(p.with_devices(memory=12.0), roomy, "peak")


def test_zero_time_nodes_and_remote_outputs() -> None:
    """A zero-time node's own output is never held (its run interval is empty), and an output
    consumed on another device is held there from the producer's finish: the MIP's answer agrees
    with the evaluator and CP-SAT on a case exercising both."""
    nodes = [{"id": "a", "time": 2, "out_bytes": 4, "param_bytes": 1},
             {"id": "z", "time": 0, "out_bytes": 7, "param_bytes": 0},
             {"id": "b", "time": 3, "out_bytes": 3, "param_bytes": 1},
             {"id": "c", "time": 2, "out_bytes": 2, "param_bytes": 0},
             {"id": "d", "time": 1, "out_bytes": 0, "param_bytes": 0}]
    edges = [{"src": "a", "dst": "z", "comm": 1}, {"src": "a", "dst": "b", "comm": 2},
             {"src": "a", "dst": "c", "comm": 2}, {"src": "b", "dst": "d", "comm": 1},
             {"src": "c", "dst": "d", "comm": 1}]
    for cap in (8.0, 9.0, 10.0, 12.0):
        p = make_problem(nodes, edges, devices=2, memory=cap)
        sol = mip(p, opts(memory_model="peak"))
        ref = cpsat(p, opts(memory_model="peak"))
        assert sol.status == ref.status, cap
        if ref.status == "optimal":
            assert sol.objective == pytest.approx(ref.objective), cap
            assert_honest(p, sol, "peak")


def test_peak_hint_is_used_and_never_lost() -> None:
    """A feasible hint is returned when the solver is stopped at once (the answer is never worse
    than the hint), and the answer's status is honest; with both backends."""
    p, _, _ = binding_instance(5)
    best = cpsat(p, opts(memory_model="peak"))
    if best.placement is None:
        pytest.skip("instance infeasible")
    for backend in ("SCIP", "HIGHS"):  # HiGHS once segfaulted on a hint
        sol = mip(p, opts(memory_model="peak", hint=best, time_limit=0.05, extra={"mip_solver": backend}))
        assert sol.placement is not None
        assert sol.objective <= best.objective + 1e-9
        assert_honest(p, sol, "peak")


def test_zero_capacity_device_is_left_empty() -> None:
    """A device of 0 bytes can only hold nodes that hold nothing: here none, so all go to the other."""
    p = chain(10.0).with_devices(memory=[10.0, 0.0])
    sol = mip(p, opts(memory_model="peak"))
    assert sol.status == "optimal" and sol.objective == pytest.approx(3.0)
    assert set(sol.placement.tolist()) == {0}
    assert_honest(p, sol, "peak")
