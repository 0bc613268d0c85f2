"""mem-repair (heuristics/memory_repair.py): what it answers fits (the evaluator's peak on its own
order), it repairs a hand-built fork whose fast placement overflows to the enumerated optimum, it
leaves a fitting fast schedule alone, it stops when asked, and it is deterministic."""
from __future__ import annotations

import threading

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from heuristics.band_repair import band_repair
from heuristics.memory_repair import fast_schedule, memory_repair, repair
from heuristics.peak_holders import device_orders
from heuristics.portfolio import MEMBER_SHARE, PEAK_TIGHT_ORDER, REPAIRS, member_order
from placement.evaluator import check, evaluate
from placement.memory_bounds import memory_lower_bound
from placement.problem import make_problem
from placement.solution import SolveOptions
from solvers.methods import get
from tests.conftest import assert_fits_in_its_order, random_problem
from tests.guard import makespan_optimum


def fork(capacity: float, comm: float, tail: bool) -> object:
    """A block input x (10 bytes) read by two parallel paths p1, p2 joined at j (a loss), and by
    the two paths' weight gradients g1, g2 (which need x and j's output), on 2 devices; ``tail``
    adds an update after each gradient. A fast schedule runs the paths apart, and the device of
    one gradient then holds a copy of x until the backward pass: 13 bytes on each device."""
    ops = {"x": (1, 10), "p1": (4, 1), "p2": (4, 1), "j": (1, 1), "g1": (2, 1), "g2": (2, 1)}
    edges = [("x", "p1"), ("x", "p2"), ("p1", "j"), ("p2", "j"), ("j", "g1"), ("j", "g2"), ("x", "g1"), ("x", "g2")]
    if tail:
        ops.update(w1=(1, 0), w2=(1, 0))
        edges += [("g1", "w1"), ("g2", "w2")]
    nodes = [{"id": name, "time": t, "out_bytes": b, "param_bytes": 0} for name, (t, b) in ops.items()]
    return make_problem(nodes, [{"src": a, "dst": b, "comm": comm} for a, b in edges], devices=2, memory=capacity,
                        name="fork")


@pytest.mark.parametrize("comm", [0.5, 1.0, 2.0])
@pytest.mark.parametrize("tail", [False, True])
def test_repairs_the_fork_to_the_enumerated_optimum(comm, tail):
    p = fork(12.0, comm, tail)
    pl, seq = fast_schedule(p)
    fast = evaluate(p, pl, order=device_orders(pl, seq, p.k), memory_model="peak")
    assert fast.peak_memory.tolist() == [12.0, 13.0]  # the fast schedule overflows (by hand: x + p1 + j, x + p2 + ...)
    assert not evaluate(p, pl, memory_model="peak").feasible(p)  # in FIFO order too
    best = makespan_optimum(p, "peak")  # enumeration over every placement and schedule
    assert best is not None and best > fast.makespan
    sol = memory_repair(p, SolveOptions(memory_model="peak"))
    assert sol.status == "heuristic"
    ev = check(p, sol.placement, sol.start, "peak")
    assert ev.feasible(p) and ev.makespan == pytest.approx(sol.objective)
    assert sol.objective == pytest.approx(best)  # the optimum itself: no valid answer is below it


def test_a_fitting_fast_schedule_is_left_alone():
    p = fork(13.0, 1.0, False)
    pl, seq = fast_schedule(p)
    sol = memory_repair(p, SolveOptions(memory_model="peak"))
    assert sol.info["moved"] == 0 and np.array_equal(sol.placement, pl)
    assert sol.objective == evaluate(p, pl, order=device_orders(pl, seq, p.k), memory_model="peak").makespan


def test_nothing_fits_below_the_enumerated_minimum():
    p = fork(11.0, 1.0, False)
    assert makespan_optimum(p, "peak") is None
    sol = memory_repair(p, SolveOptions(memory_model="peak"))
    assert sol.placement is None and sol.status == "unknown" and "fitted" in sol.reason


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 10_000), ratio=st.floats(1.0, 2.5), k=st.integers(2, 4), coloc=st.booleans())
def test_never_answers_over_capacity_and_reports_the_evaluators_peak(seed, ratio, k, coloc):
    p0 = random_problem(seed, 18, k, colocate_p=0.3 if coloc else 0.0)
    p = p0.with_devices(k, ratio * memory_lower_bound(p0, "peak")["best"])
    pl, seq = fast_schedule(p)
    rep = repair(p, pl, seq)
    own = evaluate(p, rep.placement, order=rep.order, memory_model="peak")
    assert np.allclose(rep.evaluation.peak_memory, own.peak_memory) and rep.evaluation.makespan == own.makespan
    sol = memory_repair(p, SolveOptions(memory_model="peak"))
    if sol.placement is None:
        assert sol.status == "unknown"
        return
    assert_fits_in_its_order(p, sol)  # colocation kept, within capacity, its claimed makespan


def test_deterministic():
    p0 = generate_cnn()
    p = p0.with_devices(p0.k, 1.3 * memory_lower_bound(p0, "peak")["best"])
    a = memory_repair(p, SolveOptions(memory_model="peak", seed=1))
    b = memory_repair(p, SolveOptions(memory_model="peak", seed=2))
    assert a.status == b.status and a.objective == b.objective
    assert [{k: v for k, v in s.items() if k != "seconds"} for s in a.info["steps"]] == \
        [{k: v for k, v in s.items() if k != "seconds"} for s in b.info["steps"]]
    assert (a.placement is None and b.placement is None) or np.array_equal(a.placement, b.placement)


def generate_cnn():
    from placement.generate import generate
    return generate("cnn", 400, seed=0, devices=4, memory_fraction=None)


@pytest.mark.parametrize("member, ratio", [(memory_repair, 1.3), (band_repair, 1.5)], ids=["mem-repair", "band-repair"])
def test_stops_when_asked_and_is_peak_only(member, ratio):
    p0 = generate_cnn()
    p = p0.with_devices(p0.k, ratio * memory_lower_bound(p0, "peak")["best"])
    stop = threading.Event()
    stop.set()
    sol = member(p, SolveOptions(memory_model="peak", stop=stop))
    assert sol.placement is None and "out of time" in sol.reason
    static = member(p, SolveOptions(memory_model="static"))
    assert static.placement is None and "peak" in static.reason


def test_in_the_method_table_and_the_tight_portfolio():
    assert get("mem-repair").func is memory_repair
    # heuristics/portfolio.py: mem-repair right after band-repair, before mem-span; near the smallest
    # memory right after min-memory (before weight-bands and mem-span) and band-repair last
    assert 0 < MEMBER_SHARE["mem-repair"] < 1
    p0 = generate_cnn()
    lb = memory_lower_bound(p0, "peak")["best"]
    opts = SolveOptions(memory_model="peak")
    low, _ = member_order(p0.with_devices(p0.k, 1.1 * lb), opts)
    mid, _ = member_order(p0.with_devices(p0.k, 1.5 * lb), opts)
    assert mid == PEAK_TIGHT_ORDER and sorted(low) == sorted(mid) and set(REPAIRS) <= set(mid)
    assert mid.index("band-repair") + 1 == mid.index("mem-repair") < mid.index("mem-span")
    assert low.index("min-memory") + 1 == low.index("mem-repair") < low.index("weight-bands") < low.index("mem-span")
    assert low[-1] == "band-repair" and mid.index("chain-home") == len(mid) - 1


def test_a_repair_left_just_over_descends_until_it_fits(monkeypatch):
    """The repair's batches can stop a sliver over the capacity (no device has room at its own peak
    moment); the peak descent then moves single units until it fits. On this generated transformer
    at 1.2 x its memory bound the repair alone ends over (found by a scan of small graphs); with the
    descent the answer fits, and the evaluator gives the same makespan and peaks on its order."""
    import heuristics.memory_repair as mr
    from placement.generate import generate

    p0 = generate("transformer", 200, seed=0, devices=2, memory_fraction=None)
    p = p0.with_devices(2, 1.2 * memory_lower_bound(p0, "peak")["best"])
    pl, seq = fast_schedule(p)
    monkeypatch.setattr(mr, "DESCENT_EVALUATIONS", 0)
    alone = repair(p, pl, seq)
    ratio = alone.evaluation.peak_memory / p.memory
    assert not alone.evaluation.feasible(p) and float(ratio.max()) <= 1 + mr.REORDER_WITHIN
    monkeypatch.undo()
    rep = repair(p, pl, seq)
    assert rep.evaluation.feasible(p)
    assert rep.steps[-1]["step"] == "descent" and rep.steps[-1]["ended"] == "fits"
    ev = evaluate(p, rep.placement, order=rep.order, memory_model="peak")
    assert ev.makespan == pytest.approx(rep.evaluation.makespan) and ev.feasible(p)
    assert np.allclose(ev.peak_memory, rep.evaluation.peak_memory)
    sol = memory_repair(p, SolveOptions(memory_model="peak"))  # the method answers with it
    assert sol.placement is not None
    assert check(p, sol.placement, sol.start, "peak").makespan == pytest.approx(sol.objective)
