"""A lower bound under the peak model that sees the K devices' memory jointly: the held-tensor
relaxation, solved exactly by CP-SAT over placements only.

For any feasible placement and schedule of the real problem:

1. every path pays its nodes' times plus the comm of each of its edges whose ends are apart, so
   with start times S the precedences ``S_v >= S_u + t_u + c_uv [apart]`` hold and the makespan is
   at least every ``S_v + t_v``;
2. every device runs its own nodes one at a time: makespan >= the time placed on it;
3. while any node x of positive time runs, every device d holds its params plus every tensor one
   of its units forces onto it at x (formulations/saved_bytes.py), all within M_d.

Dropping everything else (one-at-a-time order, lifetimes other than the forced ones) leaves a
problem over the placement and start times whose optimum is at most the real one. Unlike the
path bound (formulations/pathbound.py), which lets every run of a path fill a device of its own
and looks at one x at a time, here the K devices are shared by all units and every x's knapsacks
hold at once: on a chain-like training graph a device that takes two layers far apart pays for
both layers' activations at the loss.

Times and comms are floored to integers (``cpsat.choose_scale``): a real schedule maps to a floored
one with a makespan no larger (sums of floors are at most the floor of the sum), so CP-SAT's
proved bound over the scale is a valid bound. Byte counts are whole numbers scaled exactly
(``integer_bytes.memory_ints``, as in the full model); when they are not, no bound is claimed. Identical devices are labelled
canonically (the optimum is unchanged by a relabelling).
"""
from __future__ import annotations

import math
import threading
import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from ortools.sat.python import cp_model

from heuristics.baselines import fill
from placement.problem import Problem
from placement.solution import SolveOptions

from .common import device_classes
from .cpsolver import break_device_symmetry, cp_solver, set_params, unit_placement_literals
from .cpsolver import solve as run_cp
from .integer_bytes import memory_ints
from .saved_bytes import MAX_NODES, Held, held_tensors, spread_held, undominated
from .units import units


# The knapsack check alone (no times) on larger graphs than the relaxation: at most
# CHECK_MAX_NODES nodes, about CHECK_TERMS (x, tensor, holder, device) terms (nodes x spread evenly
# beyond that). The imported 1,393-node RNN: every 4th node x, 36K (x, tensor) pairs, proved
# infeasible at 1.3 x its memory lower bound in 0.9 s (all nodes x: 137K pairs, 2.9 s).
CHECK_MAX_NODES = 20_000
CHECK_TERMS = 300_000
CHECK_PARAMS = {"cp_model_probing_level": 0, "symmetry_level": 0}
# Per (x, tensor, holder, device) term: what building the model costs, and the least CP-SAT gets
# (its presolve does not stop on time: given 0.3 s on a generated 10K-node CNN's model of 338K
# terms it returned after 2.5 s, given 1.0 s after 1.1 s). With less time left the check says
# "undecided" at once rather than overrun its budget.
BUILD_SECONDS_PER_TERM = 4e-6
SOLVE_SECONDS_PER_TERM = 3e-6


@dataclass
class HeldBound:
    """The relaxation's proved bound (real time units) and how it was reached."""

    bound: float  # valid lower bound on the real makespan (0.0 when nothing was proved)
    proved: bool  # CP-SAT proved the relaxation's optimum (bound is that optimum, floored)
    relaxed_value: float | None  # the relaxation's best placement value (not a bound), or None
    seconds: float
    knapsacks: int  # (x, device) knapsacks in the model
    placement: np.ndarray | None = None  # the relaxation's best placement (may not fit: a candidate only)
    start: np.ndarray | None = None  # its start times in real units (floored data: an order, not a schedule)


def _scaled(problem: Problem) -> tuple[float, np.ndarray, np.ndarray]:
    """Floored integer times and comms with a factor mapping the total work to ~1e9 units."""
    ref = max(float(problem.time.sum()) + float(problem.comm.sum()), 1e-12)
    factor = 1e9 / ref
    return factor, np.floor(problem.time * factor).astype(np.int64), np.floor(problem.comm * factor).astype(np.int64)


def held_relaxation_bound(problem: Problem, opts: SolveOptions, seconds: float,
                          hint_placement: np.ndarray | None = None, no_overlap: bool = True,
                          floor: float = 0.0, target: float | None = None) -> HeldBound:
    """Solve the held-tensor relaxation (module docstring) for at most ``seconds``; its proved
    bound is a valid lower bound on the real makespan under the peak model. ``no_overlap`` adds
    one NoOverlap per device over the nodes' run intervals (still a relaxation: item 2 made exact).
    ``hint_placement``: a placement to start from (relabelled canonically by the caller or not:
    only a hint)."""
    t0 = time.monotonic()
    n, k = problem.n, problem.k
    base = _placement_model(problem)
    if base is None:
        return HeldBound(0.0, False, None, time.monotonic() - t0, 0)
    m, x, un, mask, (param, out, cap) = base
    factor, dur, comm = _scaled(problem)
    horizon = int(dur.sum() + comm.sum()) + 1
    ug = un.of
    start = [m.new_int_var(0, horizon, f"s{i}") for i in range(n)]
    mk = m.new_int_var(0, horizon, "makespan")
    same: dict[tuple[int, int], cp_model.IntVar] = {}
    for e in range(problem.m):
        u, v = int(problem.src[e]), int(problem.dst[e])
        gu, gv = int(ug[u]), int(ug[v])
        m.add(start[v] >= start[u] + int(dur[u]))
        c = int(comm[e])
        if gu == gv or c == 0:
            continue
        key = (min(gu, gv), max(gu, gv))
        z = same.get(key)
        if z is None:
            z = m.new_bool_var(f"same{key}")
            same[key] = z
            for d in range(k):
                a, b = x.get((gu, d)), x.get((gv, d))
                if a is not None and b is not None:
                    m.add_bool_or([z.Not(), a.Not(), b])
                    m.add_bool_or([z, a.Not(), b.Not()])
                elif a is not None:
                    m.add_bool_or([z.Not(), a.Not()])
        m.add(start[v] >= start[u] + int(dur[u]) + c).only_enforce_if(z.Not())
    for i in range(n):
        m.add(mk >= start[i] + int(dur[i]))
    for d in range(k):
        terms = [(int(dur[i]), x[int(ug[i]), d]) for i in range(n) if (int(ug[i]), d) in x and dur[i] > 0]
        if terms:
            m.add(sum(w * lit for w, lit in terms) <= mk)
        if no_overlap:
            ivs = [m.new_optional_fixed_size_interval_var(start[i], int(dur[i]), x[int(ug[i]), d], f"I{i}_{d}")
                   for i in range(n) if (int(ug[i]), d) in x and dur[i] > 0]
            if len(ivs) > 1:
                m.add_no_overlap(ivs)
    knapsacks = _held_knapsacks(m, problem, held_tensors(problem, problem.n), x, ug, param, out, cap, mask)
    if knapsacks == 0:  # no forced set can overflow: the full model already holds all of R
        return HeldBound(0.0, False, None, time.monotonic() - t0, 0)
    break_device_symmetry(m, device_classes(problem), x, un.members, mask)
    if hint_placement is not None:
        for (g, d), lit in x.items():
            m.add_hint(lit, int(hint_placement[un.members[g][0]]) == d)
    if floor > 0:
        m.add(mk >= int(math.floor(floor * factor)))
    if target is not None:
        m.add(mk <= int(math.floor(target * factor)))
    m.minimize(mk)
    solver = cp_solver(opts)
    solver.parameters.max_time_in_seconds = max(min(seconds, opts.remaining() or seconds), 0.01)
    set_params(solver.parameters, dict(opts.extra.get("held_bound_params", {})))
    status = run_cp(solver, m, opts)
    if status == cp_model.INFEASIBLE and target is not None:  # R has no solution within the target
        return HeldBound(target, False, None, time.monotonic() - t0, knapsacks)
    if status == cp_model.INFEASIBLE:  # no placement keeps every forced set within capacity
        return HeldBound(math.inf, True, None, time.monotonic() - t0, knapsacks)
    if status not in (cp_model.OPTIMAL, cp_model.FEASIBLE, cp_model.UNKNOWN):
        return HeldBound(0.0, False, None, time.monotonic() - t0, knapsacks)
    bound = max(float(solver.best_objective_bound), 0.0) / factor
    if status not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        return HeldBound(bound, False, None, time.monotonic() - t0, knapsacks)
    pl = np.empty(n, dtype=np.int64)
    for (g, d), lit in x.items():
        if solver.boolean_value(lit):
            pl[un.members[g]] = d
    st = np.array([solver.value(v) for v in start], dtype=float) / factor
    return HeldBound(bound, status == cp_model.OPTIMAL, solver.objective_value / factor, time.monotonic() - t0,
                     knapsacks, pl, st)


def _placement_model(problem: Problem, max_nodes: int = MAX_NODES) -> tuple[cp_model.CpModel, dict, Any, np.ndarray, tuple] | None:
    """A model with one literal per (unit, allowed device), the units, the allowed-device mask and
    the exact integer bytes (params, outputs, capacities); None where the model is not used:
    bytes not whole after scaling, or more than ``max_nodes`` nodes (checked first: a 200K-node
    run pays nothing here)."""
    if problem.n > max_nodes or problem.n == 0:
        return None
    param, out, cap, exact = memory_ints(problem, "peak")
    if not exact:
        return None
    un = units(problem)
    mask = problem.allowed_mask()
    m = cp_model.CpModel()
    return m, unit_placement_literals(m, un.members, mask), un, mask, (param, out, cap)


def check_helds(problem: Problem, deadline: float | None = None) -> list[Held] | None:
    """The held tensors the knapsack check uses: at nodes spread over the graph, within
    CHECK_TERMS model terms over the K devices (saved_bytes.spread_held); None on graphs beyond
    CHECK_MAX_NODES or when ``deadline`` passes first; those a neighbour dominates are left out
    (saved_bytes.undominated). They do not depend on the capacities."""
    if problem.n > CHECK_MAX_NODES or problem.n == 0:
        return None
    helds = spread_held(problem, CHECK_TERMS // max(problem.k, 1), deadline)
    return None if helds is None else undominated(helds)


def held_knapsacks_feasible(problem: Problem, opts: SolveOptions, seconds: float) -> bool | None:
    """Whether some placement meets the held-tensor knapsacks (item 3 alone: no times) at the
    nodes :func:`check_helds` picks: False is a proof that no placement of the real problem fits
    its peak memory capacities (the knapsacks are necessary conditions, over exact integer
    bytes); True, a placement meeting them was found (not that one fits); None, neither within
    ``seconds`` (the held sets and the model's construction included), or the graph is out of
    the model's reach. Cheap where the full relaxation is not: on a graph whose capacity no
    placement meets, the portfolio's descents and kicks would otherwise search the whole time
    limit for nothing."""
    rem = opts.remaining()
    end = time.monotonic() + (seconds if rem is None else min(seconds, rem))
    check = KnapsackCheck.build(problem, end)
    return None if check is None else check.feasible(problem.memory, opts, end - time.monotonic())


@dataclass
class KnapsackCheck:
    """The knapsack check for one graph: its held sets, a few plain placements and the CP-SAT
    model, each made once and used for every capacity asked (the capacities are variables fixed
    before each solve). Why: a bisection over capacities would otherwise pay the held sets and
    the model's construction per step (on a 1,401-node chain they are 80% of a check), and where
    a plain placement meets the knapsacks no model is needed at all (a generated 10K-node CNN:
    CP-SAT's presolve alone takes 2-5 s to find what a balanced split shows at once)."""

    problem: Problem
    helds: list[Held]
    skip: np.ndarray  # integer capacities below which no knapsack was left out
    deadline: float
    model: cp_model.CpModel | None = None
    capacity: list[cp_model.IntVar | None] = field(default_factory=list)
    count: int = -1  # knapsacks in the model; -1: not built yet
    plain: list[np.ndarray] = field(default_factory=list)  # device per unit, each allowed
    terms: HeldTerms | None = None

    @classmethod
    def build(cls, problem: Problem, deadline: float, floor: float | None = None) -> KnapsackCheck | None:
        """The check for ``problem``'s devices; its model leaves out a knapsack that cannot
        overflow the capacities (or ``floor`` per device, when lower), so it serves those
        capacities and larger ones. None when the graph is out of reach or ``deadline``
        (time.monotonic()) passes first."""
        if problem.n > CHECK_MAX_NODES or problem.n == 0:
            return None
        _, _, cap, exact = memory_ints(problem, "peak")
        helds = check_helds(problem, deadline) if exact else None
        if helds is None:
            return None
        if floor is not None:
            low = memory_ints(problem.with_devices(problem.k, [float(floor)] * problem.k), "peak")[2]
            cap = np.where(cap >= 0, np.minimum(cap, low), cap)
        return cls(problem, helds, cap, deadline, plain=plain_placements(problem), terms=HeldTerms.of(problem, helds))

    def feasible(self, memory: np.ndarray, opts: SolveOptions, seconds: float,
                 build_by: float | None = None) -> bool | None:
        """:func:`held_knapsacks_feasible` at capacities ``memory``: each at least what the check
        was built for, and finite where that was (devices alike in ``problem`` stay alike, so the
        symmetry breaking stays valid when only capacities change). The model, when this call
        builds it, may take until ``build_by`` (time.monotonic(); default: within ``seconds``),
        and the solve still gets ``seconds`` after it, up to ``build_by``: a bisection's steps
        then share one build."""
        if seconds <= 0:
            return None
        end = time.monotonic() + seconds
        cap = memory_ints(self.problem.with_devices(self.problem.k, list(memory)), "peak")[2]
        if any(self.terms.met(dev, cap, self.problem.k) for dev in self.plain):
            return True
        work = sum(len(h.tensors) for h in self.helds) * self.problem.k  # the model's terms, about
        if self.count < 0:
            by = min(end if build_by is None else max(end, build_by), self.deadline)
            if by - time.monotonic() < (BUILD_SECONDS_PER_TERM + SOLVE_SECONDS_PER_TERM) * work or not self._model(by, opts):
                return None
            if build_by is not None:
                end = min(max(end, time.monotonic() + seconds), by)
        if self.count == 0:
            return True  # no forced set can overflow a device
        for var, c in zip(self.capacity, cap):
            if var is not None:
                dom = self.model.proto.variables[var.index].domain
                dom[0], dom[1] = int(c), int(c)
        left = end - time.monotonic()
        if left < max(SOLVE_SECONDS_PER_TERM * work, 0.01):
            return None
        solver = cp_solver(opts)
        solver.parameters.max_time_in_seconds = max(left, 0.01)
        set_params(solver.parameters, CHECK_PARAMS)
        status = run_cp(solver, self.model, opts)
        if status == cp_model.INFEASIBLE:
            return False
        return True if status in (cp_model.OPTIMAL, cp_model.FEASIBLE) else None

    def _model(self, deadline: float, opts: SolveOptions) -> bool:
        """Build the CP-SAT model; False when ``deadline`` passes or ``opts.stop`` is set first."""
        m, x, un, mask, (param, out, cap) = _placement_model(self.problem, CHECK_MAX_NODES)
        capacity = [m.new_int_var(0, int(c), f"capacity{d}") if c >= 0 else None for d, c in enumerate(self.skip)]
        count = _held_knapsacks(m, self.problem, self.helds, x, un.of, param, out, self.skip, mask, deadline, capacity,
                                opts.stop)
        if count is None:
            return False
        break_device_symmetry(m, device_classes(self.problem), x, un.members, mask)
        self.model, self.capacity, self.count = m, capacity, count
        return True


def plain_placements(problem: Problem) -> list[np.ndarray]:
    """Two placements of the units (a device per unit) that often meet loose knapsacks: the
    topological fill to equal shares of the bytes (heuristics/baselines.py ``fill``), and the
    units in the order of their first node dealt round robin (kept where every unit may go where
    it is put)."""
    un = units(problem)
    k = problem.k
    if not un.members:
        return []
    member = np.array([m[0] for m in un.members], dtype=np.int64)
    out = []
    share = float((problem.param_bytes + problem.out_bytes).sum()) / k
    filled = fill(problem.with_devices(k, [math.inf] * k), np.full(k, share))
    if filled is not None:
        out.append(filled[member])
    pos = np.empty(problem.n, dtype=np.int64)
    pos[problem.topo_order] = np.arange(problem.n)
    first = np.full(len(member), problem.n, dtype=np.int64)
    np.minimum.at(first, un.of, pos)
    order = np.argsort(first, kind="stable")
    dealt = np.empty(len(member), dtype=np.int64)
    dealt[order] = np.arange(len(member)) % k
    if problem.allowed_mask()[member, dealt].all():
        out.append(dealt)
    return out


@dataclass
class HeldTerms:
    """The held sets flattened: one row per (node x, tensor u, holder unit g), in integer bytes."""

    x: np.ndarray  # index into the held sets
    u: np.ndarray
    g: np.ndarray
    param: np.ndarray  # integer bytes per node
    out: np.ndarray
    unit_of: np.ndarray

    @classmethod
    def of(cls, problem: Problem, helds: list[Held]) -> HeldTerms:
        xs, us, gs = [], [], []
        for i, h in enumerate(helds):
            for u, hs in zip(h.tensors, h.holders):
                for g in hs:
                    xs.append(i)
                    us.append(u)
                    gs.append(g)
        param, out, _, _ = memory_ints(problem, "peak")
        return cls(np.array(xs, dtype=np.int64), np.array(us, dtype=np.int64), np.array(gs, dtype=np.int64),
                   param, out, units(problem).of)

    def met(self, dev: np.ndarray, cap: np.ndarray, k: int) -> bool:
        """Whether the placement ``dev`` (a device per unit) meets every knapsack at the integer
        capacities ``cap`` (negative: unlimited): a tensor counts once per device holding it."""
        limit = np.where(cap >= 0, cap, np.inf)
        params = np.bincount(dev[self.unit_of], weights=self.param.astype(float), minlength=k)
        if np.any(params > limit):
            return False
        if self.x.size == 0:
            return True
        d = dev[self.g]
        key = np.unique((self.x * (len(self.out) + 1) + self.u) * k + d)
        rows = key // k // (len(self.out) + 1)
        u = key // k % (len(self.out) + 1)
        load = np.bincount(rows * k + key % k, weights=self.out[u].astype(float), minlength=(int(rows.max()) + 1) * k)
        return not np.any(load.reshape(-1, k) + params > limit)


def held_memory_bound(problem: Problem, low: float, high: float, opts: SolveOptions, seconds: float,
                      tolerance: float = 0.005, check_seconds: float = 1.0,
                      check: KnapsackCheck | None = None, ask_low: bool = True) -> float:
    """A memory lower bound at least ``low`` (itself a valid one) for K devices of equal capacity:
    the largest capacity in [low, high) at which the knapsack check proves that no placement
    fits, found by bisection to ``tolerance`` of it within ``seconds`` (an undecided check counts
    as "may fit"; each solve gets at most ``check_seconds``: near the threshold they get hard).
    Infeasible at capacity c means infeasible at every smaller one, so every capacity below the
    answer is proved too small. On imported training graphs the knapsacks see what the
    per-device bounds (placement/memory_bounds.py) do not: a layer's weights, their gradient and
    optimizer states, and the activations its backward reads sit on one device. ``check``: the
    model already built for this graph with a floor at most ``low`` (else it is built here);
    ``ask_low=False`` when a larger capacity is already proved too small (so is ``low``)."""
    end = time.monotonic() + seconds
    k = problem.k
    lo, hi = float(low), float(high)
    if check is None:
        check = KnapsackCheck.build(problem.with_devices(k, [lo] * k), end)
    if check is None:
        return lo
    # Met at the bound itself means met at every larger capacity: none can be proved too small.
    # Worth three steps: on generated graphs it ends the bisection (a 571-node LSTM 2.0 -> 0.7 s).
    if ask_low and check.feasible(np.full(k, lo), opts, min(end - time.monotonic(), 3 * check_seconds), build_by=end) is True:
        return lo
    while hi - lo > tolerance * max(lo, 1.0) and not opts.stop.is_set():
        left = end - time.monotonic()
        if left <= 0.01:
            break
        mid = math.floor((lo + hi) / 2)
        if mid <= lo:
            break
        if check.feasible(np.full(k, float(mid)), opts, min(left, check_seconds), build_by=end) is False:
            lo = float(mid)
        else:
            hi = float(mid)
    return lo


def _held_knapsacks(m: cp_model.CpModel, problem: Problem, helds: list[Held], x: dict, ug: np.ndarray,
                    param: np.ndarray, out: np.ndarray, cap: np.ndarray, mask: np.ndarray,
                    deadline: float | None = None, capacity: list | None = None,
                    stop: threading.Event | None = None) -> int | None:
    """For every node x of ``helds`` and device d: params on d + the tensors forced onto d at x <=
    capacity (``capacity[d]``, a variable, else the integer ``cap[d]``; a knapsack that cannot
    exceed ``cap[d]`` is left out). A tensor forced by several units gets one literal per device,
    implied by each. The number of knapsacks added, or None when ``deadline`` (time.monotonic())
    passes or ``stop`` is set first."""
    held_lit: dict[tuple[tuple[int, ...], int], cp_model.IntVar] = {}
    count = 0
    unit_param = np.bincount(ug, weights=param.astype(float), minlength=int(ug.max()) + 1 if len(ug) else 0)
    on_device: list[cp_model.LinearExprT] = []  # the param bytes each device holds
    all_params: list[int] = []
    for d in range(problem.k):
        ps = [(int(unit_param[g]), lit) for (g, dd), lit in x.items() if dd == d and unit_param[g] > 0]
        all_params.append(sum(c for c, _ in ps))
        if not ps:
            on_device.append(0)
            continue
        total = m.new_int_var(0, all_params[-1], f"params{d}")
        m.add(total == cp_model.LinearExpr.weighted_sum([lit for _, lit in ps], [c for c, _ in ps]))
        on_device.append(total)
    seen: set[tuple] = set()
    for h in helds:
        if (deadline is not None and time.monotonic() > deadline) or (stop is not None and stop.is_set()):
            return None
        for d in range(problem.k):
            if cap[d] < 0:
                continue
            terms: dict[int, tuple[int, cp_model.IntVar]] = {}
            for u, hs in zip(h.tensors, h.holders):
                if out[u] <= 0:
                    continue
                lits = [x[g, d] for g in hs if (g, d) in x]
                if not lits:
                    continue
                if len(lits) == 1:
                    lit = lits[0]
                else:
                    key = (hs, d)
                    lit = held_lit.get(key)
                    if lit is None:
                        lit = m.new_bool_var(f"held{hs}_{d}")
                        for a in lits:
                            m.add_implication(a, lit)
                        held_lit[key] = lit
                terms[u] = (int(out[u]), lit)
            sig = (d, tuple(sorted((c, lit.index) for c, lit in terms.values())))
            if sig in seen or all_params[d] + sum(c for c, _ in terms.values()) <= cap[d]:
                continue
            seen.add(sig)
            held = cp_model.LinearExpr.weighted_sum([lit for _, lit in terms.values()], [c for c, _ in terms.values()])
            m.add(on_device[d] + held <= (int(cap[d]) if capacity is None else capacity[d]))
            count += 1
    return count
