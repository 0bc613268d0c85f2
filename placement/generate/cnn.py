"""Residual CNN training step (ResNet / ResNeXt bottleneck blocks, backward, Adam).
"""
from __future__ import annotations

import functools
import math

import numpy as np

from ..problem import Problem
from .assembly import Assembly, Block, DTYPE, Placed, Ref, Template, _Candidate, _pick


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
