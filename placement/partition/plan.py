"""Partitioned plans (Tofu) and their evaluation.

A :class:`Plan` splits the graph over ``k = q_1 * ... * q_m`` devices in ``m`` steps. At step ``i``
every tensor gets a *layout* (split its dimension ``d`` evenly ``q_i`` ways, ``("split", d)``, or
hold it whole on every worker, ``REPLICA``) and every operator a *strategy* (the index variable it
splits ``q_i`` ways, or None: every worker runs it whole on whole inputs). Device ``d`` has mixed
radix digits ``(d_1, .., d_m)``; at step ``i`` it exchanges data with the devices that differ from
it in digit ``i`` only (its worker group's other parts).

Communication (Tofu's recursive cost model, docs/partitioning.md): at step ``i`` each of the
``q_1 .. q_{i-1}`` worker groups is responsible for a ``1 / (q_1 .. q_{i-1})`` share of every
tensor, and a conversion moves a fixed fraction of that share: from layout split ``e`` to
needed split ``d != e`` ``(1 - 1/q)``, to whole ``(q - 1)``; from a partial sum to a split layout
``(q - 1)`` (reduce-scatter), to a replica ``2 (q - 1)`` (all-reduce); from a split result to
another split ``(1 - 1/q)``, to a replica ``(q - 1)``. Summed over the groups, step ``i`` moves
``coefficient * bytes`` for each conversion whatever the earlier steps chose: the order of the
steps does not change a plan's cost (Tofu's commutativity), and each device receives ``1/k`` of it.

:func:`plan_cost` is that communication in bytes (what the search minimises); :func:`expand` turns
a plan into a placement problem of ``n * k`` shard nodes (plus nodes holding received inputs and
re-laid-out outputs) whose placement is fixed, so :func:`evaluate_plan` measures makespan and
per-device memory with the one evaluator (placement.evaluator), under the problem's own delay and
memory models: a partitioned plan and a placement are compared on one scale.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Sequence

import numpy as np

from ..evaluator import Evaluation, evaluate
from ..problem import Problem, make_problem
from .graph import PGraph
from .ops import PARTIAL, REPLICA, WHOLE

Layout = Any  # ("split", dim) or REPLICA


class PlanError(ValueError):
    """A plan that cannot be run: the message names the step, tensor or operator."""


@dataclass
class Plan:
    factors: list[int]
    layouts: list[list[Layout]]  # per step, per tensor
    strategies: list[list[str | None]]  # per step, per node

    @property
    def k(self) -> int:
        return math.prod(self.factors)

    def reordered(self, order: Sequence[int]) -> "Plan":
        """The same steps applied in another order."""
        return Plan([self.factors[i] for i in order], [self.layouts[i] for i in order], [self.strategies[i] for i in order])


def factorize(k: int) -> list[int]:
    """k = k_1 * .. * k_m with k_i >= k_{i+1} (Tofu: prime factors, largest first; 2^m -> 2s)."""
    if k < 1:
        raise ValueError(f"k must be positive, got {k}")
    out, p, rest = [], 2, k
    while p * p <= rest:
        while rest % p == 0:
            out.append(p)
            rest //= p
        p += 1
    if rest > 1:
        out.append(rest)
    return sorted(out, reverse=True)


# ----- conversion coefficients -------------------------------------------------------------------

def conv_in(layout: Layout, need: Any, q: int) -> float:
    """Bytes moved (a fraction of the tensor's share) to give each worker what it needs."""
    if layout == REPLICA or layout == need:
        return 0.0
    if need == WHOLE:
        return float(q - 1)
    return 1.0 - 1.0 / q


def conv_out(form: Any, layout: Layout, q: int) -> float:
    """Bytes moved to turn what each worker produced into the tensor's layout."""
    if form == REPLICA or form == layout:
        return 0.0
    if form == PARTIAL:
        return float(2 * (q - 1)) if layout == REPLICA else float(q - 1)
    return float(q - 1) if layout == REPLICA else 1.0 - 1.0 / q


def needs(g: PGraph, node: int, var: str | None, layouts: Sequence[Layout]) -> list[Any]:
    """Per input slot, what each worker needs under strategy ``var`` (sinks take any layout)."""
    op = g.ops[node]
    if op.role in ("sink", "placed"):  # placed: its inputs are gathered whole outside the steps
        return [layouts[t] if t >= 0 else REPLICA for t in op.inputs]
    if op.desc is None or var is None:
        return [WHOLE] * len(op.inputs)
    out = []
    for s in range(len(op.inputs)):
        need = op.desc.input_need(s, var)
        view = op.in_maps[s] if s < len(op.in_maps) else None
        if view is not None and need != WHOLE:  # the op reads a view of the tensor (a folded t / view)
            d = view[need[1]] if need[1] < len(view) else None
            need = WHOLE if d is None else ("split", d)
        out.append(need)
    return out


def forms(g: PGraph, node: int, var: str | None, layouts: Sequence[Layout]) -> list[Any]:
    """Per output, what each worker produces under strategy ``var`` (sources: their layout)."""
    op = g.ops[node]
    if op.role in ("source", "placed"):
        return [layouts[t] for t in op.outputs]
    if op.desc is None or var is None or len(op.desc.outputs) != len(op.outputs):
        return [REPLICA] * len(op.outputs)
    return [op.desc.output_form(s, var) for s in range(len(op.outputs))]


def op_step_cost(g: PGraph, node: int, var: str | None, layouts: Sequence[Layout], q: int) -> float:
    """Bytes one operator's conversions move at one step (all groups together)."""
    total = 0.0
    for t, need in zip(g.ops[node].inputs, needs(g, node, var, layouts)):
        # A placed producer's tensor is fetched from its device (expand counts it), not converted.
        if t >= 0 and g.ops[g.tensors[t].producer].role != "placed":
            total += conv_in(layouts[t], need, q) * g.tensors[t].nbytes
    for t, form in zip(g.ops[node].outputs, forms(g, node, var, layouts)):
        total += conv_out(form, layouts[t], q) * g.tensors[t].nbytes
    return total


# ----- validity: shapes shrink step by step -------------------------------------------------------

def initial_shapes(g: PGraph) -> tuple[list[list[int] | None], list[dict[str, int]]]:
    """Current tensor shapes and operator extents before any step."""
    shapes = [list(t.shape) if t.shape is not None else None for t in g.tensors]
    extents = [dict(op.desc.extents) if op.desc is not None else {} for op in g.ops]
    return shapes, extents


def layout_ok(shape: list[int] | None, layout: Layout, q: int) -> bool:
    if layout == REPLICA:
        return True
    d = layout[1]
    return shape is not None and 0 <= d < len(shape) and shape[d] >= q and shape[d] % q == 0


def apply_step(shapes: list, extents: list[dict[str, int]], layouts: Sequence[Layout], strategies: Sequence[str | None], q: int) -> None:
    """Shrink shapes and extents by one step (in place)."""
    for t, lay in enumerate(layouts):
        if lay != REPLICA:
            shapes[t][lay[1]] //= q
    for o, var in enumerate(strategies):
        if var is not None and var in extents[o]:
            extents[o][var] //= q


def check_plan(g: PGraph, plan: Plan) -> None:
    """Raise :class:`PlanError` if a step splits a dimension that does not divide evenly."""
    if len(plan.layouts) != len(plan.factors) or len(plan.strategies) != len(plan.factors):
        raise PlanError("a plan needs one layout list and one strategy list per step")
    shapes, extents = initial_shapes(g)
    for i, q in enumerate(plan.factors):
        lay, strat = plan.layouts[i], plan.strategies[i]
        if len(lay) != len(g.tensors) or len(strat) != len(g.ops):
            raise PlanError(f"step {i}: {len(lay)} layouts for {len(g.tensors)} tensors, {len(strat)} strategies for {len(g.ops)} nodes")
        for t, layout in enumerate(lay):
            if not layout_ok(shapes[t], layout, q):
                ten = g.tensors[t]
                raise PlanError(f"step {i}: tensor {ten.slot} of node {g.problem.ids[ten.producer]!r} (shape {shapes[t]}) cannot be laid out {layout} over {q}")
        for o, var in enumerate(strat):
            if var is None:
                continue
            ext = extents[o].get(var)
            if ext is None or ext < q or ext % q:
                raise PlanError(f"step {i}: node {g.problem.ids[o]!r} cannot split {var!r} (extent {ext}) {q} ways")
        apply_step(shapes, extents, lay, strat, q)


def plan_cost(g: PGraph, plan: Plan) -> float:
    """Total bytes the plan's conversions move (the quantity Tofu minimises)."""
    check_plan(g, plan)
    return sum(op_step_cost(g, o, plan.strategies[i][o], plan.layouts[i], q)
               for i, q in enumerate(plan.factors) for o in range(len(g.ops)))


# ----- expansion into a placement of shard nodes ---------------------------------------------------

@dataclass
class PlanEvaluation:
    """What the evaluator says of a partitioned plan."""

    comm_bytes: float  # plan_cost
    evaluation: Evaluation  # of the expanded problem, shard nodes on their devices
    expanded: Problem
    single_memory: float  # memory of the whole graph on one device, same memory model
    replicated_ops: int  # operators some step runs whole on every worker
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def makespan(self) -> float:
        return self.evaluation.makespan

    @property
    def memory(self) -> np.ndarray:
        return self.evaluation.memory

    def feasible(self, problem: Problem) -> bool:
        return bool(np.all(self.memory <= problem.memory * (1 + 1e-12) + 1e-9))


def _partners(k: int, factors: Sequence[int], step: int, d: int) -> list[int]:
    """Devices that differ from ``d`` only in mixed-radix digit ``step`` (step 0 most significant)."""
    stride = math.prod(factors[step + 1:])
    digit = (d // stride) % factors[step]
    base = d - digit * stride
    return [base + x * stride for x in range(factors[step]) if x != digit]


def _fraction(steps: Sequence[Any], factors: Sequence[int]) -> float:
    """Share of a tensor one worker holds: 1/q for each step that splits it."""
    f = 1.0
    for form, q in zip(steps, factors):
        if form not in (REPLICA, PARTIAL, WHOLE):
            f /= q
    return f


def expand(g: PGraph, plan: Plan) -> tuple[Problem, np.ndarray]:
    """The placement problem a plan runs as, and its (fixed) placement.

    Node ``o@d`` (its id uses the node index, its name the node id) is operator ``o``'s shard on
    device ``d``: its time is ``time_o`` divided by every ``q_i`` whose step splits it, its output is what it produces (a slice, or a full partial sum or
    replica), its parameters its share. ``o@d.in`` (time 0) holds the inputs ``d`` receives for
    ``o``; ``o@d.out`` (time 0) holds ``o``'s outputs once re-laid out. Edges carry the bytes the
    conversions move between partner devices, priced like the problem's edges."""
    check_plan(g, plan)
    p = g.problem
    factors, k = plan.factors, plan.k
    link = p.link
    nodes: list[dict[str, Any]] = []
    pair: dict[tuple[str, str], list[float]] = {}  # (src, dst) -> [bytes, time]
    ids = [str(o) for o in range(p.n)]  # shard ids by node index (user ids may clash once stringified)
    names = [str(x) for x in p.ids]

    def add_edge(a: str, b: str, nbytes: float, time: float) -> None:
        acc = pair.setdefault((a, b), [0.0, 0.0])
        acc[0] += nbytes
        acc[1] += time

    steps = range(len(factors))
    holder: dict[int, str] = {}  # tensor's producer node name suffix: "" or ".out"
    fixed: dict[tuple[str, str], float] = {}  # edges between placed operators: the problem's own comm
    extra = 0.0  # bytes moved to and from placed operators (outside the steps' conversions)
    for o, op in enumerate(g.ops):
        if op.role == "placed":
            nodes.append({"id": f"{ids[o]}@{op.device}", "name": f"{names[o]}@{op.device}", "time": float(p.time[o]),
                          "out_bytes": float(p.out_bytes[o]), "param_bytes": float(p.param_bytes[o])})
            holder[o] = ""
            continue
        strat = [plan.strategies[i][o] for i in steps]
        split_steps = [i for i in steps if strat[i] is not None and op.role == "op" and op.desc is not None]
        work = 1.0 / math.prod(factors[i] for i in split_steps) if op.role == "op" else 1.0 / k
        out_forms = [forms(g, o, strat[i], plan.layouts[i]) for i in steps]
        tot = sum(g.tensors[t].nbytes for t in op.outputs)
        if tot > 0:
            produced = sum(g.tensors[t].nbytes * _fraction([out_forms[i][s] for i in steps], factors) for s, t in enumerate(op.outputs)) / tot
            stored = sum(g.tensors[t].nbytes * _fraction([plan.layouts[i][t] for i in steps], factors) for t in op.outputs) / tot
        else:
            produced = stored = work
        param_share = stored if op.role == "source" else work
        relayout = [[conv_out(out_forms[i][s], plan.layouts[i][t], factors[i]) for i in steps] for s, t in enumerate(op.outputs)]
        has_out = any(c > 0 for row in relayout for c in row)
        holder[o] = ".out" if has_out else ""
        for d in range(k):
            nodes.append({"id": f"{ids[o]}@{d}", "name": f"{names[o]}@{d}", "time": float(p.time[o]) * work,
                          "out_bytes": float(p.out_bytes[o]) * produced, "param_bytes": float(p.param_bytes[o]) * param_share})
            if has_out:
                nodes.append({"id": f"{ids[o]}@{d}.out", "name": f"{names[o]}@{d}.out", "time": 0.0, "out_bytes": float(p.out_bytes[o]) * stored, "param_bytes": 0.0})
                add_edge(f"{ids[o]}@{d}", f"{ids[o]}@{d}.out", 0.0, 0.0)
                for s, t in enumerate(op.outputs):
                    for i in steps:
                        c = relayout[s][i]
                        if c <= 0:
                            continue
                        per = c * g.tensors[t].nbytes / k / (factors[i] - 1)
                        for src in _partners(k, factors, i, d):
                            add_edge(f"{ids[o]}@{src}", f"{ids[o]}@{d}.out", per, g.comm_time(t, per))
    def shards(u: int) -> list[str]:
        op_u = g.ops[u]
        return [f"{ids[u]}@{op_u.device}"] if op_u.role == "placed" else [f"{ids[u]}@{d}{holder[u]}" for d in range(k)]

    for o, op in enumerate(g.ops):
        if op.role == "placed":
            extra += _gather_whole(g, plan, o, op.device, ids, names, holder, nodes, add_edge)
            continue
        need = [needs(g, o, plan.strategies[i][o], plan.layouts[i]) for i in steps]
        from_placed = [t >= 0 and g.ops[g.tensors[t].producer].role == "placed" for t in op.inputs]
        moved = [[conv_in(plan.layouts[i][t], need[i][s], factors[i]) if t >= 0 and not from_placed[s] else 0.0 for i in steps]
                 for s, t in enumerate(op.inputs)]
        recv = sum(moved[s][i] * g.tensors[t].nbytes / k for s, t in enumerate(op.inputs) if t >= 0 for i in steps)
        # A tensor of a placed producer: each device fetches the region it needs from that device.
        fetch = [_fraction([need[i][s] for i in steps], factors) * g.tensors[t].nbytes if from_placed[s] else 0.0
                 for s, t in enumerate(op.inputs)]
        for d in range(k):
            me = f"{ids[o]}@{d}"
            here = recv + sum(f for s, f in enumerate(fetch) if f > 0 and g.ops[g.tensors[op.inputs[s]].producer].device != d)
            if here > 0:
                nodes.append({"id": me + ".in", "name": f"{names[o]}@{d}.in", "time": 0.0, "out_bytes": here, "param_bytes": 0.0})
                add_edge(me + ".in", me, 0.0, 0.0)
            for s, t in enumerate(op.inputs):
                if t < 0:
                    continue
                u = g.tensors[t].producer
                if from_placed[s]:
                    a = g.ops[u].device
                    if a == d or fetch[s] <= 0:
                        add_edge(f"{ids[u]}@{a}", me, 0.0, 0.0)
                    else:
                        add_edge(f"{ids[u]}@{a}", me + ".in", fetch[s], g.comm_time(t, fetch[s]))
                        extra += fetch[s]
                    continue
                src_local = f"{ids[u]}@{d}{holder[u]}"
                if not any(moved[s]):
                    add_edge(src_local, me, 0.0, 0.0)
                    continue
                add_edge(src_local, me + ".in", 0.0, 0.0)
                for i in steps:
                    c = moved[s][i]
                    if c <= 0:
                        continue
                    per = c * g.tensors[t].nbytes / k / (factors[i] - 1)
                    for src in _partners(k, factors, i, d):
                        add_edge(f"{ids[u]}@{src}{holder[u]}", me + ".in", per, g.comm_time(t, per))
    for e in range(p.m):
        u, v = int(p.src[e]), int(p.dst[e])
        if g.ops[u].role == "placed" and g.ops[v].role == "placed":
            a, b = g.ops[u].device, g.ops[v].device
            key = (f"{ids[u]}@{a}", f"{ids[v]}@{b}")
            fixed[key] = max(fixed.get(key, 0.0), float(p.comm[e]) if a != b else 0.0)
        elif not any(t in g.ops[v].inputs for t in g.ops[u].outputs):
            # Tensors that reach a consumer outside node_meta's slots (no slot recorded) still order it.
            targets = shards(v) if g.ops[v].role == "placed" else [f"{ids[v]}@{d}" for d in range(k)]
            for src_name in shards(u):
                for dst_name in targets:
                    if g.ops[u].role == "placed" or g.ops[v].role == "placed" or src_name.split("@")[1].split(".")[0] == dst_name.split("@")[1]:
                        add_edge(src_name, dst_name, 0.0, 0.0)
    edges = []
    for (a, b), (nbytes, time) in pair.items():
        comm = time + (link.latency if link is not None and nbytes > 0 else 0.0)
        edges.append({"src": a, "dst": b, "comm": max(comm, fixed.pop((a, b), 0.0))})
    edges.extend({"src": a, "dst": b, "comm": c} for (a, b), c in fixed.items())
    mem = p.memory if p.k == k else np.full(k, float(p.memory.max()))
    ex = make_problem(nodes, edges, devices=k, memory=list(mem), name=f"{p.name}/partitioned-{k}")
    placement = np.array([int(str(nid).rsplit("@", 1)[1].split(".")[0]) for nid in ex.ids], dtype=np.int64)
    ex.attrs["hybrid_bytes"] = extra
    return ex, placement


def _gather_whole(g: PGraph, plan: Plan, o: int, b: int, ids: list[str], names: list[str], holder: dict[int, str],
                  nodes: list[dict[str, Any]], add_edge: Any) -> float:
    """Inputs of an operator placed on device ``b`` that come from partitioned producers: ``b``
    gathers each tensor whole (its own share is local, the rest comes evenly from the others).
    Placed-to-placed inputs are the problem's own edges. Returns the bytes moved."""
    k = plan.k
    total = 0.0
    recv = 0.0
    wanted: list[tuple[int, float]] = []
    for t in g.ops[o].inputs:
        if t < 0 or g.ops[g.tensors[t].producer].role == "placed":
            continue
        own = _fraction([plan.layouts[i][t] for i in range(len(plan.factors))], plan.factors)
        need = g.tensors[t].nbytes * (1.0 - own)
        wanted.append((t, need))
        recv += need
    me = f"{ids[o]}@{b}"
    if recv > 0:
        nodes.append({"id": me + ".in", "name": f"{names[o]}@{b}.in", "time": 0.0, "out_bytes": recv, "param_bytes": 0.0})
        add_edge(me + ".in", me, 0.0, 0.0)
    for t, need in wanted:
        u = g.tensors[t].producer
        if need <= 0 or k == 1:
            add_edge(f"{ids[u]}@{b}{holder[u]}", me, 0.0, 0.0)
            continue
        per = need / (k - 1)
        add_edge(f"{ids[u]}@{b}{holder[u]}", me + ".in", 0.0, 0.0)
        for d in range(k):
            if d != b:
                add_edge(f"{ids[u]}@{d}{holder[u]}", me + ".in", per, g.comm_time(t, per))
        total += need
    return total


def evaluate_plan(g: PGraph, plan: Plan, memory_model: str = "static") -> PlanEvaluation:
    """Communication, makespan and per-device memory of a plan (the last two by placement.evaluator)."""
    ex, placement = expand(g, plan)
    ev = evaluate(ex, placement, memory_model=memory_model)
    p = g.problem
    replicated = sum(1 for o, op in enumerate(g.ops) if op.role == "op" and any(plan.strategies[i][o] is None for i in range(len(plan.factors))))
    one = p.with_devices(1, memory=math.inf) if not p.has_allowed else p
    single = float(evaluate(one, np.zeros(p.n, dtype=np.int64), memory_model=memory_model).memory[0]) if p.k == 1 or not p.has_allowed \
        else float(np.sum(p.param_bytes + p.out_bytes))
    return PlanEvaluation(plan_cost(g, plan) + float(ex.attrs.get("hybrid_bytes", 0.0)), ev, ex, single, replicated)
