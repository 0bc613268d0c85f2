"""Random layered DAGs (the whole graph drawn from the seed).
"""
from __future__ import annotations

import math

import numpy as np

from ..problem import Problem
from .assembly import finish_problem


# ----- random layered DAG ------------------------------------------------------------------------
def _random(target: int, rng: np.random.Generator, devices: int, memory_fraction: float | None, name: str) -> Problem:
    """Layers of random width; each node reads 1-3 nodes of the previous three layers (mostly the
    previous one). Times, tensor sizes and weights are log-normal; about a fifth of the nodes hold
    weights. Every node but the first layer's has an input, every node but the last layer's an output."""
    n = max(int(target), 1)
    layers = max(1, int(round(math.sqrt(n) * 1.5)))
    layers = min(layers, n)
    cuts = np.sort(rng.choice(np.arange(1, n), size=layers - 1, replace=False)) if layers > 1 else np.zeros(0, int)
    starts = np.r_[0, cuts].astype(np.int64)
    ends = np.r_[cuts, n].astype(np.int64)
    layer_of = np.repeat(np.arange(layers), ends - starts)
    srcs, dsts = [], []
    if layers > 1:
        v = np.arange(starts[1], n)
        lv = layer_of[v]
        fan = rng.choice([1, 2, 3], size=v.size, p=[0.45, 0.35, 0.2])
        vv = np.repeat(v, fan)
        back = rng.choice([1, 2, 3], size=vv.size, p=[0.75, 0.17, 0.08])
        back = np.where(np.r_[True, vv[1:] != vv[:-1]], 1, back)  # each node's first input: previous layer
        lu = np.maximum(layer_of[vv] - back, 0)
        u = starts[lu] + (rng.random(vv.size) * (ends[lu] - starts[lu])).astype(np.int64)
        srcs.append(u)
        dsts.append(vv)
        # Give every node of a non-final layer at least one consumer in the next layer.
        has_out = np.zeros(n, dtype=bool)
        has_out[u] = True
        lonely = np.flatnonzero(~has_out & (layer_of < layers - 1))
        ln = layer_of[lonely] + 1
        w = starts[ln] + (rng.random(lonely.size) * (ends[ln] - starts[ln])).astype(np.int64)
        srcs.append(lonely)
        dsts.append(w)
    src = np.concatenate(srcs) if srcs else np.zeros(0, dtype=np.int64)
    dst = np.concatenate(dsts) if dsts else np.zeros(0, dtype=np.int64)
    out = np.round(rng.lognormal(math.log(4e6), 1.0, n))
    param = np.where(rng.random(n) < 0.2, np.round(rng.lognormal(math.log(16e6), 1.0, n)), 0.0)
    time = rng.lognormal(math.log(0.5), 1.0, n)
    pos = np.arange(n) - starts[layer_of]
    names = [f"random/L{l}/n{p}" for l, p in zip(layer_of.tolist(), pos.tolist())]
    attrs = {"generator": "random", "layers": layers}
    return finish_problem(name, names, time, out, param, np.zeros(n, dtype=bool), src, dst, out[src],
                          np.zeros(0, dtype=np.int64), [], devices, memory_fraction, rng, attrs, jitter=False)
