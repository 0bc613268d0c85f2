"""The memory-aware path bound of the exact models: placement.memory_path_bound (one
implementation for the CLI's reported bound and the exact models' floor; proof in docs/peak.md).

A path whose nodes cannot all sit on one device within the largest capacity is cut into runs, and
every cut pays its edge's comm; edges inside a colocation unit are never cut. Under the peak model a
run holds its units' params plus the working set of any of its nodes.
"""
from __future__ import annotations

from placement.memory_path_bound import memory_path_bound
from placement.problem import Problem


def path_lower_bound(problem: Problem, memory_model: str = "static") -> float:
    """A valid lower bound on the makespan in ``memory_model`` (placement.memory_path_bound)."""
    return memory_path_bound(problem, memory_model)
