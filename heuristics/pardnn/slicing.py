"""Step 1, stage I: graph slicing (PARDNN Algorithm 1).

The K heaviest paths, each found on the graph left after removing the previous ones with the
weighted levels recomputed, become the *primary* clusters (one per device). The remaining nodes
are cut into *secondary* linear clusters by walking heaviest-first with the last levels, without
recomputing them (the paper's shortcut: recomputation is the expensive part, O(V + E) each).

A path is found by starting at the live node with the largest weighted level (ties: earlier
topological rank) and repeatedly stepping to the live successor with the
largest weighted level (ties: earlier rank) until there is none. With fresh levels this walk
follows a critical path of the live graph; with stale ones it is just a heavy path, and when no
successor is left it is a single node.
"""
from __future__ import annotations

import heapq
import time
from dataclasses import dataclass

import numpy as np

from .graph import Graph, weighted_levels


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


def _walk(g: Graph, start: int, wl: list[float], rank: list[int], live: list[bool]) -> list[int]:
    path = [start]
    live[start] = False
    v = start
    while True:
        best, best_key = -1, None
        for j in range(g.succ_ptr[v], g.succ_ptr[v + 1]):
            w = g.succ[j]
            if live[w]:
                key = (wl[w], -rank[w])
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
    _, _, wl_arr = weighted_levels(g, comm)
    for _ in range(min(k, n)):
        wl = wl_arr.tolist()
        cand = np.flatnonzero(alive)
        # heaviest live node; ties to the topologically earliest (smallest top level follows)
        best = cand[np.lexsort((g.rank[cand], -wl_arr[cand]))[0]]
        path = _walk(g, int(best), wl, rank, live)
        arr = np.asarray(path, dtype=np.int64)
        alive[arr] = False
        cluster[arr] = len(paths)
        paths.append(arr)
        if not alive.any() or (deadline is not None and time.monotonic() > deadline):
            break
        _, _, wl_arr = weighted_levels(g, comm, alive)
    primaries = len(paths)
    wl = wl_arr.tolist()
    heap = [(-wl[v], rank[v], v) for v in np.flatnonzero(alive).tolist()]
    heapq.heapify(heap)
    while heap:
        _, _, v = heapq.heappop(heap)
        if not live[v]:
            continue
        path = _walk(g, v, wl, rank, live)
        arr = np.asarray(path, dtype=np.int64)
        cluster[arr] = len(paths)
        paths.append(arr)
    return Slicing(cluster, paths, primaries)
