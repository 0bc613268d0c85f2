"""Problem formats: detection by content, and one entry point to load any of them.

- ``native``: the project's JSON (placement/schema/problem.schema.json).
- ``fiddle``: the msr-fiddle JSON of Tarnawski et al.
- ``pardnn``: PARDNN's .dot plus node::value side files.
- ``pipedream``: PipeDream profiler graph.txt files (placement/importers/pipedream.py).
- ``onnx``: ONNX models (placement/importers/onnx.py, needs the ``onnx`` extra).

Any file may be gzipped (recognised by its magic bytes). The importers are imported where they are
used: they build on this package (the native writer), not the other way round. Reading errors are
ProblemErrors naming the file (placement/formats/files.py).
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

from ..problem import Problem, ProblemError
from .fiddle import looks_like_fiddle, problem_from_fiddle
from .files import decode, parse_json, read_bytes, read_text
from .native import looks_like_native, problem_from_native, read_problem, write_problem
from .pardnn_text import looks_like_dot, read_pardnn

FORMATS = ("native", "fiddle", "pardnn", "pipedream", "onnx")


def detect_format(path: str | Path) -> str:
    """Name the format of ``path`` by its content (a directory is a PARDNN graph)."""
    path = Path(path)
    if path.is_dir():
        return "pardnn"
    return _detect(read_bytes(path), path)[0]


def _detect(data: bytes, path: Path) -> tuple[str, Any]:
    """(format, the parsed JSON document or None), from the file's (decompressed) bytes."""
    if _looks_like_onnx(data):
        return "onnx", None
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError:
        raise ProblemError(f"{path}: cannot read: binary, and not an ONNX model (use --format)") from None
    stripped = text.lstrip()
    if stripped.startswith("{"):
        doc = parse_json(text, path)
        if looks_like_fiddle(doc):
            return "fiddle", doc
        if looks_like_native(doc):
            return "native", doc
        raise ProblemError(f"{path}: JSON but neither the native format (needs 'nodes' and 'devices'/'edges') nor msr-fiddle (needs 'maxFPGAs')")
    if looks_like_dot(text):
        return "pardnn", None
    from ..importers.pipedream import looks_like_pipedream

    if looks_like_pipedream(text):
        return "pipedream", None
    if not stripped:
        raise ProblemError(f"{path}: the file is empty")
    raise ProblemError(f"{path}: cannot tell the format (not JSON, not a Graphviz .dot of \"a\" -> \"b\" edges, not a PipeDream profile, not ONNX); use --format")


def _looks_like_onnx(data: bytes) -> bool:
    """A serialised ONNX ModelProto opens with field 1, ir_version: tag 0x08 and a small varint."""
    return len(data) > 2 and data[0] == 0x08 and 0 < data[1] < 0x40


def _stem(path: Path) -> str:
    """graph.json -> graph; graph.json.gz -> graph."""
    return Path(path.name[:-3]).stem if path.name.endswith(".gz") else path.stem


def load_problem(path: str | Path, fmt: str | None = None) -> Problem:
    """Read a problem in any supported format (detected by content unless ``fmt`` is given).
    A file without nodes is an error here (nothing to place), though an empty Problem is valid."""
    problem = _load(Path(path), fmt)
    if problem.n == 0:
        raise ProblemError(f"{path}: nodes: the list is empty (nothing to place)")
    return problem


def _load(path: Path, fmt: str | None) -> Problem:
    if not path.exists() and not path.is_symlink():
        raise ProblemError(f"{path}: no such file or directory")
    if fmt is not None and fmt not in FORMATS:
        raise ProblemError(f"unknown format {fmt!r}; known: {', '.join(FORMATS)}")
    if path.is_dir() or fmt == "pardnn":
        return read_pardnn(path)
    doc = None
    if fmt is None:
        fmt, doc = _detect(read_bytes(path), path)
    if fmt == "pardnn":
        return read_pardnn(path)
    if fmt == "pipedream":
        from ..importers.pipedream import read_pipedream

        return read_pipedream(path)
    if fmt == "onnx":
        from ..importers.onnx import read_onnx

        return read_onnx(path)
    if doc is None:
        doc = parse_json(read_text(path), path)
    if fmt == "fiddle":
        if not looks_like_fiddle(doc):
            raise ProblemError(f"{path}: not msr-fiddle JSON (needs 'maxFPGAs' and 'nodes')")
        return problem_from_fiddle(doc, name=_stem(path))
    if not isinstance(doc, dict):
        raise ProblemError(f"{path}: not native JSON (the document must be an object)")
    return problem_from_native(doc, name=_stem(path))


__all__ = ["FORMATS", "decode", "detect_format", "load_problem", "read_bytes", "read_problem", "read_text", "write_problem"]
