"""Ctrl-C and SIGTERM before the ``solve`` command runs: one line, never a traceback.

Python's start-up and the imports (numpy, OR-Tools) take about a second, during which Ctrl-C would
end in a KeyboardInterrupt traceback. These handlers need only the standard library, are
installed before those imports (solvers/entry.py for the installed ``solve``, the top of
solvers/cli.py for ``python -m solvers.cli``), and are replaced by the command's own as it runs.
"""
from __future__ import annotations

import os
import signal


def quit_while_starting(signum: int, frame: object) -> None:
    os.write(2, b"solve: interrupted while starting; nothing written\n")
    os._exit(130)


def install_early_handlers() -> None:
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, quit_while_starting)
