"""The PyTorch importer: a hand-checked MLP, real architectures, costs, the CLI, bad input, and
placements back onto the captured graph. Needs the torch extra (CI installs '.[test,torch,onnx]')."""
from __future__ import annotations

import copy
import json
import os
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import torch_models as tm  # noqa: E402  (tests/torch_models.py)

from placement.evaluator import evaluate  # noqa: E402
from placement.formats import load_problem  # noqa: E402
from placement.formats.native import problem_to_native, read_problem  # noqa: E402
from placement.importers.build import write_native  # noqa: E402
from placement.importers.devicemap import annotate_graph, device_map, run_split  # noqa: E402
from placement.importers.torch import capture, graph_from_torch, main, measured_step_peak  # noqa: E402
from placement.problem import ProblemError  # noqa: E402

MODELS = Path(tm.__file__)
VIEWS = {"aten.view", "aten.t", "aten.transpose", "aten.expand", "aten.permute", "aten.unsqueeze", "aten.squeeze",
         "aten._unsafe_view", "aten.detach", "aten.split", "aten.slice", "aten.select", "aten.alias", "getitem"}
ADAM_UPDATE = ["aten.add_", "aten.addcdiv_", "aten.addcmul_", "aten.div", "aten.lerp_", "aten.mul_", "aten.sqrt"]


def _ops(cap, phase=None):
    p = cap.problem
    return sorted(p.node_meta[i]["op"] for i in range(p.n) if phase is None or cap.phase.get(p.ids[i]) == phase)


def _bytes(p, nid):
    return p.out_bytes[p.index[nid]]


def _groups(p):
    members: dict[str, list[str]] = {}
    for i, g in enumerate(p.colocate.tolist()):
        if g >= 0:
            members.setdefault(p.colocate_names[g], []).append(p.ids[i])
    return members


# ----- the hand-checked MLP: 8 -> 16 -> 16 -> 4, batch 2, float32, fc3 without bias ---------------

W = {"fc1.weight": 16 * 8 * 4, "fc1.bias": 16 * 4, "fc2.weight": 16 * 16 * 4, "fc2.bias": 16 * 4, "fc3.weight": 4 * 16 * 4}


def test_mlp_training_step_checked_by_hand():
    """The step with gradients kept zeroed in place (``zero_grad="zeros"``, the only problem before
    session 42), node by node; then what the default (``set_to_none=True``) changes in it."""
    model, inputs = tm.mlp_factory()
    cap = capture(model, inputs, zero_grad="zeros")
    p = cap.problem
    assert _ops(cap, "forward") == sorted(["aten.addmm", "aten.relu", "aten.addmm", "aten.relu", "aten.mm", "aten.sum"])
    # backward: the loss's seed, fc3's weight gradient and input gradient, two ReLU backwards, fc2's
    # and fc1's weight gradients (mm) and bias gradients (sum), fc2's input gradient
    # (and two zero-time ``order`` nodes: fc3's and fc2's input-gradient mm read the weight that the
    # update later writes in place; nothing else orders them before it)
    assert _ops(cap, "backward") == sorted(["aten.ones_like", "aten.mm", "aten.mm", "aten.threshold_backward", "aten.mm",
                                            "aten.mm", "aten.sum", "aten.threshold_backward", "aten.mm", "aten.sum",
                                            "order", "order"])
    assert _ops(cap, "optimizer") == sorted(ADAM_UPDATE * 5)
    assert p.n == 5 + 1 + 6 + 10 + 35 + 2
    # the weight is the parameter node's output (read until its update); gradient and Adam's two
    # states are persistent bytes
    assert {nid: p.out_bytes[p.index[f"param:{nid}"]] for nid in W} == W
    assert {nid: p.param_bytes[p.index[f"param:{nid}"]] for nid in W} == {k: 3 * v for k, v in W.items()}
    assert p.param_bytes.sum() == 3 * sum(W.values())
    # activations: [2, 16] float32 = 128 bytes; the logits [2, 4] = 32; the loss 4
    fwd = [p.ids[i] for i in range(p.n) if cap.phase[p.ids[i]] == "forward"]
    assert [p.node_meta[p.index[n]]["outputs"][0]["shape"] for n in fwd] == [[2, 16], [2, 16], [2, 16], [2, 16], [2, 4], []]
    assert [_bytes(p, n) for n in fwd] == [128, 128, 128, 128, 32, 4]
    assert _bytes(p, "input:0") == 64
    # the weight gradients are as large as the weights
    bwd_mm = sorted(_bytes(p, p.ids[i]) for i in range(p.n) if cap.phase[p.ids[i]] == "backward" and p.node_meta[i]["op"] == "aten.mm")
    assert bwd_mm == sorted([W["fc3.weight"], 128, 128, W["fc2.weight"], W["fc1.weight"]])
    # fc1: addmm(bias, x, weight^T): the transpose is folded, the edge carries the weight's bytes
    fc1 = fwd[0]
    assert p.node_meta[p.index[fc1]]["inputs"] == [{"shape": [16], "dtype": "float32"}, {"shape": [2, 8], "dtype": "float32"},
                                                    {"shape": [8, 16], "dtype": "float32"}]
    edges = {(p.ids[u], p.ids[v]): (b, m) for u, v, b, m in zip(p.src.tolist(), p.dst.tolist(), p.edge_bytes.tolist(), p.edge_meta)}
    assert edges[("param:fc1.bias", fc1)] == (64, {"src_output": 0, "dst_inputs": [0]})
    assert edges[("input:0", fc1)] == (64, {"src_output": 0, "dst_inputs": [1]})
    assert edges[("param:fc1.weight", fc1)] == (512, {"src_output": 0, "dst_inputs": [2]})
    # each parameter's update: its 7 Adam ops, colocated with it; only sqrt and div allocate
    groups = _groups(p)
    order = {g: m for g, m in groups.items() if any(p.node_meta[p.index[x]]["op"] == "order" for x in m)}
    assert sorted(set(groups) - set(order)) == sorted(f"param:{n}" for n in W)
    # each order node sits with the mm it follows, takes no time and holds no bytes
    assert sorted(sorted(p.node_meta[p.index[x]]["op"] for x in m) for m in order.values()) == [["aten.mm", "order"]] * 2
    assert all(p.time[p.index[f"{g}:read"]] == 0 and _bytes(p, f"{g}:read") == 0 for g in order)
    for name, size in W.items():
        members = groups[f"param:{name}"]
        assert members[0] == f"param:{name}"
        assert sorted(p.node_meta[p.index[m]]["op"] for m in members[1:]) == ADAM_UPDATE
        assert sorted(_bytes(p, m) for m in members[1:]) == [0, 0, 0, 0, 0, size, size]
        lerp = next(m for m in members if p.node_meta[p.index[m]]["op"] == "aten.lerp_")
        assert edges[(f"param:{name}", lerp)][1] == {"src_output": 1, "dst_inputs": [0]}  # exp_avg is output 1
    # no views left
    assert not VIEWS & set(_ops(cap))
    # PyTorch 2.x's default, zero_grad(set_to_none=True): the same ops; no gradient among the
    # persistent bytes; each gradient (the mm or sum that makes it) and each weight held to the step's
    # end by a zero-time :kept node colocated with the weight, which waits for optimizer:end, after
    # every update's last in-place write (addcdiv_)
    new = capture(model, inputs)
    q = new.problem
    assert q.attrs["zero_grad"] == "none"
    assert {nid: q.param_bytes[q.index[f"param:{nid}"]] for nid in W} == {k: 2 * v for k, v in W.items()}
    assert {nid: q.out_bytes[q.index[f"param:{nid}"]] for nid in W} == W
    added = sorted(set(q.ids) - set(p.ids))
    grads = [a.removesuffix(":kept") for a in added if a.endswith(":kept") and not a.startswith("param:")]
    assert sorted(q.node_meta[q.index[g]]["op"] for g in grads) == ["aten.mm"] * 3 + ["aten.sum"] * 2  # weights, biases
    assert sorted(_bytes(q, g) for g in grads) == sorted(W.values())
    assert added == sorted(["optimizer:end"] + [f"{g}:kept" for g in grads] + [f"param:{n}:kept" for n in W])
    assert all(q.node_meta[q.index[a]]["op"] == "order" and q.time[q.index[a]] == 0 and _bytes(q, a) == 0 for a in added)
    qedges = set(zip((q.ids[u] for u in q.src.tolist()), (q.ids[v] for v in q.dst.tolist())))
    for held in grads + [f"param:{n}" for n in W]:
        assert (held, f"{held}:kept") in qedges and ("optimizer:end", f"{held}:kept") in qedges
    for n in W:  # a weight is held with itself; each gradient with its weight (p.grad lives with p)
        assert q.colocate[q.index[f"param:{n}:kept"]] == q.colocate[q.index[f"param:{n}"]] >= 0
    homes = sorted(q.colocate_names[q.colocate[q.index[f"{g}:kept"]]] for g in grads)
    assert homes == sorted(f"param:{n}" for n in W)
    assert sorted(q.node_meta[q.index[u]]["op"] for u, v in qedges if v == "optimizer:end") == ["aten.addcdiv_"] * 5
    assert sorted(q.ids[i] for i in range(q.n) if q.ids[i] not in added) == sorted(p.ids)


def test_mlp_inference_and_sgd_persistent_bytes():
    model, inputs = tm.mlp_factory()
    inf = capture(model, inputs, train=False)
    p = inf.problem
    assert _ops(inf) == sorted(["aten.addmm", "aten.relu", "aten.addmm", "aten.relu", "aten.mm"] + ["placeholder.param"] * 5
                               + ["placeholder.input"] + ["order"] * 6)  # a :kept per weight and step:end
    # nothing updates the weights: each is its node's output, held at home until its :kept node,
    # which runs after step:end (after every sink, over edges that cost no transfer)
    assert p.param_bytes.sum() == 0
    assert [p.out_bytes[p.index[f"param:{n}"]] for n in W] == list(W.values())
    for n in W:
        kept = p.index[f"param:{n}:kept"]
        assert p.colocate[kept] == p.colocate[p.index[f"param:{n}"]] >= 0 and p.time[kept] == 0
        assert p.comm_between(p.index["step:end"], kept) == 0.0
    assert all(p.comm_between(v, p.index["step:end"]) == 0.0 for v in range(p.n) if p.index["step:end"] in
               p.succ_ptr[1][p.succ_ptr[0][v]:p.succ_ptr[0][v + 1]])
    sgd = capture(model, inputs, optimizer="sgd")
    assert sgd.problem.param_bytes.sum() == 0  # nothing: the weights are outputs, the gradients the backward's
    assert [o for o in _ops(sgd, "optimizer") if o != "order"] == ["aten.add_"] * 5  # (and the :kept holds)
    kept = capture(model, inputs, optimizer="sgd", zero_grad="zeros")
    assert kept.problem.param_bytes.sum() == sum(W.values())  # the gradients, zeroed in place


def test_roofline_times_by_hand():
    model, inputs = tm.mlp_factory()
    p = graph_from_torch(model, inputs, train=False)
    fc1 = p.index["addmm"]
    # 2*2*8*16 FLOPs; bytes: bias 64 + x 64 + weight 512 read, 128 written: memory-bound on an H100
    assert p.time[fc1] == pytest.approx(1e3 * (max(512 / 67e12, 768 / 3.35e12) + 5e-6))
    big = torch.nn.Linear(1024, 1024)
    q = graph_from_torch(big, (torch.randn(512, 1024),), train=False, device_spec="a100")
    flops = 2 * 512 * 1024 * 1024
    assert q.time[q.index["addmm"]] == pytest.approx(1e3 * (flops / 19.5e12 + 5e-6))
    assert q.memory.tolist() == [80e9]


def test_fused_lstm_layer_costs_its_matmuls_not_one_flop_per_element():
    """nn.LSTM traced on CPU is one ``mkldnn_rnn_layer`` per layer holding every time step: its
    roofline time is the steps' gate matmuls (2·T·B·4H·(I + H) FLOPs forward, twice that
    backward), not one FLOP per element of its largest tensor (256 times too cheap here)."""
    torch.manual_seed(0)
    lstm = torch.nn.LSTM(256, 256)
    x = torch.randn(32, 64, 256)
    p = graph_from_torch(lstm, (x,), loss_fn=lambda out: out[0].sum())
    ops = {p.node_meta[i]["op"]: i for i in range(p.n)}
    if "aten.mkldnn_rnn_layer" not in ops:
        pytest.skip("this torch build unrolls nn.LSTM on CPU (no oneDNN)")
    forward = 2 * 32 * 64 * 1024 * (256 + 256)
    assert p.time[ops["aten.mkldnn_rnn_layer"]] == pytest.approx(1e3 * (forward / 67e12 + 5e-6))
    assert p.time[ops["aten.mkldnn_rnn_layer_backward"]] == pytest.approx(1e3 * (2 * forward / 67e12 + 5e-6))


def _resident_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


@pytest.mark.skipif(not Path("/proc/self/statm").exists(), reason="reads the resident set from /proc")
def test_capture_allocates_no_optimizer_state():
    """Tracing runs on fake tensors: Adam's two states (twice the weights, 6 GB for GPT-2 large)
    are allocated only when the step is run for real (``capture.arguments``), where they are
    zeros."""
    model = torch.nn.Linear(4096, 4096, bias=False)  # 64 MiB of weight
    weight = 4096 * 4096 * 4
    capture(torch.nn.Linear(8, 8), (torch.randn(2, 8),))  # the tracer's own first-use allocations
    before = _resident_bytes()
    cap = capture(model, (torch.randn(2, 4096),))
    grown = _resident_bytes() - before
    assert grown < weight, f"capture grew the resident set by {grown / weight:.2f}x the weights"
    states = cap.arguments[1:3]
    assert [tuple(s.shape) for s in states] == [(4096, 4096)] * 2 and not any(s.any() for s in states)


def test_the_captured_step_is_the_real_step():
    """Running the captured graph gives eager PyTorch's loss and torch.optim.Adam's updated weights."""
    for factory in (tm.mlp_factory, tm.gpt2_tiny):
        made = factory()
        model, inputs = made[0], made[1]
        loss_fn = made[2] if len(made) > 2 else (lambda out: out.sum())
        cap = capture(model, inputs, loss_fn=loss_fn)
        args = [a.clone() for a in cap.arguments]
        loss, _ = cap.graph_module(*args)
        ref = copy.deepcopy(model)
        opt = torch.optim.Adam(ref.parameters(), lr=1e-3, foreach=False)
        eager = loss_fn(ref(*inputs))
        eager.backward()
        opt.step()
        assert loss.item() == pytest.approx(eager.item(), rel=1e-5)
        for (name, p), updated in zip(ref.named_parameters(), args):
            torch.testing.assert_close(updated, p.detach(), rtol=1e-4, atol=1e-6, msg=name)


def test_native_round_trip_equals_the_importers_problem(tmp_path):
    model, inputs, loss_fn = tm.bert_tiny()
    p = graph_from_torch(model, inputs, loss_fn=loss_fn)
    path = tmp_path / "bert.json.gz"
    write_native(p, path)
    q = load_problem(path)
    assert q.ids == p.ids and q.names == p.names and q.colocate_names == p.colocate_names
    for field in ("time", "out_bytes", "param_bytes", "colocate", "src", "dst", "comm", "edge_bytes", "memory"):
        assert np.array_equal(getattr(q, field), getattr(p, field)), field
    assert q.node_meta == p.node_meta and q.edge_meta == p.edge_meta
    assert q.link == p.link
    assert problem_to_native(q) == problem_to_native(p)


# ----- real architectures -------------------------------------------------------------------------

def _param_bytes(model):
    return sum(p.numel() * p.element_size() for p in model.parameters())


def _weights_and_states(cap):
    """Bytes of weights (parameter nodes' outputs) plus persistent bytes (gradients, states), plus
    buffers (their nodes' outputs, held until step:end)."""
    p = cap.problem
    held = list(cap.param_nodes.values()) + [n for n, ph in cap.phase.items() if ph == "buffer"]
    return p.param_bytes.sum() + sum(p.out_bytes[p.index[n]] for n in held)


def test_bert():
    c = tm.BertConfig()
    model, inputs, loss_fn = tm.bert_factory(c)
    cap = capture(model, inputs, loss_fn=loss_fn)
    p = cap.problem
    fwd = Counter(_ops(cap, "forward"))
    assert fwd["aten.bmm"] == 2 * c.layers  # scores and context per layer
    assert fwd["aten._softmax"] == c.layers
    assert fwd["aten.native_layer_norm"] == 2 * c.layers + 2  # two per layer, embeddings, MLM head
    # dropout (three per layer) is a mask drawn in place: empty_like, bernoulli_, div_ (scale)
    assert fwd["aten.bernoulli_"] == fwd["aten.empty_like"] == fwd["aten.div_"] == 3 * c.layers
    assert fwd["aten.embedding"] == 3
    bwd = Counter(_ops(cap, "backward"))
    assert bwd["aten._softmax_backward_data"] == c.layers and bwd["aten.native_layer_norm_backward"] == 2 * c.layers + 2
    assert _weights_and_states(cap) == 3 * _param_bytes(model)  # weights, Adam's states (gradients: set_to_none)
    assert len([g for g in _groups(p) if g.startswith("param:")]) == len(list(model.parameters()))
    assert not VIEWS & set(_ops(cap))
    groups = _groups(p)
    edges = set(zip((p.ids[u] for u in p.src.tolist()), (p.ids[v] for v in p.dst.tolist())))
    for i in range(p.n):
        if p.node_meta[i]["op"] != "aten.empty_like":
            continue
        mask = p.ids[i]
        # the in-place writes sit with the mask, which holds its bytes until the backward reads it
        assert sorted(p.node_meta[p.index[m]]["op"] for m in groups[mask]) == ["aten.bernoulli_", "aten.div_", "aten.empty_like"]
        readers = {cap.phase[v] for u, v in edges if u == mask and v not in groups[mask]}
        assert readers == {"forward", "backward"}
        shape = p.node_meta[i]["outputs"][0]["shape"]
        assert shape in ([c.batch, c.seq, c.hidden], [c.batch, c.heads, c.seq, c.seq])
        assert p.out_bytes[i] == 4 * np.prod(shape)
    # layer-norm statistics are held for the backward apart from the outputs
    saved = [p.ids[i] for i in range(p.n) if p.node_meta[i]["op"] == "saved" and ":saved" in p.ids[i]]
    assert len(saved) == 2 * (2 * c.layers + 2)


def test_gpt2_block_stack_with_tied_embeddings():
    c = tm.GPT2Config()
    model, inputs, loss_fn = tm.gpt2_factory(c)
    cap = capture(model, inputs, loss_fn=loss_fn)
    p = cap.problem
    ops = Counter(_ops(cap))
    assert ops["aten._scaled_dot_product_flash_attention_for_cpu"] == c.n_layer
    assert ops["aten._scaled_dot_product_flash_attention_for_cpu_backward"] == c.n_layer
    assert ops["aten.native_layer_norm"] == 2 * c.n_layer + 1
    # the LM head shares wte: one parameter, whose gradient sums the embedding's and the head's
    assert len(cap.param_nodes) == len(list(model.parameters())) == 4 + 12 * c.n_layer
    wte = _groups(p)["param:wte.weight"]
    lerp = next(m for m in wte if p.node_meta[p.index[m]]["op"] == "aten.lerp_")
    grad = [p.ids[u] for u, v in zip(p.src.tolist(), p.dst.tolist()) if p.ids[v] == lerp and not p.ids[u].startswith("param:")]
    assert [p.node_meta[p.index[g]]["op"] for g in grad] == ["aten.add"]
    assert _weights_and_states(cap) == 3 * _param_bytes(model)


def _ancestors(p, node_id):
    pred: dict[int, list[int]] = {}
    for u, v in zip(p.src.tolist(), p.dst.tolist()):
        pred.setdefault(v, []).append(u)
    seen, todo = set(), [p.index[node_id]]
    while todo:
        for u in pred.get(todo.pop(), ()):
            if u not in seen:
                seen.add(u)
                todo.append(u)
    return {p.ids[u] for u in seen}


class _ReadThenWrite(torch.nn.Module):
    """``b`` reads ``a`` before ``a.mul_`` writes it: b must see the old value."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = torch.nn.Linear(4, 4)

    def forward(self, x):
        a = self.lin(x) + 1  # add's backward needs no value, so autograd allows the write
        b = a * 2
        a.mul_(3)
        return (a + b).sum()


@pytest.mark.parametrize("optimizer, update", [("adam", "aten.addcdiv_"), ("sgd", "aten.add_")])
def test_reads_of_a_tensor_precede_its_later_in_place_writes(optimizer, update):
    """Write after read: an op reading a tensor that the program later writes in place must run
    before the write, so the graph needs an edge (an ordering edge) from the reader to the writer.
    The weight of fc2 is read by the backward's input-gradient mm, whose result flows to fc1, not to
    fc2's update: without the edge a schedule could update fc2's weight first (wrong gradients)."""
    model, inputs = tm.mlp_factory()
    p = capture(model, inputs, optimizer=optimizer).problem
    for name in W:
        pid = f"param:{name}"
        # (not the zero-time node that holds the weight to the step's end: it reads nothing)
        readers = {p.ids[v] for u, v in zip(p.src.tolist(), p.dst.tolist()) if p.ids[u] == pid and p.ids[v] != f"{pid}:kept"}
        writes = [r for r in readers if p.node_meta[p.index[r]]["op"] == update
                  and p.edge_meta[next(j for j in range(len(p.src)) if p.ids[p.src[j]] == pid and p.ids[p.dst[j]] == r)].get("dst_inputs") == [0]]
        assert len(writes) == 1, (name, writes)
        before = _ancestors(p, writes[0])
        assert readers - {writes[0]} <= before, (name, sorted(readers - before - {writes[0]}))
    torch.manual_seed(0)
    cap = capture(_ReadThenWrite(), (torch.randn(2, 4),))
    q = cap.problem
    mul_ = next(q.ids[i] for i in range(q.n) if q.node_meta[i]["op"] == "aten.mul_" and cap.phase[q.ids[i]] == "forward")
    mul = next(q.ids[i] for i in range(q.n) if q.node_meta[i]["op"] == "aten.mul" and cap.phase[q.ids[i]] == "forward")
    assert mul in _ancestors(q, mul_)


def test_cnn_batch_norm_sits_with_its_running_statistics():
    model, inputs, loss_fn = tm.cnn_tiny()
    cap = capture(model, inputs, loss_fn=loss_fn)
    p = cap.problem
    convs = [m for m in model.modules() if isinstance(m, torch.nn.Conv2d)]
    bns = [n for n, m in model.named_modules() if isinstance(m, torch.nn.BatchNorm2d)]
    ops = Counter(_ops(cap))
    assert ops["aten.convolution"] == ops["aten.convolution_backward"] == len(convs)
    assert ops["aten.native_batch_norm"] == ops["aten.native_batch_norm_backward"] == len(bns)
    groups = _groups(p)
    for bn in bns:
        group = next(g for g in groups.values() if f"buffer:{bn}.running_mean" in g)
        assert f"buffer:{bn}.running_var" in group
        assert [p.node_meta[p.index[m]]["op"] for m in group].count("aten.native_batch_norm") == 1
    buffers = sum(b.numel() * b.element_size() for b in model.buffers())
    assert _weights_and_states(cap) == 3 * _param_bytes(model) + buffers


@pytest.mark.parametrize("name, made", [
    ("cnn", lambda: tm.cnn_factory(widths=(16, 32), blocks=2, batch=8, size=32)),
    ("bert", lambda: tm.bert_factory(tm.BertConfig(vocab=1000, hidden=128, layers=2, heads=4, intermediate=512, batch=8, seq=64))),
    ("gpt2", lambda: tm.gpt2_factory(tm.GPT2Config(vocab=1000, n_embd=128, n_layer=2, n_head=4, batch=8, seq=64))),
    ("gpt2-checkpointed", lambda: tm.gpt2_factory(tm.GPT2Config(vocab=1000, n_embd=128, n_layer=2, n_head=4, batch=8, seq=64,
                                                                 checkpoint=True))),
])
def test_peak_memory_on_one_device_within_25_percent_of_pytorchs_own(name, made):
    model, inputs, loss_fn = made()
    p = graph_from_torch(model, inputs, loss_fn=loss_fn)
    ours = evaluate(p, np.zeros(p.n, dtype=int), memory_model="peak").peak_memory[0]
    theirs = measured_step_peak(model, inputs, loss_fn=loss_fn)
    assert theirs["peak"] > 1.5 * theirs["persistent"]  # activations matter in these configs
    assert abs(ours - theirs["peak"]) <= 0.25 * theirs["peak"], (ours, theirs)


def test_activation_checkpointing_recomputes_in_the_backward_and_saves_memory():
    """Blocks under torch.utils.checkpoint: the captured backward recomputes each block's forward
    from the parameters themselves (the trace sees them as constants there), and the recomputation
    waits for the backward to reach it, as in PyTorch (it reads only forward tensors, so without
    the wait a schedule could run it in the forward and keep its outputs, the memory checkpointing
    is for). Then the peak-memory bound falls below the plain model's, and 2 devices at 1.3 x that
    bound fit (the portfolio found nothing there while the recomputation could run early)."""
    from heuristics.chain_pin import descendants
    from placement.memory_bounds import memory_lower_bound
    from placement.solution import SolveOptions
    from solvers.run import run

    c = tm.GPT2Config(vocab=1000, n_embd=128, n_layer=2, n_head=4, batch=8, seq=64)
    made = [tm.gpt2_factory(c), tm.gpt2_factory(tm.GPT2Config(**{**c.__dict__, "checkpoint": True}))]
    plain, ck = (graph_from_torch(model, inputs, loss_fn=loss_fn) for model, inputs, loss_fn in made)
    gelus = [[i for i in np.argsort(p.topo_rank) if p.node_meta[i].get("op") == "aten.gelu"] for p in (plain, ck)]
    assert [len(g) for g in gelus] == [c.n_layer, 2 * c.n_layer]  # each block's forward once more
    seed = next(i for i in range(ck.n) if ck.node_meta[i].get("op") == "aten.ones_like")  # the loss's gradient
    after = descendants(ck, np.array([seed]))
    assert [bool(after[g]) for g in gelus[1]] == [False] * c.n_layer + [True] * c.n_layer
    assert not any(str(i).endswith(":then") for i in plain.ids)  # nothing to hold back without checkpointing
    # the recomputation reads the parameters themselves, not constants standing for them
    for prefix in ("const:", "param:"):
        assert {str(i) for i in ck.ids if str(i).startswith(prefix)} == {str(i) for i in plain.ids if str(i).startswith(prefix)}
    bound = [float(memory_lower_bound(p, "peak", 1)["best"]) for p in (plain, ck)]
    assert bound[1] < 0.8 * bound[0]
    two = ck.with_devices(2, 1.3 * float(memory_lower_bound(ck, "peak", 2)["best"]))
    res = run(two, "portfolio", SolveOptions(time_limit=20, memory_model="peak"))
    assert res.evaluation is not None and res.evaluation.feasible(two)


@pytest.mark.parametrize("reentrant", [True, None])
def test_reentrant_checkpointing_keeps_the_blocks_backward(reentrant):
    """torch.utils.checkpoint with use_reentrant=True (the default when the flag is not given)
    differentiates its block in a nested backward the traced autograd.grad never entered: the
    block's Linear had no gradient and no Adam step. It is captured as the non-reentrant form:
    the same step as without checkpointing, plus the recomputation."""
    import warnings

    from torch.utils.checkpoint import checkpoint

    class Net(torch.nn.Module):
        def __init__(self, checkpointed: bool) -> None:
            super().__init__()
            self.a, self.b = torch.nn.Linear(32, 32), torch.nn.Linear(32, 4)
            self.checkpointed = checkpointed

        def forward(self, x):
            inner = lambda y: torch.nn.functional.gelu(self.a(y))  # noqa: E731
            if not self.checkpointed:
                return self.b(inner(x))
            kw = {} if reentrant is None else {"use_reentrant": reentrant}
            return self.b(checkpoint(inner, x, **kw))

    x = torch.randn(8, 32, requires_grad=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch warns when use_reentrant is not given
        plain, ck = (graph_from_torch(Net(c), (x,)) for c in (False, True))
    ops = [Counter(p.node_meta[i].get("op") for i in range(p.n)) for p in (plain, ck)]
    for op in ADAM_UPDATE + ["aten.mm", "aten.gelu_backward"]:
        assert ops[1][op] == ops[0][op], op  # every parameter's gradient and update, as without checkpointing
    assert ops[1]["aten.addmm"] == ops[0]["aten.addmm"] + 1  # a's forward, once more in the backward


@pytest.mark.parametrize("wrap", ["compile", "data-parallel", "both"])
def test_a_wrapped_module_imports_as_the_module_it_wraps(wrap):
    """FX cannot trace torch.compile's wrapper, and the functional API refuses nn.DataParallel;
    the importer takes the module they wrap (a compiled DataParallel: both layers)."""
    model, inputs = tm.mlp_factory()
    wrapped = {"compile": lambda m: torch.compile(m), "data-parallel": torch.nn.DataParallel,
               "both": lambda m: torch.compile(torch.nn.DataParallel(m))}[wrap](model)
    ours, theirs = graph_from_torch(model, inputs), graph_from_torch(wrapped, inputs)
    assert theirs.ids == ours.ids
    assert np.array_equal(theirs.src, ours.src) and np.array_equal(theirs.dst, ours.dst)
    assert np.array_equal(theirs.time, ours.time) and np.array_equal(theirs.out_bytes, ours.out_bytes)


class _TwoHeads(torch.nn.Module):
    """A body and two heads; the step uses the first only (multi-task code run on one task)."""

    def __init__(self):
        super().__init__()
        self.body = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU())
        self.used = torch.nn.Linear(64, 8)
        self.unused = torch.nn.Linear(64, 500)

    def forward(self, x):
        return self.used(self.body(x))


def test_parameters_without_a_gradient_keep_only_their_weight():
    """Eager PyTorch gives a parameter the loss does not reach no gradient and Adam no state for
    it; the importer charged both (and a weight read until an update that never comes), twice
    PyTorch's measured peak on this model."""
    torch.manual_seed(0)
    model, x = _TwoHeads(), torch.randn(16, 32)
    cap = capture(model, (x,))
    p = cap.problem
    for name, prm in model.named_parameters():
        size = prm.numel() * prm.element_size()
        i = p.index[cap.param_nodes[name]]
        if name.startswith("unused."):
            assert (p.param_bytes[i], p.out_bytes[i]) == (size, 0.0)
        else:  # the weight as the node's output, read until its update; Adam's two states persist
            assert (p.param_bytes[i], p.out_bytes[i]) == (2 * size, size)
    for name, _ in model.named_parameters():
        i = p.index[cap.param_nodes[name]]
        readers = {p.ids[d] for s, d in zip(p.src.tolist(), p.dst.tolist()) if s == i}
        updates = [r for r in readers if cap.phase.get(r) == "optimizer" and not r.endswith(":kept")]
        # Adam's step reads each used weight; nothing reads the unused ones, nothing updates them
        assert (not readers) if name.startswith("unused.") else updates, (name, readers)
    ours = evaluate(p, np.zeros(p.n, dtype=int), memory_model="peak").peak_memory[0]
    theirs = measured_step_peak(model, (x,))["peak"]
    assert abs(ours - theirs) <= 0.05 * theirs, (ours, theirs)


class _SparseBag(torch.nn.Module):
    """A 1,000 x 16 embedding with sparse gradients, mean-pooled into a 2-way linear head."""

    def __init__(self):
        super().__init__()
        self.emb = torch.nn.Embedding(1000, 16, sparse=True)
        self.cls = torch.nn.Linear(16, 2)

    def forward(self, ids):
        return self.cls(self.emb(ids).mean(1)).logsumexp(-1).mean()


def test_a_sparse_gradient_holds_the_rows_looked_up_not_the_table():
    """nn.Embedding(sparse=True) with SGD: the gradient is a sparse tensor of the 8 x 5 = 40 rows
    looked up (40 int64 indices and 40 x 16 float32 values), and no dense gradient persists
    (PyTorch's zero_grad leaves a sparse one with no entries). Counted by its dense shape, the
    gradient was the whole table twice over (a persistent one and the backward's), and
    ``measured_step_peak`` failed on the sparse gradient's storage."""
    torch.manual_seed(0)
    model, ids = _SparseBag(), torch.randint(0, 1000, (8, 5))
    cap = capture(model, (ids,), optimizer="sgd")
    p = cap.problem
    table = 1000 * 16 * 4
    i = p.index[cap.param_nodes["emb.weight"]]
    assert (p.param_bytes[i], p.out_bytes[i]) == (0.0, table)
    j = p.index[cap.param_nodes["cls.weight"]]
    assert (p.param_bytes[j], p.out_bytes[j]) == (0.0, 2 * 16 * 4)  # dense: the weight; SGD keeps no state
    grads = [k for k in range(p.n) if p.node_meta[k]["op"] == "aten._sparse_coo_tensor_with_dims_and_tensors"]
    assert len(grads) == 1 and p.out_bytes[grads[0]] == 40 * 8 + 40 * 16 * 4
    assert all(p.edge_bytes[e] == 40 * 8 + 40 * 16 * 4 for e in range(len(p.src))
               if p.src[e] == grads[0] and not p.ids[p.dst[e]].endswith(":kept"))  # (:kept holds it, reading nothing)
    ours = evaluate(p, np.zeros(p.n, dtype=int), memory_model="peak").peak_memory[0]
    theirs = measured_step_peak(model, (ids,), optimizer="sgd")
    assert theirs["persistent"] < table + 2 * 16 * 4 + 2 * 4 + 2 * ids.numel() * 8  # no dense gradient in PyTorch either
    assert abs(ours - theirs["peak"]) <= 0.05 * theirs["peak"], (ours, theirs)


class _Policy(torch.nn.Module):
    """A policy-gradient style loss on torch.distributions: the Gaussian log-likelihood of
    continuous actions, a categorical one of discrete choices, and an entropy bonus."""

    def __init__(self):
        super().__init__()
        self.mu = torch.nn.Linear(6, 2)
        self.logits = torch.nn.Linear(6, 3)
        self.log_std = torch.nn.Parameter(torch.zeros(2))

    def forward(self, obs, act, choice):
        normal = torch.distributions.Normal(self.mu(obs), self.log_std.exp())
        cat = torch.distributions.Categorical(logits=self.logits(obs))
        return -(normal.log_prob(act).sum(-1) + cat.log_prob(choice)).mean() - 0.01 * cat.entropy().mean()


def test_torch_distributions_capture_without_their_value_checks():
    """Distributions check their arguments' values by default (``scale > 0``, a sample in the
    support) and raise in Python if one fails: a branch on a value, so every such step was refused.
    Traced without the checks, the step is eager PyTorch's: same loss, same Adam update."""
    torch.manual_seed(0)
    model = _Policy()
    inputs = (torch.randn(8, 6), torch.randn(8, 2), torch.randint(0, 3, (8,)))
    dist = torch.distributions.Distribution
    was = dist._validate_args  # torch._dynamo's TorchPatcher, once torch.compile is set up, turns them off
    dist.set_default_validate_args(True)  # PyTorch's own default
    try:
        cap = capture(model, inputs, loss_fn=lambda loss: loss)
        assert dist._validate_args  # the default is back after tracing
    finally:
        dist.set_default_validate_args(was)
    args = [a.clone() for a in cap.arguments]
    loss, _ = cap.graph_module(*args)
    ref = copy.deepcopy(model)
    opt = torch.optim.Adam(ref.parameters(), lr=1e-3, foreach=False)
    eager = ref(*inputs)
    eager.backward()
    opt.step()
    assert loss.item() == pytest.approx(eager.item(), rel=1e-5)
    for (name, prm), updated in zip(ref.named_parameters(), args):
        torch.testing.assert_close(updated, prm.detach(), rtol=1e-4, atol=1e-6, msg=name)


class _SliceWrites(torch.nn.Module):
    """Two layers' outputs written into the halves of one buffer, then read through the buffer."""

    def __init__(self):
        super().__init__()
        self.a = torch.nn.Linear(4, 4)
        self.b = torch.nn.Linear(4, 4)
        self.out = torch.nn.Linear(8, 2)

    def forward(self, x):
        buf = x.new_zeros(x.shape[0], 8)
        buf[:, :4] = self.a(x)
        buf[:, 4:] = self.b(x)
        return self.out(buf).sum()


def test_a_read_through_a_view_waits_for_writes_through_another():
    """``buf[:, :4] = h`` writes through a slice (``copy_``) and the next layer reads ``buf``
    itself: the FX graph has no edge between the two, so the readout could run before the writes
    (reading zeros), and the layers feeding the writes were no ancestors of the loss: phase
    "optimizer". The same pattern is in PyTorch's own backward of a mean over a channels_last
    tensor (``new_zeros``, ``copy_`` through ``as_strided``, then reads of the buffer)."""
    torch.manual_seed(0)
    cap = capture(_SliceWrites(), (torch.randn(3, 4),))
    p = cap.problem
    copies = [p.ids[i] for i in range(p.n) if p.node_meta[i]["op"] == "aten.copy_" and cap.phase[p.ids[i]] != "backward"]
    assert len(copies) == 2
    buffer = next(p.ids[i] for i in range(p.n) if p.node_meta[i]["op"] == "aten.new_zeros")
    readout = next(p.ids[d] for s, d in zip(p.src.tolist(), p.dst.tolist())
                   if p.ids[s] == buffer and p.node_meta[d]["op"] == "aten.addmm")
    assert set(copies) <= _ancestors(p, readout)
    forward = [p.ids[i] for i in range(p.n) if cap.phase[p.ids[i]] == "forward"]
    assert Counter(p.node_meta[p.index[f]]["op"] for f in forward)["aten.addmm"] == 3  # a, b and out
    assert all(cap.phase[c] == "forward" for c in copies)
    conv = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(), torch.nn.Linear(4, 2))
    conv = conv.to(memory_format=torch.channels_last)
    cap = capture(conv, (torch.randn(2, 3, 8, 8).to(memory_format=torch.channels_last),))
    q = cap.problem
    copy_ = [q.ids[i] for i in range(q.n) if q.node_meta[i]["op"] == "aten.copy_"]
    assert len(copy_) == 1 and cap.phase[copy_[0]] == "backward"
    zeros = next(q.ids[i] for i in range(q.n) if q.node_meta[i]["op"] == "aten.new_zeros")
    later = [q.ids[d] for s, d in zip(q.src.tolist(), q.dst.tolist()) if q.ids[s] == zeros and q.ids[d] != copy_[0]]
    assert later and all(copy_[0] in _ancestors(q, r) for r in later)


class _FrozenBackbone(torch.nn.Module):
    """A convolution + batch norm backbone and a trainable head (fine-tuning on a frozen backbone)."""

    def __init__(self):
        super().__init__()
        self.backbone = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.BatchNorm2d(8), torch.nn.ReLU())
        self.head = torch.nn.Sequential(torch.nn.Conv2d(8, 8, 3, padding=1), torch.nn.BatchNorm2d(8), torch.nn.ReLU(),
                                        torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(), torch.nn.Linear(8, 3))

    def forward(self, x):
        return self.head(self.backbone(x))


def test_modules_the_user_put_in_eval_mode_stay_in_eval_mode():
    """Fine-tuning code runs ``model.train()`` and then puts a frozen backbone in eval mode (its
    batch norm on running statistics). The importer put the whole model in training mode: the
    captured step normalised the backbone by batch statistics (another loss than the real step's)
    and wrote its running statistics, and the backbone was left in training mode afterwards."""
    torch.manual_seed(0)
    model, x = _FrozenBackbone(), torch.randn(4, 3, 16, 16)
    model.backbone.requires_grad_(False)
    model.backbone.eval()
    cap = capture(model, (x,))
    assert model.training and not model.backbone[1].training and model.head[1].training  # as the user left them
    loss, _ = cap.graph_module(*[a.clone() for a in cap.arguments])
    assert loss.item() == pytest.approx(model(x).sum().item(), rel=1e-5)  # eager PyTorch, same modes
    bn = [n for n in cap.graph_module.graph.nodes if n.target is torch.ops.aten.native_batch_norm.default]
    assert [n.args[5] for n in bn] == [False, True]  # the training flag: backbone on running statistics, head not


def test_gradient_clipping_is_torchs_and_every_update_waits_for_it():
    """``clip_grad_norm``: the step clips as ``torch.nn.utils.clip_grad_norm_(foreach=False)`` does
    between backward and update (real transformer training does, at 1.0): the captured step's SGD
    update equals eager PyTorch's with clipping (SGD: Adam's first step hardly sees a scaled
    gradient), and every parameter's update waits for the total norm, so for every gradient
    (without it an update may run while other gradients are still being computed)."""
    model, inputs = tm.mlp_factory()
    loss_fn = lambda out: out.sum()  # noqa: E731
    clipped, plain = copy.deepcopy(model), copy.deepcopy(model)
    for ref, clip in ((clipped, True), (plain, False)):
        loss_fn(ref(*inputs)).backward()
        if clip:
            assert torch.nn.utils.clip_grad_norm_(ref.parameters(), 0.05, foreach=False) > 0.05  # active
        torch.optim.SGD(ref.parameters(), lr=1e-3, foreach=False).step()
    cap = capture(model, inputs, loss_fn=loss_fn, optimizer="sgd", clip_grad_norm=0.05)
    args = [a.clone() for a in cap.arguments]
    cap.graph_module(*args)
    for (name, prm), updated, other in zip(clipped.named_parameters(), args, plain.parameters()):
        torch.testing.assert_close(updated, prm.detach(), rtol=1e-5, atol=1e-7, msg=name)
        assert not torch.allclose(updated, other.detach(), rtol=1e-5, atol=1e-7), name
    cap = capture(model, inputs, loss_fn=loss_fn, clip_grad_norm=0.05)  # Adam: the orders
    p = cap.problem
    coef = next(p.ids[i] for i in range(p.n) if p.node_meta[i]["op"] == "aten.clamp")
    updates = [p.ids[i] for i in range(p.n) if p.node_meta[i]["op"] == "aten.addcdiv_"]
    assert len(updates) == len(W) and all(coef in _ancestors(p, u) for u in updates)
    assert sum(p.node_meta[i]["op"] == "aten.linalg_vector_norm" for i in range(p.n)) == len(W) + 1  # per gradient, then the total
    with pytest.raises(ProblemError, match="clip_grad_norm"):
        capture(model, inputs, loss_fn=loss_fn, clip_grad_norm=0.0)


class _OutWrite(torch.nn.Module):
    """Reads a buffer, then writes it through ``out=`` from a value that does not depend on that
    read (a running statistic kept by hand)."""

    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(4, 4)
        self.register_buffer("seen", torch.zeros(4))

    def forward(self, x):
        y = self.lin(x) + self.seen
        with torch.no_grad():
            torch.mul(x.mean(0), 0.5, out=self.seen)
        return y.sum()


def test_writes_through_out_are_in_place_writes():
    """An ``out=`` tensor is a keyword argument: the importer looked for written tensors among the
    positional ones only, so such a write was neither colocated with the buffer it updates nor
    ordered after the buffer's earlier reads (here the add, which must read the old value).
    Spectral norm writes its power-iteration vectors ``_u`` and ``_v`` this way
    (``F.normalize(..., out=)``), one ``aten.div`` each."""
    torch.manual_seed(0)
    cap = capture(_OutWrite(), (torch.randn(3, 4),))
    p = cap.problem
    write = next(p.ids[i] for i in range(p.n) if p.node_meta[i]["op"] == "aten.mul")
    read = next(p.ids[i] for i in range(p.n) if p.node_meta[i]["op"] == "aten.add" and cap.phase[p.ids[i]] == "forward")
    assert write in _groups(p)["buffer:seen"]
    assert read in _ancestors(p, write)
    model = torch.nn.utils.parametrizations.spectral_norm(torch.nn.Linear(8, 4))
    cap = capture(model, (torch.randn(2, 8),))
    groups = _groups(cap.problem)
    for vec in ("_u", "_v"):
        group = groups[f"buffer:parametrizations.weight.0.{vec}"]
        # the write, the buffer and the buffer's hold until step:end
        assert sorted(cap.problem.node_meta[cap.problem.index[m]]["op"] for m in group) == ["aten.div", "order", "placeholder.buffer"]


class _CausalDecoder(torch.nn.Module):
    """nn.TransformerDecoder over an embedding, with a causal mask built in the forward (the usual
    way to write it); ``hint``: the tgt_is_causal argument passed along (None: not passed)."""

    def __init__(self, hint=None):
        super().__init__()
        self.hint = hint
        self.embed = torch.nn.Embedding(100, 32)
        layer = torch.nn.TransformerDecoderLayer(32, 4, 64, dropout=0.0, batch_first=True)
        self.dec = torch.nn.TransformerDecoder(layer, 2)
        self.enc = torch.nn.TransformerEncoder(torch.nn.TransformerEncoderLayer(32, 4, 64, dropout=0.0, batch_first=True), 1,
                                               enable_nested_tensor=False)

    def forward(self, ids, memory):
        t = ids.shape[1]
        mask = torch.triu(torch.full((t, t), float("-inf")), diagonal=1)
        kw = {} if self.hint is None else {"tgt_is_causal": self.hint}
        h = self.dec(self.embed(ids), memory, tgt_mask=mask, **kw)
        return self.enc(h, mask=mask, **({} if self.hint is None else {"is_causal": self.hint}))


def test_transformer_modules_with_a_causal_mask_import_as_with_the_hint_given():
    """Given a mask and no causal hint, nn.TransformerDecoder and nn.TransformerEncoder compare the
    mask's values with a causal mask to choose a kernel: a tracing failure ("could not guard on
    data-dependent expression"). The hint only picks a kernel, so the step is the one traced with
    the hint passed as False by hand."""
    torch.manual_seed(0)
    ids, memory = torch.randint(0, 100, (2, 12)), torch.randn(2, 16, 32)
    plain = _CausalDecoder()
    given = _CausalDecoder(hint=False)
    given.load_state_dict(plain.state_dict())
    ours, theirs = graph_from_torch(plain, (ids, memory)), graph_from_torch(given, (ids, memory))
    assert ours.ids == theirs.ids
    assert np.array_equal(ours.src, theirs.src) and np.array_equal(ours.dst, theirs.dst)
    assert np.array_equal(ours.time, theirs.time) and np.array_equal(ours.out_bytes, theirs.out_bytes)
    from torch.nn.modules import transformer
    assert transformer._detect_is_causal_mask.__name__ == "_detect_is_causal_mask"  # restored after tracing


# ----- costs --------------------------------------------------------------------------------------

def test_measured_costs_time_each_signature_once():
    model, inputs = tm.mlp_factory()
    p = graph_from_torch(model, inputs, cost="measure")
    ops = [m["op"] for m in p.node_meta]
    real = [i for i, op in enumerate(ops) if not op.startswith("placeholder.") and op not in ("saved", "order")]
    assert all(p.time[i] > 0 for i in real)
    assert all(p.time[i] == 0 for i, op in enumerate(ops) if op.startswith("placeholder."))
    # the two ReLUs have one signature ([2, 16] float32): one measurement, the same time
    relus = [p.time[i] for i, op in enumerate(ops) if op == "aten.relu"]
    assert len(relus) == 2 and relus[0] == relus[1]
    assert "CPU" in p.attrs["time_unit"]


def test_meta_model_captures_like_the_cpu_one_and_refuses_to_be_measured():
    """A model built under torch.device("meta") allocates no weights (how a user captures a model
    bigger than RAM): the roofline problem is the CPU model's; measuring it would time shape
    computations, so it is refused by name."""
    with torch.device("meta"):
        model, inputs = tm.mlp_factory()
    cpu = graph_from_torch(*tm.mlp_factory())
    meta = graph_from_torch(model, inputs)
    assert meta.ids == cpu.ids and np.array_equal(meta.time, cpu.time) and np.array_equal(meta.out_bytes, cpu.out_bytes)
    with pytest.raises(ProblemError, match="cannot measure op times of a model on the meta device"):
        graph_from_torch(model, inputs, cost="measure")


def test_time_table_by_node_id_then_op_name(tmp_path):
    model, inputs = tm.mlp_factory()
    table = {"addmm": 7.0, "aten::addmm": 2.0, "aten.relu": 1.0, "mm": 3.0}
    p = graph_from_torch(model, inputs, train=False, cost=table)
    t = {i: p.time[p.index[i]] for i in ("addmm", "addmm_1", "relu", "relu_1", "mm")}
    assert t == {"addmm": 7.0, "addmm_1": 2.0, "relu": 1.0, "relu_1": 1.0, "mm": 3.0}
    f = tmp_path / "times.json"
    f.write_text(json.dumps({"aten::addmm": 2.0, "relu": 1.0}))
    with pytest.raises(ProblemError, match=r"operator 'mm' \(aten.mm\) has no cost"):
        graph_from_torch(model, inputs, train=False, cost=str(f))


# ----- command line and bad input ------------------------------------------------------------------

def test_cli_writes_the_same_problem_as_the_api(tmp_path, capsys):
    out = tmp_path / "mlp.json"
    assert main([f"{MODELS}:mlp_factory", "-o", str(out), "--device-spec", "a100", "--devices", "2"]) == 0
    model, inputs = tm.mlp_factory()
    ref = graph_from_torch(model, inputs, device_spec="a100", devices=2)
    got = read_problem(out)
    assert got.ids == ref.ids and got.k == 2
    assert np.array_equal(got.time, ref.time) and np.array_equal(got.comm, ref.comm)
    assert got.node_meta == ref.node_meta


BROKEN = '''
import torch

class DataDependent(torch.nn.Module):
    def forward(self, x):
        if x.sum() > 0:  # control flow on a value: no static graph
            return x * 2
        return x

def untraceable():
    return DataDependent(), (torch.randn(3),)

def wrong_shape():
    return torch.nn.Linear(2, 2)

def raises():
    raise RuntimeError("no weights here")

def frozen():
    model = torch.nn.Linear(2, 2)
    model.requires_grad_(False)  # a frozen backbone alone: nothing to train
    return model, (torch.randn(3, 2),)

class Nonzero(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(4, 4)

    def forward(self, x):
        y = self.lin(x)
        return y[torch.nonzero(y > 0, as_tuple=True)].sum()  # a size that depends on the values

def nonzero():
    return Nonzero(), (torch.randn(3, 4),)

def mismatch():
    return torch.nn.Linear(4, 4), (torch.randn(3, 5),)  # the batch does not fit the model

class Ctc(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(4, 6)

    def forward(self, x):  # x: (time 10, batch 2, 4); CTC's output size depends on the targets' values
        logp = self.lin(x).log_softmax(-1)
        return torch.nn.functional.ctc_loss(logp, torch.ones(2, 5, dtype=torch.long), torch.full((2,), 10, dtype=torch.long),
                                            torch.full((2,), 5, dtype=torch.long))

def ctc():
    return Ctc(), (torch.randn(10, 2, 4),)

class Packed(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.rnn = torch.nn.GRU(4, 4, batch_first=True)

    def forward(self, x, lengths):  # the packed batch has sum(lengths) rows: a size given by values
        packed = torch.nn.utils.rnn.pack_padded_sequence(x, lengths, batch_first=True, enforce_sorted=False)
        return self.rnn(packed)[1].sum()

def packed():
    return Packed(), (torch.randn(3, 5, 4), torch.tensor([5, 2, 3]))

class Sparse(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = torch.nn.Embedding(10, 4, sparse=True)

    def forward(self, ids):
        return self.emb(ids).sum()

def sparse():
    return Sparse(), (torch.tensor([[1, 2], [3, 3]]),)
'''


@pytest.mark.parametrize("args, message", [
    (["{mod}:untraceable", "--inference"], "cannot trace DataDependent: the step branches on a tensor's value"),
    (["{mod}:wrong_shape"], "must return (model, example_inputs)"),
    (["{mod}:raises"], "the factory failed: RuntimeError: no weights here"),
    (["{mod}:frozen"], "Linear has no trainable parameter"),
    (["{mod}:nonzero"], "cannot trace Nonzero: nonzero (aten.nonzero) has an output whose size depends on the data"),
    (["{mod}:mismatch"], "cannot trace Linear: RuntimeError: a and b must have same reduction dim"),
    (["{mod}:ctc"], "cannot trace Ctc: aten._ctc_loss.Tensor has an output whose size depends on the data"),
    # session 40: a TypeError from inside nn.GRU ("zeros(): argument 'size' failed to unpack ...")
    (["{mod}:packed"], "cannot trace Packed: pack_padded_sequence packs the batch by its lengths' values"),
    # session 40: torch's NotImplementedError, one line of 1,800 characters listing dispatch keys
    (["{mod}:sparse"], "cannot trace Sparse: emb.weight gets a sparse gradient (nn.Embedding or nn.EmbeddingBag with "
                       "sparse=True), which Adam does not support: use --optimizer sgd"),
    (["{mod}:missing"], "no function 'missing'"),
    (["{dir}/nope.py:f"], "no such file"),
    (["no_such_module_xyz:f"], "cannot import"),
    (["{models}:mlp_factory", "--cost", "{dir}/times.json"], "operator 'addmm' (aten.addmm) has no cost"),
    (["{models}:mlp_factory", "--device-spec", "tpu9"], "neither a known device"),
])
def test_cli_bad_input_is_one_line_exit_2_nothing_written(tmp_path, capsys, args, message):
    mod = tmp_path / "broken.py"
    mod.write_text(BROKEN)
    (tmp_path / "times.json").write_text(json.dumps({"relu": 1.0}))
    out = tmp_path / "out.json"
    argv = [a.format(mod=mod, dir=tmp_path, models=MODELS) for a in args] + ["-o", str(out)]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and message in err[0], err
    assert not out.exists()


@pytest.mark.parametrize("factory, message", [
    pytest.param("mismatch", "cannot trace Linear: RuntimeError: a and b must have same reduction dim",
                 marks=pytest.mark.slow),  # 4 s; the same one-line path as nonzero
    ("nonzero", "cannot trace Nonzero: nonzero (aten.nonzero) has an output whose size depends on the data"),
])
def test_cli_trace_failure_is_one_line_in_a_real_process(tmp_path, factory, message):
    """As a user runs it: torch's fake-tensor logger printed its own 19-line traceback before our
    line when an op's shape check failed, and a data-dependent size (nonzero) crashed the build
    with a GuardOnDataDependentSymNode traceback and exit 1."""
    import subprocess
    import sys

    mod = tmp_path / "broken.py"
    mod.write_text(BROKEN)
    out = tmp_path / "out.json"
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    proc = subprocess.run([sys.executable, "-m", "placement.importers.torch", f"{mod}:{factory}", "-o", str(out)],
                          capture_output=True, text=True, env=env, cwd=tmp_path, timeout=300)
    err = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and len(err) == 1 and message in err[0], proc.stderr[-2000:]
    assert not out.exists()


# ----- placements back onto the graph --------------------------------------------------------------

def test_annotated_graph_runs_split_and_matches_the_plain_run():
    model, inputs, loss_fn = tm.gpt2_tiny()
    cap = capture(model, inputs, loss_fn=loss_fn, devices=2)
    p = cap.problem
    # two devices: nodes by index parity, each colocation group with its first member
    pl = np.arange(p.n) % 2
    for members in p.groups:
        pl[members] = pl[members[0]]
    ev = evaluate(p, pl)
    dmap = device_map(p.ids, ev.placement, ev.start, ["cpu", "cpu"])
    fx_devices = annotate_graph(cap, dmap)
    nodes = [n for n in cap.graph_module.graph.nodes if n.op != "output"]
    assert set(fx_devices) == {n.name for n in nodes}
    for n in nodes:  # folded views and getitems follow the operator that owns them
        assert n.meta["device"] == dmap["devices"][cap.owner[n.name]]
    plain = cap.graph_module(*[a.clone() for a in cap.arguments])
    split = run_split(cap, dmap, *[a.clone() for a in cap.arguments])
    torch.testing.assert_close(split[0], plain[0])
    for a, b in zip(split[1], plain[1]):
        torch.testing.assert_close(a, b)


@pytest.mark.slow  # 7 s: the default suite (CI 9:47 in all, session 42) sits near its cap
def test_solve_on_an_imported_model_respects_colocation(tmp_path):
    from solvers.cli import main as solve_main

    model, inputs, loss_fn = tm.cnn_tiny()
    p = graph_from_torch(model, inputs, loss_fn=loss_fn)
    path = tmp_path / "cnn.json"
    write_native(p, path)
    single = evaluate(p, np.zeros(p.n, dtype=int), memory_model="peak").peak_memory[0]
    report = tmp_path / "r.json"
    code = solve_main([str(path), "--devices", "4", "--memory", str(int(0.5 * single)), "--memory-model", "peak",
                       "--time-limit", "8", "--quiet", "--workers", "1", "--report", str(report)])
    rep = json.loads(report.read_text())
    assert code == 0 and rep["status"] in ("feasible", "optimal")
    assert max(rep["peak_memory"]) <= 0.5 * single
    for name, members in _groups(p).items():
        assert len({rep["placement"][m] for m in members}) == 1, name


@pytest.mark.slow
def test_gpt2_with_48_layers_imports_whole():
    """The benchmark's 48-block GPT-2 (about 6K nodes): every block's attention, layer norms and
    update groups are there, and no view survived."""
    model, inputs, loss_fn = tm.gpt2_48()
    cap = capture(model, inputs, loss_fn=loss_fn)
    ops = Counter(_ops(cap))
    assert ops["aten._scaled_dot_product_flash_attention_for_cpu"] == 48
    assert ops["aten.native_layer_norm"] == ops["aten.native_layer_norm_backward"] == 2 * 48 + 1
    assert len(cap.param_nodes) == 4 + 12 * 48
    assert sum(1 for g in cap.problem.colocate_names if g.startswith("param:")) == 4 + 12 * 48
    assert not VIEWS & set(ops)
    assert _weights_and_states(cap) == 3 * _param_bytes(model)


class _WithLoss(torch.nn.Module):
    """Returns its own loss, as Hugging Face models do when given labels."""

    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(4, 3)

    def forward(self, x, labels):
        logits = self.fc(x)
        return {"logits": logits, "loss": torch.nn.functional.cross_entropy(logits, labels)}


def test_default_loss_is_the_outputs_own_loss_else_the_sum():
    model, x, labels = _WithLoss(), torch.randn(2, 4), torch.tensor([0, 2])
    own = capture(model, {"x": x, "labels": labels})
    explicit = capture(model, {"x": x, "labels": labels}, loss_fn=lambda out: out["loss"])
    assert own.problem.ids == explicit.problem.ids
    assert "aten.nll_loss_forward" in _ops(own, "forward")
    # no loss in the output: the sum of its floating-point tensors (here one)
    pair = capture(torch.nn.Linear(4, 3), (torch.randn(2, 4),), loss_fn=None)
    assert Counter(_ops(pair, "forward"))["aten.sum"] == 1
    with pytest.raises(ProblemError, match="loss must be a scalar"):
        capture(torch.nn.Linear(4, 3), (torch.randn(2, 4),), loss_fn=lambda out: out)


class _FrozenBody(torch.nn.Module):
    """A frozen 64 x 64 layer (no bias) under a trainable head: LoRA's and fine-tuning's shape."""

    def __init__(self) -> None:
        super().__init__()
        self.body = torch.nn.Linear(64, 64, bias=False).requires_grad_(False)
        self.head = torch.nn.Linear(64, 4)

    def forward(self, x):
        return self.head(torch.relu(self.body(x)))


@pytest.mark.parametrize("train", [True, False])
def test_a_weight_nothing_updates_costs_memory_where_it_is_read(train):
    """A frozen weight (and every weight of an inference step) read on another device is a copy
    there, held from its arrival to its last reader, like any tensor: before session 40 it was
    persistent bytes at home only, charged nowhere else. Placement: the weight alone on device 1,
    everything else on device 0. Device 0 must hold the weight's 64 x 64 x 4 bytes while its reader
    runs there; device 1 holds it for the whole step; the schedule is the one-device schedule's,
    since the added zero-time nodes and free edges delay nothing."""
    torch.manual_seed(0)
    cap = capture(_FrozenBody(), (torch.randn(2, 64),), train=train)
    p = cap.problem.with_devices(2, float("inf"))
    w = p.index["buffer:body.weight" if train else "param:body.weight"]
    size = 64 * 64 * 4
    pl = np.zeros(p.n, dtype=np.int64)
    group = np.flatnonzero(p.colocate == p.colocate[w])
    pl[group] = 1  # the weight and its :kept node
    apart = evaluate(p, pl, memory_model="peak")
    together = evaluate(p, np.zeros(p.n, dtype=np.int64), memory_model="peak")
    acts = float(together.peak_memory[0] - size)  # what device 0 holds besides the weight, all on one device
    assert apart.peak_memory[1] == size
    assert apart.peak_memory[0] >= size and acts < size  # the copy is most of device 0's peak
    kept = p.index[("buffer:body.weight" if train else "param:body.weight") + ":kept"]
    assert apart.finish[kept] == apart.makespan == max(apart.finish[v] for v in range(p.n) if v not in group)
    # no transfer on the added edges: only the weight's own crossing can delay the schedule
    reader = int(p.succ_ptr[1][p.succ_ptr[0][w]])
    assert together.makespan <= apart.makespan <= together.makespan + p.comm_between(w, reader) + 1e-12
