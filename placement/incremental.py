"""Incremental re-timing of a schedule with fixed per-device orders, after nodes change device.

Why: local search (solvers/refine.py) judges each move by the evaluator; on a 40K-node graph one
full evaluation costs tens of milliseconds, so refine tried a few moves per second. A move of one
node or a block changes the start of only the nodes downstream of it whose start was decided by
the changed path: this module recomputes only that cone.

What it computes, exactly: for a reference schedule ``ref`` (start times valid for placement
``pl``), the evaluator's ordered schedule (placement.evaluator.evaluate with ``order``) of the new
placement ``pl'`` with the order ``order_of(pl', ref)``: each device runs its nodes by (ref start,
topological rank), moved nodes slotting in where their reference start puts them. This is what
refine's ordered mode evaluates; the result is equal to the full evaluator bit for bit (same
maxima of the same sums), which the tests check on random moves.

How: sorting all nodes by (ref start, rank) is a topological order of the graph plus the device
chains of *any* placement ordered this way (a DAG edge u -> v has ref_start[v] >= ref_finish[u],
and ties are broken by the topological rank), so the changed nodes can be re-timed in that order
with a heap: a node is recomputed (its earliest start: the latest input arrival and the finish of
its predecessor in its device's chain) only when one of its inputs, its chain predecessor or its
own device changed, and it passes the change on only if its start moved. The device chains after
the move are an overlay of a few changed links on the doubly linked chains of the reference.

Memory (static and peak) is measured by the evaluator's own functions on the materialised
schedule, only when asked (:meth:`Trial.evaluation`): a search rejecting a move by its makespan
never pays for it.
"""
from __future__ import annotations

import heapq
from bisect import bisect_left
from dataclasses import dataclass

import numpy as np

from .evaluator import Evaluation, as_placement, edge_delay, evaluate, peak_memory, static_memory
from .problem import Problem


def device_order(problem: Problem, placement: np.ndarray, ref_start: np.ndarray) -> list[list[int]]:
    """Per-device node order by (reference start, topological rank): the order the incremental
    schedule keeps (the same as solvers.refine.order_of)."""
    seq = np.lexsort((problem.topo_rank, ref_start, placement))
    bounds = np.searchsorted(placement[seq], np.arange(problem.k + 1))
    return [seq[bounds[d]:bounds[d + 1]].tolist() for d in range(problem.k)]


def _is_fixpoint(problem: Problem, placement: np.ndarray, start: np.ndarray, order: list[list[int]]) -> bool:
    """Is ``start`` already the earliest schedule of ``order`` (every start the latest of its input
    arrivals and its device predecessor's finish, or 0)? Then re-timing it would change nothing:
    the recurrence has one solution on a DAG. (After an accepted move, the common case.)"""
    finish = start + problem.time
    need = np.zeros(problem.n)
    arrive = finish[problem.src] + edge_delay(problem, placement)
    np.maximum.at(need, problem.dst, arrive)
    for seq in order:
        if len(seq) > 1:
            a = np.asarray(seq, dtype=np.int64)
            need[a[1:]] = np.maximum(need[a[1:]], finish[a[:-1]])
    return bool(np.array_equal(need, start))


@dataclass
class Trial:
    """The schedule after a move, as changes over the base schedule it was tried on."""

    base: "IncrementalSchedule"
    moves: dict[int, int]  # node -> new device
    start: dict[int, float]  # nodes whose start changed -> new start
    makespan: float  # when not complete: a lower bound of it, at least the cutoff
    recomputed: int  # nodes re-timed (the size of the cone)
    complete: bool = True  # False: stopped once the makespan was proved at least the cutoff

    def placement(self) -> np.ndarray:
        pl = self.base.placement.copy()
        if self.moves:
            nodes = np.fromiter(self.moves.keys(), dtype=np.int64, count=len(self.moves))
            pl[nodes] = np.fromiter(self.moves.values(), dtype=np.int64, count=len(self.moves))
        return pl

    def times(self) -> tuple[np.ndarray, np.ndarray]:
        start = self.base.start.copy()
        if self.start:
            nodes = np.fromiter(self.start.keys(), dtype=np.int64, count=len(self.start))
            start[nodes] = np.fromiter(self.start.values(), dtype=float, count=len(self.start))
        return start, start + self.base.problem.time

    def evaluation(self, memory_model: str = "static") -> Evaluation:
        """The full evaluation of the moved placement under this schedule (memory measured here)."""
        if not self.complete:
            raise ValueError("a trial stopped at its cutoff has no complete schedule")
        p = self.base.problem
        pl = self.placement()
        start, finish = self.times()
        return Evaluation(placement=pl, start=start, finish=finish, makespan=self.makespan,
                          static_memory=static_memory(p, pl), peak_memory=peak_memory(p, pl, start, finish),
                          memory_model=memory_model)


class IncrementalSchedule:
    """A placement with a reference schedule; :meth:`try_move` re-times the affected cone only.

    Build it from a placement and the start times of a valid schedule of it (e.g. the evaluator's
    FIFO or ordered schedule); :meth:`commit` a trial to make it the new base (its start times
    become the new reference, as refine does when it accepts a move)."""

    def __init__(self, problem: Problem, placement: np.ndarray, ref_start: np.ndarray) -> None:
        self.problem = problem
        p = problem
        ptr, nbr, eid = p.pred_ptr
        comm = p.comm[eid]
        ptr_l, nbr_l, comm_l = ptr.tolist(), nbr.tolist(), comm.tolist()
        self._preds = [list(zip(nbr_l[ptr_l[v]:ptr_l[v + 1]], comm_l[ptr_l[v]:ptr_l[v + 1]])) for v in range(p.n)]
        sptr, snbr, seid = p.succ_ptr
        sptr_l, snbr_l = sptr.tolist(), snbr.tolist()
        self._succs = [snbr_l[sptr_l[v]:sptr_l[v + 1]] for v in range(p.n)]
        scomm_l = p.comm[seid].tolist()
        self._succ_comm = [scomm_l[sptr_l[v]:sptr_l[v + 1]] for v in range(p.n)]
        self._dur = p.time.tolist()
        self._rank = p.topo_rank.tolist()
        self.reset(placement, ref_start)

    def reset(self, placement: np.ndarray, ref_start: np.ndarray) -> None:
        """Make (placement, the ordered schedule by ``ref_start``) the base."""
        p = self.problem
        pl = as_placement(p, placement)
        ref = np.asarray(ref_start, dtype=float)
        order = device_order(p, pl, ref)
        start = ref if _is_fixpoint(p, pl, ref, order) else evaluate(p, pl, order=order).start
        finish = start + p.time
        self.placement, self.start, self.finish = pl, start, finish
        self.makespan = float(finish.max()) if p.n else 0.0
        self._pl = pl.tolist()
        self._ref = ref.tolist()
        self._s = start.tolist()
        self._f = finish.tolist()
        n = p.n
        prev, nxt = [-1] * n, [-1] * n
        self._seq: list[list[int]] = order
        self._keys: list[list[tuple[float, int]]] = []
        for seq in order:
            for a, b in zip(seq, seq[1:]):
                nxt[a], prev[b] = b, a
            self._keys.append([(self._ref[v], self._rank[v]) for v in seq])
        self._prev, self._next = prev, nxt
        self._by_finish = np.argsort(-finish, kind="stable").tolist() if n else []
        self._tails(order)

    def _tails(self, order: list[list[int]]) -> None:
        """``tail[v]``: the longest path from v's finish to the end of the base schedule (over graph
        edges with their transfer times and device-chain edges), and ``tail_next[v]`` the node it
        goes through (-1 at the end): the cutoff in :meth:`try_move` is proved along it."""
        n = self.problem.n
        pl, dur, succs, nxt = self._pl, self._dur, self._succs, self._next
        comm = self._succ_comm
        tail = [0.0] * n
        tail_next = [-1] * n
        seq = np.lexsort((self.problem.topo_rank, np.asarray(self._ref))).tolist()
        for v in reversed(seq):
            best, arg = 0.0, -1
            x = nxt[v]
            if x >= 0:
                best, arg = dur[x] + tail[x], x
            dv = pl[v]
            for x, c in zip(succs[v], comm[v]):
                t = dur[x] + tail[x] + (c if pl[x] != dv else 0.0)
                if t > best:
                    best, arg = t, x
            tail[v], tail_next[v] = best, arg
        self._tail, self._tail_next = tail, tail_next

    @property
    def order(self) -> list[list[int]]:
        """Each device's nodes in the base schedule's order."""
        return self._seq

    @property
    def tail(self) -> np.ndarray:
        """Per node: the longest path from its finish to the end of the base schedule (graph edges
        with their transfer times on this placement, and device-chain edges)."""
        return np.asarray(self._tail)

    def commit(self, trial: Trial) -> None:
        """Make the trial's schedule the base, its start times the reference."""
        start, _ = trial.times()
        self.reset(trial.placement(), start)

    def try_move(self, moves: dict[int, int], cutoff: float = float("inf")) -> Trial:
        """Re-time the schedule after the nodes of ``moves`` (node -> device) change device.

        With a ``cutoff``, stop as soon as the new makespan is proved at least ``cutoff`` (a node's
        new finish plus the base tail from it through nodes that did not move; those constraints
        all hold in the new schedule): the trial is then not ``complete``."""
        pl, ref, rank = self._pl, self._ref, self._rank
        moves = {v: d for v, d in moves.items() if pl[v] != d}
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
        # Link them into their new chains by (ref start, rank), in increasing order of that key.
        last: dict[int, tuple[int, int]] = {}  # device -> (last inserted node, its left anchor)
        for v in sorted(moves, key=lambda x: (ref[x], rank[x])):
            d = moves[v]
            keys, seq = self._keys[d], self._seq[d]
            j = bisect_left(keys, (ref[v], rank[v])) - 1
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
        # Re-time the cone in (ref start, rank) order.
        dev = moves.get
        s_new: dict[int, float] = {}
        f_new: dict[int, float] = {}
        base_s, base_f, dur, preds, succs = self._s, self._f, self._dur, self._preds, self._succs
        heap = [(ref[v], rank[v], v) for v in seeds]
        heapq.heapify(heap)
        queued = set(seeds)
        pop, push = heapq.heappop, heapq.heappush
        count = 0
        tail, tail_next = self._tail, self._tail_next
        blocked: set[int] = set()  # nodes whose base tail path meets a moved node
        while heap:
            w = pop(heap)[2]
            count += 1
            dw = dev(w, pl[w])
            p = prev_of(w)
            t = 0.0 if p < 0 else f_new.get(p, base_f[p])
            for u, c in preds[w]:
                a = f_new.get(u, base_f[u])
                if dev(u, pl[u]) != dw:
                    a += c
                if a > t:
                    t = a
            if t != base_s[w]:
                s_new[w] = t
                f_new[w] = fw = t + dur[w]
                if fw + tail[w] >= cutoff:
                    path = []
                    x = w
                    while x >= 0 and x not in moves and x not in blocked:
                        path.append(x)
                        x = tail_next[x]
                    if x < 0:  # the tail path avoids every moved node: it is a path of the new schedule
                        return Trial(self, moves, s_new, fw + tail[w], count, complete=False)
                    blocked.update(path)  # their tail paths meet a moved node: never walk them again
                for x in succs[w]:
                    if x not in queued:
                        queued.add(x)
                        push(heap, (ref[x], rank[x], x))
                x = next_of(w)
                if x >= 0 and x not in queued:
                    queued.add(x)
                    push(heap, (ref[x], rank[x], x))
        makespan = max(f_new.values()) if f_new else 0.0
        for v in self._by_finish:  # the latest finish among unchanged nodes
            if v not in f_new:
                makespan = max(makespan, base_f[v])
                break
        return Trial(self, moves, s_new, makespan, count)
