"""Step 1, stage I: graph slicing (PARDNN Algorithm 1).

The K heaviest paths, each found on the graph left after removing the previous ones with the
levels recomputed, become the *primary* clusters (one per device). A primary starts at the live
source (no live predecessor) with the largest bottom level and steps to the live successor w
maximising comm(v, w) + bl(w) (ties: earlier topological rank) until there is none: with fresh
levels this retraces a critical path of the live graph exactly. Finding a critical path needs only
bottom levels, so only those are recomputed, K - 1 times.

The remaining nodes are cut into *secondary* linear clusters without recomputing levels per
cluster (the paper's shortcut: recomputation is the expensive part, O(V + E) each). Their levels
are computed once, on the whole graph as the mapping will see it: the comm inside each primary set
to zero (it will be local), every other edge at its cost. A secondary starts at the unclustered
node with the largest weighted level (ties: earlier rank) and steps to the successor with the
largest bottom level (ties: earlier rank) for as long as that successor is still unclustered.
Stopping where the heaviest continuation is already taken, rather than detouring to a lighter
live successor, keeps a cluster on one stretch of the timeline: in a training graph the heaviest
continuation of a forward operator leads back to the critical path (the rest of the forward and
the whole backward), so a forward branch (an attention head: scores, softmax, dropout, context)
becomes one cluster, where walking the live graph used to turn it into the backward pass through
its saved activations and leave the branch's tail a cluster of its own. The authors' code
(ParCoreLab/pardnn, Graph::obtain_linear_clusters) slices secondaries the same way.
"""
from __future__ import annotations

import heapq
import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from placement.solution import halt_if

from .graph import Graph, bottom_levels, tie_key, top_levels


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


def _walk_while_free(g: Graph, start: int, bl: list[float], rank: list[int], live: list[bool]) -> list[int]:
    """From ``start``, step to the successor with the largest ``bl`` (ties: earlier rank) while it
    is still unclustered; the path ends where that successor is taken or there is none."""
    path = [start]
    live[start] = False
    v = start
    ptr, succ = g.succ_ptr, g.succ
    while True:
        best, best_key = -1, None
        for j in range(ptr[v], ptr[v + 1]):
            w = succ[j]
            key = (bl[w], -rank[w])
            if best_key is None or key > best_key:
                best, best_key = w, key
        if best < 0 or not live[best]:
            return path
        live[best] = False
        path.append(best)
        v = best


def slice_graph(g: Graph, k: int, comm: np.ndarray, deadline: float | None = None,
                stop: Callable[[], bool] | None = None) -> Slicing:
    """Algorithm 1: K primary clusters (critical paths, levels recomputed after each removal),
    then secondary linear clusters until every node belongs to one. With ``deadline`` (a
    time.monotonic() value) the recomputing phase stops early once it is passed; ``stop`` (a stop
    request's ``is_set``) abandons the slicing (OutOfTime)."""
    n = g.n
    rank = g.rank.tolist()
    alive = np.ones(n, dtype=bool)
    live = [True] * n
    cluster = np.full(n, -1, dtype=np.int64)
    paths: list[np.ndarray] = []
    c = comm.tolist()
    src = np.repeat(np.arange(n), np.diff(np.asarray(g.succ_ptr)))
    dst = np.asarray(g.succ, dtype=np.int64)
    bl_arr = bottom_levels(g, comm)
    target = min(k, n)
    for i in range(target):
        halt_if(stop)
        live_in = np.bincount(dst[alive[src] & alive[dst]], minlength=n)
        cand = np.flatnonzero(alive & (live_in == 0))
        best = cand[np.lexsort((g.rank[cand], -bl_arr[cand]))[0]]
        path = _walk(g, int(best), bl_arr.tolist(), c, rank, live)
        arr = np.asarray(path, dtype=np.int64)
        alive[arr] = False
        cluster[arr] = len(paths)
        paths.append(arr)
        if i + 1 == target or not alive.any() or (deadline is not None and time.monotonic() > deadline):
            break
        bl_arr = bottom_levels(g, comm, alive)
    primaries = len(paths)
    if not alive.any():
        return Slicing(cluster, paths, primaries)
    eid = np.asarray(g.succ_edge, dtype=np.int64)
    local = comm.copy()
    local[eid[(cluster[src] >= 0) & (cluster[src] == cluster[dst])]] = 0.0
    bl_loc = bottom_levels(g, local)
    wl = tie_key(top_levels(g, local) + bl_loc).tolist()
    bl = tie_key(bl_loc).tolist()
    heap = [(-wl[v], rank[v], v) for v in np.flatnonzero(alive).tolist()]
    heapq.heapify(heap)
    popped = 0
    while heap:
        popped += 1
        if popped % 4096 == 0:
            halt_if(stop)
        _, _, v = heapq.heappop(heap)
        if not live[v]:
            continue
        arr = np.asarray(_walk_while_free(g, v, bl, rank, live), dtype=np.int64)
        cluster[arr] = len(paths)
        paths.append(arr)
    return Slicing(cluster, paths, primaries)
