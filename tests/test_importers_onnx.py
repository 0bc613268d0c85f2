"""The ONNX importer on models exported by torch.onnx in the test itself, and its bad input.
Needs the torch and onnx extras (CI installs '.[test,torch,onnx]')."""
from __future__ import annotations

import gzip
import json
import warnings

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
torch = pytest.importorskip("torch")

import torch_models as tm  # noqa: E402

from placement.formats import detect_format, load_problem  # noqa: E402
from placement.importers.onnx import main as onnx_main  # noqa: E402
from placement.importers.onnx import read_onnx  # noqa: E402
from placement.problem import ProblemError  # noqa: E402
from solvers.cli import main as solve_main  # noqa: E402


def _export(model, inputs, path, **kwargs):
    # The TorchScript exporter: torch 2.13's default (dynamo) exporter needs onnxscript, which the
    # onnx extra does not install.
    model.eval()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(model, inputs, str(path), dynamo=False, input_names=["x"], **kwargs)
    return path


def test_tiny_mlp_checked_by_hand(tmp_path):
    model, inputs = tm.mlp_factory()
    path = _export(model, inputs, tmp_path / "mlp.onnx")
    assert detect_format(path) == "onnx"
    p = load_problem(path)
    ops = [m["op"] for m in p.node_meta]
    assert ops == ["placeholder.input", "onnx.Gemm", "onnx.Relu", "onnx.Gemm", "onnx.Relu", "onnx.MatMul"]
    # initializers read once are their reader's persistent bytes: W + b
    assert p.param_bytes.tolist() == [0, 16 * 8 * 4 + 16 * 4, 0, 16 * 16 * 4 + 16 * 4, 0, 16 * 4 * 4]
    assert p.out_bytes.tolist() == [64, 128, 128, 128, 128, 32]
    assert p.edge_bytes.tolist() == [64, 128, 128, 128, 128]
    assert p.edge_meta == [{"src_output": 0, "dst_inputs": [0]}] * 5
    assert p.node_meta[1]["inputs"] == [{"shape": [2, 8], "dtype": "float32"}, {"shape": [16, 8], "dtype": "float32"},
                                        {"shape": [16], "dtype": "float32"}]
    # roofline: Gemm 2*2*16*8 FLOPs; bytes read 64 + 512 + 64, written 128; memory-bound on an H100
    assert p.time[1] == pytest.approx(1e3 * (max(512 / 67e12, 768 / 3.35e12) + 5e-6))
    assert p.time[0] == 0


def test_shared_initializers_become_nodes_and_a_cnn_imports(tmp_path):
    class Shared(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.w = torch.nn.Parameter(torch.randn(4, 4))

        def forward(self, x):
            return (x @ self.w) @ self.w

    p = load_problem(_export(Shared(), (torch.randn(2, 4),), tmp_path / "shared.onnx"))
    init = [i for i in p.ids if str(i).startswith("init:") and not str(i).endswith(":kept")]
    # the shared weight is its node's output (a copy charged where it is read elsewhere), held at
    # home until init:w:kept, which runs after step:end
    assert len(init) == 1 and p.out_bytes[p.index[init[0]]] == 64 and p.param_bytes.sum() == 0
    kept = p.index[f"{init[0]}:kept"]
    assert p.colocate[kept] == p.colocate[p.index[init[0]]] >= 0 and p.comm_between(p.index["step:end"], kept) == 0.0
    model, inputs, _ = tm.cnn_tiny()
    q = load_problem(_export(model, inputs, tmp_path / "cnn.onnx"))
    assert sum(m["op"] == "onnx.Conv" for m in q.node_meta) == sum(isinstance(m, torch.nn.Conv2d) for m in model.modules())
    assert all(t > 0 for t, m in zip(q.time, q.node_meta) if m["op"] == "onnx.Conv")


def test_solve_reads_onnx_and_gzipped_onnx(tmp_path):
    model, inputs, _ = tm.gpt2_tiny()
    path = _export(model, inputs, tmp_path / "gpt2.onnx")
    packed = tmp_path / "gpt2.onnx.gz"
    packed.write_bytes(gzip.compress(path.read_bytes()))
    a, b = load_problem(path), load_problem(packed)
    assert a.ids == b.ids and np.array_equal(a.time, b.time) and a.name == b.name == "gpt2"
    report = tmp_path / "r.json"
    assert solve_main([str(packed), "--devices", "2", "--time-limit", "3", "--quiet", "--workers", "1", "--report", str(report)]) == 0
    rep = json.loads(report.read_text())
    assert rep["problem"]["nodes"] == a.n and rep["status"] in ("feasible", "optimal")


def test_time_table_for_onnx(tmp_path):
    model, inputs = tm.mlp_factory()
    path = _export(model, inputs, tmp_path / "mlp.onnx")
    p = read_onnx(path, cost={"onnx::Gemm": 2.0, "Relu": 0.5, "/fc3/MatMul": 1.0})
    assert p.time.tolist() == [0, 2.0, 0.5, 2.0, 0.5, 1.0]
    with pytest.raises(ProblemError, match=r"operator '/Relu' \(onnx.Relu\) has no cost"):
        read_onnx(path, cost={"onnx::Gemm": 2.0, "MatMul": 1.0})


def test_symbolic_dimensions_are_named_and_can_be_fixed(tmp_path):
    model, inputs = tm.mlp_factory()
    path = _export(model, inputs, tmp_path / "dyn.onnx", dynamic_axes={"x": {0: "batch"}})
    with pytest.raises(ProblemError, match=r"ONNX value 'x' \(graph input\) has a dimension 0 without a static size \('batch'\)"):
        read_onnx(path)
    p = read_onnx(path, dims={"batch": 2})
    assert p.out_bytes.tolist() == [64, 128, 128, 128, 128, 32]


def _model_with(node, outputs, inputs=None):
    from onnx import TensorProto, helper

    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])
    graph = helper.make_graph([node], "g", inputs or [x], outputs)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.example", 1)])


def test_shape_less_value_is_one_error_line_exit_2(tmp_path, capsys):
    from onnx import TensorProto, helper

    node = helper.make_node("Mystery", ["x"], ["y"], name="n1", domain="com.example")
    model = _model_with(node, [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    path = tmp_path / "m.onnx"
    onnx.save(model, str(path))
    with pytest.raises(ProblemError, match=r"ONNX value 'y' \(output of node 'n1', Mystery\) has no shape"):
        load_problem(path)
    out = tmp_path / "never.txt"
    assert solve_main([str(path), "--quiet", "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "'y'" in err[0]
    assert not out.exists()


def test_garbage_that_looks_like_onnx_is_one_error(tmp_path):
    path = tmp_path / "bad.onnx"
    path.write_bytes(b"\x08\x07\xff\xff\xff\xff garbage")
    with pytest.raises(ProblemError, match="not a readable ONNX model"):
        load_problem(path)


def test_cli_with_dims_and_a_time_table(tmp_path, capsys):
    model, inputs = tm.mlp_factory()
    path = _export(model, inputs, tmp_path / "dyn.onnx", dynamic_axes={"x": {0: "batch"}})
    times = tmp_path / "t.json"
    times.write_text(json.dumps({"Gemm": 2.0, "Relu": 0.5, "MatMul": 1.0}))
    out = tmp_path / "g.json"
    assert onnx_main([str(path), "-o", str(out), "--dim", "batch=4", "--cost", str(times)]) == 0
    p = load_problem(out)
    assert p.time.tolist() == [0, 2.0, 0.5, 2.0, 0.5, 1.0]
    assert p.out_bytes.tolist() == [128, 256, 256, 256, 256, 64]  # batch 4
    capsys.readouterr()
    bad = tmp_path / "never.json"
    assert onnx_main([str(path), "-o", str(bad)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "'batch'" in err[0] and not bad.exists()
