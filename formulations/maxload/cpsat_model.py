"""The CP-SAT model of Tarnawski et al.'s max-load integer program (Fig. 6, Section 5.3), built
once and shared by the solver (ip_cpsat.py) and the device LNS (lns.py).

Variables: x[a, i] (atom a on device i), cross[t, i] (tensor t crosses accelerator i's boundary:
its producer's side and some consumer's side differ; this is CommIn + CommOut of the paper, which
cannot both be 1), z[v, i] for contiguity (Lemma 4.1: z >= x, z non-increasing along forward edges,
z[v] <= x[v] - x[u] + 1), enforced on forward nodes for every device, CPUs included, as in the
published IP. Identical accelerators are ordered by their first atom (symmetry breaking).
Times and costs are scaled by ``scale`` and rounded down, sizes rounded up, capacities down.
"""
from __future__ import annotations

import math

import numpy as np
from ortools.sat.python import cp_model

from placement.problem import Problem

from .common import IPData


DEFAULT_SCALE = 1e6


def build_cpsat(problem: Problem, data: IPData, contiguous: bool, objective: str, scale: float,
                hint_atoms: np.ndarray | None, symmetry: bool = True) -> tuple[cp_model.CpModel, dict]:
    k, l = data.k, data.l
    nd = k + l
    na = len(data.atoms)
    m = cp_model.CpModel()
    x = [[m.NewBoolVar(f"x{a}_{i}") for i in range(nd)] for a in range(na)]
    for a in range(na):
        m.AddExactlyOne(x[a])
        if not data.allowed_acc[a]:
            for i in range(k):
                m.Add(x[a][i] == 0)
    size = [int(math.ceil(b)) for b in data.nbytes]
    for i in range(k):
        if np.isfinite(problem.memory[i]):
            m.Add(sum(size[a] * x[a][i] for a in range(na) if size[a]) <= int(math.floor(problem.memory[i])))
    if contiguous:
        fw_nodes = np.flatnonzero(data.forward)
        for i in range(nd):
            z = {int(v): m.NewBoolVar("") for v in fw_nodes}
            for v, zv in z.items():
                m.AddImplication(x[data.atom_of[v]][i], zv)
            for u, v in data.fw_edges:
                au, av = data.atom_of[u], data.atom_of[v]
                m.AddImplication(z[v], z[u])
                if au != av:
                    # z[v] <= x[v] - x[u] + 1
                    m.Add(z[v] + x[au][i] - x[av][i] <= 1)
    ints = lambda arr: [int(math.floor(t * scale)) for t in arr]
    tf, tb = ints(np.where(np.isfinite(data.acc_fw), data.acc_fw, 0)), ints(np.where(np.isfinite(data.acc_bw), data.acc_bw, 0))
    cf, cb = ints(data.cpu_fw), ints(data.cpu_bw)
    tc = ints(data.t_cost)
    fw_load, bw_load = [], []
    horizon = int(sum(tf) + sum(tb) + 2 * sum(tc) + sum(cf) + sum(cb)) + 1
    for i in range(nd):
        fexpr, bexpr = [], []
        if i < k:
            fexpr += [tf[a] * x[a][i] for a in range(na) if tf[a]]
            bexpr += [tb[a] * x[a][i] for a in range(na) if tb[a]]
            for t, (pa, cons) in enumerate(zip(data.t_prod, data.t_cons)):
                if tc[t] == 0:
                    continue
                c = m.NewBoolVar("")
                for b in cons:
                    m.Add(c >= x[pa][i] - x[b][i])
                    m.Add(c >= x[b][i] - x[pa][i])
                (bexpr if data.t_back[t] else fexpr).append(tc[t] * c)
        else:
            fexpr += [cf[a] * x[a][i] for a in range(na) if cf[a]]
            bexpr += [cb[a] * x[a][i] for a in range(na) if cb[a]]
        fl = m.NewIntVar(0, horizon, f"fw{i}")
        bl = m.NewIntVar(0, horizon, f"bw{i}")
        m.Add(fl == sum(fexpr))
        m.Add(bl == sum(bexpr))
        fw_load.append(fl)
        bw_load.append(bl)
    obj = m.NewIntVar(0, 2 * horizon, "maxload")
    if objective == "max-load":
        for i in range(nd):
            m.Add(obj >= fw_load[i] + bw_load[i])
    else:
        fmax = m.NewIntVar(0, horizon, "fwmax")
        bmax = m.NewIntVar(0, horizon, "bwmax")
        m.AddMaxEquality(fmax, fw_load)
        m.AddMaxEquality(bmax, bw_load)
        m.Add(obj == fmax + bmax)
    m.Minimize(obj)
    if symmetry and data.identical_acc:
        _order_devices(m, x, range(0, k))
    if symmetry and l > 1:
        _order_devices(m, x, range(k, nd))
    if hint_atoms is not None:
        for a in range(na):
            for i in range(nd):
                m.AddHint(x[a][i], int(hint_atoms[a] == i))
    return m, {"x": x, "obj": obj, "fw": fw_load, "bw": bw_load}


def _order_devices(m: cp_model.CpModel, x: list, devices: range) -> None:
    """Identical devices: device i may take atom a only if device i-1 holds an earlier atom."""
    devs = list(devices)
    na = len(x)
    prev = {i: None for i in devs}
    for a in range(na):
        for j, i in enumerate(devs):
            if j > 0:
                p = prev[devs[j - 1]]
                if p is None:
                    m.Add(x[a][i] == 0)
                else:
                    m.AddImplication(x[a][i], p)
        for i in devs:
            seen = m.NewBoolVar("")
            if prev[i] is None:
                m.Add(seen == x[a][i])
            else:
                m.AddBoolOr([prev[i], x[a][i]]).OnlyEnforceIf(seen)
                m.AddImplication(prev[i], seen)
                m.AddImplication(x[a][i], seen)
            prev[i] = seen
