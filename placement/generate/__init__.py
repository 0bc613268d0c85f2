"""Synthetic DNN-like placement problems: transformer, LSTM and CNN training steps, random DAGs.

Why: the real workloads are few and small; solvers, bounds and the evaluator need instances of any
size (10 to 10^6 nodes) whose structure looks like what PARDNN and Tarnawski et al. place — a
forward pass, a loss, a backward pass that mirrors it and reads the forward activations (long-lived
tensors), and one optimizer update per weight, colocated with its weight variable.

How: each model is written once as small blocks (one transformer layer, one LSTM cell, one
ResNeXt block...) with a tiny builder that derives the backward ops from the forward ops. Each
block becomes a template of node and edge arrays, and the assembly stamps out the copies with numpy
and wires copies together through named ports, so a million nodes take seconds. Costs come from a
FLOP/byte model of one accelerator (docs/generator.md); times are milliseconds, sizes are bytes.
The seed jitters the times (profiling noise) and, for ``random``, draws the whole graph.
"""
from __future__ import annotations

import argparse
import math
import sys
from typing import Callable, Sequence

import numpy as np

from ..formats.native import write_problem
from ..problem import Problem, ProblemError
from .assembly import LINK  # noqa: F401  (the link model of generated graphs)
from .cnn import _cnn
from .lstm import _lstm
from .random_dag import _random
from .transformer import _transformer

KINDS = ("transformer", "lstm", "cnn", "random")

# ----- entry points ----------------------------------------------------------------------------
_BUILDERS: dict[str, Callable[..., Problem]] = {
    "transformer": _transformer, "lstm": _lstm, "cnn": _cnn, "random": _random,
}


def generate(kind: str, nodes: int, *, seed: int = 0, devices: int = 4, memory_fraction: float | None = 0.6,
             name: str | None = None) -> Problem:
    """A synthetic problem of about ``nodes`` nodes (within 5% for almost every target from 100 up,
    10% at worst; smaller targets than a kind's smallest graph give that graph). Each device gets
    ``memory_fraction`` of the total static memory (sum of param_bytes + out_bytes); None means
    unlimited. Deterministic given the arguments."""
    if kind not in _BUILDERS:
        raise ProblemError(f"unknown generator kind {kind!r}; known: {', '.join(KINDS)}")
    if isinstance(nodes, bool) or not isinstance(nodes, (int, np.integer)) or nodes < 1:
        raise ProblemError(f"nodes: expected a positive integer, got {nodes!r}")
    if isinstance(devices, bool) or not isinstance(devices, (int, np.integer)) or devices < 1:
        raise ProblemError(f"devices: expected a positive integer, got {devices!r}")
    if memory_fraction is not None and not (memory_fraction > 0 and math.isfinite(memory_fraction)):
        raise ProblemError(f"memory_fraction: expected a positive number or None, got {memory_fraction!r}")
    rng = np.random.default_rng([int(seed), KINDS.index(kind), int(nodes)])
    label = name or f"{kind}-{nodes}-s{seed}"
    prob = _BUILDERS[kind](int(nodes), rng, int(devices), memory_fraction, label)
    prob.attrs.update({"seed": int(seed), "target_nodes": int(nodes)})
    return prob


def _fraction(text: str) -> float | None:
    if text.strip().lower() in ("none", "inf", "unlimited"):
        return None
    try:
        return float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number or 'none': {text!r}") from None


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m placement.generate",
                                 description="Write a synthetic DNN-like placement problem as native JSON.")
    ap.add_argument("kind", choices=KINDS)
    ap.add_argument("--nodes", type=int, default=100, help="approximate node count (default 100)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--devices", type=int, default=4)
    ap.add_argument("--memory-fraction", type=_fraction, default=0.6,
                    help="each device's capacity as a fraction of the total static memory, or 'none' (unlimited)")
    ap.add_argument("--name", default=None)
    ap.add_argument("-o", "--output", required=True, help="output .json file")
    args = ap.parse_args(argv)
    try:
        prob = generate(args.kind, args.nodes, seed=args.seed, devices=args.devices,
                        memory_fraction=args.memory_fraction, name=args.name)
    except ProblemError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    write_problem(prob, args.output)
    print(f"{prob.describe()} -> {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
