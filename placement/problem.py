"""The placement problem: a DAG of operators, K memory-limited devices, and the links between them.

This is the contract every part of the project uses (docs/model.md states it in prose). Nodes are
addressed internally by their index 0..n-1; the user's ids (strings or integers) are kept in
``Problem.ids`` and used only at the edges of the program (formats, reports).

Arrays are numpy so that evaluators and bounds stay fast on graphs of 10^5 to 10^6 nodes.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from functools import cached_property
from typing import Any, Callable, Hashable, Iterable, Sequence

import numpy as np

NodeId = Hashable  # str or int in practice


class ProblemError(ValueError):
    """Bad input: the message names the node, field, edge or cycle at fault."""


@dataclass(frozen=True)
class Link:
    """PARDNN's link model: moving ``b`` bytes costs ``latency + b / bandwidth`` time units."""

    latency: float = 0.0
    bandwidth: float = math.inf

    def comm(self, nbytes: np.ndarray | float) -> np.ndarray | float:
        return self.latency + np.asarray(nbytes, dtype=float) / self.bandwidth


@dataclass(eq=False)
class Problem:
    """A placement instance. Build it with :func:`make_problem`, which validates everything.

    Attributes (n nodes, m edges, K devices):
        ids: the user's node ids, ``ids[i]`` for node index i.
        names: display names (defaults to ``str(id)``).
        time, out_bytes, param_bytes: float arrays of length n.
        colocate: int array of length n, the colocation group index of each node or -1.
        allowed: per node, a sorted tuple of allowed device indices, or None for "any device".
        src, dst: int arrays of length m; comm: float array, the transfer time of each edge.
        memory: float array of length K, each device's capacity in bytes.
        device_names: K strings.
        link: the link model edges given in bytes were priced with (None if none was given).
        node_attrs: extra per-node arrays kept for other objectives (e.g. ``cpu_latency``,
            ``supported``, ``is_backward`` from msr-fiddle), keyed by name, each of length n.
        attrs: extra problem-level values (e.g. ``max_cpus``).
        node_meta: optional operator semantics per node (importers fill it; None when unknown):
            ``{"op": "aten.mm", "inputs": [{"shape": [m, k], "dtype": "float32"}, ...],
            "outputs": [{"shape": [m, n], "dtype": "float32"}, ...]}``; any key may be missing.
        edge_meta: optional per-edge tensor identity, parallel to ``src``/``dst``:
            ``{"src_output": i, "dst_inputs": [j, ...]}``: the producer's output index and the
            consumer's input positions that tensor feeds. When parallel edges are merged (same
            src and dst), ``dst_inputs`` is the sorted union over the merged edges of the same
            ``src_output``; if they carried different outputs, the record keeps the first one's
            ``src_output`` and adds ``"tensors"``: every ``{"src_output", "dst_inputs"}`` pair.
    """

    name: str
    ids: list[NodeId]
    names: list[str]
    time: np.ndarray
    out_bytes: np.ndarray
    param_bytes: np.ndarray
    colocate: np.ndarray
    allowed: list[tuple[int, ...] | None]
    src: np.ndarray
    dst: np.ndarray
    comm: np.ndarray
    memory: np.ndarray
    device_names: list[str]
    link: Link | None = None
    edge_bytes: np.ndarray | None = None
    node_attrs: dict[str, np.ndarray] = field(default_factory=dict)
    attrs: dict[str, Any] = field(default_factory=dict)
    colocate_names: list[str] = field(default_factory=list)
    node_meta: list[dict[str, Any]] | None = None
    edge_meta: list[dict[str, Any]] | None = None

    # ----- sizes -------------------------------------------------------------------------------
    @property
    def n(self) -> int:
        return len(self.ids)

    @property
    def m(self) -> int:
        return int(self.src.shape[0])

    @property
    def k(self) -> int:
        return int(self.memory.shape[0])

    # ----- derived structure (computed once, cached) ---------------------------------------------
    @cached_property
    def index(self) -> dict[NodeId, int]:
        """Node id -> index. String forms of ids are accepted too (reports key nodes by str)."""
        idx: dict[NodeId, int] = {}
        for i, nid in enumerate(self.ids):
            idx[nid] = i
        for i, nid in enumerate(self.ids):
            idx.setdefault(str(nid), i)
        return idx

    @cached_property
    def succ_ptr(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """CSR of successors: (ptr, node, edge) so node u's out-edges are edge[ptr[u]:ptr[u+1]]."""
        return _csr(self.src, self.dst, self.n)

    @cached_property
    def pred_ptr(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """CSR of predecessors: (ptr, node, edge)."""
        return _csr(self.dst, self.src, self.n)

    @cached_property
    def topo_order(self) -> np.ndarray:
        """A topological order of the node indices (Kahn's algorithm, smallest index first)."""
        order = _toposort(self.n, self.src, self.dst, self.succ_ptr)
        if order is None:
            raise ProblemError(f"graph has a cycle: {' -> '.join(map(str, self.find_cycle()))}")
        return order

    @cached_property
    def topo_rank(self) -> np.ndarray:
        rank = np.empty(self.n, dtype=np.int64)
        rank[self.topo_order] = np.arange(self.n)
        return rank

    @cached_property
    def has_allowed(self) -> bool:
        """Does any node restrict its devices?"""
        return any(devs is not None for devs in self.allowed)

    @cached_property
    def groups(self) -> list[np.ndarray]:
        """Members (node indices) of each colocation group, by group index."""
        count = len(self.colocate_names)
        if count == 0:
            return []
        order = np.argsort(self.colocate, kind="stable")
        sorted_groups = self.colocate[order]
        starts = np.searchsorted(sorted_groups, np.arange(count + 1))
        return [order[starts[g]:starts[g + 1]] for g in range(count)]

    def allowed_mask(self) -> np.ndarray:
        """Boolean (n, K) matrix: may node i run on device d? (allowed devices and colocation)."""
        mask = np.ones((self.n, self.k), dtype=bool)
        for i, devs in enumerate(self.allowed):
            if devs is not None:
                mask[i] = False
                mask[i, list(devs)] = True
        for members in self.groups:
            joint = mask[members].all(axis=0)
            mask[members] = joint
        return mask

    def find_cycle(self) -> list[NodeId]:
        """Ids along one directed cycle (first id repeated at the end), or [] if acyclic."""
        import networkx as nx

        g = nx.DiGraph()
        g.add_edges_from(zip(self.src.tolist(), self.dst.tolist()))
        try:
            cyc = nx.find_cycle(g)
        except nx.NetworkXNoCycle:
            return []
        path = [self.ids[u] for u, _ in cyc]
        return path + [path[0]]

    def comm_between(self, u: int, v: int) -> float:
        """The largest transfer over the edges u -> v (parallel edges merged), 0 when there is none."""
        ptr, nbr, eid = self.pred_ptr
        lo, hi = int(ptr[v]), int(ptr[v + 1])
        hit = eid[lo:hi][nbr[lo:hi] == u]
        return float(self.comm[hit].max()) if hit.size else 0.0

    def with_devices(self, count: int | None = None, memory: Sequence[float] | float | None = None) -> "Problem":
        """A copy with the device count and/or memory overridden (CLI --devices / --memory)."""
        k = self.k if count is None else int(count)
        if k < 1:
            raise ProblemError(f"device count must be at least 1, got {k}")
        check_device_count(k, nodes=self.n)
        if memory is None:
            mem = self.memory if k == self.k else np.full(k, float(self.memory.max()) if self.k else math.inf)
        else:
            mem = _memory_array(memory, k)
        names = self.device_names if k == self.k else [f"dev{d}" for d in range(k)]
        for i, devs in enumerate(self.allowed):
            if devs is not None and max(devs) >= k:
                raise ProblemError(f"node {self.ids[i]!r}: allowed device {max(devs)} does not exist with {k} devices")
        return replace(self, memory=mem, device_names=list(names))

    def describe(self) -> str:
        return f"{self.name}: {self.n} nodes, {self.m} edges, {self.k} devices"


def _csr(a: np.ndarray, b: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    order = np.argsort(a, kind="stable")
    counts = np.bincount(a, minlength=n)
    ptr = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(counts, out=ptr[1:])
    return ptr, b[order].astype(np.int64), order.astype(np.int64)


def _toposort(n: int, src: np.ndarray, dst: np.ndarray, succ: tuple[np.ndarray, np.ndarray, np.ndarray]) -> np.ndarray | None:
    import heapq

    ptr, nbr, _ = succ
    indeg = np.bincount(dst, minlength=n).tolist()
    ptr_l = ptr.tolist()
    nbr_l = nbr.tolist()
    heap = [i for i in range(n) if indeg[i] == 0]
    heapq.heapify(heap)
    out: list[int] = []
    while heap:
        u = heapq.heappop(heap)
        out.append(u)
        for j in range(ptr_l[u], ptr_l[u + 1]):
            v = nbr_l[j]
            indeg[v] -= 1
            if indeg[v] == 0:
                heapq.heappush(heap, v)
    if len(out) != n:
        return None
    return np.asarray(out, dtype=np.int64)


def _memory_array(memory: Sequence[float] | float, k: int) -> np.ndarray:
    if np.isscalar(memory):
        return np.full(k, float(memory))  # type: ignore[arg-type]
    mem = np.asarray(list(memory), dtype=float)  # type: ignore[arg-type]
    if mem.shape[0] != k:
        raise ProblemError(f"{mem.shape[0]} memory capacities given for {k} devices")
    return mem


# Limits on what a problem may hold. Beyond them the arithmetic the methods rely on breaks down:
# totals of times overflow or lose all precision (bounds, CP-SAT's scaled data), byte counts leave
# the 64-bit integers the exact models count in, and models grow with nodes x devices.
MAX_DEVICES = 100_000
MAX_NODE_DEVICE_PAIRS = 500_000_000  # nodes x devices: the (n, K) masks and models grow with it
MAX_TOTAL_TIME = 1e100  # sum of all node times plus all edge comms
MAX_TOTAL_BYTES = 2.0**62  # sum of all param_bytes and out_bytes (4.6e18 bytes)


def check_device_count(k: int, what: str = "devices", nodes: int = 0) -> None:
    """Refuse device counts no model or heuristic here can hold (10^6 devices once ran out of 23 GB)."""
    if k > MAX_DEVICES:
        raise ProblemError(f"{what}: {k} devices is more than this tool supports (at most {MAX_DEVICES})")
    if nodes * k > MAX_NODE_DEVICE_PAIRS:
        raise ProblemError(f"{what}: {nodes} nodes x {k} devices is more than this tool supports "
                           f"(at most {MAX_NODE_DEVICE_PAIRS:.0e} node-device pairs)")


def _key(value: Any, what: str) -> str | int:
    """An id or group key: a string or an integer (JSON objects, lists, floats and booleans are not)."""
    if isinstance(value, bool) or not isinstance(value, (str, int, np.integer)):
        raise ProblemError(f"{what}: must be a string or an integer, got {value!r}")
    return int(value) if isinstance(value, np.integer) else value


def _check_number(value: Any, what: str, *, allow_inf: bool = False) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise ProblemError(f"{what}: expected a number, got {value!r}")
    try:
        x = float(value)
    except OverflowError:  # a JSON integer of hundreds of digits
        x = math.inf
    if math.isnan(x):
        raise ProblemError(f"{what}: is NaN")
    if math.isinf(x) and not allow_inf:
        raise ProblemError(f"{what}: is infinite")
    if x < 0:
        raise ProblemError(f"{what}: is negative ({x})")
    return x


_MISSING = object()
_KEY_TYPES = (str, int)


def _number_column(values: list[Any], where: Callable[[int], str], *, allow_inf: bool = False) -> np.ndarray:
    """A float array of non-negative finite numbers (JSON numbers, not booleans or strings),
    checked in bulk when all are Python numbers, else one by one (numpy scalars); the first bad
    value is named through :func:`_check_number`."""
    if set(map(type, values)) <= {int, float}:
        try:
            arr = np.fromiter(values, dtype=float, count=len(values))
        except OverflowError:  # an integer of hundreds of digits
            arr = None
        if arr is not None:
            bad = ~(arr >= 0) | (np.isinf(arr) if not allow_inf else False)
            if not np.any(bad):
                return arr
    return np.fromiter((_check_number(value, where(i), allow_inf=allow_inf) for i, value in enumerate(values)),
                       dtype=float, count=len(values))


def _plain_nodes(nodes: list[Any]) -> tuple[list[NodeId], list[str], list[int], list[str]] | None:
    """(ids, names, colocation group per node, group names) when every node record is plain (an
    object with a unique str/int id, a str name or none, the three numbers present, a str/int
    colocation key or none, no allowed-device list), checked with whole-list operations (2-5x
    faster than a loop on 200K nodes); None otherwise, and the careful loop names the fault."""
    try:
        if set(map(type, nodes)) != {dict}:
            return None
        ids = [rec["id"] for rec in nodes]
        if not set(map(type, ids)) <= {str, int} or len(set(ids)) != len(ids) or len(set(map(str, ids))) != len(ids):
            return None
        for fld in ("time", "out_bytes", "param_bytes"):
            if not all(fld in rec for rec in nodes):
                return None
        if any("devices" in rec for rec in nodes):
            return None
        names = [rec.get("name") for rec in nodes]
        if not set(map(type, names)) <= {str, type(None)}:
            return None
        names = [str(nid) if nm is None else nm for nid, nm in zip(ids, names)]
        keys = [rec.get("colocate") for rec in nodes]
    except (KeyError, TypeError):
        return None
    group_of = [-1] * len(ids)
    group_index: dict[Any, int] = {}
    group_names: list[str] = []
    if any(key is not None for key in keys):
        if not set(map(type, keys)) <= {str, int, type(None)}:
            return None
        seen: set[str] = set()
        for i, key in enumerate(keys):
            if key is None:
                continue
            g = group_index.get(key)
            if g is None:
                if str(key) in seen:
                    return None  # 1 and "1" would name two groups alike: the careful loop says so
                g = group_index[key] = len(group_names)
                group_names.append(str(key))
                seen.add(str(key))
            group_of[i] = g
    return ids, names, group_of, group_names


def _plain_edges(edges: list[Any], index: dict[NodeId, int]) -> tuple[list[int], list[int], list[Any], list[Any]] | None:
    """(src, dst, raw comm, raw bytes) when every edge is plain (an object whose str/int ends are
    known nodes, not a self-loop, with 'comm' or 'bytes'); None otherwise (see _plain_nodes)."""
    try:
        if edges and set(map(type, edges)) != {dict}:
            return None
        a, b = [rec["src"] for rec in edges], [rec["dst"] for rec in edges]
        if not set(map(type, a)) | set(map(type, b)) <= {str, int}:
            return None
        src, dst = [index[x] for x in a], [index[x] for x in b]
    except (KeyError, TypeError):
        return None
    if any(u == v for u, v in zip(src, dst)):
        return None
    comm_raw = [rec.get("comm", _MISSING) for rec in edges]
    bytes_raw = [rec.get("bytes", _MISSING) for rec in edges]
    if any(c is _MISSING and nb is _MISSING for c, nb in zip(comm_raw, bytes_raw)):
        return None
    return src, dst, comm_raw, bytes_raw


def _edge_endpoint_fault(pos: int, rec: dict[str, Any], index: dict[NodeId, int]) -> None:
    """Raise the ProblemError naming what is wrong with edge ``pos``'s src or dst."""
    for fld in ("src", "dst"):
        if fld not in rec:
            raise ProblemError(f"edges[{pos}]: missing field {fld!r}")
        _key(rec[fld], f"edges[{pos}] field {fld!r}")
        if rec[fld] not in index:
            raise ProblemError(f"edges[{pos}] ({rec.get('src')!r} -> {rec.get('dst')!r}): unknown node {rec[fld]!r} in field {fld!r}")
    raise AssertionError("unreachable: no fault found in the edge's endpoints")


def _edge_costs(src: list[int], dst: list[int], comm_raw: list[Any], bytes_raw: list[Any], ids: list[NodeId],
                link: Link | None) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(src, dst, comm, bytes) arrays: comm as given, or priced from bytes with ``link``; bytes NaN
    where not given (absent values are ``_MISSING``); parallel edges merged into one (they carry one tensor: the costlier transfer
    is kept, with the first one's bytes), in order of first appearance; and for every given edge
    the index of the edge it became."""
    m = len(src)
    s_arr, d_arr = np.asarray(src, dtype=np.int64), np.asarray(dst, dtype=np.int64)
    label = lambda j: f"edge {ids[src[j]]!r} -> {ids[dst[j]]!r}"  # noqa: E731
    has_c = np.fromiter((c is not _MISSING for c in comm_raw), dtype=bool, count=m)
    has_b = np.fromiter((b is not _MISSING for b in bytes_raw), dtype=bool, count=m)
    comm = np.full(m, np.nan)
    ebytes = np.full(m, np.nan)
    ci, bi = np.flatnonzero(has_c), np.flatnonzero(has_b)
    comm[ci] = _number_column([comm_raw[j] for j in ci.tolist()], lambda i: f"{label(int(ci[i]))} field 'comm'")
    ebytes[bi] = _number_column([bytes_raw[j] for j in bi.tolist()], lambda i: f"{label(int(bi[i]))} field 'bytes'")
    priced = np.flatnonzero(~has_c)
    if priced.size:
        if link is None:
            raise ProblemError(f"{label(int(priced[0]))}: gives 'bytes' but the problem has no 'link' (latency, bandwidth) to price it")
        with np.errstate(over="ignore"):
            comm[priced] = link.comm(ebytes[priced])
        bad = priced[~np.isfinite(comm[priced])]
        if bad.size:
            j = int(bad[0])
            raise ProblemError(f"{label(j)}: comm = latency + bytes / bandwidth = {ebytes[j]!r} / {link.bandwidth!r} is too large (not finite)")
    same = np.arange(m)
    if m == 0:
        return s_arr, d_arr, comm, ebytes, same
    n = len(ids)
    keys = s_arr * n + d_arr
    uniq, first, inverse = np.unique(keys, return_index=True, return_inverse=True)
    if uniq.size == m:
        return s_arr, d_arr, comm, ebytes, same
    best = np.full(uniq.size, -np.inf)
    np.maximum.at(best, inverse, comm)
    order = np.argsort(first, kind="stable")
    keep = first[order]
    rank = np.empty(uniq.size, dtype=np.int64)
    rank[order] = np.arange(uniq.size)
    return s_arr[keep], d_arr[keep], best[order], ebytes[keep], rank[inverse.ravel()]


def _check_totals(ids: list[NodeId], cols: dict[str, np.ndarray], src: np.ndarray, dst: np.ndarray, comm: np.ndarray) -> None:
    """Refuse data whose totals overflow: a time of 1e308 once gave an infinite makespan, NaN start
    times and ``Infinity`` in the JSON report. The message names the largest contributor."""
    time, cm = cols["time"], comm
    with np.errstate(over="ignore"):
        total = float(time.sum()) + float(cm.sum())
    if not total <= MAX_TOTAL_TIME:
        i, j = int(time.argmax()), int(cm.argmax()) if cm.size else -1
        if j >= 0 and cm[j] > time[i]:
            where = f"edge {ids[int(src[j])]!r} -> {ids[int(dst[j])]!r} field 'comm'"
        else:
            where = f"node {ids[i]!r} field 'time'"
        raise ProblemError(f"{where}: too large: node times and edge comms add up to {total:.3g}, more than {MAX_TOTAL_TIME:.0e}")
    mem = cols["param_bytes"] + cols["out_bytes"]
    with np.errstate(over="ignore"):
        total = float(mem.sum())
    if not total <= MAX_TOTAL_BYTES:
        i = int(mem.argmax())
        fld = "param_bytes" if cols["param_bytes"][i] >= cols["out_bytes"][i] else "out_bytes"
        raise ProblemError(f"node {ids[i]!r} field {fld!r}: too large: the nodes' bytes add up to {total:.3g}, more than {MAX_TOTAL_BYTES:.3g}")


def make_problem(
    nodes: Iterable[dict[str, Any]],
    edges: Iterable[dict[str, Any]],
    *,
    devices: int | Sequence[dict[str, Any]] = 1,
    memory: float | Sequence[float] = math.inf,
    link: Link | None = None,
    name: str = "problem",
    node_attrs: dict[str, Sequence[Any]] | None = None,
    attrs: dict[str, Any] | None = None,
) -> Problem:
    """Validate plain records and build a :class:`Problem`.

    ``nodes``: dicts with ``id``, ``time``, ``out_bytes``, ``param_bytes`` and optionally ``colocate``
    (any hashable group key), ``devices`` (allowed device indices) and ``name``.
    ``edges``: dicts with ``src``, ``dst`` and either ``comm`` (time) or ``bytes`` (priced with
    ``link``). ``devices`` is a count (then ``memory`` is one capacity or a list), or a list of
    ``{"name", "memory"}`` dicts. Raises :class:`ProblemError` naming the first fault found.

    Operator semantics (optional, see :class:`Problem`): node fields ``op``, ``inputs``, ``outputs``
    become ``node_meta`` and edge fields ``src_output``, ``dst_inputs`` become ``edge_meta`` (None
    when no record has any of them).
    """
    nodes = list(nodes)
    ids: list[NodeId] = []
    names: list[str] = []
    index: dict[NodeId, int] = {}
    spelled: dict[str, int] = {}
    group_of: list[int] = []
    group_index: dict[Any, int] = {}
    group_names: list[str] = []
    group_spelled: set[str] = set()
    allowed: list[tuple[int, ...] | None] = []
    node_meta: list[dict[str, Any]] = []

    if isinstance(devices, int) and not isinstance(devices, bool):
        k = devices
        if k < 1:
            raise ProblemError(f"devices: count must be at least 1, got {k}")
        check_device_count(k)
        mem = _memory_array(memory, k)
        device_names = [f"dev{d}" for d in range(k)]
    else:
        devs = list(devices)
        if not devs:
            raise ProblemError("devices: the list is empty")
        k = len(devs)
        check_device_count(k)
        device_names = [str(d.get("name", f"dev{i}")) for i, d in enumerate(devs)]
        mem = np.array([_check_number(d.get("memory", math.inf), f"devices[{i}].memory", allow_inf=True) for i, d in enumerate(devs)])
    for d in range(k):
        _check_number(mem[d], f"device {device_names[d]!r} memory", allow_inf=True)

    numeric = ("time", "out_bytes", "param_bytes")
    fast = _plain_nodes(nodes)
    if fast is not None:
        ids, names, group_of, group_names = fast
        allowed = [None] * len(ids)
        index = {nid: i for i, nid in enumerate(ids)}
    for pos, rec in enumerate(nodes if fast is None else ()):  # names the first fault
        if type(rec) is not dict:
            raise ProblemError(f"nodes[{pos}]: expected an object, got {type(rec).__name__}")
        nid = rec.get("id", _MISSING)
        if type(nid) not in _KEY_TYPES:
            if nid is _MISSING:
                raise ProblemError(f"nodes[{pos}]: missing field 'id'")
            raise ProblemError(f"nodes[{pos}]: id must be a string or an integer, got {nid!r}")
        if nid in index:
            raise ProblemError(f"node {nid!r}: duplicate id (nodes[{index[nid]}] and nodes[{pos}])")
        text = nid if type(nid) is str else str(nid)
        if text in spelled:  # reports and placement files key nodes by str(id)
            other = spelled[text]
            raise ProblemError(f"node {text!r}: nodes[{other}] and nodes[{pos}] have the same id as text ({ids[other]!r} and {nid!r})")
        index[nid] = pos
        spelled[text] = pos
        ids.append(nid)
        label = rec.get("name", text)
        if type(label) is not str:
            raise ProblemError(f"node {nid!r} field 'name': expected a string, got {label!r}")
        names.append(label)
        for fld in numeric:
            if fld not in rec:
                raise ProblemError(f"node {nid!r}: missing field {fld!r}")
        grp = rec.get("colocate")
        if grp is None:
            group_of.append(-1)
        else:
            grp = _key(grp, f"node {nid!r} field 'colocate'")
            if grp not in group_index:
                if str(grp) in group_spelled:
                    raise ProblemError(f"node {nid!r}: colocation key {str(grp)!r} is used both as an integer and as a string")
                group_index[grp] = len(group_names)
                group_names.append(str(grp))
                group_spelled.add(str(grp))
            group_of.append(group_index[grp])
        devs_allowed = rec.get("devices")
        if devs_allowed is None:
            allowed.append(None)
        else:
            if not isinstance(devs_allowed, (list, tuple)) or not devs_allowed:
                raise ProblemError(f"node {nid!r} field 'devices': expected a non-empty list of device indices")
            for d in devs_allowed:
                if isinstance(d, bool) or not isinstance(d, (int, np.integer)) or not 0 <= d < k:
                    raise ProblemError(f"node {nid!r} field 'devices': {d!r} is not a device index in 0..{k - 1}")
            allowed.append(tuple(sorted(set(int(d) for d in devs_allowed))))
    columns = {fld: _number_column([rec[fld] for rec in nodes], lambda i, f=fld: f"node {ids[i]!r} field {f!r}")
               for fld in numeric}
    if any("op" in rec or "inputs" in rec or "outputs" in rec for rec in nodes):
        node_meta = [_node_meta(rec, nid) for rec, nid in zip(nodes, ids)]

    edges = edges if isinstance(edges, list) else list(edges)
    plain = _plain_edges(edges, index)
    src, dst, comm_raw, bytes_raw = plain if plain is not None else ([], [], [], [])
    for pos, rec in enumerate(edges if plain is None else ()):  # names the first fault
        if type(rec) is not dict:
            raise ProblemError(f"edges[{pos}]: expected an object, got {type(rec).__name__}")
        a, b = rec.get("src", _MISSING), rec.get("dst", _MISSING)
        if type(a) not in _KEY_TYPES or type(b) not in _KEY_TYPES or a not in index or b not in index:
            _edge_endpoint_fault(pos, rec, index)
        u, v = index[a], index[b]
        if u == v:
            raise ProblemError(f"graph has a cycle: edge {a!r} -> {b!r} is a self-loop")
        c, nb = rec.get("comm", _MISSING), rec.get("bytes", _MISSING)
        if c is _MISSING and nb is _MISSING:
            raise ProblemError(f"edge {a!r} -> {b!r}: needs 'comm' or 'bytes'")
        src.append(u)
        dst.append(v)
        comm_raw.append(c)
        bytes_raw.append(nb)
    src_a, dst_a, comm, ebytes, kept = _edge_costs(src, dst, comm_raw, bytes_raw, ids, link)
    edge_meta: list[dict[str, Any]] = []
    if any("src_output" in rec or "dst_inputs" in rec or "tensors" in rec for rec in edges):
        edge_meta = [{} for _ in range(src_a.size)]
        for j, rec in enumerate(edges):  # parallel edges merge their tensor identities
            meta = _edge_meta(rec, f"edge {ids[src[j]]!r} -> {ids[dst[j]]!r}")
            edge_meta[kept[j]] = _merge_edge_meta(edge_meta[kept[j]], meta)
    cols = columns

    n = len(ids)
    check_device_count(k, nodes=n)
    _check_totals(ids, cols, src_a, dst_a, comm)
    extra = {key: np.asarray(list(vals)) for key, vals in (node_attrs or {}).items()}
    for key, arr in extra.items():
        if arr.shape[0] != n:
            raise ProblemError(f"node attribute {key!r} has {arr.shape[0]} values for {n} nodes")
    prob = Problem(
        name=name,
        ids=ids,
        names=names,
        time=cols["time"],
        out_bytes=cols["out_bytes"],
        param_bytes=cols["param_bytes"],
        colocate=np.asarray(group_of, dtype=np.int64),
        allowed=allowed,
        src=src_a,
        dst=dst_a,
        comm=comm,
        memory=mem.astype(float),
        device_names=device_names,
        link=link,
        edge_bytes=ebytes if ebytes.size and not np.all(np.isnan(ebytes)) else None,
        node_attrs=extra,
        attrs=dict(attrs or {}),
        colocate_names=group_names,
        node_meta=node_meta if any(node_meta) else None,
        edge_meta=edge_meta if any(edge_meta) else None,
    )
    prob.topo_order  # raises ProblemError naming a cycle
    joint = prob.allowed_mask() if prob.groups else None  # once: it costs O(n K) per call
    for g, members in enumerate(prob.groups):
        mask = joint[members[0]]
        if not mask.any():
            raise ProblemError(f"colocation group {group_names[g]!r}: its nodes' allowed devices have no device in common")
    return prob


def _tensor_list(value: Any, what: str) -> list[dict[str, Any]]:
    """Validate a list of ``{"shape": [ints >= 0], "dtype": str}`` tensor descriptions."""
    if not isinstance(value, list):
        raise ProblemError(f"{what}: expected a list of {{'shape', 'dtype'}} objects")
    out = []
    for pos, t in enumerate(value):
        if not isinstance(t, dict):
            raise ProblemError(f"{what}[{pos}]: expected an object with 'shape' and 'dtype'")
        unknown = set(t) - {"shape", "dtype"}
        if unknown:
            raise ProblemError(f"{what}[{pos}]: unknown field {sorted(unknown)[0]!r}")
        desc: dict[str, Any] = {}
        if "shape" in t:
            shape = t["shape"]
            if not isinstance(shape, list) or any(isinstance(x, bool) or not isinstance(x, (int, np.integer)) or x < 0 for x in shape):
                raise ProblemError(f"{what}[{pos}] field 'shape': expected a list of non-negative integers, got {shape!r}")
            desc["shape"] = [int(x) for x in shape]
        if "dtype" in t:
            if not isinstance(t["dtype"], str) or not t["dtype"]:
                raise ProblemError(f"{what}[{pos}] field 'dtype': expected a type name such as 'float32', got {t['dtype']!r}")
            desc["dtype"] = t["dtype"]
        out.append(desc)
    return out


def _node_meta(rec: dict[str, Any], nid: NodeId) -> dict[str, Any]:
    """The operator semantics of one node record (empty when it gives none)."""
    meta: dict[str, Any] = {}
    if "op" in rec:
        if not isinstance(rec["op"], str) or not rec["op"]:
            raise ProblemError(f"node {nid!r} field 'op': expected an operator name such as 'aten.mm', got {rec['op']!r}")
        meta["op"] = rec["op"]
    for fld in ("inputs", "outputs"):
        if fld in rec:
            meta[fld] = _tensor_list(rec[fld], f"node {nid!r} field {fld!r}")
    return meta


def _slot(value: Any, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 0:
        raise ProblemError(f"{what}: expected a non-negative integer, got {value!r}")
    return int(value)


def _edge_meta(rec: dict[str, Any], label: str) -> dict[str, Any]:
    """The tensor identity of one edge record (empty when it gives none)."""
    meta: dict[str, Any] = {}
    if "src_output" in rec:
        meta["src_output"] = _slot(rec["src_output"], f"{label} field 'src_output'")
    if "dst_inputs" in rec:
        slots = rec["dst_inputs"]
        if not isinstance(slots, list):
            raise ProblemError(f"{label} field 'dst_inputs': expected a list of input positions, got {slots!r}")
        meta["dst_inputs"] = sorted({_slot(j, f"{label} field 'dst_inputs'") for j in slots})
    if "tensors" in rec:
        parts = rec["tensors"]
        if not isinstance(parts, list) or not parts:
            raise ProblemError(f"{label} field 'tensors': expected a non-empty list of {{'src_output', 'dst_inputs'}}")
        merged: dict[str, Any] = {}
        for pos, part in enumerate(parts):
            if not isinstance(part, dict) or set(part) - {"src_output", "dst_inputs"}:
                raise ProblemError(f"{label} field 'tensors'[{pos}]: expected an object with 'src_output' and 'dst_inputs'")
            merged = _merge_edge_meta(merged, _edge_meta(part, f"{label} field 'tensors'[{pos}]"))
        return merged
    return meta


def _merge_edge_meta(a: dict[str, Any], b: dict[str, Any]) -> dict[str, Any]:
    """Merge the tensor identities of two parallel edges (see :class:`Problem` ``edge_meta``)."""
    if not a or not b:
        return a or b
    parts: dict[Any, set[int]] = {}
    for rec in (a.get("tensors") or [a]) + (b.get("tensors") or [b]):
        parts.setdefault(rec.get("src_output"), set()).update(rec.get("dst_inputs", []))
    first = next(iter(parts))
    out: dict[str, Any] = {}
    if first is not None:
        out["src_output"] = first
    out["dst_inputs"] = sorted(parts[first])
    if len(parts) > 1:
        out["tensors"] = [({"src_output": k} if k is not None else {}) | {"dst_inputs": sorted(v)} for k, v in parts.items()]
    return out
