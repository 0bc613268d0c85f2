"""Benchmark of the importers (not run by CI; figures go to bench/results_import.md).

Parts (pick with --part; default all):
  time     whole-process import time of `python -m placement.importers.torch` per model and cost
           model, growing sizes (GPT-2 12/24/48 layers, BERT-base 2/4/12 layers).
  cache    the measured-cost pass alone, with the signature cache and without it (the baseline:
           every operator timed), BERT-base with 2 and 4 layers.
  memory   our evaluator's single-device peak (FIFO) of each imported step against PyTorch's own
           CPU allocator peak for the same eager step (torch.profiler memory events).
  solve    `solve` on each imported model, K = 4, memory 0.4 x the single-device peak, peak model,
           60 s.

Run serialized with the other benchmarks, from the repository root:
    flock /tmp/bench.lock /work/venv/bin/python bench/bench_import.py --part time
Each figure is printed with the load average at the time.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

import torch_models as tm  # noqa: E402

from placement.evaluator import evaluate  # noqa: E402
from placement.formats import load_problem  # noqa: E402
from placement.importers import torch as ti  # noqa: E402

MODELS = ROOT / "tests" / "torch_models.py"
SOLVE_MODELS = ("bert_base_12", "gpt2_48", "cnn_bench")


def load() -> str:
    return "/".join(f"{x:.2f}" for x in os.getloadavg())


def run_import(factory: str, cost: str, out: Path) -> float:
    t0 = time.monotonic()
    subprocess.run([sys.executable, "-m", "placement.importers.torch", f"{MODELS}:{factory}", "-o", str(out), "--cost", cost],
                   cwd=ROOT, check=True, stderr=subprocess.DEVNULL)
    return time.monotonic() - t0


def part_time(tmp: Path) -> None:
    print("| model | cost | nodes | edges | seconds (whole process) | load |")
    print("|---|---|---|---|---|---|")
    rows = [("gpt2_12", "roofline"), ("gpt2_24", "roofline"), ("gpt2_48", "roofline"),
            ("bert_base_2", "roofline"), ("bert_base_4", "roofline"), ("bert_base_12", "roofline"),
            ("bert_base_12", "measure"), ("cnn_bench", "roofline"), ("cnn_bench", "measure")]
    for factory, cost in rows:
        out = tmp / f"{factory}-{cost}.json"
        before = load()
        seconds = run_import(factory, cost, out)
        p = load_problem(out)
        print(f"| {factory} | {cost} | {p.n} | {p.m} | {seconds:.1f} | {before} |", flush=True)


def part_cache() -> None:
    print("| model | ops | distinct signatures | measure with cache (s) | without (s) | load |")
    print("|---|---|---|---|---|---|")
    for factory in (tm.bert_base_2, tm.bert_base_4):
        model, inputs, loss_fn = factory()
        args, kwargs = ti._normalise_inputs(inputs)
        gm, layout, flat = ti._trace(model, args, kwargs, train=True, optimizer="adam", loss_fn=loss_fn)
        first = len(layout.param_names) + len(layout.buffer_names)
        scratch = range(first, first + len(layout.param_names) * layout.n_states)
        row = []
        for cache in (True, False):
            before = load()
            t0 = time.monotonic()
            times = ti.measure_ops(gm, flat, cache=cache, scratch=scratch)
            row.append((time.monotonic() - t0, before))
            if cache:
                distinct = len(set(times.values()))  # one measurement per signature
        print(f"| {factory.__name__} | {len(times)} | ~{distinct} | {row[0][0]:.1f} | {row[1][0]:.1f} | {row[0][1]} / {row[1][1]} |", flush=True)


def part_memory() -> None:
    print("| model | step | nodes | ours: peak, one device, FIFO (MB) | PyTorch CPU peak (MB) | persistent (MB) | ours / PyTorch | above persistent: ours / PyTorch | load |")
    print("|---|---|---|---|---|---|---|---|---|")
    for factory in (tm.bert_base_12, tm.gpt2_48, tm.cnn_bench):
        model, inputs, loss_fn = factory()
        for train in (True, False):
            before = load()
            p = ti.graph_from_torch(model, inputs, train=train, loss_fn=loss_fn)
            ours = evaluate(p, np.zeros(p.n, dtype=int), memory_model="peak").peak_memory[0]
            theirs = ti.measured_step_peak(model, inputs, train=train, loss_fn=loss_fn)
            step = "training (Adam)" if train else "inference"
            print(f"| {factory.__name__} | {step} | {p.n} | {ours / 1e6:.1f} | {theirs['peak'] / 1e6:.1f} | "
                  f"{theirs['persistent'] / 1e6:.1f} | {ours / theirs['peak']:.3f} | "
                  f"{(ours - theirs['persistent']) / (theirs['peak'] - theirs['persistent']):.3f} | {before} |", flush=True)


def part_solve(tmp: Path, time_limit: float, fractions: list[float]) -> None:
    """Each model at each capacity fraction of its single-device peak until one answers."""
    print("| model | nodes | single-device peak (MB) | capacity | status | method | makespan (ms) | lower bound | gap | max peak / capacity | wall (s) | load |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for factory in SOLVE_MODELS:
        graph = tmp / f"{factory}-roofline.json"
        if not graph.exists():
            run_import(factory, "roofline", graph)
        p = load_problem(graph)
        single = evaluate(p, np.zeros(p.n, dtype=int), memory_model="peak").peak_memory[0]
        for fraction in fractions:
            cap = int(fraction * single)
            report = tmp / f"{factory}-{fraction}-report.json"
            before = load()
            t0 = time.monotonic()
            subprocess.run([sys.executable, "-m", "solvers.cli", str(graph), "--devices", "4", "--memory", str(cap),
                            "--memory-model", "peak", "--time-limit", str(time_limit), "--quiet", "--report", str(report)],
                           cwd=ROOT, stdout=subprocess.DEVNULL)
            wall = time.monotonic() - t0
            rep = json.loads(report.read_text())
            peak = max(rep["peak_memory"]) / cap if rep.get("peak_memory") else float("nan")
            ms, gap = rep.get("makespan"), rep.get("gap")
            print(f"| {factory} | {p.n} | {single / 1e6:.1f} | {fraction} x = {cap / 1e6:.1f} MB | {rep['status']} | {rep['method']} | "
                  f"{'-' if ms is None else f'{ms:.3f}'} | {rep['lower_bound']:.3f} | {'-' if gap is None else f'{100 * gap:.1f}%'} | "
                  f"{peak:.3f} | {wall:.1f} | {before} |", flush=True)
            if rep["status"] in ("feasible", "optimal"):
                break


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--part", default="all", help="time, cache, memory, solve, a comma list of them, or all")
    ap.add_argument("--time-limit", type=float, default=60.0)
    ap.add_argument("--fractions", default="0.4,0.5", help="capacities to try, as fractions of the single-device peak (next one only if no answer)")
    ap.add_argument("--keep", metavar="DIR", help="keep the imported graphs in DIR")
    args = ap.parse_args()
    parts = {"time", "cache", "memory", "solve"} if args.part == "all" else set(args.part.split(","))
    with tempfile.TemporaryDirectory() as scratch:
        tmp = Path(args.keep or scratch)
        tmp.mkdir(parents=True, exist_ok=True)
        if "time" in parts:
            part_time(tmp)
        if "cache" in parts:
            part_cache()
        if "memory" in parts:
            part_memory()
        if "solve" in parts:
            part_solve(tmp, args.time_limit, [float(x) for x in args.fractions.split(",")])


if __name__ == "__main__":
    main()
