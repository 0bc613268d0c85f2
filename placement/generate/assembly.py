"""The generator's machinery, shared by every graph family (docs/generator.md).

The cost model of one accelerator (roofline times in ms, bytes), the block builder that derives
backward ops from forward ops, templates stamped out and wired through named ports with numpy
(a million nodes in seconds), the problem's finishing touches (memory per device, jitter), and the
choice of a model size for a node target.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Sequence, Union

import numpy as np

from ..problem import Link, Problem


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


