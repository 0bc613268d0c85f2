"""The PARDNN pipeline (Fawzy et al., Parallel Computing 2021) as one method.

Step 1 (makespan): weighted levels -> graph slicing (Algorithm 1) -> [heuristic II: critical-path
chunk splitting] -> LFLAM mapping (Algorithm 2) -> primaries put on devices (the critical path on
the device with the most memory) -> colocation / allowed-device repair.
Step 2 (memory): [heuristic II: residual balancing to Eq. 5] -> [heuristic I: emulate, track, fix
overflow]. Heuristic I targets the capacity minus the reserve (the paper spares 10%; a positive
``opts.reserve`` overrides it); if it cannot get under that, it tries again against the full
capacity, and reports whether the reserve was kept.

Under the static model memory does not depend on the schedule, so one handler pass is exact. Under
the peak model the handler works on the emulated schedule of the current placement (the
evaluator's FIFO executor), then the schedule is emulated again, for at most ``max_rounds`` rounds:
the paper recomputes after every single move (O(V) each, O(V^2) overall), which is too slow in
Python at 10^5 nodes, so moves are batched per round.

Options (``opts.extra``): ``memory_heuristic`` "I" (default), "II", "I+II" or "none";
``chunk_ratio`` (2.0); ``max_rounds`` (8 for the full-capacity pass, half of it for the reserve
pass); ``eq5_tol`` (0.01).
"""
from __future__ import annotations

import time

import numpy as np

from placement.evaluator import evaluate
from placement.problem import Problem
from placement.solution import Solution, SolveOptions

from .graph import Graph, ccr, weighted_levels
from .mapping import lflam
from .memory_ii import balance_residual, split_critical_path
from .memory_tracker import peak_state, static_state
from .overflow import Units, handle_overflow
from .slicing import Slicing, slice_graph

DEFAULT_RESERVE = 0.10


def usable_capacity(problem: Problem, reserve: float) -> np.ndarray:
    return problem.memory * (1.0 - reserve)


def cluster_allowed(problem: Problem, sl: Slicing, perm: np.ndarray) -> np.ndarray:
    """(clusters x K) mask: may cluster c be merged into primary p (on device perm[p])?"""
    mask = problem.allowed_mask()[:, perm]
    order = np.argsort(sl.cluster, kind="stable")
    starts = np.searchsorted(sl.cluster[order], np.arange(len(sl.paths)))
    out = np.logical_and.reduceat(mask[order], starts, axis=0)
    out[~out.any(axis=1)] = True  # contradictory members: leave it to repair_constraints
    return out


def primary_devices(problem: Problem) -> np.ndarray:
    """Primary p goes to device perm[p]: the critical path to the device with the most memory."""
    return np.argsort(-problem.memory, kind="stable").astype(np.int64)


def repair_constraints(problem: Problem, placement: np.ndarray) -> np.ndarray:
    """Make a placement respect allowed devices and colocation: a group goes where most of its
    compute already is among the devices all its members may use; a lone node on a forbidden
    device goes to its allowed device with the least compute so far."""
    pl = placement.copy()
    mask = problem.allowed_mask()
    load = np.bincount(pl, weights=problem.time, minlength=problem.k)
    for members in problem.groups:
        ok = mask[members[0]]
        here = np.bincount(pl[members], weights=problem.time[members] + 1e-12, minlength=problem.k)
        here = np.where(ok, here, -np.inf)
        pl[members] = int(np.argmax(here))
    bad = np.flatnonzero(~mask[np.arange(problem.n), pl])
    for v in bad.tolist():
        choice = int(np.argmin(np.where(mask[v], load, np.inf)))
        load[pl[v]] -= problem.time[v]
        load[choice] += problem.time[v]
        pl[v] = choice
    return pl


def heuristic_one(problem: Problem, placement: np.ndarray, capacity: np.ndarray, memory_model: str,
                  max_rounds: int = 8, deadline: float | None = None, units: Units | None = None) -> tuple[np.ndarray, dict]:
    """Emulate -> track -> handle overflow, until it fits ``capacity`` or nothing moves."""
    units = units or Units.of_problem(problem)
    pl = placement.copy()
    moves = 0
    rounds = 0
    left = np.zeros(problem.k)
    need = problem.param_bytes + problem.out_bytes
    while True:
        if memory_model == "static":
            state = static_state(problem, pl)
        else:
            ev = evaluate(problem, pl, memory_model="peak")
            state = peak_state(problem, pl, ev.start, ev.finish)
        left = np.maximum(state.memory - capacity, 0.0)
        if not np.any(state.memory > capacity * (1 + 1e-12) + 1e-9):
            left[:] = 0.0
            break
        # a static pass is cheap and exact, so only the peak model's re-emulation rounds obey the deadline
        late = memory_model != "static" and deadline is not None and time.monotonic() > deadline
        if rounds >= max_rounds or late:
            break
        rounds += 1
        fits = None if memory_model == "static" else np.maximum(state.potential, need)
        res = handle_overflow(problem, pl, units, state.memory, state.potential, capacity, fits)
        if not res.moved:
            break
        moves += len(res.moved)
        pl = res.placement
    return pl, {"rounds": rounds, "moves": moves, "overflow": left.tolist()}


def run_pipeline(problem: Problem, opts: SolveOptions) -> tuple[np.ndarray, dict]:
    """All PARDNN steps; returns the placement and per-step information."""
    extra = opts.extra or {}
    which = str(extra.get("memory_heuristic", "I")).upper()
    if which not in ("I", "II", "I+II", "NONE"):
        raise ValueError(f"pardnn: memory_heuristic must be I, II, I+II or none, got {which!r}")
    use_one = which in ("I", "I+II")
    use_two = which in ("II", "I+II")
    reserve = opts.reserve if opts.reserve > 0 else DEFAULT_RESERVE
    info: dict = {"memory_heuristic": which, "reserve": reserve}
    k = problem.k
    t = time.monotonic()
    g = Graph.of(problem)
    tl, _, _ = weighted_levels(g, problem.comm)
    info["ccr"] = ccr(problem)
    info["t_levels"] = time.monotonic() - t

    t = time.monotonic()
    sl = slice_graph(g, k, problem.comm)
    info["primaries"] = sl.primaries
    info["secondaries"] = len(sl.paths) - sl.primaries
    if use_two:
        sl, chunks = split_critical_path(problem, sl, float(extra.get("chunk_ratio", 2.0)))
        info["chunks_moved"] = chunks
    info["t_slicing"] = time.monotonic() - t

    t = time.monotonic()
    perm = primary_devices(problem)
    mp = lflam(problem, g, sl, tl, problem.comm, k, cluster_allowed(problem, sl, perm), info["ccr"])
    pe = np.where(mp.pe >= 0, mp.pe, 0)
    placement = repair_constraints(problem, perm[pe])
    info.update(lookahead_mapped=mp.lookahead_mapped, lookahead_rounds=mp.rounds, balanced=mp.balanced,
                admitted_by=mp.info.get("admitted_by"))
    info["t_mapping"] = time.monotonic() - t

    t = time.monotonic()
    units = Units.of_problem(problem)
    usable = usable_capacity(problem, reserve)
    if use_two:
        placement, moved = balance_residual(problem, placement, usable, units, float(extra.get("eq5_tol", 0.01)),
                                            out_of_time=opts.out_of_time)
        info["residual_moved"] = moved
    if use_one:
        rem = opts.remaining()
        deadline = None if rem is None else time.monotonic() + rem
        rounds = int(extra.get("max_rounds", 8))
        # the reserve is a soft target: its pass gets half the rounds, the full-capacity pass all
        placement, h1 = heuristic_one(problem, placement, usable, opts.memory_model, max(1, rounds // 2), deadline, units)
        info["reserve_kept"] = not any(h1["overflow"])
        if not info["reserve_kept"]:
            placement, h1b = heuristic_one(problem, placement, problem.memory.astype(float), opts.memory_model,
                                           rounds, deadline, units)
            h1 = {"rounds": h1["rounds"] + h1b["rounds"], "moves": h1["moves"] + h1b["moves"], "overflow": h1b["overflow"]}
        info["overflow_moves"] = h1["moves"]
        info["overflow_rounds"] = h1["rounds"]
    info["t_memory"] = time.monotonic() - t
    return placement, info


def pardnn(problem: Problem, opts: SolveOptions) -> Solution:
    t0 = time.monotonic()
    if problem.n == 0:
        return Solution("pardnn", "heuristic", placement=np.zeros(0, dtype=np.int64), objective=0.0,
                        seconds=time.monotonic() - t0, info={"overflow": [0.0] * problem.k})
    placement, info = run_pipeline(problem, opts)
    t = time.monotonic()
    ev = evaluate(problem, placement, memory_model=opts.memory_model)
    info["t_evaluate"] = time.monotonic() - t
    if not ev.feasible(problem):
        over = ev.overflow(problem)
        info["overflow"] = over.tolist()
        info["placement"] = placement
        info["makespan"] = ev.makespan
        worst = ", ".join(f"{problem.device_names[d]}: {over[d]:.6g} bytes" for d in np.flatnonzero(over > 0))
        return Solution("pardnn", "unknown", reason=f"pardnn: the overflow handler could not fit memory ({opts.memory_model} model); over capacity on {worst}",
                        seconds=time.monotonic() - t0, info=info)
    info["overflow"] = [0.0] * problem.k
    return Solution("pardnn", "heuristic", placement=ev.placement, objective=ev.makespan,
                    seconds=time.monotonic() - t0, info=info)


def pardnn_balanced(problem: Problem, opts: SolveOptions) -> Solution:
    """The same pipeline with ``memory_heuristic`` "I+II": heuristic II balances memory first and
    heuristic I still guarantees the capacity (an explicit ``memory_heuristic`` in opts wins)."""
    from dataclasses import replace

    sol = pardnn(problem, replace(opts, extra={"memory_heuristic": "I+II", **(opts.extra or {})}))
    sol.method = "pardnn-balanced"
    sol.reason = sol.reason.replace("pardnn:", "pardnn-balanced:", 1)
    return sol
