"""The tensor view of a problem that operator partitioning works on.

A :class:`Problem` with ``node_meta``/``edge_meta`` becomes a :class:`PGraph`: one :class:`Tensor`
per node output (its shape and bytes from ``node_meta``), and per node which tensor feeds each of
its input slots (from ``edge_meta``; by matching shapes when an edge has none). Nodes are
``source`` (graph inputs and parameters: no compute, their tensors may be laid out freely),
``sink`` (graph outputs) or ``op`` (with an :class:`~placement.partition.ops.OpDesc`, or None
when unpartitionable).

Moving ``b`` bytes of a tensor costs ``link.comm(b)`` when the problem has a link model, else
``b * rate`` where ``rate`` is the tensor's edge ``comm`` divided by its bytes: the same price per
byte the placement model charges for moving the whole tensor.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ..problem import Problem, ProblemError
from .ops import SINKS, SOURCES, OpDesc, _shape, align_dims, describe, op_name, tensor_bytes


@dataclass
class Tensor:
    producer: int
    slot: int
    shape: tuple[int, ...] | None
    nbytes: float
    rate: float = 0.0  # time per byte when the problem has no link model


@dataclass
class POp:
    role: str  # "source", "sink", "op", or "placed" (kept whole on ``device``: the hybrid)
    desc: OpDesc | None
    inputs: list[int]  # tensor per input slot (-1: not produced in the graph)
    outputs: list[int]  # tensor per output slot
    in_maps: list[list[int | None] | None] = field(default_factory=list)  # per slot: tensor dim of each slot dim (None: same)
    device: int = -1  # the device of a "placed" operator


@dataclass
class PGraph:
    problem: Problem
    tensors: list[Tensor]
    ops: list[POp]
    consumers: list[list[int]] = field(default_factory=list)  # per tensor: consuming nodes

    def comm_time(self, t: int, nbytes: float) -> float:
        """Time to move ``nbytes`` of tensor ``t`` between two devices (without the link latency)."""
        link = self.problem.link
        if link is not None:
            return nbytes / link.bandwidth
        return nbytes * self.tensors[t].rate


def build_graph(problem: Problem) -> PGraph:
    """The tensor view of ``problem``; raises :class:`ProblemError` without ``node_meta``."""
    if problem.node_meta is None:
        raise ProblemError("operator partitioning needs node_meta (op types and shapes); this problem has none")
    metas = problem.node_meta
    tensors: list[Tensor] = []
    ops: list[POp] = []
    for i, meta in enumerate(metas):
        meta = meta or {}
        outs = meta.get("outputs") or []
        ids = []
        for j, rec in enumerate(outs):
            ids.append(len(tensors))
            tensors.append(Tensor(i, j, _shape(rec), tensor_bytes(rec)))
        if not outs and problem.out_bytes[i] > 0:  # an output of unknown shape: never split
            ids.append(len(tensors))
            tensors.append(Tensor(i, 0, None, float(problem.out_bytes[i])))
        name = op_name(meta.get("op"))
        n_in = len(meta.get("inputs") or [])
        # Ops without tensor inputs (placeholders, aten.empty, arange, zeros) create their outputs
        # in any layout: each worker makes its own slice.
        role = "source" if name in SOURCES or n_in == 0 else ("sink" if name in SINKS else "op")
        ops.append(POp(role, describe(meta) if role == "op" else None, [-1] * n_in, ids, [None] * n_in))
    consumers: list[list[int]] = [[] for _ in tensors]
    rate_time = np.zeros(len(tensors))
    for e in range(problem.m):
        u, v = int(problem.src[e]), int(problem.dst[e])
        em = problem.edge_meta[e] if problem.edge_meta is not None else None
        outs = ops[u].outputs
        if not outs:
            continue
        for part in (em.get("tensors") or [em]) if em else [{}]:
            j = int(part.get("src_output", 0))
            if not 0 <= j < len(outs):
                raise ProblemError(f"edge {problem.ids[u]!r} -> {problem.ids[v]!r}: src_output {j} but the producer has {len(outs)} outputs")
            t = outs[j]
            slots = list(part.get("dst_inputs", []))
            if not slots:
                slots = _match_slots(metas[v] or {}, ops[v].inputs, tensors[t].shape)
            for s in slots:
                if not 0 <= int(s) < len(ops[v].inputs):
                    raise ProblemError(f"edge {problem.ids[u]!r} -> {problem.ids[v]!r}: dst_inputs slot {s} but the consumer has {len(ops[v].inputs)} inputs")
                ops[v].inputs[int(s)] = t
                seen_as = _shape(((metas[v] or {}).get("inputs") or [])[int(s)])
                if seen_as is not None and tensors[t].shape is not None and seen_as != tensors[t].shape:
                    ops[v].in_maps[int(s)] = dim_map(seen_as, tensors[t].shape)
            if v not in consumers[t]:
                consumers[t].append(v)
            rate_time[t] = max(rate_time[t], float(problem.comm[e]))
    for t, ten in enumerate(tensors):
        ten.rate = rate_time[t] / ten.nbytes if ten.nbytes > 0 else 0.0
    return PGraph(problem, tensors, ops, consumers)


def _match_slots(meta: dict, filled: list[int], shape: tuple[int, ...] | None) -> list[int]:
    """Without edge_meta: the first free input slot whose shape equals the tensor's."""
    for s, rec in enumerate(meta.get("inputs") or []):
        if filled[s] < 0 and _shape(rec) == shape:
            return [s]
    return []


def dim_map(seen: tuple[int, ...], shape: tuple[int, ...]) -> list[int | None]:
    """For each dim of a consumer's view ``seen`` of a tensor of ``shape`` (importers fold views
    such as ``t``, ``transpose`` and ``view`` into the edge), the tensor dim it is, or None.

    Same rank and the same extents: a permutation (2-D: the transpose; otherwise each extent must
    be unique). Otherwise dims equal in a common prefix or suffix map to each other."""
    if len(seen) == len(shape) and sorted(seen) == sorted(shape):
        if len(seen) == 2:
            return [1, 0] if seen == shape[::-1] else [0, 1]
        out: list[int | None] = []
        for j, ext in enumerate(seen):
            cands = [i for i, e in enumerate(shape) if e == ext]
            out.append(cands[0] if len(cands) == 1 else (j if shape[j] == ext else None))
        return out
    return align_dims(shape, seen)


def with_placed(g: PGraph, placed: dict[int, int]) -> PGraph:
    """A copy of ``g`` where the operators in ``placed`` are kept whole on the given device (a
    hybrid plan): the search leaves them alone and the plan evaluator runs each on its device."""
    ops = [POp("placed", None, list(op.inputs), list(op.outputs), list(op.in_maps), placed[o]) if o in placed else op
           for o, op in enumerate(g.ops)]
    return PGraph(g.problem, g.tensors, ops, g.consumers)
