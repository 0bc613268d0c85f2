"""Band split (``band-split``): each device holds a band of the model's layers, forward and backward,
so that every device holds its share of what is live at the loss.

Why: the smallest memory at which a training graph fits is set by the loss, where every activation
saved for the backward pass is live (the pivot cut of placement.memory_bounds). min-memory decides
node by node and only sees the bytes placed so far; on the unrolled LSTMs its devices ran ahead of
each other and held weight gradients received from another device while their accumulation chain
was behind (50K nodes: 1.35 x memory_lower_bound at K = 4, 1.53 x at K = 8). Grouping the work by
layer settles both: a layer's backward runs where its activations are saved, and its weight
gradients are summed where they are made.

How (:func:`band_split`):

1. Homes: every node belongs to a parameter unit (a colocation group or lone node holding params):
   the units themselves, then in topological order each node reading a unit's params directly, or
   else the home of its input with the most bytes; nodes with no such input take their consumers'
   home; a node after the loss is then re-assigned to the home it exchanges most bytes with (its
   inputs and consumers), so a gradient sum fed by two layers joins the one whose activations it
   uses (:func:`homes`). On the LSTM the homes are the layers, the embedding and the output layer.
2. Loads: a home's load is its params plus the bytes its nodes keep live across the loss; each
   device's share is the total over K (memory_lower_bound's live cut, when the loss's cut binds).
3. Homes no larger than a share are kept whole and dealt to devices in the order of their forward
   nodes (next fit: a device takes homes until the next would pass its share), so a device holds
   neighbouring layers; a larger home (the LSTM's output layer: a third of the bytes live at the
   loss, per time step) is split: its params go to the device with the fewest bytes; in
   topological order, each of its forward nodes with an input of that home (not its params) goes
   with the one with the most bytes, the others fill the devices' remaining room in turn (bands of
   time steps); each of its backward nodes goes with its input of that home with the most bytes
   (ties: lower device), which follows the chain of a step's gradient back to the step's band.
4. Each device runs its nodes in a memory-light single-device order (min-memory's orders); the
   evaluator times each and the feasible one with the smallest makespan is the answer (FIFO when it
   also fits and is faster), else the one with the smallest overflow, reported as unknown.

Not applicable (status unknown, with the reason) without a pivot (no node comparable with all
others, such as the loss), without params, or when some node may run only on some devices.
Deterministic: no randomness; ties go to the lower device.
"""
from __future__ import annotations

import time

import numpy as np

from placement.evaluator import Evaluation, evaluate
from placement.memory_bounds import pivot_cuts
from placement.problem import Problem
from placement.solution import Solution, SolveOptions

from .min_memory import fifo_if_better, memory_light_orders


def homes(problem: Problem, pivot: int) -> np.ndarray:
    """Per node, the parameter unit it belongs to (step 1 of the module docstring), as an index:
    colocation groups first, then lone param nodes; -1 when no rule reaches a unit."""
    n = problem.n
    out = problem.out_bytes
    params = problem.param_bytes
    groups = len(problem.groups)
    label = np.full(n, -1, dtype=np.int64)
    grouped = problem.colocate >= 0
    group_params = np.bincount(problem.colocate[grouped], weights=params[grouped], minlength=groups)
    for v in range(n):
        g = int(problem.colocate[v])
        if g >= 0 and group_params[g] > 0:
            label[v] = g
        elif g < 0 and params[v] > 0:
            label[v] = groups + v
    pptr, pnbr, _ = problem.pred_ptr
    sptr, snbr, _ = problem.succ_ptr
    pptr_l, pnbr_l, sptr_l, snbr_l = pptr.tolist(), pnbr.tolist(), sptr.tolist(), snbr.tolist()
    lab = label.tolist()
    outl, parl = out.tolist(), params.tolist()
    topo = problem.topo_order.tolist()
    for v in topo:
        if lab[v] >= 0:
            continue
        preds = pnbr_l[pptr_l[v]:pptr_l[v + 1]]
        holders = [u for u in preds if parl[u] > 0 and lab[u] >= 0]
        if holders:
            lab[v] = lab[max(holders, key=lambda u: (parl[u], -u))]
            continue
        known = [u for u in preds if lab[u] >= 0]
        if known:
            lab[v] = lab[max(known, key=lambda u: (outl[u], -u))]
    for v in reversed(topo):
        if lab[v] >= 0:
            continue
        votes: dict[int, int] = {}
        for w in snbr_l[sptr_l[v]:sptr_l[v + 1]]:
            if lab[w] >= 0:
                votes[lab[w]] = votes.get(lab[w], 0) + 1
        if votes:
            lab[v] = max(votes, key=lambda h: (votes[h], -h))
    rank = problem.topo_rank.tolist()
    after = rank[pivot]
    for v in topo:
        if rank[v] <= after or label[v] >= 0:
            continue
        traffic: dict[int, float] = {}  # bytes v exchanges with each home
        for u in pnbr_l[pptr_l[v]:pptr_l[v + 1]]:
            if lab[u] >= 0:
                traffic[lab[u]] = traffic.get(lab[u], 0.0) + outl[u]
        for w in snbr_l[sptr_l[v]:sptr_l[v + 1]]:
            if lab[w] >= 0:
                traffic[lab[w]] = traffic.get(lab[w], 0.0) + outl[v]
        if traffic:
            best = max(traffic.values())
            if traffic.get(lab[v], -1.0) < best:
                lab[v] = min(h for h, b in traffic.items() if b == best)
    return np.asarray(lab, dtype=np.int64)


def contiguous_runs(sizes: np.ndarray, scale: np.ndarray) -> list[int]:
    """Device per item: the items in order cut into at most len(scale) contiguous runs, run d no
    larger than B x scale[d], for the smallest such B (bisection over B, next fit for each)."""
    k = len(scale)

    def runs(cap: float) -> list[int] | None:
        got, d, used = [], 0, 0.0
        for x in sizes.tolist():
            if used > 0 and used + x > cap * scale[d] * (1 + 1e-12):
                d, used = d + 1, 0.0
                if d == k:
                    return None
            got.append(d)
            used += x
        return got

    if sizes.size == 0:
        return []
    lo, hi = float(sizes.max()) / float(scale.max()), float(sizes.sum()) / float(scale.min())
    for _ in range(60):
        mid = 0.5 * (lo + hi)
        if runs(mid) is None:
            lo = mid
        else:
            hi = mid
    return runs(hi) or [k - 1] * sizes.size


def live_across(problem: Problem, pivot: int) -> np.ndarray:
    """Per node, the bytes of its output live while ``pivot`` runs: made before it (or by it) and
    read at or after it."""
    rank = problem.topo_rank
    last = np.full(problem.n, -1, dtype=np.int64)
    np.maximum.at(last, problem.src, rank[problem.dst])
    live = (rank < rank[pivot]) & (last >= rank[pivot])
    live[pivot] = True
    return np.where(live, problem.out_bytes, 0.0)


def band_placement(problem: Problem, pivot: int) -> tuple[np.ndarray, dict]:
    """Device per node (steps 1-3 of the module docstring) and what was decided, for the report."""
    n, k = problem.n, problem.k
    home = homes(problem, pivot)
    if np.any(home < 0):  # a part of the graph no unit reaches: its own home, after the others
        home = np.where(home < 0, int(home.max()) + 1, home)
    held = live_across(problem, pivot) + problem.param_bytes
    count = int(home.max()) + 1
    load = np.bincount(home, weights=held, minlength=count)
    mem = np.asarray(problem.memory, dtype=float)
    weight = mem / mem.sum() if np.all(np.isfinite(mem)) and mem.sum() > 0 else np.full(k, 1.0 / k)
    share = load.sum() * weight
    rank = problem.topo_rank
    forward = rank < rank[pivot]
    pos = np.bincount(home[forward], weights=rank[forward], minlength=count)
    num = np.bincount(home[forward], minlength=count)
    position = np.where(num > 0, pos / np.maximum(num, 1), float(n))
    split = load > share.max() * (1 + 1e-9)
    used = np.zeros(k)
    home_dev = np.full(count, -1, dtype=np.int64)
    whole = sorted((h for h in range(count) if not split[h]), key=lambda h: (position[h], h))
    for h, d in zip(whole, contiguous_runs(load[whole], weight * k)):
        home_dev[h] = d
        used[d] += load[h]
    dev = np.where(home_dev[home] >= 0, home_dev[home], -1)
    params = problem.param_bytes
    for h in np.flatnonzero(split):  # the split home's params: to the device with the fewest bytes
        mine = (home == h) & (params > 0)
        if mine.any():
            e = int(np.argmin(used - share))
            dev[mine] = e
            used[e] += float(params[mine].sum())
    pptr, pnbr, _ = problem.pred_ptr
    out = problem.out_bytes
    e = 0
    for v in problem.topo_order.tolist():  # its forward nodes: the room in order, or with their input
        if not split[home[v]] or dev[v] >= 0 or not forward[v]:
            continue
        same = [int(u) for u in pnbr[pptr[v]:pptr[v + 1]] if home[u] == home[v] and params[u] == 0 and dev[u] >= 0]
        if same:
            d = int(dev[max(same, key=lambda u: (out[u], -dev[u]))])
        else:
            while e < k - 1 and used[e] + 0.5 * held[v] > share[e] * (1 + 1e-9):
                e += 1
            d = e
        dev[v] = d
        used[d] += held[v]
    for v in problem.topo_order.tolist():  # its other nodes follow their input of the same home
        if dev[v] >= 0:
            continue
        preds = pnbr[pptr[v]:pptr[v + 1]]
        same = [int(u) for u in preds if home[u] == home[v] and dev[u] >= 0]
        if same:
            dev[v] = dev[min(same, key=lambda u: (-out[u], dev[u]))]
        else:
            known = [int(u) for u in preds if dev[u] >= 0]
            dev[v] = dev[max(known, key=lambda u: (out[u], -dev[u]))] if known else 0
    for g, members in enumerate(problem.groups):  # a colocation group goes where its first member is
        if len(members):
            dev[np.asarray(members)] = dev[int(members[0])]
    info = {"pivot": problem.ids[pivot], "homes": count, "split_homes": int(split.sum()),
            "share": float(share.max()), "device_bytes_at_pivot": np.bincount(dev, weights=held, minlength=k).tolist()}
    return dev.astype(np.int64), info


def _key(problem: Problem, ev: Evaluation) -> tuple[int, float]:
    over = float(ev.overflow(problem).sum())
    return (0, ev.makespan) if over <= 0 else (1, over)


def band_split(problem: Problem, opts: SolveOptions) -> Solution:
    """The band split of the module docstring, under the peak model (in the static model too, where
    the same placement is judged by static memory)."""
    t0 = time.monotonic()

    def unknown(why: str, info: dict | None = None) -> Solution:
        return Solution("band-split", "unknown", reason=f"band-split: {why}", seconds=time.monotonic() - t0, info=info or {})

    if problem.has_allowed and any(a is not None for a in problem.allowed):
        return unknown("some node may run only on some devices")
    if not np.any(problem.param_bytes > 0):
        return unknown("no params to group the work by")
    pivots, cuts = pivot_cuts(problem)
    if pivots.size == 0:
        return unknown("no node is comparable with all others (no loss to balance at)")
    pivot = int(pivots[int(np.argmax(cuts))])
    dev, info = band_placement(problem, pivot)
    best: tuple[tuple[int, float], Evaluation, list[list[int]], str] | None = None
    for name, seq in memory_light_orders(problem, opts.out_of_time):
        order = [[] for _ in range(problem.k)]
        for v in seq.tolist():
            order[dev[v]].append(v)
        ev = evaluate(problem, dev, order=order, memory_model=opts.memory_model)
        key = _key(problem, ev)
        if best is None or key < best[0]:
            best = (key, ev, order, name)
        if opts.out_of_time():
            break
    if best is None:
        return unknown("out of time", info)
    _, ev, order, name = best
    info["order"] = name
    info["memory_over_capacity"] = float(np.max(ev.memory / problem.memory))
    if not ev.feasible(problem):
        return unknown(f"its placement exceeds memory ({info['memory_over_capacity']:.4g} x capacity)", info)
    kept, ev = fifo_if_better(problem, dev, order, ev, opts.memory_model)
    info["fifo"] = kept is None
    return Solution("band-split", "heuristic", placement=ev.placement, order=kept, start=ev.start, objective=ev.makespan,
                    seconds=time.monotonic() - t0, info=info)
