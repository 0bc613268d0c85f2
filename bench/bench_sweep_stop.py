"""Ctrl-C in sweeps (``solve --frontier``, ``solve-batch``): seconds from SIGINT to the process's
exit, and how many of the points or cells came back with an answer. Never run by CI; serialise
timed runs with the bench lock:

    flock /tmp/bench.lock python3 bench/bench_sweep_stop.py --baseline /tmp/old --delay 28 --repeat 3

Each row is one fresh process (``python -m solvers.cli GRAPH --frontier`` or ``python -m
solvers.batch MANIFEST``) run from a source tree (this one, and ``--baseline DIR``, a checkout of
an older commit, side by side in turns), sent SIGINT ``--delay`` seconds after its start. The
frontier's points are read from its report (--report), the batch's cells from its summary.md
(nothing written counts as 0 answered). ``--parallel`` ray (default) or none.
"""
from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "data"


def run_once(tree: Path, kind: str, delay: float, parallel: str, work: Path) -> dict:
    """One process from ``tree``: SIGINT at ``delay`` s; exit latency, exit code, answers."""
    report = work / "frontier.json"
    out = work / "res"
    for p in (report, *(out.glob("*") if out.exists() else [])):
        p.unlink(missing_ok=True)
    if kind == "frontier":
        cmd = [sys.executable, "-m", "solvers.cli", str(DATA / "cnn_small.json"), "--memory-model", "peak", "--frontier",
               "--points", "4", "--time-limit", "60", "--parallel", parallel, "--report", str(report), "--quiet"]
    else:
        man = work / "m.json"
        man.write_text(json.dumps({"graphs": [str(DATA / "cnn_small.json"), str(DATA / "lstm_small.json")],
                                   "devices": [4, 3], "memory_model": "peak", "time_limit": 120, "out": str(out)}))
        cmd = [sys.executable, "-m", "solvers.batch", str(man), "--parallel", parallel]
    env = {**os.environ, "PYTHONPATH": str(tree)}
    proc = subprocess.Popen(cmd, cwd=tree, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    time.sleep(delay)
    sent = time.monotonic()
    proc.send_signal(signal.SIGINT)
    rc = proc.wait(timeout=120)
    latency = time.monotonic() - sent
    if kind == "frontier":
        points = json.loads(report.read_text())["points"] if report.exists() else []
        answered, total = sum(p.get("status") not in (None, "unknown") for p in points), 4
    else:
        rows = [r for r in (out / "summary.md").read_text().splitlines() if r.startswith("| ") and ".json" in r] \
            if (out / "summary.md").exists() else []
        answered, total = sum(r.split(" | ")[4] not in ("stopped", "unknown") for r in rows), 4
    return {"kind": kind, "latency": round(latency, 3), "rc": rc, "answered": answered, "of": total}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--baseline", type=Path, help="an older checkout, run side by side")
    ap.add_argument("--delay", type=float, default=28.0)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--parallel", default="ray", choices=("ray", "none"))
    ap.add_argument("--kinds", nargs="+", default=["frontier", "batch"], choices=("frontier", "batch"))
    a = ap.parse_args()
    # A bench started in the background inherits SIGINT ignored, and so would the children: the
    # baseline's solve-batch, which sets no handler of its own, would then ignore the signal.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    trees = [("this", ROOT)] + ([("baseline", a.baseline.resolve())] if a.baseline else [])
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(a.repeat):
            for kind in a.kinds:
                for name, tree in trees:
                    row = run_once(tree, kind, a.delay, a.parallel, Path(tmp))
                    print(json.dumps({"tree": name, "round": i, "load": os.getloadavg()[0], **row}), flush=True)


if __name__ == "__main__":
    main()
