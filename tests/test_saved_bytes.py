"""The peak model's placement-only cuts (formulations/saved_bytes.py) and the path bounds that
use them, against enumeration on tiny training-like graphs: no placement with a schedule within
the peak capacities may break a cut, and the path bound never exceeds the enumerated optimum."""
from __future__ import annotations

import random

import numpy as np
import pytest

from formulations.bruteforce import placements
from formulations.pathbound import path_lower_bound
from formulations.peak_search import best_schedule_bb
from formulations.saved_bytes import held_tensors
from formulations.units import units
from placement.bounds import longest_path
from placement.evaluator import evaluate
from placement.problem import make_problem


def training_chain(seed: int):
    """A forward chain of 2-3 layers, its backward chain, each backward colocated with its
    forward layer and consuming that layer's output (a saved activation), capacities from 40% to
    100% of the one-device FIFO peak on 2-3 devices."""
    r = random.Random(seed)
    layers, k = r.randint(2, 3), r.choice([2, 3])
    nodes, edges = [], []
    for i in range(layers):
        nodes.append({"id": f"f{i}", "time": r.randint(1, 4), "out_bytes": r.randint(1, 9), "param_bytes": r.randint(0, 3),
                      "colocate": f"L{i}"})
        if i:
            edges.append({"src": f"f{i - 1}", "dst": f"f{i}", "comm": r.randint(0, 3)})
    for i in reversed(range(layers)):
        nodes.append({"id": f"b{i}", "time": r.randint(1, 4), "out_bytes": r.randint(0, 6), "param_bytes": 0, "colocate": f"L{i}"})
        edges.append({"src": f"f{i}", "dst": f"b{i}", "comm": r.randint(0, 3)})
        if i + 1 < layers:
            edges.append({"src": f"b{i + 1}", "dst": f"b{i}", "comm": r.randint(0, 3)})
    if r.random() < 0.5:  # a loss node between the passes
        nodes.append({"id": "loss", "time": 1, "out_bytes": 1, "param_bytes": 0})
        edges.append({"src": f"f{layers - 1}", "dst": "loss", "comm": 1})
        edges.append({"src": "loss", "dst": f"b{layers - 1}", "comm": 1})
    one = make_problem(nodes, edges, devices=1, memory=float("inf"))
    peak = float(evaluate(one, np.zeros(one.n, dtype=np.int64), memory_model="peak").peak_memory.max())
    return make_problem(nodes, edges, devices=k, memory=float(max(1, round(r.uniform(0.4, 1.0) * peak))), name=f"train{seed}")


@pytest.mark.parametrize("seed", range(30))
def test_no_feasible_placement_breaks_a_saved_bytes_cut(seed):
    p = training_chain(seed)
    cuts = held_tensors(p, p.n)
    un = units(p)
    best = None
    for pl in placements(p):
        got, complete = best_schedule_bb(p, [pl], "peak")
        assert complete
        if got is None:
            continue
        best = got[0] if best is None else min(best, got[0])
        dev_of_unit = np.array([pl[m[0]] for m in un.members])
        params = np.bincount(pl, weights=p.param_bytes, minlength=p.k)
        for h in cuts:
            assert np.all(params + h.device_load(dev_of_unit, p.out_bytes, p.k) <= p.memory + 1e-9)
    if best is not None:
        assert path_lower_bound(p, "peak") <= best + 1e-9


def test_the_cuts_bind_on_some_training_graphs():
    """The cut of the loss-time activations exceeds a device on some of these instances (else the
    test above would check nothing), and the path bound with it exceeds the critical path."""
    binding = stronger = 0
    for seed in range(30):
        p = training_chain(seed)
        for h in held_tensors(p, p.n):
            binding += float(p.param_bytes.sum()) + h.total > float(p.memory[0])
        stronger += path_lower_bound(p, "peak") > float(longest_path(p).max()) + 1e-9
    assert binding >= 5 and stronger >= 1


@pytest.mark.parametrize("seed", range(0, 30, 3))
def test_cpsat_with_held_cuts_keeps_the_optimum(seed):
    """CP-SAT with the cuts as knapsacks (opt-in ``held_cuts``) proves the enumerated optimum or
    infeasibility, never less."""
    from formulations.cpsat import cpsat
    from placement.solution import SolveOptions

    p = training_chain(seed)
    got, complete = best_schedule_bb(p, placements(p), "peak")
    assert complete
    sol = cpsat(p, SolveOptions(time_limit=10, workers=1, memory_model="peak", extra={"held_cuts": True}))
    if got is None:
        assert sol.status == "infeasible"
    else:
        assert sol.status == "optimal" and sol.objective == pytest.approx(got[0])
