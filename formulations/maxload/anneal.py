"""Simulated annealing on non-contiguous max-load splits, with incrementally updated loads.

Why: the CP-SAT sub-solves of lns.py move atoms only inside a few devices holding the bottleneck;
on op BERT-12 inference they stall 3% above the published value. Annealing moves *blocks* (an atom
and up to ``max_block - 1`` atoms reached from it through tensors, all on its device) to another
device and accepts worsening moves with the Metropolis rule, so it can cross the plateaus of the
max-load objective.

Load model (the same as placement.objectives.evaluate_maxload, on atoms as in common.IPData): a
tensor t with member atoms M_t (producer and consumers) on the device set S_t costs ``cost_t`` to
every accelerator of S_t when |S_t| >= 2 and nothing otherwise (CPU cores pay no transfers). Each
tensor keeps a count of its members per device, so moving one atom updates the loads in time
proportional to the number of tensors it belongs to.

Search objective: the power mean (sum_i L_i^q)^(1/q) over all devices (q = ``power``), a smooth
stand-in for the max-load that still rewards lowering the second-highest devices; the best split is
kept by (max-load, sum of squared loads). Memory capacities and accelerator support are hard: moves
breaking them are never made. Deterministic given the seed (a fixed number of iterations; the
wall-clock deadline can only stop it earlier). The returned split is re-evaluated by the caller.
"""
from __future__ import annotations

import math
import time

import numpy as np

from .common import IPData


class LoadState:
    """Per-device loads of an atom assignment, updated in place by single-atom moves."""

    def __init__(self, data: IPData, atom_dev: np.ndarray):
        self.k, self.nd = data.k, data.k + data.l
        na = len(data.atoms)
        acc = np.where(np.isfinite(data.acc_time), data.acc_time, 0.0)
        self.acc_t = acc.tolist()
        self.cpu_t = (data.cpu_fw + data.cpu_bw).tolist()
        self.size = data.nbytes.tolist()
        self.allowed = data.allowed_acc.tolist()
        self.cost = list(data.t_cost)
        self.members = [[p] + list(c) for p, c in zip(data.t_prod, data.t_cons)]
        self.tens_of: list[list[int]] = [[] for _ in range(na)]
        for t, mem in enumerate(self.members):
            for a in mem:
                self.tens_of[a].append(t)
        link: list[dict[int, float]] = [{} for _ in range(na)]
        for t, mem in enumerate(self.members):
            for a in mem:
                for b in mem:
                    if b != a and link[a].get(b, -1.0) < self.cost[t]:
                        link[a][b] = self.cost[t]
        self.link = link  # per atom: neighbour atom -> most expensive tensor they share
        self.nbr: list[list[int]] = [sorted(lk, key=lambda b: (-lk[b], b)) for lk in link]
        self.reset(atom_dev)

    def reset(self, atom_dev: np.ndarray) -> None:
        k, nd = self.k, self.nd
        self.dev = [int(d) for d in atom_dev]
        self.load = [0.0] * nd
        self.mem = [0.0] * k
        for a, d in enumerate(self.dev):
            if d < k:
                self.load[d] += self.acc_t[a]
                self.mem[d] += self.size[a]
            else:
                self.load[d] += self.cpu_t[a]
        self.cnt = [[0] * nd for _ in self.members]
        self.ndist = [0] * len(self.members)
        for t, mem in enumerate(self.members):
            c = self.cnt[t]
            for a in mem:
                c[self.dev[a]] += 1
            self.ndist[t] = sum(1 for x in c if x)
            if self.ndist[t] >= 2:
                for i in range(k):
                    if c[i]:
                        self.load[i] += self.cost[t]

    def move(self, a: int, d2: int) -> None:
        """Move atom a to device d2 (no feasibility check)."""
        k, load = self.k, self.load
        d1 = self.dev[a]
        if d1 == d2:
            return
        if d1 < k:
            load[d1] -= self.acc_t[a]
            self.mem[d1] -= self.size[a]
        else:
            load[d1] -= self.cpu_t[a]
        if d2 < k:
            load[d2] += self.acc_t[a]
            self.mem[d2] += self.size[a]
        else:
            load[d2] += self.cpu_t[a]
        self.dev[a] = d2
        for t in self.tens_of[a]:
            c = self.cnt[t]
            cost = self.cost[t]
            nb = self.ndist[t]
            c[d1] -= 1
            c[d2] += 1
            gone, new = c[d1] == 0, c[d2] == 1
            na_ = nb - gone + new
            self.ndist[t] = na_
            if nb >= 2 and na_ >= 2:
                if gone and d1 < k:
                    load[d1] -= cost
                if new and d2 < k:
                    load[d2] += cost
            elif nb == 1 and na_ >= 2:  # was all on d1, now split over d1 and d2
                if d1 < k:
                    load[d1] += cost
                if d2 < k:
                    load[d2] += cost
            elif nb >= 2 and na_ == 1:  # was on d1 and d2 only, now all on d2
                if d1 < k:
                    load[d1] -= cost
                if d2 < k:
                    load[d2] -= cost

    def fits(self, a: int, d2: int, capacity: list[float]) -> bool:
        if d2 >= self.k:
            return True
        return self.allowed[a] and self.mem[d2] + self.size[a] <= capacity[d2]


def anneal(data: IPData, capacity: np.ndarray, atom_dev: np.ndarray, iters: int, deadline: float, seed: int = 0,
           t_start: float = 5.0, t_end: float = 0.05, power: float = 64.0, max_block: int = 20,
           state: LoadState | None = None) -> tuple[np.ndarray, dict]:
    """Anneal from ``atom_dev`` (device per atom, CPU cores k..k+l-1) for ``iters`` block moves (or
    until ``deadline``); temperatures are relative to the start's max-load and fall geometrically
    from ``t_start`` to ``t_end`` percent of it. Returns the best assignment seen and counters."""
    st = state or LoadState(data, atom_dev)
    if state is not None:
        st.reset(atom_dev)
    rng = np.random.default_rng(seed)
    cap = [float(c) * (1 + 1e-12) + 1e-9 for c in capacity]
    k, nd, na = st.k, st.nd, len(st.dev)
    load = st.load

    def pmean() -> float:
        m = max(load)
        return m * sum((x / m) ** power for x in load) ** (1.0 / power) if m > 0 else 0.0

    def key() -> tuple[float, float]:
        return max(load), sum(x * x for x in load)

    base = max(load)
    best_key, best_dev = key(), list(st.dev)
    cur = pmean()
    t0, t1 = t_start * base / 100.0, t_end * base / 100.0
    stats = {"iters": 0, "accepted": 0, "improved": 0, "start": best_key[0], "best_at": time.monotonic()}
    # pre-drawn randomness (one batch per 4096 iterations keeps numpy overhead low)
    batch = 4096
    moved: list[tuple[int, int]] = []
    for it in range(iters):
        if it % batch == 0:
            if time.monotonic() > deadline:
                break
            r_atom = rng.integers(0, na, batch).tolist()
            r_dev = rng.integers(0, nd, batch).tolist()
            r_size = rng.geometric(0.35, batch).tolist()
            r_acc = rng.random(batch).tolist()
            r_pick = rng.random(batch).tolist()
            r_u = rng.random(batch).tolist()
            r_big = rng.random(batch).tolist()
            r_grow = rng.integers(0, 1 << 30, batch).tolist()
        j = it % batch
        temp = t0 * (t1 / t0) ** (it / max(1, iters - 1))
        # start atom: half the time one on the most loaded device
        a = r_atom[j]
        if r_pick[j] < 0.5:
            top = load.index(max(load))
            a0 = a
            while st.dev[a] != top:
                a = (a + 7919) % na
                if a == a0:
                    break
        d1 = st.dev[a]
        # target: a device one of a's neighbours is on (or any device, 1 time in 4)
        nb = st.nbr[a]
        d2 = r_dev[j]
        if nb and r_acc[j] < 0.75:
            d2 = st.dev[nb[r_grow[j] % len(nb)]]
        if d2 == d1:
            continue
        size = min(r_size[j], max_block) if r_big[j] >= 0.15 else 1 + r_grow[j] % max_block
        block = _grow(st, a, d1, size, r_grow[j])
        moved.clear()
        ok = True
        for b in block:
            if not st.fits(b, d2, cap):
                ok = False
                break
            st.move(b, d2)
            moved.append((b, d1))
        new = pmean() if ok else math.inf
        delta = new - cur
        if ok and (delta <= 0 or r_u[j] < math.exp(-delta / temp)):
            cur = new
            stats["accepted"] += 1
            if max(load) <= best_key[0] + 1e-9:
                kk = key()
                if kk[0] < best_key[0] - 1e-9 or kk[1] < best_key[1] - 1e-9:
                    best_key, best_dev = kk, list(st.dev)
                    stats["improved"] += 1
                    stats["best_at"] = time.monotonic()
        else:
            for b, d in reversed(moved):
                st.move(b, d)
        stats["iters"] = it + 1
    stats["end"] = best_key[0]
    return np.array(best_dev, dtype=np.int64), stats


def _grow(st: LoadState, a: int, d1: int, size: int, g: int) -> list[int]:
    """A block of up to ``size`` atoms of device d1 holding ``a``: repeatedly add the outside
    neighbour joined to the block by the most expensive tensor (ties broken by ``g``), so that the
    block keeps the expensive tensors inside."""
    block = [a]
    cand: dict[int, float] = {}
    inside = {a}
    while len(block) < size:
        for b in st.nbr[block[-1]]:
            if b not in inside and st.dev[b] == d1:
                w = st.link[block[-1]][b]
                if cand.get(b, -1.0) < w:
                    cand[b] = w
        if not cand:
            break
        top = max(cand.values())
        ties = [b for b, w in cand.items() if w >= top - 1e-12]
        b = ties[g % len(ties)] if len(ties) > 1 else ties[0]
        g = (g * 1103515245 + 12345) & 0x3FFFFFFF
        del cand[b]
        inside.add(b)
        block.append(b)
    return block
