"""Readers and writers: msr-fiddle on real workloads, native JSON round trip and schema, PARDNN text,
detection by content, placement files."""
from __future__ import annotations

import json
import math

import numpy as np
import pytest

from placement.formats import detect_format, load_problem, read_problem, write_problem
from placement.formats.pardnn_text import read_pardnn, write_pardnn
from placement.problem import ProblemError
from placement.report import read_placement, write_placement
from tests.conftest import DATA, ROOT, random_problem

BERT3 = "latency-inputs/OperatorGraphs/bert_l-3_inference.json"


def test_fiddle_reader_maps_every_field(workloads):
    path = workloads / BERT3
    raw = json.loads(path.read_text())
    prob = load_problem(path)
    assert detect_format(path) == "fiddle"
    assert (prob.n, prob.m, prob.k) == (len(raw["nodes"]), len(raw["edges"]), raw["maxFPGAs"])
    assert np.all(prob.memory == raw["maxSizePerFPGA"])
    assert prob.attrs["max_cpus"] == raw["maxCPUs"]
    by_id = {rec["id"]: rec for rec in raw["nodes"]}
    for i, nid in enumerate(prob.ids):
        rec = by_id[nid]
        assert prob.time[i] == rec["fpgaLatency"]
        assert prob.param_bytes[i] == rec["size"] and prob.out_bytes[i] == 0
        assert prob.node_attrs["cpu_latency"][i] == rec["cpuLatency"]
        assert prob.node_attrs["supported"][i] == bool(rec["supportedOnFpga"])
        assert prob.node_attrs["is_backward"][i] == bool(rec["isBackwardNode"])
    for j, rec in enumerate(raw["edges"]):
        assert prob.ids[prob.src[j]] == rec["sourceId"] and prob.ids[prob.dst[j]] == rec["destId"]
        assert prob.comm[j] == rec["cost"]
    # Nodes of one colorClass share a group, and different classes do not.
    classes = {}
    for i, nid in enumerate(prob.ids):
        if by_id[nid].get("colorClass") is not None:
            classes.setdefault(by_id[nid]["colorClass"], set()).add(int(prob.colocate[i]))
    assert all(len(g) == 1 for g in classes.values())
    assert len({next(iter(g)) for g in classes.values()}) == len(classes)


def test_every_workload_reads(workloads):
    files = sorted(workloads.glob("*/*/*.json"))
    assert len(files) == 20
    for path in files:
        prob = load_problem(path)
        assert prob.n == len(json.loads(path.read_text())["nodes"])
        assert len(prob.topo_order) == prob.n


def test_native_round_trip(tmp_path):
    prob = random_problem(3, 12, 3, memory=500, colocate_p=0.3)
    write_problem(prob, tmp_path / "p.json")
    back = read_problem(tmp_path / "p.json")
    assert back.ids == prob.ids and back.k == prob.k
    for field in ("time", "out_bytes", "param_bytes", "src", "dst", "comm", "memory"):
        np.testing.assert_array_equal(getattr(back, field), getattr(prob, field))
    assert [set(prob.ids[i] for i in g) for g in back.groups] == [set(prob.ids[i] for i in g) for g in prob.groups]


def test_native_devices_list_link_and_units():
    doc = {"devices": [{"name": "gpu0", "memory": "1GiB"}, {"name": "gpu1", "memory": "2GB"}],
           "link": {"latency": 0.5, "bandwidth": 100},
           "nodes": [{"id": "a", "time": 1, "out_bytes": 200, "param_bytes": 0},
                     {"id": "b", "time": 1, "out_bytes": 0, "param_bytes": 0, "devices": [1]}],
           "edges": [{"src": "a", "dst": "b", "bytes": 200}]}
    from placement.formats.native import problem_from_native
    prob = problem_from_native(doc)
    assert prob.memory.tolist() == [2**30, 2e9]
    assert prob.device_names == ["gpu0", "gpu1"]
    assert prob.comm.tolist() == [0.5 + 200 / 100]
    assert prob.allowed == [None, (1,)]


def test_shipped_data_validates_against_the_schema():
    jsonschema = pytest.importorskip("jsonschema", reason="install the test extra: pip install '.[test]'")
    schema = json.loads((ROOT / "placement" / "schema" / "problem.schema.json").read_text())
    jsonschema.Draft202012Validator.check_schema(schema)
    files = sorted(DATA.glob("*.json"))
    assert files, "data/ ships no JSON instance"
    for path in files:
        jsonschema.validate(json.loads(path.read_text()), schema)
    bad = {"nodes": [{"id": "a", "time": -1, "out_bytes": 0, "param_bytes": 0}]}
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(bad, schema)


def test_pardnn_hand_written_example():
    prob = read_pardnn(DATA / "pardnn_example")
    idx = prob.index
    assert prob.n == 13 and prob.m == 18 and prob.k == 2
    assert prob.memory.tolist() == [40e3, 40e3]
    assert prob.param_bytes[idx["w1"]] == 12000 and prob.out_bytes[idx["w1"]] == 0
    assert prob.out_bytes[idx["w1_update"]] == 0  # a reference node allocates nothing
    assert prob.colocate[idx["w1_update"]] == prob.colocate[idx["w1"]] != prob.colocate[idx["w2"]]
    assert prob.time[idx["step_done"]] == 0  # no-op
    comm = {(prob.ids[u], prob.ids[v]): c for u, v, c in zip(prob.src, prob.dst, prob.comm)}
    assert comm[("conv1", "relu1")] == 0.5 + 6000 / 2000
    assert comm[("w1", "conv1")] == 0.5 + 4000 / 2000
    assert detect_format(DATA / "pardnn_example" / "graph.dot") == "pardnn"
    assert load_problem(DATA / "pardnn_example" / "graph.dot").n == 13


def test_pardnn_round_trip(tmp_path):
    prob = read_pardnn(DATA / "pardnn_example")
    write_pardnn(prob, tmp_path / "g")
    back = read_pardnn(tmp_path / "g")
    assert [str(x) for x in back.ids] == [str(x) for x in prob.ids]
    np.testing.assert_allclose(back.time, prob.time)
    np.testing.assert_allclose(back.comm, prob.comm)
    np.testing.assert_allclose(back.param_bytes, prob.param_bytes)
    np.testing.assert_array_equal(back.colocate, prob.colocate)


def test_pardnn_missing_time_is_named(tmp_path):
    (tmp_path / "g.dot").write_text('digraph {\n"a" -> "b"\n}\n')
    (tmp_path / "times.txt").write_text("a::1\n")
    with pytest.raises(ProblemError, match="node 'b': missing from times.txt"):
        read_pardnn(tmp_path / "g.dot")


def test_placement_file_round_trip(tmp_path):
    prob = random_problem(5, 9, 3)
    pl = np.arange(prob.n) % 3
    write_placement(tmp_path / "pl.txt", prob, pl)
    assert (tmp_path / "pl.txt").read_text().splitlines()[1] == "1 1"
    np.testing.assert_array_equal(read_placement(tmp_path / "pl.txt", prob), pl)
    (tmp_path / "bad.txt").write_text("0 0\n1 5\n")
    with pytest.raises(ProblemError, match="device 5 of node '1'"):
        read_placement(tmp_path / "bad.txt", prob)


def test_detection_by_content(tmp_path):
    (tmp_path / "weird.txt").write_text(json.dumps({"maxFPGAs": 1, "maxSizePerFPGA": 1, "nodes": [], "edges": []}))
    assert detect_format(tmp_path / "weird.txt") == "fiddle"
    (tmp_path / "n.data").write_text(json.dumps({"devices": {"count": 1}, "nodes": [{"id": 0, "time": 1, "out_bytes": 0, "param_bytes": 0}]}))
    assert detect_format(tmp_path / "n.data") == "native"
    (tmp_path / "x.json").write_text("hello")
    with pytest.raises(ProblemError, match="cannot tell the format"):
        detect_format(tmp_path / "x.json")
    assert math.isinf(load_problem(tmp_path / "n.data").memory[0])
