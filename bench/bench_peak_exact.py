"""Exact answers under the peak memory model on real layer graphs (issue 14, item 5).

    python bench/bench_peak_exact.py prepare OUTDIR            # native problems, K=4, 0.4 x peak
    python bench/bench_peak_exact.py run OUTDIR --limit 120 [--code DIR] [--graphs a b ...]

``prepare`` reads the layer profiles in data/layer_graphs/*.txt (bench/layer_models.py wrote
them) and PipeDream's published profiles (/work/shared/workloads/pipedream/*/graph.txt), builds
each training graph (placement/importers/pipedream.py), and writes OUTDIR/NAME.json with K = 4
devices of 0.4 x the single-device FIFO peak each. ``run`` solves each with ``solve --memory-model
peak --time-limit LIMIT`` as a whole process (``--code DIR``: the checkout to run, e.g. /work/main
for the baseline), and prints one Markdown row per graph with the load average at the start.
Hold /tmp/bench.lock around ``run`` (flock) when the figures are published.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
PIPEDREAM = Path("/work/shared/workloads/pipedream")
MEMORY_FRACTION = 0.4
DEVICES = 4


def single_device_peak(problem) -> float:
    """Peak of the whole graph on one unlimited device in FIFO order (the evaluator's)."""
    from placement.evaluator import evaluate

    one = replace(problem, memory=np.array([np.inf]), device_names=["all"], allowed=[None] * problem.n)
    return float(evaluate(one, np.zeros(problem.n, dtype=np.int64), memory_model="peak").memory.max())


def sources() -> dict[str, Path]:
    found = {p.stem: p for p in sorted((ROOT / "data" / "layer_graphs").glob("*.txt"))}
    for d in sorted(PIPEDREAM.glob("*/graph.txt")):
        found[f"pipedream-{d.parent.name}"] = d
    return found


def prepare(out: Path) -> None:
    from placement.importers.build import write_native
    from placement.importers.pipedream import read_pipedream

    out.mkdir(parents=True, exist_ok=True)
    for name, path in sources().items():
        p = read_pipedream(path)
        cap = MEMORY_FRACTION * single_device_peak(p)
        p = replace(p, memory=np.full(DEVICES, cap), device_names=[f"dev{i}" for i in range(DEVICES)],
                    allowed=[None] * p.n)
        write_native(p, out / f"{name}.json")
        print(f"{name}: {p.n} nodes, {p.m} edges, capacity {cap:.4g} B", file=sys.stderr)


def run(out: Path, limit: float, code: Path, graphs: list[str], extra_args: list[str]) -> None:
    print("| graph | nodes | status | makespan | bound | gap | wall s | method | load (1 min) |")
    print("|---|---|---|---|---|---|---|---|---|")
    for path in sorted(out.glob("*.json")):
        if path.name.endswith(".report.json") or (graphs and path.stem not in graphs):
            continue
        rep = path.with_name(f"{path.stem}.{code.name}.report.json")
        load = os.getloadavg()[0]
        n = json.loads(path.read_text())
        nodes = len(n.get("nodes", []))
        t0 = time.monotonic()
        subprocess.run([sys.executable, "-m", "solvers.cli", str(path), "--memory-model", "peak", "--time-limit", str(limit),
                        "--report", str(rep), "--quiet", *extra_args], cwd=code, check=False, stdout=subprocess.DEVNULL)
        wall = time.monotonic() - t0
        r = json.loads(rep.read_text())
        gap = r.get("gap")
        print(f"| {path.stem} | {nodes} | {r['status']} | {r.get('makespan') or 0:.4f} | {r.get('lower_bound') or 0:.4f} | "
              f"{'-' if gap is None else f'{100 * gap:.2f}%'} | {wall:.1f} | {r.get('method')} | {load:.2f} |", flush=True)


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    p1 = sub.add_parser("prepare")
    p1.add_argument("out", type=Path)
    p2 = sub.add_parser("run")
    p2.add_argument("out", type=Path)
    p2.add_argument("--limit", type=float, default=120.0)
    p2.add_argument("--code", type=Path, default=ROOT)
    p2.add_argument("--graphs", nargs="*", default=[])
    p2.add_argument("--args", nargs=argparse.REMAINDER, default=[], help="extra solve arguments (last)")
    a = ap.parse_args(argv)
    if a.cmd == "prepare":
        prepare(a.out)
    else:
        run(a.out, a.limit, a.code.resolve(), a.graphs, a.args)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
