"""Benchmark of the Tarnawski et al. objectives on the msr-fiddle workloads (not run by CI).

    python3 bench/bench_tarnawski.py contiguous [--limit 60] [--skip dpl,dp,cpsat]  # DP, DPL, CP-SAT
    python3 bench/bench_tarnawski.py noncontiguous [--limit 600]  # CP-SAT non-contiguous
    python3 bench/bench_tarnawski.py latency [--limit 600]        # latency methods

Prints one JSON line per run (append to a file and summarise into bench/results_tarnawski.md).
Run one mode at a time: the machine has 2 cores and CP-SAT uses 2 workers.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from placement.formats.fiddle import read_fiddle  # noqa: E402
from placement.solution import SolveOptions  # noqa: E402

ROOT = Path(__file__).resolve().parents[2] / "shared" / "workloads" / "msr-fiddle"
# (file, published contiguous, published non-contiguous)
THROUGHPUT = [
    ("OperatorGraphs/bert_l-3_inference", 27.92, 21.91),
    ("OperatorGraphs/bert_l-6_inference", 29.58, 28.33),
    ("OperatorGraphs/bert_l-12_inference", 147.48, 130.03),
    ("OperatorGraphs/resnet50_inference", 124.35, 124.35),
    ("OperatorGraphs/bert_l-3_training", 65.30, 54.21),
    ("OperatorGraphs/bert_l-6_training", 72.86, 71.64),
    ("OperatorGraphs/bert_L-12_training", 438.00, 373.42),
    ("OperatorGraphs/resnet50_training", 255.19, 255.19),
    ("LayerGraphs/bert24_inference", 17.79, 17.71),
    ("LayerGraphs/resnet50_inference", 33.77, 33.31),
    ("LayerGraphs/inceptionv3_inference", 51.55, 51.52),
    ("LayerGraphs/gnmt_inference", 32.91, 31.68),
    ("LayerGraphs/bert24_training", 41.75, 39.79),
    ("LayerGraphs/resnet50_training", 78.63, 76.65),
    ("LayerGraphs/inceptionv3_training", 122.76, 117.72),
    ("LayerGraphs/gnmt_training", 107.00, 88.47),
]
LATENCY = [("bert_l-3_inference", 408.47), ("bert_l-6_inference", 438.06), ("bert_l-12_inference", 729.56),
           ("resnet50_inference", 672.06)]


def emit(rec: dict) -> None:
    print(json.dumps(rec), flush=True)


def contiguous(limit: float, only: str | None, skip: tuple[str, ...] = ()) -> None:
    from formulations.maxload.dp import TooManyIdeals, solve_dp
    from formulations.maxload.ip_cpsat import solve_cpsat

    for f, pub_c, _ in THROUGHPUT:
        if only and only not in f:
            continue
        p = read_fiddle(ROOT / "throughput-inputs" / f"{f}.json")
        for lin, tag in ((True, "dpl"), (False, "dp")):
            if tag in skip:
                continue
            t = time.monotonic()
            try:
                _, v, info = solve_dp(p, linearize=lin, max_ideals=60000, deadline=time.monotonic() + 3600)
                emit({"w": f, "method": tag, "value": v, "ideals": info["ideals"], "units": info["units"],
                      "pairs": info["pairs"], "s": time.monotonic() - t, "published": pub_c})
            except (TooManyIdeals, TimeoutError) as exc:
                emit({"w": f, "method": tag, "error": str(exc), "s": time.monotonic() - t})
        if "cpsat" in skip:
            continue
        t = time.monotonic()
        s = solve_cpsat(p, SolveOptions(time_limit=limit, workers=2), "maxload-cpsat", True)
        emit({"w": f, "method": "cpsat-contig", "status": s.status, "value": s.objective, "lb": s.lower_bound,
              "gap": s.info.get("gap"), "s": time.monotonic() - t, "published": pub_c})


def noncontiguous(limit: float, only: str | None) -> None:
    """``maxload-cpsat-nc`` (what ``solve --objective max-load`` runs); the warm start's counters
    (annealing runs, device LNS, when its best was found) are captured by wrapping lns_improve."""
    from formulations.maxload import lns
    from formulations.maxload.ip_cpsat import solve_cpsat

    captured: list[dict] = []
    inner = lns.lns_improve

    def recording(*args, **kwargs):
        atoms, stats = inner(*args, **kwargs)
        captured.append(stats)
        return atoms, stats

    lns.lns_improve = recording
    for f, _, pub_nc in THROUGHPUT:
        if only and only not in f:
            continue
        p = read_fiddle(ROOT / "throughput-inputs" / f"{f}.json")
        captured.clear()
        t = time.monotonic()
        s = solve_cpsat(p, SolveOptions(time_limit=limit, workers=2), "maxload-cpsat-nc", False)
        rec = {"w": f, "method": "cpsat-noncontig", "status": s.status, "value": s.objective, "lb": s.lower_bound,
               "gap": s.info.get("gap"), "hint": s.info.get("hint"), "s": time.monotonic() - t, "published": pub_nc}
        if captured:
            st = captured[-1]
            rec["warm"] = {"start": st["start"], "after_anneal": st["after_anneal"], "after_lns": st["end"],
                           "best_found_s": st["best_at"] - t, "lns_steps": st["steps"], "lns_improved": st["improved"],
                           "anneal": [{k: a[k] for k in ("iters", "accepted", "value", "s")} for a in st["anneal"]]}
        emit(rec)


def latency(limit: float, only: str | None) -> None:
    from formulations.latency import exact as lat
    from solvers.methods import get

    for f, pub in LATENCY:
        if only and only not in f:
            continue
        p = read_fiddle(ROOT / "latency-inputs" / "OperatorGraphs" / f"{f}.json")
        for name in ("greedy", "latency-cpsat"):
            t = time.monotonic()
            s = get(name).func(p, SolveOptions(time_limit=limit, workers=2))
            emit({"w": f, "method": name, "status": s.status, "value": s.objective, "lb": s.lower_bound,
                  "s": time.monotonic() - t, "published": pub, "info": {k: v for k, v in s.info.items() if k in ("hint", "gap", "q")}})


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("mode", choices=("contiguous", "noncontiguous", "latency"))
    ap.add_argument("--limit", type=float, default=None)
    ap.add_argument("--only", default=None)
    ap.add_argument("--skip", default="", help="contiguous: comma-separated subset of dpl,dp,cpsat to skip")
    a = ap.parse_args()
    lim = a.limit or {"contiguous": 60.0, "noncontiguous": 600.0, "latency": 600.0}[a.mode]
    if a.mode == "contiguous":
        contiguous(lim, a.only, tuple(x for x in a.skip.split(",") if x))
    else:
        {"noncontiguous": noncontiguous, "latency": latency}[a.mode](lim, a.only)


if __name__ == "__main__":
    main()
