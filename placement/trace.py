"""Schedule timelines: Chrome trace JSON (opens in Perfetto or chrome://tracing) and, when
matplotlib is installed (the ``plot`` extra), a PNG Gantt chart."""
from __future__ import annotations

import io
import json
from pathlib import Path

import numpy as np

from .evaluator import Evaluation
from .problem import Problem
from .output import write_atomic


def chrome_trace(problem: Problem, ev: Evaluation, time_unit_us: float = 1000.0) -> dict:
    """One complete event per node: process = the run, thread = device. Times are scaled so one
    model time unit is ``time_unit_us`` microseconds (default: the unit is a millisecond)."""
    events = [{"name": "thread_name", "ph": "M", "pid": 0, "tid": d, "args": {"name": problem.device_names[d]}}
              for d in range(problem.k)]
    for i in np.argsort(ev.start, kind="stable").tolist():
        events.append({
            "name": problem.names[i], "ph": "X", "pid": 0, "tid": int(ev.placement[i]),
            "ts": float(ev.start[i]) * time_unit_us, "dur": float(problem.time[i]) * time_unit_us,
            "args": {"id": str(problem.ids[i]), "out_bytes": float(problem.out_bytes[i]), "param_bytes": float(problem.param_bytes[i])},
        })
    return {"traceEvents": events, "displayTimeUnit": "ms", "otherData": {"problem": problem.name, "makespan": ev.makespan}}


def write_chrome_trace(path: str | Path, problem: Problem, ev: Evaluation) -> None:
    write_atomic(path, json.dumps(chrome_trace(problem, ev), allow_nan=False))


def write_gantt(path: str | Path, problem: Problem, ev: Evaluation) -> None:
    """A PNG Gantt chart of the schedule. Raises ImportError naming the extra if matplotlib is missing."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise ImportError("the Gantt chart needs matplotlib: pip install '.[plot]'") from exc
    fig, ax = plt.subplots(figsize=(12, 1 + 0.5 * problem.k))
    busy = np.flatnonzero(problem.time > 0)
    colors = plt.get_cmap("tab20")
    ax.barh(ev.placement[busy], problem.time[busy], left=ev.start[busy], height=0.8,
            color=[colors(i % 20) for i in busy.tolist()], edgecolor="none")
    ax.set_yticks(range(problem.k), problem.device_names)
    ax.set_xlabel("time")
    ax.set_title(f"{problem.name}: makespan {ev.makespan:.6g}")
    ax.invert_yaxis()
    fig.tight_layout()
    png = io.BytesIO()
    fig.savefig(png, format="png", dpi=100)
    plt.close(fig)
    write_atomic(path, png.getvalue())
