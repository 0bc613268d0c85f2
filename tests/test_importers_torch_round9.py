"""Round 9 (session 42, bench/real_models9.py): gradients under PyTorch 2.x's default
``optimizer.zero_grad()`` (``set_to_none=True``), and ``torch.amp.GradScaler`` in the step; each
checked against hand-derived bytes, eager PyTorch's values or PyTorch's own allocator."""
from __future__ import annotations

import copy

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import torch_models as tm  # noqa: E402  (tests/torch_models.py)

from placement.evaluator import evaluate  # noqa: E402
from placement.formats.native import problem_to_native  # noqa: E402
from placement.importers.torch import LR, capture, main, program_order  # noqa: E402


def _one_device_peak(p) -> float:
    """One device, every node in program order (``program_order``): the graph's memory against
    eager PyTorch's on the same schedule. (The FIFO executor runs two updates whose gradients are
    ready together interleaved, holding both weights' Adam temporaries, which eager's loop never
    does: docs/importers.md.)"""
    return float(evaluate(p, np.zeros(p.n, dtype=int), order=[program_order(p)], memory_model="peak").peak_memory[0])


def _eager_peak(model, x, step) -> float:
    """PyTorch's allocator on one eager step of ``step(model, x)`` (after a warm-up step): the bytes
    live before it plus the highest running sum of its allocations and frees (torch.profiler's
    memory events). Written here, apart from the importer's ``measured_step_peak``, so the test
    does not compare the importer with itself."""
    from torch.profiler import ProfilerActivity, profile

    step(model, x)
    step.opt.zero_grad(set_to_none=step.set_to_none)  # as the measured step starts, so its gradients count
    live = {}
    tensors = list(model.parameters()) + [x] + [p.grad for p in model.parameters() if p.grad is not None]
    tensors += [t for s in step.opt.state.values() for t in s.values() if torch.is_tensor(t)]
    for t in tensors:
        live[t.untyped_storage().data_ptr()] = t.untyped_storage().nbytes()
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        step(model, x)
    running = top = 0
    for _, nbytes in sorted((e.start_ns(), e.nbytes()) for e in prof.profiler.kineto_results.events() if e.name() == "[memory]"):
        running += nbytes
        top = max(top, running)
    return float(sum(live.values()) + top)


class _DefaultLoop:
    """``optimizer.zero_grad(); loss.backward(); optimizer.step()`` with torch.optim.Adam, as a user
    writes it (``zero_grad()`` with PyTorch 2.x's default, ``set_to_none=True``); with a GradScaler,
    ``scaler.scale(loss).backward(); scaler.step(optimizer); scaler.update()``. The loss is the
    model's output when it is a scalar, else its sum (the importer's default loss)."""

    def __init__(self, model, set_to_none: bool = True, scaler: bool = False) -> None:
        self.opt = torch.optim.Adam(model.parameters(), lr=LR, foreach=False)
        self.set_to_none = set_to_none
        self.scaler = torch.amp.GradScaler("cpu") if scaler else None

    def __call__(self, model, x) -> None:
        self.opt.zero_grad(set_to_none=self.set_to_none)
        out = model(x)
        loss = out if out.dim() == 0 else out.sum()
        if self.scaler is None:
            loss.backward()
            self.opt.step()
        else:
            self.scaler.scale(loss).backward()
            self.scaler.step(self.opt)
            self.scaler.update()


def _loop_peak(model, x, **loop) -> float:
    """:func:`_eager_peak` of the loop on a copy of ``model``."""
    mine = copy.deepcopy(model)
    return _eager_peak(mine, x, _DefaultLoop(mine, **loop))


def _mlp(width: int = 512, depth: int = 4) -> torch.nn.Sequential:
    layers = []
    for _ in range(depth):
        layers += [torch.nn.Linear(width, width), torch.nn.ReLU()]
    return torch.nn.Sequential(*layers)


def test_default_zero_grad_frees_gradients_as_pytorchs_default_loop():
    """PyTorch 2.x's ``optimizer.zero_grad()`` sets gradients to None: the backward allocates them,
    ``p.grad`` keeps them to the step's end. The importer charged every gradient as persistent bytes
    (``set_to_none=False``): on this MLP (4 x 512 x 512, batch 512; activations and weights of the
    same order) its one-device peak was 24.16 MB, 1.15 x the 21.01 MB PyTorch's allocator measures
    for the default loop. Now the default capture is that loop (``zero_grad="none"``): persistent
    bytes are the Adam states only, and the one-device peak is PyTorch's but for one weight-size
    (19.95 MB); ``zero_grad="zeros"`` keeps the old problem (gradient persistent) and is
    ``zero_grad(set_to_none=False)``'s peak in the same way."""
    torch.manual_seed(0)
    model, x = _mlp(), torch.randn(512, 512)
    sizes = {f"{i}.{kind}": 4 * (512 * 512 if kind == "weight" else 512) for i in range(0, 8, 2) for kind in ("weight", "bias")}
    ours = {}
    w = 512 * 512 * 4 + 512 * 4
    for mode, grad in (("none", 0), ("zeros", 1)):
        p = capture(model, (x,), zero_grad=mode).problem if mode == "zeros" else capture(model, (x,)).problem
        for name, size in sizes.items():
            i = p.index[f"param:{name}"]
            assert (p.param_bytes[i], p.out_bytes[i]) == ((2 + grad) * size, size), (mode, name)
        ours[mode] = _one_device_peak(p)
    theirs = {mode: _loop_peak(model, x, set_to_none=mode == "none") for mode in ("none", "zeros")}
    assert theirs["zeros"] - theirs["none"] > 0.5 * sum(sizes.values())  # PyTorch itself: gradients freed save memory
    # torch.optim's loop also holds the previous weight's ``denom`` while it makes the next one's (a
    # Python variable lives until reassigned), one weight-size the graph does not hold
    for mode in ("none", "zeros"):
        assert abs(ours[mode] + w - theirs[mode]) <= 0.005 * theirs[mode], (mode, ours, theirs)


def test_zero_grad_none_holds_every_gradient_to_the_end_of_the_step():
    """A weight-heavy step (batch 1): PyTorch's peak is in Adam's update of the largest weight: every
    weight, Adam state and gradient (``p.grad`` keeps each after its update has read it), that
    weight's two temporaries (``sqrt``, ``div``) and the previous weight's ``div`` (torch.optim's
    loop variable ``denom``, alive until reassigned). The graph holds all but the last: 18.87 MB,
    by hand. Before, with every gradient persistent and the backward's own gradients on top, it
    was 19.40 MB; with gradients held only until their own update reads them (each update runs as
    soon as its gradient exists, and a tensor dies at its last reader), one gradient and one weight
    at a time, 15.73 MB (0.79 x PyTorch's 19.93 MB)."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(256, 1024, bias=False), torch.nn.Linear(1024, 512, bias=False),
                                torch.nn.Linear(512, 256, bias=False))
    x = torch.randn(1, 256)
    weights = [1024 * 256 * 4, 512 * 1024 * 4, 256 * 512 * 4]
    # by hand: weights + Adam's two states + every gradient + the largest weight's two temporaries
    ours_by_hand = 4 * sum(weights) + 2 * weights[1]
    theirs_by_hand = ours_by_hand + weights[0]  # + the previous update's denom
    p = capture(model, (x,)).problem
    theirs = _loop_peak(model, x)
    assert abs(theirs - theirs_by_hand) <= 0.001 * theirs_by_hand, (theirs, theirs_by_hand)
    assert abs(_one_device_peak(p) - ours_by_hand) <= 0.001 * ours_by_hand, (_one_device_peak(p), ours_by_hand)


def test_a_gradient_is_held_on_its_weights_device_and_its_producer_moves_freely():
    """``p.grad`` lives with ``p``: each gradient's ``:kept`` holder is in its weight's colocation
    group, not its producer's. With the weight (and its update) on device 0 and the backward
    ``mm`` making its gradient on device 1, device 0 holds the gradient from its arrival to the
    step's end, and device 1 only while the ``mm`` runs. Before (session 42) the holder went with
    the producer: device 1 held the gradient to the step's end, and the producer could not move
    without a node at the step's end."""
    from placement.evaluator import buffers

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(256, 1024, bias=False), torch.nn.Linear(1024, 512, bias=False),
                                torch.nn.Linear(512, 256, bias=False))
    p = capture(model, (torch.randn(1, 256),)).problem
    p = p.with_devices(2, [float("inf")] * 2)
    for name in ("0.weight", "1.weight", "2.weight"):
        group = p.colocate[p.index[f"param:{name}"]]
        holders = [i for i in np.flatnonzero(p.colocate == group) if p.names[i].endswith(":kept")]
        assert len(holders) == 2, [p.names[i] for i in holders]  # the weight's and its gradient's
    kept = next(i for i in range(p.n) if p.names[i].endswith(":kept") and not p.names[i].startswith("param:")
                and p.colocate_names[p.colocate[i]] == "param:1.weight")
    producer = next(int(u) for u in p.src[p.dst == kept] if p.names[u] != "optimizer:end")
    assert p.colocate[producer] < 0 or np.sum(p.colocate == p.colocate[producer]) < np.sum(p.colocate == p.colocate[kept])
    placement = np.zeros(p.n, dtype=int)
    placement[producer if p.colocate[producer] < 0 else p.colocate == p.colocate[producer]] = 1
    ev = evaluate(p, placement, memory_model="peak")
    buf = buffers(p, ev.placement, ev.start, ev.finish)
    held = {int(d): (float(t0), float(t1)) for d, u, t0, t1 in zip(buf.device, buf.node, buf.t0, buf.t1) if u == producer}
    assert held[1] == (ev.start[producer], ev.finish[producer])
    assert held[0] == (ev.finish[producer], ev.finish[kept]) and ev.finish[kept] == ev.makespan
    assert p.out_bytes[producer] == 1024 * 512 * 4


def test_accumulation_and_sparse_gradients_are_the_same_under_either_zero_grad():
    """With ``accumulate`` the gradient buffer the micro-batches add into is persistent either way
    (PyTorch allocates it at the first micro-batch's backward, when no micro-batch has yet peaked
    higher than a later one will with it); a sparse gradient was already the backward's tensor
    only. Both problems are the ``zeros`` ones, node for node, but for the attribute naming it."""
    model, inputs = tm.mlp_factory()
    x = torch.randn(8, 8)
    caps = {m: capture(model, (x,), accumulate=2, zero_grad=m, name="a") for m in ("none", "zeros")}
    assert caps["none"].problem.attrs["zero_grad"] == "none" and caps["zeros"].problem.attrs["zero_grad"] == "zeros"
    caps["none"].problem.attrs["zero_grad"] = "zeros"
    assert problem_to_native(caps["none"].problem) == problem_to_native(caps["zeros"].problem)
    emb = torch.nn.Sequential(torch.nn.Embedding(1000, 16, sparse=True), torch.nn.Linear(16, 2))
    ids = torch.randint(0, 1000, (4, 8))
    for mode in ("none", "zeros"):
        p = capture(emb, (ids,), optimizer="sgd", zero_grad=mode).problem
        i = p.index["param:0.weight"]
        assert (p.param_bytes[i], p.out_bytes[i]) == (0.0, 1000 * 16 * 4), mode


class _AmpMlp(torch.nn.Module):
    """Two layers under fp16 autocast, the loss inside it (the AMP recipe's forward)."""

    def __init__(self) -> None:
        super().__init__()
        self.fc1, self.fc2 = torch.nn.Linear(64, 256), torch.nn.Linear(256, 64)

    def forward(self, x):
        with torch.autocast("cpu", dtype=torch.float16):
            return self.fc2(torch.relu(self.fc1(x))).float().square().mean()


@pytest.mark.parametrize("mode", ["none", "zeros"])
def test_grad_scaler_step_is_eager_pytorchs(mode):
    """``grad_scaler=True`` traces ``scaler.scale(loss).backward(); scaler.step(opt);
    scaler.update()`` (the step not skipped): the loss times the scale, one
    ``_amp_foreach_non_finite_check_and_unscale_`` per gradient (not one op over all of them, which
    would put every gradient on one device), the update, the scale's update. It could not be in a
    captured step before. Running the captured graph gives eager GradScaler's weights, and the
    one-device peak is PyTorch's within 3%."""
    torch.manual_seed(0)
    model, x = _AmpMlp(), torch.randn(32, 64)
    ref = copy.deepcopy(model)
    cap = capture(model, (x,), loss_fn=lambda loss: loss, grad_scaler=True, zero_grad=mode)
    p = cap.problem
    assert p.attrs["grad_scaler"] is True and p.attrs["zero_grad"] == mode
    unscale = [i for i in range(p.n) if p.node_meta[i]["op"] == "aten._amp_foreach_non_finite_check_and_unscale_"]
    assert len(unscale) == 4  # one per gradient
    groups = {int(p.colocate[i]) for i in unscale}
    assert len(groups) == 4 and -1 not in groups  # each with its own gradient, none tied to another's
    assert sum(p.node_meta[i]["op"] == "aten._amp_update_scale_" for i in range(p.n)) == 1
    args = [a.clone() for a in cap.arguments]
    loss, _ = cap.graph_module(*args)
    opt = torch.optim.Adam(ref.parameters(), lr=LR, foreach=False)
    scaler = torch.amp.GradScaler("cpu")
    eager = ref(x)
    scaler.scale(eager).backward()
    scaler.step(opt)
    scaler.update()
    assert loss.item() == pytest.approx(eager.item(), rel=1e-6)
    for (name, prm), updated in zip(ref.named_parameters(), args):
        torch.testing.assert_close(updated, prm.detach(), rtol=1e-5, atol=1e-7, msg=name)
    theirs = _loop_peak(model, x, set_to_none=mode == "none", scaler=True)
    ours = _one_device_peak(p)
    assert abs(ours - theirs) <= 0.03 * theirs, (ours, theirs)


def test_grad_scaler_on_the_command_line(tmp_path, capsys):
    out = tmp_path / "g.json"
    assert main([f"{tm.__file__}:mlp_factory", "-o", str(out), "--grad-scaler", "--zero-grad", "zeros"]) == 0
    assert out.exists()
    assert main([f"{tm.__file__}:mlp_factory", "-o", str(out), "--grad-scaler", "--inference"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert "grad_scaler: a GradScaler scales a training step's loss" in err[-1], err
