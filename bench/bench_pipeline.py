"""Benchmark of the auto pipeline (`solve --time-limit T`): quality against PARDNN and the warm
start, and the wall time of the whole `solve` process against the limit. Never run by CI.

Every instance is written once as native JSON under --workdir and solved by the CLI in a fresh
process (`python3 -m solvers.cli FILE --time-limit T --report ...`), so "wall" is what a user
waits for: start-up, loading, every phase, the report and the placement file. The makespan, bound,
status and phases are read from the report (the evaluator's values on the written answer).

    python3 bench/bench_pipeline.py prepare --sizes 1000 10000 --devices 4 8 16   # files + PARDNN alone
    python3 bench/bench_pipeline.py run --sizes 1000 10000 --devices 16 --time-limit 60
    python3 bench/bench_pipeline.py run --latency --time-limit 600                   # msr-fiddle graphs
    python3 bench/bench_pipeline.py split --sizes 10000 --devices 4 --time-limit 60 --shares 0.15,0.15 0.1,0.5

`prepare` (run it niced, outside any timing) runs PARDNN alone on each generated instance, without
a time limit, and keeps its makespan in WORKDIR/pardnn.json for `run` to show beside the pipeline.
`split` runs the pipeline in-process with other warm/refine shares of the budget (goal: choose
the split by measurement).
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Iterator

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from placement.formats import load_problem  # noqa: E402
from placement.formats.native import write_problem  # noqa: E402
from placement.generate import generate  # noqa: E402
from placement.solution import SolveOptions  # noqa: E402
from solvers import methods as registry  # noqa: E402
from solvers.run import run  # noqa: E402

LATENCY = ROOT.parent / "shared" / "workloads" / "msr-fiddle" / "latency-inputs" / "OperatorGraphs"
KINDS = ("transformer", "lstm", "cnn")


def instances(args: argparse.Namespace) -> Iterator[tuple[str, Path]]:
    """(name, native JSON path) of every selected instance, writing generated ones on first use."""
    if getattr(args, "latency", False):
        for path in sorted(LATENCY.glob("*.json")):
            if not args.only or any(o in path.stem for o in args.only):
                yield path.stem, path
        return
    work = Path(args.workdir)
    work.mkdir(parents=True, exist_ok=True)
    for nodes in args.sizes:
        for kind in args.kinds:
            for k in args.devices:
                name = f"{kind}-{nodes}-K{k}"
                if args.only and not any(o in name for o in args.only):
                    continue
                path = work / f"{name}.json"
                if not path.exists():
                    write_problem(generate(kind, nodes, seed=0, devices=k, memory_fraction=0.6), path)
                yield name, path


def load_average() -> str:
    return os.getloadavg().__repr__()


def prepare(args: argparse.Namespace) -> None:
    cache_path = Path(args.workdir) / "pardnn.json"
    cache = json.loads(cache_path.read_text()) if cache_path.exists() else {}
    for name, path in instances(args):
        if name in cache:
            continue
        prob = load_problem(path)
        t = time.monotonic()
        sol = registry.get("pardnn").func(prob, SolveOptions())
        cache[name] = {"makespan": sol.objective, "status": sol.status, "seconds": time.monotonic() - t}
        cache_path.write_text(json.dumps(cache, indent=1))
        print(name, cache[name], flush=True)


def solve_cli(path: Path, args: argparse.Namespace) -> tuple[dict, float]:
    """Run the CLI in a fresh process; its report and the process's wall seconds."""
    work = Path(args.workdir)
    report, out = work / f"{path.stem}.report.json", work / f"{path.stem}.placement.txt"
    cmd = [sys.executable, "-m", "solvers.cli", str(path), "--time-limit", str(args.time_limit), "--workers", str(args.workers),
           "--report", str(report), "--out", str(out), "--quiet"]
    t = time.monotonic()
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
    wall = time.monotonic() - t
    if proc.returncode not in (0, 1):
        raise RuntimeError(f"solve failed on {path}: {proc.stderr[-2000:]}")
    return json.loads(report.read_text()), wall


def bench_run(args: argparse.Namespace) -> None:
    cache_path = Path(args.workdir) / "pardnn.json"
    pardnn = json.loads(cache_path.read_text()) if cache_path.exists() else {}
    print(f"<!-- load average at start: {load_average()}; time limit {args.time_limit:g} s; {time.strftime('%Y-%m-%d %H:%M:%S')} -->")
    print("| instance | nodes | K | PARDNN alone | warm start (method) | pipeline | lower bound | gap | vs PARDNN | vs warm | status | wall s | phases |")
    print("|---|---:|---:|---:|---|---:|---:|---:|---:|---:|---|---:|---|")
    for name, path in instances(args):
        rep, wall = solve_cli(path, args)
        prob = rep["problem"]
        phases = rep.get("phases", [])
        warm = next((p for p in phases if p["name"] == "warm-start"), {})
        mk = rep.get("makespan")
        pd = pardnn.get(name, {}).get("makespan")
        wm = warm.get("makespan")
        vs = lambda ref: f"{100 * (ref - mk) / ref:.2f}%" if ref and mk is not None else "-"  # noqa: E731
        gap = f"{100 * rep['gap']:.1f}%" if rep.get("gap") is not None else "-"
        over = wall / args.time_limit - 1
        flag = "" if over <= 0.05 else " **over**"
        steps = ", ".join(f"{p['name']} {p.get('seconds', 0):.0f}s" for p in phases)
        print(f"| {name} | {prob['nodes']} | {prob['devices']} | {pd if pd is None else f'{pd:.6g}'} | "
              f"{wm if wm is None else f'{wm:.6g}'} ({warm.get('note', '-')}) | {mk if mk is None else f'{mk:.6g}'} | "
              f"{rep['lower_bound']:.6g} | {gap} | {vs(pd)} | {vs(wm)} | {rep['status']} | {wall:.1f}{flag} | {steps} |", flush=True)


def split(args: argparse.Namespace) -> None:
    """The pipeline in-process with other budget shares, one line per (instance, shares)."""
    print(f"<!-- load average at start: {load_average()}; time limit {args.time_limit:g} s -->")
    print("| instance | warm share | refine share | refine | pipeline | seconds | phases |")
    print("|---|---:|---:|---|---:|---:|---|")
    for name, path in instances(args):
        prob = load_problem(path)
        for shares in args.shares:
            w, r, *rest = shares.split(",")
            extra = {"warm_share": float(w), "refine_share": float(r)}
            if rest:
                extra["refine_multilevel_nodes"] = int(rest[0])
            t = time.monotonic()
            res = run(prob, "auto", SolveOptions(time_limit=args.time_limit, workers=args.workers, extra=extra))
            secs = time.monotonic() - t
            mk = res.evaluation.makespan if res.evaluation is not None else float("nan")
            mode = "multilevel" if prob.n > extra.get("refine_multilevel_nodes", 20000) else "plain"
            steps = ", ".join(f"{p['name']} {p.get('seconds', 0):.0f}s" + (f" ({p['note']})" if p["name"] == "refine" else "")
                              for p in res.history)
            print(f"| {name} | {w} | {r} | {mode} | {mk:.6g} | {secs:.0f} | {steps} |", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("part", choices=("prepare", "run", "split"))
    ap.add_argument("--time-limit", type=float, default=60.0)
    ap.add_argument("--latency", action="store_true", help="run: the msr-fiddle latency graphs instead of generated ones")
    ap.add_argument("--kinds", nargs="+", default=list(KINDS))
    ap.add_argument("--sizes", type=int, nargs="+", default=[1000, 10000, 100000])
    ap.add_argument("--devices", type=int, nargs="+", default=[4, 8, 16])
    ap.add_argument("--only", nargs="*", help="substrings of instance names to keep")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--workdir", default="/tmp/bench_pipeline", help="generated instances, reports, PARDNN cache")
    ap.add_argument("--shares", nargs="+", default=["0.15,0.15"], help="split: WARM,REFINE[,MULTILEVEL_NODES] budget shares")
    args = ap.parse_args()
    {"prepare": prepare, "run": bench_run, "split": split}[args.part](args)


if __name__ == "__main__":
    main()
