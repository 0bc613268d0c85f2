"""Outputs: the JSON report and PARDNN's placement file (``node device`` lines).

The report's numbers all come from an :class:`~placement.evaluator.Evaluation`, so the reported
makespan and memory are the evaluator's, whatever method produced the placement.
"""
from __future__ import annotations

import json
import math
from json.encoder import encode_basestring_ascii  # type: ignore[attr-defined]
from pathlib import Path
from typing import Any

import numpy as np

from .evaluator import Evaluation
from .output import write_atomic
from .problem import Problem, ProblemError


# "optimal" means: the answer's objective and a lower bound proved for the very problem the user
# gave are within this relative gap, (value - bound) / value (docs/exact.md). The makespan models
# work on the real data or on exactly scaled integers; the max-load and latency IPs round times down
# to 1/scale (1e-5 time units by default), which costs up to about this much relative gap.
OPTIMAL_GAP = {"makespan": 1e-6, "max-load": 1e-5, "fw+bw": 1e-5, "latency": 1e-5}


def within_optimal_gap(value: float, bound: float | None, objective: str = "makespan") -> bool:
    """May an answer of ``value`` with the proved ``bound`` be called optimal?"""
    g = gap(value, bound)
    return g is not None and g <= OPTIMAL_GAP[objective]


def gap(value: float | None, bound: float | None) -> float | None:
    """(value - bound) / value; 0 when both are 0; None when either is missing."""
    if value is None or bound is None:
        return None
    if value <= 0:
        return 0.0
    return max(0.0, (value - bound) / value)


def _clean(x: Any) -> Any:
    """JSON-safe: numpy scalars to Python, inf/nan to None."""
    if isinstance(x, dict):
        return {str(k): _clean(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_clean(v) for v in x]
    if isinstance(x, np.ndarray):
        return [_clean(v) for v in x.tolist()]
    if isinstance(x, (np.integer,)):
        return int(x)
    if isinstance(x, (float, np.floating)):
        f = float(x)
        return None if math.isnan(f) or math.isinf(f) else f
    return x


json_safe = _clean


def build_report(
    problem: Problem,
    *,
    status: str,
    method: str,
    memory_model: str,
    seconds: float,
    evaluation: Evaluation | None,
    lower_bound: float | None,
    objective_name: str = "makespan",
    objective: float | None = None,
    reason: str = "",
    extra: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The report dict (see README: status, objective, makespan, lower_bound, gap, memory, placement,
    start, seconds, method). ``objective`` defaults to the evaluator's makespan."""
    makespan = evaluation.makespan if evaluation is not None else None
    value = objective if objective is not None else makespan
    rep: dict[str, Any] = {
        "status": status,
        "objective_name": objective_name,
        "objective": value,
        "makespan": makespan,
        "lower_bound": lower_bound,
        "gap": gap(value, lower_bound) if value is not None else None,
        "memory_model": memory_model,
        "capacity": problem.memory.tolist(),
        "static_memory": evaluation.static_memory.tolist() if evaluation is not None else None,
        "peak_memory": evaluation.peak_memory.tolist() if evaluation is not None else None,
        "placement": None,  # filled below, after _clean: already JSON-safe, and 2 x n values to walk
        "start": None,
        "seconds": seconds,
        "method": method,
        "problem": {"name": problem.name, "nodes": problem.n, "edges": problem.m, "devices": problem.k},
    }
    if reason:
        rep["reason"] = reason
    if extra:
        rep.update(extra)
    rep = _clean(rep)
    if evaluation is not None:
        keys = [str(nid) for nid in problem.ids]
        start = evaluation.start.tolist()
        if not np.isfinite(evaluation.start).all():
            start = [s if math.isfinite(s) else None for s in start]
        rep["placement"] = dict(zip(keys, evaluation.placement.astype(np.int64).tolist()))
        rep["start"] = dict(zip(keys, start))
    return rep


def write_report(path: str | Path, report: dict[str, Any]) -> None:
    """One top-level field per line, each value compact: readable with ``head``, and written by
    json's C encoder (``indent`` falls back to the pure-Python one, 2x slower on 200K-node reports)."""
    # allow_nan=False: NaN and Infinity are not JSON (_clean turns them into null); a stray one is a bug.
    fields = ",\n".join(f" {json.dumps(key)}: {_encode(value)}" for key, value in report.items())
    write_atomic(path, "{\n" + fields + "\n}\n")


def _encode(value: Any) -> str:
    """``json.dumps(value, allow_nan=False)``, the same text, but for the big node -> number maps of a
    report (placement, start) twice as fast: their keys escaped by json's C function and joined
    with the numbers' own text, instead of the encoder's per-item work (0.4 s at 200K nodes, most
    of what stood between Ctrl-C and the end of the process)."""
    if isinstance(value, dict) and len(value) >= _FAST_MAP_ITEMS and all(type(k) is str for k in value):
        numbers = list(value.values())
        if all(type(v) is int for v in numbers):
            text = map(int.__repr__, numbers)
        elif all(type(v) is float for v in numbers) and all(map(math.isfinite, numbers)):
            text = map(float.__repr__, numbers)
        else:
            return json.dumps(value, allow_nan=False)
        return "{" + ", ".join([k + ": " + v for k, v in zip(map(encode_basestring_ascii, value), text)]) + "}"
    return json.dumps(value, allow_nan=False)


_FAST_MAP_ITEMS = 1000


def unwritable_id(problem: Problem) -> str | None:
    """The first node id that a ``node device`` line cannot carry (read back by read_placement:
    stripped, split at the last white space, '#' lines skipped), or None when all can."""
    for nid in problem.ids:
        text = str(nid)
        if not text or text != text.strip() or any(ch in text for ch in "\n\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029") or text.startswith("#"):
            return text
    return None


def placement_lines(problem: Problem, placement: np.ndarray) -> str:
    return "".join(f"{nid} {int(d)}\n" for nid, d in zip(problem.ids, placement.tolist()))


def write_placement(path: str | Path, problem: Problem, placement: np.ndarray) -> None:
    """PARDNN's placement file: one ``node device`` line per node (node = its id)."""
    write_atomic(path, placement_lines(problem, placement))


def read_placement(path: str | Path, problem: Problem) -> np.ndarray:
    """Read a ``node device`` placement file; every node must appear exactly once."""
    placement = np.full(problem.n, -1, dtype=np.int64)
    for lineno, raw in enumerate(Path(path).read_text().splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        parts = line.rsplit(None, 1)
        if len(parts) != 2 or not parts[1].lstrip("-").isdigit():
            raise ProblemError(f"{path}:{lineno}: expected 'node device', got {line!r}")
        name, dev = parts
        if name not in problem.index:
            raise ProblemError(f"{path}:{lineno}: unknown node {name!r}")
        i = problem.index[name]
        if placement[i] >= 0:
            raise ProblemError(f"{path}:{lineno}: node {name!r} placed twice")
        d = int(dev)
        if not 0 <= d < problem.k:
            raise ProblemError(f"{path}:{lineno}: device {d} of node {name!r} not in 0..{problem.k - 1}")
        placement[i] = d
    missing = np.flatnonzero(placement < 0)
    if missing.size:
        raise ProblemError(f"{path}: node {problem.ids[int(missing[0])]!r} has no device")
    return placement
