"""Parsing memory sizes: plain bytes or a number with a unit (16GB = 16e9, 16GiB = 16 * 2**30)."""
from __future__ import annotations

import math
import re

_UNITS = {
    "": 1, "b": 1,
    "k": 1e3, "kb": 1e3, "m": 1e6, "mb": 1e6, "g": 1e9, "gb": 1e9, "t": 1e12, "tb": 1e12,
    "kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40,
}
_PATTERN = re.compile(r"^\s*([0-9]*\.?[0-9]+(?:[eE][+-]?[0-9]+)?)\s*([a-zA-Z]*)\s*$")


def parse_bytes(text: str | float | int) -> float:
    """'16GB' -> 16e9, '16GiB' -> 17179869184, '1.5e9' -> 1.5e9, 'inf' -> inf.

    Raises ValueError naming the text when it is not a size."""
    if isinstance(text, (int, float)) and not isinstance(text, bool):
        value = float(text)
    else:
        s = str(text).strip()
        if s.lower() in ("inf", "infinity", "unlimited"):
            return math.inf
        match = _PATTERN.match(s)
        if not match or match.group(2).lower() not in _UNITS:
            raise ValueError(f"not a memory size: {text!r} (use bytes or a unit: KB MB GB TB KiB MiB GiB TiB)")
        value = float(match.group(1)) * _UNITS[match.group(2).lower()]
    if math.isnan(value) or value < 0:
        raise ValueError(f"not a memory size: {text!r}")
    return value


def parse_memory_list(text: str) -> float | list[float]:
    """One size, or a comma-separated list of sizes (one per device)."""
    parts = [p for p in str(text).split(",") if p.strip()]
    if not parts:
        raise ValueError(f"not a memory size: {text!r}")
    values = [parse_bytes(p) for p in parts]
    return values[0] if len(values) == 1 else values


def format_bytes(value: float) -> str:
    """Human form with binary-free decimal units, e.g. 1.50 GB."""
    if math.isinf(value):
        return "unlimited"
    for unit, size in (("TB", 1e12), ("GB", 1e9), ("MB", 1e6), ("KB", 1e3)):
        if abs(value) >= size:
            return f"{value / size:.2f} {unit}"
    return f"{value:.0f} B"
