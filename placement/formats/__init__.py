"""Problem formats: detection by content, and one entry point to load any of them.

- ``native``: the project's JSON (placement/schema/problem.schema.json).
- ``fiddle``: the msr-fiddle JSON of Tarnawski et al.
- ``pardnn``: PARDNN's .dot plus node::value side files.
- ``pipedream``: PipeDream profiler graph.txt files (placement/importers/pipedream.py).
- ``onnx``: ONNX models (placement/importers/onnx.py, needs the ``onnx`` extra).

Any file may be gzipped (recognised by its magic bytes). The importers are imported where they are
used: they build on this package (the native writer), not the other way round.
"""
from __future__ import annotations

import json
from pathlib import Path

from ..problem import Problem, ProblemError
from .fiddle import looks_like_fiddle, problem_from_fiddle
from .files import read_bytes, read_text
from .native import looks_like_native, problem_from_native, read_problem, write_problem
from .pardnn_text import looks_like_dot, read_pardnn

FORMATS = ("native", "fiddle", "pardnn", "pipedream", "onnx")


def detect_format(path: str | Path) -> str:
    """Name the format of ``path`` by its content (a directory is a PARDNN graph)."""
    path = Path(path)
    if path.is_dir():
        return "pardnn"
    data = read_bytes(path)
    if _looks_like_onnx(data):
        return "onnx"
    try:
        text = data.decode()
    except UnicodeDecodeError:
        raise ProblemError(f"{path}: cannot read: binary, and not an ONNX model (use --format)") from None
    stripped = text.lstrip()
    if stripped.startswith("{"):
        try:
            doc = json.loads(text)
        except json.JSONDecodeError as exc:
            raise ProblemError(f"{path}: invalid JSON at line {exc.lineno} column {exc.colno}: {exc.msg}") from None
        if looks_like_fiddle(doc):
            return "fiddle"
        if looks_like_native(doc):
            return "native"
        raise ProblemError(f"{path}: JSON but neither the native format (needs 'nodes' and 'devices'/'edges') nor msr-fiddle (needs 'maxFPGAs')")
    if looks_like_dot(text):
        return "pardnn"
    from ..importers.pipedream import looks_like_pipedream

    if looks_like_pipedream(text):
        return "pipedream"
    raise ProblemError(f"{path}: cannot tell the format (not JSON, not a Graphviz .dot of \"a\" -> \"b\" edges, not a PipeDream profile, not ONNX); use --format")


def _looks_like_onnx(data: bytes) -> bool:
    """A serialised ONNX ModelProto opens with field 1, ir_version: tag 0x08 and a small varint."""
    return len(data) > 2 and data[0] == 0x08 and 0 < data[1] < 0x40


def _stem(path: Path) -> str:
    """graph.json -> graph; graph.json.gz -> graph."""
    return Path(path.name[:-3]).stem if path.name.endswith(".gz") else path.stem


def load_problem(path: str | Path, fmt: str | None = None) -> Problem:
    """Read a problem in any supported format (detected by content unless ``fmt`` is given)."""
    path = Path(path)
    if not path.exists():
        raise ProblemError(f"{path}: no such file or directory")
    fmt = fmt or detect_format(path)
    if fmt == "pardnn":
        return read_pardnn(path)
    if fmt == "pipedream":
        from ..importers.pipedream import read_pipedream

        return read_pipedream(path)
    if fmt == "onnx":
        from ..importers.onnx import read_onnx

        return read_onnx(path)
    if fmt not in FORMATS:
        raise ProblemError(f"unknown format {fmt!r}; known: {', '.join(FORMATS)}")
    text = read_text(path)
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ProblemError(f"{path}: invalid JSON at line {exc.lineno} column {exc.colno}: {exc.msg}") from None
    if fmt == "fiddle":
        if not looks_like_fiddle(doc):
            raise ProblemError(f"{path}: not msr-fiddle JSON (needs 'maxFPGAs' and 'nodes')")
        return problem_from_fiddle(doc, name=_stem(path))
    return problem_from_native(doc, name=_stem(path))


__all__ = ["FORMATS", "detect_format", "load_problem", "read_bytes", "read_problem", "read_text", "write_problem"]
