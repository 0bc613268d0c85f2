"""PARDNN's text inputs: a Graphviz .dot of edges plus ``node::value`` side files.

A PARDNN graph is a directory (or the path of its .dot file, the side files lying beside it):

    graph.dot       "a" -> "b" lines (digraph braces, attributes and comments are ignored)
    times.txt       node::compute time                          (required for every node)
    out_bytes.txt   node::output tensor bytes                    (default 0)
    memory.txt      node::persistent bytes (residual memory)     (optional)
    var_nodes.txt   variable nodes, one per line: their output is their persistent memory
    ref_nodes.txt   reference nodes: mutate a variable in place, colocated with it, no new memory
    no_ops.txt      no-op nodes: zero time and zero bytes
    link.txt        latency::seconds and bandwidth::bytes per time unit (default 0 and unlimited)
    devices.txt     count::K and memory::16GB                    (optional; CLI flags override)

Comm of edge (a, b) = latency + out_bytes(a) / bandwidth (PARDNN's model); a variable's tensor
size is its memory. A reference node joins the colocation group of the first variable among its
predecessors (of itself if it has none).
"""
from __future__ import annotations

import math
import re
from pathlib import Path

import numpy as np

from ..problem import Link, Problem, ProblemError, check_device_count, make_problem
from ..units import parse_bytes
from .files import read_text

_EDGE = re.compile(r'^\s*"?([^"]+?)"?\s*->\s*"?([^"\[;]+?)"?\s*(\[.*\])?\s*;?\s*$')


def looks_like_dot(text: str) -> bool:
    return "->" in text and ("digraph" in text or re.search(r'"[^"]+"\s*->\s*"', text) is not None)


def resolve(path: str | Path) -> tuple[Path, Path]:
    """(the .dot file, the directory of side files) for a directory or a .dot path."""
    path = Path(path)
    if path.is_dir():
        dots = sorted(path.glob("*.dot"))
        if len(dots) != 1:
            raise ProblemError(f"{path}: a PARDNN graph directory needs exactly one .dot file, found {len(dots)}")
        return dots[0], path
    return path, path.parent


def read_dot_edges(path: Path) -> tuple[list[str], list[tuple[str, str]]]:
    """Node names in order of first appearance, and the edges."""
    names: dict[str, None] = {}
    edges: list[tuple[str, str]] = []
    for lineno, raw in enumerate(read_text(path).splitlines(), 1):
        line = raw.split("//")[0].strip()
        if not line or line.startswith(("digraph", "graph", "}", "{", "#")) or line in ("{", "}"):
            continue
        match = _EDGE.match(line)
        if match:
            a, b = match.group(1).strip(), match.group(2).strip()
            names.setdefault(a)
            names.setdefault(b)
            edges.append((a, b))
            continue
        lone = re.match(r'^\s*"([^"]+)"\s*(\[.*\])?\s*;?\s*$', line)
        if lone:
            names.setdefault(lone.group(1))
            continue
        raise ProblemError(f"{path}:{lineno}: cannot read line {raw.strip()!r} (expected \"a\" -> \"b\")")
    return list(names), edges


def read_values(path: Path) -> dict[str, str]:
    """``name::value`` lines; the name may itself contain ':' (split at the last '::')."""
    out: dict[str, str] = {}
    for lineno, raw in enumerate(read_text(path).splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if "::" not in line:
            raise ProblemError(f"{path}:{lineno}: expected name::value, got {line!r}")
        name, value = line.rsplit("::", 1)
        out[name.strip()] = value.strip()
    return out


def read_list(path: Path) -> list[str]:
    return [ln.strip() for ln in read_text(path).splitlines() if ln.strip() and not ln.startswith("#")]


def _number(value: str, where: str, *, allow_inf: bool = False) -> float:
    try:
        x = float(value)
    except ValueError:
        raise ProblemError(f"{where}: {value!r} is not a number") from None
    if math.isnan(x) or x < 0 or (math.isinf(x) and not allow_inf):
        raise ProblemError(f"{where}: {value!r} must be a finite non-negative number")
    return x


def _count(value: str, where: str) -> int:
    """A device count: a positive integer written as one ("2", not "2.5" or "inf"; "1e6" is 10^6)."""
    try:
        x = float(value)
    except ValueError:
        x = math.nan
    if not (math.isfinite(x) and x >= 1 and x.is_integer()):
        raise ProblemError(f"{where}: {value!r} is not a positive integer")
    return int(x)


def read_pardnn(path: str | Path) -> Problem:
    dot, folder = resolve(path)
    if not dot.exists():
        raise ProblemError(f"{dot}: no such file")
    names, edges = read_dot_edges(dot)
    known = dict.fromkeys(names)

    def side(fname: str) -> Path | None:
        p = folder / fname
        return p if p.exists() else None

    def values(fname: str) -> dict[str, str]:
        p = side(fname)
        if p is None:
            return {}
        vals = read_values(p)
        for name in vals:
            if name not in known:
                raise ProblemError(f"{p}: node {name!r} is not in {dot.name}")
        return vals

    times = values("times.txt")
    if side("times.txt") is None:
        raise ProblemError(f"{folder}: missing times.txt (node::time lines)")
    out_b = values("out_bytes.txt")
    mem = values("memory.txt")
    lists = {}
    for fname in ("var_nodes.txt", "ref_nodes.txt", "no_ops.txt"):
        p = side(fname)
        lists[fname] = set(read_list(p)) if p else set()
        unknown = lists[fname] - set(known)
        if unknown:
            raise ProblemError(f"{p}: node {sorted(unknown)[0]!r} is not in {dot.name}")
    link_vals = read_values(side("link.txt")) if side("link.txt") else {}
    latency = _number(link_vals.get("latency", "0"), "link.txt latency")
    bandwidth = _number(link_vals.get("bandwidth", "inf"), "link.txt bandwidth", allow_inf=True)
    if bandwidth <= 0:
        raise ProblemError("link.txt bandwidth: must be positive")
    link = Link(latency, bandwidth)

    variables, refs, noops = lists["var_nodes.txt"], lists["ref_nodes.txt"], lists["no_ops.txt"]
    preds: dict[str, list[str]] = {n: [] for n in names}
    for a, b in edges:
        preds[b].append(a)
    nodes = []
    tensor: dict[str, float] = {}
    for name in names:
        if name not in times and name not in noops:
            raise ProblemError(f"node {name!r}: missing from times.txt")
        t = 0.0 if name in noops else _number(times[name], f"times.txt node {name!r}")
        ob = 0.0 if name in noops else _number(out_b.get(name, "0"), f"out_bytes.txt node {name!r}")
        pb = _number(mem[name], f"memory.txt node {name!r}") if name in mem else 0.0
        tensor[name] = ob if ob > 0 or name not in variables else pb
        if name in variables:
            if name not in mem:
                pb = ob
            ob = 0.0
        elif name in refs:
            ob = 0.0
        rec = {"id": name, "time": t, "out_bytes": ob, "param_bytes": pb}
        if name in variables:
            rec["colocate"] = name
        elif name in refs:
            owner = next((p for p in preds[name] if p in variables), name)
            rec["colocate"] = owner
        nodes.append(rec)
    edge_recs = [{"src": a, "dst": b, "bytes": tensor[a]} for a, b in edges]
    dev_vals = read_values(side("devices.txt")) if side("devices.txt") else {}
    count = _count(dev_vals.get("count", "1"), "devices.txt count")
    check_device_count(count, "devices.txt count")
    try:
        memory = parse_bytes(dev_vals.get("memory", "inf"))
    except ValueError as exc:
        raise ProblemError(f"devices.txt memory: {exc}") from None
    name = Path(path).name if Path(path).is_dir() else dot.stem
    return make_problem(nodes, edge_recs, devices=max(count, 1), memory=memory, link=link,
                        name=name, attrs={"format": "pardnn"})


def write_pardnn(problem: Problem, folder: str | Path) -> None:
    """Write a problem as a PARDNN directory.

    Per-edge comm is not representable there: edges are priced from the source's tensor bytes and
    the link. Exact for problems read from PARDNN files (variables and reference nodes are recovered
    from their colocation groups) or whose comm came from a link and output bytes."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    names = [str(x) for x in problem.ids]
    group = [problem.colocate_names[g] if g >= 0 else None for g in problem.colocate.tolist()]
    variables = [nm for nm, g in zip(names, group) if g == nm]
    refs = [nm for nm, g in zip(names, group) if g is not None and g != nm and g in set(variables)]
    tensor = problem.out_bytes.copy()
    if problem.edge_bytes is not None:
        known = ~np.isnan(problem.edge_bytes)
        tensor[problem.src[known]] = problem.edge_bytes[known]
    lines = ["digraph G {"] + [f'"{names[u]}" -> "{names[v]}"' for u, v in zip(problem.src.tolist(), problem.dst.tolist())]
    lines += [f'"{nm}"' for nm in names] + ["}"]
    (folder / "graph.dot").write_text("\n".join(lines) + "\n")
    (folder / "times.txt").write_text("".join(f"{nm}::{t!r}\n" for nm, t in zip(names, problem.time.tolist())))
    (folder / "out_bytes.txt").write_text("".join(f"{nm}::{b!r}\n" for nm, b in zip(names, tensor.tolist())))
    (folder / "memory.txt").write_text("".join(f"{nm}::{b!r}\n" for nm, b in zip(names, problem.param_bytes.tolist()) if b))
    (folder / "var_nodes.txt").write_text("".join(f"{nm}\n" for nm in variables))
    (folder / "ref_nodes.txt").write_text("".join(f"{nm}\n" for nm in refs))
    link = problem.link or Link()
    (folder / "link.txt").write_text(f"latency::{link.latency!r}\nbandwidth::{link.bandwidth!r}\n")
    mem = problem.memory.max()
    (folder / "devices.txt").write_text(f"count::{problem.k}\nmemory::{'inf' if math.isinf(mem) else repr(float(mem))}\n")
