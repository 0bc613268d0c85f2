"""Kicks out of the peak descent's local minima (heuristics/peak_kicks.py), before and after:
whole `solve` processes at tight peak memory, two code trees side by side.

    python bench/bench_kicks.py OUT.jsonl --trees BEFORE_DIR AFTER_DIR --time-limit 60 \
        --case GRAPH.json:K:RATIO [--case ...] [--seed 0]

Per case the capacity is RATIO x the peak model's memory_lower_bound for K devices; each tree runs
`python -m solvers.cli GRAPH --devices K --memory-model peak --memory CAP --time-limit T --seed S`
from its own directory as one whole process under `flock /tmp/bench.lock` (wall time and
/proc/loadavg taken inside the lock). Printed and appended to OUT.jsonl: status, makespan, the
"nearest fits X x" figure of an unknown answer, wall seconds, load; a report with a placement is
re-checked with `placement.evaluator.check`. Never run by CI.
"""
from __future__ import annotations

import argparse
import json
import math
import re
import subprocess
import sys
import time
from pathlib import Path

from placement.evaluator import check
from placement.formats import load_problem
from placement.memory_bounds import memory_lower_bound


def load() -> str:
    return Path("/proc/loadavg").read_text().split()[0]


def run(tree: str, graph: str, k: int, cap: int, limit: float, seed: int, report: Path) -> dict:
    report.unlink(missing_ok=True)
    cmd = [sys.executable, "-m", "solvers.cli", str(Path(graph).resolve()), "--devices", str(k), "--memory-model",
           "peak", "--memory", str(cap), "--time-limit", str(limit), "--seed", str(seed), "--quiet",
           "--report", str(report.resolve())]
    inner = ("import json,subprocess,sys,time;l0=open('/proc/loadavg').read().split()[0];t=time.monotonic();"
             "p=subprocess.run(sys.argv[2:],cwd=sys.argv[1],capture_output=True,text=True);"
             "print(json.dumps({'rc':p.returncode,'wall':time.monotonic()-t,'load0':l0,"
             "'load1':open('/proc/loadavg').read().split()[0],'err':p.stderr[-300:]}))")
    out = subprocess.run(["flock", "/tmp/bench.lock", sys.executable, "-c", inner, tree, *cmd],
                         capture_output=True, text=True)
    row = json.loads(out.stdout.strip().splitlines()[-1])
    if report.exists():
        rep = json.loads(report.read_text())
        row.update(status=rep["status"], makespan=rep.get("makespan"))
        m = re.search(r"fits ([0-9.]+) x each device", rep.get("reason") or "")
        row["nearest"] = float(m.group(1)) if m else None
        if rep.get("placement"):
            p = load_problem(graph)
            q = p.with_devices(len(rep["capacity"]), rep["capacity"])
            ev = check(q, rep["placement"], rep["start"], rep["memory_model"])
            row["checked"] = abs(ev.makespan - rep["makespan"]) <= 1e-9 * max(1.0, ev.makespan)
    return row


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--trees", nargs="+", required=True)
    ap.add_argument("--case", action="append", required=True, help="GRAPH.json:K:RATIO")
    ap.add_argument("--time-limit", type=float, default=60.0)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    for case in args.case:
        graph, k, ratio = case.rsplit(":", 2)
        k, ratio = int(k), float(ratio)
        p = load_problem(graph)
        bound = memory_lower_bound(p.with_devices(k, [math.inf] * k), "peak", k)["best"]
        cap = int(bound * ratio)
        for tree in args.trees:
            row = {"graph": Path(graph).stem, "k": k, "ratio": ratio, "tree": tree, "limit": args.time_limit,
                   "seed": args.seed, "when": time.strftime("%H:%M:%S")}
            row.update(run(tree, graph, k, cap, args.time_limit, args.seed, Path(args.out).with_suffix(".report.json")))
            print(json.dumps(row), flush=True)
            with open(args.out, "a") as fh:
                fh.write(json.dumps(row) + "\n")


if __name__ == "__main__":
    main()
