"""Re-homing slack groups: colocation groups (a weight with its update and optimizer state) moved
off the devices that run the critical path, onto the least loaded others, when the schedule is
no longer for it.

Why: list schedulers give every zero-time source the first device (ETF's ties: all the weights of
a generated CNN or an imported model start on device 0), and a weight's update is colocated with
it, so the device that runs the critical chain also runs thousands of small updates. They cost
the chain nothing where they fill its idle gaps, but they fill them: on the generated 200K CNN
(K = 8) the chain's device runs 0.3-0.5 of updates inside each backward block, the block's
answer sends four paths away whole to make room for them, and a better layout of the block
(every path's last gradient at home, the updates elsewhere) is a compound move that no window
search finds while the updates are there: the relist sweep's fork windows kept nothing in 100 s
from a 600 s answer (3160.74), and 130 windows from the same answer re-homed (3157.60;
bench/results_scale.md, "Session 39").

The move: the *busy* devices are those whose nodes on the incumbent's critical chain
(solvers/refine.py ``critical_chain``) take at least BUSY_SHARE of the most any device's take. A
group leaves a busy device when each of its nodes has more slack than the group's time plus the
transfers of all its edges (slack: the makespan less the node's start and its longest path to
the end over the graph's edges with the placement's transfers, as if its device were free; so
none of them can become critical by the move alone), and goes to the least loaded other device
it may use, while that stays less loaded than the one it leaves. Each device keeps its nodes in
the incumbent's start order, the moved ones slotting in where their starts put them
(placement.incremental.kept_order_start). The answer is kept only when it is no longer and fits
memory. Where it is longer, the moved groups on its critical chain go home and the rest is timed
again (REPAIRS times: a few updates that land before a critical node on their new device); where
that does not do (or the move does not fit), the half with the most slack of the groups still
moved is tried, and so on.
"""
from __future__ import annotations

from typing import Callable

import numpy as np

from placement.bounds import bottom_levels
from placement.evaluator import Evaluation, ScheduleError, check, edge_delay
from placement.incremental import TimingGraph, kept_order_start, timing_graph
from placement.problem import Problem

from .refine import critical_chain

BUSY_SHARE = 0.25  # a device is busy when its time on the critical chain is this share of the busiest's
HALVINGS = 6  # a move that lengthens the schedule (or does not fit) is halved this many times
REPAIRS = 4  # before halving, the groups on the longer schedule's critical chain are sent home this many times
EPS = 1e-9  # relative: slack below this share of the makespan is none


def slack_groups(problem: Problem, ev: Evaluation, graph: TimingGraph) -> tuple[list[np.ndarray], np.ndarray]:
    """The colocation groups that may leave a busy device (node arrays, most slack first) and the
    busy devices as a mask."""
    p = problem
    n, k = p.n, p.k
    pl = ev.placement
    chain = np.asarray(critical_chain(p, ev, graph), dtype=np.int64)
    on_chain = np.bincount(pl[chain], weights=p.time[chain], minlength=k)
    if on_chain.max() <= 0:
        return [], np.zeros(k, dtype=bool)
    busy = on_chain >= BUSY_SHARE * on_chain.max()
    if busy.all():
        return [], busy
    eps = EPS * max(1.0, ev.makespan)
    slack = ev.makespan - ev.start - bottom_levels(p, edge_delay(p, pl))
    # per node, the transfers of all its edges: what moving it could add to a path through it
    comm = np.bincount(p.src, weights=p.comm, minlength=n) + np.bincount(p.dst, weights=p.comm, minlength=n)
    groups, least = [], []
    for g in p.groups:
        d = pl[g[0]]
        if not busy[d] or (pl[g] != d).any():
            continue
        s = slack[g].min()
        if s > p.time[g].sum() + comm[g].sum() + eps:
            groups.append(g)
            least.append(s)
    rank = np.argsort(-np.asarray(least), kind="stable")
    return [groups[i] for i in rank], busy


def _assign(problem: Problem, pl: np.ndarray, groups: list[np.ndarray], busy: np.ndarray,
            mask: np.ndarray | None) -> np.ndarray:
    """``pl`` with each group on the least loaded device that is not busy and allows all its nodes
    (load: the time of the nodes a device runs), while that device stays less loaded than the one
    the group leaves."""
    p = problem
    out = pl.copy()
    load = np.bincount(pl, weights=p.time, minlength=p.k)
    free = np.flatnonzero(~busy)
    for g in groups:
        ok = free if mask is None else free[mask[g][:, free].all(axis=0)]
        if ok.size == 0:
            continue
        t = float(p.time[g].sum())
        d = int(ok[np.argmin(load[ok])])
        src = int(out[g[0]])
        if load[d] + t >= load[src]:
            continue
        out[g] = d
        load[d] += t
        load[src] -= t
    return out


def rehome(problem: Problem, ev: Evaluation, memory_model: str = "static",
           waits: list[tuple[int, int]] | None = None,
           stop: Callable[[], bool] | None = None) -> Evaluation | None:
    """The schedule ``ev`` (meeting ``waits``) with its slack groups moved off the busy devices
    (module doc), if one no longer than it fits memory; else None. ``stop``: asked before each
    timing (about 0.2 s at 200K nodes); once it says so, None."""
    p = problem
    if p.n == 0 or p.k < 2 or not p.groups:
        return None
    graph = timing_graph(p, waits)
    groups, busy = slack_groups(p, ev, graph)
    mask = p.allowed_mask() if p.has_allowed else None
    for _ in range(HALVINGS + 1):
        if not groups:
            break
        moved = _assign(p, ev.placement, groups, busy, mask)
        for attempt in range(REPAIRS + 1):
            if not (moved != ev.placement).any() or (stop is not None and stop()):
                return None
            got = _timed(p, moved, ev.start, graph, memory_model)
            if got is None:
                break
            if got.makespan <= ev.makespan:
                if stop is not None and stop():
                    return None  # the peak below costs a second at 200K nodes
                if got.feasible(p):
                    return got
                break  # too many bytes moved: a half may fit
            if attempt == REPAIRS:
                break
            # the groups whose moved nodes lie on the new critical chain go home, the rest stay
            chain = np.asarray(critical_chain(p, got, graph), dtype=np.int64)
            back = np.unique(p.colocate[chain[moved[chain] != ev.placement[chain]]])
            if back.size == 0:
                break
            home = np.isin(p.colocate, back)
            moved[home] = ev.placement[home]
        # the half with the most slack of the groups still moved
        groups = [g for g in groups if moved[g[0]] != ev.placement[g[0]]]
        groups = groups[: len(groups) // 2]
    return None


def _timed(problem: Problem, placement: np.ndarray, ref_start: np.ndarray, graph: TimingGraph,
           memory_model: str) -> Evaluation | None:
    """The evaluator's schedule of ``placement`` with each device's nodes in ``ref_start`` order."""
    st = kept_order_start(problem, placement, ref_start, graph)
    if st is None:
        return None
    try:
        return check(problem, placement, st, memory_model, check_memory=False)
    except ScheduleError:
        return None
