"""A second search track in a second process, on machines with a core to spare.

Why: the alternating search (solvers/pipeline.py) is single-threaded but for CP-SAT's windows: on
the 32K-operator decoder a 120 s run used 1.1 cores' worth of CPU time. Its restarts
(solvers/restarts.py) search other starts only after the first track has stalled, so a deeper
basin is reached only in runs where the stall comes early enough: the 30K GRU met issue 16's
line in the four runs of five that restarted, and a decoder run whose first track stalled after
a jump spent its last 300 s climbing back from a start 9% above (bench/results_scale.md,
sessions 29-30). With a side track those starts are searched at the same time as the first track,
on the second core, for the whole search.

This module is the plumbing only: a child process runs a module-level function the caller
gives; the child posts its better answers through a socket pair, at most every POST_SECONDS, and
a last one when it ends; :class:`SideTrack` reads them, and stops the child (a message, then a
terminate) when the parent's search ends or is stopped. The child stops itself on
Ctrl-C or SIGTERM (the terminal sends them to the whole process group), on the parent's message,
and when the socket closes (the parent is gone).
The child is a fresh interpreter (``python -c``), not a ``multiprocessing`` process: fork does not
copy a process with threads safely, and spawn re-imports the caller's ``__main__``, which runs a
script without a main guard a second time.
"""
from __future__ import annotations

import os
import pickle
import signal
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, replace
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any, Callable

import numpy as np

from placement.solution import Solution, SolveOptions

SIDE_MIN_SECONDS = 30.0  # a search shorter than this runs no side track (the child's start costs 1-3 s)
POST_SECONDS = 5.0  # the child posts its best answer at most this often (a 200K-node answer is 3 MB)
CLOSE_SECONDS = 0.5  # how long the parent waits for the child's last answer once it is asked to stop
NO_SUMMARY = "ended without a summary"  # the child's socket closed before it said how it ended
KILL_SECONDS = 0.3  # then how long a terminated child may take before it is killed (Ctrl-C: a second in all)


def cores() -> int:
    """The CPUs this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def side_track_wanted(opts: SolveOptions, budget: float | None) -> bool:
    """True when a side track pays: two cores or more, more than one worker allowed (``--workers 1``
    asks for one core), and a search of at least SIDE_MIN_SECONDS (``opts.extra["side_track"]``:
    False turns it off; ``"side_min_seconds"`` moves the threshold)."""
    if not opts.extra.get("side_track", True) or opts.workers == 1 or cores() < 2:
        return False
    return budget is None or budget >= float(opts.extra.get("side_min_seconds", SIDE_MIN_SECONDS))


def picklable_options(opts: SolveOptions) -> dict[str, Any]:
    """The fields of ``opts`` a child rebuilds its options from (not the stop event, the shared
    best-so-far or the hint; the extras that cannot cross a pipe are left out)."""
    extra = {}
    for key, value in opts.extra.items():
        try:
            pickle.dumps(value)
        except Exception:  # a callback or a lock: the child runs without it
            continue
        extra[key] = value
    return {"memory_model": opts.memory_model, "workers": opts.workers, "seed": opts.seed, "reserve": opts.reserve,
            "extra": extra}


def bare(sol: Solution) -> Solution:
    """``sol`` without its ``info`` (the portfolio's candidates nest there: the child needs only the schedule)."""
    return replace(sol, info={})


def send_quietly(conn: Connection, message: tuple) -> None:
    """Send ``message``; nothing when the other end is gone (the parent: nobody to tell; the child:
    :meth:`SideTrack.close` reports it)."""
    try:
        conn.send(message)
    except (BrokenPipeError, EOFError, OSError):
        pass


@dataclass
class Post:
    """One answer of the side track: the start it came from, its schedule and makespan."""
    label: str
    placement: np.ndarray
    start: np.ndarray
    waits: list[tuple[int, int]] | None
    makespan: float

    def solution(self) -> Solution:
        return Solution("side-track", "heuristic", placement=self.placement, start=self.start,
                        objective=self.makespan, waits=self.waits)


class Poster:
    """The child's side of the pipe: ``offer`` the track's better answers as they come (one held
    back by the rate limit goes out when its time comes, from a thread), ``flush`` the last one;
    ``done`` closes with the track's summary."""

    def __init__(self, conn: Connection) -> None:
        self.conn = conn
        self.pending: Post | None = None
        self.last = 0.0
        self.lock = threading.Lock()
        threading.Thread(target=self._due, daemon=True).start()

    def _due(self) -> None:
        while True:
            time.sleep(POST_SECONDS / 5)
            with self.lock:
                if self.pending is not None and time.monotonic() - self.last >= POST_SECONDS:
                    self._send()

    def offer(self, post: Post) -> None:
        with self.lock:
            self.pending = post
            if time.monotonic() - self.last >= POST_SECONDS:
                self._send()

    def flush(self) -> None:
        with self.lock:
            if self.pending is not None:
                self._send()

    def done(self, summary: str) -> None:
        self.flush()
        send_quietly(self.conn, ("done", summary))

    def _send(self) -> None:
        assert self.pending is not None
        send_quietly(self.conn, ("best", self.pending))
        self.pending, self.last = None, time.monotonic()



def child_stop(conn: Connection) -> threading.Event:
    """In the child: an event set on Ctrl-C, SIGTERM, any message of the parent, or the pipe's end."""
    stop = threading.Event()

    def on_signal(signum: int, frame: object) -> None:
        stop.set()

    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGTERM, on_signal)

    def listen() -> None:
        try:
            conn.recv()
        except (EOFError, OSError):
            pass
        stop.set()

    threading.Thread(target=listen, daemon=True).start()
    return stop


class SideTrack:
    """The parent's side: start ``target(conn, *args)`` (``target``: a module-level function, which
    crosses by its name) in a child process, collect its posts (:meth:`poll`), stop it (:meth:`close`). ``best`` is the best post so far.

    A thread reads the child's posts as they come: a post of a 30K-node answer is larger than the
    socket's buffer, and a child waiting for the parent's next look (up to a slice of the
    search) lost a third of its time in the first measured run."""

    def __init__(self, target: Callable[..., None], *args: Any) -> None:
        mine, theirs = socket.socketpair()
        root = str(Path(__file__).resolve().parent.parent)  # where the packages are, installed or not
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [root, os.environ.get("PYTHONPATH")]))}
        code = f"from solvers.side_track import child_main; child_main({theirs.fileno()})"
        self.started = time.monotonic()
        self.proc = subprocess.Popen([sys.executable, "-c", code], pass_fds=[theirs.fileno()], env=env,
                                     stdin=subprocess.DEVNULL)
        theirs.close()
        self.conn = Connection(mine.detach())
        self.best: Post | None = None
        self.posts = 0
        self.summary: str | None = None  # the child's summary once it has ended
        self._inbox: list[Post] = []
        self._arrived = threading.Condition()
        # the arguments (the whole problem) go while the child starts: sent here, they would hold
        # the parent's search for that start
        self.sender = threading.Thread(target=send_quietly, args=(self.conn, (target, args)), daemon=True)
        self.sender.start()
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self) -> None:
        summary = NO_SUMMARY
        try:
            while True:
                kind, body = self.conn.recv()
                if kind == "done":
                    summary = body
                    break
                with self._arrived:
                    self._inbox.append(body)
                    self._arrived.notify_all()
        except (EOFError, OSError, TypeError):  # TypeError: the connection was closed under the read
            pass
        with self._arrived:
            self.summary = self.summary or summary  # a hurried close has named the end already
            self._arrived.notify_all()

    def poll(self, wait: float = 0.0) -> list[Post]:
        """The posts that arrived since the last call (waiting up to ``wait`` seconds for one, or
        for the child's end); the best of all is kept in ``best``."""
        with self._arrived:
            if not self._inbox and self.summary is None and wait > 0.0:
                self._arrived.wait(wait)
            got, self._inbox = self._inbox, []
        for post in got:
            self.posts += 1
            if self.best is None or post.makespan < self.best.makespan:
                self.best = post
        return got

    def close(self, wait: float = CLOSE_SECONDS, hurry: bool = False) -> list[Post]:
        """Ask the child to stop, collect what it sends within ``wait`` seconds, end it; its last posts.
        ``hurry`` (the parent itself was asked to stop: Ctrl-C, SIGTERM): the ``solve`` command
        answers a quarter second after a stop whether or not the run has returned, so the child is
        killed at once and only the posts already read are kept."""
        if hurry:
            self._kill()
            with self._arrived:  # the reader may have seen the socket close first
                if self.summary in (None, NO_SUMMARY):
                    self.summary = "killed: the run was asked to stop"
        else:
            until = time.monotonic() + wait
            self.sender.join(wait)
            if not self.sender.is_alive():
                send_quietly(self.conn, ("stop",))
            self.reader.join(max(0.0, until - time.monotonic()))
            if self.proc.poll() is None:
                self.proc.terminate()
            try:
                self.proc.wait(KILL_SECONDS)
            except subprocess.TimeoutExpired:
                self._kill()
        self.reader.join(0.05 if hurry else 0.5)  # the child is gone: the socket's end wakes the reader
        got = self.poll()
        self.conn.close()
        return got

    def _kill(self) -> None:
        """SIGKILL the child and reap it, so no zombie is left and ``proc.poll()`` tells the truth."""
        self.proc.kill()
        try:
            self.proc.wait(KILL_SECONDS)
        except subprocess.TimeoutExpired:
            pass


def child_main(fd: int) -> None:
    """The child's entry (``python -c``): read the target function and its arguments from the
    socket ``fd``, run it with the connection first."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # until the target's own handler: the parent stops it too
    conn = Connection(fd)
    target, args = conn.recv()  # unpickling the target imports its module
    target(conn, *args)
