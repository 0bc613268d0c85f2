"""The memory frontier: makespan against memory per device for K devices, and the fewest devices.

``frontier``: what is the smallest memory per device at which a placement is found, and what does
more memory buy? Capacities run geometrically from ``memory_lower_bound`` (no placement exists
below it; under the peak model raised by the held-tensor knapsacks, formulations/held_bound.py
``held_memory_bound``) to the memory the unconstrained answer uses (more cannot help that answer); each is an
independent solve (solvers/sweep.py: on Ray when installed); a lowest capacity the knapsacks proved
too small reads ``infeasible`` without a solve. Then:
- monotone answers: an answer that fits capacity c fits every larger one, so each point keeps the
  best answer found at its capacity or below, or the unconstrained answer where it fits
  (``from_capacity`` says where it came from, inf for the unconstrained solve);
- monotone bounds: a makespan bound valid with capacity c holds for every smaller one (fewer
  placements), so each point's bound is the best found at its capacity or above;
- every point's answer is evaluated again at its own capacity by the evaluator before it is kept:
  by its device order and waits, or, where those start some nodes earlier than the answer did and
  no longer fit (CP-SAT's integer times, docs/model.md), by its own start times (`check`); "best"
  is by that evaluation, not by the solves' own makespans (an answer with idle time evaluates
  shorter by its order: judged by the solves', a larger capacity could report a longer makespan).

``min_devices``: the fewest devices of a given capacity on which a placement is found, starting
from the fewest the memory lower bound allows (proved minimal when the answer is found there).
"""
from __future__ import annotations

import math
import threading
import time
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import numpy as np

from formulations.held_bound import held_memory_bound
from placement.evaluator import Evaluation, ScheduleError, check, evaluate
from placement.memory_bounds import memory_lower_bound
from placement.problem import Problem
from placement.solution import SolveOptions

from .sweep import Point, ray_session, run_points, solve_point


@dataclass
class FrontierPoint:
    capacity: float
    status: str  # of this capacity's own solve
    makespan: float | None  # the best answer at this capacity or below, by the evaluator
    lower_bound: float | None  # the best makespan bound valid at this capacity
    memory: list[float] | None = None  # per device, of the kept answer
    from_capacity: float | None = None  # where the kept answer was found
    seconds: float = 0.0

    def as_dict(self) -> dict[str, Any]:
        out = dict(self.__dict__)
        if out["from_capacity"] is not None and math.isinf(out["from_capacity"]):
            out["from_capacity"] = "unconstrained"
        return out


class Answer(NamedTuple):
    """A kept answer (node indices): its placement, device order, waits and start times."""

    placement: np.ndarray
    order: list[list[int]]
    waits: list[list[int]]
    start: np.ndarray


def answer_of(result: dict[str, Any]) -> Answer:
    """The answer in a feasible :func:`solvers.sweep.solve_point` result."""
    return Answer(np.asarray(result["placement"], dtype=np.int64), result["order"], result["waits"],
                  np.asarray(result["start"], dtype=float))


def evaluate_at(problem: Problem, ans: Answer, memory_model: str) -> Evaluation:
    """``ans`` evaluated on ``problem`` (its capacity): the schedule its order and waits give when
    that fits, else its own start times, checked (an answer with idle time that the waits do not
    reproduce: the runtime must hold each node until its start time, as the report says)."""
    ev = evaluate(problem, ans.placement, order=ans.order, memory_model=memory_model, waits=ans.waits)
    if ev.feasible(problem):
        return ev
    try:
        return check(problem, ans.placement, ans.start, memory_model)
    except ScheduleError:
        return ev  # fits by neither: the caller says so


@dataclass
class Frontier:
    devices: int
    memory_model: str
    memory_lower_bound: float
    unconstrained_makespan: float | None
    points: list[FrontierPoint] = field(default_factory=list)
    ran: str = "sequential"
    # the kept answer per point, for callers that want to write one
    answers: list[Answer | None] = field(default_factory=list)

    @property
    def smallest_feasible(self) -> float | None:
        return next((p.capacity for p in self.points if p.makespan is not None), None)

    def as_dict(self) -> dict[str, Any]:
        return {"devices": self.devices, "memory_model": self.memory_model, "memory_lower_bound": self.memory_lower_bound,
                "unconstrained_makespan": self.unconstrained_makespan, "smallest_feasible_memory": self.smallest_feasible,
                "ran": self.ran, "points": [p.as_dict() for p in self.points]}


def placed(result: dict[str, Any]) -> bool:
    """Whether a sweep's result carries a placement that fits (a partitioned plan, which
    ``--method tofu`` answers with, has none)."""
    return bool(result["feasible"]) and "placement" in result


def capacities(low: float, high: float, count: int) -> list[float]:
    """``count`` capacities from low to high, geometrically spaced (one when high <= low)."""
    if count <= 1 or high <= low * (1 + 1e-9) or low <= 0:
        return [max(low, high)]
    return [low * (high / low) ** (i / (count - 1)) for i in range(count)]


# The frontier and --min-devices are about placements: auto does not answer with Tofu's partitioned
# plan there (its points would have no placement to carry to larger capacities; an imported model's
# frontier raised KeyError 'placement' where that plan answered a point, before session 44).
PLACEMENTS_ONLY = {"auto_partition": False}
# Under the peak model the frontier's lowest point is the memory lower bound raised by the
# held-tensor knapsacks' bisection, for this share of the time left after the unconstrained solve,
# at most HELD_BOUND_SECONDS (imported models of 198-724 nodes: 0.7-5.8 s to 0.5%, the bound 1.14-1.49 x
# placement/memory_bounds.py's; bench/results_peak.md, session 44).
HELD_BOUND_SHARE = 0.1
HELD_BOUND_SECONDS = 5.0
# Of each wave's share of a frontier's time, what a point's solve may use: the rest is for starting
# its worker (on Ray: a process importing the solver) and returning its answer. Measured on a
# 570-node imported model, 3 points on 2 cores at 20 s: the waves' time was not counted and the
# sweep took 25-28 s in 2 of 5 runs (session 40).
POINT_SHARE = 0.8


def frontier(problem: Problem, memory_model: str = "peak", method: str = "auto", points: int = 8,
             time_limit: float | None = 240.0, seed: int = 0, parallel: str = "auto", address: str | None = None,
             started: float | None = None, stop: threading.Event | None = None) -> Frontier:
    """The makespan-memory curve of ``problem`` on its K devices (module docstring). ``time_limit``
    is the whole sweep's, counted from ``started`` (default: now): the points run in waves of as
    many as run at once (Ray's CPUs, else one), and the unconstrained solve (in this process) and
    each wave get equal shares of it (a wave's solves POINT_SHARE of theirs). ``stop`` (Ctrl-C) ends
    the solves with what they have and skips the points not started."""
    k = problem.k
    deadline = None if time_limit is None else (time.monotonic() if started is None else started) + time_limit
    mlb = float(memory_lower_bound(problem, memory_model)["best"])
    with ray_session(parallel, address) as width:
        waves = math.ceil(points / width)  # before the knapsacks' bound: maybe one more than run

        def share(parts: int, used: float = 1.0) -> float | None:
            return None if deadline is None else used * max(0.0, deadline - time.monotonic()) / parts

        top = solve_point(Point(problem.with_devices(k, math.inf), method, memory_model, share(waves + 1), seed,
                                extra=PLACEMENTS_ONLY), stop)  # in this process
        high = max(top["memory"]) if placed(top) else mlb
        proved_low = False  # whether the lowest capacity is proved too small
        if memory_model == "peak" and high > mlb and not (stop is not None and stop.is_set()):
            # the held-tensor knapsacks prove more capacities too small (formulations/held_bound.py)
            left = share(1)
            held_opts = SolveOptions(memory_model="peak", time_limit=None)
            if stop is not None:
                held_opts.stop = stop  # Ctrl-C ends the bisection too
            raised = held_memory_bound(problem, mlb, high, held_opts,
                                       HELD_BOUND_SECONDS if left is None else min(HELD_BOUND_SECONDS, HELD_BOUND_SHARE * left))
            proved_low, mlb = raised > mlb, raised
        caps = capacities(mlb, high, points)
        # A capacity the knapsacks proved too small needs no solve: its point reads infeasible, and
        # the other points share the time (before, its solve had too little time to prove it again
        # and read unknown: an imported RNN's frontier, session 45).
        skipped = caps[:1] if proved_low and len(caps) > 1 else []
        each = share(math.ceil((len(caps) - len(skipped)) / width), POINT_SHARE)
        todo = [Point(problem.with_devices(k, c), method, memory_model, each, seed, {"capacity": c}, PLACEMENTS_ONLY)
                for c in caps[len(skipped):]]
        results, ran = run_points(todo, parallel, address, stop=stop)
        results = [{"status": "infeasible", "feasible": False, "makespan": None, "lower_bound": None, "seconds": 0.0}
                   for _ in skipped] + results
    out = Frontier(k, memory_model, mlb, top.get("makespan"), ran=ran)
    best: tuple[float, Answer] | None = None  # (capacity found at, answer): the point before's
    for c, res in zip(caps, results):
        at_c = problem.with_devices(k, c)
        # The candidates judged by the evaluator at this capacity, not by their solves' makespans: an
        # answer with idle time re-evaluates shorter by its order (evaluate_at), and the point before's
        # answer, which fits here too, must not give way to a longer one (monotone points).
        cands = [] if best is None else [best]
        if placed(res):
            cands.append((c, answer_of(res)))
        if placed(top) and high <= c * (1 + 1e-12):  # the unconstrained answer fits from its own memory up
            cands.append((math.inf, answer_of(top)))
        point = FrontierPoint(c, res["status"], None, res["lower_bound"], seconds=res["seconds"])
        chosen = None
        for found, ans in cands:
            ev = evaluate_at(at_c, ans, memory_model)
            if not ev.feasible(at_c):
                raise RuntimeError(f"frontier: the answer found at {found:.6g} does not fit {c:.6g}")
            if chosen is None or ev.makespan < chosen[0].makespan - 1e-12:
                chosen = (ev, found, ans)
        if chosen is not None:
            ev, found, ans = chosen
            best = (found, ans)
            point.makespan, point.memory, point.from_capacity = ev.makespan, ev.memory.tolist(), found
            out.answers.append(ans)
        else:
            out.answers.append(None)
        out.points.append(point)
    # bounds: valid at c, hence at every smaller capacity; never above that point's answer. A point
    # with no bound of its own or from above (stopped before it answered) keeps none, not a 0
    # that would read as a 100% gap.
    bound: float | None = None
    for p in reversed(out.points):
        if p.lower_bound is not None:
            bound = p.lower_bound if bound is None else max(bound, p.lower_bound)
        if bound is not None:
            p.lower_bound = bound if p.makespan is None else min(bound, p.makespan)
    return out


def frontier_table(fr: Frontier, fmt=lambda b: f"{b:.4g}") -> str:
    """The frontier as a text table."""
    rows = [f"memory lower bound: {fmt(fr.memory_lower_bound)} per device; unconstrained makespan: "
            f"{'-' if fr.unconstrained_makespan is None else f'{fr.unconstrained_makespan:.6g}'}; ran: {fr.ran}",
            f"{'memory/device':>14} {'x bound':>8} {'makespan':>12} {'lower bound':>12} {'gap':>7}  status"]
    for p in fr.points:
        gap = "-" if p.makespan is None or p.lower_bound is None or p.makespan <= 0 else f"{100 * (p.makespan - p.lower_bound) / p.makespan:.1f}%"
        ratio = p.capacity / fr.memory_lower_bound if fr.memory_lower_bound > 0 else math.nan
        carried = "" if p.from_capacity is None or p.from_capacity == p.capacity else \
            " (the unconstrained answer)" if math.isinf(p.from_capacity) else f" (answer from {fmt(p.from_capacity)})"
        rows.append(f"{fmt(p.capacity):>14} {ratio:8.3f} {'-' if p.makespan is None else f'{p.makespan:.6g}':>12} "
                    f"{'-' if p.lower_bound is None else f'{p.lower_bound:.6g}':>12} {gap:>7}  {p.status}{carried}")
    return "\n".join(rows)


def plot_frontier(path: str, fr: Frontier) -> None:
    """PNG of the frontier (needs matplotlib, the ``plot`` extra): makespan and lower bound against
    memory per device."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    caps = [p.capacity for p in fr.points]
    fig, ax = plt.subplots(figsize=(6, 4))
    ax.plot([c for c, p in zip(caps, fr.points) if p.makespan is not None],
            [p.makespan for p in fr.points if p.makespan is not None], "o-", label="makespan found")
    ax.plot(caps, [math.nan if p.lower_bound is None else p.lower_bound for p in fr.points], "s--", label="lower bound")
    ax.axvline(fr.memory_lower_bound, color="grey", linestyle=":", label="memory lower bound")
    ax.set_xlabel("memory per device (bytes)")
    ax.set_ylabel("makespan")
    ax.set_title(f"{fr.devices} devices, {fr.memory_model} memory")
    ax.legend()
    fig.tight_layout()
    import os
    import tempfile

    fd, tmp = tempfile.mkstemp(suffix=".png", dir=os.path.dirname(os.path.abspath(path)))
    os.close(fd)
    try:
        fig.savefig(tmp)
        os.replace(tmp, path)
    finally:
        plt.close(fig)
        if os.path.exists(tmp):
            os.unlink(tmp)


@dataclass
class MinDevices:
    capacity: float
    fewest_by_bound: int  # below this many devices the memory lower bound proves no placement fits
    devices: int | None  # the fewest devices on which a placement was found
    proved: bool  # no fewer devices can hold it: fewest_by_bound, or every count tried before was proved infeasible
    tried: list[dict[str, Any]] = field(default_factory=list)


def min_devices(problem: Problem, capacity: float, memory_model: str = "peak", method: str = "auto",
                time_limit: float | None = 60.0, seed: int = 0, max_devices: int = 64,
                started: float | None = None, stop: threading.Event | None = None) -> MinDevices:
    """The fewest devices of ``capacity`` bytes holding the graph: from the fewest the memory lower
    bound allows, one more at a time, each solve with an equal share of what is left of the time
    limit (counted from ``started``, default now) for the solves left."""
    deadline = None if time_limit is None else (time.monotonic() if started is None else started) + time_limit
    lb_k = next((k for k in range(1, max_devices + 1) if memory_lower_bound(problem, memory_model, k)["best"] <= capacity * (1 + 1e-12)), None)
    out = MinDevices(capacity, lb_k or max_devices + 1, None, False)
    if lb_k is None:
        return out
    tries = list(range(lb_k, min(max_devices, lb_k + 3) + 1))  # at most 4 solves
    for i, k in enumerate(tries):
        if stop is not None and stop.is_set():
            break
        share = None if deadline is None else max(0.0, deadline - time.monotonic()) / (len(tries) - i)
        res = solve_point(Point(problem.with_devices(k, capacity), method, memory_model, share, seed, extra=PLACEMENTS_ONLY), stop)
        out.tried.append({"devices": k, "status": res["status"], "makespan": res["makespan"]})
        if placed(res):
            # proved fewest when every smaller count is: below lb_k by the memory bound, from lb_k
            # on by the solves (auto's held-tensor knapsacks prove a capacity too small at once)
            out.devices, out.proved = k, all(t["status"] == "infeasible" for t in out.tried[:-1])
            break
    return out
