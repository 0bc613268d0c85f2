"""Step 1, stage I: graph slicing (PARDNN Algorithm 1).

The K heaviest paths, each found on the graph left after removing the previous ones with the
weighted levels recomputed, become the *primary* clusters (one per device). The remaining nodes
are cut into *secondary* linear clusters by walking heaviest-first with the last levels, without
recomputing them (the paper's shortcut: recomputation is the expensive part, O(V + E) each).
Finding a critical path needs only bottom levels, so while primaries are sought only those are
recomputed; top levels are computed once, for the weighted levels the secondaries use (the same
levels as recomputing tl + bl each time, at about half the cost).

A primary starts at the live source (no live predecessor) with the largest bottom level; a
secondary at the unvisited node with the largest (stale) weighted level. Either way the path then
steps to the live successor w maximising comm(v, w) + bl(w) (ties: earlier topological rank)
until there is none. With fresh levels this follows a critical path of the live graph exactly
(it retraces the maximum bl(v) was computed from, so no rounding of tl + bl can derail it); with
stale ones it is a heavy path, and a node without live successors is a cluster of its own.
"""
from __future__ import annotations

import heapq
import time
from dataclasses import dataclass

import numpy as np

from .graph import Graph, bottom_levels, top_levels


@dataclass
class Slicing:
    """Clusters of the graph: ``paths[c]`` lists cluster c's nodes in path order and
    ``cluster[v]`` is v's cluster. Clusters 0..primaries-1 are the primaries, in discovery order
    (cluster 0 is the critical path); the rest are secondaries in discovery order."""

    cluster: np.ndarray
    paths: list[np.ndarray]
    primaries: int

    @property
    def secondaries(self) -> range:
        return range(self.primaries, len(self.paths))


def _walk(g: Graph, start: int, bl: list[float], comm: list[float], rank: list[int], live: list[bool]) -> list[int]:
    """From ``start``, repeatedly step to the live successor continuing the heaviest path (largest
    comm(v, w) + bl(w), the term bl(v) is the maximum of; ties: earlier rank) until none is left."""
    path = [start]
    live[start] = False
    v = start
    while True:
        best, best_key = -1, None
        for j in range(g.succ_ptr[v], g.succ_ptr[v + 1]):
            w = g.succ[j]
            if live[w]:
                key = (comm[g.succ_edge[j]] + bl[w], -rank[w])
                if best_key is None or key > best_key:
                    best, best_key = w, key
        if best < 0:
            return path
        live[best] = False
        path.append(best)
        v = best


def slice_graph(g: Graph, k: int, comm: np.ndarray, deadline: float | None = None) -> Slicing:
    """Algorithm 1: K primary clusters (critical paths, levels recomputed after each removal),
    then secondary linear clusters until every node belongs to one. With ``deadline`` (a
    time.monotonic() value) the recomputing phase stops early once it is passed."""
    n = g.n
    rank = g.rank.tolist()
    alive = np.ones(n, dtype=bool)
    live = [True] * n
    cluster = np.full(n, -1, dtype=np.int64)
    paths: list[np.ndarray] = []
    c = comm.tolist()
    src = np.repeat(np.arange(n), np.diff(np.asarray(g.succ_ptr)))
    dst = np.asarray(g.succ, dtype=np.int64)
    # Finding a critical path needs only bottom levels (it starts at the live source with the
    # largest one), so top levels are computed once, for the secondaries' weighted levels.
    bl_arr = bottom_levels(g, comm)
    target = min(k, n)
    for i in range(target):
        live_in = np.bincount(dst[alive[src] & alive[dst]], minlength=n)
        cand = np.flatnonzero(alive & (live_in == 0))
        best = cand[np.lexsort((g.rank[cand], -bl_arr[cand]))[0]]
        path = _walk(g, int(best), bl_arr.tolist(), c, rank, live)
        arr = np.asarray(path, dtype=np.int64)
        alive[arr] = False
        cluster[arr] = len(paths)
        paths.append(arr)
        if not alive.any() or (deadline is not None and time.monotonic() > deadline):
            break
        bl_arr = bottom_levels(g, comm, alive)
    wl_arr = top_levels(g, comm, alive) + bl_arr
    primaries = len(paths)
    wl = wl_arr.tolist()
    bl = bl_arr.tolist()
    heap = [(-wl[v], rank[v], v) for v in np.flatnonzero(alive).tolist()]
    heapq.heapify(heap)
    while heap:
        _, _, v = heapq.heappop(heap)
        if not live[v]:
            continue
        path = _walk(g, v, bl, c, rank, live)
        arr = np.asarray(path, dtype=np.int64)
        cluster[arr] = len(paths)
        paths.append(arr)
    return Slicing(cluster, paths, primaries)
