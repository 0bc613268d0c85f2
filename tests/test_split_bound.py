"""The pivot bound (placement/split_bound.py): pivots as defined (comparable with every node), the
induced sub-problem, never above the brute-force optimum on tiny two-part graphs (static and peak
memory), never above the proved msr-fiddle optima, and stronger than the others where each part
has its own bottleneck."""
from __future__ import annotations

import random

import numpy as np
import pytest

from formulations.bruteforce import enumerate_best
from placement.bounds import lower_bounds
from placement.formats.fiddle import read_fiddle
from placement.problem import Problem, make_problem
from placement.split_bound import induced, pivot_mask
from tests.conftest import random_problem, tiny_optimum


def _reach(prob: Problem) -> list[set[int]]:
    """Descendants of every node, by plain graph search."""
    succ: list[list[int]] = [[] for _ in range(prob.n)]
    for u, v in zip(prob.src.tolist(), prob.dst.tolist()):
        succ[u].append(v)
    out = []
    for s in range(prob.n):
        seen, todo = set(), [s]
        while todo:
            for w in succ[todo.pop()]:
                if w not in seen:
                    seen.add(w)
                    todo.append(w)
        out.append(seen)
    return out


@pytest.mark.parametrize("seed", range(60))
def test_pivots_are_the_nodes_comparable_with_every_other(seed):
    prob = random_problem(seed, random.Random(seed).randint(2, 12), 2, edge_p=random.Random(seed).choice([0.2, 0.5, 0.8]))
    desc = _reach(prob)
    expected = {x for x in range(prob.n)
                if all(y == x or y in desc[x] or x in desc[y] for y in range(prob.n))}
    got = set(prob.topo_order[pivot_mask(prob)].tolist())
    assert got == expected


def test_induced_keeps_the_edges_groups_and_devices_inside():
    nodes = [{"id": "a", "time": 1, "colocate": "g"}, {"id": "b", "time": 2, "colocate": "g"},
             {"id": "c", "time": 3, "devices": [1]}, {"id": "d", "time": 4, "colocate": "h"}]
    for rec in nodes:
        rec.update(out_bytes=1, param_bytes=0)
    edges = [{"src": "a", "dst": "b", "comm": 5}, {"src": "b", "dst": "c", "comm": 6}, {"src": "c", "dst": "d", "comm": 7}]
    prob = make_problem(nodes, edges, devices=2, memory=100.0)
    sub = induced(prob, np.array([False, True, True, True]))
    assert sub.ids == ["b", "c", "d"] and sub.time.tolist() == [2, 3, 4]
    assert list(zip(sub.src.tolist(), sub.dst.tolist(), sub.comm.tolist())) == [(0, 1, 6), (1, 2, 7)]
    assert sub.allowed[1] == (1,) and sub.memory.tolist() == [100.0, 100.0]
    assert [sub.colocate_names[g] for g in sub.colocate[[0, 2]].tolist()] == ["g", "h"] and sub.colocate[1] == -1
    assert [m.tolist() for m in sub.groups] == [[0], [2]]


def two_parts(seed: int, memory_model: str) -> Problem:
    """A random part of 2-4 nodes, a pivot, a random part of 2-4 nodes after it (every node of the
    first reaches the pivot, the pivot reaches every node of the second); times 0-4, transfers 0-6,
    2-3 devices, memory that binds on some."""
    rng = random.Random(seed)
    a = rng.randint(2, 4)
    b = rng.randint(2, 7 - a)  # brute force stays quick up to 8 nodes
    names = [f"a{i}" for i in range(a)] + ["x"] + [f"b{i}" for i in range(b)]
    nodes = [{"id": v, "time": rng.randint(0, 4), "out_bytes": rng.randint(0, 20),
              "param_bytes": rng.randint(0, 10)} for v in names]
    edges = []
    for part, hub, inward, p in ((names[:a], "x", True, 0.6), (names[a + 1:], "x", False, 0.15)):
        if seed % 2:
            p = 0.75 - p  # one part a chain, the other wide work (so each has its own bottleneck)
        for i, u in enumerate(part):
            for v in part[i + 1:]:
                if rng.random() < p:
                    edges.append({"src": u, "dst": v, "comm": rng.randint(0, 6)})
        for i, u in enumerate(part):
            # a node with no successor in the first part feeds the pivot (so it is an ancestor);
            # one with no predecessor in the second part is fed by it
            linked = any(e["src" if inward else "dst"] == u for e in edges)
            if not linked or rng.random() < 0.3:
                edges.append({"src": u, "dst": hub, "comm": rng.randint(0, 6)} if inward
                             else {"src": hub, "dst": u, "comm": rng.randint(0, 6)})
    if seed % 5 == 0:
        nodes[0]["colocate"] = nodes[-1]["colocate"] = "g"  # colocation across the pivot only removes placements
    need = sum(x["param_bytes"] + (x["out_bytes"] if memory_model == "static" else 0) for x in nodes)
    one = max(x["param_bytes"] + x["out_bytes"] for x in nodes)
    cap = max(need * rng.uniform(0.4, 1.2), one * (1.2 if memory_model == "static" else 3.0), 1.0)
    return make_problem(nodes, edges, devices=rng.randint(2, 3), memory=cap, name=f"parts{seed}")


@pytest.mark.parametrize("memory_model", ["static", "peak"])
def test_never_above_the_brute_force_optimum(memory_model, monkeypatch):
    import placement.bounds as bounds  # noqa: PLC0415

    stronger = 0
    for seed in range(120 if memory_model == "static" else 60):
        prob = two_parts(seed, memory_model)
        x = prob.index["x"]
        assert x in prob.topo_order[pivot_mask(prob)].tolist()
        best = tiny_optimum(prob, memory_model)
        lbs = lower_bounds(prob, memory_model)
        if best is None:
            continue
        assert lbs.pivot <= best[0] + 1e-9, f"seed {seed}: pivot bound {lbs.pivot} above the optimum {best[0]}"
        assert lbs.best <= best[0] + 1e-9
        # what the pivot sees that the bounds before it miss: the energy bound (session 24) also
        # sees a chain before x and a layer after it, and the forced bound starts from it
        with monkeypatch.context() as m:
            m.setattr(bounds, "energy_bound", lambda *args: 0.0)
            old = lower_bounds(prob, memory_model)
        others = max(v for k, v in old.as_dict().items() if k not in ("pivot", "best"))
        stronger += old.pivot > others + 1e-9
    if memory_model == "static":
        assert stronger > 0  # it sees what the others miss on some of them


def test_each_part_keeps_its_own_bottleneck():
    # a -> b -> x -> {c, d, e, f}, every node 1 ms, no transfer cost, 2 devices: before x a chain
    # of 2 (the critical path), after it 4 ms of work on 2 devices (the load): 2 + 0 + 2 = 4,
    # where the whole graph's critical path and load say 3
    nodes = [{"id": v, "time": 0 if v == "x" else 1, "out_bytes": 0, "param_bytes": 0} for v in "abxcdef"]
    edges = [{"src": "a", "dst": "b", "comm": 0}, {"src": "b", "dst": "x", "comm": 0}]
    edges += [{"src": "x", "dst": v, "comm": 0} for v in "cdef"]
    prob = make_problem(nodes, edges, devices=2, memory=1.0)
    lbs = lower_bounds(prob, "static")
    assert lbs.critical_path == 3 and lbs.load == 3
    assert lbs.pivot == pytest.approx(4)
    best, complete = enumerate_best(prob, "static")
    assert complete and best[0] == pytest.approx(4)


def test_no_pivot_no_bound():
    # two independent chains: no node is comparable with every other
    nodes = [{"id": v, "time": 1, "out_bytes": 0, "param_bytes": 0} for v in "abcd"]
    edges = [{"src": "a", "dst": "b", "comm": 1}, {"src": "c", "dst": "d", "comm": 1}]
    assert lower_bounds(make_problem(nodes, edges, devices=2, memory=1.0)).pivot == 0.0


@pytest.mark.parametrize("graph, optimum", [("bert_l-3_inference", 223.650), ("bert_l-6_inference", 252.143)])
def test_never_above_the_proved_msr_fiddle_optima(workloads, graph, optimum):
    # optima proved by CP-SAT (static model, the file's devices and memory): bench/results_exact.md
    prob = read_fiddle(workloads / "latency-inputs" / "OperatorGraphs" / f"{graph}.json")
    lbs = lower_bounds(prob, "static")
    assert lbs.pivot <= optimum * (1 + 1e-6)
    assert lbs.best <= optimum * (1 + 1e-6)
