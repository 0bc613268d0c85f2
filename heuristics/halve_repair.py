"""Half the devices with twice the memory, then each of them split in two (``halve-repair``), under
the peak memory model.

Why: mem-repair (heuristics/memory_repair.py) repairs ETF's unlimited-memory schedule by moving what
holds an over-capacity device's peak to devices with room, a batch at a time, each batch kept only
when it does not slow the makespan much. The more devices, the more of them ETF leaves idle: on the
imported 32K-operator LLaMA-style decoder (bench/real_models3.py ``gpt_deep_160``) at K = 8 and
1.3 x its peak-memory bound, ETF's schedule peaks at 3.3 x the capacity on one device while five
others stay under a third of it, and the repair stalls 3.2 x over; the warm start was min-memory's
207-250. On K = 4 devices with twice the capacity (the same memory in all) the same repair fits at
172.6, and that placement, each device split in two by layers, fits on the 8 devices at 174.5
(bench/results_peak.md, session 36).

How (:func:`halve_repair`):

1. Pair the devices (0, 1), (2, 3), ... and solve the problem on the K // 2 pairs, each with the two
   capacities together (and a node allowed on a pair when it is allowed on either device), by
   mem-repair, or from RECURSE_FROM pairs on by halve-repair itself (at K = 8 mem-repair stalls for
   the reason above). With an odd K the last device starts empty.
2. Split each pair's nodes by layer: band-repair's positions (heuristics/band_repair.py: a forward
   node at its topological rank, a backward node at the position of the parameters or the forward
   activations it reads, so a layer's backward goes with its forward, where its activations are),
   the first part to the pair's first device, the rest to its second. The cut is where the nodes'
   bytes (outputs and parameters), in position order, reach a share of the pair's total: each share
   of SHARES is tried on every pair at once, and each pair keeps the one whose larger peak over
   capacity is least (ties: nearest the first device's share of the pair's capacity). A colocation
   group goes where most of its members went; a node not allowed on its half goes to the other.
3. Each device runs its nodes in list-scheduling order by bottom level (the longest remaining path
   first), and mem-repair's repair fits what still overflows, in that order.

The answer is the evaluator's makespan on the order returned (FIFO when it also fits and is faster).
Deterministic: no randomness; ties go to the earlier share and the lower device.
"""
from __future__ import annotations

import time
from dataclasses import replace
from typing import Callable

import numpy as np

from placement.evaluator import evaluate, schedule_order
from placement.problem import Problem
from placement.solution import Solution, SolveOptions
from placement.split_bound import with_pivot

from .band_repair import positions
from .deadline_order import critical_order
from .layer_bands import loss_pivot
from .memory_repair import memory_repair, repair, repaired_solution
from .peak_holders import device_orders

RECURSE_FROM = 8  # pairs this many or more are themselves solved by halving (K = 16: 8 pairs of pairs of 4)
SHARES = (0.3, 0.35, 0.4, 0.45, 0.5, 0.55, 0.6, 0.65, 0.7)  # the first device's share of a pair's bytes


def paired(problem: Problem) -> Problem | None:
    """The problem on K // 2 devices, device d standing for the pair (2d, 2d + 1) with both
    capacities; None when some node may run only on the unpaired last device of an odd K."""
    half = problem.k // 2
    cap = np.asarray(problem.memory, dtype=float)
    allowed: list[tuple[int, ...] | None] = []
    for devs in problem.allowed:
        if devs is None:
            allowed.append(None)
            continue
        pairs = tuple(sorted({d // 2 for d in devs if d // 2 < half}))
        if not pairs:
            return None
        allowed.append(pairs)
    return replace(problem, allowed=allowed).with_devices(half, (cap[0:2 * half:2] + cap[1:2 * half:2]).tolist())


def split_pairs(problem: Problem, pair_of: np.ndarray, pos: np.ndarray, shares: list[float]) -> np.ndarray:
    """Device per node: each pair's nodes (``pair_of``) in order of ``pos``, the first ``shares[d]``
    of pair d's bytes on device 2d and the rest on 2d + 1 (module docstring, step 2)."""
    weight = problem.out_bytes + problem.param_bytes + 1.0  # + 1: zero-byte nodes still count
    dev = np.empty(problem.n, dtype=np.int64)
    for d, share in enumerate(shares):
        nodes = np.flatnonzero(pair_of == d)
        if nodes.size == 0:
            continue
        nodes = nodes[np.lexsort((nodes, pos[nodes]))]
        cum = np.cumsum(weight[nodes])
        dev[nodes] = 2 * d + 1
        dev[nodes[cum <= share * cum[-1]]] = 2 * d
    for members in problem.groups:
        if members.size:
            dev[members] = int(np.bincount(dev[members], minlength=problem.k).argmax())
    mask = problem.allowed_mask()
    wrong = np.flatnonzero(~mask[np.arange(problem.n), dev])
    dev[wrong] ^= 1  # the pair's other device: the pair is allowed, so this one is
    return dev


def best_shares(problem: Problem, pair_of: np.ndarray, pos: np.ndarray, sequence: np.ndarray,
                stop: Callable[[], bool]) -> list[float]:
    """Per pair, the share of SHARES whose split has the lower larger peak over capacity (each share
    tried on all pairs at once, each device in the order of ``sequence``), among those tried before
    ``stop()``."""
    half = problem.k // 2
    cap = np.asarray(problem.memory, dtype=float)
    centre = [cap[2 * d] / (cap[2 * d] + cap[2 * d + 1]) for d in range(half)]
    best: list[tuple[float, float, float]] = [(np.inf, np.inf, 0.5)] * half
    for share in SHARES:
        if stop():
            break
        dev = split_pairs(problem, pair_of, pos, [share] * half)
        ev = evaluate(problem, dev, order=device_orders(dev, sequence, problem.k), memory_model="peak")
        ratio = ev.peak_memory / cap
        for d in range(half):
            key = (float(max(ratio[2 * d], ratio[2 * d + 1])), abs(share - centre[d]), share)
            best[d] = min(best[d], key)
    return [b[2] for b in best]


def halve_repair(problem: Problem, opts: SolveOptions) -> Solution:
    """mem-repair on half the devices with twice the memory, each device then split in two by
    layers and repaired (module docstring)."""
    t0 = time.monotonic()

    def unknown(why: str, info: dict | None = None) -> Solution:
        return Solution("halve-repair", "unknown", reason=f"halve-repair: {why}", seconds=time.monotonic() - t0, info=info or {})

    if opts.memory_model != "peak":
        return unknown("built for the peak memory model (--memory-model peak)")
    if problem.k < 4:
        return unknown("needs 4 devices or more (two pairs)")
    half = paired(problem)
    if half is None:
        return unknown("a node may run only on the unpaired last device")
    pivot = loss_pivot(problem)
    if pivot is None:
        got = with_pivot(problem)
        if got is None:
            return unknown("no loss (pivot) to place layers by")
        pivot = got[1]
    stop = opts.out_of_time
    solve = halve_repair if half.k >= RECURSE_FROM else memory_repair
    first = solve(half, opts)
    info: dict = {"pairs": {"method": first.method, "status": first.status, "makespan": first.objective}}
    if first.placement is None:
        return unknown(f"the {half.k} pairs: {first.reason}", info)
    pos = positions(problem, pivot)
    pair_of = np.asarray(first.placement, dtype=np.int64)
    seq = schedule_order(half, first.start)
    shares = best_shares(problem, pair_of, pos, seq, stop)
    if stop():
        return unknown("out of time", info)
    dev = split_pairs(problem, pair_of, pos, shares)
    ev = evaluate(problem, dev, order=critical_order(problem, dev), memory_model="peak")
    seq = schedule_order(problem, ev.start)  # the order the repair keeps
    info.update(shares=shares, split={"makespan": ev.makespan, "memory_over_capacity": float(np.max(ev.peak_memory / problem.memory))})
    rep = repair(problem, dev, seq, stop=stop)
    info["steps"] = rep.steps
    if not rep.evaluation.feasible(problem):
        info["memory_over_capacity"] = float(np.max(rep.evaluation.peak_memory / problem.memory))
        return unknown("out of time" if stop() else "the split did not fit after the repair", info)
    return repaired_solution("halve-repair", problem, rep, stop, t0, info)
