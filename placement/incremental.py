"""Incremental re-timing of a schedule with fixed per-device orders, after nodes change device.

Why: local search (solvers/refine.py) judges each move by the evaluator; on a 40K-node graph one
full evaluation costs tens of milliseconds, so refine tried a few moves per second. A move of one
node or a block changes the start of only the nodes downstream of it whose start was decided by
the changed path: this module recomputes only that cone.

What it computes, exactly: for a reference schedule ``ref`` (start times valid for placement
``pl``), the evaluator's ordered schedule (placement.evaluator.evaluate with ``order``) of the new
placement ``pl'`` with the order ``order_of(pl', ref)``: each device runs its nodes by (ref start,
tie), the tie zero-time nodes first, then topological rank (placement.evaluator.schedule_ties), moved nodes
slotting in where their reference start puts them. This is what
refine's ordered mode evaluates; the result is equal to the full evaluator bit for bit (same
maxima of the same sums), which the tests check on random moves.

How: sorting all nodes by (ref start, tie) is a topological order of the graph plus the device
chains of *any* placement ordered this way (a DAG edge u -> v has ref_start[v] >= ref_finish[u],
so at equal starts u takes no time and is ranked first), so the changed nodes can be re-timed in that order
with a heap of positions: a node is recomputed (its earliest start: the latest input arrival and
the finish of its predecessor in its device's chain) only when one of its inputs, its chain
predecessor or its own device changed, and it passes the change on only if its start moved. The
device chains after the move are an overlay of a few changed links on the doubly linked chains of
the reference.

Most moves a search tries do not beat the incumbent, and proving that is cheaper than re-timing:
with a cutoff, :meth:`IncrementalSchedule._bound` first bounds the new makespan from below by
paths the move leaves intact (head and tail paths that avoid the moved nodes, tested on two
forests' Euler intervals; the longest path avoiding a single moved node, precomputed for all
nodes), by the path through each moved node alone (inputs bounded by their old finish less the
"drops" of the moved nodes before them: moves of nodes far apart, like swaps) and by lower bounds
pushed forward from the moved nodes through the nodes they delay only. For a single moved node
that bound is exact. docs/scale.md has the proofs.

Memory (static and peak) is measured by the evaluator's own functions on the materialised
schedule, only when asked (:meth:`Trial.evaluation`; the peak when first read): a search rejecting
a move by its makespan never pays for it.
"""
from __future__ import annotations

import heapq
from bisect import bisect_left, bisect_right
from dataclasses import dataclass
from typing import Sequence

import numpy as np

from . import kernels
from .evaluator import (Evaluation, MeasuredOnRead, ScheduleError, as_placement, as_waits, edge_delay, evaluate,
                        schedule_ties, static_memory, wait_delay)
from .problem import Problem

BOUND_VISITS = (4, 4096)  # the forward bound gives up after 4 * moved nodes + 4096 visits
WITNESSES = 64  # nodes of longest paths checked first by every bounded trial (IncrementalSchedule._bound)


@dataclass(frozen=True)
class TimingGraph:
    """What a kept-order schedule is timed by besides its device chains: the graph's edges and, after
    them, the waits (u, v) (docs/model.md, "Waits") as edges that carry no bytes, each with the
    evaluator's ``wait_delay`` as its "transfer", paid only when u and v are on different devices,
    as a transfer is. So every path, tail, head and bound of the incremental schedule counts a wait
    the way the evaluator's ordered schedule does, whatever devices its ends move to; the memory
    is measured on the problem's own edges (a wait holds no tensor).

    ``rank``: a topological rank of graph + waits that breaks ties of equal start times after
    zero-time nodes go first (placement.evaluator.schedule_ties; the problem's ``topo_rank`` when
    every wait goes forward in it, always so without waits).
    ``edges``: the problem's edges, ``src.size - edges`` the waits after them."""

    src: np.ndarray
    dst: np.ndarray
    comm: np.ndarray
    pred_ptr: tuple[np.ndarray, np.ndarray, np.ndarray]
    succ_ptr: tuple[np.ndarray, np.ndarray, np.ndarray]
    rank: np.ndarray
    waits: np.ndarray  # (w, 2) node indices
    edges: int

    def delay(self, problem: Problem, placement: np.ndarray) -> np.ndarray:
        """Per edge (the problem's, then the waits), the time actually paid on ``placement``."""
        if not self.waits.size:
            return edge_delay(problem, placement)
        return np.where(placement[self.src] != placement[self.dst], self.comm, 0.0)

    @property
    def wait_list(self) -> list[tuple[int, int]] | None:
        """The waits as pairs for a Solution or the evaluator (None without waits)."""
        return [(int(u), int(v)) for u, v in self.waits.tolist()] if self.waits.size else None

    def ties(self, problem: Problem, start: np.ndarray) -> np.ndarray:
        """The order of equal start times in ``start`` (placement.evaluator.schedule_ties over
        graph + waits)."""
        return schedule_ties(problem, start, self.rank, (self.src, self.dst))


def _csr(a: np.ndarray, b: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(ptr, node, edge): the edges a -> b grouped by a, in edge order (as Problem.succ_ptr)."""
    order = np.argsort(a, kind="stable")
    ptr = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(np.bincount(a, minlength=n), out=ptr[1:])
    return ptr, b[order].astype(np.int64), order.astype(np.int64)


def timing_graph(problem: Problem, waits: Sequence[Sequence[int]] | np.ndarray | None = None) -> TimingGraph:
    """The problem's edges plus ``waits`` (pairs of node indices or ids) as a :class:`TimingGraph`;
    without waits the problem's own arrays, so every result stays bit for bit. Raises
    ScheduleError when the waits close a cycle with the graph."""
    w = as_waits(problem, waits) if waits is not None else np.zeros((0, 2), dtype=np.int64)
    if not w.size:
        return TimingGraph(problem.src, problem.dst, problem.comm, problem.pred_ptr, problem.succ_ptr,
                           problem.topo_rank, w, problem.m)
    n = problem.n
    src = np.concatenate([problem.src, w[:, 0]]).astype(np.int64)
    dst = np.concatenate([problem.dst, w[:, 1]]).astype(np.int64)
    comm = np.concatenate([np.asarray(problem.comm, dtype=np.float64), np.full(len(w), wait_delay(problem))])
    succ = _csr(src, dst, n)
    rank = problem.topo_rank
    if np.any(rank[w[:, 0]] >= rank[w[:, 1]]):
        rank = _rank_with(problem, succ, dst)
    return TimingGraph(src, dst, comm, _csr(dst, src, n), succ, rank, w, problem.m)


def _rank_with(problem: Problem, succ: tuple[np.ndarray, np.ndarray, np.ndarray], dst: np.ndarray) -> np.ndarray:
    """A topological rank of the graph plus waits (succ: their CSR), taking among the nodes whose
    predecessors are all ranked the one first in ``topo_rank`` (so without waits: topo_rank)."""
    n = problem.n
    ptr, nbr, _ = succ
    ptr_l, nbr_l = ptr.tolist(), nbr.tolist()
    indeg = np.bincount(dst, minlength=n).tolist()
    base = problem.topo_rank.tolist()
    heap = [(base[v], v) for v in range(n) if indeg[v] == 0]
    heapq.heapify(heap)
    rank = [0] * n
    done = 0
    while heap:
        _, v = heapq.heappop(heap)
        rank[v] = done
        done += 1
        for w in nbr_l[ptr_l[v]:ptr_l[v + 1]]:
            indeg[w] -= 1
            if indeg[w] == 0:
                heapq.heappush(heap, (base[w], w))
    if done != n:
        raise ScheduleError("the waits close a cycle with the graph")
    return np.asarray(rank, dtype=np.int64)


def device_order(problem: Problem, placement: np.ndarray, ref_start: np.ndarray,
                 rank: np.ndarray | None = None, graph: TimingGraph | None = None) -> list[list[int]]:
    """Per-device node order by reference start, ties zero-time nodes first, then topological
    rank (placement.evaluator.schedule_ties): the order the incremental schedule keeps
    (solvers.refine.order_of). ``graph``: the schedule's :class:`TimingGraph` when it has waits
    (``rank`` alone, a timing graph's, breaks ties by that rank only)."""
    ties = graph.ties(problem, ref_start) if graph is not None else schedule_ties(problem, ref_start, rank)
    seq = np.lexsort((ties, ref_start, placement))
    bounds = np.searchsorted(placement[seq], np.arange(problem.k + 1))
    return [seq[bounds[d]:bounds[d + 1]].tolist() for d in range(problem.k)]


def _is_fixpoint(problem: Problem, placement: np.ndarray, start: np.ndarray, order: list[list[int]],
                 graph: TimingGraph | None = None) -> bool:
    """Is ``start`` already the earliest schedule of ``order`` (every start the latest of its input
    arrivals, waits (``graph``) and its device predecessor's finish, or 0)? Then re-timing it would
    change nothing: the recurrence has one solution on a DAG. (After an accepted move, the common case.)"""
    finish = start + problem.time
    need = np.zeros(problem.n)
    _arrivals(problem, placement, finish, need, graph)
    for seq in order:
        if len(seq) > 1:
            a = np.asarray(seq, dtype=np.int64)
            need[a[1:]] = np.maximum(need[a[1:]], finish[a[:-1]])
    return bool(np.array_equal(need, start))


def _arrivals(problem: Problem, placement: np.ndarray, finish: np.ndarray, need: np.ndarray,
              graph: TimingGraph | None) -> None:
    """``need[v]`` raised to the latest arrival of v's inputs (and waits: ``graph``)."""
    if graph is None or not graph.waits.size:
        np.maximum.at(need, problem.dst, finish[problem.src] + edge_delay(problem, placement))
    else:
        np.maximum.at(need, graph.dst, finish[graph.src] + graph.delay(problem, placement))


def _chains_fixpoint(problem: Problem, placement: np.ndarray, start: np.ndarray, prev: np.ndarray,
                     graph: TimingGraph | None = None) -> bool:
    """:func:`_is_fixpoint` with the device chains given as each node's predecessor (-1: none)."""
    finish = start + problem.time
    need = np.zeros(problem.n)
    _arrivals(problem, placement, finish, need, graph)
    has = np.flatnonzero(prev >= 0)
    need[has] = np.maximum(need[has], finish[prev[has]])
    return bool(np.array_equal(need, start))


def kept_order_start(problem: Problem, placement: np.ndarray, ref_start: np.ndarray,
                     graph: TimingGraph | None = None) -> np.ndarray | None:
    """The start times of the evaluator's ordered schedule of ``placement`` with each device's
    nodes in (``ref_start``, tie) order (``device_order``), in one pass.

    Why: refine judges a batch move (tens to thousands of nodes) by this schedule; its cone is
    most of the graph, and the evaluator's ordered schedule (Kahn's algorithm over the graph and
    the chains, with the order validated node by node) costs 2-3x this pass. When ``ref_start``
    is a schedule of any placement, sorting all nodes by (ref start, tie) is a topological order
    of the graph and of these chains (docs/scale.md, "Incremental evaluation"), so each node can
    be timed once, after its inputs and its device predecessor, with the evaluator's sums and
    maxima: the result equals it bit for bit (tests/test_incremental.py). None when the order is
    not topological (``ref_start`` was not a schedule): then ask the evaluator.

    ``graph``: with waits (:func:`timing_graph`), each wait times its node as an input does, ties
    broken by the graph's :meth:`TimingGraph.ties`: the evaluator's ordered schedule with those waits."""
    n = problem.n
    g = timing_graph(problem) if graph is None else graph
    ref = np.asarray(ref_start, dtype=float)
    at = np.lexsort((g.ties(problem, ref), ref))
    pos = np.empty(n, dtype=np.int64)
    pos[at] = np.arange(n)
    if np.any(pos[g.src] >= pos[g.dst]):
        return None
    seq = at[np.argsort(placement[at], kind="stable")]  # per device, in position order
    prev = np.full(n, -1, dtype=np.int64)
    same = placement[seq[1:]] == placement[seq[:-1]]
    prev[seq[1:][same]] = seq[:-1][same]
    ptr, nbr, eid = g.pred_ptr
    delay = g.delay(problem, placement)[eid]
    fast = kernels.for_size(n)
    if fast is not None:
        return fast.kept_order_start(at, prev, ptr, nbr, delay, problem.time)
    ptr_l, nbr_l, delay_l = ptr.tolist(), nbr.tolist(), delay.tolist()
    dur, prev_l = problem.time.tolist(), prev.tolist()
    start = [0.0] * n
    fin = [0.0] * n
    for v in at.tolist():
        p = prev_l[v]
        t = 0.0 if p < 0 else fin[p]
        for j in range(ptr_l[v], ptr_l[v + 1]):
            a = fin[nbr_l[j]] + delay_l[j]
            if a > t:
                t = a
        start[v] = t
        fin[v] = t + dur[v]
    return np.asarray(start)


def ordered_start(problem: Problem, placement: np.ndarray, order: list[list[int]], graph: TimingGraph) -> np.ndarray | None:
    """The start times of the evaluator's ordered schedule of ``order`` (every node once, each on its
    own device) with ``graph``'s waits, or None when the order contradicts a wait (or the graph).

    Why: an order made without the waits (a priority list of refine's batch move) may run v
    before u on one device against a wait (u, v); the evaluator then names the wait, through a
    networkx search that cost 0.75 s per batch move at 50K nodes. Here a cycle is just None: the
    same Kahn pass as the evaluator's (the same sums and maxima: its times bit for bit)."""
    n = problem.n
    chain_a = [np.asarray(seq[:-1], dtype=np.int64) for seq in order if len(seq) > 1]
    chain_c = [np.asarray(seq[1:], dtype=np.int64) for seq in order if len(seq) > 1]
    a = np.concatenate(chain_a) if chain_a else np.zeros(0, dtype=np.int64)
    c = np.concatenate(chain_c) if chain_c else np.zeros(0, dtype=np.int64)
    src = np.concatenate([graph.src, a])
    dst = np.concatenate([graph.dst, c])
    dly = np.concatenate([graph.delay(problem, placement), np.zeros(a.size)])
    ptr, nbr, eid = _csr(src, dst, n)
    indeg = np.bincount(dst, minlength=n)
    fast = kernels.for_size(n)
    if fast is not None:
        start, done = fast.release_starts(ptr, nbr, dly[eid], indeg, problem.time, np.zeros(n), np.full(n, -1, dtype=np.int64))
        return start if done == n else None
    ptr_l, nbr_l, dly_l, deg, dur = ptr.tolist(), nbr.tolist(), dly[eid].tolist(), indeg.tolist(), problem.time.tolist()
    st = [0.0] * n
    stack = [v for v in range(n) if deg[v] == 0]
    done = 0
    while stack:
        v = stack.pop()
        done += 1
        f = st[v] + dur[v]
        for j in range(ptr_l[v], ptr_l[v + 1]):
            w = nbr_l[j]
            t = f + dly_l[j]
            if t > st[w]:
                st[w] = t
            deg[w] -= 1
            if deg[w] == 0:
                stack.append(w)
    return np.asarray(st) if done == n else None


def ordered_evaluation(problem: Problem, placement: np.ndarray, order: list[list[int]], start: np.ndarray,
                       memory_model: str = "static", graph: TimingGraph | None = None) -> Evaluation | None:
    """The evaluator's Evaluation of ``placement`` run in ``order`` (with ``graph``'s waits), given start times believed to
    be its schedule (e.g. a list simulation's, solvers/reschedule.py): None unless ``start`` is the
    earliest schedule of ``order`` (one vectorised check instead of re-timing every node in
    Python; the recurrence has one solution on a DAG, so the times are the evaluator's bit for
    bit). Memory is measured by the evaluator's own functions. ``order`` must hold every node once,
    each on its own device (as a list simulation's does)."""
    start = np.asarray(start, dtype=float)
    if not _is_fixpoint(problem, placement, start, order, graph):
        return None
    finish = start + problem.time
    return MeasuredOnRead(problem, placement=placement, start=start, finish=finish,
                      makespan=float(finish.max()) if problem.n else 0.0,
                      static_memory=static_memory(problem, placement), memory_model=memory_model)


def _forest_intervals(parent: np.ndarray, rank: np.ndarray, ranked: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Euler intervals of a forest given by parent pointers (-1 at a root): ``x`` lies on the path
    from ``v`` to its root iff ``tin[x] <= tin[v] < end[x]``. Children take their slots in order
    of ``rank`` (any order would do; this one is the preorder of a walk in that order).
    ``ranked``: the nodes in ``rank`` order, when the caller has them (saves a sort).

    Why numpy: at 40K nodes the node-by-node walk cost 6-25 ms per forest, twice per re-base.
    Subtree sizes and preorder numbers are sums over descendants and over ancestors, computed by
    pointer doubling: with A_k the 2^k-th ancestor, the sum over ancestors at distances 0..2^K-1
    is the product of (I + A_k) over k < K (every distance has one binary expansion), and the sum
    over descendants is its transpose, a bincount on A_k per round: log2(depth) rounds."""
    n = parent.size
    if n == 0:
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
    fast = kernels.for_size(n)
    if fast is not None:  # the same walk, node by node, compiled
        seq = np.lexsort((rank, parent)) if ranked is None else fast.by_parent(ranked, parent)
        return fast.forest_intervals(seq, parent)
    jumps = []  # per round: the nodes with a 2^k-th ancestor, and that ancestor
    up = parent.astype(np.int64, copy=True)
    live = np.flatnonzero(up >= 0)
    while live.size:
        anc = up[live]
        jumps.append((live, anc))
        nxt = up[anc]
        up[live] = nxt
        live = live[nxt >= 0]
    size = np.ones(n)  # float: bincount's weights; exact below 2^53
    for live, anc in jumps:  # size(v): its descendants, itself included
        size += np.bincount(anc, weights=size[live], minlength=n)
    # Each node's slot: 1 after its parent's own, plus the sizes of its earlier siblings (roots:
    # the sizes of the earlier roots); its preorder number is the sum of the slots on its root path.
    seq = np.lexsort((rank, parent))
    par, sz = parent[seq], size[seq]
    before = np.cumsum(sz) - sz
    first = np.ones(n, dtype=bool)
    first[1:] = par[1:] != par[:-1]
    tin = np.empty(n)
    tin[seq] = before - np.maximum.accumulate(np.where(first, before, 0.0)) + (par >= 0)
    for live, anc in jumps:
        tin[live] += tin[anc]
    tin = tin.astype(np.int64)
    size = size.astype(np.int64)
    return tin, tin + size


class _Avoids:
    """Does a node's path to its root in a forest (its head or its tail path) avoid every moved node?"""

    def __init__(self, moved, tin: list[int], end: list[int]) -> None:
        self.tin = tin
        self.lo: list[int] = []
        self.hi: list[int] = []
        for a, b in sorted((tin[m], end[m]) for m in moved):
            if not self.hi or a >= self.hi[-1]:  # intervals are nested or disjoint: keep the outer ones
                self.lo.append(a)
                self.hi.append(b)

    def __call__(self, v: int) -> bool:
        t = self.tin[v]
        i = bisect_right(self.lo, t) - 1
        return i < 0 or t >= self.hi[i]


class Trial:
    """The schedule after a move, as changes over the base schedule it was tried on.

    ``start``: the nodes whose start changed -> their new start, given as a dict (the Python
    path) or as two arrays, nodes in the order they were re-timed and their starts (the compiled
    path): then the dict is made only if asked for (a rejected move's cone can be the whole graph,
    and building and freeing a dict of it cost more than re-timing it)."""

    def __init__(self, base: IncrementalSchedule, moves: dict[int, int],
                 start: dict[int, float] | tuple[np.ndarray, np.ndarray], makespan: float, recomputed: int,
                 complete: bool = True) -> None:
        self.base = base
        self.version = base.version  # the base it was tried on: a re-base after it makes it stale
        self.moves = moves  # node -> new device
        self._start = start
        self.makespan = makespan  # when not complete: a lower bound of it, at least the cutoff
        self.recomputed = recomputed  # nodes re-timed (the size of the cone)
        self.complete = complete  # False: stopped once the makespan was proved at least the cutoff

    @property
    def start(self) -> dict[int, float]:
        """The nodes whose start changed -> their new start."""
        if isinstance(self._start, tuple):
            nodes, values = self._start
            self._start = dict(zip(nodes.tolist(), values.tolist()))
        return self._start

    def placement(self) -> np.ndarray:
        pl = self.base.placement.copy()
        if self.moves:
            nodes = np.fromiter(self.moves.keys(), dtype=np.int64, count=len(self.moves))
            pl[nodes] = np.fromiter(self.moves.values(), dtype=np.int64, count=len(self.moves))
        return pl

    def times(self) -> tuple[np.ndarray, np.ndarray]:
        start = self.base.start.copy()
        if isinstance(self._start, tuple):
            start[self._start[0]] = self._start[1]
        elif self.start:
            nodes = np.fromiter(self.start.keys(), dtype=np.int64, count=len(self.start))
            start[nodes] = np.fromiter(self.start.values(), dtype=float, count=len(self.start))
        return start, start + self.base.problem.time

    def evaluation(self, memory_model: str = "static") -> Evaluation:
        """The full evaluation of the moved placement under this schedule (static memory measured
        here, the peak when first read: :class:`MeasuredOnRead`)."""
        if not self.complete:
            raise ValueError("a trial stopped at its cutoff has no complete schedule")
        p = self.base.problem
        pl = self.placement()
        start, finish = self.times()
        return MeasuredOnRead(p, placement=pl, start=start, finish=finish, makespan=self.makespan,
                              static_memory=static_memory(p, pl), memory_model=memory_model)


def _graph_lists(s: IncrementalSchedule) -> None:
    """The graph as Python lists, for the Python path: per node its (input, transfer) pairs, its
    successors and their transfers, and the node times."""
    p = s.problem
    pptr, pnbr, pcomm, sptr, snbr, scomm = (a.tolist() for a in s._csr)
    d = s.__dict__
    d["_preds"] = [list(zip(pnbr[pptr[v]:pptr[v + 1]], pcomm[pptr[v]:pptr[v + 1]])) for v in range(p.n)]
    d["_succs"] = [snbr[sptr[v]:sptr[v + 1]] for v in range(p.n)]
    d["_succ_comm"] = [scomm[sptr[v]:sptr[v + 1]] for v in range(p.n)]
    d["_dur"] = p.time.tolist()


_GRAPH = ("_preds", "_succs", "_succ_comm", "_dur")  # made once, by _graph_lists, on first use

_LAZY = {  # IncrementalSchedule's Python lists of its base, made from its arrays on first use
    "_pl": lambda s: s.placement.tolist(),
    "_s": lambda s: s.start.tolist(),
    "_f": lambda s: s.finish.tolist(),
    "_at": lambda s: s._arrays[0].tolist(),
    "_pos": lambda s: s._arrays[1].tolist(),
    "_prev": lambda s: s._arrays[2].tolist(),
    "_next": lambda s: s._next_a.tolist(),
    "_seq": lambda s: s._device_lists(),
    "_keys": lambda s: [s._arrays[1][np.asarray(q, dtype=np.int64)].tolist() for q in s._seq],
    "_by_finish": lambda s: s._by_finish_a.tolist(),
    "_tail": lambda s: s._tail_a.tolist(),
    "_tail_next": lambda s: s._tail_next_a.tolist(),
}


class IncrementalSchedule:
    """A placement with a reference schedule; :meth:`try_move` re-times the affected cone only.

    Build it from a placement and the start times of a valid schedule of it (e.g. the evaluator's
    FIFO or ordered schedule); :meth:`commit` a trial to make it the new base (its start times
    become the new reference, as refine does when it accepts a move)."""

    def __init__(self, problem: Problem, placement: np.ndarray, ref_start: np.ndarray,
                 waits: Sequence[Sequence[int]] | np.ndarray | TimingGraph | None = None) -> None:
        self.problem = problem
        p = problem
        # The waits (u, v) are edges of the timing graph: every path below counts them as the
        # evaluator does (TimingGraph). A move of u or v keeps the wait; only its latency follows the devices.
        self.graph = waits if isinstance(waits, TimingGraph) else timing_graph(problem, waits)
        g = self.graph
        ptr, nbr, eid = g.pred_ptr
        comm = g.comm[eid]
        sptr, snbr, seid = g.succ_ptr
        i64, f64 = np.int64, np.float64
        # The graph as flat arrays for the compiled trial (kernels.move_trial), in the dtypes it was compiled for.
        self._csr = (np.ascontiguousarray(ptr, dtype=i64), np.ascontiguousarray(nbr, dtype=i64),
                     np.ascontiguousarray(comm, dtype=f64), np.ascontiguousarray(sptr, dtype=i64),
                     np.ascontiguousarray(snbr, dtype=i64), np.ascontiguousarray(g.comm[seid], dtype=f64))
        self._time = np.ascontiguousarray(p.time, dtype=f64)
        self._flags: tuple | None = None  # the compiled trial's scratch flags and values, all clear between trials
        self.version = 0  # counts re-bases (Trial.version)
        self.reset(placement, ref_start)

    def reset(self, placement: np.ndarray, ref_start: np.ndarray) -> None:
        """Make (placement, the ordered schedule by ``ref_start``) the base.

        The base is kept as numpy arrays; the Python lists of the Python path (``_pl``, ``_s``,
        ``_at``, ``_seq``, ...: :data:`_LAZY`) are made on first use (the compiled path never uses
        them: at 40K nodes they were a third of a re-base)."""
        p = self.problem
        n = p.n
        self._forget()
        pl = as_placement(p, placement)
        ref = np.asarray(ref_start, dtype=float)
        # Positions in (ref start, tie) order: a topological order of the graph plus the chains of
        # any placement ordered this way; the cone is re-timed in it (a heap of positions).
        self._ties = self.graph.ties(p, ref)
        at = np.lexsort((self._ties, ref))
        pos = np.empty(n, dtype=np.int64)
        pos[at] = np.arange(n)
        # Each device's nodes by (ref start, tie): device_order's order (a stable sort of that by device).
        fast = kernels.for_size(n)
        self._off: np.ndarray | None = None  # the nodes whose start is not their reference start (_rebase)
        start = None
        if fast is not None:  # chains by counting; the fixpoint test and the re-timing of what breaks it compiled
            seq, lo, prev, nxt = fast.device_chains(at, pl, p.k)
            start = np.array(ref, dtype=np.float64)
            ok, off = fast.retime_order(at, pos, prev, nxt, pl, start, self._time, *self._csr[:5])
            if ok:
                self._off = off
            else:
                start = None
        else:
            seq = at[np.argsort(pl[at], kind="stable")]
            lo = np.searchsorted(pl[seq], np.arange(p.k + 1)).astype(np.int64)
            prev = np.full(n, -1, dtype=np.int64)
            nxt = np.full(n, -1, dtype=np.int64)
            same = pl[seq[1:]] == pl[seq[:-1]]
            nxt[seq[:-1][same]], prev[seq[1:][same]] = seq[1:][same], seq[:-1][same]
            if _chains_fixpoint(p, pl, ref, prev, self.graph):
                start = ref
        self._seq_a, self._seq_lo = seq, lo
        if start is None:  # the evaluator's schedule of this order, timed in one pass (or by the evaluator)
            start = kept_order_start(p, pl, ref, self.graph)
            if start is None:
                start = evaluate(p, pl, order=self._device_lists(), waits=self.graph.wait_list).start
        start = np.ascontiguousarray(start, dtype=np.float64)
        finish = start + p.time
        self._settle(pl, start, finish, at, pos, prev, nxt, np.argsort(-finish, kind="stable"))

    def _forget(self) -> None:
        """Drop the Python lists of the old base (made again on first use)."""
        self.version += 1
        for name in _LAZY:
            self.__dict__.pop(name, None)

    def _settle(self, pl: np.ndarray, start: np.ndarray, finish: np.ndarray, at: np.ndarray, pos: np.ndarray,
                prev: np.ndarray, nxt: np.ndarray, by_finish: np.ndarray) -> None:
        """Take the new base's schedule, positions, chains and finish order; derive the rest."""
        n = self.problem.n
        self.placement, self.start, self.finish = pl, start, finish
        self.makespan = float(finish.max()) if n else 0.0
        self._arrays = (at, pos, prev)  # the same as numpy arrays, for _prepare_bounds
        self._next_a = nxt
        self._by_finish_a = by_finish
        self._scratch: tuple | None = None  # the compiled trial's copies of the base (_try_compiled)
        self._tails(at, nxt)
        self._last = int(self._by_finish_a[0]) if n else -1
        self._bounds_ready = False  # the structures of _bound: built by the first trial with a cutoff

    def _device_lists(self) -> list[list[int]]:
        seq, lo = self._seq_a, self._seq_lo
        return [seq[lo[d]:lo[d + 1]].tolist() for d in range(self.problem.k)]

    def __getattr__(self, name: str):
        """The Python path's lists of the base (:data:`_LAZY`), made on first use per base."""
        if name in _GRAPH:
            _graph_lists(self)
            return self.__dict__[name]
        make = _LAZY.get(name)
        if make is None:
            raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")
        value = make(self)
        self.__dict__[name] = value
        return value

    def _prepare_bounds(self) -> None:
        """Head parents, the Euler intervals of the head and tail forests, the avoid array and the
        witnesses: what a trial with a cutoff needs to prove it (users of the schedule that never
        ask for a cutoff, like window LNS, do not pay for them)."""
        p = self.problem
        at, pos, prev = self._arrays
        self._head_tin, self._head_end = _forest_intervals(self._heads(prev), pos, at)
        self._tail_tin, self._tail_end = _forest_intervals(self._tail_next_a, -pos, at[::-1])
        self._bound_lists: dict[str, list] | None = None  # their Python lists, made by the Python path
        self._avoiding(at, pos, prev)
        # Witnesses: nodes of longest paths, spread over the schedule; a move whose moved nodes
        # miss a witness's head and tail paths leaves a path of the old makespan in place.
        through = self.start + p.time + self._tail_a
        crit = at[through[at] >= self.makespan]
        pick = crit[np.linspace(0, crit.size - 1, min(crit.size, WITNESSES)).astype(np.int64)] if crit.size else crit
        self._witness = [(int(w), float(through[w])) for w in pick]
        self._witness_a = (np.ascontiguousarray(pick, dtype=np.int64), np.ascontiguousarray(through[pick], dtype=np.float64))
        self._bounds_ready = True

    def _lists(self) -> dict[str, list]:
        """The bound's structures as Python lists, for the Python path (made once per base)."""
        if self._bound_lists is None:
            self._bound_lists = {name: getattr(self, name).tolist() for name in
                                 ("_head_tin", "_head_end", "_tail_tin", "_tail_end", "_avoid", "_before", "_after")}
        return self._bound_lists

    def _tails(self, at: np.ndarray, nxt_a: np.ndarray) -> None:
        """``tail[v]``: the longest path from v's finish to the end of the base schedule (over graph
        edges with their transfer times and device-chain edges), and ``tail_next[v]`` the node it
        goes through (-1 at the end): the cutoff in :meth:`try_move` is proved along it."""
        n = self.problem.n
        fast = kernels.for_size(n)
        if fast is not None:
            p, g = self.problem, self.graph
            ptr, nbr, eid = g.succ_ptr
            self._tail_a, self._tail_next_a = fast.tails(at, self.placement, p.time, ptr, nbr, g.comm[eid], nxt_a)
            return
        pl, dur, succs, nxt = self._pl, self._dur, self._succs, self._next
        comm = self._succ_comm
        tail = [0.0] * n
        tail_next = [-1] * n
        through = [0.0] * n  # dur + tail, the same sum the loop below would form per edge
        for v in reversed(self._at):
            best, arg = 0.0, -1
            x = nxt[v]
            if x >= 0:
                best, arg = through[x], x
            dv = pl[v]
            for x, c in zip(succs[v], comm[v]):
                t = through[x] + c if pl[x] != dv else through[x]
                if t > best:
                    best, arg = t, x
            tail[v], tail_next[v] = best, arg
            through[v] = dur[v] + best
        self._tail_a, self._tail_next_a = np.asarray(tail), np.asarray(tail_next, dtype=np.int64)

    def _avoiding(self, at: np.ndarray, pos: np.ndarray, prev: np.ndarray) -> None:
        """``avoid[v]``: the longest path of the base schedule's constraints that avoids v, for every
        v at once; ``before[i]`` / ``after[i]``: the longest path among positions < i / > i.

        In position order a path avoiding v lies before it (at most the latest finish there),
        after it (at most the longest duration + tail there), or crosses it by one edge a -> b
        with pos[a] < pos[v] < pos[b] (at most finish[a] + transfer + time[b] + tail[b]): an
        offline range maximum, spread over power-of-two blocks and pushed down level by level."""
        p = self.problem
        n = p.n
        finish, dur = self.finish, p.time
        tail = self._tail_a
        f_at = finish[at]
        before = np.zeros(n + 1)
        if n:
            np.maximum.accumulate(f_at, out=before[1:])
        after = np.zeros(n + 1)  # after[i]: positions > i-1 ... stored so that after[i + 1] = max over > i
        if n:
            after[:n] = np.maximum.accumulate((dur + tail)[at][::-1])[::-1]
        fast = kernels.for_size(n)
        if fast is not None:
            jump = fast.avoid_jumps(at, pos, prev, self.placement, finish, dur, tail, *self._csr[:3])
            avoid = np.empty(n)
            avoid[at] = np.maximum(np.maximum(before[:n], after[1:n + 1]), jump)
            self._avoid, self._before, self._after = avoid, before, after
            return
        has = prev >= 0
        g = self.graph
        src = np.concatenate([g.src, prev[has]])
        dst = np.concatenate([g.dst, np.flatnonzero(has)])
        val = finish[src] + np.concatenate([g.delay(p, self.placement), np.zeros(int(has.sum()))]) + dur[dst] + tail[dst]
        lo, hi = pos[src] + 1, pos[dst] - 1  # the positions an edge jumps over, inclusive
        keep = hi >= lo
        lo, hi, val = lo[keep], hi[keep], val[keep]
        levels = max(1, int(n).bit_length())
        tab = np.zeros((levels, n + 1))
        if lo.size:
            k = np.floor(np.log2(hi - lo + 1)).astype(np.int64)
            flat = tab.reshape(-1)
            np.maximum.at(flat, k * (n + 1) + lo, val)
            np.maximum.at(flat, k * (n + 1) + hi - (1 << k) + 1, val)
            for lev in range(levels - 1, 0, -1):
                half = 1 << (lev - 1)
                np.maximum(tab[lev - 1], tab[lev], out=tab[lev - 1])
                np.maximum(tab[lev - 1][half:], tab[lev][:n + 1 - half], out=tab[lev - 1][half:])
        jump = tab[0][:n]
        avoid_at = np.maximum(np.maximum(before[:n], after[1:n + 1]), jump)
        avoid = np.empty(n)
        avoid[at] = avoid_at
        self._avoid, self._before, self._after = avoid, before, after

    def _heads(self, prev: np.ndarray) -> np.ndarray:
        """Per node v, its head parent: an input or the device predecessor whose arrival fixed v's start
        (-1 for a start at 0). Following it from v gives a path of constraints of length
        ``start[v]``: the head path, the mirror image of the tail path."""
        p = self.problem
        start, finish = self.start, self.finish
        parent = np.full(p.n, -1, dtype=np.int64)
        g = self.graph
        arrive = finish[g.src] + g.delay(p, self.placement)
        tight = np.flatnonzero(arrive == start[g.dst])
        parent[g.dst[tight]] = g.src[tight]
        has = prev >= 0
        chain = np.flatnonzero(has)
        tight_c = chain[finish[prev[chain]] == start[chain]]
        parent[tight_c] = prev[tight_c]
        # A start is the maximum of its arrivals (or 0), so one of them is tight; at 0 the node is a root.
        parent[start == 0.0] = -1
        return parent

    @property
    def order(self) -> list[list[int]]:
        """Each device's nodes in the base schedule's order."""
        return self._seq

    @property
    def tail(self) -> np.ndarray:
        """Per node: the longest path from its finish to the end of the base schedule (graph edges
        with their transfer times on this placement, and device-chain edges)."""
        return self._tail_a.copy()

    def commit(self, trial: Trial) -> None:
        """Make the trial's schedule the base, its start times the reference.

        With the compiled kernels, and the trial tried on this very base, only what the move
        changed is re-sorted and re-timed (:meth:`_rebase`); otherwise a full :meth:`reset`. Both
        build the same base (tests/test_rebase.py)."""
        start, _ = trial.times()
        fast = kernels.for_size(self.problem.n)
        if (fast is not None and trial.version == self.version and self._off is not None
                and isinstance(trial._start, tuple) and trial.complete):
            if self._rebase(fast, trial.placement(), start, trial._start[0]):
                return
        self.reset(trial.placement(), start)

    def _rebase(self, fast, pl: np.ndarray, ref: np.ndarray, changed: np.ndarray) -> bool:
        """:meth:`reset` to (``pl``, ``ref``) after a move whose re-timed nodes are ``changed``
        (every node whose start differs from the base's).

        The positions are by (reference start, tie): only the nodes whose key changed (the
        re-timed ones, and those whose base start was not their old reference start, ``_off``) are
        sorted, in the cone's order (nearly sorted already), and merged into the others' order; the
        device chains are made by counting; the new order's schedule is ``ref`` except where two
        zero-time nodes at one start changed places, re-timed from there (kernels.retime_order); the
        finish order is merged likewise. O(n) passes instead of three sorts and a full re-timing.
        False, nothing changed, if the positions are not topological (not reached for a trial's
        schedule; the caller then resets in full)."""
        p = self.problem
        n = p.n
        start = np.array(ref, dtype=np.float64)
        rank = np.ascontiguousarray(self.graph.ties(p, start), dtype=np.int64)
        if not np.array_equal(rank, self._ties):
            return False  # the base's order broke its ties otherwise (its reference was no schedule)
        flag = np.zeros(n, dtype=np.bool_)
        flag[changed] = True
        extra = self._off[~flag[self._off]]
        flag[extra] = True
        keys = np.concatenate([changed, extra]) if extra.size else changed
        added = keys[np.argsort(start[keys], kind="stable")]
        fast.order_ties(added, start, rank)
        at = fast.merge_order(self._arrays[0], flag, added, start, rank)
        pos = np.empty(n, dtype=np.int64)
        pos[at] = np.arange(n)
        seq, lo, prev, nxt = fast.device_chains(at, pl, p.k)
        ok, off = fast.retime_order(at, pos, prev, nxt, pl, start, self._time, *self._csr[:5])
        if not ok:
            return False
        self._forget()
        self._seq_a, self._seq_lo = seq, lo
        finish = start + p.time
        moved = np.zeros(n, dtype=np.bool_)  # the nodes whose finish is not the base's
        moved[changed] = True
        late = off[~moved[off]]
        moved[late] = True
        keys = np.concatenate([changed, late]) if late.size else changed
        neg = -finish
        index = np.arange(n, dtype=np.int64)
        added = keys[np.argsort(neg[keys], kind="stable")]
        fast.order_ties(added, neg, index)
        by_finish = fast.merge_order(self._by_finish_a, moved, added, neg, index)
        self._off = off
        self._settle(as_placement(p, pl), start, finish, at, pos, prev, nxt, by_finish)
        return True

    def try_move(self, moves: dict[int, int], cutoff: float = float("inf")) -> Trial:
        """Re-time the schedule after the nodes of ``moves`` (node -> device) change device.

        With a ``cutoff``, stop as soon as the new makespan is proved at least ``cutoff``: the
        trial is then not ``complete`` and its makespan is that lower bound (see :meth:`_bound`
        and the check in the cone below)."""
        fast = kernels.for_size(self.problem.n)
        if fast is not None:
            mv = np.fromiter(moves.keys(), dtype=np.int64, count=len(moves))
            md = np.fromiter(moves.values(), dtype=np.int64, count=len(moves))
            keep = self.placement[mv] != md
            mv, md = mv[keep], md[keep]
            if cutoff != float("inf") and mv.size and not self._bounds_ready:
                self._prepare_bounds()
            return self._try_compiled(fast, dict(zip(mv.tolist(), md.tolist())), mv, md, cutoff)
        pl = self._pl
        moves = {v: d for v, d in moves.items() if pl[v] != d}
        if cutoff != float("inf") and moves and not self._bounds_ready:
            self._prepare_bounds()
        prev_o: dict[int, int] = {}
        next_o: dict[int, int] = {}
        head_o: dict[int, int] = {}

        def prev_of(v: int) -> int:
            return prev_o[v] if v in prev_o else self._prev[v]

        def next_of(v: int) -> int:
            return next_o[v] if v in next_o else self._next[v]

        def head(d: int) -> int:
            if d in head_o:
                return head_o[d]
            seq = self._seq[d]
            return seq[0] if seq else -1

        seeds: set[int] = set()
        bridged: list[int] = []  # unmoved nodes whose chain predecessor changed by an unlink
        # Unlink the moved nodes from their old chains.
        for v in moves:
            a, b = prev_of(v), next_of(v)
            if a >= 0:
                next_o[a] = b
            else:
                head_o[pl[v]] = b
            if b >= 0:
                prev_o[b] = a
                seeds.add(b)
        bridged = [b for b in seeds if b not in moves]
        # Link them into their new chains by (ref start, tie), in increasing order of that key.
        pos = self._pos
        in_order = sorted(moves, key=pos.__getitem__)
        last: dict[int, tuple[int, int]] = {}  # device -> (last inserted node, its left anchor)
        for v in in_order:
            d = moves[v]
            keys, seq = self._keys[d], self._seq[d]
            j = bisect_left(keys, pos[v]) - 1
            while j >= 0 and seq[j] in moves:
                j -= 1
            anchor = seq[j] if j >= 0 else -1
            if d in last and last[d][1] == anchor:
                left = last[d][0]  # after the nodes already inserted in this gap (all with smaller keys)
            else:
                left = anchor
            right = next_of(left) if left >= 0 else head(d)
            prev_o[v], next_o[v] = left, right
            if left >= 0:
                next_o[left] = v
            else:
                head_o[d] = v
            if right >= 0:
                prev_o[right] = v
                seeds.add(right)
            last[d] = (v, anchor)
            seeds.add(v)
            seeds.update(self._succs[v])
        lists = self._lists() if self._bounds_ready else {}
        tail_free = _Avoids(moves, lists["_tail_tin"], lists["_tail_end"]) if self._bounds_ready and moves else None
        if cutoff != float("inf") and moves:
            bound, visited, t_lb = self._bound(moves, in_order, prev_of, next_of, bridged, tail_free, cutoff)
            if bound >= cutoff:
                return Trial(self, moves, {}, bound, visited, complete=False)
        else:
            t_lb = {}
        # Re-time the cone in (ref start, tie) order: a heap of positions. Working copies of the
        # devices and finish times (two list copies) keep the loop to plain indexing.
        dev = pl.copy()
        for v, d in moves.items():
            dev[v] = d
        fin = self._f.copy()
        s_new: dict[int, float] = {}
        base_s, dur, preds, succs = self._s, self._dur, self._preds, self._succs
        at, prev_l, next_l = self._at, self._prev, self._next
        heap = [pos[v] for v in seeds]
        heapq.heapify(heap)
        queued = seeds
        pop, push = heapq.heappop, heapq.heappush
        count = 0
        tail = self._tail
        while heap:
            w = at[pop(heap)]
            count += 1
            dw = dev[w]
            p = prev_o.get(w, -2)
            if p == -2:
                p = prev_l[w]
            t = 0.0 if p < 0 else fin[p]
            for u, c in preds[w]:
                a = fin[u]
                if dev[u] != dw:
                    a += c
                if a > t:
                    t = a
            if t == base_s[w]:
                # Unchanged, and final: its tail path, if it avoids the moved nodes, still follows.
                if fin[w] + tail[w] >= cutoff and w not in moves and tail_free(w):
                    return Trial(self, moves, s_new, fin[w] + tail[w], count, complete=False)
            else:
                s_new[w] = t
                fin[w] = fw = t + dur[w]
                # The tail path from w avoids every moved node: it is a path of the new schedule
                # (its nodes kept their devices and, chain edges holding transitively, their order).
                if fw + tail[w] >= cutoff and tail_free(w):
                    return Trial(self, moves, s_new, fw + tail[w], count, complete=False)
                for x in succs[w]:
                    if x not in queued:
                        queued.add(x)
                        push(heap, pos[x])
                x = next_o.get(w, -2)
                if x == -2:
                    x = next_l[w]
                if x >= 0 and x not in queued:
                    queued.add(x)
                    push(heap, pos[x])
            if w in t_lb and t + dur[w] + t_lb[w] >= cutoff:  # a moved node: its new start is exact here
                return Trial(self, moves, s_new, t + dur[w] + t_lb[w], count, complete=False)
        makespan = max((fin[v] for v in s_new), default=0.0)
        for v in self._by_finish:  # the latest finish among unchanged nodes
            if v not in s_new:
                makespan = max(makespan, fin[v])
                break
        return Trial(self, moves, s_new, makespan, count)

    def _try_compiled(self, fast, moves: dict[int, int], mv: np.ndarray, md: np.ndarray, cutoff: float) -> Trial:
        """:meth:`try_move` compiled (placement.kernels.move_trial: the same overlay, bound and cone,
        step for step, on flat arrays): the move is written into working copies of the base arrays
        for the call and taken out again by it."""
        n = self.problem.n
        if self._scratch is None:
            at, pos, prev = self._arrays
            self._scratch = (self.placement.astype(np.int64), prev.copy(), self._next_a.copy(), self.finish.copy())
            self._base = (at, pos, self._scratch[0].copy(), self.start, self.finish, self._time, *self._csr, prev,
                          self._next_a, self._seq_a, self._seq_lo, self._tail_a, self._by_finish_a)
        if self._flags is None:
            b = np.zeros(n, dtype=np.bool_)
            self._flags = (b, np.zeros(n), b.copy(), np.zeros(n), b.copy(), b.copy(), b.copy(), b.copy())
        moved, t_lb, has_tlb, lbv, has_lb, queued, changed, mark = self._flags
        dev, prev_c, next_c, fin = self._scratch
        if self._bounds_ready:
            bounds = (self._head_tin, self._head_end, self._tail_tin, self._tail_end, *self._witness_a, self._before,
                      self._after, self._avoid, self._last, self.makespan)
        else:
            none = np.zeros(n, dtype=np.int64)
            bounds = (none, none, none, none, none[:0], np.zeros(0), np.zeros(n + 1), np.zeros(n + 1), np.zeros(n),
                      -1, 0.0)
        kind, value, count, nodes, starts = fast.move_trial.kernel(
            mv, md, float(cutoff), int(cutoff != float("inf")), int(self._bounds_ready),
            BOUND_VISITS[0] * len(moves) + BOUND_VISITS[1],
            *self._base, *bounds, dev, prev_c, next_c, moved, t_lb, has_tlb, lbv, has_lb, fin, queued, changed, mark)
        if kind == 1:
            return Trial(self, moves, {}, value, count, complete=False)
        return Trial(self, moves, (nodes, starts), value, count, complete=kind == 0)

    def _drop(self, m: int, dm: int, start_lb: float, moves: dict[int, int], prev_of, lb: dict[int, float],
              drop: float, base_next: list[int]) -> float:
        """How much earlier than in the base a constraint leaving moved node ``m`` can let a node
        start, given ``start_lb`` (a lower bound of m's new start) and ``drop`` (the same for the
        moved nodes before m, in position order).

        Why it bounds the new starts (docs/scale.md, "Moves of nodes far apart"): in position
        order, an unmoved node w's old start is fixed by one constraint from an earlier node y.
        If y is unmoved, that constraint still holds (with the same transfer; a chain edge holds
        through any node inserted between) and y starts at least its old start minus the drops of
        the moved nodes before it. If y is a moved node m, the constraint m -> w becomes
        ``finish'(m) + transfer'`` (a graph edge) or, for m's old device successor, the finish of
        w's new device predecessor: this method's value bounds how much less that is. By
        induction, w starts at least at its old start minus the drops of the moved nodes before it."""
        pl, f, dur = self._pl, self._f, self._dur
        old_f, new_f = f[m], start_lb + dur[m]
        worst = 0.0
        for x, c in zip(self._succs[m], self._succ_comm[m]):
            if x in moves:
                continue  # a moved successor's bound is computed from lb[m] itself
            dx = pl[x]
            gone = old_f + (c if dx != pl[m] else 0.0) - new_f - (c if dx != dm else 0.0)
            if gone > worst:
                worst = gone
        q = base_next[m]
        if q >= 0 and q not in moves:
            y = prev_of(q)  # q's new device predecessor: m's old one (unmoved, before m) or a moved node
            if y < 0:
                got = 0.0
            elif y in lb:
                got = lb[y] + dur[y]
            elif y in moves:
                got = dur[y]
            else:
                got = max(dur[y], f[y] - drop)
            if old_f - got > worst:
                worst = old_f - got
        return worst

    def _bound(self, moves: dict[int, int], in_order: list[int], prev_of, next_of, bridged: list[int],
               tail_free: _Avoids, cutoff: float) -> tuple[float, int, dict[int, float]]:
        """A lower bound of the makespan after ``moves``, computed on the nodes the move pushes
        later only; returns (bound, nodes visited, the lower bounds of the moved nodes' new tails),
        stopping once the bound reaches ``cutoff``.

        Every path of the new schedule's constraints (graph edges with the new transfers, the new
        device chains) bounds its makespan from below. An unmoved node whose head path (the
        inputs or chain predecessors that fixed the starts back to 0, :meth:`_heads`) avoids every
        moved node starts no earlier than before: that path is still a path of the new schedule
        (its nodes keep devices, transfers and, chain edges holding transitively, their order).
        Likewise a tail path avoiding every moved node still follows an unmoved node's finish.
        From these, lower bounds of new starts are propagated forward, in position order, from
        the moved nodes through the nodes they push later than before (a node whose bound does
        not exceed its old start passes nothing on: its successors keep their own base bounds);
        a pushed node's bound plus its tail, a moved node's bound plus a lower bound of its new
        tail (over its successors and new chain successor, moved ones first, backward), the base
        path of the last node and the chain links an unlink bridges all bound the makespan.

        Unlike the exact cone, this never visits the nodes a move lets start earlier, which are
        most of a rejected move's cone. For a single moved node every neighbour qualifies (inputs
        and the new chain predecessor come before it, successors after), so the bound through it
        is exact: such a move is rejected at once whenever the longest path through it reaches
        the cutoff."""
        pl, dur, f, s, tail = self._pl, self._dur, self._f, self._s, self._tail
        lists = self._lists()
        head_free = _Avoids(moves, lists["_head_tin"], lists["_head_end"])
        best = self.makespan if head_free(self._last) else 0.0
        if best < cutoff:  # a longest path of the base that the move leaves in place
            for w, length in self._witness:
                if length >= cutoff and w not in moves and head_free(w) and tail_free(w):
                    return length, 0, {}
        # Paths before the first or after the last moved node in position order, or for one moved
        # node any path avoiding it (one that used the chain link it now sits in only got longer).
        first, last = self._pos[in_order[0]], self._pos[in_order[-1]]
        best = max(best, lists["_before"][first], lists["_after"][last + 1])
        if len(in_order) == 1:
            best = max(best, lists["_avoid"][in_order[0]])
        for b in bridged:
            a = prev_of(b)
            if a >= 0 and a not in moves and head_free(a) and tail_free(b):
                best = max(best, f[a] + dur[b] + tail[b])
        t_lb: dict[int, float] = {}
        if best >= cutoff:
            return best, 0, t_lb
        succs, comm = self._succs, self._succ_comm
        for m in reversed(in_order):
            dm = moves[m]
            t = 0.0
            x = next_of(m)
            if x >= 0:
                t = dur[x] + (t_lb[x] if x in moves else (tail[x] if tail_free(x) else 0.0))
            for x, c in zip(succs[m], comm[m]):
                if x in moves:
                    b = dur[x] + t_lb[x]
                    dx = moves[x]
                else:
                    b = dur[x] + (tail[x] if tail_free(x) else 0.0)
                    dx = pl[x]
                if dx != dm:
                    b += c
                if b > t:
                    t = b
            t_lb[m] = t
        preds, pos, at, base_next = self._preds, self._pos, self._at, self._next
        if len(in_order) > 1:
            # First the paths through each moved node alone, in position order, from its inputs'
            # and device predecessor's base bounds (their old times, less the drops of the moved
            # nodes before): a move of nodes far apart is often proved here, before the forward
            # pass below spends its budget on the nodes the first one pushes.
            lb: dict[int, float] = {}
            drop = 0.0
            last = in_order[-1]
            for m in in_order:
                dm = moves[m]
                u = prev_of(m)  # the new device predecessor: no transfer
                if u < 0:
                    t = 0.0
                elif u in moves:
                    t = lb[u] + dur[u] if u in lb else dur[u]
                elif drop == 0.0 or head_free(u):  # no drop yet: every unmoved node starts no earlier
                    t = f[u]
                else:
                    t = max(dur[u], f[u] - drop)
                for u, c in preds[m]:
                    du = moves.get(u)
                    if du is not None:
                        a = lb[u] + dur[u] if u in lb else dur[u]
                        if du != dm:
                            a += c
                    else:
                        a = f[u] if drop == 0.0 or head_free(u) else max(dur[u], f[u] - drop)
                        if pl[u] != dm:
                            a += c
                    if a > t:
                        t = a
                lb[m] = t
                if t + dur[m] + t_lb[m] > best:
                    best = t + dur[m] + t_lb[m]
                    if best >= cutoff:
                        return best, 0, t_lb
                if m != last:
                    drop += self._drop(m, dm, t, moves, prev_of, lb, drop, base_next)
        lb = {}  # node -> lower bound of its new start (moved or pushed nodes)
        heap = [pos[m] for m in in_order]  # already in position order: a heap
        queued = set(moves)
        pop, push = heapq.heappop, heapq.heappush
        count = 0
        # drop: how much earlier than before any node after the moved nodes seen so far can start
        # (the sum of their drops; see _drop). An unmoved node whose head path meets a moved node
        # starts at least at its old start minus that.
        drop = 0.0
        budget = BOUND_VISITS[0] * len(moves) + BOUND_VISITS[1]  # past this, the exact cone: the bound is not going to prove it
        while heap and count < budget:
            w = at[pop(heap)]
            count += 1
            dw = moves.get(w)
            moved = dw is not None
            if moved:
                t = 0.0
            else:
                dw = pl[w]
                t = s[w] if head_free(w) else s[w] - drop
            u = prev_of(w)
            if u >= 0:
                if u in lb:
                    a = lb[u] + dur[u]
                elif u in moves:
                    a = dur[u]
                else:
                    a = f[u] if head_free(u) else max(dur[u], f[u] - drop)
                if a > t:
                    t = a
            for u, c in preds[w]:
                du = moves.get(u)
                if u in lb:
                    a = lb[u] + dur[u]
                elif du is not None:
                    a = dur[u]
                else:
                    a = f[u] if head_free(u) else max(dur[u], f[u] - drop)
                if (pl[u] if du is None else du) != dw:
                    a += c
                if a > t:
                    t = a
            if moved:
                through = t + dur[w] + t_lb[w]
                lb[w] = t
                drop += self._drop(w, dw, t, moves, prev_of, lb, drop, base_next)
            elif t > s[w]:
                through = t + dur[w] + tail[w] if tail_free(w) else 0.0
                lb[w] = t
            else:
                continue
            if through > best:
                best = through
                if best >= cutoff:
                    return best, count, t_lb
            for x in succs[w]:
                if x not in queued:
                    queued.add(x)
                    push(heap, pos[x])
            x = next_of(w)
            if x >= 0 and x not in queued:
                queued.add(x)
                push(heap, pos[x])
        return best, count, t_lb
