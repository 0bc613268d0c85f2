"""Connected pieces of a node subset: the parts of a run of the schedule or of a window that the
graph's edges among them hold together (refine moves them whole; window gathering sends them away
whole)."""
from __future__ import annotations

from typing import Mapping, Sequence


def connected_pieces(nodes: Sequence[int], succs: Sequence[Sequence[int]] | Mapping[int, Sequence[int]]) -> list[list[int]]:
    """``nodes`` grouped by the connected components of the graph edges among them, each group in
    the order of ``nodes`` and the groups in the order of their first node; ``succs[v]``: v's
    successors (only edges to other members count)."""
    where = {v: i for i, v in enumerate(nodes)}
    parent = list(range(len(nodes)))

    def root(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    for i, v in enumerate(nodes):
        for w in succs[v]:
            j = where.get(w)
            if j is not None:
                parent[root(j)] = root(i)
    groups: dict[int, list[int]] = {}
    for i, v in enumerate(nodes):
        groups.setdefault(root(i), []).append(v)
    return list(groups.values())
