"""Appendix B preprocessing: the forward DAG of *units* the max-load DP runs on.

A unit is a set of original nodes the DP keeps together: the forward nodes of one colocation class
(colorClass) with the backward nodes of that class, a forward node without class, or an *orphaned*
backward class (no forward node) represented by an artificial forward image. Unit edges are the
forward edges between units plus, for every backward edge touching an orphan, the mirrored forward
edge (v, u) between the images. Strongly connected components are contracted (a contiguous split
that respects colocation keeps each one on one device), so the result is a DAG. Non-uniform
outgoing costs need no subdivision here: placement.objectives prices each such edge as its own
tensor, which is what the subdivision of Appendix B computes.

With ``linearize`` (DPL, Section 5.1.2) a DFS topological order of the units is added as a path of
artificial edges, leaving |units| + 1 ideals.
"""
from __future__ import annotations

from dataclasses import dataclass

import networkx as nx
import numpy as np

from placement.objectives import is_backward
from placement.problem import Problem


@dataclass
class Units:
    members: list[np.ndarray]  # original node indices per unit, units in topological order
    succ: list[list[int]]  # unit DAG successors (indices into members)
    pred: list[list[int]]
    orphans: int  # number of artificial forward images made for orphaned backward classes

    @property
    def count(self) -> int:
        return len(self.members)


def build_units(problem: Problem, linearize: bool = False) -> Units:
    n = problem.n
    back = is_backward(problem)
    col = problem.colocate
    unit_of = np.full(n, -1, dtype=np.int64)
    count = 0
    fw_unit_of_class: dict[int, int] = {}
    for v in range(n):  # forward nodes first: one unit per class, one per classless node
        if back[v]:
            continue
        g = int(col[v])
        if g >= 0:
            if g not in fw_unit_of_class:
                fw_unit_of_class[g] = count
                count += 1
            unit_of[v] = fw_unit_of_class[g]
        else:
            unit_of[v] = count
            count += 1
    orphan_unit_of_class: dict[int, int] = {}
    orphans = 0
    is_orphan = np.zeros(n, dtype=bool)
    for v in range(n):
        if not back[v]:
            continue
        g = int(col[v])
        if g >= 0 and g in fw_unit_of_class:
            unit_of[v] = fw_unit_of_class[g]
            continue
        is_orphan[v] = True
        if g >= 0:
            if g not in orphan_unit_of_class:
                orphan_unit_of_class[g] = count
                count += 1
                orphans += 1
            unit_of[v] = orphan_unit_of_class[g]
        else:
            unit_of[v] = count
            count += 1
            orphans += 1
    g = nx.DiGraph()
    g.add_nodes_from(range(count))
    for u, v in zip(problem.src.tolist(), problem.dst.tolist()):
        a, b = int(unit_of[u]), int(unit_of[v])
        if a == b:
            continue
        if not back[u] and not back[v]:
            g.add_edge(a, b)
        elif back[u] and back[v] and (is_orphan[u] or is_orphan[v]):
            g.add_edge(b, a)  # mirror image of a backward edge
    cond = nx.condensation(g)
    mapping = cond.graph["mapping"]
    order = list(nx.lexicographical_topological_sort(cond, key=lambda c: min(cond.nodes[c]["members"])))
    pos = {c: i for i, c in enumerate(order)}
    scc_of_unit = np.array([pos[mapping[u]] for u in range(count)], dtype=np.int64)
    final = scc_of_unit[unit_of]
    members = [np.flatnonzero(final == i) for i in range(len(order))]
    succ = [sorted({pos[d] for d in cond.successors(c)}) for c in order]
    if linearize:
        lin = _dfs_order(succ)
        rank = {u: i for i, u in enumerate(lin)}
        members = [members[u] for u in lin]
        succ = [sorted({rank[w] for w in succ[u]}) for u in lin]
        for i in range(len(lin) - 1):
            if i + 1 not in succ[i]:
                succ[i].append(i + 1)
    pred: list[list[int]] = [[] for _ in members]
    for a, ws in enumerate(succ):
        for b in ws:
            pred[b].append(a)
    return Units(members, succ, pred, orphans)


def _dfs_order(succ: list[list[int]]) -> list[int]:
    """A topological order from a depth-first traversal: reverse postorder from the sources."""
    n = len(succ)
    indeg = [0] * n
    for ws in succ:
        for w in ws:
            indeg[w] += 1
    seen = [False] * n
    post: list[int] = []
    for root in range(n):
        if indeg[root] or seen[root]:
            continue
        stack = [(root, iter(succ[root]))]
        seen[root] = True
        while stack:
            v, it = stack[-1]
            nxt = next(it, None)
            if nxt is None:
                stack.pop()
                post.append(v)
            elif not seen[nxt]:
                seen[nxt] = True
                stack.append((nxt, iter(succ[nxt])))
    return post[::-1]
