"""``chain-pin``: ETF's fast placement with each weight-gradient accumulation chain and the
gradients it sums kept on one device, the params off the busiest chain's device, in a deadline order.

Why (bench/results_peak.md, session 11): on the generated LSTM, at 1.5 x the smallest memory, the
fast placements do not fit and the layer-band ones that fit are 1.2-2.2 x slower than unlimited
memory. ETF's placement sums an RNN's weight gradients (``acc_t = dW_t + acc_(t+1)``, one chain per
weight, 131 MB per step for the output layer) on one device while every device makes the
gradients, all ready at the loss; a received tensor is held from the moment its producer finishes,
so the gradients made ahead of the chain wait on its device (50K LSTM, K = 8, 2.28 GB per device:
22 GB of them, and 10.4 GB of the layers' 33.5 MB ones on a device running three chains). An order
cannot hold them back (a device with nothing else to run starts them); where they are made can:
made beside the chain, each gradient waits for nothing, and what travels is the step's small
inputs. The params, on ETF's first devices, go elsewhere too.

How:
1. :func:`accumulation_chains`: a running sum is an edge u -> w where u, w and the edge carry the
   same bytes (at least ``min_bytes``) and u has no other consumer; each node keeps the such input
   with the longest run of them behind it (``acc_(t+1)`` rather than ``dW_t``); a chain is a path
   of kept edges (at least MIN_LENGTH nodes), its feeders the other same-size inputs of each chain
   node that have no other consumer (the gradients). A residual stream (its sums read by the next
   block too) is not a chain.
2. :func:`chain_devices`: each chain with its feeders on one device, by their work, longest first
   onto the device with the least chain work; the busiest chain keeps its device to itself; param
   units (a colocation group holding params, or a lone param node), largest first, onto the other
   devices with the fewest param bytes. When a chain shares a device, steps 2-5 run both ways and
   the faster answer is kept (:func:`chain_pin`): first with the gradients of a chain put on a
   device that already has one left to ETF (the 200K LSTM at K = 8: eight layer chains on seven devices, and the device with
   two ended 290 ms after the others; freed, chain-pin alone 1874.17 against 2052.34), then as said;
   each way in two stages, and where the freed way's base fits nothing, over capacity on a device
   whose chain's gradients it freed, the pinned way's base runs before the freed way's rest.
   Device restrictions (``allowed``, colocation) hold: a chain goes only to a device every node of
   it may use (none: ETF places it), a feeder or a param unit only where it may run.
3. ETF with unlimited memory on the problem so restricted: the other nodes where they finish first.
4. Orders, each measured by the evaluator: ETF's own, then two families of ROUNDS deadline orders
   (heuristics.deadline_order, each round's schedule the next one's reference; a gradient loses a
   tie with the running sum it joins): "plain", and "kept", which keeps each reference's order for
   what it ran before the busiest chain's first node (:func:`kept_prefix`: the forward pass runs
   as ETF ran it, and the loss is not delayed). If none fits, for each family whose least overflow
   is at most REPAIR (the kept one first): layer_bands' ``move_params`` (param units off the peak
   device) on that order, the moved units' early readers with them (:func:`readers_follow`), and
   the family's deadline rounds again; then memory_order's ``lower_peak_order``.
5. Held gradients (:func:`held_gradients`), on the best feasible answer under the peak model: a
   share of the busiest chain's gradients made beside their step's loss gradient instead, each
   held back by a wait (placement.evaluator, "v does not start before u finishes") on the chain
   node that ends in time for it to arrive when the sum needs it; deadline orders with the waits,
   each keeping its reference's order before the chain (:func:`kept_prefix`).
   An order alone cannot do this (a device with nothing else to run starts the gradient at once);
   the answer carries its waits (``Solution.waits``) and start times.
The feasible schedule with the smallest makespan.

No randomness: the same problem gives the same answer.
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass, replace
from typing import Iterator

import numpy as np

from placement.evaluator import Evaluation, evaluate, schedule_order, wait_delay
from placement.incremental import device_order
from placement.problem import Problem
from placement.solution import Solution, SolveOptions

from .deadline_order import deadline_schedule, need_times
from .layer_bands import move_params, restricted
from .list_scheduling import Stopped, etf_schedule
from .memory_order import lower_peak_order

MIN_FRACTION = 0.002  # a chain's tensors carry at least this fraction of the smallest capacity
MIN_LENGTH = 8  # an unrolled loop of a few steps at least; a CNN's residual sums give runs of 3
UNLIMITED_FRACTION = 0.5  # with unlimited memory: a chain's tensors carry at least this fraction of the largest one
ROUNDS = 3
# A family's deadline rounds stop once a round's schedule is its reference's again (makespan and
# largest memory over capacity within this relative change): the next round would start from the same need times. On the
# 200K LSTM at K = 4 every kept family repeated ETF's order three times (6 of 12 rounds, 6 s of a 16 s pass).
SETTLED = 1e-4
# Parameter moves and memory_order's rules only when the best order is at most this much over:
# they mend small overflows (the 50K LSTM at K = 8: 1.047 -> 0.964 with one move) and cost up to
# 100 s at 200K nodes where nothing fits (1.4 x over at 1.11 x the memory bound).
REPAIR = 1.15
# Held gradients (step 5): the shares of the busiest chain's gradients made away from its device,
# tried in turn; the first WAIT_LEADS of its steps keep theirs (the loss gradients of every step
# arrive on the chain's device at the loss, and leave little room there for gradients in flight).
WAIT_SHARES = (1.0, 0.85, 0.7, 0.6, 0.5, 0.4, 0.3)  # the most first: the first share that fits ends the search
WAIT_LEADS = (0.2, 0.05)  # each tried: the 200K LSTM at K = 8 does best with 0.2, the 50K with 0.05
WAIT_AHEAD = 2  # a gradient made on the chain's device waits for the sum this many steps before its own
WAIT_ROUNDS = 3
WAIT_SLACK = 0.5  # a held gradient is released this many chain steps before it must leave
WAIT_BISECT = 3  # bisection steps between the largest share that fits and the next larger one tried
# Step 4's kept families: the share of the chain's start up to which a deadline order keeps its
# reference's order, tried in turn until one fits (the 50K LSTM at K = 8 does best with 1 and a
# parameter move; on the 200K, 1 overflows 1.10 x, 0.85 1.01 x, 0.8 fits: 2052.5, 0.7 2072.6, 0.6 2092.8)
KEPT_SHARES = (1.0, 0.8, 0.6)
# After a parameter move, the readers of a moved unit that ran before this share of its transfer time
# follow it (:func:`readers_follow`), each share tried: on the 50K LSTM at K = 8 the busiest chain
# starts at 110.3 / 107.8 / 107.95 / 111.3 with 1 / 0.75 / 0.5 / 0.25, 114.7 with none (docs/peak.md).
FOLLOW_SHARES = (1.0, 0.75, 0.5, 0.25)

Chain = tuple[np.ndarray, list[list[int]]]  # chain nodes in order, each one's feeders


def accumulation_chains(problem: Problem, min_bytes: float) -> list[Chain]:
    """The running sums of the graph (module docstring, step 1)."""
    src, dst = problem.src, problem.dst
    eb = problem.edge_bytes if problem.edge_bytes is not None else problem.out_bytes[src]
    out = problem.out_bytes
    consumers = np.bincount(src, minlength=problem.n)
    same = (out[src] == out[dst]) & (np.abs(eb - out[dst]) <= 1e-9 * out[dst]) & (out[dst] >= min_bytes) \
        & (consumers[src] == 1)
    cand = np.flatnonzero(same)
    if cand.size == 0:
        return []
    pos = problem.topo_rank
    cand = cand[np.lexsort((src[cand], pos[dst[cand]]))]
    depth: dict[int, int] = {}
    pred: dict[int, int] = {}
    for e in cand.tolist():  # by the consumer's topological rank: every u's depth is final
        u, w = int(src[e]), int(dst[e])
        du = depth.get(u, 0) + 1
        if du > depth.get(w, 0):
            depth[w], pred[w] = du, u
    feeders: dict[int, list[int]] = {}
    for e in cand.tolist():
        u, w = int(src[e]), int(dst[e])
        if pred.get(w) != u:
            feeders.setdefault(w, []).append(u)
    succ = {u: w for w, u in pred.items()}  # u has one consumer: at most one w
    chains: list[Chain] = []
    for head in sorted(u for u in succ if u not in pred):
        path = [head]
        while path[-1] in succ:
            path.append(succ[path[-1]])
        if len(path) >= MIN_LENGTH:
            chains.append((np.asarray(path, dtype=np.int64), [sorted(feeders.get(w, [])) for w in path]))
    return chains


def chain_devices(problem: Problem, chains: list[Chain], free_shared: bool = False) -> list[tuple[int, ...] | None]:
    """Allowed devices per node (module docstring, step 2); ``free_shared``: a chain put on a
    device that already has one keeps its nodes there but not its gradients (ETF places them)."""
    k = problem.k
    allowed = list(problem.allowed)
    mask = problem.allowed_mask()  # the devices each node may use, joint over its colocation group
    work = [float(problem.time[c].sum()) + sum(float(problem.time[f].sum()) for f in fs if f) for c, fs in chains]
    load = np.zeros(k)
    busiest = None
    for i in sorted(range(len(chains)), key=lambda i: (-work[i], int(chains[i][0][0]))):
        path, fs = chains[i]
        can = np.flatnonzero(mask[path].all(axis=0))  # devices that take the whole chain
        if can.size == 0:
            continue  # device restrictions split the chain: ETF places it
        d = int(can[np.argmin(load[can])])
        shared = free_shared and load[d] > 0
        load[d] += work[i]
        if busiest is None:
            busiest = d
            load[d] = math.inf
        for v in path.tolist():
            allowed[v] = (d,)
        for v in ([] if shared else [f for group in fs for f in group]):
            if mask[v, d]:  # a gradient that may not run there stays free
                allowed[v] = (d,)
    if busiest is None or k < 2:
        return allowed
    rest = [d for d in range(k) if d != busiest]
    units: dict[tuple[int, int], list[int]] = {}
    for v in np.flatnonzero(problem.param_bytes > 0).tolist():
        g = int(problem.colocate[v])
        key = (0, g) if g >= 0 else (1, v)
        if key not in units:
            units[key] = np.flatnonzero(problem.colocate == g).tolist() if g >= 0 else [v]
    size = {key: float(problem.param_bytes[vs].sum()) for key, vs in units.items()}
    held = dict.fromkeys(rest, 0.0)
    for key in sorted(units, key=lambda x: (-size[x], x)):
        vs = units[key]
        ok = [x for x in rest if mask[vs, x].all()]
        if not ok or any(allowed[v] is not None for v in vs):
            continue
        d = min(ok, key=lambda x: (held[x], x))
        held[d] += size[key]
        for v in vs:
            allowed[v] = (d,)
    return allowed


def busiest_chain(problem: Problem, chains: list[Chain]) -> Chain:
    """The chain with the most work (its nodes and feeders), as :func:`chain_devices` ranks them."""
    work = [float(problem.time[c].sum()) + sum(float(problem.time[f].sum()) for f in fs if f) for c, fs in chains]
    return chains[min(range(len(chains)), key=lambda i: (-work[i], int(chains[i][0][0])))]


@dataclass
class HeldGradients:
    """Step 5's plan for one share: a placement, and the waits that hold each gradient back."""

    placement: np.ndarray
    waits: list[tuple[int, int]]
    due: dict[int, float]  # node -> its time on the chain's ideal timeline (chain start = 0)


def held_gradients(problem: Problem, chain: Chain, placement: np.ndarray, share: float,
                   lead: float = WAIT_LEADS[0]) -> HeldGradients | None:
    """The busiest chain's gradients, ``share`` of them (evenly spread, after its first ``lead``
    of its steps) made on the device of their largest input (the loss gradient of their step) instead of
    the chain's, each held back by a wait on the chain node that ends, on the chain's ideal timeline
    (its nodes and the gradients left on its device back to back), one step before the gradient
    must leave to arrive in time; the gradients left wait for the sum WAIT_AHEAD steps before
    theirs. None when no gradient can move (the chain's device makes their inputs, colocation,
    device restrictions)."""
    path, feeders = chain
    home_dev = int(placement[path[0]])
    feed = [(i, g) for i, group in enumerate(feeders) for g in group]
    if not feed:
        return None
    first = int(lead * path.size)
    pick = {int(round(j / share)) for j in range(int(len(feed) * share))} if share > 0 else set()
    remote: list[tuple[int, int, int]] = []  # (chain position, gradient, its device)
    for j, (i, g) in enumerate(feed):
        if j not in pick or i < first or problem.colocate[g] >= 0:
            continue
        ins = np.flatnonzero(problem.dst == g)
        if not ins.size:
            continue
        d = int(placement[problem.src[ins[np.argmax(problem.out_bytes[problem.src[ins]])]]])
        if d != home_dev and (problem.allowed[g] is None or d in problem.allowed[g]):
            remote.append((i, g, d))
    if not remote:
        return None
    pl = placement.copy()
    moved = {g for _, g, _ in remote}
    local_time = np.zeros(path.size)
    for i, g in feed:
        if g not in moved:
            local_time[i] += problem.time[g]
    ideal_finish = np.cumsum(problem.time[path] + local_time)
    ideal_start = ideal_finish - problem.time[path]
    step = float(problem.time[path].mean())
    lat = wait_delay(problem)
    due = {int(v): float(t) for v, t in zip(path.tolist(), ideal_start.tolist())}
    waits: list[tuple[int, int]] = []
    for i, g, d in remote:
        pl[g] = d
        send = float(problem.comm[np.flatnonzero(problem.src == g)].max(initial=0.0))
        leave = ideal_start[i] - send - float(problem.time[g])
        due[g] = leave
        j = int(np.searchsorted(ideal_finish[:i], leave - lat - WAIT_SLACK * step, side="right")) - 1
        if j >= 0:
            waits.append((int(path[j]), g))
    for i, g in feed:
        if g not in moved and i >= WAIT_AHEAD:
            waits.append((int(path[i - WAIT_AHEAD]), g))
    return HeldGradients(pl, waits, due)


def descendants(problem: Problem, sources: np.ndarray, upward: bool = False,
                within: np.ndarray | None = None) -> np.ndarray:
    """Mask of the nodes reachable from ``sources`` (themselves included); ``upward``: the nodes
    ``sources`` are reachable from instead; ``within``: a mask of the nodes the walk may enter
    (the sources are in the result whatever it says)."""
    seen = np.zeros(problem.n, dtype=bool)
    seen[sources] = True
    ptr, nbr, _ = problem.pred_ptr if upward else problem.succ_ptr
    stack = np.flatnonzero(seen).tolist()
    while stack:
        v = stack.pop()
        for w in nbr[ptr[v]:ptr[v + 1]].tolist():
            if not seen[w] and (within is None or within[w]):
                seen[w] = True
                stack.append(w)
    return seen


def kept_prefix(problem: Problem, ref: Evaluation, need: np.ndarray, head: int,
                after: np.ndarray, share: float = 1.0) -> list[tuple[int, int]]:
    """Keep the reference schedule's order for what it started before ``share`` of the busiest
    chain's first start (share 1, on a training graph: the forward pass), and put it first: ``need`` of those nodes becomes
    their reference start, less a constant below every other need (in place); returned are waits,
    for the simulation only, from each such node to the next one on its device in the reference.

    Why (bench/results_peak.md, session 14): the deadline order is a non-idling simulation; run by
    need times, a device that has a later forward node ready starts it, and the one the reference
    ran next waits behind it: on the 50K LSTM at K = 8 the loss moved from 100.7 (ETF's own order)
    to 129-152 ms, and every held answer after it by as much. ``after`` masks the nodes that
    depend on the chain's gradients; they are never kept, so the waits returned close no cycle
    with the held gradients' waits (those point into ``after``).
    """
    c0 = float(ref.start[head])
    keep = np.flatnonzero((ref.start < share * c0) & ~after)
    if keep.size == 0:
        return []
    low = float(np.min(need[np.isfinite(need)], initial=0.0)) - (c0 + 1.0)
    need[keep] = ref.start[keep] + low
    seq = keep[np.lexsort((problem.topo_rank[keep], ref.finish[keep], ref.start[keep]))]
    dev = ref.placement[seq]
    waits: list[tuple[int, int]] = []
    last: dict[int, int] = {}
    for v, d in zip(seq.tolist(), dev.tolist()):
        if d in last:
            waits.append((last[d], v))
        last[d] = v
    return waits


def readers_follow(problem: Problem, ref: Evaluation, moved: np.ndarray, sequence: np.ndarray, head: int,
                   model: str, mask: np.ndarray | None = None) -> tuple[np.ndarray, Evaluation, int]:
    """``moved`` (``ref``'s placement with parameter units moved by layer_bands' ``move_params``)
    with some of the units' readers moved along; the placement, its evaluation in ``sequence``'s
    order, and how many readers followed.

    Why (bench/results_peak.md, session 16): a moved unit's readers stay where they ran beside it
    and now wait for its transfer. On the 50K LSTM at K = 8 the embedding (0.39 GB of params) left
    the device that ran the first lookups: every lookup there waited 13.1 ms for the weight, the
    whole forward pass with them, and the busiest chain started at 114.7 instead of 101.6; every
    held answer after it kept the delay.

    How: the readers (consumers outside the unit, on the unit's former device, allowed on its new
    one, in no colocation group) that ``ref`` started before FOLLOW_SHARES x the transfer of the
    unit's output to them: each share in turn, each judged by the evaluator in ``sequence``'s order;
    the one whose busiest chain (its first node ``head``) starts first, among those no more over
    capacity than ``moved`` itself (ties: the larger share). All of them follow, not one at a
    time: the device they join runs them in their old order, before what it ran later. ``mask``:
    the devices each node may use (default: the problem's own restrictions).
    """
    k = problem.k
    cap = problem.memory

    def measured(pl: np.ndarray) -> Evaluation:
        return evaluate(problem, pl, order=restricted(sequence, pl, k), memory_model=model)

    base = measured(moved)
    unit = moved != ref.placement
    edges = np.flatnonzero(unit[problem.src] & ~unit[problem.dst])
    r, u = problem.dst[edges], problem.src[edges]
    mask = problem.allowed_mask() if mask is None else mask
    ok = (ref.placement[r] == ref.placement[u]) & (problem.colocate[r] < 0) & mask[r, moved[u]]
    r, u, delay = r[ok], u[ok], problem.comm[edges[ok]]
    best, best_pl, count = base, moved, 0
    limit = float(np.max(base.peak_memory / cap))
    for share in FOLLOW_SHARES:
        sel = ref.start[r] < share * delay
        if not sel.any():
            continue
        pl = moved.copy()
        pl[r[sel]] = moved[u[sel]]
        ev = measured(pl)
        if float(np.max(ev.peak_memory / cap)) <= limit and ev.start[head] < best.start[head]:
            best, best_pl, count = ev, pl, int(np.unique(r[sel]).size)
    return best_pl, best, count


def settled(before: Evaluation, after: Evaluation, cap: np.ndarray) -> bool:
    """Whether a deadline round changed its reference's makespan and largest memory over capacity by
    at most SETTLED (relative)."""
    pairs = ((before.makespan, after.makespan), (float(np.max(before.memory / cap)), float(np.max(after.memory / cap))))
    return all(abs(a - b) <= SETTLED * max(abs(a), abs(b)) for a, b in pairs)


def chain_pin(problem: Problem, opts: SolveOptions) -> Solution:
    """``chain-pin`` (module docstring): step 2 both ways, a shared device's second chain with its
    gradients free first, then all pinned; the faster answer (the first on a tie).

    Each way runs in two stages (:func:`way_stages`): its base (ETF's order and the plain deadline
    rounds) and the rest (kept families, repairs, held gradients). Where the freed way's base fits,
    its rest follows, and the pinned way runs only with 1.2 x the freed way's time left. Where it
    fits nothing and its least overflowing order is over capacity on a device whose chain's
    gradients it freed (they are held there; pinning them is the remedy), the pinned way's base
    runs next, before the freed way's rest: where that fits, the pinned way goes on first, then
    the freed way's rest; where neither base fits, the freed way's rest goes first. Where the
    overflow is elsewhere, the freed way's rest (a parameter move) comes first, as when it fits.
    Why (bench/results_peak.md, session 17): on the 200K LSTM at K = 4 and 1.5 x its smallest
    memory the freed way fits nothing (plain rounds 1.004 x over, on two of the three devices
    whose chains' gradients it freed; kept families and a parameter move after them: 10 s more
    at load 1), and the pinned way's first deadline round fits at 3685.4; run whole one after the
    other the two ways took about 30 s at load 1, past chain-pin's 28 s in the portfolio, and the
    warm start fell to band-split's 5362.2. On the 50K LSTM at K = 8 (2.2805 GB) the freed base
    is over on a device without a freed chain (the embedding's), its parameter move fits, and the
    pinned base first would only have taken time from the freed way's held gradients.
    """
    t0 = time.monotonic()
    freed = way_stages(problem, opts, free_shared=True)
    base = next(freed)
    if not base.info.get("free_shared") or opts.out_of_time():  # no chain freed (or none at all): one way
        return replace(finished(freed, base), seconds=time.monotonic() - t0)
    if base.objective is not None:
        first = finished(freed, base)
        left = opts.remaining()
        if left is not None and left < 1.2 * (time.monotonic() - t0):
            return replace(first, seconds=time.monotonic() - t0)
        second = finished(way_stages(problem, opts, free_shared=False))
    elif not set(base.info.get("over_devices", ())) & set(base.info.get("freed_devices", ())):
        first = finished(freed, base)  # over elsewhere: the freed way's parameter move is the remedy
        second = finished(way_stages(problem, opts, free_shared=False))
    else:
        pinned = way_stages(problem, opts, free_shared=False)
        other = next(pinned)
        if other.objective is not None:  # the pinned way fits: it goes on first
            second = finished(pinned, other)
            first = finished(freed, base)
        else:
            first = finished(freed, base)
            second = finished(pinned, other)
    if first.objective is None or (second.objective is not None and second.objective < first.objective):
        first, second = second, first
    info = {**first.info, "other": {"free_shared": second.info.get("free_shared"), "makespan": second.objective}}
    return replace(first, seconds=time.monotonic() - t0, info=info)


def finished(stages: Iterator[Solution], last: Solution | None = None) -> Solution:
    """The last answer of a way's :func:`way_stages` once it has run to its end (``last``: the one
    it gave before, if any)."""
    for last in stages:
        pass
    assert last is not None, "way_stages yields at least once"
    return last


def pinned_chains(problem: Problem, opts: SolveOptions, free_shared: bool) -> Solution:
    """Steps 1-5 with :func:`chain_devices` (``free_shared``) as step 2, whole."""
    return finished(way_stages(problem, opts, free_shared))


def way_stages(problem: Problem, opts: SolveOptions, free_shared: bool) -> Iterator[Solution]:
    """Steps 1-5 with :func:`chain_devices` (``free_shared``) as step 2, in two stages: the answer
    after the base (ETF's order and the plain deadline rounds), then the answer at the end (kept
    families, repairs, held gradients); one answer only when it stops before the base ends (no
    chain, out of time). :func:`chain_pin` runs the stages of its two ways in turn."""
    t0 = time.monotonic()
    name = "chain-pin"

    def unknown(why: str, info: dict | None = None) -> Solution:
        return Solution(name, "unknown", reason=f"{name}: {why}", seconds=time.monotonic() - t0, info=info or {})

    finite = problem.memory[np.isfinite(problem.memory)]
    # With unlimited memory a chain's tensors are measured against the largest tensor instead:
    # the output layer's chain only on the generated LSTM (static, unlimited memory: 10K K = 4
    # 197.22 against ETF's 207.81; with every layer's chain, 211.08; bench/results_scale.md,
    # session 12); the portfolio keeps ETF's where it loses (K >= 8, 200K nodes).
    if finite.size:
        min_bytes = MIN_FRACTION * float(finite.min())
    else:
        min_bytes = UNLIMITED_FRACTION * float(problem.out_bytes.max(initial=0.0))
        if min_bytes <= 0.0:
            yield unknown("no weight-gradient accumulation chain in the graph")
            return
    chains = accumulation_chains(problem, min_bytes)
    if not chains:  # say the threshold: a graph may have chains, only too small to matter here
        scale = (f"{MIN_FRACTION:g} x the smallest capacity" if finite.size
                 else f"{UNLIMITED_FRACTION:g} x the largest tensor")
        yield unknown(f"no weight-gradient accumulation chain with tensors of {min_bytes:.4g} bytes or more ({scale})")
        return
    allowed = chain_devices(problem, chains, free_shared)
    all_pinned = chain_devices(problem, chains)
    free_shared = free_shared and allowed != all_pinned  # no device shared: the pinned way
    # the devices of the chains whose gradients this way leaves to ETF (those gradients are held there)
    freed_on = sorted({all_pinned[v][0] for v in range(problem.n) if allowed[v] != all_pinned[v] and all_pinned[v]})
    mask_ok = all(a is None or len(a) > 0 for a in allowed)
    pinned = replace(problem, allowed=allowed, memory=np.full(problem.k, math.inf))
    if not mask_ok or not pinned.allowed_mask().any(axis=1).all():
        yield unknown("the chains' devices contradict the graph's device restrictions")
        return
    try:
        sched = etf_schedule(pinned, 0.0, "static", stop=opts.out_of_time)
    except Stopped:
        yield unknown("out of time")
        return
    if sched.bad >= 0:
        yield unknown(f"node {problem.ids[sched.bad]!r} has no allowed device")
        return
    model = opts.memory_model
    cap = np.where(np.isfinite(problem.memory), problem.memory, np.inf)  # a device without a limit is never over
    tried: list[dict] = []
    best: tuple[Evaluation, list[list[int]], list[tuple[int, int]] | None] | None = None
    least: tuple[float, Evaluation] | None = None

    least_of: dict[str, tuple[float, Evaluation]] = {}  # per family of orders (plain / kept-SHARE deadline rounds)
    fitted: dict[str, bool] = {}

    def consider(rule: str, order: list[list[int]], ev: Evaluation, waits: list[tuple[int, int]] | None = None,
                 family: str = "plain") -> None:
        nonlocal best, least
        ok = ev.feasible(problem)
        over = float(np.max(ev.memory / cap))
        tried.append({"order": rule, "fits": ok, "makespan": ev.makespan, "memory_over_capacity": over})
        if least is None or over < least[0]:
            least = (over, ev)
        if family not in least_of or over < least_of[family][0]:
            least_of[family] = (over, ev)
        fitted[family] = fitted.get(family, False) or ok
        if ok and (best is None or ev.makespan < best[0].makespan):
            best = (ev, order, waits)

    feeders = np.asarray(sorted({f for _, fs in chains for group in fs for f in group}), dtype=np.int64)
    top = busiest_chain(problem, chains)
    head = int(top[0][0])
    after_feeders = descendants(problem, np.asarray([f for group in top[1] for f in group] + [head], dtype=np.int64))

    def deadline_rounds(placement: np.ndarray, ref: Evaluation, tag: str, kept: float | None) -> None:
        """ROUNDS deadline orders, each round's schedule the next one's reference; ``kept``: each
        keeps its reference's order up to that share of the busiest chain's start (:func:`kept_prefix`)."""
        family = "plain" if kept is None else f"kept-{kept:g}"
        for r in range(ROUNDS):
            if opts.out_of_time():
                return
            need = need_times(problem, placement, ref.start)
            # a gradient needed when the running sum before it is loses the tie: the sum frees as
            # much as it makes, the gradient only adds
            need[feeders] = np.nextafter(need[feeders], np.inf)
            keep = kept_prefix(problem, ref, need, head, after_feeders, kept) if kept is not None else None
            try:
                got = deadline_schedule(problem, placement, need, stop=opts.out_of_time, waits=keep)
            except ValueError:  # cannot happen (kept_prefix's waits go forward in the reference)
                return
            if got is None:
                return
            last, ref = ref, evaluate(problem, placement, order=got[0], memory_model=model)
            consider(f"{tag}deadline-{'' if kept is None else family + '-'}{r + 1}", got[0], ref, family=family)
            if settled(last, ref, cap):
                return

    def held_share(base: Evaluation, chain: Chain, share: float, lead: float) -> tuple[bool, float] | None:
        """One share's deadline rounds: did one fit, and the shortest makespan, fitting or not
        (None: stop, out of time or nothing to hold)."""
        plan = held_gradients(problem, chain, base.placement, share, lead)
        if plan is None:
            return None
        ref, fitted, fastest = base, False, math.inf
        for r in range(WAIT_ROUNDS):
            if opts.out_of_time():
                return None
            need = need_times(problem, plan.placement, ref.start)
            need[feeders] = np.nextafter(need[feeders], np.inf)
            c0 = float(ref.start[chain[0][0]])
            for v, t in plan.due.items():
                need[v] = min(need[v], c0 + t)
            keep = kept_prefix(problem, ref, need, head, after_feeders)
            try:
                got = deadline_schedule(problem, plan.placement, need, stop=opts.out_of_time,
                                        waits=plan.waits + keep)
            except ValueError:  # a wait against the graph (not on a generated RNN)
                return None
            if got is None:
                return None
            ref = evaluate(problem, plan.placement, order=got[0], memory_model=model, waits=plan.waits)
            consider(f"held-{share:g}-lead-{lead:g}-{r + 1}", got[0], ref, plan.waits)
            fitted = fitted or ref.feasible(problem)
            fastest = min(fastest, ref.makespan)
        return fitted, fastest

    def held_rounds(base: Evaluation, chain: Chain) -> None:
        """Step 5, for each lead: the shares, the largest first, until one fits; then WAIT_BISECT
        bisection steps between it and the last one that did not (the 50K LSTM at K = 8, lead 0.05:
        0.7 fits, 0.85 is 1.12 x over; 0.775 over, 0.7375 and 0.7563 fit in one of their rounds: 516.60
        against 0.7's 521.03).
        Nothing more when the largest share, fitting or not, is no faster than ``base``."""
        for lead in WAIT_LEADS:
            over = None
            for share in WAIT_SHARES:
                got = held_share(base, chain, share, lead)
                if got is None:
                    return
                fitted, fastest = got
                if share == WAIT_SHARES[0] and fastest >= base.makespan:
                    return  # even every gradient held elsewhere is no faster: fewer would not be (K = 4 LSTMs)
                if fitted:
                    low, high = share, over
                    for _ in range(WAIT_BISECT):
                        if high is None:
                            break
                        mid = round((low + high) / 2, 4)
                        got = held_share(base, chain, mid, lead)
                        if got is None:
                            return
                        low, high = (mid, high) if got[0] else (low, mid)
                    break
                over = share

    def answer() -> Solution:
        """The best feasible schedule so far, or why there is none."""
        info = {"chains": len(chains), "chain_lengths": [int(c.size) for c, _ in chains], "tried": list(tried),
                "moved_params": list(moves), "free_shared": free_shared}
        if free_shared:
            info["freed_devices"] = freed_on
        if best is None:
            info["memory_over_capacity"] = least[0] if least is not None else None
            info["over_devices"] = [] if least is None else np.flatnonzero(least[1].memory > cap).tolist()
            over = f" (least: {least[0]:.4g} x capacity)" if least is not None else ""
            return unknown(f"no order tried fits the memory{over}", info)
        ev, order, waits = best
        if waits:
            info["waits"] = len(waits)
        return Solution(name, "heuristic", placement=ev.placement, order=order, start=ev.start, waits=waits,
                        objective=ev.makespan, seconds=time.monotonic() - t0, info=info)

    moves: list[dict] = []
    pl = sched.dev
    own = evaluate(problem, pl, order=sched.order, memory_model=model)
    consider("etf", sched.order, own, family="kept-1")  # ETF's own order keeps its forward pass too
    deadline_rounds(pl, own, "", kept=None)
    yield answer()  # the base: chain_pin may run the other way's before the rest of this one
    for share in KEPT_SHARES:  # until one fits: a smaller share keeps less of ETF's forward pass
        deadline_rounds(pl, own, "", kept=share)
        if fitted.get(f"kept-{share:g}"):
            break
    tries = 0
    for family in [f"kept-{x:g}" for x in KEPT_SHARES] + ["plain"]:  # the most kept first: the earliest loss
        if best is not None or model != "peak" or family not in least_of or least_of[family][0] > REPAIR \
                or opts.out_of_time() or (free_shared and tries):
            continue
        tries += 1  # freed (the extra way): one move only, and no memory-aware order (60 s at 200K nodes, K = 4)
        ev = least_of[family][1]
        sequence = schedule_order(problem, ev.start)  # the schedule's order, a topological one
        moved, done = move_params(problem, ev.placement, sequence, stop=opts.out_of_time)
        if done:
            moves += [{**m, "family": family} for m in done]
            moved, ref, followed = readers_follow(problem, ev, moved, sequence, head, model, pinned.allowed_mask())
            order = restricted(sequence, moved, problem.k)
            if followed:
                moves.append({"readers_followed": followed, "family": family})
            consider(f"moved-{family}", order, ref, family=family)
            deadline_rounds(moved, ref, "moved-", kept=None if family == "plain" else float(family[5:]))
    if best is None and model == "peak" and least is not None and least[0] <= REPAIR and not opts.out_of_time() \
            and not free_shared:
        got = lower_peak_order(problem, least[1].placement, fifo=None, stop=opts.out_of_time)
        fifo = got.evaluation
        consider(f"memory-order:{got.rule}",
                 got.order if got.order is not None else device_order(problem, fifo.placement, fifo.start),
                 got.evaluation)
    if best is not None and model == "peak" and opts.extra.get("chain_pin_waits", True):
        held_rounds(best[0], top)
    yield answer()
