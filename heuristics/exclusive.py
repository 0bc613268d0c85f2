"""Weights that are slow to copy: their readers run first on the weight's device until a copy could arrive.

Why: a source read by many cheap operators over a long stretch of the step (an embedding looked up
at every time step of a recurrent model, an output projection applied at every step) costs each
reader on another device a transfer far longer than the reader. Until the first copy could
arrive, only the weight's own device can run them; whatever else that device runs then is time
those readers lose, and they hold up everything behind them (docs/heuristics.md, "Exclusive
readers"). ETF's bottom-level ties do not see this: a recurrent step's early cells outrank the
late steps' lookups, so it fills the embedding's device with cells that any device could run.

:func:`exclusive_sources` finds such sources; :class:`Exclusive` tells a list scheduler which
(node, device) pairs go first: a reader of a source homed on the device, ready before the source's
copy could arrive elsewhere.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from placement.problem import Problem

MIN_READERS = 8  # fewer readers: a one-off copy, not a stream of reads
COPY_OVER_READ = 8.0  # the copy costs at least this many times the median reader


@dataclass(frozen=True)
class Source:
    node: int
    readers: np.ndarray  # node indices
    copy: float  # a reader on another device starts at least this long after the source ends
    work: float  # the readers' total time


def exclusive_sources(problem: Problem) -> list[Source]:
    """Sources (nodes without inputs) read by at least MIN_READERS nodes, each read across devices
    costing at least COPY_OVER_READ x the median reader's time, with the readers' total time at
    least that transfer: largest reader work first."""
    sp, sn, se = problem.succ_ptr
    indeg = np.bincount(problem.dst, minlength=problem.n)
    out = []
    for w in np.flatnonzero((indeg == 0) & (np.diff(sp) >= MIN_READERS)).tolist():
        readers = sn[sp[w]:sp[w + 1]]
        comm = problem.comm[se[sp[w]:sp[w + 1]]]
        times = problem.time[readers]
        copy = float(comm.min())
        work = float(times.sum())
        if copy > 0 and copy >= COPY_OVER_READ * float(np.median(times)) and work >= copy:
            out.append(Source(int(w), np.unique(readers), copy, work))
    out.sort(key=lambda s: -s.work)
    return out


class Exclusive:
    """Which readers go first on which device, learnt as a list scheduler places the sources
    (:meth:`placed`); a reader is released only after its source is placed, so its tier is known
    when it becomes ready."""

    def __init__(self, sources: list[Source]) -> None:
        self.sources = {s.node: s for s in sources}
        self.until: dict[tuple[int, int], float] = {}  # (reader, device) -> when the last copy of its sources there arrives elsewhere

    def placed(self, v: int, d: int, finish: float) -> None:
        """Node v was placed on device d and ends at ``finish``."""
        s = self.sources.get(v)
        if s is None:
            return
        until = finish + s.copy
        for r in s.readers.tolist():
            if self.until.get((r, d), 0.0) < until:
                self.until[(r, d)] = until

    def tier(self, v: int, d: int, ready: float) -> float:
        """Where v stands among the nodes ready on device d at time ``ready``: 0 for most; the
        readers of a source placed on d, ready before a copy could arrive elsewhere, go first,
        those whose copy arrives last first of all (-arrival)."""
        until = self.until.get((v, d), 0.0)
        return -until if ready < until else 0.0
