"""Realcheck round 8 (session 41, bench/real_models8.py): what the PyTorch importer got wrong or could
not express on the training code of that round, each checked against hand-derived bytes, edges or
eager PyTorch."""
from __future__ import annotations

import copy

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import torch_models as tm  # noqa: E402  (tests/torch_models.py)

from placement.evaluator import evaluate  # noqa: E402
from placement.importers.torch import LR, capture, main, measured_step_peak  # noqa: E402

# the hand-checked MLP of tests/test_importers_torch.py: 8 -> 16 -> 16 -> 4, fc3 without bias
W = {"fc1.weight": 16 * 8 * 4, "fc1.bias": 16 * 4, "fc2.weight": 16 * 16 * 4, "fc2.bias": 16 * 4, "fc3.weight": 4 * 16 * 4}


def _torch_optimizer(name, params):
    return {
        "adamw": lambda: torch.optim.AdamW(params, lr=LR, foreach=False),  # weight decay 1e-2, PyTorch's default
        "sgd-momentum": lambda: torch.optim.SGD(params, lr=LR, momentum=0.9, foreach=False),
        "sgd-nesterov": lambda: torch.optim.SGD(params, lr=LR, momentum=0.9, nesterov=True, foreach=False),
        "rmsprop": lambda: torch.optim.RMSprop(params, lr=LR, foreach=False),
        "adagrad": lambda: torch.optim.Adagrad(params, lr=LR, foreach=False),
    }[name]()


# optimizer -> (state tensors per weight, the update's ops in the captured graph for one weight)
OPTIMIZERS = {
    "adamw": (2, ["aten.add_", "aten.addcdiv_", "aten.addcmul_", "aten.div", "aten.lerp_", "aten.mul_", "aten.mul_", "aten.sqrt"]),
    "sgd-momentum": (1, ["aten.add_", "aten.add_", "aten.mul_"]),
    "sgd-nesterov": (1, ["aten.add", "aten.add_", "aten.add_", "aten.mul_"]),
    "rmsprop": (1, ["aten.add_", "aten.addcdiv_", "aten.addcmul_", "aten.mul_", "aten.sqrt"]),
    "adagrad": (1, ["aten.add_", "aten.addcdiv_", "aten.addcmul_", "aten.sqrt"]),
}


@pytest.mark.parametrize("name", list(OPTIMIZERS))
def test_optimizers_beyond_adam_and_sgd_are_torchs_own_step(name):
    """Training code uses AdamW (transformers), SGD with momentum or Nesterov (CNNs), RMSprop and
    Adagrad; the importer knew Adam and plain SGD only, so a ResNet trained with momentum SGD was
    one weight-sized state short per parameter (``--optimizer sgd``). Each is now torch.optim's own
    single-tensor update: its state is persistent bytes, its ops are colocated with the weight, and
    the captured step gives torch.optim's weights (after a second step for the optimizers whose
    update does not depend on the step count, so the steady-state form is what is checked)."""
    n_states, update = OPTIMIZERS[name]
    model, inputs = tm.mlp_factory()
    ref = copy.deepcopy(model)
    cap = capture(model, inputs, optimizer=name)
    p = cap.problem
    for pname, size in W.items():
        nid = f"param:{pname}"
        assert p.param_bytes[p.index[nid]] == (1 + n_states) * size  # gradient + states; the weight is the output
        assert p.out_bytes[p.index[nid]] == size
    groups = {}
    for i, g in enumerate(p.colocate.tolist()):
        if g >= 0:
            groups.setdefault(p.colocate_names[g], []).append(p.node_meta[i]["op"])
    assert sorted(groups["param:fc1.weight"]) == sorted(["placeholder.param"] + update)
    assert p.attrs["optimizer"] == name

    params = list(ref.parameters())
    opt = _torch_optimizer(name, params)
    loss_fn = lambda out: out.sum()  # noqa: E731 (the MLP's default loss)
    args = [a.clone() for a in cap.arguments]
    if name not in ("adamw",):  # a warm-up step, then the captured step from torch.optim's state
        loss_fn(ref(*inputs)).backward()
        opt.step()
        opt.zero_grad()
        n = len(params)
        for i, prm in enumerate(params):
            args[i] = prm.detach().clone()
            state = [v for k, v in opt.state[prm].items() if k != "step"]
            assert len(state) == n_states
            for k, v in enumerate(state):
                args[n + n_states * i + k] = v.clone()
    loss, _ = cap.graph_module(*args)
    eager = loss_fn(ref(*inputs))
    eager.backward()
    opt.step()
    assert loss.item() == pytest.approx(eager.item(), rel=1e-5)
    for (pname, prm), updated in zip(ref.named_parameters(), args):
        torch.testing.assert_close(updated, prm.detach(), rtol=1e-5, atol=1e-7, msg=pname)


def test_momentum_sgd_memory_matches_pytorchs_own_step():
    """Our persistent bytes grow by the momentum buffers exactly as torch.optim.SGD(momentum=0.9)'s
    measured persistent bytes do (one weight-size per parameter over plain SGD), and the one-device
    FIFO peak is within 25% of PyTorch's measured step."""
    model, inputs = tm.mlp_factory()
    weights = sum(W.values())
    ours, theirs = {}, {}
    for name in ("sgd", "sgd-momentum"):
        p = capture(model, inputs, optimizer=name).problem
        ours[name] = (p.param_bytes.sum(), evaluate(p, np.zeros(p.n, dtype=int), memory_model="peak").peak_memory[0])
        theirs[name] = measured_step_peak(model, inputs, optimizer=name, loss_fn=lambda out: out.sum())
    assert ours["sgd"][0] == weights and ours["sgd-momentum"][0] == 2 * weights  # + the weights themselves, as outputs
    assert theirs["sgd-momentum"]["persistent"] - theirs["sgd"]["persistent"] == weights
    assert abs(ours["sgd-momentum"][1] - theirs["sgd-momentum"]["peak"]) <= 0.25 * theirs["sgd-momentum"]["peak"]


def test_an_unknown_optimizer_is_one_line_naming_the_choices(tmp_path, capsys):
    out = tmp_path / "g.json"
    with pytest.raises(SystemExit) as exc:
        main([f"{tm.__file__}:mlp_factory", "-o", str(out), "--optimizer", "lamb"])
    assert exc.value.code == 2 and not out.exists()
    assert "sgd-momentum" in capsys.readouterr().err
