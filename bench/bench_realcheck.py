"""Session 17 ("realcheck"): `solve` as a user runs it on real PyTorch training steps
(bench/real_models.py), for bench/results_import.md.

    python bench/bench_realcheck.py import  OUTDIR MODEL...        # capture each model (untimed, nice)
    python bench/bench_realcheck.py static  OUTDIR MODEL... --k 4 8  # auto 120 s (locked) + etf, pardnn
    python bench/bench_realcheck.py peak    OUTDIR MODEL... --k 4    # smallest memory, 1.5x it, inf

Every timed run is one whole `solve` process under `flock /tmp/bench.lock`, with `uptime`'s load
at its start and end; every figure comes from the report `solve` writes (the evaluator's). One
line of JSON per run is appended to OUTDIR/runs.jsonl. Run from the repository root.
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

RATIOS = (1.1, 1.2, 1.3, 1.5, 2.0)


def solve(out: Path, graph: Path, tag: str, args: list[str], *, timed: bool) -> dict:
    """One `solve` process; its report plus wall time and load, logged to runs.jsonl."""
    report = out / f"{tag}.report.json"
    cmd = [sys.executable, "-m", "solvers.cli", str(graph), "--quiet", "--report", str(report), *args]
    # the wall time and load are taken inside the lock, so waiting for it is not counted
    inner = ('read a b c x y < /proc/loadavg; echo "@@ LOAD0 $a/$b/$c" >&2; s=$(date +%s.%N); "$@"; rc=$?; '
             'e=$(date +%s.%N); read a b c x y < /proc/loadavg; echo "@@ LOAD1 $a/$b/$c" >&2; '
             'echo "@@ WALL $s $e" >&2; exit $rc')
    cmd = (["flock", "/tmp/bench.lock"] if timed else ["nice", "-n", "10"]) + ["bash", "-c", inner, "run"] + cmd
    proc = subprocess.run(cmd, capture_output=True, text=True)
    marks = {line.split()[1]: line.split()[2:] for line in proc.stderr.splitlines() if line.startswith("@@ ")}
    wall = float(marks["WALL"][1]) - float(marks["WALL"][0])
    start_load, end_load = marks["LOAD0"][0], marks["LOAD1"][0]
    rep = json.loads(report.read_text()) if report.exists() else {}
    row = {"tag": tag, "args": args, "rc": proc.returncode, "wall": round(wall, 2), "timed": timed,
           "load_start": start_load, "load_end": end_load, "stderr": proc.stderr[-400:],
           **{k: rep.get(k) for k in ("status", "makespan", "lower_bound", "gap", "method", "seconds",
                                       "memory_lower_bound", "reason")},
           "max_peak": max(rep.get("peak_memory") or [0]) if rep else None}
    with open(out / "runs.jsonl", "a") as f:
        f.write(json.dumps(row) + "\n")
    print(json.dumps({k: row[k] for k in ("tag", "rc", "status", "makespan", "gap", "method", "wall", "load_start")}), flush=True)
    return row


def do_import(out: Path, models: list[str]) -> None:
    for m in models:
        subprocess.run(["nice", "-n", "10", sys.executable, "-m", "placement.importers.torch",
                        f"bench/real_models.py:{m}", "-o", str(out / f"{m}.json")], check=True)


def do_static(out: Path, models: list[str], ks: list[int], limit: float) -> None:
    for m in models:
        g = out / f"{m}.json"
        for k in ks:
            solve(out, g, f"{m}.static.k{k}.auto", ["--devices", str(k), "--time-limit", str(limit)], timed=True)
            for method in ("etf", "pardnn"):
                solve(out, g, f"{m}.static.k{k}.{method}", ["--devices", str(k), "--time-limit", str(limit), "--method", method], timed=False)


def do_peak(out: Path, models: list[str], ks: list[int], limit: float, ratios: tuple[float, ...] = RATIOS,
            timed: bool = True) -> None:
    """Per model and K: the memory lower bound (from ETF's report), then `solve` at each ratio of
    it until one answers (the smallest memory), then unlimited memory and 1.5x the smallest."""
    for m in models:
        g = out / f"{m}.json"
        for k in ks:
            base = ["--devices", str(k), "--memory-model", "peak", "--time-limit", str(limit)]
            probe = solve(out, g, f"{m}.peak.k{k}.etf-inf", base + ["--memory", "inf", "--method", "etf"], timed=False)
            bound = probe["memory_lower_bound"]
            smallest = None
            for r in ratios:
                row = solve(out, g, f"{m}.peak.k{k}.x{r}", base + ["--memory", str(int(r * bound))], timed=timed)
                if row["status"] in ("feasible", "optimal"):
                    smallest = int(r * bound)
                    break
            if smallest is None:
                continue
            solve(out, g, f"{m}.peak.k{k}.inf", base + ["--memory", "inf"], timed=timed)
            solve(out, g, f"{m}.peak.k{k}.1.5smallest", base + ["--memory", str(int(1.5 * smallest))], timed=timed)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("part", choices=("import", "static", "peak"))
    ap.add_argument("out", type=Path)
    ap.add_argument("models", nargs="+")
    ap.add_argument("--k", type=int, nargs="+", default=[4, 8])
    ap.add_argument("--time-limit", type=float, default=120)
    ap.add_argument("--ratios", type=float, nargs="+", default=list(RATIOS), help="peak: memory / lower bound to try, in order")
    ap.add_argument("--untimed", action="store_true", help="run under nice instead of the lock (exploration)")
    a = ap.parse_args()
    a.out.mkdir(parents=True, exist_ok=True)
    if a.part == "import":
        do_import(a.out, a.models)
    elif a.part == "static":
        do_static(a.out, a.models, a.k, a.time_limit)  # auto under the lock, the heuristics untimed
    else:
        do_peak(a.out, a.models, a.k, a.time_limit, tuple(a.ratios), not a.untimed)


if __name__ == "__main__":
    main()
