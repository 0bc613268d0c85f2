"""Problem formats: detection by content, and one entry point to load any of them.

- ``native``: the project's JSON (placement/schema/problem.schema.json).
- ``fiddle``: the msr-fiddle JSON of Tarnawski et al.
- ``pardnn``: PARDNN's .dot plus node::value side files.
"""
from __future__ import annotations

import json
from pathlib import Path

from ..problem import Problem, ProblemError
from .fiddle import looks_like_fiddle, problem_from_fiddle
from .native import looks_like_native, problem_from_native, read_problem, write_problem
from .pardnn_text import looks_like_dot, read_pardnn

FORMATS = ("native", "fiddle", "pardnn")


def detect_format(path: str | Path) -> str:
    """Name the format of ``path`` by its content (a directory is a PARDNN graph)."""
    path = Path(path)
    if path.is_dir():
        return "pardnn"
    text = _read_text(path)
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
    raise ProblemError(f"{path}: cannot tell the format (not JSON, not a Graphviz .dot of \"a\" -> \"b\" edges); use --format")


def _read_text(path: Path) -> str:
    try:
        return path.read_text()
    except FileNotFoundError:
        raise ProblemError(f"{path}: no such file") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ProblemError(f"{path}: cannot read: {exc}") from None


def load_problem(path: str | Path, fmt: str | None = None) -> Problem:
    """Read a problem in any supported format (detected by content unless ``fmt`` is given)."""
    path = Path(path)
    if not path.exists():
        raise ProblemError(f"{path}: no such file or directory")
    fmt = fmt or detect_format(path)
    if fmt == "pardnn":
        return read_pardnn(path)
    if fmt not in FORMATS:
        raise ProblemError(f"unknown format {fmt!r}; known: {', '.join(FORMATS)}")
    text = _read_text(path)
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ProblemError(f"{path}: invalid JSON at line {exc.lineno} column {exc.colno}: {exc.msg}") from None
    if fmt == "fiddle":
        if not looks_like_fiddle(doc):
            raise ProblemError(f"{path}: not msr-fiddle JSON (needs 'maxFPGAs' and 'nodes')")
        return problem_from_fiddle(doc, name=path.stem)
    return problem_from_native(doc, name=path.stem)


__all__ = ["FORMATS", "detect_format", "load_problem", "read_problem", "write_problem"]
