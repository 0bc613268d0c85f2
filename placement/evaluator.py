"""The one evaluator: makespan, schedule and memory of a placement, and the checker of schedules.

Every heuristic, formulation and report in the project computes its makespan and memory here.

- :func:`evaluate` turns a placement (and optionally a per-device order) into a schedule by
  simulating a TensorFlow-like executor: each device keeps a FIFO queue of ready nodes (ready =
  all inputs have arrived, ``F_u + comm`` for inputs from another device) and runs the one that
  became ready first whenever it is idle.
- :func:`check` validates a complete schedule given as start times, and names the first violated
  constraint.
- :func:`static_memory` and :func:`peak_memory` implement the two memory models of docs/model.md.
"""
from __future__ import annotations

import heapq
import math
from dataclasses import dataclass
from typing import Mapping, Sequence

import numpy as np

from . import kernels
from .problem import Problem

MEMORY_MODELS = ("static", "peak")


class ScheduleError(ValueError):
    """A placement or schedule breaks a constraint; the message names which and where."""


@dataclass
class Evaluation:
    """What the evaluator says of a placement and schedule."""

    placement: np.ndarray  # device index per node
    start: np.ndarray
    finish: np.ndarray
    makespan: float
    static_memory: np.ndarray  # per device, bytes
    peak_memory: np.ndarray  # per device, bytes
    memory_model: str

    @property
    def memory(self) -> np.ndarray:
        """Per-device memory under the chosen model."""
        return self.static_memory if self.memory_model == "static" else self.peak_memory

    def overflow(self, problem: Problem) -> np.ndarray:
        """Bytes over capacity on each device (0 where it fits)."""
        return np.maximum(self.memory - problem.memory, 0.0)

    def feasible(self, problem: Problem) -> bool:
        return bool(np.all(self.memory <= problem.memory * (1 + 1e-12) + 1e-9))


class MeasuredOnRead(Evaluation):
    """An Evaluation whose peak memory is measured by :func:`peak_memory` (the same function, on the
    same arrays) when it is first read, not when the schedule is made.

    Why: under the static model a search never reads the peak of the schedules it judges, yet
    measuring it (numpy sorts of every buffer and event) cost 12-14 ms per evaluation at 40K nodes,
    as much as a hundred of refine's rejected moves; under the peak model a search that looks at
    the makespan first skips it for every schedule it rejects (0.1 s each at 200K nodes); whoever
    reads it (a report, the peak model's overflow) gets the number eager measurement gives. The arrays of an Evaluation are never
    changed in place. Pickled or copied, it becomes a plain Evaluation with its peak measured."""

    def __init__(self, problem: Problem | None = None, peak_memory: np.ndarray | None = None, **fields) -> None:
        self._problem: Problem | None = problem  # None once measured, or when given (dataclasses.replace)
        self._peak: np.ndarray | None = None
        super().__init__(peak_memory=peak_memory, **fields)

    @property
    def peak_memory(self) -> np.ndarray:  # type: ignore[override]
        peak = self._peak
        if peak is None:
            problem = self._problem
            if problem is None:  # another thread measured it in between (it sets the peak first)
                return self._peak
            peak = peak_memory(problem, self.placement, self.start, self.finish)
            self._peak = peak
            self._problem = None
        return peak

    @peak_memory.setter
    def peak_memory(self, value: np.ndarray | None) -> None:
        self._peak = value

    def __reduce__(self):
        return Evaluation, (self.placement, self.start, self.finish, self.makespan, self.static_memory, self.peak_memory,
                            self.memory_model)


def as_placement(problem: Problem, placement: Sequence[int] | Mapping | np.ndarray) -> np.ndarray:
    """Normalise a placement (array by node index, or mapping node id -> device) to an int array,
    checking that every node has a device in range."""
    if isinstance(placement, Mapping):
        arr = np.full(problem.n, -1, dtype=np.int64)
        for key, dev in placement.items():
            if key not in problem.index:
                raise ScheduleError(f"placement names unknown node {key!r}")
            arr[problem.index[key]] = int(dev)
    else:
        arr = np.asarray(placement, dtype=np.int64).copy()
        if arr.shape != (problem.n,):
            raise ScheduleError(f"placement has {arr.shape[0] if arr.ndim else 0} entries for {problem.n} nodes")
    bad = np.flatnonzero((arr < 0) | (arr >= problem.k))
    if bad.size:
        i = int(bad[0])
        what = "has no device" if arr[i] < 0 else f"is on device {arr[i]}, not in 0..{problem.k - 1}"
        raise ScheduleError(f"node {problem.ids[i]!r} {what}")
    return arr


def check_placement(problem: Problem, placement: np.ndarray) -> None:
    """Raise :class:`ScheduleError` if a node sits on a device it may not use or a colocation group
    is split."""
    for i, devs in enumerate(problem.allowed) if problem.has_allowed else ():
        if devs is not None and int(placement[i]) not in devs:
            raise ScheduleError(f"node {problem.ids[i]!r} is on device {int(placement[i])}, not one of its allowed devices {list(devs)}")
    grouped = np.flatnonzero(problem.colocate >= 0)
    if grouped.size:  # vectorised: one pass over the grouped nodes, not one np.unique per group
        g, devs = problem.colocate[grouped], placement[grouped]
        one = np.empty(len(problem.colocate_names), dtype=devs.dtype)
        one[g] = devs  # some member's device per group
        split = np.flatnonzero(devs != one[g])
        if split.size:
            first = int(g[split].min())  # the lowest split group, as a loop over groups finds it
            devs = np.unique(placement[problem.groups[first]])
            raise ScheduleError(f"colocation group {problem.colocate_names[first]!r} is split over devices {devs.tolist()}")


def edge_delay(problem: Problem, placement: np.ndarray) -> np.ndarray:
    """Per-edge transfer time actually paid: comm when the ends are on different devices."""
    return np.where(placement[problem.src] != placement[problem.dst], problem.comm, 0.0)


def static_memory(problem: Problem, placement: np.ndarray) -> np.ndarray:
    """Per device: the sum of param_bytes + out_bytes of its nodes (Tarnawski's model)."""
    return np.bincount(placement, weights=problem.param_bytes + problem.out_bytes, minlength=problem.k)


@dataclass
class Buffers:
    """The tensor lifetimes of the peak model: buffer i holds ``size[i]`` bytes of ``node[i]``'s
    output on ``device[i]`` during ``[t0[i], t1[i])``; ``last[i]`` is the consumer finishing last
    there (-1 when the buffer is the node's own output while it runs, with no local consumer)."""

    device: np.ndarray
    node: np.ndarray
    t0: np.ndarray
    t1: np.ndarray
    size: np.ndarray
    last: np.ndarray


def buffers(problem: Problem, placement: np.ndarray, start: np.ndarray, finish: np.ndarray) -> Buffers:
    """Tensor lifetimes per device as docs/model.md defines them (empty ones dropped).

    The output of u is held on device d from F_u (S_u when u is on d) until the last consumer of u
    on d finishes; a node without a consumer on its own device holds its output while it runs."""
    k, n = problem.k, problem.n
    src, dst = problem.src, problem.dst
    key = src * k + placement[dst]
    order = np.lexsort((finish[dst], key))  # by (u, device), last-finishing consumer last
    skey = key[order]
    is_last = np.r_[skey[1:] != skey[:-1], True] if skey.size else np.zeros(0, dtype=bool)
    last_node = dst[order[is_last]]
    uniq = skey[is_last]
    hold_u, hold_d = uniq // k, uniq % k
    local = placement[hold_u] == hold_d
    hold_start = np.where(local, start[hold_u], finish[hold_u])
    hold_end = np.maximum(finish[last_node], np.where(local, finish[hold_u], -np.inf))
    has_local = np.zeros(n, dtype=bool)
    has_local[hold_u[local]] = True
    run = np.flatnonzero(~has_local)
    buf = Buffers(
        device=np.concatenate([hold_d, placement[run]]),
        node=np.concatenate([hold_u, run]),
        t0=np.concatenate([hold_start, start[run]]),
        t1=np.concatenate([hold_end, finish[run]]),
        size=np.concatenate([problem.out_bytes[hold_u], problem.out_bytes[run]]),
        last=np.concatenate([last_node, np.full(run.size, -1, dtype=np.int64)]),
    )
    keep = (buf.t1 > buf.t0) & (buf.size > 0)
    return Buffers(*(getattr(buf, f)[keep] for f in ("device", "node", "t0", "t1", "size", "last")))


def peak_profile(problem: Problem, placement: np.ndarray, start: np.ndarray, finish: np.ndarray,
                 buf: Buffers | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Per device: the peak memory (PARDNN's Eq. 2 made exact, docs/model.md) and the first time
    it is reached (nan for a device whose peak is its parameters alone)."""
    k = problem.k
    peak = np.bincount(placement, weights=problem.param_bytes, minlength=k)
    when = np.full(k, np.nan)
    fast = kernels.for_size(problem.n) if buf is None else None
    if fast is not None:  # the same floats, without building the buffers (kernels.device_peaks)
        ptr, nbr, _ = problem.succ_ptr
        top, when = fast.device_peaks(ptr, nbr, placement, start, finish, problem.out_bytes, k)
        return peak + top, when
    if buf is None:
        buf = buffers(problem, placement, start, finish)
    if buf.device.size == 0:
        return peak, when
    # Sweep: at equal times, releases (half-open intervals end) come before allocations.
    ev_dev = np.concatenate([buf.device, buf.device])
    ev_t = np.concatenate([buf.t0, buf.t1])
    ev_delta = np.concatenate([buf.size, -buf.size])
    order = np.lexsort((ev_delta > 0, ev_t, ev_dev))
    ev_dev, ev_t, ev_delta = ev_dev[order], ev_t[order], ev_delta[order]
    running = np.cumsum(ev_delta)
    seg_start = np.flatnonzero(np.r_[True, ev_dev[1:] != ev_dev[:-1]])
    base = np.r_[0.0, running][seg_start]  # cumsum before each device's first event
    level = running - np.repeat(base, np.diff(np.r_[seg_start, ev_dev.size]))
    top = np.zeros(k)
    np.maximum.at(top, ev_dev, level)
    at_top = np.flatnonzero((level >= top[ev_dev]) & (level > 0))
    first = at_top[np.r_[True, ev_dev[at_top][1:] != ev_dev[at_top][:-1]]] if at_top.size else at_top
    when[ev_dev[first]] = ev_t[first]
    return peak + top, when


def peak_memory(problem: Problem, placement: np.ndarray, start: np.ndarray, finish: np.ndarray) -> np.ndarray:
    """Per device: the peak over time of memory in use (PARDNN's Eq. 2 made exact, docs/model.md).

    On device d: params of its nodes always; a node's output while it runs, [S_v, F_v); the output
    of every node u with a consumer on d, from F_u until the last consumer of u on d finishes; for
    u on d with a consumer on d the two join into [S_u, last finish).
    """
    return peak_profile(problem, placement, start, finish)[0]


def _ready_simulation(problem: Problem, placement: np.ndarray, delay: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """FIFO list scheduling: each device runs the earliest-ready node whenever it is idle.

    Nodes are started in non-decreasing start time over all devices, so a node whose inputs are
    not all scheduled yet cannot become ready before the current time; ties go to the node earlier
    in the topological order. A global heap holds one offer per device (its queue head's start);
    an offer is re-made only when the device's head or free time changes (versions mark stale ones).
    """
    n, k = problem.n, problem.k
    ptr, nbr, eid = problem.succ_ptr
    fast = kernels.for_size(n)
    if fast is not None:
        start_a, finish_a, done = fast.fifo_schedule(ptr, nbr, delay[eid], np.bincount(problem.dst, minlength=n),
                                                     problem.topo_rank, problem.time, placement, k)
        if done != n:  # cannot happen for a validated DAG
            raise ScheduleError("simulation stalled: the graph is not a DAG")
        return start_a, finish_a
    ptr_l, nbr_l = ptr.tolist(), nbr.tolist()
    delay_e = delay[eid].tolist()  # in CSR order
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
    devheap: list[tuple[float, int, int, int]] = []  # (candidate start, tie rank, device, version)
    push, pop = heapq.heappush, heapq.heappop
    for v in range(n):
        if indeg[v] == 0:
            push(queues[dev_of[v]], (0.0, rank[v], v))
    for d in range(k):
        if queues[d]:
            version[d] += 1
            push(devheap, (queues[d][0][0], queues[d][0][1], d, version[d]))
    done = 0
    while devheap:
        s, _, d, ver = pop(devheap)
        if ver != version[d]:
            continue
        q = queues[d]
        v = pop(q)[2]
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
                if dw != d and qw[0] is item:  # a new head on another device changes its offer
                    version[dw] += 1
                    fr = free[dw]
                    push(devheap, (item[0] if item[0] > fr else fr, item[1], dw, version[dw]))
        if q:  # this device is free again at f: offer its head
            version[d] += 1
            r, rk, _ = q[0]
            push(devheap, (r if r > f else f, rk, d, version[d]))
    if done != n:  # cannot happen for a validated DAG
        raise ScheduleError("simulation stalled: the graph is not a DAG")
    return np.asarray(start), np.asarray(finish)


def schedule_ties(problem: Problem, start: np.ndarray, rank: np.ndarray | None = None,
                  edges: tuple[np.ndarray, np.ndarray] | None = None) -> np.ndarray:
    """How nodes with equal ``start`` are ordered when a device's order is read off a schedule:
    zero-time nodes first, then by ``rank`` (a topological rank; ``problem.topo_rank`` by default).

    Why: a zero-time node that starts with a positive-time node on its device ran before it (after
    it, it would have started at its finish). By rank alone the positive node could come first; the
    order read off then delays the zero-time node and what it feeds, so a search's copy of its
    incumbent was longer than the incumbent (0.08% on the 32K decoder, and no search got below it).
    When ``start`` is a schedule (each edge's head starts no earlier than its tail finishes, over
    ``edges``: the problem's, or a timing graph's with its waits), an edge between equal starts
    leaves a zero-time node, so (start, tie) is a topological order. When it is not (priorities,
    or all zeros for "each device in topological order"), or when ``rank`` is given without its
    ``edges`` (a timing graph's rank: even when it equals ``topo_rank`` its waits are unknown
    here, and the start times may not meet them), the ties are ``rank`` alone."""
    if rank is None:
        rank = problem.topo_rank
    elif edges is None:
        return rank
    src, dst = (problem.src, problem.dst) if edges is None else edges
    s = np.asarray(start, dtype=float)
    if s.shape == (problem.n,) and bool(np.all(s[dst] >= s[src] + problem.time[src])):
        return zero_time_first(problem, rank)
    return rank


def schedule_order(problem: Problem, start: np.ndarray) -> np.ndarray:
    """Every node by ``start``, ties by :func:`schedule_ties`: a schedule's own order (per device,
    the order it ran its nodes in), and a topological order of the graph."""
    return np.lexsort((schedule_ties(problem, start), start))


def zero_time_first(problem: Problem, rank: np.ndarray) -> np.ndarray:
    """``rank`` with every zero-time node ranked before every busy one (the order of equal starts
    in a schedule: :func:`schedule_ties`), for callers that know their start times are one."""
    return rank + problem.n * (problem.time > 0)


def wait_delay(problem: Problem) -> float:
    """What a wait between two devices costs: the control message carries no bytes, so the link's
    latency (``problem.link``); 0 when the problem gives no link model (edge times given as
    ``comm``: no price for a new message is known)."""
    return float(problem.link.latency) if problem.link is not None else 0.0


def as_waits(problem: Problem, waits: Sequence[Sequence[int]] | np.ndarray) -> np.ndarray:
    """Normalise waits (pairs of node indices or ids, "v does not start before u finishes") to an
    (w, 2) int array, checking every node exists and no node waits for itself."""
    def node(x) -> int:
        if isinstance(x, (int, np.integer)):
            return int(x)
        if x not in problem.index:
            raise ScheduleError(f"wait names node {x!r}, not in the graph")
        return int(problem.index[x])

    pairs = [[node(x) for x in pair] for pair in waits] if not isinstance(waits, np.ndarray) else waits.astype(np.int64).tolist()
    arr = np.asarray(pairs, dtype=np.int64).reshape(-1, 2) if pairs else np.zeros((0, 2), dtype=np.int64)
    bad = np.flatnonzero((arr < 0).any(axis=1) | (arr >= problem.n).any(axis=1))
    if bad.size:
        raise ScheduleError(f"wait {arr[bad[0]].tolist()} names a node index not in 0..{problem.n - 1}")
    self_wait = np.flatnonzero(arr[:, 0] == arr[:, 1])
    if self_wait.size:
        raise ScheduleError(f"wait ({problem.ids[int(arr[self_wait[0], 0])]!r}, itself) closes a cycle")
    return arr


def _contradiction(problem: Problem, src: np.ndarray, dst: np.ndarray, n_graph: int, waits: np.ndarray | None) -> ScheduleError:
    """The error for a cycle in the graph + order (edges ``[:n_graph]``) + waits (the rest): the
    order against the graph, or else the first wait on a cycle, named."""
    if waits is None or not waits.size or not _acyclic(problem.n, src[:n_graph], dst[:n_graph]):
        return ScheduleError("the given device order contradicts the graph's precedence (a node is ordered before one of its ancestors)")
    import networkx as nx  # the error path only

    g = nx.DiGraph()
    g.add_edges_from(zip(src.tolist(), dst.tolist()))
    for u, v in waits.tolist():
        if nx.has_path(g, v, u):
            return ScheduleError(f"wait ({problem.ids[u]!r}, {problem.ids[v]!r}) closes a cycle with the device order and the "
                                 f"graph: {problem.ids[v]!r} comes before {problem.ids[u]!r} finishes")
    return ScheduleError("the waits close a cycle with the device order and the graph")  # not reached: some wait is on the cycle


def _order_chains(n: int, placement: np.ndarray, order: Sequence[Sequence[int]]) -> np.ndarray | None:
    """Each node's predecessor in its device's order (-1 for a first), in numpy, for an order of
    node indices that names every node once on its own device; None for anything else (node ids,
    a node missing, twice or on another device), which :func:`_checked_order_chains` then names."""
    seqs = []
    for seq in order:
        a = np.asarray(seq)
        if a.ndim != 1 or (a.size and a.dtype.kind not in "iu"):
            return None
        seqs.append(a.astype(np.int64, copy=False))
    sizes = np.asarray([a.size for a in seqs], dtype=np.int64)
    nodes = np.concatenate(seqs) if seqs else np.zeros(0, dtype=np.int64)
    if nodes.size != n or (n and (nodes.min() < 0 or nodes.max() >= n)):
        return None
    if not np.array_equal(placement[nodes], np.repeat(np.arange(len(seqs)), sizes)):
        return None
    if n and np.bincount(nodes, minlength=n).max() > 1:
        return None
    before = np.r_[-1, nodes[:-1]] if n else nodes
    before[(np.cumsum(sizes) - sizes)[sizes > 0]] = -1  # each device's first node
    prev = np.full(n, -1, dtype=np.int64)
    prev[nodes] = before
    return prev


def _checked_order_chains(problem: Problem, placement: np.ndarray, order: Sequence[Sequence[int]]) -> np.ndarray:
    """:func:`_order_chains` one node at a time, node ids allowed, naming the first problem."""
    n = problem.n
    pos_dev = np.full(n, -1, dtype=np.int64)
    prev = np.full(n, -1, dtype=np.int64)
    for d, seq in enumerate(order):
        seq = [int(problem.index[x]) if not isinstance(x, (int, np.integer)) else int(x) for x in seq]
        for p, v in enumerate(seq):
            if not 0 <= v < n:
                raise ScheduleError(f"order of device {d} names node index {v}, not in 0..{n - 1}")
            if pos_dev[v] >= 0:
                raise ScheduleError(f"node {problem.ids[v]!r} appears twice in the order")
            if placement[v] != d:
                raise ScheduleError(f"node {problem.ids[v]!r} is ordered on device {d} but placed on {int(placement[v])}")
            pos_dev[v] = d
            prev[v] = seq[p - 1] if p else -1
    missing = np.flatnonzero(pos_dev < 0)
    if missing.size:
        raise ScheduleError(f"node {problem.ids[int(missing[0])]!r} is missing from the order")
    return prev


def _ordered_schedule(problem: Problem, placement: np.ndarray, delay: np.ndarray, order: Sequence[Sequence[int]],
                      waits: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Earliest start times when each device runs its nodes in the given order (and every wait
    (u, v) holds v until u has finished, plus :func:`wait_delay` across devices)."""
    n = problem.n
    prev = _order_chains(n, placement, order)
    if prev is None:
        prev = _checked_order_chains(problem, placement, order)
    has_prev = prev >= 0
    fast = kernels.for_size(n)
    if fast is not None and (waits is None or not waits.size):  # the device chains beside the graph's CSR
        ptr, nbr, eid = problem.succ_ptr
        nxt = np.full(n, -1, dtype=np.int64)
        nxt[prev[has_prev]] = np.flatnonzero(has_prev)
        indeg = np.bincount(nbr, minlength=n) + has_prev
        start_a, done = fast.release_starts(ptr, nbr, delay[eid], indeg, problem.time, np.zeros(n), nxt)
        if done == n:
            return start_a, start_a + problem.time
    # Kahn over DAG edges plus the chain edges prev[v] -> v.
    src = np.concatenate([problem.src, prev[has_prev]])
    dst = np.concatenate([problem.dst, np.flatnonzero(has_prev)])
    dly = np.concatenate([delay, np.zeros(int(has_prev.sum()))])
    n_graph = src.size
    if waits is not None and waits.size:
        wu, wv = waits[:, 0], waits[:, 1]
        src, dst = np.concatenate([src, wu]), np.concatenate([dst, wv])
        dly = np.concatenate([dly, np.where(placement[wu] != placement[wv], wait_delay(problem), 0.0)])
    ptr = np.zeros(n + 1, dtype=np.int64)
    srt = np.argsort(src, kind="stable")
    np.cumsum(np.bincount(src, minlength=n), out=ptr[1:])
    if fast is not None:
        start_a, done = fast.release_starts(ptr, dst[srt], dly[srt], np.bincount(dst, minlength=n), problem.time, np.zeros(n),
                                            np.full(n, -1, dtype=np.int64))
        if done != n:
            raise _contradiction(problem, src, dst, n_graph, waits)
        return start_a, start_a + problem.time
    nbr_l, dly_l, ptr_l = dst[srt].tolist(), dly[srt].tolist(), ptr.tolist()
    indeg = np.bincount(dst, minlength=n).tolist()
    dur = problem.time.tolist()
    start = [0.0] * n
    finish = [0.0] * n
    stack = [v for v in range(n) if indeg[v] == 0]
    done = 0
    while stack:
        v = stack.pop()
        finish[v] = start[v] + dur[v]
        done += 1
        for j in range(ptr_l[v], ptr_l[v + 1]):
            w = nbr_l[j]
            t = finish[v] + dly_l[j]
            if t > start[w]:
                start[w] = t
            indeg[w] -= 1
            if indeg[w] == 0:
                stack.append(w)
    if done != n:
        raise _contradiction(problem, src, dst, n_graph, waits)
    return np.asarray(start), np.asarray(finish)


def _acyclic(n: int, src: np.ndarray, dst: np.ndarray) -> bool:
    """Is the graph of these edges on n nodes acyclic (Kahn)?"""
    indeg = np.bincount(dst, minlength=n)
    order = np.argsort(src, kind="stable")
    ptr = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(np.bincount(src, minlength=n), out=ptr[1:])
    nbr = dst[order].tolist()
    ptr_l, deg = ptr.tolist(), indeg.tolist()
    stack = [v for v in range(n) if deg[v] == 0]
    done = 0
    while stack:
        v = stack.pop()
        done += 1
        for w in nbr[ptr_l[v]:ptr_l[v + 1]]:
            deg[w] -= 1
            if deg[w] == 0:
                stack.append(w)
    return done == n


def evaluate(
    problem: Problem,
    placement: Sequence[int] | Mapping | np.ndarray,
    order: Sequence[Sequence[int]] | None = None,
    memory_model: str = "static",
    waits: Sequence[Sequence[int]] | np.ndarray | None = None,
) -> Evaluation:
    """Schedule a placement and measure it.

    ``order``, if given, is one sequence of node indices (or ids) per device, the order that device
    runs them in; otherwise the FIFO executor decides. ``waits`` (with an order only) are pairs
    (u, v): v does not start before u has finished (plus :func:`wait_delay` when u and v are on
    different devices), the control dependencies a runtime enforces (docs/model.md). Raises
    :class:`ScheduleError` if the placement breaks colocation or allowed devices, or the order and
    waits contradict the graph (a wait on a cycle is named).
    """
    if memory_model not in MEMORY_MODELS:
        raise ValueError(f"memory model must be one of {MEMORY_MODELS}, got {memory_model!r}")
    pl = as_placement(problem, placement)
    check_placement(problem, pl)
    delay = edge_delay(problem, pl)
    w = as_waits(problem, waits) if waits is not None else None
    if w is not None and w.size and order is None:
        raise ScheduleError("waits need a device order (the FIFO executor takes none)")
    if order is None:
        start, finish = _ready_simulation(problem, pl, delay)
    else:
        start, finish = _ordered_schedule(problem, pl, delay, order, w)
    return _measure(problem, pl, start, finish, memory_model)


def _measure(problem: Problem, pl: np.ndarray, start: np.ndarray, finish: np.ndarray, memory_model: str) -> Evaluation:
    """The Evaluation of a schedule, its peak memory measured when first read (:class:`MeasuredOnRead`:
    the same number, not paid by a search that rejects the schedule by its makespan, in either
    memory model; a peak-model caller that reads ``memory`` or ``feasible`` measures it)."""
    makespan = float(finish.max()) if problem.n else 0.0
    return MeasuredOnRead(problem, placement=pl, start=start, finish=finish, makespan=makespan,
                          static_memory=static_memory(problem, pl), memory_model=memory_model)


def check(
    problem: Problem,
    placement: Sequence[int] | Mapping | np.ndarray,
    start: Sequence[float] | Mapping | np.ndarray,
    memory_model: str = "static",
    *,
    check_memory: bool = True,
    tol: float = 1e-6,
) -> Evaluation:
    """Validate a complete schedule and return its evaluation (makespan = max finish).

    Checks, with a relative tolerance ``tol``: every node placed on an allowed device, colocation,
    precedence ``S_v >= F_u + comm`` across devices (``>= F_u`` on one device), one node at a time
    per device (zero-time nodes may coincide with anything), and memory within capacity under the
    chosen model. Raises :class:`ScheduleError` naming the first violation.
    """
    if memory_model not in MEMORY_MODELS:
        raise ValueError(f"memory model must be one of {MEMORY_MODELS}, got {memory_model!r}")
    pl = as_placement(problem, placement)
    check_placement(problem, pl)
    if isinstance(start, Mapping):
        st = np.full(problem.n, math.nan)
        for key, t in start.items():
            if key not in problem.index:
                raise ScheduleError(f"start times name unknown node {key!r}")
            st[problem.index[key]] = float(t)
    else:
        st = np.asarray(start, dtype=float)
        if st.shape != (problem.n,):
            raise ScheduleError(f"{st.shape[0] if st.ndim else 0} start times for {problem.n} nodes")
    bad = np.flatnonzero(~np.isfinite(st) | (st < -tol))
    if bad.size:
        raise ScheduleError(f"node {problem.ids[int(bad[0])]!r} has no valid start time ({st[bad[0]]})")
    fin = st + problem.time
    scale = max(1.0, float(fin.max()) if problem.n else 1.0)
    eps = tol * scale
    delay = edge_delay(problem, pl)
    slack = st[problem.dst] - (fin[problem.src] + delay)
    viol = np.flatnonzero(slack < -eps)
    if viol.size:
        j = int(viol[np.argmin(slack[viol])])
        u, v = int(problem.src[j]), int(problem.dst[j])
        raise ScheduleError(
            f"precedence {problem.ids[u]!r} -> {problem.ids[v]!r}: starts at {st[v]:g} but its input is ready at "
            f"{fin[u] + delay[j]:g} (finish {fin[u]:g} + transfer {delay[j]:g})"
        )
    busy = np.flatnonzero(problem.time > 0)
    order = busy[np.lexsort((st[busy], pl[busy]))]
    same = pl[order[1:]] == pl[order[:-1]]
    clash = np.flatnonzero(same & (st[order[1:]] < fin[order[:-1]] - eps))
    if clash.size:
        a, b = int(order[clash[0]]), int(order[clash[0] + 1])
        raise ScheduleError(
            f"device {int(pl[a])} runs {problem.ids[a]!r} [{st[a]:g}, {fin[a]:g}) and {problem.ids[b]!r} "
            f"[{st[b]:g}, {fin[b]:g}) at the same time"
        )
    ev = _measure(problem, pl, st, fin, memory_model)
    if check_memory:
        over = np.flatnonzero(ev.memory > problem.memory * (1 + 1e-12) + 1e-9)
        if over.size:
            d = int(over[0])
            raise ScheduleError(
                f"device {d} ({problem.device_names[d]}) needs {ev.memory[d]:.6g} bytes of {memory_model} memory, "
                f"capacity is {problem.memory[d]:.6g}"
            )
    return ev
