"""Property-based exactness guard (tests/guard.py): on random tiny instances, static and peak
memory, every method and option, no claim of the solver may be refuted by enumeration - every
"optimal" is the optimum, every "infeasible" has no feasible answer, every bound is at most the
optimum, every answer passes the evaluator with the evaluator's objective.

The default suite draws a few dozen (seed, case) pairs; the slow step draws many more (the counts
of the long seeded run are in bench/results_guard.md, made by bench/bench_guard.py)."""
from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.guard import CASES, MAKESPAN_CASES, OBJECTIVE_CASES, judge, makespan_optimum, tiny_problem

SEEDS = st.integers(min_value=0, max_value=2**31 - 1)
FAST = settings(max_examples=25, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
LONG = settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def refutations(seed: int, case) -> list[str]:
    problem = tiny_problem(seed, case.objective)
    return judge(problem, case).problems


@FAST
@given(seed=SEEDS, case=st.sampled_from(MAKESPAN_CASES))
def test_makespan_claims_survive_enumeration(seed, case):
    assert refutations(seed, case) == []


@pytest.mark.slow  # 9 s; test_every_case_on_a_fixed_instance keeps every case in the default suite
@FAST
@given(seed=SEEDS, case=st.sampled_from(OBJECTIVE_CASES))
def test_max_load_and_latency_claims_survive_enumeration(seed, case):
    assert refutations(seed, case) == []


@pytest.mark.parametrize("case", CASES, ids=str)
def test_every_case_on_a_fixed_instance(case):
    """Each method and option at least once per run, on an instance where memory binds."""
    assert refutations(7, case) == []


def test_the_guard_instances_are_not_trivial():
    """The generator must produce both feasible and infeasible instances, under both models, or
    the guard would prove little (counted over a fixed set of seeds)."""
    outcomes = {(mm, makespan_optimum(tiny_problem(s), mm) is None) for s in range(60) for mm in ("static", "peak")}
    assert outcomes == {("static", True), ("static", False), ("peak", True), ("peak", False)}


@pytest.mark.slow
@LONG
@given(seed=SEEDS, case=st.sampled_from(CASES))
def test_long_guard(seed, case):
    assert refutations(seed, case) == []
