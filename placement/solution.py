"""What every method returns, and the options every method takes.

A method (heuristic or exact model) is a function ``(problem, options) -> Solution``. The
orchestrator in solvers/ re-evaluates every returned placement with placement.evaluator before
reporting it; ``Solution.objective`` must equal what the evaluator computes.
"""
from __future__ import annotations

import contextlib
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator

import numpy as np

STATUSES = ("optimal", "feasible", "heuristic", "infeasible", "unknown")


class OutOfTime(Exception):
    """Raised by :meth:`SolveOptions.check_time` once the limit has passed or a stop was requested:
    work that cannot return a partial answer (building a model) is abandoned, and the method
    returns its best answer so far (its hint) instead."""


def halt_if(stop: "Callable[[], bool] | None") -> None:
    """Raise :class:`OutOfTime` when ``stop`` (a stop request's ``is_set``) says so: for loops of
    heuristics that have no partial answer to return."""
    if stop is not None and stop():
        raise OutOfTime("stopped")


class BestSoFar:
    """The best answer of a run so far and the best proved bound, kept where the ``solve`` command
    can read them even while a method is still running: when a phase does not stop in time (a
    heuristic deaf to the clock, a model still being built), the command reports this answer
    (re-checked by the evaluator) rather than none. Thread-safe. Publishers publish only answers
    better than their own previous ones, for the problem they were given."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._answer: tuple[Any, "Solution", Any] | None = None
        self._bound: float | None = None
        self.phase = "starting"  # what the run is doing (the report names the phase a stop landed in)
        # (problem, placement.memory_bounds' parts) once the run has them: a watchdog's report carries them
        self.memory_bound: tuple[Any, dict[str, float]] | None = None
        self._entered: list[tuple[str, float, float | None]] = []  # (phase, when, best makespan then)

    def enter(self, phase: str) -> None:
        """The run starts ``phase`` (bounds, warm-start, exact-lns, refine, ...)."""
        self.phase = phase
        with self._lock:
            self._entered.append((phase, time.monotonic(), self._answer_value()))

    def _answer_value(self) -> float | None:
        if self._answer is None:
            return None
        value = self._answer[1].objective
        return float(value) if value is not None else None

    def phase_history(self) -> list[dict[str, Any]]:
        """The phases entered so far, each with its seconds and the best answer's makespan at its
        end, the last one marked ``cut``: what a report answered by the watchdog shows of the run."""
        with self._lock:
            entered, now, last = list(self._entered), time.monotonic(), self._answer_value()
        out: list[dict[str, Any]] = []
        for i, (name, at, _) in enumerate(entered):
            nxt = entered[i + 1] if i + 1 < len(entered) else None
            row: dict[str, Any] = {"name": name, "seconds": (nxt[1] if nxt else now) - at}
            value = nxt[2] if nxt else last
            if value is not None:
                row["makespan"] = value
            if nxt is None:
                row["status"] = "cut"
            out.append(row)
        return out

    def publish_answer(self, problem: Any, solution: "Solution", evaluation: Any = None) -> None:
        """Record a feasible answer for ``problem`` (its Evaluation too, when the publisher has it)."""
        with self._lock:
            self._answer = (problem, solution, evaluation)

    def publish_bound(self, bound: float) -> None:
        """Record a lower bound proved for the user's problem (the largest one is kept)."""
        with self._lock:
            if self._bound is None or bound > self._bound:
                self._bound = bound

    def get(self) -> tuple[tuple[Any, "Solution", Any] | None, float | None]:
        """((problem, solution, evaluation or None) or None, bound or None)."""
        with self._lock:
            return self._answer, self._bound


@dataclass
class SolveOptions:
    """Options shared by all methods.

    time_limit: seconds for this method (None: no limit). workers: CP-SAT search workers (None: the
    machine's cores). seed: makes heuristics deterministic. hint: a previous solution to warm-start
    from. reserve: fraction of each device's memory to keep free (PARDNN spares 10%).
    """

    memory_model: str = "static"
    time_limit: float | None = None
    workers: int | None = None
    seed: int = 0
    hint: "Solution | None" = None
    reserve: float = 0.0
    verbose: bool = False
    extra: dict[str, Any] = field(default_factory=dict)
    started: float = field(default_factory=time.monotonic)
    # Set by Ctrl-C / SIGTERM: methods stop at their next check and return their best answer.
    stop: threading.Event = field(default_factory=threading.Event)
    # Shared by every copy of these options (dataclasses.replace keeps the reference).
    best_so_far: BestSoFar = field(default_factory=BestSoFar)

    def remaining(self) -> float | None:
        """Seconds left of the time limit (None when unlimited; 0 once a stop was requested)."""
        if self.stop.is_set():
            return 0.0
        if self.time_limit is None:
            return None
        return max(0.0, self.time_limit - (time.monotonic() - self.started))

    def out_of_time(self) -> bool:
        left = self.remaining()
        return left is not None and left <= 0.0

    def check_time(self) -> None:
        """Raise :class:`OutOfTime` when out of time or stopped (cheap: call it in build loops)."""
        if self.stop.is_set() or self.out_of_time():
            raise OutOfTime("stopped" if self.stop.is_set() else "time limit reached")


@contextlib.contextmanager
def stop_watch(opts: SolveOptions, stop_search: Callable[[], None], settle: float = 0.0,
               repeat: float | None = 0.01) -> Iterator[None]:
    """While the block runs, call ``stop_search`` (a CP-SAT solver's ``stop_search``, a MIP
    solver's ``InterruptSolve``) once a stop is requested on ``opts`` (Ctrl-C, SIGTERM), so a long
    solve returns its best answer.

    The call comes ``settle`` seconds after the block began at the earliest, then again every
    ``repeat`` seconds until the block ends (None: once). CP-SAT drops a ``stop_search`` that
    comes before its solve has created its search (the Python wrapper ignores it), so one call
    may be lost, and repeating it is harmless (OR-Tools 9.15: hammered from the first
    microsecond, every solve stopped within 0.04 s); MIP backends are called once, after they
    had time to start. Callers skip the solve altogether when a stop was requested before it
    began."""
    done = threading.Event()
    began = time.monotonic()

    def watch() -> None:
        while not done.is_set():
            if opts.stop.wait(0.05):
                wait = began + settle - time.monotonic()
                if wait > 0 and done.wait(wait):
                    return
                while not done.is_set():
                    stop_search()
                    if repeat is None or done.wait(repeat):
                        return
                return

    thread = threading.Thread(target=watch, daemon=True)
    thread.start()
    try:
        yield
    finally:
        done.set()
        if opts.stop.is_set():  # a stop_search may be under way: let it finish before the solver is read
            thread.join()
        # else the watcher sees ``done`` within 0.05 s and ends without calling; not waiting for it
        # saved about 26 ms of every solve (25 windows of window LNS: 0.65 s)


@dataclass
class Solution:
    """A method's answer.

    placement: device index per node (None when no feasible answer was found).
    start: explicit start times (exact solvers); order: per-device node order (list schedulers);
    with neither, the evaluator's FIFO executor schedules the placement. waits: with an order, pairs
    of node indices (u, v), "v does not start before u finishes" (control dependencies: the order
    and the waits give the schedule, placement.evaluator.evaluate); None for none.
    status: one of STATUSES. objective: the method's claimed makespan (or other objective).
    lower_bound: a bound the method proved for this very problem (None if it proved none).
    reason: why there is no answer, or why it is infeasible.
    """

    method: str
    status: str
    placement: np.ndarray | None = None
    start: np.ndarray | None = None
    order: list[list[int]] | None = None
    waits: list[tuple[int, int]] | None = None
    objective: float | None = None
    lower_bound: float | None = None
    reason: str = ""
    seconds: float = 0.0
    info: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.status not in STATUSES:
            raise ValueError(f"status must be one of {STATUSES}, got {self.status!r}")
