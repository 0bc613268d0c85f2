"""The worked example of docs/model.md, computed by hand there and checked here."""
from __future__ import annotations

import pytest

from placement.bounds import lower_bounds
from placement.evaluator import check, evaluate
from placement.problem import make_problem


@pytest.fixture
def example():
    nodes = [
        {"id": "a", "time": 1, "out_bytes": 10, "param_bytes": 5},
        {"id": "b", "time": 2, "out_bytes": 20, "param_bytes": 0},
        {"id": "c", "time": 3, "out_bytes": 30, "param_bytes": 0},
        {"id": "d", "time": 1, "out_bytes": 5, "param_bytes": 0},
    ]
    edges = [{"src": "a", "dst": "b", "comm": 1}, {"src": "a", "dst": "c", "comm": 1},
             {"src": "b", "dst": "d", "comm": 2}, {"src": "c", "dst": "d", "comm": 1}]
    return make_problem(nodes, edges, devices=2, memory=100)


def test_schedule_and_memory_match_the_docs(example):
    ev = evaluate(example, {"a": 0, "b": 0, "c": 1, "d": 0}, memory_model="peak")
    assert ev.start.tolist() == [0, 1, 2, 6]
    assert ev.finish.tolist() == [1, 3, 5, 7]
    assert ev.makespan == 7
    assert ev.static_memory.tolist() == [40, 30]
    assert ev.peak_memory.tolist() == [60, 40]
    assert ev.feasible(example)


def test_bounds_match_the_docs(example):
    lb = lower_bounds(example)
    assert (lb.critical_path, lb.load, lb.largest_node, lb.communication, lb.best) == (5, 3.5, 3, 6, 6)


def test_the_optimum_reaches_the_communication_bound(example):
    ev = evaluate(example, {"a": 0, "b": 0, "c": 1, "d": 1})
    assert ev.makespan == 6


def test_single_device_gives_seven(example):
    ev = evaluate(example, [0, 0, 0, 0])
    assert ev.makespan == 7
    assert check(example, [0, 0, 0, 0], ev.start).makespan == 7
