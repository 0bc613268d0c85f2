"""Appendix B preprocessing: the forward DAG of *units* the max-load DP runs on.

A unit is a set of original nodes the DP keeps together: the forward nodes of one colocation class
(colorClass) with the backward nodes of that class, a forward node without class, or an *orphaned*
backward class (no forward node) represented by an artificial forward image. Unit edges are the
forward edges between units plus, for every backward edge touching an orphan, the mirrored forward
edge (v, u) between the images. Strongly connected components are contracted (a contiguous split
that respects colocation keeps each one on one device), so the result is a DAG. Non-uniform
outgoing costs need no subdivision here: placement.objectives prices each such edge as its own
tensor, which is what the subdivision of Appendix B computes.

With ``merge_leaves`` every *free leaf* unit is merged into its only neighbour unit: a unit whose
nodes all take zero time (accelerator and CPU), that has exactly one neighbour P in the unit DAG
(one predecessor and no successor, or one successor and no predecessor), all of whose nodes are
supported on accelerators, and which sends tensors only to P and reads tensors only from P.
Applied only when the whole graph fits in one accelerator's memory (then memory never binds). This
is what the published ideal counts imply (layer GNMT 17,914 ideals, layer BERT-24 30) and it keeps
the DP exact over unit pipelines: moving such a unit U to P's device in any unit pipeline adds no
compute and no crossing (U's tensors with P become internal, U stops reading P's tensor elsewhere),
keeps every device set convex (U is a sink or source of the unit DAG attached to P
alone, so no path passes through U) and keeps the pipeline order (U's only edges are to P).

With ``linearize`` (DPL, Section 5.1.2) a DFS topological order of the units is added as a path of
artificial edges, leaving |units| + 1 ideals.
"""
from __future__ import annotations

from dataclasses import dataclass

import networkx as nx
import numpy as np

from placement.objectives import cpu_time, is_backward, node_bytes, supported, tensors
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


def build_units(problem: Problem, linearize: bool = False, merge_leaves: bool = False) -> Units:
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
    if merge_leaves:
        members, succ = _merge_free_leaves(problem, members, succ)
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


def _merge_free_leaves(problem: Problem, members: list[np.ndarray],
                       succ: list[list[int]]) -> tuple[list[np.ndarray], list[list[int]]]:
    """Merge every free leaf unit (module docstring) into its neighbour; units stay in topological
    order (a merged unit takes its neighbour's place)."""
    if node_bytes(problem).sum() > float(problem.memory.min()):
        return members, succ
    nu = len(members)
    pred: list[list[int]] = [[] for _ in range(nu)]
    for a, ws in enumerate(succ):
        for b in ws:
            pred[b].append(a)
    unit_of = np.empty(problem.n, dtype=np.int64)
    for u, mem in enumerate(members):
        unit_of[mem] = u
    tens = tensors(problem)
    # per unit: units its tensors go to, and units producing the tensors it reads
    sends: list[set[int]] = [set() for _ in range(nu)]
    reads: list[set[int]] = [set() for _ in range(nu)]
    prod_unit = unit_of[tens.producer]
    for e, t in enumerate(tens.of_edge.tolist()):
        a, b = int(prod_unit[t]), int(unit_of[problem.dst[e]])
        if a != b:
            sends[a].add(b)
            reads[b].add(a)
    busy = problem.time + cpu_time(problem)
    sup = supported(problem)
    cand: dict[int, int] = {}
    for u in range(nu):
        mem = members[u]
        if np.any(busy[mem] != 0) or not sup[mem].all():
            continue
        if not succ[u] and len(pred[u]) == 1:
            p = pred[u][0]
        elif not pred[u] and len(succ[u]) == 1:
            p = succ[u][0]
        else:
            continue
        if sends[u] <= {p} and reads[u] <= {p}:
            cand[u] = p
    target = list(range(nu))
    for u, p in cand.items():
        if p not in cand:  # a leaf attached to a leaf (a two-unit component) stays
            target[u] = p
    keep = [u for u in range(nu) if target[u] == u]
    if len(keep) == nu:
        return members, succ
    pos = {u: i for i, u in enumerate(keep)}
    merged: list[list[np.ndarray]] = [[] for _ in keep]
    for u in range(nu):
        merged[pos[target[u]]].append(members[u])
    new_members = [np.sort(np.concatenate(ms)) for ms in merged]
    new_succ = [sorted({pos[target[w]] for w in succ[u] if target[w] != u}) for u in keep]
    return new_members, new_succ


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
