"""A lower bound from transfers too expensive to pay: they force nodes onto one device, and then
that device's memory or its one-at-a-time schedule is too small (issue 16).

Why: on graphs where a transfer costs several times an operator (the generated CNNs: a 100 MB
activation takes 10 ms to move, a convolution 1 ms), the critical path and the communication bound
(placement/comm_bound.py) stay far below every real schedule. Those schedules are long because the
memory forces the graph apart, and every way of cutting it either pays an expensive transfer on a
long path or keeps whole regions of the graph on one device, where they run one at a time.

The argument, for a target T (docs/scale.md has it in full). Suppose a schedule has makespan < T.
With ``head``/``tail`` the communication bound's per-node bounds (valid in every schedule):

1. an edge u -> v with head[u] + t_u + c_uv + t_v + tail[v] >= T has u and v on one device (else
   the path through it alone lasts T); so do colocation groups. The connected components of these
   forced edges ("clusters") each sit on one device;
2. a cluster's nodes run there one at a time, each not before its head and each followed by its
   tail: the preemptive one-machine bound (Jackson's schedule) of the cluster is below T;
3. the memory: under the static model a cluster holds its params + outputs, under the peak model at
   least its params, on one device it may use; the clusters pack into the K devices (the largest
   cluster fits the largest device, of the K + 1 largest two share a device).

If 2 or 3 fails at T, no schedule is shorter than T. The forced edges only grow as T falls and each
test only gets harder to pass, so the largest such T is found by bisection over the edges sorted by
their path length. Costs a few union-find passes over the edges and one Jackson schedule per
large cluster: seconds at 200K nodes.
"""
from __future__ import annotations

import heapq

import numpy as np

from .comm_bound import heads
from .problem import Problem


def _components(n: int, src: np.ndarray, dst: np.ndarray) -> np.ndarray:
    """Component label (the smallest node index in it) of every node: vectorised hooking and
    pointer jumping, O(log n) rounds of numpy work."""
    label = np.arange(n)
    if src.size == 0:
        return label
    while True:
        a, b = label[src], label[dst]
        diff = a != b
        if not diff.any():
            return label
        a, b = a[diff], b[diff]
        np.minimum.at(label, np.maximum(a, b), np.minimum(a, b))
        while True:  # pointer jumping until every node points at a root
            nxt = label[label]
            if np.array_equal(nxt, label):
                break
            label = nxt


def jackson_bound(release: np.ndarray, dur: np.ndarray, tail: np.ndarray) -> float:
    """Preemptive one-machine bound: jobs with release dates, processing times and tails, run one
    at a time; returns max over jobs of completion + tail in Jackson's preemptive schedule (always
    serve the released job with the largest tail), the optimum of the preemptive relaxation and so
    a lower bound for any non-preemptive schedule."""
    order = np.argsort(release, kind="stable")
    r, p, q = release[order].tolist(), dur[order].tolist(), tail[order].tolist()
    n = len(r)
    heap: list[tuple[float, int]] = []  # (-tail, job)
    left = p[:]
    t, i, best = 0.0, 0, 0.0
    while i < n or heap:
        if not heap and t < r[i]:
            t = r[i]
        while i < n and r[i] <= t:
            heapq.heappush(heap, (-q[i], i))
            i += 1
        _, j = heap[0]
        nxt = r[i] if i < n else float("inf")
        if t + left[j] <= nxt:  # runs to completion before the next release
            t += left[j]
            heapq.heappop(heap)
            best = max(best, t + q[j])
        else:  # runs until the next release, then the choice is made again
            left[j] -= nxt - t
            t = nxt
    return best


class _Clusters:
    """The clusters forced by a set of edges, and the tests of steps 2 and 3."""

    def __init__(self, problem: Problem, memory_model: str, head: np.ndarray, tail: np.ndarray,
                 always_src: np.ndarray, always_dst: np.ndarray) -> None:
        self.p = problem
        self.head, self.tail = head, tail
        self.size = problem.param_bytes + (problem.out_bytes if memory_model == "static" else 0.0)
        self.always = (always_src, always_dst)
        self.mask = problem.allowed_mask() if problem.has_allowed else None
        self.cap = problem.memory.astype(float)

    def label(self, src: np.ndarray, dst: np.ndarray) -> np.ndarray:
        return _components(self.p.n, np.concatenate([self.always[0], src]), np.concatenate([self.always[1], dst]))

    def memory_contradiction(self, label: np.ndarray) -> bool:
        """Step 3: some cluster fits no device it may use, or the clusters cannot be packed."""
        sizes = np.bincount(label, weights=self.size, minlength=self.p.n)
        roots = np.flatnonzero(np.bincount(label, minlength=self.p.n))
        if self.mask is not None:
            ok = np.ones((self.p.n, self.p.k), dtype=bool)
            np.logical_and.at(ok, label, self.mask)
            room = np.where(ok[roots], self.cap[None, :], -1.0).max(axis=1)
            if np.any(sizes[roots] > room * (1 + 1e-12) + 1e-9):
                return True
        s = np.sort(sizes[roots])[::-1]
        cmax = float(self.cap.max())
        if s.size and s[0] > cmax * (1 + 1e-12) + 1e-9:
            return True
        if s.size > self.p.k and s[self.p.k - 1] + s[self.p.k] > cmax * (1 + 1e-12) + 1e-9:
            return True
        return False

    def schedule_bound(self, label: np.ndarray, target: float) -> float:
        """Step 2: the largest Jackson bound over the clusters that could reach ``target`` (a
        cluster's bound is at most its largest head + its total time + its largest tail)."""
        n, t = self.p.n, self.p.time
        load = np.bincount(label, weights=t, minlength=n)
        hmax = np.full(n, -np.inf)
        np.maximum.at(hmax, label, self.head)
        qmax = np.full(n, -np.inf)
        np.maximum.at(qmax, label, self.tail)
        cand = np.flatnonzero((hmax + load + qmax >= target) & (np.bincount(label, minlength=n) > 1))
        best = 0.0
        if cand.size == 0:
            return best
        order = np.argsort(label, kind="stable")
        starts = np.searchsorted(label[order], cand)
        ends = np.searchsorted(label[order], cand, side="right")
        for lo, hi in zip(starts.tolist(), ends.tolist()):
            members = order[lo:hi]
            best = max(best, jackson_bound(self.head[members], t[members], self.tail[members]))
        return best


def _colocation_chains(problem: Problem) -> tuple[np.ndarray, np.ndarray]:
    """Edges chaining each colocation group's members (they always share a device)."""
    grouped = [g for g in problem.groups if g.size > 1]
    if not grouped:
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
    return np.concatenate([g[:-1] for g in grouped]), np.concatenate([g[1:] for g in grouped])


def forced_bound(problem: Problem, memory_model: str = "static", head: np.ndarray | None = None,
                 tail: np.ndarray | None = None, floor: float = 0.0) -> float:
    """The largest T at which the edges whose transfer would make a path of length T force
    clusters that fail the memory or one-machine test (module docstring): every schedule of the
    problem, under ``memory_model``, lasts at least that. ``floor`` is a bound already known (edges
    that cannot raise it are skipped); returns at least ``floor``."""
    if problem.n == 0:
        return floor
    head = heads(problem) if head is None else head
    tail = heads(problem, reverse=True) if tail is None else tail
    t = problem.time
    cl = _Clusters(problem, memory_model, head, tail, *_colocation_chains(problem))
    src, dst = problem.src, problem.dst
    length = head[src] + t[src] + problem.comm + t[dst] + tail[dst]
    keep = np.flatnonzero((problem.comm > 0) & (length > floor))
    keep = keep[np.argsort(-length[keep], kind="stable")]
    s_len = length[keep]

    best = floor

    def candidate(i: int) -> bool:
        """Force the first i edges (every T <= top = the shortest of their paths forces at least
        them). A failed memory test proves every T <= top, a Jackson bound J proves min(top, J).
        Returns whether the tests fail at top (then fewer edges should be tried)."""
        nonlocal best
        top = float(s_len[i - 1]) if i else np.inf
        label = cl.label(src[keep[:i]], dst[keep[:i]])
        if cl.memory_contradiction(label):
            if i:  # with no edge forced it is infeasibility (bounds.infeasibility's business), not a bound
                best = max(best, top)
            return True
        j = cl.schedule_bound(label, best)
        best = max(best, min(top, j))
        return j >= top

    # bisection for the crossing of J (grows with i) and top (falls with i); every probe is valid
    lo, hi = 0, int(keep.size)
    if not candidate(hi):
        return best
    while lo < hi:
        mid = (lo + hi) // 2
        if candidate(mid):
            hi = mid
        else:
            lo = mid + 1
    return best
