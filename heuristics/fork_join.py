"""Layouts for a wide fork-join: many parallel paths from one fork node to one join node, each
path laid out whole (its nodes one after another on one device), the cheap middle of each path
sent to the other devices and the ends whose transfers are dear kept on the fork's or the join's
device, the shortest paths sent away whole first.

Why: in a grouped convolution (ResNeXt), an inception block or any layer split into parallel
branches, every path has one dear edge (the full-size input it reads from the fork, or the
full-size gradient it sends to the join) and cheap ones in between. The best layouts keep the
dear end of each path on the fork's (join's) device, run one after another there, and let the
other devices run the middles; a few of the shortest paths can afford both dear transfers and go
away whole, if each is the first its device runs. A list scheduler does not find this: it runs the
ready nodes breadth first (all the paths' first nodes, then their second ones...), so the first
middle comes back late, and it sends paths away by their start, not by their return. On the
generated 200K CNN's backward blocks the answers lost 0.014-0.019 per block this way (session
23; docs/scale.md "Wide fork-joins laid out path by path").

Plain functions: :func:`fork_join` finds the structure around a join in a set of nodes,
:func:`layouts` gives the device and priority of every path node for a few variants (how many
paths go away whole, whether the join's device also runs middles); heuristics/window_relist.py
schedules each variant against a window's boundary and keeps the best.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from placement.problem import Problem

from .chain_pin import descendants

MIN_PATHS = 4  # fewer parallel paths are left to the list scheduler's own plans
FORK_TRIES = 3  # wide ancestors of the join tried as its fork, latest first
MAX_BRANCH = 40  # a longer branch is not this structure (and its middle's search, quadratic, would cost)


@dataclass
class ForkJoin:
    """A fork, a join and the branches between them (node lists in topological order; mostly
    chains), each with its segment to send away: positions [lo, hi) of the branch, chosen where
    entering and leaving it costs least."""

    fork: int
    join: int
    paths: list[list[int]]
    segments: list[tuple[int, int]]


def fork_join(problem: Problem, join: int, nodes: np.ndarray) -> ForkJoin | None:
    """The fork-join ending at ``join`` inside ``nodes`` (a set of node indices, the join's
    schedule window), or None: the fork is the latest (in topological rank) of the join's
    ancestors in ``nodes`` with MIN_PATHS or more successors among them whose nodes on paths to the
    join fall into MIN_PATHS or more branches with no edge between two of them (:func:`_paths`);
    the FORK_TRIES latest such ancestors are tried."""
    inside = np.zeros(problem.n, dtype=bool)
    inside[nodes] = True
    sptr, snbr, _ = problem.succ_ptr
    anc = descendants(problem, np.asarray([join]), upward=True, within=inside)
    cand = np.flatnonzero(anc)
    cand = cand[cand != join]
    if cand.size == 0:
        return None
    fan = np.array([int(anc[snbr[sptr[u]:sptr[u + 1]]].sum()) for u in cand.tolist()])
    wide = cand[fan >= MIN_PATHS]
    for fork in wide[np.argsort(-problem.topo_rank[wide], kind="stable")][:FORK_TRIES].tolist():
        paths = _paths(problem, int(fork), join, anc)
        if paths is not None:
            return ForkJoin(int(fork), join, paths, [_segment(problem, int(fork), join, p) for p in paths])
    return None


def _paths(problem: Problem, fork: int, join: int, anc: np.ndarray) -> list[list[int]] | None:
    """The branches between ``fork`` and ``join``: the nodes on paths from one to the other (through
    the join's ancestors ``anc``) split into groups with no edge between two groups, each in
    topological order; None unless there are MIN_PATHS or more, none longer than MAX_BRANCH. A
    branch is mostly a chain (a path of a grouped convolution); an imported model's in-place ops
    add edges inside a branch (a batch norm feeding both its ReLU and the concat), which keep it
    one branch. Inputs from elsewhere (weights, saved activations) and outputs that do not reach
    the join (weight gradients) do not count."""
    pptr, pnbr, _ = problem.pred_ptr
    sptr, snbr, _ = problem.succ_ptr
    on = descendants(problem, np.asarray([fork]), within=anc)  # on a path from the fork to the join
    on[fork] = on[join] = False
    group = {}
    branches = []
    for first in np.flatnonzero(on).tolist():
        if first in group:
            continue
        members, stack = [first], [first]
        group[first] = len(branches)
        while stack:
            v = stack.pop()
            for w in pnbr[pptr[v]:pptr[v + 1]].tolist() + snbr[sptr[v]:sptr[v + 1]].tolist():
                if on[w] and w not in group:
                    group[w] = len(branches)
                    members.append(w)
                    stack.append(w)
        if len(members) > MAX_BRANCH:
            return None
        branches.append(sorted(members, key=lambda v: int(problem.topo_rank[v])))
    return branches if len(branches) >= MIN_PATHS else None


def _segment(problem: Problem, fork: int, join: int, path: list[int]) -> tuple[int, int]:
    """The part [lo, hi) of ``path`` (a branch in topological order) whose way in (the dearest
    edge into it from the fork or the branch before it) and way out (the dearest edge from it to
    the rest of the branch or the join) cost least together (ties: the longer part in time): what
    runs away from the fork's and the join's devices."""
    ptr, nbr, eid = problem.pred_ptr
    at = {v: i for i, v in enumerate(path)}
    at[fork], at[join] = -1, len(path)
    edges = []  # (position of the source, of the destination, transfer) within fork, branch, join
    for v in path + [join]:
        for u, e in zip(nbr[ptr[v]:ptr[v + 1]].tolist(), eid[ptr[v]:ptr[v + 1]].tolist()):
            if u in at and (v != join or 0 <= at[u]):
                edges.append((at[u], at[v], float(problem.comm[e])))
    t = problem.time[path]
    best, arg = None, (0, len(path))
    for lo in range(len(path)):
        for hi in range(lo + 1, len(path) + 1):
            into = max((c for a, b, c in edges if a < lo <= b < hi), default=0.0)
            out = max((c for a, b, c in edges if lo <= a < hi <= b), default=0.0)
            key = (into + out, -float(t[lo:hi].sum()))
            if best is None or key < best:
                best, arg = key, (lo, hi)
    return arg


def layouts(problem: Problem, fj: ForkJoin, fork_device: int, join_device: int
            ) -> list[tuple[dict[int, int], dict[int, float]]]:
    """Variants of the path-by-path layout: per path node its device and a priority (higher runs
    first where several are ready on one device). For w = 0 .. K - 1 paths sent away whole (the
    shortest in time, each the first its device runs: the fork's device first when it is not the
    join's), and the middles dealt round robin over the devices other than the join's, or the
    first to the join's device (which waits for the first middle back anyway) and the rest so, or
    round robin over all of them starting with the join's: the fork's device runs the paths' first
    parts, the join's device their last parts, in path order."""
    k = problem.k
    n_paths = len(fj.paths)
    length = [float(problem.time[p].sum()) for p in fj.paths]
    by_length = sorted(range(n_paths), key=lambda i: (length[i], i))
    others = [d for d in range(k) if d != join_device]
    away_first = ([fork_device] if fork_device != join_device else []) + [d for d in others if d != fork_device]
    out = []
    for whole in range(0, min(k, n_paths)):
        if whole > len(away_first):
            break
        gone = set(by_length[:whole])
        for home in ("none", "first", "share"):  # the middles the join's device runs
            spread = others if home == "none" else [join_device] + others
            if not spread:
                continue
            device: dict[int, int] = {}
            key: dict[int, float] = {}
            rank = 0
            for j, i in enumerate(by_length[:whole]):
                for v in fj.paths[i]:
                    device[v] = away_first[j]
                    key[v] = -rank
                rank += 1
            dealt = 0
            for i in range(n_paths):
                if i in gone:
                    continue
                path, (lo, hi) = fj.paths[i], fj.segments[i]
                if home == "first":
                    middle = join_device if dealt == 0 or not others else others[(dealt - 1) % len(others)]
                else:
                    middle = spread[dealt % len(spread)]
                dealt += 1
                for pos, v in enumerate(path):
                    device[v] = fork_device if pos < lo else middle if pos < hi else join_device
                    key[v] = -rank
                rank += 1
            device[fj.join] = join_device
            out.append((device, key))
    return out
