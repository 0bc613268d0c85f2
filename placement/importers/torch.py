"""PyTorch in: a model's training step (or inference pass) as an ATen-level placement problem.

    python -m placement.importers.torch MODULE:FACTORY -o graph.json [--inference]
        [--optimizer adam|adamw|sgd|sgd-momentum|sgd-nesterov|rmsprop|adagrad] [--clip-grad-norm MAX]
        [--accumulate N] [--ema DECAY] [--zero-grad none|zeros] [--grad-scaler]
        [--cost measure|roofline|TIMES.json] [--device-spec h100|a100|FILE]

``FACTORY()`` returns ``(model, example_inputs)`` or ``(model, example_inputs, loss_fn)``. The step
is captured with ``make_fx`` over fake tensors (docs/importers.md says why not torch.export or
aot_autograd): a function running the forward pass through ``torch.func.functional_call``, the
loss, ``torch.autograd.grad`` and the optimizer's own per-tensor update (as torch.optim's
single-tensor Adam, AdamW, SGD, RMSprop or Adagrad writes it, in place), so forward, backward and
update are one ATen graph.

Modelling (every choice is in docs/importers.md):
- one node per ATen operator; pure views (schema: returns alias an input, no write) and
  ``getitem`` are folded into the producer of the tensor they view;
- a parameter is one node holding its persistent bytes: the weight (its output, read until its
  update) + the optimizer's states (Adam's two), + the gradient with ``--zero-grad zeros``; with the
  default ``none`` (``zero_grad(set_to_none=True)``) the gradient is the backward op's output, held
  with the weight to the step's end; its update operators are colocated with it;
- in-place operators write into an existing tensor: they cost time but allocate no output bytes;
  an operator writing a buffer (batch-norm running stats) is colocated with it;
- edges carry the bytes of the tensor consumed (a view's own bytes, at most its storage's);
- times in milliseconds: roofline on a device spec, measured on this machine's CPU, or a table.
"""
from __future__ import annotations

import argparse
import contextlib
import logging
import math
import operator
import os
import statistics
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator, Mapping, Sequence

from ..problem import Problem, ProblemError
from .build import GraphBuilder, check_output_path, hold_until_end, keep_until, write_native
from .costs import load_time_table, table_time
from .devicespec import DeviceSpec, device_spec

# optimizer -> state tensors per weight (each the weight's size), as torch.optim keeps them
OPTIMIZER_STATES = {"adam": 2, "adamw": 2, "sgd": 0, "sgd-momentum": 1, "sgd-nesterov": 1, "rmsprop": 1, "adagrad": 1}
OPTIMIZERS = tuple(OPTIMIZER_STATES)
COSTS = ("roofline", "measure")
ADAM_STATES = 2
LR, BETA1, BETA2, EPS = 1e-3, 0.9, 0.999, 1e-8
# torch.optim's defaults: AdamW's weight decay, RMSprop's alpha, Adagrad's eps; SGD's momentum as
# training recipes set it (torchvision's ResNet: 0.9)
ADAMW_DECAY, MOMENTUM, RMS_ALPHA, ADAGRAD_EPS = 1e-2, 0.9, 0.99, 1e-10
# optimizer.zero_grad(set_to_none=...): "none" (PyTorch 2.x's default) frees the gradients, so the
# backward allocates them; "zeros" keeps them, zeroed in place, persistent (the importer's only
# behaviour until session 42)
ZERO_GRADS = ("none", "zeros")
# torch.amp.GradScaler's defaults: the first step's loss scale, growth and backoff factors, interval
SCALER_INIT, SCALER_GROWTH, SCALER_BACKOFF, SCALER_INTERVAL = 2.0 ** 16, 2.0, 0.5, 2000


@dataclass
class Capture:
    """A captured step: the FX graph, the problem built from it, and how they correspond.

    owner: FX node name -> problem node id (folded views and getitems name their producer; the
    ``output`` node is absent). phase: problem node id -> input, param, buffer, constant, forward,
    backward or optimizer."""

    graph_module: Any
    problem: Problem
    owner: dict[str, str]
    phase: dict[str, str]
    param_nodes: dict[str, str] = field(default_factory=dict)  # parameter name -> node id
    flat: list[Any] = field(default_factory=list)  # the traced arguments, optimizer states as _Zeros

    @property
    def arguments(self) -> list[Any]:
        """The traced function's flat arguments (parameters, buffers, optimizer states, inputs),
        the optimizer states made real zeros on first use and kept."""
        if any(isinstance(x, _Zeros) for x in self.flat):
            self.flat = _real_arguments(self.flat)
        return self.flat


@dataclass(frozen=True)
class _Zeros:
    """An optimizer state not yet allocated: the trace needs only its shape, and Adam's two states
    are twice the model's weights in RAM (6 GB for GPT-2 large) that a capture never reads."""

    like: Any  # the parameter it belongs to

    def real(self) -> Any:
        return _import_torch().zeros_like(self.like)


def _real_arguments(flat: Sequence[Any]) -> list[Any]:
    """``flat`` with every ``_Zeros`` placeholder allocated (for running the step for real)."""
    return [x.real() if isinstance(x, _Zeros) else x for x in flat]


def _import_torch():
    try:
        import torch
    except ImportError:
        raise ProblemError("the PyTorch importer needs torch: pip install '.[torch]'") from None
    return torch


def dtype_name(dtype: Any) -> str:
    return str(dtype).removeprefix("torch.")


def _is_tensor(x: Any) -> bool:
    torch = _import_torch()
    return isinstance(x, torch.Tensor)


def _desc(t: Any) -> dict[str, Any]:
    if not _is_tensor(t):
        return {}
    return {"shape": [int(s) for s in t.shape], "dtype": dtype_name(t.dtype)}


def _sparse_bytes(t: Any) -> float | None:
    """Bytes a sparse COO tensor holds, its indices (int64, sparse_dim x nnz) and values (nnz x the
    dense dimensions); None for a strided tensor.

    Why: a sparse gradient (``nn.Embedding(sparse=True)``) has the dense shape of its weight but
    holds only the rows looked up; counted by its shape it was the whole weight again (12.8 MB
    instead of 0.17 MB for a 50,000 x 64 table read 640 times), in memory and on every edge."""
    torch = _import_torch()
    if t.layout != torch.sparse_coo:
        return None
    nnz = int(t._nnz())
    dense = math.prod(int(d) for d in t.shape[t.sparse_dim():])
    return float(t.sparse_dim() * nnz * 8 + nnz * dense * t.element_size())


def _nbytes(t: Any) -> float:
    """Bytes of a tensor as consumed: its elements, at most its storage (an expanded view of a
    scalar moves one element); a sparse tensor's indices and values."""
    if not _is_tensor(t):
        return 0.0
    sparse = _sparse_bytes(t)
    if sparse is not None:
        return sparse
    logical = t.numel() * t.element_size()
    try:
        return float(min(logical, t.untyped_storage().nbytes()))
    except (RuntimeError, NotImplementedError):
        return float(logical)


def _fresh_bytes(t: Any) -> float:
    """Bytes a newly made tensor allocates: its elements (a sparse tensor: its indices and values)."""
    if not _is_tensor(t):
        return 0.0
    sparse = _sparse_bytes(t)
    return sparse if sparse is not None else float(t.numel() * t.element_size())


def _flat_tensors(value: Any) -> list[Any]:
    from torch.utils._pytree import tree_leaves

    return [x for x in tree_leaves(value) if _is_tensor(x)]


# ----- the traced step ------------------------------------------------------------------------

def default_loss(out: Any) -> Any:
    """The output's own loss when it carries one (``.loss`` or ``["loss"]``), else the sum of its
    floating-point tensors."""
    loss = getattr(out, "loss", None)
    if loss is None and isinstance(out, Mapping):
        loss = out.get("loss")
    if loss is not None:
        return loss
    leaves = [t for t in _flat_tensors(out) if t.is_floating_point()]
    if not leaves:
        raise ProblemError("the model's output has no floating-point tensor to take a loss from; pass loss_fn")
    total = leaves[0].sum()
    for t in leaves[1:]:
        total = total + t.sum()
    return total


def _adam_update(p: Any, g: Any, m: Any, v: Any) -> None:
    """torch.optim.Adam's single-tensor update at step 1 (same ops, same temporaries, in place)."""
    bias1, bias2_sqrt = 1 - BETA1, math.sqrt(1 - BETA2)
    m.lerp_(g, 1 - BETA1)
    v.mul_(BETA2).addcmul_(g, g, value=1 - BETA2)
    denom = (v.sqrt() / bias2_sqrt).add_(EPS)
    p.addcdiv_(m, denom, value=-LR / bias1)


def _clip_grad_norm(grads: Sequence[Any], max_norm: float) -> None:
    """``torch.nn.utils.clip_grad_norm_(params, max_norm, foreach=False)`` on the gradients: the
    total 2-norm by PyTorch's own ``get_total_norm`` (a norm per gradient, stacked, normed), then
    every gradient multiplied in place by ``clamp(max_norm / (total + 1e-6), max=1)``, as
    torch.nn.utils does (no Python branch on the norm). Every update then waits for every gradient."""
    torch = _import_torch()
    total = torch.nn.utils.get_total_norm(list(grads), 2.0, foreach=False)
    coef = torch.clamp(max_norm / (total + 1e-6), max=1.0)
    for g in grads:
        g.mul_(coef)


def _unscale(grads: Sequence[Any], scale: Any) -> Any:
    """``torch.amp.GradScaler.unscale_``: every gradient multiplied in place by 1 / scale in one pass
    that also flags an inf or a nan (PyTorch's own ``_amp_foreach_non_finite_check_and_unscale_``),
    here one call per gradient, each with a one-element flag of its own, the flags then summed into
    the step's flag. Returns that flag.

    Why per gradient: GradScaler makes one foreach call over every gradient of a device; as one
    op it would be one node writing every gradient, colocating them all on one device, while
    PyTorch runs it per device over whatever gradients each holds. The flags are 4 bytes each."""
    torch = _import_torch()
    inv_scale = scale.double().reciprocal().float()  # as GradScaler.unscale_ computes it
    flags = []
    for g in grads:
        flag = torch.full((1,), 0.0, dtype=torch.float32, device=g.device)
        torch._amp_foreach_non_finite_check_and_unscale_([g], flag, inv_scale)
        flags.append(flag)
    return torch.cat(flags).sum().reshape(1)


def _sgd_update(p: Any, g: Any) -> None:
    """torch.optim.SGD's update without momentum or weight decay."""
    p.add_(g, alpha=-LR)


def _update(optimizer: str, p: Any, g: Any, states: Sequence[Any]) -> None:
    """One weight's update by ``optimizer``, as torch.optim's single-tensor code writes it (same ops,
    same temporaries, in place), in its steady state: the states exist (SGD's first step clones the
    gradient into a new momentum buffer; every later step, which the problem models, updates it
    in place). Values equal torch.optim's at any step for SGD, RMSprop and Adagrad, at step 1 for
    Adam and AdamW (their bias corrections depend on the step count)."""
    if optimizer in ("adam", "adamw"):
        if optimizer == "adamw":  # decoupled weight decay, before the moments
            p.mul_(1 - LR * ADAMW_DECAY)
        _adam_update(p, g, states[0], states[1])
    elif optimizer == "sgd":
        _sgd_update(p, g)
    elif optimizer in ("sgd-momentum", "sgd-nesterov"):
        buf = states[0]
        buf.mul_(MOMENTUM).add_(g)
        p.add_(g.add(buf, alpha=MOMENTUM) if optimizer == "sgd-nesterov" else buf, alpha=-LR)
    elif optimizer == "rmsprop":
        square_avg = states[0]
        square_avg.mul_(RMS_ALPHA).addcmul_(g, g, value=1 - RMS_ALPHA)
        p.addcdiv_(g, square_avg.sqrt().add_(EPS), value=-LR)
    elif optimizer == "adagrad":
        state_sum = states[0]
        state_sum.addcmul_(g, g, value=1)
        p.addcdiv_(g, state_sum.sqrt().add_(ADAGRAD_EPS), value=-LR)
    else:
        raise ProblemError(f"optimizer {optimizer!r}: expected one of {', '.join(OPTIMIZERS)}")


def torch_optimizer(optimizer: str, params: Sequence[Any]) -> Any:
    """The torch.optim optimizer whose step :func:`_update` traces (single-tensor, ``foreach=False``)."""
    torch = _import_torch()
    made = {
        "adam": lambda: torch.optim.Adam(params, lr=LR, foreach=False),
        "adamw": lambda: torch.optim.AdamW(params, lr=LR, weight_decay=ADAMW_DECAY, foreach=False),
        "sgd": lambda: torch.optim.SGD(params, lr=LR, foreach=False),
        "sgd-momentum": lambda: torch.optim.SGD(params, lr=LR, momentum=MOMENTUM, foreach=False),
        "sgd-nesterov": lambda: torch.optim.SGD(params, lr=LR, momentum=MOMENTUM, nesterov=True, foreach=False),
        "rmsprop": lambda: torch.optim.RMSprop(params, lr=LR, alpha=RMS_ALPHA, eps=EPS, foreach=False),
        "adagrad": lambda: torch.optim.Adagrad(params, lr=LR, eps=ADAGRAD_EPS, foreach=False),
    }
    if optimizer not in made:
        raise ProblemError(f"optimizer {optimizer!r}: expected one of {', '.join(OPTIMIZERS)}")
    return made[optimizer]()


@dataclass
class _Layout:
    """The flat argument list of the traced function, role by role."""

    param_names: list[str]
    buffer_names: list[str]
    n_states: int
    input_spec: Any  # pytree spec of (args, kwargs)
    n_inputs: int
    # trainable parameters the traced step gave no gradient (never read, or read only where no
    # gradient flows): no gradient, no optimizer state and no update, as in eager PyTorch
    without_gradient: set[str] = field(default_factory=set)
    # parameters whose gradient is sparse (nn.Embedding(sparse=True)): no dense gradient persists
    sparse_gradient: set[str] = field(default_factory=set)
    # gradient accumulation: micro-batches per step; with more than one, each parameter's first state
    # is its gradient buffer (the micro-batches add into it), and micro_ends names the last FX node
    # of each micro-batch but the last
    accumulate: int = 1
    micro_ends: list[str] = field(default_factory=list)
    # 1 when each parameter's first state is a traced gradient buffer the backward's gradients are
    # added into (accumulation; zero_grad "zeros" with a GradScaler), else 0
    grad_slot: int = 0
    # whether a weight's gradient is persistent bytes (zero_grad "zeros", or a gradient buffer), or
    # exists only from the backward op that makes it to the step's end (zero_grad "none")
    grad_persistent: bool = True

    def role(self, pos: int) -> tuple[str, Any]:
        p, b = len(self.param_names), len(self.buffer_names)
        if pos < p:
            return "param", self.param_names[pos]
        pos -= p
        if pos < b:
            return "buffer", self.buffer_names[pos]
        pos -= b
        if pos < p * self.n_states:
            return "state", (self.param_names[pos // self.n_states], pos % self.n_states)
        return "input", pos - p * self.n_states


def _fake_arguments(flat: Sequence[Any]) -> list[Any]:
    """The traced arguments as fake tensors of one mode (make_fx traces in the mode it finds), the
    ``_Zeros`` placeholders made there without allocating; real tensors are viewed, not copied."""
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.fx.experimental.symbolic_shapes import ShapeEnv

    torch = _import_torch()
    mode = FakeTensorMode(allow_fallback_kernels=True, allow_non_fake_inputs=True, shape_env=ShapeEnv(), static_shapes=True)
    fakes = [mode.from_tensor(x.like if isinstance(x, _Zeros) else x) if _is_tensor(x) or isinstance(x, _Zeros) else x for x in flat]
    with mode:
        return [torch.zeros_like(f) if isinstance(x, _Zeros) else f for x, f in zip(flat, fakes)]


@contextlib.contextmanager
def _checkpoints_without_reentry() -> Iterator[None]:
    """While tracing, ``torch.utils.checkpoint`` with ``use_reentrant=True`` (PyTorch's default
    when the flag is not given) runs as ``use_reentrant=False``.

    Why: the reentrant form recomputes and differentiates its block in a nested backward that the
    traced ``autograd.grad`` never enters (eager PyTorch refuses ``.grad()`` there; under tracing
    the block's parameters silently got no gradient and no update: a Linear under it lost its
    backward and its Adam step). Both forms compute the same gradients from the same recomputation
    in the backward, which is what the problem models."""
    from torch.utils import checkpoint as ckpt

    reentrant = ckpt.CheckpointFunction.apply

    def without_reentry(function: Callable, preserve_rng_state: bool, *args: Any) -> Any:
        return ckpt.checkpoint(function, *args, use_reentrant=False, preserve_rng_state=preserve_rng_state)

    ckpt.CheckpointFunction.apply = without_reentry
    try:
        yield
    finally:
        ckpt.CheckpointFunction.apply = reentrant


@contextlib.contextmanager
def _causal_hints_as_given() -> Iterator[None]:
    """While tracing, ``nn.TransformerEncoder`` and ``nn.TransformerDecoder`` take an attention
    mask's causal hint as given (``is_causal`` / ``tgt_is_causal``; not given: not causal).

    Why: given a mask and no hint, they compare the mask's values with a causal mask to pick a
    fused kernel. Tracing sees no values (fake tensors), so every such model was refused ("could
    not guard on data-dependent expression"), although a causal mask built in the forward is the
    usual way to write a GPT-style model with them. The hint only chooses a kernel: the layers
    apply the mask either way, so the step computes the same (a test compares with the hint
    passed as False by hand)."""
    from torch.nn.modules import transformer

    detect = transformer._detect_is_causal_mask

    def as_given(mask: Any, is_causal: bool | None = None, size: int | None = None) -> bool:
        return is_causal is True

    transformer._detect_is_causal_mask = as_given
    try:
        yield
    finally:
        transformer._detect_is_causal_mask = detect


@contextlib.contextmanager
def _distribution_checks_off() -> Iterator[None]:
    """While tracing, ``torch.distributions`` objects skip their argument checks (the default
    ``validate_args``; one given explicitly still applies).

    Why: each check tests values (``scale > 0``, a sample in the support) and raises in Python if
    one fails, a branch on a tensor's value that tracing cannot take: every VAE or policy-gradient
    step built on ``Normal``, ``Categorical``... was refused ("the step branches on a tensor's
    value"). The checks compute nothing the step uses; what is left is the step itself, without
    the few small comparison ops eager PyTorch runs for them."""
    from torch.distributions import Distribution

    was = Distribution._validate_args
    Distribution.set_default_validate_args(False)
    try:
        yield
    finally:
        Distribution.set_default_validate_args(was)


@contextlib.contextmanager
def _packed_sequences_refused(model_name: str) -> Iterator[None]:
    """While tracing, packing a padded batch (``nn.utils.rnn.pack_padded_sequence``, and
    ``pack_sequence`` through it) stops the capture with one line saying why.

    Why: the packed data has sum(lengths) rows and its ``batch_sizes`` max(lengths) entries, sizes
    given by the lengths' values, which tracing does not see. PyTorch's fake kernel guesses the data
    as [max length, ...] (a wrong size, silently) and leaves batch_sizes symbolic, so the capture
    failed later, inside nn.GRU/nn.LSTM, as ``TypeError: zeros(): argument 'size' failed to unpack
    the object at pos 2 ... FakeTensor``, which names neither the cause nor a way out."""
    torch = _import_torch()
    vf = torch._VF
    own = "_pack_padded_sequence" in vars(vf)
    original = vf._pack_padded_sequence

    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise ProblemError(f"cannot trace {model_name}: pack_padded_sequence packs the batch by its lengths' values "
                           "(sum(lengths) rows), a size PyTorch cannot trace: every tensor needs a static size; run "
                           "the RNN on the padded batch and mask the padding (or gather each sequence's last step)")

    vf._pack_padded_sequence = refuse
    try:
        yield
    finally:
        if own:
            vf._pack_padded_sequence = original
        else:
            del vf._pack_padded_sequence


def _set_step_mode(model: Any, train: bool) -> None:
    """The modes the step runs in: inference, everything in eval mode; training, a model in training
    mode as it stands, and a model wholly in eval mode put in training mode.

    Why not ``model.train()`` on every training capture: fine-tuning code puts parts of a model
    in eval mode on purpose after ``model.train()`` (a frozen backbone's batch norm on its running
    statistics, dropout off), and the step it runs is that one. Forced back to training mode, the
    capture computed batch statistics and wrote running statistics the real step does not (another
    loss), and restoring only the top module's mode left those parts in training mode in the
    user's model."""
    if not train:
        model.eval()
    elif not model.training:
        model.train(True)


def _micro_batches(leaves: list[Any], tensor_pos: list[int], n: int, model_name: str) -> None:
    """Gradient accumulation splits every tensor input along its first dimension into ``n`` equal
    micro-batches (as a training loop feeds them): refuse inputs that cannot be split so."""
    for i in tensor_pos:
        t = leaves[i]
        if t.dim() == 0 or t.shape[0] % n:
            raise ProblemError(f"cannot trace {model_name} with accumulate={n}: every tensor input is split along its "
                               f"first dimension into {n} equal micro-batches, and input {tensor_pos.index(i)} has shape "
                               f"{list(t.shape)}")


def _trace(model: Any, args: tuple, kwargs: dict, *, train: bool, optimizer: str, loss_fn: Callable | None,
           clip_grad_norm: float | None = None, accumulate: int = 1, ema: float | None = None, zero_grad: str = "none",
           grad_scaler: bool = False) -> tuple[Any, _Layout, list[Any]]:
    torch = _import_torch()
    from torch.fx.experimental.proxy_tensor import get_proxy_mode, make_fx
    from torch.func import functional_call
    from torch.nn.utils.stateless import _reparametrize_module
    from torch.utils._pytree import tree_flatten, tree_unflatten

    params = {n: p for n, p in model.named_parameters() if (p.requires_grad or not train)}
    frozen = {n: p for n, p in model.named_parameters() if n not in params}
    if train and not params:  # autograd.grad would fail with "inputs argument cannot be empty"
        raise ProblemError(f"{type(model).__name__} has no trainable parameter (none requires grad): "
                           "nothing for a training step to update; capture its forward pass with --inference")
    buffers = {**frozen, **dict(model.named_buffers())}
    # the gradient buffer, when micro-batches add into it, or when a GradScaler's unscale and the
    # update read gradients kept zeroed in place (the backward adds into them: its own gradient is a
    # temporary until then, not held to the update as a second copy)
    slot = 1 if train and (accumulate > 1 or (grad_scaler and zero_grad == "zeros")) else 0
    grad_scaler = grad_scaler and train
    n_opt = OPTIMIZER_STATES[optimizer]
    ema_slot = 1 if train and ema is not None else 0  # the weight's EMA copy, after the optimizer's states
    n_states = n_opt + slot + ema_slot if train else 0
    states = [_Zeros(p.detach()) for p in params.values() for _ in range(n_states)]
    leaves, spec = tree_flatten((args, kwargs))
    tensor_pos = [i for i, x in enumerate(leaves) if _is_tensor(x)]
    if slot and accumulate > 1:
        _micro_batches(leaves, tensor_pos, accumulate, type(model).__name__)
    layout = _Layout(list(params), list(buffers), n_states, spec, len(tensor_pos), accumulate=accumulate if train else 1,
                     grad_slot=slot, grad_persistent=train and (zero_grad == "zeros" or bool(slot)))
    p_count, b_count = len(params), len(buffers)

    def sparse_refused(pname: str) -> ProblemError:
        what = f"cannot trace {type(model).__name__}: {pname} gets a sparse gradient (nn.Embedding or nn.EmbeddingBag with sparse=True)"
        if slot:
            return ProblemError(f"{what}, which gradient accumulation does not take here (a dense buffer would "
                                "hold it): use sparse=False, or no accumulation")
        why = "Adam does not support" if optimizer == "adam" else f"the importer's {optimizer} update does not take"
        if grad_scaler:
            return ProblemError(f"{what}, which the importer's GradScaler unscale does not take (PyTorch coalesces it "
                                "first): use sparse=False, or no --grad-scaler")
        return ProblemError(f"{what}, which {why}: use --optimizer sgd, or sparse=False")

    def step(*flat: Any) -> Any:
        # autocast's weight cache back on (make_fx turns it off while tracing): eager PyTorch casts a
        # weight to the autocast dtype once per autocast region and reuses the copy; with the cache
        # off the capture cast it again at every use and cast each use's gradient back, so a weight
        # read twice under fp16 autocast held two half-precision copies until the backward (an
        # MLP reusing its layers: 13% above PyTorch's measured peak). The cached copy is made inside
        # the traced step (a traced op) and dropped when the outermost autocast region ends.
        torch.set_autocast_cache_enabled(True)
        ps = dict(zip(layout.param_names, flat[:p_count]))
        bs = dict(zip(layout.buffer_names, flat[p_count:p_count + b_count]))
        st = flat[p_count + b_count:p_count + b_count + p_count * n_states]
        vals = list(leaves)
        for i, x in zip(tensor_pos, flat[p_count + b_count + p_count * n_states:]):
            vals[i] = x
        a, kw = tree_unflatten(vals, spec)
        if not train:
            with torch.no_grad():
                return functional_call(model, {**ps, **bs}, tuple(a), kw)
        for p in ps.values():
            p.requires_grad_(True)
        scaler: dict[str, Any] = {}  # GradScaler's loss scale, made with the first loss

        def _loss_and_grads(a: Any, kw: Any, scale: int = 1) -> tuple[Any, Any]:
            # the module's tensors stay swapped for the traced ones through the backward (as
            # functional_call swaps them, weights tied), not only through the forward: a block under
            # torch.utils.checkpoint is recomputed inside autograd.grad, and with the model's own
            # tensors back it read them as constants and its batch norm wrote the user's buffers
            # (capturing added 1 to num_batches_tracked; the graph updated the model's running
            # statistics, not the step's)
            with _reparametrize_module(model, {**ps, **bs}, tie_weights=True):
                out = model(*a, **kw)
                loss = loss_fn(out) if loss_fn is not None else default_loss(out)
                if not _is_tensor(loss) or loss.numel() != 1:
                    raise ProblemError(f"the loss must be a scalar tensor, got {type(loss).__name__} {getattr(loss, 'shape', '')}")
                if scale > 1:  # as a training loop scales each micro-batch's loss: (loss / N).backward()
                    loss = loss / scale
                scaled = loss
                if grad_scaler:  # scaler.scale(loss).backward(): the loss times the float32 scale
                    if not scaler:
                        scaler["scale"] = torch.full((1,), SCALER_INIT, dtype=torch.float32, device=loss.device)
                    scaled = loss * scaler["scale"]
                return loss, torch.autograd.grad(scaled, list(ps.values()), allow_unused=True)

        if not slot:
            loss, grads = _loss_and_grads(a, kw)
        else:  # micro-batch by micro-batch, each gradient added into the weight's gradient buffer
            losses = []
            for j in range(accumulate):
                micro = [x.narrow(0, j * x.shape[0] // accumulate, x.shape[0] // accumulate) if _is_tensor(x) else x
                         for x in vals] if accumulate > 1 else vals
                a_j, kw_j = tree_unflatten(micro, spec)
                loss_j, grads_j = _loss_and_grads(a_j, kw_j, scale=accumulate)
                losses.append(loss_j)
                with torch.no_grad():
                    for i, (pname, g) in enumerate(zip(ps, grads_j)):
                        if g is not None:
                            if g.layout != torch.strided:
                                raise sparse_refused(pname)
                            st[n_states * i].add_(g)
                if j < accumulate - 1:
                    layout.micro_ends.append(list(get_proxy_mode().tracer.graph.nodes)[-1].name)
            loss = losses[0]
            for loss_j in losses[1:]:
                loss = loss + loss_j
            grads = [st[n_states * i] if g is not None else None for i, g in enumerate(grads_j)]
        with torch.no_grad():
            if grad_scaler:  # scaler.unscale_(optimizer), before any clipping, as the AMP recipe orders them
                for pname, g in zip(ps, grads):
                    if g is not None and g.layout != torch.strided:
                        raise sparse_refused(pname)
                scaler["found"] = _unscale([g for g in grads if g is not None], scaler["scale"])
            if clip_grad_norm is not None:
                _clip_grad_norm([g for g in grads if g is not None], clip_grad_norm)
            for i, (pname, p, g) in enumerate(zip(ps, ps.values(), grads)):
                if g is None:
                    layout.without_gradient.add(pname)
                    continue
                if g.layout != torch.strided:
                    if optimizer != "sgd":  # torch.optim.Adam refuses it too, at its first step
                        raise sparse_refused(pname)
                    layout.sparse_gradient.add(pname)
                _update(optimizer, p, g, st[n_states * i + slot:n_states * i + slot + n_opt])
                if ema_slot:  # after the update, as AveragedModel.update_parameters / timm's ModelEma run
                    st[n_states * i + slot + n_opt].lerp_(p, 1 - ema)
            if grad_scaler:  # scaler.update(): the scale grows, or backs off on an inf, in place
                growth = torch.zeros((1,), dtype=torch.int32, device=scaler["scale"].device)
                torch._amp_update_scale_(scaler["scale"], growth, scaler["found"], SCALER_GROWTH, SCALER_BACKOFF,
                                         SCALER_INTERVAL)
        return loss, [g for g in grads if g is not None]

    flat = [p.detach() for p in params.values()] + [b.detach() for b in buffers.values()] + states + [leaves[i] for i in tensor_pos]
    modes = [(m, m.training) for m in model.modules()]
    _set_step_mode(model, train)
    # torch's fake-tensor mode logs its own traceback (ERROR) when an op's shape check fails;
    # the failure is reported below in one line, so that log is muted while tracing
    fake_log = logging.getLogger("torch._subclasses.fake_tensor")
    was_disabled, fake_log.disabled = fake_log.disabled, True
    try:
        with (_checkpoints_without_reentry(), _causal_hints_as_given(), _distribution_checks_off(),
              _packed_sequences_refused(type(model).__name__)):
            gm = make_fx(step, tracing_mode="fake", _allow_non_fake_inputs=True, record_module_stack=True)(*_fake_arguments(flat))
    except ProblemError:
        raise
    except Exception as exc:  # tracing failures come in many types; name the model and the cause
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        if type(exc).__name__ == "DynamicOutputShapeException":  # torch names the op (e.g. aten._ctc_loss.Tensor)
            raise ProblemError(f"cannot trace {type(model).__name__}: {first} has an output whose size depends on the "
                               "data, which PyTorch cannot trace: every tensor needs a static size; compute that op "
                               "outside the step or use one whose output size is fixed") from None
        if type(exc).__name__ == "GuardOnDataDependentSymNode":  # e.g. "if x.sum() > 0:" or ".item()" in the forward
            what = first.split(" (unhinted")[0]
            where = _user_line(exc)
            if "extract specialized integer" in first:  # a size or int from a value: F.one_hot(y) without num_classes
                raise ProblemError(f"cannot trace {type(model).__name__}: the step takes a size or a Python number from a "
                                   f"tensor's value{where} ({what}): PyTorch traces one graph for every input, so sizes "
                                   "may depend on shapes only (give F.one_hot its num_classes, torch.arange a fixed end)"
                                   ) from None
            raise ProblemError(f"cannot trace {type(model).__name__}: the step branches on a tensor's value{where} ({what}): "
                               "PyTorch traces one graph for every input, so control flow may depend on shapes only, "
                               "not on values (a Python if on a tensor, .item(), bool(tensor))") from None
        hint = ""
        if slot:  # the usual cause: labels in a closure keep the whole batch while the output is a micro-batch's
            hint = (f" (with accumulate={accumulate} every tensor input is split into micro-batches along its first "
                    "dimension, but tensors the loss_fn closes over (labels) are not: pass them as inputs and return "
                    "the loss from the model)")
        raise ProblemError(f"cannot trace {type(model).__name__}: {type(exc).__name__}: {first}{hint}") from None
    finally:
        fake_log.disabled = was_disabled
        for module, mode in modes:  # each module's own mode back, as the user set it
            module.training = mode
    _check_static_shapes(gm, type(model).__name__)
    return gm, layout, flat


def _user_line(exc: BaseException) -> str:
    """`` at FILE:LINE (source)`` of the innermost frame of ``exc`` in the user's code (not PyTorch's,
    not this package's, not the standard library's), or "" when there is none: where a refused
    model does the untraceable thing (torch's own message names a symbol, ``u0``)."""
    import traceback

    torch = _import_torch()
    skip = tuple(os.path.dirname(m.__file__) + os.sep for m in (torch, os, contextlib))
    skip += (os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep,)  # placement/
    frames = [fs for fs in traceback.extract_tb(exc.__traceback__)
              if fs.filename and not fs.filename.startswith("<") and not os.path.abspath(fs.filename).startswith(skip)]
    if not frames:
        return ""
    fs = frames[-1]
    return f" at {os.path.basename(fs.filename)}:{fs.lineno} ({(fs.line or '').strip()})"


def _check_static_shapes(gm: Any, model_name: str) -> None:
    """Every tensor of the step must have a size known before it runs (the problem's bytes and
    costs are sizes). An op whose output size depends on the values (``nonzero``, boolean-mask
    indexing, ``unique``) traces with a symbolic size; name the first such op."""
    for node in gm.graph.nodes:
        if node.op != "call_function":
            continue
        for t in _flat_tensors(node.meta.get("val")):
            if not all(isinstance(d, int) for d in t.shape):
                raise ProblemError(f"cannot trace {model_name}: {node.name} ({_op_name(node.target)}) has an output whose size "
                                   f"depends on the data ({list(t.shape)}): every tensor needs a static size; pad to a "
                                   "fixed size or compute a mask instead")


# ----- graph -> problem ----------------------------------------------------------------------

@dataclass(frozen=True)
class _Ref:
    """Where an FX value lives: output ``out`` of problem node ``node`` (``out`` None: the node's
    whole tuple of outputs, resolved by getitem; ``views``: a list of views of one tensor)."""

    node: str
    out: int | None = 0
    views: bool = False


def _op_name(target: Any) -> str:
    packet = getattr(target, "overloadpacket", None)
    if packet is not None:
        return f"aten.{packet.__name__}" if getattr(target, "namespace", "aten") == "aten" else f"{target.namespace}.{packet.__name__}"
    return getattr(target, "__name__", str(target))


def _alias(target: Any) -> tuple[bool, list[int], list[bool]]:
    """From the op's schema: is it a pure view; the positions of the arguments it writes in place;
    per return, is it a fresh tensor (not an alias of an argument)."""
    schema = getattr(target, "_schema", None)
    if schema is None:
        return False, [], []
    writes = [i for i, a in enumerate(schema.arguments) if a.alias_info is not None and a.alias_info.is_write]
    rets = schema.returns
    view = bool(rets) and not writes and all(r.alias_info is not None and not r.alias_info.is_write for r in rets)
    return view, writes, [r.alias_info is None for r in rets]


VIEW_LIKE = {"aten._unsafe_view", "aten.lift_fresh"}  # view-like by implementation, not by schema
# Ops that update arguments in place without saying so in their schema: batch norm's running stats.
UNDECLARED_WRITES = {"aten.native_batch_norm": (3, 4), "aten.cudnn_batch_norm": (3, 4), "aten.miopen_batch_norm": (3, 4)}


def _written_args(node: Any, positions: Sequence[int]) -> list[Any]:
    """The FX nodes an op writes in place, from the schema positions of its written arguments: each
    given positionally or by keyword (``out=``), a list argument flattened.

    Why keywords: an ``out=`` tensor is a keyword-only argument, so ``node.args`` never holds it.
    Spectral norm's power iteration writes its ``_u`` and ``_v`` buffers through
    ``F.normalize(..., out=)`` (``aten.div.out``); read from ``node.args`` only, those writes were
    not seen: the op was not colocated with the buffer it updates, nor ordered after earlier
    reads of it."""
    schema = getattr(node.target, "_schema", None)
    found: list[Any] = []
    for w in positions:
        if w < len(node.args):
            arg = node.args[w]
        elif schema is not None and w < len(schema.arguments):
            arg = node.kwargs.get(schema.arguments[w].name)
        else:
            continue
        found.extend(a for a in (arg if isinstance(arg, (list, tuple)) else [arg]) if hasattr(a, "op"))
    return found


def _tensor_args(node: Any) -> list[Any]:
    """The FX nodes among an op's arguments, in argument order (lists flattened)."""
    from torch.fx.node import map_arg

    found: list[Any] = []
    map_arg((node.args, node.kwargs), lambda n: found.append(n) or n)
    return [n for n in found if _is_tensor(n.meta.get("val"))]


FUSED_RECURRENT = ("aten.mkldnn_rnn_layer", "aten.mkldnn_rnn_layer_backward")


def _recurrent_flops(name: str, args: Any) -> float | None:
    """FLOPs of a fused recurrent layer (nn.LSTM traced on CPU becomes one ``mkldnn_rnn_layer``
    per layer and direction, all time steps inside), or None for any other op.

    torch's flop counter has no formula for it, and one FLOP per element undercounts it by the
    hidden size: the layer runs T steps of a [B, I] x [I, G] and a [B, H] x [H, G] matmul (G = the
    gate rows of the weights, 4H for an LSTM), 2·T·B·G·(I + H) FLOPs forward; the backward does
    the same products for the input/hidden gradients and again for the weight gradients (twice
    the forward)."""
    if name not in FUSED_RECURRENT:
        return None
    x, w_ih, w_hh = args[0], args[1], args[2]
    if not all(_is_tensor(t) for t in (x, w_ih, w_hh)) or x.dim() != 3:
        return None
    steps_batch = x.shape[0] * x.shape[1]
    forward = 2.0 * steps_batch * w_ih.shape[0] * (w_ih.shape[1] + w_hh.shape[1])
    return forward if name == "aten.mkldnn_rnn_layer" else 2.0 * forward


def _flops(node: Any) -> tuple[float, bool]:
    """FLOPs of an op and whether it is matmul-class (torch's flop counter formulas, plus
    scaled-dot-product attention on CPU); other ops count one FLOP per element."""
    from torch.utils.flop_counter import flop_registry
    from torch.fx.node import map_arg

    target = node.target
    packet = getattr(target, "overloadpacket", None)
    args, kwargs = map_arg((node.args, node.kwargs), lambda n: n.meta.get("val"))
    out = node.meta.get("val")
    name = _op_name(target)
    if name in ("aten._scaled_dot_product_flash_attention_for_cpu", "aten._scaled_dot_product_flash_attention_for_cpu_backward"):
        q, k = (args[0], args[1]) if name.endswith("cpu") else (args[1], args[2])
        b_h = math.prod(q.shape[:-2])
        work = 4.0 * b_h * q.shape[-2] * k.shape[-2] * q.shape[-1]
        return (work if name.endswith("cpu") else 2 * work), True
    recurrent = _recurrent_flops(name, args)
    if recurrent is not None:
        return recurrent, True
    if packet in flop_registry:
        try:
            return float(flop_registry[packet](*args, **kwargs, out_val=out)), True
        except Exception:  # a formula that does not fit this overload: fall back to elements
            pass
    elems = max([t.numel() for t in _flat_tensors(out)] + [t.numel() for t in _flat_tensors(args)] + [0])
    return float(elems), False


def _roofline(node: Any, spec: DeviceSpec) -> float:
    flops, matmul = _flops(node)
    ins = _tensor_args(node)
    moved = sum(_nbytes(a.meta["val"]) for a in ins) + sum(_fresh_bytes(t) for t in _flat_tensors(node.meta.get("val")))
    vals = [a.meta["val"] for a in ins] + _flat_tensors(node.meta.get("val"))
    dtype = next((dtype_name(t.dtype) for t in vals if t.is_floating_point()), "float32")
    return spec.roofline_ms(flops, moved, dtype, matmul)


class _UnionFind:
    def __init__(self) -> None:
        self.parent: dict[str, str] = {}

    def find(self, x: str) -> str:
        self.parent.setdefault(x, x)
        while self.parent[x] != x:
            self.parent[x] = self.parent[self.parent[x]]
            x = self.parent[x]
        return x

    def union(self, a: str, b: str) -> None:
        ra, rb = self.find(a), self.find(b)
        if ra != rb:
            self.parent[rb] = ra


def _module_path(node: Any) -> str:
    stack = node.meta.get("nn_module_stack") or {}
    if not stack:
        return ""
    path = list(stack.values())[-1]
    path = path[0] if isinstance(path, tuple) else path
    return str(path).replace("L['self'].", "").replace("L__self___", "")


def _storage_key(t: Any) -> tuple | None:
    """What makes two tensors the same memory: storage, offset, shape and strides (None for a
    tensor on the meta device, which has no memory to tell them apart)."""
    if t.is_meta:
        return None
    return (t.untyped_storage().data_ptr(), t.storage_offset(), tuple(t.shape), tuple(t.stride()))


def _stored_state(layout: _Layout, flat: Sequence[Any]) -> dict[tuple, str]:
    """The problem node of each parameter and buffer, by the memory its tensor in ``flat`` uses.

    Why: a block under ``torch.utils.checkpoint`` is recomputed during autograd.grad, after
    functional_call has put the module's own parameters back, so the trace reads them as constants
    (``get_attr``). They are the same tensors as the parameters traced as inputs (flat holds
    detached views of them): read as such, they cost no second copy of the weights, and the
    optimizer's in-place update waits for those reads."""
    p = len(layout.param_names)
    out: dict[tuple, str] = {}
    named = [(flat[i], f"param:{name}") for i, name in enumerate(layout.param_names)]
    named += [(flat[p + i], f"buffer:{name}") for i, name in enumerate(layout.buffer_names)]
    for t, nid in named:
        key = _storage_key(t)
        if key is not None:
            out.setdefault(key, nid)
    return out


def _build(gm: Any, layout: _Layout, *, train: bool, optimizer: str, cost: str | Mapping[str, float], spec: DeviceSpec,
           flat: list[Any], name: str, devices: int) -> Capture:
    b = GraphBuilder()
    ref: dict[Any, _Ref] = {}  # FX node -> where its value lives
    writes_into: dict[str, list[str]] = {}  # op node -> producers of the tensors it writes in place
    storage: dict[str, tuple[str, int | None]] = {}  # in-place op -> (producer, output) of the tensor it returns
    # (producer, output) of a tensor -> the ops that read it since its last in-place write: a later
    # write must wait for them (write after read), so each gets an ordering edge to the writer
    readers: dict[tuple[str, int | None], list[str]] = {}
    war: list[tuple[str, str]] = []  # (reader, later in-place writer of what it read)
    # (producer, output) of a tensor -> the op that wrote it in place last: every later reader waits
    # for it (read after write), whichever view of the tensor it reads through
    last_write: dict[tuple[str, int | None], str] = {}
    owner: dict[str, str] = {}
    phase: dict[str, str] = {}
    param_nodes: dict[str, str] = {}
    # Training: the weight is the node's output, read until its update at the step's end (so a copy
    # on another device is charged there too); optimizer states and, with zero_grad "zeros" (or a
    # gradient buffer), the gradient are persistent bytes. With zero_grad "none" the gradient is the
    # output of the backward op that makes it, held to the step's end (_hold_gradients).
    # Inference: nothing updates the weight, so it is persistent bytes.
    grad_factor = 1 if train and layout.grad_persistent else 0
    state_factor = (grad_factor + layout.n_states - layout.grad_slot) if train else 1
    op_nodes: list[Any] = []
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]

    for pos, node in enumerate(placeholders):
        val = node.meta["val"]
        role, key = layout.role(pos)
        if role == "param":
            nid = f"param:{key}"
            size = _fresh_bytes(val)
            if key in layout.without_gradient:  # kept as it is, like a buffer: only the weight persists
                b.node(nid, param_bytes=size, op="placeholder.param", outputs=[_desc(val)] * (1 + layout.n_states))
            elif key in layout.sparse_gradient:
                # SGD (Adam is refused): the weight, read until its update; the gradient is the sparse
                # tensor the backward makes (its rows only), freed by the update, not a dense persistent
                # one (PyTorch's zero_grad leaves a sparse gradient with no entries)
                b.node(nid, param_bytes=(state_factor - grad_factor) * size, out_bytes=size, op="placeholder.param",
                       outputs=[_desc(val)] * (1 + layout.n_states))
            else:
                b.node(nid, param_bytes=state_factor * size, out_bytes=size if train else 0.0, op="placeholder.param",
                       outputs=[_desc(val)] * (1 + layout.n_states))
            param_nodes[key] = nid
            ref[node] = _Ref(nid, 0)
            phase[nid] = "param"
        elif role == "state":
            pname, k = key
            ref[node] = _Ref(f"param:{pname}", 1 + k)
        elif role == "buffer":
            nid = f"buffer:{key}"
            b.node(nid, param_bytes=_fresh_bytes(val), op="placeholder.buffer", outputs=[_desc(val)])
            ref[node] = _Ref(nid, 0)
            phase[nid] = "buffer"
        else:
            nid = f"input:{key}"
            b.node(nid, out_bytes=_fresh_bytes(val), op="placeholder.input", outputs=[_desc(val)])
            ref[node] = _Ref(nid, 0)
            phase[nid] = "input"
        owner[node.name] = ref[node].node

    stored = _stored_state(layout, flat)
    for node in gm.graph.nodes:
        if node.op == "get_attr":
            val = getattr(gm, node.target)
            same = stored.get(_storage_key(val)) if _is_tensor(val) else None
            if same is not None:  # a parameter or buffer read where functional_call no longer swaps it in
                ref[node] = _Ref(same, 0)
                owner[node.name] = same
                continue
            nid = f"const:{node.target}"
            if nid not in b:
                b.node(nid, out_bytes=_fresh_bytes(val), op="placeholder.constant", outputs=[_desc(val)])
            ref[node] = _Ref(nid, 0)
            phase[nid] = "constant"
            owner[node.name] = nid
        if node.op != "call_function":
            continue
        if node.target is operator.getitem:
            base = ref[node.args[0]]
            ref[node] = base if base.views else _Ref(base.node, int(node.args[1]))
            owner[node.name] = base.node
            continue
        op = _op_name(node.target)
        is_view, writes, fresh = _alias(node.target)
        writes = writes + list(UNDECLARED_WRITES.get(op, ()))
        ins = _tensor_args(node)
        val = node.meta.get("val")
        if (is_view or op in VIEW_LIKE) and ins:
            base = ref[ins[0]]
            ref[node] = _Ref(base.node, base.out, views=isinstance(val, (list, tuple)))
            owner[node.name] = base.node
            continue
        nid = node.name
        outs = list(val) if isinstance(val, (list, tuple)) else [val]
        label = _module_path(node)
        b.node(nid, name=f"{nid} ({label})" if label else None, op=op,
               inputs=[_desc(a.meta["val"]) for a in ins], outputs=[_desc(t) for t in outs],
               out_bytes=sum(_fresh_bytes(t) for k, t in enumerate(outs) if k >= len(fresh) or fresh[k]))
        after: list[str] = []  # writers of what this op reads, which it must follow
        for j, a in enumerate(ins):
            src = ref[a]
            if src.node in storage:  # a tensor written in place: its bytes live at its producer
                root, out = storage[src.node]
                b.use(root, nid, _nbytes(a.meta["val"]), out, j)
                b.use(src.node, nid, 0.0)  # and the read waits for the write
            else:
                root, out = src.node, src.out
                b.use(src.node, nid, _nbytes(a.meta["val"]), src.out, j)
            readers.setdefault((root, out), []).append(nid)
            # A write through one view and a read through another (``buf[:, :4] = h`` then reading
            # ``buf``; the backward of a mean over a channels_last tensor) share no FX edge: the
            # read waits for the tensor's last writer (so a write also waits for the one before)
            writer = last_write.get((root, out))
            if writer is not None and writer not in (src.node, nid) and writer not in after:
                after.append(writer)
        for writer in after:  # unless it reads the writer's own outputs, which orders them already
            if not b.has_edge(writer, nid):
                b.use(_wrote(b, writer), nid, 0.0)
        ref[node] = _Ref(nid, None) if isinstance(val, (list, tuple)) else _Ref(nid, 0)
        owner[node.name] = nid
        op_nodes.append(node)
        written = [a for a in _written_args(node, writes) if a in ref]
        for a in written:  # every earlier read of the tensor runs before this write
            key = storage.get(ref[a].node, (ref[a].node, ref[a].out))
            war.extend((r, nid) for r in readers.pop(key, ()) if r != nid)
            last_write[key] = nid
        if written:
            writes_into[nid] = [storage.get(ref[a].node, (ref[a].node, 0))[0] for a in written]
            if len(fresh) == 1 and not fresh[0]:  # returns the tensor it wrote: readers follow it
                first = ref[written[0]]
                storage[nid] = storage.get(first.node, (first.node, first.out))

    outputs = next(n for n in gm.graph.nodes if n.op == "output").args[0]
    # each gradient as the update reads it: its last in-place writer (GradScaler's unscale writes it
    # and returns nothing, so the traced output still names the backward op that made it), else
    # the op that made it
    finished: list[str] = []
    grad_tensors: list[tuple[str, int | None]] = []  # (producer, output) of each gradient's storage
    for g in (outputs[1] if train else ()):
        src = ref[g]
        key = storage.get(src.node, (src.node, src.out))
        finished.append(last_write.get(key, src.node))
        grad_tensors.append(key)
    _phases(b, ref, outputs, phase, op_nodes, train, finished)
    for rec in b.nodes:  # an order token after a write is in its writer's phase
        if rec["id"].endswith(":wrote"):
            phase[rec["id"]] = phase[rec["id"].removesuffix(":wrote")]
    if layout.micro_ends:
        _micro_batches_in_turn(b, gm, op_nodes, layout.micro_ends, writes_into, phase)
    _colocate(b, ref, writes_into, phase, op_nodes)
    _split_saved_outputs(b, phase, op_nodes)
    _order_writes_after_reads(b, war, phase)
    _hold_back_recomputation(b, ref, phase, op_nodes)
    if train and not layout.grad_persistent:
        _hold_gradients(b, phase, op_nodes, grad_tensors)
    # weights nothing updates (frozen parameters are buffers here): held until the step's end, with
    # a copy charged wherever they are read (LoRA's frozen base read on other devices: session 40)
    held = [param_nodes[k] for k in layout.without_gradient if k in param_nodes] if train else list(param_nodes.values())
    added = hold_until_end(b, held + [nid for nid, ph in phase.items() if ph == "buffer"])
    for nid in added:
        phase[nid] = "optimizer" if train else "forward"
    _times(b, gm, op_nodes, cost, spec, flat, layout)
    kind = "training step" if train else "inference"
    unit = "ms (measured on this machine's CPU: CPU times, not an accelerator's)" if cost == "measure" else ("ms (time table)" if isinstance(cost, Mapping) else f"ms (roofline on {spec.name})")
    prob = b.problem(name=name, link=spec.link(), memory=spec.memory, devices=devices,
                     attrs={"format": "torch", "time_unit": unit, "capture": kind, "optimizer": optimizer if train else None})
    return Capture(gm, prob, owner, phase, param_nodes, flat)


def _micro_batches_in_turn(b: GraphBuilder, gm: Any, op_nodes: list[Any], ends: list[str], writes_into: dict[str, list[str]],
                           phase: dict[str, str]) -> None:
    """Gradient accumulation: micro-batch j + 1 starts after micro-batch j's gradients are added.

    Why: nothing in the data orders them (micro-batch j + 1 reads only the inputs and weights), so a
    schedule could run every forward first and hold every micro-batch's activations until its
    backward, the memory accumulation exists to save (and one device's FIFO peak would be the
    whole batch's). The program runs them in turn: a zero-time, zero-byte node ``micro:<j>:end``
    waits for micro-batch j's gradient accumulations (in-place adds, which allocate nothing, so the
    edges hold no bytes), and every op of micro-batch j + 1 that no op of its own micro-batch
    feeds waits for it."""
    micro: dict[str, int] = {}
    j = 0
    for node in gm.graph.nodes:
        micro[node.name] = j
        if j < len(ends) and node.name == ends[j]:
            j += 1
    ops = [n.name for n in op_nodes]
    pred = _predecessors(b)
    for j in range(len(ends)):
        token = f"micro:{j}:end"
        b.node(token, op="order")
        phase[token] = "backward"
        for nid in ops:
            if micro[nid] == j and any(t.startswith("param:") for t in writes_into.get(nid, ())):
                b.use(nid, token, 0.0)
        for nid in ops:
            if micro[nid] == j + 1 and not any(micro.get(u) == j + 1 for u in pred.get(nid, ()) if u in micro):
                b.use(token, nid, 0.0)


def _wrote(b: GraphBuilder, writer: str) -> str:
    """What a later reader of a tensor written in place by ``writer`` waits for: the writer itself
    when it allocates nothing (``copy_``, ``add_``: an edge from it holds no bytes), else a
    zero-time, zero-byte ``<writer>:wrote`` node (op ``order``, colocated with it), since an edge
    from the writer would hold its fresh outputs until the reader (batch norm writes its running
    statistics and returns its output and saved statistics: held until the backward, the small CNN's
    one-device peak rose by 39%)."""
    if not b.record(writer).get("out_bytes"):
        return writer
    token = f"{writer}:wrote"
    if token not in b:
        group = b.record(writer).setdefault("colocate", writer)
        b.node(token, colocate=group, op="order")
        b.use(writer, token, 0.0)
    return token


def _phases(b: GraphBuilder, ref: dict[Any, _Ref], outputs: Any, phase: dict[str, str], op_nodes: list[Any],
            train: bool, finished: Sequence[str] = ()) -> None:
    """forward: ancestors of the loss (or of the outputs, for inference); backward: the rest of
    what the gradients need; optimizer: the rest. Ancestors in the problem's edges, which include
    the in-place writes a read waits for: the FX graph has no edge from a write through one view
    to a read through another, so the layer feeding ``buf[:, :4] = h`` was counted in no phase
    but the optimizer's. ``finished``: each gradient's last in-place writer (GradScaler's unscale),
    which the gradients need too."""
    pred = _predecessors(b)

    def ancestors(starts: list[Any], ids: Sequence[str] = ()) -> set[str]:
        seen = {ref[n].node for n in starts if n in ref} | set(ids)
        todo = list(seen)
        while todo:
            for u in pred.get(todo.pop(), ()):
                if u not in seen:
                    seen.add(u)
                    todo.append(u)
        return seen

    if train:
        loss, grads = outputs
        fwd = ancestors([loss])
        bwd = ancestors(list(grads), finished) - fwd
    else:
        fwd, bwd = ancestors(_leaves(outputs)), set()
    for node in op_nodes:
        nid = node.name
        phase[nid] = "forward" if nid in fwd else ("backward" if nid in bwd else ("optimizer" if train else "forward"))


def _update_ops(b: GraphBuilder, phase: dict[str, str], op_nodes: list[Any]) -> list[str]:
    """The optimizer's ops on the weights: optimizer-phase ops reading a parameter node (the weight
    or a state, or a tensor written into one)."""
    pred = _predecessors(b)
    return [n.name for n in op_nodes
            if phase.get(n.name) == "optimizer" and any(phase.get(u) == "param" for u in pred.get(n.name, ()))]


STEP_AFTER_UPDATE = "optimizer:end"


def _hold_gradients(b: GraphBuilder, phase: dict[str, str], op_nodes: list[Any],
                    grads: Sequence[tuple[str, int | None]]) -> None:
    """With ``zero_grad(set_to_none=True)`` a gradient is the tensor the backward makes, and
    ``p.grad`` keeps it through ``optimizer.step()`` to the step's end (the next ``zero_grad()``
    frees it), not only until its own update has read it; the weight it updates lives on too.
    Each gradient's producer and each trained weight keep their tensor until a zero-time
    ``<node>:kept`` node in the weight's colocation group (:func:`_update_group`), which waits for
    ``optimizer:end``, a zero-time node after the last op of every update (the in-place write that
    ends it, nothing reads it); those edges carry nothing and cost no transfer time. A producer
    that makes other tensors too (layer norm's input gradient, a convolution's) first hands its
    gradient to a zero-time ``<producer>:grad<k>`` node colocated with it (the model frees a node's
    outputs together), so they are not held with it.

    Why: the updates are free to run as soon as their gradient exists (nothing in the data orders
    them after the rest of the backward, as under ``zero_grad(set_to_none=False)`` before), and a
    tensor dies at its last reader, so a gradient, and the weight, died at the update: one at a
    time instead of every gradient at once. A weight-heavy decoder at batch 1 x 16 came out at
    0.79 x PyTorch's measured peak (426.9 / 538.4 MB), now 1.00 x. Holding the updates back until
    the whole backward ended instead (one zero-time node between them, as ``loss.backward();
    optimizer.step()`` runs) was tried and dropped: released together, a FIFO schedule ran every
    update's first op, then every ``sqrt``, holding every weight's Adam temporaries at once
    (1.16 x), and chaining the updates would serialise them across devices."""
    vals = {n.name: n.meta.get("val") for n in op_nodes}
    ends = [nid for nid in _update_ops(b, phase, op_nodes) if not b.record(nid).get("out_bytes") and not b.has_successor(nid)]
    if not ends:
        return
    b.node(STEP_AFTER_UPDATE, op="order")
    phase[STEP_AFTER_UPDATE] = "optimizer"
    for nid in ends:
        b.signal(nid, STEP_AFTER_UPDATE)
    held: list[str] = []
    for nid, k in dict.fromkeys(grads):
        if phase.get(nid) != "backward" or nid not in vals:
            continue  # not made by an op of the step (a parameter's own buffer is persistent)
        val = vals[nid]
        holder = nid
        if isinstance(val, (list, tuple)) and sum(_is_tensor(t) for t in val) > 1 and k is not None:
            t = val[k]
            holder = f"{nid}:grad{k}"
            rec = b.record(nid)
            group = rec.setdefault("colocate", nid)
            b.node(holder, out_bytes=_fresh_bytes(t), colocate=group, op="saved", inputs=[_desc(t)], outputs=[_desc(t)])
            phase[holder] = phase[nid]
            b.reroute(nid, k, holder)
            b.use(nid, holder, _fresh_bytes(t), k, 0)
            rec["out_bytes"] -= _fresh_bytes(t)
        held.append(holder)
    for nid in held:
        phase[keep_until(b, nid, STEP_AFTER_UPDATE, _update_group(b, phase, nid))] = "optimizer"
    # the trained weights (a weight nothing updates is held by hold_until_end)
    for rec in list(b.nodes):
        if phase.get(rec["id"]) == "param" and rec.get("out_bytes") and b.has_successor(rec["id"]):
            phase[keep_until(b, rec["id"], STEP_AFTER_UPDATE)] = "optimizer"


def _update_group(b: GraphBuilder, phase: dict[str, str], grad: str) -> str | None:
    """The colocation group of the weight that gradient ``grad`` updates (``_colocate`` puts each
    weight's update in one group, named after its parameter node), found from the optimizer ops
    nearest after ``grad``; None when no single one is (the gradient is then held where it is made).

    Why: ``p.grad`` lives on the weight's device, so the gradient is held to the step's end there,
    a copy like any tensor read elsewhere, and the op that makes it stays free to move. Held where it
    was made (session 42), each gradient's producer was colocated with a node at the step's end, and
    a search that moved only a slice of the schedule could not move it."""
    level, seen = [grad], {grad}
    while level:
        groups = {b.record(n).get("colocate") for n in level if phase.get(n) == "optimizer"}
        anchored = {g for g in groups if g is not None and phase.get(g) == "param"}
        if anchored:
            return anchored.pop() if len(anchored) == 1 else None
        level = [d for n in level for d in b.successors(n) if d not in seen and phase.get(d) == "optimizer"]
        seen.update(level)
    return None


def _leaves(x: Any) -> list[Any]:
    from torch.utils._pytree import tree_leaves

    return [n for n in tree_leaves(x) if hasattr(n, "op")]


def _colocate(b: GraphBuilder, ref: dict[Any, _Ref], writes_into: dict[str, list[str]], phase: dict[str, str], op_nodes: list[Any]) -> None:
    """An op writing a tensor in place goes with that tensor's producer (so with the parameter or
    buffer it updates); the optimizer's temporaries go with the update they feed. Every resulting
    group holding a parameter or buffer (and at most one parameter) becomes a colocation group named
    after it, so each parameter's whole update shares its device, and batch norm sits with its
    running statistics."""
    uf = _UnionFind()
    persistent = {nid for nid, ph in phase.items() if ph in ("param", "buffer")}
    for node in op_nodes:
        nid = node.name
        uf.find(nid)
        for target in writes_into.get(nid, []):
            uf.union(target, nid)
        if phase.get(nid) == "optimizer":
            for a in _tensor_args(node):
                src = ref[a].node
                if phase.get(src) in ("optimizer", "param"):
                    uf.union(src, nid)
    members: dict[str, list[str]] = {}
    for nid in list(uf.parent):
        members.setdefault(uf.find(nid), []).append(nid)
    for group in members.values():
        if len(group) < 2:
            continue
        anchors = sorted(m for m in group if m in persistent)
        if sum(phase[m] == "param" for m in anchors) > 1:
            continue  # something global (e.g. gradient clipping) ties parameters: leave them free
        name_ = anchors[0] if anchors else group[0]
        for m in group:
            b.record(m)["colocate"] = name_


def _split_saved_outputs(b: GraphBuilder, phase: dict[str, str], op_nodes: list[Any]) -> None:
    """A forward op's outputs that only the backward reads (batch norm's saved mean and inverse
    std, dropout's mask, attention's logsumexp) live until the backward, while its main output dies
    with its next forward reader; one node frees all its outputs together, so each such output
    moves to a zero-time ``<op>:saved<k>`` node colocated with the op, holding it until its last
    reader."""
    for node in op_nodes:
        nid = node.name
        val = node.meta.get("val")
        if phase.get(nid) != "forward" or not isinstance(val, (list, tuple)):
            continue
        outs = [(k, t) for k, t in enumerate(val) if _is_tensor(t)]
        readers = {k: b.consumers(nid, k) for k, _ in outs}
        forward_read = {k for k, r in readers.items() if any(phase.get(x) == "forward" for x in r)}
        if not forward_read:
            continue
        for k, t in outs:
            if k in forward_read or not readers[k]:
                continue
            rec = b.record(nid)
            group = rec.setdefault("colocate", nid)
            holder = f"{nid}:saved{k}"
            b.node(holder, out_bytes=_fresh_bytes(t), colocate=group, op="saved", inputs=[_desc(t)], outputs=[_desc(t)])
            phase[holder] = "forward"
            b.reroute(nid, k, holder)
            b.use(nid, holder, _fresh_bytes(t), k, 0)
            rec["out_bytes"] -= _fresh_bytes(t)


def _order_writes_after_reads(b: GraphBuilder, war: list[tuple[str, str]], phase: dict[str, str]) -> None:
    """Write after read: an op that reads a tensor the program later writes in place must run
    before the write. Where the graph does not already order the two (the backward's
    input-gradient matmul reads a weight whose update does not depend on it), the write waits for
    a zero-time, zero-byte node ``<reader>:read`` colocated with the reader. Not a direct edge:
    every edge holds its source's output until the consumer finishes (docs/model.md), which would
    keep the reader's output alive until the write (the optimizer's, at the step's end)."""
    if not war:
        return
    pred = _predecessors(b)
    by_writer: dict[str, list[str]] = {}
    for r, w in war:
        by_writer.setdefault(w, []).append(r)
    for w, rs in by_writer.items():
        pending = set(rs)
        seen: set[str] = set()
        todo = [w]
        while todo and pending:  # the writer's ancestors, until every reader is found among them
            for u in pred.get(todo.pop(), ()):
                if u not in seen:
                    seen.add(u)
                    pending.discard(u)
                    todo.append(u)
        for r in sorted(pending, key=rs.index):
            token = _order_token(b, phase, r, ":read")
            pred.setdefault(token, []).append(r)
            b.use(token, w, 0.0)
            pred.setdefault(w, []).append(token)


def _predecessors(b: GraphBuilder) -> dict[str, list[str]]:
    """Node id -> the ids of its inputs, as the builder's edges stand now."""
    pred: dict[str, list[str]] = {}
    for src, dst in b.edges():
        pred.setdefault(dst, []).append(src)
    return pred


def _order_token(b: GraphBuilder, phase: dict[str, str], first: str, suffix: str) -> str:
    """The id of a zero-time, zero-byte node ``<first><suffix>`` colocated with ``first`` and fed
    by it (made on first use): what must run after ``first`` waits for it (op ``order``)."""
    token = f"{first}{suffix}"
    if token not in b:
        group = b.record(first).setdefault("colocate", first)
        b.node(token, colocate=group, op="order")
        phase[token] = phase.get(first, "forward")
        b.use(first, token, 0.0)
    return token


def _hold_back_recomputation(b: GraphBuilder, ref: dict[Any, _Ref], phase: dict[str, str], op_nodes: list[Any]) -> None:
    """Recomputation in the backward (a block under ``torch.utils.checkpoint``) starts with ops that
    repeat a forward op on the same inputs, and so could run as soon as the forward made those
    inputs, holding their outputs until the backward: the memory checkpointing is meant to save.
    PyTorch runs them when the backward reaches them, so each such op (a backward op that reads no
    backward tensor and has the target and arguments of a forward op) waits for the backward op
    traced just before it, through a zero-time, zero-byte ``<that op>:then`` node colocated with
    that op. The orders follow the trace, so they make no cycle. Other backward ops reading only
    forward tensors (parts of a derivative formula, such as ``pow(x, 1)`` in pow's) keep their
    freedom to run early.
    Why a token and not an edge: see :func:`_order_writes_after_reads`."""
    from torch.fx.node import map_arg

    def key(node: Any) -> str:
        return repr((node.target, map_arg((node.args, node.kwargs), lambda a: (ref[a].node, ref[a].out) if a in ref else a.name)))

    forward = {key(node) for node in op_nodes if phase.get(node.name) == "forward"}
    pred = _predecessors(b)
    last: str | None = None  # the backward op traced last so far
    for node in op_nodes:
        nid = node.name
        if phase.get(nid) != "backward":
            continue
        if last is not None and not any(phase.get(u) == "backward" for u in pred.get(nid, ())) and key(node) in forward:
            b.use(_order_token(b, phase, last, ":then"), nid, 0.0)
        last = nid


def _times(b: GraphBuilder, gm: Any, op_nodes: list[Any], cost: str | Mapping[str, float], spec: DeviceSpec, flat: list[Any],
           layout: _Layout) -> None:
    if isinstance(cost, Mapping):
        for node in op_nodes:
            b.record(node.name)["time"] = table_time(cost, node.name, _op_name(node.target))
    elif cost == "roofline":
        for node in op_nodes:
            b.record(node.name)["time"] = _roofline(node, spec)
    elif cost == "measure":
        _check_measurable(flat)
        first = len(layout.param_names) + len(layout.buffer_names)
        measured = measure_ops(gm, _real_arguments(flat), scratch=range(first, first + len(layout.param_names) * layout.n_states))
        for node in op_nodes:
            b.record(node.name)["time"] = measured[node.name]
    else:
        raise ProblemError(f"cost {cost!r}: expected one of {', '.join(COSTS)} or a time table")


# ----- measured costs --------------------------------------------------------------------------

def _check_measurable(flat: Sequence[Any]) -> None:
    """Refuse to time a step whose tensors hold no data: a model built under
    ``torch.device("meta")`` (which captures and costs by roofline without allocating its weights)
    runs every op as a shape computation in microseconds, which would be written as CPU times."""
    for x in flat:
        device = getattr(x.like if isinstance(x, _Zeros) else x, "device", None)
        if device is not None and device.type == "meta":
            raise ProblemError("cannot measure op times of a model on the meta device (its tensors hold no data): "
                               "use --cost roofline or a time table, or build the model on the CPU")


def _signature(node: Any, args: Any, kwargs: Any) -> tuple:
    """Ops with the same target, tensor shapes/dtypes/strides and other arguments cost the same."""
    from torch.utils._pytree import tree_leaves

    parts: list[Any] = [str(node.target)]
    for x in tree_leaves((args, kwargs)):
        if _is_tensor(x):
            parts.append((tuple(x.shape), str(x.dtype), tuple(x.stride())))
        else:
            parts.append(repr(x))
    return tuple(parts)


def measure_ops(gm: Any, flat: Sequence[Any], *, warmup: int = 1, repeats: int = 5, cache: bool = True,
                scratch: range = range(0)) -> dict[str, float]:
    """Run the captured graph on real tensors and time every operator on this machine's CPU
    (median of ``repeats`` after ``warmup`` runs, in ms); ops with the same signature are timed
    once (``cache=False`` times every op: the benchmark's baseline). The arguments are cloned first,
    as the step's in-place updates must not touch the model, except those in ``scratch`` (the
    optimizer states, zeros that are ours), which are zeroed again afterwards."""
    torch = _import_torch()
    from torch.fx import Interpreter

    timed: dict[tuple, float] = {}
    times: dict[str, float] = {}

    class Timer(Interpreter):
        def run_node(self, n: Any) -> Any:
            if n.op != "call_function" or n.target is operator.getitem:
                return super().run_node(n)
            args, kwargs = self.fetch_args_kwargs_from_env(n)
            key = _signature(n, args, kwargs) if cache else (n.name,)
            if key not in timed:
                for _ in range(warmup):
                    n.target(*args, **kwargs)
                samples = []
                while len(samples) < repeats:
                    t0 = time.perf_counter()
                    n.target(*args, **kwargs)
                    samples.append(time.perf_counter() - t0)
                timed[key] = 1e3 * statistics.median(samples)
            times[n.name] = timed[key]
            return n.target(*args, **kwargs)

    real = [x.detach().clone() if _is_tensor(x) and i not in scratch else x for i, x in enumerate(flat)]
    with torch.no_grad():
        Timer(gm).run(*real)
        for i in scratch:
            flat[i].zero_()
    return times


# ----- what PyTorch itself measures ----------------------------------------------------------------

def program_order(problem: Problem) -> list[int]:
    """The nodes of an imported step in the order eager PyTorch runs them: operators by their
    position in the trace (the importer adds them in that order), each zero-time node the importer
    adds (order tokens, saved-tensor holders, ``:kept`` holds) right after its last predecessor, and
    so each add of a gradient into a gradient buffer (the trace adds them after the whole backward,
    eager PyTorch's AccumulateGrad as each gradient is made); a topological order by those keys.
    Evaluated on one device in this order, the problem's peak is comparable with
    :func:`measured_step_peak` (the FIFO executor may interleave two updates that eager runs one
    after the other)."""
    import heapq

    import numpy as np

    p = problem
    pptr, pnbr, _ = p.pred_ptr
    sptr, snbr, _ = p.succ_ptr
    buffered = p.attrs.get("zero_grad") == "zeros" and p.attrs.get("grad_scaler")  # output 1: the buffer
    into_buffer = {int(p.dst[e]) for e in range(p.m) if buffered and p.ids[p.src[e]].startswith("param:")
                   and (p.edge_meta[e] or {}).get("src_output") == 1 and p.node_meta[p.dst[e]]["op"] == "aten.add_"}
    key: dict[int, tuple[int, int]] = {}
    for v in p.topo_order.tolist():
        preds = pnbr[pptr[v]:pptr[v + 1]].tolist()
        added = p.node_meta[v]["op"] in ("order", "saved") or v in into_buffer
        key[v] = (max(key[u] for u in preds)[0] if added and preds else v, v)
    indeg = np.diff(pptr).tolist()
    heap = [(key[v], v) for v in range(p.n) if not indeg[v]]
    heapq.heapify(heap)
    out: list[int] = []
    while heap:
        _, u = heapq.heappop(heap)
        out.append(u)
        for v in snbr[sptr[u]:sptr[u + 1]].tolist():
            indeg[v] -= 1
            if not indeg[v]:
                heapq.heappush(heap, (key[v], v))
    return out


def measured_step_peak(model: Any, example_inputs: Any, *, train: bool = True, optimizer: str = "adam",
                       loss_fn: Callable | None = None, accumulate: int = 1, ema: float | None = None,
                       zero_grad: str = "none", grad_scaler: bool = False) -> dict[str, float]:
    """The peak of live tensor bytes during one eager step of ``model`` on this CPU, as PyTorch's
    own allocator reports it (torch.profiler's memory events), for checking an imported graph's
    peak memory. The step runs on a copy, after a warm-up step, in the steady state the problem
    models: weights and torch.optim's state persist; gradients are freed before the step
    (``zero_grad`` "none", ``optimizer.zero_grad()``'s default) or zeroed in place ("zeros").
    ``grad_scaler``: the loop of ``torch.amp.GradScaler("cpu")`` (scale, backward, ``scaler.step``,
    ``scaler.update``).

    Returns {"peak": persistent + the highest running sum of allocations during the step,
    "persistent": bytes live before it (weights, gradients when kept, optimizer state, buffers,
    inputs), and with a GradScaler "skipped": 1.0 when the measured step found an inf and skipped
    the update (its peak is then not the step's), else 0.0}."""
    torch = _import_torch()
    import copy

    from torch.profiler import ProfilerActivity, profile
    from torch.utils._pytree import tree_map

    model = copy.deepcopy(_unwrapped(model))  # the step capture() traces, run eagerly
    _set_step_mode(model, train)
    args, kwargs = _normalise_inputs(example_inputs)
    params = [p for p in model.parameters() if p.requires_grad]
    opt = None
    if train:
        opt = torch_optimizer(optimizer, params)
    averaged = [p.detach().clone() for p in params] if train and ema is not None else []
    scaler = torch.amp.GradScaler("cpu", init_scale=SCALER_INIT) if train and grad_scaler else None

    def step() -> None:
        if not train:
            with torch.no_grad():
                model(*args, **kwargs)
            return
        for j in range(accumulate):  # micro-batches, each loss divided by their number
            a_j, kw_j = (args, kwargs) if accumulate == 1 else tree_map(
                lambda x: x.chunk(accumulate)[j] if _is_tensor(x) else x, (args, kwargs))
            out = model(*a_j, **kw_j)
            loss = loss_fn(out) if loss_fn is not None else default_loss(out)
            loss = loss / accumulate if accumulate > 1 else loss
            (scaler.scale(loss) if scaler is not None else loss).backward()
        if scaler is not None:
            scaler.step(opt)
            scaler.update()
        else:
            opt.step()
        with torch.no_grad():  # the EMA of the trained weights, as get_ema_multi_avg_fn's per-tensor update
            for a, p in zip(averaged, params):
                a.lerp_(p, 1 - ema)

    step()
    if opt is not None:
        opt.zero_grad(set_to_none=zero_grad == "none")
    live: dict[int, int] = {}
    held = list(model.parameters()) + list(model.buffers()) + _flat_tensors((args, kwargs))
    held += [p.grad for p in params if p.grad is not None]
    if opt is not None:
        held += [t for state in opt.state.values() for t in state.values() if _is_tensor(t)]
    held += averaged
    for t in held:
        live.update(_storages(t))
    persistent = float(sum(live.values()))
    scale_before = scaler.get_scale() if scaler is not None else None
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        step()
    events = sorted((e.start_ns(), e.nbytes()) for e in prof.profiler.kineto_results.events() if e.name() == "[memory]")
    running = top = 0.0
    for _, nbytes in events:
        running += nbytes
        top = max(top, running)
    out = {"peak": persistent + top, "persistent": persistent}
    if scaler is not None:  # the scale backs off only when the step found an inf and skipped the update
        out["skipped"] = float(scaler.get_scale() < scale_before)
    return out


def _storages(t: Any) -> dict[int, int]:
    """The memory a real tensor holds, by storage: {address: bytes}. A sparse COO tensor (a sparse
    gradient) has no storage of its own, only its indices' and values' (asking for its storage
    raised NotImplementedError, so ``measured_step_peak`` failed on any model with one)."""
    torch = _import_torch()
    if t.layout == torch.sparse_coo:
        return {**_storages(t._indices()), **_storages(t._values())}
    storage = t.untyped_storage()
    return {storage.data_ptr(): storage.nbytes()}


# ----- public API -------------------------------------------------------------------------------

def _normalise_inputs(example_inputs: Any) -> tuple[tuple, dict]:
    if isinstance(example_inputs, Mapping):
        return (), dict(example_inputs)
    if isinstance(example_inputs, tuple):
        return example_inputs, {}
    if isinstance(example_inputs, list):
        return tuple(example_inputs), {}
    return (example_inputs,), {}


WRAPPERS = {"OptimizedModule": "_orig_mod", "DataParallel": "module", "DistributedDataParallel": "module"}


def _unwrapped(model: Any) -> Any:
    """The module the user wrote, out of the wrappers a training script puts around it:
    ``torch.compile``'s ``OptimizedModule`` (FX cannot trace dynamo-optimized code) and the data
    parallel ones (the functional API refuses them). Each wrapper runs its module's own step: what
    a placement spreads over devices is that step, not the wrapper's copies of it."""
    while type(model).__name__ in WRAPPERS and hasattr(model, WRAPPERS[type(model).__name__]):
        model = getattr(model, WRAPPERS[type(model).__name__])
    return model


def capture(model: Any, example_inputs: Any, *, train: bool = True, optimizer: str = "adam", loss_fn: Callable | None = None,
            cost: str | Mapping[str, float] = "roofline", device_spec_: str | dict | DeviceSpec = "h100",
            devices: int = 1, name: str | None = None, clip_grad_norm: float | None = None, accumulate: int = 1,
            ema: float | None = None, zero_grad: str = "none", grad_scaler: bool = False) -> Capture:
    """Capture ``model``'s training step (or inference pass when ``train`` is False) and build its
    placement problem; see :func:`graph_from_torch`. Also returns the FX graph and the map from its
    nodes to the problem's, for :func:`placement.importers.devicemap.annotate_graph`.
    clip_grad_norm: clip the gradients' total 2-norm to this before the update, as
    ``torch.nn.utils.clip_grad_norm_`` (None: no clipping).
    accumulate: gradient accumulation over this many micro-batches (every tensor input split along
    its first dimension; each micro-batch's forward and backward in turn, its loss divided by
    ``accumulate``, its gradients added into the weights' gradients; one optimizer update).
    ema: keep an exponential moving average of the trained weights with this decay, updated in
    place after the optimizer's update (``ema.lerp_(w, 1 - ema)``; None: no EMA).
    zero_grad: "none" (default, as ``optimizer.zero_grad()`` in PyTorch 2.x: ``set_to_none=True``):
    a gradient exists from the backward op that makes it to the step's end; "zeros"
    (``set_to_none=False``): every gradient is persistent bytes with its weight (the only behaviour
    before session 42).
    grad_scaler: the step of ``torch.amp.GradScaler`` (fp16 autocast): the loss times the scale,
    each gradient unscaled in place with an inf/nan check, the update as when the step is not
    skipped (not made to wait for the check), then the scale's update."""
    if optimizer not in OPTIMIZERS:
        raise ProblemError(f"optimizer {optimizer!r}: expected one of {', '.join(OPTIMIZERS)}")
    if clip_grad_norm is not None and not (train and clip_grad_norm > 0):
        raise ProblemError(f"clip_grad_norm {clip_grad_norm}: expected a positive norm, in a training step")
    if not (isinstance(accumulate, int) and accumulate >= 1) or (accumulate > 1 and not train):
        raise ProblemError(f"accumulate {accumulate}: expected a whole number of micro-batches >= 1, in a training step")
    if ema is not None and not (train and 0.0 < ema < 1.0):
        raise ProblemError(f"ema {ema}: expected a decay between 0 and 1 (exclusive), in a training step")
    if zero_grad not in ZERO_GRADS:
        raise ProblemError(f"zero_grad {zero_grad!r}: expected one of {', '.join(ZERO_GRADS)}")
    if grad_scaler and not train:
        raise ProblemError("grad_scaler: a GradScaler scales a training step's loss; an inference pass has none")
    if isinstance(cost, str) and cost not in COSTS:
        cost = load_time_table(cost)
    elif isinstance(cost, Mapping):
        cost = load_time_table(cost)
    spec = device_spec(device_spec_)
    args, kwargs = _normalise_inputs(example_inputs)
    model = _unwrapped(model)
    gm, layout, flat = _trace(model, args, kwargs, train=train, optimizer=optimizer, loss_fn=loss_fn, clip_grad_norm=clip_grad_norm,
                              accumulate=accumulate, ema=ema, zero_grad=zero_grad, grad_scaler=grad_scaler)
    cap = _build(gm, layout, train=train, optimizer=optimizer, cost=cost, spec=spec, flat=flat,
                 name=name or type(model).__name__, devices=devices)
    if clip_grad_norm is not None:
        cap.problem.attrs["clip_grad_norm"] = clip_grad_norm
    if accumulate > 1:
        cap.problem.attrs["accumulate"] = accumulate
    if ema is not None:
        cap.problem.attrs["ema"] = ema
    if train:
        cap.problem.attrs["zero_grad"] = zero_grad
    if grad_scaler:
        cap.problem.attrs["grad_scaler"] = True
    return cap


def graph_from_torch(model: Any, example_inputs: Any, train: bool = True, optimizer: str = "adam", cost: str | Mapping[str, float] = "roofline",
                     device_spec: str | dict | DeviceSpec = "h100", loss_fn: Callable | None = None, devices: int = 1,
                     clip_grad_norm: float | None = None, accumulate: int = 1, ema: float | None = None,
                     zero_grad: str = "none", grad_scaler: bool = False) -> Problem:
    """The placement problem of ``model``'s training step with ``optimizer`` (or its inference
    pass when ``train`` is False), at ATen level.

    example_inputs: a tensor, a tuple of positional inputs or a dict of keyword inputs.
    loss_fn: maps the model's output to a scalar (default: the output's own ``loss``, else the sum).
    cost: "roofline" (FLOPs and bytes against ``device_spec``), "measure" (timed on this CPU), a
    mapping or JSON file of ms per node id or op name. Times in ms; memory in bytes; the devices
    get the spec's memory and the spec's link prices the edges."""
    return capture(model, example_inputs, train=train, optimizer=optimizer, loss_fn=loss_fn, cost=cost,
                   device_spec_=device_spec, devices=devices, clip_grad_norm=clip_grad_norm, accumulate=accumulate,
                   ema=ema, zero_grad=zero_grad, grad_scaler=grad_scaler).problem


# ----- command line -------------------------------------------------------------------------------

def load_factory(spec: str) -> Callable[[], Any]:
    """``MODULE:FACTORY`` with MODULE an importable name or a .py file path. This runs the user's
    own code (with runpy), the one thing a model importer has to load by name."""
    import runpy

    if ":" not in spec:
        raise ProblemError(f"{spec!r}: expected MODULE:FACTORY (a module name or .py path, then a function)")
    mod_name, func = spec.rsplit(":", 1)
    is_file = mod_name.endswith(".py") or os.sep in mod_name
    if is_file and not Path(mod_name).exists():
        raise ProblemError(f"{mod_name}: no such file")
    try:
        namespace = runpy.run_path(mod_name) if is_file else runpy.run_module(mod_name, alter_sys=True)
    except Exception as exc:
        raise ProblemError(f"{mod_name}: cannot import: {type(exc).__name__}: {exc}") from None
    factory = namespace.get(func)
    if not callable(factory):
        raise ProblemError(f"{mod_name}: no function {func!r}")
    return factory


def _unpack(made: Any, where: str) -> tuple[Any, Any, Callable | None]:
    if not isinstance(made, tuple) or len(made) not in (2, 3):
        raise ProblemError(f"{where}() must return (model, example_inputs) or (model, example_inputs, loss_fn)")
    model, inputs = made[0], made[1]
    loss_fn = made[2] if len(made) == 3 else None
    return model, inputs, loss_fn


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m placement.importers.torch",
                                description="Capture a PyTorch model's training step at ATen level and write it as a native placement problem.")
    p.add_argument("factory", metavar="MODULE:FACTORY", help="FACTORY() returns (model, example_inputs[, loss_fn]); MODULE is a module name or a .py file")
    p.add_argument("-o", "--output", required=True, metavar="FILE", help="native JSON to write (.json.gz: gzipped)")
    p.add_argument("--inference", action="store_true", help="the forward pass only (no gradients, no optimizer)")
    p.add_argument("--optimizer", choices=OPTIMIZERS, default="adam",
                   help="optimizer of the training step, torch.optim's update (default adam; adamw: weight decay 0.01; "
                        "sgd: no momentum; sgd-momentum, sgd-nesterov: momentum 0.9)")
    p.add_argument("--cost", default="roofline", metavar="roofline|measure|FILE",
                   help="roofline (default): FLOPs and bytes against --device-spec; measure: time every op on this CPU; FILE: JSON {node id or op name: ms}")
    p.add_argument("--device-spec", default="h100", metavar="h100|a100|FILE", help="accelerator for the roofline, device memory and links (default h100)")
    p.add_argument("--devices", type=int, default=1, metavar="K", help="device count written in the problem (default 1)")
    p.add_argument("--clip-grad-norm", type=float, default=None, metavar="MAX",
                   help="clip the gradients' total 2-norm to MAX before the update (torch.nn.utils.clip_grad_norm_)")
    p.add_argument("--accumulate", type=int, default=1, metavar="N",
                   help="gradient accumulation: the inputs split along their first dimension into N micro-batches, "
                        "each forward and backward in turn, one update (default 1)")
    p.add_argument("--ema", type=float, default=None, metavar="DECAY",
                   help="keep an EMA of the trained weights, updated after the optimizer's update (e.g. 0.999)")
    p.add_argument("--zero-grad", choices=ZERO_GRADS, default="none",
                   help="what optimizer.zero_grad() leaves: none (default, PyTorch 2.x's set_to_none=True: the backward "
                        "makes each gradient, held to the step's end), zeros (set_to_none=False: gradients persistent; "
                        "the only behaviour before session 42)")
    p.add_argument("--grad-scaler", action="store_true",
                   help="torch.amp.GradScaler in the step (fp16 AMP): scaled loss, unscale with an inf/nan check, "
                        "the update as when the step is not skipped, the scale's update")
    args = p.parse_args(argv)
    try:
        if args.devices < 1:
            raise ProblemError(f"--devices must be at least 1, got {args.devices}")
        out = check_output_path(args.output)
        _import_torch()
        factory = load_factory(args.factory)
        try:
            made = factory()
        except Exception as exc:
            raise ProblemError(f"{args.factory}: the factory failed: {type(exc).__name__}: {exc}") from None
        model, inputs, loss_fn = _unpack(made, args.factory)
        cap = capture(model, inputs, train=not args.inference, optimizer=args.optimizer, loss_fn=loss_fn,
                      cost=args.cost, device_spec_=args.device_spec, devices=args.devices,
                      name=args.factory.rsplit(":", 1)[1], clip_grad_norm=args.clip_grad_norm, accumulate=args.accumulate,
                      ema=args.ema, zero_grad=args.zero_grad, grad_scaler=args.grad_scaler)
        write_native(cap.problem, out)
    except ProblemError as exc:
        print(f"placement.importers.torch: error: {exc}", file=sys.stderr)
        return 2
    prob = cap.problem
    print(f"{prob.describe()}; times in {prob.attrs['time_unit']}; wrote {out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
