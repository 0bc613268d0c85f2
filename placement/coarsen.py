"""Coarsening: contract an operator graph to at most ``target`` nodes, acyclic by construction.

Why: the exact model (CP-SAT) handles hundreds to a few thousand nodes; real training graphs have up
to hundreds of thousands. A coarse node is a set of original nodes that will share one device; any
placement of the coarse graph maps back exactly to a placement of the original (:meth:`project`).

How (docs/coarsening.md gives the proofs): the state is a label per original node (its cluster) and
the quotient graph between clusters, rebuilt with numpy after each *pass*; a pass applies many
contractions at once, chosen so that they are jointly acyclic:

1. ``colocate``: colocation groups. All groups are contracted tentatively and the strongly connected
   components of that quotient computed (Tarnawski et al.'s preprocessing). A group in a trivial
   component stays contracted; a non-trivial component is contracted whole when it is light enough,
   otherwise its groups stay uncontracted and become colocation constraints of the coarse problem.
2. ``chain`` / ``out`` / ``in``: safe contractions. ``out`` merges a cluster whose only successor is v
   into v (``in``: a cluster whose only predecessor is u into u); ``chain`` requires both. A pass
   contracts disjoint stars (children by decreasing edge comm while the star fits the cap; a child
   is never a parent), a sequence of single safe contractions, each still safe when it is applied.
   Zero-time pass-through nodes are a special case (no weight: they always fit under the cap).
   Optional ``clusters`` (e.g. PARDNN's slices) are then accepted like pass 3's sets.
3. ``scope-d``: DNN structure read from names (Tofu): nodes whose names share the scope prefix at
   depth d (``layer3/attn/head0/...``), backward operators (``.../grad*``, ``.../update``) keyed to
   their forward operator's scope but kept apart from the forward ones (Tarnawski's FW/BW split).
   Candidate sets are accepted with the same strongly-connected-component rule as groups.
4. ``blocks``: contiguous blocks of a depth-first topological order of the quotient (always acyclic:
   block indices are themselves a topological order), sized so that at most ``target`` remain.

A pass that would go below ``target`` keeps only its lightest merges, just enough to reach it.

Every contraction respects a weight cap (a node's weight is its share of total time plus its share
of total static memory) so that no coarse node is too big to balance, and only merges nodes with
the same allowed devices. A coarse node carries summed time, param_bytes and out_bytes (so static
memory per device is exactly preserved); a coarse edge carries the max comm of the original edges it
stands for (transfers overlap), or their sum with ``edge_comm="sum"``.
"""
from __future__ import annotations

import re
import time as _time
from dataclasses import dataclass, field

import numpy as np

from .evaluator import as_placement, check_placement, evaluate, schedule_ties
from .problem import Problem, ProblemError

EDGE_COMM = ("max", "sum")
_GRAD_PART = re.compile(r"^(grad(_\w*)?|\w*_grad|update|gradients?)$")
_SPLIT = re.compile(r"[/.]")
_SIZE_SUFFIX = re.compile(r" \(\+\d+\)$")  # the " (+k)" a coarse node's name carries


@dataclass
class Level:
    """One pass of the coarsening: its kind and the coarse size after it."""

    step: str
    nodes: int
    edges: int
    seconds: float


@dataclass
class Coarsening:
    """The coarse problem and the maps between it and the original.

    coarse: a validated, acyclic Problem (the original itself when no contraction was needed).
    members: original node indices of each coarse node, in the original topological order.
    of: coarse node index of each original node.
    levels: the passes applied, in order.
    """

    original: Problem
    coarse: Problem
    members: list[np.ndarray]
    of: np.ndarray
    levels: list[Level] = field(default_factory=list)

    def project(self, coarse_placement: np.ndarray) -> np.ndarray:
        """Original placement: every original node on its coarse node's device."""
        cp = as_placement(self.coarse, coarse_placement)
        return cp[self.of]

    def project_order(self, coarse_placement: np.ndarray, coarse_start: np.ndarray | None = None) -> list[list[int]]:
        """Per-device order of original nodes that realises a coarse schedule: coarse nodes by
        start time (ties: placement.evaluator.schedule_ties), each expanded into its members in topological
        order. With this order the original makespan is at most the coarse schedule's (see
        docs/coarsening.md); ``coarse_start`` defaults to the coarse FIFO schedule."""
        cp = as_placement(self.coarse, coarse_placement)
        if coarse_start is None:
            coarse_start = evaluate(self.coarse, cp).start
        cs = np.asarray(coarse_start, dtype=float)
        seq = np.lexsort((schedule_ties(self.coarse, cs), cs, cp))
        order: list[list[int]] = [[] for _ in range(self.coarse.k)]
        for c in seq.tolist():
            order[int(cp[c])].extend(self.members[c].tolist())
        return order

    def restrict(self, placement: np.ndarray, *, repair: bool = True) -> np.ndarray | None:
        """Coarse placement closest to an original one: each coarse colocation unit goes to the
        allowed device holding most of its members' weight (share of time + share of static
        memory). With ``repair``, units are then moved off devices over their static capacity;
        returns None when that repair fails."""
        pl = as_placement(self.original, placement)
        check_placement(self.original, pl)
        co, k = self.coarse, self.coarse.k
        w = _node_weight(self.original) + 1e-12
        score = np.bincount(self.of * k + pl, weights=w, minlength=co.n * k).reshape(co.n, k)
        unit = _units_of(co)
        uscore = np.zeros((int(unit.max()) + 1 if co.n else 0, k))
        np.add.at(uscore, unit, score)
        umask = np.ones_like(uscore, dtype=bool)
        np.logical_and.at(umask, unit, co.allowed_mask())
        choice = np.argmax(np.where(umask, uscore, -1.0), axis=1)
        if repair:
            choice = _repair_memory(co, unit, choice, umask, uscore)
            if choice is None:
                return None
        return choice[unit].astype(np.int64)


def _units_of(problem: Problem) -> np.ndarray:
    """Unit index per node: colocation groups are one unit each, other nodes their own."""
    g = problem.colocate
    ng = len(problem.colocate_names)
    single = g < 0
    unit = np.where(single, ng + np.arange(problem.n), g)
    _, inv = np.unique(unit, return_inverse=True)
    return inv.astype(np.int64)


def _repair_memory(co: Problem, unit: np.ndarray, choice: np.ndarray, umask: np.ndarray, uscore: np.ndarray) -> np.ndarray | None:
    """Greedy: while a device is over its static capacity, move its unit with the least affinity per
    byte to the allowed device with the most room that can hold it."""
    need = np.bincount(unit, weights=co.param_bytes + co.out_bytes, minlength=choice.shape[0])
    choice = choice.copy()
    load = np.bincount(choice, weights=need, minlength=co.k)
    cap = co.memory
    for _ in range(choice.shape[0] + 1):
        over = np.flatnonzero(load > cap * (1 + 1e-12) + 1e-9)
        if over.size == 0:
            return choice
        d = int(over[0])
        cand = np.flatnonzero((choice == d) & (need > 0))
        if cand.size == 0:
            return None
        aff = uscore[cand, d] / need[cand]
        moved = False
        for u in cand[np.argsort(aff, kind="stable")].tolist():
            room = np.where(umask[u], cap - load, -np.inf)
            room[d] = -np.inf
            e = int(np.argmax(room))
            if room[e] >= need[u]:
                choice[u] = e
                load[d] -= need[u]
                load[e] += need[u]
                moved = True
                break
        if not moved:
            return None
    return None


def _mask_class(problem: Problem) -> np.ndarray:
    """Per node, an id of its set of usable devices (allowed devices, colocation included)."""
    if all(a is None for a in problem.allowed):
        return np.zeros(problem.n, dtype=np.int64)
    packed = np.packbits(problem.allowed_mask(), axis=1)
    rows = np.ascontiguousarray(packed).view(np.dtype((np.void, packed.shape[1]))).ravel()
    _, inv = np.unique(rows, return_inverse=True)
    return inv.astype(np.int64).ravel()


def _node_weight(problem: Problem) -> np.ndarray:
    """Share of total time plus share of total static memory (each term dropped when its total is 0)."""
    w = np.zeros(problem.n)
    for arr in (problem.time, problem.param_bytes + problem.out_bytes):
        tot = float(arr.sum())
        if tot > 0:
            w += arr / tot
    return w


# ----- the quotient graph ----------------------------------------------------------------------------
def _quotient(label: np.ndarray, c: int, src: np.ndarray, dst: np.ndarray, comm: np.ndarray, how: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Edges between distinct clusters, parallel ones merged (max or sum of comm)."""
    a, b = label[src], label[dst]
    keep = a != b
    key = a[keep] * c + b[keep]
    if key.size == 0:
        e = np.zeros(0, dtype=np.int64)
        return e, e.copy(), np.zeros(0)
    order = np.argsort(key, kind="stable")
    key, cm = key[order], comm[keep][order]
    idx = np.flatnonzero(np.r_[True, key[1:] != key[:-1]])
    qc = np.maximum.reduceat(cm, idx) if how == "max" else np.add.reduceat(cm, idx)
    uk = key[idx]
    return uk // c, uk % c, qc


def _scc(c: int, qs: np.ndarray, qd: np.ndarray) -> np.ndarray:
    """Strongly connected component id per node (iterative Tarjan)."""
    order = np.argsort(qs, kind="stable")
    ptr = np.zeros(c + 1, dtype=np.int64)
    np.cumsum(np.bincount(qs, minlength=c), out=ptr[1:])
    ptr_l, nbr = ptr.tolist(), qd[order].tolist()
    index = [-1] * c
    low = [0] * c
    onstack = [False] * c
    comp = [-1] * c
    stack: list[int] = []
    counter = 0
    ncomp = 0
    for root in range(c):
        if index[root] >= 0:
            continue
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        onstack[root] = True
        work = [[root, ptr_l[root]]]
        while work:
            top = work[-1]
            v, i = top
            if i < ptr_l[v + 1]:
                top[1] = i + 1
                w = nbr[i]
                if index[w] < 0:
                    index[w] = low[w] = counter
                    counter += 1
                    stack.append(w)
                    onstack[w] = True
                    work.append([w, ptr_l[w]])
                elif onstack[w] and index[w] < low[v]:
                    low[v] = index[w]
                continue
            work.pop()
            if work:
                u = work[-1][0]
                if low[v] < low[u]:
                    low[u] = low[v]
            if low[v] == index[v]:
                while True:
                    x = stack.pop()
                    onstack[x] = False
                    comp[x] = ncomp
                    if x == v:
                        break
                ncomp += 1
    return np.asarray(comp, dtype=np.int64)


def _dfs_topo(c: int, qs: np.ndarray, qd: np.ndarray) -> np.ndarray:
    """Topological order that follows chains (Kahn's algorithm with a stack)."""
    order = np.argsort(qs, kind="stable")
    ptr = np.zeros(c + 1, dtype=np.int64)
    np.cumsum(np.bincount(qs, minlength=c), out=ptr[1:])
    ptr_l, nbr = ptr.tolist(), qd[order].tolist()
    indeg = np.bincount(qd, minlength=c).tolist()
    stack = [v for v in range(c - 1, -1, -1) if indeg[v] == 0]
    out: list[int] = []
    while stack:
        v = stack.pop()
        out.append(v)
        for j in range(ptr_l[v + 1] - 1, ptr_l[v] - 1, -1):
            w = nbr[j]
            indeg[w] -= 1
            if indeg[w] == 0:
                stack.append(w)
    if len(out) != c:
        raise AssertionError("coarsening bug: the quotient graph has a cycle")
    return np.asarray(out, dtype=np.int64)


def _uniform(keys: np.ndarray, values: np.ndarray, nkeys: int) -> np.ndarray:
    """Per key: do all its entries carry the same value?"""
    lo = np.full(nkeys, np.iinfo(np.int64).max)
    hi = np.full(nkeys, np.iinfo(np.int64).min)
    np.minimum.at(lo, keys, values)
    np.maximum.at(hi, keys, values)
    return lo == hi


def _one_segment(keys: np.ndarray, seg: np.ndarray, nkeys: int) -> np.ndarray:
    """Per key: do its entries carry at most one segment (-1 is no segment and agrees with all)?"""
    lo = np.full(nkeys, np.iinfo(np.int64).max)
    hi = np.full(nkeys, -1, dtype=np.int64)
    tagged = seg >= 0
    np.minimum.at(lo, keys[tagged], seg[tagged])
    np.maximum.at(hi, keys[tagged], seg[tagged])
    return (hi < 0) | (lo == hi)


class _State:
    """Clusters (label per original node, 0..c-1) and their quotient graph."""

    def __init__(self, problem: Problem, edge_comm: str, seed: int, target: int = 1,
                 segment: np.ndarray | None = None) -> None:
        self.p = problem
        self.seg_node = np.full(problem.n, -1, dtype=np.int64) if segment is None else segment
        self.target = target
        self.how = edge_comm
        self.rng = np.random.default_rng(seed)
        self.w = _node_weight(problem)
        self.mclass_node = _mask_class(problem)
        self.label = np.arange(problem.n, dtype=np.int64)
        self.c = problem.n
        self.levels: list[Level] = []
        self._refresh()

    def _refresh(self) -> None:
        p = self.p
        self.cw = np.bincount(self.label, weights=self.w, minlength=self.c)
        self.crank = np.full(self.c, p.n, dtype=np.int64)
        np.minimum.at(self.crank, self.label, p.topo_rank)
        self.mclass = np.zeros(self.c, dtype=np.int64)
        self.mclass[self.label] = self.mclass_node
        self.seg = np.full(self.c, -1, dtype=np.int64)
        np.maximum.at(self.seg, self.label, self.seg_node)
        self.qs, self.qd, self.qc = _quotient(self.label, self.c, p.src, p.dst, p.comm, self.how)

    def apply(self, mapping: np.ndarray, step: str, t0: float) -> int:
        """Relabel clusters through ``mapping`` (cluster -> any int; equal ints merge). If that would
        go below the target, only the lightest merges are kept, just enough to reach it (any
        subset of a pass's merges is still acyclic: docs/coarsening.md)."""
        _, inv, counts = np.unique(mapping, return_inverse=True, return_counts=True)
        inv = inv.ravel()
        if counts.size < self.target:
            multi = np.flatnonzero(counts > 1)
            gw = np.bincount(inv, weights=self.cw, minlength=counts.size)
            order = multi[np.argsort(gw[multi], kind="stable")]
            reach = np.cumsum(counts[order] - 1)
            keep = np.zeros(counts.size, dtype=bool)
            keep[order[: int(np.searchsorted(reach, self.c - self.target)) + 1]] = True
            mapping = np.where(keep[inv] | (counts[inv] == 1), inv, counts.size + np.arange(self.c))
            _, inv = np.unique(mapping, return_inverse=True)
        before = self.c
        self.label = inv.astype(np.int64)[self.label]
        self.c = int(inv.max()) + 1 if inv.size else 0
        self._refresh()
        self.levels.append(Level(step, self.c, int(self.qs.size), _time.monotonic() - t0))
        return before - self.c

    # -- passes --
    def contract_sets(self, set_of: np.ndarray, cap: float, step: str, *, merge_scc: bool) -> int:
        """Contract each set (set index per cluster, -1 for none) unless that closes a cycle; a
        resulting non-trivial strongly connected component is contracted whole when ``merge_scc``
        and it is light and uniform enough, else its sets are left uncontracted."""
        t0 = _time.monotonic()
        c = self.c
        ns = int(set_of.max()) + 1 if set_of.size and set_of.max() >= 0 else 0
        if ns == 0:
            return 0
        set_of = self._chunks(set_of, cap)
        ns = int(set_of.max()) + 1
        has = set_of >= 0
        sid = np.where(has, set_of, 0)
        sw = np.bincount(sid[has], weights=self.cw[has], minlength=ns)
        ok = _uniform(sid[has], self.mclass[has], ns) & (sw <= cap) & (np.bincount(sid[has], minlength=ns) > 1)
        ok &= _one_segment(sid[has], self.seg[has], ns)
        use = has & ok[sid]
        if not use.any():
            return 0
        node2 = np.where(use, c + sid, np.arange(c))
        _, node2 = np.unique(node2, return_inverse=True)
        c2 = int(node2.max()) + 1
        a, b = node2[self.qs], node2[self.qd]
        keep = a != b
        comp = _scc(c2, a[keep], b[keep])
        ncomp = int(comp.max()) + 1
        size = np.bincount(comp, minlength=ncomp)
        ccl = comp[node2]  # component per cluster
        cyc = size[ccl] > 1
        if not cyc.any():
            return self.apply(node2, step, t0)
        cw = np.bincount(ccl, weights=self.cw, minlength=ncomp)
        good = (size > 1) & (cw <= cap) & _uniform(ccl, self.mclass, ncomp) & _one_segment(ccl, self.seg, ncomp) \
            if merge_scc else np.zeros(ncomp, dtype=bool)
        mapping = np.where(~cyc, node2, np.where(good[ccl], c2 + ccl, c2 + ncomp + np.arange(c)))
        return self.apply(mapping, step, t0)

    def _chunks(self, set_of: np.ndarray, cap: float) -> np.ndarray:
        """Split each set by allowed-device class and, along the clusters' first topological rank,
        into chunks of about ``cap`` weight (a chunk whose weight still exceeds the cap is
        later left uncontracted)."""
        idx = np.flatnonzero(set_of >= 0)
        out = np.full(self.c, -1, dtype=np.int64)
        if idx.size == 0:
            return out
        order = idx[np.lexsort((self.crank[idx], self.mclass[idx], set_of[idx]))]
        s, m, w = set_of[order], self.mclass[order], self.cw[order]
        first = np.r_[True, (s[1:] != s[:-1]) | (m[1:] != m[:-1])]
        cum = np.cumsum(w)
        gstart = np.flatnonzero(first)
        offset = np.repeat(cum[gstart] - w[gstart], np.diff(np.r_[gstart, s.size]))
        piece = np.floor((cum - offset - w / 2) / max(cap, 1e-300)).astype(np.int64)
        brk = first | np.r_[False, piece[1:] != piece[:-1]]
        out[order] = np.cumsum(brk) - 1
        return out

    def star_pass(self, direction: str, cap: float, *, chain: bool) -> int:
        """Contract disjoint stars of safe edges: child = a cluster with one successor (``out``) or
        one predecessor (``in``); with ``chain`` the other end must also have a single neighbour."""
        t0 = _time.monotonic()
        c, qs, qd = self.c, self.qs, self.qd
        outdeg = np.bincount(qs, minlength=c)
        indeg = np.bincount(qd, minlength=c)
        if direction == "out":
            safe, child, parent = outdeg[qs] == 1, qs, qd
        else:
            safe, child, parent = indeg[qd] == 1, qd, qs
        if chain:
            safe = (outdeg[qs] == 1) & (indeg[qd] == 1)
        cand = np.flatnonzero(safe & (self.mclass[qs] == self.mclass[qd]) & (self.cw[qs] + self.cw[qd] <= cap))
        if cand.size == 0:
            return 0
        ch, pa, cm = child[cand], parent[cand], self.qc[cand]
        is_child = np.zeros(c, dtype=bool)
        is_child[ch] = True
        is_parent = np.zeros(c, dtype=bool)
        is_parent[pa] = True
        coin = self.rng.random(c) < 0.5
        head = is_parent & (~is_child | coin)
        sel = head[pa] & ~head[ch]
        ch, pa, cm = ch[sel], pa[sel], cm[sel]
        if ch.size == 0:
            return 0
        # Per parent, children by decreasing comm (heavy edges first) while the star fits the cap.
        order = np.lexsort((ch, -cm, pa))
        pa_o = pa[order]
        wsum = np.cumsum(self.cw[ch[order]])
        start = np.flatnonzero(np.r_[True, pa_o[1:] != pa_o[:-1]])
        before = np.repeat(np.r_[0.0, wsum][start], np.diff(np.r_[start, pa_o.size]))
        pick = order[wsum - before + self.cw[pa_o] <= cap]
        pick = self._same_segment(pick, ch, pa)
        mapping = np.arange(c)
        mapping[ch[pick]] = pa[pick]
        return self.apply(mapping, f"{'chain' if chain else direction}", t0)

    def _same_segment(self, pick: np.ndarray, ch: np.ndarray, pa: np.ndarray) -> np.ndarray:
        """The star merges ``pick`` (children ch -> parents pa, heaviest edges first per parent)
        that keep at most one segment per star: a parent without one takes its first child's."""
        sc, sp = self.seg[ch[pick]], self.seg[pa[pick]]
        if not ((sc >= 0) & (sp < 0)).any():
            return pick[(sc < 0) | (sc == sp)]
        star_seg: dict[int, int] = {}
        keep = np.zeros(pick.size, dtype=bool)
        for i, (a, b, parent) in enumerate(zip(sc.tolist(), sp.tolist(), pa[pick].tolist())):
            if a < 0:
                keep[i] = True
            elif b >= 0:
                keep[i] = a == b
            else:
                keep[i] = star_seg.setdefault(parent, a) == a
        return pick[keep]

    def blocks(self, target: int) -> int:
        """Contiguous blocks of a depth-first topological order, at most ``target`` of them (plus
        breaks where the allowed devices change)."""
        t0 = _time.monotonic()
        order = _dfs_topo(self.c, self.qs, self.qd)
        w = self.cw[order]
        total = float(w.sum())
        unit = total / target if total > 0 else 1.0
        mid = np.cumsum(w) - w / 2
        blk = np.floor(mid / unit).astype(np.int64) if total > 0 else np.arange(self.c) * target // max(self.c, 1)
        m = self.mclass[order]
        brk = np.r_[True, (blk[1:] != blk[:-1]) | (m[1:] != m[:-1])]
        seg = self.seg[order]
        if (seg >= 0).any():  # also cut where a second segment would join a block
            cur = -1
            for i, (b, sg) in enumerate(zip(brk.tolist(), seg.tolist())):
                if b:
                    cur = -1
                if sg >= 0:
                    if cur >= 0 and sg != cur:
                        brk[i] = True
                    cur = sg
        mapping = np.empty(self.c, dtype=np.int64)
        mapping[order] = np.cumsum(brk) - 1
        return self.apply(mapping, "blocks", t0)


# ----- names ---------------------------------------------------------------------------------------
def _scope_parts(problem: Problem, v: int) -> tuple[list[str], bool]:
    """Node v's forward operator's name split in parts, and whether v is a backward node."""
    parts = [x for x in _SPLIT.split(_SIZE_SUFFIX.sub("", problem.names[v])) if x]
    bwd = False
    while len(parts) > 1 and _GRAD_PART.match(parts[-1]):
        parts.pop()
        bwd = True
    attr = problem.node_attrs.get("is_backward")
    if attr is not None:
        bwd = bool(attr[v])
    return parts, bwd


def _scope_sets(st: _State, depth: int, cache: dict[int, tuple[list[str], bool]]) -> np.ndarray:
    """Set index per cluster: the scope (name prefix without the last ``depth`` parts) and direction
    of the cluster's heaviest member; -1 when that name is too short."""
    order = np.lexsort((-st.w, st.label))
    rep = order[np.r_[True, st.label[order][1:] != st.label[order][:-1]]]
    keys: dict[str, int] = {}
    sets = np.full(st.c, -1, dtype=np.int64)
    for c, v in enumerate(rep.tolist()):
        got = cache.get(v)
        if got is None:
            got = cache[v] = _scope_parts(st.p, v)
        parts, bwd = got
        if len(parts) > depth:
            key = ("B:" if bwd else "F:") + "/".join(parts[: len(parts) - depth])
            sets[c] = keys.setdefault(key, len(keys))
    return sets


# ----- the driver ----------------------------------------------------------------------------------
def coarsen(problem: Problem, target: int, *, seed: int = 0, use_names: bool = True, edge_comm: str = "max",
            cap_factor: float = 2.0, max_depth: int = 3, clusters: np.ndarray | None = None,
            segment: np.ndarray | None = None) -> Coarsening:
    """Contract ``problem`` to at most ``target`` nodes (see the module docstring for the passes).
    Nodes with different sets of usable devices are never merged, so with allowed-device
    restrictions the result can exceed ``target`` by the number of class changes along the final
    topological blocks.

    ``cap_factor``: no structural contraction makes a node heavier than ``cap_factor / target`` of
    the total weight. ``edge_comm``: how parallel original edges price their coarse edge.
    ``clusters``: optional candidate sets, a set index per original node or -1 (e.g. PARDNN's
    slices), contracted in chunks after the safe passes where that stays acyclic. ``segment``:
    optional int per original node, -1 for none; no coarse node ever holds two different
    segments (e.g. the pieces of a critical path cut at its costly transfers, so that the coarse
    graph keeps those edges visible); a colocation group spanning two segments stays a
    colocation constraint of the coarse problem, and the final blocks are also cut where a second
    segment would join one (so the result can exceed ``target``). The result is deterministic
    given ``seed``."""
    if isinstance(target, bool) or not isinstance(target, (int, np.integer)) or target < 1:
        raise ProblemError(f"coarsen: target must be a positive integer, got {target!r}")
    if edge_comm not in EDGE_COMM:
        raise ProblemError(f"coarsen: edge_comm must be one of {EDGE_COMM}, got {edge_comm!r}")
    n = problem.n
    cl = None if clusters is None else np.asarray(clusters, dtype=np.int64)
    if cl is not None and cl.shape != (n,):
        raise ProblemError(f"coarsen: clusters has {cl.shape[0] if cl.ndim else 0} entries for {n} nodes")
    if n <= target:
        members = [np.array([i], dtype=np.int64) for i in range(n)]
        return Coarsening(problem, problem, members, np.arange(n, dtype=np.int64), [])
    seg = None if segment is None else np.asarray(segment, dtype=np.int64)
    if seg is not None and seg.shape != (n,):
        raise ProblemError(f"coarsen: segment has {seg.shape[0] if seg.ndim else 0} entries for {n} nodes")
    st = _State(problem, edge_comm, seed, target, seg)
    cap = cap_factor * float(st.w.sum()) / target

    def done() -> bool:
        return st.c <= target

    def safe_rounds() -> None:
        while not done():
            before = st.c
            for direction, chain in (("out", True), ("out", False), ("in", False)):
                st.star_pass(direction, cap, chain=chain)
                if done():
                    return
            if before - st.c < max(1, before // 100):
                return

    if len(problem.colocate_names) and not done():
        st.contract_sets(problem.colocate[_first_members(st)], cap, "colocate", merge_scc=True)
    safe_rounds()
    if cl is not None and not done():
        # A cluster's set: that of its heaviest member.
        order = np.lexsort((-st.w, st.label))
        rep = order[np.r_[True, st.label[order][1:] != st.label[order][:-1]]]
        st.contract_sets(cl[rep], cap, "clusters", merge_scc=False)
        safe_rounds()
    if use_names and not done():
        cache: dict[int, tuple[list[str], bool]] = {}
        for depth in range(1, max_depth + 1):
            if done():
                break
            st.contract_sets(_scope_sets(st, depth, cache), cap, f"scope-{depth}", merge_scc=False)
            safe_rounds()
    if not done():
        st.blocks(target)
    return _finish(problem, st)


def _first_members(st: _State) -> np.ndarray:
    """An original node of each cluster (used where all members agree, e.g. colocation after the
    first pass only singletons exist)."""
    rep = np.empty(st.c, dtype=np.int64)
    rep[st.label] = np.arange(st.label.shape[0])
    return rep


def _finish(problem: Problem, st: _State) -> Coarsening:
    label, c = st.label, st.c
    order = np.lexsort((problem.topo_rank, label))
    bounds = np.searchsorted(label[order], np.arange(c + 1))
    members = [order[bounds[i]:bounds[i + 1]] for i in range(c)]
    coarse = _build(problem, label, c, members, st)
    return Coarsening(problem, coarse, members, label, st.levels)


def _coarse_attrs(problem: Problem, label: np.ndarray, c: int, members: list[np.ndarray]) -> dict[str, np.ndarray]:
    """Member counts, and ``is_backward`` by majority of time when the original has it."""
    attrs = {"members": np.asarray([m.size for m in members], dtype=np.int64)}
    bwd = problem.node_attrs.get("is_backward")
    if bwd is not None:
        b = np.asarray(bwd, dtype=bool)
        on = np.bincount(label, weights=np.where(b, problem.time + 1e-12, 0.0), minlength=c)
        off = np.bincount(label, weights=np.where(b, 0.0, problem.time + 1e-12), minlength=c)
        attrs["is_backward"] = on > off
    return attrs


def _build(problem: Problem, label: np.ndarray, c: int, members: list[np.ndarray], st: _State) -> Problem:
    """The coarse Problem: summed costs, merged colocation, intersected devices, merged edges."""
    time = np.bincount(label, weights=problem.time, minlength=c)
    out_b = np.bincount(label, weights=problem.out_bytes, minlength=c)
    par_b = np.bincount(label, weights=problem.param_bytes, minlength=c)
    # Coarse colocation: clusters holding members of one original group are linked (union-find).
    parent = list(range(c))

    def find(x: int) -> int:
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    grouped = np.flatnonzero(problem.colocate >= 0)
    first_cluster: dict[int, int] = {}
    for g, cl in zip(problem.colocate[grouped].tolist(), label[grouped].tolist()):
        f = first_cluster.setdefault(g, cl)
        if f != cl:
            ra, rb = find(f), find(cl)
            if ra != rb:
                parent[max(ra, rb)] = min(ra, rb)
    roots = np.asarray([find(x) for x in range(c)], dtype=np.int64)
    multi = np.bincount(roots, minlength=c)[roots] > 1
    colocate = np.full(c, -1, dtype=np.int64)
    names_g: list[str] = []
    if multi.any():
        uniq, inv = np.unique(roots[multi], return_inverse=True)
        colocate[multi] = inv
        names_g = [f"g{int(r)}" for r in uniq]
    allowed: list[tuple[int, ...] | None] = [None] * c
    if any(a is not None for a in problem.allowed):
        mask = problem.allowed_mask()
        for i, mem in enumerate(members):
            row = mask[mem[0]]
            allowed[i] = None if row.all() else tuple(np.flatnonzero(row).tolist())
    src, dst, comm = _quotient(label, c, problem.src, problem.dst, problem.comm, st.how)
    names = []
    for mem in members:
        top = int(mem[np.argmax(problem.time[mem])]) if mem.size else 0
        names.append(problem.names[top] + (f" (+{mem.size - 1})" if mem.size > 1 else ""))
    coarse = Problem(
        name=f"{problem.name}/coarse{c}", ids=[f"c{i}" for i in range(c)], names=names,
        time=time, out_bytes=out_b, param_bytes=par_b, colocate=colocate, allowed=allowed,
        src=src.astype(np.int64), dst=dst.astype(np.int64), comm=comm.astype(float),
        memory=problem.memory.copy(), device_names=list(problem.device_names), link=problem.link,
        edge_bytes=None, node_attrs=_coarse_attrs(problem, label, c, members),
        attrs={"coarse_of": problem.name}, colocate_names=names_g,
    )
    coarse.topo_order  # raises ProblemError if a contraction closed a cycle (a bug)
    return coarse
