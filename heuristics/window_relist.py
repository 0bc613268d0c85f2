"""List re-scheduling of a schedule window: the window's nodes placed and sequenced again by a
list scheduler against the window's boundary, under a few launch orders (plans), the best kept.

Why: at a wide join (a grouped convolution's paths, an inception block's branches, the heads of
an attention layer) a list scheduler launches the branches on the fork's device longest first,
sends each branch's cheap remainder to another device while the next launch runs, and keeps the
last one home. The join then waits for the next-to-last branch's return trip when the last
launch is too short to cover it: on the generated 200K-node CNN about 0.013 per block in stages 1
and 2, a plateau for single moves (the fix launches a long branch last *and* keeps its remainder
home *and* sends the old last one away) and three seconds of CP-SAT per block. A list scheduler
re-run on the 80 nodes before the join, with a long branch launched last, finds it in
milliseconds.

The window and its judge are the exact LNS window's (placement/window_boundary.py): the nodes
before the window keep their devices, order and times; the nodes after keep devices and order and
are re-timed; a try's makespan is the largest of the constant part, the window's finishes, each
path into the nodes after the window (the finish, the transfer if the devices differ, the
incumbent's time plus tail of the entered node) and each device's first node after the window
(the window's last finish on that device plus its time plus tail). Without waits it is never
below the evaluator's makespan of the re-timed schedule and equal to it on the generated graphs
(tests/test_window_relist.py); with waits, whose zero-time nodes keep their place in the
evaluator's order, it may promise too much. The caller confirms every answer with the evaluator.
"""
from __future__ import annotations

import threading
from time import monotonic

import numpy as np

from placement.evaluator import zero_time_first
from placement.incremental import IncrementalSchedule
from placement.problem import Problem
from placement.window_boundary import Boundary

JITTER = 1.0  # a try's priority: the node's time plus tail plus a draw from [0, JITTER x the window's longest time]


def relist(problem: Problem, base: IncrementalSchedule, bd: Boundary, rng: np.random.Generator, tries: int,
           mask: np.ndarray | None = None,
           layouts: list[tuple[dict[int, int], dict[int, float]]] | None = None,
           until: float = float("inf"), stop: threading.Event | None = None,
           ) -> tuple[np.ndarray, np.ndarray, float] | None:
    """The best of about ``tries`` list schedules of the window ``bd`` of ``base``, if one beats the
    incumbent's own window schedule by the judge of the module doc: (device per window node, start
    per window node, its makespan), else None.

    A list schedule (ETF): of the ready nodes and their allowed devices, the earliest start wins,
    then the highest priority key, then the incumbent's device; a device runs its nodes one after
    another in the order chosen (no insertion); zero-time nodes occupy no device; nodes of a
    colocation group keep their devices. The plans (priority keys): time plus the incumbent's
    tail; the same with one of the longest siblings (busy nodes on the window's last device with
    the same inputs inside the window: a fork's branches) launched last of its kind, up to
    ``tries // 2`` of them; the rest perturbed at random by ``rng``. ``mask``: the problem's
    allowed_mask(), when the caller has it (0.3 s at 200K nodes). ``layouts``: more plans, each a
    device and a priority for some window nodes (heuristics/fork_join.py), which then run there
    (unless colocation or the allowed devices forbid it) in that priority before the others.
    No plan is started after ``until`` (time.monotonic()) or once ``stop`` is set: the best so far
    is returned."""
    p = problem
    win = bd.win
    w = win.size
    if w == 0 or p.k < 2:
        return None
    pl, finish, tail = base.placement, base.finish, base.tail
    tg = base.graph
    src, dst, comm = tg.src, tg.dst, tg.comm
    local = {int(v): i for i, v in enumerate(win.tolist())}
    k = p.k
    # Per window node: the arrival of its fixed inputs on each device, its inputs inside the window.
    fixed = np.zeros((w, k))
    for e in bd.e_in.tolist():
        u, i = int(src[e]), local[int(dst[e])]
        arrive = np.full(k, finish[u] + comm[e])
        arrive[pl[u]] = finish[u]
        np.maximum(fixed[i], arrive, out=fixed[i])
    succs: list[list[int]] = [[] for _ in range(w)]
    succ_comm: list[list[float]] = [[] for _ in range(w)]
    preds: list[list[int]] = [[] for _ in range(w)]
    indeg0 = np.zeros(w, dtype=np.int64)
    for e in bd.e_ww.tolist():
        a, b = local[int(src[e])], local[int(dst[e])]
        succs[a].append(b)
        succ_comm[a].append(float(comm[e]))
        preds[b].append(a)
        indeg0[b] += 1
    outs: list[list[tuple[int, float, float]]] = [[] for _ in range(w)]  # (device of w, transfer, rest)
    for e in bd.e_out.tolist():
        u, x = int(src[e]), int(dst[e])
        outs[local[u]].append((int(pl[x]), float(comm[e]), float(p.time[x] + tail[x])))
    after_rest = np.array([p.time[a] + tail[a] if a >= 0 else -np.inf for a in bd.first_after.tolist()])
    free0 = np.array([finish[b] if b >= 0 else 0.0 for b in bd.last_before.tolist()])
    time = p.time[win].astype(float)
    allowed = (p.allowed_mask() if mask is None else mask)[win].copy()
    own = pl[win].astype(np.int64)
    pinned = np.flatnonzero(p.colocate[win] >= 0)  # a colocation group keeps its devices
    allowed[pinned] = False
    allowed[pinned, own[pinned]] = True
    prio = time + tail[win]  # the incumbent's longest path from the node: perturbed from the second try on
    span = float(time.max())

    busy = time > 0

    def judge(dev: np.ndarray, fin: np.ndarray) -> float:
        m = max(bd.const, float(fin.max()))
        for i in range(w):
            for d, c, rest in outs[i]:
                m = max(m, fin[i] + (c if dev[i] != d else 0.0) + rest)
        for d in range(k):
            on = busy & (dev == d)
            if on.any() and after_rest[d] > -np.inf:
                m = max(m, float(fin[on].max()) + after_rest[d])
        return m

    incumbent = judge(own, finish[win])
    best: tuple[np.ndarray, np.ndarray, float] | None = None
    # Siblings on the window's last device: busy nodes there with the same inputs inside the window
    # (none, or one fork's). The longest of them in turn is launched last of its kind (the fan-in
    # fix of the module doc), half the tries at most; then random perturbations.
    kinds: dict[tuple[int, ...], list[int]] = {}
    for i in np.flatnonzero((own == int(own[-1])) & (time > 0)).tolist():
        kinds.setdefault(tuple(sorted(set(preds[i]))), []).append(i)
    plans: list[np.ndarray] = [prio]
    last = [(time[i], i, kind) for kind in kinds.values() if len(kind) > 1 for i in kind]
    for _, c, kind in sorted(last, key=lambda x: (-x[0], x[1]))[: max(1, tries // 2)]:
        key = prio.copy()
        low = float(prio[kind].min())
        key[c] = low - 1e-9 * max(1.0, abs(low))
        plans.append(key)
    plans += [prio + rng.uniform(0.0, JITTER * span, size=w) for _ in range(max(0, tries - len(plans)))]
    masks: list[np.ndarray] = [allowed] * len(plans)
    top = float(prio.max()) + 1.0
    for device, order in layouts or ():
        key, only = prio.copy(), allowed.copy()
        for v, d in device.items():
            i = local.get(v)
            if i is None or not allowed[i, d]:
                continue
            only[i] = False
            only[i, d] = True
            key[i] = top + len(device) + order.get(v, 0.0)  # before the window's other nodes
        plans.append(key)
        masks.append(only)
    for key, allow in zip(plans, masks):
        if monotonic() >= until or (stop is not None and stop.is_set()):
            break
        dev = own.copy()
        start = np.zeros(w)
        fin = np.zeros(w)
        free = free0.copy()
        indeg = indeg0.copy()
        arrive = fixed.copy()  # per node and device: when its inputs so far arrive there
        ready = [i for i in range(w) if indeg[i] == 0]
        while ready:
            rows = np.array(ready)
            est = np.where(busy[rows][:, None], np.maximum(arrive[rows], free[None, :]), arrive[rows])
            est = np.where(allow[rows], est, np.inf)
            first = est.min(axis=1)
            r = int(np.lexsort((-key[rows], first))[0])  # the earliest start, then the highest priority
            i = ready.pop(r)
            d = int(own[i]) if est[r, own[i]] <= first[r] else int(np.argmin(est[r]))
            dev[i], start[i] = d, est[r, d]
            fin[i] = est[r, d] + time[i]
            if busy[i]:
                free[d] = fin[i]
            for b, c in zip(succs[i], succ_comm[i]):
                cost = np.full(k, fin[i] + c)
                cost[d] = fin[i]
                np.maximum(arrive[b], cost, out=arrive[b])
                indeg[b] -= 1
                if indeg[b] == 0:
                    ready.append(b)
        score = judge(dev, fin)
        if score < (best[2] if best is not None else incumbent) - 1e-9 * max(1.0, incumbent):
            best = (dev, start, score)
    return best


def merged_order(base: IncrementalSchedule, seq: np.ndarray, answers: list[tuple[int, int, np.ndarray, np.ndarray]],
                 ) -> tuple[np.ndarray, list[list[int]]]:
    """The placement and per-device order of ``base`` with each answer (lo, hi, device per window
    node, start per window node) of disjoint windows [lo, hi) of ``seq`` put in: every node keeps
    its position in ``seq`` except the windows', which are sequenced inside their window by their
    new starts (ties: zero-time nodes first, then topological rank)."""
    p = base.problem
    placement = base.placement.copy()
    key = np.empty(p.n, dtype=float)
    key[seq] = np.arange(p.n, dtype=float)
    rank = zero_time_first(p, base.graph.rank)  # a list schedule: a zero-time node at a busy one's start ran first
    for lo, hi, dev, start in answers:
        win = seq[lo:hi]
        placement[win] = dev
        inside = np.lexsort((rank[win], start))
        key[win[inside]] = lo + np.arange(win.size, dtype=float)
    by_key = np.argsort(key, kind="stable")
    order = [[] for _ in range(p.k)]
    for v, d in zip(by_key.tolist(), placement[by_key].tolist()):
        order[d].append(v)
    return placement, order
