"""Operator costs shared by the importers: dtype sizes and user-supplied per-op time tables.

A time table maps names to milliseconds (for example averages from torch.profiler on the user's
GPU). A node is looked up by its own id first, then by its operator type in any of the spellings
``aten.mm``, ``aten::mm`` or ``mm``; a node found under none of them is an error naming it.
"""
from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any, Mapping

from ..problem import ProblemError

DTYPE_BYTES = {
    "float64": 8, "float32": 4, "float16": 2, "bfloat16": 2, "complex64": 8, "complex128": 16,
    "int64": 8, "int32": 4, "int16": 2, "int8": 1, "uint8": 1, "bool": 1,
    "float8_e4m3fn": 1, "float8_e5m2": 1, "uint16": 2, "uint32": 4, "uint64": 8, "string": 8,
}


def load_time_table(source: str | Path | Mapping[str, Any]) -> dict[str, float]:
    """A time table from a mapping or a JSON file of ``{name: milliseconds}``."""
    if isinstance(source, Mapping):
        doc: Any = dict(source)
        where = "time table"
    else:
        where = f"time table {source}"
        try:
            doc = json.loads(Path(source).read_text())
        except FileNotFoundError:
            raise ProblemError(f"{where}: no such file") from None
        except (OSError, json.JSONDecodeError) as exc:
            raise ProblemError(f"{where}: cannot read JSON: {exc}") from None
    if not isinstance(doc, dict):
        raise ProblemError(f"{where}: expected an object {{op or node name: milliseconds}}")
    table = {}
    for key, value in doc.items():
        if isinstance(value, bool) or not isinstance(value, (int, float)) or math.isnan(value) or value < 0:
            raise ProblemError(f"{where}: entry {key!r} must be a non-negative number of ms, got {value!r}")
        table[str(key)] = float(value)
    return table


def table_time(table: Mapping[str, float], node_id: str, op: str) -> float:
    """The time of ``node_id`` (operator ``op`` like "aten.mm") from a time table."""
    short = op.split(".", 1)[-1]
    family = op.split(".", 1)[0]
    for key in (node_id, op, f"{family}::{short}", short):
        if key in table:
            return table[key]
    raise ProblemError(f"operator {node_id!r} ({op}) has no cost in the time table (looked up {node_id!r}, {op!r}, {family}::{short!r}, {short!r})")
