"""CP-SAT makespan model of the delay-model contract (docs/exact.md gives the math).

One optional interval per (node, allowed device), one NoOverlap per device, precedence with the
edge's comm when a same-device literal says the ends are apart, colocation by shared placement
literals, static memory as a linear constraint per device, or peak memory as a per-device
cumulative over tensor lifetimes exactly as placement.evaluator.peak_memory defines them. Identical
devices are labelled canonically; a hint is relabelled the same way before it is given.

CP-SAT needs integers: times are scaled (``Scale``). With floored times the model is a relaxation
of the real problem, so its proved bound divided by the scale is a valid bound; the solver's
device order is then re-timed with the real data by the evaluator. When the scaled data are
exact integers (tests, integral workloads) the model is the real problem itself.
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Callable

import numpy as np
from ortools.sat.python import cp_model

from heuristics.memory_order import lower_peak_order
from placement.evaluator import MEMORY_MODELS
from placement.problem import Problem
from placement.solution import OutOfTime, Solution, SolveOptions

from .cpsolver import break_device_symmetry, cp_solver, set_params, unit_placement_literals
from .held_bound import held_relaxation_bound
from .cut_bound import cut_bound
from .unit_lns import WINDOW_SECONDS, unit_lns
from .integer_bytes import EXACT_FACTORS as _EXACT_FACTORS, MAX_INT as _MAX_INT, memory_ints as _memory_ints
from .peak_repair import order_preserving_schedule
from .saved_bytes import held_tensors
from .cpsolver import solve as run_cp
from .common import (Units, best_schedule, canonical_placement, device_classes, device_order, finish_solution,
                     hint_schedule, infeasible_reason, is_optimal, judge_reserved, lower_bound, retime, too_big, unbuilt_solution,
                     units, with_reserve)

# Memory per model variable, with its share of constraints (measured roughly on the transformer
# graphs: ~2 KB per variable including CP-SAT's presolve copies); for refusing what cannot fit.
CP_BYTES_PER_VARIABLE = 2048
TIME_UNITS = 1e9  # integer units the makespan-sized reference time is mapped to when data are not exact


@dataclass
class Scale:
    """Integer data of the model: ``lo`` rounds down (relaxation), ``hi`` rounds up (restriction).

    ``exact``: lo == hi, the scaled data equal the real data. ``factor``: integer units per time unit."""

    factor: float
    exact: bool
    dur_lo: np.ndarray
    dur_hi: np.ndarray
    comm_lo: np.ndarray
    comm_hi: np.ndarray


def _integral(x: np.ndarray) -> bool:
    """Integers up to float noise (absolute 1e-6, far below one unit)."""
    return bool(np.all(np.abs(x - np.round(x)) <= 1e-6))


def choose_scale(problem: Problem, units_target: float = TIME_UNITS) -> Scale:
    """The smallest of a few round factors making every time and comm integral, if the horizon stays
    small; otherwise a factor mapping a makespan-sized reference time to ``units_target`` units."""
    data = np.concatenate([problem.time, problem.comm])
    horizon = float(data.sum())
    factor = None
    for f in _EXACT_FACTORS:
        if horizon * f <= _MAX_INT / 16 and _integral(data * f):
            factor = float(f)
            break
    if factor is not None:
        r = lambda a: np.round(a * factor).astype(np.int64)  # noqa: E731
        return Scale(factor, True, r(problem.time), r(problem.time), r(problem.comm), r(problem.comm))
    ref = max(float(problem.time.sum()) + float(problem.comm.max(initial=0.0)), 1e-12)
    factor = min(units_target / ref, _MAX_INT / 16 / max(horizon, 1e-12))
    lo = lambda a: np.floor(a * factor).astype(np.int64)  # noqa: E731
    hi = lambda a: np.ceil(a * factor).astype(np.int64)  # noqa: E731
    return Scale(factor, False, lo(problem.time), hi(problem.time), lo(problem.comm), hi(problem.comm))


@dataclass
class Built:
    """A built model and what is needed to hint it and read its answer."""

    model: cp_model.CpModel
    units: Units
    scale: Scale
    mode: str  # "relax" (floored data) or "safe" (restriction, for peak memory with inexact data)
    bound_valid: bool  # the model's proved bound / infeasibility hold for the real problem
    x: dict[tuple[int, int], cp_model.IntVar]
    start: list[cp_model.IntVar]
    makespan: cp_model.IntVar
    dur: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    comm: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    bound_slack: int = 0  # integer units to subtract from the model's bound (see model_data)
    same: list[tuple[cp_model.IntVar, int, int]] = field(default_factory=list)
    used: list[tuple[cp_model.IntVar, int, int]] = field(default_factory=list)
    last: list[tuple[cp_model.IntVar, int, int, list[int]]] = field(default_factory=list)
    remote: list[tuple[cp_model.IntVar, int, int, list[int], cp_model.IntVar]] = field(default_factory=list)
    room: list[tuple[cp_model.IntVar, int]] = field(default_factory=list)
    held: list[tuple[cp_model.IntVar, tuple[int, ...], int]] = field(default_factory=list)


def model_data(problem: Problem, sc: Scale, mode: str) -> tuple[np.ndarray, np.ndarray, int]:
    """Integer durations and comms of the model, and the bound slack in units.

    Relax mode floors, except that a positive time shorter than one unit gets 1 unit (so it keeps
    its place in NoOverlap and the solver's device order stays meaningful). That can lengthen a
    chain by one unit per such node, so the model's bound minus their count is still a bound for
    the real problem (docs/exact.md)."""
    if mode != "relax":
        return sc.dur_hi, sc.comm_hi, 0
    tiny = (problem.time > 0) & (sc.dur_lo == 0)
    return np.where(tiny, 1, sc.dur_lo), sc.comm_lo, int(tiny.sum())


def model_mode(problem: Problem, memory_model: str, sc: Scale) -> str:
    """"relax" (floored data: the model relaxes the real problem, its bound is valid) or "safe"
    (a restriction whose schedules are real schedules, for peak memory when relaxing is not sound).

    Static memory and exact data always relax. Peak memory with inexact data relaxes when no
    positive time floors to zero units: every model lifetime then lies inside the floored real one
    (docs/exact.md, "Peak memory with inexact data"). Sub-unit times get 1 unit and shift the
    mapping by up to one unit per node, which could lengthen a lifetime, so those stay "safe"."""
    if memory_model == "static" or sc.exact:
        return "relax"
    tiny = (problem.time > 0) & (sc.dur_lo == 0)
    return "safe" if bool(tiny.any()) else "relax"


def _no_tick() -> None:
    pass


def _heads_tails(problem: Problem, dur: np.ndarray, tick: Callable[[], None] = _no_tick) -> tuple[np.ndarray, np.ndarray]:
    """head[i]: longest duration path before i; tail[i]: longest path from i (i included)."""
    n = problem.n
    head = np.zeros(n, dtype=np.int64)
    tail = dur.astype(np.int64).copy()
    topo = problem.topo_order.tolist()
    ptr, nbr, _ = problem.pred_ptr
    for j, v in enumerate(topo):
        if j % 1024 == 0:
            tick()
        for u in nbr[ptr[v]:ptr[v + 1]].tolist():
            head[v] = max(head[v], head[u] + dur[u])
    sptr, snbr, _ = problem.succ_ptr
    for j, u in enumerate(reversed(topo)):
        if j % 1024 == 0:
            tick()
        for v in snbr[sptr[u]:sptr[u + 1]].tolist():
            tail[u] = max(tail[u], dur[u] + tail[v])
    return head, tail


def build(problem: Problem, memory_model: str, *, scale: Scale | None = None, symmetry: bool = True,
          redundant: bool = True, makespan_floor: float = 0.0, tick: Callable[[], None] = _no_tick,
          held_cuts: bool = True, force_mode: str | None = None) -> Built:
    """Build the CP-SAT model (see the module docstring). ``makespan_floor``: a valid lower bound
    on the real optimum, given to the makespan variable (scaled down, so still valid). ``tick`` is
    called often while building (SolveOptions.check_time raises OutOfTime there: a model of 10^5
    nodes takes longer to build than many limits)."""
    if memory_model not in MEMORY_MODELS:
        raise ValueError(f"memory model must be one of {MEMORY_MODELS}, got {memory_model!r}")
    sc = scale or choose_scale(problem)
    mode = force_mode or model_mode(problem, memory_model, sc)
    dur, comm, slack = model_data(problem, sc, mode)
    param, out, cap, mem_exact = _memory_ints(problem, memory_model)
    bound_valid = mem_exact and (mode == "relax")
    n, k = problem.n, problem.k
    un = units(problem)
    mask = problem.allowed_mask()
    m = cp_model.CpModel()
    horizon = int(dur.sum() + comm.sum()) + 1
    head, tail = _heads_tails(problem, dur, tick)

    x = unit_placement_literals(m, un.members, mask, tick)
    ug = un.of
    if redundant:
        start = [m.new_int_var(int(head[i]), horizon - int(tail[i]), f"s{i}") for i in range(n)]
        lb = max(int(tail.max(initial=0)), -(-int(dur.sum()) // k))
    else:
        start = [m.new_int_var(0, horizon, f"s{i}") for i in range(n)]
        lb = 0
    lb = max(lb, min(int(math.floor(makespan_floor * sc.factor)), horizon))
    mk = m.new_int_var(lb, horizon, "makespan")
    b = Built(m, un, sc, mode, bound_valid, x, start, mk, dur=dur, comm=comm, bound_slack=slack)

    # One node at a time per device (zero-time nodes may coincide with anything).
    per_dev: list[list] = [[] for _ in range(k)]
    for i in range(n):
        if i % 256 == 0:
            tick()
        if dur[i] <= 0:
            continue
        for d in np.flatnonzero(mask[i]).tolist():
            per_dev[d].append(m.new_optional_fixed_size_interval_var(start[i], int(dur[i]), x[ug[i], d], f"I{i}_{d}"))
    for d in range(k):
        if len(per_dev[d]) > 1:
            m.add_no_overlap(per_dev[d])

    # Precedence, with comm when the ends are on different devices.
    same_of: dict[tuple[int, int], cp_model.IntVar] = {}
    for e in range(problem.m):
        if e % 256 == 0:
            tick()
        u, v = int(problem.src[e]), int(problem.dst[e])
        gu, gv = int(ug[u]), int(ug[v])
        c = int(comm[e])
        m.add(start[v] >= start[u] + int(dur[u]))
        if gu == gv or c == 0:
            continue
        common = np.flatnonzero(mask[u] & mask[v]).tolist()
        if not common:
            m.add(start[v] >= start[u] + int(dur[u]) + c)
            continue
        key = (min(gu, gv), max(gu, gv))
        z = same_of.get(key)
        if z is None:
            z = m.new_bool_var(f"same{gu}_{gv}")
            same_of[key] = z
            b.same.append((z, gu, gv))
            for d in np.flatnonzero(mask[u]).tolist():
                if mask[v, d]:
                    m.add_bool_or([z.Not(), x[gu, d].Not(), x[gv, d]])
                    m.add_bool_or([z, x[gu, d].Not(), x[gv, d].Not()])
                else:
                    m.add_bool_or([z.Not(), x[gu, d].Not()])
        m.add(start[v] >= start[u] + int(dur[u]) + c).only_enforce_if(z.Not())

    for i in range(n):
        if redundant or problem.succ_ptr[0][i + 1] == problem.succ_ptr[0][i]:
            m.add(mk >= start[i] + (int(tail[i]) if redundant else int(dur[i])))

    if redundant:  # per-device load
        for d in range(k):
            tick()
            terms = [(int(dur[i]), x[ug[i], d]) for i in range(n) if mask[i, d] and dur[i] > 0]
            if terms:
                m.add(sum(w * lit for w, lit in terms) <= mk)

    # Memory.
    if memory_model == "static":
        for d in range(k):
            tick()
            if cap[d] < 0:
                continue
            terms = [(int(param[i] + out[i]), x[ug[i], d]) for i in range(n) if mask[i, d] and param[i] + out[i] > 0]
            if terms:
                m.add(sum(w * lit for w, lit in terms) <= int(cap[d]))
    else:
        _peak_memory(problem, b, dur, param, out, cap, mask, horizon, tick, redundant, held_cuts)

    if symmetry:
        _break_symmetry(problem, b, mask, tick)
    m.minimize(mk)
    return b


def _peak_memory(problem: Problem, b: Built, dur: np.ndarray, param: np.ndarray, out: np.ndarray, cap: np.ndarray,
                 mask: np.ndarray, horizon: int, tick: Callable[[], None] = _no_tick, redundant: bool = True,
                 held_cuts: bool = True) -> None:
    """Cumulative per device over the tensor lifetimes of placement.evaluator.peak_memory.

    For node v and device d, T[v,d] >= F_v and >= F_c for every consumer c on d (the model only
    ever wants it small, so ">=" is exact at the optimum). The local tensor [S_v, T) is present when
    v is on d; the remote copy [F_v, T) when v is not on d but a consumer is. In the safe mode
    (inexact times) remote copies start at S_v + floor(time), ends use the rounded-up times."""
    m, x, ug, start = b.model, b.x, b.units.of, b.start
    lo = b.scale.dur_lo
    # Relaxed model of inexact data: floor(s S_v) + floor(s t_v) may fall one unit below
    # floor(s F_v), so a remote copy starts one unit later (its end at least its start).
    shrink = 1 if (b.mode == "relax" and not b.scale.exact) else 0
    k = problem.k
    ptr, nbr, _ = problem.succ_ptr
    intervals: list[list] = [[] for _ in range(k)]
    demands: list[list[int]] = [[] for _ in range(k)]
    for v in range(problem.n):
        if v % 128 == 0:
            tick()
        size = int(out[v])
        if size <= 0:
            continue
        cons = sorted(set(nbr[ptr[v]:ptr[v + 1]].tolist()))
        gv = int(ug[v])
        for d in range(k):
            on_d = [c for c in cons if mask[c, d]]
            can_local = bool(mask[v, d])
            can_remote = bool(on_d) and any(dd != d for dd in np.flatnonzero(mask[v]).tolist())
            if not can_local and not can_remote:
                continue
            end_v = start[v] + int(dur[v])
            if not on_d:
                if dur[v] > 0:
                    iv = m.new_optional_fixed_size_interval_var(start[v], int(dur[v]), x[gv, d], f"run{v}_{d}")
                    intervals[d].append(iv)
                    demands[d].append(size)
                continue
            t = m.new_int_var(0, horizon, f"T{v}_{d}")
            m.add(t >= end_v)
            for c in on_d:
                m.add(t >= start[c] + int(dur[c])).only_enforce_if(x[int(ug[c]), d])
            b.last.append((t, v, d, on_d))
            if can_local:
                sz = m.new_int_var(0, horizon, f"Ls{v}_{d}")
                intervals[d].append(m.new_optional_interval_var(start[v], sz, t, x[gv, d], f"L{v}_{d}"))
                demands[d].append(size)
            if can_remote:
                y = m.new_bool_var(f"y{v}_{d}")
                local = x[gv, d] if can_local else None
                for c in on_d:
                    lits = [x[int(ug[c]), d].Not(), y]
                    if local is not None:
                        lits.append(local)
                    m.add_bool_or(lits)
                if local is not None:
                    m.add_implication(y, local.Not())
                m.add_bool_or([y.Not()] + [x[int(ug[c]), d] for c in on_d])
                rs = start[v] + int(lo[v]) + shrink
                t_remote = t
                if shrink:
                    t_remote = m.new_int_var(0, horizon + shrink, f"Tr{v}_{d}")
                    m.add(t_remote >= t)
                    m.add(t_remote >= rs)
                b.remote.append((y, v, d, on_d, t_remote))
                sz = m.new_int_var(0, horizon + shrink, f"Rs{v}_{d}")
                intervals[d].append(m.new_optional_interval_var(rs, sz, t_remote, y, f"R{v}_{d}"))
                demands[d].append(size)
    if redundant and held_cuts:  # what devices must hold while a node runs (formulations/saved_bytes.py)
        _held_cuts(problem, b, param, out, cap, mask)
    for d in range(k):
        if cap[d] < 0:
            continue
        pterms = [(int(param[i]), x[int(ug[i]), d]) for i in range(problem.n) if mask[i, d] and param[i] > 0]
        room = m.new_int_var(0, int(cap[d]), f"room{d}")
        m.add(room == int(cap[d]) - sum(w * lit for w, lit in pterms))
        b.room.append((room, d))
        if intervals[d]:
            m.add_cumulative(intervals[d], demands[d], room)


CP_CUT_NODES = 4  # nodes x whose held tensors become knapsacks per device


def _held_cuts(problem: Problem, b: Built, param: np.ndarray, out: np.ndarray, cap: np.ndarray, mask: np.ndarray) -> None:
    """Per device d and node x: params on d + every tensor some unit on d forces onto d while x
    runs <= capacity. Placement-only and valid for every real schedule (so for the relaxation
    too); a tensor forced by several units gets a literal implied by each of them."""
    m, x, ug = b.model, b.x, b.units.of
    for h in held_tensors(problem, CP_CUT_NODES):
        for d in range(problem.k):
            if cap[d] < 0:
                continue
            terms = [(int(param[i]), x[int(ug[i]), d]) for i in range(problem.n) if mask[i, d] and param[i] > 0]
            for u, hs in zip(h.tensors, h.holders):
                lits = [x[g, d] for g in hs if (g, d) in x]
                if not lits or out[u] <= 0:
                    continue
                if len(lits) == 1:
                    lit = lits[0]
                else:
                    lit = m.new_bool_var(f"held{h.x}_{u}_{d}")
                    for a in lits:
                        m.add_implication(a, lit)
                    b.held.append((lit, hs, d))
                terms.append((int(out[u]), lit))
            if terms and sum(c for c, _ in terms) > cap[d]:
                m.add(sum(c * lit for c, lit in terms) <= int(cap[d]))


def _break_symmetry(problem: Problem, b: Built, mask: np.ndarray, tick: Callable[[], None] = _no_tick) -> None:
    """Identical devices are labelled in the order of their lowest unit (cpsolver.break_device_symmetry)."""
    b.used.extend(break_device_symmetry(b.model, device_classes(problem), b.x, b.units.members, mask, tick))


def int_schedule(problem: Problem, b: Built, placement: np.ndarray, order: list[list[int]]) -> np.ndarray:
    """Earliest integer start times of a placement and device order under the model's data."""
    dur, comm = b.dur, b.comm
    st = retime(problem, placement, order, time=dur, comm=comm)
    if st is None:  # cannot happen: the order comes from a valid schedule
        raise RuntimeError("cpsat: the hint's device order contradicts the graph")
    return st.astype(np.int64)


def add_hint(problem: Problem, b: Built, placement: np.ndarray, start_real: np.ndarray) -> dict:
    """Hint every model variable from a (canonically relabelled) placement and its device order."""
    pl = canonical_placement(problem, placement, b.units)
    order = device_order(problem, pl, start_real)
    s = int_schedule(problem, b, pl, order)
    dur = b.dur
    m = b.model
    m.clear_hints()
    dev_of_unit = [int(pl[mem[0]]) for mem in b.units.members]
    for (g, d), lit in b.x.items():
        m.add_hint(lit, dev_of_unit[g] == d)
    for i, var in enumerate(b.start):
        m.add_hint(var, int(s[i]))
    fin = s + dur
    m.add_hint(b.makespan, max(int(fin.max(initial=0)), int(b.makespan.proto.domain[0])))
    for z, gu, gv in b.same:
        m.add_hint(z, dev_of_unit[gu] == dev_of_unit[gv])
    first = {}
    for g, d in enumerate(dev_of_unit):
        first.setdefault(d, g)
    for u, g, d in b.used:
        m.add_hint(u, first.get(d, len(dev_of_unit)) <= g)
    t_of = {}
    for t, v, d, on_d in b.last:
        t_of[v, d] = int(max([fin[v]] + [fin[c] for c in on_d if pl[c] == d]))
        m.add_hint(t, t_of[v, d])
    shrink = 1 if (b.mode == "relax" and not b.scale.exact) else 0
    for y, v, d, on_d, t_remote in b.remote:
        m.add_hint(y, pl[v] != d and any(pl[c] == d for c in on_d))
        if shrink:
            m.add_hint(t_remote, max(t_of[v, d], int(s[v] + b.scale.dur_lo[v]) + shrink))
    for lit, hs, d in b.held:
        m.add_hint(lit, any(dev_of_unit[g] == d for g in hs))
    param, out, cap, _ = _memory_ints(problem, "peak")
    for room, d in b.room:
        m.add_hint(room, int(cap[d] - param[pl == d].sum()))
    return {"hint_makespan_int": int(fin.max(initial=0))}


def b_valid_for_floor(problem: Problem, memory_model: str, scale: Scale) -> bool:
    """A real lower bound may bound the model's makespan only when the model is a relaxation."""
    return model_mode(problem, memory_model, scale) == "relax"


def _solve(problem: Problem, opts: SolveOptions) -> Solution:
    t0 = time.monotonic()
    mm = opts.memory_model
    ex = opts.extra
    why = infeasible_reason(problem, mm)
    if why:
        return Solution("cpsat", "infeasible", reason=why, seconds=time.monotonic() - t0)
    scale = choose_scale(problem, float(ex.get("time_units", TIME_UNITS)))
    floor_lb = lower_bound(problem, mm, bool(ex.get("path_bound", True))) if ex.get("redundant", True) else 0.0
    hint = hint_schedule(problem, opts.hint, mm) if (opts.hint is not None and ex.get("use_hint", True)) else None
    hint_found = None if hint is None else best_schedule(problem, hint[0], hint[1], mm)
    held: dict = {}
    if mm == "peak" and ex.get("redundant", True) and ex.get("held_bound", True):
        held = _held_bound(problem, opts, None if hint is None else hint[0])
        if held.get("bound") == math.inf:
            if hint_found is not None:
                raise RuntimeError("cpsat: the held-tensor relaxation is infeasible for a problem with a known schedule")
            return Solution("cpsat", "infeasible", seconds=time.monotonic() - t0, info={"held_bound": held},
                            reason="cpsat: no placement keeps every tensor forced onto a device while a node runs "
                                   "within the peak memory capacities (held-tensor relaxation, docs/exact.md)")
        floor_lb = max(floor_lb, float(held.get("bound", 0.0)))
        cand = held.pop("candidate", None)
        if cand is not None and (hint_found is None or cand[0] < hint_found[0]):
            hint, hint_found = (cand[1], cand[2]), (cand[0], cand[2])
            held["answer"] = cand[0]
        if hint_found is not None and is_optimal(hint_found[0], floor_lb):
            return finish_solution(problem, opts, "cpsat", t0, True, floor_lb, (hint[0], hint_found[1]),
                                   {"held_bound": held, "returned_hint": True, "proved_by": "held-tensor relaxation"},
                                   known_lb=floor_lb)
    cut: dict = {}
    if mm == "peak" and ex.get("redundant", True) and ex.get("cut_bound", True) \
            and problem.n > int(ex.get("cut_bound_nodes", LARGE_NODES)):
        cut = _cut_bound(problem, opts, scale.factor)
        floor_lb = max(floor_lb, float(cut.get("bound", 0.0)))
        if hint_found is not None and is_optimal(hint_found[0], floor_lb):
            return finish_solution(problem, opts, "cpsat", t0, True, floor_lb, (hint[0], hint_found[1]),
                                   {"held_bound": held, "cut_bound": cut, "returned_hint": True,
                                    "proved_by": "cut-vertex bound"}, known_lb=floor_lb)
    lns_info: dict = {}
    if mm == "peak" and hint_found is not None and not is_optimal(hint_found[0], floor_lb):
        better = _unit_lns(problem, opts, hint[0], hint_found[1], lns_info)
        if better is not None and better[0] < hint_found[0]:
            hint, hint_found = (better[1], better[2]), (better[0], better[2])
    refused = too_big("cpsat", "variables", problem.k * (units(problem).count + (problem.n if mm == "peak" else 0)) + problem.n + problem.m,
                      CP_BYTES_PER_VARIABLE)
    if refused:
        return unbuilt_solution(problem, opts, "cpsat", t0, refused, known_lb=floor_lb or None)
    try:
        b = build(problem, mm, scale=scale, symmetry=bool(ex.get("symmetry", True)), redundant=bool(ex.get("redundant", True)),
                  makespan_floor=floor_lb if b_valid_for_floor(problem, mm, scale) else 0.0, tick=opts.check_time,
                  held_cuts=bool(ex.get("held_cuts", False)))
    except OutOfTime as exc:
        return unbuilt_solution(problem, opts, "cpsat", t0, f"cpsat: the model of {problem.n} nodes x {problem.k} devices "
                                f"was not built ({exc}); answer: the hint, if any", known_lb=floor_lb or None)
    info: dict = {"scale": scale.factor, "exact_data": scale.exact, "mode": b.mode, "bound_valid": b.bound_valid,
                  "bound_slack_units": b.bound_slack}
    if held:
        info["held_bound"] = held
    if cut:
        info["cut_bound"] = cut
    if lns_info:
        info["unit_lns"] = lns_info
    if hint is not None:
        info.update(add_hint(problem, b, *hint))
    found = None  # (makespan, placement, start): the best checked schedule so far
    if hint_found is not None:
        found = (hint_found[0], hint[0], hint_found[1])
        info["returned_hint"] = True
    bound_int: int | None = None
    status = cp_model.UNKNOWN
    start_gap = None if found is None or found[0] <= 0 else (found[0] - floor_lb) / found[0]
    phases = _phases(ex, start_gap)
    info["phases"] = len(phases)
    # Peak memory with inexact data: the relaxed model's answers are schedules of floored times,
    # which need re-timing and can miss; the search phase of a two-phase schedule runs the
    # conservative model instead, whose answers are real schedules, and the bound phase the relaxed
    # one (docs/exact.md). Only the relaxed model's bound and statuses are proofs.
    b_search = b
    if (len(phases) > 1 and mm == "peak" and not scale.exact and b.mode == "relax" and ex.get("safe_search", True)):
        try:
            b_search = build(problem, mm, scale=scale, symmetry=bool(ex.get("symmetry", True)),
                             redundant=bool(ex.get("redundant", True)), makespan_floor=floor_lb, tick=opts.check_time,
                             held_cuts=bool(ex.get("held_cuts", False)), force_mode="safe")
            if found is not None:
                add_hint(problem, b_search, found[1], found[2])
            info["search_mode"] = "safe"
        except OutOfTime:
            b_search = b
    cur = b
    for idx, (share, params) in enumerate(phases):
        last = idx == len(phases) - 1
        cur = b_search if idx == 0 else b
        rem = opts.remaining()
        solver = cp_solver(opts)
        if rem is not None and not last:
            solver.parameters.max_time_in_seconds = max(share * rem, 0.01)
        set_params(solver.parameters, params)
        if idx > 0:
            if found is not None:
                add_hint(problem, cur, found[1], found[2])
            if bound_int is not None:
                cur.model.add(cur.makespan >= bound_int)  # proved for this model by an earlier phase
        callback = _trace(solver, ex.get("trace"), t0, scale.factor)
        status = run_cp(solver, cur.model, opts, callback)
        info[f"cp_status{idx or ''}"] = solver.status_name(status)
        info["cp_wall"] = info.get("cp_wall", 0.0) + solver.wall_time
        info["cp_solution_info"] = solver.solution_info()
        if status == cp_model.MODEL_INVALID:
            raise RuntimeError(f"cpsat: invalid model: {cur.model.validate()}")
        if status == cp_model.INFEASIBLE:
            if cur is not b:  # the conservative search model proves nothing: on to the relaxed one
                continue
            if found is not None and cur.bound_valid:  # the model relaxes the real problem, which has a schedule
                raise RuntimeError(f"cpsat: phase {idx} proved infeasible a relaxation of a problem with a known schedule")
            if found is not None:  # the conservative model may exclude the hint: keep it
                break
            if cur.bound_valid:
                return Solution("cpsat", "infeasible", seconds=time.monotonic() - t0, info=info,
                                reason=f"cpsat: proved that no placement and schedule fits the {mm} memory capacities")
            return Solution("cpsat", "unknown", seconds=time.monotonic() - t0, info=info,
                            reason="cpsat: the conservatively rounded model is infeasible (not a proof for the real data)")
        if status in (cp_model.OPTIMAL, cp_model.FEASIBLE, cp_model.UNKNOWN) and cur is b:
            bound_int = max(bound_int or 0, int(solver.best_objective_bound))
        if status in (cp_model.OPTIMAL, cp_model.FEASIBLE):
            pl = np.empty(problem.n, dtype=np.int64)
            for (g, d), lit in cur.x.items():
                if solver.boolean_value(lit):
                    pl[cur.units.members[g]] = d
            s_int = np.array([solver.value(v) for v in cur.start], dtype=float)
            got = best_schedule(problem, pl, s_int / scale.factor, mm)
            if mm == "peak" and not scale.exact and (got is None or cur.mode == "relax"):
                # floored times: keep the model's memory interleaving (within the time left)
                shrink = 1.0 if cur.mode == "relax" else 0.0
                rem = opts.remaining()
                kept = order_preserving_schedule(problem, pl, s_int / scale.factor, cur.dur / scale.factor, shrink / scale.factor,
                                                 deadline=None if rem is None else time.monotonic() + max(rem, 0.05))
                if kept is not None and (got is None or kept[0] < got[0]):
                    got = kept
                    info["order_preserved"] = True
            if got is not None and (found is None or got[0] <= found[0]):
                found = (got[0], pl, got[1])
                info["returned_hint"] = False
            info["cp_objective_int"] = solver.objective_value
        if (status == cp_model.OPTIMAL and cur is b) or opts.out_of_time() or opts.stop.is_set():
            break
    bound = None
    if b.bound_valid and bound_int is not None:
        bound = (bound_int - b.bound_slack) / scale.factor
        info["cp_bound_int"] = bound_int
    proved = status == cp_model.OPTIMAL and cur is b and b.bound_valid
    if found is not None and is_optimal(found[0], max(floor_lb, bound or 0.0)):
        proved = True  # a valid bound of the real problem meets the answer
        info.setdefault("proved_by", "bound")
    return finish_solution(problem, opts, "cpsat", t0, proved, bound, None if found is None else found[1:], info,
                           known_lb=floor_lb if ex.get("redundant", True) else None)


HELD_BOUND_SHARE = 0.25  # of the time left: the held-tensor relaxation's budget (formulations/held_bound.py)
# Its budget at most (and without a time limit): it proved the 79-139-node layer graphs in 2-26 s
# and found nothing above the path bound in 60 s on NASNet (457) and Inception-v3 (583), nor in
# 90 s with the path bound as floor and a target 5% above it (NASNet: neither a placement nor a
# refutation), so above LARGE_NODES it gets a short try only and the time goes to the search.
HELD_BOUND_SECONDS = 60.0
HELD_BOUND_SECONDS_LARGE = 15.0
LARGE_NODES = 400
# Above LARGE_NODES nodes, under the peak model: the unit LNS (formulations/unit_lns.py) improves
# the hint for this share of the time left before the full model runs (whose own search moved
# NASNet from 8.81 to 8.34 in 450 s where the unit LNS reached 7.25 in 180 s).
UNIT_LNS_SHARE = 0.7
# Above LARGE_NODES nodes, under the peak model, before the unit LNS: the cut-vertex bound
# (formulations/cut_bound.py) for this share of the time left, at most CUT_BOUND_SECONDS. On NASNet
# its three stage groups rise 6.63 -> 6.80 in 60 s and ~6.97 in 210 s (bench/results_peak_exact.md).
CUT_BOUND_SHARE = 0.3
CUT_BOUND_SECONDS = 150.0


def _held_bound(problem: Problem, opts: SolveOptions, hint_placement: np.ndarray | None) -> dict:
    """The held-tensor relaxation's bound (formulations/held_bound.py) within its share of the time
    (``extra["held_bound_share"]``), as a dict for ``info``: bound, proved, seconds, knapsacks."""
    ex = opts.extra
    rem = opts.remaining()
    secs = float(ex.get("held_bound_seconds", HELD_BOUND_SECONDS if problem.n <= LARGE_NODES else HELD_BOUND_SECONDS_LARGE))
    if rem is not None:
        secs = min(secs, float(ex.get("held_bound_share", HELD_BOUND_SHARE)) * rem)
    if secs <= 0.05:
        return {}
    hb = held_relaxation_bound(problem, opts, secs, hint_placement)
    out = {"bound": hb.bound, "proved": hb.proved, "relaxed_value": hb.relaxed_value, "seconds": round(hb.seconds, 3),
           "knapsacks": hb.knapsacks}
    if hb.placement is not None:
        cand = _judge_placement(problem, hb.placement, hb.start)
        if cand is not None:
            out["candidate"] = cand
    return out


def _cut_bound(problem: Problem, opts: SolveOptions, factor: float) -> dict:
    """The cut-vertex bound (formulations/cut_bound.py) within ``extra["cut_bound_share"]`` of the
    time left, at most ``extra["cut_bound_seconds"]`` (run above ``extra["cut_bound_nodes"]``
    nodes, default LARGE_NODES), as a dict for ``info`` ({} when the graph
    has no cut vertex or no time is left)."""
    ex = opts.extra
    rem = opts.remaining()
    secs = float(ex.get("cut_bound_seconds", CUT_BOUND_SECONDS))
    if rem is not None:
        secs = min(secs, float(ex.get("cut_bound_share", CUT_BOUND_SHARE)) * rem)
    if secs <= 0.05:
        return {}
    cb = cut_bound(problem, opts, secs, scale=factor)
    if cb is None:
        return {}
    return {"bound": cb.bound, "proved": cb.proved, "cut_time": cb.cut_time, "seconds": round(cb.seconds, 3),
            "groups": [{"nodes": size, "bound": value, "closed": closed} for size, value, closed in cb.groups]}


def _unit_lns(problem: Problem, opts: SolveOptions, placement: np.ndarray, start: np.ndarray,
              info: dict) -> tuple[float, np.ndarray, np.ndarray] | None:
    """The unit LNS (formulations/unit_lns.py) from the hint for ``extra["unit_lns_share"]`` of
    the time left, on graphs above ``extra["unit_lns_nodes"]`` (default LARGE_NODES) nodes, CP-SAT
    getting ``extra["unit_lns_window_seconds"]`` per neighbourhood: (makespan, placement, start)
    of its best schedule (within the capacities), or None."""
    ex = opts.extra
    rem = opts.remaining()
    if problem.n <= int(ex.get("unit_lns_nodes", LARGE_NODES)) or rem is None:
        return None
    secs = float(ex.get("unit_lns_share", UNIT_LNS_SHARE)) * rem
    window_seconds = float(ex.get("unit_lns_window_seconds", WINDOW_SECONDS))
    if secs < 2 * window_seconds:
        return None
    try:
        pl, st, mk, stats = unit_lns(problem, placement, start, opts, time.monotonic() + secs, "peak",
                                     lambda q: build(q, "static", symmetry=False, tick=opts.check_time), add_hint,
                                     window_seconds=window_seconds)
    except OutOfTime:
        return None
    info.update({"windows": stats.windows, "improved": stats.improved, "closed": stats.closed,
                 "scattered": stats.scattered, "scattered_improved": stats.scattered_improved,
                 "from": stats.start_makespan, "to": mk, "seconds": round(stats.seconds, 3)})
    return mk, pl, st


def _judge_placement(problem: Problem, placement: np.ndarray, start: np.ndarray) -> tuple[float, np.ndarray, np.ndarray] | None:
    """The relaxation's placement as a real schedule: in its own device order, in FIFO, or in the
    memory-aware order (heuristics/memory_order.py), the best that fits: (makespan, placement,
    start), or None when none fits."""
    best = None
    own = best_schedule(problem, placement, start, "peak")  # its device order, left-justified and checked
    if own is not None:
        best = (float(own[0]), placement.copy(), own[1])
    ev = lower_peak_order(problem, placement).evaluation
    if ev.feasible(problem) and (best is None or ev.makespan < best[0]):
        best = (float(ev.makespan), ev.placement.copy(), ev.start.copy())
    return best


AUTO_GAP = 0.02  # "auto" schedule: above this starting gap (hint vs floor bound), add a bound phase
BOUND_SUBSOLVER = "objective_lb_search"


def _phases(ex: dict, start_gap: float | None = None) -> list[tuple[float, dict]]:
    """The solve schedule: ``extra["phases"]`` as (share of the time left, CP-SAT parameters)
    pairs (the last phase gets all the time left), or one phase. ``bound_worker`` names the one
    full-problem subsolver (with 2 workers the other runs the LNS portfolio; e.g.
    "objective_lb_search" raises the bound far faster than default_lp on the msr-fiddle graphs);
    ``cp_params`` apply to every phase. ``schedule="auto"``: when the starting gap (hint against
    the floor bound; unknown counts as large) exceeds AUTO_GAP, CP-SAT's default subsolvers for
    ``search_share`` (default 0.5) of the time, then the bound subsolver; otherwise one default
    phase (a small gap is closed faster by default_lp's tree search, whose proof a restart would
    throw away, than by the bound subsolver's small steps)."""
    common = dict(ex.get("cp_params", {}))
    if ex.get("phases"):
        return [(float(share), {**dict(params), **common}) for share, params in ex["phases"]]
    if ex.get("schedule", "single") == "auto":
        if start_gap is None or start_gap > AUTO_GAP:
            share = float(ex.get("search_share", 0.5))
            return [(share, dict(common)), (1.0, {"subsolvers": [BOUND_SUBSOLVER], **common})]
        return [(1.0, dict(common))]
    params = {"subsolvers": [str(ex["bound_worker"])]} if ex.get("bound_worker") else {}
    return [(1.0, {**params, **common})]


def _trace(solver: cp_model.CpSolver, trace: object, t0: float, factor: float) -> cp_model.CpSolverSolutionCallback | None:
    """Progress events (seconds since t0, "objective"|"bound", real value) appended to ``trace``
    when it is a list."""
    if not isinstance(trace, list):
        return None
    solver.best_bound_callback = lambda v: trace.append((time.monotonic() - t0, "bound", v / factor))

    class _Progress(cp_model.CpSolverSolutionCallback):
        def on_solution_callback(self) -> None:
            trace.append((time.monotonic() - t0, "objective", self.objective_value / factor))

    return _Progress()


def cpsat(problem: Problem, opts: SolveOptions) -> Solution:
    return judge_reserved(problem, opts, _solve(with_reserve(problem, opts), opts))
