"""Importers without torch: operator semantics in the native format, gzip, PipeDream profiles."""
from __future__ import annotations

import gzip
import json
from pathlib import Path

import jsonschema
import numpy as np
import pytest

from placement.evaluator import evaluate
from placement.formats import detect_format, load_problem
from placement.formats.native import native_text, problem_to_native, read_problem, write_problem
from placement.importers.devicemap import device_map, device_map_from_report
from placement.importers.devicemap import main as devicemap_main
from placement.importers.devicespec import SPECS, device_spec
from placement.importers.pipedream import main as pipedream_main
from placement.importers.pipedream import problem_from_pipedream
from placement.problem import ProblemError, make_problem
from solvers.cli import main as solve_main

ROOT = Path(__file__).resolve().parents[1]
SCHEMA = json.loads((ROOT / "placement" / "schema" / "problem.schema.json").read_text())
PIPEDREAM = ROOT.parent / "shared" / "workloads" / "pipedream"

T84 = {"shape": [8, 4], "dtype": "float32"}
T4 = {"shape": [4], "dtype": "float32"}


def _meta_problem():
    nodes = [
        {"id": "x", "time": 0, "out_bytes": 128, "param_bytes": 0, "op": "placeholder.input", "outputs": [T84]},
        {"id": "ln", "time": 1, "out_bytes": 160, "param_bytes": 0, "op": "aten.native_layer_norm",
         "inputs": [T84], "outputs": [T84, T4, T4]},
        {"id": "bwd", "time": 2, "out_bytes": 128, "param_bytes": 0, "op": "aten.native_layer_norm_backward",
         "inputs": [T84, T84, T4, T4], "outputs": [T84]},
    ]
    edges = [
        {"src": "x", "dst": "ln", "bytes": 128, "src_output": 0, "dst_inputs": [0]},
        {"src": "x", "dst": "bwd", "bytes": 128, "src_output": 0, "dst_inputs": [0, 1]},
        {"src": "ln", "dst": "bwd", "bytes": 16, "src_output": 1, "dst_inputs": [2]},
        {"src": "ln", "dst": "bwd", "bytes": 16, "src_output": 2, "dst_inputs": [3]},
    ]
    return nodes, edges


def test_operator_semantics_are_kept_and_parallel_edges_merge_their_tensors():
    nodes, edges = _meta_problem()
    p = make_problem(nodes, edges, link=SPECS["h100"].link())
    assert p.node_meta[1] == {"op": "aten.native_layer_norm", "inputs": [T84], "outputs": [T84, T4, T4]}
    assert p.node_meta[0] == {"op": "placeholder.input", "outputs": [T84]}
    assert p.m == 3  # the two ln -> bwd edges are one
    assert p.edge_meta[1] == {"src_output": 0, "dst_inputs": [0, 1]}
    assert p.edge_meta[2] == {"src_output": 1, "dst_inputs": [2],
                              "tensors": [{"src_output": 1, "dst_inputs": [2]}, {"src_output": 2, "dst_inputs": [3]}]}


def test_same_tensor_on_parallel_edges_merges_input_slots():
    nodes = [{"id": "a", "time": 1, "out_bytes": 1, "param_bytes": 0}, {"id": "b", "time": 1, "out_bytes": 1, "param_bytes": 0}]
    edges = [{"src": "a", "dst": "b", "comm": 1, "src_output": 0, "dst_inputs": [2]},
             {"src": "a", "dst": "b", "comm": 3, "src_output": 0, "dst_inputs": [0]}]
    p = make_problem(nodes, edges)
    assert p.edge_meta == [{"src_output": 0, "dst_inputs": [0, 2]}]
    assert p.comm.tolist() == [3.0]


def test_problems_without_semantics_have_none():
    p = make_problem([{"id": "a", "time": 1, "out_bytes": 1, "param_bytes": 0}], [])
    assert p.node_meta is None and p.edge_meta is None
    assert "op" not in problem_to_native(p)["nodes"][0]


def test_native_round_trip_keeps_semantics_and_validates_against_the_schema(tmp_path):
    nodes, edges = _meta_problem()
    p = make_problem(nodes, edges, link=SPECS["h100"].link(), name="ln")
    doc = problem_to_native(p)
    jsonschema.validate(doc, SCHEMA)
    path = tmp_path / "ln.json"
    write_problem(p, path)
    q = read_problem(path)
    assert q.node_meta == p.node_meta and q.edge_meta == p.edge_meta
    assert q.ids == p.ids and np.array_equal(q.comm, p.comm) and np.array_equal(q.out_bytes, p.out_bytes)


@pytest.mark.parametrize("field, value, message", [
    ("op", 3, "field 'op'"),
    ("inputs", [{"shape": [-1], "dtype": "float32"}], "field 'inputs'[0] field 'shape'"),
    ("outputs", [{"shape": [2], "dtype": ""}], "field 'outputs'[0] field 'dtype'"),
    ("outputs", [{"shape": [2], "layout": "strided"}], "unknown field 'layout'"),
    ("inputs", {"shape": [2]}, "field 'inputs': expected a list"),
])
def test_bad_node_semantics_name_node_and_field(field, value, message):
    with pytest.raises(ProblemError, match=r"node 'a'.*" + message.replace("[", r"\[").replace("]", r"\]")):
        make_problem([{"id": "a", "time": 1, "out_bytes": 1, "param_bytes": 0, field: value}], [])


@pytest.mark.parametrize("field, value", [("src_output", -1), ("src_output", "0"), ("dst_inputs", 1), ("dst_inputs", [True])])
def test_bad_edge_semantics_name_the_edge(field, value):
    nodes = [{"id": "a", "time": 1, "out_bytes": 1, "param_bytes": 0}, {"id": "b", "time": 1, "out_bytes": 1, "param_bytes": 0}]
    with pytest.raises(ProblemError, match=f"edge 'a' -> 'b' field '{field}'"):
        make_problem(nodes, [{"src": "a", "dst": "b", "comm": 1, field: value}])


def test_gzipped_native_file_loads_like_the_plain_one(tmp_path):
    nodes, edges = _meta_problem()
    p = make_problem(nodes, edges, link=SPECS["h100"].link(), name="ln")
    plain, packed = tmp_path / "g.json", tmp_path / "g.json.gz"
    plain.write_text(native_text(p))
    packed.write_bytes(gzip.compress(native_text(p).encode()))
    a, b = load_problem(plain), load_problem(packed)
    assert b.name == a.name == "ln"
    assert b.node_meta == a.node_meta and np.array_equal(a.comm, b.comm)


def test_corrupt_gzip_is_one_error(tmp_path):
    bad = tmp_path / "g.json.gz"
    bad.write_bytes(b"\x1f\x8b\x08\x00garbage")
    with pytest.raises(ProblemError, match="corrupt gzip"):
        load_problem(bad)


# ----- device specs -------------------------------------------------------------------------------

def test_roofline_is_the_slower_of_compute_and_memory_plus_the_launch():
    h100 = SPECS["h100"]
    # 2 * 4096^3 FLOPs of float32 matmul at 67 TFLOP/s, 3 * 4096^2 * 4 bytes at 3.35 TB/s
    flops, nbytes = 2 * 4096**3, 3 * 4096**2 * 4
    assert h100.roofline_ms(flops, nbytes, "float32", True) == pytest.approx(1e3 * (flops / 67e12 + 5e-6))
    assert h100.roofline_ms(4096**2, nbytes, "float32", False) == pytest.approx(1e3 * (nbytes / 3.35e12 + 5e-6))
    assert h100.roofline_ms(flops, nbytes, "bfloat16", True) == pytest.approx(1e3 * (flops / 989e12 + 5e-6))
    link = h100.link()  # ms: 5 us latency, 450 GB/s
    assert link.comm(450e6) == pytest.approx(5e-3 + 1.0)


def test_device_spec_from_a_file_and_its_errors(tmp_path):
    f = tmp_path / "tpu.json"
    f.write_text(json.dumps({"name": "mine", "memory": 16e9, "matmul_flops": {"default": 1e14}, "mem_bandwidth": 1e12}))
    spec = device_spec(str(f))
    assert spec.memory == 16e9 and spec.peak("float32", True) == 1e14 and spec.peak("float32", False) == spec.vector_flops
    f.write_text(json.dumps({"name": "mine", "memory": 16e9, "flops": 1}))
    with pytest.raises(ProblemError, match="unknown field 'flops'"):
        device_spec(str(f))
    f.write_text(json.dumps({"name": "mine", "memory": 16e9, "mem_bandwidth": 0}))
    with pytest.raises(ProblemError, match="'mem_bandwidth'"):
        device_spec(str(f))
    with pytest.raises(ProblemError, match="neither a known device"):
        device_spec("v100x")


# ----- PipeDream ------------------------------------------------------------------------------------

PROFILE = """\
node1 -- Input0 -- forward_compute_time=0.000, backward_compute_time=0.000, activation_size=100.0, parameter_size=0.000
node2 -- Linear(in_features=5, out_features=10, bias=True) -- forward_compute_time=1.000, backward_compute_time=2.000, activation_size=40.0, parameter_size=80.000
node3 -- ReLU() -- forward_compute_time=0.500, backward_compute_time=0.250, activation_size=40.0, parameter_size=0.000
node4 -- Linear(in_features=10, out_features=2, bias=True) -- forward_compute_time=1.500, backward_compute_time=3.000, activation_size=[6.0; 2.0], parameter_size=40.000
\tnode1 -- node2
\tnode2 -- node3
\tnode3 -- node4
"""


def _edges(p):
    return {(p.ids[u], p.ids[v]): b for u, v, b in zip(p.src.tolist(), p.dst.tolist(), p.edge_bytes.tolist())}


def test_pipedream_training_graph_checked_by_hand():
    p = problem_from_pipedream(PROFILE)
    assert p.ids == ["node1", "node2", "node3", "node4", "node2:backward", "node3:backward", "node4:backward"]
    t = dict(zip(p.ids, p.time.tolist()))
    assert t == {"node1": 0, "node2": 1, "node3": 0.5, "node4": 1.5, "node2:backward": 2, "node3:backward": 0.25, "node4:backward": 3}
    # weights x4: weights, gradients, Adam's two states
    assert dict(zip(p.ids, p.param_bytes.tolist())) == {"node1": 0, "node2": 320, "node3": 0, "node4": 160,
                                                        "node2:backward": 0, "node3:backward": 0, "node4:backward": 0}
    # a backward produces the gradient of its inputs (none for node2: the input needs none)
    out = dict(zip(p.ids, p.out_bytes.tolist()))
    assert (out["node4"], out["node4:backward"], out["node3:backward"], out["node2:backward"]) == (8, 40, 40, 0)
    assert _edges(p) == {
        ("node1", "node2"): 100, ("node2", "node3"): 40, ("node3", "node4"): 40,  # forward
        ("node2", "node2:backward"): 40, ("node3", "node3:backward"): 40, ("node4", "node4:backward"): 8,  # own output
        ("node1", "node2:backward"): 100, ("node2", "node3:backward"): 40, ("node3", "node4:backward"): 40,  # saved input
        ("node4:backward", "node3:backward"): 40, ("node3:backward", "node2:backward"): 40,  # gradients, reversed
    }
    groups = {p.ids[i]: p.colocate_names[g] for i, g in enumerate(p.colocate.tolist()) if g >= 0}
    assert groups == {"node2": "node2", "node2:backward": "node2", "node3": "node3", "node3:backward": "node3",
                      "node4": "node4", "node4:backward": "node4"}
    # the link prices bytes: h100's 5 us + bytes / 450 GB/s, in ms
    j = list(zip(p.ids[u] for u in p.src.tolist())).index(("node1",))
    assert p.comm[j] == pytest.approx(5e-3 + 100 / 4.5e8)
    assert p.node_meta[1]["op"] == "pipedream.Linear" and p.node_meta[4]["op"] == "pipedream.Linear.backward"
    # one device, everything in sequence: makespan = the sum of times
    ev = evaluate(p, np.zeros(p.n, dtype=int))
    assert ev.makespan == pytest.approx(8.25)


def test_pipedream_inference_is_the_forward_layers():
    p = problem_from_pipedream(PROFILE, train=False)
    assert p.ids == ["node1", "node2", "node3", "node4"]
    assert p.param_bytes.tolist() == [0, 80, 0, 40]
    assert sorted(_edges(p).items()) == [(("node1", "node2"), 100), (("node2", "node3"), 40), (("node3", "node4"), 40)]
    assert p.colocate_names == []


@pytest.mark.parametrize("text, message", [
    (PROFILE + "node9 -> node2\n", r"graph.txt:8: neither"),
    (PROFILE + "\tnode4 -- node7\n", "unknown layer 'node7'"),
    (PROFILE.replace("forward_compute_time=1.000", "forward_compute_time=-1.0"), "layer 'node2' field forward_compute_time"),
    (PROFILE + "\tnode4 -- node2\n", "cycle"),
    (PROFILE.replace("node3 -- ReLU", "node2 -- ReLU"), "layer 'node2' defined twice"),
    ("", "no layers"),
])
def test_pipedream_bad_input_names_the_problem(text, message):
    with pytest.raises(ProblemError, match=message):
        problem_from_pipedream(text)


def test_pipedream_cli_writes_native_json_and_fails_cleanly(tmp_path, capsys):
    src = tmp_path / "graph.txt"
    src.write_text(PROFILE)
    out = tmp_path / "g.json.gz"
    assert pipedream_main([str(src), "-o", str(out)]) == 0
    doc = json.loads(gzip.decompress(out.read_bytes()))
    jsonschema.validate(doc, SCHEMA)
    assert load_problem(out).ids == problem_from_pipedream(PROFILE).ids
    capsys.readouterr()
    bad = tmp_path / "bad.txt"
    bad.write_text(PROFILE + "garbage\n")
    target = tmp_path / "never.json"
    assert pipedream_main([str(bad), "-o", str(target)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "bad.txt:8" in err[0]
    assert not target.exists()


def test_solve_reads_a_pipedream_profile_directly(tmp_path, capsys):
    src = tmp_path / "graph.txt"
    src.write_text(PROFILE)
    assert detect_format(src) == "pipedream"
    report = tmp_path / "r.json"
    assert solve_main([str(src), "--devices", "2", "--time-limit", "5", "--report", str(report), "--quiet", "--workers", "1"]) == 0
    rep = json.loads(report.read_text())
    assert rep["problem"]["nodes"] == 7 and rep["status"] in ("optimal", "feasible")
    # each backward on its forward layer's device (colocation held)
    for layer in ("node2", "node3", "node4"):
        assert rep["placement"][layer] == rep["placement"][f"{layer}:backward"]


@pytest.mark.parametrize("workload, layers, without_grad", [("alexnet", 23, {"node1"}), ("gnmt", 48, {"node1", "node2", "node3", "node20", "node22", "node30", "node36", "node43"})])
def test_published_pipedream_profiles(workload, layers, without_grad):
    """Every layer but the inputs and what reads only them (gnmt: the hidden state source node20 and
    its getitems) gets a backward; weights x4; forward
    times as profiled."""
    import re

    path = PIPEDREAM / workload / "graph.txt"
    if not path.exists():
        pytest.fail(f"{path} not found: the tests need ../shared beside the project")
    text = path.read_text()
    p = load_problem(path)
    assert p.name == workload
    forward = [i for i in p.ids if not str(i).endswith(":backward")]
    assert len(forward) == layers
    assert {i for i in forward if f"{i}:backward" not in p.index} == without_grad
    params = sum(float(x) for x in re.findall(r"parameter_size=([0-9.]+)", text))
    assert p.param_bytes.sum() == pytest.approx(4 * params)
    fwd_time = sum(float(x) for x in re.findall(r"forward_compute_time=([0-9.]+)", text))
    assert sum(p.time[p.index[i]] for i in forward) == pytest.approx(fwd_time)


# ----- device maps ---------------------------------------------------------------------------------

def test_device_map_orders_each_device_by_start_time():
    dmap = device_map(["a", "b", "c", "d"], [0, 1, 0, 0], [2.0, 0.0, 0.0, 2.0])
    assert dmap["devices"] == {"a": "cuda:0", "b": "cuda:1", "c": "cuda:0", "d": "cuda:0"}
    assert dmap["order"] == {"cuda:0": ["c", "a", "d"], "cuda:1": ["b"]}


def test_device_map_from_a_solve_report(tmp_path, capsys):
    src = tmp_path / "graph.txt"
    src.write_text(PROFILE)
    report = tmp_path / "r.json"
    assert solve_main([str(src), "--devices", "2", "--time-limit", "5", "--report", str(report), "--quiet", "--workers", "1"]) == 0
    rep = json.loads(report.read_text())
    out = tmp_path / "map.json"
    assert devicemap_main([str(report), "-o", str(out), "--devices", "gpu0,gpu1"]) == 0
    dmap = json.loads(out.read_text())
    assert dmap == device_map_from_report(rep, ["gpu0", "gpu1"])
    assert {dmap["devices"][n] for n in rep["placement"]} <= {"gpu0", "gpu1"}
    for dev, seq in dmap["order"].items():
        starts = [rep["start"][n] for n in seq]
        assert starts == sorted(starts) and all(dmap["devices"][n] == dev for n in seq)
    assert sum(len(s) for s in dmap["order"].values()) == 7
    assert devicemap_main([str(tmp_path / "missing.json"), "-o", str(tmp_path / "m2.json")]) == 2
    assert not (tmp_path / "m2.json").exists()


def test_importer_output_is_written_like_solve_outputs(tmp_path: Path) -> None:
    """The importers write through placement/output.py: a new file gets the mode a plain open()
    gives (not mkstemp's 0600), and a target that cannot be written is a ProblemError naming it."""
    import os

    from placement.importers.build import write_native

    prob = make_problem([{"id": "a", "time": 1, "out_bytes": 1, "param_bytes": 0},
                         {"id": "b", "time": 2, "out_bytes": 1, "param_bytes": 0}], [{"src": "a", "dst": "b", "comm": 1.0}])
    out = tmp_path / "g.json"
    write_native(prob, out)
    mask = os.umask(0)
    os.umask(mask)
    assert out.stat().st_mode & 0o777 == 0o666 & ~mask
    assert read_problem(out).n == 2
    with pytest.raises(ProblemError, match="dev/full"):
        write_native(prob, "/dev/full")
