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
   devices with the fewest param bytes.
3. ETF with unlimited memory on the problem so restricted: the other nodes where they finish first.
4. Orders, each measured by the evaluator: ETF's own, then ROUNDS deadline orders
   (heuristics.deadline_order, each round's schedule the next one's reference; a gradient loses a
   tie with the running sum it joins). If none fits and the least overflow is at most REPAIR:
   layer_bands' ``move_params`` (param units off the peak device) on the order with the least
   overflow and the deadline rounds again, then memory_order's ``lower_peak_order``. The feasible
   schedule with the smallest makespan.

No randomness: the same problem gives the same answer.
"""
from __future__ import annotations

import math
import time
from dataclasses import replace

import numpy as np

from placement.evaluator import Evaluation, evaluate
from placement.problem import Problem
from placement.solution import Solution, SolveOptions

from .deadline_order import deadline_order, need_times
from .layer_bands import move_params, restricted
from .list_scheduling import Stopped, etf_schedule
from .memory_order import lower_peak_order

MIN_FRACTION = 0.002  # a chain's tensors carry at least this fraction of the smallest capacity
MIN_LENGTH = 8  # an unrolled loop of a few steps at least; a CNN's residual sums give runs of 3
UNLIMITED_FRACTION = 0.5  # with unlimited memory: a chain's tensors carry at least this fraction of the largest one
ROUNDS = 3
# Parameter moves and memory_order's rules only when the best order is at most this much over:
# they mend small overflows (the 50K LSTM at K = 8: 1.047 -> 0.964 with one move) and cost up to
# 100 s at 200K nodes where nothing fits (1.4 x over at 1.11 x the memory bound).
REPAIR = 1.15

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


def chain_devices(problem: Problem, chains: list[Chain]) -> list[tuple[int, ...] | None]:
    """Allowed devices per node (module docstring, step 2)."""
    k = problem.k
    allowed = list(problem.allowed)
    work = [float(problem.time[c].sum()) + sum(float(problem.time[f].sum()) for f in fs if f) for c, fs in chains]
    load = np.zeros(k)
    busiest = None
    for i in sorted(range(len(chains)), key=lambda i: (-work[i], int(chains[i][0][0]))):
        d = int(np.argmin(load))
        load[d] += work[i]
        if busiest is None:
            busiest = d
            load[d] = math.inf
        path, fs = chains[i]
        for v in path.tolist() + [f for group in fs for f in group]:
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
        if any(allowed[v] is not None for v in vs):
            continue
        d = min(rest, key=lambda x: (held[x], x))
        held[d] += size[key]
        for v in vs:
            allowed[v] = (d,)
    return allowed


def fifo_order(ev: Evaluation, k: int) -> list[list[int]]:
    """The order each of the ``k`` devices ran in a schedule (by start time, then node index); a
    device with no node gets an empty list."""
    order: list[list[int]] = [[] for _ in range(k)]
    for v in np.lexsort((np.arange(ev.start.size), ev.start)).tolist():
        order[int(ev.placement[v])].append(v)
    return order


def chain_pin(problem: Problem, opts: SolveOptions) -> Solution:
    """``chain-pin`` (module docstring)."""
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
            return unknown("no weight-gradient accumulation chain in the graph")
    chains = accumulation_chains(problem, min_bytes)
    if not chains:
        return unknown("no weight-gradient accumulation chain in the graph")
    allowed = chain_devices(problem, chains)
    mask_ok = all(a is None or len(a) > 0 for a in allowed)
    pinned = replace(problem, allowed=allowed, memory=np.full(problem.k, math.inf))
    if not mask_ok or not pinned.allowed_mask().any(axis=1).all():
        return unknown("the chains' devices contradict the graph's device restrictions")
    try:
        sched = etf_schedule(pinned, 0.0, "static", stop=opts.out_of_time)
    except Stopped:
        return unknown("out of time")
    if sched.bad >= 0:
        return unknown(f"node {problem.ids[sched.bad]!r} has no allowed device")
    model = opts.memory_model
    cap = np.where(np.isfinite(problem.memory), problem.memory, np.inf)  # a device without a limit is never over
    tried: list[dict] = []
    best: tuple[Evaluation, list[list[int]]] | None = None
    least: tuple[float, Evaluation] | None = None

    def consider(rule: str, order: list[list[int]], ev: Evaluation) -> None:
        nonlocal best, least
        ok = ev.feasible(problem)
        over = float(np.max(ev.memory / cap))
        tried.append({"order": rule, "fits": ok, "makespan": ev.makespan, "memory_over_capacity": over})
        if least is None or over < least[0]:
            least = (over, ev)
        if ok and (best is None or ev.makespan < best[0].makespan):
            best = (ev, order)

    feeders = np.asarray(sorted({f for _, fs in chains for group in fs for f in group}), dtype=np.int64)

    def deadline_rounds(placement: np.ndarray, ref: Evaluation, tag: str) -> None:
        for r in range(ROUNDS):
            if opts.out_of_time():
                return
            need = need_times(problem, placement, ref.start)
            # a gradient needed when the running sum before it is loses the tie: the sum frees as
            # much as it makes, the gradient only adds
            need[feeders] = np.nextafter(need[feeders], np.inf)
            order = deadline_order(problem, placement, need, stop=opts.out_of_time)
            if order is None:
                return
            ref = evaluate(problem, placement, order=order, memory_model=model)
            consider(f"{tag}deadline-{r + 1}", order, ref)

    pl = sched.dev
    own = evaluate(problem, pl, order=sched.order, memory_model=model)
    consider("etf", sched.order, own)
    deadline_rounds(pl, own, "")
    moves: list[dict] = []
    if best is None and model == "peak" and least is not None and least[0] <= REPAIR and not opts.out_of_time():
        ev = least[1]
        sequence = np.lexsort((problem.topo_rank, ev.start))  # the schedule's order, a topological one
        moved, moves = move_params(problem, ev.placement, sequence, stop=opts.out_of_time)
        if moves:
            order = restricted(sequence, moved, problem.k)
            ref = evaluate(problem, moved, order=order, memory_model=model)
            consider("moved", order, ref)
            deadline_rounds(moved, ref, "moved-")
    if best is None and model == "peak" and least is not None and least[0] <= REPAIR and not opts.out_of_time():
        got = lower_peak_order(problem, least[1].placement, fifo=None, stop=opts.out_of_time)
        consider(f"memory-order:{got.rule}", got.order if got.order is not None else fifo_order(got.evaluation, problem.k),
                 got.evaluation)
    info = {"chains": len(chains), "chain_lengths": [int(c.size) for c, _ in chains], "tried": tried,
            "moved_params": moves}
    if best is None:
        info["memory_over_capacity"] = least[0] if least is not None else None
        over = f" (least: {least[0]:.4g} x capacity)" if least is not None else ""
        return unknown(f"no order tried fits the memory{over}", info)
    ev, order = best
    return Solution(name, "heuristic", placement=ev.placement, order=order, start=ev.start, objective=ev.makespan,
                    seconds=time.monotonic() - t0, info=info)
