"""Local search for the single-sample latency (Tarnawski et al. Section 4 model), q >= 1.

A split is one subgraph per (accelerator, slot) or a CPU for each atom (colocation group or node).
Moves: one boundary atom (an atom with a graph neighbour in another unit) goes to a neighbour's
subgraph, to a CPU, or to a fresh subgraph of an unused accelerator; or a boundary atom with its
small in-unit ancestor or descendant cone (up to 8 atoms) goes to a CPU or a neighbour's subgraph. Candidates are judged by
:class:`FastLatency`, which computes exactly what placement.objectives.evaluate_latency computes
but vectorised: the split is feasible iff memory and support hold and the quotient graph of units
(subgraphs, each CPU node alone, plus slot order) is acyclic - a non-contiguous subgraph S has a
path leaving S and re-entering it, i.e. a cycle through S in the quotient. Ties in latency are
broken by the sum of the units' finish times, so moves that shorten non-critical branches are
kept and the search can cross plateaus. Iterated local search: from each local optimum, a few
random feasible moves (seeded by ``seed``), then descent again; the best split is kept.
"""
from __future__ import annotations

import time

import numpy as np

from formulations.maxload.common import ip_data
from placement.objectives import cpu_time, node_bytes, supported, tensors, unit_finish_times
from placement.problem import Problem


class FastLatency:
    """Vectorised latency of a split given per atom (device, slot), device -1 = CPU."""

    def __init__(self, problem: Problem, q: int = 1):
        self.problem = problem
        self.q = q
        self.k = problem.k
        data = ip_data(problem, 0, keep_free=True)
        self.atom_of = data.atom_of
        self.na = len(data.atoms)
        self.src = problem.src.astype(np.int64)
        self.dst = problem.dst.astype(np.int64)
        self.ten = tensors(problem).of_edge.astype(np.int64)
        self.cost = tensors(problem).cost
        self.nt = int(self.cost.size)
        self.time = problem.time.astype(float)
        self.cpu = cpu_time(problem)
        self.bytes_atom = np.bincount(self.atom_of, weights=node_bytes(problem), minlength=self.na)
        self.acc_ok = np.bincount(self.atom_of, weights=(~supported(problem)).astype(float), minlength=self.na) < 0.5
        self.memory = problem.memory.astype(float)
        asrc, adst = self.atom_of[self.src], self.atom_of[self.dst]
        keep = asrc != adst
        pairs = np.unique(np.stack([asrc[keep], adst[keep]], 1), axis=0) if keep.any() else np.zeros((0, 2), np.int64)
        nbrs: list[set[int]] = [set() for _ in range(self.na)]
        self.apred: list[list[int]] = [[] for _ in range(self.na)]
        self.asucc: list[list[int]] = [[] for _ in range(self.na)]
        for a, b in pairs.tolist():
            nbrs[a].add(b)
            nbrs[b].add(a)
            self.apred[b].append(a)
            self.asucc[a].append(b)
        self.nbrs = [np.array(sorted(s), dtype=np.int64) for s in nbrs]
        self.evals = 0

    def memory_ok(self, dev: np.ndarray) -> bool:
        on = dev >= 0
        used = np.bincount(dev[on], weights=self.bytes_atom[on], minlength=self.k)
        return bool(np.all(used <= self.memory * (1 + 1e-12) + 1e-9))

    def evaluate(self, dev: np.ndarray, slot: np.ndarray) -> tuple[float, float]:
        """(latency, sum of unit finish times); (inf, inf) if infeasible. dev/slot per atom."""
        self.evals += 1
        if np.any((dev >= 0) & ~self.acc_ok) or not self.memory_ok(dev):
            return np.inf, np.inf
        q, k = self.q, self.k
        node_dev = dev[self.atom_of]
        node_slot = slot[self.atom_of]
        cpu_mask = node_dev < 0
        n_acc = k * q
        unit = np.where(cpu_mask, n_acc + np.cumsum(cpu_mask) - 1, node_dev * q + node_slot)
        nu = n_acc + int(cpu_mask.sum())
        cu, cv = unit[self.src], unit[self.dst]
        cross = cu != cv
        te, cu, cv = self.ten[cross], cu[cross], cv[cross]
        dur = np.zeros(nu)
        acc_nodes = ~cpu_mask
        dur[:n_acc] = np.bincount(unit[acc_nodes], weights=self.time[acc_nodes], minlength=n_acc)[:n_acc]
        dur[n_acc:] = self.cpu[cpu_mask]
        m_in = cv < n_acc
        if m_in.any():
            keys = np.unique(te[m_in] * nu + cv[m_in])
            dur += np.bincount(keys % nu, weights=self.cost[keys // nu], minlength=nu)
        m_out = cu < n_acc
        if m_out.any():
            keys = np.unique(te[m_out] * nu + cu[m_out])
            dur += np.bincount(keys % nu, weights=self.cost[keys // nu], minlength=nu)
        dep = np.unique(cu * nu + cv) if cu.size else np.zeros(0, np.int64)
        preds: list[list[int]] = [[] for _ in range(nu)]
        for key in dep.tolist():
            preds[key % nu].append(key // nu)
        used = np.zeros(nu, dtype=bool)
        used[unit] = True
        if q > 1:
            for d in range(k):
                prev = -1
                for s in range(q):
                    j = d * q + s
                    if used[j]:
                        if prev >= 0:
                            preds[j].append(prev)
                        prev = j
        finish = unit_finish_times(nu, preds, dur)
        if finish is None:
            return np.inf, np.inf
        fin = finish[used]
        return float(fin.max()), float(fin.sum())


def atoms_from_split(fl: FastLatency, split: np.ndarray, slot: np.ndarray | None, atoms: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    first = np.array([a[0] for a in atoms])
    dev = np.where(split[first] >= 0, split[first], -1).astype(np.int64)
    sl = np.zeros(fl.na, dtype=np.int64) if slot is None else np.asarray(slot)[first].astype(np.int64)
    sl = np.where(dev >= 0, np.minimum(sl, fl.q - 1), 0)
    return dev, sl


def latency_local_search(problem: Problem, split: np.ndarray, slot: np.ndarray | None = None, *, q: int = 1,
                         seed: int = 0, deadline: float | None = None, max_kicks: int = 10 ** 9,
                         kick_size: tuple[int, int] = (2, 6),
                         patience: int | None = None) -> tuple[np.ndarray, np.ndarray, float, dict]:
    """Iterated local search from a feasible split; returns (split, slot, latency, stats). Stops
    at ``deadline``, after ``max_kicks`` perturbations, or after ``patience`` (default
    max(30, 2 x atoms)) perturbations in a row without a better split; deterministic given
    ``seed`` when it stops on a count rather than the deadline."""
    fl = FastLatency(problem, q)
    data_atoms = ip_data(problem, 0, keep_free=True).atoms
    dev, sl = atoms_from_split(fl, np.asarray(split), slot, data_atoms)
    cur = fl.evaluate(dev, sl)
    if not np.isfinite(cur[0]):
        raise ValueError("latency local search needs a feasible starting split")
    rng = np.random.default_rng(seed)
    deadline = time.monotonic() + 30.0 if deadline is None else deadline
    best_dev, best_sl, best = dev.copy(), sl.copy(), cur
    patience = max(30, 2 * fl.na) if patience is None else patience
    kicks, since = 0, 0
    while True:
        dev, sl, cur = _descend(fl, dev, sl, cur, rng, deadline)
        since += 1
        if cur < best:
            best_dev, best_sl, best = dev.copy(), sl.copy(), cur
            since = 0
        if time.monotonic() >= deadline or kicks >= max_kicks or since > patience:
            break
        kicks += 1
        dev, sl = best_dev.copy(), best_sl.copy()
        for _ in range(int(rng.integers(kick_size[0], kick_size[1] + 1))):
            moves = _moves(fl, dev, sl)
            rng.shuffle(moves)
            for group, d, s in moves[:20]:
                od, os_ = dev[group].copy(), sl[group].copy()
                dev[group], sl[group] = d, s
                if np.isfinite(fl.evaluate(dev, sl)[0]):
                    break
                dev[group], sl[group] = od, os_
        cur = fl.evaluate(dev, sl)
    out_split = np.where(best_dev >= 0, best_dev, -1)[fl.atom_of]
    out_slot = best_sl[fl.atom_of]
    return out_split, out_slot, best[0], {"evals": fl.evals, "kicks": kicks, "timed_out": time.monotonic() >= deadline}


def _cone(fl: FastLatency, unit: np.ndarray, a: int, up: bool, limit: int = 8) -> list[int]:
    """a and its ancestors (up) or descendants within a's unit, if there are at most ``limit``."""
    nxt = fl.apred if up else fl.asucc
    seen, stack = {a}, [a]
    while stack:
        for b in nxt[stack.pop()]:
            if b not in seen and unit[b] == unit[a]:
                seen.add(b)
                if len(seen) > limit:
                    return []
                stack.append(b)
    return sorted(seen)


def _moves(fl: FastLatency, dev: np.ndarray, sl: np.ndarray) -> list[tuple[list[int], int, int]]:
    """(atoms, device, slot) moves: one boundary atom to a neighbour's subgraph, a CPU or an unused
    accelerator; and a boundary atom with its small in-unit ancestor (or descendant) cone to a CPU
    or to the neighbour's subgraph (a chain such as an attention-mask computation can only leave
    as a whole without first getting worse)."""
    unit = np.where(dev >= 0, dev * fl.q + sl, -1 - np.arange(fl.na))
    used_dev = set(dev[dev >= 0].tolist())
    free = [d for d in range(fl.k) if d not in used_dev]
    fresh = free[:1] if np.all(fl.memory == fl.memory[0]) else free
    out: list[tuple[list[int], int, int]] = []
    for a in range(fl.na):
        nb = fl.nbrs[a]
        if nb.size == 0:
            continue
        other = nb[unit[nb] != unit[a]]
        if other.size == 0:
            continue
        targets = set()
        nbr_units = set()
        if fl.acc_ok[a]:
            for b in other.tolist():
                if dev[b] >= 0:
                    nbr_units.add((int(dev[b]), int(sl[b])))
            targets |= nbr_units
            for d in fresh:
                targets.add((d, 0))
            if fl.q > 1 and dev[a] >= 0:
                for s in range(fl.q):
                    if s != sl[a]:
                        targets.add((int(dev[a]), s))
        if dev[a] >= 0:
            targets.add((-1, 0))
        targets.discard((int(dev[a]), int(sl[a])))
        out.extend(([a], d, s) for d, s in sorted(targets))
        if dev[a] >= 0:
            for up in (True, False):
                cone = _cone(fl, unit, a, up)
                if len(cone) > 1:
                    ok_acc = bool(fl.acc_ok[cone].all())
                    cone_targets = {(-1, 0)} | (nbr_units if ok_acc else set())
                    out.extend((cone, d, s) for d, s in sorted(cone_targets))
    return out


def _descend(fl: FastLatency, dev: np.ndarray, sl: np.ndarray, cur: tuple[float, float], rng: np.random.Generator,
             deadline: float) -> tuple[np.ndarray, np.ndarray, tuple[float, float]]:
    """First-improvement descent over atoms (in random order), best move per atom."""
    improved = True
    while improved and time.monotonic() < deadline:
        improved = False
        moves = _moves(fl, dev, sl)
        by_atom: dict[int, list[tuple[list[int], int, int]]] = {}
        for mv in moves:
            by_atom.setdefault(mv[0][0] if len(mv[0]) == 1 else -1 - len(by_atom), []).append(mv)
        order = list(by_atom)
        rng.shuffle(order)
        for key in order:
            if time.monotonic() >= deadline:
                break
            best_mv, best_v = None, cur
            for group, d, s in by_atom[key]:
                od, os_ = dev[group].copy(), sl[group].copy()
                if np.all(od == d) and np.all(os_ == s):
                    continue
                dev[group], sl[group] = d, s
                v = fl.evaluate(dev, sl)
                dev[group], sl[group] = od, os_
                if v < best_v:
                    best_mv, best_v = (group, d, s), v
            if best_mv is not None:
                group, d, s = best_mv
                dev[group], sl[group] = d, s
                cur = best_v
                improved = True
    return dev, sl, cur
