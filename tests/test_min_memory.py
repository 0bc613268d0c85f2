"""min-memory (heuristics/min_memory.py): what it accepts is what the evaluator measures, it answers
where the list schedulers do not, and it is deterministic."""
from __future__ import annotations

import math
import threading

import numpy as np
import pytest

from heuristics.memory_order import net_sequence
from heuristics.min_memory import memory_light_orders, min_memory, passes, place_along
from heuristics.portfolio import PEAK_TIGHT_ORDER, member_order
from placement.evaluator import check, evaluate
from placement.memory_bounds import memory_lower_bound
from placement.problem import make_problem
from placement.solution import SolveOptions
from solvers.run import run
from tests.conftest import random_problem


def accumulation(memory: float, n: int = 6):
    """Two weights (25 param bytes each, no output) feed n producers p_i (10-byte outputs) from a
    1-byte source; the gradients are summed along a chain acc_n, acc_(n-1) = p_(n-1) + acc_n, ...
    (10 bytes each), as an unrolled RNN's weight gradients are. While acc_i runs its device holds
    p_i, acc_(i+1) and acc_i (30 bytes); the device that runs the chain also holds a weight (25)
    and the source's byte, which p_i still need: 56 bytes. Both weights on one device: 50 + 30 > 56."""
    nodes = [{"id": "src", "time": 1, "out_bytes": 1, "param_bytes": 0},
             {"id": "wa", "time": 0, "out_bytes": 0, "param_bytes": 25},
             {"id": "wb", "time": 0, "out_bytes": 0, "param_bytes": 25}]
    edges = []
    for i in range(1, n + 1):
        nodes.append({"id": f"p{i}", "time": 1, "out_bytes": 10, "param_bytes": 0})
        edges.append({"src": "src", "dst": f"p{i}", "comm": 0.5})
        edges.append({"src": "wa" if i <= n // 2 else "wb", "dst": f"p{i}", "comm": 0.5})
    for i in range(n, 0, -1):
        nodes.append({"id": f"acc{i}", "time": 1, "out_bytes": 10, "param_bytes": 0})
        edges.append({"src": f"p{i}", "dst": f"acc{i}", "comm": 0.5})
        if i < n:
            edges.append({"src": f"acc{i + 1}", "dst": f"acc{i}", "comm": 0.5})
    nodes.append({"id": "end", "time": 1, "out_bytes": 0, "param_bytes": 0})
    edges.append({"src": "acc1", "dst": "end", "comm": 0.5})
    return make_problem(nodes, edges, devices=2, memory=memory, name="accumulation")


@pytest.mark.parametrize("seed", range(12))
def test_accepted_peak_is_the_evaluators_on_its_own_order(seed):
    p0 = random_problem(seed, 14, 2 + seed % 3, colocate_p=0.3 if seed % 2 else 0.0)
    bound = memory_lower_bound(p0, "peak")["best"]
    p = p0.with_devices(p0.k, 1.3 * bound)
    for _, seq in memory_light_orders(p):
        for floor, by_area, ratchet in ((1.0, False, True), (0.8, True, True), (0.8, True, False), (0.0, True, True)):
            got = place_along(p, seq, floor, by_area=by_area, ratchet=ratchet)
            ev = evaluate(p, got.placement, order=got.order, memory_model="peak")
            assert np.allclose(got.peak, ev.peak_memory, rtol=1e-12, atol=1e-9)
            assert [v for d in got.order for v in d] != [] and sorted(v for d in got.order for v in d) == list(range(p.n))


def test_answers_on_the_accumulation_chain_where_list_schedulers_do_not():
    p = accumulation(56)
    assert memory_lower_bound(p, "peak")["best"] == 40  # (50 params + 30 working set) / 2
    sol = min_memory(p, SolveOptions(memory_model="peak"))
    assert sol.status == "heuristic"
    ev = check(p, sol.placement, evaluate(p, sol.placement, order=sol.order, memory_model="peak").start, "peak")
    assert ev.makespan == pytest.approx(sol.objective) and float(ev.peak_memory.max()) <= 56
    for name in ("heft", "critical-path", "greedy-fill", "m-topo", "pardnn", "single"):
        assert not run(p, name, SolveOptions(memory_model="peak")).feasible, name
    # the portfolio keeps it: memory is tight (56 < 2 x 40), so min-memory runs right after the baselines
    names, lb = member_order(p, SolveOptions(memory_model="peak"))
    assert names == PEAK_TIGHT_ORDER and lb == 40
    port = run(p, "portfolio", SolveOptions(memory_model="peak"))
    assert port.feasible and port.evaluation.makespan <= sol.objective + 1e-9


def test_net_sequence_sums_gradients_as_they_are_made():
    """One device: FIFO makes every p_i before summing (60 bytes of gradients); the net order sums
    each as it is made: params 50 + source 1 + 30 = 81."""
    p = accumulation(math.inf).with_devices(1, math.inf)
    seq = net_sequence(p)
    pos = np.empty(p.n, dtype=np.int64)
    pos[seq] = np.arange(p.n)
    assert all(pos[u] < pos[v] for u, v in zip(p.src.tolist(), p.dst.tolist()))
    one = np.zeros(p.n, dtype=np.int64)
    assert evaluate(p, one, order=[seq.tolist()], memory_model="peak").peak_memory[0] == 81
    assert evaluate(p, one, memory_model="peak").peak_memory[0] > 81


def test_deterministic_and_passes_only_where_memory_binds():
    p0 = random_problem(3, 30, 3)
    p = p0.with_devices(3, 1.2 * memory_lower_bound(p0, "peak")["best"])
    a = min_memory(p, SolveOptions(memory_model="peak", seed=1))
    b = min_memory(p, SolveOptions(memory_model="peak", seed=2))
    assert a.status == b.status and a.objective == b.objective
    assert (a.placement is None and b.placement is None) or np.array_equal(a.placement, b.placement)
    assert passes(p0, "peak") == [(1.0, False, True, 2)]  # unlimited memory: one pass
    assert passes(p, "static") == [(1.0, False, True, 2)]
    levels = [f for f, by_area, ratchet, _ in passes(p, "peak") if by_area and ratchet]
    assert levels[0] == 1.0 and levels == sorted(levels, reverse=True)
    assert levels[-1] == pytest.approx(1 / 1.2)


@pytest.mark.parametrize("seed", range(8))
def test_net_sequence_is_the_simulated_net_rule_on_one_device(seed):
    """Without zero-time nodes a device's FIFO is the order nodes became ready, so the heap version
    must take exactly the simulated rule's steps (window 256, and a small window that binds)."""
    p = random_problem(seed, 40, 1, zero_time_p=0.0, edge_p=0.15)
    one = np.zeros(p.n, dtype=np.int64)
    from heuristics.memory_order import memory_aware_order

    assert net_sequence(p).tolist() == memory_aware_order(p, one, mode="net")[0]
    assert net_sequence(p, window=3).tolist() == memory_aware_order(p, one, mode="net", candidates=3)[0]


def test_an_order_that_piles_up_on_one_device_is_not_tried():
    """600 gradients ready at once: weighing only the 256 ready longest, rule "net" cannot see the
    one its accumulation chain needs next and makes hundreds first; weighing 2048 it sums each as
    it is made. The first order's single-device peak is far above the second's, so min-memory
    leaves it out; on the 6-step chain both are kept."""
    from heuristics.min_memory import ORDER_SLACK, single_device_peak

    p = accumulation(math.inf, n=600)
    piled = single_device_peak(p, net_sequence(p))
    light = single_device_peak(p, net_sequence(p, window=2048))
    assert piled > ORDER_SLACK * light
    assert [name for name, _ in memory_light_orders(p)] == ["net-2048"]
    assert [name for name, _ in memory_light_orders(accumulation(math.inf))] == ["net", "net-2048"]


def test_passes_at_the_lowest_floor_go_first_when_all_would_not_fit_the_time_limit(monkeypatch):
    """When fewer than four passes fit the time limit (estimated), the lowest floor's passes run first,
    the one without the ratchet first (a slow first pass at floor 1 would use a 200K-node warm start);
    otherwise floor 1 runs first."""
    import heuristics.min_memory as mm

    monkeypatch.setattr("heuristics.peak_kicks.KICK_PATIENCE", 5)  # what is tested here is the passes
    p0 = random_problem(5, 40, 3)
    p = p0.with_devices(3, 1.05 * memory_lower_bound(p0, "peak")["best"])
    lowest = min(f for f, *_ in passes(p, "peak"))
    calm = min_memory(p, SolveOptions(memory_model="peak", time_limit=1000.0))
    assert calm.info["passes"][0]["floor"] == 1.0 and not calm.info["passes"][0]["by_area"]
    monkeypatch.setattr(mm, "PASS_SECONDS_PER_ELEMENT", 1000.0)
    hurried = min_memory(p, SolveOptions(memory_model="peak", time_limit=1000.0))
    assert hurried.info["passes"][0]["floor"] == pytest.approx(lowest, abs=1e-4)
    assert not hurried.info["passes"][0]["ratchet"]  # the most memory-minded pass first


class CountedStop(threading.Event):
    """A stop request that turns true on its ``after``-th check: a deadline reached mid-run,
    without timing anything."""

    def __init__(self, after: int) -> None:
        super().__init__()
        self.after, self.calls = after, 0

    def is_set(self) -> bool:
        self.calls += 1
        return self.calls >= self.after or super().is_set()


def test_a_pass_cut_short_returns_nothing_and_says_so():
    """The deadline falls inside min-memory's first pass (2000-node LSTM, 2 x its bound): it
    returns no placement, the reason says out of time, and it stopped checking the clock right
    after (no further pass, no crash); and with the deadline already passed it returns at once."""
    from placement.generate import generate

    p0 = generate("lstm", 2000, memory_fraction=None)
    p = p0.with_devices(4, 2.0 * memory_lower_bound(p0, "peak")["best"])
    whole = min_memory(p, SolveOptions(memory_model="peak"))
    assert whole.placement is not None and len(whole.info["passes"]) >= 1  # so the cut below is the deadline's doing
    stop = CountedStop(after=7)  # the four order steps and the loop's check pass, then the pass's second check
    cut = min_memory(p, SolveOptions(memory_model="peak", time_limit=1e6, stop=stop))
    assert cut.placement is None and cut.status == "unknown" and "out of time" in cut.reason
    assert cut.info["passes"] == [] and stop.calls <= 9
    late = min_memory(p, SolveOptions(memory_model="peak", time_limit=0.0))
    assert late.placement is None and "out of time" in late.reason and late.info["passes"] == []


CUT = 78  # the stop's check that lands inside min-memory's first pass (below)


def test_the_portfolio_returns_when_the_deadline_falls_inside_a_member():
    """Under tight memory the portfolio runs single, band-split, chain-pin, then min-memory: with the
    deadline inside min-memory's pass, min-memory says out of time and every member after it is
    skipped or answers nothing; the portfolio returns the best of what band-split and chain-pin found in time."""
    from heuristics.portfolio import portfolio
    from placement.generate import generate

    p0 = generate("lstm", 2000, memory_fraction=None)
    p = p0.with_devices(4, 1.3 * memory_lower_bound(p0, "peak")["best"])
    # single and band-split's checks (9 of them in its parameter moves: 3 units x 3 devices, none fits),
    # chain-pin's (56 since session 14: its ETF, both ways' orders and parameter moves; 25 before),
    # min-memory's orders, into its first pass
    stop = CountedStop(after=CUT)
    got = portfolio(p, SolveOptions(memory_model="peak", time_limit=1e6, stop=stop))
    members = got.info["members"]
    assert [m["method"] for m in members[:4]] == ["single", "band-split", "chain-pin", "min-memory"]
    assert "out of time" in members[3]["reason"] and not members[3]["feasible"]
    assert all(m["status"] == "skipped" or not m["feasible"] for m in members[4:])
    assert (got.placement is not None) == (members[1]["feasible"] or members[2]["feasible"])
    assert stop.calls < CUT + 10 * len(members[4:])  # each later member checked the clock a few times at most
