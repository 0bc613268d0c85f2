"""Memory-aware ordering: for a fixed placement, a per-device order whose peak memory is lower.

Why: under the peak model a placement's memory depends on the order each device runs its nodes.
The runtime's FIFO executor (the evaluator's default) starts whatever became ready first, which on
a training graph can start many forward nodes before the backward nodes that free their
activations. A user can enforce any order with control dependencies, so a placement that fits in
some order is a usable answer, as long as the report gives that order.

How: memory-aware list scheduling (the greedy of the minimum-memory topological order literature,
e.g. Liu's and Sethi's, made capacity-aware): simulate the executor in time order; whenever a device
can start a node, its candidates are the nodes whose inputs have arrived by then. Mode "fit" starts
the candidate FIFO would start if the device's live bytes (heuristics.peak_tracker, the evaluator's
buffers) stay within capacity, else the candidate giving the lowest peak; mode "min" always starts
the candidate giving the lowest peak (ties: the one freeing most, then FIFO). The peak is estimated
with heuristics.peak_tracker plus the tensors each device is committed to hold (produced, with a
consumer there not yet started), which the tracker alone would charge only once that consumer
runs. Mode "net" starts the candidate adding the fewest bytes net of what it frees, counting the
best consumer it makes ready (ties: one that makes a consumer ready): a gradient accumulated along a
chain (an unrolled RNN's weight gradients, all ready at once) is then summed as it is made instead
of piling up (on the 10K-node LSTM, one device: 3.46 GB against 15.0 GB in FIFO order and a 3.32 GB
lower bound). Every answer's memory is then the evaluator's on the order built. :func:`lower_peak_order`
returns the best of FIFO, "fit", "min" and "net": feasible first, then the smaller makespan, else
the smaller overflow.
"""
from __future__ import annotations

import heapq
from dataclasses import dataclass
from typing import Callable

import numpy as np

from placement.evaluator import Evaluation, edge_delay, evaluate
from placement.problem import Problem

from placement.light_order import net_sequence  # noqa: F401 - rule "net" on one device, re-exported here

from .peak_tracker import PeakTracker

CANDIDATES = 32  # at most this many ready nodes (in FIFO order) are weighed per start
STOP_EVERY = 512  # starts between two checks of a ``stop`` callback (about 0.05 s at 200K nodes)
NET_CANDIDATES = 256  # rule "net" looks further: the node that frees memory may be far down the queue


@dataclass
class Ordered:
    """A per-device order for a placement, what the evaluator measures on it, and which rule made
    it ("fifo", "fit", "min" or "net"); ``fifo_fits``: does the placement fit in FIFO order too?"""

    order: list[list[int]] | None
    evaluation: Evaluation
    rule: str
    fifo_fits: bool
    cut: bool = False  # ``stop`` turned true before every rule was tried


class CommittedBytes:
    """The tracker plus the tensors a device is committed to hold: produced, with a consumer on
    the device not yet started. The tracker alone extends a buffer only when its consumer is
    placed, so it would let a device start a node while an activation it must keep is not yet
    charged; here such buffers are charged up to the current time before each decision.

    Per device: ``old`` tensors, all charged up to ``done[d]`` (one range add covers them all),
    and ``fresh`` ones whose buffer has not reached ``done[d]`` yet (charged one by one)."""

    def __init__(self, problem: Problem, placement: list[int], cap: np.ndarray) -> None:
        self.p, self.dev, self.k = problem, placement, problem.k
        self.tr = PeakTracker(problem, cap)
        self.left: dict[int, int] = {}  # u * k + d -> consumers of u on d not started
        sp, sn, _ = problem.succ_ptr
        pp, pn, _ = problem.pred_ptr
        self.succ = [sn[sp[v]:sp[v + 1]].tolist() for v in range(problem.n)]
        self.ins = [set(pn[pp[v]:pp[v + 1]].tolist()) for v in range(problem.n)]
        for u in range(problem.n):
            for w in self.succ[u]:
                key = u * self.k + placement[w]
                self.left[key] = self.left.get(key, 0) + 1
        self.old_bytes = [0.0] * problem.k
        self.old: list[set[int]] = [set() for _ in range(problem.k)]
        self.fresh: list[set[int]] = [set() for _ in range(problem.k)]
        self.fresh_bytes = [0.0] * problem.k
        self.done = [0.0] * problem.k
        self.out = problem.out_bytes.tolist()

    def _end(self, u: int, d: int) -> float:
        return self.tr.end.get(u * self.k + d, float(self.tr.finish[u]))

    def charge(self, d: int, t: float) -> None:
        """Charge device d's committed buffers up to time t."""
        tr, k = self.tr, self.k
        if t > self.done[d] and self.old_bytes[d] > 0:
            tr.top[d] = max(tr.top[d], tr.prof[d].add(self.done[d], t, self.old_bytes[d]))
        for u in list(self.fresh[d]):
            e = self._end(u, d)
            if e <= t:
                tr.top[d] = max(tr.top[d], tr.prof[d].add(e, t, self.out[u]))
                self.fresh[d].discard(u)
                self.fresh_bytes[d] -= self.out[u]
                self.old[d].add(u)
                self.old_bytes[d] += self.out[u]
        self.done[d] = max(self.done[d], t)

    def estimate(self, v: int, d: int, s: float, f: float) -> float:
        """Device d's peak if v ran over [s, f): the tracker's, and at least every committed buffer
        plus v's output while v runs."""
        held = self.old_bytes[d] + self.fresh_bytes[d]
        run = self.tr.params[d] + self.tr._param_cost(v) + held + (self.out[v] if f > s else 0.0)
        return max(self.tr.peak_if(v, d, s, f), run)

    def freed(self, v: int, d: int) -> float:
        """Bytes v releases on d: inputs whose last consumer there is v."""
        return sum(self.out[u] for u in self.ins[v] if self.left.get(u * self.k + d) == 1)

    def net(self, v: int, d: int, missing: list[int]) -> tuple[float, int]:
        """Bytes v adds on d net of what it frees, plus the best (most negative) net of a consumer
        w on d that v would make ready (``missing[w]`` inputs not done, v being the last), so a
        node whose output is consumed and freed at once is not taken for a growing one."""
        k, out = self.k, self.out
        gain = out[v] - self.freed(v, d)
        follow, enables = 0.0, 0
        for w in self.succ[v]:
            if self.dev[w] != d or missing[w] != 1:
                continue
            enables = -1
            freed = sum(out[u] for u in self.ins[w] if self.left.get(u * k + d) == 1 or (u == v and self.left.get(v * k + d) == 1))
            follow = min(follow, out[w] - freed)
        return gain + follow, enables

    def place(self, v: int, d: int, s: float, f: float) -> None:
        k = self.k
        for u in self.ins[v]:
            if u in self.old[d]:  # charged up to done[d] by the range add, not in the tracker's end
                self.tr.end[u * k + d] = max(self._end(u, d), self.done[d])
        self.tr.place(v, d, s, f)
        for u in self.ins[v]:
            key = u * k + d
            self.left[key] -= 1
            if self.left[key] == 0:
                if u in self.old[d]:
                    self.old[d].discard(u)
                    self.old_bytes[d] -= self.out[u]
                elif u in self.fresh[d]:
                    self.fresh[d].discard(u)
                    self.fresh_bytes[d] -= self.out[u]
        if self.out[v] > 0:
            for dd in {self.dev[w] for w in self.succ[v]}:
                self.fresh[dd].add(v)
                self.fresh_bytes[dd] += self.out[v]


def list_state(problem: Problem, delay: np.ndarray) -> tuple[list[int], list[int], list[float], list[int], list[int], list[float]]:
    """What a list simulation walks, as Python lists (faster per item than numpy in its loop):
    successor offsets and ids, each successor edge's delay (``delay`` per edge, e.g. edge_delay on a
    placement), in-degrees, topological ranks and node times. memory_aware_order and
    heuristics.layer_bands.priority_order share it."""
    ptr, nbr, eid = problem.succ_ptr
    return (ptr.tolist(), nbr.tolist(), delay[eid].tolist(), np.bincount(problem.dst, minlength=problem.n).tolist(),
            problem.topo_rank.tolist(), problem.time.tolist())


def memory_aware_order(problem: Problem, placement: np.ndarray, capacity: np.ndarray | None = None,
                       mode: str = "fit", candidates: int | None = None,
                       stop: Callable[[], bool] | None = None) -> list[list[int]] | None:
    """Per-device order by memory-aware list scheduling (module docstring); ``capacity`` defaults
    to the problem's; ``candidates``: ready nodes weighed per start (default CANDIDATES, or
    NET_CANDIDATES for rule "net"). None when ``stop()`` turns true (checked every STOP_EVERY
    starts): at 200K nodes one rule takes tens of seconds."""
    n, k = problem.n, problem.k
    cap = problem.memory if capacity is None else np.asarray(capacity, dtype=float)
    pl = np.asarray(placement, dtype=np.int64)
    dev = pl.tolist()
    book = CommittedBytes(problem, dev, cap)
    limit = candidates if candidates is not None else NET_CANDIDATES if mode == "net" else CANDIDATES
    capacity_ok = book.tr.cap * (1 + 1e-12) + 1e-9
    ptr_l, nbr_l, delay_e, indeg, rank, dur = list_state(problem, edge_delay(problem, pl))
    ready = [0.0] * n
    queues: list[list[tuple[float, int, int]]] = [[] for _ in range(k)]  # (ready, rank, v)
    free = [0.0] * k
    order: list[list[int]] = [[] for _ in range(k)]
    for v in range(n):
        if indeg[v] == 0:
            heapq.heappush(queues[dev[v]], (0.0, rank[v], v))
    done = 0
    while done < n:
        if stop is not None and done % STOP_EVERY == 0 and stop():
            return None
        t, d = min(((max(free[x], queues[x][0][0]), x) for x in range(k) if queues[x]), default=(0.0, -1))
        if d < 0:
            raise ValueError("memory_aware_order: the graph is not a DAG")
        q = queues[d]
        cands = []
        while q and q[0][0] <= t and len(cands) < limit:
            cands.append(heapq.heappop(q))
        book.charge(d, t)
        first = cands[0][2]
        if mode == "fit" and book.estimate(first, d, t, t + dur[first]) <= capacity_ok[d]:
            pick = 0
        elif mode == "net":
            pick = min((*book.net(c[2], d, indeg), i) for i, c in enumerate(cands))[2]
        else:
            keys = [(book.estimate(c[2], d, t, t + dur[c[2]]), -book.freed(c[2], d), i) for i, c in enumerate(cands)]
            pick = min(keys)[2]
        for i, c in enumerate(cands):
            if i != pick:
                heapq.heappush(q, c)
        v = cands[pick][2]
        f = t + dur[v]
        book.place(v, d, t, f)
        free[d] = f
        order[d].append(v)
        done += 1
        for j in range(ptr_l[v], ptr_l[v + 1]):
            w = nbr_l[j]
            arrive = f + delay_e[j]
            if arrive > ready[w]:
                ready[w] = arrive
            indeg[w] -= 1
            if indeg[w] == 0:
                heapq.heappush(queues[dev[w]], (ready[w], rank[w], w))
    return order


def _key(problem: Problem, ev: Evaluation) -> tuple[int, float]:
    over = float(ev.overflow(problem).sum())
    return (0, ev.makespan) if over <= 0 else (1, over)


def no_order_fits(problem: Problem, placement: np.ndarray) -> bool:
    """True when some device overflows in every order: in the peak model a device always holds its
    nodes' params, and while one of its nodes runs, that node's output and inputs too
    (docs/peak.md, "working set"); and a device holding every node needs at least the memory lower
    bound of one device (placement.memory_bounds). Checking it first spares the simulations of the
    memory-aware rules on hopeless placements (all nodes on one device, typically: 10 s on a
    10K-node graph; on the 200K-node LSTM at 1.3 x its bound for K = 4 the working sets fit one
    device, and the three rules took minutes)."""
    from placement.memory_bounds import memory_lower_bound, working_sets

    k = problem.k
    params = np.bincount(placement, weights=problem.param_bytes, minlength=k)
    ws = np.zeros(k)
    np.maximum.at(ws, placement, working_sets(problem))
    if np.any(params + ws > problem.memory * (1 + 1e-12) + 1e-9):
        return True
    if problem.n > 0 and np.all(placement == placement[0]):
        d = int(placement[0])
        return memory_lower_bound(problem, "peak", 1)["best"] > problem.memory[d] * (1 + 1e-12) + 1e-9
    return False


def lower_peak_order(problem: Problem, placement: np.ndarray, fifo: Evaluation | None = None,
                     stop: Callable[[], bool] | None = None) -> Ordered:
    """The best of FIFO and the memory-aware orders for this placement under the peak model
    (``order`` None means FIFO is the best). Only runs the memory-aware rules when FIFO overflows.
    When ``stop()`` turns true the rules not finished are left out (``cut`` says so)."""
    pl = np.asarray(placement, dtype=np.int64)
    if fifo is None or fifo.memory_model != "peak":
        fifo = evaluate(problem, pl, memory_model="peak")
    fifo_fits = fifo.feasible(problem)
    best = Ordered(None, fifo, "fifo", fifo_fits)
    if fifo_fits or no_order_fits(problem, pl):
        return best
    for mode in ("fit", "min", "net"):
        order = memory_aware_order(problem, pl, mode=mode, stop=stop)
        if order is None:
            best.cut = True
            break
        ev = evaluate(problem, pl, order=order, memory_model="peak")
        if _key(problem, ev) < _key(problem, best.evaluation):
            best = Ordered(order, ev, mode, fifo_fits)
        if best.evaluation.feasible(problem):
            break
    return best

