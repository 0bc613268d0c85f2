"""Tofu's coarsening, as the DP uses it.

- *Coalescing element-wise operators*: the inputs and output of an element-wise operator (same
  shape, no broadcast) are tied into one variable, so runs of element-wise operators (activations,
  the optimizer's updates) share one layout. This restricts plans (the DP is exact over the tied
  variables); ``tie=False`` lifts it.
- *Grouping forward with backward* and *merging unrolled timesteps*: the DP (heuristics.tofu.dp)
  eliminates variables in a greedy min-weight order, which eliminates each layer's weights and
  gradients together with the layer; unrolled timesteps of one cell are already tied by the
  element-wise operators that carry their state. Neither restricts the plans considered: the DP is
  exact for any order, the order only sets its cost.
"""
from __future__ import annotations

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
            members = [t for t in members if g.tensors[t].shape == shape and g.ops[g.tensors[t].producer].role != "placed"]
            for t in members[1:]:
                a, b = find(members[0]), find(t)
                if a != b:
                    parent[max(a, b)] = min(a, b)
    roots: dict[int, int] = {}
    return [roots.setdefault(find(t), len(roots)) for t in range(len(g.tensors))]
