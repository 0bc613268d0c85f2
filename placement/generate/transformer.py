"""Transformer encoder training step (embeddings, attention and MLP layers, loss, backward, Adam).
"""
from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import numpy as np

from ..problem import Problem
from .assembly import Assembly, Block, DTYPE, Ref, Template, _Candidate, _layer_range, _pick


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
