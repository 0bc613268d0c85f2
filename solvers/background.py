"""Work in a worker thread while the main thread stays free for signals.

Why: Python runs signal handlers only in the main thread, and only between bytecodes; a main
thread inside a native solve (CP-SAT) would see Ctrl-C only when that solve ends (a frontier took
2-4.5 s to stop, session 40). The commands (``solve``, ``solve-batch``) run their solves here and
keep the main thread waiting in short steps.
"""
from __future__ import annotations

import threading
from typing import Any, Callable


def worker(job: Callable[[], Any], name: str) -> tuple[threading.Thread, dict[str, Any]]:
    """A started daemon thread running ``job()``, and the box where it leaves ``result`` or the
    ``error`` it raised (for the main thread to re-raise)."""
    box: dict[str, Any] = {}

    def target() -> None:
        try:
            box["result"] = job()
        except BaseException as exc:  # re-raised in the main thread
            box["error"] = exc

    thread = threading.Thread(target=target, name=name, daemon=True)
    thread.start()
    return thread, box


def in_worker(job: Callable[[], Any], name: str = "sweep") -> Any:
    """``job()`` run in a worker thread while the main thread waits in 0.05 s steps; its result,
    or the error it raised."""
    thread, box = worker(job, name)
    while thread.is_alive():
        thread.join(0.05)
    if "error" in box:
        raise box["error"]
    return box["result"]
