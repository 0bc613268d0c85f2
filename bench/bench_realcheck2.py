"""Session 20 ("realcheck round 2"): `solve` on the training steps of bench/real_models2.py.

    python bench/bench_realcheck2.py OUTDIR MODEL... [--k 2 4 8] [--time-limit 60]

Per model and K: an ETF probe (`--method etf --memory-model peak --memory inf`, untimed) gives
the peak model's `memory_lower_bound` for K; then, each one whole `solve --time-limit T` process
under `flock /tmp/bench.lock` (wall taken inside the lock, /proc/loadavg at start and end):
static with unlimited memory, and peak at 1.05x and 1.3x the bound (and unlimited at K = 4).
Every run is checked: exit code, no traceback on stderr, wall within 5% of T, the report's
schedule re-checked by the evaluator (`placement.evaluator.check`: precedence, one op at a
time, memory within capacity) and its makespan recomputed, `optimal` / `infeasible` only with a
proof (gap <= 1e-6 / a reason), the answer no worse than the warm start (the portfolio's best
single heuristic, `phases[0]`) nor than ETF on the same problem. One JSON line per run is
appended to OUTDIR/runs.jsonl. Run from the repository root with PYTHONPATH=. .
"""
from __future__ import annotations

import argparse
import json
import math
import subprocess
import sys
from pathlib import Path

INNER = ('read a b c x y < /proc/loadavg; echo "@@ LOAD0 $a/$b/$c" >&2; s=$(date +%s.%N); "$@"; rc=$?; '
         'e=$(date +%s.%N); read a b c x y < /proc/loadavg; echo "@@ LOAD1 $a/$b/$c" >&2; '
         'echo "@@ WALL $s $e" >&2; exit $rc')


def run_solve(graph: Path, report: Path, args: list[str], *, timed: bool) -> tuple[int, float, str, str, str]:
    report.unlink(missing_ok=True)
    cmd = [sys.executable, "-m", "solvers.cli", str(graph), "--quiet", "--report", str(report), *args]
    cmd = (["flock", "/tmp/bench.lock"] if timed else ["nice", "-n", "10"]) + ["bash", "-c", INNER, "run"] + cmd
    proc = subprocess.run(cmd, capture_output=True, text=True)
    marks = {line.split()[1]: line.split()[2:] for line in proc.stderr.splitlines() if line.startswith("@@ ")}
    wall = float(marks["WALL"][1]) - float(marks["WALL"][0])
    err = "\n".join(line for line in proc.stderr.splitlines() if not line.startswith("@@ "))
    return proc.returncode, wall, marks["LOAD0"][0], marks["LOAD1"][0], err


def recheck(graph: Path, rep: dict, k: int, memory: str, model: str) -> dict:
    """The report's schedule through the evaluator's own checker, on the problem as solved."""
    from placement.evaluator import ScheduleError, check
    from placement.formats import load_problem

    p = load_problem(graph)
    cap = math.inf if memory == "inf" else float(memory)
    p = p.with_devices(k, [cap] * k)
    try:
        ev = check(p, rep["placement"], rep["start"], model)
    except ScheduleError as exc:
        return {"check": f"FAILED: {exc}"}
    return {"check": "ok", "eval_makespan": ev.makespan,
            "eval_equal": abs(ev.makespan - rep["makespan"]) <= 1e-9 * max(1.0, ev.makespan)}


def one(out: Path, graph: Path, tag: str, k: int, model: str, memory: str, limit: float, etf: float | None, *, timed: bool = True) -> dict:
    report = out / f"{tag}.report.json"
    args = ["--devices", str(k), "--memory-model", model, "--memory", memory, "--time-limit", str(limit)]
    rc, wall, l0, l1, err = run_solve(graph, report, args, timed=timed)
    rep = json.loads(report.read_text()) if report.exists() else {}
    row = {"tag": tag, "k": k, "model": model, "memory": memory, "limit": limit, "rc": rc, "wall": round(wall, 2),
           "load": f"{l0} -> {l1}", "traceback": "Traceback" in err, "stderr": err[-300:],
           **{f: rep.get(f) for f in ("status", "makespan", "lower_bound", "gap", "method", "memory_lower_bound", "reason", "interrupted")}}
    phases = rep.get("phases") or []
    warm = next((ph for ph in phases if ph.get("name") == "warm-start"), None)
    row["warm"] = warm.get("makespan") if warm else None
    row["warm_method"] = warm.get("note") if warm else None
    row["etf"] = etf
    if rep.get("placement") and rep.get("makespan") is not None:
        row.update(recheck(graph, rep, k, memory, model))
    if rep.get("peak_memory"):
        row["max_peak"] = max(rep["peak_memory"])
    problems = []
    if rc not in (0, 1) or row["traceback"]:
        problems.append(f"rc {rc}")
    if wall > limit * 1.05:
        problems.append(f"wall {wall:.1f} > {limit * 1.05:.1f}")
    if row.get("check", "ok") != "ok" or row.get("eval_equal") is False:
        problems.append("evaluator disagrees")
    if row["status"] == "optimal" and (row["gap"] or 0) > 1e-6:
        problems.append("optimal with a gap")
    for name, ref in (("warm start", row["warm"]), ("etf", etf)):
        if ref is not None and row["makespan"] is not None and row["makespan"] > ref * (1 + 1e-9):
            problems.append(f"worse than {name}")
    row["problems"] = problems
    with open(out / "runs.jsonl", "a") as f:
        f.write(json.dumps(row) + "\n")
    print(json.dumps({x: row.get(x) for x in ("tag", "rc", "status", "makespan", "gap", "method", "wall", "warm", "etf", "check", "problems")}), flush=True)
    return row


def probe(out: Path, graph: Path, tag: str, k: int, model: str, memory: str) -> dict:
    report = out / f"{tag}.etf.report.json"
    run_solve(graph, report, ["--devices", str(k), "--memory-model", model, "--memory", memory, "--method", "etf",
                              "--time-limit", "60"], timed=False)
    return json.loads(report.read_text()) if report.exists() else {}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", type=Path)
    ap.add_argument("models", nargs="+")
    ap.add_argument("--k", type=int, nargs="+", default=[2, 4, 8])
    ap.add_argument("--time-limit", type=float, default=60)
    ap.add_argument("--ratios", type=float, nargs="+", default=[1.05, 1.3])
    ap.add_argument("--parts", nargs="+", default=["static", "peak"])
    a = ap.parse_args()
    a.out.mkdir(parents=True, exist_ok=True)
    for m in a.models:
        g = a.out / f"{m}.json"
        for k in a.k:
            if "static" in a.parts:
                etf = probe(a.out, g, f"{m}.static.k{k}", k, "static", "inf").get("makespan")
                one(a.out, g, f"{m}.static.k{k}.inf", k, "static", "inf", a.time_limit, etf)
            if "peak" in a.parts:
                pr = probe(a.out, g, f"{m}.peak.k{k}", k, "peak", "inf")
                bound = pr["memory_lower_bound"]
                for r in a.ratios:
                    mem = str(int(math.ceil(r * bound)))
                    etf = probe(a.out, g, f"{m}.peak.k{k}.x{r}", k, "peak", mem).get("makespan")
                    one(a.out, g, f"{m}.peak.k{k}.x{r}", k, "peak", mem, a.time_limit, etf)
                if k == 4:
                    one(a.out, g, f"{m}.peak.k{k}.inf", k, "peak", "inf", a.time_limit, pr.get("makespan"))


if __name__ == "__main__":
    main()
