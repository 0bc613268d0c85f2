"""Memory heuristic I, part 2: the memory consumption tracker (PARDNN Eq. 2) and node potentials.

Given a placement and the emulated schedule (the evaluator's FIFO executor is the scheduler
emulator), this finds each device's peak memory, the time it is reached, and the *memory potential*
M_pot(n, t*) of every node at its device's peak time t*: what moving n away would free at t*, i.e.
n's parameters, n's output if n is running at t*, and the outputs of n's direct ancestors held on
n's device at t* for which n is the last consumer there (Table 2 of the paper).

The buffer intervals follow placement.evaluator.peak_memory exactly, so the peak found here equals
the evaluator's (tests check it); the evaluator itself only returns the values, not when they occur.
Under the static model memory does not depend on time: the potential of a node is its params +
output and the tracker reduces to sums.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from placement.problem import Problem


@dataclass
class MemoryState:
    """Per device: memory (bytes) under the model and the peak time (nan for static); per node:
    its memory potential at its device's peak time."""

    memory: np.ndarray
    peak_time: np.ndarray
    potential: np.ndarray


def static_state(problem: Problem, placement: np.ndarray) -> MemoryState:
    need = problem.param_bytes + problem.out_bytes
    mem = np.bincount(placement, weights=need, minlength=problem.k)
    return MemoryState(mem, np.full(problem.k, np.nan), need.copy())


def peak_state(problem: Problem, placement: np.ndarray, start: np.ndarray, finish: np.ndarray) -> MemoryState:
    """Eq. 2 peak per device, when it happens, and the potentials at that moment."""
    k, n = problem.k, problem.n
    params = np.bincount(placement, weights=problem.param_bytes, minlength=k)
    src, dst = problem.src, problem.dst
    dev_v = placement[dst]
    key = src * k + dev_v
    # last consumer of u on each device: sort edges by (key, finish of consumer)
    order = np.lexsort((finish[dst], key))
    skey = key[order]
    is_last = np.r_[skey[1:] != skey[:-1], True] if skey.size else np.zeros(0, dtype=bool)
    last_edge = order[is_last]
    uniq = skey[is_last]
    last = finish[dst[last_edge]]
    last_node = dst[last_edge]
    hold_u = uniq // k
    hold_d = uniq % k
    local = placement[hold_u] == hold_d
    hold_start = np.where(local, start[hold_u], finish[hold_u])
    hold_end = np.maximum(last, np.where(local, finish[hold_u], -np.inf))
    has_local = np.zeros(n, dtype=bool)
    has_local[hold_u[local]] = True
    run = np.flatnonzero(~has_local)
    dev = np.concatenate([hold_d, placement[run]])
    t0 = np.concatenate([hold_start, start[run]])
    t1 = np.concatenate([hold_end, finish[run]])
    size = np.concatenate([problem.out_bytes[hold_u], problem.out_bytes[run]])
    peak = params.copy()
    when = np.full(k, np.nan)
    keep = (t1 > t0) & (size > 0)
    if keep.any():
        d_, a_, b_, s_ = dev[keep], t0[keep], t1[keep], size[keep]
        ev_dev = np.concatenate([d_, d_])
        ev_t = np.concatenate([a_, b_])
        ev_delta = np.concatenate([s_, -s_])
        o = np.lexsort((ev_delta > 0, ev_t, ev_dev))
        ev_dev, ev_t, ev_delta = ev_dev[o], ev_t[o], ev_delta[o]
        running = np.cumsum(ev_delta)
        seg = np.flatnonzero(np.r_[True, ev_dev[1:] != ev_dev[:-1]])
        base = np.r_[0.0, running][seg]
        level = running - np.repeat(base, np.diff(np.r_[seg, ev_dev.size]))
        top = np.zeros(k)
        np.maximum.at(top, ev_dev, level)
        peak = params + top
        # first event reaching each device's top
        at_top = level >= top[ev_dev]
        idx = np.flatnonzero(at_top)
        first = np.unique(ev_dev[idx], return_index=True)
        when[first[0]] = ev_t[idx[first[1]]]
    # potentials at t* of each node's device
    pot = problem.param_bytes.copy()
    tstar = when[placement]
    own = (start <= tstar) & (tstar < finish)
    pot += np.where(own, problem.out_bytes, 0.0)
    # outputs held on d at t* whose last consumer there is the node
    th = when[hold_d]
    cover = (hold_start <= th) & (th < hold_end) & (hold_u != last_node)
    np.add.at(pot, last_node[cover], problem.out_bytes[hold_u[cover]])
    return MemoryState(peak, when, pot)
