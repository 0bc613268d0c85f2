"""The PARDNN pipeline (Fawzy et al., Parallel Computing 2021) as one method.

Step 1 (makespan): graph slicing (Algorithm 1) -> [heuristic II: critical-path
chunk splitting] -> LFLAM mapping (Algorithm 2) -> primaries put on devices (the critical path on
the device with the most memory) -> colocation / allowed-device repair -> the late inputs of the
critical-path device's joins pulled onto it while the evaluator confirms (joins.py, not in the
paper). When Step 2 has to move nodes, the mapping with the other reading of span(sc) goes through
Step 2 as well and the better end result is kept (map_clusters).
Step 2 (memory): [heuristic II: residual balancing to Eq. 5] -> [heuristic I: emulate, track, fix
overflow]. Heuristic I targets the capacity minus the reserve (the paper spares 10%; a positive
``opts.reserve`` overrides it); if it cannot get under that, it tries again against the full
capacity, and reports whether the reserve was kept.

Under the static model memory does not depend on the schedule, so one handler pass is exact. Under
the peak model the handler works on the emulated schedule of the current placement (the
evaluator's FIFO executor), then the schedule is emulated again, for ``max_rounds`` rounds (the
full-capacity pass goes on, up to EXTRA_ROUNDS times as many, while each round still cuts the
overflow by MIN_PROGRESS):
the paper recomputes after every single move (O(V) each, O(V^2) overall), which is too slow in
Python at 10^5 nodes, so moves are batched per round. If the placement still overflows in FIFO
order, a memory-aware order (heuristics/memory_order.py) may make it fit: the answer then carries
that per-device order.

Options (``opts.extra``): ``memory_heuristic`` "I" (default), "II", "I+II" or "none";
``chunk_ratio`` (2.0); ``max_rounds`` (8 for the full-capacity pass, half of it for the reserve
pass); ``eq5_tol`` (0.01); ``span_start`` "latest" (default, the paper's), "earliest" (the
authors' code) or "both" (map with both, keep the faster; see map_clusters); ``join_rounds``
(join_rounds(n); 0 turns the join repair off).
"""
from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import replace

import numpy as np

from placement.evaluator import Evaluation, evaluate
from placement.problem import Problem
from placement.solution import OutOfTime, Solution, SolveOptions, halt_if

from ..memory_order import lower_peak_order
from .graph import Graph, ccr
from .joins import pull_join_inputs
from .mapping import SPAN_STARTS, Mapping, clustered_levels, lflam
from .memory_ii import balance_residual, split_critical_path
from .memory_tracker import peak_state, static_state
from .overflow import Units, handle_overflow
from .slicing import Slicing, slice_graph

DEFAULT_RESERVE = 0.10
EXTRA_ROUNDS = 4
MIN_PROGRESS = 0.02


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


def map_clusters(problem: Problem, g: Graph, sl: Slicing, ccr_value: float, perm: np.ndarray,
                 span_starts: tuple[str, ...] = SPAN_STARTS,
                 stop: Callable[[], bool] | None = None) -> list[tuple[np.ndarray, Mapping, Evaluation | None]]:
    """LFLAM once per span rule in ``span_starts``, primaries put on devices (primary p on device
    perm[p]) and constraints repaired. Returns (placement, mapping, evaluation) per rule, the
    shortest evaluated makespan first (ties: the order of ``span_starts``); with a single rule
    nothing is evaluated (None).

    The span of a secondary cluster starts at its first node's parents' finish: the latest one in
    the paper's prose (the default), the earliest in the authors' code. Neither wins everywhere
    (bench/results_pardnn_ref.md): after the join repair the latest is as good on generated
    transformers and better on CNNs, the earliest up to 10% better on LSTMs and 3% on random DAGs.
    Both share the levels and the criticality order, so a second rule costs one more balancing
    pass and one evaluation: "both" runs them always, the default only when memory binds.
    ``stop`` (a stop request's ``is_set``) abandons the mapping (OutOfTime)."""
    if not span_starts:
        return []
    allowed = cluster_allowed(problem, sl, perm)
    clustered = clustered_levels(g, sl, problem.comm)
    out = []
    for rule in span_starts:
        mp = lflam(problem, g, sl, None, problem.comm, problem.k, allowed, ccr_value, span_start=rule, clustered=clustered,
                   stop=stop)
        mp.info["span_start"] = rule
        placement = repair_constraints(problem, perm[np.where(mp.pe >= 0, mp.pe, 0)])
        ev = evaluate(problem, placement, memory_model="static") if len(span_starts) > 1 else None
        out.append((placement, mp, ev))
    out.sort(key=lambda c: c[2].makespan if c[2] is not None else 0.0)
    return out


def join_rounds(n: int) -> int:
    """Default rounds of joins.pull_join_inputs: one evaluation each, so fewer on big graphs
    (8 up to 50K nodes, 2 at 200K, 1 beyond 400K)."""
    return max(1, min(8, 400_000 // max(n, 1)))


def heuristic_one(problem: Problem, placement: np.ndarray, capacity: np.ndarray, memory_model: str,
                  max_rounds: int = 8, deadline: float | None = None, units: Units | None = None,
                  persist: bool = False, stop: Callable[[], bool] | None = None) -> tuple[np.ndarray, dict]:
    """Emulate -> track -> handle overflow, until it fits ``capacity`` or nothing moves; ``stop``
    (a stop request's ``is_set``) abandons it (OutOfTime)."""
    units = units or Units.of_problem(problem)
    pl = placement.copy()
    moves = 0
    rounds = 0
    left = np.zeros(problem.k)
    need = problem.param_bytes + problem.out_bytes
    last_total = np.inf
    while True:
        halt_if(stop)
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
        total = float(left.sum())
        # With ``persist`` (the full-capacity pass), go on past max_rounds (up to EXTRA_ROUNDS x as
        # many) while each round still cuts the total overflow by MIN_PROGRESS: moving more nodes
        # may yet fit.
        stalled = rounds >= max_rounds and (not persist or rounds >= EXTRA_ROUNDS * max_rounds
                                            or total > (1 - MIN_PROGRESS) * last_total)
        last_total = total
        if stalled or late:
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
    placement, info, _ = _run(problem, opts)
    return placement, info


def _run(problem: Problem, opts: SolveOptions) -> tuple[np.ndarray, dict, Evaluation | None]:
    """run_pipeline, plus the last evaluation of Step 1's placement under ``opts.memory_model``
    when Step 2 left that placement as it was (None otherwise), so the verdict need not redo it."""
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
    info["ccr"] = ccr(problem)
    info["t_levels"] = time.monotonic() - t

    t = time.monotonic()
    stop = opts.stop.is_set
    sl = slice_graph(g, k, problem.comm, stop=stop)
    info["primaries"] = sl.primaries
    info["secondaries"] = len(sl.paths) - sl.primaries
    if use_two:
        sl, chunks = split_critical_path(problem, sl, float(extra.get("chunk_ratio", 2.0)))
        info["chunks_moved"] = chunks
    info["t_slicing"] = time.monotonic() - t

    t = time.monotonic()
    span_start = str(extra.get("span_start", "latest"))
    if span_start not in ("both",) + SPAN_STARTS:
        raise ValueError(f"pardnn: span_start must be latest, earliest or both, got {span_start!r}")
    perm = primary_devices(problem)
    rules = SPAN_STARTS if span_start == "both" else (span_start,)
    candidates = map_clusters(problem, g, sl, info["ccr"], perm, rules, stop)
    placement, mp, ev = candidates[0]
    info.update(lookahead_mapped=mp.lookahead_mapped, lookahead_rounds=mp.rounds, balanced=mp.balanced,
                admitted_by=mp.info.get("admitted_by"), span_start=mp.info["span_start"],
                step1_makespans={c[1].info["span_start"]: c[2].makespan for c in candidates if c[2] is not None})
    info["t_mapping"] = time.monotonic() - t

    t = time.monotonic()
    unjoined = placement
    rounds = int(extra.get("join_rounds", join_rounds(problem.n)))
    if rounds > 0 and k > 1:
        if ev is None:
            ev = evaluate(problem, placement, memory_model="static")
        placement, ev, joined = pull_join_inputs(problem, sl, placement, ev, int(perm[0]), rounds, repair_constraints,
                                                 usable_capacity(problem, reserve), opts.memory_model, stop)
        info["joins"] = joined
    info["t_joins"] = time.monotonic() - t

    t = time.monotonic()
    units = Units.of_problem(problem)
    usable = usable_capacity(problem, reserve)

    def fit_memory(placement: np.ndarray) -> tuple[np.ndarray, dict]:
        """Step 2 on one Step-1 placement; the dict says what it did."""
        done: dict = {}
        if use_two:
            placement, moved = balance_residual(problem, placement, usable, units, float(extra.get("eq5_tol", 0.01)),
                                                out_of_time=opts.out_of_time)
            done["residual_moved"] = moved
        if use_one:
            rem = opts.remaining()
            deadline = None if rem is None else time.monotonic() + rem
            rounds = int(extra.get("max_rounds", 8))
            # the reserve is a soft target: its pass gets half the rounds, the full-capacity pass all
            placement, h1 = heuristic_one(problem, placement, usable, opts.memory_model, max(1, rounds // 2), deadline, units,
                                          stop=stop)
            done["reserve_kept"] = not any(h1["overflow"])
            if not done["reserve_kept"]:
                placement, h1b = heuristic_one(problem, placement, problem.memory.astype(float), opts.memory_model,
                                               rounds, deadline, units, persist=True, stop=stop)
                h1 = {"rounds": h1["rounds"] + h1b["rounds"], "moves": h1["moves"] + h1b["moves"], "overflow": h1b["overflow"]}
            done["overflow_moves"] = h1["moves"]
            done["overflow_rounds"] = h1["rounds"]
        return placement, done

    placement, done = fit_memory(placement)
    # Step 2's moves are not predictable from the Step-1 makespan: when memory binds, the other
    # span rule's mapping and the mapping before the join repair go through Step 2 too, and the
    # better end result is kept (info["step1_kept"] says which).
    if done.get("overflow_moves") or done.get("residual_moved"):
        def rank(pl: np.ndarray) -> tuple[bool, float]:
            e = evaluate(problem, pl, memory_model=opts.memory_model)
            return (not e.feasible(problem), e.makespan)

        others = [(pl, m.info["span_start"]) for pl, m, _ in candidates[1:]]
        others += [(pl, m.info["span_start"]) for pl, m, _ in
                   map_clusters(problem, g, sl, info["ccr"], perm, tuple(r for r in SPAN_STARTS if r not in rules), stop)]
        if info.get("joins", {}).get("rounds"):
            others.insert(0, (unjoined, f"{info['span_start']}, no join repair"))
        best = (rank(placement), placement, done, info["span_start"])
        for other, label in others:
            opl, odone = fit_memory(other)
            key = rank(opl)
            if key < best[0]:
                best = (key, opl, odone, label)
        _, placement, done, info["step1_kept"] = best
    info.update(done)
    info["t_memory"] = time.monotonic() - t
    if ev is not None:  # an evaluation carries both memory models; only the label differs
        ev = replace(ev, memory_model=opts.memory_model) if np.array_equal(ev.placement, placement) else None
    return placement, info, ev


def pardnn(problem: Problem, opts: SolveOptions) -> Solution:
    t0 = time.monotonic()
    if problem.n == 0:
        return Solution("pardnn", "heuristic", placement=np.zeros(0, dtype=np.int64), objective=0.0,
                        seconds=time.monotonic() - t0, info={"overflow": [0.0] * problem.k})
    try:
        placement, info, ev = _run(problem, opts)
    except OutOfTime:
        return Solution("pardnn", "unknown", reason="pardnn: stopped before it had a placement",
                        seconds=time.monotonic() - t0)
    t = time.monotonic()
    if ev is None:
        ev = evaluate(problem, placement, memory_model=opts.memory_model)
    info["t_evaluate"] = time.monotonic() - t
    order = None
    if not ev.feasible(problem) and opts.memory_model == "peak":
        # Heuristic I judges placements in FIFO order; the placement may fit in a memory-aware one.
        got = lower_peak_order(problem, placement, ev)
        info["memory_order"] = got.rule
        if got.evaluation.feasible(problem):
            ev, order = got.evaluation, got.order
    if not ev.feasible(problem):
        over = ev.overflow(problem)
        info["overflow"] = over.tolist()
        info["placement"] = placement
        info["makespan"] = ev.makespan
        worst = ", ".join(f"{problem.device_names[d]}: {over[d]:.6g} bytes" for d in np.flatnonzero(over > 0))
        return Solution("pardnn", "unknown", reason=f"pardnn: the overflow handler could not fit memory ({opts.memory_model} model); over capacity on {worst}",
                        seconds=time.monotonic() - t0, info=info)
    info["overflow"] = [0.0] * problem.k
    return Solution("pardnn", "heuristic", placement=ev.placement, order=order, start=ev.start, objective=ev.makespan,
                    seconds=time.monotonic() - t0, info=info)


def pardnn_balanced(problem: Problem, opts: SolveOptions) -> Solution:
    """The same pipeline with ``memory_heuristic`` "I+II": heuristic II balances memory first and
    heuristic I still guarantees the capacity (an explicit ``memory_heuristic`` in opts wins)."""
    sol = pardnn(problem, replace(opts, extra={"memory_heuristic": "I+II", **(opts.extra or {})}))
    sol.method = "pardnn-balanced"
    sol.reason = sol.reason.replace("pardnn:", "pardnn-balanced:", 1)
    return sol
