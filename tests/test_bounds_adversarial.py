"""Adversarial checks of session 15's bounds (pivot, release, memory chain) and of how
placement/bounds.py combines them: every bound, and the best, never above the exact optimum on
tiny instances with the options that could break a proof (chain nodes and feeders that take no
time, feeders of one size near the room's edge, colocation groups, allowed devices, per-device
capacities, infinite memory, K = 1-3, static and peak), finite bounds where nothing fits, and the
tiny-optimum helper itself against CP-SAT given none of our bounds.

The exact optimum here never goes through lower_bounds: the static model enumerates placements
and left-justified device orders, the peak model runs the event-order search
(formulations/peak_search.py) directly. (The review of session 15 found with these generators
that the memory chain bound exceeded the optimum when a chain node takes no time; fixed.)"""
from __future__ import annotations

import math
import random

import numpy as np
import pytest

from placement.bounds import lower_bounds
from placement.problem import Problem, ProblemError, make_problem
from tests.conftest import part_or_all, scaled, share_of, tiny_optimum
from tests.guard import makespan_optimum as exact  # enumeration / event-order search, no bound of ours


def _time(rng: random.Random, zero: float = 0.25) -> int:
    return 0 if rng.random() < zero else rng.randint(1, 4)


def random_dag(rng: random.Random) -> tuple[list[dict], list[dict]]:
    """3-6 nodes (a quarter of no time), bytes 0-3, each forward pair an edge with probability 1/2,
    transfers 0-5: the plain random family the bound tests mix with their shaped ones."""
    n = rng.randint(3, 6)
    nodes = [{"id": f"v{i}", "time": _time(rng), "out_bytes": rng.randint(0, 3), "param_bytes": rng.randint(0, 2)}
             for i in range(n)]
    edges = [{"src": f"v{u}", "dst": f"v{v}", "comm": rng.choice([0, 0.5, 1, 2, 5])}
             for v in range(n) for u in range(v) if rng.random() < 0.5]
    return nodes, edges


def solved_cases(make, memory_model: str, count: int, seed: int):
    """(problem, enumerated optimum) for ``count`` graphs from ``make(rng)`` (nodes, edges) with the
    options of :func:`_options` (K = 1-3), skipping those where nothing fits."""
    rng = random.Random(seed)
    for _ in range(count):
        nodes, edges = make(rng)
        prob = _options(rng, nodes, edges, memory_model, rng.randint(1, 3))
        best = exact(prob, memory_model)
        if best is not None:
            yield prob, best


def _options(rng: random.Random, nodes: list[dict], edges: list[dict], memory_model: str, k: int) -> Problem:
    """Sometimes a colocation pair, allowed devices on two nodes, per-device or infinite
    capacities; capacities near what the model needs."""
    if rng.random() < 0.2:
        for x in rng.sample(nodes, 2):
            x["colocate"] = "g"
    if rng.random() < 0.2 and k > 1:
        for x in rng.sample(nodes, 2):
            x["devices"] = sorted(rng.sample(range(k), rng.randint(1, k)))
    need = sum(x["param_bytes"] + (x["out_bytes"] if memory_model == "static" else 0) for x in nodes)
    one = max(x["param_bytes"] + x["out_bytes"] for x in nodes)
    outs = sorted((x["out_bytes"] for x in nodes), reverse=True)
    caps = []
    for _ in range(k):
        if memory_model == "static":
            caps.append(float(round(max(need / k * rng.uniform(0.8, 1.6), one * rng.uniform(1.0, 2.5), 1.0))))
        else:
            top = sum(outs[:3]) + max(x["param_bytes"] for x in nodes)
            caps.append(float(round(max(need / k * rng.uniform(0.8, 1.6), top * rng.uniform(0.6, 1.3), 1.0))))
    if rng.random() < 0.15:
        caps = [math.inf] * k
    elif rng.random() < 0.5:
        caps = [caps[0]] * k
    memory = caps if len(set(caps)) > 1 else caps[0]
    try:
        return make_problem(nodes, edges, devices=k, memory=memory, name="adversarial")
    except ProblemError:  # a colocation pair with no allowed device in common
        for x in nodes:
            x.pop("devices", None)
        return make_problem(nodes, edges, devices=k, memory=memory, name="adversarial")


def zero_time_chain(seed: int, memory_model: str = "peak") -> Problem:
    """x (no output) -> c0 -> ... -> c(L-1), L = 4-5, expensive links (the memory chain bound's
    heavy run), nodes that often take no time, 1-3 feeders of 10 bytes mostly into the first
    sums, capacities of 1-3 feeders and a little."""
    rng = random.Random(f"chainz-{seed}")
    length = rng.randint(4, 5)
    nodes = [{"id": "x", "time": rng.randint(1, 3), "out_bytes": 0, "param_bytes": 0}]
    edges = [{"src": "x", "dst": "c0", "comm": 0}]
    for i in range(length):
        nodes.append({"id": f"c{i}", "time": _time(rng, 0.45), "out_bytes": rng.choice([2, 3, 5, 10]),
                      "param_bytes": rng.choice([0, 0, 2])})
        if i:
            edges.append({"src": f"c{i - 1}", "dst": f"c{i}", "comm": rng.randint(4, 8)})
    for j in range(rng.randint(1, 7 - length)):
        nodes.append({"id": f"g{j}", "time": _time(rng, 0.3), "out_bytes": 10, "param_bytes": 0})
        edges.append({"src": f"g{j}", "dst": f"c{rng.choice([0, 0, 1, rng.randrange(length)])}", "comm": rng.randint(0, 8)})
        if rng.random() < 0.3:
            edges.append({"src": "x", "dst": f"g{j}", "comm": rng.randint(0, 3)})
    k = rng.randint(1, 3)
    if rng.random() < 0.4:
        return _options(rng, nodes, edges, memory_model, k)
    return make_problem(nodes, edges, devices=k, memory=float(10 * rng.randint(1, 3) + rng.randint(0, 12)), name=f"chainz{seed}")


def training_step(seed: int, memory_model: str) -> Problem:
    """A tiny training step: a weight feeding 1-2 lookups over slow transfers, a recurrence, a loss
    (the pivot), gradients (some reading the recurrence) summed over slow transfers; times often 0."""
    rng = random.Random(f"step-{memory_model}-{seed}")
    steps = rng.randint(1, 2)
    nodes = [{"id": "we", "time": _time(rng, 0.5), "out_bytes": rng.randint(0, 10), "param_bytes": rng.randint(0, 6)},
             {"id": "loss", "time": _time(rng, 0.5), "out_bytes": rng.randint(0, 5), "param_bytes": 0}]
    edges = []
    for i in range(steps):
        nodes += [{"id": f"{v}{i}", "time": _time(rng), "out_bytes": rng.randint(0, 10), "param_bytes": 0} for v in "lrg"]
        edges += [{"src": "we", "dst": f"l{i}", "comm": rng.randint(2, 9)}, {"src": f"l{i}", "dst": f"r{i}", "comm": rng.randint(0, 3)},
                  {"src": f"r{i}", "dst": "loss", "comm": rng.randint(0, 3)}, {"src": "loss", "dst": f"g{i}", "comm": rng.randint(0, 3)}]
        if rng.random() < 0.5:
            edges.append({"src": f"r{i}", "dst": f"g{i}", "comm": rng.randint(0, 9)})
        if i:
            edges.append({"src": f"r{i - 1}", "dst": f"r{i}", "comm": rng.randint(0, 3)})
    nodes.append({"id": "s", "time": _time(rng), "out_bytes": rng.randint(0, 10), "param_bytes": 0})
    edges += [{"src": f"g{i}", "dst": "s", "comm": rng.randint(2, 9)} for i in range(steps)]
    return _options(rng, nodes, edges, memory_model, rng.randint(1, 3))


def slow_weight(seed: int, memory_model: str) -> Problem:
    """A weight (often no time) feeding 2-4 lookups over slow transfers, some of them also read by a
    recurrence over its lookups, a second weight sometimes: the release bound's setting."""
    rng = random.Random(f"release-{memory_model}-{seed}")
    steps = rng.randint(2, 4)
    nodes = [{"id": "w", "time": _time(rng, 0.4), "out_bytes": rng.randint(0, 20), "param_bytes": rng.randint(0, 10)}]
    edges = []
    for i in range(steps):
        nodes.append({"id": f"l{i}", "time": _time(rng, 0.15), "out_bytes": rng.randint(0, 15), "param_bytes": 0})
        edges.append({"src": "w", "dst": f"l{i}", "comm": rng.randint(2, 12)})
    for i in range(min(steps, 7 - steps)):
        nodes.append({"id": f"r{i}", "time": _time(rng), "out_bytes": rng.randint(0, 15), "param_bytes": 0})
        edges.append({"src": f"l{i}", "dst": f"r{i}", "comm": rng.randint(0, 3)})
        if i:
            edges.append({"src": f"r{i - 1}", "dst": f"r{i}", "comm": rng.randint(0, 3)})
        if rng.random() < 0.3:
            edges.append({"src": "w", "dst": f"r{i}", "comm": rng.randint(2, 12)})
    if len(nodes) < 8 and rng.random() < 0.5:
        nodes.append({"id": "w2", "time": _time(rng), "out_bytes": 5, "param_bytes": 1})
        edges += [{"src": "w2", "dst": f"l{i}", "comm": rng.randint(2, 12)} for i in range(steps) if rng.random() < 0.6]
    return _options(rng, nodes, edges, memory_model, rng.randint(1, 3))


def _assert_below(prob: Problem, memory_model: str, tag: str) -> bool:
    """Every bound at most the exact optimum; finite bounds when nothing fits. True when solved."""
    lbs = lower_bounds(prob, memory_model).as_dict()
    assert all(np.isfinite(v) and v >= 0 for v in lbs.values()), (tag, lbs)
    best = exact(prob, memory_model)
    if best is None:
        return False
    over = {key: v for key, v in lbs.items() if v > best * (1 + 1e-9) + 1e-9}
    assert not over, f"{tag}: {over} above the exact optimum {best}"
    return True


@part_or_all
def test_zero_time_chains_never_above_the_exact_peak_optimum(share):
    # fails at seed 81 with the bound before the session 15 review (11 > 9) and at seed 84 with
    # only its room check fixed (13 > 12: the pre-held feeders of a zero-time first sum): the
    # default part runs both
    count = share_of(share, 150, 90)
    solved = sum(_assert_below(zero_time_chain(seed), "peak", f"chainz {seed}") for seed in range(count))
    assert solved >= scaled(90, count, 150)


@part_or_all
@pytest.mark.parametrize("memory_model", ["static", "peak"])
def test_training_steps_with_every_option_never_above_the_exact_optimum(memory_model, share):
    count = share_of(share, 80, 30)
    solved = sum(_assert_below(training_step(seed, memory_model), memory_model, f"step {seed}") for seed in range(count))
    assert solved >= scaled(40, count, 80)


@part_or_all
@pytest.mark.parametrize("memory_model", ["static", "peak"])
def test_slow_weights_with_every_option_never_above_the_exact_optimum(memory_model, share):
    count = share_of(share, 80, 30)
    solved = sum(_assert_below(slow_weight(seed, memory_model), memory_model, f"release {seed}") for seed in range(count))
    assert solved >= scaled(40, count, 80)


@pytest.mark.slow
@pytest.mark.parametrize("memory_model", ["static", "peak"])
def test_many_more_seeds(memory_model):
    for seed in range(150, 1000):
        if memory_model == "peak":
            _assert_below(zero_time_chain(seed), "peak", f"chainz {seed}")
        _assert_below(training_step(seed, memory_model), memory_model, f"step {seed}")
        _assert_below(slow_weight(seed, memory_model), memory_model, f"release {seed}")


@part_or_all
@pytest.mark.parametrize("memory_model", ["static", "peak"])
def test_the_tiny_optimum_helper_agrees_with_cpsat_given_none_of_our_bounds(memory_model, share, monkeypatch):
    # conftest.tiny_optimum is the reference of the split and release tests: CP-SAT with every
    # bound of ours replaced by 0 (it cannot stop early on an invalid one) proves the same optima
    import formulations.common
    import formulations.cpsat
    from placement.solution import SolveOptions

    monkeypatch.setattr(formulations.common, "lower_bound", lambda *a, **k: 0.0)
    monkeypatch.setattr(formulations.cpsat, "lower_bound", lambda *a, **k: 0.0)
    compared = 0
    seeds = share_of(share, 12, 5)
    for seed in range(seeds):
        for prob in (training_step(seed, memory_model), slow_weight(seed, memory_model)):
            sol = formulations.cpsat.cpsat(prob, SolveOptions(memory_model=memory_model, time_limit=20, workers=1,
                                                              extra={"redundant": False}))
            if sol.status not in ("optimal", "infeasible"):
                continue
            ref = tiny_optimum(prob, memory_model)
            if sol.status == "infeasible":
                assert ref is None, (seed, ref)
            else:
                assert ref is not None and ref[0] == pytest.approx(sol.objective, rel=1e-6), (seed, ref, sol.objective)
            compared += 1
    assert compared >= scaled(20, seeds, 12)
