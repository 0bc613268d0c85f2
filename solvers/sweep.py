"""Sweeps of independent solves (frontier points, batch cells), sequential or on Ray.

Why: a memory frontier or a batch (graphs x K x memory x methods) is many independent solves.
With the ``ray`` extra installed they run as Ray tasks (a local cluster by default, an existing
one given its address); without it, one after the other. Each point is the same call either way,
so deterministic methods give the same answers; time-limited ones (auto) depend on the machine's
load either way.
"""
from __future__ import annotations

import math
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator, Sequence

import numpy as np

from placement.problem import Problem
from placement.solution import SolveOptions

from .ordering import device_orders
from .run import run

PARALLEL = ("auto", "ray", "none")
STOP_POLL = 0.05  # seconds between a Ray task's reads of the sweep's stop flag
STOP_GRACE = 0.5  # seconds a stopped sweep waits for its running Ray tasks' answers before shutting Ray down


@dataclass
class Point:
    """One solve of a sweep: the problem as given (devices and memory already set) and the run."""

    problem: Problem
    method: str = "auto"
    memory_model: str = "static"
    time_limit: float | None = 60.0
    seed: int = 0
    label: dict[str, Any] = field(default_factory=dict)
    extra: dict[str, Any] = field(default_factory=dict)  # SolveOptions.extra of the run


def solve_point(point: Point, stop: threading.Event | None = None) -> dict[str, Any]:
    """Run one point and return its report (the same dict ``solve --report`` writes) plus the
    answer's placement, order, waits (node indices: the report's ``control_dependencies``,
    listed when the order alone does not fit) and start times, so a sweep can re-use it. ``stop``
    (Ctrl-C in the CLI) ends the solve with its best answer so far."""
    opts = SolveOptions(memory_model=point.memory_model, time_limit=point.time_limit, seed=point.seed, extra=dict(point.extra))
    if stop is not None:
        opts.stop = stop
    res = run(point.problem, point.method, opts)
    rep = res.report(point.problem, point.memory_model)
    out: dict[str, Any] = {"label": point.label, "report": rep, "status": res.status, "feasible": res.feasible,
                           "makespan": res.evaluation.makespan if res.feasible and res.evaluation is not None else None,
                           "lower_bound": res.lower_bound, "seconds": res.seconds}
    if res.feasible and res.evaluation is not None:
        ev = res.evaluation
        out["placement"] = ev.placement.tolist()
        out["order"] = device_orders(point.problem, ev)
        out["waits"] = [[point.problem.index[u], point.problem.index[v]] for u, v in rep.get("control_dependencies", [])]
        out["start"] = ev.start.tolist()
        out["memory"] = ev.memory.tolist()
    return out


def ray_available() -> bool:
    try:
        import ray  # noqa: F401
    except ImportError:
        return False
    return True


def uses_ray(parallel: str) -> bool:
    """Whether a sweep with this ``parallel`` setting runs on Ray."""
    if parallel not in PARALLEL:
        raise ValueError(f"parallel must be one of {PARALLEL}, got {parallel!r}")
    return parallel == "ray" or (parallel == "auto" and ray_available())


@contextmanager
def ray_session(parallel: str, address: str | None = None) -> Iterator[int]:
    """Ray started for the block when a sweep with ``parallel`` runs on it (and not yet running):
    yields how many points run at once (Ray's CPUs; 1 when sequential), so a caller can share its
    time limit by waves of points (solvers/frontier.py). run_points reuses the session."""
    if not uses_ray(parallel):
        yield 1
        return
    import ray

    started_here = not ray.is_initialized()
    if started_here:
        ray.init(address=address, include_dashboard=False, log_to_driver=False, configure_logging=False)
    try:
        yield max(1, int(ray.available_resources().get("CPU", 1)))
    finally:
        if started_here:
            _shutdown(ray)


def _shutdown(ray: Any) -> None:
    """``ray.shutdown()`` without its one slow step. A local cluster's autoscaler monitor ignores
    SIGTERM, and the graceful shutdown waits a whole second for it before killing it (1.40 s of
    1.50, Ray 2.40), so it is killed first; the other processes still end gracefully (a raylet
    killed outright leaves its dashboard agent behind). Private API: without it, the plain
    shutdown."""
    try:
        for info in ray._private.worker._global_node.all_processes.get("monitor", []):
            info.process.kill()
            info.process.wait(1.0)
    except Exception:  # another Ray version, a cluster not started here: nothing to speed up
        pass
    ray.shutdown()


def stopped_point(point: Point) -> dict[str, Any]:
    """The result of a point a stop request (Ctrl-C) ended before it answered."""
    return {"label": point.label, "report": {}, "status": "unknown", "feasible": False, "makespan": None,
            "lower_bound": None, "seconds": 0.0, "reason": "stopped before this point answered"}


def run_points(points: Sequence[Point], parallel: str = "auto", address: str | None = None,
               fn: Callable[[Point, threading.Event | None], dict[str, Any]] = solve_point,
               stop: threading.Event | None = None) -> tuple[list[dict[str, Any]], str]:
    """Run every point; returns the results in the order given and how they ran ("ray" or
    "sequential"). ``parallel``: "auto" (Ray when installed), "ray" (required), "none". Once
    ``stop`` is set, a running point ends with its best answer (``fn`` given ``stop``; on Ray
    through a :class:`StopFlag` its tasks read), the points not started are not run, and a Ray
    task that has not answered STOP_GRACE seconds after the stop is left to Ray's shutdown
    (:func:`stopped_point`)."""
    if not uses_ray(parallel):
        return [stopped_point(p) if stop is not None and stop.is_set() else fn(p, stop) for p in points], "sequential"
    if stop is not None and stop.is_set():
        return [stopped_point(p) for p in points], "ray"
    import ray

    with ray_session(parallel, address):
        flag = ray.remote(num_cpus=0)(StopFlag).remote() if stop is not None else None
        task = ray.remote(num_cpus=1)(_ray_point)
        refs = [task.remote(fn, p, flag) for p in points]
        done: dict[Any, dict[str, Any]] = {}
        waiting = list(refs)
        grace: float | None = None  # after a stop: until when the running points may still answer
        while waiting and (grace is None or time.monotonic() < grace):
            ready, waiting = ray.wait(waiting, num_returns=1, timeout=0.05)
            for ref in ready:
                done[ref] = ray.get(ref)
            if grace is None and stop is not None and stop.is_set():
                flag.set.remote()
                grace = time.monotonic() + STOP_GRACE  # the tasks still running then end with Ray's shutdown
        return [done.get(ref) or stopped_point(p) for ref, p in zip(refs, points)], "ray"


class StopFlag:
    """The sweep's stop request where Ray's tasks can read it (a Ray actor in :func:`run_points`)."""

    def __init__(self) -> None:
        self.stopped = False

    def set(self) -> None:
        self.stopped = True

    def is_set(self) -> bool:
        return self.stopped


def _ray_point(fn: Callable[[Point, threading.Event | None], dict[str, Any]], point: Point, flag: Any) -> dict[str, Any]:
    """One point as a Ray task: ``fn(point, stop)``, with ``stop`` set once the driver sets ``flag``
    (polled every STOP_POLL seconds), so a stopped sweep's running points answer with what they
    have, as they do when run one after the other."""
    if flag is None:
        return fn(point, None)
    import ray

    stop, finished = threading.Event(), threading.Event()

    def watch() -> None:  # its first read waits for the actor to start (0.8 s): the solve does not
        while not finished.wait(STOP_POLL):
            try:
                if ray.get(flag.is_set.remote()):
                    stop.set()
                    return
            except Exception:  # the driver is gone: its shutdown ends this task anyway
                return

    threading.Thread(target=watch, name="stop-flag", daemon=True).start()
    try:
        return fn(point, stop)
    finally:
        finished.set()


def finite(x: float | None) -> bool:
    return x is not None and math.isfinite(x)


def as_array(x: Any) -> np.ndarray:
    return np.asarray(x, dtype=np.int64)
