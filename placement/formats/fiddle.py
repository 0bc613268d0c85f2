"""Reader for the msr-fiddle JSON of Tarnawski et al. (NeurIPS 2020).

Mapping (../shared/workloads/msr-fiddle/README.md): fpgaLatency -> time, size -> param_bytes (their
memory model is static: size is everything the node keeps on an accelerator, so out_bytes = 0),
edge cost -> comm, edge size -> bytes, colorClass -> colocate, maxFPGAs -> device count,
maxSizePerFPGA -> memory. Kept for the pipelined/latency objectives: node_attrs ``cpu_latency``,
``supported`` (supportedOnFpga), ``is_backward`` (isBackwardNode) and attrs ``max_cpus``.
In the makespan model every node may run on any device (unsupported nodes keep their fpgaLatency).
"""
from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from ..problem import Problem, ProblemError, make_problem


def looks_like_fiddle(doc: Any) -> bool:
    return isinstance(doc, dict) and "maxFPGAs" in doc and "nodes" in doc


def _field(rec: dict[str, Any], key: str, where: str) -> Any:
    if key not in rec:
        raise ProblemError(f"{where}: missing field {key!r}")
    return rec[key]


def _number(value: Any, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value < math.inf:
        raise ProblemError(f"{where}: expected a finite non-negative number, got {value!r}")
    return float(value)


def _flag(value: Any, where: str) -> bool:
    """true/false, or 1/0 as some msr-fiddle graphs write them."""
    if value not in (True, False) or not isinstance(value, (bool, int)):
        raise ProblemError(f"{where}: expected true or false (or 1 or 0), got {value!r}")
    return bool(value)


def problem_from_fiddle(doc: dict[str, Any], name: str = "fiddle") -> Problem:
    """Build a Problem from a parsed msr-fiddle document."""
    if not isinstance(doc.get("nodes"), list) or not isinstance(doc.get("edges", []), list):
        raise ProblemError("msr-fiddle: 'nodes' and 'edges' must be lists")
    nodes = []
    cpu, supported, backward = [], [], []
    for pos, rec in enumerate(doc["nodes"]):
        if not isinstance(rec, dict):
            raise ProblemError(f"nodes[{pos}]: expected an object")
        nid = _field(rec, "id", f"nodes[{pos}]")
        where = f"node {nid!r}"
        node = {
            "id": nid,
            "name": rec.get("name", str(nid)),
            "time": _field(rec, "fpgaLatency", where),
            "out_bytes": 0.0,
            "param_bytes": _field(rec, "size", where),
        }
        if rec.get("colorClass") is not None:
            node["colocate"] = rec["colorClass"]
            if isinstance(node["colocate"], bool) or not isinstance(node["colocate"], (str, int)):
                raise ProblemError(f"{where} field 'colorClass': must be a string or an integer, got {rec['colorClass']!r}")
        nodes.append(node)
        cpu.append(_number(rec.get("cpuLatency", 0.0), f"{where} field 'cpuLatency'"))
        supported.append(_flag(rec.get("supportedOnFpga", True), f"{where} field 'supportedOnFpga'"))
        backward.append(_flag(rec.get("isBackwardNode", False), f"{where} field 'isBackwardNode'"))
    edges = []
    for pos, rec in enumerate(doc.get("edges", [])):
        if not isinstance(rec, dict):
            raise ProblemError(f"edges[{pos}]: expected an object")
        edge = {"src": _field(rec, "sourceId", f"edges[{pos}]"), "dst": _field(rec, "destId", f"edges[{pos}]"),
                "comm": _field(rec, "cost", f"edges[{pos}]")}
        if "size" in rec:
            edge["bytes"] = rec["size"]
        edges.append(edge)
    k = doc["maxFPGAs"]
    if isinstance(k, bool) or not isinstance(k, int) or k < 1:
        raise ProblemError(f"msr-fiddle: maxFPGAs must be a positive integer, got {k!r}")
    memory = _field(doc, "maxSizePerFPGA", "msr-fiddle")
    if isinstance(memory, bool) or not isinstance(memory, (int, float)) or not memory >= 0:
        raise ProblemError(f"msr-fiddle: maxSizePerFPGA must be a number of bytes, got {memory!r}")
    cpus = doc.get("maxCPUs", 0)
    if isinstance(cpus, bool) or not isinstance(cpus, int) or cpus < 0:
        raise ProblemError(f"msr-fiddle: maxCPUs must be a non-negative integer, got {cpus!r}")
    return make_problem(
        nodes, edges, devices=k, memory=float(memory), name=name,
        node_attrs={"cpu_latency": cpu, "supported": supported, "is_backward": backward},
        attrs={"max_cpus": cpus, "format": "fiddle"},
    )


def read_fiddle(path: str | Path) -> Problem:
    path = Path(path)
    with open(path) as fh:
        doc = json.load(fh)
    return problem_from_fiddle(doc, name=path.stem)
