"""Benchmarks of the exact makespan models (CP-SAT, MIP); never run by CI.

Subcommands (each appends one JSON object per run to --jsonl and prints a markdown row):
  main        the msr-fiddle latency-input graphs, static memory, CP-SAT with the best warm start
              as hint (--limit seconds each, warm start included; --schedule of formulations.cpsat)
  one         one msr-fiddle graph, CP-SAT with the opts.extra given as JSON (--extra)
  ablation    one graph, CP-SAT with one modelling choice switched off at a time (hint, symmetry
              breaking, redundant constraints, path bound); reports time to a given gap
  compare     CP-SAT vs MIP on the same instances
  generated   generated DNN-like graphs (placement.generate) of growing size, static and peak

Example: python3 bench/bench_exact.py main --limit 600 --jsonl /tmp/exact.jsonl
Runs use 2 workers: run one at a time on this 2-core machine.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from formulations.cpsat import cpsat  # noqa: E402
from formulations.mip import mip  # noqa: E402
from placement.evaluator import check  # noqa: E402
from placement.formats.fiddle import read_fiddle  # noqa: E402
from placement.problem import Problem  # noqa: E402
from placement.solution import Solution, SolveOptions  # noqa: E402
from solvers.methods import get  # noqa: E402

FIDDLE = Path(__file__).resolve().parents[2] / "shared/workloads/msr-fiddle/latency-inputs/OperatorGraphs"
GRAPHS = ("bert_l-3_inference", "bert_l-6_inference", "resnet50_inference", "bert_l-12_inference")


def warm_start(problem: Problem, memory_model: str, seconds: float = 30.0) -> Solution:
    """The best heuristic answer: the portfolio (which includes PARDNN when present) or the
    contiguous split of formulations.warmstart, whichever is better."""
    opts = SolveOptions(memory_model=memory_model, time_limit=seconds)
    cands = []
    for name in ("portfolio", "topo-split", "greedy-fill"):
        try:
            sol = get(name).func(problem, opts)
        except KeyError:
            continue
        if sol.objective is not None and sol.placement is not None:
            cands.append(sol)
    if not cands:
        return Solution("none", "unknown")
    return min(cands, key=lambda s: s.objective)


def gap(sol: Solution) -> float | None:
    if sol.objective is None or sol.lower_bound is None or sol.objective <= 0:
        return None
    return (sol.objective - sol.lower_bound) / sol.objective


def time_to_gap(trace: list, target: float) -> float | None:
    """First time the best objective and best bound seen so far are within ``target`` (relative)."""
    best_obj, best_bound = float("inf"), 0.0
    for t, kind, v in sorted(trace):
        if kind == "objective":
            best_obj = min(best_obj, v)
        else:
            best_bound = max(best_bound, v)
        if best_obj < float("inf") and (best_obj - best_bound) <= target * best_obj:
            return t
    return None


def record(args: argparse.Namespace, row: dict) -> None:
    with open(args.jsonl, "a") as fh:
        fh.write(json.dumps(row) + "\n")
    g = row.get("gap")
    print(f"| {row['instance']} | {row['nodes']} | {row['k']} | {row['memory']} | {row['model']} | "
          f"{_fmt(row.get('value'))} | {_fmt(row.get('bound'))} | {'-' if g is None else f'{100 * g:.2f}%'} | "
          f"{row['seconds']:.1f} | {row.get('status')} | {row.get('note', '')} |", flush=True)


def _fmt(x: float | None) -> str:
    return "-" if x is None else f"{x:.3f}"


def run(args: argparse.Namespace, problem: Problem, model: str, memory_model: str, limit: float, hint: Solution | None,
        note: str = "", extra: dict | None = None, target_gap: float | None = None, add_seconds: float = 0.0) -> Solution:
    """One run; ``add_seconds`` (e.g. the warm start's time) is added to the reported seconds."""
    trace: list = []
    ex = dict(extra or {})
    if model == "cpsat":
        ex["trace"] = trace
    func = cpsat if model == "cpsat" else mip
    t0 = time.monotonic()
    sol = func(problem, SolveOptions(memory_model=memory_model, time_limit=limit, workers=2, seed=0, hint=hint, extra=ex))
    secs = time.monotonic() - t0 + add_seconds
    if sol.placement is not None:
        ev = check(problem, sol.placement, sol.start, memory_model)
        assert abs(ev.makespan - sol.objective) <= 1e-9 * max(1.0, ev.makespan)
    row = {"instance": problem.name, "nodes": problem.n, "k": problem.k, "memory": memory_model, "model": model,
           "value": sol.objective, "bound": sol.lower_bound, "gap": gap(sol), "seconds": secs, "status": sol.status,
           "note": note, "hint_value": None if hint is None else hint.objective,
           "info": {k: v for k, v in sol.info.items() if isinstance(v, (int, float, str, bool))}}
    if target_gap is not None:
        row["time_to_gap"] = time_to_gap(trace, target_gap)
        row["target_gap"] = target_gap
        row["note"] = (note + f" time to {100 * target_gap:g}% gap: "
                       + ("not reached" if row["time_to_gap"] is None else f"{row['time_to_gap']:.1f}s")).strip()
    record(args, row)
    return sol


SCHEDULES = {
    "default": {},
    "lb-search": {"bound_worker": "objective_lb_search"},
}


def schedule_extra(name: str, search_share: float) -> dict:
    """CP-SAT solve schedules of formulations.cpsat: one phase with CP-SAT's default workers,
    one phase with objective_lb_search as the full-problem worker, "two-phase": the default
    for ``search_share`` of the time, then objective_lb_search hinted with the best so far, or
    "auto": two-phase when the hint is more than 2% above the floor bound, else default."""
    if name == "two-phase":
        return {"phases": [(search_share, {}), (1.0, {"subsolvers": ["objective_lb_search"]})]}
    if name == "auto":
        return {"schedule": "auto", "search_share": search_share}
    return dict(SCHEDULES[name])


def cmd_main(args: argparse.Namespace) -> None:
    import os

    for name in args.graphs:
        p = read_fiddle(FIDDLE / f"{name}.json")
        load = os.getloadavg()
        t0 = time.monotonic()
        hint = warm_start(p, "static")
        ws = time.monotonic() - t0
        print(f"# {name}: hint {hint.method} {hint.status} {hint.objective} in {ws:.1f}s; load average {load}", flush=True)
        extra = schedule_extra(args.schedule, args.search_share)
        # The warm start counts against the limit: CP-SAT gets what is left.
        run(args, p, "cpsat", "static", args.limit - ws, hint, extra=extra, add_seconds=ws,
            note=f"hint {hint.method} {hint.objective:.3f} ({ws:.1f}s); schedule {args.schedule}; load {load[0]:.2f}")


def cmd_one(args: argparse.Namespace) -> None:
    """One graph, CP-SAT with the options given as JSON (e.g. '{"bound_worker": "objective_lb_search"}')."""
    p = read_fiddle(FIDDLE / f"{args.graph}.json")
    hint = warm_start(p, "static")
    run(args, p, "cpsat", "static", args.limit, hint, extra=json.loads(args.extra), note=f"hint {hint.objective:.3f}; {args.extra}")


def cmd_ablation(args: argparse.Namespace) -> None:
    p = read_fiddle(FIDDLE / f"{args.graph}.json")
    hint = warm_start(p, "static")
    variants = [("full", {}, True), ("no hint", {}, False), ("no symmetry breaking", {"symmetry": False}, True),
                ("no redundant (load, head/tail, bounds)", {"redundant": False}, True),
                ("no path bound", {"path_bound": False}, True)]
    for label, extra, use_hint in variants:
        run(args, p, "cpsat", "static", args.limit, hint if use_hint else None, note=label, extra=extra,
            target_gap=args.target_gap)


def cmd_compare(args: argparse.Namespace) -> None:
    from placement.generate import generate

    problems = [read_fiddle(FIDDLE / f"{g}.json") for g in args.graphs]
    for n in args.sizes:
        problems.append(generate(args.kind, n, seed=0, devices=args.devices, memory_fraction=args.memory_fraction))
    for p in problems:
        hint = warm_start(p, "static")
        for model in ("cpsat", "mip"):
            run(args, p, model, "static", args.limit, hint, target_gap=args.target_gap)


def cmd_generated(args: argparse.Namespace) -> None:
    from placement.generate import generate

    for mm in args.memory:
        for n in args.sizes:
            p = generate(args.kind, n, seed=0, devices=args.devices, memory_fraction=args.memory_fraction)
            hint = warm_start(p, mm)
            run(args, p, "cpsat", mm, args.limit, hint if hint.placement is not None else None,
                note=f"{args.kind} seed 0, memory fraction {args.memory_fraction}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--jsonl", default="bench_exact.jsonl")
    sub = ap.add_subparsers(dest="cmd", required=True)
    a = sub.add_parser("main")
    a.add_argument("--limit", type=float, default=600)
    a.add_argument("--graphs", nargs="*", default=list(GRAPHS))
    a.add_argument("--schedule", choices=["default", "lb-search", "two-phase", "auto"], default="auto")
    a.add_argument("--search-share", type=float, default=0.5, help="two-phase: share of the time for the search phase")
    a = sub.add_parser("one")
    a.add_argument("--graph", default="resnet50_inference")
    a.add_argument("--limit", type=float, default=300)
    a.add_argument("--extra", default="{}", help="opts.extra of formulations.cpsat as JSON")
    a = sub.add_parser("ablation")
    a.add_argument("--graph", default="bert_l-3_inference")
    a.add_argument("--limit", type=float, default=120)
    a.add_argument("--target-gap", type=float, default=0.0)
    for name in ("compare", "generated"):
        a = sub.add_parser(name)
        a.add_argument("--limit", type=float, default=60)
        a.add_argument("--sizes", type=int, nargs="*", default=[])
        a.add_argument("--kind", default="transformer")
        a.add_argument("--devices", type=int, default=4)
        a.add_argument("--memory-fraction", type=float, default=0.4)
        a.add_argument("--target-gap", type=float, default=0.0)
        if name == "compare":
            a.add_argument("--graphs", nargs="*", default=[])
        else:
            a.add_argument("--memory", nargs="*", default=["static", "peak"])
    args = ap.parse_args()
    print("| instance | nodes | K | memory | model | value | bound | gap | seconds | status | note |")
    print("|---|---|---|---|---|---|---|---|---|---|---|", flush=True)
    {"main": cmd_main, "one": cmd_one, "ablation": cmd_ablation, "compare": cmd_compare, "generated": cmd_generated}[args.cmd](args)


if __name__ == "__main__":
    main()
