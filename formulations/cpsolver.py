"""One way to configure and run CP-SAT for every model of the project.

The solver gets the time left of ``opts`` (at least ``min_seconds``), its worker count, seed and
log setting; CP-SAT's own SIGINT handler is turned off (the ``solve`` command owns Ctrl-C and
SIGTERM) and a stop requested on ``opts`` ends the search through ``stop_watch``, so the model
returns its best solution so far.
"""
from __future__ import annotations

import os

from ortools.sat.python import cp_model

from placement.solution import SolveOptions, stop_watch


def cp_solver(opts: SolveOptions, *, default_seconds: float | None = None, min_seconds: float = 0.01) -> cp_model.CpSolver:
    """A configured solver. Without a time limit on ``opts`` it runs ``default_seconds`` (None:
    unlimited); workers default to the machine's cores."""
    solver = cp_model.CpSolver()
    prm = solver.parameters
    prm.catch_sigint_signal = False
    rem = opts.remaining()
    if rem is not None:
        prm.max_time_in_seconds = max(rem, min_seconds)
    elif default_seconds is not None:
        prm.max_time_in_seconds = default_seconds
    if opts.stop.is_set():
        prm.max_time_in_seconds = 0.0
    prm.num_workers = int(opts.workers or os.cpu_count() or 2)
    prm.random_seed = int(opts.seed)
    prm.log_search_progress = bool(opts.verbose)
    return solver


def solve(solver: cp_model.CpSolver, model: cp_model.CpModel, opts: SolveOptions,
          callback: cp_model.CpSolverSolutionCallback | None = None) -> int:
    """Solve, stopping early (with the best solution so far) when a stop is requested on opts."""
    with stop_watch(opts, solver.stop_search):
        return solver.solve(model, callback)


def set_params(prm, params: dict) -> None:
    """Set CP-SAT parameters by name; a list value replaces a repeated field (e.g. ``subsolvers``).
    An unknown name raises ValueError naming it."""
    for key, val in params.items():
        if not hasattr(prm, key):
            raise ValueError(f"unknown CP-SAT parameter {key!r}")
        if isinstance(val, (list, tuple)):
            field = getattr(prm, key)
            field.clear()
            field.extend(list(val))
        else:
            setattr(prm, key, val)
