"""Shared pieces of the exact makespan models (CP-SAT, MIP, brute force).

- :class:`Units`: nodes grouped into placement units (a colocation group moves as one), numbered
  by their lowest node index; the symmetry breaking and the brute force both label devices by it.
- :func:`device_classes` and :func:`canonical_placement`: identical devices (same capacity, same
  allowed units) and the canonical relabelling of a placement (within a class, devices appear in
  the order of the first unit they hold).
- :func:`hint_schedule`: a hint Solution turned into (placement, start), scheduled by the evaluator.
- :func:`device_order` and :func:`finish_solution`: a solver's assignment turned into a Solution
  whose objective is the evaluator's makespan, checked with :func:`placement.evaluator.check`.
- :func:`lower_bound` and :func:`infeasible_reason`: placement.bounds when present.
"""
from __future__ import annotations

import math
import time
from typing import Sequence

import numpy as np

from placement import kernels
from placement.evaluator import ScheduleError, check, evaluate
from placement.problem import Problem
from placement.report import OPTIMAL_GAP, within_optimal_gap
from placement.solution import Solution, SolveOptions

from .pathbound import path_lower_bound
from .units import Units, units  # noqa: F401  (re-exported for the models)

# Relative gap under which a solver's proved optimum counts as "optimal" for the real problem.
OPTIMAL_RTOL = OPTIMAL_GAP["makespan"]


def with_reserve(problem: Problem, opts: SolveOptions) -> Problem:
    """The problem the exact models search when ``opts.reserve`` > 0: capacities shrunk by the
    reserve, so their answers keep the heuristics' safety margin. That is a restriction of the
    user's problem: :func:`judge_reserved` turns its answer into a claim about the user's problem."""
    if not opts.reserve:
        return problem
    if not 0 <= opts.reserve < 1:
        raise ValueError(f"reserve must be in [0, 1), got {opts.reserve}")
    return problem.with_devices(memory=list(problem.memory * (1.0 - opts.reserve)))


def judge_reserved(user: Problem, opts: SolveOptions, sol: Solution) -> Solution:
    """What an exact method's answer on :func:`with_reserve`'s restricted problem proves about the
    ``user``'s problem (identity without a reserve).

    Its schedule fits the stated capacities too (they are larger), so it stays an answer; but the
    restricted optimum and its bound are not the user's: the bound becomes one valid for the stated
    capacities, "optimal" holds only when the answer meets it, and "infeasible" (no placement keeps
    the margin) becomes "unknown", since the stated capacities were never searched."""
    if not opts.reserve:
        return sol
    info = {**sol.info, "reserve": opts.reserve, "reserved_status": sol.status}
    margin = f"the capacities reduced by the reserve {opts.reserve:g}"
    if sol.status == "infeasible":
        return Solution(sol.method, "unknown", seconds=sol.seconds, info=info,
                        reason=f"{sol.method}: no placement fits {margin} ({sol.reason or 'proved'}); "
                               f"the stated capacities were not searched: drop --reserve to solve them")
    lb = lower_bound(user, opts.memory_model, bool(opts.extra.get("path_bound", True)))
    if sol.placement is None or sol.objective is None:
        return Solution(sol.method, sol.status, lower_bound=lb, reason=sol.reason, seconds=sol.seconds, info=info)
    lb = min(lb, sol.objective)
    status = "optimal" if sol.status in ("optimal", "feasible") and is_optimal(sol.objective, lb) else "feasible"
    reason = "" if status == "optimal" else \
        f"{sol.method}: {sol.status} for {margin}; not a proof for the stated capacities"
    return Solution(sol.method, status, placement=sol.placement, start=sol.start, order=sol.order,
                    objective=sol.objective, lower_bound=lb, reason=reason, seconds=sol.seconds, info=info)


def device_classes(problem: Problem) -> list[list[int]]:
    """Devices that are interchangeable: same capacity and the same allowed nodes. Each class is a
    sorted list of device indices; every device is in exactly one class."""
    mask = problem.allowed_mask()
    classes: dict[tuple, list[int]] = {}
    for d in range(problem.k):
        key = (float(problem.memory[d]), mask[:, d].tobytes())
        classes.setdefault(key, []).append(d)
    return sorted(classes.values())


def canonical_placement(problem: Problem, placement: np.ndarray, un: Units | None = None) -> np.ndarray:
    """Relabel the devices of each class so that, within the class, a device's first unit comes
    after the first unit of the device before it (empty devices last). Same makespan and memory."""
    un = un or units(problem)
    first = np.full(problem.k, np.iinfo(np.int64).max)
    for g in range(un.count - 1, -1, -1):
        first[int(placement[un.members[g][0]])] = g
    perm = np.arange(problem.k)
    for cls in device_classes(problem):
        ordered = sorted(cls, key=lambda d: (first[d], d))
        for new, old in zip(cls, ordered):
            perm[old] = new
    return perm[placement]


def hint_schedule(problem: Problem, hint: Solution, memory_model: str) -> tuple[np.ndarray, np.ndarray] | None:
    """The hint's placement and start times (scheduled by the evaluator when the hint has only a
    placement or an order), or None when the hint has no placement or breaks a hard constraint
    other than memory (a memory-infeasible hint is still a useful start)."""
    if hint is None or hint.placement is None:
        return None
    try:
        if hint.start is not None:
            ev = check(problem, hint.placement, hint.start, memory_model, check_memory=False)
        else:
            ev = evaluate(problem, hint.placement, order=hint.order, memory_model=memory_model)
    except ScheduleError:
        return None
    return ev.placement.copy(), ev.start.copy()


def device_order(problem: Problem, placement: np.ndarray, start: Sequence[float]) -> list[list[int]]:
    """Per device, its nodes of positive time sorted by start (ties by topological rank).

    Zero-time nodes are left out: the contract lets them coincide with anything."""
    rank = problem.topo_rank
    busy = [i for i in range(problem.n) if problem.time[i] > 0]
    busy.sort(key=lambda i: (start[i], rank[i]))
    order: list[list[int]] = [[] for _ in range(problem.k)]
    for i in busy:
        order[int(placement[i])].append(i)
    return order


def retime(problem: Problem, placement: np.ndarray, order: Sequence[Sequence[int]],
           time: np.ndarray | None = None, comm: np.ndarray | None = None,
           release: np.ndarray | None = None) -> np.ndarray | None:
    """Earliest start times when each device runs its positive-time nodes in ``order`` (zero-time
    nodes start as soon as their inputs arrive), none before its ``release`` (default 0).
    ``time``/``comm`` override the problem's data. None if the order contradicts the graph.

    With the compiled kernels (placement.kernels) the same pass runs compiled on the graph plus
    the device chains as one CSR: the same floats (each start is the largest of the same sums)."""
    n = problem.n
    cm = problem.comm if comm is None else comm
    fast = kernels.for_size(n)
    if fast is not None:
        start_a = _retime_compiled(fast, problem, placement, order, time, cm, release)
        if start_a is not False:
            return start_a
    dur = (problem.time if time is None else time).tolist()
    delay = np.where(placement[problem.src] != placement[problem.dst], cm, 0).tolist()
    succ: list[list[tuple[int, float]]] = [[] for _ in range(n)]
    indeg = [0] * n
    for e, (u, v) in enumerate(zip(problem.src.tolist(), problem.dst.tolist())):
        succ[u].append((v, delay[e]))
        indeg[v] += 1
    for seq in order:
        for a, c in zip(seq, seq[1:]):
            succ[a].append((c, 0))
            indeg[c] += 1
    start = longest_starts(dur, succ, indeg, [0.0] * n if release is None else [float(r) for r in release])
    return None if start is None else np.asarray(start)


def _retime_compiled(fast, problem: Problem, placement: np.ndarray, order: Sequence[Sequence[int]],
                     time: np.ndarray | None, cm: np.ndarray, release: np.ndarray | None) -> np.ndarray | None | bool:
    """:func:`retime` by ``kernels.release_starts``; False when ``order`` names a node index outside
    0..n-1 (the Python loop, the reference, then does what it does with it)."""
    n = problem.n
    seqs = [np.asarray(seq, dtype=np.int64).ravel() for seq in order]
    a = np.concatenate([s[:-1] for s in seqs] + [np.zeros(0, dtype=np.int64)])
    c = np.concatenate([s[1:] for s in seqs] + [np.zeros(0, dtype=np.int64)])
    if a.size and (min(a.min(), c.min()) < 0 or max(a.max(), c.max()) >= n):
        return False
    pl = np.asarray(placement)
    src = np.concatenate([problem.src, a])
    dst = np.concatenate([problem.dst, c])
    dly = np.concatenate([np.where(pl[problem.src] != pl[problem.dst], cm, 0).astype(np.float64), np.zeros(a.size)])
    ptr = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(np.bincount(src, minlength=n), out=ptr[1:])
    srt = np.argsort(src, kind="stable")  # each node's graph edges in edge order, then its chain edge (as the lists)
    dur = np.asarray(problem.time if time is None else time, dtype=np.float64)
    rel = np.zeros(n) if release is None else np.asarray(release, dtype=np.float64)
    start, done = fast.release_starts(ptr, dst[srt], dly[srt], np.bincount(dst, minlength=n), dur, rel,
                                      np.full(n, -1, dtype=np.int64))
    return start if done == n else None


def longest_starts(dur: Sequence[float], succ: list[list[tuple[int, float]]], indeg: list[int],
                   start: list[float]) -> list[float] | None:
    """Earliest starts on a DAG given as successor lists with edge delays (Kahn's order); ``start``
    holds release times and is updated in place, ``indeg`` is consumed. None if there is a cycle."""
    stack = [v for v in range(len(dur)) if indeg[v] == 0]
    done = 0
    while stack:
        v = stack.pop()
        done += 1
        f = start[v] + dur[v]
        for w, dl in succ[v]:
            if f + dl > start[w]:
                start[w] = f + dl
            indeg[w] -= 1
            if indeg[w] == 0:
                stack.append(w)
    return start if done == len(dur) else None


def lower_bound(problem: Problem, memory_model: str, path_bound: bool = True) -> float:
    """The best of the project's simple valid bounds (placement.bounds: critical path, load / K,
    largest node or group, communication) and, with ``path_bound``, the memory-aware path bound
    (placement.memory_path_bound, and formulations.pathbound with held tensors and unit sequences)."""
    from placement.bounds import makespan_lower_bound

    lb = float(makespan_lower_bound(problem, memory_model if path_bound else None))
    if path_bound:  # the exact models' own path bound adds held tensors and unit sequences
        lb = max(lb, path_lower_bound(problem, memory_model))
    return lb


def infeasible_reason(problem: Problem, memory_model: str) -> str | None:
    """A simple proof that memory cannot fit (placement.bounds.infeasibility), or None."""
    try:
        from placement.bounds import infeasibility
    except ImportError:  # pragma: no cover
        return None
    return infeasibility(problem, memory_model)


def is_optimal(objective: float, bound: float) -> bool:
    """Is the makespan ``objective`` within the documented optimality gap of the proved ``bound``?"""
    return within_optimal_gap(objective, bound, "makespan")


def best_schedule(problem: Problem, placement: np.ndarray, start: np.ndarray, memory_model: str) -> tuple[float, np.ndarray] | None:
    """A checked schedule for a solver's answer: its device order left-justified with the real data
    (exact, and always within static memory); failing that (peak memory), ``start`` itself.
    Returns (makespan, start), or None if neither passes :func:`check`."""
    st = retime(problem, placement, device_order(problem, placement, start))
    for cand in (st, start):
        if cand is None:
            continue
        try:
            ok = check(problem, placement, cand, memory_model)
        except ScheduleError:
            continue
        return ok.makespan, ok.start
    return None


def finish_solution(
    problem: Problem,
    opts: SolveOptions,
    method: str,
    t0: float,
    proved_optimal: bool,
    bound: float | None,
    found: tuple[np.ndarray, np.ndarray] | None,
    info: dict,
    known_lb: float | None = None,
) -> Solution:
    """Build the returned Solution from a checked schedule ``found`` = (placement, start).

    ``bound`` is a valid lower bound for the real problem (or None); it is combined with the simple
    bound (``known_lb``: that bound when the caller has already computed it). The objective is
    recomputed by :func:`check`; "optimal" requires the solver's proof and
    objective == bound within OPTIMAL_RTOL."""
    if known_lb is None:
        known_lb = lower_bound(problem, opts.memory_model, bool(opts.extra.get("path_bound", True)))
    lb = known_lb
    if bound is not None and math.isfinite(bound):
        lb = max(lb, bound)
    seconds = time.monotonic() - t0
    if found is None:
        return Solution(method, "unknown", lower_bound=lb, reason=f"{method}: no feasible solution found within the limits",
                        seconds=seconds, info=info)
    placement, start = found
    ev = check(problem, placement, start, opts.memory_model)
    obj = ev.makespan
    if lb > obj * (1 + OPTIMAL_RTOL) + 1e-9:
        raise RuntimeError(f"{method}: lower bound {lb!r} exceeds the evaluated makespan {obj!r} of its own solution")
    lb = min(lb, obj)
    status = "optimal" if proved_optimal and is_optimal(obj, lb) else "feasible"
    return Solution(method, status, placement=ev.placement, start=ev.start, objective=obj, lower_bound=lb,
                    seconds=seconds, info=info)


def available_memory() -> float:
    """Bytes of memory this machine can still give (Linux MemAvailable; 8 GB where unknown)."""
    try:
        with open("/proc/meminfo") as fh:
            for line in fh:
                if line.startswith("MemAvailable:"):
                    return float(line.split()[1]) * 1024
    except OSError:
        pass
    return 8e9


# A model may use at most this share of the memory available when it is built.
MODEL_MEMORY_SHARE = 0.5


def too_big(method: str, what: str, count: float, bytes_each: float) -> str | None:
    """The reason to refuse a model of ``count`` ``what`` (about ``bytes_each`` bytes each) when
    it would not fit in memory, or None. A 10,000-node MIP once grew to 23 GB before the kernel
    killed it."""
    need, have = count * bytes_each, MODEL_MEMORY_SHARE * available_memory()
    if need <= have:
        return None
    return (f"{method}: refused: the model would hold about {count:,.0f} {what} (~{need / 1e9:.1f} GB), more than "
            f"the {have / 1e9:.1f} GB it may use on this machine")


def unbuilt_solution(problem: Problem, opts: SolveOptions, method: str, t0: float, reason: str,
                     known_lb: float | None = None) -> Solution:
    """What a method returns when its model could not be built (out of time, stopped, or too big):
    its hint's schedule when it was given one (status "feasible", never a proof), else "unknown";
    either way with ``reason``."""
    found = None
    if opts.hint is not None:
        hint = hint_schedule(problem, opts.hint, opts.memory_model)
        if hint is not None:
            got = best_schedule(problem, hint[0], hint[1], opts.memory_model)
            if got is not None:
                found = (hint[0], got[1])
    if known_lb is None:
        known_lb = lower_bound(problem, opts.memory_model, path_bound=False)
    sol = finish_solution(problem, opts, method, t0, False, None, found, {"unbuilt": reason}, known_lb=known_lb)
    sol.reason = reason
    return sol
