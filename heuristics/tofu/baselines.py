"""Partitioned plans Tofu is compared with: pure data parallelism.

Data parallelism splits every operator by the batch and keeps the parameters whole on every
device: each tensor with a batch dimension is split along it, every other tensor (parameters,
optimizer states, weight gradients) is a replica; an operator splits its batch variable when it has
one (a weight gradient is then a partial sum all-reduced into its replica) and runs whole otherwise
(the optimizer's updates run on every device). It is a :class:`~placement.partition.plan.Plan` like
Tofu's, so the same evaluator measures both.
"""
from __future__ import annotations

from placement.partition.graph import PGraph
from placement.partition.ops import REPLICA
from placement.partition.plan import Plan, apply_step, factorize, initial_shapes, layout_ok


def data_parallel_plan(g: PGraph, k: int, batch: int) -> Plan:
    """Split by the batch (the first dimension of extent ``batch``) over ``k`` devices."""
    factors = factorize(k)
    shapes, extents = initial_shapes(g)
    bdim = [next((d for d, e in enumerate(t.shape) if e == batch), None) if t.shape is not None else None for t in g.tensors]
    bvar = []
    for op in g.ops:
        d = op.desc
        bvar.append(next((v for v, e in d.extents.items() if e == batch), None) if d is not None and op.role == "op" else None)
    plan = Plan(factors, [], [])
    for q in factors:
        lay = [("split", bdim[t]) if bdim[t] is not None and layout_ok(shapes[t], ("split", bdim[t]), q) else REPLICA
               for t in range(len(g.tensors))]
        strat = [v if v is not None and extents[o][v] % q == 0 and extents[o][v] >= q else None for o, v in enumerate(bvar)]
        plan.layouts.append(lay)
        plan.strategies.append(strat)
        apply_step(shapes, extents, lay, strat, q)
    return plan
