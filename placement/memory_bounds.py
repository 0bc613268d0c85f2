"""Lower bounds on memory: the smallest per-device capacity at which any placement can exist.

``memory_lower_bound(problem, memory_model, k)`` is a capacity C such that, with k devices of C
bytes each, no placement (and, under the peak model, no schedule of it) fits below C. Proofs in
docs/peak.md; each part is named in the returned dict so a report can say which one binds.

Static model (a device holds params + outputs of its nodes): the units (colocation groups and lone
nodes) with sizes s_1 >= s_2 >= ...: C >= s_1; C >= sum / k; C >= s_k + s_(k+1) (of k + 1 units
two share a device).

Peak model:
- ``params``: the same three bin-packing bounds on the units' parameters (held at all times);
- ``working_set``: a node that runs (time > 0) holds its params, its output and all its inputs on
  its device at once, and its group's params are there too;
- ``params_plus_working_set``: the device running that node also holds its own params; the others
  hold the rest of the params: k C >= P + w, w the largest working set beyond params;
- ``live_cut``: while a node x runs, every tensor produced by an ancestor of x with a consumer in x
  or a descendant of x is held on some device, so k C >= P + out_x + those bytes. Checked for up
  to CUT_CANDIDATES nodes: the node running at the single-device FIFO peak and nodes spread over
  the topological order, then by decreasing upper bound on their cut (any x gives a valid bound),
  and exactly, in linear time, for every *pivot*: a node comparable with every other node (each is
  its ancestor or its descendant), such as the loss of a training graph.
"""
from __future__ import annotations

import weakref
from dataclasses import replace

import numpy as np

from .problem import Problem
from .split_bound import pivot_mask

CUT_CANDIDATES = 63  # bits of one unsigned 64-bit word
SCORED_ROUNDS = 16  # rounds of candidates by decreasing score (_best_cuts)
SCORED_WORK = 3_000_000  # at most this many nodes + edges walked by those rounds (4 rounds at 200K nodes)


def _units(problem: Problem, size: np.ndarray) -> np.ndarray:
    """Total size per unit: each colocation group, each ungrouped node."""
    grouped = problem.colocate >= 0
    groups = np.bincount(problem.colocate[grouped], weights=size[grouped], minlength=len(problem.groups))
    return np.concatenate([groups, size[~grouped]])


def param_units(problem: Problem) -> np.ndarray:
    """Params per unit (colocation group or lone node): what each device holds at all times."""
    return _units(problem, problem.param_bytes)


def bin_packing_bound(sizes: np.ndarray, k: int) -> float:
    """A lower bound on the bin capacity that packs ``sizes`` into k bins."""
    if sizes.size == 0:
        return 0.0
    s = np.sort(sizes)[::-1]
    best = max(float(s[0]), float(s.sum()) / k)
    if s.size > k:
        best = max(best, float(s[k - 1] + s[k]))
    return best


def working_sets(problem: Problem) -> np.ndarray:
    """Per node: bytes beyond params its device holds while it runs (0 for a zero-time node):
    its output plus each distinct input tensor."""
    ins = np.bincount(problem.dst, weights=problem.out_bytes[problem.src], minlength=problem.n)
    return np.where(problem.time > 0, problem.out_bytes + ins, 0.0)


def _cut_candidates(problem: Problem) -> list[int]:
    """Nodes whose live cut is checked: the node running at the single-device FIFO peak, then
    running nodes spread evenly over the topological order."""
    from .evaluator import evaluate  # one schedule of one device, only to pick a good candidate

    runs = problem.topo_order[problem.time[problem.topo_order] > 0]
    if runs.size == 0:
        return []
    cands: list[int] = []
    one = replace(problem, memory=np.array([np.inf]), device_names=["all"], allowed=[None] * problem.n)
    ev = evaluate(one, np.zeros(problem.n, dtype=np.int64), memory_model="peak")
    from .evaluator import peak_profile

    _, when = peak_profile(one, ev.placement, ev.start, ev.finish)
    if np.isfinite(when[0]):
        at = np.flatnonzero((ev.start <= when[0]) & (when[0] < ev.finish) & (problem.time > 0))
        cands.extend(at[:1].tolist())
    step = max(1, runs.size // (CUT_CANDIDATES - len(cands)))
    for v in runs[::step].tolist():
        if len(cands) >= CUT_CANDIDATES:
            break
        if v not in cands:
            cands.append(v)
    return cands


def _running_levels(problem: Problem, order: list[int] | None) -> tuple[np.ndarray, np.ndarray]:
    """On one device running ``order`` (FIFO when None): the running nodes (time > 0) and the live
    bytes (params excluded) at each one's start."""
    from .evaluator import buffers, evaluate  # one schedule of one device, only to pick candidates

    one = replace(problem, memory=np.array([np.inf]), device_names=["all"], allowed=[None] * problem.n)
    pl = np.zeros(problem.n, dtype=np.int64)
    ev = evaluate(one, pl, order=None if order is None else [order], memory_model="peak")
    buf = buffers(one, pl, ev.start, ev.finish)
    t = np.concatenate([buf.t0, buf.t1])
    delta = np.concatenate([buf.size, -buf.size])
    srt = np.lexsort((delta > 0, t))  # at equal times releases first, as the evaluator does
    level = np.cumsum(delta[srt])
    runs = np.flatnonzero(problem.time > 0)
    if level.size == 0:  # no tensor is ever held
        return runs, np.zeros(runs.size)
    at = np.searchsorted(t[srt], ev.start[runs], side="right") - 1
    return runs, np.where(at >= 0, level[np.maximum(at, 0)], 0.0)


def _scores(problem: Problem) -> tuple[np.ndarray, np.ndarray]:
    """Running nodes and, for each, an upper bound on its live cut: the smallest, over three
    single-device orders (FIFO, the topological order, and the memory-light order of
    placement.light_order weighing every ready node), of the live bytes at its start. Every tensor
    of x's live cut, and x's output, is alive at x's start in any order (made before, consumed at
    or after it), so each order's level there is at least the cut."""
    from .light_order import net_sequence

    score = nodes = None
    for order in (None, problem.topo_order.tolist(), net_sequence(problem, window=problem.n).tolist()):
        nodes, level = _running_levels(problem, order)
        score = level if score is None else np.minimum(score, level)
    return nodes, score


def pivot_cuts(problem: Problem) -> tuple[np.ndarray, np.ndarray]:
    """The running pivots (time > 0, comparable with every other node) and the live cut of each
    (the quantity of :func:`live_cut_bytes`), in O(n + m).

    The pivots come from split_bound.pivot_mask: x at position i of a topological order has its
    ancestors before i and its descendants after. Then the live cut of x is out_x plus every out_u with u before i and a consumer at or after i. Why: the
    largest cut of a training graph sits at its loss, a pivot, and the searched candidates can miss
    it (the 50K LSTM: 6.90 GB found for one device, 10.28 GB at the loss)."""
    n = problem.n
    if n == 0:
        return np.zeros(0, dtype=np.int64), np.zeros(0)
    pos = problem.topo_rank
    pd = pos[problem.dst]
    last_use = np.full(n, -1, dtype=np.int64)  # position of the latest consumer (-1: none)
    np.maximum.at(last_use, problem.src, pd)
    ok = pivot_mask(problem)
    # bytes held across each position: u counts at positions pos(u) + 1 .. last_use(u)
    held = np.zeros(n + 1)
    spans = last_use > pos
    np.add.at(held, pos[spans] + 1, problem.out_bytes[spans])
    np.add.at(held, last_use[spans] + 1, -problem.out_bytes[spans])
    across = np.cumsum(held)[:n]
    nodes = problem.topo_order[ok]
    keep = problem.time[nodes] > 0
    nodes = nodes[keep]
    return nodes, across[pos[nodes]] + problem.out_bytes[nodes]


def _best_cuts(problem: Problem) -> np.ndarray:
    """Live cuts of candidate nodes: those of :func:`_cut_candidates` and every pivot
    (:func:`pivot_cuts`), then the running nodes in
    decreasing order of :func:`_scores` (an upper bound on each one's cut), CUT_CANDIDATES at a
    time, while a node's score exceeds the best cut found, at most SCORED_ROUNDS rounds (fewer on big
    graphs: SCORED_WORK; at 200K nodes the later rounds found nothing more). When the
    rounds end that way, the best cut found is the largest over all nodes. Why: the largest cut of
    a training graph sits at one node (the loss, the only node after the whole forward pass and
    before the whole backward pass) that evenly spread candidates miss: on the 50K LSTM they gave
    5.54 GB for one device, the loss's cut is 10.28 GB; the scored rounds reached 6.90 GB, the
    pivots give the loss's cut exactly."""
    cands = _cut_candidates(problem)
    if not cands:
        return np.zeros(0)
    cuts = [live_cut_bytes(problem, cands), pivot_cuts(problem)[1]]
    best = float(max(c.max(initial=0.0) for c in cuts))
    nodes, score = _scores(problem)
    by = np.argsort(-score, kind="stable")
    seen = set(cands)
    i = 0
    rounds = max(1, min(SCORED_ROUNDS, SCORED_WORK // max(1, problem.n + problem.m)))
    for _ in range(rounds):
        batch: list[int] = []
        while i < by.size and len(batch) < CUT_CANDIDATES and score[by[i]] > best:
            v = int(nodes[by[i]])
            if v not in seen:
                batch.append(v)
            i += 1
        if not batch:
            break
        got = live_cut_bytes(problem, batch)
        cuts.append(got)
        best = max(best, float(got.max()))
    return np.concatenate(cuts)


def live_cut_bytes(problem: Problem, cands: list[int]) -> np.ndarray:
    """For each candidate x: out_x plus the bytes of every tensor made by an ancestor of x with a
    consumer that is x or a descendant of x (all held somewhere while x runs)."""
    n = problem.n
    if not cands:
        return np.zeros(0)
    bit = [0] * n
    for i, x in enumerate(cands):
        bit[x] |= 1 << i
    sp, sn, _ = problem.succ_ptr
    pp, pn, _ = problem.pred_ptr
    sp_l, sn_l, pp_l, pn_l = sp.tolist(), sn.tolist(), pp.tolist(), pn.tolist()
    topo = problem.topo_order.tolist()
    desc = bit[:]  # candidates x with v in desc*(x) (x itself included)
    for v in topo:
        acc = desc[v]
        for j in range(pp_l[v], pp_l[v + 1]):
            acc |= desc[pn_l[j]]
        desc[v] = acc
    anc = [0] * n  # candidates x with v a strict ancestor of x
    for v in reversed(topo):
        acc = 0
        for j in range(sp_l[v], sp_l[v + 1]):
            w = sn_l[j]
            acc |= anc[w] | bit[w]
        anc[v] = acc
    live = [0] * n
    for u in range(n):
        a = anc[u]
        if not a:
            continue
        reach = 0
        for j in range(sp_l[u], sp_l[u + 1]):
            reach |= desc[sn_l[j]]
        live[u] = a & reach
    words = np.array(live, dtype=np.uint64)
    out = problem.out_bytes
    total = np.array([float(out[((words >> np.uint64(i)) & np.uint64(1)).astype(bool)].sum()) for i in range(len(cands))])
    return total + out[np.asarray(cands)]


_CUT_CACHE: dict[int, tuple[weakref.ref, float]] = {}  # id(problem) -> (the problem, its largest cut found)


def _largest_cut(problem: Problem) -> float:
    """The largest live cut found (:func:`_best_cuts`), kept for the last few problems asked: the
    CLI, the portfolio and min-memory each ask for the bound of the same problem, and at 200K
    nodes the search takes seconds."""
    hit = _CUT_CACHE.get(id(problem))
    if hit is not None and hit[0]() is problem:
        return hit[1]
    cut = _best_cuts(problem)
    best = float(cut.max()) if cut.size else 0.0
    if len(_CUT_CACHE) >= 4:
        _CUT_CACHE.pop(next(iter(_CUT_CACHE)))
    _CUT_CACHE[id(problem)] = (weakref.ref(problem), best)
    return best


def memory_lower_bound(problem: Problem, memory_model: str = "static", k: int | None = None) -> dict[str, float]:
    """Valid lower bounds on the per-device capacity needed by k devices (default: the problem's),
    by part, and ``best`` (their maximum)."""
    k = problem.k if k is None else int(k)
    if problem.n == 0:
        return {"best": 0.0}
    if memory_model == "static":
        parts = {"units": bin_packing_bound(_units(problem, problem.param_bytes + problem.out_bytes), k)}
    else:
        params = problem.param_bytes
        total = float(params.sum())
        ws = working_sets(problem)
        own = params.copy()
        grouped = problem.colocate >= 0
        if grouped.any():
            gp = np.bincount(problem.colocate[grouped], weights=params[grouped], minlength=len(problem.groups))
            own[grouped] = gp[problem.colocate[grouped]]
        cut = _largest_cut(problem)
        parts = {
            "params": bin_packing_bound(_units(problem, params), k),
            "working_set": float((own + ws).max()),
            "params_plus_working_set": (total + float(ws.max())) / k,
            "live_cut": (total + cut) / k if cut > 0 else 0.0,
        }
    parts["best"] = max(parts.values())
    return parts
