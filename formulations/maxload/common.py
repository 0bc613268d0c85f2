"""Data shared by the max-load integer programs (CP-SAT and MIP): atoms, tensors, hints.

An *atom* is a colocation group or a node outside any group: the IPs give one assignment variable
per atom and device (Fig. 6 of Tarnawski et al. with its colocation equalities substituted).
Devices: accelerators 0..k-1, then CPU cores k..k+l-1 (a split writes core c as -1 - c).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from placement.objectives import cpu_time, is_backward, max_cpus, node_bytes, supported, tensors
from placement.problem import Problem


@dataclass
class IPData:
    k: int
    l: int
    atom_of: np.ndarray  # per node
    atoms: list[np.ndarray]  # nodes per atom, atoms ordered by their first node in topological order
    acc_time: np.ndarray  # per atom (inf where unsupported)
    acc_fw: np.ndarray
    acc_bw: np.ndarray
    cpu_fw: np.ndarray
    cpu_bw: np.ndarray
    nbytes: np.ndarray
    allowed_acc: np.ndarray  # per atom: may it go on an accelerator
    t_prod: list[int]  # per crossing-capable tensor: producer atom
    t_cons: list[list[int]]  # consumer atoms (other than the producer's)
    t_cost: list[float]
    t_back: list[bool]  # producer is a backward node
    t_node: list[int]  # producer node
    fw_edges: list[tuple[int, int]]  # node-level forward->forward edges (for contiguity)
    forward: np.ndarray  # node mask
    identical_acc: bool


def ip_data(problem: Problem, n_cpus: int | None = None, keep_free: bool = False) -> IPData:
    """Atoms and tensors of a problem; zero-cost tensors are dropped unless ``keep_free`` (latency
    needs them: they still order the subgraphs)."""
    n = problem.n
    l = max_cpus(problem) if n_cpus is None else n_cpus
    rank = problem.topo_rank
    atom_key = np.where(problem.colocate >= 0, problem.colocate, problem.colocate.max(initial=-1) + 1 + np.arange(n))
    first: dict[int, int] = {}
    for v in problem.topo_order.tolist():
        first.setdefault(int(atom_key[v]), v)
    keys = sorted(first, key=lambda g: rank[first[g]])
    pos = {g: i for i, g in enumerate(keys)}
    atom_of = np.array([pos[int(g)] for g in atom_key], dtype=np.int64)
    na = len(keys)
    atoms = [np.flatnonzero(atom_of == a) for a in range(na)] if na < 5000 else _group(atom_of, na)
    back = is_backward(problem)
    sup = supported(problem)

    def sums(values: np.ndarray, mask: np.ndarray) -> np.ndarray:
        return np.bincount(atom_of[mask], weights=values[mask], minlength=na)

    acc_fw = sums(problem.time, ~back)
    acc_bw = sums(problem.time, back)
    allowed = np.bincount(atom_of, weights=(~sup).astype(float), minlength=na) < 0.5
    tens = tensors(problem)
    t_prod, t_cons, t_cost, t_back, t_node = [], [], [], [], []
    cons_of: dict[int, set[int]] = {}
    for e in range(problem.m):
        cons_of.setdefault(int(tens.of_edge[e]), set()).add(int(atom_of[problem.dst[e]]))
    for t, cons in sorted(cons_of.items()):
        pa = int(atom_of[tens.producer[t]])
        others = sorted(cons - {pa})
        if not others or (tens.cost[t] <= 0 and not keep_free):
            continue
        t_node.append(int(tens.producer[t]))
        t_prod.append(pa)
        t_cons.append(others)
        t_cost.append(float(tens.cost[t]))
        t_back.append(bool(back[tens.producer[t]]))
    fw = ~back
    fw_edges = [(int(u), int(v)) for u, v in zip(problem.src, problem.dst) if fw[u] and fw[v]]
    return IPData(problem.k, l, atom_of, atoms, acc_fw + acc_bw, acc_fw, acc_bw, sums(cpu_time(problem), ~back),
                  sums(cpu_time(problem), back), np.bincount(atom_of, weights=node_bytes(problem), minlength=na),
                  allowed, t_prod, t_cons, t_cost, t_back, t_node, fw_edges, fw, bool(np.all(problem.memory == problem.memory[0])))


def _group(atom_of: np.ndarray, na: int) -> list[np.ndarray]:
    order = np.argsort(atom_of, kind="stable")
    starts = np.searchsorted(atom_of[order], np.arange(na + 1))
    return [order[starts[a]:starts[a + 1]] for a in range(na)]


def canonical_devices(data: IPData, split: np.ndarray) -> np.ndarray:
    """Per atom, the device index 0..k+l-1 of a split, with accelerators (and CPU cores) renumbered
    by their first atom so that the hint satisfies the IPs' symmetry breaking."""
    dev = np.array([int(split[a[0]]) for a in data.atoms], dtype=np.int64)
    if not data.identical_acc:
        return np.where(dev >= 0, dev, data.k + (-1 - dev))
    out = np.empty_like(dev)
    acc_map: dict[int, int] = {}
    cpu_map: dict[int, int] = {}
    for a, d in enumerate(dev.tolist()):
        if d >= 0:
            if d not in acc_map:
                acc_map[d] = len(acc_map)
            out[a] = acc_map[d]
        else:
            if d not in cpu_map:
                cpu_map[d] = len(cpu_map)
            out[a] = data.k + cpu_map[d]
    return out


def split_from_atoms(data: IPData, atom_dev: np.ndarray) -> np.ndarray:
    dev = np.where(atom_dev < data.k, atom_dev, -1 - (atom_dev - data.k))
    return dev[data.atom_of]
