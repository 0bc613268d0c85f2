"""chain-split (heuristics/chain_split.py): the critical chain cut into memory-balanced segments.

On a training step whose activations do not fit one device it keeps every activation with its
backward consumer, pays only the segment borders' transfers on the chain and fits where ETF's
answer is longer; every answer is the evaluator's, respects colocation and allowed devices, and is
deterministic."""
from __future__ import annotations

import random
from dataclasses import replace

import numpy as np
import pytest

from heuristics.chain_split import chain_pins, chain_segments, chain_split, critical_chain
from heuristics.list_scheduling import etf
from heuristics.portfolio import ORDER, PEAK_ORDER, PEAK_TIGHT_ORDER
from placement.evaluator import check, evaluate
from placement.problem import make_problem
from placement.solution import SolveOptions
from tests.conftest import random_problem

COMM = 0.1


def training_step(layers: int = 12, devices: int = 4, memory: float = float("inf"), act: float = 10.0):
    """Forward f_0 .. f_(L-1) (time 1, ``act``-byte activations), a loss, backward b_(L-1) .. b_0
    (time 1.5; b_i reads the gradient from b_(i+1), f_i's output and f_i's input), and per layer a
    weight w_i (param 1 byte) colocated with its update u_i (time 2, after b_i). The chain is the
    forward pass, the loss, the backward pass and u_0: 12 + 1 + 18 + 2 = 33 time units; one device
    running it holds every activation at the loss (12 x 10 bytes and more)."""
    nodes = [{"id": "x", "time": 0, "out_bytes": act, "param_bytes": 0}]
    edges = []
    prev = "x"
    for i in range(layers):
        nodes.append({"id": f"w{i}", "time": 0, "out_bytes": 1, "param_bytes": 1, "colocate": f"g{i}"})
        nodes.append({"id": f"f{i}", "time": 1, "out_bytes": act, "param_bytes": 0})
        edges += [{"src": prev, "dst": f"f{i}", "comm": COMM}, {"src": f"w{i}", "dst": f"f{i}", "comm": COMM}]
        prev = f"f{i}"
    nodes.append({"id": "loss", "time": 1, "out_bytes": 1, "param_bytes": 0})
    edges.append({"src": prev, "dst": "loss", "comm": COMM})
    grad = "loss"
    for i in reversed(range(layers)):
        nodes.append({"id": f"b{i}", "time": 1.5, "out_bytes": act, "param_bytes": 0})
        edges += [{"src": grad, "dst": f"b{i}", "comm": COMM}, {"src": "x" if i == 0 else f"f{i - 1}", "dst": f"b{i}", "comm": COMM},
                  {"src": f"f{i}", "dst": f"b{i}", "comm": COMM}]
        nodes.append({"id": f"u{i}", "time": 2, "out_bytes": 0, "param_bytes": 0, "colocate": f"g{i}"})
        edges += [{"src": f"b{i}", "dst": f"u{i}", "comm": COMM}, {"src": f"w{i}", "dst": f"u{i}", "comm": COMM}]
        grad = f"b{i}"
    return make_problem(nodes, edges, devices=devices, memory=memory, name="training-step")


def test_the_chain_is_the_forward_and_backward_pass():
    p = training_step()
    chain = [p.ids[v] for v in critical_chain(p)]
    assert chain[-1] == "u0" and "loss" in chain
    assert [x for x in chain if x[0] == "f"] == [f"f{i}" for i in range(12)]
    assert [x for x in chain if x[0] == "b"] == [f"b{i}" for i in reversed(range(12))]
    assert float(p.time[critical_chain(p)].sum()) == 33.0


@pytest.mark.parametrize("parts", [1, 2, 3, 4])
def test_segments_keep_each_activation_with_its_backward(parts):
    p = training_step()
    chain = critical_chain(p)
    seg, held = chain_segments(p, chain, parts)
    of = {p.ids[v]: int(s) for v, s in zip(chain.tolist(), seg.tolist())}
    for i in range(12):
        assert of[f"b{i}"] == of[f"f{i}"]
    assert sorted(set(of.values())) == list(range(parts))
    # every activation crosses the chain's peak (the loss), and so do the loss's output (read by b_11)
    # and w_0's (the chain starts at w_0, which u_0 reads): 12 x 10 + 1 + 1 bytes in all
    acts = max(np.bincount([of[f"f{i}"] for i in range(12)])) * 10.0
    assert acts <= held <= acts + 2 and (parts > 1 or held == 122.0)
    pins = chain_pins(p, chain, seg)
    assert pins[p.index["w0"]] == pins[p.index["u0"]] == of["u0"]  # u_0 is on the chain: its group follows


def test_fits_where_one_device_cannot_and_pays_only_the_borders():
    p = training_step(memory=70.0)
    single = evaluate(p, np.zeros(p.n, dtype=np.int64), memory_model="peak")
    assert single.peak_memory[0] > 2 * 70.0
    opts = SolveOptions(memory_model="peak")
    sol = chain_split(p, opts)
    assert sol.status == "heuristic"
    ev = check(p, sol.placement, sol.start, "peak")
    assert ev.feasible(p)
    assert sol.objective == pytest.approx(ev.makespan)
    parts = sol.info["parts"]
    assert parts >= 2
    # the chain (33) plus one transfer at each border, going out and coming back
    assert sol.objective <= 33.0 + 2 * (parts - 1) * COMM + 1e-9
    for i in range(12):  # no activation is held on two devices
        assert sol.placement[p.index[f"f{i}"]] == sol.placement[p.index[f"b{i}"]]
    other = etf(p, opts)
    assert other.objective is not None and sol.objective < other.objective


def test_unlimited_memory_keeps_the_chain_on_one_device():
    p = training_step()
    sol = chain_split(p, SolveOptions(memory_model="peak"))
    assert sol.info["parts"] == 1 and sol.objective == pytest.approx(33.0)


def test_too_little_memory_is_unknown_with_a_reason():
    p = training_step(memory=30.0)
    sol = chain_split(p, SolveOptions(memory_model="peak"))
    assert sol.status == "unknown" and sol.placement is None and "memory" in sol.reason


def _with_allowed(p, seed: int):
    rng = random.Random(seed)
    allowed = [None if p.colocate[v] >= 0 or rng.random() < 0.5 else tuple(sorted(rng.sample(range(p.k), rng.randint(1, p.k))))
               for v in range(p.n)]
    return replace(p, allowed=allowed)


@pytest.mark.parametrize("seed", range(16))
@pytest.mark.parametrize("model", ["static", "peak"])
def test_random_answers_are_the_evaluators_and_respect_colocation_and_allowed(seed, model):
    p = _with_allowed(random_problem(seed, 16, 2 + seed % 3, colocate_p=0.3), seed)
    if seed % 2:
        p = p.with_devices(p.k, 150.0 + 10 * seed)
    opts = SolveOptions(memory_model=model)
    sol = chain_split(p, opts)
    if sol.placement is None:
        assert sol.status == "unknown" and sol.reason
        return
    ev = check(p, sol.placement, sol.start, model)  # raises on a split group or a forbidden device
    assert ev.feasible(p)
    assert sol.objective == pytest.approx(ev.makespan, rel=1e-12)
    assert evaluate(p, sol.placement, order=sol.order, memory_model=model).makespan == pytest.approx(sol.objective)
    again = chain_split(p, opts)
    assert np.array_equal(again.placement, sol.placement) and again.order == sol.order


def test_in_the_portfolio_orders():
    assert "chain-split" in ORDER and sorted(PEAK_ORDER) == sorted(ORDER) and sorted(PEAK_TIGHT_ORDER) == sorted(ORDER)
    assert PEAK_ORDER.index("chain-split") < PEAK_ORDER.index("pardnn")
    assert PEAK_TIGHT_ORDER.index("chain-split") < PEAK_TIGHT_ORDER.index("etf")


def _tight_cnn():
    """A generated 300-node CNN training step at 1.3 x its peak-memory bound (K = 4): every split of
    its chain overflows (the 4-part one by 1.07 x the capacity), and a descent from it fits."""
    import math

    from placement.generate import generate
    from placement.memory_bounds import memory_lower_bound
    base = generate("cnn", 300, seed=0, devices=4, memory_fraction=None)
    return base.with_devices(4, 1.3 * memory_lower_bound(base.with_devices(4, math.inf), "peak", 4)["best"])


def test_when_no_split_fits_the_peak_descent_makes_one_fit(monkeypatch):
    import heuristics.chain_split as module
    p = _tight_cnn()
    opts = SolveOptions(memory_model="peak")
    sol = chain_split(p, opts)
    assert sol.status == "heuristic"
    ev = check(p, sol.placement, sol.start, "peak")  # within capacity, precedence, one at a time
    assert sol.objective == pytest.approx(ev.makespan, rel=1e-12)
    descents = [t for t in sol.info["tried"] if "descent" in t]
    assert descents and descents[-1]["feasible"] and descents[-1]["descent"]["moves"] > 0
    assert not any(t.get("feasible") for t in sol.info["tried"] if "descent" not in t)  # no split fitted as it was
    again = chain_split(p, opts)
    assert np.array_equal(again.placement, sol.placement) and again.order == sol.order
    monkeypatch.setattr(module, "_descended", lambda *args: None)
    assert chain_split(p, opts).status == "unknown"  # the descent made the answer


def test_no_descent_where_a_split_fits_or_under_the_static_model():
    p = _tight_cnn()
    for q, model in ((p.with_devices(4, float("inf")), "peak"), (p, "static")):
        sol = chain_split(q, SolveOptions(memory_model=model))
        assert not any("descent" in t for t in sol.info["tried"])
