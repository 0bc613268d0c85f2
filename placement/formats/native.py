"""The project's native JSON problem format (schema: placement/schema/problem.schema.json).

    {"name": "...",
     "devices": {"count": 4, "memory": "16GB"}  or  [{"name": "gpu0", "memory": 16e9}, ...],
     "link": {"latency": 1e-5, "bandwidth": 1e10},            (optional; prices edges given in bytes)
     "nodes": [{"id": "a", "time": 1.0, "out_bytes": 4096, "param_bytes": 0,
                "colocate": "grp"?, "devices": [0, 1]?, "name": "..."?,
                "op": "aten.mm"?, "inputs": [{"shape": [8, 4], "dtype": "float32"}]?, "outputs": [...]?}],
     "edges": [{"src": "a", "dst": "b", "comm": 0.5}  or  {"src": "a", "dst": "b", "bytes": 4096},
               each optionally with "src_output": 0, "dst_inputs": [1] (and "tensors" when merged)]}

Memory is bytes, a string with a unit ("16GB", "16GiB"), or null for unlimited.
"""
from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np

from ..problem import Link, Problem, ProblemError, make_problem
from ..units import parse_bytes
from .files import parse_json, read_text


def looks_like_native(doc: Any) -> bool:
    return isinstance(doc, dict) and "nodes" in doc and ("devices" in doc or "edges" in doc) and "maxFPGAs" not in doc


def _memory(value: Any, where: str) -> float:
    if value is None:
        return math.inf
    try:
        return parse_bytes(value)
    except ValueError as exc:
        raise ProblemError(f"{where}: {exc}") from None


def _known_keys(obj: dict[str, Any], allowed: tuple[str, ...], where: str) -> None:
    """The schema forbids unknown keys here: a misspelt one ("memroy") must not be ignored."""
    for key in obj:
        if key not in allowed:
            raise ProblemError(f"{where}: unknown key {key!r} (allowed: {', '.join(allowed)})")


def problem_from_native(doc: dict[str, Any], name: str = "problem") -> Problem:
    """Build a Problem from a parsed native document (validated by make_problem)."""
    if not isinstance(doc, dict):
        raise ProblemError("native JSON: the document must be an object")
    for key in ("nodes",):
        if not isinstance(doc.get(key), list):
            raise ProblemError(f"native JSON: field {key!r} must be a list")
    edges = doc.get("edges", [])
    if not isinstance(edges, list):
        raise ProblemError("native JSON: field 'edges' must be a list")
    if "name" in doc and not isinstance(doc["name"], str):
        raise ProblemError(f"name: expected a string, got {doc['name']!r}")
    devices = doc.get("devices", {"count": 1, "memory": None})
    if isinstance(devices, dict):
        _known_keys(devices, ("count", "memory"), "devices")
        if "count" not in devices:
            raise ProblemError("devices: missing 'count' (the number of devices)")
        count = devices["count"]
        if isinstance(count, bool) or not isinstance(count, int):
            raise ProblemError(f"devices.count: expected an integer, got {count!r}")
        mem = devices.get("memory")
        memory: Any = [_memory(x, f"devices.memory[{i}]") for i, x in enumerate(mem)] if isinstance(mem, list) else _memory(mem, "devices.memory")
        dev_arg: Any = count
    elif isinstance(devices, list):
        dev_arg = []
        for i, d in enumerate(devices):
            if not isinstance(d, dict):
                raise ProblemError(f"devices[{i}]: expected an object with 'name' and 'memory'")
            _known_keys(d, ("name", "memory"), f"devices[{i}]")
            if "name" in d and not isinstance(d["name"], str):
                raise ProblemError(f"devices[{i}].name: expected a string, got {d['name']!r}")
            dev_arg.append({"name": d.get("name", f"dev{i}"), "memory": _memory(d.get("memory"), f"devices[{i}].memory")})
        memory = math.inf
    else:
        raise ProblemError("devices: expected {'count', 'memory'} or a list of {'name', 'memory'}")
    link = None
    if doc.get("link") is not None:
        lk = doc["link"]
        if not isinstance(lk, dict):
            raise ProblemError("link: expected {'latency', 'bandwidth'}")
        _known_keys(lk, ("latency", "bandwidth"), "link")
        raw_latency = lk.get("latency", 0.0)
        raw_bandwidth = lk.get("bandwidth")  # null or absent: unlimited
        if any(isinstance(x, bool) or not isinstance(x, (int, float)) for x in (raw_latency, raw_bandwidth) if x is not None):
            raise ProblemError(f"link: latency and bandwidth must be numbers, got {lk!r}")
        latency = float(raw_latency) if raw_latency is not None else 0.0
        bandwidth = float(raw_bandwidth) if raw_bandwidth is not None else math.inf
        if not math.isfinite(latency):
            raise ProblemError(f"link: latency must be a finite number of time units, got {raw_latency!r}")
        if not (latency >= 0 and bandwidth > 0):
            raise ProblemError(f"link: latency must be >= 0 and bandwidth > 0, got {lk!r}")
        link = Link(latency, bandwidth)
    return make_problem(doc["nodes"], edges, devices=dev_arg, memory=memory, link=link,
                        name=str(doc.get("name", name)), attrs={"format": "native"})


def read_problem(path: str | Path) -> Problem:
    path = Path(path)
    return problem_from_native(parse_json(read_text(path), path), name=path.stem)


def _num(x: float) -> float | int:
    return int(x) if float(x).is_integer() and abs(x) < 2**53 else float(x)


def problem_to_native(problem: Problem) -> dict[str, Any]:
    """The native document of a problem (comm written explicitly, bytes too when known)."""
    def mem(x: float) -> Any:
        return None if math.isinf(x) else _num(x)

    if all(name == f"dev{d}" for d, name in enumerate(problem.device_names)) and np.all(problem.memory == problem.memory[0]):
        devices: Any = {"count": problem.k, "memory": mem(problem.memory[0])}
    else:
        devices = [{"name": nm, "memory": mem(x)} for nm, x in zip(problem.device_names, problem.memory.tolist())]
    nodes = []
    for i, nid in enumerate(problem.ids):
        rec: dict[str, Any] = {"id": nid}
        if problem.names[i] != str(nid):
            rec["name"] = problem.names[i]
        rec.update(time=_num(problem.time[i]), out_bytes=_num(problem.out_bytes[i]), param_bytes=_num(problem.param_bytes[i]))
        if problem.colocate[i] >= 0:
            rec["colocate"] = problem.colocate_names[int(problem.colocate[i])]
        if problem.allowed[i] is not None:
            rec["devices"] = list(problem.allowed[i])
        if problem.node_meta is not None:
            rec.update(problem.node_meta[i])
        nodes.append(rec)
    edges = []
    for j in range(problem.m):
        rec = {"src": problem.ids[int(problem.src[j])], "dst": problem.ids[int(problem.dst[j])], "comm": _num(problem.comm[j])}
        if problem.edge_bytes is not None and not math.isnan(problem.edge_bytes[j]):
            rec["bytes"] = _num(problem.edge_bytes[j])
        if problem.edge_meta is not None:
            rec.update(problem.edge_meta[j])
        edges.append(rec)
    doc: dict[str, Any] = {"name": problem.name, "devices": devices}
    if problem.link is not None:
        doc["link"] = {"latency": problem.link.latency, "bandwidth": None if math.isinf(problem.link.bandwidth) else problem.link.bandwidth}
    doc["nodes"] = nodes
    doc["edges"] = edges
    return doc


def native_text(problem: Problem) -> str:
    """The native JSON text of a problem (one node or edge per line, so diffs stay readable)."""
    doc = problem_to_native(problem)
    head = {k: v for k, v in doc.items() if k not in ("nodes", "edges")}
    parts = [json.dumps(head)[:-1]]
    for key in ("nodes", "edges"):
        body = ",\n    ".join(json.dumps(rec) for rec in doc[key])
        parts.append(f',\n  "{key}": [\n    {body}\n  ]' if doc[key] else f',\n  "{key}": []')
    return "".join(parts) + "\n}\n"


def write_problem(problem: Problem, path: str | Path) -> None:
    """Write a problem as native JSON (one node or edge per line, so diffs stay readable)."""
    Path(path).write_text(native_text(problem))
