"""A memory-aware critical-path lower bound: a path that does not fit on one device must pay comm.

Take any source-to-sink path P. In any feasible solution, split P into maximal runs of consecutive
nodes on one device; every boundary between runs is an edge whose ends are apart, so it pays its
comm, and P's length is at least time(P) + the comm of those boundary edges. Each run sits on one
device, which holds the run's nodes and their whole colocation groups, so the run's memory
(counting each unit once) is at most the largest capacity. Hence

    makespan >= time(P) + min { comm(cuts) : cuts split P into runs each of memory <= max capacity },

a segmentation solved exactly by a dynamic programme over P. A run boundary is an edge whose ends
are on different devices, so an edge inside one colocation unit (both ends always share a device)
can never be a boundary: the programme may not cut there. (Without that rule, the zero-comm edges
inside the units of the msr-fiddle graphs, e.g. a batch-norm and its output node, were free cut
points and the bound fell back to the critical path.) Any path gives a valid bound; we try a few
(longest by time, by time plus memory, by memory, and with comm counted only on edges between
units) and keep the best. Memory per node is params
+ outputs under the static model and params only under the peak model (params are resident for the
whole run; outputs may be freed), so the bound holds for both. Under the peak model the runs are
also tried holding, besides their params, every tensor that one of their units forces onto their
device while a node x runs (an ancestor of x consumed there by x or a descendant:
formulations/saved_bytes.py), valid since a run's units share one device at that time.
"""
from __future__ import annotations

import numpy as np

from placement.memory_path_bound import best_path
from placement.problem import Problem

from .saved_bytes import Held, held_tensors
from .units import units

PATH_CUT_NODES = 2  # nodes x whose held tensors weigh the runs under the peak model (a DP per path each)
PATH_ALL_NODES = 160  # up to this many nodes, every x is tried (which x binds is hard to tell in advance)


def _cheapest_runs(seq: list[int], cut: list[float] | np.ndarray, unit_mem: np.ndarray, held: Held | None,
                   problem: Problem, capacity: float) -> float:
    """Cheapest total of ``cut[i]`` over the boundaries i that split the unit sequence ``seq`` into
    runs whose memory fits ``capacity`` (each unit counted once per run; with ``held``, also every
    tensor one of the run's units forces onto its device, each once); inf if none does."""
    forced = held.by_unit() if held is not None else {}
    sizes = problem.out_bytes[held.tensors] if held is not None else np.zeros(0)
    L = len(seq)
    f = [np.inf] * (L + 1)  # f[j]: cheapest cuts for the first j elements
    f[0] = 0.0
    tol = capacity * (1 + 1e-12) + 1e-9
    for i in range(L):  # a run starting at seq[i]
        base = f[i] + (cut[i] if i else 0.0)
        if not np.isfinite(base):
            continue
        seen: set[int] = set()
        counted: set[int] = set()
        mem = 0.0
        for j in range(i, L):
            g = seq[j]
            if g not in seen:
                seen.add(g)
                mem += unit_mem[g]
                for t in forced.get(g, ()):
                    if t not in counted:
                        counted.add(t)
                        mem += float(sizes[t])
            if mem > tol:
                break
            if base < f[j + 1]:
                f[j + 1] = base
    return f[L]


def segmentation_cost(problem: Problem, path: list[int], node_mem: np.ndarray, capacity: float,
                      held: Held | None = None) -> float:
    """Cheapest total comm of edges cutting ``path`` into runs whose memory fits ``capacity``
    (each colocation unit counted once per run, with its whole memory; an edge inside a unit
    cannot be cut); inf if no such cutting exists. With ``held`` (peak model), a run also holds
    every tensor one of its units forces onto its device while ``held.x`` runs
    (formulations/saved_bytes.py), each once."""
    un = units(problem)
    unit_mem = np.array([float(node_mem[m].sum()) for m in un.members])
    edge_of = {(int(u), int(v)): e for e, (u, v) in enumerate(zip(problem.src.tolist(), problem.dst.tolist()))}
    cut_cost = [0.0] + [np.inf if un.of[path[i - 1]] == un.of[path[i]] else float(problem.comm[edge_of[(path[i - 1], path[i])]])
                        for i in range(1, len(path))]
    return _cheapest_runs([int(un.of[v]) for v in path], cut_cost, unit_mem, held, problem, capacity)


def unit_sequence_cost(problem: Problem, path: list[int], node_mem: np.ndarray, capacity: float,
                       held: Held | None = None) -> float:
    """Like :func:`segmentation_cost`, over the path's units in order of first visit instead of
    its nodes. Units u_1, u_2, ... are cut into runs of consecutive units on one device; where two
    consecutive units are apart, every path edge between them pays its comm. On a training
    graph the path goes forward through the layers and back, and a layer's forward and backward
    nodes form one unit: a cut between two layers then pays the activation forward and the
    gradient backward, which a cut of the path's nodes would count as two independent choices.
    Valid for any placement: its units, in this order, split into maximal runs on one device; each
    run fits one device (with ``held``, its forced tensors too), and every counted edge joins two
    units on different devices, each counted once."""
    un = units(problem)
    order: list[int] = []
    index: dict[int, int] = {}
    for v in path:
        g = int(un.of[v])
        if g not in index:
            index[g] = len(order)
            order.append(g)
    edge_of = {(int(u), int(v)): e for e, (u, v) in enumerate(zip(problem.src.tolist(), problem.dst.tolist()))}
    cut = np.zeros(len(order))  # cut[k]: comm paid when units k-1 and k are apart
    for a, b in zip(path, path[1:]):
        ia, ib = index[int(un.of[a])], index[int(un.of[b])]
        if abs(ia - ib) == 1:
            cut[max(ia, ib)] += float(problem.comm[edge_of[(a, b)]])
    unit_mem = np.array([float(node_mem[m].sum()) for m in un.members])
    return _cheapest_runs(order, cut, unit_mem, held, problem, capacity)


def path_lower_bound(problem: Problem, memory_model: str = "static") -> float:
    """The best memory-aware path bound over a few candidate paths (see the module docstring)."""
    if problem.n == 0:
        return 0.0
    node_mem = problem.param_bytes + (problem.out_bytes if memory_model == "static" else 0.0)
    capacity = float(problem.memory.max())
    if not np.isfinite(capacity):
        capacity = np.inf
    total_mem = float(node_mem.sum()) or 1.0
    scale_t = float(problem.time.sum()) or 1.0
    un = units(problem)
    inter = (un.of[problem.src] != un.of[problem.dst]).astype(float)
    candidates = []
    for wm in (0.0, 0.5, 1.0, 4.0, None):
        if wm is None:
            w, ew = node_mem / total_mem, np.zeros(problem.m)
        else:
            w = problem.time / scale_t + wm * node_mem / total_mem
            ew = problem.comm / scale_t
        candidates.append(best_path(problem, w, ew))
        if wm is not None:
            candidates.append(best_path(problem, w, ew * inter))
    helds: list[Held] = []
    if memory_model == "peak" and np.isfinite(capacity):
        helds = held_tensors(problem, problem.n if problem.n <= PATH_ALL_NODES else PATH_CUT_NODES)
    best = 0.0
    for idx, path in enumerate(candidates):
        t = float(problem.time[path].sum())
        costs = [segmentation_cost(problem, path, node_mem, capacity) if np.isfinite(capacity) else 0.0]
        if np.isfinite(capacity):
            costs.append(unit_sequence_cost(problem, path, node_mem, capacity))
        if helds and idx == 0:  # every x on the first path; the x that bound best on the others
            by_x = [(max(segmentation_cost(problem, path, node_mem, capacity, h),
                          unit_sequence_cost(problem, path, node_mem, capacity, h)), h) for h in helds]
            by_x.sort(key=lambda c: (not np.isfinite(c[0]), -c[0] if np.isfinite(c[0]) else 0.0))
            costs += [c for c, _ in by_x]
            helds = [h for _, h in by_x[:PATH_CUT_NODES]]
        elif helds:
            costs += [segmentation_cost(problem, path, node_mem, capacity, h) for h in helds]
            costs += [unit_sequence_cost(problem, path, node_mem, capacity, h) for h in helds]
        for cost in costs:
            if np.isfinite(cost):
                best = max(best, t + cost)
    return best
