"""Bad input: one clear line on stderr naming the fault, exit status 2, and no output written."""
from __future__ import annotations

import json

import pytest

from solvers.cli import main

GOOD_NODES = [{"id": "a", "time": 1, "out_bytes": 1, "param_bytes": 0},
              {"id": "b", "time": 1, "out_bytes": 1, "param_bytes": 0},
              {"id": "c", "time": 1, "out_bytes": 1, "param_bytes": 0}]
GOOD_EDGES = [{"src": "a", "dst": "b", "comm": 1}, {"src": "b", "dst": "c", "comm": 1}]


def doc(nodes=None, edges=None, **extra):
    d = {"devices": {"count": 2, "memory": 100}, "nodes": nodes or GOOD_NODES, "edges": GOOD_EDGES if edges is None else edges}
    d.update(extra)
    return d


def with_node(i, **changes):
    nodes = [dict(n) for n in GOOD_NODES]
    nodes[i].update(changes)
    return nodes


CASES = {
    "cycle": (doc(edges=GOOD_EDGES + [{"src": "c", "dst": "a", "comm": 0}]), r"cycle: a -> b -> c -> a"),
    "self loop": (doc(edges=[{"src": "a", "dst": "a", "comm": 0}]), r"cycle: edge 'a' -> 'a' is a self-loop"),
    "missing field": (doc(nodes=[{"id": "a", "time": 1, "out_bytes": 1}]), r"node 'a': missing field 'param_bytes'"),
    "negative": (doc(nodes=with_node(1, time=-2)), r"node 'b' field 'time': is negative"),
    "nan": (doc(nodes=with_node(2, out_bytes=float("nan"))), r"node 'c' field 'out_bytes': is NaN"),
    "string number": (doc(nodes=with_node(0, param_bytes="lots")), r"node 'a' field 'param_bytes': expected a number"),
    "unknown node": (doc(edges=[{"src": "a", "dst": "zz", "comm": 1}]), r"unknown node 'zz' in field 'dst'"),
    "duplicate id": (doc(nodes=GOOD_NODES + [{"id": "b", "time": 1, "out_bytes": 0, "param_bytes": 0}]), r"node 'b': duplicate id"),
    "edge without cost": (doc(edges=[{"src": "a", "dst": "b"}]), r"edge 'a' -> 'b': needs 'comm' or 'bytes'"),
    "bytes without link": (doc(edges=[{"src": "a", "dst": "b", "bytes": 5}]), r"no 'link'"),
    "colocation with no common device": (
        doc(nodes=with_node(0, colocate="g", devices=[0]) [:1] + [dict(GOOD_NODES[1], colocate="g", devices=[1]), GOOD_NODES[2]]),
        r"colocation group 'g': .* no device in common"),
    "allowed device out of range": (doc(nodes=with_node(0, devices=[7])), r"node 'a' field 'devices': 7 is not a device index"),
    "bad memory": (doc(devices={"count": 2, "memory": "lots"}), r"not a memory size"),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_bad_problem_file(case, tmp_path, capsys):
    content, message = CASES[case]
    path = tmp_path / "p.json"
    path.write_text(json.dumps(content))
    report, out = tmp_path / "r.json", tmp_path / "pl.txt"
    code = main([str(path), "--report", str(report), "--out", str(out), "--method", "topo-fill", "--quiet"])
    err = capsys.readouterr().err.strip()
    assert code == 2
    assert len(err.splitlines()) == 1
    import re
    assert re.search(message, err), err
    assert not report.exists() and not out.exists()


@pytest.mark.parametrize("args,message", [
    (["--memory", "12 parsecs"], "--memory: not a memory size"),
    (["--devices", "0"], "--devices must be at least 1"),
    (["--time-limit", "-3"], "--time-limit must be a positive number of seconds"),
    (["--method", "nonsense"], "unknown method 'nonsense'"),
    (["--devices", "3", "--memory", "1GB,2GB"], "--memory lists 2 sizes for --devices 3"),
    (["--report", "/no/such/dir/r.json"], "--report: directory"),
])
def test_bad_options(args, message, tmp_path, capsys):
    path = tmp_path / "p.json"
    path.write_text(json.dumps(doc()))
    code = main([str(path), "--quiet", *args])
    assert code == 2
    assert message in capsys.readouterr().err


@pytest.mark.parametrize("content,message", [
    (b"\x00\xff\xfe binary", "cannot"),
    (b"{ not json", "invalid JSON at line 1"),
    (b'{"hello": 1}', "neither the native format"),
])
def test_unreadable_files(content, message, tmp_path, capsys):
    path = tmp_path / "g.json"
    path.write_bytes(content)
    assert main([str(path), "--quiet"]) == 2
    assert message in capsys.readouterr().err


def test_missing_file(tmp_path, capsys):
    assert main([str(tmp_path / "nope.json"), "--quiet"]) == 2
    assert "no such file" in capsys.readouterr().err
