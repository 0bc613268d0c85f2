"""Benchmarks of issue 14 (training graphs under the peak memory model); results in results_peak.md.

Run from the worktree root, serialized with the other benchmarks:

    flock /tmp/bench.lock python -m bench.bench_peak heuristics transformer 10000 4
    flock /tmp/bench.lock python -m bench.bench_peak smallest transformer 10000 4
    flock /tmp/bench.lock python -m bench.bench_peak auto transformer 10000 4 CAPACITY
    flock /tmp/bench.lock python -m bench.bench_peak frontier transformer 10000 4
    python -m bench.bench_peak members cnn 10000 4 CAPACITY

- heuristics: every heuristic at 1.1, 1.3, 1.5 and 2 x memory_lower_bound (peak) and at the
  generator's static capacity (static), this code beside a baseline checkout (BASELINE, default
  /work/main), each in its own process: status and makespan.
- smallest: bisection (6 steps, log scale) between memory_lower_bound and the single-device peak
  for the smallest capacity at which one of auto's warm-start heuristics answers (untimed, so
  independent of the load; confirm with `auto` at that capacity; SMALLEST=m1,m2 names others).
- auto: `solve --time-limit 120` (whole process) at the given capacity and with unlimited memory;
  confirm: at the given capacity only.
- frontier: `solve --frontier --points 8 --time-limit 270` (whole process).
- ladder: for the 200K-node graphs, where a bisection step costs minutes: capacities 1.3, 1.5, 2,
  3 x memory_lower_bound in turn until one is answered by LADDER_METHODS (untimed; the environment
  variable LADDER=m1,m2 names other methods).
- levels: for the 200K-node graphs, where min-memory's passes take 30-80 s: its bytes x time pass
  (order "net-2048" or the orders min-memory keeps) at absolute levels memory_lower_bound x 1.06^i,
  i < STEPS (default 9), each pass's largest peak (untimed). A capacity C = level x 1.06^j at or
  above a pass's peak is answered by min-memory at C: its passes at C include that level (floor
  1.06^-j) and that pass fits; the first line of the answer names the smallest such C.
- band: the smallest capacity at which band-split answers (its placement does not depend on the
  capacity: its smallest peak over its orders), / memory_lower_bound, untimed.
- bound: memory_lower_bound and the makespan bounds (critical path, communication, memory path)
  at 1.3 x memory_lower_bound, with the seconds the memory path bound adds (timed: under the lock).
Each line printed carries the load average.
"""
from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BASELINE = Path(os.environ.get("BASELINE", "/work/main"))
GRAPHS = Path(os.environ.get("PEAK_GRAPHS", "/tmp/peak_bench"))
PY = sys.executable
METHODS = ("etf", "m-etf", "heft", "critical-path", "greedy-fill", "m-topo", "pardnn", "pardnn-balanced")


def load() -> str:
    return os.getloadavg().__repr__()


def graph(kind: str, n: int) -> Path:
    """The generated training graph (unlimited memory in the file), made once."""
    GRAPHS.mkdir(parents=True, exist_ok=True)
    path = GRAPHS / f"{kind}-{n}.json"
    if not path.exists():
        subprocess.run([PY, "-m", "placement.generate", kind, "--nodes", str(n), "--memory-fraction", "none",
                        "-o", str(path)], cwd=ROOT, check=True, capture_output=True)
    return path


WORKER = r"""
import json, sys, time
import numpy as np
from placement.formats import load_problem
from placement.evaluator import evaluate
from placement.solution import SolveOptions
try:
    from solvers.methods import get
except ImportError:  # a checkout from before the method table
    from solvers.registry import get
path, k, cap, model, methods = sys.argv[1], int(sys.argv[2]), float(sys.argv[3]), sys.argv[4], sys.argv[5].split(",")
p = load_problem(path).with_devices(k, cap)
rows = []
for m in methods:
    t = time.monotonic()
    sol = get(m).func(p, SolveOptions(memory_model=model))
    ok = sol.placement is not None and sol.status == "heuristic"
    if ok:
        ev = evaluate(p, sol.placement, order=sol.order, memory_model=model)
        ok = ev.feasible(p)
    rows.append({"method": m, "feasible": bool(ok), "makespan": sol.objective if ok else None, "seconds": time.monotonic() - t})
print(json.dumps(rows))
"""


def run_worker(cwd: Path, path: Path, k: int, cap: float, model: str, methods: tuple[str, ...] = METHODS) -> list[dict]:
    out = subprocess.run([PY, "-c", WORKER, str(path), str(k), repr(cap), model, ",".join(methods)], cwd=cwd,
                         capture_output=True, text=True)
    if out.returncode:
        return [{"method": "error", "feasible": False, "makespan": None, "seconds": 0, "error": out.stderr[-300:]}]
    return json.loads(out.stdout.strip().splitlines()[-1])


def bounds(path: Path, k: int) -> tuple[float, float, float]:
    """(memory lower bound for k devices, single-device FIFO peak, static total / k)."""
    import numpy as np

    from placement.evaluator import evaluate
    from placement.formats import load_problem
    from placement.memory_bounds import memory_lower_bound

    p = load_problem(path)
    one = p.with_devices(1, math.inf)
    single = float(evaluate(one, np.zeros(p.n, dtype=np.int64), memory_model="peak").peak_memory[0])
    static = float((p.param_bytes + p.out_bytes).sum()) / k
    return float(memory_lower_bound(p, "peak", k)["best"]), single, static


def cmd_heuristics(kind: str, n: int, k: int) -> None:
    path = graph(kind, n)
    lb, single, static = bounds(path, k)
    print(f"# {kind} {n} K={k}: memory LB {lb:.4g}, single-device peak {single:.4g}, static/K {static:.4g}; load {load()}")
    cases = [("peak", r, r * lb) for r in (1.1, 1.3, 1.5, 2.0)] + [("static", 0.6, 0.6 * static * k)]
    for model, ratio, cap in cases:
        new = run_worker(ROOT, path, k, cap, model)
        old = run_worker(BASELINE, path, k, cap, model)
        for a, b in zip(new, old):
            fmt = lambda r: "-" if not r["feasible"] else f"{r['makespan']:.6g}"
            print(f"{model:6} {ratio:4} {a['method']:16} new {fmt(a):>12} ({a['seconds']:.1f}s)  baseline {fmt(b):>12} ({b['seconds']:.1f}s)")
    print(f"# load {load()}")


SMALLEST_METHODS = ("min-memory", "m-topo", "greedy-fill", "etf", "heft", "pardnn", "critical-path", "pardnn-balanced")


def cmd_smallest(kind: str, n: int, k: int, steps: int = 6) -> None:
    """Untimed (each heuristic runs to the end, so the answer does not depend on the load): per
    step, the heuristics of auto's warm start in turn until one answers."""
    from placement.formats import load_problem
    from placement.solution import SolveOptions
    from solvers.run import run

    path = graph(kind, n)
    lb, single, _ = bounds(path, k)
    p = load_problem(path)
    lo, hi = lb, single  # everything on one device fits the single-device peak
    for _ in range(steps):
        mid = math.sqrt(lo * hi)
        t = time.monotonic()
        got = None
        for m in os.environ.get("SMALLEST", ",".join(SMALLEST_METHODS)).split(","):
            res = run(p.with_devices(k, mid), m, SolveOptions(memory_model="peak"))
            if res.feasible:
                got = (m, res.evaluation.makespan)
                break
        print(f"  {mid:.4g} ({mid / lb:.3f} x LB): {'answer ' + f'{got[1]:.6g} by {got[0]}' if got else 'none'} "
              f"{time.monotonic() - t:.1f}s load {load()}", flush=True)
        if got:
            hi = mid
        else:
            lo = mid
    print(f"{kind} {n} K={k}: memory LB {lb:.4g}; smallest answered {hi:.4g} = {hi / lb:.3f} x LB "
          f"(last none at {lo / lb:.3f} x LB); single-device peak / K = {single / k / lb:.3f} x LB", flush=True)


LADDER_METHODS = ("min-memory", "m-topo", "critical-path", "greedy-fill", "etf")


def cmd_ladder(kind: str, n: int, k: int) -> None:
    from placement.formats import load_problem
    from placement.solution import SolveOptions
    from solvers.run import run

    path = graph(kind, n)
    p = load_problem(path)
    from placement.memory_bounds import memory_lower_bound

    lb = float(memory_lower_bound(p, "peak", k)["best"])
    for ratio in (1.3, 1.5, 2.0, 3.0):
        t = time.monotonic()
        got = None
        for m in os.environ.get("LADDER", ",".join(LADDER_METHODS)).split(","):
            res = run(p.with_devices(k, ratio * lb), m, SolveOptions(memory_model="peak"))
            if res.feasible:
                got = (m, res.evaluation.makespan)
                break
        print(f"{kind} {n} K={k}: {ratio} x LB ({ratio * lb:.4g}): {'answer ' + f'{got[1]:.6g} by {got[0]}' if got else 'none'} "
              f"{time.monotonic() - t:.1f}s load {load()}", flush=True)
        if got:
            break


def cmd_levels(kind: str, n: int, k: int, steps: int = 9) -> None:
    from heuristics.min_memory import LEVEL_STEP, memory_light_orders, place_along
    from placement.evaluator import evaluate
    from placement.formats import load_problem
    from placement.memory_bounds import memory_lower_bound

    p0 = load_problem(graph(kind, n))
    lb = float(memory_lower_bound(p0, "peak", k)["best"])
    p = p0.with_devices(k, lb)  # capacity = the bound, so floor L is level L x the bound
    orders = list(memory_light_orders(p))
    print(f"{kind} {p.n} K={k}: memory LB {lb:.4g}; orders {[name for name, _ in orders]}; load {load()}", flush=True)
    best = None
    for i in range(steps):
        level = LEVEL_STEP ** i
        for name, seq in orders:
            t = time.monotonic()
            got = place_along(p, seq, level, by_area=True, ratchet=True)
            ev = evaluate(p, got.placement, order=got.order, memory_model="peak")
            peak = float(ev.peak_memory.max())
            j = max(0, math.ceil(math.log(peak / (level * lb)) / math.log(LEVEL_STEP) - 1e-9))
            cap = level * lb * LEVEL_STEP ** j  # smallest capacity whose passes include this level and fit
            print(f"  level {level:.4f} x LB, {name}: peak {peak:.4g} ({peak / lb:.4f} x LB), makespan {ev.makespan:.6g}; "
                  f"answered at {cap:.4g} ({cap / lb:.4f} x LB); {time.monotonic() - t:.1f}s load {load()}", flush=True)
            if best is None or cap < best[0]:
                best = (cap, level, name, ev.makespan)
    cap, level, name, span = best
    print(f"{kind} {p.n} K={k}: smallest capacity min-memory answers (levels scanned) {cap:.4g} = {cap / lb:.4f} x LB "
          f"(level {level:.4f} x LB, order {name}, makespan {span:.6g}); load {load()}", flush=True)


def cmd_band(kind: str, n: int, k: int) -> None:
    """band-split's placement does not depend on the capacity (equal devices), so the smallest
    capacity at which it answers is its smallest peak over its orders: printed / memory_lower_bound,
    with the makespan there (untimed)."""
    import numpy as np

    from heuristics.layer_bands import band_split
    from placement.evaluator import evaluate
    from placement.formats import load_problem
    from placement.memory_bounds import memory_lower_bound
    from placement.solution import SolveOptions

    p0 = load_problem(graph(kind, n))
    lb = float(memory_lower_bound(p0, "peak", k)["best"])
    p = p0.with_devices(k, math.inf)
    t = time.monotonic()
    sol = band_split(p0.with_devices(k, 1e30), SolveOptions(memory_model="peak"))
    if sol.placement is None:
        print(f"{kind} {p.n} K={k}: band-split {sol.reason}; load {load()}", flush=True)
        return
    peaks = []
    from heuristics.min_memory import memory_light_orders
    for name, seq in memory_light_orders(p):
        order = [[v for v in seq.tolist() if sol.placement[v] == d] for d in range(k)]
        ev = evaluate(p, sol.placement, order=order, memory_model="peak")
        peaks.append((float(ev.peak_memory.max()), name, ev.makespan))
        print(f"  order {name}: peak {peaks[-1][0]:.5g} = {peaks[-1][0] / lb:.4f} x LB, makespan {ev.makespan:.6g}", flush=True)
    peak, name, span = min(peaks)
    print(f"{kind} {p.n} K={k}: memory LB {lb:.5g}; band-split's placement peaks at {peak:.5g} = {peak / lb:.4f} x LB "
          f"(order {name}, makespan {span:.6g}); {time.monotonic() - t:.1f}s load {load()}", flush=True)
    # Below that peak band-split moves parameter units (move_params) until it fits: to the end here.
    from heuristics.layer_bands import move_params
    seq = dict(memory_light_orders(p))[name]
    moved, moves = move_params(p0.with_devices(k, lb), sol.placement, seq, until_fits=False)
    order = [[v for v in seq.tolist() if moved[v] == d] for d in range(k)]
    ev = evaluate(p, moved, order=order, memory_model="peak")
    low = float(ev.peak_memory.max())
    print(f"{kind} {p.n} K={k}: band-split answers from {low:.5g} = {low / lb:.4f} x LB (order {name}, makespan "
          f"{ev.makespan:.6g}, {len(moves)} units moved); {time.monotonic() - t:.1f}s load {load()}", flush=True)


def cmd_bound(kind: str, n: int, k: int) -> None:
    from placement.bounds import lower_bounds
    from placement.formats import load_problem
    from placement.memory_bounds import memory_lower_bound

    p = load_problem(graph(kind, n))
    t = time.monotonic()
    mlb = float(memory_lower_bound(p, "peak", k)["best"])
    t_mlb = time.monotonic() - t
    q = p.with_devices(k, 1.3 * mlb)
    t = time.monotonic()
    plain = lower_bounds(q)
    t_plain = time.monotonic() - t
    t = time.monotonic()
    lb = lower_bounds(q, "peak")
    t_all = time.monotonic() - t
    print(f"{kind} {p.n} K={k}: memory LB {mlb:.4g} ({t_mlb:.1f}s); at 1.3 x: critical path {lb.critical_path:.6g}, "
          f"communication {lb.communication:.6g}, memory path {lb.memory_path:.6g}; bounds {t_plain:.1f}s, with the memory path "
          f"{t_all:.1f}s; load {load()}", flush=True)


def cmd_auto(kind: str, n: int, k: int, cap: float, only: bool = False) -> None:
    path = graph(kind, n)
    for memory in (repr(cap),) if only else (repr(cap), "inf"):
        rep = GRAPHS / f"auto-{kind}-{n}-{k}-{memory}.json"
        rep.unlink(missing_ok=True)  # a run that writes no report must not be read as the last one's
        t = time.monotonic()
        proc = subprocess.run([PY, "-m", "solvers.cli", str(path), "--devices", str(k), "--memory", memory, "--memory-model",
                               "peak", "--time-limit", "120", "--report", str(rep), "--quiet"], cwd=ROOT, capture_output=True,
                              text=True)
        wall = time.monotonic() - t
        if not rep.exists():
            print(f"{kind} {n} K={k} memory {memory}: NO REPORT (exit {proc.returncode}: {proc.stderr.strip()[-300:]}) "
                  f"wall {wall:.1f}s load {load()}")
            continue
        doc = json.loads(rep.read_text())
        print(f"{kind} {n} K={k} memory {memory}: {doc.get('status')} makespan {doc.get('makespan')} bound {doc.get('lower_bound')} "
              f"method {doc.get('method')} fits_fifo {doc.get('fits_fifo')} wall {wall:.1f}s exit {proc.returncode} load {load()}")


MEMBERS_METHODS = ("mem-span", "min-memory", "etf", "heft", "greedy-fill", "pardnn")


def cmd_members(kind: str, n: int, k: int, cap: float) -> None:
    """Untimed: each of MEMBERS_METHODS (MEMBERS=m1,m2 names others) alone at the capacity, peak
    model, in this checkout: the warm-start answers auto's search starts from."""
    path = graph(kind, n)
    names = tuple(os.environ["MEMBERS"].split(",")) if os.environ.get("MEMBERS") else MEMBERS_METHODS
    for r in run_worker(ROOT, path, k, cap, "peak", names):
        shown = "-" if not r["feasible"] else f"{r['makespan']:.6g}"
        print(f"{kind} {n} K={k} memory {cap:.4g}: {r['method']:12} {shown:>10} ({r['seconds']:.1f}s) load {load()}", flush=True)


def cmd_frontier(kind: str, n: int, k: int) -> None:
    path = graph(kind, n)
    rep = GRAPHS / f"frontier-{kind}-{n}-{k}.json"
    t = time.monotonic()
    out = subprocess.run([PY, "-m", "solvers.cli", str(path), "--devices", str(k), "--memory-model", "peak", "--frontier",
                          "--points", "8", "--time-limit", "270", "--report", str(rep), "--quiet", "--parallel", "none"],
                         cwd=ROOT, capture_output=True, text=True)
    print(out.stdout)
    print(f"frontier {kind} {n} K={k}: wall {time.monotonic() - t:.1f}s load {load()}")


def main(argv: list[str]) -> None:
    cmd, kind, n, k = argv[0], argv[1], int(argv[2]), int(argv[3])
    if cmd == "heuristics":
        cmd_heuristics(kind, n, k)
    elif cmd == "smallest":
        cmd_smallest(kind, n, k)
    elif cmd == "auto":
        cmd_auto(kind, n, k, float(argv[4]))
    elif cmd == "confirm":
        cmd_auto(kind, n, k, float(argv[4]), only=True)
    elif cmd == "members":
        cmd_members(kind, n, k, float(argv[4]))
    elif cmd == "frontier":
        cmd_frontier(kind, n, k)
    elif cmd == "ladder":
        cmd_ladder(kind, n, k)
    elif cmd == "levels":
        cmd_levels(kind, n, k, int(argv[4]) if len(argv) > 4 else 9)
    elif cmd == "band":
        cmd_band(kind, n, k)
    elif cmd == "bound":
        cmd_bound(kind, n, k)
    else:
        raise SystemExit(f"unknown command {cmd!r}")


if __name__ == "__main__":
    main(sys.argv[1:])
