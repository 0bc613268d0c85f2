"""PyTorch in, one node per layer: a module's layer graph as a PipeDream-style profile.

    python -m placement.importers.layers MODULE:FACTORY -o graph.txt [--device-spec h100]

The ATen importer (placement/importers/torch.py) gives one node per operator; papers and
PipeDream's profiler work with one node per layer. This module traces ``model`` with
``torch.fx.symbolic_trace`` (every leaf module call and every function or method call between
them, such as a residual ``+`` or a ``torch.cat``, is one layer), runs each layer once on meta
tensors under torch's FLOP counter, forward and backward, and prices both with the roofline of a
device spec (docs/importers.md). The result is written in PipeDream's ``graph.txt`` format, so
:mod:`placement.importers.pipedream` turns it into the training graph (forward layer, backward
layer colocated with it, activations and gradients as tensors, weights x4), the same model the
published PipeDream profiles get. Nothing is run on real data: times are the roofline's, sizes
are exact (float32).
"""
from __future__ import annotations

import argparse
import sys
from typing import Any, Sequence

from ..problem import Problem, ProblemError
from .build import check_output_path, write_atomic
from .devicespec import DeviceSpec, device_spec
from .pipedream import problem_from_pipedream


def _tensors(x: Any) -> list[Any]:
    import torch

    if isinstance(x, torch.Tensor):
        return [x]
    if isinstance(x, (list, tuple)):
        return [t for v in x for t in _tensors(v)]
    if isinstance(x, dict):
        return [t for v in x.values() for t in _tensors(v)]
    return []


def _nbytes(ts: list[Any]) -> float:
    return float(sum(t.numel() * t.element_size() for t in ts))


def _layer_cost(fn: Any, args: tuple, kwargs: dict, params: list[Any], spec: DeviceSpec) -> tuple[Any, float, float]:
    """Run one layer on meta tensors: (output, forward ms, backward ms) by roofline.

    FLOPs are torch's flop counter's (matmul-class ops); a layer without any counts one FLOP per
    output element at the vector rate. Bytes moved: inputs, outputs and parameters forward; the
    backward reads them and writes as many gradients, so twice that."""
    import torch
    from torch.fx.node import map_aggregate
    from torch.utils.flop_counter import FlopCounterMode

    bases: list[Any] = []

    def leaf(a: Any) -> Any:
        if isinstance(a, torch.Tensor):
            a = a.detach()
            if a.is_floating_point():
                bases.append(a.requires_grad_(True))
                return a.clone()  # an in-place layer (ReLU(inplace=True)) may write it
        return a

    args = map_aggregate(args, leaf)
    kwargs = map_aggregate(kwargs, leaf)
    ins = [t for t in _tensors((args, kwargs))]
    counter = FlopCounterMode(display=False)
    with counter:
        out = fn(*args, **kwargs)
    fwd_flops = float(counter.get_total_flops())
    outs = [t for t in _tensors(out) if t.requires_grad]
    bwd_flops = 0.0
    grad_of = [t for t in bases + params if t.requires_grad]
    if outs and grad_of:
        counter = FlopCounterMode(display=False)
        with counter:
            torch.autograd.grad(outs, grad_of, [torch.ones_like(o) for o in outs], allow_unused=True)
        bwd_flops = float(counter.get_total_flops())
    out_t = _tensors(out)
    moved = _nbytes(ins) + _nbytes(out_t) + _nbytes(params)
    elems = float(sum(t.numel() for t in out_t))
    fwd = spec.roofline_ms(fwd_flops or elems, moved, "float32", fwd_flops > 0)
    bwd = spec.roofline_ms(bwd_flops or elems, 2 * moved, "float32", bwd_flops > 0) if grad_of else 0.0
    return map_aggregate(out, lambda a: a.detach() if isinstance(a, torch.Tensor) else a), fwd, bwd


def layer_profile(model: Any, example_inputs: Any, *, spec: str | DeviceSpec = "h100", leaf_types: tuple = ()) -> str:
    """``model``'s layer graph in PipeDream's graph.txt format (see the module docstring).

    example_inputs: a tensor or a tuple of tensors (moved to the meta device; only shapes
    matter). leaf_types: extra module classes traced as one layer (torch.fx already keeps the
    standard ``torch.nn`` modules whole)."""
    import torch
    import torch.fx as fx
    from torch.fx.node import map_arg

    dev = device_spec(spec)

    class _Tracer(fx.Tracer):
        def is_leaf_module(self, m: Any, qualname: str) -> bool:
            return isinstance(m, leaf_types) or super().is_leaf_module(m, qualname)

    model = model.to("meta")
    graph = _Tracer().trace(model)
    gm = fx.GraphModule(model, graph)
    inputs = example_inputs if isinstance(example_inputs, tuple) else (example_inputs,)
    inputs = tuple(t.to("meta") if isinstance(t, torch.Tensor) else t for t in inputs)
    value: dict[str, Any] = {}
    lines: list[str] = []
    edges: list[str] = []
    ids: dict[str, str] = {}
    real_inputs = iter(inputs)
    for node in gm.graph.nodes:
        if node.op == "output":
            continue
        if node.op == "placeholder":
            value[node.name] = next(real_inputs)
            out, fwd, bwd, params, desc = value[node.name], 0.0, 0.0, [], "Input"
        elif node.op == "get_attr":
            value[node.name] = getattr(gm, node.target) if "." not in node.target else gm.get_parameter(node.target)
            continue
        else:
            args = map_arg(node.args, lambda n: value[n.name])
            kwargs = map_arg(node.kwargs, lambda n: value[n.name])
            if node.op == "call_module":
                mod = gm.get_submodule(node.target)
                params = [p for p in mod.parameters()]
                fn, desc = mod, f"{type(mod).__name__}({node.target})"
            elif node.op == "call_method":
                params, desc = [], f"{node.target}"
                fn = lambda self, *a, _m=node.target, **k: getattr(self, _m)(*a, **k)  # noqa: E731
            else:
                params, desc = [], getattr(node.target, "__name__", str(node.target))
                fn = node.target
            out, fwd, bwd = _layer_cost(fn, args, kwargs, params, dev)
            value[node.name] = out
        ids[node.name] = f"node{len(ids) + 1}"
        psize = _nbytes(params)
        act = _nbytes(_tensors(out))
        lines.append(f"{ids[node.name]} -- {desc} -- forward_compute_time={fwd:.6f}, backward_compute_time={bwd:.6f}, "
                     f"activation_size={act:.1f}, parameter_size={psize:.1f}")
        for src in dict.fromkeys(n.name for n in node.all_input_nodes):
            if src in ids:
                edges.append(f"{ids[src]} -- {ids[node.name]}")
    return "\n".join(lines + edges) + "\n"


def graph_from_layers(model: Any, example_inputs: Any, *, spec: str | DeviceSpec = "h100", name: str | None = None,
                      train: bool = True) -> Problem:
    """The layer-level training graph (or inference graph) of ``model``: :func:`layer_profile`
    read by :func:`placement.importers.pipedream.problem_from_pipedream`."""
    text = layer_profile(model, example_inputs, spec=spec)
    return problem_from_pipedream(text, train=train, spec=spec, name=name or type(model).__name__)


def main(argv: Sequence[str] | None = None) -> int:
    from .torch import _unpack, load_factory

    p = argparse.ArgumentParser(prog="python -m placement.importers.layers",
                                description="Write a PyTorch model's layer graph as a PipeDream-style graph.txt (roofline times).")
    p.add_argument("factory", help="MODULE:FACTORY returning (model, example_inputs)")
    p.add_argument("-o", "--output", required=True, metavar="FILE", help="graph.txt to write")
    p.add_argument("--device-spec", default="h100", metavar="h100|a100|FILE")
    args = p.parse_args(argv)
    try:
        out = check_output_path(args.output)
        model, inputs, _ = _unpack(load_factory(args.factory)(), args.factory)
        text = layer_profile(model, inputs, spec=args.device_spec)
    except ProblemError as exc:
        print(f"placement.importers.layers: error: {exc}", file=sys.stderr)
        return 2
    write_atomic(out, text.encode())
    print(f"{text.count('forward_compute_time')} layers; wrote {args.output}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
