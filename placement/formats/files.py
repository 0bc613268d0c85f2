"""Reading input files: the bytes or text of a file, decompressed when it is gzipped.

Every reader of problem files goes through here, so ``graph.json.gz`` or ``model.onnx.gz`` load
like the plain files (gzip is recognised by its magic bytes, not its name).
"""
from __future__ import annotations

import gzip
import zlib
from pathlib import Path

from ..problem import ProblemError

GZIP_MAGIC = b"\x1f\x8b"


def read_bytes(path: str | Path) -> bytes:
    """The file's bytes, decompressed when it is gzipped."""
    path = Path(path)
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise ProblemError(f"{path}: no such file") from None
    except OSError as exc:
        raise ProblemError(f"{path}: cannot read: {exc}") from None
    if data[:2] == GZIP_MAGIC:
        try:
            data = gzip.decompress(data)
        except (OSError, EOFError, zlib.error) as exc:
            raise ProblemError(f"{path}: corrupt gzip data: {exc}") from None
    return data


def read_text(path: str | Path) -> str:
    """The file's text (gzipped or not)."""
    try:
        return read_bytes(path).decode()
    except UnicodeDecodeError as exc:
        raise ProblemError(f"{path}: cannot read: {exc}") from None
