"""Window gathering (heuristics/window_gather.py): windows whose results are the expensive way back
run mostly on the chain's device, the others are left alone; colocation, allowed devices and
static memory are kept; the probe offers the gathered schedules, each the evaluator's."""
from __future__ import annotations

import math

import numpy as np
import pytest

from heuristics.list_scheduling import etf
from heuristics.window_gather import FILL, find_windows, gather_windows
from placement.evaluator import check, evaluate, peak_memory, static_memory
from placement.generate import generate
from placement.problem import make_problem
from placement.solution import SolveOptions
from solvers.pipeline import Incumbent, _fit_promising, _gathered, _windows
from solvers.reschedule import reschedule
from solvers.run import verify


def fan(branches: int, t_branch: float, comm_in: float, comm_out: float, k: int = 3, memory: float = 1e12):
    """s -> a -> x -> b -> c, the chain (x is long), and ``branches`` nodes u_i with a -> u_i -> b:
    one window (a, b)."""
    nodes = [{"id": "s", "time": 1.0}, {"id": "a", "time": 1.0}, {"id": "x", "time": 10.0},
             {"id": "b", "time": 1.0}, {"id": "c", "time": 1.0}]
    edges = [{"src": "s", "dst": "a", "comm": 0.1}, {"src": "a", "dst": "x", "comm": 0.1},
             {"src": "x", "dst": "b", "comm": 0.1}, {"src": "b", "dst": "c", "comm": 0.1}]
    for i in range(branches):
        nodes.append({"id": f"u{i}", "time": t_branch * (1 + 0.01 * i), "out_bytes": 1.0})
        edges += [{"src": "a", "dst": f"u{i}", "comm": comm_in}, {"src": f"u{i}", "dst": "b", "comm": comm_out}]
    for nd in nodes:
        nd.setdefault("out_bytes", 1.0)
        nd.setdefault("param_bytes", 0.0)
    return make_problem(nodes, edges, devices=k, memory=memory)


def spread(prob) -> np.ndarray:
    """The chain on device 0, the branches round-robin over all devices."""
    pl = np.zeros(prob.n, dtype=np.int64)
    for i, name in enumerate(prob.ids):
        if name.startswith("u"):
            pl[i] = int(name[1:]) % prob.k
    return pl


def branch_devices(prob, pl) -> dict[str, int]:
    return {name: int(pl[i]) for i, name in enumerate(prob.ids) if name.startswith("u")}


def test_a_window_whose_results_are_expensive_comes_home_but_its_balancing_share():
    prob = fan(8, 1.0, comm_in=0.1, comm_out=5.0)
    got = gather_windows(prob, spread(prob), factor=0.0)
    assert set(branch_devices(prob, got).values()) == {0}  # factor 0: every member on the chain's device
    got = gather_windows(prob, spread(prob), factor=1.0)
    dev = branch_devices(prob, got)
    away = sorted(name for name, d in dev.items() if d != 0)
    # the window's time T = 8.28, m = 0.1 in + 5 out: the largest units go away until they hold
    # (T - m) (K - 1) / K = 2.12: u7 (1.07) and u6 (1.06), one on each other device
    assert away == ["u6", "u7"] and dev["u6"] != dev["u7"]
    assert all(got[prob.index[v]] == 0 for v in "abcsx")


def test_a_window_whose_input_is_the_expensive_crossing_is_left_alone():
    prob = fan(8, 1.0, comm_in=5.0, comm_out=0.1)
    start = spread(prob)
    assert np.array_equal(gather_windows(prob, start, factor=0.0), start)


def test_gathering_keeps_each_device_within_its_memory():
    # the chain's device holds the chain and 2 more branches' bytes: the rest stay where they were
    prob = fan(8, 1.0, comm_in=0.1, comm_out=5.0, memory=(5 + 4) / FILL)
    start = np.array([0 if not name.startswith("u") else 1 + int(name[1:]) % 2 for name in prob.ids])
    got = gather_windows(prob, start, factor=0.0)
    assert (static_memory(prob, got) <= prob.memory + 1e-9).all()
    assert (static_memory(prob, start) <= prob.memory).all()
    assert list(branch_devices(prob, got).values()).count(0) <= 4


@pytest.mark.parametrize("seed", range(3))
def test_on_a_generated_cnn_colocation_and_memory_hold_and_it_is_deterministic(seed):
    prob = generate("cnn", 3000, seed=seed, devices=4, memory_fraction=0.6)
    start = np.asarray(etf(prob, SolveOptions()).placement)
    got = gather_windows(prob, start, factor=1.0)
    assert np.array_equal(got, gather_windows(prob, start, factor=1.0))
    assert (got != start).sum() > 0
    for g in prob.groups:
        assert len(set(got[np.asarray(g)].tolist())) == 1
    fits = (static_memory(prob, start) <= FILL * prob.memory).all()
    assert not fits or (static_memory(prob, got) <= prob.memory).all()
    ev = evaluate(prob, got)
    check(prob, got, ev.start, "static")


def test_the_probe_offers_gathered_schedules_judged_by_the_evaluator():
    prob = generate("cnn", 3000, seed=1, devices=4, memory_fraction=0.6)
    start = np.asarray(etf(prob, SolveOptions()).placement)
    inc = Incumbent(prob, "static", verify)
    inc.offer(etf(prob, SolveOptions()))
    before = inc.makespan
    evs, over = _gathered(prob, SolveOptions(), inc, start, 60.0, _windows(prob, SolveOptions()))
    assert over is None  # nothing to fit in the static model
    assert evs and inc.makespan <= min([before] + [e.makespan for e in evs]) + 1e-9
    for e in evs:
        check(prob, e.placement, e.start, "static")
        assert evaluate(prob, e.placement, order=None).makespan > 0
    none = SolveOptions(extra={"gather_factors": ()})
    assert _windows(prob, none) is None and _gathered(prob, none, inc, start, 60.0, _windows(prob, none)) == ([], None)


def test_a_stop_request_ends_the_analysis_and_the_probes_gathering():
    prob = generate("cnn", 3000, seed=2, devices=4, memory_fraction=0.6)
    calls = []

    def stop() -> bool:
        calls.append(1)
        return len(calls) >= 2  # asked after the chain, then after the first reach: stop there
    assert find_windows(prob, stop=stop) is None and len(calls) == 2
    found = find_windows(prob)
    start = np.asarray(etf(prob, SolveOptions()).placement)
    assert np.array_equal(gather_windows(prob, start, found=found), gather_windows(prob, start))
    opts = SolveOptions()
    opts.stop.set()
    inc = Incumbent(prob, "static", verify)
    assert _windows(prob, opts) is None
    assert _gathered(prob, opts, inc, start, 60.0, found) == ([], None) and inc.best is None


def test_under_the_peak_model_an_overflowing_gathered_placement_is_fitted_to_the_capacity():
    # ETF's placement of a small CNN gathered puts the backward blocks on one device, which also
    # receives the forward activations they read: at 0.8 x that device's peak every schedule of the
    # gathered placement overflows; the probe splits it into bands and repairs it instead
    free = generate("cnn", 2000, seed=0, devices=4, memory_fraction=None)
    start = np.asarray(etf(free, SolveOptions()).placement)
    gathered = gather_windows(free, start)
    cap = 0.8 * max(ev.peak_memory.max() for _, _, ev in reschedule(free, gathered, "peak"))
    prob = free.with_devices(4, cap)
    assert not any(ev.feasible(prob) for _, _, ev in reschedule(prob, gathered, "peak"))
    opts = SolveOptions(memory_model="peak")

    def run():
        inc = Incumbent(prob, "peak", verify)
        fits, over = _gathered(prob, opts, inc, start, 60.0, _windows(prob, opts))
        assert fits == [] and over is not None  # every gathered schedule overflows: the fastest is fitted
        return inc, _fit_promising(prob, opts, inc, [(over[1].makespan, 0, over[0], over[1])], math.inf, 60.0)[0]
    inc, evs = run()
    assert evs
    for e in evs:
        got = check(prob, e.placement, e.start, "peak")  # raises on any violation, memory included
        assert (peak_memory(prob, e.placement, got.start, got.finish) <= cap * (1 + 1e-9)).all()
    assert inc.best is not None and inc.best[1].feasible(prob)
    assert inc.makespan <= min(e.makespan for e in evs) + 1e-9
    # faster than the start itself re-scheduled with unlimited memory (where it fits anywhere)
    assert min(e.makespan for e in evs) < min(ev.makespan for _, _, ev in reschedule(free, start, "peak"))
    _, again = run()
    assert [e.placement.tolist() for e in again] == [e.placement.tolist() for e in evs]
    assert [e.makespan for e in again] == [e.makespan for e in evs]
