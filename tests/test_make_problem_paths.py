"""make_problem checks plain records with whole-list operations and falls back to a careful
per-record loop (which names the first fault) otherwise: both must build the same problem."""
from __future__ import annotations

import random

import numpy as np

from placement.problem import Link, make_problem


def records(seed: int) -> tuple[list[dict], list[dict]]:
    rng = random.Random(seed)
    n = 40
    nodes = []
    for i in range(n):
        rec = {"id": i if rng.random() < 0.5 else f"n{i}", "time": rng.choice([0, 1, 2.5, 7]),
               "out_bytes": rng.randint(0, 90), "param_bytes": rng.random() * 10}
        if rng.random() < 0.3:
            rec["colocate"] = rng.choice(["g1", "g2", 3])
        if rng.random() < 0.3:
            rec["name"] = f"op {i}"
        nodes.append(rec)
    edges = []
    for _ in range(120):
        u, v = sorted(rng.sample(range(n), 2))
        rec = {"src": nodes[u]["id"], "dst": nodes[v]["id"]}
        if rng.random() < 0.5:
            rec["comm"] = rng.random()
        if rng.random() < 0.5 or "comm" not in rec:
            rec["bytes"] = rng.randint(0, 1000)
        edges.append(rec)  # repeated pairs included: merged, the costlier transfer kept
    return nodes, edges


def test_fast_and_careful_paths_agree() -> None:
    for seed in range(20):
        nodes, edges = records(seed)
        link = Link(0.5, 100.0)
        fast = make_problem(nodes, edges, devices=3, memory=500, link=link)
        forced = [dict(rec) for rec in nodes]
        forced[-1]["devices"] = [0, 1, 2]  # an allowed-device list sends every record through the careful loop
        slow = make_problem(forced, edges, devices=3, memory=500, link=link)
        assert fast.ids == slow.ids and fast.names == slow.names
        assert fast.colocate_names == slow.colocate_names
        for attr in ("time", "out_bytes", "param_bytes", "colocate", "src", "dst", "comm"):
            assert np.array_equal(getattr(fast, attr), getattr(slow, attr)), attr
        assert np.array_equal(fast.edge_bytes, slow.edge_bytes, equal_nan=True)
        assert fast.allowed[:-1] == slow.allowed[:-1] and slow.allowed[-1] == (0, 1, 2)
        pairs = {(rec["src"], rec["dst"]) for rec in edges}
        assert fast.m == len(pairs)
        for j in range(fast.m):  # every kept edge has the largest comm among its copies
            a, b = fast.ids[int(fast.src[j])], fast.ids[int(fast.dst[j])]
            copies = [rec.get("comm", link.comm(rec.get("bytes", 0))) for rec in edges if (rec["src"], rec["dst"]) == (a, b)]
            assert fast.comm[j] == max(copies)
