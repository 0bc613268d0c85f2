"""Split the critical chain into memory-balanced segments, one device each, and fit the rest around it.

Why: on a training graph whose critical chain (the forward pass and its backward) is most of the
makespan, the static optimum keeps the whole chain on one device and spreads the rest (weight
updates, side branches) over the others. Under the peak model that device must hold every forward
activation until its backward, more than one device may hold (ResNet-1001, K = 4, 4 GB per device:
the chain alone would need 9.8 GB). The list schedulers then break the chain wherever a device
fills up and pay for it all along the backward pass (auto answered 68.70 ms there, PARDNN 79.89,
against a chain of 64.96; bench/results_scale.md, "Session 8: the real graph under peak").

How (:func:`chain_split`):

1. The chain: a longest path by compute time.
2. Its memory profile: a tensor made by a chain node and read by a later chain node is live between
   them; the chain's peak is at the position most such tensors cross (the loss, on a training
   graph). The chain is cut into ``parts`` segments: the nodes up to the peak by equal shares of the
   bytes crossing it (each forward layer goes with its activations), each later node with the
   latest segment among the producers of the crossing tensors it reads (so each backward layer
   runs where its activations already are and no activation is held twice). Segment i goes to
   device i: each device then holds about 1/parts of the activations, and the chain pays a
   transfer only at the 2 x (parts - 1) segment borders.
3. The other nodes go around it, each to the device where it finishes earliest, into the first
   idle gap it fits (HEFT's insertion policy), planned in three tiers: the pinned nodes (the chain
   and groups with a chain member) and then the nodes with almost no slack (what feeds the chain),
   both by latest start, then the rest by earliest start, so that work with slack (ResNet-1001's
   1,000 buffer allocations, the weight updates) neither takes the device a chain input needs nor
   takes idle time out of the order in which it becomes ready. A colocation group is decided at
   its first member with an input from outside the group (an optimizer update's gradient), not at
   a parameter ready at time 0, weighing all the group's work on each device: placed at the
   parameter, every update went to the first device.
4. Each device runs its nodes in planned order (raised along edges so it respects precedence); the
   evaluator times it, and a placement that overflows that order gets the memory-aware orders
   (heuristics.memory_order).

``parts`` runs from 1 to K (1 is the classical chain-on-one-device placement), skipping a count
whose segments cannot hold their share of the activations (:func:`chain_segments`), and stops at
the first feasible count longer than the best so far; the best feasible answer by the evaluator
wins. Deterministic: no randomness; ties go to the lower device.
"""
from __future__ import annotations

import bisect
import time
from typing import Callable

import numpy as np

from placement.bounds import bottom_levels, longest_path
from placement.evaluator import Evaluation, evaluate, schedule_order
from placement.problem import Problem
from placement.solution import Solution, SolveOptions

from .memory_order import lower_peak_order
from .peak_descent import descents

SLACK = 0.01  # nodes with less slack than this share of the critical path are placed before the others
GAP_SCAN = 256  # idle gaps looked at past a node's ready time before it is appended at the end


def critical_chain(problem: Problem) -> np.ndarray:
    """Node indices of one longest path by compute time, source first (ties: the latest in
    topological order, so zero-time inputs next to the path are on it)."""
    if problem.n == 0:
        return np.zeros(0, dtype=np.int64)
    finish = longest_path(problem)
    ptr, nbr, _ = problem.pred_ptr
    rank = problem.topo_rank
    v = int(np.lexsort((rank, finish))[-1])
    path = [v]
    while ptr[v] < ptr[v + 1]:
        us = nbr[ptr[v]:ptr[v + 1]]
        want = finish[v] - problem.time[v]
        tight = us[np.abs(finish[us] - want) <= 1e-9 * max(1.0, abs(finish[v]))]
        if tight.size == 0:
            break
        v = int(tight[np.argmax(rank[tight])])
        path.append(v)
    return np.asarray(path[::-1], dtype=np.int64)


def chain_segments(problem: Problem, chain: np.ndarray, parts: int) -> tuple[np.ndarray, float]:
    """Segment index (0 .. parts - 1) of each chain position (module docstring, step 2), and the
    largest bytes of crossing tensors one segment holds: its device holds them all at once while
    the chain's peak node runs (made before it, read after it by the segment's own nodes), so a
    split with more than a device's capacity there cannot fit."""
    length = chain.size
    seg = np.zeros(length, dtype=np.int64)
    if length == 0:
        return seg, 0.0
    pos = np.full(problem.n, -1, dtype=np.int64)
    pos[chain] = np.arange(length)
    sptr, snbr, _ = problem.succ_ptr
    last = np.array([pos[snbr[sptr[u]:sptr[u + 1]]].max(initial=-1) for u in chain.tolist()], dtype=np.int64)
    held = last > np.arange(length)
    size = problem.out_bytes[chain]
    diff = np.zeros(length + 1)
    np.add.at(diff, np.flatnonzero(held), size[held])
    np.add.at(diff, last[held], -size[held])
    peak = int(np.argmax(np.cumsum(diff)[:length]))
    crossing = np.where((np.arange(length) <= peak) & (last > peak), size, 0.0)
    total = float(crossing.sum())
    if total <= 0:  # nothing is held across the chain (inference): segments of equal time
        cum = np.cumsum(problem.time[chain])
        return np.minimum(parts - 1, (parts * (cum - problem.time[chain]) / max(cum[-1], 1e-300)).astype(np.int64)), 0.0
    if parts <= 1:
        return seg, total
    cum = np.cumsum(crossing)
    seg[:peak + 1] = np.minimum(parts - 1, (parts * (cum[:peak + 1] - crossing[:peak + 1] / 2) / total).astype(np.int64))
    pptr, pnbr, _ = problem.pred_ptr
    current = int(seg[peak])
    for i in range(peak + 1, length):
        v = int(chain[i])
        inputs = pos[pnbr[pptr[v]:pptr[v + 1]]]
        read = inputs[(inputs >= 0) & (inputs <= peak)]
        read = read[crossing[read] > 0]
        if read.size:
            current = int(seg[read].max())
        seg[i] = current
    return seg, float(np.bincount(seg, weights=crossing, minlength=parts).max())


def chain_pins(problem: Problem, chain: np.ndarray, seg: np.ndarray) -> np.ndarray:
    """Device per node (-1: free): chain position i -> device seg[i] (or an allowed one), a colocation
    group with chain members wholly on the device of its first chain member."""
    pinned = np.full(problem.n, -1, dtype=np.int64)
    mask = problem.allowed_mask()
    group_dev: dict[int, int] = {}
    for v, d in zip(chain.tolist(), seg.tolist()):
        g = int(problem.colocate[v])
        if g >= 0 and g in group_dev:
            d = group_dev[g]
        elif not mask[v, d]:
            d = int(np.flatnonzero(mask[v])[0])
        pinned[v] = d
        if g >= 0:
            group_dev.setdefault(g, d)
    for g, d in group_dev.items():
        pinned[problem.groups[g]] = d
    return pinned


class _Schedule:
    """Per device, its busy time as sorted disjoint blocks (touching intervals merged, so the gaps
    scanned are real idle time however many small nodes fill a block), with insertion into idle
    gaps, and the planned start of every node placed."""

    def __init__(self, problem: Problem) -> None:
        self.starts: list[list[float]] = [[] for _ in range(problem.k)]
        self.ends: list[list[float]] = [[] for _ in range(problem.k)]
        self.planned = np.zeros(problem.n)

    def slot(self, d: int, ready: float, dur: float) -> float:
        """Earliest start >= ready on d where [start, start + dur) is idle."""
        starts, ends = self.starts[d], self.ends[d]
        i = bisect.bisect_right(ends, ready)
        prev_end = ends[i - 1] if i > 0 else 0.0
        for j in range(i, min(len(starts), i + GAP_SCAN)):
            s = max(ready, prev_end)
            if s + dur <= starts[j]:
                return s
            prev_end = ends[j]
        return max(ready, ends[-1]) if ends else ready

    def put(self, d: int, v: int, s: float, f: float) -> None:
        self.planned[v] = s
        if f <= s:
            return
        starts, ends = self.starts[d], self.ends[d]
        j = bisect.bisect_left(starts, s)
        left = j > 0 and ends[j - 1] >= s
        right = j < len(starts) and starts[j] <= f
        if left and right:
            ends[j - 1] = ends[j]
            del starts[j], ends[j]
        elif left:
            ends[j - 1] = max(ends[j - 1], f)
        elif right:
            starts[j] = s
        else:
            starts.insert(j, s)
            ends.insert(j, f)


def place_around(problem: Problem, pinned: np.ndarray, stop: Callable[[], bool] | None = None) -> tuple[np.ndarray, list[list[int]]]:
    """Pinned nodes to their device, every other node to the device where it finishes earliest,
    each into the first idle gap it fits, in the three tiers of the module docstring (step 3); a
    colocation group decided at its first member with an input from outside it. Returns (device
    per node, per-device order)."""
    n, k = problem.n, problem.k
    mask = problem.allowed_mask()
    ptr, nbr, eid = problem.pred_ptr
    ptr_l, nbr_l = ptr.tolist(), nbr.tolist()
    comm_l = problem.comm[eid].tolist()
    colo = problem.colocate.tolist()
    dur = problem.time.tolist()
    bottom = bottom_levels(problem)
    estimate = (longest_path(problem) - problem.time).tolist()  # the start of a node not placed yet
    dev = [-1] * n
    finish = [0.0] * n
    group_dev: dict[int, int] = {}
    waiting: dict[int, list[int]] = {}
    sched = _Schedule(problem)
    devices = list(range(k))
    rank = problem.topo_rank.tolist()

    def ready(v: int, d: int, trial: dict[int, float] | None = None) -> float:
        r = 0.0
        for j in range(ptr_l[v], ptr_l[v + 1]):
            u = nbr_l[j]
            du = dev[u]
            if du < 0:  # a waiting group member: planned with v's group, or not yet
                a = trial[u] if trial is not None and u in trial else estimate[u] + dur[u]
            else:
                a = finish[u] + (comm_l[j] if du != d else 0.0)
            if a > r:
                r = a
        return r

    def commit(v: int, d: int) -> None:
        s = sched.slot(d, ready(v, d), dur[v])
        sched.put(d, v, s, s + dur[v])
        dev[v], finish[v] = d, s + dur[v]

    def external_input(v: int, g: int) -> bool:
        return any(colo[nbr_l[j]] != g for j in range(ptr_l[v], ptr_l[v + 1]))

    def earliest(v: int, members: list[int]) -> int:
        """The allowed device where ``members`` (v's group's waiting members), v, and the group's
        other members not placed yet, in topological order, finish first: the group's whole work
        is weighed, not only the member that decides."""
        g = colo[v]
        later = [] if g < 0 else [w for w in problem.groups[g].tolist() if dev[w] < 0 and w != v and w not in members]
        later.sort(key=lambda w: rank[w])
        best = None
        for d in devices:
            if not mask[v, d]:
                continue
            trial: dict[int, float] = {}
            f = 0.0
            for w in [*members, v, *later]:
                f = trial[w] = sched.slot(d, ready(w, d, trial), dur[w]) + dur[w]
            if best is None or (f, d) < best:
                best = (f, d)
        return best[1]

    # Three tiers: pinned nodes (no choice: planned before the others take the idle time), then
    # nodes with almost no slack (what feeds the chain), both by latest start, then the rest by
    # earliest start (so idle gaps go to work in the order it becomes ready); an input not placed
    # yet counts at its earliest finish.
    length = float(bottom.max(initial=0.0))
    latest = length - bottom
    earliest_start = np.asarray(estimate)
    tier = np.where(pinned >= 0, 0, np.where(latest - earliest_start <= SLACK * length, 1, 2))
    when = np.where(tier < 2, latest, earliest_start)
    sequence = np.lexsort((problem.topo_rank, when, tier))
    for count, v in enumerate(sequence.tolist()):
        if stop is not None and count % 1024 == 0 and stop():
            raise TimeoutError("chain-split stopped")
        g = colo[v]
        if pinned[v] >= 0:
            d = int(pinned[v])
        elif g >= 0 and g in group_dev:
            d = group_dev[g]
        elif g >= 0 and not external_input(v, g):
            waiting.setdefault(g, []).append(v)
            continue
        else:
            d = earliest(v, waiting.get(g, []) if g >= 0 else [])
        if g >= 0:
            group_dev.setdefault(g, d)
            for w in waiting.pop(g, []):
                commit(w, d)
        commit(v, d)
    for g, members in waiting.items():  # groups without an input from outside: where they end first
        d = earliest(members[-1], members[:-1])
        for w in members:
            commit(w, d)
    placement = np.asarray(dev, dtype=np.int64)
    return placement, precedence_order(problem, placement, sched.planned)


def precedence_order(problem: Problem, dev: np.ndarray, planned: np.ndarray) -> list[list[int]]:
    """Per device, its nodes by planned start, raised to the latest planned start of any ancestor
    (a waiting group member was planned after some of its consumers), ties in topological order:
    a key that never decreases along an edge, so the order respects precedence."""
    ptr, nbr, _ = problem.pred_ptr
    ptr_l, nbr_l = ptr.tolist(), nbr.tolist()
    key = planned.tolist()
    for v in problem.topo_order.tolist():
        for j in range(ptr_l[v], ptr_l[v + 1]):
            if key[nbr_l[j]] > key[v]:
                key[v] = key[nbr_l[j]]
    keys = np.asarray(key)
    rank = problem.topo_rank
    order = []
    for d in range(problem.k):
        members = np.flatnonzero(dev == d)
        order.append(members[np.lexsort((rank[members], keys[members]))].tolist())
    return order


def _descended(problem: Problem, over: list[tuple[float, int, Evaluation]],
               stop: Callable[[], bool], tried: list[dict]) -> tuple[Evaluation, list[list[int]], int] | None:
    """No split fits under the peak model: the peak descent (heuristics/peak_descent.py) from each
    split's placement, nearest to fitting first, each device in the order the split was timed in
    (its memory-aware order where that was better), until one fits (or ``stop()``). Why: on a
    160-block LLaMA-style decoder at 1.3 x its memory bound (K = 4, bench/results_scale.md, session
    28) every split overflowed (1.35 x the capacity at 4 parts) while their makespans were
    171.8-172.9; descending from the 4-part split fits in 97 moves and 3.4 s, at 174.4, where the
    portfolio's best member fitted at 203.6. (Descending from the planned order instead, before
    the memory-aware orders, saves their time but fitted nothing on a generated 300-node CNN
    where descending from the memory-aware order fits.)"""
    ranked = sorted(over, key=lambda x: x[:2])
    # each device in the split's timing, ties in topological order
    starts = [(ev.placement, schedule_order(problem, ev.start)) for _, _, ev in ranked]
    for i, got, _ in descents(problem, starts, stop):
        parts = ranked[i][1]
        tried.append({"parts": parts, "descent": {"moves": got.moves, "evaluations": got.evaluations, "ended": got.reason},
                      "makespan": got.evaluation.makespan, "feasible": got.evaluation.feasible(problem)})
        if got.evaluation.feasible(problem):
            return got.evaluation, got.order, parts
    return None


def _better(problem: Problem, a: Evaluation | None, b: Evaluation) -> bool:
    """Is b better than a: feasible first, then the shorter makespan."""
    if a is None:
        return True
    fa, fb = a.feasible(problem), b.feasible(problem)
    return (fb, -b.makespan) > (fa, -a.makespan)


def chain_split(problem: Problem, opts: SolveOptions) -> Solution:
    """The best of the chain split into 1..K segments (module docstring), by the evaluator."""
    t0 = time.monotonic()
    model = opts.memory_model
    stop = opts.out_of_time  # a stop request or the time limit (a split takes seconds at 200K nodes)
    chain = critical_chain(problem)
    best: tuple[Evaluation, list[list[int]] | None, int] | None = None
    tried: list[dict] = []
    over: list[tuple[float, int, Evaluation]] = []  # the splits that overflow: (largest peak / capacity, parts, timing)
    try:
        for parts in range(1, problem.k + 1):
            if parts > 1 and stop():
                break
            seg, held = chain_segments(problem, chain, parts)
            if held > float(problem.memory.max()) * (1 + 1e-12) and parts < problem.k:
                tried.append({"parts": parts, "skipped": f"a segment holds {held:.4g} bytes at the chain's peak"})
                continue
            pinned = chain_pins(problem, chain, seg)
            dev, order = place_around(problem, pinned, stop)
            ev = evaluate(problem, dev, order=order, memory_model=model)
            got: list[list[int]] | None = order
            if model == "peak" and not ev.feasible(problem):
                alt = lower_peak_order(problem, dev, stop=stop)
                if _better(problem, ev, alt.evaluation):
                    ev, got = alt.evaluation, alt.order
            tried.append({"parts": parts, "makespan": ev.makespan, "feasible": ev.feasible(problem)})
            if not ev.feasible(problem):
                over.append((float(np.max(ev.memory / problem.memory)), parts, ev))
            if best is None or _better(problem, best[0], ev):
                best = (ev, got, parts)
            elif best[0].feasible(problem):
                break  # one more border made it longer: more parts only add borders
    except TimeoutError:
        pass
    if model == "peak" and (best is None or not best[0].feasible(problem)):
        best = _descended(problem, over, stop, tried) or best
    info = {"chain_nodes": int(chain.size), "tried": tried}
    if best is None or not best[0].feasible(problem):
        why = "stopped before a split was tried" if best is None else "no split of the chain fits the memory"
        extra = {} if best is None else {"placement": best[0].placement}
        return Solution("chain-split", "unknown", reason=f"chain-split: {why}", seconds=time.monotonic() - t0,
                        info={**info, **extra})
    ev, order, parts = best
    return Solution("chain-split", "heuristic", placement=ev.placement, order=order, start=ev.start,
                    objective=ev.makespan, seconds=time.monotonic() - t0, info={**info, "parts": parts})
