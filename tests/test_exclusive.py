"""heuristics/exclusive.py and the readers-first member: which sources are slow to copy, which
readers go first on their device, and what that does to ETF on a recurrent forward pass (a hand
instance) and on generated LSTMs (static and peak memory), including chain-home's variant."""
from __future__ import annotations

import numpy as np
import pytest

from heuristics.chain_home import chain_home
from heuristics.exclusive import COPY_OVER_READ, MIN_READERS, Exclusive, exclusive_sources
from heuristics.list_scheduling import etf, readers_first
from placement.evaluator import evaluate
from placement.generate import generate
from placement.problem import make_problem
from placement.solution import SolveOptions



def static() -> SolveOptions:
    """Fresh options: the time limit counts from their creation."""
    return SolveOptions(memory_model="static", time_limit=30)


def fan(readers: int = MIN_READERS, copy: float = 8.0, read: float = 1.0, source_time: float = 0.0, fed: bool = False):
    """A source W read by ``readers`` nodes of time ``read``, each copy costing ``copy``; with
    ``fed`` W itself has an input (so it is no source)."""
    nodes = [{"id": "W", "time": source_time, "out_bytes": 1, "param_bytes": 0}]
    edges = []
    if fed:
        nodes.append({"id": "X", "time": 1.0, "out_bytes": 1, "param_bytes": 0})
        edges.append({"src": "X", "dst": "W", "comm": 1.0})
    for i in range(readers):
        nodes.append({"id": f"R{i}", "time": read, "out_bytes": 1, "param_bytes": 0})
        edges.append({"src": "W", "dst": f"R{i}", "comm": copy})
    return make_problem(nodes, edges, devices=2)


def test_sources_slow_to_copy_are_found():
    p = fan()
    (s,) = exclusive_sources(p)
    assert p.ids[s.node] == "W"
    assert sorted(p.ids[r] for r in s.readers) == [f"R{i}" for i in range(MIN_READERS)]
    assert s.copy == pytest.approx(8.0) and s.work == pytest.approx(MIN_READERS * 1.0)


@pytest.mark.parametrize("problem, why", [
    (fan(readers=MIN_READERS - 1, copy=6.0), "too few readers"),
    (fan(copy=COPY_OVER_READ * 1.0 - 0.5), "copy cheaper than COPY_OVER_READ readers"),
    (fan(copy=MIN_READERS * 1.0 + 1.0), "the readers' work is less than one copy"),
    (fan(fed=True), "not a source"),
])
def test_other_fans_are_not(problem, why):
    assert exclusive_sources(problem) == [], why


def test_tiers():
    p = fan()
    ex = Exclusive(exclusive_sources(p))
    r, w = p.ids.index("R0"), p.ids.index("W")
    assert ex.tier(r, 0, 0.0) == 0.0  # W not placed yet
    ex.placed(w, 1, 2.0)  # W ends at 2: a copy can be elsewhere at 10
    assert ex.tier(r, 1, 0.0) == pytest.approx(-10.0)
    assert ex.tier(r, 1, 9.9) == pytest.approx(-10.0)
    assert ex.tier(r, 1, 10.0) == 0.0  # a copy could be on the other device by then
    assert ex.tier(r, 0, 0.0) == 0.0  # not W's device
    assert ex.tier(w, 1, 0.0) == 0.0  # not a reader
    ex.placed(p.ids.index("R1"), 1, 0.0)  # not a source: nothing changes
    assert ex.tier(p.ids.index("R2"), 1, 0.0) == pytest.approx(-10.0)


def wavefront(steps: int = 8, layers: int = 2, copy: float = 8.0):
    """An embedding E (a source) looked up once per step (L_i, time 1, copy 8), and ``layers``
    recurrent chains over the steps (C_l_i reads C_(l-1)_i, or L_i, and C_l_(i-1)), on 3 devices.
    Until time 8 only E's device can look up, so every lookup it delays holds up the chains; the
    chains' early cells outrank the late lookups by bottom level, so ETF puts cells there."""
    nodes = [{"id": "E", "time": 0.0, "out_bytes": 1, "param_bytes": 0}]
    edges = []
    for i in range(steps):
        nodes.append({"id": f"L{i}", "time": 1.0, "out_bytes": 1, "param_bytes": 0})
        edges.append({"src": "E", "dst": f"L{i}", "comm": copy})
        for c in range(layers):
            nodes.append({"id": f"C{c}_{i}", "time": 1.0, "out_bytes": 1, "param_bytes": 0})
            edges.append({"src": f"C{c - 1}_{i}" if c else f"L{i}", "dst": f"C{c}_{i}", "comm": 0.5})
            if i:
                edges.append({"src": f"C{c}_{i - 1}", "dst": f"C{c}_{i}", "comm": 0.5})
    return make_problem(nodes, edges, devices=3)


def first_on_home(p, sol, until: float) -> list[str]:
    """What E's device starts before ``until``, in order (E itself left out)."""
    ev = evaluate(p, sol.placement, order=sol.order)
    home = int(sol.placement[p.ids.index("E")])
    return [p.ids[v] for v in sol.order[home] if ev.start[v] < until and p.ids[v] != "E"]


def test_the_embedding_device_looks_up_first():
    p = wavefront()
    plain, first = etf(p, static()), readers_first(p, static())
    assert first.status == "heuristic" and first.info["sources"] == 1
    assert first_on_home(p, first, 8.0) == [f"L{i}" for i in range(8)]  # back to back from 0
    assert any(not v.startswith("L") for v in first_on_home(p, plain, 8.0))  # ETF runs cells there
    assert first.objective < plain.objective
    ev = evaluate(p, first.placement, order=first.order)
    assert first.objective == pytest.approx(ev.makespan, rel=1e-12)


@pytest.mark.parametrize("kind", ["cnn", "transformer"])
def test_gives_up_without_such_a_source(kind):
    p = generate(kind, 600, seed=2, devices=4)
    sol = readers_first(p, static())
    assert sol.status == "unknown" and sol.placement is None
    assert "no source read by" in sol.reason


@pytest.fixture(scope="module")
def lstm():
    return generate("lstm", 2000, seed=3, devices=4, memory_fraction=None)


def test_lstm_member_is_deterministic_and_checked(lstm):
    a, b = readers_first(lstm, static()), readers_first(lstm, static())
    assert a.status == "heuristic" and a.info["sources"] >= 2  # the embedding, the output layer, the layers
    assert np.array_equal(a.placement, b.placement) and a.order == b.order
    ev = evaluate(lstm, a.placement, order=a.order)
    assert a.objective == pytest.approx(ev.makespan, rel=1e-12)


def test_peak_memory_is_kept():
    p = generate("lstm", 2000, seed=3, devices=4)  # the generator's capacities bind
    opts = SolveOptions(memory_model="peak", time_limit=30)
    sol = readers_first(p, opts)
    assert sol.status in ("heuristic", "unknown")
    if sol.status == "heuristic":
        assert evaluate(p, sol.placement, order=sol.order, memory_model="peak").feasible(p)
    else:
        assert sol.reason


def test_chain_home_tries_its_best_variant_with_readers_first(lstm):
    sol = chain_home(lstm, static())
    tried = sol.info["tried"]
    labels = [t["variant"] for t in tried]
    assert any(v.endswith("+readers-first") for v in labels)
    plain = [t["makespan"] for t in tried if not t["variant"].endswith("+readers-first") and t.get("fits")]
    assert sol.objective <= min(plain)
    assert sol.objective == pytest.approx(min(t["makespan"] for t in tried if t.get("fits")))
