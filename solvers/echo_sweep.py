"""Echo sweep: a change that shortened the schedule in one block, tried in every copy of that block.

Why: the other searches (refine, window LNS, the sweeps) improve a big graph a block at a time.
On a training step made of many copies of one block (the 160 layers of a decoder, the steps of an
unrolled RNN) the same fix then has to be found once per copy: the 32K decoder gained about 0.1%
per 60 s slice to the end of a 600 s run. Colour refinement (placement/repeats.py) tells which
nodes are a block's counterparts in the other copies, so one found fix can be tried in all of
them at the price of a few evaluations.

From two schedules of the search, before and after an improvement:
1. The changed nodes: a new device, or (positive-time nodes) a new predecessor on their device.
   A change of more than MAX_CHANGED of the graph is a different schedule, not a fix: skipped.
2. They fall into patterns: changed nodes joined by an edge or a common neighbour. A pattern's
   region is its nodes, those common neighbours and the changed nodes' other neighbours.
3. Each copy of a region (placement/repeats.py ``images``, from every other node of its root's
   colour) gets the pattern: each changed node's counterpart takes its new device, through the
   device map that best matches the region's old devices to the copy's, and a start relative to
   the copy's anchor (the region's earliest unchanged node) as in the improved schedule; the
   search's schedule order is re-made from those start times (raised until each node starts no
   earlier than its inputs finish, so that at equal starts zero-time nodes go first, as in the
   schedule they come from: placement.evaluator.schedule_ties), and the evaluator times it.
4. All copies at once first; if not shorter (or not fitting), each half, down to MAX_TRIES
   evaluations a pattern. What is shorter and fits is kept at once. The latest patterns go first.

On the decoder, the echo of relist's first sweep (8 s) gained 0.84% in 3 s; the 600 s answer went
from 157.17-157.74 to 156.85-156.92 in three runs of four (157.60 in the fourth; bench/results_scale.md,
session 30; docs/scale.md has the details).
"""
from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

from formulations.window_lns import timed
from placement.evaluator import Evaluation, ScheduleError
from placement.problem import Problem
from placement.repeats import class_members, images, neighbours, repeat_classes
from placement.solution import SolveOptions

from .refine import order_of
from .schedule_search import ScheduleSweep

MAX_CHANGED = 0.25  # share of the nodes: a change this big is a new schedule, not a pattern to copy
MAX_TRIES = 15  # evaluations a pattern may take (all copies, the halves, ..., down to eighths)
MAX_REGION = 400  # nodes in a pattern's region: a larger one is a schedule-wide change
MAX_QUEUE = 50  # patterns waiting for an echo
SETTLE_PASSES = 64  # passes making the copied start times consistent with the graph and the node times


@dataclass
class EchoStats:
    """What the sweep did, for the report's ``echo`` phase."""
    patterns: int = 0  # patterns taken from improvements
    tried: int = 0  # schedules with echoes judged
    kept: int = 0  # of them, kept
    copies: int = 0  # block copies changed by the kept ones
    start_makespan: float = float("nan")
    best_makespan: float = float("nan")


@dataclass
class Pattern:
    """The changed nodes of one fix, their region and its anchor, with the two schedules."""
    changed: list[int]
    region: set[int]
    root: int
    anchor: int
    before: Evaluation
    after: Evaluation


def device_predecessor(problem: Problem, ev: Evaluation, rank: np.ndarray) -> np.ndarray:
    """Each positive-time node's predecessor on its device in ``ev``'s order (-1: none, or a
    zero-time node, whose place follows its inputs' timing)."""
    busy = np.flatnonzero(problem.time > 0)
    seq = busy[np.lexsort((rank[busy], ev.start[busy], ev.placement[busy]))]
    prev = np.full(problem.n, -1, dtype=np.int64)
    same = ev.placement[seq[1:]] == ev.placement[seq[:-1]]
    prev[seq[1:][same]] = seq[:-1][same]
    return prev


def changed_nodes(problem: Problem, before: Evaluation, after: Evaluation, rank: np.ndarray) -> np.ndarray:
    """The nodes whose device or whose predecessor on their device differs between two schedules."""
    moved = before.placement != after.placement
    moved |= device_predecessor(problem, before, rank) != device_predecessor(problem, after, rank)
    return np.flatnonzero(moved)


def patterns(problem: Problem, before: Evaluation, after: Evaluation, rank: np.ndarray) -> list[Pattern]:
    """The fixes between two schedules, as the module docstring's step 2 groups them."""
    changed = changed_nodes(problem, before, after, rank)
    if changed.size == 0 or changed.size > MAX_CHANGED * problem.n:
        return []
    parent = {int(v): int(v) for v in changed}

    def find(v: int) -> int:
        while parent[v] != v:
            parent[v] = parent[parent[v]]
            v = parent[v]
        return v

    mark = np.zeros(problem.n, dtype=bool)
    mark[changed] = True
    src, dst = problem.src, problem.dst
    both = mark[src] & mark[dst]
    for u, v in zip(src[both].tolist(), dst[both].tolist()):
        parent[find(u)] = find(v)
    one = mark[src] ^ mark[dst]
    other = np.where(mark[src[one]], dst[one], src[one])  # the unchanged end
    mine = np.where(mark[src[one]], src[one], dst[one])  # the changed end
    order = np.argsort(other, kind="stable")
    other, mine = other[order], mine[order]
    bridges: dict[int, list[int]] = {}
    for x, c in zip(other.tolist(), mine.tolist()):
        bridges.setdefault(x, []).append(c)
    groups: dict[int, list[int]] = {}
    for x, cs in bridges.items():
        for c in cs[1:]:
            parent[find(c)] = find(cs[0])
    for v in changed.tolist():
        groups.setdefault(find(v), []).append(v)
    found = []
    for nodes in groups.values():
        region = set(nodes)
        for v in nodes:
            region.update(neighbours(problem, v))
        if len(region) > MAX_REGION:
            continue
        root = min(nodes, key=lambda v: rank[v])
        quiet = [x for x in region if x not in parent]
        anchor = min(quiet, key=lambda x: (after.start[x], rank[x])) if quiet else root
        found.append(Pattern(sorted(nodes), region, root, anchor, before, after))
    return found


def device_map(k: int, pairs: list[tuple[int, int]]) -> np.ndarray:
    """A one-to-one map of K devices that agrees with as many (from, to) pairs as a greedy pass by
    count finds; the devices no pair settles map to the free ones in order."""
    counts: dict[tuple[int, int], int] = {}
    for a, b in pairs:
        counts[(a, b)] = counts.get((a, b), 0) + 1
    out = np.full(k, -1, dtype=np.int64)
    taken = np.zeros(k, dtype=bool)
    for (a, b), _ in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])):
        if out[a] < 0 and not taken[b]:
            out[a], taken[b] = b, True
    free = np.flatnonzero(~taken).tolist()
    for a in range(k):
        if out[a] < 0:
            out[a] = free.pop(0)
    return out


class EchoSweep(ScheduleSweep):
    """The sweep of the module docstring, which the pipeline runs after each piece of a slice that
    improved the schedule: ``learn(before, after)`` queues that piece's patterns, ``run`` echoes
    them until its deadline. ``colors``: :func:`placement.repeats.repeat_classes`, when known."""

    def __init__(self, problem: Problem, placement: np.ndarray, start: np.ndarray, opts: SolveOptions, *,
                 memory_model: str = "static", stats: EchoStats | None = None,
                 waits: list[tuple[int, int]] | None = None, colors: np.ndarray | None = None) -> None:
        super().__init__(problem, placement, start, opts, memory_model, stats or EchoStats(), waits)
        self.col = repeat_classes(problem) if colors is None else colors
        self.ptr, self.members = class_members(self.col, problem.topo_rank)
        self.mask = problem.allowed_mask()
        self.queue: list[Pattern] = []
        self.seen: set[tuple] = set()  # signatures of patterns tried already

    def learn(self, before: Evaluation, after: Evaluation) -> int:
        """Queue the patterns of the change from ``before`` to ``after`` (a better schedule another
        search found, which this sweep adopts); the count queued."""
        self.adopt(after, self.waits)
        fresh = []
        for pat in patterns(self.p, before, after, self.graph.rank):
            sig = tuple(sorted((int(self.col[v]), int(before.placement[v] != after.placement[v])) for v in pat.changed))
            if sig in self.seen or self.ptr[self.col[pat.root] + 1] - self.ptr[self.col[pat.root]] < 2:
                continue
            self.seen.add(sig)
            fresh.append(pat)
        got = len(fresh)
        self.queue = (fresh + self.queue)[:MAX_QUEUE]  # the latest fixes first; the oldest left waiting are dropped
        self.stats.patterns += got
        self.dry = not self.queue
        return got

    def run(self, deadline: float) -> Evaluation:
        """Echo the queued patterns until ``deadline`` or a stop; the best schedule so far."""
        while self.queue and not self.opts.stop.is_set() and time.monotonic() + self.eval_seconds < deadline:
            self._echo(self.queue.pop(0), deadline)
        self.dry = not self.queue
        return self.best_ev

    def _copies(self, pat: Pattern, deadline: float) -> list[dict[int, int]]:
        """The pattern's region mapped onto each other copy (placement/repeats.py ``images``), in
        topological order, none overlapping the region or another; those mapped by ``deadline``."""
        c = int(self.col[pat.root])
        taken = set(pat.region)
        out = []
        for t in self.members[self.ptr[c]:self.ptr[c + 1]].tolist():
            if t in pat.region:
                continue
            if self.opts.stop.is_set() or time.monotonic() >= deadline:
                break
            img = images(self.p, self.col, pat.region, pat.root, t)
            if img is None or any(img[v] in taken for v in pat.changed):
                continue
            taken.update(img[v] for v in pat.changed)
            out.append(img)
        return out

    def _echo(self, pat: Pattern, deadline: float) -> None:
        """Try the pattern in its copies: all at once, then halves, ... (MAX_TRIES evaluations)."""
        groups = [self._copies(pat, deadline - self.eval_seconds)]
        tries = 0
        while groups and tries < MAX_TRIES and not self.opts.stop.is_set() and \
                time.monotonic() + self.eval_seconds < deadline:
            group = groups.pop(0)
            if not group:
                continue
            tries += 1
            if self._try(pat, group):
                continue
            if len(group) > 1:
                half = len(group) // 2
                groups += [group[:half], group[half:]]

    def _try(self, pat: Pattern, group: list[dict[int, int]]) -> bool:
        """Put the pattern into each copy of ``group`` on the best schedule; keep it if the
        evaluator finds it shorter and fitting."""
        p, cur = self.p, self.best_ev
        pl, prio = cur.placement.copy(), cur.start.copy()
        old, new = pat.before, pat.after
        for img in group:
            sigma = device_map(p.k, [(int(old.placement[x]), int(cur.placement[y])) for x, y in img.items()])
            base = cur.start[img[pat.anchor]] - new.start[pat.anchor]
            copy = [(img[v], int(sigma[new.placement[v]]), base + new.start[v]) for v in pat.changed]
            if all(self.mask[w, d] for w, d, _ in copy):
                for w, d, s in copy:
                    pl[w], prio[w] = d, s
        g = self.graph
        dur = p.time[g.src]
        for _ in range(SETTLE_PASSES):  # each pass settles one more link of a chain of raised starts
            if np.all(prio[g.dst] >= prio[g.src] + dur):
                break
            np.maximum.at(prio, g.dst, prio[g.src] + dur)
        else:
            return False  # a raised start runs down a long chain: not a local change
        t = time.monotonic()
        self.stats.tried += 1
        try:
            ev = timed(p, pl, order_of(p, pl, prio, graph=g), self.mm, self.waits)
        except ScheduleError:
            ev = None
        self.eval_seconds = max(self.eval_seconds, time.monotonic() - t)
        if ev is None or ev.makespan >= cur.makespan * (1 - 1e-12) or not ev.feasible(p):
            return False
        self.best_ev = ev
        self.stats.kept += 1
        self.stats.copies += len(group)
        self.stats.best_makespan = ev.makespan
        return True
