"""Repair a fast schedule until it fits (``mem-repair``), under the peak memory model.

Why: at moderate memory (1.5-2 x the smallest) the members that fit build their placement for
memory (min-memory, mem-span, chain-split) and lose makespan, while ETF's schedule with unlimited
memory, run in its own order, is often close to fitting or fits already: on the 200K-node CNN
training graph at K = 4 and 19.2 GB it fits as it is (3468.8, against 3943.6 for the portfolio's
best before; bench/results_peak.md, session 11). Where it does not, the overflow comes mostly from
copies: a ResNeXt block's input is read by every path's weight gradient, so every device that runs
a path holds it until the backward pass (50K CNN, K = 8: 45 GB alive at the peaks, 19 GB of
distinct tensors). Moving the readers to where the tensor already is removes the copy.

How: a tensor's buffer lives on the devices of its consumers (docs/model.md: held from the
producer's finish, or its start when local, until the last consumer there finishes), so at an
over-capacity device's peak moment its bytes belong to consumers that run later. Each step
evaluates the placement (each device running its nodes in the order of ETF's sequence: a
topological order, so any placement gets a valid order), takes every over-capacity device's
buffers alive at its peak moment, credits each to its consumers there that finish later (the
bytes a unit would leave behind, its outputs read there, discounted), and moves those units
(whole colocation groups) elsewhere, the cheapest per byte first, until the bytes freed cover the
overflow plus MARGIN. A move's target is the device where it costs least: transfer time added on
edges to nodes left behind minus what it saves on edges to nodes already there, plus any work
beyond LOAD_SHARE of the makespan; it must have room at its own peak moment for the inputs the
unit would bring that it does not hold then. The batch is judged by the evaluator: kept when the
total overflow falls (halved first while it slows the makespan by more than JUMP), else undone
and halved, and a small failed batch's units are not tried again; the repair gives up when ten
steps lowered the overflow by less than a fifth. When the schedule still overflows at the end,
by at most 10% on every device, the peak descent (heuristics/peak_descent.py) moves single units while that
lowers the peaks, then the memory-aware orders (heuristics.memory_order) are tried. Every answer is
the evaluator's makespan and peak on the order returned (FIFO when that fits and is faster).

Deterministic (no randomness; ties go to the lower node and device index).
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from placement.evaluator import Evaluation, buffers, evaluate, peak_profile, schedule_order
from placement.problem import Problem
from placement.solution import Solution, SolveOptions

from .list_scheduling import Stopped, etf_schedule
from .memory_order import lower_peak_order
from .min_memory import fifo_if_better
from .peak_descent import descend
from .peak_holders import Mover, device_orders, peak_holders

MARGIN = 0.05  # a step aims below capacity by this fraction: freed bytes are an estimate
MAX_STEPS = 60
JUMP = 0.02  # a batch slowing the makespan by more is halved (its cheapest moves kept) until one move is left
MIN_SHARE = 1 / 64
TABU_BATCH = 8  # a failed batch of at most this many moves bars its units; a larger one is halved
STALL_STEPS, STALL_GAIN = 10, 0.2  # give up when 10 steps lowered the overflow by less than 20%
REORDER_WITHIN = 0.1  # the peak descent and the memory-aware orders are tried at the end only within 10% of capacity
DESCENT_EVALUATIONS = 200  # the final descent's evaluations at most (about 4 s at 32K nodes)
STOP_EVERY = 256  # units weighed between two checks of the stop callback
LOAD_SHARE = 0.9  # a move costs the work it adds on a device beyond this share of the makespan


@dataclass
class Repaired:
    """The placement reached, its evaluation (on ``order``; None: FIFO), and the steps taken."""

    placement: np.ndarray
    evaluation: Evaluation
    order: list[list[int]] | None
    steps: list[dict] = field(default_factory=list)


def _over(problem: Problem, ev: Evaluation) -> float:
    return float(np.maximum(ev.peak_memory - problem.memory, 0.0).sum())


class Held:
    """Which tensors each device holds and when (the evaluation's buffers), to estimate the bytes a
    move adds on its target at the target's peak moment."""

    def __init__(self, problem: Problem, pl: np.ndarray, ev: Evaluation, buf, when: np.ndarray) -> None:
        self.p, self.pl, self.ev, self.when = problem, pl, ev, when
        keys = (buf.node * problem.k + buf.device).tolist()
        self.span = dict(zip(keys, zip(buf.t0.tolist(), buf.t1.tolist())))

    def kept(self, mover: Mover, unit: np.ndarray, d: int) -> float:
        """Bytes that stay on d at its peak moment after ``unit`` leaves it: outputs of the unit
        read by nodes left on d, then received there, held from the producer's finish."""
        p, k, ev, t = self.p, self.p.k, self.ev, self.when[d]
        inside = set(unit.tolist())
        total = 0.0
        for c in unit.tolist():
            if p.out_bytes[c] <= 0 or not any(self.pl[w] == d and w not in inside for w in mover.sn[mover.sp[c]:mover.sp[c + 1]].tolist()):
                continue
            sp = self.span.get(c * k + d)
            if sp is not None and float(ev.finish[c]) <= t < sp[1]:
                total += float(p.out_bytes[c])
        return total

    def inputs(self, mover: Mover, unit: np.ndarray) -> list[tuple[int, float, float, float, float]]:
        """The unit's inputs from outside it: (node, bytes, held from when local, when received,
        the unit's last finish reading it)."""
        p, ev = self.p, self.ev
        inside = set(unit.tolist())
        last: dict[int, float] = {}
        for c in unit.tolist():
            fc = float(ev.finish[c])
            for u in mover.pn[mover.pp[c]:mover.pp[c + 1]].tolist():
                if u not in inside and p.out_bytes[u] > 0:
                    last[u] = max(last.get(u, fc), fc)
        return [(u, float(p.out_bytes[u]), float(ev.start[u]), float(ev.finish[u]), fc) for u, fc in sorted(last.items())]

    def added(self, ins: list[tuple[int, float, float, float, float]], e: int) -> float:
        """Bytes that moving a unit with inputs ``ins`` (:meth:`inputs`) to e adds on e at e's
        peak moment: inputs whose copy on e would then cover that moment and does not now."""
        k, pl, span = self.p.k, self.pl, self.span
        t = self.when[e]
        if not np.isfinite(t):
            t = 0.0
        total = 0.0
        for u, size, s_u, f_u, fc in ins:
            sp = span.get(u * k + e)
            begin = s_u if pl[u] == e else f_u
            end = max(sp[1], fc) if sp else fc
            if begin <= t < end and not (sp is not None and sp[0] <= t < sp[1]):
                total += size
        return total


def _evaluate(problem: Problem, pl: np.ndarray, sequence: np.ndarray | None) -> Evaluation:
    return evaluate(problem, pl, order=device_orders(pl, sequence, problem.k), memory_model="peak")


def repair(problem: Problem, placement: np.ndarray, sequence: np.ndarray | None = None,
           stop: Callable[[], bool] | None = None, max_steps: int = MAX_STEPS) -> Repaired:
    """Move work off the over-capacity devices of ``placement`` until it fits (module docstring),
    each device running its nodes in the order of ``sequence`` (a topological order; None: FIFO);
    the best placement reached (fitting first, then least overflow)."""
    stop = stop or (lambda: False)
    t0 = time.monotonic()
    cap = problem.memory
    mover = Mover(problem)
    pl = np.asarray(placement, dtype=np.int64).copy()
    ev = _evaluate(problem, pl, sequence)
    steps: list[dict] = []
    share = 1.0  # fraction of the planned batch applied (halved after a failed step)
    tabu: set[int] = set()  # units of failed small batches
    failed: int | None = None  # moves in the last failed batch
    history: list[float] = []  # total overflow before each step
    for step in range(max_steps):
        t_step = time.monotonic()
        over = ev.peak_memory - cap * (1 - MARGIN)
        if _over(problem, ev) <= 0 or stop():
            break
        history.append(_over(problem, ev))
        if len(history) > STALL_STEPS and history[-1] > (1 - STALL_GAIN) * history[-1 - STALL_STEPS]:
            steps.append({"step": step, "moved": 0, "note": "stalled"})
            break
        buf = buffers(problem, pl, ev.start, ev.finish)
        _, when = peak_profile(problem, pl, ev.start, ev.finish, buf)
        held = Held(problem, pl, ev, buf, when)
        room = cap * (1 - MARGIN) - ev.peak_memory  # headroom per device (negative: over)
        load = np.bincount(pl, weights=problem.time, minlength=problem.k)
        trial = pl.copy()
        moved: list[tuple[int, int, int, float]] = []  # (node, from, to, bytes)

        ins_of: dict[int, list] = {}

        def target(u: np.ndarray, d: int) -> tuple[float, float, int] | None:
            """The cheapest device for unit u leaving d: (cost, bytes added there, device)."""
            best = None
            w = float(problem.time[u].sum())
            key = int(u[0])
            if key not in ins_of:
                ins_of[key] = held.inputs(mover, u)
            for e in range(problem.k):
                if e == d or not mover.can_go(u, e):
                    continue
                add = held.added(ins_of[key], e)
                if add > max(room[e], 0.0):
                    continue
                c = mover.comm_delta(u, trial, e) + max(0.0, load[e] + w - LOAD_SHARE * ev.makespan)
                if best is None or (c, add) < best[:2]:
                    best = (c, add, e)
            return best

        def shed(d: int, need: float) -> float | None:
            """Move the cheapest holders of device d's peak bytes (per byte freed) elsewhere until
            ``need`` bytes are freed; the bytes freed, None when stopped."""
            units: dict[int, tuple[np.ndarray, float]] = {}
            for v, g in peak_holders(mover, trial, ev, buf, when[d], d).items():
                u = mover.unit(v)
                key = int(u.min())
                if int(trial[key]) != d or key in tabu:
                    continue
                old = units.get(key)
                units[key] = (u, (old[1] if old else 0.0) + g)
            plans = []
            for i, (key, (u, g)) in enumerate(sorted(units.items())):
                if i % STOP_EVERY == 0 and stop():
                    return None
                g -= held.kept(mover, u, d)
                got = target(u, d) if g > 0 else None
                if got is not None:
                    plans.append((max(got[0], 0.0) / g, key, u, g))
            freed = 0.0
            for _, key, u, g in sorted(plans, key=lambda x: (x[0], x[1])):
                if freed >= need:
                    break
                got = target(u, d)
                if got is None:
                    continue
                _, add, e = got
                trial[u] = e
                w = float(problem.time[u].sum())
                load[e] += w
                load[d] -= w
                room[e] -= add
                freed += g
                moved.append((key, d, e, g))
            return freed

        hot = [d for d in np.argsort(-over, kind="stable").tolist() if ev.peak_memory[d] > cap[d] and np.isfinite(when[d])]
        for d in hot:  # only devices over capacity shed what they must; MARGIN sets how much
            if shed(d, over[d] * share) is None:
                return _finish(problem, pl, ev, sequence, steps, stop, t0)
        if not moved:
            steps.append({"step": step, "moved": 0, "note": "no device has room for what holds the peak"})
            break
        got = _evaluate(problem, trial, sequence)
        ok = _over(problem, got) < _over(problem, ev)
        steps.append({"step": step, "moved": len(moved), "share": share, "overflow_before": _over(problem, ev),
                      "overflow_after": _over(problem, got), "makespan": got.makespan, "accepted": ok,
                      "seconds": round(time.monotonic() - t_step, 3)})
        jump = got.makespan > ev.makespan * (1 + JUMP)
        if ok and (not jump or len(moved) <= 1 or share <= MIN_SHARE):
            pl, ev = trial, got
            share = min(1.0, share * 2)
            failed = None
        elif ok:  # fits better but slows much: the cheaper half first
            share /= 2
        elif len(moved) > TABU_BATCH and (failed is None or len(moved) < failed):
            share /= 2
            failed = len(moved)
        else:  # a few moves that do not help, or as many as the last failure: never again
            tabu.update(m[0] for m in moved)
            failed = None
    return _finish(problem, pl, ev, sequence, steps, stop, t0)


def _finish(problem: Problem, pl: np.ndarray, ev: Evaluation, sequence: np.ndarray | None, steps: list[dict],
            stop: Callable[[], bool], t0: float) -> Repaired:
    """The placement reached; when it still overflows, by at most REORDER_WITHIN on every device,
    the peak descent from it (at most DESCENT_EVALUATIONS evaluations, and no longer than the repair
    since ``t0`` took), then the memory-aware orders.

    Why the descent: the batches stop when no device has room at its own peak moment for what holds
    another's, which can leave a sliver over. On the imported 32K decoder at 1.1 x its memory bound
    (K = 4) the repair ended 1.2% over on one device with the others 0.3-0.7% under; the descent
    fitted it in 11 moves and 40 evaluations (0.8 s), at 189.2, where the portfolio's best member
    answered 239.6 (bench/results_peak.md, session 35)."""
    order = device_orders(pl, sequence, problem.k)
    if _over(problem, ev) > 0 and np.all(ev.peak_memory <= problem.memory * (1 + REORDER_WITHIN)) and not stop():
        seq = sequence if sequence is not None else schedule_order(problem, ev.start)  # FIFO: the order it ran in
        now = time.monotonic()
        until = now + (now - t0)  # no longer than the repair took
        got_d = descend(problem, pl, seq, stop=lambda: stop() or time.monotonic() > until, max_evaluations=DESCENT_EVALUATIONS)
        steps.append({"step": "descent", "moves": got_d.moves, "evaluations": got_d.evaluations, "ended": got_d.reason,
                      "makespan": got_d.evaluation.makespan})
        if got_d.evaluation.feasible(problem):
            return Repaired(got_d.placement, got_d.evaluation, got_d.order, steps)
        if not stop():
            got = lower_peak_order(problem, pl, stop=stop)
            if got.evaluation.feasible(problem):
                order, ev = got.order, got.evaluation
    return Repaired(pl, ev, order, steps)


def fast_schedule(problem: Problem, stop: Callable[[], bool] | None = None) -> tuple[np.ndarray, np.ndarray] | None:
    """ETF's placement with unlimited memory and its sequence (every node by its start time there,
    ties by topological rank: a topological order); None when stopped."""
    free = problem.with_devices(problem.k, float("inf"))
    try:
        dev, order, _, _ = etf_schedule(free, 0.0, "static", stop=stop)
    except Stopped:
        return None
    pl = np.asarray(dev, dtype=np.int64)
    ev = evaluate(free, pl, order=order, memory_model="static")
    return pl, schedule_order(problem, ev.start)


def memory_repair(problem: Problem, opts: SolveOptions) -> Solution:
    """ETF's placement with unlimited memory, in its own order, repaired until it fits (module
    docstring); ``opts.extra["repair_from"]``: a placement to repair instead (FIFO order)."""
    t0 = time.monotonic()
    if opts.memory_model != "peak":
        return Solution("mem-repair", "unknown", reason="mem-repair: built for the peak memory model (--memory-model peak)",
                        seconds=time.monotonic() - t0)
    stop = opts.out_of_time
    given = opts.extra.get("repair_from")
    if given is not None:
        start, sequence = np.asarray(given, dtype=np.int64), None
    else:
        got = fast_schedule(problem, stop)
        if got is None:
            return Solution("mem-repair", "unknown", reason="mem-repair: out of time", seconds=time.monotonic() - t0)
        start, sequence = got
    rep = repair(problem, start, sequence, stop=stop)
    info = {"steps": rep.steps, "moved": int(np.count_nonzero(rep.placement != start))}
    if not rep.evaluation.feasible(problem):
        why = "out of time" if stop() else "no repair fitted the capacity"
        info["memory_over_capacity"] = float(np.max(rep.evaluation.peak_memory / problem.memory))
        return Solution("mem-repair", "unknown", reason=f"mem-repair: {why}", seconds=time.monotonic() - t0, info=info)
    return repaired_solution("mem-repair", problem, rep, stop, t0, info)


def repaired_solution(name: str, problem: Problem, rep: Repaired, stop: Callable[[], bool], t0: float, info: dict) -> Solution:
    """A fitting repair as the method's answer: in FIFO order when that is no slower and fits (tried
    only with time left: one more evaluation, up to seconds at 200K nodes), in its own order otherwise."""
    order, ev = fifo_if_better(problem, rep.placement, rep.order, rep.evaluation, "peak") \
        if rep.order is not None and not stop() else (rep.order, rep.evaluation)
    info["fifo"] = order is None
    return Solution(name, "heuristic", placement=ev.placement, order=order, start=ev.start,
                    objective=ev.makespan, seconds=time.monotonic() - t0, info=info)
