"""Lower bounds are valid (never above a brute-force optimum on tiny graphs) and infeasibility
proofs are right; memory sizes parse as documented."""
from __future__ import annotations

import itertools
import math
import random

import pytest

from placement.bounds import infeasibility, lower_bounds, longest_path
from placement.evaluator import evaluate
from placement.problem import make_problem
from placement.units import parse_bytes, parse_memory_list
from tests.conftest import random_problem


@pytest.mark.parametrize("seed", range(15))
def test_bounds_never_exceed_best_fifo_placement(seed):
    rng = random.Random(seed)
    prob = random_problem(seed, rng.randint(3, 7), rng.randint(1, 3), colocate_p=0.3)
    mask = prob.allowed_mask()
    best = math.inf
    for pl in itertools.product(range(prob.k), repeat=prob.n):
        if all(mask[i, d] for i, d in enumerate(pl)) and all(len({pl[i] for i in g}) == 1 for g in prob.groups):
            best = min(best, evaluate(prob, pl).makespan)
    assert lower_bounds(prob).best <= best + 1e-9


def test_longest_path_by_hand():
    nodes = [{"id": i, "time": t, "out_bytes": 0, "param_bytes": 0} for i, t in enumerate([1, 5, 2, 1])]
    edges = [{"src": 0, "dst": 1, "comm": 9}, {"src": 0, "dst": 2, "comm": 1}, {"src": 1, "dst": 3, "comm": 0}, {"src": 2, "dst": 3, "comm": 7}]
    prob = make_problem(nodes, edges, devices=2)
    assert longest_path(prob).tolist() == [1, 6, 3, 7]
    assert longest_path(prob, edge_weights=prob.comm).max() == 1 + 9 + 5 + 0 + 1
    lb = lower_bounds(prob)
    assert (lb.critical_path, lb.load, lb.largest_node) == (7, 4.5, 5)


def test_infeasibility_proofs():
    nodes = [{"id": "big", "time": 1, "out_bytes": 60, "param_bytes": 50},
             {"id": "x", "time": 1, "out_bytes": 10, "param_bytes": 0, "colocate": "g"},
             {"id": "y", "time": 1, "out_bytes": 10, "param_bytes": 0, "colocate": "g"}]
    prob = make_problem(nodes, [{"src": "big", "dst": "x", "comm": 1}], devices=2, memory=100)
    assert "node 'big' needs 110" in infeasibility(prob, "static")
    assert "node 'big' needs 110" in infeasibility(prob, "peak")  # params + its output while it runs
    assert infeasibility(prob.with_devices(2, 110), "static") is None
    assert "colocation group 'g' needs 20" in infeasibility(make_problem(nodes[1:], [], devices=2, memory=15), "static")
    total = make_problem([dict(nodes[1], colocate=None), dict(nodes[2], colocate=None)], [], devices=2, memory=9.9)
    assert "node 'x' needs 10" in infeasibility(total, "static")
    spread = make_problem([{"id": i, "time": 1, "out_bytes": 6, "param_bytes": 0} for i in range(5)], [], devices=2, memory=14)
    assert "all nodes together need 30" in infeasibility(spread, "static")
    assert infeasibility(spread, "peak") is None  # outputs are not all alive at once


@pytest.mark.parametrize("text,value", [("16GB", 16e9), ("16GiB", 16 * 2**30), ("512", 512), ("1.5e3KB", 1.5e6),
                                        ("2 MiB", 2 * 2**20), ("inf", math.inf), (4096, 4096.0)])
def test_parse_bytes(text, value):
    assert parse_bytes(text) == value


@pytest.mark.parametrize("text", ["", "GB", "-5GB", "12 parsecs", "nan"])
def test_parse_bytes_rejects(text):
    with pytest.raises(ValueError):
        parse_bytes(text)


def test_memory_list():
    assert parse_memory_list("1GB,2GiB") == [1e9, 2 * 2**30]
    assert parse_memory_list("8GB") == 8e9
