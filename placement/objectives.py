"""Evaluators of the two objectives of Tarnawski et al. (NeurIPS 2020): pipelined max-load and
single-sample latency. Every max-load/latency method reports the value computed here.

A *split* assigns every node to an accelerator ``0..k-1`` or to a CPU core, written ``-1 - c`` for
core ``c`` (so ``-1`` is the first core). docs/objectives.md states the model in prose.

Max-load (pipelined throughput, time per sample). The load of CPU core c is the sum of
``cpu_latency`` of its nodes (CPUs read and write host memory for free). The load of accelerator d
is the sum of ``time`` (fpgaLatency) of its nodes plus the transfer cost of every *tensor* that
crosses d's boundary: a tensor is the output of a producer node u, sent to its consumers; it crosses
d when u is on d and some consumer is not (u writes it to host memory once) or u is not on d and
some consumer is (d reads it once, however many of its nodes need it). A node's out-edges normally
share one cost (the cost of the tensor); a node whose out-edges carry different costs sends one
tensor per edge (the subdivision of Appendix B). Training graphs: FW_d and BW_d are the loads of
d's forward and backward nodes, tensors counted on the side of their producer; objective
``"max-load"`` is ``max_d (FW_d + BW_d)`` (PipeDream schedule, the paper's objective) and
``"fw+bw"`` is ``max_d FW_d + max_d BW_d`` (GPipe schedule, Appendix A).

Feasibility: static memory (sum of ``param_bytes + out_bytes``) of each accelerator within its
capacity; nodes not ``supported`` on accelerators are on a CPU core; colocation groups on one device
(core); CPU core indices within ``attrs["max_cpus"]``; optionally contiguity of each device's
forward nodes (Definition 3.1, on the forward subgraph) or of all its nodes, or a *pipeline*: the
devices (CPU cores included) can be ordered so that every forward edge, and the mirror image of
every backward edge at an orphaned backward node, goes to the same or a later device (Section 5.1's
pipeline of contiguous subgraphs, the model the DP solves exactly; see :func:`pipeline_violation`).

Latency (Section 4, one sample). Accelerator d may hold up to q *subgraphs*, each contiguous and
invoked once: it starts when every tensor it needs from outside is in host memory, reads them,
computes its nodes, writes its tensors needed outside, and only then are its outputs available; the
subgraphs of one accelerator run one after another in slot order. CPU nodes run as soon as their
inputs are available (CPUs unlimited), taking ``cpu_latency``. Latency = the time the last output is
available.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterable, Sequence

import numpy as np

from .problem import Problem

MAXLOAD_OBJECTIVES = ("max-load", "fw+bw")
OBJECTIVES = MAXLOAD_OBJECTIVES + ("latency",)
CONTIGUITY = ("none", "forward", "all", "pipeline")
_TOL = 1e-9


class SplitError(ValueError):
    """A split that breaks a constraint of the max-load/latency model; the message names it."""


# ----------------------------------------------------------------------------------------------
# problem-side data shared by evaluators and solvers
# ----------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Tensors:
    """The tensors of a problem: producer node, transfer cost, and the edges that carry each."""

    producer: np.ndarray  # per tensor
    cost: np.ndarray  # per tensor
    of_edge: np.ndarray  # tensor index per edge of the problem


def tensors(problem: Problem) -> Tensors:
    """One tensor per producer whose out-edges share a cost; one per edge otherwise (Appendix B)."""
    cached = problem.__dict__.get("_tarnawski_tensors")
    if cached is not None:
        return cached
    of_edge = np.empty(problem.m, dtype=np.int64)
    producer: list[int] = []
    cost: list[float] = []
    ptr, _, eidx = problem.succ_ptr
    for u in range(problem.n):
        edges = eidx[ptr[u]:ptr[u + 1]]
        if edges.size == 0:
            continue
        costs = problem.comm[edges]
        if np.allclose(costs, costs[0], rtol=1e-9, atol=1e-12):
            of_edge[edges] = len(producer)
            producer.append(u)
            cost.append(float(costs.max()))
        else:
            for e in edges.tolist():
                of_edge[e] = len(producer)
                producer.append(u)
                cost.append(float(problem.comm[e]))
    t = Tensors(np.asarray(producer, dtype=np.int64), np.asarray(cost, dtype=float), of_edge)
    problem.__dict__["_tarnawski_tensors"] = t
    return t


def node_attr(problem: Problem, key: str, default: Any) -> np.ndarray:
    """A per-node attribute of the msr-fiddle model, with the default when the input lacks it."""
    arr = problem.node_attrs.get(key)
    if arr is None:
        return np.full(problem.n, default)
    return np.asarray(arr)


def cpu_time(problem: Problem) -> np.ndarray:
    return node_attr(problem, "cpu_latency", 0.0).astype(float)


def supported(problem: Problem) -> np.ndarray:
    return node_attr(problem, "supported", True).astype(bool)


def is_backward(problem: Problem) -> np.ndarray:
    return node_attr(problem, "is_backward", False).astype(bool)


def max_cpus(problem: Problem) -> int:
    return int(problem.attrs.get("max_cpus", 0))


def node_bytes(problem: Problem) -> np.ndarray:
    return problem.param_bytes + problem.out_bytes


# ----------------------------------------------------------------------------------------------
# splits
# ----------------------------------------------------------------------------------------------
def as_split(problem: Problem, split: Any) -> np.ndarray:
    """The device array of a split: a Solution (its ``info['split']`` if present, else its
    placement), a sequence or a mapping node id -> device. Checks ranges."""
    from .solution import Solution

    if isinstance(split, Solution):
        if split.info.get("split") is not None:
            split = split.info["split"]
        elif split.placement is not None:
            split = split.placement
        else:
            raise SplitError(f"solution of {split.method!r} has no split ({split.reason or split.status})")
    if isinstance(split, dict):
        arr = np.full(problem.n, np.iinfo(np.int64).min, dtype=np.int64)
        for nid, dev in split.items():
            if nid not in problem.index:
                raise SplitError(f"split names unknown node {nid!r}")
            arr[problem.index[nid]] = int(dev)
        missing = np.flatnonzero(arr == np.iinfo(np.int64).min)
        if missing.size:
            raise SplitError(f"split misses node {problem.ids[int(missing[0])]!r}")
        split = arr
    arr = np.asarray(split, dtype=np.int64)
    if arr.shape != (problem.n,):
        raise SplitError(f"split has {arr.shape[0] if arr.ndim else 0} entries for {problem.n} nodes")
    bad = np.flatnonzero(arr >= problem.k)
    if bad.size:
        raise SplitError(f"node {problem.ids[int(bad[0])]!r}: device {int(arr[bad[0]])} but only {problem.k} accelerators")
    return arr


def reachability_violation(problem: Problem, members: np.ndarray, restrict: np.ndarray | None = None) -> tuple[int, int, int] | None:
    """A triple (u, v, w) showing ``members`` is not contiguous (u, w in the set, v outside,
    v reachable from u and w from v), or None when it is contiguous. With ``restrict`` (a node
    mask) only paths inside the restricted subgraph count."""
    n = problem.n
    inset = np.zeros(n, dtype=bool)
    inset[members] = True
    keep = np.ones(n, dtype=bool) if restrict is None else restrict
    ptr, nbr, _ = problem.succ_ptr
    # witness[x] = (u, v): x is reachable from outside node v, itself reached from member u
    witness: dict[int, tuple[int, int]] = {}
    for x in problem.topo_order.tolist():
        if not keep[x]:
            continue
        wx = witness.get(x)
        if wx is not None and inset[x]:
            return wx[0], wx[1], x
        for j in range(ptr[x], ptr[x + 1]):
            y = int(nbr[j])
            if not keep[y] or y in witness:
                continue
            if wx is not None:
                witness[y] = wx
            elif inset[x] and not inset[y]:
                witness[y] = (x, y)
    return None


# ----------------------------------------------------------------------------------------------
# max-load
# ----------------------------------------------------------------------------------------------
@dataclass
class MaxLoadEval:
    """Loads of a split. Index d < k: accelerator d; index k + c: CPU core c."""

    value: float  # the chosen objective
    objective: str
    fw: np.ndarray
    bw: np.ndarray
    compute: np.ndarray
    comm: np.ndarray
    memory: np.ndarray  # per accelerator
    violations: list[str] = field(default_factory=list)

    @property
    def load(self) -> np.ndarray:
        return self.fw + self.bw

    @property
    def feasible(self) -> bool:
        return not self.violations

    def breakdown(self, problem: Problem) -> dict[str, Any]:
        k = problem.k
        devs = []
        for i in range(len(self.fw)):
            name = problem.device_names[i] if i < k else f"cpu{i - k}"
            row = {"device": name, "load": float(self.load[i]), "fw": float(self.fw[i]), "bw": float(self.bw[i]),
                   "compute": float(self.compute[i]), "comm": float(self.comm[i])}
            if i < k:
                row["memory"] = float(self.memory[i])
                row["capacity"] = float(problem.memory[i])
            devs.append(row)
        return {"objective": self.objective, "value": self.value, "devices": devs, "violations": list(self.violations)}


def device_loads(problem: Problem, split: np.ndarray, n_cpus: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(fw, bw, compute, comm) per device (k accelerators then n_cpus cores) of a device array."""
    k = problem.k
    slot = np.where(split >= 0, split, k + (-1 - split))
    ndev = k + n_cpus
    bw_node = is_backward(problem)
    t_acc = problem.time
    t_cpu = cpu_time(problem)
    node_time = np.where(split >= 0, t_acc, t_cpu)
    compute_fw = np.bincount(slot[~bw_node], weights=node_time[~bw_node], minlength=ndev)
    compute_bw = np.bincount(slot[bw_node], weights=node_time[bw_node], minlength=ndev)
    comm_fw = np.zeros(ndev)
    comm_bw = np.zeros(ndev)
    if problem.m:
        tens = tensors(problem)
        cross = split[problem.src] != split[problem.dst]
        e = np.flatnonzero(cross)
        t_of = tens.of_edge[e]
        # (tensor, device) pairs paying: the producer's device (out) and each consumer device (in)
        pairs = np.concatenate([np.stack([t_of, split[problem.src[e]]], 1), np.stack([t_of, split[problem.dst[e]]], 1)])
        pairs = pairs[pairs[:, 1] >= 0]
        if pairs.size:
            pairs = np.unique(pairs, axis=0)
            tt, dd = pairs[:, 0], pairs[:, 1]
            back = bw_node[tens.producer[tt]]
            comm_fw += np.bincount(dd[~back], weights=tens.cost[tt[~back]], minlength=ndev)
            comm_bw += np.bincount(dd[back], weights=tens.cost[tt[back]], minlength=ndev)
    fw = compute_fw + comm_fw
    bw = compute_bw + comm_bw
    return fw, bw, compute_fw + compute_bw, comm_fw + comm_bw


def split_violations(problem: Problem, split: np.ndarray, n_cpus: int, contiguity: str = "none", limit: int = 5) -> list[str]:
    """What is wrong with a split (empty list when feasible)."""
    out: list[str] = []
    k = problem.k
    ids = problem.ids
    low = np.flatnonzero(split < -n_cpus)
    if low.size:
        out.append(f"node {ids[int(low[0])]!r}: CPU core {int(-1 - split[low[0]])} but only {n_cpus} cores")
    unsup = np.flatnonzero((split >= 0) & ~supported(problem))
    if unsup.size:
        out.append(f"node {ids[int(unsup[0])]!r}: not supported on accelerators but placed on accelerator {int(split[unsup[0]])}")
    mem = np.bincount(split[split >= 0], weights=node_bytes(problem)[split >= 0], minlength=k)
    for d in np.flatnonzero(mem > problem.memory * (1 + 1e-12) + 1e-9).tolist():
        out.append(f"accelerator {problem.device_names[d]}: memory {mem[d]:.0f} > capacity {problem.memory[d]:.0f}")
    for g, members in enumerate(problem.groups):
        devs = np.unique(split[members])
        if devs.size > 1:
            out.append(f"colocation group {problem.colocate_names[g]!r} split over devices {devs.tolist()}")
            if len(out) >= limit:
                return out
    if contiguity not in CONTIGUITY:
        raise ValueError(f"contiguity must be one of {CONTIGUITY}, got {contiguity!r}")
    if contiguity == "pipeline":
        bad = pipeline_violation(problem, split)
        if bad is not None:
            out.append(bad)
    elif contiguity != "none":
        restrict = ~is_backward(problem) if contiguity == "forward" else None
        for d in np.unique(split).tolist():
            members = np.flatnonzero(split == d)
            if restrict is not None:
                members = members[restrict[members]]
            if members.size < 2:
                continue
            bad = reachability_violation(problem, members, restrict)
            if bad is not None:
                u, v, w = bad
                out.append(f"device {d}: not contiguous ({ids[u]!r} -> {ids[v]!r} (elsewhere) -> {ids[w]!r})")
                if len(out) >= limit:
                    return out
    return out


def orphaned_backward(problem: Problem) -> np.ndarray:
    """Node mask: backward nodes whose colocation class holds no forward node (or that have no
    class). Appendix B gives them mirrored forward edges; nothing else ties them to the forward pass."""
    back = is_backward(problem)
    col = problem.colocate
    fw_classes = np.unique(col[(~back) & (col >= 0)])
    return back & ((col < 0) | ~np.isin(col, fw_classes))


def pipeline_violation(problem: Problem, split: np.ndarray) -> str | None:
    """None when the devices of ``split`` form a pipeline, else a message naming a cycle of devices.

    The order edges are the forward edges and, mirrored, the backward edges with an orphaned
    endpoint, as in the unit DAG of the DP (formulations/maxload/preprocess.py). If the device
    quotient of these edges is acyclic, listing the devices in a topological order makes every
    prefix a down-closed set of the forward graph, so each device's forward nodes are contiguous
    (Definition 3.1); the converse fails when devices feed each other in a cycle, which "forward"
    contiguity allows and a pipeline does not."""
    import networkx as nx

    back = is_backward(problem)
    orphan = orphaned_backward(problem)
    src, dst = problem.src, problem.dst
    fwd = ~back[src] & ~back[dst]
    mirrored = back[src] & back[dst] & (orphan[src] | orphan[dst])
    a = np.concatenate([split[src[fwd]], split[dst[mirrored]]])
    b = np.concatenate([split[dst[fwd]], split[src[mirrored]]])
    via = np.concatenate([np.flatnonzero(fwd), np.flatnonzero(mirrored)])
    cross = a != b
    g = nx.DiGraph()
    for d1, d2, e in zip(a[cross].tolist(), b[cross].tolist(), via[cross].tolist()):
        if not g.has_edge(d1, d2):
            g.add_edge(d1, d2, edge=e)
    try:
        cycle = nx.find_cycle(g)
    except nx.NetworkXNoCycle:
        return None
    ids = problem.ids
    hops = ", ".join(f"{d1} -> {d2} (edge {ids[int(src[g.edges[d1, d2]['edge']])]!r} -> "
                     f"{ids[int(dst[g.edges[d1, d2]['edge']])]!r})" for d1, d2 in cycle)
    return f"devices do not form a pipeline: they feed each other in a cycle: {hops}"


def evaluate_maxload(problem: Problem, split: Any, *, objective: str = "max-load", contiguity: str = "none",
                     n_cpus: int | None = None) -> MaxLoadEval:
    """Max-load of a split (see the module docstring); ``violations`` lists what is infeasible."""
    if objective not in MAXLOAD_OBJECTIVES:
        raise ValueError(f"max-load objective must be one of {MAXLOAD_OBJECTIVES}, got {objective!r}")
    arr = as_split(problem, split)
    l = max_cpus(problem) if n_cpus is None else n_cpus
    l_eff = max(l, int(-arr.min()) if arr.size and arr.min() < 0 else 0)
    fw, bw, comp, comm = device_loads(problem, arr, l_eff)
    mem = np.bincount(arr[arr >= 0], weights=node_bytes(problem)[arr >= 0], minlength=problem.k)
    value = float((fw + bw).max()) if objective == "max-load" else float(fw.max() + bw.max())
    return MaxLoadEval(value, objective, fw, bw, comp, comm, mem, split_violations(problem, arr, l, contiguity))


# ----------------------------------------------------------------------------------------------
# latency
# ----------------------------------------------------------------------------------------------
@dataclass
class LatencyEval:
    value: float
    node_ready: np.ndarray  # time each node's output is available in host memory
    subgraphs: list[dict[str, Any]]  # device, slot, start, finish, nodes, comm_in, compute, comm_out
    violations: list[str] = field(default_factory=list)

    @property
    def feasible(self) -> bool:
        return not self.violations

    def breakdown(self, problem: Problem) -> dict[str, Any]:
        rows = [{k: v for k, v in s.items() if k != "nodes"} | {"nodes": len(s["nodes"])} for s in self.subgraphs]
        return {"objective": "latency", "value": self.value, "subgraphs": rows, "violations": list(self.violations)}


def evaluate_latency(problem: Problem, split: Any, slot: Any = None) -> LatencyEval:
    """Single-sample latency of a split; ``slot`` (per node, default 0) numbers the subgraphs of
    each accelerator in execution order. CPU nodes may carry any negative device (cores unlimited).
    An infeasible split (memory, support, colocation, non-contiguous subgraph, or subgraphs
    depending on each other in a cycle) gets value inf and its violations listed."""
    arr = as_split(problem, split)
    n = problem.n
    slots = np.zeros(n, dtype=np.int64) if slot is None else np.asarray(slot, dtype=np.int64)
    if slots.shape != (n,):
        raise SplitError(f"slot array has {slots.shape} entries for {n} nodes")
    cpu = arr < 0
    cpu_arr = np.where(cpu, -1, arr)  # CPU cores are unlimited and interchangeable
    violations = split_violations(problem, cpu_arr, 1)
    # unit of a node: ("acc", d, s) subgraph or its own CPU unit
    keys: dict[tuple[int, int], int] = {}
    unit = np.empty(n, dtype=np.int64)
    sub_keys: list[tuple[int, int]] = []
    for v in range(n):
        if cpu[v]:
            continue
        key = (int(arr[v]), int(slots[v]))
        if key not in keys:
            keys[key] = len(sub_keys)
            sub_keys.append(key)
        unit[v] = keys[key]
    n_sub = len(sub_keys)
    cpu_nodes = np.flatnonzero(cpu)
    unit[cpu_nodes] = n_sub + np.arange(cpu_nodes.size)
    for j, key in enumerate(sub_keys):
        members = np.flatnonzero(unit == j)
        bad = reachability_violation(problem, members) if members.size > 1 else None
        if bad is not None:
            u, v, w = bad
            violations.append(f"subgraph {key}: not contiguous ({problem.ids[u]!r} -> {problem.ids[v]!r} -> {problem.ids[w]!r})")
    tens = tensors(problem)
    # per subgraph: compute, tensors in (produced outside, consumed inside), tensors out
    compute = np.bincount(unit[~cpu], weights=problem.time[~cpu], minlength=n_sub)[:n_sub] if n_sub else np.zeros(0)
    ins: list[set[int]] = [set() for _ in range(n_sub)]
    outs: list[set[int]] = [set() for _ in range(n_sub)]
    deps: list[set[int]] = [set() for _ in range(n_sub + cpu_nodes.size)]  # units each unit waits for
    for e in range(problem.m):
        u, v = int(problem.src[e]), int(problem.dst[e])
        uu, uv = int(unit[u]), int(unit[v])
        if uu == uv:
            continue
        t = int(tens.of_edge[e])
        if uv < n_sub:
            ins[uv].add(t)
        if uu < n_sub:
            outs[uu].add(t)
        deps[uv].add(uu)
    # subgraphs of one accelerator run in slot order
    by_dev: dict[int, list[int]] = {}
    for j, (d, s) in enumerate(sub_keys):
        by_dev.setdefault(d, []).append(j)
    for d, js in by_dev.items():
        js.sort(key=lambda j: sub_keys[j][1])
        for a, b in zip(js, js[1:]):
            deps[b].add(a)
    cin = np.array([tens.cost[list(s)].sum() if s else 0.0 for s in ins]) if n_sub else np.zeros(0)
    cout = np.array([tens.cost[list(s)].sum() if s else 0.0 for s in outs]) if n_sub else np.zeros(0)
    n_units = n_sub + cpu_nodes.size
    dur = np.concatenate([cin + compute + cout, cpu_time(problem)[cpu_nodes]])
    finish = unit_finish_times(n_units, deps, dur)
    subgraphs = []
    for j, (d, s) in enumerate(sub_keys):
        fin = float(finish[j]) if finish is not None else float("inf")
        subgraphs.append({"device": d, "slot": s, "start": fin - float(dur[j]), "finish": fin,
                          "comm_in": float(cin[j]), "compute": float(compute[j]), "comm_out": float(cout[j]),
                          "nodes": np.flatnonzero(unit == j).tolist()})
    if finish is None:
        violations.append("subgraphs depend on each other in a cycle (no schedule exists)")
        ready = np.full(n, np.inf)
    else:
        ready = finish[unit]
    value = float(ready.max()) if n and not violations else (0.0 if not n else float("inf"))
    return LatencyEval(value, ready, subgraphs, violations)


def unit_finish_times(n_units: int, deps: Sequence[Iterable[int]], dur: np.ndarray) -> np.ndarray | None:
    """Finish time of each unit (start = max finish of the units it waits for); None on a cycle."""
    indeg = [len(d) for d in deps]
    succs: list[list[int]] = [[] for _ in range(n_units)]
    for v, ds in enumerate(deps):
        for u in ds:
            succs[u].append(v)
    start = np.zeros(n_units)
    finish = np.zeros(n_units)
    stack = [v for v in range(n_units) if indeg[v] == 0]
    done = 0
    while stack:
        u = stack.pop()
        done += 1
        finish[u] = start[u] + dur[u]
        for v in succs[u]:
            if finish[u] > start[v]:
                start[v] = finish[u]
            indeg[v] -= 1
            if indeg[v] == 0:
                stack.append(v)
    return finish if done == n_units else None


# ----------------------------------------------------------------------------------------------
# the entry point the CLI uses
# ----------------------------------------------------------------------------------------------
def evaluate_objective(problem: Problem, solution_or_split: Any, objective: str, **opts: Any) -> tuple[float, dict[str, Any]]:
    """Value and per-device breakdown of a Solution or split under ``objective`` ("max-load",
    "fw+bw" or "latency"). Options: ``contiguity`` ("none"/"forward"/"all", max-load only, checked
    not optimised), ``n_cpus``; for latency ``slot`` (per node), taken from a Solution's
    ``info['slot']`` when not given. Infeasible splits are reported with their violations (the
    value is still computed for max-load, inf for latency)."""
    from .solution import Solution

    if objective == "latency":
        slot = opts.get("slot")
        if slot is None and isinstance(solution_or_split, Solution):
            slot = solution_or_split.info.get("slot")
        ev = evaluate_latency(problem, solution_or_split, slot)
        return ev.value, ev.breakdown(problem)
    if objective not in MAXLOAD_OBJECTIVES:
        raise ValueError(f"unknown objective {objective!r}; known: {', '.join(OBJECTIVES)}")
    ev = evaluate_maxload(problem, solution_or_split, objective=objective, contiguity=opts.get("contiguity", "none"),
                          n_cpus=opts.get("n_cpus"))
    return ev.value, ev.breakdown(problem)
