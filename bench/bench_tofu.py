"""Operator partitioning (Tofu) against whole-operator placement and data parallelism.

Usage (serialise timed runs):  flock /tmp/bench.lock nice -n 10 python bench/bench_tofu.py [memory|search|joint|all]

- ``memory`` (not timed: run it without the lock): wide MLP, wide ResNet and a 2-layer LSTM training step (ATen-like graphs from
  placement.partition.training), k = 2, 4, 8: Tofu's per-device memory against (single-device
  memory) / k under the static and peak models, its makespan and communication; pure data
  parallelism (parameters replicated) on the same scale; whole-operator placement (PARDNN,
  topo-fill) given 1.2 x single / k per device.
- ``search``: the recursive search for 8 ways on graphs of thousands of operators.
- ``joint``: the non-recursive DP (layout sequences as values) against the recursion on small graphs.
Figures go to bench/results_tofu.md by hand, with ``uptime``'s load average.
"""
from __future__ import annotations

import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from heuristics.tofu.baselines import data_parallel_plan  # noqa: E402
from heuristics.tofu.search import joint_plan, recursive_plan  # noqa: E402
from placement.partition.graph import build_graph  # noqa: E402
from placement.partition.plan import evaluate_plan, plan_cost  # noqa: E402
from placement.partition.training import mlp, resnet, rnn  # noqa: E402
from placement.solution import SolveOptions  # noqa: E402
from solvers.run import run  # noqa: E402

GRAPHS = {
    "wide MLP (batch 256, 4 x 4096, 8192 classes)": (lambda: mlp(256, [4096] * 5, 8192, name="mlp"), 256),
    "wide ResNet (batch 32, 256 ch, 8 blocks, 16x16)": (lambda: resnet(32, 256, 8, 16, 1000, name="wresnet"), 32),
    "LSTM (batch 64, hidden 1024, 2 layers, 10 steps)": (lambda: rnn(64, 1024, 2, 10, 1000, name="lstm"), 64),
}


def gib(x: float) -> str:
    return f"{x / 2**30:.3f}"


def memory_table() -> None:
    print("| graph | nodes | k | model | single GiB | Tofu max/dev GiB | x single/k | Tofu makespan | Tofu comm GiB "
          "| DP max/dev GiB | x single/k | DP makespan | DP comm GiB | PARDNN @1.2 single/k | topo-fill @1.2 single/k |")
    print("|" + "---|" * 15)
    for label, (build, batch) in GRAPHS.items():
        prob = build()
        g = build_graph(prob)
        for k in (2, 4, 8):
            plan, info = recursive_plan(g, k)
            dp = data_parallel_plan(g, k, batch)
            for model in ("static", "peak"):
                tf = evaluate_plan(g, plan, model)
                dv = evaluate_plan(g, dp, model)
                cap = 1.2 * tf.single_memory / k
                cells = []
                for method in ("pardnn", "topo-fill"):
                    res = run(prob.with_devices(k, memory=cap), method,
                              SolveOptions(memory_model=model, time_limit=60.0))
                    cells.append(f"{res.evaluation.makespan:.1f}" if res.feasible and res.evaluation is not None
                                 else f"none ({res.status})")
                exact = "" if all(info.exact_steps) else " (inexact)"
                print(f"| {label} | {prob.n} | {k} | {model} | {gib(tf.single_memory)} | {gib(tf.memory.max())} | "
                      f"{tf.memory.max() * k / tf.single_memory:.3f} | {tf.makespan:.1f} | {gib(tf.comm_bytes)}{exact} | "
                      f"{gib(dv.memory.max())} | {dv.memory.max() * k / dv.single_memory:.3f} | {dv.makespan:.1f} | "
                      f"{gib(dv.comm_bytes)} | {cells[0]} | {cells[1]} |", flush=True)


def search_table() -> None:
    print("| graph | nodes | tensors | variables | k | search s | exact steps | largest DP table | evaluate s |")
    print("|---|---|---|---|---|---|---|---|---|")
    for label, build in [("LSTM 4 layers x 20 steps", lambda: rnn(64, 1024, 4, 20, 1000)),
                         ("wide ResNet 48 blocks", lambda: resnet(32, 256, 48, 16, 1000)),
                         ("MLP 200 layers", lambda: mlp(256, [4096] * 201, 8192))]:
        prob = build()
        g = build_graph(prob)
        t0 = time.monotonic()
        plan, info = recursive_plan(g, 8)
        secs = time.monotonic() - t0
        t1 = time.monotonic()
        evaluate_plan(g, plan, "static")
        ev = time.monotonic() - t1
        print(f"| {label} | {prob.n} | {len(g.tensors)} | {info.variables} | 8 | {secs:.2f} | {info.exact_steps} | "
              f"{info.largest_table} | {ev:.2f} |", flush=True)


def joint_table() -> None:
    print("| graph | nodes | k | recursive cost | recursive s | joint DP cost | joint DP exact | joint DP s |")
    print("|---|---|---|---|---|---|---|---|")
    for label, build in [("MLP 1 layer", lambda: mlp(64, [64, 64], 16)), ("MLP 2 layers", lambda: mlp(64, [64, 64, 64], 16)),
                         ("ResNet 1 block", lambda: resnet(8, 16, 1, 8, 16))]:
        prob = build()
        g = build_graph(prob)
        for k in (4, 8):
            t0 = time.monotonic()
            plan, _ = recursive_plan(g, k)
            rs = time.monotonic() - t0
            t1 = time.monotonic()
            jplan, jcost, exact = joint_plan(g, k)
            js = time.monotonic() - t1
            print(f"| {label} | {prob.n} | {k} | {plan_cost(g, plan):.0f} | {rs:.2f} | {plan_cost(g, jplan):.0f} | {exact} | {js:.2f} |", flush=True)


if __name__ == "__main__":
    what = sys.argv[1] if len(sys.argv) > 1 else "all"
    print(f"load average: {os.getloadavg()}")
    if what in ("memory", "all"):
        memory_table()
    if what in ("search", "all"):
        search_table()
    if what in ("joint", "all"):
        joint_table()
    print(f"load average: {os.getloadavg()}")
