"""A real schedule from a relaxed peak-model solution, keeping its memory interleaving.

CP-SAT's peak model of inexact data floors the times (formulations/cpsat.py, docs/exact.md). Its
solutions are then schedules of slightly shorter nodes: left-justified again with the real times,
a buffer that ended exactly when another started in the model may now overlap it, and the device
can overflow. Here the real schedule keeps the model's event order instead: the least solution of
the difference constraints

- precedence with the real time and comm, and each device's order of positive-time nodes;
- for every two buffers on a device that were disjoint in the model (the end of X at or before
  the start of Y), every end point of X at or before the start of Y in the real schedule.

Buffers disjoint in the model stay disjoint, so buffers that pairwise overlap in the real schedule
pairwise overlap in the model and (Helly: half-open intervals) are live together there: within
capacity. The result is checked by the evaluator anyway; None when the constraints have a
positive cycle (the real times do not fit the model's order) or the check fails.
"""
from __future__ import annotations

import time
from collections import deque

import numpy as np

from placement.evaluator import ScheduleError, check
from placement.problem import Problem

from .common import device_order
from .peak_search import _buffers


def order_preserving_schedule(problem: Problem, placement: np.ndarray, start: np.ndarray, dur: np.ndarray,
                              remote_shift: float = 0.0, deadline: float | None = None) -> tuple[float, np.ndarray] | None:
    """(makespan, start) of the least real schedule keeping the event order of the model schedule
    ``start`` with model durations ``dur`` (same unit as ``start``); a remote copy's model start
    is its producer's finish + ``remote_shift``. None if there is none, it fails the check, or
    ``deadline`` (time.monotonic()) passes first."""
    n = problem.n
    pl = np.asarray(placement, dtype=np.int64)
    t = problem.time
    edges: list[tuple[int, int, float]] = []  # S_j >= S_i + w
    for e, (u, v) in enumerate(zip(problem.src.tolist(), problem.dst.tolist())):
        edges.append((u, v, float(t[u]) + (float(problem.comm[e]) if pl[u] != pl[v] else 0.0)))
    for seq in device_order(problem, pl, start):
        for a, b in zip(seq, seq[1:]):
            edges.append((a, b, float(t[a])))

    def model(p: tuple[int, int], remote: bool = False) -> float:
        return float(start[p[0]]) + (float(dur[p[0]]) if p[1] else 0.0) + (remote_shift if remote else 0.0)

    def real_w(a: tuple[int, int], b: tuple[int, int]) -> tuple[int, int, float]:
        """a <= b as S_b >= S_a + w."""
        return a[0], b[0], (float(t[a[0]]) if a[1] else 0.0) - (float(t[b[0]]) if b[1] else 0.0)

    by_dev: dict[int, list[tuple[float, float, tuple[int, int], list[tuple[int, int]]]]] = {}
    for d, _size, st, ends in _buffers(problem, pl.tolist()):
        remote = st[1] == 1  # a received copy starts at its producer's finish
        s_m = model(st, remote)
        e_m = max(model(e) for e in ends)
        if e_m <= s_m:
            continue  # empty in the model; see below
        by_dev.setdefault(d, []).append((s_m, e_m, st, ends))
    for bufs in by_dev.values():
        starts = sorted(bufs, key=lambda b: b[0])
        ends_sorted = sorted(bufs, key=lambda b: b[1])
        j = 0
        prev = None
        for s_m, _e, st, _ends in starts:
            # buffers ending (in the model) at or before this start, not yet chained
            while j < len(ends_sorted) and ends_sorted[j][1] <= s_m:
                for e in ends_sorted[j][3]:
                    edges.append(real_w(e, st))
                j += 1
            if prev is not None:
                edges.append(real_w(prev, st))  # starts keep their model order: earlier ends stay before
            prev = st
    s = _least(n, edges, deadline)
    if s is None:
        return None
    st = np.asarray(s)
    try:
        ev = check(problem, pl, st, "peak")
    except ScheduleError:
        return None
    return ev.makespan, ev.start


def _least(n: int, edges: list[tuple[int, int, float]], deadline: float | None = None) -> list[float] | None:
    """Least S >= 0 with S_j >= S_i + w for every edge (queue-based Bellman-Ford); None on a
    positive cycle or when ``deadline`` passes."""
    out: list[list[tuple[int, float]]] = [[] for _ in range(n)]
    for i, j, w in edges:
        out[i].append((j, w))
    s = [0.0] * n
    count = [0] * n
    queue = deque(range(n))
    queued = [True] * n
    steps = 0
    while queue:
        steps += 1
        if deadline is not None and steps % 4096 == 0 and time.monotonic() > deadline:
            return None
        i = queue.popleft()
        queued[i] = False
        for j, w in out[i]:
            if s[i] + w > s[j] + 1e-12 * max(1.0, abs(s[j])):
                s[j] = s[i] + w
                if not queued[j]:
                    count[j] += 1
                    if count[j] > n:
                        return None
                    queued[j] = True
                    queue.append(j)
    return s
