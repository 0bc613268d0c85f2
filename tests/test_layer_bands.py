"""heuristics/layer_bands.py: units follow a generated LSTM's layers (both assignment rules), the
band cuts are the best contiguous ones (brute force), the pieces are the output layer's time steps,
the priority order is a valid schedule; band-split and weight-bands (two configurations of the
module) fit, are deterministic, and what they accept is what the evaluator measures."""
from __future__ import annotations

import itertools
import re
from dataclasses import replace

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from heuristics.layer_bands import (BAND_SPLIT, WEIGHT_BANDS, Bands, band_placement, band_split, contiguous_cut, homes,
                                    loss_pivot, move_params, owners, param_units, pieces, priority_order, quantile_cut,
                                    restricted, weight_bands)
from heuristics.min_memory import min_memory
from heuristics.portfolio import PEAK_TIGHT_ORDER
from placement.evaluator import check, evaluate
from placement.generate import generate
from placement.memory_bounds import memory_lower_bound
from placement.problem import make_problem
from placement.solution import SolveOptions
from solvers.methods import get
from tests.conftest import random_problem

PEAK = SolveOptions(memory_model="peak")


def lstm_at(n: int = 2000, k: int = 4, ratio: float = 2.0):
    p0 = generate("lstm", n, memory_fraction=None)
    return p0.with_devices(k, ratio * memory_lower_bound(p0, "peak", k)["best"])


@pytest.fixture(scope="module")
def lstm():
    return generate("lstm", 600, seed=0, devices=4, memory_fraction=None)


# --- the band cutters ---------------------------------------------------------------------------

def _contiguous(band: np.ndarray, parts: int) -> bool:
    return bool(np.all(np.diff(band) >= 0) and band.min() >= 0 and band.max() < parts)


@settings(max_examples=60, deadline=None)
@given(work=st.lists(st.integers(0, 20), min_size=1, max_size=7), parts=st.integers(1, 4))
def test_contiguous_cut_is_the_best_contiguous_cut(work, parts):
    w = np.asarray(work, dtype=float)
    band = contiguous_cut(w, np.ones(parts))
    assert _contiguous(band, parts)
    got = np.bincount(band, weights=w).max()
    brute = min(max(w[a:b].sum() for a, b in zip((0, *cuts), (*cuts, w.size)))
                for c in range(min(parts, w.size))
                for cuts in itertools.combinations(range(1, w.size), c))
    assert got == pytest.approx(brute, rel=1e-6, abs=1e-9)


def test_contiguous_cut_follows_the_device_scale():
    """Against every way to cut 6 items into 2 non-empty contiguous runs, run 1 allowed twice run
    0's size."""
    rng = np.random.default_rng(3)
    for _ in range(20):
        sizes = rng.integers(1, 20, size=6).astype(float)
        got = contiguous_cut(sizes, np.array([1.0, 2.0]))
        assert _contiguous(got, 2)
        ratio = max(float(sizes[got == 0].sum()), float(sizes[got == 1].sum()) / 2)
        best = min(max(sizes[:a].sum(), sizes[a:].sum() / 2) for a in range(1, 6))
        assert ratio == pytest.approx(best)


@settings(max_examples=40, deadline=None)
@given(work=st.lists(st.floats(0.0, 10.0), min_size=1, max_size=12), parts=st.integers(1, 5))
def test_quantile_cut_is_contiguous(work, parts):
    assert _contiguous(quantile_cut(np.asarray(work), parts), parts)


# --- units, pieces ------------------------------------------------------------------------------

def test_homes_are_the_layers_of_an_lstm():
    """Rule "loss": every node of LSTM layer l (forward, backward, gradient sums; a gradient summed
    from two layers may join either) shares one unit, a different one per layer; the output layer's
    per-step nodes share the output weight's unit."""
    p = lstm_at()
    home = homes(p, param_units(p), loss_pivot(p))
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


def test_owners_follow_the_lstm_layers(lstm):
    """Rule "reads": a cell, forward or backward, and its weight gradient's accumulation own its
    layer's weight; the output layer's nodes the output weight."""
    p = lstm
    unit = param_units(p)
    owner = owners(p, unit)
    by_name = {name: i for i, name in enumerate(p.names)}
    layers = sum(1 for name in p.names if re.fullmatch(r"lstm/l\d+/weight", name))
    for i, name in enumerate(p.names):
        m = re.match(r"lstm/l(\d+)/t\d+/", name)
        if m and name.endswith("hidden/grad_sum"):  # sums the gradients from its own layer and the one above
            above = f"lstm/l{int(m.group(1)) + 1}/weight" if int(m.group(1)) + 1 < layers else "output/weight"
            assert owner[i] in (unit[by_name[f"lstm/l{m.group(1)}/weight"]], unit[by_name[above]]), name
        elif m:
            assert owner[i] == unit[by_name[f"lstm/l{m.group(1)}/weight"]], name
        elif re.match(r"step\d+/output/", name):
            assert owner[i] == unit[by_name["output/weight"]], name


def test_pieces_are_the_output_layers_time_steps(lstm):
    p = lstm
    unit = param_units(p)
    piece = pieces(p, unit, owners(p, unit))
    steps = sorted({int(m.group(1)) for name in p.names if (m := re.match(r"step(\d+)/output/", name))})
    seen = set()
    for t in steps:
        ids = {piece[i] for i, name in enumerate(p.names) if name.startswith(f"step{t}/output/")}
        assert len(ids) == 1, t  # logits, xent, their gradients, the weight gradient and its accumulation
        seen |= ids
    assert len(seen) == len(steps)


# --- placements ---------------------------------------------------------------------------------

def test_band_split_keeps_layers_whole_and_cuts_the_output_layer_into_bands_of_steps():
    p = lstm_at(k=4)
    dev, info = band_placement(p, BAND_SPLIT[0], loss_pivot(p))
    assert info["split_units"] == 1  # the output layer: more than a device's share at the loss
    for layer in range(8):
        on = {int(dev[v]) for v, name in enumerate(p.ids) if name.startswith(f"lstm/l{layer}/") and not name.endswith("grad_sum")}
        assert len(on) <= 1
    step_dev: dict[int, set[int]] = {}
    for v, name in enumerate(p.ids):
        m = re.match(r"step(\d+)/output/(logits|xent)", name)
        if m:
            step_dev.setdefault(int(m.group(1)), set()).add(int(dev[v]))
    assert all(len(d) == 1 for d in step_dev.values())
    bands = [next(iter(step_dev[t])) for t in sorted(step_dev)]
    assert bands == sorted(bands) and len(set(bands)) >= 2


@pytest.mark.parametrize("bands", BAND_SPLIT + WEIGHT_BANDS + (Bands("loss", "work"), Bands("reads", "bytes", "pieces")),
                         ids=lambda b: "-".join(b.__dict__.values()))
def test_every_configuration_keeps_colocation(lstm, bands):
    """Each colocation group (a weight with its update) on one device, every node on a device."""
    p = lstm.with_devices(4, np.inf)
    dev, _ = band_placement(p, bands, loss_pivot(p))
    for g in p.groups:
        assert len(set(dev[g].tolist())) == 1
    assert set(dev.tolist()) <= set(range(4))


def test_restricted_devices_are_respected_by_weight_bands():
    p0 = random_problem(4, 20, 3)
    p = replace(p0, allowed=[(1,)] + [None] * (p0.n - 1))
    for bands in WEIGHT_BANDS:
        dev, _ = band_placement(p, bands)
        assert dev[0] == 1


# --- the priority order -------------------------------------------------------------------------

@pytest.mark.parametrize("seed", range(6))
def test_priority_order_is_a_valid_schedule(seed):
    p0 = random_problem(seed, 30, 2 + seed % 3, colocate_p=0.3 if seed % 2 else 0.0)
    p = p0.with_devices(p0.k, 1.2 * memory_lower_bound(p0, "peak")["best"])
    dev = np.random.default_rng(seed).integers(0, p.k, p.n)
    for g in p.groups:
        dev[g] = dev[g[0]]
    order = priority_order(p, dev, 0.8)
    assert order is not None
    assert sorted(v for o in order for v in o) == list(range(p.n))
    assert all(dev[v] == d for d, o in enumerate(order) for v in o)
    ev = evaluate(p, dev, order=order, memory_model="peak")
    check(p, dev, ev.start, "peak", check_memory=False)  # precedence, one node at a time per device


# --- the methods --------------------------------------------------------------------------------

@pytest.mark.parametrize("k", [2, 4, 8])
def test_band_split_answer_is_the_evaluators_on_its_own_order(k):
    p = lstm_at(k=k)
    sol = band_split(p, PEAK)
    assert sol.placement is not None
    ev = evaluate(p, sol.placement, order=sol.order, memory_model="peak")
    assert ev.feasible(p) and sol.objective == pytest.approx(ev.makespan, rel=1e-12)
    check(p, sol.placement, ev.start, "peak")
    again = band_split(p, PEAK)
    assert np.array_equal(again.placement, sol.placement) and again.order == sol.order


def test_an_overflowing_band_is_reported_unknown_with_how_much():
    p = lstm_at(k=4, ratio=1.0)  # the bound itself: the bands' transient gradients do not fit
    sol = band_split(p, PEAK)
    assert sol.placement is None and sol.status == "unknown" and sol.info["memory_over_capacity"] > 1.0
    assert "no band placement fits" in sol.reason


def test_not_applicable_without_a_loss_params_or_with_restricted_devices():
    nodes = [{"id": f"{c}{i}", "time": 1, "out_bytes": 10, "param_bytes": 5 if i == 0 else 0} for c in "ab" for i in range(3)]
    edges = [{"src": f"{c}{i}", "dst": f"{c}{i + 1}", "comm": 1} for c in "ab" for i in range(2)]
    two = make_problem(nodes, edges, devices=2, memory=1000.0)
    sol = band_split(two, PEAK)
    assert sol.placement is None and "no node is comparable" in sol.reason
    assert weight_bands(two, PEAK).placement is not None  # work bands need no loss
    p = lstm_at(n=300, k=2)
    pinned = replace(p, allowed=[(0,)] + [None] * (p.n - 1))
    assert "only on some devices" in band_split(pinned, PEAK).reason
    bare = random_problem(1, 12, 2)
    bare.param_bytes[:] = 0
    assert weight_bands(bare, PEAK).status == "unknown" and "no params" in weight_bands(bare, PEAK).reason


def test_weight_bands_fits_is_deterministic_and_beats_min_memory_on_an_lstm(lstm):
    p = lstm.with_devices(4, 2.0 * memory_lower_bound(lstm, "peak")["best"])
    a = weight_bands(p, PEAK)
    b = weight_bands(p, PEAK)
    assert a.status == "heuristic" and a.objective == b.objective
    assert np.array_equal(a.placement, b.placement)
    ev = check(p, a.placement, a.start, "peak")
    assert ev.makespan == pytest.approx(a.objective)
    assert float(np.max(ev.peak_memory / p.memory)) <= 1 + 1e-12
    mm = min_memory(p, PEAK)
    assert mm.objective is not None and a.objective < 0.5 * mm.objective  # measured: 28.8 against 87.7


def test_method_rows_and_portfolio_place():
    assert get("weight-bands").func is weight_bands and get("band-split").func is band_split
    assert PEAK_TIGHT_ORDER.index("weight-bands") == PEAK_TIGHT_ORDER.index("min-memory") + 1


# --- moving parameter units (band-split below its bands' peak) -----------------------------------

def test_band_split_moves_params_to_fit_below_its_bands_peak():
    """600-node LSTM, K = 4, at 1.05 x memory_lower_bound: the band placement peaks at 1.19 x in
    both memory-light orders; with layer 0's and layer 1's params moved beside another device's
    it fits, and the answer is the evaluator's on its own order."""
    p0 = generate("lstm", 600, memory_fraction=None)
    p = p0.with_devices(4, 1.05 * memory_lower_bound(p0, "peak", 4)["best"])
    sol = band_split(p, PEAK)
    assert sol.status == "heuristic" and sol.info["moved_params"]
    before = [t for t in sol.info["tried"] if "moved_params" not in t]
    assert before and all(not t["fits"] and t["memory_over_capacity"] > 1.1 for t in before)
    ev = check(p, sol.placement, sol.start, "peak")
    assert ev.makespan == pytest.approx(sol.objective, rel=1e-12)
    for g in p.groups:
        assert len(set(sol.placement[g].tolist())) == 1


@pytest.mark.parametrize("seed", range(8))
def test_move_params_never_raises_the_largest_peak_and_keeps_units_whole(seed):
    p0 = random_problem(seed, 24, 2 + seed % 3, colocate_p=0.4)
    p = p0.with_devices(p0.k, 0.9 * memory_lower_bound(p0, "peak")["best"])  # nothing fits: it runs to the end
    dev = np.random.default_rng(seed).integers(0, p.k, p.n)
    for g in p.groups:
        dev[g] = dev[g[0]]
    seq = p.topo_order
    before = evaluate(p, dev, order=restricted(seq, dev, p.k), memory_model="peak").peak_memory.max()
    moved, moves = move_params(p, dev, seq)
    after = evaluate(p, moved, order=restricted(seq, moved, p.k), memory_model="peak").peak_memory.max()
    assert after <= before * (1 - 0.005) ** len(moves) + 1e-9
    for g in p.groups:
        assert len(set(moved[g].tolist())) == 1
    changed = np.flatnonzero(moved != dev)
    unit = param_units(p)
    assert np.all(unit[changed] >= 0)  # only parameter units move
