"""Time the evaluator on generated transformer training graphs of 10K to 1M nodes.

Why: every method re-evaluates its placements through placement.evaluator, so its speed bounds
what local search and the orchestrator can do on large graphs (goal: 200K nodes in about a second).

For each size: generate (K = 16, unlimited memory), place contiguous blocks of the topological order
with equal total time on the 16 devices, then time evaluate() (FIFO simulation + static + peak
memory) and check() on the schedule it returned, best of --repeats runs (the first call also
builds the cached topological rank). Prints a markdown table.

    python3 bench/bench_evaluator.py [--sizes 10000,50000,200000,1000000] [--profile 200000] [--variant 200000]
"""
from __future__ import annotations

import argparse
import cProfile
import heapq
import io
import pstats
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from placement.evaluator import check, evaluate  # noqa: E402
from placement.generate import generate  # noqa: E402
from placement.problem import Problem  # noqa: E402


def block_placement(problem: Problem, k: int) -> np.ndarray:
    """Contiguous blocks of the topological order with about equal compute, colocation respected
    (a group follows its first member)."""
    order = problem.topo_order
    cum = np.cumsum(problem.time[order])
    total = cum[-1] if cum.size else 0.0
    dev = np.minimum((cum / max(total, 1e-300) * k).astype(np.int64), k - 1)
    pl = np.empty(problem.n, dtype=np.int64)
    pl[order] = dev
    for members in problem.groups:
        first = members[np.argmin(problem.topo_rank[members])]
        pl[members] = pl[first]
    return pl


def _timed(func, repeats: int):  # type: ignore[no-untyped-def]
    """(first call seconds, best of ``repeats`` calls seconds, result)."""
    times = []
    result = None
    for _ in range(max(repeats, 1)):
        t0 = time.perf_counter()
        result = func()
        times.append(time.perf_counter() - t0)
    return times[0], min(times), result


def run(kind: str, nodes: int, k: int, repeats: int) -> dict[str, float]:
    t0 = time.perf_counter()
    p = generate(kind, nodes, devices=k, memory_fraction=None)
    gen = time.perf_counter() - t0
    pl = block_placement(p, k)
    first, ev_s, ev = _timed(lambda: evaluate(p, pl, memory_model="peak"), repeats)
    _, ck_s, _ = _timed(lambda: check(p, pl, ev.start, memory_model="peak"), repeats)
    return {"nodes": p.n, "edges": p.m, "generate": gen, "first": first, "evaluate": ev_s, "check": ck_s,
            "makespan": ev.makespan, "serial": float(p.time.sum())}


def profile(nodes: int, k: int) -> str:
    p = generate("transformer", nodes, devices=k, memory_fraction=None)
    pl = block_placement(p, k)
    p.topo_rank, p.succ_ptr  # cached structure is not the evaluator's cost
    prof = cProfile.Profile()
    prof.enable()
    evaluate(p, pl, memory_model="peak")
    prof.disable()
    out = io.StringIO()
    pstats.Stats(prof, stream=out).sort_stats("tottime").print_stats(12)
    return out.getvalue()


def proposed_ready_simulation(problem: Problem, placement: np.ndarray, delay: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """A proposed drop-in for evaluator._ready_simulation (same schedule, checked by --variant).

    Differences: delays pre-gathered in CSR order; offer() inlined; a device other than the one
    that just ran is re-offered only when the newly ready node became the head of its queue (its
    pending offer is otherwise still valid, since neither its head nor its free time changed)."""
    n, k = problem.n, problem.k
    ptr, nbr, eid = problem.succ_ptr
    ptr_l, nbr_l = ptr.tolist(), nbr.tolist()
    delay_e = delay[eid].tolist()  # delay in CSR order: one list lookup instead of two
    indeg = np.bincount(problem.dst, minlength=n).tolist()
    rank = problem.topo_rank.tolist()
    dur = problem.time.tolist()
    dev_of = placement.tolist()
    ready = [0.0] * n
    start = [0.0] * n
    finish = [0.0] * n
    queues: list[list[tuple[float, int, int]]] = [[] for _ in range(k)]
    free = [0.0] * k
    version = [0] * k
    devheap: list[tuple[float, int, int, int]] = []
    push, pop = heapq.heappush, heapq.heappop
    for v in range(n):
        if indeg[v] == 0:
            push(queues[dev_of[v]], (0.0, rank[v], v))
    for d in range(k):
        q = queues[d]
        if q:
            version[d] += 1
            push(devheap, (q[0][0], q[0][1], d, version[d]))
    done = 0
    while devheap:
        s, _, d, ver = pop(devheap)
        if ver != version[d]:
            continue
        q = queues[d]
        _, _, v = pop(q)
        f = s + dur[v]
        start[v] = s
        finish[v] = f
        free[d] = f
        done += 1
        for j in range(ptr_l[v], ptr_l[v + 1]):
            w = nbr_l[j]
            arrive = f + delay_e[j]
            if arrive > ready[w]:
                ready[w] = arrive
            indeg[w] -= 1
            if indeg[w] == 0:
                dw = dev_of[w]
                item = (ready[w], rank[w], w)
                qw = queues[dw]
                push(qw, item)
                if dw != d and qw[0] is item:  # new head on another device: its offer changes
                    version[dw] += 1
                    fr = free[dw]
                    push(devheap, (item[0] if item[0] > fr else fr, item[1], dw, version[dw]))
        if q:  # this device is free again at f: offer its head
            version[d] += 1
            r, rk, _ = q[0]
            push(devheap, (r if r > f else f, rk, d, version[d]))
    if done != n:
        raise RuntimeError("simulation stalled: the graph is not a DAG")
    return np.asarray(start), np.asarray(finish)


def compare_variant(nodes: int, k: int, repeats: int) -> str:
    """Time the current simulation against the proposed one on block and random placements."""
    from placement.evaluator import _ready_simulation, edge_delay

    p = generate("transformer", nodes, devices=k, memory_fraction=None)
    p.topo_rank
    rows = []
    rng = np.random.default_rng(1)
    for label, pl in (("blocks", block_placement(p, k)), ("random", rng.integers(0, k, p.n))):
        for members in p.groups:
            pl[members] = pl[members[0]]
        delay = edge_delay(p, pl)
        _, cur, a = _timed(lambda: _ready_simulation(p, pl, delay), repeats)
        _, new, b = _timed(lambda: proposed_ready_simulation(p, pl, delay), repeats)
        if not (np.array_equal(a[0], b[0]) and np.array_equal(a[1], b[1])):
            raise AssertionError("the proposed simulation gives a different schedule")
        rows.append(f"| {p.n:,} | {label} | {cur:.2f} | {new:.2f} |")
    return "\n".join(rows)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="10000,50000,200000,1000000")
    ap.add_argument("--devices", type=int, default=16)
    ap.add_argument("--kind", default="transformer")
    ap.add_argument("--repeats", type=int, default=3, help="evaluate/check runs per size; the best is reported")
    ap.add_argument("--profile", type=int, default=0, help="also profile evaluate() at this size")
    ap.add_argument("--variant", type=int, default=0, help="also compare the proposed simulation at this size")
    args = ap.parse_args()
    print("| nodes | edges | generate s | first evaluate s | evaluate s | check s | evaluate nodes/s | makespan / serial |")
    print("|---:|---:|---:|---:|---:|---:|---:|---:|")
    for size in (int(s) for s in args.sizes.split(",")):
        r = run(args.kind, size, args.devices, args.repeats)
        print(f"| {r['nodes']:,} | {r['edges']:,} | {r['generate']:.2f} | {r['first']:.2f} | {r['evaluate']:.2f} | "
              f"{r['check']:.2f} | {r['nodes'] / r['evaluate']:,.0f} | {r['makespan'] / r['serial']:.3f} |", flush=True)
    if args.variant:
        print("\n| nodes | placement | current simulation s | proposed s |\n|---:|---|---:|---:|")
        print(compare_variant(args.variant, args.devices, args.repeats))
    if args.profile:
        print(profile(args.profile, args.devices))


if __name__ == "__main__":
    main()
