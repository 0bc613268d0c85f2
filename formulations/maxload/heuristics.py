"""Baselines of Tarnawski et al. (Section 6) for the max-load objective.

- ``local-search`` ([MKA07]): from a random split, repeatedly make the best single-unit move
  (lexicographic: memory overflow, max-load, sum of squared loads) until none improves;
  10 restarts (``opts.extra['restarts']``), deterministic given ``opts.seed``. Non-contiguous.
- ``pipedream``: PipeDream's optimiser needs a path, so every branching region of the unit DAG is
  contracted into one block (blocks end where a single unit carries every edge across the
  topological cut, not counting broadcast units with fan-out above 2), then the DP runs on that
  path (costs still those of the original graph).
- ``expert``: a hand-made split (``solve --split FILE``; ``opts.extra['split']`` or
  ``opts.extra['split_file']``; JSON: a list of devices by node index, or an object node id ->
  device; CPU core c as -1 - c), evaluated.
"""
from __future__ import annotations

import json
import time
from pathlib import Path

import numpy as np

from placement.objectives import as_split, evaluate_maxload, max_cpus
from placement.problem import Problem
from placement.solution import Solution, SolveOptions

from .common import canonical_devices, ip_data, split_from_atoms
from .dp import finish_solution, solve_dp
from .preprocess import Units, build_units


# ----------------------------------------------------------------------------------------------
# local search (max-load)
# ----------------------------------------------------------------------------------------------
class _LoadState:
    """Loads of a split over atoms (colocation groups or single nodes), updated move by move."""

    def __init__(self, problem: Problem, n_cpus: int):
        self.data = d = ip_data(problem, n_cpus)
        self.k, self.nd = d.k, d.k + d.l
        na = len(d.atoms)
        self.na = na
        self.acc = np.where(d.allowed_acc, d.acc_time, np.inf)
        self.cpu = d.cpu_fw + d.cpu_bw
        self.size = d.nbytes
        self.cap = problem.memory
        # tensor endpoints as atom lists
        self.t_atoms = [[p] + c for p, c in zip(d.t_prod, d.t_cons)]
        self.t_cost = np.asarray(d.t_cost)
        self.t_of_atom: list[list[int]] = [[] for _ in range(na)]
        for t, ats in enumerate(self.t_atoms):
            for a in ats:
                self.t_of_atom[a].append(t)

    def reset(self, dev: np.ndarray) -> None:
        self.dev = dev.copy()
        nt = len(self.t_atoms)
        self.count = np.zeros((nt, self.nd), dtype=np.int64)
        for t, ats in enumerate(self.t_atoms):
            for a in ats:
                self.count[t, dev[a]] += 1
        self.tsize = np.array([len(a) for a in self.t_atoms], dtype=np.int64)
        self.load = np.zeros(self.nd)
        self.mem = np.zeros(self.k)
        for a in range(self.na):
            d = dev[a]
            self.load[d] += self.acc[a] if d < self.k else self.cpu[a]
            if d < self.k:
                self.mem[d] += self.size[a]
        for t in range(nt):
            for d in range(self.k):
                if 0 < self.count[t, d] < self.tsize[t]:
                    self.load[d] += self.t_cost[t]

    def move_delta(self, a: int, d2: int) -> tuple[float, float]:
        """(load change of the source device, of the target device) if atom a moves to d2."""
        d1 = self.dev[a]
        l1 = -(self.acc[a] if d1 < self.k else self.cpu[a])
        l2 = self.acc[a] if d2 < self.k else self.cpu[a]
        for t in self.t_of_atom[a]:
            c, s, cost = self.count[t], self.tsize[t], self.t_cost[t]
            if d1 < self.k:
                l1 += cost * (int(0 < c[d1] - 1 < s) - int(0 < c[d1] < s))
            if d2 < self.k:
                l2 += cost * (int(0 < c[d2] + 1 < s) - int(0 < c[d2] < s))
        return l1, l2

    def apply(self, a: int, d2: int) -> None:
        l1, l2 = self.move_delta(a, d2)
        d1 = self.dev[a]
        self.load[d1] += l1
        self.load[d2] += l2
        if d1 < self.k:
            self.mem[d1] -= self.size[a]
        if d2 < self.k:
            self.mem[d2] += self.size[a]
        for t in self.t_of_atom[a]:
            self.count[t, d1] -= 1
            self.count[t, d2] += 1
        self.dev[a] = d2

    def key(self, load: np.ndarray, mem: np.ndarray) -> tuple[float, float, float]:
        return (float(np.maximum(mem - self.cap, 0).sum()), float(load.max()), float((load ** 2).sum()))


def local_search_split(problem: Problem, seed: int, restarts: int, deadline: float,
                       start: np.ndarray | None = None) -> np.ndarray:
    """Best-improvement single-atom moves; from ``start`` (a split) if given, else from random
    splits, ``restarts`` times."""
    st = _LoadState(problem, max_cpus(problem))
    rng = np.random.default_rng(seed)
    best_key, best_dev = None, None
    for r in range(restarts if start is None else 1):
        if start is not None:
            dev = canonical_devices(st.data, start)
        else:
            dev = rng.integers(0, st.nd, st.na)
            dev[~st.data.allowed_acc] = st.k if st.nd > st.k else dev[~st.data.allowed_acc]
        st.reset(dev)
        cur = st.key(st.load, st.mem)
        while time.monotonic() < deadline:
            best_move, best_mk = None, cur
            for a in range(st.na):
                d1 = st.dev[a]
                for d2 in range(st.nd):
                    if d2 == d1 or (d2 < st.k and not st.data.allowed_acc[a]):
                        continue
                    l1, l2 = st.move_delta(a, d2)
                    load = st.load.copy()
                    load[d1] += l1
                    load[d2] += l2
                    mem = st.mem.copy()
                    if d1 < st.k:
                        mem[d1] -= st.size[a]
                    if d2 < st.k:
                        mem[d2] += st.size[a]
                    mk = st.key(load, mem)
                    if mk < best_mk:
                        best_move, best_mk = (a, d2), mk
            if best_move is None:
                break
            st.apply(*best_move)
            cur = best_mk
        if best_key is None or cur < best_key:
            best_key, best_dev = cur, st.dev.copy()
        if time.monotonic() >= deadline:
            break
    return split_from_atoms(st.data, best_dev)


def local_search(problem: Problem, opts: SolveOptions) -> Solution:
    t0 = time.monotonic()
    rem = opts.remaining()
    deadline = t0 + (60.0 if rem is None else rem)
    split = local_search_split(problem, opts.seed, int(opts.extra.get("restarts", 10)), deadline)
    ev = evaluate_maxload(problem, split)
    if ev.violations:
        return Solution("local-search", "unknown", reason=f"local-search: no feasible split found ({ev.violations[0]})",
                        seconds=time.monotonic() - t0)
    return finish_solution(problem, "local-search", split, "heuristic", t0, {}, contiguity="none")


# ----------------------------------------------------------------------------------------------
# PipeDream-style linear DP (max-load)
# ----------------------------------------------------------------------------------------------
def pipedream_units(problem: Problem) -> Units:
    """The Appendix B units with every branching region contracted: a path of blocks."""
    units = build_units(problem)
    n = units.count
    blocks: list[list[int]] = []
    cur: list[int] = []
    open_edges: dict[int, int] = {}  # unit -> number of its out-edges still crossing the cut
    for u in range(n):  # units are in topological order
        for p in units.pred[u]:
            open_edges[p] -= 1
            if open_edges[p] == 0:
                del open_edges[p]
        cur.append(u)
        if units.succ[u]:
            open_edges[u] = len(units.succ[u])
        # broadcast units (fan-out above 2: masks, shared inputs) do not count as branchings
        sources = {p for p in open_edges if len(units.succ[p]) <= 2}
        if not sources or sources == {u}:
            blocks.append(cur)
            cur = []
    if cur:
        blocks.append(cur)
    members = [np.concatenate([units.members[u] for u in b]) for b in blocks]
    succ = [[i + 1] if i + 1 < len(blocks) else [] for i in range(len(blocks))]
    pred = [[i - 1] if i > 0 else [] for i in range(len(blocks))]
    return Units(members, succ, pred, units.orphans)


def pipedream(problem: Problem, opts: SolveOptions) -> Solution:
    t0 = time.monotonic()
    units = pipedream_units(problem)
    try:
        split, value, info = solve_dp(problem, units=units)
    except RuntimeError as exc:
        return Solution("pipedream", "unknown", reason=f"pipedream: {exc}", seconds=time.monotonic() - t0)
    info["blocks"] = units.count
    return finish_solution(problem, "pipedream", split, "heuristic", t0, info, claimed=value)


# ----------------------------------------------------------------------------------------------
# expert split from a file
# ----------------------------------------------------------------------------------------------
def read_split(problem: Problem, path: str | Path) -> np.ndarray:
    with open(path) as fh:
        doc = json.load(fh)
    if isinstance(doc, dict) and "split" in doc:
        doc = doc["split"]
    if isinstance(doc, dict):
        doc = {(int(k) if isinstance(k, str) and k.lstrip("-").isdigit() and int(k) in problem.index else k): v
               for k, v in doc.items()}
    return as_split(problem, doc)


def expert(problem: Problem, opts: SolveOptions) -> Solution:
    """Evaluate the split of ``opts.extra['split']`` (an array) or ``opts.extra['split_file']``.

    A split that breaks a constraint is not an answer, and proves nothing about the problem: its
    status is "unknown" with the violations as the reason ("infeasible" is reserved for proofs)."""
    t0 = time.monotonic()
    path = opts.extra.get("split_file")
    split = opts.extra.get("split")
    if split is None and not path:
        return Solution("expert", "unknown", reason="expert: no split given (solve --split FILE)")
    split = np.asarray(split) if split is not None else read_split(problem, path)
    ev = evaluate_maxload(problem, split)
    if ev.violations:
        return Solution("expert", "unknown", reason=f"expert: the split breaks constraints: {'; '.join(ev.violations)}",
                        seconds=time.monotonic() - t0, info={"value": ev.value})
    return finish_solution(problem, "expert", split, "heuristic", t0, {"file": str(path or "")}, contiguity="none")
