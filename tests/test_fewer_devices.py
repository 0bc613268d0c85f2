"""fewer-devices (heuristics/fewer_devices.py): PARDNN (or other members) on K/2, K/4, ... devices, embedded.

Its answer is a K-device placement the evaluator accepts with the claimed makespan, equal to the
best of the members run by themselves on the smaller device count (devices from K' on unused);
under the peak model it never claims a fit the evaluator refutes, and skips a device count whose
memory lower bound is above the capacity; it stops when asked and is deterministic."""
from __future__ import annotations


import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from heuristics import fewer_devices as fd
from heuristics.portfolio import MEMBERS, ORDER, portfolio
from placement.evaluator import check, evaluate
from placement.generate import generate
from placement.memory_bounds import memory_lower_bound
from placement.problem import make_problem
from placement.solution import Solution, SolveOptions
from solvers.methods import get
from tests.conftest import random_problem


def _judged(problem, sol, model="static"):
    """The evaluator's verdict on an answer, its claimed makespan checked against it."""
    ev = evaluate(problem, sol.placement, order=sol.order, memory_model=model)
    assert sol.objective == pytest.approx(ev.makespan, rel=1e-12, abs=1e-12)
    check(problem, sol.placement, sol.start, model)  # the returned start times are a valid schedule
    np.testing.assert_allclose(sol.start, ev.start)
    return ev


def test_device_counts_halve_down_to_two():
    assert fd.device_counts(16) == [8, 4, 2]
    assert fd.device_counts(8) == [4, 2]
    assert fd.device_counts(5) == [2]
    assert fd.device_counts(3) == [] and fd.device_counts(2) == []


def test_equals_each_member_alone_on_fewer_devices_cnn():
    """On a generated CNN (K = 8) every sub-run's makespan is that member's own answer on
    ``with_devices(K')``, computed here independently; the answer is the smallest, on devices < K'."""
    p = generate("cnn", 600, seed=1, devices=8)
    sol = fd.fewer_devices(p, SolveOptions())
    assert sol.status == "heuristic" and sol.method == "fewer-devices"
    ev = _judged(p, sol)
    assert ev.feasible(p)
    own = {}
    for c in (4, 2):
        q = p.with_devices(c)
        for name in fd.DEFAULT_METHODS:
            alone = MEMBERS[name](q, SolveOptions())
            own[(c, name)] = alone.objective if alone.placement is not None else None
    got = {(r["devices"], r["method"]): r["makespan"] for r in sol.info["tried"]}
    assert got.keys() == own.keys()
    for key, value in own.items():
        assert got[key] == pytest.approx(value, rel=1e-12) if value is not None else got[key] is None
    best = min(v for v in own.values() if v is not None)
    assert sol.objective == pytest.approx(best, rel=1e-12)
    used = int(sol.info["devices"][-1]) + 1
    assert used in (2, 4) and set(np.unique(sol.placement).tolist()) <= set(range(used))


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 10_000), k=st.sampled_from([4, 6, 8]), colocate=st.booleans())
def test_embedded_answer_is_the_sub_answer_static(seed, k, colocate):
    """Random DAGs with colocation: the K-device answer is valid and its makespan equals ETF's,
    HEFT's, ... on the smaller count, run alone."""
    p = random_problem(seed, 12, k, memory=200.0, colocate_p=0.3 if colocate else 0.0)
    names = list(fd.METHODS)  # every method it can run, the list schedulers too
    sol = fd.fewer_devices(p, SolveOptions(extra={"fewer_device_counts": [2], "fewer_methods": names}))
    alone = [MEMBERS[name](p.with_devices(2), SolveOptions()) for name in names]
    fits = [a.objective for a in alone if a.placement is not None]
    if not fits:
        assert sol.placement is None and sol.status == "unknown"
        return
    ev = _judged(p, sol)
    assert ev.feasible(p)
    assert sol.objective == pytest.approx(min(fits), rel=1e-12)
    assert set(np.unique(sol.placement).tolist()) <= {0, 1}


@settings(max_examples=30, deadline=None)
@given(seed=st.integers(0, 10_000), cap=st.integers(20, 160))
def test_peak_never_claims_a_fit_the_evaluator_refutes(seed, cap):
    """Peak model, capacities from very tight to loose: an answer always fits by the evaluator in
    its own order; a device count whose peak memory lower bound exceeds the capacity is never run."""
    p = random_problem(seed, 12, 4, memory=float(cap))
    sol = fd.fewer_devices(p, SolveOptions(memory_model="peak", extra={"fewer_methods": list(fd.METHODS)}))
    for row in sol.info["tried"]:
        need = memory_lower_bound(p.with_devices(row["devices"]), "peak")["best"]
        assert (row["status"] == "skipped") == (need > cap)
    if sol.placement is None:
        assert sol.status == "unknown"
        return
    ev = _judged(p, sol, "peak")
    assert ev.feasible(p)
    assert float(ev.peak_memory.max()) <= cap * (1 + 1e-12)


def test_tight_peak_memory_skips_every_smaller_count():
    """A capacity below what two devices can hold (the memory lower bound for K' = 2) but enough for
    four: no sub-run, no answer, and the reason says why."""
    nodes = [{"id": i, "time": 1, "out_bytes": 0, "param_bytes": 10} for i in range(4)]
    p = make_problem(nodes, [], devices=4, memory=10.0)
    assert memory_lower_bound(p.with_devices(2), "peak")["best"] > 10.0
    sol = fd.fewer_devices(p, SolveOptions(memory_model="peak"))
    assert sol.placement is None and sol.status == "unknown"
    assert [r["status"] for r in sol.info["tried"]] == ["skipped"]
    assert "memory lower bound" in sol.info["tried"][0]["reason"]


def test_keeps_the_devices_with_the_most_memory():
    """Unequal devices: the two largest are kept (their capacities), the nodes go there only."""
    nodes = [{"id": i, "time": 1 + i % 3, "out_bytes": 1, "param_bytes": 1} for i in range(8)]
    edges = [{"src": i, "dst": i + 1, "comm": 1} for i in range(7)]
    p = make_problem(nodes, edges, devices=4, memory=[5.0, 40.0, 6.0, 40.0])
    assert fd.kept_devices(p, 2).tolist() == [1, 3]
    sol = fd.fewer_devices(p, SolveOptions())
    assert sol.info["devices"] == [1, 3]
    assert set(np.unique(sol.placement).tolist()) <= {1, 3}
    assert _judged(p, sol).feasible(p)


def test_a_node_bound_to_a_dropped_device_skips_that_count():
    nodes = [{"id": 0, "time": 1, "out_bytes": 1, "param_bytes": 0, "devices": [3]},
             {"id": 1, "time": 1, "out_bytes": 1, "param_bytes": 0}]
    p = make_problem(nodes, [{"src": 0, "dst": 1, "comm": 1}], devices=4)
    sol = fd.fewer_devices(p, SolveOptions())
    assert sol.placement is None
    assert "allowed devices" in sol.info["tried"][0]["reason"]


def test_stop_requested_runs_nothing():
    p = generate("cnn", 600, seed=1, devices=8)
    opts = SolveOptions()
    opts.stop.set()
    sol = fd.fewer_devices(p, opts)
    assert sol.placement is None and sol.status == "unknown"
    assert sol.info["tried"] and all(r["status"] == "skipped" for r in sol.info["tried"])


def test_a_sub_run_deaf_to_the_clock_is_stopped_at_the_limit(monkeypatch):
    """A member that returns only when its own options' stop is set (as the list schedulers do)
    is stopped by the time limit of fewer-devices; the runs after it are skipped."""
    calls = []

    def waits_for_stop(problem, opts):
        calls.append(problem.k)
        assert opts.stop.wait(30.0)  # set by the watcher once the parent's limit passed
        return Solution("waits", "unknown", reason="stopped")

    monkeypatch.setattr(fd, "METHODS", {"waits": waits_for_stop, "etf": fd.METHODS["etf"]})
    p = generate("cnn", 300, seed=1, devices=8)
    sol = fd.fewer_devices(p, SolveOptions(time_limit=0.2, extra={"fewer_methods": ["waits", "etf"]}))
    assert calls == [4]
    assert sol.placement is None
    assert [r["status"] for r in sol.info["tried"]] == ["unknown", "skipped", "skipped"]


def test_a_stop_request_reaches_a_running_sub_run(monkeypatch):
    """Ctrl-C while a member runs (no time limit): the member's own stop turns on."""
    outer = SolveOptions()

    def stops_outer_then_waits(problem, opts):
        outer.stop.set()
        assert opts.stop.wait(30.0)
        return Solution("waits", "unknown", reason="stopped")

    monkeypatch.setattr(fd, "METHODS", {"waits": stops_outer_then_waits})
    outer.extra["fewer_methods"] = ["waits"]
    sol = fd.fewer_devices(generate("cnn", 300, seed=1, devices=4), outer)
    assert sol.placement is None and [r["status"] for r in sol.info["tried"]] == ["unknown"]


def test_unknown_method_name_is_refused():
    with pytest.raises(ValueError, match="'nope'"):
        fd.fewer_devices(generate("cnn", 300, seed=1, devices=4), SolveOptions(extra={"fewer_methods": ["nope"]}))


def test_deterministic():
    p = generate("lstm", 500, seed=2, devices=8)
    a = fd.fewer_devices(p, SolveOptions())
    b = fd.fewer_devices(p, SolveOptions())
    assert a.objective == b.objective and np.array_equal(a.placement, b.placement)


def test_method_row_and_portfolio_member():
    assert get("fewer-devices").func is fd.fewer_devices
    assert ORDER[-1] == "fewer-devices"
    p = generate("cnn", 600, seed=1, devices=8)
    sol = portfolio(p, SolveOptions())
    row = next(m for m in sol.info["members"] if m["method"] == "fewer-devices")
    alone = fd.fewer_devices(p, SolveOptions())
    assert row["makespan"] == pytest.approx(alone.objective, rel=1e-12)
    assert sol.objective <= alone.objective
