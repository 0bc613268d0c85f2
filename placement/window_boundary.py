"""The boundary of a schedule window: what a search that re-places and re-sequences the nodes at
positions [lo, hi) of a schedule's (start, topological rank) order must respect, and the part of
the makespan it cannot change.

Why a module of its own: the exact window model (formulations/window_lns.py) and the list
re-scheduling of windows (heuristics/window_relist.py) judge a window's answer by the same
makespan: the nodes before the window keep their devices, order and times; the nodes after it keep
their devices and order and are re-timed, so a path into them lasts its transfer plus the
incumbent's longest path from the node it enters (its time plus its tail).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .incremental import IncrementalSchedule


@dataclass
class Boundary:
    """A window [lo, hi) of ``seq`` (the base's (start, rank) order) and its boundary.

    Edge indices are into the base's timing graph (the problem's edges, then the waits)."""

    win: np.ndarray  # the window's nodes, in seq order
    in_win: np.ndarray  # bool per node
    before: np.ndarray  # bool per node: fixed, times kept
    after: np.ndarray  # bool per node: devices and order kept, re-timed
    last_before: np.ndarray  # per device: its last node before the window (-1: none)
    first_after: np.ndarray  # per device: its first node after the window (-1: none)
    e_in: np.ndarray  # edges before -> window
    e_ww: np.ndarray  # edges inside the window
    e_out: np.ndarray  # edges window -> after
    const: float  # the makespan of the paths that never touch the window


def window_boundary(base: IncrementalSchedule, lo: int, hi: int, seq: np.ndarray,
                    where: np.ndarray | None = None) -> Boundary:
    """The boundary of positions [lo, hi) of ``seq`` in ``base`` (see the module doc); ``where``:
    each node's position in ``seq``, when the caller has it (a sweep of many windows)."""
    p = base.problem
    pl, finish, tail = base.placement, base.finish, base.tail
    n, k = p.n, p.k
    if where is None:
        where = np.empty(n, dtype=np.int64)
        where[seq] = np.arange(n)
    win = seq[lo:hi]
    in_win = np.zeros(n, dtype=bool)
    in_win[win] = True
    before = where < lo
    after = where >= hi
    last_before = np.full(k, -1, dtype=np.int64)
    first_after = np.full(k, -1, dtype=np.int64)
    for d, nodes in enumerate(base.order):
        nodes_a = np.asarray(nodes, dtype=np.int64)
        b = nodes_a[before[nodes_a]] if nodes_a.size else nodes_a
        a = nodes_a[after[nodes_a]] if nodes_a.size else nodes_a
        last_before[d] = b[-1] if b.size else -1
        first_after[d] = a[0] if a.size else -1
    tg = base.graph
    src, dst, comm = tg.src, tg.dst, tg.comm
    e_in = np.flatnonzero(in_win[dst] & before[src])
    e_ww = np.flatnonzero(in_win[src] & in_win[dst])
    e_out = np.flatnonzero(in_win[src] & after[dst])
    e_ba = np.flatnonzero(before[src] & after[dst])
    const = [float(finish[before].max(initial=0.0))]
    if e_ba.size:
        s, d_ = src[e_ba], dst[e_ba]
        arrive = finish[s] + np.where(pl[s] != pl[d_], comm[e_ba], 0.0)
        const.append(float((arrive + p.time[d_] + tail[d_]).max()))
    for d in range(k):
        a, b = first_after[d], last_before[d]
        if a >= 0:
            const.append((finish[b] if b >= 0 else 0.0) + p.time[a] + tail[a])
    roots = np.flatnonzero(after & (np.bincount(dst, minlength=n) == 0))
    if roots.size:
        const.append(float((p.time[roots] + tail[roots]).max()))
    return Boundary(win, in_win, before, after, last_before, first_after, e_in, e_ww, e_out, max(const))
