"""Progress lines while ``auto`` works: a heartbeat that speaks at least every ``interval`` seconds.

Why: a user watching a 10-minute solve of a 40K-node graph must be able to tell it is alive and
what it has so far. The phases (warm start, exact or LNS, refine) report at their ends; between
those, a background thread prints the current phase, the incumbent, the bound, the gap and the
moves tried whenever nothing was said for ``interval`` seconds. The thread only reads values the
phases publish (a phase name, a counter, a makespan), so it needs no lock: a line may mix values
from two instants, never a value that was not true at one.

Quiet (``solve --quiet``) means no ``say`` callback: nothing is printed and no thread starts.
"""
from __future__ import annotations

import threading
import time
from typing import Callable

HEARTBEAT_SECONDS = 7.0  # under 10 s with room for a thread woken late on a loaded machine (8 s gave 9 s gaps)


def gap_text(makespan: float | None, bound: float) -> str:
    """The relative gap of ``makespan`` over ``bound`` as a percentage ("-" when unknown)."""
    if makespan is None or makespan <= 0:
        return "-"
    return f"{100 * max(0.0, (makespan - bound) / makespan):.2f}%"


class Heartbeat:
    """Prints through ``say`` and, from a daemon thread, a status line whenever ``interval``
    seconds passed without one. Use as a context manager around the work.

    ``incumbent`` returns the best makespan known (None before any); the pipeline sets ``bound``
    and calls :meth:`enter` at each phase, naming it and optionally giving callables for the moves
    tried so far in the phase and for a better makespan the phase found but has not offered yet."""

    def __init__(self, say: Callable[[str], None] | None, incumbent: Callable[[], float | None], bound: float,
                 started: float | None = None, interval: float = HEARTBEAT_SECONDS,
                 on_enter: Callable[[str], None] | None = None) -> None:
        self._say = say
        self._on_enter = on_enter  # told each phase's name (SolveOptions.best_so_far.enter)
        self._incumbent = incumbent
        self.bound = bound
        self.phase = "start"
        self.moves: Callable[[], int] | None = None
        self.best: Callable[[], float | None] | None = None
        self.interval = interval
        self.started = time.monotonic() if started is None else started
        self._last = time.monotonic()
        self._done = threading.Event()
        self._thread: threading.Thread | None = None

    # -- what the phases call --
    def enter(self, phase: str, moves: Callable[[], int] | None = None,
              best: Callable[[], float | None] | None = None) -> None:
        """A new phase starts; ``moves`` and ``best`` read its live counters (see the class)."""
        self.phase, self.moves, self.best = phase, moves, best
        if self._on_enter is not None:
            self._on_enter(phase)

    def say(self, msg: str) -> None:
        """Print a line (e.g. a phase's result); the heartbeat's clock restarts."""
        if self._say is not None:
            self._last = time.monotonic()
            self._say(msg)

    def status(self, phase: str | None = None) -> str:
        """One line: phase, incumbent, bound, gap, moves tried, elapsed seconds."""
        mk = self._incumbent()
        inner = None if self.best is None else self.best()
        if inner is not None and inner > 0 and (mk is None or inner < mk):
            mk = inner
        moves = "" if self.moves is None else f" moves={self.moves()}"
        return (f"{phase or self.phase}: incumbent={'-' if mk is None else f'{mk:.6g}'} bound={self.bound:.6g} "
                f"gap={gap_text(mk, self.bound)}{moves} elapsed={time.monotonic() - self.started:.1f}s")

    # -- the thread --
    def __enter__(self) -> "Heartbeat":
        if self._say is not None and self.interval > 0:
            self._thread = threading.Thread(target=self._beat, name="progress", daemon=True)
            self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._done.set()
        if self._thread is not None:
            self._thread.join(1.0)

    def _beat(self) -> None:
        tick = min(0.5, self.interval / 4)
        while not self._done.wait(tick):
            if time.monotonic() - self._last >= self.interval:
                self.say(self.status())
