"""Session 42 ("realcheck round 9"): gradients under ``zero_grad(set_to_none=True)`` and fp16 AMP
with ``torch.amp.GradScaler``, each row captured under both ``--zero-grad`` settings.

    PYTHONPATH=. python bench/bench_realcheck9.py OUTDIR ROW... [--time-limit 30] [--skip-solve]

A ROW is ``FILE.py:FACTORY[+FLAG...]``, flags separated by ``+`` (``bench/real_models9.py:amp_gpt+--grad-scaler``).
Per row and setting (``--zero-grad none``, ``zeros``):

- capture: ``python -m placement.importers.torch FILE:FACTORY -o OUTDIR/TAG.json --devices 4
  FLAGS --zero-grad Z``, the whole process timed under ``flock /tmp/bench.lock``;
- the one-device peak of the problem (peak model), in the FIFO executor's order and in program
  order (every node in its trace order, each zero-time node the importer adds right after its last
  predecessor: the order eager PyTorch runs the step in); PyTorch's own measured peak of the same
  step (``measured_step_peak`` with the same optimizer, accumulation, zero_grad and GradScaler),
  also under the lock;
- ``solve --devices 4 --time-limit T`` static (one whole process under the lock), its report
  re-checked by ``placement.evaluator.check`` (bench/bench_realcheck2.py's ``one``) with ETF as the
  reference, ``--method etf`` untimed.

One JSON line per row and setting goes to OUTDIR/rows.jsonl (the solve runs to OUTDIR/runs.jsonl).
"""
from __future__ import annotations

import argparse
import importlib.util
import json
import runpy
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent


def _realcheck2():
    spec = importlib.util.spec_from_file_location("bench_realcheck2", HERE / "bench_realcheck2.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def measure(spec: str, flags: list[str], zero_grad: str) -> dict:
    """PyTorch's measured peak of the row's step (run in this process, under the lock by the caller)."""
    from placement.importers.torch import measured_step_peak

    path, factory = spec.rsplit(":", 1)
    made = runpy.run_path(path)[factory]()
    model, inputs, loss_fn = made if len(made) == 3 else (*made, None)
    kw = {"optimizer": "adam", "accumulate": 1}
    for i, f in enumerate(flags):
        if f == "--optimizer":
            kw["optimizer"] = flags[i + 1]
        if f == "--accumulate":
            kw["accumulate"] = int(flags[i + 1])
    return measured_step_peak(model, inputs, loss_fn=loss_fn, zero_grad=zero_grad, grad_scaler="--grad-scaler" in flags, **kw)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", type=Path)
    ap.add_argument("rows", nargs="+")
    ap.add_argument("--time-limit", type=float, default=30)
    ap.add_argument("--settings", nargs="+", default=["none", "zeros"])
    ap.add_argument("--skip-solve", action="store_true")
    ap.add_argument("--inner-measure", nargs=3, metavar=("SPEC", "FLAGS", "ZERO_GRAD"), help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.inner_measure:  # the measurement as a process of its own, under the lock
        spec, flags, z = a.inner_measure
        print(json.dumps(measure(spec, [f for f in flags.removeprefix("F").split("+") if f], z)))
        return
    from placement.evaluator import evaluate
    from placement.formats import load_problem
    from placement.importers.torch import program_order

    a.out.mkdir(parents=True, exist_ok=True)
    rc2 = _realcheck2()
    for row in a.rows:
        spec, *flags = row.split("+")
        name = spec.rsplit(":", 1)[1]
        for z in a.settings:
            tag = "-".join([name, *[f.lstrip("-") for f in flags], z]).replace("=", "_")
            graph = a.out / f"{tag}.json"
            t0 = time.time()
            cmd = ["flock", "/tmp/bench.lock", sys.executable, "-m", "placement.importers.torch", spec, "-o", str(graph),
                   "--devices", "4", *[x for f in flags for x in f.split("=")], "--zero-grad", z]
            proc = subprocess.run(cmd, capture_output=True, text=True)
            capture_s = time.time() - t0
            if proc.returncode:
                print(json.dumps({"tag": tag, "capture_failed": proc.stderr[-300:]}), flush=True)
                continue
            p = load_problem(graph)
            zeros = np.zeros(p.n, dtype=int)
            fifo = float(evaluate(p, zeros, memory_model="peak").peak_memory[0])
            prog = float(evaluate(p, zeros, order=[program_order(p)], memory_model="peak").peak_memory[0])
            m = subprocess.run(["flock", "/tmp/bench.lock", sys.executable, __file__, str(a.out), "x",
                                "--inner-measure", spec, "F" + "+".join(x for f in flags for x in f.split("=")), z],
                               capture_output=True, text=True)
            theirs = json.loads(m.stdout.strip().splitlines()[-1]) if m.returncode == 0 else {"error": m.stderr[-300:]}
            rec = {"tag": tag, "row": row, "zero_grad": z, "ops": p.n, "edges": p.m, "capture_s": round(capture_s, 1),
                   "param_bytes": float(p.param_bytes.sum()), "fifo_peak": fifo, "program_peak": prog, "pytorch": theirs}
            if not a.skip_solve:
                etf = rc2.probe(a.out, graph, f"{tag}.static.k4", 4, "static", "inf").get("makespan")
                rec["solve"] = rc2.one(a.out, graph, f"{tag}.static.k4.inf", 4, "static", "inf", a.time_limit, etf)
            with open(a.out / "rows.jsonl", "a") as f:
                f.write(json.dumps(rec) + "\n")
            pk = theirs.get("peak")
            print(json.dumps({"tag": tag, "ops": p.n, "edges": p.m, "fifo": round(fifo / 1e6, 2), "program": round(prog / 1e6, 2),
                              "pytorch": round(pk / 1e6, 2) if pk else theirs, "ratio_fifo": round(fifo / pk, 3) if pk else None,
                              "ratio_program": round(prog / pk, 3) if pk else None,
                              "static": (rec.get("solve") or {}).get("makespan")}), flush=True)


if __name__ == "__main__":
    main()
