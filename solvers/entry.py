"""Entry point of the installed ``solve`` command (and of ``python -m solvers.cli``).

Ctrl-C or SIGTERM during Python's start-up and the imports (numpy, OR-Tools: about a second)
would otherwise end in a KeyboardInterrupt traceback: the handlers below are installed before
those imports, with only the standard library loaded, and say one line instead. The ``solve``
command replaces them with its own as soon as it runs.
"""
from __future__ import annotations

import os
import signal
import sys


def quit_while_starting(signum: int, frame: object) -> None:
    os.write(2, b"solve: interrupted while starting; nothing written\n")
    os._exit(130)


def install_early_handlers() -> None:
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, quit_while_starting)


def run_command() -> None:
    """Run ``solve`` and end the process with its status. When a solver thread was abandoned (it
    did not stop in time), the process ends without waiting for it (os._exit, after flushing)."""
    from .cli import Command, process_started

    command = Command(started=process_started())
    code = command.main(None)
    if command.abandoned:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    sys.exit(code)


def entry() -> None:
    install_early_handlers()
    run_command()
