"""A makespan lower bound that uses memory: a path that cannot sit on one device pays transfers.

Why: the critical path ignores memory, so when the capacity forces a graph's work apart its gap
stays large however good the placement (issue 14). Take any path P of the graph. In any feasible
solution, split P into maximal runs of consecutive nodes on one device; each boundary between two
runs is an edge whose ends are on different devices, so it pays its comm, and the makespan is at
least time(P) + the comm of the boundary edges. A run lies on one device, so what that device must
hold because of the run's nodes is at most the largest capacity C:

- static model: params + outputs of every unit (colocation group or lone node) the run touches,
  each counted once;
- peak model: the params of those units (held at all times) plus, for any node x of the run with
  time > 0, x's working set: its output and each of its input tensors, all held on x's device
  while x runs (docs/peak.md, "working set"). Params and tensor buffers are distinct bytes.

Hence makespan >= time(P) + min { comm(cuts) : cuts split P into runs each within C }, where an
edge inside one unit can never be a cut (its ends always share a device). Any path gives a valid
bound; a few candidate paths are tried (longest by time, by time and memory, by memory, with
comm counted only between units) and the best kept. Docs: docs/peak.md (makespan bound) and
docs/exact.md (the static form, which the exact models used first).

Cost: a memory that only grows as a run is extended makes the feasible runs ending at each node an
interval, so the segmentation is a sliding-window minimum, linear in the path; each candidate path
is one pass over the graph. About a second per candidate at 200K nodes (pure Python loops).
"""
from __future__ import annotations

import threading
from collections import deque

import numpy as np

from .memory_bounds import working_sets
from .problem import Problem


def unit_of(problem: Problem) -> np.ndarray:
    """Per node, its placement unit: colocation group g -> g, lone node v -> n_groups + v."""
    g = problem.colocate
    return np.where(g >= 0, g, len(problem.groups) + np.arange(problem.n))


def best_path(problem: Problem, weight: np.ndarray, edge_weight: np.ndarray) -> list[int]:
    """The path maximising its total node ``weight`` plus ``edge_weight`` of its edges."""
    n = problem.n
    ptr, nbr, eid = problem.pred_ptr
    ptr_l, nbr_l, eid_l = ptr.tolist(), nbr.tolist(), eid.tolist()
    w, ew = weight.tolist(), edge_weight.tolist()
    best = [0.0] * n
    back = [-1] * n
    for v in problem.topo_order.tolist():
        b, arg = 0.0, -1
        for j in range(ptr_l[v], ptr_l[v + 1]):
            u = nbr_l[j]
            c = best[u] + ew[eid_l[j]]
            if arg < 0 or c > b:
                b, arg = c, u
        best[v] = b + w[v]
        back[v] = arg
    v = int(np.argmax(best))
    path = [v]
    while back[v] >= 0:
        v = back[v]
        path.append(v)
    return path[::-1]


def _step_costs(problem: Problem, path: list[int], unit: np.ndarray) -> list[float]:
    """cost[i] (i >= 1): the comm paid if the run boundary falls between path[i-1] and path[i]
    (the largest comm over parallel edges; inf inside one unit, which cannot be split)."""
    return [0.0] + [np.inf if unit[a] == unit[b] else problem.comm_between(a, b) for a, b in zip(path, path[1:])]


def segmentation_cost(problem: Problem, path: list[int], memory_model: str, capacity: float,
                      unit: np.ndarray | None = None, ws: np.ndarray | None = None) -> float:
    """The cheapest total comm of boundaries cutting ``path`` into runs that each fit ``capacity``
    (module docstring); inf if some node alone cannot fit."""
    if unit is None:
        unit = unit_of(problem)
    static = memory_model == "static"
    node_mem = problem.param_bytes + (problem.out_bytes if static else 0.0)
    unit_mem = np.bincount(unit, weights=node_mem, minlength=int(unit.max()) + 1)
    if ws is None:
        ws = working_sets(problem)
    cost = _step_costs(problem, path, unit)
    tol = capacity * (1 + 1e-12) + 1e-9
    us = unit[path].tolist()
    um = unit_mem.tolist()
    wl = np.zeros(len(path)).tolist() if static else ws[path].tolist()
    count: dict[int, int] = {}
    held = 0.0  # memory of the distinct units in the window
    top: deque[int] = deque()  # window indices, working sets decreasing
    best: deque[tuple[float, int]] = deque()  # (start value, index), values increasing
    f_prev = 0.0  # f[j]: cheapest cuts covering path[:j]
    lo = 0
    for j in range(len(path)):
        start = f_prev + (cost[j] if j else 0.0)  # a run starting at j
        while best and best[-1][0] >= start:
            best.pop()
        best.append((start, j))
        u = us[j]
        count[u] = count.get(u, 0) + 1
        if count[u] == 1:
            held += um[u]
        while top and wl[top[-1]] <= wl[j]:
            top.pop()
        top.append(j)
        while lo <= j and held + wl[top[0]] > tol:
            v = us[lo]
            count[v] -= 1
            if count[v] == 0:
                held -= um[v]
            lo += 1
            while top and top[0] < lo:
                top.popleft()
            while best and best[0][1] < lo:
                best.popleft()
            if not top:
                break
        if lo > j:
            return np.inf
        f_prev = best[0][0]
    return f_prev


def memory_path_bound(problem: Problem, memory_model: str = "static", stop: threading.Event | None = None) -> float:
    """The best memory-aware path bound over a few candidate paths (0 when memory is unlimited,
    the critical path then being the same bound). Once ``stop`` is set, no further path is tried:
    the best so far is still a valid bound (about 0.3 s per path at 200K nodes)."""
    if problem.n == 0:
        return 0.0
    capacity = float(problem.memory.max())
    if not np.isfinite(capacity):
        return 0.0
    unit = unit_of(problem)
    ws = working_sets(problem)
    # Paths heavy in what a run must hold are the likeliest to need cuts.
    mems = [problem.param_bytes + (problem.out_bytes if memory_model == "static" else ws)]
    scale_t = float(problem.time.sum()) or 1.0
    inter = (unit[problem.src] != unit[problem.dst]).astype(float)
    ew = problem.comm / scale_t
    weights: list[tuple[np.ndarray, np.ndarray]] = [(problem.time / scale_t, ew), (problem.time / scale_t, ew * inter)]
    for mem in mems:
        total_mem = float(mem.sum()) or 1.0
        weights.append((mem / total_mem, np.zeros(problem.m)))
        for wm in (0.5, 1.0, 4.0):
            w = problem.time / scale_t + wm * mem / total_mem
            weights += [(w, ew), (w, ew * inter)]
    if memory_model != "static":  # params alone, which a run holds at all times
        params = problem.param_bytes / (float(problem.param_bytes.sum()) or 1.0)
        weights += [(params, np.zeros(problem.m)), (problem.time / scale_t + params, ew * inter)]
    best = 0.0
    seen: set[tuple[int, ...]] = set()
    for w, e in weights:
        if stop is not None and stop.is_set():
            break
        path = best_path(problem, w, e)
        key = tuple(path)
        if key in seen:
            continue
        seen.add(key)
        cost = segmentation_cost(problem, path, memory_model, capacity, unit, ws)
        if np.isfinite(cost):
            best = max(best, float(problem.time[path].sum()) + cost)
    return best
