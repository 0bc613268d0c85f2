"""The command's clock (solvers/cli.process_started, session 26): it counts the interpreter's
start-up and imports, but not what a shell ran before replacing itself with the command.

/proc gives a process's fork time; `bash -c "pip install . && solve"` runs the install and then
execs `solve` in the same process, so the clock read the install as part of the run (a fresh
venv's first `solve` printed 20.0 s at "loaded", and a `--time-limit 60` run would have lost them).
"""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# the clock's age, and the time since the solvers package was imported (both at the same moment)
PROBE = ("import time, solvers; import solvers.cli as c; now = time.monotonic(); "
         "print(now - c.process_started(), now - solvers.IMPORTED_AT)")


def _age(shell: str) -> tuple[float, float]:
    """The clock's age and the time since the package's import, as the probe saw them."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    out = subprocess.run(["bash", "-c", shell], capture_output=True, text=True, env=env, check=True, timeout=60)
    age, since_import = out.stdout.strip().splitlines()[-1].split()
    return float(age), float(since_import)


def test_a_shell_that_execs_the_command_late_does_not_count() -> None:
    from solvers.cli import INTERPRETER_START

    age, since_import = _age(f"sleep 1.3; exec {sys.executable} -c '{PROBE}'")
    # before the import only the interpreter's start-up counts (without the floor: 1.3 s and more)
    assert age - since_import <= INTERPRETER_START + 1e-6 < 1.3


def test_the_interpreters_own_time_before_the_import_counts() -> None:
    age, since_import = _age(f"exec {sys.executable} -c 'import time; time.sleep(0.6); {PROBE}'")
    # the clock reads /proc/uptime and the fork time in clock ticks (10 ms): each may cut a tick
    # (CI once saw 1.1499989 against 0.5500512 + 0.6)
    tick = 1.0 / os.sysconf("SC_CLK_TCK")
    assert age >= since_import + 0.6 - 2 * tick
