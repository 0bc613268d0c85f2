"""Pinned kin for the bypass bound (placement/bypass_bound.py, docs/scale.md "Pinned kin"):
a window member that leaves the chain's device waits there for the members pinned to that device
among its ancestors, one at a time, and the members pinned among its descendants wait for it.

Why: in a ResNeXt block every path starts with a conv whose input costs far more to move than the
block takes, so the convs stay on the chain's device and run there one after another; a path's
tail that leaves that device returns no earlier than the convs of all the tails that left, then a
transfer out, the tail and a transfer back. Pricing each tail by its own path alone lets every
tail leave at the price of one, which is most of the bound's shortfall on the generated CNNs.

Two parts:

- ``Kin``: per node of a window (computed only for the windows that need it), the member among
  its window ancestors (and among its window descendants) with the largest X2 (the path length with a transfer in and one out: the
  member that stays on the chain's device longest as the threshold grows), and per member the
  least time from its finish to the window's end through a member that left, or from the
  window's start to its own start through one (``rho``).
- ``cover_floor``: the least of max(the chain device's load, the threshold, the other devices'
  energy, the pinned kin's one-at-a-time terms) over how much time leaves, with the kin's cost
  relaxed to a fractional covering (a lower bound of every subset's value).
- ``lead``: in case C the chain before its first cut (after its last) runs on the chain's
  device beside the kin, so the last of them still needs its way out and back (session 17: the
  chain's own conv in a ResNeXt block, which case C let run last for free).
"""
from __future__ import annotations

import bisect

import numpy as np

from .problem import Problem

NONE = (-np.inf, 0.0, -1)  # no pinned kin: (X2, time, node)


class Kin:
    """Per window, on demand: for every node v of the window, ``up[v]`` / ``down[v]`` = (X2, time,
    id) of the window ancestor / descendant with time > 0 and the largest X2 (ties: the longer
    time), NONE if none; ``rho_down[w]`` = the least over window descendants u of w and paths
    w ~> u of (times strictly after w up to u, u included) + the path's smallest transfer + u's
    way out (``out_len`` + ``out_low``); ``rho_up[w]`` the mirror image (u's way in, then u and
    the nodes up to w, w excluded, + the smallest transfer).

    ``key[v]`` names v's window (-1: none). Edges between two nodes of one window are the only ones
    followed: a path between two members of a window stays inside it (a node on it has the same
    last chain ancestor and first chain descendant as both ends). Computed only for the windows
    asked for (``members``): most windows never need it."""

    def __init__(self, problem: Problem, key: list[int], x2: list[float], into_len: list[float],
                 into_low: list[float], out_len: list[float], out_low: list[float]) -> None:
        n = problem.n
        self.t, self.x2 = problem.time.tolist(), x2
        self.way_in = [a + b for a, b in zip(into_len, into_low)]
        self.way_out = [a + b for a, b in zip(out_len, out_low)]
        keys = np.asarray(key, dtype=np.int64)
        inside = (keys[problem.src] >= 0) & (keys[problem.src] == keys[problem.dst])  # edges within a window
        src, dst, comm = problem.src[inside], problem.dst[inside], problem.comm[inside]
        self.pred = _adjacency(n, dst, src, comm)
        self.succ = _adjacency(n, src, dst, comm)
        topo = problem.topo_order[keys[problem.topo_order] >= 0]
        by = np.argsort(keys[topo], kind="stable")  # grouped by window, each in topological order
        grouped, wk = topo[by], keys[topo][by]
        cut = np.flatnonzero(np.diff(wk)) + 1
        starts, ends = np.r_[0, cut], np.r_[cut, len(wk)]
        self.nodes = {int(wk[s]): grouped[s:e].tolist() for s, e in zip(starts.tolist(), ends.tolist()) if e > s}
        self.up: dict[int, tuple] = {}
        self.down: dict[int, tuple] = {}
        self.rho_up: dict[int, float] = {}
        self.rho_down: dict[int, float] = {}

    def members(self, key: int, ids: list[int]) -> list[tuple[tuple, tuple]]:
        """Per member id of window ``key``: ((X2, time, id, rho_down) of its ancestor kin,
        (X2, time, id, rho_up) of its descendant kin); rho 0 where there is no kin."""
        self._window(self.nodes.get(key, []))
        out = []
        for u in ids:
            g, h = self.up[u], self.down[u]
            out.append(((*g, self.rho_down[g[2]] if g[2] >= 0 else 0.0), (*h, self.rho_up[h[2]] if h[2] >= 0 else 0.0)))
        return out

    def _window(self, order: list[int]) -> None:
        self._sweep(order, self.pred, self.way_in, self.up, self.rho_up)
        self._sweep(order[::-1], self.succ, self.way_out, self.down, self.rho_down)

    def _sweep(self, order: list[int], adjacency: tuple[list[int], list[int], list[float]], way: list[float],
               kin: dict[int, tuple], rho: dict[int, float]) -> None:
        """One direction (from the window's start: ``pred``, ``way_in``, ``up``, ``rho_up``; from its
        end: the mirror image), ``order`` running with the edges followed."""
        t, x2, inf = self.t, self.x2, np.inf
        ptr_l, nbr_l, comm_l = adjacency
        reach: dict[int, float] = {}  # least way to v through its kin-side window nodes or v, v included
        for v in order:
            best, z, cross, via = NONE, way[v], inf, inf
            for j in range(ptr_l[v], ptr_l[v + 1]):
                y = nbr_l[j]
                cand = (x2[y], t[y], y) if t[y] > 0 else NONE
                best = max(best, cand, kin[y])
                z = min(z, reach[y])
                cross = min(cross, reach[y] + comm_l[j])
                via = min(via, rho[y] + t[y])
            kin[v], reach[v], rho[v] = best, z + t[v], min(cross, via)


def _adjacency(n: int, at: np.ndarray, other: np.ndarray, comm: np.ndarray) -> tuple[list[int], list[int], list[float]]:
    """CSR lists of the given edges grouped by ``at``: per node its ``other`` ends and transfers."""
    by = np.argsort(at, kind="stable")
    ptr = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(np.bincount(at, minlength=n), out=ptr[1:])
    return ptr.tolist(), other[by].tolist(), comm[by].tolist()


def _cover(groups: dict[int, list[float]], free: float) -> tuple[list[float], list[float], list[float], float]:
    """The fractional covering of a kin side: moving x of time costs nothing up to ``free`` (the
    members with no pinned kin), then the groups' kin times in order of cost per moved time.
    ``groups``: kin id -> [moved time, kin time, rho]. Returns the breakpoints xs, the cost at
    each, the slope after each, and the least rho (the kin's remaining way)."""
    xs, cost, slope = [free], [0.0], []
    for size, c, _ in sorted(groups.values(), key=lambda g: g[1] / g[0]):
        slope.append(c / size)
        xs.append(xs[-1] + size)
        cost.append(cost[-1] + c)
    slope.append(slope[-1] if slope else 0.0)
    return xs, cost, slope, min((g[2] for g in groups.values()), default=0.0)


def _count(groups: dict[int, list[float]]) -> tuple[float, list[float]] | None:
    """The covering by whole groups: moving y past the free time touches at least ceil(y / s)
    groups, s the largest group's moved time, each with a kin node of its own, so it costs at least
    the ceil(y / s) smallest kin times. Returns (s, the kin times' prefix sums from the smallest),
    None without groups."""
    if not groups:
        return None
    size = max(g[0] for g in groups.values())
    if size <= 0:
        return None
    kin = [0.0]
    for c in sorted(g[1] for g in groups.values()):
        kin.append(kin[-1] + c)
    return size, kin


def lead(least: float, chain: tuple[float, float] | None) -> float:
    """What a kin side adds to its covering cost once some kin is needed: the kin's least way
    ``least``, or, with ``chain`` = (T, r) (chain nodes of total time T on the chain's device
    beside the kin, the last of them needing r to reach the window's end: case C's chain before
    its first cut, or after its last one), the larger of that and T + min(least, r): the last of
    the kin and those chain nodes to finish on that device ends after both their times
    (docs/scale.md, "The chain's own kin")."""
    if chain is None or chain[0] <= 0:
        return least
    return max(least, chain[0] + min(least, chain[1]))


GROUPS = True  # the covering also counts whole groups (_count; tests switch it off to compare)


def cover_floor(total: float, room: float, theta: float, m: float, k: int,
                sides: list[dict[int, list[float]] | float],
                chains: tuple[tuple[float, float] | None, ...] = ()) -> float:
    """inf over x in [0, room] of max(total - x, theta, m + x / (K - 1), and per kin side
    (0 while x <= its free time, else its ``lead`` + its covering cost of x)). ``sides``: pairs
    flattened as [groups, free, groups, free, ...]; ``chains``: per side, the chain nodes known
    to share the chain's device with its kin (``lead``; none when missing). Each function is
    linear between breakpoints, so the infimum is at a breakpoint or where the falling line meets
    a rising one."""
    pairs = [(sides[i], sides[i + 1]) for i in range(0, len(sides), 2)]
    covers = [_cover(g, free) for g, free in pairs]  # type: ignore[arg-type]
    covers = [(xs, cost, slope, lead(least, chains[i] if i < len(chains) else None))
              for i, (xs, cost, slope, least) in enumerate(covers)]
    counts = [_count(g) if GROUPS else None for g, _ in pairs]  # type: ignore[arg-type]
    cuts = {0.0, room}
    for (xs, _, _, _), count in zip(covers, counts):
        cuts.update(x for x in xs if 0.0 < x < room)
        if count is not None:  # where one more group must move
            size, kin = count
            cuts.update(x for x in (xs[0] + j * size for j in range(1, len(kin))) if 0.0 < x < room)
    cuts_l = sorted(cuts)
    best = np.inf
    for lo, hi in zip(cuts_l, cuts_l[1:] or cuts_l):
        lines = [(theta, 0.0), (m + lo / (k - 1), 1.0 / (k - 1))]
        for (xs, cost, slope, least), count in zip(covers, counts):
            if hi <= xs[0] and hi > lo:
                continue  # the whole piece moves only free members
            if hi == lo and lo <= xs[0]:
                continue
            i = max(0, min(bisect.bisect_right(xs, lo) - 1, len(slope) - 1))
            lines.append((least + cost[i] + (lo - xs[i]) * slope[i], slope[i]))
            if count is not None and hi - lo > 1e-9 * max(1.0, hi):  # (a sliver's count could round up)
                size, kin = count
                j = min(len(kin) - 1, int(np.ceil(((lo + hi) / 2 - xs[0]) / size)))
                lines.append((least + kin[j], 0.0))  # each touched group has its own kin
        fall = total - lo
        span = hi - lo
        cands = {0.0, span}
        for v, s in lines:
            d = (fall - v) / (1.0 + s)
            if 0.0 < d < span:
                cands.add(d)
        for d in cands:
            best = min(best, max(fall - d, *(v + s * d for v, s in lines)))
    return best
