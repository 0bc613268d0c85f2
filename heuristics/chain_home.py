"""``chain-home``: each weight-gradient accumulation chain on one device together with the weight
it updates, the longest chain's device kept for it once the chain has started, then ETF and a
critical-path order.

Why (bench/results_scale.md, session 13): on an unrolled RNN's training step the longest running
sum (the output layer's, ``acc_t = dW_t + acc_(t+1)``, one step per time step) is the critical
path after the loss, and its running sum carries the whole weight (131 MB on the generated LSTM,
13 ms over the link). Two things make a list scheduler lose 3-8% against it:
- the weight's update reads the chain's last sum: a weight kept on another device adds a whole
  transfer at the very end (ETF on the 50K LSTM at K = 16: the chain ends at 414.3, the update
  waits for the sum until 427.4);
- nodes put on the chain's device after the loss delay the chain (ETF with the weights beside their
  chains: the chain ran 330 ms of work in a 341.5 ms span).
chain-pin (heuristics/chain_pin.py) pins the chains' gradients (feeders) with them and moves the
params away, which fits memory; with room to spare these pins cost the LSTM at K >= 8 (the feeders
alone are more than the device's share of the work).

How:
1. ``accumulation_chains`` (chain-pin's step 1) with tensors of at least MIN_SHARE of the largest
   tensor; a chain's home group is the colocation group its last sum feeds (the weight and its
   update).
2. The longest chain (by its own work) on device 0 with its home group, the others longest first
   on the other devices with the least chain work, each with its home group.
3. Variants, each ETF (unlimited memory) on the problem so restricted, then ROUNDS critical-path
   orders (the longest path to a sink by the schedule's transfers first), each measured by the
   evaluator: (a) as above; (b) as (a) with the longest chain's device closed, from the chain's
   first start on, to every node that is neither the chain, its home group nor a gradient it sums
   (the device serves the chain once it starts; before, it takes forward work); (c) as (a) with
   the chain's gradients pinned with it (chain-pin's rule for the longest chain only).
   (b) runs only when the chain's work exceeds the device's share of the work after its start.
4. Where some weight is slow to copy (heuristics/exclusive.py), the best variant once more with its
   readers first on its device until a copy could arrive elsewhere (session 38: the generated 10K
   LSTMs' forward pass, where ETF filled the embedding's device with cells while the late steps'
   lookups waited: 111.85 -> 110.38 at K = 8, seed 7).
The feasible schedule with the smallest makespan; no randomness.

Device restrictions (``allowed``, colocation): a chain goes only to a device every node of it and
of its home group may use (the longest chain to the first such device, "device 0" above); a
gradient is pinned only where it may run. A chain no single device admits is left to ETF; the
longest one so gives up ("unknown"), as the member is built around its device.
"""
from __future__ import annotations

import math
import time
from dataclasses import replace

import numpy as np

from placement.evaluator import Evaluation, evaluate
from placement.problem import Problem
from placement.solution import Solution, SolveOptions

from .chain_pin import Chain, accumulation_chains, descendants
from .deadline_order import critical_order
from .exclusive import Exclusive, exclusive_sources
from .list_scheduling import Stopped, etf_schedule

MIN_SHARE = 0.1  # a chain's tensors carry at least this share of the largest tensor (every layer's weight on the LSTM)
ROUNDS = 2


def home_groups(problem: Problem, chains: list[Chain]) -> list[list[int]]:
    """Per chain, the members of the colocation groups its last sum feeds (the weight it updates)."""
    ptr, nbr, _ = problem.succ_ptr
    out = []
    for path, _ in chains:
        last = int(path[-1])
        groups = sorted({int(problem.colocate[u]) for u in nbr[ptr[last]:ptr[last + 1]].tolist()
                         if problem.colocate[u] >= 0})
        out.append([int(v) for g in groups for v in problem.groups[g].tolist()])
    return out


def ancestors(problem: Problem, head: int) -> np.ndarray:
    """Mask of the nodes ``head`` is reachable from (itself included)."""
    return descendants(problem, np.asarray([head], dtype=np.int64), upward=True)


def chain_home(problem: Problem, opts: SolveOptions) -> Solution:
    """``chain-home`` (module docstring)."""
    t0 = time.monotonic()
    name = "chain-home"

    def unknown(why: str) -> Solution:
        return Solution(name, "unknown", reason=f"{name}: {why}", seconds=time.monotonic() - t0)

    k = problem.k
    biggest = float(problem.out_bytes.max(initial=0.0))
    chains = accumulation_chains(problem, MIN_SHARE * biggest) if biggest > 0 and k >= 2 else []
    if k < 2:
        return unknown("one device: nothing to place")
    if not chains:
        # chains of smaller tensors may exist (an unrolled GRU's, beside 204.8 MB of logits): say
        # which were looked for
        return unknown(f"no weight-gradient accumulation chain with tensors of {MIN_SHARE * biggest:.4g} bytes "
                       f"or more ({MIN_SHARE:g} x the largest tensor)")
    homes = home_groups(problem, chains)
    work = [float(problem.time[c].sum()) for c, _ in chains]
    rank = sorted(range(len(chains)), key=lambda i: (-work[i], int(chains[i][0][0])))
    top = rank[0]
    mask = problem.allowed_mask()  # allowed devices, joint over colocation groups
    # The devices each chain may sit on whole, with its home group.
    fits = [mask[np.concatenate([chains[i][0], np.asarray(homes[i], dtype=np.int64)])].all(axis=0) for i in range(len(chains))]
    if not fits[top].any():
        return unknown("device restrictions keep the longest chain and its weight off every single device")
    own = int(np.argmax(fits[top]))  # the longest chain's device ("device 0" of the module docstring)
    pin = np.full(problem.n, -1, dtype=np.int64)
    load = np.zeros(k)
    load[own] = math.inf
    for i in rank:
        if i == top:
            d = own
        elif fits[i].any():
            can = np.flatnonzero(fits[i])
            d = int(can[np.argmin(load[can])])  # the longest chain's device only if no other takes it
            load[d] += work[i]
        else:
            continue  # no device takes the chain whole: ETF places it
        pin[chains[i][0]] = d
        pin[homes[i]] = d
    path, feeders = chains[top]
    feed = np.asarray([f for group in feeders for f in group], dtype=np.int64)
    # The gradients the chain sums first: made elsewhere, each would arrive a transfer later than
    # the chain can use it (the chain has nothing else to sum yet).
    send = float(problem.comm[np.isin(problem.src, feed)].max(initial=0.0)) if feed.size else 0.0
    # Made on the chain's device, each costs the chain its own time too: a step there takes a sum and a gradient.
    step = float(problem.time[path].mean()) + (float(problem.time[feed].sum()) / len(feeders) if feed.size else 0.0)
    lead = min(len(feeders), int(math.ceil(send / max(step, 1e-12))) + 1)
    first = np.asarray([f for group in feeders[:lead] for f in group], dtype=np.int64)
    pin[first[mask[first, own]]] = own  # only where they may run
    after = ~ancestors(problem, int(path[0]))
    share = float(problem.time[after].sum()) / k
    variants = [("home", pin, None)]
    if work[top] > share:
        variants.append(("home-closed", pin, after))
    fed = pin.copy()
    if feed.size:
        fed[feed[mask[feed, own]]] = own
    variants.append(("home-fed", fed, None))

    best: Evaluation | None = None
    best_order: list[list[int]] | None = None
    best_variant: tuple | None = None
    tried: list[dict] = []

    def attempt(label: str, pins: np.ndarray, closed: np.ndarray | None, first: Exclusive | None) -> bool:
        """Run one variant; False when out of time."""
        nonlocal best, best_order, best_variant
        allowed = [(int(pins[v]),) if pins[v] >= 0 else problem.allowed[v] for v in range(problem.n)]
        if closed is not None:
            others = tuple(d for d in range(k) if d != own)
            keep = np.zeros(problem.n, dtype=bool)
            keep[path] = True
            keep[feed] = True
            keep[homes[top]] = True
            for v in np.flatnonzero(closed & ~keep).tolist():
                a = allowed[v]  # the other chains' pins stay
                allowed[v] = others if a is None else tuple(d for d in a if d != own)
        if any(a is not None and len(a) == 0 for a in allowed):
            tried.append({"variant": label, "makespan": None, "why": "device restrictions"})
            return True
        pinned = replace(problem, allowed=allowed, memory=np.full(k, math.inf))
        try:
            sched = etf_schedule(pinned, 0.0, "static", stop=opts.out_of_time, first=first)
        except Stopped:
            return False
        if sched.bad >= 0:
            return True
        orders = [("etf", sched.order)]
        for r in range(ROUNDS):
            if opts.out_of_time():
                break
            got = critical_order(problem, sched.dev, opts.out_of_time) if r == 0 else None
            if got is None:
                break
            orders.append((f"critical-{r + 1}", got))
        for rule, order in orders:
            ev = evaluate(problem, sched.dev, order=order, memory_model=opts.memory_model)
            ok = ev.feasible(problem)
            tried.append({"variant": label, "order": rule, "makespan": ev.makespan, "fits": ok})
            if ok and (best is None or ev.makespan < best.makespan):
                best, best_order, best_variant = ev, order, (label, pins, closed)
        return True

    for label, pins, closed in variants:
        if opts.out_of_time() or not attempt(label, pins, closed, None):
            break
    sources = exclusive_sources(problem)
    if best_variant is not None and sources and not opts.out_of_time():
        label, pins, closed = best_variant
        attempt(f"{label}+readers-first", pins, closed, Exclusive(sources))
    if best is None:
        return Solution(name, "unknown", reason=f"{name}: no variant fits memory or time", seconds=time.monotonic() - t0,
                        info={"tried": tried})
    return Solution(name, "heuristic", placement=best.placement, order=best_order, start=best.start,
                    objective=best.makespan, seconds=time.monotonic() - t0, info={"tried": tried})
