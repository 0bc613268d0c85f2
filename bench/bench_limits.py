"""Benchmark of the limits (issue 13): whole-process wall time of ``solve`` against --time-limit
for every makespan method at growing sizes, and the latency from SIGINT to exit in each phase.
Never run by CI. Serialise timed runs with the bench lock:

    flock /tmp/bench.lock python3 bench/bench_limits.py limits --sizes 1000 10000 100000 200000 --time-limit 5 10 20 20
    flock /tmp/bench.lock python3 bench/bench_limits.py limits --sizes --files G.json --methods auto --time-limit 20 --extra "--memory-model peak"
    flock /tmp/bench.lock python3 bench/bench_limits.py sigint --sizes 10000 100000 --time-limit 30

``limits``: one fresh ``python -m solvers.cli`` process per (method, size), its wall time from
fork to exit (start-up, loading, solving, report), its exit status and the report's status; the
tolerance is max(5% of the limit, 1 s). ``sigint``: ``auto`` with SIGINT sent while loading, just
after loading (the lower bounds), at fractions of the limit and while the normal report is written
(times estimated from an uninterrupted reference run, or given with --at); the time from the signal
to the process's exit, the phase the signal fell in, as the run itself tells it (the report's
``interrupted_in``, or stderr's "interrupted while loading" / "received while writing the
outputs"), and whether the report is complete JSON.
Graphs are generated once under --workdir (``python -m placement.generate transformer``).
"""
from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from solvers.methods import methods  # noqa: E402


def load_average() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def graph(workdir: Path, nodes: int, devices: int) -> Path:
    path = workdir / f"transformer-{nodes}-k{devices}.json"
    if not path.exists():
        subprocess.run([sys.executable, "-m", "placement.generate", "transformer", "--nodes", str(nodes),
                        "--devices", str(devices), "-o", str(path)], cwd=ROOT, check=True, capture_output=True)
    return path


def solve(path: Path, method: str, limit: float, report: Path, extra: list[str] | None = None,
          sigint_at: float | None = None, kill_after: float = 120.0) -> dict:
    """Run solve once; wall seconds from spawn to exit, exit code, report status (None if absent)."""
    if report.exists():
        report.unlink()
    cmd = [sys.executable, "-m", "solvers.cli", str(path), "--method", method, "--time-limit", str(limit),
           "--report", str(report), "--quiet", *(extra or [])]
    t0 = time.monotonic()
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    sent = None
    if sigint_at is not None:
        try:
            proc.wait(timeout=sigint_at)
        except subprocess.TimeoutExpired:
            proc.send_signal(signal.SIGINT)
            sent = time.monotonic()
    try:
        _, err = proc.communicate(timeout=kill_after)
    except subprocess.TimeoutExpired:
        proc.kill()
        _, err = proc.communicate()
        err += " [killed]"
    end = time.monotonic()
    row = {"wall": end - t0, "code": proc.returncode, "stderr": err.strip().splitlines()[-1:] if err.strip() else [],
           "signal_line": next((ln for ln in err.splitlines() if ln.startswith("solve:")), ""),
           "after_signal": None if sent is None else end - sent, "signal_at": None if sent is None else sent - t0}
    try:
        rep = json.loads(report.read_text())
        row.update(status=rep.get("status"), makespan=rep.get("makespan"), phases=rep.get("phases", []),
                   reason=rep.get("reason", ""), report="complete", interrupted_in=rep.get("interrupted_in"),
                   seconds=rep.get("seconds"))
    except FileNotFoundError:
        row.update(status=None, report="none")
    except json.JSONDecodeError:
        row.update(status=None, report="BROKEN")
    return row


def makespan_methods() -> list[str]:
    return ["auto"] + [name for name, info in methods().items() if info.objective == "makespan"]


def cmd_limits(args: argparse.Namespace) -> None:
    limits = args.time_limit if len(args.time_limit) == len(args.sizes) else args.time_limit[:1] * len(args.sizes)
    names = args.methods or makespan_methods()
    print(f"# whole-process wall time vs --time-limit (load before: {load_average()})")
    print("| nodes | limit s | method | wall s | over | exit | status | note |")
    print("|---|---|---|---|---|---|---|---|")
    worst = 0.0
    runs = [(graph(args.workdir, nodes, args.devices), str(nodes), limit) for nodes, limit in zip(args.sizes, limits)]
    runs += [(Path(f), Path(f).stem, args.time_limit[0]) for f in args.files or []]
    for path, nodes, limit in runs:
        for method in names:
            row = solve(path, method, limit, args.workdir / "report.json", extra=args.extra.split(), kill_after=limit * 3 + 60)
            tol = max(0.05 * limit, 1.0)
            over = row["wall"] - limit
            worst = max(worst, over / tol)
            flag = "ok" if over <= tol else "**OVER**"
            note = (row.get("reason") or " ".join(row["stderr"]))[:90].replace("|", "/")
            print(f"| {nodes} | {limit:g} | {method} | {row['wall']:.2f} | {flag} | {row['code']} | {row['status']} | {note} |",
                  flush=True)
    print(f"\nworst overrun / tolerance: {worst:.2f} (<= 1 holds the limit); load after: {load_average()}")


def phase_of(row: dict) -> str:
    """The phase the signal landed in, as the run tells it."""
    line = row["signal_line"]
    if row.get("interrupted_in"):
        return str(row["interrupted_in"])
    if "interrupted while" in line:
        return line.split("interrupted while", 1)[1].split(";")[0].strip()
    if "received while" in line:
        return line.split("received while", 1)[1].split(";")[0].strip()
    if row["after_signal"] is None:
        return "ended before the signal"
    return "exiting (outputs written)" if row["code"] in (0, 1) and row["report"] == "complete" else "?"


def signal_times(base: dict, elements: int, fractions: list[float], limit: float) -> list[float]:
    """Signal times covering the phases: twice while loading, just after it (the bounds), the
    fractions of the limit, and while the reference run wrote its report."""
    writing = 0.3 + 2.5e-6 * elements  # report building and writing, idle machine (results_limits.md)
    loading = max(0.2, base["wall"] - float(base.get("seconds") or 0.0) - writing)
    times = [0.3 * loading, 0.8 * loading, loading + 0.3] + [f * limit for f in fractions]
    return sorted(times + [max(loading, base["wall"] - 0.6 * writing)])


def cmd_sigint(args: argparse.Namespace) -> None:
    print(f"# SIGINT to exit, auto (load before: {load_average()})")
    print("| nodes | limit s | SIGINT at s | phase | exit after s | exit | status | report |")
    print("|---|---|---|---|---|---|---|---|")
    for nodes in args.sizes:
        path = graph(args.workdir, nodes, args.devices)
        report = args.workdir / "report.json"
        if args.at:
            times = args.at
        else:
            base = solve(path, "auto", args.time_limit, report, kill_after=args.time_limit * 3 + 60)
            elements = nodes * 3  # transformer graphs: about two edges per node
            times = signal_times(base, elements, args.fractions, args.time_limit)
        for at in times:
            row = solve(path, "auto", args.time_limit, report, sigint_at=at, kill_after=args.time_limit * 3 + 60)
            after = "-" if row["after_signal"] is None else f"{row['after_signal']:.2f}"
            print(f"| {nodes} | {args.time_limit:g} | {at:.1f} | {phase_of(row)} | {after} | {row['code']} | {row['status']} | {row['report']} |",
                  flush=True)
    print(f"\nload after: {load_average()}")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    for name in ("limits", "sigint"):
        s = sub.add_parser(name)
        s.add_argument("--sizes", type=int, nargs="*", default=[1000, 10000])
        s.add_argument("--devices", type=int, default=4)
        s.add_argument("--workdir", type=Path, default=Path("/tmp/bench_limits"))
        if name == "limits":
            s.add_argument("--time-limit", type=float, nargs="+", default=[5.0])
            s.add_argument("--methods", nargs="*")
            s.add_argument("--files", nargs="*", help="problem files to run beside the generated sizes (at the first limit)")
            s.add_argument("--extra", default="", help="more solve options, e.g. '--memory-model peak'")
        else:
            s.add_argument("--time-limit", type=float, default=30.0)
            s.add_argument("--fractions", type=float, nargs="+", default=[0.2, 0.5, 0.8])
            s.add_argument("--at", type=float, nargs="*", help="signal times in seconds (instead of the estimated ones)")
    args = p.parse_args()
    args.workdir.mkdir(parents=True, exist_ok=True)
    {"limits": cmd_limits, "sigint": cmd_sigint}[args.cmd](args)


if __name__ == "__main__":
    main()
