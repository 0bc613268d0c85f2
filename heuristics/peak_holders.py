"""Who holds a device's peak bytes, and what moving them costs: shared by the memory repairs
(heuristics/memory_repair.py) and the peak descent (heuristics/peak_descent.py).

A tensor's buffer lives on the devices of its consumers (docs/model.md), so at a device's peak
moment its bytes belong to the nodes there that still have to read them (or to the producer while
it runs): those are the nodes whose moving can lower that peak.
"""
from __future__ import annotations

import numpy as np

from placement.evaluator import Evaluation
from placement.problem import Problem


class Mover:
    """Neighbour lists and colocation groups: which nodes move together and what a move costs."""

    def __init__(self, problem: Problem) -> None:
        self.p = problem
        sp, sn, se = problem.succ_ptr
        pp, pn, pe = problem.pred_ptr
        self.sp, self.sn, self.se = sp, sn, se
        self.pp, self.pn, self.pe = pp, pn, pe
        self.groups = problem.groups
        self.allowed = problem.allowed
        self.restricted = problem.has_allowed

    def unit(self, v: int) -> np.ndarray:
        g = int(self.p.colocate[v])
        return self.groups[g] if g >= 0 else np.array([v], dtype=np.int64)

    def can_go(self, unit: np.ndarray, e: int) -> bool:
        return not self.restricted or all(self.allowed[int(v)] is None or e in self.allowed[int(v)] for v in unit)

    def comm_delta(self, unit: np.ndarray, pl: np.ndarray, e: int) -> float:
        """Transfer time added (positive) or saved by moving ``unit`` to device e (edges inside the
        unit excluded)."""
        p = self.p
        inside = set(unit.tolist())
        delta = 0.0
        for v in unit.tolist():
            d = int(pl[v])
            for lo, hi, nbr, eid in ((self.sp[v], self.sp[v + 1], self.sn, self.se), (self.pp[v], self.pp[v + 1], self.pn, self.pe)):
                for j in range(lo, hi):
                    w = int(nbr[j])
                    if w in inside:
                        continue
                    dw = int(pl[w])
                    c = float(p.comm[eid[j]])
                    delta += (dw != e) * c - (dw != d) * c
        return delta


def peak_holders(mover: Mover, pl: np.ndarray, ev: Evaluation, buf, t: float, d: int) -> dict[int, float]:
    """Nodes on device d holding bytes there at time t (its peak moment), with the bytes each would
    free: a buffer alive then is credited to its consumers on d finishing after t (shared equally),
    or to its producer when the buffer is the producer's own output while it runs."""
    gain: dict[int, float] = {}
    alive = np.flatnonzero((buf.device == d) & (buf.t0 <= t) & (buf.t1 > t))
    sp, sn = mover.sp, mover.sn
    for i in alive.tolist():
        u, size = int(buf.node[i]), float(buf.size[i])
        if int(buf.last[i]) < 0:
            late = [u]
        else:
            late = [int(w) for w in sn[sp[u]:sp[u + 1]] if pl[w] == d and ev.finish[w] > t]
        for w in late:
            gain[w] = gain.get(w, 0.0) + size / len(late)
    return gain


def device_orders(pl: np.ndarray, sequence: np.ndarray | None, k: int, lists: bool = True) -> list | None:
    """Each device's nodes in the order of ``sequence`` (a topological order of all nodes), or None
    (FIFO) without one; as index arrays with ``lists`` False (for an evaluation only: the
    evaluator reads them without converting, a third of a trial's time on a 2K-node graph)."""
    if sequence is None:
        return None
    d = pl[sequence]
    return [sequence[d == x].tolist() if lists else sequence[d == x] for x in range(k)]
