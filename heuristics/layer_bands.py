"""Layer bands: each device a contiguous band of the model's parameter units (its layers), forward
and backward. Two method rows are configurations of it: ``band-split`` (the smallest memory) and
``weight-bands`` (the makespan at moderate memory).

Why: on a training graph the memory is set at the loss, where every activation saved for the
backward pass is live; the list schedulers spread the work for speed and pile up what travels
between devices, and min-memory decides node by node and lets devices drift apart in time. Grouping
the work by layer keeps a layer's backward where its activations are saved and its weight gradients
summed where they are made; an unrolled RNN so split runs as a wavefront pipeline over its steps.

How (:func:`band_placement`, then :func:`layer_bands` for the orders), each step an option of
:class:`Bands`:

1. Units: colocation groups and lone nodes holding params (:func:`param_units`).
2. Every node joins a unit (``assign``). "loss" (:func:`homes`): a node reading a unit's params
   directly joins it, else the unit of its input with the most bytes; nodes with no such input take
   their consumers' (the most of them); a node after the loss is then re-voted to the unit it
   exchanges most bytes with, so a gradient sum fed by two layers joins the one whose activations it
   uses. "reads" (:func:`owners`): the unit whose params it reads (the most params), else the unit
   its inputs carry most bytes of, summed per unit (ties: the input made last); a node reading
   nothing owned takes its first owned consumer's. On the generated LSTM both give the layers, the
   embedding and the output layer.
3. A unit's size (``balance``): "bytes", its params plus the bytes its nodes keep live across the
   loss (the live cut of placement.memory_bounds: balanced sizes put each device at the bound at the
   loss), with device shares in proportion to their memory; "work", its nodes' time, equal shares.
4. A unit larger than a share (the LSTM's output layer) is ``split``: "fill", its params to the
   device with the least room used, its forward nodes in topological order with their input of the
   unit with the most bytes, else filling the devices' room left in turn (bands of time steps), its
   other nodes with their input of the unit; "pieces", cut into pieces (:func:`pieces`: one time
   step's logits, loss, gradients and accumulation) that take the unit's place in the sequence;
   "none", kept whole.
5. The units (and pieces) in ``sequence`` ("forward": the mean rank of their forward nodes;
   "first-read": the rank of their weight's first reader), cut (``cut``) into K contiguous bands
   with the smallest largest band ("minmax", :func:`contiguous_cut`) or at equal shares of the
   total ("quantile"). A colocation group follows its first member.
6. The order, per device (``order`` of :func:`layer_bands`): "light", min-memory's memory-light
   single-device orders restricted to each device (the feasible one with the smallest makespan,
   FIFO when it also fits and is faster); "critical", FIFO and :func:`priority_order` (the longest
   path first under a memory headroom, each of HEADROOMS).
7. When no order fits (band-split): parameter units moved off the peak device (:func:`move_params`).

band-split = loss / bytes / fill / forward / minmax, light orders, step 7: it fits the LSTMs at
1.08-1.26 x memory_lower_bound (K = 4) and 1.13-1.25 (K = 8). weight-bands = reads / work / first-read, critical orders, with the
cuts of WEIGHT_BANDS tried in turn until one fits: on the 10K LSTM at 1.5 x its smallest memory
it runs in 226.8 where min-memory's orders give 584 (docs/peak.md, "Layer bands").
Deterministic: no randomness; ties go to the lower device.
"""
from __future__ import annotations

import heapq
import time
from dataclasses import asdict, dataclass, replace
from typing import Callable, Iterator

import numpy as np

from placement.bounds import bottom_levels
from placement.evaluator import Evaluation, edge_delay, evaluate
from placement.memory_bounds import pivot_cuts
from placement.problem import Problem
from placement.split_bound import with_pivot
from placement.solution import Solution, SolveOptions

from .memory_order import CommittedBytes, list_state
from .min_memory import fifo_if_better, memory_light_orders


@dataclass(frozen=True)
class Bands:
    """One band placement (module docstring, steps 2-5)."""

    assign: str = "loss"  # "loss" (homes) or "reads" (owners)
    balance: str = "bytes"  # "bytes" (params + live at the loss) or "work" (node time)
    split: str = "fill"  # a unit above a share: "fill", "pieces" or "none"
    sequence: str = "forward"  # "forward" (mean forward rank) or "first-read"
    cut: str = "minmax"  # "minmax" or "quantile"


BAND_SPLIT = (Bands(),)
# weight-bands' placements, tried in turn until one fits: the split ones only help where a unit
# needs more than one device (10K LSTM, K = 8: the output layer, 1/3.6 of the work).
WEIGHT_BANDS = tuple(Bands("reads", "work", split, "first-read", cut)
                     for cut, split in (("minmax", "none"), ("quantile", "none"), ("minmax", "pieces"), ("quantile", "pieces")))
# priority_order's memory headrooms, both tried on a placement: the best varies (10K LSTM, K = 4,
# 1.634 GB: 0.8 -> 226.8, 0.95 overflows; 50K LSTM, K = 4, 5.19 GB: 0.8 -> 975.4, 0.95 -> 1321.8)
HEADROOMS = (0.8, 0.95)
# move_params weighs, per step, the units with the most params on the peak device, at most this many:
# moving a small unit barely changes a peak, and each try is one evaluation (a CNN has thousands).
MOVE_UNITS = 3
# A move must lower the largest peak / capacity by this fraction at least: on the 10K CNN (K = 8)
# moves of 0.05% each took 22 s of the portfolio's time without an answer.
MIN_GAIN = 0.005


def param_units(problem: Problem) -> np.ndarray:
    """Unit per node (-1: none): colocation groups holding params, then lone nodes holding params,
    numbered from 0."""
    unit = np.full(problem.n, -1, dtype=np.int64)
    count = 0
    held = np.bincount(problem.colocate[problem.colocate >= 0], weights=problem.param_bytes[problem.colocate >= 0],
                       minlength=len(problem.colocate_names)) if problem.n else np.zeros(0)
    for g, members in enumerate(problem.groups):
        if held[g] > 0:
            unit[members] = count
            count += 1
    lone = np.flatnonzero((problem.colocate < 0) & (problem.param_bytes > 0))
    unit[lone] = np.arange(count, count + lone.size)
    return unit


def homes(problem: Problem, unit: np.ndarray, pivot: int) -> np.ndarray:
    """Unit per node by rule "loss" (module docstring, step 2); -1 where no rule reaches a unit."""
    pptr, pnbr, _ = problem.pred_ptr
    sptr, snbr, _ = problem.succ_ptr
    pptr_l, pnbr_l, sptr_l, snbr_l = pptr.tolist(), pnbr.tolist(), sptr.tolist(), snbr.tolist()
    lab = unit.tolist()
    outl, parl = problem.out_bytes.tolist(), problem.param_bytes.tolist()
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
        if rank[v] <= after or unit[v] >= 0:
            continue
        traffic: dict[int, float] = {}  # bytes v exchanges with each unit
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


def owners(problem: Problem, unit: np.ndarray) -> np.ndarray:
    """Unit per node by rule "reads" (module docstring, step 2); -1 only when no unit exists."""
    n = problem.n
    owner = unit.tolist()
    ptr, nbr, _ = problem.pred_ptr
    ptr_l, nbr_l = ptr.tolist(), nbr.tolist()
    params = problem.param_bytes.tolist()
    out = problem.out_bytes.tolist()
    rank = problem.topo_rank.tolist()
    for v in problem.topo_order.tolist():
        if owner[v] >= 0:
            continue
        direct = None
        votes: dict[int, tuple[float, int]] = {}
        for j in range(ptr_l[v], ptr_l[v + 1]):
            u = nbr_l[j]
            o = owner[u]
            if o < 0:
                continue
            if unit[u] >= 0 and params[u] > 0:
                if direct is None or params[u] > direct[0]:
                    direct = (params[u], o)
                continue
            got, last = votes.get(o, (0.0, -1))
            votes[o] = (got + out[u], max(last, rank[u]))
        if direct is not None:
            owner[v] = direct[1]
        elif votes:
            owner[v] = max(votes.items(), key=lambda kv: (kv[1][0], kv[1][1]))[0]
    sptr, snbr, _ = problem.succ_ptr
    sptr_l, snbr_l = sptr.tolist(), snbr.tolist()
    for v in problem.topo_order.tolist()[::-1]:
        if owner[v] < 0:
            for j in range(sptr_l[v], sptr_l[v + 1]):
                if owner[snbr_l[j]] >= 0:
                    owner[v] = owner[snbr_l[j]]
                    break
    got = np.asarray(owner, dtype=np.int64)
    if n and np.any(got < 0) and np.any(got >= 0):
        got[got < 0] = int(got[got >= 0].min())  # a component reading no weight: the first unit
    return got


def pieces(problem: Problem, unit: np.ndarray, owner: np.ndarray) -> np.ndarray:
    """Piece of every node, a finer split of its owner's nodes: a unit's own members form one piece;
    another node joins the piece of its input with the same owner carrying the most bytes (ties:
    the input fewest steps from its piece's start, then the input made last), or starts a piece
    when it has none (it reads only the weight or other owners' tensors: an output layer's logits
    at one time step). So each piece is one use of the weight, its saved activations, their
    backward and its weight gradient; a gradient accumulation ``acc_t = dW_t + acc_(t+1)`` joins
    ``dW_t``'s piece (fewer steps from its start), so the chain crosses pieces instead of
    gathering every step's gradient into one."""
    n = problem.n
    piece = [-1] * n
    hops = [0] * n
    count = 0
    first: dict[int, int] = {}
    for v in np.flatnonzero(unit >= 0).tolist():
        u = int(unit[v])
        if u not in first:
            first[u] = count
            count += 1
        piece[v] = first[u]
    ptr, nbr, _ = problem.pred_ptr
    ptr_l, nbr_l = ptr.tolist(), nbr.tolist()
    own = owner.tolist()
    unit_l = unit.tolist()
    out = problem.out_bytes.tolist()
    rank = problem.topo_rank.tolist()
    for v in problem.topo_order.tolist():
        if piece[v] >= 0:
            continue
        best = None
        for j in range(ptr_l[v], ptr_l[v + 1]):
            u = nbr_l[j]
            if own[u] == own[v] and unit_l[u] < 0 and piece[u] >= 0:
                key = (out[u], -hops[u], rank[u])
                if best is None or key > best[0]:
                    best = (key, u)
        if best is None:
            piece[v] = count
            count += 1
        else:
            piece[v] = piece[best[1]]
            hops[v] = hops[best[1]] + 1
    return np.asarray(piece, dtype=np.int64)


def contiguous_cut(sizes: np.ndarray, scale: np.ndarray) -> np.ndarray:
    """Band per item: the items in sequence cut into at most len(scale) contiguous runs, run d no
    larger than B x scale[d], for the smallest such B (bisection over B, next fit for each; may
    leave bands empty)."""
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
        return np.zeros(0, dtype=np.int64)
    lo, hi = float(sizes.max()) / float(scale.max()), float(sizes.sum()) / float(scale.min())
    for _ in range(60):
        mid = 0.5 * (lo + hi)
        if runs(mid) is None:
            lo = mid
        else:
            hi = mid
    return np.asarray(runs(hi) or [k - 1] * sizes.size, dtype=np.int64)


def quantile_cut(sizes: np.ndarray, parts: int) -> np.ndarray:
    """Band per item in sequence: the share of the total at the item's midpoint, cut into ``parts``
    equal shares (every band used when the items are small)."""
    if sizes.size == 0:
        return np.zeros(0, dtype=np.int64)
    cum = np.cumsum(sizes)
    mid = cum - sizes / 2
    return np.minimum(parts - 1, (parts * mid / max(float(cum[-1]), 1e-300)).astype(np.int64))


def live_across(problem: Problem, pivot: int) -> np.ndarray:
    """Per node, the bytes of its output live while ``pivot`` runs: made before it (or by it) and
    read at or after it."""
    rank = problem.topo_rank
    last = np.full(problem.n, -1, dtype=np.int64)
    np.maximum.at(last, problem.src, rank[problem.dst])
    live = (rank < rank[pivot]) & (last >= rank[pivot])
    live[pivot] = True
    return np.where(live, problem.out_bytes, 0.0)


def on_pivoted(problem: Problem, opts: SolveOptions, solve: Callable[[Problem], Solution]) -> Solution | None:
    """``solve`` run on ``problem`` made to have a pivot (placement.split_bound.with_pivot: ordering
    edges from the nodes loose around its loss), its answer re-evaluated on ``problem`` itself;
    None when ``problem`` has no loss-like node to pivot on. Imported training steps need this:
    their loss is not a pivot (Adam's state-only ``mul_``, saved-output holders, unused outputs)."""
    pivoted = with_pivot(problem)
    if pivoted is None:
        return None
    sol = solve(pivoted[0])
    if sol.placement is None:
        return sol
    ev = evaluate(problem, sol.placement, order=sol.order, memory_model=opts.memory_model, waits=sol.waits)
    if not ev.feasible(problem):  # cannot happen (the edges only constrain); kept honest anyway
        return Solution(sol.method, "unknown", reason=f"{sol.method}: the pivoted answer does not fit the problem",
                        seconds=sol.seconds, info=sol.info)
    return replace(sol, start=ev.start, objective=ev.makespan, info={**sol.info, "pivoted_on": problem.ids[pivoted[1]]})


def loss_pivot(problem: Problem) -> int | None:
    """The pivot with the largest live cut (the loss of a training graph), None without a pivot."""
    pivots, cuts = pivot_cuts(problem)
    return int(pivots[int(np.argmax(cuts))]) if pivots.size else None


def band_placement(problem: Problem, bands: Bands, pivot: int | None = None) -> tuple[np.ndarray, dict] | None:
    """Device per node (module docstring, steps 1-5) and what was decided; None without params.
    ``pivot`` (the loss) is needed by assign "loss", balance "bytes" and sequence "forward"."""
    n, k = problem.n, problem.k
    unit = param_units(problem)
    units = int(unit.max(initial=-1)) + 1
    if units == 0:
        return None
    home = homes(problem, unit, pivot) if bands.assign == "loss" else owners(problem, unit)
    if np.any(home < 0):  # a part of the graph no unit reaches: its own unit, after the others
        home = np.where(home < 0, units, home)
    count = int(home.max()) + 1
    params = problem.param_bytes
    rank = problem.topo_rank
    if bands.balance == "bytes":
        size = live_across(problem, pivot) + params
        mem = np.asarray(problem.memory, dtype=float)
        weight = mem / mem.sum() if np.all(np.isfinite(mem)) and mem.sum() > 0 else np.full(k, 1.0 / k)
        param_size = params
    else:
        size = problem.time
        weight = np.full(k, 1.0 / k)
        param_size = size
    load = np.bincount(home, weights=size, minlength=count)
    share = load.sum() * weight
    heavy = load > share.max() * (1 + 1e-9) if bands.split != "none" else np.zeros(count, dtype=bool)
    if bands.sequence == "forward":
        forward = rank < rank[pivot]
        pos = np.bincount(home[forward], weights=rank[forward], minlength=count)
        num = np.bincount(home[forward], minlength=count)
        position = np.where(num > 0, pos / np.maximum(num, 1), float(n))
    else:
        sptr, snbr, _ = problem.succ_ptr
        position = np.full(count, n, dtype=np.int64)
        for w in np.flatnonzero((unit >= 0) & (params > 0)).tolist():  # a unit's first read: its weight's earliest consumer
            readers = snbr[sptr[w]:sptr[w + 1]]
            if readers.size:
                position[unit[w]] = min(position[unit[w]], int(rank[readers].min()))
    place = np.empty(count, dtype=np.int64)  # each unit's place in the sequence (ties: lower unit)
    place[np.lexsort((np.arange(count), position))] = np.arange(count)
    # Items: whole units, or a heavy unit's pieces; a heavy unit to fill is no item.
    item = home.copy()
    if bands.split == "pieces" and np.any(heavy):
        item = np.where(heavy[home], count + pieces(problem, unit, home), home)
    banded = ~heavy[home] if bands.split == "fill" else np.ones(n, dtype=bool)
    ids, inv = np.unique(item[banded], return_inverse=True)
    start = np.full(ids.size, n, dtype=np.int64)
    np.minimum.at(start, inv, rank[banded])
    unit_of = np.zeros(ids.size, dtype=np.int64)
    unit_of[inv] = home[banded]
    member = np.zeros(ids.size, dtype=bool)  # the item holding a unit's params goes first among its pieces
    member[inv[unit[banded] >= 0]] = True
    seq = np.lexsort((start, ~member, place[unit_of]))
    item_size = np.bincount(inv, weights=size[banded], minlength=ids.size)
    band = np.empty(ids.size, dtype=np.int64)
    band[seq] = contiguous_cut(item_size[seq], weight * k) if bands.cut == "minmax" else quantile_cut(item_size[seq], k)
    dev = np.full(n, -1, dtype=np.int64)
    dev[banded] = band[inv]
    used = np.zeros(k)
    for b, x in zip(band[seq].tolist(), item_size[seq].tolist()):  # summed in sequence order
        used[b] += x
    if bands.split == "fill" and np.any(heavy):
        _fill(problem, home, heavy, dev, size, param_size, used, share, rank < rank[pivot])
    _follow_inputs(problem, home, dev)
    for members in problem.groups:  # a colocation group goes where its first member is
        if len(members):
            dev[np.asarray(members)] = dev[int(members[0])]
    if problem.has_allowed:
        mask = problem.allowed_mask()
        bad = ~mask[np.arange(n), dev]
        dev[bad] = np.argmax(mask[bad], axis=1)
    info = {"units": count, "split_units": int(heavy.sum()), "share": float(share.max()),
            "size_per_device": np.bincount(dev, weights=size, minlength=k).tolist()}
    if pivot is not None:
        info["pivot"] = problem.ids[pivot]
    return dev, info


def _fill(problem: Problem, home: np.ndarray, heavy: np.ndarray, dev: np.ndarray, size: np.ndarray,
          param_size: np.ndarray, used: np.ndarray, share: np.ndarray, forward: np.ndarray) -> None:
    """Split "fill" (module docstring, step 4) of the heavy units, in place: their params, then their
    forward nodes; the others follow their inputs (:func:`_follow_inputs`)."""
    k = problem.k
    params = problem.param_bytes
    for h in np.flatnonzero(heavy):  # the params: to the device with the least room used
        mine = (home == h) & (params > 0)
        if mine.any():
            e = int(np.argmin(used - share))
            dev[mine] = e
            used[e] += float(param_size[mine].sum())
    pptr, pnbr, _ = problem.pred_ptr
    out = problem.out_bytes
    e = 0
    for v in problem.topo_order.tolist():  # forward nodes: with their input of the unit, or the room in order
        if not heavy[home[v]] or dev[v] >= 0 or not forward[v]:
            continue
        same = [int(u) for u in pnbr[pptr[v]:pptr[v + 1]] if home[u] == home[v] and params[u] == 0 and dev[u] >= 0]
        if same:
            d = int(dev[max(same, key=lambda u: (out[u], -dev[u]))])
        else:
            while e < k - 1 and used[e] + 0.5 * size[v] > share[e] * (1 + 1e-9):
                e += 1
            d = e
        dev[v] = d
        used[d] += size[v]


def _follow_inputs(problem: Problem, home: np.ndarray, dev: np.ndarray) -> None:
    """Nodes not placed yet, in topological order, in place: with their input of the same unit with
    the most bytes (ties: lower device), else their input with the most bytes, else device 0."""
    pptr, pnbr, _ = problem.pred_ptr
    out = problem.out_bytes
    for v in np.flatnonzero(dev < 0)[np.argsort(problem.topo_rank[dev < 0])].tolist():
        preds = pnbr[pptr[v]:pptr[v + 1]]
        same = [int(u) for u in preds if home[u] == home[v] and dev[u] >= 0]
        if same:
            dev[v] = dev[min(same, key=lambda u: (-out[u], dev[u]))]
        else:
            known = [int(u) for u in preds if dev[u] >= 0]
            dev[v] = dev[max(known, key=lambda u: (out[u], -dev[u]))] if known else 0


def _overflow(problem: Problem, ev: Evaluation) -> float:
    return float(ev.overflow(problem).sum())


def layer_bands(problem: Problem, opts: SolveOptions, method: str, tries: tuple[Bands, ...], order: str,
                refine: bool = False) -> Solution:
    """The band placements ``tries`` in turn until one fits, each in the orders of ``order``
    ("light" or "critical", module docstring step 6); the feasible schedule with the smallest
    makespan by the evaluator (ties: the first), else unknown with the least overflow tried. With
    ``refine`` (light orders only), when none fits, the placement and order with the least overflow
    have their parameter units moved (:func:`move_params`) until it fits, and are tried again."""
    t0 = time.monotonic()
    model = opts.memory_model

    def unknown(why: str, info: dict | None = None) -> Solution:
        return Solution(method, "unknown", reason=f"{method}: {why}", seconds=time.monotonic() - t0, info=info or {})

    if not np.any(problem.param_bytes > 0):
        return unknown("the graph holds no params to split by")
    needs_loss = any(b.assign == "loss" or b.balance == "bytes" or b.sequence == "forward" or b.split == "fill" for b in tries)
    pivot = loss_pivot(problem) if needs_loss else None
    if needs_loss and pivot is None:
        pivoted = on_pivoted(problem, opts, lambda p: layer_bands(p, opts, method, tries, order, refine))
        return pivoted if pivoted is not None else unknown("no node is comparable with all others (no loss to balance at)")
    tried: list[dict] = []
    best: tuple[Evaluation, list[list[int]] | None, int, dict] | None = None
    least: tuple[float, np.ndarray, str, int] | None = None  # smallest largest memory / capacity, placement, order, try
    seen: list[np.ndarray] = []
    light: dict[str, np.ndarray] = {}

    def attempt(i: int, dev: np.ndarray, info: dict, note: dict) -> None:
        nonlocal best, least
        for rule, sched, made in _schedules(problem, dev, order, opts, light):
            if not made:
                tried.append({**asdict(tries[i]), **note, "order": rule, "fits": False,
                              "reason": "out of time" if opts.out_of_time() else "abandoned: it would overflow"})
                continue
            ev = evaluate(problem, dev, order=sched, memory_model=model)
            ok = ev.feasible(problem)
            over = float(np.max(ev.memory / problem.memory))
            tried.append({**asdict(tries[i]), **note, "order": rule, "fits": ok, "makespan": ev.makespan, "memory_over_capacity": over})
            if least is None or over < least[0]:
                least = (over, dev, str(rule), i)
            if ok and (best is None or ev.makespan < best[0].makespan):
                best = (ev, sched, i, {**info, **note, "order": rule})

    for i, bands in enumerate(tries):
        if best is not None or opts.out_of_time():
            break
        dev, info = band_placement(problem, bands, pivot)
        if any(np.array_equal(dev, other) for other in seen):
            continue
        seen.append(dev)
        attempt(i, dev, info, {})
    if best is None and refine and order == "light" and least is not None and not opts.out_of_time():
        moved, moves = move_params(problem, least[1], light[least[2]], stop=opts.out_of_time)
        if moves:
            attempt(least[3], moved, {}, {"moved_params": moves})
    info: dict = {"tried": tried}
    if best is None:
        if not tried or all("makespan" not in t for t in tried) and opts.out_of_time():
            return unknown("out of time", info)
        info["memory_over_capacity"] = least[0] if least is not None else None
        over = f" (least: {least[0]:.4g} x capacity)" if least is not None else ""
        # no "placement" in info: the portfolio would try memory_order's rules on it, which on the
        # bands never beat the orders tried here where those fit and cost seconds where they do not
        return unknown(f"no band placement fits the memory in the orders tried{over}", info)
    ev, sched, i, chosen = best
    if order == "light":
        sched, ev = fifo_if_better(problem, ev.placement, sched, ev, model)
        chosen["fifo"] = sched is None
    info.update(chosen, bands=asdict(tries[i]), work_per_device=np.bincount(ev.placement, weights=problem.time, minlength=problem.k).tolist())
    return Solution(method, "heuristic", placement=ev.placement, order=sched, start=ev.start, objective=ev.makespan,
                    seconds=time.monotonic() - t0, info=info)


def restricted(sequence: np.ndarray, dev: np.ndarray, k: int) -> list[list[int]]:
    """Per device, its nodes in the order of ``sequence`` (a topological order of all nodes)."""
    order: list[list[int]] = [[] for _ in range(k)]
    for v in sequence.tolist():
        order[dev[v]].append(v)
    return order


def move_params(problem: Problem, placement: np.ndarray, sequence: np.ndarray, stop: Callable[[], bool] | None = None,
                until_fits: bool = True) -> tuple[np.ndarray, list[dict]]:
    """Move parameter units (a weight with its update) off the device with the largest peak / capacity,
    each devices running its nodes in the order of ``sequence``; returns the placement and the moves.

    Why: a unit's params are held all the time where the unit is, while the devices that run its
    consumers hold only the weight tensor they read (a third of the params when the params are a
    weight and two optimizer states); so the params of a layer can sit on a device whose peak comes
    from other params (an embedding's) instead of adding to the peak of the device that runs the
    layer. On the 10K LSTM at K = 8 the band placement peaks where the output layer's params meet
    layer 0's work (1.409 x memory_lower_bound); layer 0's params beside the embedding's: 1.248.

    How: steepest descent: the MOVE_UNITS units with the most params on the device with the largest
    peak / capacity, each to every other device, each evaluated (the evaluator's peaks on the restricted orders); the move giving
    the smallest peaks (sorted, largest first, compared in turn) is made if it lowers the largest by
    MIN_GAIN at least. Until
    the placement fits (``until_fits``) or no move lowers the peaks, or ``stop()`` turns true."""
    k = problem.k
    cap = np.where(np.isfinite(problem.memory), problem.memory, 1.0)
    unit = param_units(problem)
    members = [np.flatnonzero(unit == u) for u in range(int(unit.max(initial=-1)) + 1)]
    dev = np.asarray(placement, dtype=np.int64).copy()

    def score(d: np.ndarray) -> tuple[tuple[float, ...], Evaluation]:
        ev = evaluate(problem, d, order=restricted(sequence, d, k), memory_model="peak")
        return tuple(sorted((ev.peak_memory / cap).tolist(), reverse=True)), ev

    cur, ev = score(dev)
    moves: list[dict] = []
    while not (until_fits and ev.feasible(problem)):
        top = int(np.argmax(ev.peak_memory / cap))
        found = None
        here = sorted((u for u, nodes in enumerate(members) if nodes.size and dev[nodes[0]] == top),
                      key=lambda u: (-float(problem.param_bytes[members[u]].sum()), u))
        for u in here[:MOVE_UNITS]:
            nodes = members[u]
            for e in range(k):
                if e == top or (stop is not None and stop()):
                    continue
                cand = dev.copy()
                cand[nodes] = e
                got, gev = score(cand)
                if got[0] <= cur[0] * (1 - MIN_GAIN) and got < (found[0] if found else cur):
                    found = (got, gev, cand, u, e)
        if found is None:
            break
        cur, ev, dev = found[0], found[1], found[2]
        moves.append({"unit": problem.ids[int(members[found[3]][0])], "from": top, "to": found[4], "peak_over_capacity": cur[0]})
    return dev, moves


def _schedules(problem: Problem, dev: np.ndarray, order: str, opts: SolveOptions,
               light: dict[str, np.ndarray]) -> Iterator[tuple[str | float, list[list[int]] | None, bool]]:
    """(rule, per-device order (None: FIFO), made) of the order family, lazily; ``made`` is False
    when the order was abandoned. Stops when ``opts.out_of_time()`` turns true (after the first
    order, for "light"). ``light``: the memory-light orders by name, filled on first use."""
    if order == "light":
        if not light:
            light.update(memory_light_orders(problem, opts.out_of_time))
        for name, seq in light.items():
            yield name, restricted(seq, dev, problem.k), True
            if opts.out_of_time():
                return
        return
    rules: list = ["fifo"] + (list(HEADROOMS) if opts.memory_model == "peak" and np.all(np.isfinite(problem.memory)) else [])
    for rule in rules:
        if opts.out_of_time():
            return
        if rule == "fifo":
            yield "fifo", None, True
        else:
            sched = priority_order(problem, dev, rule, stop=opts.out_of_time, give_up=True)
            yield rule, sched, sched is not None


def band_split(problem: Problem, opts: SolveOptions) -> Solution:
    """``band-split``: the smallest memory (module docstring): bands balanced on the bytes live at
    the loss, memory-light orders. Not applicable when some node may run only on some devices."""
    if problem.has_allowed and any(a is not None for a in problem.allowed):
        return Solution("band-split", "unknown", reason="band-split: some node may run only on some devices")
    return layer_bands(problem, opts, "band-split", BAND_SPLIT, "light", refine=True)


def weight_bands(problem: Problem, opts: SolveOptions) -> Solution:
    """``weight-bands``: the makespan at moderate memory (module docstring): bands balanced on
    work, critical-path orders under a memory headroom, the cuts of WEIGHT_BANDS in turn."""
    return layer_bands(problem, opts, "weight-bands", WEIGHT_BANDS, "critical")


def priority_order(problem: Problem, placement: np.ndarray, headroom: float = 1.0, candidates: int = 1024,
                   stop: Callable[[], bool] | None = None, give_up: bool = False) -> list[list[int]] | None:
    """Per-device order for a placement: simulate the executor in time order; a device that can
    start a node starts, among the ``candidates`` ready ones with the longest path to the end
    (bottom level, transfers included; a wide list: on the 50K LSTM the input gradients the other
    devices wait for are behind some 400 weight gradients, 975.4 with 1024, 1675.5 with 64 or 256;
    a node whose output alone passes the headroom is skipped without the tracker), the first whose
    start keeps its live bytes within
    ``headroom`` x capacity (heuristics.memory_order's estimate: the tracker plus the tensors the
    device is committed to hold); else, among those within capacity, the one rule "net" would start
    (the fewest bytes added net of what it frees); else it waits until another device has started
    a node (which may free memory here or send a consumer). When every device with work waits, the
    one whose next input arrives first idles until then, or, if none has an input on the way, the
    one overflowing least goes on, or, with ``give_up``, the order is abandoned (None): the
    estimate is a lower bound on the evaluator's peak, so it would overflow (on the 10K LSTM at
    K = 8 that cut weight-bands' failing tries from 282 s). None too when ``stop()`` turns true
    (checked every 1024 starts).

    Why: rule "net" alone keeps memory low but ignores the critical path (an RNN's output layer
    summing its weight gradients before it sends the input gradients the recurrent layers wait
    for); the bottom level alone piles up gradients; and a device that never waits makes weight
    gradients faster than the accumulation chain, behind on another device, can sum them."""
    n, k = problem.n, problem.k
    pl = np.asarray(placement, dtype=np.int64)
    dev = pl.tolist()
    book = CommittedBytes(problem, dev, problem.memory)
    limit = book.tr.cap * headroom * (1 + 1e-12) + 1e-9
    capacity_ok = book.tr.cap * (1 + 1e-12) + 1e-9
    delay = edge_delay(problem, pl)
    bl = bottom_levels(problem, delay).tolist()
    ptr_l, nbr_l, delay_e, indeg, rank, dur = list_state(problem, delay)
    ready = [0.0] * n
    waiting: list[list[tuple[float, int, int]]] = [[] for _ in range(k)]  # (ready, rank, v): not arrived yet
    avail: list[list[tuple[float, int, int]]] = [[] for _ in range(k)]  # (-bottom level, rank, v): arrived
    free = [0.0] * k
    order: list[list[int]] = [[] for _ in range(k)]
    for v in range(n):
        if indeg[v] == 0:
            heapq.heappush(waiting[dev[v]], (0.0, rank[v], v))
    blocked: dict[int, float] = {}  # device waiting for memory to free up -> its smallest peak / capacity
    out = problem.out_bytes.tolist()
    done = 0
    while done < n:
        if stop is not None and done % 1024 == 0 and stop():
            return None
        best = None
        for x in range(k):
            if x in blocked:
                continue
            if avail[x]:
                t = free[x]
            elif waiting[x]:
                t = max(free[x], waiting[x][0][0])
            else:
                continue
            if best is None or (t, x) < best:
                best = (t, x)
        force = best is None
        if force:
            if not blocked:
                raise ValueError("priority_order: the graph is not a DAG")
            later = [(waiting[x][0][0], x) for x in blocked if waiting[x]]
            if later:  # every device with work is blocked: one idles until its next input arrives
                r, x = min(later)
                free[x] = max(free[x], r)
                del blocked[x]
                continue
            d = min(blocked, key=lambda x: (blocked[x], free[x], x))  # else the one overflowing least goes on
            best = (free[d], d)
        t, d = best
        blocked.pop(d, None)
        while waiting[d] and waiting[d][0][0] <= t:
            r, rk, v = heapq.heappop(waiting[d])
            heapq.heappush(avail[d], (-bl[v], rk, v))
        book.charge(d, t)
        q = avail[d]
        cands = [heapq.heappop(q) for _ in range(min(candidates, len(q)))]
        # Device d's bytes whatever it starts: params and the tensors it is committed to hold.
        held = book.tr.params[d] + book.old_bytes[d] + book.fresh_bytes[d]
        pick = None
        fits = []
        least = float("inf")
        for i, c in enumerate(cands):
            v = c[2]
            floor = held + book.tr._param_cost(v) + (out[v] if dur[v] > 0 else 0.0)
            if floor > capacity_ok[d]:
                least = min(least, floor / book.tr.cap[d])
                continue
            if floor > limit[d]:
                fits.append(i)
                continue
            peak = book.estimate(v, d, t, t + dur[v])
            if peak <= limit[d]:
                pick = i
                break
            if peak <= capacity_ok[d]:
                fits.append(i)
            least = min(least, peak / book.tr.cap[d])
        if pick is None:  # over the headroom: the fewest bytes net among those within capacity
            for _, _, i in sorted((*book.net(cands[i][2], d, indeg), i) for i in fits):
                peak = book.estimate(cands[i][2], d, t, t + dur[cands[i][2]])
                least = min(least, peak / book.tr.cap[d])
                if peak <= capacity_ok[d]:
                    pick = i
                    break
        if pick is None and not force:
            for c in cands:  # wait: another device's progress may free memory here or send a consumer
                heapq.heappush(q, c)
            blocked[d] = least
            continue
        if pick is None:
            if give_up:
                return None
            pick = min((*book.net(c[2], d, indeg), i) for i, c in enumerate(cands))[2]
        for i, c in enumerate(cands):
            if i != pick:
                heapq.heappush(q, c)
        v = cands[pick][2]
        f = t + dur[v]
        book.place(v, d, t, f)
        free[d] = f
        order[d].append(v)
        done += 1
        for x in blocked:  # a blocked device looks again from now on
            free[x] = max(free[x], t)
        blocked.clear()
        for j in range(ptr_l[v], ptr_l[v + 1]):
            w = nbr_l[j]
            arrive = f + delay_e[j]
            if arrive > ready[w]:
                ready[w] = arrive
            indeg[w] -= 1
            if indeg[w] == 0:
                heapq.heappush(waiting[dev[w]], (ready[w], rank[w], w))
    return order
