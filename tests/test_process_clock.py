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
PROBE = "import time; import solvers.cli as c; print(time.monotonic() - c.process_started())"


def _age(shell: str) -> float:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    out = subprocess.run(["bash", "-c", shell], capture_output=True, text=True, env=env, check=True, timeout=60)
    return float(out.stdout.strip().splitlines()[-1])


def test_a_shell_that_execs_the_command_late_does_not_count() -> None:
    age = _age(f"sleep 2.5; exec {sys.executable} -c '{PROBE}'")
    assert age < 2.0  # the import and the interpreter's start only (the floor allows 1 s of start-up)


def test_the_interpreters_own_time_before_the_import_counts() -> None:
    age = _age(f"exec {sys.executable} -c 'import time; time.sleep(0.6); {PROBE}'")
    assert age >= 0.6
