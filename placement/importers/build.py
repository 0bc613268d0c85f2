"""Nodes and edges with tensor identity, assembled into a validated :class:`Problem`.

Importers add operators and the tensors flowing between them; one producer feeding one consumer
several tensors becomes one edge whose bytes are the sum over the distinct tensors (a tensor used
at several input positions is sent once), with every ``(src_output, dst_inputs)`` pair kept in the
edge's ``tensors`` record (placement/problem.py, ``edge_meta``).
"""
from __future__ import annotations

import gzip
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .. import output
from ..formats.native import native_text
from ..problem import Link, Problem, ProblemError, make_problem


@dataclass
class _Edge:
    tensors: dict[int | None, list[int]] = field(default_factory=dict)  # src_output -> dst_inputs
    nbytes: dict[int | None, float] = field(default_factory=dict)  # src_output -> bytes
    free: bool = False  # an ordering signal that moves no data: no transfer time, even between devices


class GraphBuilder:
    """Collects node records (native-format fields) and tensor uses, then builds the Problem."""

    def __init__(self) -> None:
        self.nodes: list[dict[str, Any]] = []
        self._index: dict[str, int] = {}
        self._edges: dict[tuple[str, str], _Edge] = {}
        self._out: dict[str, dict[str, None]] = {}  # src -> its consumers, in insertion order

    def __contains__(self, node_id: str) -> bool:
        return node_id in self._index

    def node(self, node_id: str, **fields_: Any) -> dict[str, Any]:
        """Add a node; fields are the native JSON node fields (time, out_bytes, param_bytes, ...)."""
        rec = {"id": node_id, "time": 0.0, "out_bytes": 0.0, "param_bytes": 0.0}
        rec.update({k: v for k, v in fields_.items() if v is not None})
        self._index[node_id] = len(self.nodes)
        self.nodes.append(rec)
        return rec

    def record(self, node_id: str) -> dict[str, Any]:
        return self.nodes[self._index[node_id]]

    def use(self, src: str, dst: str, nbytes: float, src_output: int | None = None, dst_input: int | None = None,
            free: bool = False) -> None:
        """``dst`` reads output ``src_output`` of ``src`` (``nbytes`` bytes) at input ``dst_input``;
        without either, ``dst`` only has to wait for ``src``. ``free``: the edge costs no transfer
        time (not even the link's latency) wherever the two run."""
        if src == dst:
            return
        e = self._edges.get((src, dst))
        if e is None:
            e = self._edges[(src, dst)] = _Edge()
            self._out.setdefault(src, {})[dst] = None
        slots = e.tensors.setdefault(src_output, [])
        if dst_input is not None and dst_input not in slots:
            slots.append(dst_input)
        e.nbytes[src_output] = max(e.nbytes.get(src_output, 0.0), float(nbytes))
        e.free = e.free or free

    def signal(self, src: str, dst: str) -> None:
        """``dst`` waits for ``src`` and nothing travels: the edge costs no transfer time (not even
        the link's latency) wherever the two run."""
        self.use(src, dst, 0.0, free=True)

    def has_edge(self, src: str, dst: str) -> bool:
        """Whether ``dst`` already reads from, or waits for, ``src``."""
        return (src, dst) in self._edges

    def consumers(self, src: str, src_output: int | None) -> list[str]:
        """The nodes reading output ``src_output`` of ``src``."""
        return [dst for dst in self._out.get(src, ()) if src_output in self._edges[(src, dst)].tensors]

    def successors(self, src: str) -> list[str]:
        """Every node reading from, or waiting for, ``src``."""
        return list(self._out.get(src, ()))

    def has_successor(self, src: str) -> bool:
        """Whether any node reads from, or waits for, ``src``."""
        return bool(self._out.get(src))

    def edges(self) -> list[tuple[str, str]]:
        """Every (src, dst) pair with an edge so far."""
        return list(self._edges)

    def reroute(self, src: str, src_output: int | None, new_src: str) -> None:
        """Every read of output ``src_output`` of ``src`` now reads output 0 of ``new_src``."""
        for dst in self.consumers(src, src_output):
            e = self._edges[(src, dst)]
            slots, nbytes = e.tensors.pop(src_output), e.nbytes.pop(src_output)
            if not e.tensors:
                del self._edges[(src, dst)]
                del self._out[src][dst]
            for j in slots or [None]:
                self.use(new_src, dst, nbytes, 0, j)

    def edge_records(self) -> list[dict[str, Any]]:
        out = []
        for (src, dst), e in self._edges.items():
            rec: dict[str, Any] = {"src": src, "dst": dst, "bytes": sum(e.nbytes.values())}
            if e.free:
                rec["comm"] = 0.0
            parts = [({"src_output": k} if k is not None else {}) | ({"dst_inputs": sorted(v)} if v else {})
                     for k, v in e.tensors.items() if k is not None or v]  # (None, []): an ordering-only use
            if parts:
                rec.update(parts[0])
            if len(parts) > 1:
                rec["tensors"] = parts
            out.append(rec)
        return out

    def problem(self, *, name: str, link: Link, memory: float, devices: int = 1, attrs: dict[str, Any] | None = None) -> Problem:
        return make_problem(self.nodes, self.edge_records(), devices=devices, memory=memory, link=link, name=name, attrs=attrs)


STEP_END = "step:end"  # the zero-time node after every sink (:func:`hold_until_end`)


def hold_until_end(b: GraphBuilder, weights: list[str]) -> list[str]:
    """Make each of ``weights`` (nodes whose ``param_bytes`` are a tensor nothing updates: a frozen
    parameter, a buffer, an inference weight, a shared ONNX initializer) its node's output instead,
    held at home until a zero-time ``<weight>:kept`` node colocated with it that runs after
    ``step:end``, a zero-time node after every sink (those edges cost no transfer time). So a
    device that reads it elsewhere holds a copy from its arrival to its last reader there, as for
    any tensor (docs/model.md), while its home holds it for the whole step, as before. Returns the
    nodes added (none when no weight has a reader).

    Why: as persistent bytes such a weight was charged at home only; in a LoRA step
    (bench/real_models7.py) devices read 0.5-4.7 MB of frozen base weights held elsewhere, charged
    nowhere, against 8 MB capacities, and the answer said it fitted (session 40)."""
    read = [w for w in weights if b.has_successor(w) and b.record(w).get("param_bytes")]
    if not read:
        return []
    sinks = [rec["id"] for rec in b.nodes if not b.has_successor(rec["id"])]
    b.node(STEP_END, op="order")
    for s in sinks:
        b.signal(s, STEP_END)
    added = [STEP_END]
    for w in read:
        rec = b.record(w)
        rec["out_bytes"], rec["param_bytes"] = rec["param_bytes"], 0.0
        added.append(keep_until(b, w, STEP_END))
    return added


def keep_until(b: GraphBuilder, node: str, end: str, group: str | None = None) -> str:
    """Hold ``node``'s output until ``end`` has run: a zero-time ``<node>:kept`` node reads it (no
    bytes, no transfer time) and waits for ``end`` (a signal). The ``<node>:kept`` node joins
    colocation group ``group`` (the device that keeps the tensor, docs/model.md: a copy lives where
    it is read), by default ``node``'s own. Returns its id."""
    kept = f"{node}:kept"
    b.node(kept, colocate=group if group is not None else b.record(node).setdefault("colocate", node), op="order")
    b.use(node, kept, 0.0, 0, free=group is not None)  # held on another device, it costs no transfer time
    b.signal(end, kept)
    return kept


def check_output_path(path: str | Path) -> Path:
    """Fail before any work when the output cannot be written there."""
    path = Path(path)
    if not path.parent.is_dir():
        raise ProblemError(f"-o: directory {str(path.parent)!r} does not exist")
    if path.is_dir():
        raise ProblemError(f"-o: {str(path)!r} is a directory")
    return path


def write_atomic(path: str | Path, data: bytes) -> None:
    """Write an importer's output as ``solve`` writes its own (placement/output.py: atomic, the
    mode a plain open() gives, devices written in place); a failure is a ProblemError, which the
    importers' commands print as one line."""
    try:
        output.write_atomic(path, data)
    except output.OutputError as exc:
        raise ProblemError(str(exc)) from None


def write_native(problem: Problem, path: str | Path) -> None:
    """Write the native JSON atomically (gzipped when the name ends in .gz)."""
    data = native_text(problem).encode()
    write_atomic(path, gzip.compress(data, mtime=0) if Path(path).suffix == ".gz" else data)
