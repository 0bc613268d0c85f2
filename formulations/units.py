"""Placement units: a colocation group moves as one, every other node is a unit of its own.

Units are numbered in increasing order of their lowest node index; the symmetry breaking of the
exact models and the brute force both label devices by it.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from placement.problem import Problem


@dataclass
class Units:
    """Placement units: ``of[i]`` is node i's unit, ``members[g]`` the nodes of unit g (sorted).

    Units are numbered in increasing order of their lowest node index."""

    of: np.ndarray
    members: list[np.ndarray]

    @property
    def count(self) -> int:
        return len(self.members)


def units(problem: Problem) -> Units:
    of = np.full(problem.n, -1, dtype=np.int64)
    members: list[np.ndarray] = []
    seen: dict[int, int] = {}
    groups = problem.groups
    for i in range(problem.n):
        g = int(problem.colocate[i])
        if g < 0:
            of[i] = len(members)
            members.append(np.array([i]))
        elif g not in seen:
            seen[g] = len(members)
            mem = np.sort(groups[g])
            of[mem] = len(members)
            members.append(mem)
    return Units(of, members)
