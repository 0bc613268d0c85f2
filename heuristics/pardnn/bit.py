"""Binary indexed trees (Fenwick 1994) over levels, with K columns, as PARDNN's mapping uses them.

The mapping asks, again and again, "how much work of each primary cluster has its top level inside
this span?" while clusters keep merging. Levels are the distinct top-level values in increasing
order; a node's weight is added at its level's index. Update and range query cost O(log L) each.

For speed in Python the index path of every update and prefix query is precomputed as an (L+1, h)
integer table, so one update of a whole cluster or one K-column query is a couple of numpy calls.
Padding entries point to two dummy rows: updates dump into row L+1, queries read row L+2 (always 0).
"""
from __future__ import annotations

import numpy as np


class LevelBIT:
    """Fenwick tree over ``size`` level slots and ``cols`` columns (one per primary cluster)."""

    def __init__(self, size: int, cols: int = 1) -> None:
        self.size = int(size)
        self.cols = int(cols)
        self.tree = np.zeros((self.size + 3, self.cols))
        self._dump = self.size + 1
        self._zero = self.size + 2
        height = max(1, int(self.size).bit_length() + 1)
        up = np.full((self.size + 1, height), self._dump, dtype=np.int64)
        qp = np.full((self.size + 1, height), self._zero, dtype=np.int64)
        j = np.arange(1, self.size + 1, dtype=np.int64)  # update paths climb i+1, i+1+lowbit, ...
        for h in range(height):
            ok = j <= self.size
            up[:self.size, h] = np.where(ok, j, self._dump)
            j = np.where(ok, j + (j & -j), j)
        j = np.arange(self.size + 1, dtype=np.int64)  # prefix paths descend i, i-lowbit, ...
        for h in range(height):
            ok = j > 0
            qp[:, h] = np.where(ok, j, self._zero)
            j = np.where(ok, j - (j & -j), 0)
        self._up = up
        self._qp = qp

    def add(self, slots: np.ndarray | int, weights: np.ndarray | float, col: int = 0) -> None:
        """Add ``weights`` at level ``slots`` (scalars or equal-length arrays) in column ``col``."""
        paths = self._up[slots]
        h = self._up.shape[1]
        w = np.repeat(weights, h) if np.ndim(weights) else np.full(paths.size, float(weights))
        np.add.at(self.tree, (paths.ravel(), col), w)

    def move(self, slots: np.ndarray, weights: np.ndarray, col_from: int, col_to: int) -> None:
        """Move ``weights`` at ``slots`` from column ``col_from`` to column ``col_to``."""
        if len(slots) == 1:  # one update path: no index repeats but the dump row, never read
            path = self._up[slots[0]]
            self.tree[path, col_to] += weights[0]
            self.tree[path, col_from] -= weights[0]
            return
        flat = self._up[slots].ravel()
        w = np.repeat(weights, self._up.shape[1])
        cols = np.repeat(np.array([col_to, col_from]), flat.size)
        np.add.at(self.tree, (np.concatenate((flat, flat)), cols), np.concatenate((w, -w)))

    def prefix(self, i: int) -> np.ndarray:
        """Per column, the sum of slots [0, i)."""
        return self.tree[self._qp[i]].sum(axis=0)

    def range(self, lo: int, hi: int) -> np.ndarray:
        """Per column, the sum of slots [lo, hi) (zero when hi <= lo)."""
        if hi <= lo:
            return np.zeros(self.cols)
        return self.tree[self._qp[hi]].sum(axis=0) - self.tree[self._qp[lo]].sum(axis=0)
