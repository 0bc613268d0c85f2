"""band-split (heuristics/band_split.py): homes follow the parameter units, each device holds a
band of them forward and backward, and what it accepts is what the evaluator measures."""
from __future__ import annotations

import re
from dataclasses import replace

import numpy as np
import pytest

from heuristics.band_split import band_placement, band_split, contiguous_runs, homes
from placement.evaluator import check, evaluate
from placement.generate import generate
from placement.memory_bounds import memory_lower_bound, pivot_cuts
from placement.problem import make_problem
from placement.solution import SolveOptions


def lstm(n: int = 2000, k: int = 4, ratio: float = 2.0):
    p0 = generate("lstm", n, memory_fraction=None)
    return p0.with_devices(k, ratio * memory_lower_bound(p0, "peak", k)["best"])


def loss_of(p) -> int:
    pivots, cuts = pivot_cuts(p)
    return int(pivots[int(np.argmax(cuts))])


def test_homes_are_the_layers_of_an_lstm():
    """Every node of LSTM layer l (forward, backward, gradient sums; a gradient summed from two
    layers may join either) shares one home, a different one per layer; the output layer's
    per-step nodes share the output weight's home."""
    p = lstm()
    home = homes(p, loss_of(p))
    assert np.all(home >= 0)
    layer_home: dict[int, set[int]] = {}
    for v, name in enumerate(p.ids):
        m = re.match(r"lstm/l(\d+)/", name)
        if m and not name.endswith("grad_sum"):
            layer_home.setdefault(int(m.group(1)), set()).add(int(home[v]))
    assert len(layer_home) >= 2 and all(len(h) == 1 for h in layer_home.values())
    assert len({next(iter(h)) for h in layer_home.values()}) == len(layer_home)
    out = {int(home[v]) for v, name in enumerate(p.ids) if re.match(r"step\d+/output/", name)}
    assert out == {int(home[p.index["output/weight"]])}


def test_whole_layers_stay_on_one_device_and_the_output_layer_is_cut_into_bands_of_steps():
    p = lstm(k=4)
    dev, info = band_placement(p, loss_of(p))
    assert info["split_homes"] == 1  # the output layer: more than a device's share at the loss
    for l in range(8):
        on = {int(dev[v]) for v, name in enumerate(p.ids) if name.startswith(f"lstm/l{l}/") and not name.endswith("grad_sum")}
        assert len(on) <= 1
    # each step's output nodes (forward and backward) on one device, steps in bands of rising devices
    step_dev: dict[int, set[int]] = {}
    for v, name in enumerate(p.ids):
        m = re.match(r"step(\d+)/output/(logits|xent)", name)
        if m:
            step_dev.setdefault(int(m.group(1)), set()).add(int(dev[v]))
    assert all(len(d) == 1 for d in step_dev.values())
    bands = [next(iter(step_dev[t])) for t in sorted(step_dev)]
    assert bands == sorted(bands) and len(set(bands)) >= 2


@pytest.mark.parametrize("k", [2, 4, 8])
def test_accepted_answer_is_the_evaluators_on_its_own_order(k):
    p = lstm(k=k)
    sol = band_split(p, SolveOptions(memory_model="peak"))
    assert sol.placement is not None
    ev = evaluate(p, sol.placement, order=sol.order, memory_model="peak")
    assert ev.feasible(p) and sol.objective == pytest.approx(ev.makespan, rel=1e-12)
    check(p, sol.placement, ev.start, "peak")
    again = band_split(p, SolveOptions(memory_model="peak"))
    assert np.array_equal(again.placement, sol.placement) and again.order == sol.order


def test_an_overflowing_band_is_reported_unknown_with_how_much():
    p = lstm(k=4, ratio=1.0)  # the bound itself: the bands' transient gradients do not fit
    sol = band_split(p, SolveOptions(memory_model="peak"))
    assert sol.placement is None and sol.status == "unknown" and sol.info["memory_over_capacity"] > 1.0


def test_not_applicable_without_a_loss_or_with_restricted_devices():
    nodes = [{"id": f"{c}{i}", "time": 1, "out_bytes": 10, "param_bytes": 5 if i == 0 else 0} for c in "ab" for i in range(3)]
    edges = [{"src": f"{c}{i}", "dst": f"{c}{i + 1}", "comm": 1} for c in "ab" for i in range(2)]
    two = make_problem(nodes, edges, devices=2, memory=1000.0)
    sol = band_split(two, SolveOptions(memory_model="peak"))
    assert sol.placement is None and "no node is comparable" in sol.reason
    p = lstm(n=300, k=2)
    assert band_split(p, SolveOptions(memory_model="peak")).reason == "" or "exceeds" in band_split(p, SolveOptions(memory_model="peak")).reason
    pinned = replace(p, allowed=[(0,)] + [None] * (p.n - 1))
    assert "only on some devices" in band_split(pinned, SolveOptions(memory_model="peak")).reason


def test_contiguous_runs_minimise_the_largest_run():
    """Against every way to cut 7 items into 3 contiguous runs."""
    import itertools

    rng = np.random.default_rng(3)
    for _ in range(20):
        sizes = rng.integers(1, 20, size=7).astype(float)
        got = contiguous_runs(sizes, np.ones(3))
        assert got == sorted(got) and max(got) <= 2
        largest = max(float(sizes[np.asarray(got) == d].sum()) for d in set(got))
        best = min(max(sizes[:a].sum(), sizes[a:b].sum(), sizes[b:].sum()) for a, b in itertools.combinations(range(1, 7), 2))
        assert largest == pytest.approx(best)
