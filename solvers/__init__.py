"""The method table, orchestration and the ``solve`` command.

``IMPORTED_AT`` is the monotonic clock when this package is first imported: the command's clock
(``solvers.cli.process_started``) never starts more than an interpreter's start-up before it."""
import time as _time

IMPORTED_AT = _time.monotonic()
