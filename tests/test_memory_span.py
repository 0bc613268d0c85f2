"""mem-span (heuristics/memory_span.py): its sequences are topological, what it accepts is what the
evaluator measures on its own order, it answers where ETF does not, and it is deterministic."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from heuristics.memory_order import net_sequence
from heuristics.memory_span import PASSES, blend, fast_sequence, memory_span
from heuristics.min_memory import place_along
from heuristics.portfolio import MEMBER_SHARE, PEAK_TIGHT_ORDER
from placement.evaluator import check, evaluate
from placement.generate import generate
from placement.memory_bounds import memory_lower_bound
from placement.solution import SolveOptions
from solvers.methods import get
from solvers.run import run
from tests.conftest import random_problem


def _topological(p, seq: np.ndarray) -> bool:
    pos = np.empty(p.n, dtype=np.int64)
    pos[seq] = np.arange(p.n)
    return sorted(seq.tolist()) == list(range(p.n)) and bool(np.all(pos[p.src] < pos[p.dst]))


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 10_000), alpha=st.floats(0.0, 1.0))
def test_every_blend_is_a_topological_order(seed, alpha):
    p = random_problem(seed, 18, 2)
    fast = fast_sequence(p)
    light = net_sequence(p)
    assert _topological(p, fast) and _topological(p, light)
    assert _topological(p, blend(p, fast, light, alpha))


def test_blend_ends_are_its_two_orders():
    p = random_problem(5, 25, 3)
    fast, light = fast_sequence(p), net_sequence(p)
    assert blend(p, fast, light, 0.0).tolist() == fast.tolist()
    assert blend(p, fast, light, 1.0).tolist() == light.tolist()


@pytest.mark.parametrize("seed", range(10))
def test_accepted_peak_is_the_evaluators_on_its_own_order(seed):
    p0 = random_problem(seed, 16, 2 + seed % 3, colocate_p=0.3 if seed % 2 else 0.0)
    p = p0.with_devices(p0.k, 1.4 * memory_lower_bound(p0, "peak")["best"])
    fast, light = fast_sequence(p), net_sequence(p)
    for alpha, level in PASSES:
        got = place_along(p, blend(p, fast, light, alpha), level, by_area=True, ratchet=True)
        ev = evaluate(p, got.placement, order=got.order, memory_model="peak")
        assert np.allclose(got.peak, ev.peak_memory, rtol=1e-12, atol=1e-9)
    sol = memory_span(p, SolveOptions(memory_model="peak"))
    if sol.placement is not None:
        ev = check(p, sol.placement, sol.start, "peak")  # the reported schedule is valid and fits
        assert ev.makespan == pytest.approx(sol.objective)
        assert float(np.max(ev.peak_memory / p.memory)) <= 1 + 1e-12
        if sol.order is not None:
            own = evaluate(p, sol.placement, order=sol.order, memory_model="peak")
            assert np.allclose(sol.info["accepted_peak"], own.peak_memory, rtol=1e-12, atol=1e-9)
        assert sol.objective == pytest.approx(min(r["makespan"] for r in sol.info["passes"] if r["fits"])) or sol.info["fifo"]


def test_answers_where_etf_and_heft_do_not():
    """A generated 157-node transformer training graph, K = 2, at 1.2 x the memory lower bound:
    ETF and HEFT (live bytes tracked over their schedules) leave a node with no device; mem-span's
    schedule fits, as the evaluator checks."""
    p0 = generate("transformer", 150, seed=0, devices=2, memory_fraction=None)
    p = p0.with_devices(2, 1.2 * memory_lower_bound(p0, "peak")["best"])
    for name in ("etf", "heft"):
        assert not run(p, name, SolveOptions(memory_model="peak")).feasible, name
    res = run(p, "mem-span", SolveOptions(memory_model="peak"))
    assert res.feasible
    ev = check(p, res.solution.placement, res.evaluation.start, "peak")
    assert float(np.max(ev.peak_memory / p.memory)) <= 1 + 1e-12


def test_deterministic_and_peak_only():
    p0 = random_problem(3, 30, 3)
    p = p0.with_devices(3, 1.5 * memory_lower_bound(p0, "peak")["best"])
    a = memory_span(p, SolveOptions(memory_model="peak", seed=1))
    b = memory_span(p, SolveOptions(memory_model="peak", seed=2))
    assert a.status == b.status and a.objective == b.objective and a.info["passes"] == [
        {**r, "seconds": a.info["passes"][i]["seconds"]} for i, r in enumerate(b.info["passes"])]
    assert (a.placement is None and b.placement is None) or np.array_equal(a.placement, b.placement)
    static = memory_span(p, SolveOptions(memory_model="static"))
    assert static.placement is None and "peak" in static.reason
    unlimited = memory_span(p0, SolveOptions(memory_model="peak"))
    assert unlimited.status == "heuristic" and len(unlimited.info["passes"]) == 1


def test_in_the_method_table_and_the_tight_portfolio():
    assert get("mem-span").func is memory_span
    assert PEAK_TIGHT_ORDER.index("min-memory") < PEAK_TIGHT_ORDER.index("mem-span") < PEAK_TIGHT_ORDER.index("etf")
    assert 0 < MEMBER_SHARE["mem-span"] < 1
