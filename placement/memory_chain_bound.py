"""A lower bound for a chain whose big side inputs must wait in the chain device's memory (peak
model; issue 14, goal 1b on the unrolled LSTM).

Why: after the loss of the generated 10K LSTM the output layer's weight gradient is summed by a
chain of 94 nodes (0.8 ms each); each sum reads the previous sum and one gradient, all 131.2 MB.
A gradient made on another device is held, under the peak model, on the sum's device from the
moment it is made until its sum ends: a transfer (13.1 ms) and more. At 0.984 GB per device the
sum's device holds at most 5 gradients while a sum runs and 6 otherwise, so it cannot have the
13.1 ms transfers of many gradients in flight at once: it makes many of them itself (0.42 ms
each), and the chain runs slower than its 75 ms of work. The bounds without memory (and the memory
path bound, which looks at one path's own tensors) cannot see that.

The argument (docs/peak.md has it in full). Take a run c_i .. c_j of the chain on one device d,
W = [S(c_i), F(c_j)) its window, a feeder g (an input of c_k other than c_(k-1), with bytes s_g)
and C the largest capacity. In the peak model d holds g's tensor from F(g) (g elsewhere) or
S(g) (g on d) until F(c_k): at least h_R = comm(g, c_k) + t(c_k), or h_L = t(g) + t(c_k). At any
time of W, d holds the params of the run's nodes and of their colocation groups, and while c_k runs its output and its chain
input, otherwise some finished chain node's output (the next one reads it). So the feeder bytes
held on d are at most A_k = C - params - out(c_k) - out(c_(k-1)) while c_k runs and
A_idle = C - params - (smallest chain output of the run) otherwise; only the largest feeders are
counted (all of one size, leaving the others out only lowers the bound), so these rooms round
down to whole feeders (a node with t(c_k) = 0 runs over an empty interval: its A_k binds
nothing). The feeders alive at S(c_i) ("pre-held") of c_p and later, c_p the run's first node
with t > 0, are all held while c_p runs: at most A_p bytes; every other feeder is held entirely
inside W, and one made on d runs inside W. Hence, with lambda, rho, pi the fractions local,
remote and pre-held:
    |W| >= sum t(c_k) + sum lambda_g t(g)                                   (d's time)
    sum_g s_g (lambda_g h_L + rho_g h_R) <= sum_k A_k t(c_k) + A_idle (|W| - sum t(c_k))   (d's memory)
    sum_(g of c_p and later) pi_g s_g <= A_p
and the linear relaxation's minimum of |W| is a lower bound for the run (inf when a node with
t > 0 cannot run at all). A chain on several devices pays comm(c_(k-1), c_k) at each change: with no change
the whole chain is one run; with one change at k, two runs and that transfer; with two or more,
at least the chain's time and the two cheapest transfers. The smallest of these cases, plus the
head of c_1 and the tail of c_n, bounds the makespan.

The chain is the longest run of the given path whose links all carry at least half the largest
link's transfer (the running sum's), at least MIN_LENGTH nodes. Each run needs one small LP
(OR-Tools' GLOP); one change is tried at every position up to MAX_SPLITS nodes (longer chains
skip the one-change case's memory test: the chain's time and one transfer, still valid).
"""
from __future__ import annotations

import math

import numpy as np

from .problem import Problem

MIN_LENGTH = 4
MAX_SPLITS = 200


def heavy_run(problem: Problem, path: list[int]) -> list[int]:
    """The longest (by time) run of ``path`` whose links carry at least half the largest link's
    transfer; [] when shorter than MIN_LENGTH."""
    if len(path) < MIN_LENGTH:
        return []
    link = np.asarray([problem.comm_between(u, v) for u, v in zip(path, path[1:])])
    if link.max(initial=0.0) <= 0:
        return []
    heavy = link >= link.max() / 2
    best: list[int] = []
    best_t = -1.0
    i = 0
    while i < heavy.size:
        if not heavy[i]:
            i += 1
            continue
        j = i
        while j < heavy.size and heavy[j]:
            j += 1
        run = path[i:j + 1]  # links i .. j-1 join nodes i .. j
        t = float(problem.time[run].sum())
        if t > best_t:
            best, best_t = run, t
        i = j
    return best if len(best) >= MIN_LENGTH else []


class _Run:
    """The chain's nodes and feeders, for the LP of any run c_i .. c_j."""

    def __init__(self, problem: Problem, chain: list[int]) -> None:
        self.p = problem
        self.c = np.asarray(chain, dtype=np.int64)
        # the largest capacity as the evaluator applies it (its tolerance: check() accepts up to this)
        self.cap = float(problem.memory.max()) * (1 + 1e-12) + 1e-9
        on = set(chain)
        ptr, nbr, eid = problem.pred_ptr
        self.feeders: list[list[tuple[int, float]]] = []  # per chain node: (feeder, comm into it)
        seen: set[int] = set()
        for k, v in enumerate(chain):
            got = []
            for j in range(int(ptr[v]), int(ptr[v + 1])):
                u = int(nbr[j])
                if (k and u == chain[k - 1]) or u in on or u in seen or problem.out_bytes[u] <= 0:
                    continue  # a feeder feeding several chain nodes counts at its first (held at least until then)
                seen.add(u)
                got.append((u, float(problem.comm[eid[j]])))
            self.feeders.append(got)
        # Only the largest feeders count (leaving some out only lowers the bound): all of one size,
        # the room for them is rounded down to whole feeders.
        self.unit = max((float(problem.out_bytes[u]) for fs in self.feeders for u, _ in fs), default=0.0)
        self.feeders = [[(u, cm) for u, cm in fs if problem.out_bytes[u] == self.unit] for fs in self.feeders]
        # the chain input held while c_k runs (the run's first node's inputs are feeders)
        self.chain_in = np.r_[0.0, problem.out_bytes[self.c[:-1]]]

    def together(self, nodes: np.ndarray) -> np.ndarray:
        """``nodes`` and every node colocated with one of them (all on the same device)."""
        g = self.p.colocate[nodes]
        groups = [self.p.groups[x] for x in np.unique(g[g >= 0]).tolist()]
        return np.unique(np.concatenate([nodes, *groups])) if groups else nodes

    def _room(self, x: float) -> float:
        return math.floor(x / self.unit * (1 + 1e-12)) * self.unit if self.unit > 0 else x

    def window(self, i: int, j: int) -> float:
        """Lower bound on F(c_j) - S(c_i) when c_i .. c_j run on one device (inf: impossible)."""
        from ortools.linear_solver import pywraplp

        p, c = self.p, self.c[i:j + 1]
        t = p.time[c]
        tc = float(t.sum())
        params = float(p.param_bytes[self.together(c)].sum())
        held = p.out_bytes[c] + self.chain_in[i:j + 1]
        run_room = np.asarray([self._room(self.cap - params - h) for h in held.tolist()])
        # A node that takes no time holds its output and its input at no common moment ([S, F) is
        # empty): only nodes that run constrain the room, and they alone weigh in the integral.
        busy = np.flatnonzero(t > 0)
        if np.any(run_room[busy] < 0):
            return math.inf
        # Pre-held feeders are counted where the run's first busy node c_p starts: those of c_p and
        # later are all held then, beside its output and input (none when no node of the run is busy).
        first = i + int(busy[0]) if busy.size else j + 1
        pre_room = float(run_room[first - i]) if busy.size else 0.0
        run_room = np.where(t > 0, run_room, 0.0)
        smallest = float(p.out_bytes[c[:-1]].min()) if c.size > 1 else 0.0
        idle = self._room(self.cap - params - smallest)
        s = pywraplp.Solver.CreateSolver("GLOP")
        w = s.NumVar(tc, s.infinity(), "w")
        device = []
        memory = []
        pre = []
        for k in range(i, j + 1):
            tk = float(p.time[self.c[k]])
            for g, comm in self.feeders[k]:
                size = float(p.out_bytes[g])
                lam, rho, pi = (s.NumVar(0.0, 1.0, "") for _ in range(3))
                s.Add(lam + rho + pi == 1.0)
                device.append(lam * float(p.time[g]))
                memory.append(lam * (size * (float(p.time[g]) + tk)) + rho * (size * (comm + tk)))
                if k >= first:
                    pre.append(pi * size)
        if not device:
            return tc
        s.Add(w >= tc + sum(device))
        s.Add(sum(memory) <= float((run_room * t).sum()) + idle * (w - tc))
        if pre:
            s.Add(sum(pre) <= pre_room)
        s.Minimize(w)
        status = s.Solve()
        if status == pywraplp.Solver.INFEASIBLE:
            return math.inf
        if status != pywraplp.Solver.OPTIMAL:
            return tc  # no answer from the LP: the chain's time, still valid
        return max(tc, float(w.solution_value()) * (1 - 1e-9))


def memory_chain_bound(problem: Problem, path: list[int], head: np.ndarray, tail: np.ndarray) -> float:
    """The bound of the module docstring on the heavy run of ``path`` (0 when there is none), in
    the peak model with the problem's capacities."""
    chain = heavy_run(problem, path)
    if not chain or not np.isfinite(problem.memory).all():
        return 0.0
    run = _Run(problem, chain)
    n = len(chain)
    link = np.asarray([problem.comm_between(u, v) for u, v in zip(chain, chain[1:])])
    total = float(problem.time[chain].sum())
    one = run.window(0, n - 1)
    split = many = math.inf  # every case with a change costs the chain's time and a transfer at least
    if one > total + float(link.min()):
        many = total + float(np.sort(link)[:2].sum()) if link.size >= 2 else math.inf
        if n - 1 <= MAX_SPLITS:
            split = min(run.window(0, m - 1) + float(link[m - 1]) + run.window(m, n - 1) for m in range(1, n))
        else:
            split = total + float(link.min())
    value = min(one, split, many)
    if not np.isfinite(value):
        return 0.0  # no way to run the chain: infeasibility is bounds.infeasibility's business
    return float(head[chain[0]]) + value + float(tail[chain[-1]])

