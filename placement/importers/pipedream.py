"""PipeDream profiler graphs in: per-layer ``graph.txt`` profiles as placement problems.

    python -m placement.importers.pipedream graph.txt -o graph.json [--inference] [--device-spec h100]

PipeDream's profiler (msr-fiddle/pipedream, profiler/*/profiles/) writes one line per layer,

    nodeN -- Layer(...) -- forward_compute_time=MS, backward_compute_time=MS, activation_size=BYTES, parameter_size=BYTES

(activation_size may list several outputs, ``[a; b; c]``: their sum is used) and one line per
edge, ``nodeA -- nodeB``. By default the problem is a training step
(docs/importers.md gives the reasons):

- forward node ``nodeN``: the forward time; its output is the layer's activation; it holds the
  layer's persistent bytes, parameter_size x 4 (weights, gradients, Adam's two states);
- backward node ``nodeN:backward`` for every layer that needs a gradient (it has parameters, or a
  layer upstream has), colocated with its forward layer, timed by backward_compute_time; its output
  is the gradient of the layer's inputs;
- gradients flow back along reversed edges (``B:backward -> A:backward``, the size of A's
  activation); ``nodeN -> nodeN:backward`` keeps a layer's output for its backward, and
  ``nodeA -> nodeB:backward`` keeps B's input for B's backward (saved activations).

With ``--inference``: the forward nodes only, parameter_size x 1. Times stay in the profile's ms;
edges are priced with the device spec's link; devices get the spec's memory.
"""
from __future__ import annotations

import argparse
import math
import re
import sys
from pathlib import Path
from typing import Sequence

from ..formats.files import read_text
from ..problem import Problem, ProblemError
from .build import GraphBuilder, check_output_path, write_native
from .devicespec import DeviceSpec, device_spec

TRAIN_PARAM_FACTOR = 4  # weights, gradients, Adam's exp_avg and exp_avg_sq

_NUM = r"([-+0-9.eE]+|nan|inf)"
_NODE = re.compile(
    r"^\s*(\S+) -- (.*) -- forward_compute_time=" + _NUM + r", backward_compute_time=" + _NUM
    + r", activation_size=(\[[^\]]*\]|" + _NUM[1:-1] + r"), parameter_size=" + _NUM + r"\s*$")
_EDGE = re.compile(r"^\s*(\S+) -- (\S+)\s*$")
_FIELDS = ("forward_compute_time", "backward_compute_time", "activation_size", "parameter_size")


def looks_like_pipedream(text: str) -> bool:
    """Is this a PipeDream profile? (its first non-blank line is a node line)"""
    for line in text.splitlines():
        if line.strip():
            return bool(_NODE.match(line))
    return False


def parse_profile(text: str, where: str = "graph.txt") -> tuple[dict[str, dict], list[tuple[str, str]]]:
    """Layers (id -> {"desc", and the four fields}) in file order, and edges, validated."""
    layers: dict[str, dict] = {}
    edges: list[tuple[str, str]] = []
    for lineno, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        m = _NODE.match(line)
        if m:
            nid, desc = m.group(1), m.group(2).strip()
            if nid in layers:
                raise ProblemError(f"{where}:{lineno}: layer {nid!r} defined twice")
            rec: dict = {"desc": desc}
            for fld, raw in zip(_FIELDS, m.groups()[2:]):
                try:  # a layer with several outputs lists their sizes: [a; b; c]
                    parts = raw.strip("[]").split(";") if raw.startswith("[") else [raw]
                    values = [float(x) for x in parts]
                    x = sum(values) if all(v >= 0 for v in values) else -1.0
                except ValueError:
                    x = math.nan
                if not math.isfinite(x) or x < 0:
                    raise ProblemError(f"{where}:{lineno}: layer {nid!r} field {fld}: expected a non-negative number, got {raw!r}")
                rec[fld] = x
            layers[nid] = rec
            continue
        m = _EDGE.match(line)
        if m:
            edges.append((m.group(1), m.group(2)))
            continue
        raise ProblemError(f"{where}:{lineno}: neither 'nodeN -- Layer -- forward_compute_time=..., backward_compute_time=..., "
                           f"activation_size=..., parameter_size=...' nor 'nodeA -- nodeB': {line.strip()[:80]!r}")
    for a, b in edges:
        for end in (a, b):
            if end not in layers:
                raise ProblemError(f"{where}: edge {a} -- {b}: unknown layer {end!r}")
    if not layers:
        raise ProblemError(f"{where}: no layers")
    return layers, edges


def _layer_type(desc: str) -> str:
    return re.split(r"[(\s]", desc, maxsplit=1)[0] or "Layer"


def problem_from_pipedream(text: str, *, train: bool = True, spec: str | DeviceSpec = "h100", name: str = "pipedream",
                           where: str = "graph.txt") -> Problem:
    """The placement problem of a PipeDream profile (see the module docstring for the model)."""
    layers, edges = parse_profile(text, where)
    dev = device_spec(spec)
    preds: dict[str, list[str]] = {nid: [] for nid in layers}
    for a, b in edges:
        if b not in preds[b] and a not in preds[b]:
            preds[b].append(a)
    needs_grad = _needs_grad(layers, preds, where)
    b = GraphBuilder()
    factor = TRAIN_PARAM_FACTOR if train else 1
    for nid, rec in layers.items():
        kind = _layer_type(rec["desc"])
        b.node(nid, name=f"{nid} {rec['desc']}"[:200], time=rec["forward_compute_time"], out_bytes=rec["activation_size"],
               param_bytes=factor * rec["parameter_size"], op=f"pipedream.{kind}")
    for a, dst in edges:
        b.use(a, dst, layers[a]["activation_size"])
    if train:
        for nid, rec in layers.items():
            if not needs_grad[nid]:
                continue
            back = f"{nid}:backward"
            grad_in = sum(layers[p]["activation_size"] for p in preds[nid] if needs_grad[p])
            b.node(back, name=f"{nid} backward", time=rec["backward_compute_time"], out_bytes=grad_in,
                   colocate=nid, op=f"pipedream.{_layer_type(rec['desc'])}.backward")
            b.record(nid)["colocate"] = nid
            b.use(nid, back, rec["activation_size"])
            for p in preds[nid]:
                b.use(p, back, layers[p]["activation_size"])
        for a, dst in edges:
            if needs_grad[a] and needs_grad[dst]:
                b.use(f"{dst}:backward", f"{a}:backward", layers[a]["activation_size"])
    return b.problem(name=name, link=dev.link(), memory=dev.memory,
                     attrs={"format": "pipedream", "time_unit": "ms (profiled)", "capture": "training step" if train else "inference"})


def _needs_grad(layers: dict[str, dict], preds: dict[str, list[str]], where: str) -> dict[str, bool]:
    """A layer needs a backward pass when it has parameters or a layer upstream of it has."""
    import networkx as nx

    g = nx.DiGraph()
    g.add_nodes_from(layers)
    g.add_edges_from((p, n) for n, ps in preds.items() for p in ps)
    try:
        order = list(nx.topological_sort(g))
    except nx.NetworkXUnfeasible:
        cycle = [u for u, _ in nx.find_cycle(g)]
        raise ProblemError(f"{where}: graph has a cycle: {' -> '.join(cycle + cycle[:1])}") from None
    needs: dict[str, bool] = {}
    for nid in order:
        needs[nid] = layers[nid]["parameter_size"] > 0 or any(needs[p] for p in preds[nid])
    return needs


def read_pipedream(path: str | Path, *, train: bool = True, spec: str | DeviceSpec = "h100") -> Problem:
    path = Path(path)
    stem = path.name.split(".")[0]
    name = path.parent.name if stem == "graph" and path.parent.name else stem
    return problem_from_pipedream(read_text(path), train=train, spec=spec, name=name, where=str(path))


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m placement.importers.pipedream",
                                description="Convert a PipeDream profiler graph.txt into a native placement problem (a training step by default).")
    p.add_argument("graph", help="PipeDream profile (graph.txt; .gz accepted)")
    p.add_argument("-o", "--output", required=True, metavar="FILE", help="native JSON to write (.json.gz: gzipped)")
    p.add_argument("--inference", action="store_true", help="forward layers only, weights x1")
    p.add_argument("--device-spec", default="h100", metavar="h100|a100|FILE", help="link and device memory (default h100)")
    args = p.parse_args(argv)
    try:
        out = check_output_path(args.output)
        prob = read_pipedream(args.graph, train=not args.inference, spec=args.device_spec)
        write_native(prob, out)
    except ProblemError as exc:
        print(f"placement.importers.pipedream: error: {exc}", file=sys.stderr)
        return 2
    print(f"{prob.describe()}; wrote {out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
