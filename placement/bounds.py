"""Valid lower bounds on the optimal makespan, and proofs that memory cannot fit.

Every bound here holds for the original problem whatever the placement, so a gap computed against
it is honest:
- critical path: the longest path by compute time alone (comm can only add to it);
- load: total compute time / K (K devices work at most in parallel), and, for each colocation
  group, its total time (the group runs on one device);
- largest node: no node can be split;
- communication (placement/comm_bound.py): at every join, each input either pays its transfer or
  shares the consumer's device and runs one after another there (docs/scale.md);
- memory path (placement/memory_path_bound.py, given the memory model): a path whose nodes cannot
  all sit on one device within the capacity pays the transfers between its runs (docs/peak.md).
- bypass (placement/bypass_bound.py): work that leaves the critical chain and rejoins it either
  shares the chain's device, one piece at a time, or pays a transfer out and one back, added up
  along the chain (docs/scale.md);
- forced (placement/forced_bound.py): transfers too long to pay below a target force clusters of
  nodes onto one device, whose memory or one-at-a-time schedule then refutes the target
  (depends on the memory model; docs/scale.md).
- release (placement/release_bound.py): the consumers of a node whose output is slow to move run
  on its device one at a time or start a transfer late, and whatever needs many of them waits
  too: the work left after a time must still fit the K devices (docs/scale.md).
- energy (placement/energy_bound.py): the load bound from every time theta on: a node runs no
  earlier than its head, so the work left after theta needs theta + that work / K (and mirror-wise
  with the tails) (docs/scale.md).
- memory chain (placement/memory_chain_bound.py, peak model only): a chain's big side inputs made
  elsewhere wait in its device's memory for a whole transfer, so few can be in flight and the
  device makes the others itself (docs/peak.md).
- pivot (placement/split_bound.py): a node every other node precedes or follows (the loss) splits
  every schedule into two parts that cannot overlap; the bounds of the two parts add up
  (docs/scale.md).

Infeasibility (:func:`infeasibility`) is proved when a node or colocation group needs more memory
than any device it may use can hold, or when the memory every placement must use exceeds the total
capacity.
"""
from __future__ import annotations

import threading
from dataclasses import dataclass, replace

import numpy as np

from . import kernels
from .bypass_bound import chain_bound
from .comm_bound import heads
from .energy_bound import energy_bound
from .forced_bound import forced_bound
from .memory_chain_bound import memory_chain_bound
from .memory_path_bound import best_path, memory_path_bound
from .problem import Problem
from .release_bound import release_bound
from .split_bound import pivot_bound


@dataclass(frozen=True)
class LowerBounds:
    critical_path: float
    load: float
    largest_node: float
    largest_group: float
    communication: float = 0.0
    memory_path: float = 0.0
    forced: float = 0.0  # starts from the best of the others
    bypass: float = 0.0
    release: float = 0.0
    memory_chain: float = 0.0
    pivot: float = 0.0
    energy: float = 0.0

    @property
    def best(self) -> float:
        return max(self.critical_path, self.load, self.largest_node, self.largest_group, self.communication,
                   self.memory_path, self.forced, self.bypass, self.release, self.memory_chain, self.pivot, self.energy)

    def as_dict(self) -> dict[str, float]:
        return {"critical_path": self.critical_path, "load": self.load, "largest_node": self.largest_node,
                "largest_group": self.largest_group, "communication": self.communication,
                "memory_path": self.memory_path, "bypass": self.bypass, "release": self.release,
                "memory_chain": self.memory_chain, "forced": self.forced, "pivot": self.pivot, "energy": self.energy,
                "best": self.best}
        # forced starts from the others before it: listed after them, named only when above them


def bottom_levels(problem: Problem, delay: np.ndarray | None = None) -> np.ndarray:
    """Per node, the longest path from it (its time included) to a sink, edge j costing delay[j]
    (None: edges cost nothing)."""
    ptr, nbr, eid = problem.succ_ptr
    fast = kernels.for_size(problem.n)
    if fast is not None:
        delay_c = np.zeros(len(eid)) if delay is None else np.asarray(delay, dtype=float)[eid]
        return fast.bottom_levels(ptr, nbr, delay_c, problem.time, problem.topo_order)
    ptr_l, nbr_l = ptr.tolist(), nbr.tolist()
    delay_e = [0.0] * len(eid) if delay is None else np.asarray(delay, dtype=float)[eid].tolist()
    dur = problem.time.tolist()
    bl = [0.0] * problem.n
    for v in reversed(problem.topo_order.tolist()):
        best = 0.0
        for j in range(ptr_l[v], ptr_l[v + 1]):
            x = delay_e[j] + bl[nbr_l[j]]
            if x > best:
                best = x
        bl[v] = best + dur[v]
    return np.asarray(bl)


def longest_path(problem: Problem, weights: np.ndarray | None = None, edge_weights: np.ndarray | None = None) -> np.ndarray:
    """Per node, the largest total weight of a path ending at that node (node included).

    ``weights`` defaults to compute times; ``edge_weights`` (default none) are added along edges."""
    w = problem.time if weights is None else weights
    ew = np.zeros(problem.m) if edge_weights is None else edge_weights
    head = np.zeros(problem.n)
    ptr, nbr, eid = problem.pred_ptr
    ptr_l, nbr_l, eid_l, ew_l, w_l = ptr.tolist(), nbr.tolist(), eid.tolist(), ew.tolist(), w.tolist()
    head_l = head.tolist()
    for v in problem.topo_order.tolist():
        best = 0.0
        for j in range(ptr_l[v], ptr_l[v + 1]):
            cand = head_l[nbr_l[j]] + ew_l[eid_l[j]]
            if cand > best:
                best = cand
        head_l[v] = best + w_l[v]
    return np.asarray(head_l)


def lower_bounds(problem: Problem, memory_model: str | None = None, stop: threading.Event | None = None,
                 communication: bool = True, pivots: bool = True, *, memory_path: bool = True,
                 head: np.ndarray | None = None, tail: np.ndarray | None = None) -> LowerBounds:
    """Every bound of the module docstring. ``memory_model`` ("static" or "peak") says which
    capacity constraint holds: the memory path bound runs only when it is given (a static-model
    bound is not valid under the peak model), and the forced bound counts params only when it is
    not (valid in both models). The memory path bound is cut short once ``stop`` is set, and the
    bypass and forced bounds are left out (0) when it is set before them.
    ``communication=False`` leaves out the bounds built on communication heads and tails (the
    communication, bypass and forced bounds, a second or more at 200K nodes), e.g. to have a valid
    bound at once and those later. ``pivots=False`` leaves out the pivot bound (it bounds the two
    parts of the graph with this function, so it is left out there: no recursion), and
    ``memory_path=False`` the memory path bound (the parts skip it: seconds at 200K nodes).
    ``head``/``tail``: the communication bound's values when already known (a part before a
    pivot has the whole graph's heads, one after it its tails)."""
    if problem.n == 0:
        return LowerBounds(0.0, 0.0, 0.0, 0.0)
    groups = [float(problem.time[g].sum()) for g in problem.groups]
    if communication:
        head = heads(problem) if head is None else head
        tail = heads(problem, reverse=True) if tail is None else tail
    plain = LowerBounds(
        critical_path=float(longest_path(problem).max()),
        load=float(problem.time.sum()) / problem.k,
        largest_node=float(problem.time.max()),
        largest_group=max(groups, default=0.0),
        communication=float((head + problem.time + tail).max()) if communication else 0.0,
        memory_path=memory_path_bound(problem, memory_model, stop) if memory_model and memory_path else 0.0,
    )
    if not communication or (stop is not None and stop.is_set()):
        return plain
    chain = best_path(problem, problem.time, np.zeros(problem.m))
    plain = replace(plain, bypass=chain_bound(problem, chain, head, tail), release=release_bound(problem, head),
                    energy=energy_bound(problem, head, tail))
    if memory_model == "peak":
        plain = replace(plain, memory_chain=memory_chain_bound(problem, chain, head, tail))
    plain = replace(plain, forced=forced_bound(problem, memory_model or "peak", head, tail, floor=plain.best))
    if not pivots or (stop is not None and stop.is_set()):
        return plain
    def part(sub: Problem, nodes: np.ndarray, before: bool) -> float:
        """A part's bound, in the same memory model (its schedule holds no more than the whole
        one's), with the heads (before the pivot) or tails (after it) it shares with the whole."""
        known = {"head": head[nodes]} if before else {"tail": tail[nodes]}
        return lower_bounds(sub, memory_model, stop, pivots=False, memory_path=False, **known).best

    split = pivot_bound(problem, part, head, tail)
    if split <= plain.best * (1 + 1e-9):  # no better than the others (up to rounding): named after them
        split = min(split, plain.best)
    return replace(plain, pivot=split)


def makespan_lower_bound(problem: Problem, memory_model: str | None = None) -> float:
    """The best valid lower bound on the optimal makespan in ``memory_model`` (None, the default:
    only what holds in either model)."""
    return lower_bounds(problem, memory_model).best


def _units_need(problem: Problem, need: np.ndarray) -> list[tuple[str, float, np.ndarray]]:
    """(label, bytes, allowed-device mask) for each colocation group and each ungrouped node."""
    mask = problem.allowed_mask()
    out = [(f"colocation group {problem.colocate_names[g]!r}", float(need[members].sum()), mask[members[0]])
           for g, members in enumerate(problem.groups)]
    for v in np.flatnonzero(problem.colocate < 0).tolist():
        out.append((f"node {problem.ids[v]!r}", float(need[v]), mask[v]))
    return out


def infeasibility(problem: Problem, memory_model: str = "static") -> str | None:
    """A reason no placement can fit memory, or None if none is proved.

    Static model: a unit (node or colocation group) needs params + outputs on one device; all units
    together need the sum. Peak model: a device always holds the params of its nodes, and a node
    that runs (time > 0) holds its own output while running."""
    if memory_model == "static":
        need = problem.param_bytes + problem.out_bytes
        per_node_floor = need
    else:
        need = problem.param_bytes
        per_node_floor = problem.param_bytes + np.where(problem.time > 0, problem.out_bytes, 0.0)
    cap = problem.memory
    mask = problem.allowed_mask()
    room = np.where(mask, cap[None, :], 0.0).max(axis=1) if problem.n else np.zeros(0)
    bad = np.flatnonzero(per_node_floor > room)
    if bad.size:
        v = int(bad[0])
        return (f"node {problem.ids[v]!r} needs {per_node_floor[v]:.6g} bytes but the largest device it may use "
                f"holds {room[v]:.6g}")
    for label, size, ok in _units_need(problem, need):
        best = cap[ok].max() if ok.any() else 0.0
        if size > best:
            return f"{label} needs {size:.6g} bytes on one device but the largest device it may use holds {best:.6g}"
    total = float(need.sum())
    if total > float(cap.sum()):
        what = "params + outputs" if memory_model == "static" else "params"
        return f"all nodes together need {total:.6g} bytes ({what}) but the {problem.k} devices hold {float(cap.sum()):.6g} in total"
    return None
