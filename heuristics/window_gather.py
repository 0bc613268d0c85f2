"""Window gathering: a placement's windows whose results are expensive to bring back are run
mostly on the chain's device (issue 16, the 200K CNN).

Why: on the generated CNN training graphs every backward block ends in a gradient sum
(``input/grad_sum``) that reads one full-size gradient from each of the block's paths (at 200K
nodes 48 paths, 102 MB each: 10.3 ms to move, where a path's backward takes 0.26 ms). The list
schedulers spread the paths over the devices and pay that transfer on the critical chain in every
block; refine moves one node or run at a time, and moving a few paths back to the sum's device
gains nothing while any path stays away. The bypass bound (placement/bypass_bound.py) charges each
such window the cheaper of "members on the chain's device" and "members away, a transfer out and
one back": this pass builds the first kind, block after block.

How, from any placement (:func:`find_windows`: steps 1-2, once per graph, stoppable between
its passes; :func:`gather_windows`: steps 3-5, per placement and factor):

1. The chain (the longest path by time) and its windows (placement/bypass_bound.py, ``reach``):
   the off-chain nodes with the same last chain ancestor p_a and first chain descendant p_b.
2. A window is *gathered* when the cheapest edge from its members into p_b costs more than the
   cheapest edge from p_a into them (its results are the expensive way to cross: the backward
   blocks; in the forward blocks the input is, and the window is left alone).
3. Runs of gathered windows (no other window starts in between, or only on a stretch of at most
   BRIDGE chain nodes, which then joins the run with its windows) put their chain nodes on one
   device D, D's static memory allowing (else the device with the most room takes over, from the
   window's cheapest chain edge on: the chain before it stays where it was). Each
   window's members are cut into units (connected pieces: a path); the largest go away, each to
   the other device with the least of the window's time so far, until they hold ``factor`` x the
   time that balances the two sides: D runs the rest, (1 - s) T of the window's time T; the
   K - 1 others s T / (K - 1) after the cheapest transfer in and before the cheapest out, m in
   all; equal at s T = (T - m) (K - 1) / K. The other units join D.
4. With ``light`` (session 18), the units that stay on D shed their *light pieces*: what is
   left of a unit without its anchored nodes (a member with an edge to or from the window's chain
   nodes or its own unit that costs more than L, the geometric mean of the window's cheapest
   edge in and cheapest edge out). In a backward block the anchored node is the path's last
   op, whose full-size gradient feeds the sum; the light piece is the path's small ops before
   it, which cross at the cheap rate both ways. Each goes to the other device with the least of
   the window's time so far, so D runs only the chain and the anchored ops. Then fewer whole
   units need to go away (a smaller ``factor``): D is no longer the window's bottleneck.
5. The weight gradients hanging off a gathered run's chain device (off-chain nodes with no chain
   descendant) go to the other devices with the least work: they only need to end by the end.

Colocated nodes and nodes not allowed on a device are never moved there. The result is a
placement only: the caller re-schedules it (solvers/reschedule.py) and judges it by the
evaluator, keeping it only when it is better. Deterministic.
"""
from __future__ import annotations

import bisect
import math
from collections import defaultdict
from dataclasses import dataclass
from typing import Callable

import numpy as np

from placement.bypass_bound import reach
from placement.memory_path_bound import best_path
from placement.pieces import connected_pieces
from placement.problem import Problem

FACTOR = 1.0  # times the balancing share of a window's time that goes away (docs/scale.md)
FILL = 0.97  # of a device's memory a gathered run may fill before another device takes over
# A window left alone between two gathered ones ends the run unless the chain between them is at
# most this many nodes: then that stretch of chain joins the run's device (the projection shortcut
# of a CNN's first block in a stage: 4 chain nodes; starting a new run there paid a full-size
# transfer on the chain, 10.3 of the 200K CNN's last backward block of 18.4).
BRIDGE = 8


@dataclass
class Windows:
    """What gathering needs of the graph, whatever the placement (:func:`find_windows`)."""
    chain: list[int]
    a: list[int]  # per node its window's first chain position (-1: none)
    units: dict[tuple[int, int], list[list[int]]]  # per gathered window (p_a, p_b) its units
    crossing: dict[tuple[int, int], float]  # per gathered window: cheapest edge in + cheapest out
    light: dict[tuple[int, int], list[list[list[int]]]]  # per gathered window, per unit: its light pieces
    gathered: list[tuple[int, int]]  # the windows to gather, in chain order
    others: list[int]  # the first chain positions of the windows left alone, sorted
    alone: dict[int, list[int]]  # per first chain position of windows left alone: their members
    ends: list[int]  # off-chain nodes with a chain ancestor and no chain descendant
    link: list[float]  # per chain position j > 0 the cost of the edge from chain[j - 1] (link[0] = 0)
    movable: np.ndarray  # (n, K): may the pass put node i on device d


def find_windows(problem: Problem, stop: Callable[[], bool] | None = None) -> Windows | None:
    """The chain, its windows and which of them to gather (module docstring, steps 1-2); None
    when ``stop`` says so between steps (about 1 s of Python at 200K nodes in all)."""
    n, k, t = problem.n, problem.k, problem.time
    halt = stop or (lambda: False)
    chain = best_path(problem, t, np.zeros(problem.m))
    L = len(chain)
    pos = [-1] * n
    for i, v in enumerate(chain):
        pos[v] = i
    if halt():
        return None
    a, _, _ = reach(problem, pos, reverse=False)
    if halt():
        return None
    b, _, _ = reach(problem, pos, reverse=True)
    if halt():
        return None
    ptr, nbr, eid = problem.succ_ptr
    ptr_l, nbr_l, comm_l = ptr.tolist(), nbr.tolist(), problem.comm[eid].tolist()
    movable = np.ones((n, k), dtype=bool) if not problem.has_allowed else problem.allowed_mask()
    for g in problem.groups:
        if len(g) > 1:
            movable[np.asarray(g)] = False
    windows: dict[tuple[int, int], list[int]] = defaultdict(list)
    ends: list[int] = []
    for u in range(n):
        if pos[u] >= 0 or a[u] < 0 or t[u] <= 0:
            continue
        if b[u] < L:
            windows[(a[u], b[u])].append(u)
        else:
            ends.append(u)

    def cheapest(srcs: list[int], dsts: set[int]) -> float:
        best = np.inf
        for u in srcs:
            for j in range(ptr_l[u], ptr_l[u + 1]):
                if nbr_l[j] in dsts:
                    best = min(best, comm_l[j])
        return best

    edges_in = {key: cheapest([chain[key[0]]], set(us)) for key, us in windows.items()}
    edges_out = {key: cheapest(us, {chain[key[1]]}) for key, us in windows.items()}
    gathered = sorted(key for key in windows if edges_out[key] > edges_in[key])
    succ = {u: nbr_l[ptr_l[u]:ptr_l[u + 1]] for key in gathered for u in windows[key]}
    units = {key: connected_pieces(windows[key], succ) for key in gathered}
    if halt():
        return None
    pptr, pnbr, peid = problem.pred_ptr
    pred_l, pcomm_l, pptr_l = pnbr.tolist(), problem.comm[peid].tolist(), pptr.tolist()
    light: dict[tuple[int, int], list[list[list[int]]]] = {}
    for key in gathered:
        limit = math.sqrt(edges_in[key] * edges_out[key])
        segment = set(chain[key[0]:key[1] + 1])
        light[key] = []
        for unit in units[key]:
            near = segment | set(unit)
            anchored = {u for u in unit if any(
                nbr_l[j] in near and comm_l[j] > limit for j in range(ptr_l[u], ptr_l[u + 1])) or any(
                pred_l[j] in near and pcomm_l[j] > limit for j in range(pptr_l[u], pptr_l[u + 1]))}
            rest = [u for u in unit if u not in anchored]
            light[key].append(connected_pieces(rest, succ) if anchored else [])
    alone: dict[int, list[int]] = defaultdict(list)  # windows left alone that start at one chain node merge
    for key, us in windows.items():
        if edges_out[key] <= edges_in[key]:
            alone[key[0]] += us
    link = [0.0] + [min((comm_l[j] for j in range(ptr_l[u], ptr_l[u + 1]) if nbr_l[j] == v), default=0.0)
                    for u, v in zip(chain, chain[1:])]
    return Windows(chain, a, units, {key: edges_in[key] + edges_out[key] for key in gathered}, light, gathered,
                   sorted(alone), alone, ends, link, movable)


def gather_windows(problem: Problem, placement: np.ndarray, factor: float = FACTOR, fill: float = FILL,
                   found: Windows | None = None, light: bool = False) -> np.ndarray:
    """``placement`` with its expensive-to-return windows gathered (module docstring); a copy.
    ``found``: :func:`find_windows` of ``problem``, when the caller has it already; ``light``: the
    units left on the chain's device shed their light pieces (step 4)."""
    pl = np.asarray(placement, dtype=np.int64).copy()
    k, t = problem.k, problem.time
    if problem.n == 0 or k < 2:
        return pl
    found = found or find_windows(problem)
    assert found is not None
    chain, a, gathered, others, movable = found.chain, found.a, found.gathered, found.others, found.movable
    L = len(chain)
    if not gathered:
        return pl
    w = problem.out_bytes + problem.param_bytes
    mem = np.bincount(pl, weights=w, minlength=k).astype(float)
    cap = problem.memory * fill

    def put(nodes: list[int], d: int) -> None:
        nodes = [u for u in nodes if pl[u] != d and movable[u, d]]
        if nodes:
            np.add.at(mem, pl[nodes], -w[nodes])
            pl[nodes] = d
            mem[d] += w[nodes].sum()

    j0, dev = gathered[0][0], int(pl[chain[gathered[0][0]]])
    chain_dev = np.full(L, -1)
    for lo, hi in gathered:
        i = bisect.bisect_left(others, j0)
        if i < len(others) and others[i] <= lo and lo - j0 > BRIDGE:  # a window left alone in between: a new run
            j0, dev = lo, int(pl[chain[lo]])
        units = found.units[(lo, hi)]
        total = sum(float(t[g].sum()) for g in units)
        # D runs the rest, (1 - s) T; the K - 1 others s T after a transfer in and before one out
        away_time = factor * max(0.0, total - found.crossing[(lo, hi)]) * (k - 1) / k
        away, home, got = [], [], 0.0
        pieces: list[list[int]] = []  # the light pieces of the units that stay
        for u, unit in sorted(enumerate(units), key=lambda x: (-float(t[x[1]].sum()), min(x[1]))):
            if got < away_time:
                away.append(unit)
                got += float(t[unit].sum())
            else:
                home.append(unit)
                if light:
                    pieces += found.light[(lo, hi)][u]
        shed = {u for g in pieces for u in g}  # they leave D, so D's room is not asked for them
        away += sorted(pieces, key=lambda g: (-float(t[g].sum()), min(g)))
        seg = [chain[j] for j in range(j0, hi + 1)]
        home_nodes = seg + [u for g in home for u in g if u not in shed]
        # windows left alone on a bridged stretch of chain (BRIDGE) join the run with it
        home_nodes += [u for x in others[bisect.bisect_left(others, j0):bisect.bisect_left(others, lo)]
                       for u in found.alone[x]]

        def room_needed(d: int) -> float:  # what moving the chain and home units to d adds there
            return float(w[[u for u in home_nodes if pl[u] != d]].sum())

        if mem[dev] + room_needed(dev) > cap[dev]:
            full, dev = dev, min(range(k), key=lambda d: (mem[d] - cap[d], d))  # the most room
            if mem[dev] + room_needed(dev) > cap[dev]:
                j0 = hi + 1  # no device has room: the window stays as it is
                continue
            # the run changes device at the window's cheapest chain edge, not at its first (in a
            # backward block that is a full-size gradient): the chain before it stays where it was
            cut = min(range(j0, hi + 1), key=lambda j: (found.link[j], j), default=j0)  # empty: an earlier window ended at hi
            before = [chain[j] for j in range(j0, cut) if pl[chain[j]] != full]
            if cut > j0 and mem[full] + float(w[before].sum()) <= problem.memory[full]:  # a few nodes: the hard limit
                put([chain[j] for j in range(j0, cut)], full)
                chain_dev[j0:cut] = full
                stays = set(chain[j0:cut])
                home_nodes = [u for u in home_nodes if u not in stays]
                j0 = cut
        put(home_nodes, dev)
        chain_dev[j0:hi + 1] = dev
        spent = [0.0] * k  # the window's time sent to each device so far
        for g in away:  # each to the other device with the least of it (then the most room) that fits
            fits = [x for x in range(k) if x != dev and mem[x] + float(w[[u for u in g if pl[u] != x]].sum()) <= cap[x]]
            if fits:
                x = min(fits, key=lambda x: (spent[x], mem[x] - cap[x], x))
                spent[x] += float(t[g].sum())
                put(g, x)
            elif g[0] in shed and mem[dev] + float(w[[u for u in g if pl[u] != dev]].sum()) <= cap[dev]:
                put(g, dev)  # a light piece no other device has room for stays with its unit
        j0 = hi + 1
    busy = np.bincount(pl, weights=t, minlength=k).astype(float)
    for u in found.ends:  # weight gradients off a gathered chain's device
        d0 = int(pl[u])
        if chain_dev[a[u]] != d0 or not movable[u].any():
            continue
        fits = [x for x in range(k) if x != d0 and movable[u, x] and mem[x] + w[u] <= cap[x]]
        if fits:
            x = min(fits, key=lambda x: (busy[x], x))
            busy[x] += t[u]
            busy[d0] -= t[u]
            put([u], x)
    return pl
