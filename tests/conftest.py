"""Shared fixtures: paths to the shipped data and to ../shared workloads, small random problems."""
from __future__ import annotations

import os

# The importer's memory tests compare a graph's peak with PyTorch's CPU allocator. On CPUs with
# AVX-512 FP16 (Sapphire Rapids) oneDNN's fp16 matmuls keep scratch copies that the allocator
# counts: kernel workspace, not tensors of the step, which the graph does not model. A GradScaler
# step measured 1.21 x its graph there and 1.01 x with oneDNN capped below that ISA, as on CPUs
# without it. Set before torch first runs oneDNN, so every CPU measures the step alone.
os.environ.setdefault("ONEDNN_MAX_CPU_ISA", "AVX512_CORE_BF16")

import random  # noqa: E402
from pathlib import Path

import numpy as np
import pytest

from placement.evaluator import check, evaluate
from placement.problem import Problem, make_problem
from placement.solution import Solution

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "data"
WORKLOADS = ROOT.parent / "shared" / "workloads" / "msr-fiddle"


def random_problem(seed: int, n: int, k: int, *, memory: float = float("inf"), edge_p: float = 0.35,
                   zero_time_p: float = 0.1, colocate_p: float = 0.0) -> Problem:
    """A random DAG (edges only from lower to higher index) with random costs."""
    rng = random.Random(seed)
    nodes = []
    for i in range(n):
        rec = {"id": i, "time": 0.0 if rng.random() < zero_time_p else rng.randint(1, 9),
               "out_bytes": rng.randint(0, 50), "param_bytes": rng.randint(0, 20)}
        if colocate_p and rng.random() < colocate_p:
            rec["colocate"] = rng.randint(0, 2)
        nodes.append(rec)
    edges = [{"src": u, "dst": v, "comm": rng.randint(0, 6)} for u in range(n) for v in range(u + 1, n) if rng.random() < edge_p]
    return make_problem(nodes, edges, devices=k, memory=memory, name=f"random{seed}")


@pytest.fixture
def workloads() -> Path:
    if not WORKLOADS.is_dir():
        pytest.fail(f"../shared/workloads/msr-fiddle not found at {WORKLOADS}: the tests need ../shared beside the project")
    return WORKLOADS


def assert_honest(problem: Problem, sol: Solution, memory_model: str = "static") -> None:
    """A returned schedule passes the evaluator's check in the memory model, its objective is the
    evaluator's makespan, its bound is below it, and 'optimal' means objective == bound."""
    if sol.placement is None:
        return
    ev = check(problem, sol.placement, sol.start, memory_model)
    assert sol.objective == pytest.approx(ev.makespan, rel=1e-12, abs=1e-12)
    assert sol.lower_bound is not None and sol.lower_bound <= sol.objective * (1 + 1e-9)
    if sol.status == "optimal":
        assert sol.objective == pytest.approx(sol.lower_bound, rel=1e-6)


def assert_fits_in_its_order(problem: Problem, sol: Solution) -> None:
    """A peak-model answer keeps each colocation group on one device, passes the evaluator's check
    within every capacity, and its own order, evaluated, fits with the makespan it claims."""
    for members in problem.groups:
        assert len(set(sol.placement[np.asarray(members)].tolist())) <= 1
    ev = check(problem, sol.placement, sol.start, "peak")
    assert float(np.max(ev.peak_memory / problem.memory)) <= 1 + 1e-12
    ordered = evaluate(problem, sol.placement, order=sol.order, memory_model="peak")
    assert ordered.makespan == pytest.approx(sol.objective) and ordered.feasible(problem)


def tiny_optimum(prob: Problem, memory_model: str) -> tuple[float] | None:
    """(optimal makespan,) of a tiny problem, or None when nothing fits: plain enumeration in the
    static model, the exact event-order search (idle allowed) in the peak model."""
    from formulations.bruteforce import brute, enumerate_best
    from placement.solution import SolveOptions

    if memory_model == "static":
        best, complete = enumerate_best(prob, memory_model)
        assert complete
        return None if best is None else (best[0],)
    ref = brute(prob, SolveOptions(memory_model="peak", time_limit=60))
    assert ref.status in ("optimal", "infeasible"), ref.reason
    return (ref.objective,) if ref.status == "optimal" else None


def filled_random(seed: int, memory_model: str, n: int, edge_p: float):
    """A random problem on 3 devices with colocation groups and a capacity that binds (60% of all
    bytes in the static model, all of them in the peak model), topo-fill's placement of it and the
    evaluator's schedule of that (which fits): a start for the searches' never-worse tests."""
    import numpy as np

    from heuristics.baselines import topo_fill
    from placement.evaluator import evaluate
    from placement.solution import SolveOptions

    base = random_problem(seed, n, 3, colocate_p=0.2, edge_p=edge_p)
    need = float((base.param_bytes + base.out_bytes).sum())
    prob = base.with_devices(3, memory=(0.6 if memory_model == "static" else 1.0) * need)
    sol = topo_fill(prob, SolveOptions(memory_model=memory_model))
    assert sol.placement is not None
    ev0 = evaluate(prob, sol.placement, memory_model=memory_model)
    assert ev0.feasible(prob)
    return prob, np.asarray(sol.placement), ev0


def skips_before_due(due, judge, outcomes) -> list[int]:
    """For each outcome in turn: how many times ``due()`` said no before it said yes, then
    ``judge(outcome)`` (refine's waits after repeated misses: batch moves, memory-aware rescues)."""
    skipped = []
    for outcome in outcomes:
        k = 0
        while not due():
            k += 1
        skipped.append(k)
        judge(outcome)
    return skipped


# Seeded exactness loops too long for the default suite: it runs a part of the seeds, the slow
# tests (`pytest -m slow`) all of them, so a full run still checks every seed.
part_or_all = pytest.mark.parametrize("share", ["part", pytest.param("all", marks=pytest.mark.slow)])


def share_of(share: str, whole: int, part: int) -> int:
    """How many seeds ``share`` runs: ``part`` of ``whole`` in the default suite, all in the slow one."""
    return whole if share == "all" else part


def scaled(minimum: int, count: int, whole: int) -> int:
    """A 'solved at least' threshold set for ``whole`` seeds, prorated to ``count`` (at least 1)."""
    return max(1, minimum * count // whole)


def with_slow(values, slow) -> list:
    """Parameter values for ``pytest.mark.parametrize``, those in ``slow`` marked to run only with the
    slow tests (the others keep the check in the default suite)."""
    return [pytest.param(v, marks=pytest.mark.slow) if v in slow else v for v in values]
