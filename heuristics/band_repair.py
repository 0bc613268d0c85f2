"""Split the overloaded devices of a fast schedule into bands of layers (``band-repair``), under the
peak memory model.

Why: on the generated CNN training graphs the fastest schedules with unlimited memory run the
network's main line (forward, then the backward through the activations) on one device and the
weight gradients on another, in parallel (10K CNN, K = 8: 403.2, with 402.5 of the 539 units of
work and 9.25 GB on device 0, 5.52 GB of received copies on device 1, the six others nearly idle).
At 1.5 x the smallest memory (2.39 GB per device) those bytes would fit on the eight devices, but
nothing moves them so: mem-repair (heuristics/memory_repair.py) moves single consumers, which cuts
the main line in many places and pays a transfer at each cut; band-split keeps a band's forward,
backward and weight gradients on one device and so runs all of the work in sequence (632.6 on two
bands, 1025.5 on eight).

How (:func:`split_bands`): every node gets a position along the network (:func:`positions`): a
forward node its topological rank, a parameter its first reader's, a backward node the position of
the parameters it reads, else the largest of the forward activations it reads, else its largest
input's; so a layer's backward and weight gradients share its forward's position. Each device over
capacity in the fast schedule (every device running its nodes in the schedule's start-time order)
is cut at positions into bands, fewest first: a band reaches as far as its own peak (its buffers'
sizes summed over the fast schedule's times, a buffer at its producer's position when local, else
at its last local consumer's) stays within the capacity less MARGIN, and the cut is then moved back
to the cheapest crossing (the transfer time of the edges it would cut) within the band's last SLACK
of bytes. The first band stays; the others go whole, largest first, to the device whose memory
profile over time (256 cells) with the band added peaks lowest. Only the cuts add transfers to the
main line. Where one device ran most of the forward pass in the fast schedule (PARDNN's main
line), the split is also tried with the whole forward pass back on one device, the loss's
(:func:`forward_together`): a device holds a received activation from its producer's end until its
own backward reads it, so the bands keep their bytes while the forward pass crosses no cut, and
each cut costs the main line one transfer (the backward's gradient) instead of two; the faster of
the two splits goes on. The split schedule, when within REPAIR_WITHIN x the capacity, goes to
mem-repair's repair (heuristics/memory_repair.py) with the same order.

:func:`band_repair` does this for the fast schedules of :data:`STARTS` in turn (PARDNN's on 2
devices, ETF's, PARDNN's on K/2 and K devices; a PARDNN run only while it is expected to end in the
time left) and answers the
fitting one with the smallest makespan (the evaluator's, on the order returned; FIFO when it also
fits and is faster). A fast schedule that fits as it is, is answered as it is (mem-repair's answer).
Measured (bench/results_peak.md, session 12): the 200K CNN at K = 8 and 10.22 GB from ETF's
schedule 3453.0 (mem-repair: no answer; unlimited memory: 3402.5), the 10K CNN at K = 4 and 4.57
GB from PARDNN's on 2 devices 467.3 (mem-span 537.5). With the forward pass together (session 13)
the 10K CNN's splits of PARDNN's 2-device schedule run in 474.2 at K = 8 (was 513.4) and 470.8
at K = 4 (was 495.9), 455.0 and 440.9 re-scheduled by priority lists (was 494.3 and 466.0).
Deterministic: no randomness; ties go to the lower device.
"""
from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import replace

import numpy as np

from placement.evaluator import Evaluation, buffers, evaluate, peak_profile, schedule_order
from placement.problem import Problem
from placement.solution import Solution, SolveOptions

from .fewer_devices import RUN_SECONDS_PER_ELEMENT, sub_problem
from .layer_bands import loss_pivot, on_pivoted
from .memory_repair import Repaired, fast_schedule, repair, repaired_solution
from .pardnn import pardnn
from .peak_holders import device_orders

MARGIN = 0.05  # bands aim below capacity by this fraction: their bytes are an estimate
# The margins tried on each fast schedule, in turn: neither is always better. On the 10K CNN at K = 8
# from PARDNN's schedule on 2 devices margin 0 fits as split (513.4) where 0.05 needs a repair
# (544.2); at K = 4 from PARDNN's on 2 devices 0.05 fits as split (467.3) and 0 gives 495.9; on the
# 200K CNN at K = 8 from ETF's, 3452.7 and 3453.0.
MARGINS = (0.0, 0.05)
# The fast schedules split, in the order tried: PARDNN's on 2 devices (the best start on the 10K CNN:
# 513.4 at K = 8, 467.3 at K = 4; tried first since the portfolio gives this member a few seconds
# at 10K nodes), ETF's (the 200K CNN at K = 8: 3453.0, where PARDNN's on K and K / 2 devices give
# 3783.9 and 3826.0; at 200K nodes PARDNN does not fit the member's time), then PARDNN's on K / 2
# and K devices. A device count already tried is not tried again.
STARTS = ("pardnn-2", "etf", "pardnn-k/2", "pardnn-k")
# A split still above this many times the capacity is not repaired: on the CNNs the splits that
# fitted after repair were at most 1.35 x over; the 10K LSTM's were 7.7-8.9 x (10 s of repair).
REPAIR_WITHIN = 1.5
CELLS = 256  # time cells of the profiles bands are packed by
SLACK = 0.3  # a cut may move this share of a band's bytes off the equal split to cross fewer transfers
# The forward pass goes back on one device (forward_together) only when one device ran at least this
# share of its work in the fast schedule: PARDNN's on 2 devices runs 0.996 of it on one (10K CNN), ETF's
# spreads it (200K CNN at K = 8: at most 0.52 on one device), and there the variant is 9% slower
# than the plain split (3695.9 against 3400.3; 50K CNN at K = 8: 1350.1 against 1268.1).
FORWARD_HOME = 0.8


def positions(problem: Problem, pivot: int) -> np.ndarray:
    """Per node, a position along the network such that a layer's backward shares its forward's:
    a node before ``pivot`` (the loss), its topological rank; a parameter holder, its first
    reader's; a node after the loss, the position of the parameters it reads, else the largest of
    the activations it reads (nodes before the loss), else that of its input with the most bytes."""
    rank = problem.topo_rank
    pptr, pnbr, _ = problem.pred_ptr
    sptr, snbr, _ = problem.succ_ptr
    after = int(rank[pivot])
    param = problem.param_bytes > 0
    pos = rank.astype(float)
    for v in np.flatnonzero(param).tolist():  # parameters: where they are first read
        readers = snbr[sptr[v]:sptr[v + 1]]
        if readers.size:
            pos[v] = float(rank[readers].min())
    out = problem.out_bytes
    for v in problem.topo_order.tolist():
        if rank[v] <= after or param[v]:
            continue
        preds = pnbr[pptr[v]:pptr[v + 1]]
        if preds.size == 0:
            continue
        held = preds[param[preds]]
        if held.size:
            pos[v] = float(pos[held].min())
            continue
        fwd = preds[(rank[preds] < after) & ~param[preds]]
        if fwd.size:
            pos[v] = float(pos[fwd].max())
            continue
        pos[v] = float(pos[preds[np.lexsort((preds, -out[preds]))[0]]])
    return pos


def split_bands(problem: Problem, pl: np.ndarray, ev: Evaluation, pos: np.ndarray,
                margin: float = MARGIN) -> np.ndarray:
    """The placement with each over-capacity device of ``pl`` cut into bands at positions ``pos``,
    the bands after the first moved whole to the devices with the most room (module docstring)."""
    k = problem.k
    cap = np.asarray(problem.memory, dtype=float) * (1 - margin)
    buf = buffers(problem, pl, ev.start, ev.finish)
    _, when = peak_profile(problem, pl, ev.start, ev.finish, buf)
    new = pl.copy()
    edges = np.linspace(0.0, max(ev.makespan, 1e-9), CELLS + 1)
    params = np.bincount(pl, weights=problem.param_bytes, minlength=k)
    used = params[:, None] + band_profiles(buf.device, buf.t0, buf.t1, buf.size, k, edges)  # what devices keep
    pieces: list[tuple[np.ndarray, int, np.ndarray]] = []  # (bytes per time cell, from device, nodes)
    for d in np.flatnonzero(ev.peak_memory > cap).tolist():
        nodes = np.flatnonzero(pl == d)
        mine = buf.device == d
        # a buffer goes with its producer when local, else with its last consumer here
        bpos = np.where(pl[buf.node[mine]] == d, pos[buf.node[mine]], pos[np.maximum(buf.last[mine], 0)])
        bpos = np.where(buf.last[mine] < 0, pos[buf.node[mine]], bpos)
        t = when[d]
        at = (buf.t0[mine] <= t) & (buf.t1[mine] > t) if np.isfinite(t) else np.zeros(bpos.size, bool)
        where = np.concatenate([bpos[at], pos[nodes]])
        size = np.concatenate([buf.size[mine][at], problem.param_bytes[nodes]])
        if size.sum() <= 0:
            continue
        cuts = _cuts(problem, pl, d, pos, bpos, buf.t0[mine], buf.t1[mine], buf.size[mine], where, size, cap[d])
        bands = cuts.size + 1
        of = np.searchsorted(cuts, bpos, side="right")
        held = np.bincount(np.searchsorted(cuts, pos[nodes], side="right"), weights=problem.param_bytes[nodes],
                           minlength=bands)[:, None] + band_profiles(of, buf.t0[mine], buf.t1[mine], buf.size[mine], bands, edges)
        band = np.searchsorted(cuts, pos[nodes], side="right")
        used[d] = held[0]
        for x in range(1, bands):
            if np.any(band == x):
                pieces.append((held[x], d, nodes[band == x]))
    for prof, d, nodes in sorted(pieces, key=lambda x: (-x[0].max(), x[1], int(x[2][0]))):
        top = (used + prof).max(axis=1) / cap
        top[d] = np.inf  # a band leaves its device
        if problem.has_allowed:
            for e in range(k):
                if not all(problem.allowed[int(v)] is None or e in problem.allowed[int(v)] for v in nodes.tolist()):
                    top[e] = np.inf
        e = int(np.argmin(top))
        if not np.isfinite(top[e]):
            continue
        new[nodes] = e
        used[e] += prof
    for members in problem.groups:  # a colocation group goes where its first member is
        if len(members):
            new[np.asarray(members)] = new[int(members[0])]
    return new


def band_profiles(band: np.ndarray, t0: np.ndarray, t1: np.ndarray, size: np.ndarray, count: int,
                  edges: np.ndarray) -> np.ndarray:
    """Per band and time cell (``edges``: the cells' bounds), the largest sum of the band's buffers'
    sizes alive at one time in the cell (intervals [t0, t1)); a row's maximum is the band's peak."""
    cells = edges.size - 1
    prof = np.zeros((count, cells))
    if band.size == 0:
        return prof
    g = np.concatenate([band, band])
    t = np.concatenate([t0, t1])
    delta = np.concatenate([size, -size])
    order = np.lexsort((delta > 0, t, g))  # releases before allocations at equal times
    g, t, delta = g[order], t[order], delta[order]
    running = np.cumsum(delta)
    first = np.flatnonzero(np.r_[True, g[1:] != g[:-1]])
    base = np.r_[0.0, running][first]
    level = running - np.repeat(base, np.diff(np.r_[first, g.size]))
    cell = np.clip(np.searchsorted(edges, t, side="right") - 1, 0, cells - 1)
    np.maximum.at(prof, (g, cell), level)
    # a cell without events keeps the level left by the band's last event before it
    key = g * cells + cell
    last = np.r_[key[1:] != key[:-1], True]
    carry = np.full((count, cells), np.nan)
    carry[g[last], cell[last]] = level[last]
    idx = np.where(np.isnan(carry), 0, np.arange(cells))
    np.maximum.accumulate(idx, axis=1, out=idx)
    filled = np.nan_to_num(carry[np.arange(count)[:, None], idx])
    prof[:, 1:] = np.maximum(prof[:, 1:], filled[:, :-1])
    return prof


def crossing_cost(problem: Problem, pl: np.ndarray, d: int, pos: np.ndarray, at: np.ndarray) -> np.ndarray:
    """For each cut position in ``at``: the transfer time of the edges between device d's nodes
    that a cut there would make cross devices (one end's position below it, the other's not)."""
    on = (pl[problem.src] == d) & (pl[problem.dst] == d)
    a, b = pos[problem.src[on]], pos[problem.dst[on]]
    lo, hi, c = np.minimum(a, b), np.maximum(a, b), problem.comm[on]
    keep = lo < hi
    lo, hi, c = lo[keep], hi[keep], c[keep]
    ol, oh = np.argsort(lo, kind="stable"), np.argsort(hi, kind="stable")
    cl, ch = np.r_[0.0, np.cumsum(c[ol])], np.r_[0.0, np.cumsum(c[oh])]
    # crossing at c: lo < c <= hi, i.e. (lo < c) minus (hi < c)
    return cl[np.searchsorted(lo[ol], at, side="left")] - ch[np.searchsorted(hi[oh], at, side="left")]


def _peak(t0: np.ndarray, t1: np.ndarray, size: np.ndarray) -> float:
    """The largest sum of sizes alive at one time (intervals [t0, t1))."""
    if size.size == 0:
        return 0.0
    t = np.concatenate([t0, t1])
    delta = np.concatenate([size, -size])
    order = np.lexsort((delta > 0, t))  # releases before allocations at equal times
    return float(np.cumsum(delta[order]).max())


def _cuts(problem: Problem, pl: np.ndarray, d: int, pos: np.ndarray, bpos: np.ndarray, t0: np.ndarray,
          t1: np.ndarray, size: np.ndarray, where: np.ndarray, at_peak: np.ndarray, cap: float) -> np.ndarray:
    """Cut positions for device d, fewest bands first: each band (the buffers at positions ``bpos``
    from its cut to the next, alive over [t0, t1), with the parameters of its nodes) reaches as far
    as its own peak stays within ``cap``; the cut itself is moved back to the cheapest crossing
    among the last SLACK of the band's bytes at the device's peak moment (``where``, ``at_peak``)."""
    nodes = np.flatnonzero(pl == d)
    at = np.unique(np.concatenate([bpos, pos[nodes]]))
    ob = np.argsort(bpos, kind="stable")
    bpos, t0, t1, size = bpos[ob], t0[ob], t1[ob], size[ob]
    par_at = np.r_[0.0, np.cumsum(np.bincount(np.searchsorted(at, pos[nodes]), weights=problem.param_bytes[nodes],
                                              minlength=at.size))]
    below = np.r_[0.0, np.cumsum(np.bincount(np.searchsorted(at, where), weights=at_peak, minlength=at.size))]
    cost = crossing_cost(problem, pl, d, pos, at)

    def band_peak(i: int, j: int) -> float:  # positions at[i] .. at[j - 1]
        lo, hi = np.searchsorted(bpos, at[i], side="left"), np.searchsorted(bpos, at[j], side="left") if j < at.size else bpos.size
        return par_at[j] - par_at[i] + _peak(t0[lo:hi], t1[lo:hi], size[lo:hi])

    cuts: list[float] = []
    i = 0
    while len(cuts) < problem.k - 1 and i + 1 < at.size and band_peak(i, at.size) > cap:
        lo, hi = i + 1, at.size - 1  # the largest j with band_peak(i, j) <= cap (at least i + 1)
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if band_peak(i, mid) <= cap:
                lo = mid
            else:
                hi = mid - 1
        j = lo
        cand = np.arange(i + 1, j + 1)
        cand = cand[below[cand] - below[i] >= (1 - SLACK) * (below[j] - below[i])]
        j = int(cand[np.lexsort((-cand, cost[cand]))[0]])
        cuts.append(float(at[j]))
        i = j
    return np.asarray(cuts)


def forward_nodes(problem: Problem, pivot: int) -> np.ndarray:
    """Mask of the forward pass: nodes before the loss (``pivot``) in topological order that hold no
    parameters and belong to no colocation group (those stay with their band)."""
    return (problem.topo_rank < problem.topo_rank[pivot]) & (problem.param_bytes <= 0) & (problem.colocate < 0)


def forward_device(problem: Problem, pl: np.ndarray, pivot: int) -> int | None:
    """The device running at least FORWARD_HOME of the forward pass's work in placement ``pl``, or
    None when the forward pass is spread (or has no work)."""
    fwd = forward_nodes(problem, pivot)
    work = np.bincount(pl[fwd], weights=problem.time[fwd], minlength=problem.k)
    total = float(work.sum())
    if total <= 0:
        return None
    d = int(np.argmax(work))
    return d if work[d] >= FORWARD_HOME * total else None


def forward_together(problem: Problem, split: np.ndarray, pivot: int) -> np.ndarray:
    """``split`` with the whole forward pass (:func:`forward_nodes`) on the loss's device, each node
    only where it is allowed. Why: a band's device then receives its activations (held there from
    their producer's end until its own backward reads them, as when it made them), the forward
    pass crosses no cut, and only the backward's gradient crosses each one."""
    home = int(split[pivot])
    move = forward_nodes(problem, pivot)
    if problem.has_allowed:
        move &= problem.allowed_mask()[:, home]
    out = split.copy()
    out[move] = home
    return out


def _fast_starts(problem: Problem, opts: SolveOptions) -> Iterator[tuple[str, np.ndarray, np.ndarray]]:
    """Fast schedules with unlimited memory, made one at a time (a PARDNN run only when it is
    expected to end in the time left): (name, placement, sequence: every node by its start time
    there, ties by topological rank)."""
    free = problem.with_devices(problem.k, float("inf"))
    stop = opts.out_of_time
    counts = {"pardnn-2": 2, "pardnn-k/2": max(2, problem.k // 2), "pardnn-k": problem.k}
    done: set[int] = set()
    for name in opts.extra.get("band_starts", STARTS):
        if stop():
            return
        if name == "etf":
            got = fast_schedule(problem, stop)
            if got is not None:
                yield name, got[0], got[1]
            continue
        count = min(counts[name], problem.k)
        if count in done:
            continue
        left = opts.remaining()
        if left is not None and left < 2 * RUN_SECONDS_PER_ELEMENT * (problem.n + problem.m):
            continue  # PARDNN does not watch its stop everywhere: a run and its repair must fit
        done.add(count)
        fewer = sub_problem(free, np.arange(count))  # None: some node may run only on a device dropped
        if fewer is None:
            continue
        sol = pardnn(fewer, replace(opts, memory_model="static", hint=None))
        if sol.placement is None:
            continue
        pl = np.asarray(sol.placement, dtype=np.int64)
        ev = evaluate(free, pl, order=sol.order, memory_model="static")
        yield name, pl, schedule_order(problem, ev.start)


def split_repaired(problem: Problem, name: str, pl: np.ndarray, seq: np.ndarray, pos: np.ndarray, pivot: int,
                   stop: Callable[[], bool], first_fit: bool = False,
                   more: Callable[[], bool] | None = None) -> tuple[Repaired | None, list[dict]]:
    """One fast schedule (placement ``pl``, each device running its nodes in the order of ``seq``)
    split into bands at each of MARGINS (also with the forward pass together, when one device ran
    most of it) and repaired (module docstring): the fitting repair with the smallest makespan (None:
    none fits) and a row per margin tried (``name`` labels them). A schedule that fits is repaired as
    it is (nothing to move). With ``first_fit`` every margin is split first and the splits are
    repaired least over the capacity first, up to the first that fits, then the others only while
    ``more()`` is true (None: none), stopped when it turns false. Why: a repair that stalls costs
    most of a fit (50K CNN, K = 8, mem-span's gathered placement: margin 0 split 1.17 x over, 23 s of
    repair that fits nothing; margin 0.05 1.14 x, fits in 12 s), and the splits themselves are
    cheap; but the least-over split is not always the best fit (50K CNN, K = 4, ETF's gathered
    placement: 0.05 split 1.19 x over fits at 1222.13, 0 split 1.25 x over at 1189.96, 0.8 s)."""
    ev = evaluate(problem, pl, order=device_orders(pl, seq, problem.k), memory_model="peak")
    fits = ev.feasible(problem)
    home = None if fits else forward_device(problem, pl, pivot)
    best = None
    rows: list[dict] = []
    if not first_fit:
        for margin in (0.0,) if fits else MARGINS:  # split, then repair, one margin at a time
            if stop():
                break
            t = time.monotonic()
            split, row = _split(problem, name, pl, ev, seq, pos, pivot, margin, home, stop)
            rows.append(row)
            rep = _repaired(problem, split, seq, row, time.monotonic() - t, stop)
            if rep is not None and (best is None or rep.evaluation.makespan < best.evaluation.makespan):
                best = rep
        return best, rows
    splits: list[tuple[np.ndarray, dict, float]] = []  # (placement, row, seconds)
    for margin in (0.0,) if fits else MARGINS:
        if stop():
            break
        t = time.monotonic()
        split, row = _split(problem, name, pl, ev, seq, pos, pivot, margin, home, stop)
        splits.append((split, row, time.monotonic() - t))
    for split, row, spent in sorted(splits, key=lambda s: (s[1]["split_over"], s[1]["margin"])):
        done = stop if best is None else (lambda: stop() or more is None or not more())
        if done():
            break
        rows.append(row)
        rep = _repaired(problem, split, seq, row, spent, done)
        if rep is not None and (best is None or rep.evaluation.makespan < best.evaluation.makespan):
            best = rep
    return best, rows


def _split(problem: Problem, name: str, pl: np.ndarray, ev: Evaluation, seq: np.ndarray, pos: np.ndarray, pivot: int,
           margin: float, home: int | None, stop: Callable[[], bool]) -> tuple[np.ndarray, dict]:
    """The schedule ``ev`` of ``pl`` split into bands at ``margin`` (as it is when it fits), also
    tried with the forward pass together on ``home`` (None: not): the faster of the two in the order
    of ``seq``, fitting first, and a row saying what was done (its split_over: the peak over the
    capacity, the largest ratio over the devices)."""
    k = problem.k
    fits = ev.feasible(problem)
    split = pl if fits else split_bands(problem, pl, ev, pos, margin)
    got = evaluate(problem, split, order=device_orders(split, seq, k), memory_model="peak")
    row = {"start": name, "margin": margin, "fast": ev.makespan, "split_moved": int(np.count_nonzero(split != pl)),
           "forward": False}
    if home is not None and not stop():
        alt = forward_together(problem, split, pivot)
        alt_ev = evaluate(problem, alt, order=device_orders(alt, seq, k), memory_model="peak")
        row.update(plain_makespan=got.makespan, forward_makespan=alt_ev.makespan)
        if (not alt_ev.feasible(problem), alt_ev.makespan) < (not got.feasible(problem), got.makespan):
            split, got, row["forward"] = alt, alt_ev, True
    row.update(split_over=float(np.max(got.peak_memory / problem.memory)), split_makespan=got.makespan)
    return split, row


def _repaired(problem: Problem, split: np.ndarray, seq: np.ndarray, row: dict, spent: float,
              stop: Callable[[], bool]) -> Repaired | None:
    """mem-repair's repair of the split placement ``split`` in the order of ``seq`` (not tried when
    the split is above REPAIR_WITHIN x the capacity): the repair when it fits, else None; ``row``
    (the split's, :func:`_split`) gets the outcome and the seconds (``spent`` on the split)."""
    t = time.monotonic()
    if row["split_over"] > REPAIR_WITHIN:
        row.update(fits=False, seconds=round(spent, 3))
        return None
    rep = repair(problem, split, seq, stop=stop)
    ok = rep.evaluation.feasible(problem)
    row.update(fits=ok, makespan=rep.evaluation.makespan, repair_steps=len(rep.steps),
               memory_over_capacity=float(np.max(rep.evaluation.peak_memory / problem.memory)),
               seconds=round(spent + time.monotonic() - t, 3))
    return rep if ok else None


def band_repair(problem: Problem, opts: SolveOptions) -> Solution:
    """Fast schedules with unlimited memory, their overloaded devices split into bands of layers,
    then repaired (module docstring); the fitting one with the smallest makespan."""
    t0 = time.monotonic()
    if opts.memory_model != "peak":
        return Solution("band-repair", "unknown", reason="band-repair: built for the peak memory model (--memory-model peak)",
                        seconds=time.monotonic() - t0)
    stop = opts.out_of_time
    pivot = loss_pivot(problem)
    if pivot is None:
        pivoted = on_pivoted(problem, opts, lambda p: band_repair(p, opts))
        return pivoted if pivoted is not None else Solution("band-repair", "unknown", seconds=time.monotonic() - t0,
                                                            reason="band-repair: no loss (pivot) to place layers by")
    pos = positions(problem, pivot)
    tried: list[dict] = []
    best = None
    for name, pl, seq in _fast_starts(problem, opts):
        rep, rows = split_repaired(problem, name, pl, seq, pos, pivot, stop)
        tried += rows
        if rep is not None and (best is None or rep.evaluation.makespan < best.evaluation.makespan):
            best = rep
    info: dict = {"starts": tried}
    if best is None:
        why = "out of time" if stop() else "no split schedule fitted the capacity"
        return Solution("band-repair", "unknown", reason=f"band-repair: {why}", seconds=time.monotonic() - t0, info=info)
    return repaired_solution("band-repair", problem, best, stop, t0, info)
