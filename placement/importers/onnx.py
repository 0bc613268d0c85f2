"""ONNX in: an ONNX model's graph as a placement problem (needs the ``onnx`` extra).

    python -m placement.importers.onnx model.onnx -o graph.json [--cost roofline|TIMES.json]
        [--device-spec h100|a100|FILE] [--dim batch=8 ...]

``solve model.onnx`` reads it directly (detected by content, roofline on the H100). The model (inference, as ONNX
graphs are) becomes:

- one node per ONNX operator (``op`` = ``onnx.<OpType>``), its input and output shapes and dtypes
  from ONNX shape inference; a value without a full static shape is an error naming it (pass
  ``dims={"batch": 8}`` to fix symbolic dimensions);
- initializers (weights) and ``Constant`` outputs are persistent bytes: those read by one operator
  are that operator's ``param_bytes``; those read by several become a node of their own
  (``init:<name>``) with an edge to each reader, whose output they are, held at home until the
  step's end and copied to the devices of readers elsewhere (build.hold_until_end);
- each graph input is a node (``input:<name>``) whose output is the input tensor;
- edges carry the bytes of the tensor consumed, with its output and input slots;
- times in ms from the roofline on a device spec (FLOPs of MatMul/Gemm/Conv, one per element
  otherwise, bytes read and written) or from a time table.
"""
from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path
from typing import Any, Mapping, Sequence

from ..formats.files import read_bytes
from ..problem import Problem, ProblemError
from .build import GraphBuilder, check_output_path, hold_until_end, write_native
from .costs import DTYPE_BYTES, load_time_table, table_time
from .devicespec import DeviceSpec, device_spec

_ONNX_DTYPES = {
    "FLOAT": "float32", "DOUBLE": "float64", "FLOAT16": "float16", "BFLOAT16": "bfloat16",
    "INT64": "int64", "INT32": "int32", "INT16": "int16", "INT8": "int8", "UINT8": "uint8",
    "UINT16": "uint16", "UINT32": "uint32", "UINT64": "uint64", "BOOL": "bool", "STRING": "string",
    "COMPLEX64": "complex64", "COMPLEX128": "complex128", "FLOAT8E4M3FN": "float8_e4m3fn", "FLOAT8E5M2": "float8_e5m2",
}
MATMUL_OPS = {"MatMul", "Gemm", "Conv", "ConvTranspose", "MatMulInteger", "QLinearMatMul", "QLinearConv", "Einsum"}


def _import_onnx():
    try:
        import onnx
    except ImportError:
        raise ProblemError("reading ONNX needs onnx: pip install '.[onnx]'") from None
    return onnx


def _tensor(type_proto: Any, value: str, where: str, dims: Mapping[str, int]) -> dict[str, Any]:
    onnx = _import_onnx()
    if not type_proto.HasField("tensor_type"):
        raise ProblemError(f"ONNX value {value!r} ({where}) is not a tensor")
    tt = type_proto.tensor_type
    dtype = _ONNX_DTYPES.get(onnx.TensorProto.DataType.Name(tt.elem_type), onnx.TensorProto.DataType.Name(tt.elem_type).lower())
    if not tt.HasField("shape"):
        raise ProblemError(f"ONNX value {value!r} ({where}) has no shape after shape inference")
    shape = []
    for i, d in enumerate(tt.shape.dim):
        if d.HasField("dim_value"):
            shape.append(int(d.dim_value))
        elif d.HasField("dim_param") and d.dim_param in dims:
            shape.append(int(dims[d.dim_param]))
        else:
            sym = d.dim_param or "unknown"
            raise ProblemError(f"ONNX value {value!r} ({where}) has a dimension {i} without a static size ({sym!r}); "
                               f"export with static shapes or give dims={{{sym!r}: N}}")
    return {"shape": shape, "dtype": dtype}


def _bytes(t: dict[str, Any]) -> float:
    return float(math.prod(t["shape"]) * DTYPE_BYTES.get(t["dtype"], 4))


def _init_desc(init: Any) -> dict[str, Any]:
    onnx = _import_onnx()
    return {"shape": [int(d) for d in init.dims], "dtype": _ONNX_DTYPES.get(onnx.TensorProto.DataType.Name(init.data_type), "float32")}


def _flops(op: str, ins: list[dict], outs: list[dict], attrs: dict[str, Any]) -> tuple[float, bool]:
    """FLOPs of one operator (2 per multiply-add for the matmul class) and whether it is one."""
    out_elems = sum(math.prod(t["shape"]) for t in outs)
    if op in ("MatMul", "Gemm") and len(ins) >= 2 and ins[0]["shape"]:
        a = ins[0]["shape"]
        k = a[0] if (op == "Gemm" and attrs.get("transA")) else a[-1]
        return 2.0 * math.prod(outs[0]["shape"]) * k, True
    if op in ("Conv", "ConvTranspose") and len(ins) >= 2:
        w = ins[1]["shape"]  # (out_ch, in_ch / group, *kernel)
        per_out = math.prod(w[1:]) if op == "Conv" else w[0] // max(1, attrs.get("group", 1)) * math.prod(w[2:])
        return 2.0 * math.prod(outs[0]["shape"]) * per_out, True
    return float(max([out_elems] + [math.prod(t["shape"]) for t in ins])), op in MATMUL_OPS


def problem_from_onnx(model: Any, *, cost: str | Mapping[str, float] = "roofline", spec: str | DeviceSpec = "h100",
                      dims: Mapping[str, int] | None = None, name: str = "onnx", devices: int = 1) -> Problem:
    """The placement problem of an ONNX ``ModelProto`` (see the module docstring)."""
    onnx = _import_onnx()
    from onnx import helper, shape_inference

    dims = dict(dims or {})
    dev = device_spec(spec)
    table = None if cost == "roofline" else load_time_table(cost)
    try:
        inferred = shape_inference.infer_shapes(model, data_prop=True)
    except Exception as exc:  # onnx raises several types for bad models
        raise ProblemError(f"ONNX shape inference failed: {exc}") from None
    g = inferred.graph
    types = {v.name: v.type for v in list(g.input) + list(g.value_info) + list(g.output)}
    inits = {t.name: t for t in g.initializer}
    consts: dict[str, dict[str, Any]] = {}
    readers: dict[str, int] = {}
    for node in g.node:
        if node.op_type in ("If", "Loop", "Scan"):
            raise ProblemError(f"ONNX node {node.name or node.op_type!r} ({node.op_type}): control flow is not supported")
        for x in node.input:
            if x:
                readers[x] = readers.get(x, 0) + 1
    b = GraphBuilder()
    producer: dict[str, tuple[str, int]] = {}
    shared: dict[str, float] = {}
    for v in g.input:
        if v.name in inits:
            continue
        t = _tensor(v.type, v.name, "graph input", dims)
        nid = f"input:{v.name}"
        b.node(nid, out_bytes=_bytes(t), op="placeholder.input", outputs=[t])
        producer[v.name] = (nid, 0)
    for name_, init in inits.items():
        t = _init_desc(init)
        consts[name_] = t
        if readers.get(name_, 0) > 1:
            nid = f"init:{name_}"
            b.node(nid, param_bytes=_bytes(t), op="placeholder.initializer", outputs=[t])
            producer[name_] = (nid, 0)
            shared[name_] = _bytes(t)
    used: set[str] = set()
    for pos, node in enumerate(g.node):
        base = node.name or f"{node.op_type}_{pos}"
        nid = base if base not in b and base not in used else f"{base}_{pos}"
        used.add(nid)
        where = f"output of node {nid!r}, {node.op_type}"
        if node.op_type == "Constant":
            t = _tensor(types[node.output[0]], node.output[0], where, dims) if node.output[0] in types else _constant_desc(node)
            consts[node.output[0]] = t
            if readers.get(node.output[0], 0) > 1:
                b.node(nid, param_bytes=_bytes(t), op="onnx.Constant", outputs=[t])
                producer[node.output[0]] = (nid, 0)
            continue
        attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
        ins: list[dict[str, Any]] = []
        for x in node.input:
            if not x:
                continue
            if x in consts:
                ins.append(consts[x])
            elif x in types:
                ins.append(_tensor(types[x], x, f"input of node {nid!r}, {node.op_type}", dims))
            else:
                raise ProblemError(f"ONNX value {x!r} (input of node {nid!r}, {node.op_type}) has no shape after shape inference")
        outs = []
        for o in node.output:
            if not o:
                continue
            if o not in types:
                raise ProblemError(f"ONNX value {o!r} ({where}) has no shape after shape inference")
            outs.append(_tensor(types[o], o, where, dims))
        own_params = sum(_bytes(consts[x]) for x in node.input if x in consts and x not in producer)
        if table is not None:
            time_ms = table_time(table, nid, f"onnx.{node.op_type}")
        else:
            flops, matmul = _flops(node.op_type, ins, outs, attrs)
            dtype = next((t["dtype"] for t in ins + outs if t["dtype"].startswith(("float", "bfloat"))), "float32")
            time_ms = dev.roofline_ms(flops, sum(map(_bytes, ins)) + sum(map(_bytes, outs)), dtype, matmul)
        b.node(nid, time=time_ms, out_bytes=sum(map(_bytes, outs)), param_bytes=own_params,
               op=f"onnx.{node.op_type}", inputs=ins, outputs=outs)
        slot = 0
        for x in node.input:
            if not x:
                continue
            if x in producer:
                src, k = producer[x]
                b.use(src, nid, _bytes(ins[slot]), k, slot)
            elif x not in consts:
                raise ProblemError(f"ONNX node {nid!r} ({node.op_type}) reads {x!r}, which nothing produces")
            slot += 1
        for k, o in enumerate(x for x in node.output if x):
            producer[o] = (nid, k)
    if not b.nodes:
        raise ProblemError("ONNX model has no operators")
    hold_until_end(b, [rec["id"] for rec in b.nodes if rec.get("op") in ("placeholder.initializer", "onnx.Constant")])
    return b.problem(name=name, link=dev.link(), memory=dev.memory, devices=devices,
                     attrs={"format": "onnx", "time_unit": "ms (time table)" if table is not None else f"ms (roofline on {dev.name})"})


def _constant_desc(node: Any) -> dict[str, Any]:
    from onnx import numpy_helper

    for a in node.attribute:
        if a.name == "value":
            arr = numpy_helper.to_array(a.t)
            return {"shape": list(arr.shape), "dtype": str(arr.dtype)}
    return {"shape": [], "dtype": "float32"}


def read_onnx(path: str | Path, *, cost: str | Mapping[str, float] = "roofline", spec: str | DeviceSpec = "h100",
              dims: Mapping[str, int] | None = None) -> Problem:
    """Load an ONNX file (gzipped or not) and build its problem."""
    onnx = _import_onnx()
    path = Path(path)
    data = read_bytes(path)
    try:
        model = onnx.load_model_from_string(data)
    except Exception as exc:
        raise ProblemError(f"{path}: not a readable ONNX model: {exc}") from None
    if not model.HasField("graph"):
        raise ProblemError(f"{path}: ONNX model without a graph")
    name = Path(path.name[:-3]).stem if path.name.endswith(".gz") else path.stem
    return problem_from_onnx(model, cost=cost, spec=spec, dims=dims, name=name)


def _dims(pairs: Sequence[str]) -> dict[str, int]:
    dims = {}
    for pair in pairs:
        name, _, value = pair.partition("=")
        if not name or not value.isdigit():
            raise ProblemError(f"--dim {pair!r}: expected NAME=SIZE, e.g. batch=8")
        dims[name] = int(value)
    return dims


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m placement.importers.onnx",
                                description="Convert an ONNX model into a native placement problem (shapes from ONNX shape inference).")
    p.add_argument("model", help="ONNX model (.onnx; gzipped accepted)")
    p.add_argument("-o", "--output", required=True, metavar="FILE", help="native JSON to write (.json.gz: gzipped)")
    p.add_argument("--cost", default="roofline", metavar="roofline|FILE", help="roofline (default) or a JSON time table {node or op name: ms}")
    p.add_argument("--device-spec", default="h100", metavar="h100|a100|FILE", help="accelerator for the roofline, device memory and links (default h100)")
    p.add_argument("--dim", action="append", default=[], metavar="NAME=SIZE", help="size of a symbolic dimension (repeatable)")
    args = p.parse_args(argv)
    try:
        out = check_output_path(args.output)
        prob = read_onnx(args.model, cost=args.cost, spec=args.device_spec, dims=_dims(args.dim))
        write_native(prob, out)
    except ProblemError as exc:
        print(f"placement.importers.onnx: error: {exc}", file=sys.stderr)
        return 2
    print(f"{prob.describe()}; times in {prob.attrs['time_unit']}; wrote {out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
