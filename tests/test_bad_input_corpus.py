"""The malformed-input corpus (issue 13): every case through the real ``solve`` entry point.

Contract for each: exit status 2, exactly one line on stderr naming the fault, and none of the
requested outputs written. Most cases call ``main()`` in-process (fast); a few run the command as a
subprocess, where argparse, signals and the interpreter's own error paths are real.
"""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from solvers.cli import main
from tests.conftest import ROOT

NODES = [{"id": "a", "time": 1, "out_bytes": 1, "param_bytes": 0},
         {"id": "b", "time": 1, "out_bytes": 1, "param_bytes": 0},
         {"id": "c", "time": 1, "out_bytes": 1, "param_bytes": 0}]
EDGES = [{"src": "a", "dst": "b", "comm": 1}, {"src": "b", "dst": "c", "comm": 1}]


def native(**changes: Any) -> dict[str, Any]:
    doc: dict[str, Any] = {"devices": {"count": 2, "memory": 100}, "nodes": [dict(n) for n in NODES],
                           "edges": [dict(e) for e in EDGES]}
    doc.update(changes)
    return doc


def node(i: int, **changes: Any) -> list[dict[str, Any]]:
    nodes = [dict(n) for n in NODES]
    nodes[i].update(changes)
    return nodes


def edge(i: int, **changes: Any) -> list[dict[str, Any]]:
    edges = [dict(e) for e in EDGES]
    edges[i].update(changes)
    return edges


def fiddle(nodes: list[dict[str, Any]] | None = None, **changes: Any) -> dict[str, Any]:
    doc: dict[str, Any] = {
        "maxFPGAs": 2, "maxCPUs": 1, "maxSizePerFPGA": 1000,
        "nodes": nodes if nodes is not None else [
            {"id": 1, "fpgaLatency": 1.0, "cpuLatency": 2.0, "size": 10, "supportedOnFpga": True},
            {"id": 2, "fpgaLatency": 1.0, "cpuLatency": 2.0, "size": 10, "supportedOnFpga": True}],
        "edges": [{"sourceId": 1, "destId": 2, "cost": 0.5, "size": 4}],
    }
    doc.update(changes)
    return doc


def fnode(**changes: Any) -> list[dict[str, Any]]:
    nodes = fiddle()["nodes"]
    nodes[0].update(changes)
    return nodes


PARDNN = {"graph.dot": 'digraph G {\n"a" -> "b"\n"b" -> "c"\n}\n', "times.txt": "a::1\nb::2\nc::1\n"}


def pardnn(**files: str | bytes | None) -> dict[str, str | bytes | None]:
    out: dict[str, str | bytes | None] = dict(PARDNN)
    out.update({name.replace("_txt", ".txt").replace("_dot", ".dot"): v for name, v in files.items()})
    return out


def deep_json(depth: int) -> str:
    return '{"nodes": ' + "[" * depth + "]" * depth + ', "edges": []}'


# name -> (files: {relative path: JSON doc, text or bytes; None = directory}, graph argument,
#          extra command-line arguments, regex the one stderr line must match)
Case = tuple[dict[str, Any], str, list[str], str]
J = "p.json"
CORPUS: dict[str, Case] = {
    # --- native JSON: structure -------------------------------------------------------------
    "cycle": ({J: native(edges=EDGES + [{"src": "c", "dst": "a", "comm": 0}])}, J, [], r"cycle: a -> b -> c -> a"),
    "self loop": ({J: native(edges=[{"src": "a", "dst": "a", "comm": 0}])}, J, [], r"self-loop"),
    "empty node list": ({J: native(nodes=[], edges=[])}, J, [], r"nodes: .*empty"),
    "nodes not a list": ({J: native(nodes={"a": 1})}, J, [], r"'nodes' must be a list"),
    "edges not a list": ({J: native(edges="a->b")}, J, [], r"'edges' must be a list"),
    "node not an object": ({J: native(nodes=[1, 2])}, J, [], r"nodes\[0\]: expected an object"),
    "edge not an object": ({J: native(edges=[["a", "b"]])}, J, [], r"edges\[0\]: expected an object"),
    "document is a list": ({J: [native()]}, J, [], r"cannot tell the format"),
    "document is a number": ({J: "42"}, J, [], r"cannot tell the format|not .*JSON object"),
    "missing id": ({J: native(nodes=[{"time": 1, "out_bytes": 0, "param_bytes": 0}], edges=[])}, J, [], r"nodes\[0\]: missing field 'id'"),
    "id is a list": ({J: native(nodes=node(0, id=[1]), edges=[])}, J, [], r"nodes\[0\]: id must be a string or an integer"),
    "id is an object": ({J: native(nodes=node(0, id={"x": 1}), edges=[])}, J, [], r"nodes\[0\]: id must be a string or an integer"),
    "id is a float": ({J: native(nodes=node(0, id=1.5), edges=[])}, J, [], r"nodes\[0\]: id must be a string or an integer"),
    "id is a boolean": ({J: native(nodes=node(0, id=True), edges=[])}, J, [], r"nodes\[0\]: id must be a string or an integer"),
    "ids 1 and '1'": ({J: native(nodes=node(0, id=1) [:1] + node(1, id="1")[1:2], edges=[])}, J, [], r"node '1': .*same id as"),
    "duplicate id": ({J: native(nodes=NODES + [dict(NODES[1])])}, J, [], r"node 'b': duplicate id"),
    "colocate is a list": ({J: native(nodes=node(0, colocate=["g"]))}, J, [], r"node 'a' field 'colocate': .*string or an integer"),
    "colocate is an object": ({J: native(nodes=node(0, colocate={"g": 1}))}, J, [], r"node 'a' field 'colocate': .*string or an integer"),
    "colocate 1 and '1'": ({J: native(nodes=node(0, colocate=1)[:1] + node(1, colocate="1")[1:])}, J, [],
                           r"colocation key '1'.*integer and as a string"),
    "name not a string": ({J: native(nodes=node(0, name=["x"]))}, J, [], r"node 'a' field 'name': expected a string"),
    "devices field not a list": ({J: native(nodes=node(0, devices=0))}, J, [], r"node 'a' field 'devices'"),
    "allowed device out of range": ({J: native(nodes=node(0, devices=[7]))}, J, [], r"node 'a' field 'devices': 7 is not a device index"),
    "allowed device a float": ({J: native(nodes=node(0, devices=[0.5]))}, J, [], r"node 'a' field 'devices': 0.5 is not a device index"),
    "colocation with no common device": (
        {J: native(nodes=node(0, colocate="g", devices=[0])[:1] + [dict(NODES[1], colocate="g", devices=[1]), NODES[2]])},
        J, [], r"colocation group 'g': .* no device in common"),
    # --- native JSON: numbers ---------------------------------------------------------------
    "missing field": ({J: native(nodes=[{"id": "a", "time": 1, "out_bytes": 1}], edges=[])}, J, [], r"node 'a': missing field 'param_bytes'"),
    "negative time": ({J: native(nodes=node(1, time=-2))}, J, [], r"node 'b' field 'time': is negative"),
    "NaN bytes": ({J: '{"devices": {"count": 2}, "nodes": [{"id": "a", "time": 1, "out_bytes": NaN, "param_bytes": 0}]}'},
                  J, [], r"node 'a' field 'out_bytes': is NaN"),
    "Infinity time": ({J: '{"devices": {"count": 2}, "nodes": [{"id": "a", "time": Infinity, "out_bytes": 0, "param_bytes": 0}]}'},
                      J, [], r"node 'a' field 'time': is infinite"),
    "1e400 time": ({J: '{"devices": {"count": 2}, "nodes": [{"id": "a", "time": 1e400, "out_bytes": 0, "param_bytes": 0}]}'},
                   J, [], r"node 'a' field 'time': is infinite"),
    "time 1e308 (total overflows)": ({J: native(nodes=node(0, time=1e308)[:1] + node(1, time=1e308)[1:])}, J, [],
                                     r"too large|overflow"),
    "time 1e308 alone": ({J: native(nodes=node(0, time=1e308))}, J, [], r"too large|overflow"),
    "edge comm 1e308": ({J: native(edges=edge(0, comm=1e308))}, J, [], r"edge 'a' -> 'b' field 'comm'.*too large|overflow"),
    "bytes 1e308": ({J: native(nodes=node(0, param_bytes=1e308)[:1] + node(1, param_bytes=1e308)[1:])}, J, [], r"too large|overflow"),
    "string number": ({J: native(nodes=node(0, param_bytes="lots"))}, J, [], r"node 'a' field 'param_bytes': expected a number"),
    "boolean number": ({J: native(nodes=node(0, time=True))}, J, [], r"node 'a' field 'time': expected a number"),
    "null number": ({J: native(nodes=node(0, time=None))}, J, [], r"node 'a' field 'time': expected a number"),
    "negative comm": ({J: native(edges=edge(0, comm=-1))}, J, [], r"edge 'a' -> 'b' field 'comm': is negative"),
    "time a 400-digit integer": ({J: '{"devices": {"count": 2}, "nodes": [{"id": "a", "time": 1' + "0" * 400 + ', "out_bytes": 0, "param_bytes": 0}]}'},
                                 J, [], r"node 'a' field 'time': (is infinite|too large)"),
    "bytes a 400-digit integer": ({J: '{"devices": {"count": 2}, "nodes": [{"id": "a", "time": 1, "out_bytes": 1' + "0" * 400 + ', "param_bytes": 0}]}'},
                                  J, [], r"node 'a' field 'out_bytes': (is infinite|too large)"),
    "bytes 2^70": ({J: native(nodes=node(0, param_bytes=2**70))}, J, [], r"node 'a' field 'param_bytes': too large"),
    "node devices empty": ({J: native(nodes=node(0, devices=[]))}, J, [], r"node 'a' field 'devices': expected a non-empty list"),
    "colocate a boolean": ({J: native(nodes=node(0, colocate=True))}, J, [], r"node 'a' field 'colocate'"),
    # --- native JSON: edges ---------------------------------------------------------------------
    "unknown node": ({J: native(edges=[{"src": "a", "dst": "zz", "comm": 1}])}, J, [], r"unknown node 'zz' in field 'dst'"),
    "edge endpoint a list": ({J: native(edges=[{"src": ["a"], "dst": "b", "comm": 1}])}, J, [], r"edges\[0\].*field 'src'"),
    "edge without cost": ({J: native(edges=[{"src": "a", "dst": "b"}])}, J, [], r"edge 'a' -> 'b': needs 'comm' or 'bytes'"),
    "edge without src": ({J: native(edges=[{"dst": "b", "comm": 1}])}, J, [], r"edges\[0\]: missing field 'src'"),
    "edge endpoint a float": ({J: native(edges=[{"src": "a", "dst": 1.5, "comm": 1}])}, J, [], r"edges\[0\] field 'dst'"),
    "edge bytes negative": ({J: native(edges=edge(0, bytes=-4))}, J, [], r"edge 'a' -> 'b' field 'bytes': is negative"),
    "edge comm NaN": ({J: '{"devices": {"count": 2}, "nodes": [{"id": "a", "time": 1, "out_bytes": 0, "param_bytes": 0}, '
                          '{"id": "b", "time": 1, "out_bytes": 0, "param_bytes": 0}], "edges": [{"src": "a", "dst": "b", "comm": NaN}]}'},
                      J, [], r"edge 'a' -> 'b' field 'comm': is NaN"),
    "bytes without link": ({J: native(edges=[{"src": "a", "dst": "b", "bytes": 5}])}, J, [], r"no 'link'"),
    # --- native JSON: devices and link ----------------------------------------------------------
    "misspelt devices key": ({J: native(devices={"count": 2, "memroy": 100})}, J, [], r"devices: unknown key 'memroy'"),
    "devices without count": ({J: native(devices={"memory": 100})}, J, [], r"devices: missing 'count'"),
    "device count zero": ({J: native(devices={"count": 0, "memory": 100})}, J, [], r"count must be at least 1"),
    "device count a float": ({J: native(devices={"count": 2.5, "memory": 100})}, J, [], r"devices.count: expected an integer"),
    "device count a string": ({J: native(devices={"count": "2", "memory": 100})}, J, [], r"devices.count: expected an integer"),
    "a million devices": ({J: native(devices={"count": 10**6, "memory": 100})}, J, [], r"1000000 devices.*at most"),
    "memory list of wrong length": ({J: native(devices={"count": 2, "memory": [1, 2, 3]})}, J, [], r"3 memory capacities given for 2 devices"),
    "bad memory": ({J: native(devices={"count": 2, "memory": "lots"})}, J, [], r"not a memory size"),
    "memory with bad unit": ({J: native(devices={"count": 2, "memory": "16XB"})}, J, [], r"not a memory size: '16XB'"),
    "memory true": ({J: native(devices={"count": 2, "memory": True})}, J, [], r"not a memory size"),
    "memory negative": ({J: native(devices={"count": 2, "memory": -5})}, J, [], r"not a memory size"),
    "device list entry unknown key": ({J: native(devices=[{"name": "g0", "memroy": 5}])}, J, [], r"devices\[0\]: unknown key 'memroy'"),
    "device list empty": ({J: native(devices=[])}, J, [], r"devices: the list is empty"),
    "device list entry not object": ({J: native(devices=[3])}, J, [], r"devices\[0\]: expected an object"),
    "devices a string": ({J: native(devices="two")}, J, [], r"devices: expected"),
    "link unknown key": ({J: native(link={"latency": 0, "bandwith": 5})}, J, [], r"link: unknown key 'bandwith'"),
    "link latency infinite": ({J: '{"devices": {"count": 2}, "link": {"latency": Infinity, "bandwidth": 10}, '
                                  '"nodes": [{"id": "a", "time": 1, "out_bytes": 0, "param_bytes": 0}]}'}, J, [], r"link: latency.*finite"),
    "link bandwidth denormal": ({J: native(link={"latency": 0, "bandwidth": 5e-324}, edges=[{"src": "a", "dst": "b", "bytes": 1e10}])},
                                J, [], r"edge 'a' -> 'b'.*(too large|infinite)"),
    "link bandwidth zero": ({J: native(link={"latency": 0, "bandwidth": 0})}, J, [], r"link: .*bandwidth > 0"),
    "link latency a string": ({J: native(link={"latency": "fast"})}, J, [], r"link: latency and bandwidth must be numbers"),
    "name not a string": ({J: native(name=["x"])}, J, [], r"name: expected a string"),
    # --- JSON and file level --------------------------------------------------------------------
    "not JSON": ({J: b"{ not json"}, J, [], r"invalid JSON at line 1"),
    "binary": ({J: b"\x00\xff\xfe binary"}, J, [], r"cannot read|not UTF-8|cannot tell the format"),
    "neither format": ({J: {"hello": 1}}, J, [], r"neither the native format"),
    "nested 100000 deep": ({J: deep_json(100_000)}, J, [], r"nested too deeply"),
    "nested 100000 deep, outer": ({J: "[" * 100_000 + "]" * 100_000}, J, [], r"nested too deeply|cannot tell the format"),
    "empty file": ({J: b""}, J, [], r"empty|cannot tell the format"),
    "missing file": ({}, "nope.json", [], r"no such file"),
    "directory without dot": ({"d": None}, "d", [], r"needs exactly one .dot file, found 0"),
    "fifo is not a file": ({"fifo": "FIFO"}, "fifo", [], r"not a regular file"),
    "forced fiddle on native": ({J: native()}, J, ["--format", "fiddle"], r"not msr-fiddle JSON"),
    # --- msr-fiddle -----------------------------------------------------------------------------
    "fiddle memory with bad unit": ({J: fiddle(maxSizePerFPGA="16XB")}, J, [], r"maxSizePerFPGA.*'16XB'"),
    "fiddle memory a unit string": ({J: fiddle(maxSizePerFPGA="16GB")}, J, [], r"maxSizePerFPGA.*'16GB'"),
    "fiddle memory null": ({J: fiddle(maxSizePerFPGA=None)}, J, [], r"maxSizePerFPGA.*None"),
    "fiddle memory true": ({J: fiddle(maxSizePerFPGA=True)}, J, [], r"maxSizePerFPGA.*True"),
    "fiddle memory missing": ({J: {k: v for k, v in fiddle().items() if k != "maxSizePerFPGA"}}, J, [], r"missing field 'maxSizePerFPGA'"),
    "fiddle cpuLatency a string": ({J: fiddle(fnode(cpuLatency="abc"))}, J, [], r"node 1 field 'cpuLatency'.*'abc'"),
    "fiddle cpuLatency null": ({J: fiddle(fnode(cpuLatency=None))}, J, [], r"node 1 field 'cpuLatency'"),
    "fiddle cpuLatency negative": ({J: fiddle(fnode(cpuLatency=-1))}, J, [], r"node 1 field 'cpuLatency'"),
    "fiddle maxCPUs a string": ({J: fiddle(maxCPUs="x")}, J, [], r"maxCPUs.*'x'"),
    "fiddle maxCPUs negative": ({J: fiddle(maxCPUs=-1)}, J, [], r"maxCPUs"),
    "fiddle maxFPGAs zero": ({J: fiddle(maxFPGAs=0)}, J, [], r"maxFPGAs must be a positive integer"),
    "fiddle maxFPGAs a million": ({J: fiddle(maxFPGAs=10**6)}, J, [], r"1000000 devices.*at most"),
    "fiddle colorClass a list": ({J: fiddle(fnode(colorClass=[1]))}, J, [], r"node 1 field 'colorClass'"),
    "fiddle supportedOnFpga a string": ({J: fiddle(fnode(supportedOnFpga="no"))}, J, [], r"node 1 field 'supportedOnFpga'"),
    "fiddle missing latency": ({J: fiddle([{"id": 1, "size": 1}])}, J, [], r"node 1: missing field 'fpgaLatency'"),
    "fiddle id a list": ({J: fiddle([{"id": [1], "fpgaLatency": 1, "size": 1}], edges=[])}, J, [], r"id must be a string or an integer"),
    "fiddle nodes not a list": ({J: fiddle(nodes={})}, J, [], r"'nodes' and 'edges' must be lists"),
    "fiddle edge unknown node": ({J: fiddle(edges=[{"sourceId": 1, "destId": 9, "cost": 1}])}, J, [], r"unknown node 9"),
    "fiddle edge cost a string": ({J: fiddle(edges=[{"sourceId": 1, "destId": 2, "cost": "x"}])}, J, [], r"edge 1 -> 2 field 'comm'"),
    "fiddle size negative": ({J: fiddle(fnode(size=-1))}, J, [], r"node 1 field 'param_bytes': is negative"),
    "fiddle edge size a string": ({J: fiddle(edges=[{"sourceId": 1, "destId": 2, "cost": 1, "size": "big"}])}, J, [],
                                  r"edge 1 -> 2 field 'bytes'"),
    # --- PARDNN ---------------------------------------------------------------------------------
    "pardnn devices count 0": ({"g": None, **{f"g/{k}": v for k, v in pardnn(devices_txt="count::0\n").items()}}, "g", [],
                               r"devices.txt count: .*positive integer"),
    "pardnn devices count 2.5": ({"g": None, **{f"g/{k}": v for k, v in pardnn(devices_txt="count::2.5\n").items()}}, "g", [],
                                 r"devices.txt count: .*positive integer"),
    "pardnn devices count inf": ({"g": None, **{f"g/{k}": v for k, v in pardnn(devices_txt="count::inf\n").items()}}, "g", [],
                                 r"devices.txt count: .*positive integer"),
    "pardnn devices count 1e6": ({"g": None, **{f"g/{k}": v for k, v in pardnn(devices_txt="count::1e6\n").items()}}, "g", [],
                                 r"1000000 devices.*at most"),
    "pardnn devices memory bad": ({"g": None, **{f"g/{k}": v for k, v in pardnn(devices_txt="memory::16XB\n").items()}}, "g", [],
                                  r"devices.txt memory: not a memory size"),
    "pardnn link latency inf": ({"g": None, **{f"g/{k}": v for k, v in pardnn(link_txt="latency::inf\n").items()}}, "g", [],
                                r"link.txt latency: .*finite"),
    "pardnn link bandwidth 0": ({"g": None, **{f"g/{k}": v for k, v in pardnn(link_txt="bandwidth::0\n").items()}}, "g", [],
                                r"link.txt bandwidth: must be positive"),
    "pardnn time nan": ({"g": None, **{f"g/{k}": v for k, v in pardnn(times_txt="a::nan\nb::1\nc::1\n").items()}}, "g", [],
                        r"times.txt node 'a'"),
    "pardnn time inf": ({"g": None, **{f"g/{k}": v for k, v in pardnn(times_txt="a::inf\nb::1\nc::1\n").items()}}, "g", [],
                        r"times.txt node 'a'.*finite"),
    "pardnn time missing": ({"g": None, **{f"g/{k}": v for k, v in pardnn(times_txt="a::1\nb::1\n").items()}}, "g", [],
                            r"node 'c'.*times.txt"),
    "pardnn binary dot": ({"g": None, "g/graph.dot": b"\x89PNG\r\n\x1a\n\x00\x00\xff", "g/times.txt": "a::1\n"}, "g", [],
                          r"graph.dot: (cannot read|not UTF-8)"),
    "pardnn binary times": ({"g": None, **{f"g/{k}": v for k, v in pardnn(times_txt=b"\xff\xfe\x00a::1").items()}}, "g", [],
                            r"times.txt: (cannot read|not UTF-8)"),
    "pardnn times is a directory": ({"g": None, "g/graph.dot": PARDNN["graph.dot"], "g/times.txt": None}, "g", [],
                                    r"times.txt: (cannot read|is a directory|not a regular file)"),
    "pardnn missing times": ({"g": None, "g/graph.dot": PARDNN["graph.dot"]}, "g", [], r"missing times.txt"),
    "pardnn bad dot line": ({"g": None, **{f"g/{k}": v for k, v in pardnn(graph_dot='digraph G {\n"a" -> "b"\nwhat is this\n}\n').items()}},
                            "g", [], r"graph.dot:3: cannot read line"),
    "pardnn unknown node in times": ({"g": None, **{f"g/{k}": v for k, v in pardnn(times_txt="a::1\nb::1\nc::1\nzz::1\n").items()}},
                                     "g", [], r"node 'zz' is not in graph.dot"),
    "pardnn dot cycle": ({"g": None, **{f"g/{k}": v for k, v in pardnn(graph_dot='digraph G {\n"a" -> "b"\n"b" -> "c"\n"c" -> "a"\n}\n').items()}},
                         "g", [], r"cycle"),
    "pardnn out_bytes negative": ({"g": None, **{f"g/{k}": v for k, v in pardnn(out_bytes_txt="a::-3\n").items()}}, "g", [],
                                  r"out_bytes.txt node 'a'"),
    "pardnn memory not a number": ({"g": None, **{f"g/{k}": v for k, v in pardnn(memory_txt="a::lots\n").items()}}, "g", [],
                                   r"memory.txt node 'a'"),
    # --- bad options ------------------------------------------------------------------------------
    "bad --memory": ({J: native()}, J, ["--memory", "12 parsecs"], r"--memory: not a memory size"),
    "--memory nan": ({J: native()}, J, ["--memory", "nan"], r"--memory: not a memory size"),
    "--devices 0": ({J: native()}, J, ["--devices", "0"], r"--devices must be at least 1"),
    "--devices a million": ({J: native()}, J, ["--devices", "1000000"], r"1000000 devices.*at most"),
    "--memory list length": ({J: native()}, J, ["--devices", "3", "--memory", "1GB,2GB"], r"--memory lists 2 sizes for --devices 3"),
    "--time-limit negative": ({J: native()}, J, ["--time-limit", "-3"], r"--time-limit must be a positive number of seconds"),
    "--time-limit nan": ({J: native()}, J, ["--time-limit", "nan"], r"--time-limit must be a positive number of seconds"),
    "--time-limit inf": ({J: native()}, J, ["--time-limit", "inf"], r"--time-limit must be a positive number of seconds"),
    "--time-limit 1e400": ({J: native()}, J, ["--time-limit", "1e400"], r"--time-limit must be a positive number of seconds"),
    "--reserve nan": ({J: native()}, J, ["--reserve", "nan"], r"--reserve must be in \[0, 1\)"),
    "--method unknown": ({J: native()}, J, ["--method", "nonsense"], r"unknown method 'nonsense'"),
    "--workers 0": ({J: native()}, J, ["--workers", "0"], r"--workers must be at least 1"),
    "--coarse-size 1": ({J: native()}, J, ["--coarse-size", "1"], r"--coarse-size must be at least 2"),
    "--report in missing dir": ({J: native()}, J, ["--report", "{tmp}/no/such/dir/r.json"], r"--report: directory .* does not exist"),
    "--report unwritable dir": ({J: native()}, J, ["--report", "/proc/r.json"], r"--report: cannot write"),
    "--out unwritable dir": ({J: native()}, J, ["--out", "/proc/pl.txt"], r"--out: cannot write"),
    "--report is a directory": ({J: native()}, J, ["--report", "{tmp}"], r"--report: .* is a directory"),
    "--report and --out the same file": ({J: native()}, J, ["--report", "{tmp}/x", "--out", "{tmp}/x"], r"--report and --out name the same file"),
    "--report over the input": ({J: native()}, J, ["--report", "{tmp}/p.json"], r"--report would overwrite the input"),
    "--out ids with a newline": ({J: native(nodes=node(0, id="a\nb"), edges=[])}, J, ["--out", "{tmp}/pl.txt"],
                                 r"--out: node id 'a\\nb' .*cannot be written"),
    "--out ids with a leading space": ({J: native(nodes=node(0, id=" a"), edges=[])}, J, ["--out", "{tmp}/pl.txt"],
                                       r"--out: node id ' a' .*cannot be written"),
    "--memory negative": ({J: native()}, J, ["--memory=-5GB"], r"--memory: not a memory size"),
    "--format unknown": ({J: native()}, J, ["--format", "onnxx"], r"^solve: error: argument --format: invalid choice"),
    "--seed not an integer": ({J: native()}, J, ["--seed", "x"], r"^solve: error: argument --seed: invalid int value"),
    # argparse's own errors, in one line
    "unknown option": ({J: native()}, J, ["--frobnicate"], r"^solve: error: unrecognized arguments: --frobnicate$"),
    "--devices not an integer": ({J: native()}, J, ["--devices", "two"], r"^solve: error: argument --devices: invalid int value: 'two'$"),
    "--objective not a choice": ({J: native()}, J, ["--objective", "speed"], r"^solve: error: argument --objective: invalid choice"),
    "--time-limit without value": ({J: native()}, J, ["--time-limit"], r"^solve: error: argument --time-limit: expected one argument$"),
}


def materialise(tmp_path: Path, files: dict[str, Any]) -> None:
    for rel, content in sorted(files.items()):
        path = tmp_path / rel
        if content is None:
            path.mkdir(parents=True, exist_ok=True)
        elif content == "FIFO":
            os.mkfifo(path)
        elif isinstance(content, bytes):
            path.write_bytes(content)
        elif isinstance(content, str):
            path.write_text(content)
        else:
            path.write_text(json.dumps(content))


def outputs(tmp_path: Path) -> list[Path]:
    return [tmp_path / "out" / "report.json", tmp_path / "out" / "placement.txt", tmp_path / "out" / "trace.json"]


@pytest.mark.parametrize("case", sorted(CORPUS))
def test_malformed_input(case: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    files, graph, extra, message = CORPUS[case]
    materialise(tmp_path, files)
    (tmp_path / "out").mkdir()
    before = sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*"))
    report, out, trace = outputs(tmp_path)
    args = [str(tmp_path / graph), "--report", str(report), "--out", str(out), "--trace", str(trace),
            "--method", "topo-fill", "--quiet", "--time-limit", "5"]
    args += [a.replace("{tmp}", str(tmp_path)) for a in extra]
    code = main(args)
    captured = capsys.readouterr()
    err = captured.err.strip()
    assert code == 2, f"exit {code}, stderr: {err!r}"
    assert len(err.splitlines()) == 1, err
    assert err.startswith("solve: error: "), err
    assert re.search(message, err), err
    assert captured.out == ""
    assert sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*")) == before  # nothing written, no temp files left


def test_corpus_size() -> None:
    """Keep the corpus growing, not shrinking (issue 13 started from 195 fuzzed inputs)."""
    assert len(CORPUS) >= 140


@pytest.mark.parametrize("args,message", [
    (["--frobnicate"], "solve: error: unrecognized arguments: --frobnicate"),
    (["--time-limit", "nan"], "solve: error: --time-limit must be a positive number of seconds"),
    ([str(ROOT / "data" / "tiny.json"), "--devices", "1000000"], "1000000 devices"),
])
def test_subprocess_one_line(args: list[str], message: str, tmp_path: Path) -> None:
    """The real command: one line on stderr, exit 2, for argparse's errors and ours alike."""
    proc = subprocess.run([sys.executable, "-m", "solvers.cli", *args, "--report", str(tmp_path / "r.json")],
                          cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and message in lines[0], proc.stderr
    assert proc.stdout == "" and not (tmp_path / "r.json").exists()


def test_subprocess_deep_json(tmp_path: Path) -> None:
    path = tmp_path / "deep.json"
    path.write_text(deep_json(100_000))
    proc = subprocess.run([sys.executable, "-m", "solvers.cli", str(path), "--quiet"], cwd=ROOT,
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1 and "nested too deeply" in proc.stderr, proc.stderr


def test_utf8_bom_is_accepted(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A UTF-8 byte order mark (Windows editors write one) is not an error."""
    path = tmp_path / "bom.json"
    path.write_bytes(b"\xef\xbb\xbf" + json.dumps(native()).encode())
    plain = tmp_path / "plain.json"
    plain.write_text(json.dumps(native()))
    for graph in (path, plain):
        assert main([str(graph), "--method", "topo-fill", "--quiet", "--report", str(tmp_path / f"{graph.stem}.report")]) == 0
    with_bom, without = (json.loads((tmp_path / f"{stem}.report").read_text()) for stem in ("bom", "plain"))
    assert with_bom["placement"] == without["placement"] and with_bom["makespan"] == without["makespan"]
    assert with_bom["problem"]["nodes"] == 3 and with_bom["problem"]["edges"] == 2
