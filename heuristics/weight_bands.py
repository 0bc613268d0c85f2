"""Layer-wise model parallelism under the peak model (``weight-bands``): each device a contiguous
band of the model's weights, with every op that works for those weights, forward and backward.

Why: at 1.2-2 x the smallest memory the list schedulers spread a training graph for speed and pile
up what travels between devices (on the 10K-node LSTM, ETF's unlimited-memory placement is 8.5 x
over 1.634 GB per device in any order tried: the output layer's 131 MB weight gradients, made on
every device and summed on one), while min-memory's answers follow a memory-light single-device
order with little parallelism (584 against 204 with unlimited memory). Splitting the model by
layers keeps each activation beside its backward (each device holds about its share of the saved
activations) and each weight gradient beside its accumulation; an unrolled RNN so split runs as a
wavefront pipeline over its time steps.

How (:func:`weight_bands`):

1. The units: colocation groups and lone nodes holding params (a weight with its update).
2. Each node's owner unit, in topological order: the unit of a param-holding input it reads (the
   one with the most params), else the owner its inputs carry most bytes of (ties: the input made
   last); a node reading nothing owned takes its first owned consumer's (reverse topological order).
   So a forward op, its saved activations, their backward and a weight gradient's accumulation
   share their weight's owner.
3. The units in the order the graph first reads them (their first reader's topological rank), cut
   into K contiguous bands, one device each: with the smallest largest band of work (binary search
   over the bound, greedy cut; may leave devices empty), or at equal shares of the total work.
4. The order (:func:`priority_order`): each device starts the ready node with the longest path to
   the end while its live bytes stay under a headroom of its capacity, else the node adding the
   fewest bytes net (rule "net" of heuristics.memory_order). On the 10K LSTM (K = 4, 1.634 GB) the
   band placement runs in 226.8 (unlimited memory: 204) this way, 284.8 in rule "net"'s order,
   and overflows 7.9 x in FIFO order (the output layer's weight gradients pile up).

Deterministic: no randomness. Needs params (weights) to split by; without any, it answers nothing.
"""
from __future__ import annotations

import heapq
import time
from typing import Callable

import numpy as np

from placement.bounds import bottom_levels
from placement.evaluator import edge_delay, evaluate
from placement.problem import Problem
from placement.solution import Solution, SolveOptions

from .memory_order import CommittedBytes, list_state


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


def owners(problem: Problem, unit: np.ndarray) -> np.ndarray:
    """Owner unit of every node (module docstring, step 2); -1 only when no unit exists."""
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


def contiguous_bands(work: np.ndarray, parts: int) -> np.ndarray:
    """Band (0 .. parts - 1) of each item in sequence: contiguous runs with the smallest largest
    sum of ``work`` (binary search over that sum, each tried by a greedy cut)."""
    if work.size == 0:
        return np.zeros(0, dtype=np.int64)

    def cut(limit: float) -> np.ndarray | None:
        band = np.zeros(work.size, dtype=np.int64)
        b, total = 0, 0.0
        for i, w in enumerate(work.tolist()):
            if total + w > limit and total > 0:
                b, total = b + 1, 0.0
                if b >= parts:
                    return None
            band[i] = b
            total += w
        return band

    lo, hi = float(work.max()), float(work.sum())
    best = cut(hi)
    for _ in range(50):
        if hi - lo <= 1e-9 * max(hi, 1.0):
            break
        mid = (lo + hi) / 2
        got = cut(mid)
        if got is None:
            lo = mid
        else:
            hi, best = mid, got
    return best


def quantile_bands(work: np.ndarray, parts: int) -> np.ndarray:
    """Band of each item in sequence: the share of the total work at the item's midpoint, cut into
    ``parts`` equal shares (every band used when the items are small)."""
    cum = np.cumsum(work)
    mid = cum - work / 2
    return np.minimum(parts - 1, (parts * mid / max(float(cum[-1]), 1e-300)).astype(np.int64)) if work.size else np.zeros(0, dtype=np.int64)


def band_placement(problem: Problem, cut: str = "minmax", split: bool = False) -> np.ndarray | None:
    """Device per node (module docstring, steps 1-3); None when the graph holds no params. With
    ``split``, a unit with more than 1/K of the work is cut between its pieces (:func:`pieces`), in
    the order the graph first reaches them, instead of going whole to one band."""
    unit = param_units(problem)
    count = int(unit.max(initial=-1)) + 1
    if count == 0:
        return None
    owner = owners(problem, unit)
    sptr, snbr, _ = problem.succ_ptr
    first = np.full(count, problem.n, dtype=np.int64)
    rank = problem.topo_rank
    for w in np.flatnonzero(unit >= 0).tolist():  # a unit's first read: its weight's earliest consumer
        readers = snbr[sptr[w]:sptr[w + 1]]
        if readers.size and problem.param_bytes[w] > 0:
            first[unit[w]] = min(first[unit[w]], int(rank[readers].min()))
    position = np.empty(count, dtype=np.int64)
    position[np.lexsort((np.arange(count), first))] = np.arange(count)
    work = np.bincount(owner, weights=problem.time, minlength=count)
    item = owner.copy()
    if split:
        heavy = work > work.sum() / problem.k
        if np.any(heavy):
            piece = pieces(problem, unit, owner)
            item = np.where(heavy[owner], count + piece, owner)
    ids, item = np.unique(item, return_inverse=True)
    start = np.full(ids.size, problem.n, dtype=np.int64)
    np.minimum.at(start, item, rank)
    unit_of = np.zeros(ids.size, dtype=np.int64)
    unit_of[item] = owner
    # Sequence: units by first read; a split unit's pieces in its place, weight members first, then by first node.
    member = np.zeros(ids.size, dtype=bool)
    member[item[unit >= 0]] = True
    seq = np.lexsort((start, ~member, position[unit_of]))
    item_work = np.bincount(item, weights=problem.time, minlength=ids.size)
    band = np.empty(ids.size, dtype=np.int64)
    band[seq] = (contiguous_bands if cut == "minmax" else quantile_bands)(item_work[seq], problem.k)
    dev = band[item]
    if problem.has_allowed:
        mask = problem.allowed_mask()
        bad = ~mask[np.arange(problem.n), dev]
        dev[bad] = np.argmax(mask[bad], axis=1)
    return dev


# priority_order's memory headrooms, both tried on a placement: the best varies (10K LSTM, K = 4,
# 1.634 GB: 0.8 -> 226.8, 0.95 overflows; 50K LSTM, K = 4, 5.19 GB: 0.8 -> 975.4, 0.95 -> 1321.8)
HEADROOMS = (0.8, 0.95)
# Band placements tried in turn, until one fits: (cut, split heavy units); the split ones only help
# where a unit needs more than one device (10K LSTM, K = 8: the output layer, 1/3.6 of the work).
CUTS = (("minmax", False), ("quantile", False), ("minmax", True), ("quantile", True))


def weight_bands(problem: Problem, opts: SolveOptions) -> Solution:
    """Layer-wise model parallelism (module docstring): the band placements of :data:`CUTS`, each
    in FIFO order and in :func:`priority_order` at each of :data:`HEADROOMS`, until a placement
    fits; the feasible schedule with the smallest makespan by the evaluator."""
    t0 = time.monotonic()
    model = opts.memory_model
    tried: list[dict] = []
    best = None
    seen: list[np.ndarray] = []
    for cut, split in CUTS:
        if opts.out_of_time() or best is not None:
            break
        dev = band_placement(problem, cut, split)
        if dev is None:
            return Solution("weight-bands", "unknown", reason="weight-bands: the graph holds no params to split by",
                            seconds=time.monotonic() - t0)
        if any(np.array_equal(dev, other) for other in seen):
            continue
        seen.append(dev)
        rules: list = ["fifo"] + (list(HEADROOMS) if model == "peak" and np.all(np.isfinite(problem.memory)) else [])
        for rule in rules:
            if opts.out_of_time():
                break
            order = None if rule == "fifo" else priority_order(problem, dev, rule, stop=opts.out_of_time, give_up=True)
            if rule != "fifo" and order is None:
                tried.append({"cut": cut, "split": split, "order": rule, "fits": False,
                              "reason": "out of time" if opts.out_of_time() else "abandoned: it would overflow"})
                continue
            ev = evaluate(problem, dev, order=order, memory_model=model)
            ok = ev.feasible(problem)
            tried.append({"cut": cut, "split": split, "order": rule, "fits": ok, "makespan": ev.makespan,
                          "memory_over_capacity": float(np.max(ev.memory / problem.memory))})
            if ok and (best is None or ev.makespan < best[0].makespan):
                best = (ev, order, cut, rule)
    info: dict = {"tried": tried}
    if best is None:
        why = "out of time" if opts.out_of_time() else "no band placement fits the memory in the orders tried"
        # no "placement" in info: the portfolio would try memory_order's rules on it, which on the
        # bands never beat the priority order where that fits and cost seconds where it does not
        return Solution("weight-bands", "unknown", reason=f"weight-bands: {why}", seconds=time.monotonic() - t0, info=info)
    ev, order, cut, rule = best
    info.update(cut=cut, order_rule=rule,
                work_per_device=np.bincount(ev.placement, weights=problem.time, minlength=problem.k).tolist())
    return Solution("weight-bands", "heuristic", placement=ev.placement, order=order, start=ev.start,
                    objective=ev.makespan, seconds=time.monotonic() - t0, info=info)


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
