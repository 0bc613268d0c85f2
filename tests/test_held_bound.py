"""The held-tensor relaxation bound (formulations/held_bound.py) against enumeration: on tiny
training-like graphs (chains and chains with a skip connection, peak model, capacities from 40%
of the one-device peak) it never exceeds the enumerated optimum, says "infeasible" only when no
placement has a schedule within capacity, and is stronger than the path bound on some of them;
CP-SAT with it still proves the enumerated optimum."""
from __future__ import annotations

import functools
import math
import random

import numpy as np
import pytest

from formulations.bruteforce import placements
from formulations.cpsat import cpsat
from formulations.held_bound import held_knapsacks_feasible, held_memory_bound, held_relaxation_bound
from formulations.pathbound import path_lower_bound
from formulations.peak_search import best_schedule_bb
from placement.evaluator import evaluate
from placement.problem import make_problem
from placement.solution import SolveOptions
from tests.test_saved_bytes import training_chain


def skip_training_graph(seed: int):
    """Forward layers f0..f{L-1} with a skip edge f0 -> f{L-1} (a residual), a loss, backward
    layers colocated with their forward layer; each backward layer reads its layer's input
    activation; fractional times and comms half the time (no round factor: floored data)."""
    r = random.Random(1000 + seed)
    layers, k = r.randint(3, 4), r.choice([2, 2, 3])
    frac = r.choice([0.0, 0.0, 1 / 3])
    nodes, edges = [], []
    for i in range(layers):
        nodes.append({"id": f"f{i}", "time": r.randint(1, 4) + frac, "out_bytes": r.randint(1, 9),
                      "param_bytes": r.randint(0, 3), "colocate": f"L{i}"})
        if i:
            edges.append({"src": f"f{i - 1}", "dst": f"f{i}", "comm": r.randint(0, 3) + frac})
    edges.append({"src": "f0", "dst": "f2", "comm": r.randint(0, 3)})
    nodes.append({"id": "loss", "time": 1, "out_bytes": r.randint(0, 2), "param_bytes": 0})
    edges.append({"src": f"f{layers - 1}", "dst": "loss", "comm": r.randint(0, 2)})
    for i in reversed(range(layers)):
        nodes.append({"id": f"b{i}", "time": r.randint(1, 4), "out_bytes": r.randint(0, 6), "param_bytes": 0,
                      "colocate": f"L{i}"})
        src = "loss" if i == layers - 1 else f"b{i + 1}"
        edges.append({"src": src, "dst": f"b{i}", "comm": r.randint(0, 3) + frac})
        if i:
            edges.append({"src": f"f{i - 1}", "dst": f"b{i}", "comm": r.randint(0, 3)})
    one = make_problem(nodes, edges, devices=1, memory=float("inf"))
    peak = float(evaluate(one, np.zeros(one.n, dtype=np.int64), memory_model="peak").peak_memory.max())
    return make_problem(nodes, edges, devices=k, memory=float(max(1, round(r.uniform(0.4, 1.0) * peak))),
                        name=f"skip{seed}")


INSTANCES = [("chain", s) for s in range(30)] + [("skip", s) for s in range(40)]


@functools.lru_cache(maxsize=None)
def instance(kind: str, seed: int):
    return training_chain(seed) if kind == "chain" else skip_training_graph(seed)


@functools.lru_cache(maxsize=None)
def optimum(p) -> float | None:
    got, complete = best_schedule_bb(p, placements(p), "peak")
    assert complete
    return None if got is None else got[0]


def opts(seconds: float = 10.0, **extra) -> SolveOptions:
    return SolveOptions(memory_model="peak", time_limit=seconds, workers=1, extra=dict(extra))


@pytest.mark.parametrize("kind,seed", INSTANCES)
def test_held_bound_never_exceeds_the_enumerated_optimum(kind, seed):
    p = instance(kind, seed)
    best = optimum(p)
    hb = held_relaxation_bound(p, opts(), 10.0)
    assert hb.proved or hb.knapsacks == 0  # tiny: solved to optimality, or skipped (no knapsack can bind)
    if best is None:
        return  # any bound (also inf) is valid for an infeasible problem
    assert hb.bound <= best * (1 + 1e-9) + 1e-9
    assert math.isfinite(hb.bound)


def test_held_bound_is_stronger_than_the_path_bound_somewhere():
    """Else the test above would check nothing new: on some of the instances the relaxation
    reaches the optimum where the path bound does not, and on some it proves infeasibility."""
    stronger = tight = infeasible = 0
    for kind, seed in INSTANCES:
        p = instance(kind, seed)
        best = optimum(p)
        hb = held_relaxation_bound(p, opts(), 10.0)
        if best is None:
            infeasible += hb.bound == math.inf
            continue
        pb = path_lower_bound(p, "peak")
        stronger += hb.bound > pb + 1e-6
        tight += hb.bound >= best * (1 - 1e-6) and pb < best * (1 - 1e-6)
    assert stronger >= 3 and tight >= 3, (stronger, tight)
    assert infeasible >= 5, infeasible


@pytest.mark.parametrize("kind,seed", INSTANCES[::4])
def test_cpsat_with_the_held_bound_proves_the_optimum(kind, seed):
    p = instance(kind, seed)
    best = optimum(p)
    sol = cpsat(p, opts(4.0))
    if best is None:
        assert sol.status == "infeasible"
        return
    assert sol.lower_bound <= best * (1 + 1e-9) + 1e-9
    assert sol.objective >= best * (1 - 1e-9)
    if sol.status == "optimal":
        assert sol.objective == pytest.approx(best, rel=1e-6)
    integral = np.all(p.time == np.round(p.time)) and np.all(p.comm == np.round(p.comm))
    if integral:  # floored data (thirds) may leave the relaxed model's answers unrepaired: then only honesty
        assert sol.status == "optimal"


def test_cpsat_proves_a_hint_optimal_by_the_held_bound_alone():
    """When the hint meets the relaxation's bound the full model is never built."""
    for kind, seed in INSTANCES:
        p = instance(kind, seed)
        best = optimum(p)
        if best is None or path_lower_bound(p, "peak") >= best * (1 - 1e-6):
            continue
        first = cpsat(p, opts(held_bound=False))
        hinted = cpsat(p, SolveOptions(memory_model="peak", time_limit=10, workers=1, hint=first))
        if hinted.info.get("proved_by") == "held-tensor relaxation":
            assert hinted.status == "optimal" and hinted.objective == pytest.approx(best, rel=1e-6)
            return
    pytest.fail("no instance where the held bound alone proves the hint optimal")


def test_off_switch_keeps_the_optimum():
    p = training_chain(3)
    best = optimum(p)
    sol = cpsat(p, opts(held_bound=False))
    assert "held_bound" not in sol.info
    if best is None:
        assert sol.status == "infeasible"
    else:
        assert sol.status == "optimal" and sol.objective == pytest.approx(best)


@pytest.mark.parametrize("kind,seed", INSTANCES)
def test_held_knapsacks_say_no_placement_fits_only_when_enumeration_agrees(kind, seed):
    """The cheap check auto runs before its warm start (solvers/run.py held_check): False
    only where no placement has a schedule within capacity; and where the full relaxation proves
    infeasibility, the knapsacks alone do too (no times are needed for it)."""
    p = instance(kind, seed)
    got = held_knapsacks_feasible(p, opts(), 10.0)
    assert got is not None  # tiny: decided
    if not got:
        assert optimum(p) is None
    if held_relaxation_bound(p, opts(), 10.0).bound == math.inf:
        assert got is False


def test_held_knapsacks_catch_some_infeasible_instances():
    """Else the test above checks nothing: some instances are proved infeasible by the check."""
    caught = sum(held_knapsacks_feasible(instance(kind, seed), opts(), 10.0) is False for kind, seed in INSTANCES)
    assert caught >= 5, caught


def test_auto_answers_infeasible_at_once_where_no_placement_meets_the_knapsacks():
    """Before, auto searched its whole time limit for a placement that cannot exist and answered
    unknown (an imported WGAN-GP at 1.3 x its memory lower bound). Now it says infeasible, with
    the reason, before its warm start, on an instance enumeration proves infeasible."""
    from placement.memory_bounds import memory_lower_bound
    from solvers.run import run

    for kind, seed in INSTANCES:
        p = instance(kind, seed)
        if held_knapsacks_feasible(p, opts(), 10.0) is False and memory_infeasible_by_bound(p) is False:
            assert optimum(p) is None
            res = run(p, "auto", SolveOptions(memory_model="peak", time_limit=60))
            assert res.status == "infeasible" and "held-tensor knapsacks" in res.reason
            assert res.history == []  # proved before any phase ran, not by a search that ran out
            # the report's memory lower bound, raised by the knapsacks, is still a capacity nothing fits
            top = res.memory_bound["best"]
            assert top >= memory_lower_bound(p, "peak")["best"]
            assert optimum(p.with_devices(p.k, [top] * p.k)) is None
            return
    pytest.fail("no instance that only the knapsacks prove infeasible")


def memory_infeasible_by_bound(p) -> bool:
    """Whether the simpler proofs (the memory lower bound) already say no placement fits."""
    from placement.bounds import infeasibility
    from placement.memory_bounds import memory_lower_bound
    from solvers.run import memory_infeasibility

    return bool(infeasibility(p, "peak") or memory_infeasibility(p, memory_lower_bound(p, "peak")))


def test_held_memory_bound_is_a_capacity_no_placement_fits():
    """The frontier's lowest capacity under the peak model (solvers/frontier.py): at the bound
    itself enumeration finds no placement with a schedule within it, so every smaller capacity
    is too small as well; and it rises above placement/memory_bounds.py's bound somewhere."""
    from placement.memory_bounds import memory_lower_bound

    raised = 0
    for kind, seed in INSTANCES[::2]:
        p = instance(kind, seed)
        low = float(memory_lower_bound(p, "peak")["best"])
        one = p.with_devices(1, float("inf"))
        high = float(evaluate(one, np.zeros(one.n, dtype=np.int64), memory_model="peak").peak_memory.max())
        got = held_memory_bound(p, low, high, opts(), 10.0)
        assert low <= got < high
        if got > low:
            raised += 1
            assert optimum(p.with_devices(p.k, [got] * p.k)) is None, (kind, seed, low, got)
    assert raised >= 3, raised


def test_a_feasible_runs_report_carries_the_knapsacks_memory_bound_and_it_is_valid():
    """Where some placement fits, auto's report still raises its memory lower bound by the
    knapsacks' bisection (solvers/run.py held_check); enumeration finds nothing that fits at that
    bound on every instance where it was raised, and it was raised on some."""
    from placement.memory_bounds import memory_lower_bound
    from solvers.run import run

    raised = 0
    for kind, seed in INSTANCES:
        p = instance(kind, seed)
        if optimum(p) is None:
            continue
        res = run(p, "auto", SolveOptions(memory_model="peak", time_limit=600))  # the report's share: 3 s (tiny: proved in far less)
        assert res.feasible
        top = res.memory_bound["best"]
        assert top <= float(p.memory.max())  # a placement fits the capacity itself
        if "held_knapsacks" in res.memory_bound:
            raised += 1
            assert top > memory_lower_bound(p, "peak")["best"]
            assert optimum(p.with_devices(p.k, [top] * p.k)) is None, (kind, seed, top)
    assert raised >= 2, raised
