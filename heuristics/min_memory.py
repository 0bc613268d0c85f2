"""Memory-first placement (``min-memory``): the smallest per-device memory at which a training
graph is placed under the peak model.

Why: the list schedulers (ETF, HEFT, ...) pick the node to start by time and fill devices as they
go; on a training graph whose activations live from the forward to the backward pass, whichever
device ends up with the late consumers holds them all, and nothing fit below 2.2 x the memory lower
bound on the 10K LSTM (3.3 x for K = 8). Here the order is fixed first, one that keeps a single
device's live bytes small (rule "net" of heuristics.memory_order), and the devices share it:

- nodes are taken in that order; each device runs its own nodes in that order, each as early as its
  inputs and its previous node allow (the evaluator's schedule for that per-device order);
- every device's live bytes are tracked as the evaluator measures them (heuristics.peak_tracker),
  so the peak accepted is the evaluator's peak on the returned order;
- a node may go to a device whose peak stays within a level, ``max(floor, largest peak / capacity
  so far) x capacity`` (the "ratchet": once a node fitted nowhere, the others may rise as high), or
  ``floor x capacity`` without the ratchet; when none is within it, the node goes where the peak
  grows least;
- among the devices within the level: the one where it finishes earliest, or ("by area") the one
  where it adds the fewest bytes x time, counting its output as held until its consumers' other
  inputs allow them to start. Why the latter: a node that frees an activation (the backward pass)
  can go to any device with room over the activation's whole lifetime, and bytes x time sends it
  where the tensor is already held; and a device that would run a node early (a weight gradient
  of an unrolled RNN, whose accumulation chain runs on elsewhere) only makes its output wait
  longer: on the 10K LSTM such gradients, received early and summed late, were most of each
  device's peak before the output's wait was counted (1.65 -> 1.45 x the bound).
- a unit's params (colocation group) go first to a device whose params stay within the
  bin-packing bound of all params (the two 0.39 GB groups of the 10K LSTM ended on one device).

:func:`min_memory` tries passes (:func:`passes`) from the most makespan-minded to the most
memory-minded until one fits. When none fits, the peak descent (heuristics/peak_descent.py) moves
single units off the devices above capacity, from each pass's placement, nearest first, until one
fits (within ``opts.extra["descent_share"]`` of the time left, when given: the portfolio's). Where
none fits, ``info["resume"]`` holds where the descents stopped, and a later run given it as
``opts.extra["resume_descents"]`` goes on from there without the passes (the portfolio's rescue,
heuristics/portfolio.py RERUN_USED). Deterministic: no randomness; ties go to the lower device.
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass, replace
from typing import Callable, Iterator

import numpy as np

from placement.evaluator import Evaluation, evaluate, schedule_order
from placement.light_order import net_sequence
from placement.memory_bounds import bin_packing_bound, memory_lower_bound, param_units
from placement.problem import Problem
from placement.solution import Solution, SolveOptions

from .peak_descent import Descended, descents, pressure
from .peak_kicks import kick_descend
from .peak_holders import device_orders
from .peak_tracker import PeakTracker

TOL = 1e-12  # relative tolerance of a capacity check (the evaluator's)
LEVEL_STEP = 1.06  # ratio between successive floors of min_memory's passes
# A pass's seconds per node + edge, to decide before the first pass whether more than HURRY_PASSES
# passes fit the time limit (the 200K-node LSTM, 670K nodes + edges: 23-40 s a pass at load 6-8, up
# to 80 s busier; the 50K LSTM: 2.5-7 s).
PASS_SECONDS_PER_ELEMENT = 5e-5
HURRY_PASSES = 4
# The descents start only with time for this many evaluations of the graph (timed on the passes):
# on the imported models (session 27) a descent made 2-116 moves with up to 9,600 evaluations.
DESCENT_MIN_EVALUATIONS = 100
ORDER_SLACK = 1.25  # an order whose single-device peak exceeds the best order's by more is not tried


@dataclass
class Placed:
    """A placement built along one order: device per node, per-device order, and per device the
    peak the tracker accepted (the evaluator's peak for that order)."""

    placement: np.ndarray
    order: list[list[int]]
    peak: np.ndarray
    floor: float
    by_area: bool
    ratchet: bool


def memory_light_orders(problem: Problem, stop: Callable[[], bool] | None = None) -> Iterator[tuple[str, np.ndarray]]:
    """Topological orders whose single-device peak is small, by name: rule "net" of
    heuristics.memory_order on one device (placement.light_order.net_sequence; 1.04 x the K = 1
    memory bound on the 10K LSTM, 0.1 s), weighing the NET_CANDIDATES nodes ready longest ("net"),
    then the 2048 ready longest ("net-2048"). Which places better varies with the graph and the
    level (on the 10K LSTM, K = 4, their smallest peaks over the levels were 1.315 and 1.360 x the
    bound, at different levels), so :func:`min_memory` tries both; but an order whose own
    single-device peak exceeds the other's by more than ORDER_SLACK is left out: on the 50K and 200K
    LSTMs "net" piles up weight gradients (30.1 and 209 GB on one device, against 10.4 and 37.0 GB
    for "net-2048"), its passes never came near (2.4 x over where "net-2048" was 1.05 x) and at 200K
    nodes each one costs 30-80 s of the time limit. Yields nothing once ``stop()`` turns true
    (checked between the four steps, about 1 s each at 200K nodes)."""
    named: list[tuple[str, np.ndarray]] = []
    for name, window in (("net", None), ("net-2048", 2048)):
        if stop is not None and stop():
            return
        named.append((name, net_sequence(problem) if window is None else net_sequence(problem, window=window)))
    peaks = []
    for _, seq in named:
        if stop is not None and stop():
            return
        peaks.append(single_device_peak(problem, seq))
    best = min(peaks)
    for (name, seq), peak in zip(named, peaks):
        if peak <= ORDER_SLACK * best:
            yield name, seq


def single_device_peak(problem: Problem, sequence: np.ndarray) -> float:
    """The evaluator's peak (params included) of the whole graph on one device running ``sequence``."""
    one = replace(problem, memory=np.array([np.inf]), device_names=["all"], allowed=[None] * problem.n)
    ev = evaluate(one, np.zeros(problem.n, dtype=np.int64), order=[sequence.tolist()], memory_model="peak")
    return float(ev.peak_memory[0])


def param_share(problem: Problem) -> float:
    """The params a device is allowed before any other limit binds: the bin-packing lower bound of
    the units' params over the K devices (placement.memory_bounds)."""
    return bin_packing_bound(param_units(problem), problem.k)


def place_along(problem: Problem, sequence: np.ndarray, floor: float, by_area: bool = False, ratchet: bool = True,
                stop: Callable[[], bool] | None = None) -> Placed | None:
    """Place the nodes in ``sequence`` (a topological order) one by one (module docstring).
    Returns None when ``stop()`` turns true (checked every 512 nodes)."""
    n, k = problem.n, problem.k
    cap = np.asarray(problem.memory, dtype=float)
    finite = np.isfinite(cap)
    tracker = PeakTracker(problem, cap)
    dev = [-1] * n
    fin = [0.0] * n
    free = [0.0] * k
    order: list[list[int]] = [[] for _ in range(k)]
    pptr, pnbr, peid = problem.pred_ptr
    pptr_l, pnbr_l = pptr.tolist(), pnbr.tolist()
    comm_e = problem.comm[peid].tolist()
    dur = problem.time.tolist()
    colocate = problem.colocate.tolist()
    every = list(range(k))
    util = 0.0  # largest peak / capacity so far over the devices
    sptr, snbr, _ = problem.succ_ptr
    succ = [snbr[sptr[v]:sptr[v + 1]].tolist() for v in range(n)]
    ready_lb = [0.0] * n  # latest finish among a node's inputs placed so far
    out = problem.out_bytes.tolist()
    param_level = param_share(problem)
    for count, v in enumerate(sequence.tolist()):
        if stop is not None and count % 512 == 0 and stop():
            return None
        g = colocate[v]
        if g >= 0 and g in tracker.group_dev:
            cands = [tracker.group_dev[g]]
        elif problem.has_allowed and problem.allowed[v] is not None:
            cands = sorted(int(d) for d in problem.allowed[v])
        else:
            cands = every
        # Ready time on each device: inputs from elsewhere pay their transfer.
        local = [0.0] * k
        remote = [0.0] * k
        for j in range(pptr_l[v], pptr_l[v + 1]):
            u = pnbr_l[j]
            du = dev[u]
            if fin[u] > local[du]:
                local[du] = fin[u]
            c = fin[u] + comm_e[j]
            if c > remote[du]:
                remote[du] = c
        top1 = max(range(k), key=lambda d: remote[d])
        r1 = remote[top1]
        r2 = max((remote[d] for d in range(k) if d != top1), default=0.0)
        timing = []
        for d in cands:
            s = max(free[d], local[d], r2 if d == top1 else r1)
            timing.append((s + dur[v], d, s))
        timing.sort()
        level = max(floor, util) if ratchet else floor
        wait = max((ready_lb[w] for w in succ[v]), default=0.0) if by_area else 0.0
        adds = tracker._param_cost(v)
        pick = None
        best = None
        if by_area:
            # Bytes x time this adds on each device, with v's output held at least until its
            # consumers' other inputs allow them to start (a device that would run v early only
            # makes its output wait longer); the first device in that order within the level.
            timing = sorted(timing, key=lambda x: (sum(size * (x[0] - a) for a, size, _ in tracker._pieces(v, x[1], x[2], x[0]))
                                                   + out[v] * max(0.0, wait - x[0]), x[0], x[1]))
        for f, d, s in timing:
            if adds > 0 and tracker.params[d] + adds > max(param_level, float(tracker.params.max())) * (1 + TOL) + 1e-9:
                continue  # a new unit's params go where params stay level (bin packing, largest first)
            pk = tracker.peak_if(v, d, s, f)
            if not finite[d] or pk <= level * cap[d] * (1 + TOL) + 1e-9:
                pick = (d, s, f)
                break
            key = (pk / cap[d], f)
            if best is None or key < best[0]:
                best = (key, (d, s, f))
        if pick is None:
            if best is None:  # every device refused the params: the one with the fewest
                f, d, s = min(timing, key=lambda x: (tracker.params[x[1]], x[0]))
                best = (None, (d, s, f))
            pick = best[1]
        d, s, f = pick
        tracker.place(v, d, s, f)
        dev[v] = d
        fin[v] = f
        free[d] = f
        order[d].append(v)
        for w in succ[v]:
            if f > ready_lb[w]:
                ready_lb[w] = f
        if finite[d]:
            util = max(util, (tracker.params[d] + tracker.top[d]) / cap[d])
    return Placed(np.asarray(dev, dtype=np.int64), order, tracker.peak(), floor, by_area, ratchet)


def passes(problem: Problem, memory_model: str, bound: float | None = None) -> list[tuple[float, bool, bool, int]]:
    """The passes :func:`min_memory` tries, in order: (floor, by_area, ratchet, orders), ``orders``
    being how many of :func:`memory_light_orders` to try it with.

    Floor 1 with the earliest-finish choice first (the best makespan when memory is loose); then the
    bytes x time choice at floors from 1 down to ``bound`` (default: memory_lower_bound) / capacity
    in steps of LEVEL_STEP; then the same floors without the ratchet (the threshold stays at the
    floor, and only a node that fits nowhere goes above it), first order only: on the 10K LSTM
    (K = 4) the ratchet's smallest peak was 1.315 x the bound, without it 1.299 x, at 1.5-2 x the
    makespan. Other models and unlimited memory: the first pass only."""
    cap = float(np.min(problem.memory))
    if memory_model != "peak" or not math.isfinite(cap) or cap <= 0:
        return [(1.0, False, True, 2)]
    if bound is None:
        bound = float(memory_lower_bound(problem, "peak")["best"])
    lowest = min(1.0, bound / cap)
    levels = []
    f = 1.0
    while f > lowest * (1 + 1e-9):
        levels.append(f)
        f /= LEVEL_STEP
    levels.append(lowest)
    return [(1.0, False, True, 2)] + [(f, True, True, 2) for f in levels] + [(f, True, False, 1) for f in levels]


def min_memory(problem: Problem, opts: SolveOptions) -> Solution:
    """Memory-first placement along memory-light orders (module docstring): the passes of
    :func:`passes`, each along the orders of :func:`memory_light_orders` it names, until one fits. A
    higher floor leaves the scheduler more freedom, so the first to fit is as a rule the shortest.
    Under a time limit, once the passes left would not fit the time left at the pace of the last
    one, those at the lowest floor go first (at 200K nodes a pass takes 30-80 s): an answer at the
    smallest memory before a better makespan. When fewer than HURRY_PASSES passes fit the time left
    (estimated: PASS_SECONDS_PER_ELEMENT), they go first from the start: at 200K nodes the first pass
    (floor 1, earliest finish) took 30-40 s of a warm start of about 60 s and rarely fits where
    memory is tight, and when the portfolio is run again with the rest of the limit it starts over."""
    t0 = time.monotonic()
    resume = opts.extra.get("resume_descents")
    if (resume is not None or opts.extra.get("kick_from")) and opts.memory_model == "peak":
        # an earlier run's passes all overflowed: go on with its descents where they stopped
        near = [(over, i, placement, seq, name) for i, (over, placement, seq, name) in enumerate(resume or [])]
        return _descended(problem, opts, near, {"passes": [], "resumed": len(near)}, t0, 0.0)
    orders: list[tuple[str, np.ndarray]] = []
    source = memory_light_orders(problem, opts.out_of_time)
    tried: list[dict] = []
    found = None
    todo = [(floor, by_area, ratchet, i) for floor, by_area, ratchet, count in
            passes(problem, opts.memory_model, opts.extra.get("memory_lower_bound")) for i in range(count)]
    lowest = min(p[0] for p in todo)

    def hurry(p: tuple[float, bool, bool, int]) -> tuple[bool, bool]:
        return p[0] > lowest, p[2]  # the lowest floor's passes first, the one without the ratchet first

    hurried = False
    near: list[tuple] = []  # (peak / capacity, pass, placement, sequence, order name) of the passes that overflowed
    eval_seconds = math.inf  # the quickest evaluation of a pass's placement: what one descent move costs
    left = opts.remaining()
    if left is not None and len(todo) > 1 and left < HURRY_PASSES * PASS_SECONDS_PER_ELEMENT * (problem.n + problem.m):
        hurried = True  # only a few passes fit: do not spend one on the makespan-minded first pass
        todo.sort(key=hurry)
    while todo and not opts.out_of_time():
        floor, by_area, ratchet, i = todo.pop(0)
        while i >= len(orders):
            nxt = next(source, None)
            if nxt is None:
                break
            orders.append(nxt)
        if i >= len(orders):
            continue
        name, seq = orders[i]
        t = time.monotonic()
        got = place_along(problem, seq, floor, by_area=by_area, ratchet=ratchet, stop=opts.out_of_time)
        if got is None:
            break
        t_eval = time.monotonic()
        ev = evaluate(problem, got.placement, order=got.order, memory_model=opts.memory_model)
        eval_seconds = min(eval_seconds, time.monotonic() - t_eval)
        ok = ev.feasible(problem)
        over = float(np.max(ev.memory / problem.memory))
        tried.append({"order": name, "floor": round(floor, 4), "by_area": by_area, "ratchet": ratchet, "fits": ok,
                      "makespan": ev.makespan, "memory_over_capacity": over, "seconds": round(time.monotonic() - t, 3)})
        if ok:
            found = (got, ev, name)
            break
        near.append((over, len(near), got.placement, seq, name))
        left = opts.remaining()
        if not hurried and left is not None and left < len(todo) * (time.monotonic() - t):
            hurried = True
            todo.sort(key=hurry)  # stable
    info: dict = {"passes": tried}
    if found is None and near and opts.memory_model == "peak" and not opts.out_of_time():
        return _descended(problem, opts, near, info, t0, eval_seconds)
    if found is None and near and opts.memory_model == "peak":
        info["resume"] = [(over, placement, seq, name) for over, _, placement, seq, name in _ranked(near)]
    if found is None:
        why = ("out of time" if opts.out_of_time() else "no pass fitted the capacity" if opts.memory_model == "peak"
               else "its placement, built for the peak model, exceeds static memory")
        return Solution("min-memory", "unknown", reason=f"min-memory: {why}", seconds=time.monotonic() - t0, info=info)
    got, ev, name = found
    info.update(order=name, floor=got.floor, by_area=got.by_area, ratchet=got.ratchet, accepted_peak=got.peak.tolist())
    return _answer(problem, opts, got.placement, got.order, ev, info, t0)


def _answer(problem: Problem, opts: SolveOptions, placement: np.ndarray, order: list[list[int]], ev: Evaluation,
            info: dict, t0: float) -> Solution:
    """min-memory's answer: the placement in its own order, or in FIFO when that also fits and is
    shorter (:func:`fifo_if_better`)."""
    order, ev = fifo_if_better(problem, placement, order, ev, opts.memory_model)
    info["fifo"] = order is None
    return Solution("min-memory", "heuristic", placement=ev.placement, order=order, start=ev.start,
                    objective=ev.makespan, seconds=time.monotonic() - t0, info=info)


def _ranked(near: list[tuple]) -> list[tuple]:
    """The overflowing passes (peak / capacity, pass, placement, sequence, order) nearest to
    fitting first, each placement once: two orders that placed alike descend alike."""
    ranked, seen = [], set()
    for x in sorted(near, key=lambda x: x[:2]):
        key = np.asarray(x[2], dtype=np.int64).tobytes()
        if key not in seen:
            seen.add(key)
            ranked.append(x)
    return ranked


def _descended(problem: Problem, opts: SolveOptions, near: list[tuple], info: dict, t0: float,
               eval_seconds: float) -> Solution:
    """No pass fitted: the peak descent (heuristics/peak_descent.py) from each pass's placement,
    nearest to fitting first, each device in that pass's order, until one ends within the capacity.
    Why every pass: the nearest is not always the one that descends furthest (the imported MoE at
    K = 4 and 1.05 x its memory bound: the pass at 1.156 x the capacity ends at 1.032, one at 1.203
    fits). When the descents may keep all the time left (no ``descent_share``: min-memory alone, or
    the portfolio's last turn) and every one ended at a local minimum, kicks
    (heuristics/peak_kicks.py) from the lowest of those minima, and of an earlier run's
    (``kick_from``), use the rest. Kicks fill the time a limit leaves: without a time limit none
    run (on a 2K-node graph a kick's descent takes seconds, and 200 idle kicks end the search)."""
    runs: list[dict] = []
    left, share = opts.remaining(), opts.extra.get("descent_share")
    until = None if left is None or share is None else time.monotonic() + float(share) * left

    def stop() -> bool:
        return opts.out_of_time() or (until is not None and time.monotonic() >= until)

    ranked = _ranked(near)
    info["resume"] = [(over, placement, seq, name) for over, _, placement, seq, name in ranked]
    if until is not None and until - time.monotonic() < DESCENT_MIN_EVALUATIONS * eval_seconds:
        # a descent takes tens to thousands of evaluations: on a graph this large its time would
        # buy nothing and the members after min-memory would lose it
        return Solution("min-memory", "unknown", seconds=time.monotonic() - t0, info=info,
                        reason=f"min-memory: no pass fitted the capacity (no time for a peak descent: "
                               f"{DESCENT_MIN_EVALUATIONS} evaluations need about "
                               f"{DESCENT_MIN_EVALUATIONS * eval_seconds:.3g} s)")
    info["descents"] = runs
    done: set[int] = set()
    cut: tuple | None = None  # where a descent the clock stopped ended: the first to resume
    minima = [_minimum_descended(problem, m) for m in opts.extra.get("kick_from") or []]
    for i, got, seconds in descents(problem, [(placement, seq) for _, _, placement, seq, _ in ranked], stop):
        over, name, ev = ranked[i][0], ranked[i][4], got.evaluation
        to = float(np.max(ev.memory / problem.memory))
        runs.append({"order": name, "from": over, "to": to, "moves": got.moves,
                     "evaluations": got.evaluations, "ended": got.reason, "seconds": round(seconds, 3)})
        if ev.feasible(problem):
            info["order"] = name
            return _answer(problem, opts, got.placement, got.order, ev, info, t0)
        done.add(i)
        if got.reason == "stopped":
            cut = (to, got.placement, schedule_order(problem, ev.start), name)
        else:
            minima.append((got, name))
    minima = sorted(minima, key=lambda m: pressure(problem, m[0].evaluation))[:1]
    kicked = int(opts.extra.get("kicked", 0))  # kicks an earlier run made: its random choices are not repeated
    if minima and share is None and opts.remaining() is not None and not stop():
        t = time.monotonic()
        start, name = minima[0]
        got, kicks = kick_descend(problem, start, seed=[opts.seed, kicked], stop=stop)
        kicked += kicks
        info["kicked"] = kicked
        info["kicks"] = {"from": float(np.max(start.evaluation.memory / problem.memory)),
                         "to": float(np.max(got.evaluation.memory / problem.memory)), "kicks": kicks,
                         "ended": got.reason, "seconds": round(time.monotonic() - t, 3)}
        if got.evaluation.feasible(problem):
            info["order"] = f"{name}, kicked"
            return _answer(problem, opts, got.placement, got.order, got.evaluation, info, t0)
        minima = [(got, name)]
    info["kicked"] = kicked
    # What a later run may go on with (portfolio's rescue): the cut descent's end, then the starts
    # not yet descended; a descent that ended at a local minimum is not worth repeating, but the
    # lowest such end is where kicks start (``minima``).
    info["resume"] = ([cut] if cut is not None else []) + \
        [(over, placement, seq, name) for j, (over, _, placement, seq, name) in enumerate(ranked) if j not in done]
    info["minima"] = [(float(np.max(m.evaluation.memory / problem.memory)), m.placement,
                       schedule_order(problem, m.evaluation.start), name) for m, name in minima]
    why = "out of time" if opts.out_of_time() else "no pass fitted the capacity"
    if runs:
        ended = "its time for them ended" if stop() else "none fitted"
        why += f"; peak descents from {len(runs)} of them: {ended} (least: {min(r['to'] for r in runs):.3f} x it)"
    if "kicks" in info:
        why += f"; {info['kicks']['kicks']} kicks from the lowest: {info['kicks']['to']:.3f} x it"
    return Solution("min-memory", "unknown", reason=f"min-memory: {why}", seconds=time.monotonic() - t0, info=info)


def _minimum_descended(problem: Problem, minimum: tuple) -> tuple[Descended, str]:
    """An earlier run's local minimum (peak / capacity, placement, sequence, order name) as a
    descent's end, evaluated again in its sequence."""
    _, placement, seq, name = minimum
    pl = np.asarray(placement, dtype=np.int64)
    order = device_orders(pl, seq, problem.k)
    ev = evaluate(problem, pl, order=order, memory_model="peak")
    return Descended(pl, ev, order, 0, 1, "earlier"), name


def fifo_if_better(problem: Problem, placement: np.ndarray, order: list[list[int]], ev: Evaluation,
                   memory_model: str) -> tuple[list[list[int]] | None, Evaluation]:
    """The schedule to answer with: the runtime's own FIFO order (order None) when the placement
    also fits in it with a shorter makespan, else ``order`` and its evaluation ``ev``."""
    fifo = evaluate(problem, placement, memory_model=memory_model)
    if fifo.feasible(problem) and fifo.makespan < ev.makespan:
        return None, fifo
    return order, ev
