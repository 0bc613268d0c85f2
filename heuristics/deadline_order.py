"""Deadline order: a per-device order for a placement that runs each node by the time a reference
schedule needs it, not as soon as it can.

Why: a list scheduler's own order (ETF's: the longest path first) makes a node as soon as its
inputs are there; on a training graph the loss-gradient of every time step of an unrolled RNN is
ready at once after the loss and is made at once, then waits, received, on the device of the
weight-gradient accumulation that reads it one step at a time (a received tensor is held there
from the moment its producer finishes). Run in the order of the time each node is needed, it is
made when the layers' backward pass reaches its step (the 200K-node LSTM at K = 4, 15.1 GB per
device: ETF's order on the chain-pin placement 1.11 x over capacity, the deadline order fits).

How: ``need_times``: from a reference schedule (ETF's), each node's latest start that keeps every
consumer's reference start, given the transfers. :func:`deadline_order` simulates the executor in
time order exactly as the evaluator runs a given order (a device starts its next node as soon as
it is free and the node's inputs have arrived, so the order never asks a device to idle); a free
device starts, among its nodes whose inputs have arrived, the one needed first. Re-running with
the new schedule as the reference moves each node closer to when it is actually needed
(``chain-pin`` does a few rounds and keeps the best order).
"""
from __future__ import annotations

import heapq
from typing import Callable

import numpy as np

from placement.bounds import bottom_levels
from placement.evaluator import edge_delay, wait_delay
from placement.problem import Problem


def need_times(problem: Problem, placement: np.ndarray, start: np.ndarray) -> np.ndarray:
    """Per node: the latest start that keeps every consumer's reference start (``start``) on time,
    given the transfers of ``placement``; a node without consumers keeps its own start."""
    delay = edge_delay(problem, np.asarray(placement, dtype=np.int64))
    latest = start[problem.dst] - delay - problem.time[problem.src]
    need = np.array(start, dtype=float)
    has = np.zeros(problem.n, dtype=bool)
    has[problem.src] = True
    need[has] = np.inf
    np.minimum.at(need, problem.src, latest)
    return need


def deadline_order(problem: Problem, placement: np.ndarray, priority: np.ndarray,
                   stop: Callable[[], bool] | None = None) -> list[list[int]] | None:
    """Per-device order: simulate the executor in time order; a free device starts, among its
    nodes whose inputs have arrived, the one with the smallest ``priority`` (ties: topological
    rank); with none arrived it idles until the next arrives. The evaluator runs the order
    returned with the same start times. None when ``stop()`` turns true (checked every 4096 starts)."""
    got = deadline_schedule(problem, placement, priority, stop)
    return None if got is None else got[0]


def deadline_schedule(problem: Problem, placement: np.ndarray, priority: np.ndarray,
                      stop: Callable[[], bool] | None = None,
                      waits: list[tuple[int, int]] | None = None) -> tuple[list[list[int]], np.ndarray] | None:
    """:func:`deadline_order` with the simulated start times. ``waits`` (u, v) count as inputs of
    v that arrive when u finishes (plus placement.evaluator.wait_delay across devices): the
    evaluator runs the order returned with these waits at the same start times."""
    n, k = problem.n, problem.k
    pl = np.asarray(placement, dtype=np.int64)
    dev = pl.tolist()
    delay = edge_delay(problem, pl)
    ptr, nbr, eid = problem.succ_ptr
    ptr_l, nbr_l = ptr.tolist(), nbr.tolist()
    delay_e = delay[eid].tolist()
    indeg = np.bincount(problem.dst, minlength=n).tolist()
    held: dict[int, list[tuple[int, float]]] = {}  # waits: u -> [(v, delay)]
    lat = wait_delay(problem)
    for u, v in waits or ():
        held.setdefault(int(u), []).append((int(v), lat if dev[u] != dev[v] else 0.0))
        indeg[v] += 1
    rank = problem.topo_rank.tolist()
    dur = problem.time.tolist()
    key = np.asarray(priority, dtype=float).tolist()
    ready = [0.0] * n
    start = [0.0] * n
    waiting: list[list[tuple[float, int, int]]] = [[] for _ in range(k)]  # (arrival, rank, v)
    avail: list[list[tuple[float, int, int]]] = [[] for _ in range(k)]  # arrived: (priority, rank, v)
    free = [0.0] * k
    order: list[list[int]] = [[] for _ in range(k)]
    devheap: list[tuple[float, int, int]] = []  # (next start, device, version)
    version = [0] * k
    push, pop = heapq.heappush, heapq.heappop

    def offer(d: int) -> None:
        version[d] += 1
        if avail[d]:
            push(devheap, (free[d], d, version[d]))
        elif waiting[d]:
            t = waiting[d][0][0]
            push(devheap, (t if t > free[d] else free[d], d, version[d]))

    for v in range(n):
        if indeg[v] == 0:
            push(waiting[dev[v]], (0.0, rank[v], v))
    for d in range(k):
        offer(d)
    done = 0
    while devheap:
        t, d, ver = pop(devheap)
        if ver != version[d]:
            continue
        w_d, a_d = waiting[d], avail[d]
        while w_d and w_d[0][0] <= t:
            v = pop(w_d)[2]
            push(a_d, (key[v], rank[v], v))
        if not a_d:
            offer(d)
            continue
        v = pop(a_d)[2]
        start[v] = t
        f = t + dur[v]
        free[d] = f
        order[d].append(v)
        done += 1
        if stop is not None and done % 4096 == 0 and stop():
            return None
        touched = {d}
        for j in range(ptr_l[v], ptr_l[v + 1]):
            w = nbr_l[j]
            arrive = f + delay_e[j]
            if arrive > ready[w]:
                ready[w] = arrive
            indeg[w] -= 1
            if indeg[w] == 0:
                push(waiting[dev[w]], (ready[w], rank[w], w))
                touched.add(dev[w])
        for w, dl in held.get(v, ()):  # the waits on v, as inputs without bytes
            if f + dl > ready[w]:
                ready[w] = f + dl
            indeg[w] -= 1
            if indeg[w] == 0:
                push(waiting[dev[w]], (ready[w], rank[w], w))
                touched.add(dev[w])
        for x in touched:
            offer(x)
    if done != n:
        raise ValueError("deadline_order: the graph and the waits have a cycle")
    return order, np.asarray(start)


def critical_order(problem: Problem, placement: np.ndarray, stop: Callable[[], bool] | None = None) -> list[list[int]] | None:
    """Per-device order: among arrived nodes, the longest path to a sink (this placement's
    transfers) first; None when ``stop()`` turns true."""
    bl = bottom_levels(problem, edge_delay(problem, np.asarray(placement, dtype=np.int64)))
    return deadline_order(problem, placement, -bl, stop=stop)
