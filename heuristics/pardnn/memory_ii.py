"""Memory heuristic II (PARDNN Sec. 3.2.2): balance memory without emulating the scheduler.

1. :func:`split_critical_path`, run after slicing and before mapping: when the primaries are highly
   unbalanced in memory (the largest holds more than ``ratio`` times the mean), the largest gives
   contiguous chunks of itself, one to each primary below the mean, each chunk sized to bring that
   primary up to the mean, while it keeps at least the mean itself. LFLAM then maps the secondaries
   around the moved chunks.
2. :func:`balance_residual`, run after mapping: moves *residual* nodes (nodes holding parameters)
   from the device with the largest score to the one with the smallest, where the score of a
   device is its share of all parameter bytes plus its share of all output bytes; Eq. (5) asks
   (K/2) * score >= 1 on every device, i.e. every score equal to the mean 2/K. Each move takes the
   unit whose score change best fits the gap (largest not above it; otherwise the smallest that
   still narrows the pair), never into a device that cannot hold it, each unit at most once; it
   stops when Eq. (5) holds within ``tol`` or nothing can move.
"""
from __future__ import annotations

import bisect

from typing import Callable

import numpy as np

from placement.problem import Problem

from .overflow import Units
from .slicing import Slicing


def split_critical_path(problem: Problem, sl: Slicing, ratio: float = 2.0) -> tuple[Slicing, int]:
    """Returns the new slicing and the number of chunks given away (0: balanced enough)."""
    if sl.primaries < 2:
        return sl, 0
    need = problem.param_bytes + problem.out_bytes
    mem = np.array([need[sl.paths[p]].sum() for p in range(sl.primaries)])
    mean = mem.mean()
    big = int(np.argmax(mem))
    if mean <= 0 or mem[big] <= ratio * mean:
        return sl, 0
    short = [int(p) for p in np.argsort(mem, kind="stable") if mem[p] < mean and p != big]
    path = sl.paths[big]
    cum = np.cumsum(need[path])
    keep_to = int(np.searchsorted(cum, mean, side="left")) + 1  # the longest keeps >= mean
    paths = list(sl.paths)
    cluster = sl.cluster.copy()
    pos = keep_to
    given = 0
    for p in short:
        if pos >= path.size:
            break
        want = mean - mem[p]
        base = cum[pos - 1]
        end = int(np.searchsorted(cum, base + want, side="left")) + 1
        end = min(max(end, pos + 1), path.size)
        chunk = path[pos:end]
        paths[p] = np.concatenate([paths[p], chunk])
        cluster[chunk] = p
        pos = end
        given += 1
    paths[big] = path[:keep_to] if given else path
    return Slicing(cluster, paths, sl.primaries), given


def eq5_scores(problem: Problem, placement: np.ndarray) -> np.ndarray:
    """Per device: share of all parameter bytes + share of all output bytes (Eq. 5's bracket)."""
    k = problem.k
    R, N = float(problem.param_bytes.sum()), float(problem.out_bytes.sum())
    s = np.zeros(k)
    if R > 0:
        s += np.bincount(placement, weights=problem.param_bytes, minlength=k) / R
    if N > 0:
        s += np.bincount(placement, weights=problem.out_bytes, minlength=k) / N
    if R == 0 or N == 0:
        s *= 2.0
    return s


def eq5_holds(problem: Problem, placement: np.ndarray, tol: float = 1e-9) -> bool:
    return bool(np.all(problem.k / 2.0 * eq5_scores(problem, placement) >= 1.0 - tol))


def balance_residual(problem: Problem, placement: np.ndarray, capacity: np.ndarray, units: Units | None = None,
                     tol: float = 0.01, out_of_time: Callable[[], bool] | None = None) -> tuple[np.ndarray, int]:
    """Move residual units until Eq. (5) holds within ``tol`` (relative to the mean score), or
    until ``out_of_time()`` says so (with 1000 devices the pairs to try number a million).
    Returns the new placement and the number of units moved."""
    k = problem.k
    pl = placement.copy()
    if k < 2:
        return pl, 0
    units = units or Units.of_problem(problem)
    R, N = float(problem.param_bytes.sum()), float(problem.out_bytes.sum())
    if R <= 0:
        return pl, 0
    nu = len(units.members)
    dp = np.bincount(units.of, weights=problem.param_bytes, minlength=nu)
    do = np.bincount(units.of, weights=problem.out_bytes, minlength=nu)
    delta = dp / R + (do / N if N > 0 else 0.0)
    if N <= 0:
        delta = delta * 2.0
    need = dp + do
    udev = pl[[m[0] for m in units.members]]
    score = eq5_scores(problem, pl)
    mem = np.bincount(pl, weights=problem.param_bytes + problem.out_bytes, minlength=k)
    lists: list[list[tuple[float, int]]] = [[] for _ in range(k)]
    for u in np.flatnonzero(dp > 0).tolist():
        lists[int(udev[u])].append((float(delta[u]), u))
    for lst in lists:
        lst.sort()
    target = 2.0 / k
    moved = 0
    blocked: set[tuple[int, int]] = set()
    while out_of_time is None or not out_of_time():
        order = np.argsort(score, kind="stable")
        if score[order[0]] >= target * (1 - tol):
            break
        pair = None
        for dst in order.tolist():
            if score[dst] >= target * (1 - tol):
                break
            for src in order[::-1].tolist():
                if score[src] <= target or (src, dst) in blocked:
                    continue
                pair = (src, dst)
                break
            if pair:
                break
        if pair is None:
            break
        src, dst = pair
        gap = min(score[src] - target, target - score[dst])
        spread = score[src] - score[dst]
        lst = lists[src]
        choice = -1
        i = bisect.bisect_right(lst, (gap, nu))
        for j in range(i - 1, -1, -1):  # largest change not above the gap
            u = lst[j][1]
            if units.mask[u, dst] and mem[dst] + need[u] <= capacity[dst]:
                choice = j
                break
        if choice < 0:
            for j in range(i, len(lst)):  # else the smallest that still narrows the pair
                dlt, u = lst[j]
                if dlt >= spread:
                    break
                if units.mask[u, dst] and mem[dst] + need[u] <= capacity[dst]:
                    choice = j
                    break
        if choice < 0:
            blocked.add(pair)
            continue
        dlt, u = lst.pop(choice)
        pl[units.members[u]] = dst
        score[src] -= dlt
        score[dst] += dlt
        mem[src] -= need[u]
        mem[dst] += need[u]
        moved += 1
    return pl, moved
