"""Ending a solver thread that did not stop when asked (Ctrl-C, SIGTERM, or the time limit).

Most phases watch the stop flag, but some pure-Python computations cannot afford a check in their
inner loops (the communication lower bound, a clustering pass, the coarsening), and a thread left
running in them keeps taking its share of the interpreter lock while the command writes the best
answer so far: at 200K nodes that doubled the time from Ctrl-C to exit. The ``solve`` command
therefore unwinds such a thread: :func:`unwind` raises :class:`Abandoned` inside it at its next
Python instruction (CPython's ``PyThreadState_SetAsyncExc``), so every ``finally`` and ``with``
block on its stack runs and the thread ends.

The run's answer is not lost: the command reports the best verified answer the run published
(``SolveOptions.best_so_far``). A native call (a CP-SAT search) is not interrupted by this; those
stop through their own stop hooks.
"""
from __future__ import annotations

import ctypes
import threading


class Abandoned(BaseException):
    """Raised inside a solver thread the command no longer waits for. A BaseException, so that
    a heuristic's ``except Exception`` (a portfolio member that fails) does not swallow it."""


def unwind(thread: threading.Thread) -> bool:
    """Ask ``thread`` to raise :class:`Abandoned` at its next Python instruction; False when it
    has already ended (or the interpreter cannot do this)."""
    ident = thread.ident
    if ident is None or not thread.is_alive():
        return False
    try:
        set_async_exc = ctypes.pythonapi.PyThreadState_SetAsyncExc
    except AttributeError:  # not CPython
        return False
    return set_async_exc(ctypes.c_ulong(ident), ctypes.py_object(Abandoned)) == 1
