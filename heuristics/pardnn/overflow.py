"""Memory heuristic I, part 3: the overflow handler, a greedy 0-1 min-knapsack (PARDNN Eq. 3).

For a device whose memory exceeds its usable capacity by O bytes, pick nodes to move away so that
their potentials a_j (memory freed) sum to at least O while their move costs c_j (Eq. 4: the node's
compute time plus its comm with neighbours on the same device, which a move would make real) stay
small. Two min-heaps as in the paper: ``nodes_heap`` keyed by c_j / a_j, and one keyed by c_j over
the nodes whose potential alone covers the overflow still left. Each pick pops the top of both,
keeps the one with the smaller move cost and puts the other back. After a move, the move costs of
the moved node's neighbours still on the device drop by their comm with it (Eq. 4 counts only
same-device comm), so the keys stay current. A node moves only to a device
that can hold its potential (the allowed device with room that it communicates with most; ties:
the most room); a node that fits nowhere is dropped. A colocation group moves as one unit. The
handler stops when the overflow is gone or no candidate is left.
"""
from __future__ import annotations

import heapq
from dataclasses import dataclass, field

import numpy as np

from placement.problem import Problem


@dataclass
class Units:
    """Movable units: each ungrouped node, and each colocation group as a whole."""

    of: np.ndarray  # unit index per node
    members: list[np.ndarray]
    mask: np.ndarray  # (units, K) allowed devices

    @classmethod
    def of_problem(cls, problem: Problem) -> "Units":
        n = problem.n
        of = np.arange(n, dtype=np.int64)
        grouped = problem.colocate >= 0
        of[grouped] = n + problem.colocate[grouped]
        used, of = np.unique(of, return_inverse=True)
        order = np.argsort(of, kind="stable")
        bounds = np.searchsorted(of[order], np.arange(used.size + 1))
        members = [order[bounds[u]:bounds[u + 1]] for u in range(used.size)]
        node_mask = problem.allowed_mask()
        mask = node_mask[[m[0] for m in members]] if members else np.zeros((0, problem.k), dtype=bool)
        return cls(of.astype(np.int64), members, mask)


def move_costs(problem: Problem, placement: np.ndarray, units: Units) -> np.ndarray:
    """Eq. 4 per unit: compute time + comm of edges to other units on the same device."""
    same = (placement[problem.src] == placement[problem.dst]) & (units.of[problem.src] != units.of[problem.dst])
    c = np.bincount(units.of, weights=problem.time, minlength=len(units.members))
    w = np.where(same, problem.comm, 0.0)
    c += np.bincount(units.of[problem.src], weights=w, minlength=c.size)
    c += np.bincount(units.of[problem.dst], weights=w, minlength=c.size)
    return c


def _comm_by_device(problem: Problem, placement: np.ndarray, nodes: np.ndarray) -> np.ndarray:
    sp, sn, se = problem.succ_ptr
    pp, pn, pe = problem.pred_ptr
    nb, ed = [], []
    for v in nodes.tolist():
        nb.append(sn[sp[v]:sp[v + 1]]); ed.append(se[sp[v]:sp[v + 1]])
        nb.append(pn[pp[v]:pp[v + 1]]); ed.append(pe[pp[v]:pp[v + 1]])
    nbr = np.concatenate(nb) if nb else np.zeros(0, dtype=np.int64)
    eid = np.concatenate(ed) if ed else np.zeros(0, dtype=np.int64)
    return np.bincount(placement[nbr], weights=problem.comm[eid], minlength=problem.k)


@dataclass
class OverflowResult:
    placement: np.ndarray
    moved: list[tuple[int, int, int]] = field(default_factory=list)  # (unit, from, to)
    left: np.ndarray | None = None  # overflow left per device


def handle_overflow(problem: Problem, placement: np.ndarray, units: Units, memory: np.ndarray,
                    potential: np.ndarray, capacity: np.ndarray, fits_size: np.ndarray | None = None) -> OverflowResult:
    """One pass of the handler over every overflowing device, in device order.

    ``memory``: current per-device memory; ``potential``: per node, bytes freed on its device by
    moving it (summed per unit); ``capacity``: usable bytes per device; ``fits_size``: per node,
    bytes the node needs on a target (defaults to its potential). Targets' memory grows by what they
    receive, so a move never makes a target overflow by this accounting.
    """
    pl = placement.copy()
    mem = memory.astype(float).copy()
    nu = len(units.members)
    a = np.bincount(units.of, weights=potential, minlength=nu)
    need = a if fits_size is None else np.bincount(units.of, weights=fits_size, minlength=nu)
    cost = move_costs(problem, pl, units)
    udev = pl[[m[0] for m in units.members]] if nu else np.zeros(0, dtype=np.int64)
    moved: list[tuple[int, int, int]] = []
    sp, sn, se = problem.succ_ptr
    pp, pn, pe = problem.pred_ptr
    for d in range(problem.k):
        over = mem[d] - capacity[d]
        if over <= 0:
            continue
        cand = np.flatnonzero((udev == d) & (a > 0) & units.mask[:, d] & (units.mask.sum(axis=1) > 1))
        if cand.size == 0:
            continue
        version = {int(u): 0 for u in cand}
        heap1 = [(float(cost[u] / a[u]), 0, int(u)) for u in cand]
        heapq.heapify(heap1)
        by_size = cand[np.argsort(-a[cand], kind="stable")].tolist()
        pos = 0
        heap2: list[tuple[float, int, int]] = []
        in_heap2: set[int] = set()
        taken: set[int] = set()

        def top(heap: list[tuple[float, int, int]], taken: set[int] = taken, version: dict[int, int] = version) -> int:
            """The best live entry of ``heap`` (stale versions and taken units dropped), or -1."""
            while heap and (heap[0][2] in taken or heap[0][1] != version[heap[0][2]]):
                heapq.heappop(heap)
            return heap[0][2] if heap else -1

        while over > 0:
            while pos < len(by_size) and a[by_size[pos]] > over:
                u = by_size[pos]
                if u not in taken:
                    heapq.heappush(heap2, (float(cost[u]), version[u], u))
                    in_heap2.add(u)
                pos += 1
            u1, u2 = top(heap1), top(heap2)
            if u1 < 0 and u2 < 0:
                break
            u = u2 if (u2 >= 0 and (u1 < 0 or cost[u2] <= cost[u1])) else u1
            taken.add(u)
            room = capacity - mem
            ok = units.mask[u] & (room >= need[u])
            ok[d] = False
            if not ok.any():
                continue
            members = units.members[u]
            cbd = _comm_by_device(problem, pl, members)
            score = np.where(ok, cbd, -np.inf)
            best = np.flatnonzero(score == score.max())
            t = int(best[np.argmax(room[best])])
            pl[members] = t
            udev[u] = t
            mem[d] -= a[u]
            mem[t] += need[u]
            over -= a[u]
            moved.append((int(u), d, t))
            # Eq. 4 stays current: a neighbour left on d no longer pays the comm to u if it moves
            for v in members.tolist():
                for nbr, eid in ((sn[sp[v]:sp[v + 1]], se[sp[v]:sp[v + 1]]), (pn[pp[v]:pp[v + 1]], pe[pp[v]:pp[v + 1]])):
                    for x, e in zip(nbr.tolist(), eid.tolist()):
                        w = int(units.of[x])
                        if w == u or w in taken or w not in version or pl[x] != d:
                            continue
                        cost[w] -= problem.comm[e]
                        version[w] += 1
                        heapq.heappush(heap1, (float(cost[w] / a[w]), version[w], w))
                        if w in in_heap2:
                            heapq.heappush(heap2, (float(cost[w]), version[w], w))
    return OverflowResult(pl, moved, np.maximum(mem - capacity, 0.0))
