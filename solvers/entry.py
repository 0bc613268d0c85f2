"""Entry point of the installed ``solve`` command: the early signal handlers first (see
solvers/early_signals.py), then the heavy imports and the command."""
from __future__ import annotations

from .early_signals import install_early_handlers


def entry() -> None:
    install_early_handlers()
    from .cli import run_as_program

    run_as_program()
