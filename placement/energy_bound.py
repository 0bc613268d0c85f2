"""A lower bound from work that cannot run early (or late): the load bound taken from every time on.

Why: the load bound spreads all the work over the K devices from time 0, but a node cannot start
before its head (the longest way to it, transfers the communication bound charges included). In
a U-Net or any network whose first layers are a narrow chain, little of the work can run early,
and the devices idle there whatever the placement: an imported U-Net at K = 4 had a certified gap
of 10.9% with every bound at the critical path (0.965) while no answer went below 1.086; counted
from the right time on, the work needs 1.069.

The argument: fix a schedule with makespan M and a time theta. Node v starts at h_v or later, so at
most max(0, theta - h_v) of its time t_v runs before theta; the rest, at least
E(theta) = sum over v of min(t_v, max(0, h_v + t_v - theta)), runs after theta on the K devices,
one node at a time each: M >= theta + E(theta) / K whenever E(theta) > 0. Mirror-wise, with the
tails q_v (the least time from v's end to the makespan), read on the reversed schedule. Between
consecutive values of h_v and h_v + t_v the right side is linear in theta, so its largest value is
at one of them. No memory, placement or colocation enters: valid in both memory models, for any
K, with colocation and allowed devices (they only remove placements).

Computed in O(n log n): E(theta) = S(h + t, theta) - S(h, theta) with S(x, theta) the sum over
x_i > theta of (x_i - theta), read from sorted values and suffix sums at every breakpoint.
"""
from __future__ import annotations

import numpy as np

from .problem import Problem


def energy_bound(problem: Problem, head: np.ndarray, tail: np.ndarray) -> float:
    """max over theta of theta + E(theta) / K, from the heads and from the tails (the module
    docstring); ``head``/``tail`` are lower bounds on every node's start and on the time after its
    end (the communication bound's)."""
    if problem.n == 0:
        return 0.0
    t = np.asarray(problem.time, dtype=float)
    return max(_one_side(np.asarray(head, dtype=float), t, problem.k),
               _one_side(np.asarray(tail, dtype=float), t, problem.k))


def _above(x_sorted: np.ndarray, suffix: np.ndarray, theta: np.ndarray) -> np.ndarray:
    """sum over x_i > theta of (x_i - theta), for each theta (x sorted ascending, suffix[i] the sum
    of x_sorted[i:])."""
    i = np.searchsorted(x_sorted, theta, side="right")
    return suffix[i] - theta * (len(x_sorted) - i)


def _one_side(h: np.ndarray, t: np.ndarray, k: int) -> float:
    start, end = np.sort(h), np.sort(h + t)
    zero = np.zeros(1)
    s_start = np.concatenate([np.cumsum(start[::-1])[::-1], zero])
    s_end = np.concatenate([np.cumsum(end[::-1])[::-1], zero])
    theta = np.unique(np.concatenate([start, end, zero]))
    work = _above(end, s_end, theta) - _above(start, s_start, theta)
    keep = work > 1e-12 * max(1.0, float(t.sum()))
    if not keep.any():
        return 0.0
    return float((theta[keep] + work[keep] / k).max())
