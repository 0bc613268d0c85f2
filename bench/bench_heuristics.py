"""Benchmark of the PARDNN pipeline and the baselines (issue 3). Not run by CI.

    python3 bench/bench_heuristics.py quality [--time-limit 60]   # data/*.json + msr-fiddle + generated
    python3 bench/bench_heuristics.py scale [--sizes 10000 50000 200000 1000000] [--model static]
                                            [--memory-fraction 0.6] [--memory-heuristic I]

``quality`` prints, per graph and heuristic: evaluator makespan, ratio to the lower bound
(placement.bounds.makespan_lower_bound), seconds, and whether memory is feasible (static model;
msr-fiddle workloads are read in the delay model with static memory). ``scale`` runs the full
PARDNN pipeline with memory heuristic I on generated transformer training graphs with K = 16, each
in a fresh process so its peak RSS is its own, and prints wall and CPU seconds (the machine is
shared; CPU time is the steadier figure), nodes per CPU second and per-step wall times.
"""
from __future__ import annotations

import argparse
import glob
import json
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from placement.bounds import makespan_lower_bound  # noqa: E402
from placement.evaluator import evaluate  # noqa: E402
from placement.solution import SolveOptions  # noqa: E402
from solvers.methods import get  # noqa: E402

METHODS = ["pardnn", "pardnn[I+II]", "pardnn[II]", "pardnn[none]", "etf", "m-etf", "heft", "critical-path", "linear-clustering",
           "m-topo", "greedy-fill", "single", "random"]
LC_MAX_NODES = 5000  # linear clustering is O(V (V + E)); above this it would only burn its budget


def graphs(include_generated: bool):
    from placement.formats.fiddle import read_fiddle
    from placement.formats.native import read_problem

    for path in sorted(glob.glob(str(ROOT / "data" / "*.json"))):
        try:
            yield f"data/{Path(path).name}", read_problem(path)
        except Exception as exc:  # noqa: BLE001
            print(f"skip {path}: {exc}", file=sys.stderr)
    base = ROOT.parent / "shared" / "workloads" / "msr-fiddle"
    for path in sorted(glob.glob(str(base / "**" / "*.json"), recursive=True)):
        yield "fiddle/" + str(Path(path).relative_to(base)), read_fiddle(path)
    if include_generated:
        from placement.generate import generate

        for kind in ("transformer", "lstm", "cnn", "random"):
            yield f"gen/{kind}-10000-K8", generate(kind, 10000, seed=0, devices=8)


def run(name: str, problem, time_limit: float):
    base, _, variant = name.partition("[")
    extra = {"memory_heuristic": variant.rstrip("]")} if variant else {}
    opts = SolveOptions(memory_model="static", time_limit=time_limit, extra=extra)
    t = time.monotonic()
    sol = get(base).func(problem, opts)
    secs = time.monotonic() - t
    if sol.placement is None:
        return None, secs, False, sol.reason
    ev = evaluate(problem, sol.placement, order=sol.order, memory_model="static")
    if abs(ev.makespan - sol.objective) > 1e-9 * max(1.0, ev.makespan):
        raise AssertionError(f"{name}: reported {sol.objective} but the evaluator says {ev.makespan}")
    return ev.makespan, secs, ev.feasible(problem), ""


def quality(time_limit: float, generated: bool) -> None:
    for gname, p in graphs(generated):
        lb = makespan_lower_bound(p, "static")
        print(f"\n### {gname}: {p.n} nodes, {p.m} edges, K={p.k}, lower bound {lb:.6g}\n")
        print("| method | makespan | ratio to LB | seconds | memory feasible |")
        print("|---|---:|---:|---:|---|")
        for m in METHODS:
            if m == "linear-clustering" and p.n > LC_MAX_NODES:
                print(f"| {m} | skipped (n > {LC_MAX_NODES}) | | | |")
                continue
            mk, secs, ok, why = run(m, p, time_limit)
            if mk is None:
                print(f"| {m} | none | | {secs:.2f} | no: {why[:80]} |")
            else:
                print(f"| {m} | {mk:.6g} | {mk / lb if lb > 0 else float('nan'):.3f} | {secs:.2f} | {'yes' if ok else 'NO'} |")
        sys.stdout.flush()


CHILD = r"""
import json, resource, sys, time
sys.path.insert(0, {root!r})
from placement.generate import generate
from placement.bounds import makespan_lower_bound
from heuristics.pardnn import pardnn
from placement.solution import SolveOptions
t = time.monotonic(); p = generate("transformer", {n}, seed=0, devices=16, memory_fraction={frac}); gen = time.monotonic() - t
t = time.monotonic(); c = time.process_time(); sol = pardnn(p, SolveOptions(memory_model={model!r}, extra={{"memory_heuristic": {heur!r}}})); secs = time.monotonic() - t; cpu = time.process_time() - c
info = {{k: v for k, v in sol.info.items() if k.startswith("t_") or k in ("overflow_moves", "overflow_rounds", "primaries", "secondaries", "reserve_kept")}}
print(json.dumps({{"n": p.n, "m": p.m, "gen": gen, "seconds": secs, "cpu": cpu, "status": sol.status, "makespan": sol.objective,
                  "lb": makespan_lower_bound(p), "rss_gb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e6, "info": info}}))
"""


def scale(sizes: list[int], model: str, frac: float, heur: str = "I") -> None:
    print(f"memory model {model}, memory heuristic {heur}, each of the 16 devices holds {frac} of the total static memory\n")
    print(f"| nodes | edges | pardnn wall s | pardnn CPU s | nodes per CPU s | peak RSS GB | status | makespan / LB | overflow moves | levels | slicing | mapping | memory | evaluate |")
    print("|---:|---:|---:|---:|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|")
    for n in sizes:
        out = subprocess.run([sys.executable, "-c", CHILD.format(root=str(ROOT), n=n, model=model, frac=frac, heur=heur)],
                             capture_output=True, text=True, check=True)
        r = json.loads(out.stdout.strip().splitlines()[-1])
        i = r["info"]
        ratio = r["makespan"] / r["lb"] if r["makespan"] else float("nan")
        print(f"| {r['n']} | {r['m']} | {r['seconds']:.1f} | {r['cpu']:.1f} | {r['n'] / r['cpu']:.0f} | {r['rss_gb']:.2f} | {r['status']} | "
              f"{ratio:.3f} | {i.get('overflow_moves')} | {i['t_levels']:.1f} | {i['t_slicing']:.1f} | {i['t_mapping']:.1f} | {i['t_memory']:.1f} | {i['t_evaluate']:.1f} |")
        sys.stdout.flush()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="what", required=True)
    q = sub.add_parser("quality")
    q.add_argument("--time-limit", type=float, default=60.0)
    q.add_argument("--no-generated", action="store_true")
    s = sub.add_parser("scale")
    s.add_argument("--sizes", type=int, nargs="+", default=[10000, 50000, 200000, 1000000])
    s.add_argument("--model", default="static", choices=["static", "peak"])
    s.add_argument("--memory-heuristic", default="I", choices=["I", "II", "I+II", "none"])
    s.add_argument("--memory-fraction", type=float, default=0.6,
                   help="per-device share of the total static memory (0.6: loose; 1.2/16 = 0.075: tight)")
    a = ap.parse_args()
    if a.what == "quality":
        quality(a.time_limit, not a.no_generated)
    else:
        scale(a.sizes, a.model, a.memory_fraction, a.memory_heuristic)


if __name__ == "__main__":
    main()
