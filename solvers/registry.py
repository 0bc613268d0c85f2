"""The method registry: ``solve --method NAME`` looks names up here.

Modules register their methods with the :func:`register` decorator; :func:`methods` imports the
known method modules so their registrations run.
"""
from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Callable

from placement.problem import Problem
from placement.solution import Solution, SolveOptions

Method = Callable[[Problem, SolveOptions], Solution]

# Modules that define methods. A module listed here that is not present yet is skipped.
METHOD_MODULES = (
    "heuristics.baselines",
    "heuristics.pardnn",
    "heuristics.list_scheduling",
    "heuristics.critical_path",
    "heuristics.linear_clustering",
    "heuristics.random_feasible",
    "heuristics.portfolio",
    "formulations.cpsat",
    "formulations.mip",
    "formulations.bruteforce",
    "formulations.warmstart",
    "formulations.maxload",
    "formulations.latency",
    "heuristics.tarnawski",
)


@dataclass(frozen=True)
class MethodInfo:
    name: str
    kind: str  # "heuristic" or "exact"
    objective: str  # "makespan", "max-load", "latency"
    summary: str
    func: Method


_REGISTRY: dict[str, MethodInfo] = {}


def register(name: str, *, kind: str, summary: str, objective: str = "makespan") -> Callable[[Method], Method]:
    """Decorator: make ``func`` available as ``solve --method name``."""

    def wrap(func: Method) -> Method:
        if name in _REGISTRY and _REGISTRY[name].func is not func:
            raise RuntimeError(f"method name {name!r} registered twice")
        _REGISTRY[name] = MethodInfo(name, kind, objective, summary, func)
        return func

    return wrap


def methods() -> dict[str, MethodInfo]:
    """All registered methods by name (imports the method modules on first use)."""
    for mod in METHOD_MODULES:
        try:
            importlib.import_module(mod)
        except ModuleNotFoundError as exc:
            if exc.name != mod:
                raise
    return dict(sorted(_REGISTRY.items()))


def get(name: str) -> MethodInfo:
    table = methods()
    if name not in table:
        raise KeyError(f"unknown method {name!r}; known: {', '.join(table)}")
    return table[name]
