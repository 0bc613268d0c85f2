"""A lower bound from the graph's cut vertices: the schedule splits into spans in which only one
known set of nodes can run, and the spans whose nodes share placement units are solved together
exactly (CP-SAT, memory dropped).

Why: on NASNet (457 nodes, issue 14) every bound of placement/bounds.py stops at 6.629 (the
communication bound) against answers of 7.13: each cell's parallel branches either share a device
and run one after another or pay transfers, forward and backward at once, since a layer's backward
node is colocated with its forward node. No local argument sees that (exact windows of up to 40
layers with the communication bound's heads and tails never rose above it; bench/
results_peak_exact.md, session 8). Here the coupling is kept whole: a NASNet stage's forward cells
and its backward cells are one small exact problem (138 nodes), and the stages are independent of
each other because the layers between them are cut vertices.

The argument (docs/exact.md, "The cut-vertex bound"). A node c is a *cut vertex* when every other
node is its ancestor or its descendant. They are totally ordered, c_1 < ... < c_m. In any schedule
every ancestor of c finishes by S(c) and every descendant starts at F(c) or later, so during
(F(c_j), S(c_{j+1})) no node runs but those of the gap D_j = desc(c_j) & anc(c_{j+1}) (c_0 is the
time 0 and c_{m+1} the makespan). Hence makespan = sum_j t(c_j) + sum_j g_j with
g_j = S(c_{j+1}) - F(c_j) >= 0, and g_j is at least the span of D_j's own schedule shifted to start
at 0: its precedences, the transfer c_j -> v when v is away from c_j and v -> c_{j+1} likewise, and
one node at a time per device. Gaps whose nodes share a unit (a forward and a backward gap of the
same layers) form a *group*: their units have one device in all of them, each gap on its own time
axis (they never overlap in time). Cut vertices' units tie no groups (each group has its own copy
of them), and memory, allowed devices and the edges from earlier gaps (their precedence already
holds, only their transfers are dropped) are left out: each drops constraints, so the minimum of a
group's sum of gaps over its placements and schedules is at most the real one. With devices
identical (no memory, no allowed sets) the devices are labelled canonically.

CP-SAT works on integers: times and transfers are floored at ``scale`` units per time unit; the
real schedule's gap times, floored, satisfy every constraint (a sum of floors is at most the
floor of the sum), so CP-SAT's proved bound of each group, divided by the scale, is a bound of its
sum of gaps even when the group is not closed. A group not solved in time counts the sum of its
gaps' critical paths (transfers left out), also valid. The bound is the sum of all of them.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np
from ortools.sat.python import cp_model

from placement.problem import Problem
from placement.solution import SolveOptions

from .cpsolver import break_device_symmetry, cp_solver, unit_placement_literals
from .cpsolver import solve as run_cp
from .units import Units, units

MAX_NODES = 20_000  # ancestor sets are n x n bits
MAX_GROUP_NODES = 400  # larger groups are the whole problem again: their critical paths only
SCALE_UNITS = 1e9  # integer units per the graph's total time (CP-SAT's range)
GAP_LIMIT = 0.002  # a group this close to its best schedule stops (its proved bound counts)
BOUND_SUBSOLVER = "objective_lb_search"  # raised NASNet's stage bounds ten times faster than the default


@dataclass
class Gap:
    """The nodes that run strictly between two consecutive cut vertices (None: the start, the end)."""

    first: int | None
    last: int | None
    nodes: list[int]


@dataclass
class CutBound:
    """The bound and how it was reached: per group (nodes, bound, closed)."""

    bound: float
    proved: bool  # every group closed (its exact minimum found)
    cut_time: float
    groups: list[tuple[int, float, bool]] = field(default_factory=list)  # (nodes, bound, closed) per group
    seconds: float = 0.0


def cut_vertices(problem: Problem) -> list[int]:
    """The nodes every other node reaches or is reached by, in topological order."""
    n = problem.n
    anc, desc = [0] * n, [0] * n
    pptr, pnbr, _ = problem.pred_ptr
    sptr, snbr, _ = problem.succ_ptr
    order = problem.topo_order.tolist()
    for v in order:
        a = 0
        for u in pnbr[pptr[v]:pptr[v + 1]].tolist():
            a |= anc[u] | (1 << u)
        anc[v] = a
    for v in reversed(order):
        d = 0
        for w in snbr[sptr[v]:sptr[v + 1]].tolist():
            d |= desc[w] | (1 << w)
        desc[v] = d
    return [v for v in order if anc[v].bit_count() + desc[v].bit_count() == n - 1]


def gaps(problem: Problem, cuts: list[int]) -> list[Gap]:
    """The non-empty gaps between consecutive cut vertices (and before the first, after the last)."""
    if not cuts:
        return [Gap(None, None, list(range(problem.n)))] if problem.n else []
    pos = {c: j for j, c in enumerate(cuts)}
    # a node that is no cut vertex lies between the last cut vertex before it and the next one
    between: dict[int, list[int]] = {}
    seen = 0
    for v in problem.topo_order.tolist():
        if v in pos:
            seen = pos[v] + 1
        else:
            between.setdefault(seen, []).append(v)
    return [Gap(cuts[j - 1] if j else None, cuts[j] if j < len(cuts) else None, sorted(nodes))
            for j, nodes in sorted(between.items())]


def gap_groups(un: Units, found: list[Gap]) -> list[list[Gap]]:
    """Gaps joined when a unit has nodes inside both (cut vertices join nothing)."""
    parent = list(range(len(found)))

    def root(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    owner: dict[int, int] = {}
    for i, gap in enumerate(found):
        for v in gap.nodes:
            g = int(un.of[v])
            if g in owner:
                parent[root(i)] = root(owner[g])
            else:
                owner[g] = i
    out: dict[int, list[Gap]] = {}
    for i, gap in enumerate(found):
        out.setdefault(root(i), []).append(gap)
    return list(out.values())


def _critical(problem: Problem, gap: Gap) -> float:
    """The longest path by time through the gap's own nodes (a lower bound on its span)."""
    inside = set(gap.nodes)
    pptr, pnbr, _ = problem.pred_ptr
    fin: dict[int, float] = {}
    for v in problem.topo_order.tolist():
        if v in inside:
            fin[v] = max((fin[u] for u in pnbr[pptr[v]:pptr[v + 1]].tolist() if u in inside), default=0.0) + float(problem.time[v])
    return max(fin.values(), default=0.0)


def _floored(a: np.ndarray, scale: float) -> np.ndarray:
    """floor(a * scale); rounded instead when that is integral up to float noise (exact data)."""
    x = a * scale
    near = np.round(x)
    return (near if np.all(np.abs(x - near) <= 1e-6) else np.floor(x)).astype(np.int64)


def group_model(problem: Problem, un: Units, group: list[Gap], scale: float) -> cp_model.CpModel:
    """The group's exact model without memory: minimise the sum of its gaps (module docstring)."""
    m = cp_model.CpModel()
    k = problem.k

    def units_of(gap: Gap) -> list[int]:
        return [int(un.of[v]) for v in gap.nodes + [c for c in (gap.first, gap.last) if c is not None]]

    local = sorted({g for gap in group for g in units_of(gap)}, key=lambda g: int(un.members[g][0]))
    index = {g: i for i, g in enumerate(local)}
    members = [[i] for i in range(len(local))]  # one row per unit in the all-allowed mask below
    mask = np.ones((len(local), k), dtype=bool)
    x = unit_placement_literals(m, members, mask)
    break_device_symmetry(m, [list(range(k))], x, members, mask)
    same: dict[tuple[int, int], cp_model.IntVar] = {}

    def together(a: int, b: int) -> cp_model.IntVar:
        key = (min(a, b), max(a, b))
        if key not in same:
            lit = m.new_bool_var(f"same{key}")
            for d in range(k):
                m.add(x[a, d] == x[b, d]).only_enforce_if(lit)
            same[key] = lit
        return same[key]

    dur, comm = _floored(problem.time, scale), _floored(problem.comm, scale)
    horizon = int(dur.sum() + comm.sum()) + 1
    sptr, snbr, seid = problem.succ_ptr
    spans = []
    for gap in group:
        inside = set(gap.nodes)
        start = {v: m.new_int_var(0, horizon, f"s{v}") for v in gap.nodes}
        span = m.new_int_var(0, horizon, f"gap{gap.first}")
        spans.append(span)
        for u in ([gap.first] if gap.first is not None else []) + gap.nodes:
            done = 0 if u == gap.first else start[u] + int(dur[u])
            for j in range(int(sptr[u]), int(sptr[u + 1])):
                w, e = int(snbr[j]), int(seid[j])
                if w in inside:
                    after = start[w]
                elif w == gap.last:
                    after = span
                else:
                    continue
                m.add(after >= done)
                gu, gw = index[int(un.of[u])], index[int(un.of[w])]
                if gu != gw and comm[e] > 0:
                    m.add(after >= done + int(comm[e])).only_enforce_if(together(gu, gw).Not())
        for v in gap.nodes:
            m.add(span >= start[v] + int(dur[v]))
        for d in range(k):
            m.add_no_overlap([m.new_optional_fixed_size_interval_var(start[v], int(dur[v]), x[index[int(un.of[v])], d], f"i{v}_{d}")
                              for v in gap.nodes if dur[v] > 0])
    m.minimize(sum(spans))
    return m


def cut_bound(problem: Problem, opts: SolveOptions, seconds: float, scale: float | None = None,
              max_group_nodes: int = MAX_GROUP_NODES, gap_limit: float = GAP_LIMIT) -> CutBound | None:
    """The bound of the module docstring within ``seconds`` (groups solved one after another, each
    its share of the time left by node count), or None when the graph is too large for the
    ancestor sets or has no cut vertex. ``scale``: integer units per time unit (default: about
    SCALE_UNITS per total time; the exact models pass theirs, exact on integral data). A group
    stops once its bound is within ``gap_limit`` (relative) of its best schedule."""
    t0 = time.monotonic()
    if problem.n == 0 or problem.n > MAX_NODES:
        return None
    cuts = cut_vertices(problem)
    if not cuts:
        return None
    un = units(problem)
    groups = gap_groups(un, gaps(problem, cuts))
    cut_time = float(problem.time[cuts].sum())
    total = float(problem.time.sum())
    if scale is None:
        scale = SCALE_UNITS / total if total > 0 else 1.0
    sizes = [sum(len(gap.nodes) for gap in grp) for grp in groups]
    left = sum(s for s in sizes if s <= max_group_nodes)
    out = CutBound(bound=cut_time, proved=True, cut_time=cut_time)
    work = [sum(float(problem.time[gap.nodes].sum()) for gap in grp) for grp in groups]
    # small and light groups first: they close or come within GAP_LIMIT early and leave their time to the rest
    for grp, size, _ in sorted(zip(groups, sizes, work), key=lambda gsw: (gsw[1], gsw[2])):
        floor = sum(_critical(problem, gap) for gap in grp)
        value, closed = floor, False
        budget = seconds - (time.monotonic() - t0)
        if size <= max_group_nodes and budget > 0.05 and not opts.stop.is_set():
            share = budget * size / max(left, 1)
            left -= size
            solver = cp_solver(opts)
            solver.parameters.max_time_in_seconds = max(share, 0.05)
            solver.parameters.relative_gap_limit = gap_limit
            if (opts.workers or 2) > 1:
                solver.parameters.subsolvers.append(BOUND_SUBSOLVER)
            status = run_cp(solver, group_model(problem, un, grp, scale), opts)
            if status in (cp_model.OPTIMAL, cp_model.FEASIBLE):  # the proved bound, floored data
                value = max(floor, solver.best_objective_bound / scale)
                closed = status == cp_model.OPTIMAL and solver.best_objective_bound >= solver.objective_value
        out.groups.append((size, value, closed))
        out.proved &= closed
        out.bound += value
    out.seconds = time.monotonic() - t0
    return out
