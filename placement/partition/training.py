"""ATen-like training graphs with node_meta, built from a small config (tests and bench/bench_tofu.py).

A :class:`Tape` records forward operators on symbolic tensors, then :meth:`Tape.training_problem`
appends the backward operators reverse-mode differentiation produces (ATen's names:
``aten.mm`` with ``aten.t``, ``aten.threshold_backward``, ``aten.convolution_backward``,
``aten.native_batch_norm_backward``, ``aten._log_softmax_backward_data``...), sums the gradients
of tensors used more than once, and applies Adam to every parameter as element-wise operators.
Times follow a simple roofline (``flops / flop_rate + bytes / mem_rate``); edges carry their tensor's
bytes, priced by the problem's link. Parameters and optimizer states are ``placeholder`` nodes
holding ``param_bytes``; every other node's ``out_bytes`` is the sum of its outputs.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Sequence

from ..problem import Link, Problem, make_problem


@dataclass(frozen=True)
class T:
    """A tensor: (node index, output slot) and its shape."""

    node: int
    slot: int
    shape: tuple[int, ...]


@dataclass
class Tape:
    flop_rate: float = 1e7  # flops per time unit (10 TFLOP/s with microseconds)
    mem_rate: float = 1e6  # bytes per time unit (1 TB/s)
    nodes: list[dict[str, Any]] = field(default_factory=list)
    ins: list[list[T | None]] = field(default_factory=list)
    outs: list[list[tuple[int, ...]]] = field(default_factory=list)
    flops: list[float] = field(default_factory=list)
    params: list[T] = field(default_factory=list)
    forward: list[tuple[str, list[T], list[T]]] = field(default_factory=list)

    # ----- recording -----------------------------------------------------------------------
    def _add(self, name: str, op: str, inputs: Sequence[T | None], out_shapes: Sequence[Sequence[int]],
             flops: float = 0.0, param: bool = False) -> list[T]:
        i = len(self.nodes)
        self.nodes.append({"id": name, "op": op, "param": param})
        self.ins.append(list(inputs))
        self.outs.append([tuple(s) for s in out_shapes])
        self.flops.append(flops)
        return [T(i, j, tuple(s)) for j, s in enumerate(out_shapes)]

    def _name(self, base: str) -> str:
        return f"{base}_{len(self.nodes)}"

    def input(self, name: str, shape: Sequence[int]) -> T:
        return self._add(name, "placeholder", [], [shape])[0]

    def param(self, name: str, shape: Sequence[int]) -> T:
        p = self._add(name, "placeholder", [], [shape], param=True)[0]
        self.params.append(p)
        return p

    def op(self, op: str, inputs: Sequence[T | None], out_shapes: Sequence[Sequence[int]], flops: float | None = None,
           record: bool = True) -> list[T]:
        numel = sum(math.prod(s) for s in out_shapes)
        outs = self._add(self._name(op.split(".")[-1]), op, inputs, out_shapes, numel if flops is None else flops)
        if record:
            self.forward.append((op, [x for x in inputs if x is not None], outs))
        return outs

    # forward operators
    def mm(self, a: T, b: T, record: bool = True) -> T:
        return self.op("aten.mm", [a, b], [(a.shape[0], b.shape[1])], 2.0 * a.shape[0] * a.shape[1] * b.shape[1], record)[0]

    def t(self, a: T, record: bool = True) -> T:
        return self.op("aten.t", [a], [(a.shape[1], a.shape[0])], 0.0, record)[0]

    def unary(self, name: str, a: T, record: bool = True) -> T:
        return self.op(f"aten.{name}", [a], [a.shape], None, record)[0]

    def binary(self, name: str, a: T, b: T, record: bool = True) -> T:
        return self.op(f"aten.{name}", [a, b], [a.shape], None, record)[0]

    def linear(self, x: T, w: T) -> T:
        return self.mm(x, self.t(w))

    def conv(self, x: T, w: T) -> T:
        n, ci, h, wd = x.shape
        co, _, kh, kw = w.shape
        return self.op("aten.convolution", [x, w], [(n, co, h, wd)], 2.0 * n * co * ci * h * wd * kh * kw)[0]

    def batch_norm(self, x: T, w: T, b: T) -> T:
        c = x.shape[1]
        return self.op("aten.native_batch_norm", [x, w, b], [x.shape, (c,), (c,)], 8.0 * math.prod(x.shape))[0]

    def pool(self, x: T) -> T:
        n, c = x.shape[:2]
        y = self.op("aten._adaptive_avg_pool2d", [x], [(n, c, 1, 1)])[0]
        return self.op("aten.view", [y], [(n, c)], 0.0)[0]

    def loss(self, logits: T, target: T) -> T:
        lsm = self.op("aten._log_softmax", [logits], [logits.shape], 4.0 * math.prod(logits.shape))[0]
        self._loss = (lsm, target)
        return self.op("aten.nll_loss_forward", [lsm, target], [(), ()], record=False)[0]

    # ----- backward and optimizer -------------------------------------------------------------
    def _backward(self) -> dict[T, T]:
        lsm, target = self._loss
        ones = self.input("grad_seed", ())
        g = self.op("aten.nll_loss_backward", [ones, lsm, target], [lsm.shape], record=False)[0]
        grads: dict[T, list[T]] = {}
        g_logits = self.op("aten._log_softmax_backward_data", [g, lsm], [lsm.shape], record=False)[0]
        lsm_src = [f for f in self.forward if f[2][0] == lsm][0][1][0]
        grads[lsm_src] = [g_logits]

        def total(x: T) -> T | None:
            parts = grads.get(x)
            if not parts:
                return None
            acc = parts[0]
            for p in parts[1:]:
                acc = self.binary("add", acc, p, record=False)
            grads[x] = [acc]
            return acc

        for op, inputs, outs in reversed(self.forward):
            if op == "aten._log_softmax":
                continue
            gy = total(outs[0])
            if gy is None:
                continue
            y = outs[0]
            if op == "aten.mm":
                a, b = inputs
                grads.setdefault(a, []).append(self.mm(gy, self.t(b, False), False))
                grads.setdefault(b, []).append(self.mm(self.t(a, False), gy, False))
            elif op == "aten.t":
                grads.setdefault(inputs[0], []).append(self.t(gy, False))
            elif op == "aten.relu":
                grads.setdefault(inputs[0], []).append(self.op("aten.threshold_backward", [gy, y], [y.shape], record=False)[0])
            elif op in ("aten.tanh", "aten.sigmoid"):
                name = op.split(".")[1] + "_backward"
                grads.setdefault(inputs[0], []).append(self.op(f"aten.{name}", [gy, y], [y.shape], record=False)[0])
            elif op == "aten.add":
                for x in inputs:
                    grads.setdefault(x, []).append(gy)
            elif op == "aten.mul":
                a, b = inputs
                grads.setdefault(a, []).append(self.binary("mul", gy, b, False))
                grads.setdefault(b, []).append(self.binary("mul", gy, a, False))
            elif op == "aten.convolution":
                x, w = inputs
                n, ci, h, wd = x.shape
                co, _, kh, kw = w.shape
                gx, gw = self.op("aten.convolution_backward", [gy, x, w], [x.shape, w.shape],
                                 4.0 * n * co * ci * h * wd * kh * kw, record=False)
                grads.setdefault(x, []).append(gx)
                grads.setdefault(w, []).append(gw)
            elif op == "aten.native_batch_norm":
                x, w, b = inputs
                _, mean, invstd = outs
                gx, gw, gb = self.op("aten.native_batch_norm_backward", [gy, x, w, mean, invstd],
                                     [x.shape, w.shape, b.shape], 8.0 * math.prod(x.shape), record=False)
                grads.setdefault(x, []).append(gx)
                grads.setdefault(w, []).append(gw)
                grads.setdefault(b, []).append(gb)
            elif op == "aten._adaptive_avg_pool2d":
                grads.setdefault(inputs[0], []).append(
                    self.op("aten._adaptive_avg_pool2d_backward", [gy, inputs[0]], [inputs[0].shape], record=False)[0])
            elif op == "aten.view":
                grads.setdefault(inputs[0], []).append(self.op("aten.view", [gy], [inputs[0].shape], 0.0, record=False)[0])
            else:
                raise ValueError(f"no backward rule for {op}")
        return {p: g for p in self.params if (g := total(p)) is not None}

    def _adam(self, p: T, g: T) -> None:
        name = self.nodes[p.node]["id"]
        m = self._add(f"{name}.exp_avg", "placeholder", [], [p.shape], param=True)[0]
        v = self._add(f"{name}.exp_avg_sq", "placeholder", [], [p.shape], param=True)[0]
        m1 = self.binary("lerp", m, g, False)
        g2 = self.binary("mul", g, g, False)
        v1 = self.binary("lerp", v, g2, False)
        den = self.unary("sqrt", v1, False)
        step = self.binary("div", m1, den, False)
        self.binary("sub", p, step, False)

    def training_problem(self, *, devices: int = 1, memory: float = math.inf, link: Link | None = None,
                         name: str = "training", dtype_bytes: int = 4) -> Problem:
        """The forward graph so far, its backward, and Adam on every parameter, as a Problem."""
        grads = self._backward()
        for p in self.params[:]:
            if p in grads:
                self._adam(p, grads[p])
        link = link or Link(latency=10.0, bandwidth=1e4)
        recs, metas, edges, emeta = [], [], [], []
        for i, node in enumerate(self.nodes):
            out_b = [math.prod(s) * dtype_bytes for s in self.outs[i]]
            in_b = [math.prod(x.shape) * dtype_bytes for x in self.ins[i] if x is not None]
            is_param = node["param"]
            time = 0.0 if node["op"] == "placeholder" else self.flops[i] / self.flop_rate + (sum(out_b) + sum(in_b)) / self.mem_rate
            recs.append({"id": node["id"], "time": time, "out_bytes": 0.0 if is_param else float(sum(out_b)),
                         "param_bytes": float(sum(out_b)) if is_param else 0.0})
            metas.append({"op": node["op"], "inputs": [{"shape": list(x.shape), "dtype": "float32"} for x in self.ins[i] if x is not None],
                          "outputs": [{"shape": list(s), "dtype": "float32"} for s in self.outs[i]]})
        slots: dict[tuple[int, int], dict[int, list[int]]] = {}
        for i, inputs in enumerate(self.ins):
            for pos, x in enumerate(inputs):
                slots.setdefault((x.node, i), {}).setdefault(x.slot, []).append(pos)
        for (u, v), by_slot in slots.items():
            slot = max(by_slot, key=lambda s: math.prod(self.outs[u][s]))  # one edge per pair: the biggest tensor
            edges.append({"src": self.nodes[u]["id"], "dst": self.nodes[v]["id"],
                          "bytes": float(math.prod(self.outs[u][slot]) * dtype_bytes)})
            emeta.append({"src_output": slot, "dst_inputs": by_slot[slot]})
        prob = make_problem(recs, edges, devices=devices, memory=memory, link=link, name=name)
        order = {(int(prob.src[e]), int(prob.dst[e])): e for e in range(prob.m)}
        em = [None] * prob.m
        for rec, meta in zip(edges, emeta):
            em[order[(prob.index[rec["src"]], prob.index[rec["dst"]])]] = meta
        prob.node_meta = metas
        prob.edge_meta = em
        return prob


def mlp(batch: int, widths: Sequence[int], classes: int, **kw: Any) -> Problem:
    """A multi-layer perceptron's training step: ``relu(x W^T)`` layers, softmax cross-entropy."""
    tp = Tape()
    x = tp.input("x", (batch, widths[0]))
    y = tp.input("y", (batch,))
    for i, (a, b) in enumerate(zip(widths[:-1], widths[1:])):
        x = tp.unary("relu", tp.linear(x, tp.param(f"w{i}", (b, a))))
    logits = tp.linear(x, tp.param("w_out", (classes, widths[-1])))
    tp.loss(logits, y)
    return tp.training_problem(name=kw.pop("name", "mlp"), **kw)


def resnet(batch: int, channels: int, blocks: int, image: int, classes: int, **kw: Any) -> Problem:
    """A wide ResNet's training step: residual blocks of two 3x3 convolutions with batch norm."""
    tp = Tape()
    x = tp.input("x", (batch, 3, image, image))
    y = tp.input("y", (batch,))
    x = tp.unary("relu", tp.conv(x, tp.param("conv0", (channels, 3, 3, 3))))
    for i in range(blocks):
        h = tp.unary("relu", tp.batch_norm(tp.conv(x, tp.param(f"b{i}.conv1", (channels, channels, 3, 3))),
                                           tp.param(f"b{i}.bn1.w", (channels,)), tp.param(f"b{i}.bn1.b", (channels,))))
        h = tp.batch_norm(tp.conv(h, tp.param(f"b{i}.conv2", (channels, channels, 3, 3))),
                          tp.param(f"b{i}.bn2.w", (channels,)), tp.param(f"b{i}.bn2.b", (channels,)))
        x = tp.unary("relu", tp.binary("add", h, x))
    logits = tp.linear(tp.pool(x), tp.param("fc", (classes, channels)))
    tp.loss(logits, y)
    return tp.training_problem(name=kw.pop("name", "resnet"), **kw)


def rnn(batch: int, hidden: int, layers: int, steps: int, classes: int, **kw: Any) -> Problem:
    """A multi-layer LSTM unrolled over ``steps`` timesteps (four gate matmuls per input), the last
    top-layer state classified."""
    tp = Tape()
    y = tp.input("y", (batch,))
    xs = [tp.input(f"x{s}", (batch, hidden)) for s in range(steps)]
    for layer in range(layers):
        wx = {gname: tp.param(f"l{layer}.wx_{gname}", (hidden, hidden)) for gname in "ifgo"}
        wh = {gname: tp.param(f"l{layer}.wh_{gname}", (hidden, hidden)) for gname in "ifgo"}
        h = tp.input(f"h0_{layer}", (batch, hidden))
        c = tp.input(f"c0_{layer}", (batch, hidden))
        out = []
        for s in range(steps):
            pre = {gname: tp.binary("add", tp.linear(xs[s], wx[gname]), tp.linear(h, wh[gname])) for gname in "ifgo"}
            i_, f_, o_ = (tp.unary("sigmoid", pre[gname]) for gname in "ifo")
            g_ = tp.unary("tanh", pre["g"])
            c = tp.binary("add", tp.binary("mul", f_, c), tp.binary("mul", i_, g_))
            h = tp.binary("mul", o_, tp.unary("tanh", c))
            out.append(h)
        xs = out
    logits = tp.linear(xs[-1], tp.param("w_out", (classes, hidden)))
    tp.loss(logits, y)
    return tp.training_problem(name=kw.pop("name", "lstm"), **kw)
