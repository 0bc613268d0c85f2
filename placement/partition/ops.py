"""Operator semantics for partitioning: a small index description per operator, in the spirit of
Tofu's TDL, and the partition-n-reduce strategies derived from it.

A description (:class:`OpDesc`) names the operator's *index variables* (``i``, ``j``, ``k`` of a
matrix product; ``n``, ``co``, ``ci`` of a convolution) and, for every input and output tensor, which
variable indexes each of its dimensions. This is what Tofu's symbolic interval analysis computes
from a TDL lambda when every tensor dimension is indexed by one variable (``A[i, k]``): halving the
interval of variable ``v`` halves exactly the dimensions indexed by ``v`` and leaves every other
input whole. A dimension indexed by an affine expression of several variables (``x + dx`` in a
convolution's spatial dimensions: the halo case) or by data (embedding rows) is written ``None``:
it is never split. An output also lists the variables it sums over (``k`` of a matrix product).

Splitting variable ``v`` over ``q`` workers (a *strategy*) then means, per tensor:

- an input indexed by ``v`` in dimension ``d``: each worker needs its ``1/q`` slice of ``d``
  (``("split", d)``); an input not indexed by ``v``: each worker needs all of it (``WHOLE``);
- an output indexed by ``v`` in dimension ``d``: each worker produces its slice (``("split", d)``);
  an output summing over ``v``: each worker produces a full-size partial sum (``PARTIAL``, the
  "reduce" of partition-n-reduce); an output neither indexed by nor summing over ``v``: each worker
  computes all of it (``REPLICA``).

Operators without a description (unknown op names, shapes that contradict the op, ``aten.cat``,
sorting, indexing by data...) are *unpartitionable*: every worker runs them whole on whole inputs.
:data:`DESCRIBED` lists the op names described here; docs/partitioning.md lists what is not.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable, Sequence

Dims = tuple  # tuple[str | None, ...]: the variable indexing each dimension (None: never split)

WHOLE = "whole"
PARTIAL = "partial"
REPLICA = "replica"


@dataclass(frozen=True)
class OpDesc:
    """Index description of one operator instance (shapes known).

    extents: variable -> its range; inputs: per input slot, the variable of each dimension (None
    for a slot that is not a tensor); outputs: per output, (variable of each dimension, variables
    summed over); elementwise: inputs and outputs all share one shape and index (Tofu coalesces
    runs of such operators)."""

    extents: dict[str, int]
    inputs: tuple[Dims | None, ...]
    outputs: tuple[tuple[Dims, frozenset[str]], ...]
    elementwise: bool = False

    def strategies(self, extents: dict[str, int], q: int) -> list[str]:
        """Variables that can be split evenly ``q`` ways at the current extents."""
        return [v for v in self.extents if extents[v] >= q and extents[v] % q == 0]

    def input_need(self, slot: int, var: str) -> Any:
        """What each worker needs of input ``slot`` when ``var`` is split."""
        dims = self.inputs[slot] if slot < len(self.inputs) else None
        if dims is not None and var in dims:
            return ("split", dims.index(var))
        return WHOLE

    def output_form(self, slot: int, var: str) -> Any:
        """What each worker produces of output ``slot`` when ``var`` is split."""
        dims, reduced = self.outputs[slot]
        if var in dims:
            return ("split", dims.index(var))
        if var in reduced:
            return PARTIAL
        return REPLICA


# ----- building descriptions -------------------------------------------------------------------

def _shape(t: Any) -> tuple[int, ...] | None:
    if not isinstance(t, dict) or not isinstance(t.get("shape"), (list, tuple)):
        return None
    try:
        return tuple(int(x) for x in t["shape"])
    except (TypeError, ValueError):
        return None


class _Vars:
    """Collects index variables and checks that every use of one has the same extent."""

    def __init__(self) -> None:
        self.extents: dict[str, int] = {}

    def use(self, name: str | None, extent: int) -> str | None:
        if name is None or extent <= 1:
            return None
        old = self.extents.setdefault(name, extent)
        if old != extent:
            raise ValueError(f"variable {name} has extents {old} and {extent}")
        return name

    def dims(self, names: Sequence[str | None], shape: Sequence[int]) -> Dims:
        if len(names) != len(shape):
            raise ValueError("rank mismatch")
        return tuple(self.use(nm, ext) for nm, ext in zip(names, shape))


def _elementwise(ins: list, outs: list) -> OpDesc:
    """Broadcasting element-wise op: output dims d0.., inputs aligned from the right."""
    out = outs[0]
    names = [f"d{i}" for i in range(len(out))]
    V = _Vars()
    for o in outs:
        if o != out:
            raise ValueError("outputs differ in shape")
    out_dims = V.dims(names, out)
    in_dims: list[Dims | None] = []
    for s in ins:
        if s is None:
            in_dims.append(None)
            continue
        if len(s) > len(out):
            raise ValueError("input of higher rank than the output")
        off = len(out) - len(s)
        in_dims.append(tuple(names[off + j] if s[j] == out[off + j] and s[j] > 1 else None for j in range(len(s))))
    same = all(s == out for s in ins if s is not None) and bool(ins)
    return OpDesc(V.extents, tuple(in_dims), tuple((out_dims, frozenset()) for _ in outs), elementwise=same)


def _matmul(ins: list, outs: list) -> OpDesc:
    """mm, bmm, matmul (batched and ND x 2D): C[b.., i, j] = Sum_k A[b.., i, k] B[b.., k, j]."""
    a, b = ins[0], ins[1]
    c = outs[0]
    V = _Vars()
    if len(b) == 2 and len(a) >= 2:
        batch = [f"b{x}" for x in range(len(a) - 2)]
        da = V.dims(batch + ["i", "k"], a)
        db = V.dims(["k", "j"], b)
        dc = V.dims(batch + ["i", "j"], c)
    elif len(a) == len(b) == len(c) and len(a) >= 3:
        batch = [f"b{x}" for x in range(len(a) - 2)]
        da = V.dims(batch + ["i", "k"], a)
        db = V.dims(batch + ["k", "j"], b)
        dc = V.dims(batch + ["i", "j"], c)
    else:
        raise ValueError("unsupported matmul ranks")
    return OpDesc(V.extents, (da, db), ((dc, frozenset({"k"})),))


def _addmm(ins: list, outs: list) -> OpDesc:
    """addmm(bias, A, B) = bias + A @ B (bias broadcast to the output)."""
    core = _matmul(ins[1:3], outs)
    bias = ins[0]
    c = outs[0]
    off = len(c) - len(bias)
    names = ["i", "j"]
    bd = tuple(names[off + x] if bias[x] == c[off + x] and bias[x] > 1 else None for x in range(len(bias)))
    return OpDesc(core.extents, (bd,) + core.inputs, core.outputs)


def _linear(ins: list, outs: list) -> OpDesc:
    """linear(x, W, b) = x @ W^T + b: x[.., k], W[j, k], b[j] -> y[.., j] (ONNX Gemm by shapes)."""
    x, w = ins[0], ins[1]
    y = outs[0]
    V = _Vars()
    outer = [f"b{i}" for i in range(len(x) - 1)]
    dx = V.dims(outer + ["k"], x)
    if len(w) != 2:
        raise ValueError("weight is not a matrix")
    if w[1] == x[-1] and w[0] == y[-1]:
        dw = V.dims(["j", "k"], w)
    elif w[0] == x[-1] and w[1] == y[-1]:
        dw = V.dims(["k", "j"], w)
    else:
        raise ValueError("weight shape does not match")
    dy = V.dims(outer + ["j"], y)
    rest: list[Dims | None] = []
    for s in ins[2:]:
        rest.append(None if s is None else tuple(("j" if (len(s) - x_ == 1 and ext == y[-1] and ext > 1) else None)
                                                 for x_, ext in enumerate(s)))
    return OpDesc(V.extents, (dx, dw, *rest), ((dy, frozenset({"k"})),))


def _convolution(ins: list, outs: list) -> OpDesc:
    """convolution(input[n, ci, sp..], weight[co, ci, ks..], bias[co]) -> out[n, co, sp'..]: split
    by batch, output channel or input channel (a reduction); spatial dims are halo cases (kept)."""
    x, w = ins[0], ins[1]
    y = outs[0]
    V = _Vars()
    sp = [None] * (len(x) - 2)
    grouped = w[1] != x[1]
    ci = None if grouped else "ci"
    dx = V.dims(["n", ci] + sp, x)
    dw = V.dims(["co" if not grouped else None, ci] + [None] * (len(w) - 2), w)
    dy = V.dims(["n", "co" if not grouped else None] + [None] * (len(y) - 2), y)
    rest = [None if s is None else V.dims(["co" if not grouped else None] + [None] * (len(s) - 1), s) for s in ins[2:]]
    return OpDesc(V.extents, (dx, dw, *rest), ((dy, frozenset({"ci"} if ci else set())),))


def _convolution_backward(ins: list, outs: list) -> OpDesc:
    """convolution_backward(grad_out[n, co, ..], input[n, ci, ..], weight[co, ci, ..]) ->
    (grad_input[n, ci, ..] summing co, grad_weight[co, ci, ..] summing n, grad_bias[co] summing n)."""
    g, x, w = ins[0], ins[1], ins[2]
    V = _Vars()
    if w[1] != x[1]:
        raise ValueError("grouped convolution backward")
    dg = V.dims(["n", "co"] + [None] * (len(g) - 2), g)
    dx = V.dims(["n", "ci"] + [None] * (len(x) - 2), x)
    dw = V.dims(["co", "ci"] + [None] * (len(w) - 2), w)
    forms = [(dx, frozenset({"co"})), (dw, frozenset({"n"})), (None, frozenset({"n"}))]
    out: list = []
    for pos, s in enumerate(outs):
        dims, red = forms[min(pos, 2)]
        if s is None:  # not computed (output mask)
            out.append(((), frozenset()))
            continue
        if pos == 2 or dims is None:
            dims = V.dims(["co"] + [None] * (len(s) - 1), s)
        elif tuple(s) != (x if pos == 0 else w):
            raise ValueError("gradient shape differs from its tensor")
        out.append((dims, red))
    return OpDesc(V.extents, (dg, dx, dw) + tuple(None for _ in ins[3:]), tuple(out))


def _last_dim_kept(ins: list, outs: list) -> OpDesc:
    """softmax, log_softmax and their backward ops: rows are independent, the last dim is whole."""
    out = outs[0]
    names = [f"d{i}" for i in range(len(out) - 1)] + [None]
    V = _Vars()
    dims = V.dims(names, out)
    in_dims = tuple(None if s is None else (V.dims(names, s) if s == out else None) for s in ins)
    return OpDesc(V.extents, in_dims, tuple((dims, frozenset()) for _ in outs))


def _outer_dims(shape: Sequence[int], inner: int) -> list[str | None]:
    return [f"d{i}" for i in range(len(shape) - inner)] + [None] * inner


def _layer_norm(ins: list, outs: list) -> OpDesc:
    """native_layer_norm(x[.., D], w[D], b[D]) -> (y, mean[.., 1], rstd[.., 1]): split outer dims."""
    x = ins[0]
    inner = len(ins[1]) if len(ins) > 1 and ins[1] is not None else 1
    V = _Vars()
    names = _outer_dims(x, inner)
    dx = V.dims(names, x)
    # y has x's shape; mean and rstd have x's rank with the normalised dims of extent 1.
    outs_d = [((V.dims(names, s) if s is not None and len(s) == len(x) else tuple(None for _ in (s or ()))), frozenset())
              for s in outs]
    params = tuple(None if s is None else tuple(None for _ in s) for s in ins[1:])
    return OpDesc(V.extents, (dx,) + params, tuple(outs_d))


def _layer_norm_backward(ins: list, outs: list) -> OpDesc:
    """native_layer_norm_backward(grad, x, mean, rstd, w, b) -> (grad_x, grad_w summing the outer
    dims, grad_b summing the outer dims)."""
    g = ins[0]
    w = ins[4] if len(ins) > 4 and ins[4] is not None else None
    inner = len(w) if w is not None else 1
    V = _Vars()
    names = _outer_dims(g, inner)
    outer = frozenset(n for n in names if n is not None)
    in_dims: list[Dims | None] = []
    for pos, s in enumerate(ins):
        if s is None:
            in_dims.append(None)
        elif pos < 4 and len(s) == len(g):  # grad, x, mean, rstd
            in_dims.append(V.dims(names, s))
        else:
            in_dims.append(tuple(None for _ in s))
    out: list = []
    for pos, s in enumerate(outs):
        if s is None:
            out.append(((), frozenset()))
        elif pos == 0:
            out.append((V.dims(names, s), frozenset()))
        else:
            out.append((tuple(None for _ in s), frozenset(n for n in outer if n in V.extents)))
    return OpDesc(V.extents, tuple(in_dims), tuple(out))


def _channel_norm(ins: list, outs: list) -> OpDesc:
    """Batch norm (forward and backward) as synchronised batch norm: split by channel (dim 1 of
    activations, dim 0 of per-channel vectors), or by batch, each worker then holding partial
    per-channel sums (statistics, weight and bias gradients) that are all-reduced: the small
    reduction a synchronised batch norm performs, charged on the per-channel outputs."""
    V = _Vars()

    def dims(s: Sequence[int]) -> Dims:
        if len(s) >= 2:
            return V.dims(["n", "c"] + [None] * (len(s) - 2), s)
        return V.dims(["c"] * len(s), s)

    out = []
    for s in outs:
        if s is None:
            out.append(((), frozenset()))
        else:
            out.append((dims(s), frozenset({"n"}) if len(s) < 2 else frozenset()))
    return OpDesc(V.extents, tuple(None if s is None else dims(s) for s in ins), tuple(out))


def _pool(ins: list, outs: list) -> OpDesc:
    """Pooling (and its backward): batch and channel dims split, spatial dims are halo cases."""
    V = _Vars()

    def dims(s: Sequence[int]) -> Dims:
        return V.dims(["n", "c"][:len(s)] + [None] * max(0, len(s) - 2), s)

    return OpDesc(V.extents, tuple(None if s is None else dims(s) for s in ins), tuple((dims(s), frozenset()) for s in outs))


def align_dims(src: Sequence[int], dst: Sequence[int]) -> list[int | None]:
    """For each dim of ``dst``, the dim of ``src`` it is (by common prefix and suffix), or None."""
    res: list[int | None] = [None] * len(dst)
    p = 0
    while p < min(len(src), len(dst)) and src[p] == dst[p]:
        res[p] = p
        p += 1
    s = 1
    while s <= min(len(src), len(dst)) - p and src[-s] == dst[-s]:
        res[len(dst) - s] = len(src) - s
        s += 1
    return res


def _view(ins: list, outs: list) -> OpDesc:
    """view / reshape / flatten / squeeze: dims equal in a common prefix or suffix keep their index."""
    x, y = ins[0], outs[0]
    V = _Vars()
    names = [f"d{i}" for i in range(len(x))]
    dx = V.dims(names, x)
    dy = tuple(V.use(names[a], y[j]) if a is not None else None for j, a in enumerate(align_dims(x, y)))
    rest = tuple(None for _ in ins[1:])
    return OpDesc(V.extents, (dx,) + rest, ((dy, frozenset()),))


def _permute(ins: list, outs: list) -> OpDesc:
    """t / transpose / permute: the output's dims are the input's in another order, found by extent
    (2-D: swapped; otherwise only when the extents tell the permutation unambiguously)."""
    x, y = ins[0], outs[0]
    if len(x) != len(y) or sorted(x) != sorted(y):
        raise ValueError("not a permutation")
    names = [f"d{i}" for i in range(len(x))]
    if len(x) == 2:
        perm = [1, 0]
    else:
        perm = []
        for j, ext in enumerate(y):
            cands = [i for i, e in enumerate(x) if e == ext]
            if len(cands) != 1:
                if x[j] == ext and y.count(ext) == x.count(ext):
                    cands = [j]
                else:
                    raise ValueError("ambiguous permutation")
            perm.append(cands[0])
    V = _Vars()
    dx = V.dims(names, x)
    dy = V.dims([names[p] for p in perm], y)
    return OpDesc(V.extents, (dx,) + tuple(None for _ in ins[1:]), ((dy, frozenset()),))


def _reduce(ins: list, outs: list) -> OpDesc:
    """sum / mean / amax over some dims (found by comparing shapes); the output sums over them."""
    x, y = ins[0], outs[0]
    names = [f"d{i}" for i in range(len(x))]
    V = _Vars()
    dx = V.dims(names, x)
    if len(y) == len(x):  # keepdim
        dy = tuple(names[i] if y[i] == x[i] and x[i] > 1 else None for i in range(len(x)))
    else:
        dy_l: list[str | None] = []
        i = 0
        for ext in y:
            while i < len(x) and x[i] != ext:
                i += 1
            if i == len(x):
                raise ValueError("output dims are not a subsequence of the input's")
            dy_l.append(names[i] if ext > 1 else None)
            i += 1
        dy = tuple(dy_l)
    reduced = frozenset(v for v in V.extents if v not in dy)
    return OpDesc(V.extents, (dx,) + tuple(None for _ in ins[1:]), ((dy, reduced),))


def _embedding(ins: list, outs: list) -> OpDesc:
    """embedding(weight[V, D], idx[..]) -> out[.., D]: rows are chosen by data (never split)."""
    w, idx = ins[0], ins[1]
    y = outs[0]
    V = _Vars()
    names = [f"b{i}" for i in range(len(idx))]
    dw = V.dims([None, "e"], w)
    di = V.dims(names, idx)
    dy = V.dims(names + ["e"], y)
    return OpDesc(V.extents, (dw, di) + tuple(None for _ in ins[2:]), ((dy, frozenset()),))


def _embedding_backward(ins: list, outs: list) -> OpDesc:
    """embedding_dense_backward(grad[.., D], idx[..]) -> grad_weight[V, D] summing the index dims."""
    g, idx = ins[0], ins[1]
    y = outs[0]
    V = _Vars()
    names = [f"b{i}" for i in range(len(idx))]
    dg = V.dims(names + ["e"], g)
    di = V.dims(names, idx)
    dy = V.dims([None, "e"], y)
    return OpDesc(V.extents, (dg, di) + tuple(None for _ in ins[2:]), ((dy, frozenset(n for n in names if n in V.extents)),))


def _nll_loss(ins: list, outs: list) -> OpDesc:
    """nll_loss_forward(logp[N, C], target[N], ..) -> (loss, total_weight), summing over N."""
    x, t = ins[0], ins[1]
    V = _Vars()
    dx = V.dims(["n", None], x) if len(x) == 2 else V.dims(["n"] + [None] * (len(x) - 1), x)
    dt = V.dims(["n"], t) if len(t) == 1 else tuple(None for _ in t)
    return OpDesc(V.extents, (dx, dt) + tuple(None if s is None else tuple(None for _ in s) for s in ins[2:]),
                  tuple((tuple(None for _ in s), frozenset(V.extents)) for s in outs))


def _nll_loss_backward(ins: list, outs: list) -> OpDesc:
    """nll_loss_backward(grad, logp[N, C], target[N], ..) -> grad_logp[N, C]: split by N."""
    x, t = ins[1], ins[2]
    V = _Vars()
    dx = V.dims(["n"] + [None] * (len(x) - 1), x)
    dt = V.dims(["n"], t) if len(t) == 1 else tuple(None for _ in t)
    others = tuple(None if s is None else tuple(None for _ in s) for s in ins[3:])
    return OpDesc(V.extents, (tuple(None for _ in ins[0]) if ins[0] is not None else None, dx, dt) + others,
                  ((V.dims(["n"] + [None] * (len(outs[0]) - 1), outs[0]), frozenset()),))


def _same_rank(ins: list, outs: list) -> OpDesc:
    """cat, slice, split, pad and their backward ops: a dim whose extent is the same in every
    tensor is indexed alike (split freely); the dim being joined, cut or padded is kept whole."""
    tensors = [x for x in ins if x is not None] + [o for o in outs if o is not None]
    rank = len(tensors[0])
    if any(len(x) != rank for x in tensors):
        raise ValueError("ranks differ")
    names = [f"d{i}" if all(x[i] == tensors[0][i] for x in tensors) else None for i in range(rank)]
    V = _Vars()
    return OpDesc(V.extents, tuple(None if x is None else V.dims(names, x) for x in ins),
                  tuple(((V.dims(names, o) if o is not None else ()), frozenset()) for o in outs))


def _attention(ins: list, outs: list) -> OpDesc:
    """Fused attention (q, k, v[B, H, S, D]) -> (out[B, H, S, D], logsumexp[B, H, S], ..): batch,
    heads and query rows are independent; keys and values are needed whole per (batch, head)."""
    q = ins[0]
    V = _Vars()
    row = V.dims(["b", "h", "s", None], q)
    kv = tuple(V.dims(["b", "h", None, None], s) if s is not None and len(s) == 4 else None for s in ins[1:3])
    rest = tuple(None for _ in ins[3:])
    out = []
    for s in outs:
        if s is None or len(s) < 3:
            out.append((tuple(None for _ in (s or ())), frozenset()))
        else:
            out.append((V.dims(["b", "h", "s", None][:len(s)], s), frozenset()))
    return OpDesc(V.extents, (row,) + kv + rest, tuple(out))


def _attention_backward(ins: list, outs: list) -> OpDesc:
    """Fused attention backward (grad_out, q, k, v, out, logsumexp, ..) -> (grad_q, grad_k, grad_v):
    batch and heads split; splitting query rows makes grad_k and grad_v partial sums."""
    V = _Vars()
    row = ["b", "h", "s", None]
    whole = ["b", "h", None, None]
    pattern = [row, row, whole, whole, row, row[:3]]
    in_dims = tuple(V.dims(pattern[i][:len(s)], s) if s is not None and i < len(pattern) and len(s) == len(pattern[i]) else None
                    for i, s in enumerate(ins))
    out = []
    for pos, s in enumerate(outs):
        if s is None:
            out.append(((), frozenset()))
        elif pos == 0:
            out.append((V.dims(row, s), frozenset()))
        else:
            out.append((V.dims(whole, s), frozenset({"s"})))
    return OpDesc(V.extents, in_dims, tuple(out))


ELEMENTWISE = frozenset("""
add sub rsub mul div neg abs exp log sqrt rsqrt pow relu gelu silu tanh sigmoid erf threshold_backward
gelu_backward silu_backward tanh_backward sigmoid_backward hardtanh_backward leaky_relu_backward
addcmul addcdiv lerp clamp clamp_min clamp_max maximum minimum where masked_fill dropout native_dropout
native_dropout_backward clone copy _to_copy detach alias contiguous fill zeros_like ones_like
scalar_tensor reciprocal square sign eq ne lt le gt ge logical_not bitwise_not mish hardswish leaky_relu
elu hardtanh expand_as type_as add_ mul_ div_ sub_ addcmul_ addcdiv_ lerp_ sqrt_ copy_ zero_
saved bernoulli bernoulli_ empty_like full_like rand_like randn_like native_dropout_backward
relu Relu Add Sub Mul Div Sqrt Pow Exp Log Neg Tanh Sigmoid Erf Gelu Identity Dropout Cast Where Clip
""".split())

DESCRIBERS: dict[str, Callable[[list, list], OpDesc]] = {
    "mm": _matmul, "bmm": _matmul, "matmul": _matmul, "MatMul": _matmul,
    "addmm": _addmm, "linear": _linear, "Gemm": _linear,
    "convolution": _convolution, "conv2d": _convolution, "conv1d": _convolution, "_convolution": _convolution,
    "Conv": _convolution, "convolution_backward": _convolution_backward,
    "_softmax": _last_dim_kept, "softmax": _last_dim_kept, "_log_softmax": _last_dim_kept, "log_softmax": _last_dim_kept,
    "_softmax_backward_data": _last_dim_kept, "_log_softmax_backward_data": _last_dim_kept,
    "Softmax": _last_dim_kept, "LogSoftmax": _last_dim_kept,
    "native_layer_norm": _layer_norm, "layer_norm": _layer_norm, "LayerNormalization": _layer_norm,
    "native_layer_norm_backward": _layer_norm_backward,
    "native_batch_norm": _channel_norm, "_native_batch_norm_legit": _channel_norm,
    "_native_batch_norm_legit_functional": _channel_norm, "native_batch_norm_backward": _channel_norm,
    "batch_norm": _channel_norm, "BatchNormalization": _channel_norm,
    "max_pool2d_with_indices": _pool, "max_pool2d_with_indices_backward": _pool, "avg_pool2d": _pool,
    "avg_pool2d_backward": _pool, "adaptive_avg_pool2d": _pool, "_adaptive_avg_pool2d": _pool,
    "_adaptive_avg_pool2d_backward": _pool, "MaxPool": _pool, "AveragePool": _pool, "GlobalAveragePool": _pool,
    "view": _view, "reshape": _view, "_unsafe_view": _view, "flatten": _view, "squeeze": _view,
    "unsqueeze": _view, "Reshape": _view, "Flatten": _view, "Squeeze": _view, "Unsqueeze": _view,
    "t": _permute, "transpose": _permute, "permute": _permute, "Transpose": _permute,
    "sum": _reduce, "mean": _reduce, "amax": _reduce, "ReduceSum": _reduce, "ReduceMean": _reduce,
    "embedding": _embedding, "Gather": _embedding, "embedding_dense_backward": _embedding_backward,
    "_scaled_dot_product_flash_attention": _attention, "_scaled_dot_product_flash_attention_for_cpu": _attention,
    "_scaled_dot_product_efficient_attention": _attention, "scaled_dot_product_attention": _attention,
    "_scaled_dot_product_flash_attention_backward": _attention_backward,
    "_scaled_dot_product_flash_attention_for_cpu_backward": _attention_backward,
    "_scaled_dot_product_efficient_attention_backward": _attention_backward,
    "cat": _same_rank, "slice": _same_rank, "slice_backward": _same_rank, "split": _same_rank,
    "split_with_sizes": _same_rank, "chunk": _same_rank, "narrow": _same_rank, "constant_pad_nd": _same_rank,
    "Concat": _same_rank, "Slice": _same_rank, "Split": _same_rank, "Pad": _same_rank,
    "nll_loss_forward": _nll_loss, "nll_loss": _nll_loss, "nll_loss_backward": _nll_loss_backward,
}
for _name in ELEMENTWISE:
    DESCRIBERS.setdefault(_name, _elementwise)

DESCRIBED = frozenset(DESCRIBERS)

# Ops that produce tensors without computing (graph inputs, parameters) or consume them without
# computing (graph outputs): no strategy, their tensors' layouts are free.
SOURCES = frozenset({"placeholder", "param", "parameter", "input", "constant", "get_attr", "Constant", "Initializer"})
SINKS = frozenset({"output", "Output"})


def op_name(op: str | None) -> str:
    """'aten.mm.default' / 'aten.mm' / 'onnx.MatMul' -> 'mm' / 'MatMul'."""
    if not op:
        return ""
    parts = op.split(".")
    if parts[0] in ("aten", "onnx", "prims") and len(parts) >= 2:
        return parts[1]
    return parts[0]


def describe(meta: dict[str, Any] | None) -> OpDesc | None:
    """The description of one node from its ``node_meta`` (None: unpartitionable)."""
    if not meta:
        return None
    fn = DESCRIBERS.get(op_name(meta.get("op")))
    ins = [_shape(t) for t in meta.get("inputs") or []]
    outs = [_shape(t) for t in meta.get("outputs") or []]
    if fn is None or not outs or all(o is None for o in outs) or not ins or ins[0] is None:
        return None
    try:
        return fn(ins, outs)
    except (ValueError, IndexError, TypeError):
        return None


DTYPE_BYTES = {"float32": 4, "float": 4, "float16": 2, "half": 2, "bfloat16": 2, "float64": 8, "double": 8,
               "int64": 8, "long": 8, "int32": 4, "int": 4, "int16": 2, "int8": 1, "uint8": 1, "bool": 1}


def tensor_bytes(t: dict[str, Any] | None) -> float:
    """Bytes of a tensor record ``{"shape", "dtype"}`` (4-byte elements when the dtype is unknown)."""
    shape = _shape(t)
    if shape is None:
        return 0.0
    dtype = str((t or {}).get("dtype", "float32")).replace("torch.", "")
    return float(math.prod(shape)) * DTYPE_BYTES.get(dtype, 4)
