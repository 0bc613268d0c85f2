"""One way to configure and run CP-SAT for every model of the project.

The solver gets the time left of ``opts`` (at least ``min_seconds``), its worker count, seed and
log setting; CP-SAT's own SIGINT handler is turned off (the ``solve`` command owns Ctrl-C and
SIGTERM) and a stop requested on ``opts`` ends the search through ``stop_watch``, so the model
returns its best solution so far.
"""
from __future__ import annotations

import os
from typing import Any, Callable, Sequence

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


def break_device_symmetry(m: cp_model.CpModel, classes: list[list[int]], x: Any, members: Sequence[Sequence[int]],
                          mask: Any, tick: Callable[[], None] | None = None) -> list[tuple[Any, int, int]]:
    """Within a class of identical devices c0 < c1 < ..., unit g may use c_j (j >= 1) only if some
    unit before g uses c_{j-1}: devices are labelled in the order of their lowest unit. ``x[g, d]``
    is unit g's placement literal, ``mask[node, d]`` whether a node may use d (a class is
    all-or-nothing for a unit: same allowed columns). Returns the (used literal, unit, device)
    triples it made."""
    made: list[tuple[Any, int, int]] = []
    for cls in classes:
        if len(cls) < 2:
            continue
        prev_used: dict[int, Any] = {d: None for d in cls}
        for g, mem in enumerate(members):
            if tick is not None and g % 64 == 0:
                tick()
            if not mask[mem[0], cls[0]]:
                continue
            for j in range(len(cls) - 1, 0, -1):
                p = prev_used[cls[j - 1]]
                if p is None:
                    m.add(x[g, cls[j]] == 0)
                else:
                    m.add_implication(x[g, cls[j]], p)
            for d in cls[:-1]:
                u = m.new_bool_var(f"used{g}_{d}")
                p = prev_used[d]
                m.add_implication(x[g, d], u)
                if p is None:
                    m.add_implication(u, x[g, d])
                else:
                    m.add_implication(p, u)
                    m.add_bool_or([u.Not(), p, x[g, d]])
                made.append((u, g, d))
                prev_used[d] = u
    return made


def unit_placement_literals(m: cp_model.CpModel, members: Sequence[Sequence[int]], mask: Any,
                            tick: Callable[[], None] | None = None) -> dict[tuple[int, int], Any]:
    """``x[g, d]``: unit g (its nodes ``members[g]``) runs on device d, one device per unit, only
    devices its first node may use (``mask[node, d]``)."""
    x: dict[tuple[int, int], Any] = {}
    for g, mem in enumerate(members):
        if tick is not None and g % 256 == 0:
            tick()
        devs = [int(d) for d in range(mask.shape[1]) if mask[mem[0], d]]
        lits = [m.new_bool_var(f"x{g}_{d}") for d in devs]
        for d, lit in zip(devs, lits):
            x[g, d] = lit
        m.add_exactly_one(lits)
    return x
