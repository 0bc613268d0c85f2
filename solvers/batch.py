"""``solve-batch MANIFEST``: many graphs x device counts x memory sizes x methods, one report each
and a summary table; the cells run on Ray when installed (solvers/sweep.py), else one by one.

The manifest is JSON::

    {"graphs": ["a.json", "b.dot"],          # paths, relative to the manifest's folder
     "devices": [4, 8],                      # optional: default the file's
     "memory": ["16GB", null],               # optional: per-device sizes; null = the file's
     "methods": ["auto", "etf"],             # optional: default ["auto"]
     "memory_model": "peak",                 # optional: default "static"
     "time_limit": 60, "seed": 0,            # optional: per cell
     "out": "results"}                       # optional: report folder (default: beside the manifest)

Writes ``OUT/<graph>_K<k>_M<memory>_<method>.json`` per cell and ``OUT/summary.md`` (atomically).
Exit 0 when every cell answered, 1 when some did not, 2 for a bad manifest (nothing written).
Ctrl-C (or SIGTERM) stops the batch: the running cells answer with what they have, the cells not
started are listed as stopped, and the reports and the summary are written; a second Ctrl-C quits
at once, writing nothing more.
"""
from __future__ import annotations

import argparse
import itertools
import json
import os
import re
import signal
import sys
import threading
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator, Sequence

from placement.evaluator import MEMORY_MODELS
from placement.formats import load_problem
from placement.problem import ProblemError
from placement.output import write_atomic
from placement.report import write_report
from placement.units import format_bytes, parse_bytes

from .methods import methods
from .background import in_worker
from .sweep import PARALLEL, Point, ray_available, ray_session, run_points

FIELDS = {"graphs", "devices", "memory", "methods", "memory_model", "time_limit", "seed", "out"}


class ManifestError(ValueError):
    """A bad manifest: the message names the field."""


def read_manifest(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text())
    except OSError as exc:
        raise ManifestError(f"{path}: cannot read: {exc.strerror}") from None
    except json.JSONDecodeError as exc:
        raise ManifestError(f"{path}: not JSON: {exc.msg} at line {exc.lineno}") from None
    if not isinstance(data, dict):
        raise ManifestError(f"{path}: expected a JSON object")
    unknown = set(data) - FIELDS
    if unknown:
        raise ManifestError(f"{path}: unknown field {sorted(unknown)[0]!r}")
    graphs = data.get("graphs")
    if not isinstance(graphs, list) or not graphs or not all(isinstance(g, str) for g in graphs):
        raise ManifestError(f"{path}: 'graphs' must be a non-empty list of paths")
    devices = data.get("devices", [None])
    if not isinstance(devices, list) or not all(d is None or (isinstance(d, int) and not isinstance(d, bool) and d >= 1) for d in devices):
        raise ManifestError(f"{path}: 'devices' must be a list of positive integers")
    memory = data.get("memory", [None])
    if not isinstance(memory, list):
        raise ManifestError(f"{path}: 'memory' must be a list of sizes (or null for the file's)")
    sizes = []
    for m in memory:
        try:
            sizes.append(None if m is None else float(m) if isinstance(m, (int, float)) else parse_bytes(m))
        except (ValueError, TypeError) as exc:
            raise ManifestError(f"{path}: 'memory' entry {m!r}: {exc}") from None
    names = data.get("methods", ["auto"])
    if not isinstance(names, list) or not names or not all(isinstance(x, str) for x in names):
        raise ManifestError(f"{path}: 'methods' must be a non-empty list of method names")
    table = methods()
    for name in names:
        if name != "auto" and name not in table:
            raise ManifestError(f"{path}: 'methods': unknown method {name!r}")
    model = data.get("memory_model", "static")
    if model not in MEMORY_MODELS:
        raise ManifestError(f"{path}: 'memory_model' must be one of {MEMORY_MODELS}")
    limit = data.get("time_limit", 60)
    if not isinstance(limit, (int, float)) or isinstance(limit, bool) or not limit > 0:
        raise ManifestError(f"{path}: 'time_limit' must be a positive number of seconds")
    seed = data.get("seed", 0)
    if not isinstance(seed, int) or isinstance(seed, bool):
        raise ManifestError(f"{path}: 'seed' must be an integer")
    base = path.parent
    out = base / data.get("out", path.stem + "-results")
    return {"graphs": [base / g for g in graphs], "devices": devices, "memory": sizes, "methods": names,
            "memory_model": model, "time_limit": float(limit), "seed": seed, "out": out}


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "-", text).strip("-") or "x"


def cells(man: dict[str, Any]) -> list[Point]:
    """One point per graph x devices x memory x method (graphs loaded once; bad input raises
    ProblemError naming the file)."""
    points = []
    for graph in man["graphs"]:
        try:
            base = load_problem(graph)
        except ProblemError as exc:
            raise ProblemError(f"{graph}: {exc}") from None
        for k, mem, method in itertools.product(man["devices"], man["memory"], man["methods"]):
            prob = base.with_devices(k, mem) if (k is not None or mem is not None) else base
            label = {"graph": str(graph), "devices": prob.k, "memory": None if mem is None else mem, "method": method,
                     "file": f"{_slug(Path(graph).stem)}_K{prob.k}_M{'file' if mem is None else _slug(format_bytes(mem))}_{_slug(method)}.json"}
            points.append(Point(prob, method, man["memory_model"], man["time_limit"], man["seed"], label))
    return points


def summary_table(results: list[dict[str, Any]], ran: str) -> str:
    rows = [f"Ran: {ran}.", "", "| graph | K | memory | method | status | makespan | lower bound | gap | memory lower bound | seconds |",
            "|---|---|---|---|---|---|---|---|---|---|"]
    for r in results:
        lab, rep = r["label"], r["report"]
        mk = rep.get("makespan")
        gap = rep.get("gap")
        mlb = rep.get("memory_lower_bound")
        lb = rep.get("lower_bound")
        rows.append(f"| {Path(lab['graph']).name} | {lab['devices']} | {'file' if lab['memory'] is None else format_bytes(lab['memory'])} | "
                    f"{lab['method']} | {r['status'] if rep else 'stopped'} | {'-' if mk is None else f'{mk:.6g}'} | "
                    f"{'-' if lb is None else f'{lb:.6g}'} | "
                    f"{'-' if gap is None else f'{100 * gap:.2f}%'} | {'-' if mlb is None else format_bytes(mlb)} | {r['seconds']:.1f} |")
    return "\n".join(rows) + "\n"


@contextmanager
def stop_on_signals(stop: threading.Event) -> Iterator[None]:
    """While the block runs, the first SIGINT or SIGTERM sets ``stop`` (with one line on stderr)
    and a second ends the process at once (exit 130); the old handlers come back after."""
    def handler(signum: int, frame: object) -> None:
        if stop.is_set():
            os.write(2, b"solve-batch: stopped again; quitting without writing\n")
            os._exit(130)
        stop.set()
        print(f"solve-batch: {signal.Signals(signum).name} received; the running cells answer with what they have, "
              "the others are skipped", file=sys.stderr, flush=True)

    if threading.current_thread() is not threading.main_thread():  # only the main thread may set handlers
        yield
        return
    old = {sig: signal.signal(sig, handler) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for sig, h in old.items():
            signal.signal(sig, h)


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="solve-batch", description="Solve graphs x device counts x memory sizes x methods; one report each and a summary table.")
    ap.add_argument("manifest", help="JSON manifest (see solvers/batch.py)")
    ap.add_argument("--parallel", choices=PARALLEL, default="auto", help="Ray when installed (auto, default), required (ray) or sequential (none)")
    ap.add_argument("--ray-address", metavar="ADDR", help="an existing Ray cluster (default: a local one)")
    args = ap.parse_args(argv)
    try:
        man = read_manifest(Path(args.manifest))
        if args.parallel == "ray" and not ray_available():
            raise ManifestError("--parallel ray needs Ray: pip install '.[ray]'")
        if man["out"].exists() and not man["out"].is_dir():
            raise ManifestError(f"'out': {str(man['out'])!r} is not a directory")
        points = cells(man)
    except (ManifestError, ProblemError) as exc:
        print(f"solve-batch: error: {exc}", file=sys.stderr)
        return 2
    stop = threading.Event()
    with stop_on_signals(stop), ray_session(args.parallel, args.ray_address):  # Ray wants the main thread
        results, ran = in_worker(lambda: run_points(points, args.parallel, args.ray_address, stop=stop))
    man["out"].mkdir(parents=True, exist_ok=True)
    for r in results:
        if r["report"]:  # a cell stopped before it answered has no report; the summary lists it
            write_report(man["out"] / r["label"]["file"], r["report"])
    table = summary_table(results, ran)
    write_atomic(man["out"] / "summary.md", table)
    print(table, end="")
    return 0 if all(r["feasible"] for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
