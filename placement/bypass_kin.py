"""Pinned kin for the bypass bound (placement/bypass_bound.py, docs/scale.md "Pinned ancestors"):
a window member that leaves the chain's device waits there for the members pinned to that device
among its ancestors, one at a time, and the members pinned among its descendants wait for it.

Why: in a ResNeXt block every path starts with a conv whose input costs far more to move than the
block takes, so the convs stay on the chain's device and run there one after another; a path's
tail that leaves that device returns no earlier than the convs of all the tails that left, then a
transfer out, the tail and a transfer back. Pricing each tail by its own path alone lets every
tail leave at the price of one, which is most of the bound's shortfall on the generated CNNs.

Two parts, both plain functions:

- ``kin``: per off-chain node of a window, the member among its window ancestors (and among its
  window descendants) with the largest X2 (the path length with a transfer in and one out: the
  member that stays on the chain's device longest as the threshold grows), and per member the
  least time from its finish to the window's end through a member that left, or from the
  window's start to its own start through one (``rho``).
- ``cover_floor``: the least of max(the chain device's load, the threshold, the other devices'
  energy, the pinned kin's one-at-a-time terms) over how much time leaves, with the kin's cost
  relaxed to a fractional covering (a lower bound of every subset's value).
"""
from __future__ import annotations

import bisect

import numpy as np

from .problem import Problem

NONE = (-np.inf, 0.0, -1)  # no pinned kin: (X2, time, node)


def kin(problem: Problem, key: list[int], x2: list[float], into_len: list[float], into_low: list[float],
        out_len: list[float], out_low: list[float]) -> tuple[list, list, list[float], list[float]]:
    """For every node v with a window key (``key[v] >= 0``; nodes of one window share it):
    ``up[v]`` / ``down[v]`` = (X2, time, id) of the window ancestor / descendant with time > 0 and
    the largest X2 (ties: the longer time), NONE if none; ``rho_down[w]`` = the least over window
    descendants u of w and paths w ~> u of (times strictly after w up to u, u included) + the
    path's smallest transfer + u's way out (``out_len`` + ``out_low``); ``rho_up[w]`` the mirror
    image (u's way in, then u and the nodes up to w, w excluded, + the smallest transfer).

    Edges between two nodes of one window are the only ones followed: a path between two members
    of a window stays inside it (a node on it has the same last chain ancestor and first chain
    descendant as both ends)."""
    n = problem.n
    t = problem.time.tolist()
    inf = np.inf
    keys = np.asarray(key)
    inside = (keys[problem.src] >= 0) & (keys[problem.src] == keys[problem.dst])  # edges within a window
    src, dst, comm = problem.src[inside], problem.dst[inside], problem.comm[inside]
    order = problem.topo_order[keys[problem.topo_order] >= 0].tolist()
    up: list = [NONE] * n
    reach_in = [inf] * n  # least way in to v through a window ancestor-or-self, v included
    rho_up = [inf] * n
    ptr_l, nbr_l, comm_l = _adjacency(n, dst, src, comm)
    for v in order:
        best, zin, cross, via = NONE, into_len[v] + into_low[v], inf, inf
        for j in range(ptr_l[v], ptr_l[v + 1]):
            y = nbr_l[j]
            cand = (x2[y], t[y], y) if t[y] > 0 else NONE
            best = max(best, cand, up[y])
            zin = min(zin, reach_in[y])
            cross = min(cross, reach_in[y] + comm_l[j])
            via = min(via, rho_up[y] + t[y])
        up[v], reach_in[v], rho_up[v] = best, zin + t[v], min(cross, via)
    down: list = [NONE] * n
    reach_out = [inf] * n
    rho_down = [inf] * n
    ptr_l, nbr_l, comm_l = _adjacency(n, src, dst, comm)
    for v in reversed(order):
        best, zout, cross, via = NONE, out_len[v] + out_low[v], inf, inf
        for j in range(ptr_l[v], ptr_l[v + 1]):
            z = nbr_l[j]
            cand = (x2[z], t[z], z) if t[z] > 0 else NONE
            best = max(best, cand, down[z])
            zout = min(zout, reach_out[z])
            cross = min(cross, comm_l[j] + reach_out[z])
            via = min(via, t[z] + rho_down[z])
        down[v], reach_out[v], rho_down[v] = best, zout + t[v], min(cross, via)
    return up, down, rho_up, rho_down


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


def cover_floor(total: float, room: float, theta: float, m: float, k: int,
                sides: list[dict[int, list[float]] | float]) -> float:
    """inf over x in [0, room] of max(total - x, theta, m + x / (K - 1), and per kin side
    (0 while x <= its free time, else its least rho + its covering cost of x)). ``sides``: pairs
    flattened as [groups, free, groups, free, ...]. Each function is linear between breakpoints,
    so the infimum is at a breakpoint or where the falling line meets a rising one."""
    covers = [_cover(sides[i], sides[i + 1]) for i in range(0, len(sides), 2)]  # type: ignore[arg-type]
    cuts = {0.0, room}
    for xs, _, _, _ in covers:
        cuts.update(x for x in xs if 0.0 < x < room)
    cuts_l = sorted(cuts)
    best = np.inf
    for lo, hi in zip(cuts_l, cuts_l[1:] or cuts_l):
        lines = [(theta, 0.0), (m + lo / (k - 1), 1.0 / (k - 1))]
        for xs, cost, slope, least in covers:
            if hi <= xs[0] and hi > lo:
                continue  # the whole piece moves only free members
            if hi == lo and lo <= xs[0]:
                continue
            i = max(0, min(bisect.bisect_right(xs, lo) - 1, len(slope) - 1))
            lines.append((least + cost[i] + (lo - xs[i]) * slope[i], slope[i]))
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
