"""Reading input files as a careful Unix tool does: one clear ProblemError, never a traceback.

Every reader of problem files goes through here. Only regular files are read (a FIFO would block,
a directory or device is a mistake); gzipped files are decompressed (recognised by their magic
bytes, not their name, so ``graph.json.gz`` or ``model.onnx.gz`` load like the plain files); text
is UTF-8 with an optional byte order mark; JSON nested deeper than Python's parser can follow is
refused by name rather than by RecursionError.
"""
from __future__ import annotations

import gzip
import json
import os
import stat
import zlib
from pathlib import Path
from typing import Any

from ..problem import ProblemError

GZIP_MAGIC = b"\x1f\x8b"


def read_bytes(path: str | Path) -> bytes:
    """The bytes of the regular file ``path``, decompressed when it is gzipped."""
    path = Path(path)
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        raise ProblemError(f"{path}: no such file") from None
    except OSError as exc:
        raise ProblemError(f"{path}: cannot read: {exc.strerror or exc}") from None
    if stat.S_ISDIR(mode):
        raise ProblemError(f"{path}: is a directory, not a regular file")
    if not stat.S_ISREG(mode):
        raise ProblemError(f"{path}: not a regular file")
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise ProblemError(f"{path}: cannot read: {exc.strerror or exc}") from None
    if data[:2] == GZIP_MAGIC:
        try:
            data = gzip.decompress(data)
        except (OSError, EOFError, zlib.error) as exc:
            raise ProblemError(f"{path}: corrupt gzip data: {exc}") from None
    return data


def decode(data: bytes, path: str | Path) -> str:
    """UTF-8 text (a leading byte order mark is dropped)."""
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise ProblemError(f"{path}: cannot read: not UTF-8 text (byte {exc.start})") from None


def read_text(path: str | Path) -> str:
    """The text of the regular file ``path`` (gzipped or not)."""
    return decode(read_bytes(path), path)


def parse_json(text: str, path: str | Path) -> Any:
    """Parse JSON text, naming the file and position of the first fault."""
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise ProblemError(f"{path}: invalid JSON at line {exc.lineno} column {exc.colno}: {exc.msg}") from None
    except RecursionError:
        raise ProblemError(f"{path}: JSON nested too deeply to read") from None
