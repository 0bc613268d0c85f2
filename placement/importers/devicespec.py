"""Accelerator specs for the roofline cost model, and the link between two of them.

A spec gives what the roofline needs (peak FLOP/s of matmul-class and of other ops, memory
bandwidth), the link between two devices (bandwidth one way, latency) and a fixed per-operator
overhead (a kernel launch). The table holds datasheet figures of common accelerators; a user passes
their own as a JSON file with the same fields. Times in the problems the importers build are in
milliseconds, so :meth:`DeviceSpec.link` prices bytes in ms.
"""
from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

from ..problem import Link, ProblemError

MS = 1e3  # seconds -> milliseconds


@dataclass(frozen=True)
class DeviceSpec:
    """One accelerator. FLOP/s and bytes/s are peak rates; ``matmul_flops`` is per dtype name
    ("float32", "bfloat16", ...), with "default" used for dtypes not listed."""

    name: str
    memory: float  # bytes of device memory
    matmul_flops: dict[str, float] = field(default_factory=dict)
    vector_flops: float = 1e12
    mem_bandwidth: float = 1e12  # bytes/s
    link_bandwidth: float = 1e11  # bytes/s, one direction
    link_latency: float = 5e-6  # s
    op_overhead: float = 5e-6  # s per operator

    def peak(self, dtype: str, matmul: bool) -> float:
        if not matmul:
            return self.vector_flops
        return self.matmul_flops.get(dtype, self.matmul_flops.get("default", self.vector_flops))

    def roofline_ms(self, flops: float, nbytes: float, dtype: str, matmul: bool) -> float:
        """Time of one operator: the slower of compute and memory traffic, plus the launch."""
        return MS * (max(flops / self.peak(dtype, matmul), nbytes / self.mem_bandwidth) + self.op_overhead)

    def link(self) -> Link:
        """Transfers between two such devices, in ms: latency + bytes / bandwidth."""
        return Link(latency=self.link_latency * MS, bandwidth=self.link_bandwidth / MS)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


# Datasheet peaks (dense, no sparsity). float32 matmuls use the plain FP32 rate because PyTorch
# leaves TF32 off for matmuls by default (torch.backends.cuda.matmul.allow_tf32 = False).
SPECS: dict[str, DeviceSpec] = {
    "h100": DeviceSpec(
        name="NVIDIA H100 SXM5 80GB", memory=80e9,
        matmul_flops={"float32": 67e12, "tfloat32": 495e12, "bfloat16": 989e12, "float16": 989e12, "float8_e4m3fn": 1979e12},
        vector_flops=67e12, mem_bandwidth=3.35e12, link_bandwidth=450e9, link_latency=5e-6, op_overhead=5e-6),
    "a100": DeviceSpec(
        name="NVIDIA A100 SXM4 80GB", memory=80e9,
        matmul_flops={"float32": 19.5e12, "tfloat32": 156e12, "bfloat16": 312e12, "float16": 312e12},
        vector_flops=19.5e12, mem_bandwidth=2.039e12, link_bandwidth=300e9, link_latency=5e-6, op_overhead=5e-6),
}


def device_spec(value: str | dict[str, Any] | DeviceSpec) -> DeviceSpec:
    """A spec from a table name (h100, a100), a JSON file of the fields, a dict, or a spec."""
    if isinstance(value, DeviceSpec):
        return value
    if isinstance(value, str):
        if value.lower() in SPECS:
            return SPECS[value.lower()]
        path = Path(value)
        if not path.exists():
            raise ProblemError(f"device spec {value!r}: neither a known device ({', '.join(SPECS)}) nor a file")
        try:
            value = json.loads(path.read_text())
        except (OSError, json.JSONDecodeError) as exc:
            raise ProblemError(f"device spec {path}: cannot read JSON: {exc}") from None
    if not isinstance(value, dict):
        raise ProblemError("device spec: expected an object of DeviceSpec fields")
    known = {f.name for f in fields(DeviceSpec)}
    unknown = sorted(set(value) - known)
    if unknown:
        raise ProblemError(f"device spec: unknown field {unknown[0]!r} (known: {', '.join(sorted(known))})")
    for key in ("name", "memory"):
        if key not in value:
            raise ProblemError(f"device spec: missing field {key!r}")
    for key in known - {"name", "matmul_flops"}:
        if key in value:
            x = value[key]
            if isinstance(x, bool) or not isinstance(x, (int, float)) or math.isnan(x) or x < 0 or (x == 0 and key not in ("link_latency", "op_overhead")):
                raise ProblemError(f"device spec field {key!r}: expected a positive number, got {x!r}")
    mm = value.get("matmul_flops", {})
    if not isinstance(mm, dict) or any(isinstance(v, bool) or not isinstance(v, (int, float)) or v <= 0 for v in mm.values()):
        raise ProblemError(f"device spec field 'matmul_flops': expected {{dtype: positive FLOP/s}}, got {mm!r}")
    return DeviceSpec(**{k: (float(v) if k not in ("name", "matmul_flops") else v) for k, v in value.items()})
