"""Memory-aware ordering: a placement that overflows in FIFO order but fits in another order."""
from __future__ import annotations

import numpy as np

from heuristics.memory_order import lower_peak_order, memory_aware_order
from placement.evaluator import check, evaluate
from placement.problem import make_problem
from placement.solution import SolveOptions
from solvers.run import run
from tests.conftest import random_problem


def two_chains(memory: float):
    """s feeds two chains a1 -> a2 and b1 -> b2 on one device. FIFO runs b1 (ready since s ended)
    before a2 (ready only when a1 ends), holding both 100-byte activations (and a2's byte): peak 201. Running a2
    first frees a1's output before b1 allocates: peak 101."""
    nodes = [{"id": "s", "time": 1, "out_bytes": 0, "param_bytes": 0},
             {"id": "a1", "time": 1, "out_bytes": 100, "param_bytes": 0},
             {"id": "a2", "time": 1, "out_bytes": 1, "param_bytes": 0},
             {"id": "b1", "time": 1, "out_bytes": 100, "param_bytes": 0},
             {"id": "b2", "time": 1, "out_bytes": 1, "param_bytes": 0}]
    edges = [{"src": "s", "dst": "a1", "comm": 0}, {"src": "s", "dst": "b1", "comm": 0},
             {"src": "a1", "dst": "a2", "comm": 0}, {"src": "b1", "dst": "b2", "comm": 0}]
    return make_problem(nodes, edges, devices=1, memory=memory, name="two-chains")


def test_memory_aware_order_fits_where_fifo_does_not():
    p = two_chains(150)
    pl = np.zeros(p.n, dtype=np.int64)
    fifo = evaluate(p, pl, memory_model="peak")
    assert fifo.peak_memory[0] == 201 and not fifo.feasible(p)
    order = memory_aware_order(p, pl)
    assert [p.ids[v] for v in order[0]] == ["s", "a1", "a2", "b1", "b2"]
    ev = evaluate(p, pl, order=order, memory_model="peak")
    assert ev.peak_memory[0] == 101 and ev.feasible(p)
    got = lower_peak_order(p, pl)
    assert got.order == order and not got.fifo_fits and got.evaluation.feasible(p)


def test_report_gives_the_order_and_says_fifo_does_not_fit():
    p = two_chains(150)
    res = run(p, "single", SolveOptions(memory_model="peak"))
    assert res.status in ("heuristic", "optimal")
    rep = res.report(p, "peak")
    assert rep["device_order"][p.device_names[0]] == ["s", "a1", "a2", "b1", "b2"]
    assert rep["fits_fifo"] is False
    assert rep["peak_memory"] == [101.0]
    check(p, res.evaluation.placement, res.evaluation.start, "peak")


def test_report_says_fifo_fits_when_it_does():
    p = two_chains(250)
    res = run(p, "single", SolveOptions(memory_model="peak"))
    rep = res.report(p, "peak")
    assert rep["fits_fifo"] is True and rep["peak_memory"] == [201.0]


def test_lower_peak_order_never_worse_than_fifo_and_matches_the_evaluator():
    for seed in range(30):
        p = random_problem(seed, 12, 2, zero_time_p=0.15)
        rng = np.random.default_rng(seed)
        pl = rng.integers(0, 2, size=p.n)
        fifo = evaluate(p, pl, memory_model="peak")
        tight = p.with_devices(2, memory=float(fifo.peak_memory.max()) * 0.9)
        got = lower_peak_order(tight, pl)
        assert float(got.evaluation.overflow(tight).sum()) <= float(fifo.overflow(tight).sum())
        if got.order is not None:
            again = evaluate(tight, pl, order=got.order, memory_model="peak")
            np.testing.assert_array_equal(again.peak_memory, got.evaluation.peak_memory)


def gradient_accumulation(m: int, memory: float):
    """A weight gradient per step, all ready at once (g_0 .. g_{m-1}, 100 bytes each, made from
    the loss gradient s), summed by a chain that runs from the last step back: acc_{m-1} = g_{m-1},
    acc_i = g_i + acc_{i+1} (the shape of an unrolled RNN's weight gradient). FIFO computes every
    g_i first (m x 100 bytes); the order g_{m-1}, acc_{m-1}, g_{m-2}, acc_{m-2}, ... holds at most
    three of them (g_i, acc_{i+1} and acc_i)."""
    nodes = [{"id": "s", "time": 1, "out_bytes": 1, "param_bytes": 0}]
    nodes += [{"id": f"g{i}", "time": 1, "out_bytes": 100, "param_bytes": 0} for i in range(m)]
    nodes += [{"id": f"acc{i}", "time": 1, "out_bytes": 100, "param_bytes": 0} for i in range(m)]
    edges = [{"src": "s", "dst": f"g{i}", "comm": 0} for i in range(m)]
    edges += [{"src": f"g{i}", "dst": f"acc{i}", "comm": 0} for i in range(m)]
    edges += [{"src": f"acc{i + 1}", "dst": f"acc{i}", "comm": 0} for i in range(m - 1)]
    return make_problem(nodes, edges, devices=1, memory=memory, name="grad-accum")


def test_net_rule_reaches_the_smallest_peak_over_all_orders_on_a_gradient_accumulation():
    from tests.test_memory_bounds import _topological_orders

    p = gradient_accumulation(4, np.inf)
    pl = np.zeros(p.n, dtype=np.int64)
    smallest = min(float(evaluate(p, pl, order=[g], memory_model="peak").peak_memory[0]) for g in _topological_orders(p))
    assert smallest == 301  # g_i, acc_{i+1} and acc_i while acc_i runs
    assert float(evaluate(p, pl, memory_model="peak").peak_memory[0]) > smallest  # FIFO piles the g_i up
    net = evaluate(p, pl, order=memory_aware_order(p, pl, mode="net"), memory_model="peak")
    assert float(net.peak_memory[0]) == smallest
    got = lower_peak_order(gradient_accumulation(4, smallest), pl)
    assert got.evaluation.feasible(gradient_accumulation(4, smallest))


def test_no_order_fits_only_when_every_order_overflows():
    """Brute force over every order of each device on tiny graphs: the quick check never gives
    up on a placement that some order fits, and it does give up on some that none fits."""

    from heuristics.memory_order import no_order_fits
    from tests.test_memory_bounds import _topological_orders

    from tests.test_memory_bounds import training_chain

    hopeless = 0
    for seed in range(12):
        p = random_problem(seed, 6, 2, zero_time_p=0.15)
        rng = np.random.default_rng(seed)
        orders = list(_topological_orders(p))
        # a random placement, and all nodes on one device (checked against the one-device bound too)
        for pl in (rng.integers(0, 2, size=p.n), np.full(p.n, seed % 2)):
            peaks = [evaluate(p, pl, order=[[v for v in g if pl[v] == d] for d in range(2)], memory_model="peak").peak_memory.max()
                     for g in orders]
            for cap in sorted(set(float(x) for x in peaks)) + [float(min(peaks)) * 0.7, float(min(peaks)) * 0.95]:
                tight = p.with_devices(2, memory=cap)
                if no_order_fits(tight, pl):
                    assert min(peaks) > cap
                    hopeless += 1
    assert hopeless >= 1
    # All on one device, where the working-set check passes (at most 80 bytes) but the
    # activations saved for the backward pass do not (the one-device bound, 101 bytes while b2
    # runs, is what every order peaks at): given up at once.
    p = training_chain()
    one = np.zeros(p.n, dtype=np.int64)
    smallest = min(float(evaluate(p, one, order=[g], memory_model="peak").peak_memory[0]) for g in _topological_orders(p))
    assert smallest == 101
    assert no_order_fits(p.with_devices(2, memory=90.0), one) and not no_order_fits(p.with_devices(2, memory=101.0), one)


def test_memory_aware_order_stops_when_asked():
    """A stop that turns true on its second check: the rule returns None after at most STOP_EVERY
    starts instead of finishing; lower_peak_order then keeps FIFO and says it was cut."""
    from heuristics.memory_order import STOP_EVERY

    p = gradient_accumulation(STOP_EVERY, 3000)  # FIFO piles up the gradients, so the rules run
    pl = np.zeros(p.n, dtype=np.int64)
    assert memory_aware_order(p, pl, mode="net", stop=lambda: False) == memory_aware_order(p, pl, mode="net")
    calls = []

    def second_call() -> bool:
        calls.append(1)
        return len(calls) >= 2

    assert memory_aware_order(p, pl, mode="net", stop=second_call) is None and len(calls) == 2
    calls.clear()
    got = lower_peak_order(p, pl, stop=second_call)
    assert got.cut and got.order is None and got.rule == "fifo" and not got.evaluation.feasible(p)


def test_portfolio_runs_the_list_schedulers_before_pardnn_under_peak():
    from heuristics.portfolio import ORDER, PEAK_ORDER

    assert sorted(PEAK_ORDER) == sorted(ORDER)
    assert PEAK_ORDER.index("etf") < PEAK_ORDER.index("pardnn") and PEAK_ORDER.index("heft") < PEAK_ORDER.index("pardnn")


def test_refine_reorders_an_overflowing_schedule_only_before_its_deadline():
    """Refine re-judges a placement that overflows in FIFO order by a memory-aware order (peak
    model); that rule is tens of seconds of Python at 200K nodes, so it must stop at refine's
    deadline: past it, the FIFO schedule (201 bytes, over) stays; before it, the re-order fits."""
    import time

    from solvers.refine import RefineStats, _Search

    p = two_chains(150)
    pl = np.zeros(p.n, dtype=np.int64)
    search = _Search(p, pl, SolveOptions(), time.monotonic() + 3600.0, "peak", None, 10, RefineStats())
    assert search.cur_ev.peak_memory[0] == 101 and search.cur_ev.feasible(p)
    search.deadline = time.monotonic() - 1.0
    late = search._eval(pl, None)
    assert late.peak_memory[0] == 201 and not late.feasible(p)


def test_incumbent_reorders_an_offer_only_before_the_pipeline_ends():
    """The pipeline's incumbent re-orders an answer that overflows in FIFO order (peak model) before
    rejecting it; past the pipeline's end (or after a stop) it must not start those rules, which
    are tens of seconds of Python at 200K nodes: the offer is then refused."""
    import threading
    import time

    from placement.solution import Solution
    from solvers.pipeline import Incumbent

    p = two_chains(150)
    pl = np.zeros(p.n, dtype=np.int64)
    offer = Solution("test", "heuristic", placement=pl, objective=5.0)

    def verify(problem, sol, mm):
        return evaluate(problem, sol.placement, memory_model=mm)

    inc = Incumbent(p, "peak", verify, stop=threading.Event())
    ev = inc.offer(offer)
    assert ev is not None and ev.peak_memory[0] == 101 and inc.best is not None
    late = Incumbent(p, "peak", verify, stop=threading.Event())
    late.deadline = time.monotonic() - 1.0
    assert late.offer(offer) is None and late.best is None
    stopped = Incumbent(p, "peak", verify, stop=threading.Event())
    stopped.stop.set()
    assert stopped.offer(offer) is None and stopped.best is None
