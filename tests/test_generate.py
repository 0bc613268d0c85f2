"""Tests of the synthetic generator (placement/generate.py) and the shipped data/ instances."""
from __future__ import annotations

import math
import re
import shlex
from collections import deque
from pathlib import Path

import numpy as np
import pytest

from placement.generate import KINDS, LINK, generate, main
from placement.problem import Problem, ProblemError, make_problem

ROOT = Path(__file__).resolve().parents[1]
LOSS = {"transformer": "loss/xent", "cnn": "loss/xent", "lstm": "loss/total"}


def reachable(problem: Problem, start: int, forward: bool = True) -> np.ndarray:
    ptr, nbr, _ = problem.succ_ptr if forward else problem.pred_ptr
    seen = np.zeros(problem.n, dtype=bool)
    seen[start] = True
    todo = deque([start])
    while todo:
        u = todo.popleft()
        for v in nbr[ptr[u]:ptr[u + 1]]:
            if not seen[v]:
                seen[v] = True
                todo.append(int(v))
    return seen


def same_problem(a: Problem, b: Problem) -> bool:
    return (a.ids == b.ids and a.colocate_names == b.colocate_names
            and all(np.array_equal(getattr(a, f), getattr(b, f))
                    for f in ("time", "out_bytes", "param_bytes", "colocate", "src", "dst", "comm", "memory")))


@pytest.mark.parametrize("kind", KINDS)
def test_same_seed_same_graph_other_seed_other_graph(kind: str) -> None:
    a = generate(kind, 300, seed=3)
    b = generate(kind, 300, seed=3)
    c = generate(kind, 300, seed=4)
    assert same_problem(a, b)
    assert not np.array_equal(a.time, c.time)


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("nodes", [100, 137, 250, 999, 4000, 20000])
def test_node_count_near_target_and_acyclic(kind: str, nodes: int) -> None:
    p = generate(kind, nodes)
    assert abs(p.n - nodes) <= 0.1 * nodes
    rank = p.topo_rank
    assert np.all(rank[p.src] < rank[p.dst])
    assert len(set(p.ids)) == p.n


@pytest.mark.parametrize("kind", KINDS)
def test_node_count_over_a_dense_sweep_of_targets(kind: str) -> None:
    for target in np.unique(np.geomspace(100, 5000, 40).astype(int)).tolist():
        n = generate(kind, target, memory_fraction=None).n
        assert abs(n - target) <= 0.1 * target, (target, n)


@pytest.mark.slow
@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("nodes", [100_000, 1_000_000])
def test_node_count_large(kind: str, nodes: int) -> None:
    p = generate(kind, nodes)
    assert abs(p.n - nodes) <= 0.1 * nodes
    rank = p.topo_rank
    assert np.all(rank[p.src] < rank[p.dst])


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("nodes", [1, 5, 10])
def test_tiny_targets_give_a_small_valid_graph(kind: str, nodes: int) -> None:
    p = generate(kind, nodes)
    assert 1 <= p.n <= 40
    if kind != "random":
        loss = p.index[LOSS[kind]]
        assert p.node_attrs["is_backward"].any()
        assert reachable(p, loss)[p.node_attrs["is_backward"]].all()


@pytest.mark.parametrize("kind", KINDS)
def test_fields_are_finite_non_negative_and_comm_follows_the_link(kind: str) -> None:
    p = generate(kind, 800, seed=1)
    for arr in (p.time, p.out_bytes, p.param_bytes, p.comm, p.edge_bytes):
        assert np.all(np.isfinite(arr)) and np.all(arr >= 0)
    assert np.allclose(p.comm, LINK.latency + p.edge_bytes / LINK.bandwidth)
    assert np.all(p.src != p.dst)
    assert np.unique(p.src * p.n + p.dst).size == p.m  # no parallel edges
    assert (p.time > 0).sum() > p.n // 2


@pytest.mark.parametrize("kind", KINDS)
def test_equals_what_make_problem_builds_from_the_same_records(kind: str) -> None:
    p = generate(kind, 400, seed=2)
    nodes = []
    for i, nid in enumerate(p.ids):
        rec = {"id": nid, "time": float(p.time[i]), "out_bytes": float(p.out_bytes[i]), "param_bytes": float(p.param_bytes[i])}
        if p.colocate[i] >= 0:
            rec["colocate"] = p.colocate_names[p.colocate[i]]
        nodes.append(rec)
    edges = [{"src": p.ids[u], "dst": p.ids[v], "bytes": float(b)} for u, v, b in zip(p.src, p.dst, p.edge_bytes)]
    q = make_problem(nodes, edges, devices=p.k, memory=p.memory.tolist(), link=LINK, name=p.name)
    assert same_problem(p, q)
    assert p.allowed == q.allowed
    assert [g.tolist() for g in p.groups] == [g.tolist() for g in q.groups]
    assert np.array_equal(p.allowed_mask(), q.allowed_mask())


@pytest.mark.parametrize("fraction", [0.25, 0.6, 1.5])
@pytest.mark.parametrize("kind", KINDS)
def test_memory_is_the_fraction_of_total_static_need(kind: str, fraction: float) -> None:
    p = generate(kind, 200, devices=3, memory_fraction=fraction)
    need = float(np.sum(p.param_bytes + p.out_bytes))
    assert p.k == 3
    assert np.allclose(p.memory, fraction * need)


def test_unlimited_memory_and_bad_arguments() -> None:
    assert np.all(np.isinf(generate("lstm", 100, memory_fraction=None).memory))
    for kwargs in ({"memory_fraction": 0.0}, {"memory_fraction": -1.0}, {"memory_fraction": math.nan}, {"devices": 0}):
        with pytest.raises(ProblemError):
            generate("cnn", 100, **kwargs)
    with pytest.raises(ProblemError, match="unknown generator kind"):
        generate("gan", 100)
    with pytest.raises(ProblemError, match="nodes"):
        generate("random", 0)


@pytest.mark.parametrize("nodes", [12, 60, 500, 3000])
def test_transformer_weights_are_colocated_with_their_updates(nodes: int) -> None:
    p = generate("transformer", nodes)
    weights = [i for i in range(p.n) if p.param_bytes[i] > 0]
    assert weights
    assert np.all(p.param_bytes[[i for i in range(p.n) if p.ids[i].endswith("/update")]] == 0)
    for w in weights:
        upd = p.index[p.ids[w] + "/update"]
        assert p.colocate[w] >= 0 and p.colocate[w] == p.colocate[upd]
        assert p.colocate_names[p.colocate[w]] == p.ids[w]
        assert sorted(p.groups[p.colocate[w]].tolist()) == sorted([w, upd])
        # The update reads the weight and its gradient.
        ptr, nbr, _ = p.pred_ptr
        preds = {p.ids[v] for v in nbr[ptr[upd]:ptr[upd + 1]]}
        assert p.ids[w] in preds and any("grad" in x for x in preds)
    assert len(p.colocate_names) == len(weights)


@pytest.mark.parametrize("kind", ["transformer", "lstm", "cnn"])
def test_backward_ops_follow_the_loss_and_read_forward_activations(kind: str) -> None:
    p = generate(kind, 1500)
    bw = p.node_attrs["is_backward"]
    loss = p.index[LOSS[kind]]
    assert reachable(p, loss)[bw].all()
    assert reachable(p, loss, forward=False)[~bw].all()  # every forward op feeds the loss
    # Long-lived tensors: every weight-gradient op reads a forward activation.
    grads = [i for i in range(p.n) if p.ids[i].endswith("/grad_weight")]
    assert grads
    ptr, nbr, _ = p.pred_ptr
    for g in grads:
        preds = nbr[ptr[g]:ptr[g + 1]]
        assert any(not bw[v] and p.param_bytes[v] == 0 for v in preds), p.ids[g]
    ptr, _, _ = p.succ_ptr
    dead = [p.ids[i] for i in np.flatnonzero(ptr[1:] == ptr[:-1]) if not p.ids[i].endswith("/update")]
    assert dead == []  # only updates end the step: no gradient is computed for nothing
    fwd_to_bwd = ~bw[p.src] & bw[p.dst]
    span = p.topo_rank[p.dst[fwd_to_bwd]] - p.topo_rank[p.src[fwd_to_bwd]]
    assert span.max() > p.n // 2


def test_transformer_names_mirror_forward_and_backward() -> None:
    p = generate("transformer", 3000)
    layers, heads = p.attrs["layers"], p.attrs["heads"]
    assert layers >= 2 and heads >= 2
    for l in (0, layers - 1):
        for op in ("attn/qkv_matmul", "attn/out_matmul", "ffn/matmul1", "ffn/matmul2"):
            for suffix in ("", "/grad_input", "/grad_weight"):
                assert f"layer{l}/{op}{suffix}" in p.index
        for h in (0, heads - 1):
            for op in ("scores", "softmax", "dropout"):
                assert f"layer{l}/attn/head{h}/{op}/grad" in p.index
    assert f"layer{layers}/attn/qkv_matmul" not in p.index
    # Layer l's forward output feeds layer l+1's first op.
    u, v = p.index["layer0/ffn/layernorm"], p.index["layer1/attn/qkv_matmul"]
    assert np.any((p.src == u) & (p.dst == v))


def test_lstm_grid_shares_one_weight_per_layer() -> None:
    p = generate("lstm", 2000)
    layers, steps = p.attrs["layers"], p.attrs["steps"]
    assert layers >= 2 and steps >= 2
    ptr, nbr, _ = p.succ_ptr
    for l in range(layers):
        w = p.index[f"lstm/l{l}/weight"]
        readers = {p.ids[v] for v in nbr[ptr[w]:ptr[w + 1]]}
        assert {f"lstm/l{l}/t{t}/gates_matmul" for t in range(steps)} <= readers
    for t in (0, steps - 1):
        assert f"lstm/l{layers - 1}/t{t}/cell/grad" in p.index
    # Recurrence: (l, t) feeds (l, t+1) and (l+1, t).
    h = p.index["lstm/l0/t0/hidden"]
    succ = {p.ids[v] for v in nbr[ptr[h]:ptr[h + 1]]}
    assert {"lstm/l0/t1/gates_matmul", "lstm/l1/t0/gates_matmul"} <= succ


def test_cnn_blocks_have_skip_connections() -> None:
    p = generate("cnn", 3000)
    assert p.attrs["blocks"] >= 4
    ptr, nbr, _ = p.succ_ptr
    out = p.index["stage1/block0/out_relu"]
    succ = {p.ids[v] for v in nbr[ptr[out]:ptr[out + 1]]}
    assert "stage1/block1/residual_add" in succ  # identity shortcut into the next block's add
    assert any(x.startswith("stage1/block1/") and "conv1" in x for x in succ)


def _readme_commands() -> list[list[str]]:
    text = (ROOT / "data" / "README.md").read_text()
    cmds = [shlex.split(line) for line in text.splitlines() if line.startswith("python3 -m placement.generate ")]
    assert len(cmds) >= 5
    return [c[3:] for c in cmds]


@pytest.mark.parametrize("args", _readme_commands(), ids=lambda a: a[a.index("-o") + 1])
def test_shipped_data_regenerates_identically(args: list[str], tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    target = ROOT / args[args.index("-o") + 1]
    args = list(args)
    args[args.index("-o") + 1] = str(tmp_path / target.name)
    assert main(args) == 0
    assert (tmp_path / target.name).read_bytes() == target.read_bytes()


def test_shipped_data_is_memory_bound() -> None:
    from placement.formats.native import read_problem

    names = {re.sub(r"\.json$", "", Path(a[a.index("-o") + 1]).name) for a in _readme_commands()}
    assert {"default", "tiny", "lstm_small", "cnn_small", "random_small"} <= names
    default = read_problem(ROOT / "data" / "default.json")
    assert 40 <= default.n <= 80 and default.k == 4
    for name in names:
        p = read_problem(ROOT / "data" / f"{name}.json")
        need = p.param_bytes + p.out_bytes
        assert need.sum() > p.memory.max()  # one device cannot hold everything
        for g in p.groups:  # but every colocation group fits on a device
            assert need[g].sum() <= p.memory.max()
        assert need.max() <= p.memory.max()
    assert 8 <= read_problem(ROOT / "data" / "tiny.json").n <= 12


def test_cli_rejects_bad_arguments_with_a_message(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    out = tmp_path / "x.json"
    assert main(["lstm", "--nodes", "0", "-o", str(out)]) == 2
    assert "nodes" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["lstm", "--memory-fraction", "lots", "-o", str(out)])
    assert "not a number" in capsys.readouterr().err
    assert not out.exists()
    assert main(["random", "--nodes", "30", "--memory-fraction", "none", "-o", str(out)]) == 0
    from placement.formats.native import read_problem

    p = read_problem(out)
    assert p.n == 30 and np.all(np.isinf(p.memory))
