"""Problem formats: detection by content, and one entry point to load any of them.

- ``native``: the project's JSON (placement/schema/problem.schema.json).
- ``fiddle``: the msr-fiddle JSON of Tarnawski et al.
- ``pardnn``: PARDNN's .dot plus node::value side files.
"""
from __future__ import annotations

from pathlib import Path

from ..problem import Problem, ProblemError
from .files import parse_json, read_text
from .fiddle import looks_like_fiddle, problem_from_fiddle
from .native import looks_like_native, problem_from_native, read_problem, write_problem
from .pardnn_text import looks_like_dot, read_pardnn

FORMATS = ("native", "fiddle", "pardnn")


def detect_format(path: str | Path) -> str:
    """Name the format of ``path`` by its content (a directory is a PARDNN graph)."""
    path = Path(path)
    if path.is_dir():
        return "pardnn"
    return _detect(read_text(path), path)[0]


def _detect(text: str, path: Path) -> tuple[str, object]:
    """(format, the parsed JSON document or None)."""
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
    if not stripped:
        raise ProblemError(f"{path}: the file is empty")
    raise ProblemError(f"{path}: cannot tell the format (not JSON, not a Graphviz .dot of \"a\" -> \"b\" edges); use --format")


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
    text = read_text(path)
    doc = None
    if fmt is None:
        fmt, doc = _detect(text, path)
    if fmt == "pardnn":
        return read_pardnn(path)
    if doc is None:
        doc = parse_json(text, path)
    if fmt == "fiddle":
        if not looks_like_fiddle(doc):
            raise ProblemError(f"{path}: not msr-fiddle JSON (needs 'maxFPGAs' and 'nodes')")
        return problem_from_fiddle(doc, name=path.stem)
    if not isinstance(doc, dict):
        raise ProblemError(f"{path}: not native JSON (the document must be an object)")
    return problem_from_native(doc, name=path.stem)


__all__ = ["FORMATS", "detect_format", "load_problem", "read_problem", "write_problem"]
