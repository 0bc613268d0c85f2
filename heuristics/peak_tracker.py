"""Live bytes per device over a schedule being built: the peak model of docs/model.md, incrementally.

Why: a list scheduler that checks memory under the peak model must know what the evaluator will
measure for the schedule it builds. Charging static + received bytes (an upper bound) rejects
almost every placement of a training graph, whose activations die long before the graph ends. This
tracker charges exactly the buffers of placement.evaluator.buffers, as the schedule grows:

- placing ``v`` on ``d`` over ``[s, f)`` holds ``out_v`` on ``d`` over ``[s, f)`` (its own output
  while it runs), and adds ``param_v`` to ``d`` at all times;
- each input ``u`` of ``v`` is held on ``d`` until ``f``: a buffer of ``u`` already on ``d`` (its
  own output when ``u`` is on ``d``, or an earlier copy received for another consumer) is extended
  from its current end to ``f``; a first copy received from another device is held from ``F_u``.

Those are the evaluator's intervals (``[S_u, max(F_u, last local finish))`` for a local producer,
``[F_u, last finish on d)`` for a received tensor, ``[S_v, F_v)`` for a node without a local
consumer), so when the scheduler's start times are the evaluator's for its order (every list
scheduler here starts a node as early as its inputs and its predecessor in the device order
allow), the tracker's peak is the evaluator's peak for that order. Memory is only ever added, so a
placement accepted under the capacity stays under it.

Each device's profile is a piecewise-constant function kept as sorted breakpoints in growable
numpy arrays: range add and range max are a slice operation each.
"""
from __future__ import annotations

import numpy as np

from placement.problem import Problem


class Profile:
    """Memory level over time on one device: ``level[i]`` on ``[t[i], t[i+1])``, 0 before and after."""

    def __init__(self) -> None:
        self.t = np.empty(64)
        self.level = np.zeros(64)
        self.t[0] = -np.inf
        self.m = 1

    def _split(self, x: float) -> int:
        """Index of the breakpoint at x, inserting one (same level as the piece it splits) if needed."""
        i = int(self.t[:self.m].searchsorted(x, side="right")) - 1
        if self.t[i] == x:
            return i
        if self.m == self.t.size:
            self.t = np.concatenate([self.t, np.empty(self.t.size)])
            self.level = np.concatenate([self.level, np.zeros(self.level.size)])
        m = self.m
        self.t[i + 2:m + 1] = self.t[i + 1:m]
        self.level[i + 2:m + 1] = self.level[i + 1:m]
        self.t[i + 1] = x
        self.level[i + 1] = self.level[i]
        self.m = m + 1
        return i + 1

    def add(self, a: float, b: float, c: float) -> float:
        """Add c over [a, b); returns the new maximum over that range (0 if empty)."""
        if not b > a or c == 0:
            return 0.0
        i = self._split(a)
        j = self._split(b)
        seg = self.level[i:j]
        seg += c
        return float(seg.max())

    def max(self, a: float, b: float) -> float:
        """The maximum level over [a, b) (0 for an empty range)."""
        if not b > a:
            return 0.0
        t = self.t[:self.m]
        i = int(t.searchsorted(a, side="right")) - 1
        j = int(t.searchsorted(b, side="left"))
        return float(self.level[i:max(j, i + 1)].max())


class PeakTracker:
    """Peak-model memory of a partial schedule, per device, with the capacity check of a list
    scheduler. Colocation groups have their params reserved whole at the first member placed."""

    def __init__(self, problem: Problem, capacity: np.ndarray) -> None:
        self.p = problem
        self.cap = np.asarray(capacity, dtype=float)
        self.k = problem.k
        self.prof = [Profile() for _ in range(problem.k)]
        self.params = np.zeros(problem.k)
        self.top = np.zeros(problem.k)  # max level of each profile (params excluded)
        self.end: dict[int, float] = {}  # u * k + d -> current end of u's buffer on d
        self.finish = np.zeros(problem.n)
        self.dev = np.full(problem.n, -1, dtype=np.int64)
        self.group_dev: dict[int, int] = {}
        self.group_params = [float(problem.param_bytes[m].sum()) for m in problem.groups]
        ptr, nbr, _ = problem.pred_ptr
        self._ptr, self._nbr = ptr.tolist(), nbr.tolist()
        self.out = problem.out_bytes.tolist()

    def _param_cost(self, v: int) -> float:
        g = int(self.p.colocate[v])
        if g < 0:
            return float(self.p.param_bytes[v])
        return 0.0 if g in self.group_dev else self.group_params[g]

    def _pieces(self, v: int, d: int, s: float, f: float) -> list[tuple[float, float, int]]:
        """(from, bytes, node) of every buffer placing v on d over [s, f) adds (each until f)."""
        out = self.out
        pieces = []
        if out[v] > 0 and f > s:
            pieces.append((s, out[v], v))
        k = self.k
        for j in range(self._ptr[v], self._ptr[v + 1]):
            u = self._nbr[j]
            if out[u] <= 0:
                continue
            e = self.end.get(u * k + d)
            if e is None:  # never local (a local producer always has an entry): first copy received
                e = float(self.finish[u])
            if f > e:
                pieces.append((e, out[u], u))
        return pieces

    def peak_if(self, v: int, d: int, s: float, f: float) -> float:
        """Device d's peak (params included) if v ran there over [s, f)."""
        pieces = self._pieces(v, d, s, f)
        top = self.top[d]
        if pieces:
            pieces.sort()
            prof = self.prof[d]
            acc = 0.0
            for i, (a, size, _) in enumerate(pieces):
                acc += size
                b = pieces[i + 1][0] if i + 1 < len(pieces) else f
                if b > a:
                    top = max(top, prof.max(a, b) + acc)
        return self.params[d] + self._param_cost(v) + top

    def fits(self, v: int, d: int, s: float, f: float) -> bool:
        return self.peak_if(v, d, s, f) <= self.cap[d] * (1 + 1e-12) + 1e-9

    def place(self, v: int, d: int, s: float, f: float) -> None:
        """Record v on d over [s, f)."""
        k = self.k
        prof = self.prof[d]
        for a, size, u in self._pieces(v, d, s, f):
            self.top[d] = max(self.top[d], prof.add(a, f, size))
            if u != v:
                self.end[u * k + d] = f
        self.params[d] += self._param_cost(v)
        g = int(self.p.colocate[v])
        if g >= 0:
            self.group_dev.setdefault(g, d)
        self.end[v * k + d] = max(f, self.end.get(v * k + d, f))
        self.finish[v] = f
        self.dev[v] = d

    def peak(self) -> np.ndarray:
        """Per device, the peak so far (params included)."""
        return self.params + self.top
