"""When a node's inputs can be on each device: what every list scheduler asks before placing it."""
from __future__ import annotations

import numpy as np

from placement.problem import Problem


def data_ready(problem: Problem, v: int, dev: np.ndarray, finish: np.ndarray) -> np.ndarray:
    """Per device, when all of v's inputs could be there (same-device inputs pay no comm)."""
    ptr, nbr, eid = problem.pred_ptr
    a, b = ptr[v], ptr[v + 1]
    if a == b:
        return np.zeros(problem.k)
    u = nbr[a:b]
    f = finish[u]
    fc = f + problem.comm[eid[a:b]]
    on = dev[u][:, None] == np.arange(problem.k)[None, :]
    return np.where(on, f[:, None], fc[:, None]).max(axis=0)
