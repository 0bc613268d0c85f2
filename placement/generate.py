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
import functools
import math
import sys
from dataclasses import dataclass, field
from typing import Callable, Sequence, Union

import numpy as np

from .problem import Link, Problem, ProblemError

KINDS = ("transformer", "lstm", "cnn", "random")

# ----- the cost model (docs/generator.md) ------------------------------------------------------------
FLOPS_PER_MS = 1e10  # 10 TFLOP/s sustained
MEM_BYTES_PER_MS = 5e8  # 500 GB/s device memory
LAUNCH_MS = 0.005  # 5 us per kernel
LINK = Link(latency=0.01, bandwidth=1e7)  # 10 us, 10 GB/s (bytes per ms)
DTYPE = 4  # fp32
STATE_PER_PARAM = 3 * DTYPE  # weight + Adam's two moments
TIME_JITTER = 0.1  # sigma of the log-normal noise on times


def op_time(flops: float, moved_bytes: float) -> float:
    """Roofline time of one kernel in ms: launch + max(compute, memory traffic)."""
    return LAUNCH_MS + max(flops / FLOPS_PER_MS, moved_bytes / MEM_BYTES_PER_MS)


# ----- one block: forward ops, then derived backward ops ---------------------------------------------
Ref = Union[int, str]  # a local node index, or the name of a port (a tensor from another block)
Inp = Union[Ref, tuple]  # a Ref, or (Ref, bytes) when the op reads only a slice of that tensor


@dataclass
class _Op:
    node: int
    inputs: list[tuple[Ref, float]]
    flops: float
    grad: str  # "fused": one grad op for all inputs; "split": one per input (matmul-like)
    save: str  # tensors the fused grad reads besides dy: "inputs", "output", "none"
    split: dict[int, str]
    gfactor: float
    gbytes: dict[int, float]
    loss: bool


@dataclass
class Template:
    """One block as arrays: local nodes 0..size-1, internal edges, and edges from named ports.
    Templates are cached and shared: treat them as read-only."""

    names: list[str]
    time: np.ndarray
    out_bytes: np.ndarray
    param_bytes: np.ndarray
    backward: np.ndarray
    coloc: list[tuple[int, str]]  # (local node, key suffix)
    src: np.ndarray
    dst: np.ndarray
    nbytes: np.ndarray
    ports: dict[str, tuple[np.ndarray, np.ndarray]]  # port -> (local dst, bytes)
    exports: dict[str, int]

    @property
    def size(self) -> int:
        return len(self.names)


class Block:
    """Build one block: declare ports, weights and forward ops, then :meth:`differentiate`."""

    def __init__(self) -> None:
        self.names: list[str] = []
        self.time: list[float] = []
        self.out: list[float] = []
        self.param: list[float] = []
        self.backward: list[bool] = []
        self.coloc: list[tuple[int, str]] = []
        self.edges: dict[tuple[Ref, int], float] = {}
        self.size: dict[Ref, float] = {}
        self.label: dict[Ref, str] = {}
        self.needs_grad: dict[Ref, bool] = {}
        self.ops: list[_Op] = []
        self.weights: list[int] = []
        self.exports: dict[str, int] = {}
        self.seeds: list[tuple[Ref, str]] = []

    # -- declarations --
    def _node(self, name: str, time: float, out: float, param: float = 0.0, backward: bool = False) -> int:
        self.names.append(name)
        self.time.append(time)
        self.out.append(out)
        self.param.append(param)
        self.backward.append(backward)
        i = len(self.names) - 1
        self.size[i] = out
        self.label[i] = name
        return i

    def _edge(self, src: Ref, dst: int, nbytes: float) -> None:
        key = (src, dst)
        self.edges[key] = max(self.edges.get(key, 0.0), nbytes)

    def port(self, name: str, nbytes: float, *, grad: bool = True, label: str | None = None) -> str:
        """A tensor produced in another block; with ``grad`` its gradient is exported as 'd'+name."""
        self.size[name] = nbytes
        self.label[name] = label or name
        self.needs_grad[name] = grad
        return name

    def weight(self, name: str, elems: float) -> int:
        """A weight variable (params + optimizer state); differentiate() adds its colocated update."""
        i = self._node(name, 0.0, 0.0, elems * STATE_PER_PARAM)
        self.size[i] = elems * DTYPE
        self.needs_grad[i] = True
        self.weights.append(i)
        self.coloc.append((i, name))
        return i

    def op(self, name: str, inputs: Sequence[Inp], out_elems: float, flops: float = 0.0, *, grad: str = "fused",
           save: str = "inputs", split: dict[int, str] | None = None, gfactor: float = 2.0,
           gbytes: dict[int, float] | None = None, loss: bool = False) -> int:
        """A forward op; ``split`` names the per-input grad ops of a matmul-like op (by input position),
        ``gbytes`` overrides the size of an input's gradient (sparse embedding gradients)."""
        ins = [(x[0], float(x[1])) if isinstance(x, tuple) else (x, self.size[x]) for x in inputs]
        out = out_elems * DTYPE
        moved = sum(b for _, b in ins) + out
        i = self._node(name, op_time(flops, moved), out)
        for ref, b in ins:
            self._edge(ref, i, b)
        self.needs_grad[i] = any(self.needs_grad.get(r, False) for r, _ in ins)
        self.ops.append(_Op(i, ins, flops, grad, save, split or {}, gfactor, gbytes or {}, loss))
        return i

    def extra(self, name: str, inputs: Sequence[Inp], out_elems: float, flops: float = 0.0, *, backward: bool = True) -> int:
        """A node outside automatic differentiation (e.g. a gradient accumulator)."""
        ins = [(x[0], float(x[1])) if isinstance(x, tuple) else (x, self.size[x]) for x in inputs]
        out = out_elems * DTYPE
        i = self._node(name, op_time(flops, sum(b for _, b in ins) + out), out, backward=backward)
        for ref, b in ins:
            self._edge(ref, i, b)
        return i

    def output(self, ref: Ref, name: str, *, grad: bool = True) -> None:
        """Export a forward tensor; with ``grad`` its gradient comes back through the port 'd'+name."""
        self.exports[name] = ref  # type: ignore[assignment]
        if grad:
            self.seeds.append((ref, "d" + name))

    # -- reverse mode --
    def differentiate(self) -> None:
        """Add the backward pass: per op its grad op(s), AddN where a tensor has several consumers,
        the gradient exports of ports, and one update op per weight, colocated with it."""
        contrib: dict[Ref, list[tuple[Ref, float]]] = {}
        for ref, pname in self.seeds:
            self.port(pname, self.size[ref], grad=False)
            contrib.setdefault(ref, []).append((pname, self.size[ref]))

        def grad_of(ref: Ref) -> tuple[Ref, float] | None:
            parts = contrib.get(ref, [])
            if not parts:
                return None
            if len(parts) == 1:
                return parts[0]
            nb = self.size[ref]
            s = self._node(f"{self.label[ref]}/grad_sum", op_time(nb / DTYPE * (len(parts) - 1), nb * (len(parts) + 1)), nb,
                           backward=True)
            for src, b in parts:
                self._edge(src, s, b)
            return (s, nb)

        for op in reversed(self.ops):
            if not self.needs_grad[op.node]:
                continue
            dy = grad_of(op.node)
            if dy is None and not op.loss:
                continue  # the loss does not depend on this op
            if op.loss:
                dy = (op.node, self.size[op.node])
            name = self.label[op.node]
            diff = [(p, r, b) for p, (r, b) in enumerate(op.inputs) if self.needs_grad.get(r, False)]
            if op.grad == "split":
                for p, r, b in diff:
                    gb = op.gbytes.get(p, b)
                    others = [(r2, b2) for p2, (r2, b2) in enumerate(op.inputs) if p2 != p]
                    moved = dy[1] + sum(b2 for _, b2 in others) + gb
                    g = self._node(f"{name}/{op.split.get(p, 'grad_' + str(p))}", op_time(op.flops, moved), gb, backward=True)
                    self._edge(dy[0], g, dy[1])
                    for r2, b2 in others:
                        self._edge(r2, g, b2)
                    contrib.setdefault(r, []).append((g, gb))
            else:
                saved = {"inputs": list(op.inputs), "output": [(op.node, self.size[op.node])], "none": []}[op.save]
                gout = sum(op.gbytes.get(p, b) for p, _, b in diff)
                moved = dy[1] + sum(b for _, b in saved) + gout
                g = self._node(f"{name}/grad", op_time(op.gfactor * op.flops, moved), gout, backward=True)
                self._edge(dy[0], g, dy[1])
                for r, b in saved:
                    self._edge(r, g, b)
                for p, r, b in diff:
                    contrib.setdefault(r, []).append((g, op.gbytes.get(p, b)))
        for w in self.weights:
            dw = grad_of(w)
            nb = self.size[w]
            u = self._node(f"{self.label[w]}/update", op_time(10 * nb / DTYPE, 7 * nb), 0.0, backward=True)
            self.coloc.append((u, self.label[w]))
            self._edge(w, u, nb)
            if dw is not None:
                self._edge(dw[0], u, dw[1])
        for pname, need in list(self.needs_grad.items()):
            if isinstance(pname, str) and need:
                dx = grad_of(pname)
                if dx is not None:
                    if isinstance(dx[0], str):  # a gradient passed straight through: materialise it
                        dx = (self.extra(f"{self.label[pname]}/grad_identity", [dx], dx[1] / DTYPE), dx[1])
                    self.exports["d" + pname] = dx[0]  # type: ignore[assignment]

    def template(self) -> Template:
        local = [(s, d, b) for (s, d), b in self.edges.items() if isinstance(s, int)]
        ports: dict[str, tuple[list[int], list[float]]] = {}
        for (s, d), b in self.edges.items():
            if isinstance(s, str):
                ports.setdefault(s, ([], []))
                ports[s][0].append(d)
                ports[s][1].append(b)
        return Template(
            names=list(self.names),
            time=np.asarray(self.time, dtype=float),
            out_bytes=np.asarray(self.out, dtype=float),
            param_bytes=np.asarray(self.param, dtype=float),
            backward=np.asarray(self.backward, dtype=bool),
            coloc=list(self.coloc),
            src=np.asarray([e[0] for e in local], dtype=np.int64),
            dst=np.asarray([e[1] for e in local], dtype=np.int64),
            nbytes=np.asarray([e[2] for e in local], dtype=float),
            ports={p: (np.asarray(d, dtype=np.int64), np.asarray(b, dtype=float)) for p, (d, b) in ports.items()},
            exports=dict(self.exports),
        )


# ----- stamping templates out and wiring the copies ----------------------------------------------
@dataclass
class Placed:
    """``len(prefixes)`` consecutive copies of a template, the first at global index ``start``;
    copy c's node names are ``prefixes[c] + template.names``."""

    template: Template
    prefixes: list[str]
    start: int

    @property
    def count(self) -> int:
        return len(self.prefixes)

    @property
    def base(self) -> np.ndarray:
        return self.start + np.arange(self.count, dtype=np.int64) * self.template.size

    def export(self, name: str) -> np.ndarray:
        """Global index of an exported node in every copy."""
        return self.base + self.template.exports[name]


@dataclass
class Assembly:
    """Copies of templates laid out one after another; ports bound to other copies' exports."""

    parts: list[Placed] = field(default_factory=list)
    bindings: list[tuple[Placed, str, np.ndarray]] = field(default_factory=list)
    n: int = 0

    def place(self, template: Template, prefixes: list[str]) -> Placed:
        p = Placed(template, prefixes, self.n)
        self.n += template.size * len(prefixes)
        self.parts.append(p)
        return p

    def bind(self, placed: Placed, port: str, sources: np.ndarray | int) -> None:
        """Feed ``port`` of every copy from ``sources`` (global indices, one per copy or a row of
        several per copy; -1 = nothing, e.g. no previous timestep)."""
        src = np.asarray(sources, dtype=np.int64)
        if src.ndim == 0:
            src = np.full(placed.count, int(src), dtype=np.int64)
        if src.shape[0] != placed.count:
            raise ValueError(f"port {port!r}: {src.shape[0]} sources for {placed.count} copies")
        self.bindings.append((placed, port, src))

    def build(self, name: str, devices: int, memory_fraction: float | None, rng: np.random.Generator,
              attrs: dict) -> Problem:
        names: list[str] = []
        parts_t, parts_o, parts_p, parts_b = [], [], [], []
        srcs, dsts, bys = [], [], []
        coloc_idx: list[np.ndarray] = []
        coloc_keys: list[str] = []
        bound = {(id(p), port) for p, port, _ in self.bindings}
        for p in self.parts:
            t = p.template
            for port in t.ports:
                if (id(p), port) not in bound:
                    raise AssertionError(f"generator bug: port {port!r} of {t.names[0]!r} left unbound")
            names.extend([pre + s for pre in p.prefixes for s in t.names])
            parts_t.append(np.tile(t.time, p.count))
            parts_o.append(np.tile(t.out_bytes, p.count))
            parts_p.append(np.tile(t.param_bytes, p.count))
            parts_b.append(np.tile(t.backward, p.count))
            base = p.base[:, None]
            srcs.append((base + t.src[None, :]).ravel())
            dsts.append((base + t.dst[None, :]).ravel())
            bys.append(np.tile(t.nbytes, p.count))
            if t.coloc:
                loc = sorted(t.coloc)
                coloc_idx.append((base + np.asarray([i for i, _ in loc])[None, :]).ravel())
                coloc_keys.extend([pre + key for pre in p.prefixes for _, key in loc])
        for p, port, src in self.bindings:
            if port not in p.template.ports:
                raise AssertionError(f"generator bug: no port {port!r} in {p.template.names[0]!r}")
            ldst, lb = p.template.ports[port]
            rows = src if src.ndim == 2 else src[:, None]
            for col in range(rows.shape[1]):
                s = rows[:, col]
                ok = s >= 0
                base = p.base[ok]
                srcs.append(np.repeat(s[ok], ldst.size))
                dsts.append((base[:, None] + ldst[None, :]).ravel())
                bys.append(np.tile(lb, int(ok.sum())))
        return finish_problem(
            name, names, np.concatenate(parts_t), np.concatenate(parts_o), np.concatenate(parts_p),
            np.concatenate(parts_b), np.concatenate(srcs), np.concatenate(dsts), np.concatenate(bys),
            np.concatenate(coloc_idx) if coloc_idx else np.zeros(0, dtype=np.int64), coloc_keys,
            devices, memory_fraction, rng, attrs)


def finish_problem(name: str, names: list[str], time: np.ndarray, out_bytes: np.ndarray, param_bytes: np.ndarray,
                   backward: np.ndarray, src: np.ndarray, dst: np.ndarray, nbytes: np.ndarray,
                   coloc_idx: np.ndarray, coloc_keys: list[str], devices: int, memory_fraction: float | None,
                   rng: np.random.Generator, attrs: dict, jitter: bool = True) -> Problem:
    """Merge parallel edges, price them, number colocation groups as make_problem does (first
    appearance by node index), jitter times, size the memory, and check acyclicity."""
    n = len(names)
    if len(set(names)) != n:
        raise AssertionError("generator bug: duplicate node names")
    if src.size and (src.min() < 0 or dst.max() >= n or np.any(src == dst)):
        raise AssertionError("generator bug: bad edge endpoints")
    key = src * n + dst
    order = np.lexsort((nbytes, key))
    key, nbytes = key[order], nbytes[order]
    last = np.r_[key[1:] != key[:-1], True] if key.size else np.zeros(0, dtype=bool)
    key, nbytes = key[last], nbytes[last]  # one edge per pair, the largest tensor
    src, dst = key // n, key % n
    colocate = np.full(n, -1, dtype=np.int64)
    group_names: list[str] = []
    if coloc_idx.size:
        order = np.argsort(coloc_idx, kind="stable")
        seen: dict[str, int] = {}
        for i, k in zip(coloc_idx[order].tolist(), [coloc_keys[j] for j in order.tolist()]):
            g = seen.get(k)
            if g is None:
                g = seen[k] = len(group_names)
                group_names.append(k)
            colocate[i] = g
    if jitter:
        time = time * rng.lognormal(0.0, TIME_JITTER, n)
    time = np.round(time, 6)  # 1 ns resolution keeps the JSON short
    if memory_fraction is None:
        cap = math.inf
    else:
        cap = float(memory_fraction) * float(np.sum(param_bytes + out_bytes))
    prob = Problem(
        name=name, ids=names, names=list(names),
        time=np.asarray(time, dtype=float), out_bytes=np.asarray(out_bytes, dtype=float),
        param_bytes=np.asarray(param_bytes, dtype=float), colocate=colocate, allowed=[None] * n,
        src=src.astype(np.int64), dst=dst.astype(np.int64), comm=np.asarray(LINK.comm(nbytes), dtype=float),
        memory=np.full(devices, cap, dtype=float), device_names=[f"dev{d}" for d in range(devices)],
        link=LINK, edge_bytes=nbytes.astype(float), node_attrs={"is_backward": backward.astype(bool)},
        attrs=dict(attrs), colocate_names=group_names,
    )
    prob.topo_order  # raises ProblemError on a cycle
    return prob


# ----- choosing a model size for a node target -------------------------------------------------
@dataclass(frozen=True)
class _Candidate:
    count: int
    penalty: float
    config: tuple


def _pick(target: int, candidates: list[_Candidate], tol: float = 0.05) -> _Candidate:
    """Among configurations within ``tol`` of the target, the most realistic (lowest penalty);
    if none is that close, the closest."""
    def err(c: _Candidate) -> float:
        return abs(c.count - target) / max(target, 1)
    close = [c for c in candidates if err(c) <= tol]
    if close:
        return min(close, key=lambda c: (c.penalty, err(c), c.config))
    return min(candidates, key=lambda c: (err(c), c.penalty, c.config))


def _layer_range(target: int, fixed: int, per: int, hi: int = 10**7) -> list[int]:
    """Repeat counts near (target - fixed) / per."""
    x = (target - fixed) / per
    return sorted({min(hi, max(1, v)) for v in (math.floor(x), math.ceil(x))})


# ----- transformer encoder training step --------------------------------------------------------
@dataclass(frozen=True)
class _TfShape:
    batch: int = 8
    seq: int = 512
    classes: int = 2


def _tf_width(heads: int) -> int:
    """d_model: 64 per head; the coarse form (heads = 0) is a small 256-wide model."""
    return 256 if heads == 0 else 64 * heads


def _tf_vocab(d: int) -> int:
    """BERT's 30522 tokens, smaller for narrow toy models so the embedding does not dwarf them."""
    return min(30522, 16 * d)


@functools.lru_cache(maxsize=None)
def _tf_prologue(d: int, lite: bool, sh: _TfShape) -> Template:
    b = Block()
    tokens = b.op("input/batch", [], sh.batch * sh.seq * 2, 0.0)  # token ids and labels
    emb = b.weight("embeddings/token_weight", _tf_vocab(d) * d)
    bsd = sh.batch * sh.seq * d
    x = b.op("embeddings/token_lookup", [emb, tokens], bsd, 0.0, grad="split", split={0: "grad_weight"},
             gbytes={0: bsd * DTYPE})  # a sparse (IndexedSlices) gradient: one row per token
    if not lite:
        pos = b.weight("embeddings/position_weight", sh.seq * d)
        x = b.op("embeddings/position_add", [x, pos], bsd, bsd, save="none", gbytes={1: sh.seq * d * DTYPE})
        gamma = b.weight("embeddings/layernorm_gamma", 2 * d)
        x = b.op("embeddings/layernorm", [x, gamma], bsd, 8 * bsd)
        x = b.op("embeddings/dropout", [x], bsd, bsd, save="output")
    b.output(x, "out")
    b.output(tokens, "labels", grad=False)
    b.differentiate()
    return b.template()


@functools.lru_cache(maxsize=None)
def _tf_epilogue(d: int, lite: bool, sh: _TfShape) -> Template:
    b = Block()
    x = b.port("x", sh.batch * sh.seq * d * DTYPE, label="head/input")
    labels = b.port("labels", sh.batch * sh.seq * 2 * DTYPE, grad=False)
    bd = sh.batch * d
    h: Ref = x
    if not lite:
        h = b.op("head/pool_cls", [(x, bd * DTYPE)], bd, 0.0, save="none")
        w = b.weight("head/dense_weight", d * d + d)
        h = b.op("head/dense", [h, w], bd, 2 * bd * d, grad="split", split={0: "grad_input", 1: "grad_weight"})
        h = b.op("head/tanh", [h], bd, 4 * bd, save="output")
        wc = b.weight("head/logits_weight", d * sh.classes + sh.classes)
        logits = b.op("head/logits", [h, wc], sh.batch * sh.classes, 2 * bd * sh.classes, grad="split",
                      split={0: "grad_input", 1: "grad_weight"})
    else:
        wc = b.weight("head/logits_weight", d * sh.classes + sh.classes)
        logits = b.op("head/logits", [h, wc], sh.batch * sh.seq * sh.classes, 2 * sh.batch * sh.seq * d * sh.classes,
                      grad="split", split={0: "grad_input", 1: "grad_weight"})
    b.op("loss/xent", [logits, (labels, sh.batch * sh.seq * DTYPE)], 1, 10 * sh.batch * sh.seq, loss=True)
    b.differentiate()
    return b.template()


@functools.lru_cache(maxsize=None)
def _tf_layer(heads: int, sh: _TfShape) -> Template:
    """One encoder layer; heads = 0 is the coarse form (fused attention and FFN ops)."""
    d = _tf_width(heads)
    bs = sh.batch * sh.seq
    bsd = bs * d
    b = Block()
    x = b.port("x", bsd * DTYPE, label="input")
    mm = {0: "grad_input", 1: "grad_weight"}
    if heads == 0:
        w = b.weight("attn/weight", 4 * d * d + 4 * d)
        a = b.op("attn/self_attention", [x, w], bsd, 8 * bsd * d + 4 * bs * sh.seq * d, grad="split", split=mm)
        g1 = b.weight("attn/layernorm_gamma", 2 * d)
        h = b.op("attn/add_layernorm", [a, x, g1], bsd, 10 * bsd)
        w2 = b.weight("ffn/weight", 8 * d * d + 5 * d)
        f = b.op("ffn/dense_gelu_dense", [h, w2], bsd, 16 * bsd * d, grad="split", split=mm)
        g2 = b.weight("ffn/layernorm_gamma", 2 * d)
        out = b.op("ffn/add_layernorm", [f, h, g2], bsd, 10 * bsd)
    else:
        dh = 64
        wqkv = b.weight("attn/qkv_weight", 3 * d * d + 3 * d)
        qkv = b.op("attn/qkv_matmul", [x, wqkv], 3 * bsd, 6 * bsd * d, grad="split", split=mm)
        split = b.op("attn/split_heads", [qkv], 3 * bsd, 0.0, save="none")
        ctxs = []
        for hd in range(heads):
            p = f"attn/head{hd}/"
            qk = 2 * bs * dh * DTYPE
            s = b.op(p + "scores", [(split, qk)], sh.batch * sh.seq * sh.seq, 2 * bs * sh.seq * dh)
            s = b.op(p + "softmax", [s], sh.batch * sh.seq * sh.seq, 5 * bs * sh.seq, save="output")
            s = b.op(p + "dropout", [s], sh.batch * sh.seq * sh.seq, bs * sh.seq, save="output")
            ctxs.append(b.op(p + "context", [s, (split, bs * dh * DTYPE)], bs * dh, 2 * bs * sh.seq * dh, grad="split",
                             split={0: "grad_probs", 1: "grad_values"}))
        merged = b.op("attn/merge_heads", ctxs, bsd, 0.0, save="none")
        wo = b.weight("attn/out_weight", d * d + d)
        a = b.op("attn/out_matmul", [merged, wo], bsd, 2 * bsd * d, grad="split", split=mm)
        a = b.op("attn/dropout", [a], bsd, bsd, save="output")
        a = b.op("attn/residual_add", [a, x], bsd, bsd, save="none")
        g1 = b.weight("attn/layernorm_gamma", 2 * d)
        h = b.op("attn/layernorm", [a, g1], bsd, 8 * bsd)
        w1 = b.weight("ffn/weight1", 4 * d * d + 4 * d)
        f = b.op("ffn/matmul1", [h, w1], 4 * bsd, 8 * bsd * d, grad="split", split=mm)
        f = b.op("ffn/gelu", [f], 4 * bsd, 32 * bsd)
        w2 = b.weight("ffn/weight2", 4 * d * d + d)
        f = b.op("ffn/matmul2", [f, w2], bsd, 8 * bsd * d, grad="split", split=mm)
        f = b.op("ffn/dropout", [f], bsd, bsd, save="output")
        f = b.op("ffn/residual_add", [f, h], bsd, bsd, save="none")
        g2 = b.weight("ffn/layernorm_gamma", 2 * d)
        out = b.op("ffn/layernorm", [f, g2], bsd, 8 * bsd)
    b.output(out, "out")
    b.differentiate()
    return b.template()


def _transformer(target: int, rng: np.random.Generator, devices: int, memory_fraction: float | None,
                 name: str) -> Problem:
    sh = _TfShape()
    # Sizes are linear in the head count; measure two and extrapolate.
    size = {h: _tf_layer(h, sh).size for h in (0, 1, 2)}
    per_head = size[2] - size[1]
    fixed = {lite: _tf_prologue(64, lite, sh).size + _tf_epilogue(64, lite, sh).size for lite in (True, False)}
    cands: list[_Candidate] = [_Candidate(fixed[True], 20.0, (0, 0, True))]
    for lite in (True, False):
        for layers in _layer_range(target, fixed[lite], size[0]):
            cands.append(_Candidate(fixed[lite] + layers * size[0], 10.0 + (0 if not lite else 1), (layers, 0, lite)))
    for heads in range(1, 129):
        per = size[1] + (heads - 1) * per_head
        for layers in _layer_range(target, fixed[False], per):
            # Real models keep depth and head count alike (BERT 12x12, GPT-3 96x96).
            cands.append(_Candidate(fixed[False] + layers * per, abs(math.log(layers / heads)), (layers, heads, False)))
    layers, heads, lite = _pick(target, cands).config
    d = _tf_width(heads)
    asm = Assembly()
    pro = asm.place(_tf_prologue(d, lite, sh), [""])
    lay = asm.place(_tf_layer(heads, sh), [f"layer{i}/" for i in range(layers)]) if layers else None
    epi = asm.place(_tf_epilogue(d, lite, sh), [""])
    asm.bind(epi, "labels", pro.export("labels"))
    if lay is None:
        asm.bind(epi, "x", pro.export("out"))
        asm.bind(pro, "dout", epi.export("dx"))
    else:
        prev = np.r_[pro.export("out"), lay.export("out")[:-1]]
        asm.bind(lay, "x", prev)
        asm.bind(pro, "dout", lay.export("dx")[:1])
        asm.bind(lay, "dout", np.r_[lay.export("dx")[1:], epi.export("dx")])
        asm.bind(epi, "x", lay.export("out")[-1:])
    attrs = {"generator": "transformer", "layers": layers, "heads": heads, "d_model": d, "batch": sh.batch,
             "seq": sh.seq}
    return asm.build(name, devices, memory_fraction, rng, attrs)


# ----- unrolled multi-layer LSTM ------------------------------------------------------------------
@dataclass(frozen=True)
class _LstmShape:
    batch: int = 64
    hidden: int = 1024
    vocab: int = 32000


@functools.lru_cache(maxsize=None)
def _lstm_cell(sh: _LstmShape, first: bool = False) -> Template:
    """One cell (layer l, step t): gates matmul, activations, new c, new h; backward through time;
    the weight gradient is accumulated along the timesteps (acc_in from t+1). The first step
    starts from a zero state: no h_prev/c_prev inputs and no gradient for them."""
    h, bt = sh.hidden, sh.batch
    bh = bt * h * DTYPE
    b = Block()
    x = b.port("x", bh, label="input")
    w = b.port("W", (2 * h * 4 * h + 4 * h) * DTYPE, label="W")
    if first:
        z = b.op("gates_matmul", [x, w], 4 * bt * h, 2 * bt * h * 4 * h, grad="split",
                 split={0: "grad_input", 1: "grad_weight"})
    else:
        hp = b.port("h_prev", bh, label="h_prev")
        z = b.op("gates_matmul", [x, hp, w], 4 * bt * h, 2 * bt * 2 * h * 4 * h, grad="split",
                 split={0: "grad_input", 1: "grad_h_prev", 2: "grad_weight"})
    g = b.op("gates", [z], 4 * bt * h, 4 * 4 * bt * h, save="output")
    c_in: list[Inp] = [(g, 3 * bh)] if first else [(g, 3 * bh), b.port("c_prev", bh, label="c_prev")]
    c = b.op("cell", c_in, bt * h, 3 * bt * h)
    hh = b.op("hidden", [(g, bh), c], bt * h, 5 * bt * h)
    b.output(hh, "h_next")
    b.output(hh, "h_up")
    b.output(c, "c")
    b.differentiate()
    acc_in = b.port("acc_in", b.size[w], grad=False)
    acc = b.extra("W/grad_accum", [(b.exports["dW"], b.size[w]), acc_in], b.size[w] / DTYPE, b.size[w] / DTYPE)
    b.exports["acc"] = acc
    return b.template()


@functools.lru_cache(maxsize=None)
def _lstm_step_in(sh: _LstmShape) -> Template:
    b = Block()
    tokens = b.port("tokens", sh.batch * 2 * DTYPE, grad=False)
    emb = b.port("emb", sh.vocab * sh.hidden * DTYPE, label="embedding")
    x = b.op("embed/lookup", [emb, (tokens, sh.batch * DTYPE)], sh.batch * sh.hidden, 0.0, grad="split",
             split={0: "grad_weight"}, gbytes={0: sh.batch * sh.hidden * DTYPE})
    b.output(x, "x")
    b.differentiate()
    acc_in = b.port("acc_in", b.size[emb], grad=False)
    b.exports["acc"] = b.extra("embed/grad_accum", [(b.exports["demb"], sh.batch * sh.hidden * DTYPE), acc_in],
                               sh.batch * sh.hidden, sh.batch * sh.hidden)
    return b.template()


@functools.lru_cache(maxsize=None)
def _lstm_step_out(sh: _LstmShape) -> Template:
    b = Block()
    h = b.port("h", sh.batch * sh.hidden * DTYPE, label="output/input")
    tokens = b.port("tokens", sh.batch * 2 * DTYPE, grad=False)
    wsize = (sh.hidden * sh.vocab + sh.vocab) * DTYPE
    w = b.port("W", wsize, label="output/W")
    logits = b.op("output/logits", [h, w], sh.batch * sh.vocab, 2 * sh.batch * sh.hidden * sh.vocab, grad="split",
                  split={0: "grad_input", 1: "grad_weight"})
    loss = b.op("output/xent", [logits, (tokens, sh.batch * DTYPE)], 1, 10 * sh.batch * sh.vocab)
    b.output(loss, "loss")
    b.differentiate()
    acc_in = b.port("acc_in", wsize, grad=False)
    b.exports["acc"] = b.extra("output/grad_accum", [(b.exports["dW"], wsize), acc_in], wsize / DTYPE, wsize / DTYPE)
    return b.template()


@functools.lru_cache(maxsize=None)
def _lstm_global(sh: _LstmShape, steps: int) -> Template:
    b = Block()
    tokens = b.op("input/batch", [], sh.batch * steps * 2, 0.0)
    emb = b.weight("embed/weight", sh.vocab * sh.hidden)
    wout = b.weight("output/weight", sh.hidden * sh.vocab + sh.vocab)
    losses = b.port("losses", DTYPE, label="loss/steps")
    b.op("loss/total", [losses], 1, steps, loss=True)
    b.output(tokens, "tokens", grad=False)
    b.output(emb, "emb")
    b.output(wout, "wout")
    b.differentiate()
    return b.template()


@functools.lru_cache(maxsize=None)
def _lstm_layer_weight(sh: _LstmShape) -> Template:
    b = Block()
    w = b.weight("weight", 2 * sh.hidden * 4 * sh.hidden + 4 * sh.hidden)
    b.output(w, "W")
    b.differentiate()
    return b.template()


def _lstm(target: int, rng: np.random.Generator, devices: int, memory_fraction: float | None, name: str) -> Problem:
    sh = _LstmShape()
    cell0, cell, sin, sout = _lstm_cell(sh, True), _lstm_cell(sh), _lstm_step_in(sh), _lstm_step_out(sh)
    glob, lw = _lstm_global(sh, 1), _lstm_layer_weight(sh)
    cands = []
    for layers in range(1, 9):
        fixed = glob.size + layers * (lw.size + cell0.size - cell.size)
        per = layers * cell.size + sin.size + sout.size
        for steps in _layer_range(target, fixed, per):
            # Typical: 2-4 layers on short sequences, up to 8 (GNMT) on long ones.
            want = min(8.0, max(1.0, math.log2(max(steps, 1))))
            cands.append(_Candidate(fixed + steps * per, abs(math.log(layers / want)), (layers, steps)))
    layers, steps = _pick(target, cands).config
    asm = Assembly()
    g = asm.place(_lstm_global(sh, steps), [""])
    lw_p = asm.place(lw, [f"lstm/l{l}/" for l in range(layers)])
    si = asm.place(sin, [f"step{t}/" for t in range(steps)])
    first = asm.place(cell0, [f"lstm/l{l}/t0/" for l in range(layers)])
    rest = asm.place(cell, [f"lstm/l{l}/t{t}/" for l in range(layers) for t in range(1, steps)])
    so = asm.place(sout, [f"step{t}/" for t in range(steps)])

    def grid(name: str) -> np.ndarray:
        """Export ``name`` of cell (l, t) at [l, t]; -1 where the cell has no such export."""
        out = np.full((layers, steps), -1, dtype=np.int64)
        if name in cell0.exports:
            out[:, 0] = first.export(name)
        out[:, 1:] = rest.export(name).reshape(layers, steps - 1)
        return out

    none = np.full((layers, 1), -1, dtype=np.int64)
    h_next, c_out, acc = grid("h_next"), grid("c"), grid("acc")
    asm.bind(si, "tokens", np.repeat(g.export("tokens"), steps))
    asm.bind(so, "tokens", np.repeat(g.export("tokens"), steps))
    asm.bind(si, "emb", np.repeat(g.export("emb"), steps))
    asm.bind(si, "dx", grid("dx")[0])
    asm.bind(si, "acc_in", np.r_[si.export("acc")[1:], -1])
    asm.bind(g, "demb", si.export("acc")[:1])
    sources = {
        "x": np.vstack([si.export("x")[None, :], h_next[:-1]]),
        "h_prev": np.hstack([none, h_next[:, :-1]]),
        "c_prev": np.hstack([none, c_out[:, :-1]]),
        "W": np.repeat(lw_p.export("W")[:, None], steps, axis=1),
        "dh_next": np.hstack([grid("dh_prev")[:, 1:], none]),
        "dc": np.hstack([grid("dc_prev")[:, 1:], none]),
        "dh_up": np.vstack([grid("dx")[1:], so.export("dh")[None, :]]),
        "acc_in": np.hstack([acc[:, 1:], none]),
    }
    for port, src in sources.items():
        if port in cell0.ports:
            asm.bind(first, port, src[:, 0])
        asm.bind(rest, port, src[:, 1:].ravel())
    asm.bind(lw_p, "dW", acc[:, 0])
    asm.bind(so, "h", h_next[-1])
    asm.bind(so, "W", np.repeat(g.export("wout"), steps))
    asm.bind(so, "dloss", np.repeat(g.export("dlosses"), steps))
    asm.bind(so, "acc_in", np.r_[so.export("acc")[1:], -1])
    asm.bind(g, "dwout", so.export("acc")[:1])
    asm.bind(g, "losses", so.export("loss")[None, :])
    attrs = {"generator": "lstm", "layers": layers, "steps": steps, "hidden": sh.hidden, "batch": sh.batch}
    return asm.build(name, devices, memory_fraction, rng, attrs)


# ----- residual CNN (ResNet / ResNeXt bottleneck blocks) -----------------------------------------
CNN_BATCH = 32
CNN_STAGES = ((56, 256), (28, 512), (14, 1024), (7, 2048))  # (spatial size, output channels)


def _conv(b: Block, name: str, x: Ref, cin: int, cout: int, k: int, hw: int, mm: dict[int, str]) -> int:
    w = b.weight(name + "_weight", k * k * cin * cout)
    return b.op(name, [x, w], CNN_BATCH * hw * hw * cout, 2 * CNN_BATCH * hw * hw * k * k * cin * cout,
                grad="split", split=mm)


def _bn_relu(b: Block, name: str, x: Ref, c: int, hw: int, relu: bool = True) -> int:
    elems = CNN_BATCH * hw * hw * c
    g = b.weight(name + "_bn_gamma", 2 * c)
    y = b.op(name + "_bn", [x, g], elems, 8 * elems)
    return b.op(name + "_relu", [y], elems, elems, save="output") if relu else y


@functools.lru_cache(maxsize=None)
def _cnn_block(stage: int, card: int, first: bool) -> Template:
    """A bottleneck block with ``card`` parallel paths (ResNeXt); the first block of a stage
    changes the channel count (and the spatial size after stage 1) and has a projection shortcut."""
    hw, cout = CNN_STAGES[stage]
    cin = cout if not first else (64 if stage == 0 else CNN_STAGES[stage - 1][1])
    hw_in = hw if (not first or stage == 0) else CNN_STAGES[stage - 1][0]
    mid = cout // 4 if card == 1 else cout // 2
    width = max(mid // card, 1)
    mm = {0: "grad_input", 1: "grad_weight"}
    b = Block()
    x = b.port("x", CNN_BATCH * hw_in * hw_in * cin * DTYPE, label="input")
    paths = []
    for j in range(card):
        p = f"path{j}/" if card > 1 else ""
        y = _conv(b, p + "conv1", x, cin, width, 1, hw_in, mm)
        y = _bn_relu(b, p + "conv1", y, width, hw_in)
        y = _conv(b, p + "conv2", y, width, width, 3, hw, mm)
        paths.append(_bn_relu(b, p + "conv2", y, width, hw))
    y = paths[0] if card == 1 else b.op("concat", paths, CNN_BATCH * hw * hw * width * card, 0.0, save="none")
    y = _conv(b, "conv3", y, width * card, cout, 1, hw, mm)
    y = _bn_relu(b, "conv3", y, cout, hw, relu=False)
    short: Ref = x
    if first:
        short = _conv(b, "shortcut_conv", x, cin, cout, 1, hw, mm)
        short = _bn_relu(b, "shortcut", short, cout, hw, relu=False)
    elems = CNN_BATCH * hw * hw * cout
    y = b.op("residual_add", [y, short], elems, elems, save="none")
    y = b.op("out_relu", [y], elems, elems, save="output")
    b.output(y, "out")
    b.differentiate()
    return b.template()


@functools.lru_cache(maxsize=None)
def _cnn_stem(full: bool) -> Template:
    """conv 7x7/2, [batch norm,] relu, max pool 3x3/2: 224x224x3 images to 56x56x64."""
    b = Block()
    img = b.op("input/batch", [], CNN_BATCH * 224 * 224 * 3 + CNN_BATCH, 0.0)
    mm = {1: "grad_weight"}  # no gradient for the images
    y = _conv(b, "stem/conv", img, 3, 64, 7, 112, mm)
    if full:
        y = _bn_relu(b, "stem/conv", y, 64, 112)
    else:
        y = b.op("stem/relu", [y], CNN_BATCH * 112 * 112 * 64, CNN_BATCH * 112 * 112 * 64, save="output")
    y = b.op("stem/maxpool", [y], CNN_BATCH * 56 * 56 * 64, 9 * CNN_BATCH * 56 * 56 * 64)
    b.output(y, "out")
    b.output(img, "labels", grad=False)
    b.differentiate()
    return b.template()


@functools.lru_cache(maxsize=None)
def _cnn_head(hw: int, c: int) -> Template:
    b = Block()
    x = b.port("x", CNN_BATCH * hw * hw * c * DTYPE, label="head/input")
    labels = b.port("labels", CNN_BATCH * DTYPE, grad=False)
    y = b.op("head/avgpool", [x], CNN_BATCH * c, CNN_BATCH * hw * hw * c, save="none")
    w = b.weight("head/fc_weight", c * 1000 + 1000)
    y = b.op("head/fc", [y, w], CNN_BATCH * 1000, 2 * CNN_BATCH * c * 1000, grad="split",
             split={0: "grad_input", 1: "grad_weight"})
    b.op("loss/xent", [y, labels], 1, 10 * CNN_BATCH * 1000, loss=True)
    b.differentiate()
    return b.template()


def _cnn_stage_blocks(blocks: int) -> list[int]:
    if blocks <= 4:
        return [1] * blocks
    base = [3, 4, 6, 3]
    per = [max(1, blocks * x // 16) for x in base]
    per[2] += blocks - sum(per)  # deep networks grow stage 3 (ResNet-101/152)
    return per


def _cnn(target: int, rng: np.random.Generator, devices: int, memory_fraction: float | None, name: str) -> Problem:
    cards = (1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64)
    sizes = {c: (_cnn_block(1, c, True).size, _cnn_block(1, c, False).size) for c in cards}
    fixed = {full: _cnn_stem(full).size + _cnn_head(7, 64).size for full in (False, True)}
    cands = [_Candidate(fixed[full], 20.0 + full, (0, 1, full)) for full in (False, True)]
    for c in cards:
        first, rest = sizes[c]
        guess = max(1, (target - fixed[True]) // rest)
        for blocks in range(max(1, guess - 8), guess + 9):
            per = _cnn_stage_blocks(blocks)
            body = len(per) * first + (sum(per) - len(per)) * rest
            # Prefer depth >= 4 x cardinality (ResNet-50 has 16 blocks, ResNeXt-50 32 paths).
            pen = (0.0 if blocks >= 4 * c else math.log(4 * c / blocks)) - 0.01 * math.log2(c)
            cands.append(_Candidate(fixed[True] + body, pen, (blocks, c, True)))
            cands.append(_Candidate(fixed[False] + body, pen + 1.0, (blocks, c, False)))
    blocks, card, full = _pick(target, cands).config
    asm = Assembly()
    stem = asm.place(_cnn_stem(full), [""])
    prev = stem.export("out")
    placed: list[Placed] = []
    if blocks:
        for s, cnt in enumerate(_cnn_stage_blocks(blocks)):
            p1 = asm.place(_cnn_block(s, card, True), [f"stage{s + 1}/block0/"])
            placed.append(p1)
            if cnt > 1:
                placed.append(asm.place(_cnn_block(s, card, False), [f"stage{s + 1}/block{i}/" for i in range(1, cnt)]))
        hw, c = CNN_STAGES[len(_cnn_stage_blocks(blocks)) - 1]
    else:
        hw, c = 56, 64
    head = asm.place(_cnn_head(hw, c), [""])
    outs = np.concatenate([p.export("out") for p in placed]) if placed else np.zeros(0, dtype=np.int64)
    dxs = np.concatenate([p.export("dx") for p in placed]) if placed else np.zeros(0, dtype=np.int64)
    chain_in = np.r_[prev, outs]  # input of block i is chain_in[i]; the head reads chain_in[-1]
    pos = 0
    for p in placed:
        asm.bind(p, "x", chain_in[pos:pos + p.count])
        grads = np.r_[dxs, head.export("dx")]
        asm.bind(p, "dout", grads[pos + 1:pos + 1 + p.count])
        pos += p.count
    asm.bind(head, "x", chain_in[-1:])
    asm.bind(stem, "dout", np.r_[dxs, head.export("dx")][:1])
    asm.bind(head, "labels", stem.export("labels"))
    attrs = {"generator": "cnn", "blocks": blocks, "cardinality": card, "batch": CNN_BATCH}
    return asm.build(name, devices, memory_fraction, rng, attrs)


# ----- random layered DAG ------------------------------------------------------------------------
def _random(target: int, rng: np.random.Generator, devices: int, memory_fraction: float | None, name: str) -> Problem:
    """Layers of random width; each node reads 1-3 nodes of the previous three layers (mostly the
    previous one). Times, tensor sizes and weights are log-normal; about a fifth of the nodes hold
    weights. Every node but the first layer's has an input, every node but the last layer's an output."""
    n = max(int(target), 1)
    layers = max(1, int(round(math.sqrt(n) * 1.5)))
    layers = min(layers, n)
    cuts = np.sort(rng.choice(np.arange(1, n), size=layers - 1, replace=False)) if layers > 1 else np.zeros(0, int)
    starts = np.r_[0, cuts].astype(np.int64)
    ends = np.r_[cuts, n].astype(np.int64)
    layer_of = np.repeat(np.arange(layers), ends - starts)
    srcs, dsts = [], []
    if layers > 1:
        v = np.arange(starts[1], n)
        lv = layer_of[v]
        fan = rng.choice([1, 2, 3], size=v.size, p=[0.45, 0.35, 0.2])
        vv = np.repeat(v, fan)
        back = rng.choice([1, 2, 3], size=vv.size, p=[0.75, 0.17, 0.08])
        back = np.where(np.r_[True, vv[1:] != vv[:-1]], 1, back)  # each node's first input: previous layer
        lu = np.maximum(layer_of[vv] - back, 0)
        u = starts[lu] + (rng.random(vv.size) * (ends[lu] - starts[lu])).astype(np.int64)
        srcs.append(u)
        dsts.append(vv)
        # Give every node of a non-final layer at least one consumer in the next layer.
        has_out = np.zeros(n, dtype=bool)
        has_out[u] = True
        lonely = np.flatnonzero(~has_out & (layer_of < layers - 1))
        ln = layer_of[lonely] + 1
        w = starts[ln] + (rng.random(lonely.size) * (ends[ln] - starts[ln])).astype(np.int64)
        srcs.append(lonely)
        dsts.append(w)
    src = np.concatenate(srcs) if srcs else np.zeros(0, dtype=np.int64)
    dst = np.concatenate(dsts) if dsts else np.zeros(0, dtype=np.int64)
    out = np.round(rng.lognormal(math.log(4e6), 1.0, n))
    param = np.where(rng.random(n) < 0.2, np.round(rng.lognormal(math.log(16e6), 1.0, n)), 0.0)
    time = rng.lognormal(math.log(0.5), 1.0, n)
    pos = np.arange(n) - starts[layer_of]
    names = [f"random/L{l}/n{p}" for l, p in zip(layer_of.tolist(), pos.tolist())]
    attrs = {"generator": "random", "layers": layers}
    return finish_problem(name, names, time, out, param, np.zeros(n, dtype=bool), src, dst, out[src],
                          np.zeros(0, dtype=np.int64), [], devices, memory_fraction, rng, attrs, jitter=False)


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
    from .formats.native import write_problem

    write_problem(prob, args.output)
    print(f"{prob.describe()} -> {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
