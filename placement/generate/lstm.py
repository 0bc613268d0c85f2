"""Unrolled multi-layer LSTM training step (cells over time steps, backward through time, Adam).
"""
from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import numpy as np

from ..problem import Problem
from .assembly import Assembly, Block, DTYPE, Inp, Template, _Candidate, _layer_range, _pick


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
