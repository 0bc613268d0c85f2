"""Re-scheduling a fixed placement with priority lists: a better order for the same devices.

Why: the evaluator's FIFO executor runs, on each idle device, the node that became ready first.
When one device carries a long critical chain plus other work (PARDNN puts the critical path on
one device), FIFO often starts a node that can wait while a critical one is ready: on the
100K-node transformer at K = 16, PARDNN's placement takes 107195 under FIFO but 106220 when each
device prefers the ready node with the largest bottom level (bench/results_pipeline.md). This is a
cheap way (a few linear passes) to improve any placement without moving a node.

How: :func:`priority_order` simulates non-delay list scheduling of the given placement: whenever a
device is idle it starts, among its nodes whose inputs have arrived, the one of highest priority
(ties: topological rank); when none has arrived it waits for the first to arrive. It returns the
per-device order, which the evaluator then schedules (``evaluate(..., order=...)``): the
evaluator's times are the earliest for that order, so never later than the simulation's, and
every reported makespan is the evaluator's. Priorities (PRIORITIES): the bottom level
with the placement's own transfer times (the longest remaining path, so critical nodes first; ALAP
ordering is the same list), and the bottom level without transfers.
"""
from __future__ import annotations

import heapq
from typing import Callable

import numpy as np

from placement import kernels
from placement.bounds import bottom_levels
from placement.evaluator import Evaluation, edge_delay, evaluate
from placement.problem import Problem


PRIORITIES = ("bottom-level", "bottom-level-no-comm")
# Seconds per node + edge of :func:`reschedule` (both priority lists simulated and evaluated).
# Compiled kernels: 0.47-0.66 us of CPU at 40K-200K nodes, 0.9-2.2 us wall beside a load of 4-5
# (bench/results_scale.md, "Session 13"); 2e-6 is the loaded wall time with a little to spare. The
# Python loops: 2.5 s for 100K nodes + 200K edges, niced and loaded (session 7).
RESCHEDULE_SECONDS_PER_ELEMENT = 2e-6
RESCHEDULE_SECONDS_PER_ELEMENT_PYTHON = 1e-5


def priority(problem: Problem, placement: np.ndarray, name: str) -> np.ndarray:
    """The priority list ``name`` of PRIORITIES for ``placement`` (larger runs first)."""
    if name == "bottom-level":
        return bottom_levels(problem, edge_delay(problem, placement))
    if name == "bottom-level-no-comm":
        return bottom_levels(problem)
    raise ValueError(f"unknown priority list {name!r}; known: {', '.join(PRIORITIES)}")


def priority_order(problem: Problem, placement: np.ndarray, priority: np.ndarray) -> list[list[int]]:
    """Per-device node order of the non-delay list schedule of ``placement`` by ``priority``
    (:func:`list_schedule` without its makespan)."""
    return list_schedule(problem, placement, priority)[0]


def list_schedule(problem: Problem, placement: np.ndarray, priority: np.ndarray) -> tuple[list[list[int]], float]:
    """The non-delay list schedule of ``placement`` by ``priority``: the per-device node order and
    the simulation's makespan, never below the evaluator's makespan of that order (the evaluator
    starts every node at the earliest time the order allows); a search can reject the order by
    this makespan without evaluating it (:func:`list_schedule_start` also gives the start times)."""
    order, start = list_schedule_start(problem, placement, priority)
    return order, float((start + problem.time).max()) if problem.n else 0.0


def list_schedule_start(problem: Problem, placement: np.ndarray, priority: np.ndarray) -> tuple[list[list[int]], np.ndarray]:
    """The non-delay list schedule of ``placement`` by ``priority``: the per-device node order and
    the simulation's start times.

    Devices are served in order of their next possible start (a global heap with one offer per
    device; an offer is re-made when a node arrives that could start earlier); at its start time
    a device takes the highest-priority node among those that have arrived by then. Offers are
    never earlier than the event being processed, so a device that starts a node at ``s`` was
    free at ``s`` and the node had arrived: ``s`` is the later of the two, computed with the
    evaluator's sums (finish = start + time, arrival = finish + transfer). These are therefore
    the evaluator's start times of the returned order (the earliest that order allows); refine
    checks that in numpy before using them (placement.incremental.ordered_evaluation)."""
    n, k = problem.n, problem.k
    delay = edge_delay(problem, placement)
    ptr, nbr, eid = problem.succ_ptr
    fast = kernels.for_size(n)
    if fast is not None:
        dev_a = np.asarray(placement, dtype=np.int64)
        seq, start_a = fast.list_schedule(ptr, nbr, delay[eid], np.bincount(problem.dst, minlength=n), problem.topo_rank,
                                          -np.asarray(priority, dtype=float), problem.time, dev_a, k)
        if seq.size != n:  # cannot happen for a validated DAG
            raise RuntimeError("priority_order: simulation stalled (the graph is not a DAG)")
        by_dev = seq[np.argsort(dev_a[seq], kind="stable")]  # each device's nodes in the order they start
        cut = np.searchsorted(dev_a[by_dev], np.arange(k + 1))
        return [by_dev[cut[d]:cut[d + 1]].tolist() for d in range(k)], start_a
    ptr_l, nbr_l = ptr.tolist(), nbr.tolist()
    delay_e = delay[eid].tolist()
    indeg = np.bincount(problem.dst, minlength=n).tolist()
    rank = problem.topo_rank.tolist()
    key = (-np.asarray(priority, dtype=float)).tolist()
    dur = problem.time.tolist()
    dev = np.asarray(placement).tolist()
    ready = [0.0] * n
    waiting: list[list[tuple[float, float, int, int]]] = [[] for _ in range(k)]  # (arrival, -priority, rank, v)
    arrived: list[list[tuple[float, int, int]]] = [[] for _ in range(k)]  # (-priority, rank, v)
    free = [0.0] * k
    version = [0] * k
    offer: list[float | None] = [None] * k
    heap: list[tuple[float, int, int]] = []  # (start, device, version)
    push, pop = heapq.heappush, heapq.heappop
    order: list[list[int]] = [[] for _ in range(k)]

    def reoffer(d: int) -> None:
        if arrived[d]:
            s = free[d]
        elif waiting[d]:
            r = waiting[d][0][0]
            s = r if r > free[d] else free[d]
        else:
            offer[d] = None
            return
        if offer[d] is not None and offer[d] <= s:
            return
        version[d] += 1
        offer[d] = s
        push(heap, (s, d, version[d]))

    for v in range(n):
        if indeg[v] == 0:
            push(waiting[dev[v]], (0.0, key[v], rank[v], v))
    for d in range(k):
        reoffer(d)
    done = 0
    start = [0.0] * n
    while heap:
        s, d, ver = pop(heap)
        if ver != version[d]:
            continue
        offer[d] = None
        w_d, a_d = waiting[d], arrived[d]
        while w_d and w_d[0][0] <= s:
            _, kv, rk, v = pop(w_d)
            push(a_d, (kv, rk, v))
        v = pop(a_d)[2]
        start[v] = s
        f = s + dur[v]
        free[d] = f
        order[d].append(v)
        done += 1
        for j in range(ptr_l[v], ptr_l[v + 1]):
            w = nbr_l[j]
            t = f + delay_e[j]
            if t > ready[w]:
                ready[w] = t
            indeg[w] -= 1
            if indeg[w] == 0:
                dw = dev[w]
                if ready[w] <= free[dw]:
                    # arrived by the device's next start (never before it is free): skip waiting
                    push(arrived[dw], (key[w], rank[w], w))
                else:
                    push(waiting[dw], (ready[w], key[w], rank[w], w))
                if dw != d:
                    reoffer(dw)
        reoffer(d)
    if done != n:  # cannot happen for a validated DAG
        raise RuntimeError("priority_order: simulation stalled (the graph is not a DAG)")
    return order, np.asarray(start)


def reschedule_seconds(problem: Problem) -> float:
    """What :func:`reschedule` is expected to take on ``problem``: with the compiled kernels when
    they are there for its size, else the Python loops."""
    compiled = kernels.for_size(problem.n) is not None
    per = RESCHEDULE_SECONDS_PER_ELEMENT if compiled else RESCHEDULE_SECONDS_PER_ELEMENT_PYTHON
    return per * (problem.n + problem.m)


def reschedule(problem: Problem, placement: np.ndarray, memory_model: str = "static",
               stop: Callable[[], bool] | None = None) -> list[tuple[str, list[list[int]], Evaluation]]:
    """The placement scheduled by each priority list of PRIORITIES, best first, as (priority
    name, per-device order, the evaluator's Evaluation of that order). ``stop``, checked between
    lists, ends early (at least one list is always tried)."""
    pl = np.asarray(placement, dtype=np.int64)
    out: list[tuple[str, list[list[int]], Evaluation]] = []
    for name in PRIORITIES:
        if out and stop is not None and stop():
            break
        order = priority_order(problem, pl, priority(problem, pl, name))
        out.append((name, order, evaluate(problem, pl, order=order, memory_model=memory_model)))
    out.sort(key=lambda t: t[2].makespan)
    return out
