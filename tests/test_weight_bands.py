"""weight-bands (heuristics/weight_bands.py): the band cut is the best contiguous one, owners and
pieces follow a generated LSTM's layers and time steps, the priority order is a valid schedule,
and the answer fits, is deterministic and beats min-memory on a small LSTM."""
from __future__ import annotations

import itertools
import re

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from heuristics.min_memory import min_memory
from heuristics.portfolio import PEAK_TIGHT_ORDER
from heuristics.weight_bands import (band_placement, contiguous_bands, owners, param_units, pieces, priority_order,
                                     quantile_bands, weight_bands)
from placement.evaluator import check, evaluate
from placement.generate import generate
from placement.memory_bounds import memory_lower_bound
from placement.solution import SolveOptions
from solvers.methods import get
from tests.conftest import random_problem


def _contiguous(band: np.ndarray, parts: int) -> bool:
    return bool(np.all(np.diff(band) >= 0) and band.min() >= 0 and band.max() < parts)


@settings(max_examples=60, deadline=None)
@given(work=st.lists(st.integers(0, 20), min_size=1, max_size=7), parts=st.integers(1, 4))
def test_contiguous_bands_is_the_best_contiguous_cut(work, parts):
    w = np.asarray(work, dtype=float)
    band = contiguous_bands(w, parts)
    assert _contiguous(band, parts)
    got = np.bincount(band, weights=w).max()
    brute = min(max(w[a:b].sum() for a, b in zip((0, *cuts), (*cuts, w.size)))
                for c in range(min(parts, w.size))
                for cuts in itertools.combinations(range(1, w.size), c))
    assert got == pytest.approx(brute, rel=1e-6, abs=1e-9)


@settings(max_examples=40, deadline=None)
@given(work=st.lists(st.floats(0.0, 10.0), min_size=1, max_size=12), parts=st.integers(1, 5))
def test_quantile_bands_are_contiguous(work, parts):
    assert _contiguous(quantile_bands(np.asarray(work), parts), parts)


@pytest.fixture(scope="module")
def lstm():
    return generate("lstm", 600, seed=0, devices=4, memory_fraction=None)


def test_owners_follow_the_lstm_layers(lstm):
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
        elif m:  # a cell, forward or backward, or its weight gradient's accumulation: its layer's weight
            assert owner[i] == unit[by_name[f"lstm/l{m.group(1)}/weight"]], name
        elif re.match(r"step\d+/output/", name):
            assert owner[i] == unit[by_name["output/weight"]], name


def test_pieces_are_the_output_layers_time_steps(lstm):
    p = lstm
    unit = param_units(p)
    owner = owners(p, unit)
    piece = pieces(p, unit, owner)
    steps = sorted({int(m.group(1)) for name in p.names if (m := re.match(r"step(\d+)/output/", name))})
    seen = set()
    for t in steps:
        ids = {piece[i] for i, name in enumerate(p.names) if name.startswith(f"step{t}/output/")}
        assert len(ids) == 1, t  # logits, xent, their gradients, the weight gradient and its accumulation
        seen |= ids
    assert len(seen) == len(steps)


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


def test_band_placement_keeps_colocation_and_needs_params(lstm):
    dev = band_placement(lstm.with_devices(4, np.inf))
    for g in lstm.groups:
        assert len(set(dev[g].tolist())) == 1
    p = random_problem(1, 12, 2)
    p.param_bytes[:] = 0
    assert weight_bands(p, SolveOptions(memory_model="peak")).status == "unknown"


def test_answer_fits_is_deterministic_and_beats_min_memory_on_an_lstm(lstm):
    p = lstm.with_devices(4, 2.0 * memory_lower_bound(lstm, "peak")["best"])
    a = weight_bands(p, SolveOptions(memory_model="peak"))
    b = weight_bands(p, SolveOptions(memory_model="peak"))
    assert a.status == "heuristic" and a.objective == b.objective
    assert np.array_equal(a.placement, b.placement)
    ev = check(p, a.placement, a.start, "peak")
    assert ev.makespan == pytest.approx(a.objective)
    assert float(np.max(ev.peak_memory / p.memory)) <= 1 + 1e-12
    mm = min_memory(p, SolveOptions(memory_model="peak"))
    assert mm.objective is not None and a.objective < 0.5 * mm.objective  # measured: 28.8 against 87.7


def test_method_row_and_portfolio_place():
    assert get("weight-bands").func is weight_bands
    assert PEAK_TIGHT_ORDER.index("weight-bands") == PEAK_TIGHT_ORDER.index("min-memory") + 1
