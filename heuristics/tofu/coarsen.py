"""Tofu's coarsening, as the DP uses it.

- *Coalescing element-wise operators*: the inputs and output of an element-wise operator (same
  shape, no broadcast) are tied into one variable, so runs of element-wise operators (activations,
  the optimizer's updates) share one layout. This restricts plans (the DP is exact over the tied
  variables); ``tie=False`` lifts it.
- *Grouping forward with backward* and *merging unrolled timesteps*: the DP adds operators in an
  order where each backward operator sits next to the forward tensors it reads (reverse
  minimum-frontier order, :func:`op_order`), so the frontier, the tensors alive across the cut,
  stays that of a chain. Merging changes only the order here, never the plans considered: the DP
  is exact for any order, the order only sets its cost.
"""
from __future__ import annotations

import math

from placement.partition.graph import PGraph


def tie_classes(g: PGraph, tie: bool = True) -> list[int]:
    """Class (variable) index per tensor: tensors joined by element-wise operators share one."""
    parent = list(range(len(g.tensors)))

    def find(x: int) -> int:
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    if tie:
        for op in g.ops:
            if op.desc is None or not op.desc.elementwise:
                continue
            members = [t for t in op.inputs if t >= 0] + list(op.outputs)
            shape = g.tensors[op.outputs[0]].shape if op.outputs else None
            members = [t for t in members if g.tensors[t].shape == shape]
            for t in members[1:]:
                a, b = find(members[0]), find(t)
                if a != b:
                    parent[max(a, b)] = min(a, b)
    roots: dict[int, int] = {}
    return [roots.setdefault(find(t), len(roots)) for t in range(len(g.tensors))]


def op_order(g: PGraph, classes: list[int], domain: list[int]) -> list[int]:
    """Operators in the order the DP adds them, chosen greedily to keep the frontier small: next
    comes the operator (among those touching the frontier) that adds the fewest new layout states
    and closes the most, ties to the earliest in topological order. On a training graph this puts
    each backward operator right after the forward tensors it reads are complete (Tofu's grouping
    of forward with backward) without having to know which operator is which."""
    users: dict[int, list[int]] = {}
    op_vars: list[list[int]] = []
    for o, op in enumerate(g.ops):
        vs = sorted({classes[t] for t in [t for t in op.inputs if t >= 0] + list(op.outputs) if domain[classes[t]] > 1})
        op_vars.append(vs)
        for c in vs:
            users.setdefault(c, []).append(o)
    weight = {c: math.log(domain[c]) for c in users}
    left = {c: len(u) for c, u in users.items()}
    rank = g.problem.topo_rank
    done = [False] * len(g.ops)
    frontier: set[int] = set()
    order: list[int] = []
    free = sorted((o for o in range(len(g.ops)) if not op_vars[o]), key=lambda o: rank[o])
    order.extend(free)
    for o in free:
        done[o] = True
    remaining = sorted((o for o in range(len(g.ops)) if not done[o]), key=lambda o: rank[o])
    pos = 0
    while len(order) < len(g.ops):
        cands = {o for c in frontier for o in users[c] if not done[o]}
        if not cands:
            while done[remaining[pos]]:
                pos += 1
            cands = {remaining[pos]}

        def score(o: int) -> tuple[float, int]:
            grow = sum(weight[c] for c in op_vars[o] if c not in frontier)
            shrink = sum(weight[c] for c in op_vars[o] if left[c] == 1)
            return (grow - shrink, int(rank[o]))

        best = min(cands, key=score)
        done[best] = True
        order.append(best)
        for c in op_vars[best]:
            left[c] -= 1
            if left[c] == 0:
                frontier.discard(c)
            else:
                frontier.add(c)
    return order
