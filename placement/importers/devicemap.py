"""Placements out: a solved placement as a device map a PyTorch user can apply.

    python -m placement.importers.devicemap report.json -o devicemap.json [--devices cuda:0,cuda:1]

A device map is ``{"devices": {node id: device}, "order": {device: [node ids in start order]},
"makespan": ...}``, built from ``solve --report``'s placement and start times (or from an
evaluation). For a model imported from PyTorch, :func:`annotate_graph` writes each captured FX
node's device (and its position in that device's order) into ``node.meta``, views and getitems
following the operator they were folded into, and :func:`run_split` executes the annotated graph
moving every operator's tensor inputs to its device first: what running it split takes.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np

from ..problem import Problem, ProblemError
from .build import write_atomic


def device_names(k: int, devices: Sequence[str] | None = None) -> list[str]:
    """``cuda:0..K-1`` unless names are given (one per device)."""
    if devices is None:
        return [f"cuda:{d}" for d in range(k)]
    if len(devices) < k:
        raise ProblemError(f"{len(devices)} device names given for {k} devices")
    return list(devices)


def device_map(ids: Sequence[Any], placement: Sequence[int], start: Sequence[float] | None = None,
               devices: Sequence[str] | None = None) -> dict[str, Any]:
    """Node id -> device name, and each device's nodes in start order (ties: the given order)."""
    pl = np.asarray(placement, dtype=np.int64)
    if pl.shape[0] != len(ids):
        raise ProblemError(f"placement has {pl.shape[0]} entries for {len(ids)} nodes")
    k = int(pl.max()) + 1 if pl.size else 0
    names = device_names(k, devices)
    st = np.zeros(len(ids)) if start is None else np.asarray(start, dtype=float)
    order = np.lexsort((np.arange(len(ids)), st))
    per_device: dict[str, list[str]] = {names[d]: [] for d in range(k)}
    for i in order.tolist():
        per_device[names[int(pl[i])]].append(str(ids[i]))
    return {"devices": {str(nid): names[int(d)] for nid, d in zip(ids, pl.tolist())}, "order": per_device}


def device_map_from_report(report: Mapping[str, Any], devices: Sequence[str] | None = None) -> dict[str, Any]:
    """The device map of a ``solve --report`` JSON (its ``placement`` and ``start``)."""
    placement = report.get("placement")
    if not isinstance(placement, Mapping) or not placement:
        raise ProblemError("report has no placement (no feasible answer was found)")
    ids = list(placement)
    start = report.get("start") or {}
    dmap = device_map(ids, [int(placement[i]) for i in ids], [float(start.get(i, 0.0)) for i in ids], devices)
    if report.get("makespan") is not None:
        dmap["makespan"] = report["makespan"]
    return dmap


def device_map_from_evaluation(problem: Problem, evaluation: Any, devices: Sequence[str] | None = None) -> dict[str, Any]:
    dmap = device_map(problem.ids, evaluation.placement, evaluation.start, devices)
    dmap["makespan"] = float(evaluation.makespan)
    return dmap


def annotate_graph(capture: Any, dmap: Mapping[str, Any]) -> dict[str, str]:
    """Set ``node.meta["device"]`` (and ``node.meta["device_order"]``, the owning operator's
    position on its device) on every node of a :class:`~placement.importers.torch.Capture`'s FX
    graph; returns FX node name -> device. The output node gets no device."""
    devices = dmap["devices"]
    position = {nid: pos for order in dmap["order"].values() for pos, nid in enumerate(order)}
    out: dict[str, str] = {}
    for node in capture.graph_module.graph.nodes:
        nid = capture.owner.get(node.name)
        if nid is None:
            continue
        if nid not in devices:
            raise ProblemError(f"device map has no device for node {nid!r} (FX node {node.name!r})")
        node.meta["device"] = devices[nid]
        node.meta["device_order"] = position.get(nid, 0)
        out[node.name] = devices[nid]
    return out


def run_split(capture: Any, dmap: Mapping[str, Any], *flat_inputs: Any) -> Any:
    """Run the annotated step, every operator on its device (its tensor inputs moved there first).

    ``flat_inputs`` are the traced function's flat arguments (parameters, buffers, optimizer
    states, then the example inputs' tensors), as ``capture.arguments`` holds them. In-place
    updates write into these tensors: pass copies to keep the originals."""
    import torch
    from torch.fx import Interpreter
    from torch.utils._pytree import tree_map

    annotate_graph(capture, dmap)

    class Split(Interpreter):
        def run_node(self, n: Any) -> Any:
            device = n.meta.get("device")
            if device is None or n.op not in ("call_function", "placeholder"):
                return super().run_node(n)
            if n.op == "placeholder":
                value = super().run_node(n)
                return value.to(device) if isinstance(value, torch.Tensor) else value
            args, kwargs = self.fetch_args_kwargs_from_env(n)
            target = torch.device(device)
            move = lambda x: x.to(target) if isinstance(x, torch.Tensor) and x.device != target else x  # noqa: E731
            return n.target(*tree_map(move, args), **tree_map(move, kwargs))

    return Split(capture.graph_module).run(*flat_inputs)


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m placement.importers.devicemap",
                                description="Turn solve's JSON report into a device map: node -> device, and each device's order.")
    p.add_argument("report", help="the JSON written by solve --report")
    p.add_argument("-o", "--output", required=True, metavar="FILE", help="device map JSON to write")
    p.add_argument("--devices", metavar="NAMES", help="comma-separated device names, one per device index (default cuda:0,cuda:1,...)")
    args = p.parse_args(argv)
    try:
        out = Path(args.output)
        if not out.parent.is_dir():
            raise ProblemError(f"-o: directory {str(out.parent)!r} does not exist")
        try:
            report = json.loads(Path(args.report).read_text())
        except FileNotFoundError:
            raise ProblemError(f"{args.report}: no such file") from None
        except (OSError, json.JSONDecodeError) as exc:
            raise ProblemError(f"{args.report}: not a JSON report: {exc}") from None
        if not isinstance(report, dict):
            raise ProblemError(f"{args.report}: not a JSON report")
        names = [s.strip() for s in args.devices.split(",")] if args.devices else None
        dmap = device_map_from_report(report, names)
    except ProblemError as exc:
        print(f"placement.importers.devicemap: error: {exc}", file=sys.stderr)
        return 2
    write_atomic(out, (json.dumps(dmap, indent=1) + "\n").encode())
    return 0


if __name__ == "__main__":
    sys.exit(main())
