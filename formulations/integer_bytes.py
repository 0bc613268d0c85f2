"""Byte counts of a problem as exact integers for the CP-SAT models (full model and relaxations).

CP-SAT needs integers; bytes are whole in every format we read, but fractional data exist (tests
with 0.25-byte tensors). They are scaled by the smallest round factor that makes them whole, and
divided by their gcd to keep cumulative energies within int64. When no factor works the rounding is
conservative and ``exact`` is False: a model built on them then proves neither bound nor
infeasibility.
"""
from __future__ import annotations

import numpy as np

from placement.problem import Problem

EXACT_FACTORS = (1, 2, 4, 5, 8, 10, 16, 20, 25, 32, 50, 64, 100, 128, 1000, 1024, 10**4, 10**5, 10**6, 10**7, 10**8, 10**9)
MAX_INT = 2**52


def memory_ints(problem: Problem, memory_model: str) -> tuple[np.ndarray, np.ndarray, np.ndarray, bool]:
    """(param, out, capacity) as integers over a common divisor, and whether that is exact.

    Bytes are scaled by the smallest round factor that makes them whole (0.25-byte data: 4), as
    times are. Failing that, they are rounded conservatively (demands up, capacities down): a
    restriction, so the model then proves neither a bound nor infeasibility. Capacities are rounded
    down after a 1e-12 relative allowance for float noise (e.g. 0.57 * 100 = 56.99999999999999):
    that errs towards a relaxation, which proves nothing false, and the answer is checked anyway."""
    par, out, cap = problem.param_bytes, problem.out_bytes, problem.memory
    data = np.concatenate([par, out])
    factor = None
    for f in EXACT_FACTORS:
        scaled = data * f
        if float(scaled.sum()) <= MAX_INT / 16 and np.all(np.abs(scaled - np.round(scaled)) <= 1e-9 * np.maximum(1.0, scaled)):
            factor = float(f)
            break
    exact = factor is not None
    if exact:
        p, o = np.round(par * factor).astype(np.int64), np.round(out * factor).astype(np.int64)
    else:
        factor = 1.0
        p, o = np.ceil(par - 1e-9).astype(np.int64), np.ceil(out - 1e-9).astype(np.int64)
    g = int(np.gcd.reduce(np.concatenate([p, o, [0]])))
    g = max(g, 1)
    finite = np.isfinite(cap)
    units = np.where(finite, cap, 0.0) * factor / g
    c = np.where(finite, np.floor(units * (1 + 1e-12) + 1e-9), -1).astype(np.int64)
    return p // g, o // g, c, exact
