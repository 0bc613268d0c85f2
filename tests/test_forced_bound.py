"""The forced-cluster bound (placement/forced_bound.py): never above the brute-force optimum on tiny
instances with binding memory (static and peak), never above the proved msr-fiddle optima; its
parts (components, Jackson's preemptive bound) against plain enumerations."""
from __future__ import annotations

import itertools
import random

import networkx as nx
import numpy as np
import pytest

from formulations.bruteforce import enumerate_best
from placement.bounds import lower_bounds
from placement.formats.fiddle import read_fiddle
from placement.forced_bound import _components, forced_bound, jackson_bound
from placement.problem import make_problem
from tests.conftest import random_problem


def tiny(seed: int, memory_model: str):
    """3-7 nodes on 2-3 devices, transfers up to 3x the longest operator, a capacity that binds."""
    rng = random.Random(seed)
    prob = random_problem(seed, rng.randint(3, 7), rng.randint(2, 3), edge_p=0.5,
                          colocate_p=0.3 if seed % 3 == 0 else 0.0)
    nodes = [{"id": prob.ids[i], "time": float(prob.time[i]), "out_bytes": float(prob.out_bytes[i]),
              "param_bytes": float(prob.param_bytes[i])} for i in range(prob.n)]
    for i, g in enumerate(prob.colocate.tolist()):
        if g >= 0:
            nodes[i]["colocate"] = prob.colocate_names[g]
    edges = [{"src": prob.ids[u], "dst": prob.ids[v], "comm": float(c) * rng.choice([1, 3, 5])}
             for u, v, c in zip(prob.src.tolist(), prob.dst.tolist(), prob.comm.tolist())]
    need = prob.param_bytes + (prob.out_bytes if memory_model == "static" else 0.0)
    cap = max(float(need.sum()) * rng.uniform(0.35, 0.9), float((prob.param_bytes + prob.out_bytes).max()) * 1.1, 1.0)
    return make_problem(nodes, edges, devices=prob.k, memory=cap, name=f"tiny{seed}")


@pytest.mark.parametrize("memory_model", ["static", "peak"])
def test_never_above_the_brute_force_optimum(memory_model):
    stronger = 0
    for seed in range(120 if memory_model == "static" else 60):  # the peak enumeration is slower
        prob = tiny(seed, memory_model)
        best, complete = enumerate_best(prob, memory_model)
        assert complete
        lbs = lower_bounds(prob, memory_model)
        assert lbs.forced >= lbs.communication - 1e-9
        if best is not None:
            assert lbs.best <= best[0] + 1e-9, f"seed {seed}: bound {lbs.as_dict()} above the optimum {best[0]}"
            stronger += lbs.forced > max(lbs.critical_path, lbs.load, lbs.largest_group, lbs.communication) + 1e-9
    if memory_model == "static":
        assert stronger > 0  # the clusters and their memory do raise the bound on some of them


def test_an_edge_too_expensive_to_cut_and_too_big_to_keep():
    # a -> b, each 1 ms and 6 bytes, capacity 10 bytes: they cannot share a device, so the transfer
    # of 100 ms is paid: the optimum is 102; the critical path and the communication bound say 2
    nodes = [{"id": x, "time": 1, "out_bytes": 6, "param_bytes": 0} for x in "ab"]
    prob = make_problem(nodes, [{"src": "a", "dst": "b", "comm": 100}], devices=2, memory=10)
    lbs = lower_bounds(prob, "static")
    assert lbs.communication == 2
    assert lbs.forced == pytest.approx(102)
    assert enumerate_best(prob, "static")[0][0] == pytest.approx(102)
    # under the peak model only params are held for sure: nothing forces them apart
    assert lower_bounds(prob, "peak").forced == pytest.approx(2)


def test_a_forced_cluster_runs_one_at_a_time():
    # a fans out to b, c, d (1 ms each, transfers of 50): below 51 they all share a's device and
    # run one after another: 1 + 3 = 4; the communication bound says 2 (one of them local)
    nodes = [{"id": x, "time": 1, "out_bytes": 0, "param_bytes": 0} for x in "abcd"]
    edges = [{"src": "a", "dst": x, "comm": 50} for x in "bcd"]
    prob = make_problem(nodes, edges, devices=4)
    lbs = lower_bounds(prob, "static")
    assert lbs.critical_path == 2
    assert lbs.forced == pytest.approx(4)
    assert enumerate_best(prob, "static")[0][0] == pytest.approx(4)


def test_components_match_networkx():
    rng = np.random.default_rng(0)
    for _ in range(50):
        n = int(rng.integers(1, 40))
        m = int(rng.integers(0, 60))
        src, dst = rng.integers(0, n, m), rng.integers(0, n, m)
        label = _components(n, src, dst)
        g = nx.Graph()
        g.add_nodes_from(range(n))
        g.add_edges_from(zip(src.tolist(), dst.tolist()))
        for comp in nx.connected_components(g):
            members = sorted(comp)
            assert set(label[members].tolist()) == {members[0]}


def test_jackson_is_the_max_over_subsets_and_below_every_sequence():
    # Carlier: the preemptive optimum equals max over subsets of min release + total time + min tail;
    # and every non-preemptive sequence (each job started as early as allowed) is at least that
    rng = random.Random(1)
    for _ in range(200):
        n = rng.randint(1, 6)
        r = np.array([float(rng.randint(0, 10)) for _ in range(n)])
        p = np.array([float(rng.randint(0, 6)) for _ in range(n)])
        q = np.array([float(rng.randint(0, 10)) for _ in range(n)])
        subsets = max(min(r[list(s)]) + p[list(s)].sum() + min(q[list(s)])
                      for k in range(1, n + 1) for s in itertools.combinations(range(n), k))
        seq = float("inf")
        for perm in itertools.permutations(range(n)):
            t, worst = 0.0, 0.0
            for j in perm:
                t = max(t, r[j]) + p[j]
                worst = max(worst, t + q[j])
            seq = min(seq, worst)
        assert jackson_bound(r, p, q) == pytest.approx(subsets)
        assert jackson_bound(r, p, q) <= seq + 1e-9


@pytest.mark.parametrize("graph, optimum", [("bert_l-3_inference", 223.650), ("bert_l-6_inference", 252.143)])
def test_never_above_the_proved_msr_fiddle_optima(workloads, graph, optimum):
    # optima proved by CP-SAT (static model, the file's devices and memory): bench/results_exact.md
    prob = read_fiddle(workloads / "latency-inputs" / "OperatorGraphs" / f"{graph}.json")
    lbs = lower_bounds(prob, "static")
    assert lbs.communication - 1e-9 <= lbs.forced <= optimum * (1 + 1e-6)
    assert forced_bound(prob, "static") <= optimum * (1 + 1e-6)
