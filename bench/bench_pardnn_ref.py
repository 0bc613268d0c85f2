"""Our `pardnn` against the authors' reference implementation, both judged by our evaluator.

    python3 bench/bench_pardnn_ref.py --ref /tmp/pardnn_ref/ref_O0 /tmp/pardnn_ref/ref_O2
                                      [--sizes 10000 200000] [--devices 4 16] [--rev COMMIT] [--graph FILE ...]

The reference (ParCoreLab/pardnn, C++) is not part of this project: build it yourself outside the
repository and pass the binary (or several builds) with --ref; it is called as
``REF FOLDER K LATENCY OUT`` and must write ``node part`` lines; the first one is the baseline of
the "vs ref" column. Without --ref only our side runs. This script writes the reference's
input layout (``graph.dot`` with a ``src`` and a ``snk`` node added, integer ``weights.txt``,
``sizes.txt`` of per-node tensor costs, ``edge_sizes.txt`` of per-edge costs where one node's
edges differ, ``var_nodes.txt``/``ref_nodes.txt`` from the colocation groups), all scaled to
integers (the reference counts in ints) so that the total of times and comms stays below 2e9.

Per graph it prints the makespan from placement.evaluator of each placement (memory not binding:
the generated graphs are made with --memory-fraction none), whole-process wall seconds (ours:
``python -m solvers.cli GRAPH --method pardnn``, one fresh process; the reference: its binary on
the exported files, the export not counted), cut comm and the critical-path device's share of the
work, and the load average. ``--rev`` also runs our pardnn from another git revision (a temporary
worktree) for before/after figures. Serialise with ``flock /tmp/bench.lock``.
"""
from __future__ import annotations

import argparse
import math
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from placement.evaluator import evaluate  # noqa: E402
from placement.formats import load_problem  # noqa: E402
from placement.formats.native import write_problem  # noqa: E402
from placement.problem import Problem  # noqa: E402

PY = sys.executable


def export_reference_input(problem: Problem, folder: Path) -> tuple[float, int]:
    """Write ``problem`` in the reference's input layout; returns (scale, scaled latency)."""
    folder.mkdir(parents=True, exist_ok=True)
    total = float(problem.time.sum() + problem.comm.sum())
    scale = 10.0 ** math.floor(math.log10(2e9 / max(total, 1e-12)))
    lat = problem.link.latency if problem.link is not None else 0.0
    lat_s = round(lat * scale) if np.isfinite(lat) else 0
    names = [str(x) for x in problem.ids]
    assert not {"src", "snk"} & set(names), "node names src/snk are reserved by the reference"
    lines = [f"{names[u]} -> {names[v]}" for u, v in zip(problem.src.tolist(), problem.dst.tolist())]
    indeg = np.bincount(problem.dst, minlength=problem.n)
    outdeg = np.bincount(problem.src, minlength=problem.n)
    lines += [f"src -> {names[v]}" for v in np.flatnonzero(indeg == 0).tolist()]
    lines += [f"{names[v]} -> snk" for v in np.flatnonzero(outdeg == 0).tolist()]
    (folder / "graph.dot").write_text("\n".join(lines) + "\n")
    times = np.rint(problem.time * scale).astype(np.int64)
    (folder / "weights.txt").write_text("".join(f"{nm}::{t}\n" for nm, t in zip(names, times.tolist())))
    size = np.maximum(np.rint(problem.comm * scale) - lat_s, 0).astype(np.int64)
    node_size: dict[int, int] = {}
    mixed: set[int] = set()
    for u, s in zip(problem.src.tolist(), size.tolist()):
        if u in node_size and node_size[u] != s:
            mixed.add(u)
        node_size[u] = max(node_size.get(u, 0), s)
    (folder / "sizes.txt").write_text("".join(f"{names[u]}::{s}\n" for u, s in node_size.items()))
    (folder / "edge_sizes.txt").write_text("".join(
        f"{names[u]}::{names[v]}::{s}\n" for u, v, s in zip(problem.src.tolist(), problem.dst.tolist(), size.tolist()) if u in mixed))
    variables, refs = [], []
    for members in problem.groups:
        owner = problem.colocate_names[problem.colocate[members[0]]]
        for m in members.tolist():
            (variables if names[m] == owner else refs).append(names[m])
    (folder / "var_nodes.txt").write_text("".join(f"{x}\n" for x in variables))
    (folder / "ref_nodes.txt").write_text("".join(f"{x}\n" for x in refs))
    (folder / "no_ops.txt").write_text("")
    return scale, lat_s


def read_parts(problem: Problem, path: Path) -> np.ndarray:
    pl = np.full(problem.n, -1, dtype=np.int64)
    for line in path.read_text().splitlines():
        name, _, part = line.rpartition(" ")
        if name in ("src", "snk"):
            continue
        pl[problem.index[name]] = int(part)
    assert (pl >= 0).all(), "the reference left a node unplaced"
    return pl


def describe(problem: Problem, pl: np.ndarray) -> dict:
    ev = evaluate(problem, pl, memory_model="static")
    cut = float(problem.comm[pl[problem.src] != pl[problem.dst]].sum())
    load = np.bincount(pl, weights=problem.time, minlength=problem.k)
    return {"makespan": ev.makespan, "cut": cut, "max_share": float(load.max() / problem.time.sum())}


def run_reference(binary: str, problem: Problem, workdir: Path) -> tuple[np.ndarray, float]:
    _, lat_s = export_reference_input(problem, workdir / "in")
    out = workdir / "ref.place"
    t = time.monotonic()
    subprocess.run([binary, str(workdir / "in"), str(problem.k), str(lat_s), str(out)], check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return read_parts(problem, out), time.monotonic() - t


def run_ours(root: Path, graph: Path, problem: Problem, workdir: Path, tag: str) -> tuple[np.ndarray, float]:
    out = workdir / f"ours-{tag}.place"
    env = dict(os.environ, PYTHONPATH=str(root))
    t = time.monotonic()
    subprocess.run([PY, "-m", "solvers.cli", str(graph), "--method", "pardnn", "--quiet", "--out", str(out)],
                   cwd=root, env=env, check=True, stdout=subprocess.DEVNULL)
    secs = time.monotonic() - t
    pl = np.full(problem.n, -1, dtype=np.int64)
    for line in out.read_text().splitlines():
        name, _, dev = line.rpartition(" ")
        pl[problem.index[name]] = int(dev)
    return pl, secs


def load_avg() -> str:
    return "/".join(f"{x:.2f}" for x in os.getloadavg())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ref", nargs="*", default=[], help="reference binaries (built outside the repository), e.g. -O0 and -O2 builds")
    ap.add_argument("--sizes", type=int, nargs="*", default=[10000, 200000])
    ap.add_argument("--devices", type=int, nargs="*", default=[4, 16])
    ap.add_argument("--graph", nargs="*", default=[], help="extra problem files (K from --devices)")
    ap.add_argument("--rev", help="also run our pardnn from this git revision (before/after)")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="pardnn-ref-") as tmp:
        tmp = Path(tmp)
        roots = {"ours": ROOT}
        if args.rev:
            subprocess.run(["git", "worktree", "add", "--detach", str(tmp / "before"), args.rev], cwd=ROOT, check=True,
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            roots = {"before": tmp / "before", "ours": ROOT}
        cases = []
        for n in args.sizes:
            for k in args.devices:
                path = tmp / f"transformer-{n}-K{k}.json"
                subprocess.run([PY, "-m", "placement.generate", "transformer", "--nodes", str(n), "--devices", str(k),
                                "--memory-fraction", "none", "-o", str(path)], cwd=ROOT, check=True, stdout=subprocess.DEVNULL)
                cases.append((f"transformer-{n} K={k}", path))
        for g in args.graph:
            for k in args.devices:
                p = load_problem(g)
                path = tmp / f"{Path(g).stem}-K{k}.json"
                write_problem(replace(p, k=k, memory=np.full(k, np.inf)) if p.k != k else p, path)
                cases.append((f"{Path(g).stem} K={k}", path))
        header = "| graph | who | makespan | vs ref | cut comm | max device share | seconds | load avg |"
        print(header)
        print("|" + "---|" * (header.count("|") - 1))
        for label, path in cases:
            problem = load_problem(path)
            work = tmp / label.replace(" ", "_")
            work.mkdir()
            rows = []
            ref_ms = None
            for binary in args.ref:
                pl, secs = run_reference(binary, problem, work)
                d = describe(problem, pl)
                ref_ms = d["makespan"] if ref_ms is None else ref_ms
                rows.append((f"reference ({Path(binary).name})", d, secs))
            for tag, root in roots.items():
                pl, secs = run_ours(root, path, problem, work, tag)
                rows.append((tag, describe(problem, pl), secs))
            for who, d, secs in rows:
                rel = f"{100 * (d['makespan'] / ref_ms - 1):+.1f}%" if ref_ms else "-"
                print(f"| {label} | {who} | {d['makespan']:.2f} | {rel} | {d['cut']:.1f} | {d['max_share']:.3f} | {secs:.1f} | {load_avg()} |",
                      flush=True)
        if args.rev:
            subprocess.run(["git", "worktree", "remove", "--force", str(tmp / "before")], cwd=ROOT, check=False)


if __name__ == "__main__":
    main()
