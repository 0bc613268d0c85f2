"""Repeated structure in a graph: which nodes play the same part in copies of one block.

Why: a training step repeats its blocks (a transformer's layers, an unrolled RNN's steps, a CNN's
residual blocks), and a change of placement or order that shortens one copy often shortens every
copy. A search that finds it in one block at a time pays for it once per block; knowing the copies,
it can be tried in all of them at once (solvers/echo_sweep.py).

Colour refinement (the 1-dimensional Weisfeiler-Leman test) on the DAG: nodes start coloured by
(operator name when the graph has one, time in steps of TIME_STEP, output bytes, persistent bytes); each round a node's new colour is its colour with the
multisets of its predecessors' and successors' colours. After ``rounds`` rounds two nodes share a
colour when their neighbourhoods of that radius look alike, so a block's node and its counterparts
in the other copies share one (the copies near the graph's ends split off, one block per round).

:func:`images` then maps a connected region around a node onto the copy around another node of the
same colour, edge by edge, matching neighbours by colour.
"""
from __future__ import annotations

import numpy as np

from .problem import Problem

ROUNDS = 4  # refinement rounds: blocks of a 32K-node decoder keep 150-160 copies per colour at 4
TIME_STEP = 0.02  # times within about 2% count as equal (profiled copies of one operator differ a little)


def repeat_classes(problem: Problem, rounds: int = ROUNDS) -> np.ndarray:
    """A colour per node (ints from 0): equal colours after ``rounds`` rounds of refinement."""
    n = problem.n
    if n == 0:
        return np.zeros(0, dtype=np.int64)
    t = np.asarray(problem.time, dtype=float)
    bucket = np.where(t > 0, np.round(np.log(np.maximum(t, 1e-300)) / np.log1p(TIME_STEP)), -1e9)
    ops = [m.get("op", "") for m in problem.node_meta] if problem.node_meta else [""] * n
    op_code = np.unique(np.asarray(ops, dtype=object).astype(str), return_inverse=True)[1].reshape(-1)
    key = np.stack([bucket, np.asarray(problem.out_bytes, dtype=float), np.asarray(problem.param_bytes, dtype=float),
                    op_code.astype(float)], axis=1)
    col = np.unique(key, axis=0, return_inverse=True)[1].reshape(-1).astype(np.int64)
    rng = np.random.default_rng(0)
    src, dst = problem.src.astype(np.int64), problem.dst.astype(np.int64)
    for _ in range(rounds):
        # a multiset of colours hashed as the wrapping sum of a random 64-bit word per colour
        word_in = rng.integers(1, 2 ** 63 - 1, size=int(col.max()) + 1, dtype=np.int64).astype(np.uint64)
        word_out = rng.integers(1, 2 ** 63 - 1, size=int(col.max()) + 1, dtype=np.int64).astype(np.uint64)
        from_pred = np.zeros(n, dtype=np.uint64)
        from_succ = np.zeros(n, dtype=np.uint64)
        np.add.at(from_pred, dst, word_in[col[src]])
        np.add.at(from_succ, src, word_out[col[dst]])
        rows = np.stack([col.astype(np.uint64), from_pred, from_succ], axis=1)
        new = np.unique(rows, axis=0, return_inverse=True)[1].reshape(-1).astype(np.int64)
        if int(new.max()) == int(col.max()):
            break  # stable: no class split
        col = new
    return col


def repeats(col: np.ndarray) -> bool:
    """Whether any colour has two or more nodes (else no block repeats)."""
    return bool(col.size) and int(np.bincount(col).max()) >= 2


def class_members(col: np.ndarray, rank: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Nodes grouped by colour, each group in topological rank order, as (ptr, nodes): colour c's
    members are ``nodes[ptr[c]:ptr[c + 1]]``."""
    seq = np.lexsort((rank, col))
    ptr = np.searchsorted(col[seq], np.arange(int(col.max()) + 2 if col.size else 1))
    return ptr, seq


def neighbours(problem: Problem, v: int) -> list[int]:
    """The inputs and outputs of node ``v``."""
    sp, sn, _ = problem.succ_ptr
    pp, pn, _ = problem.pred_ptr
    return sn[sp[v]:sp[v + 1]].tolist() + pn[pp[v]:pp[v + 1]].tolist()


def images(problem: Problem, col: np.ndarray, region: set[int], root: int, target: int) -> dict[int, int] | None:
    """The nodes of ``region`` (connected around ``root`` through its own edges) mapped onto the
    copy around ``target`` (a node of root's colour): a breadth-first walk from (root, target) that
    matches each region neighbour to an unused neighbour of the image with its colour, on the same
    side (input or output) and, among several, at the same position in the neighbour lists. None
    when some region node has no match or two region nodes meet on one image."""
    if col[root] != col[target]:
        return None
    sp, sn, _ = problem.succ_ptr
    pp, pn, _ = problem.pred_ptr
    image = {root: target}
    used = {target}
    queue = [root]
    while queue:
        x = queue.pop()
        y = image[x]
        for ptr, nbr in ((sp, sn), (pp, pn)):
            mine = nbr[ptr[x]:ptr[x + 1]]
            theirs = nbr[ptr[y]:ptr[y + 1]]
            for i, u in enumerate(mine.tolist()):
                if u not in region or u in image:
                    continue
                same = [w for w in theirs.tolist() if col[w] == col[u]]
                ahead = sum(1 for w in mine[:i].tolist() if col[w] == col[u])  # u's place among its colour
                if not same:
                    return None
                w = same[min(ahead, len(same) - 1)]
                if w in used:
                    return None
                image[u] = w
                used.add(w)
                queue.append(u)
    return image if len(image) == len(region) else None
