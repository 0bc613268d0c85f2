"""Compiled versions of the hot loops of the evaluator and the search, on flat numpy arrays.

Why: at 40K-200K nodes refine, window LNS and the evaluator spend most of their time in a few
pure-Python passes over every node and edge (the list simulations, bottom levels, the kept-order
re-timing, the tails of the incremental schedule: bench/results_scale.md, "Session 11") and in the
per-move work of refine (a move's trial: the incremental schedule's overlay, bound and cone, one
call of :func:`move_trial`; refine's candidates: :func:`chain_walk`, :func:`spread_pieces`,
:func:`spread_assign`; "Session 12") and the re-base after an accepted move (:func:`merge_order`,
:func:`order_ties`, :func:`device_chains`, :func:`retime_order`, :func:`avoid_jumps`; "Session 13"). With the
optional extra ``fast`` (numba) installed, :func:`for_size` returns compiled versions of them;
without it, or on small graphs where loading them costs more than it saves, it returns None and the
callers run their own Python loops, which stay the reference: every kernel here gives the same
floats (the same sums and maxima, in the same order) and the same tie-breaking, bit for bit
(tests/test_kernels.py checks that against the Python loops on random graphs).

Costs: numba is imported only by the first :func:`for_size` call on a graph of at least
``THRESHOLD`` nodes, in a background thread (the caller goes on with its Python loops until the
kernels are ready); all kernels are then compiled at once and cached on disk (``cache=True``), so
later processes only load them; ``python -m placement.kernels`` compiles them ahead (the install
line of the README runs it); docs/scale.md has the times. ``PLACEMENT_KERNELS=off`` never uses
them, ``=on`` uses them at every size and loads them in the caller's thread (tests, benchmarks),
``auto`` (default) from ``THRESHOLD`` nodes.

The heaps below order entries by (k0, k1, k2) of float, float, int keys. Every heap of the Python
loops they replace orders tuples whose last fields are unique (a node's topological rank, a
device and its offer's version), so the order is total and any correct heap pops the same
sequence.
"""
from __future__ import annotations

import os
import sys
import threading
import time
from types import SimpleNamespace

import numpy as np

THRESHOLD = 500  # nodes; from here the kernels win by 2-6x per evaluation (bench/results_scale.md, "Session 26")
MODE_VAR = "PLACEMENT_KERNELS"
_loaded: SimpleNamespace | bool | None = None  # the compiled kernels, False when numba is missing
_lock = threading.RLock()  # held by load() for the whole import and compile
_start_lock = threading.Lock()  # held only to start the background loader (never during a compile)
_loader: threading.Thread | None = None


def mode() -> str:
    """The ``PLACEMENT_KERNELS`` setting: "auto", "on" or "off"."""
    value = os.environ.get(MODE_VAR, "auto").strip().lower() or "auto"
    if value not in ("auto", "on", "off"):
        raise ValueError(f"{MODE_VAR} must be auto, on or off, got {value!r}")
    return value


def for_size(n: int) -> SimpleNamespace | None:
    """The compiled kernels for a graph of ``n`` nodes, or None: numba missing, ``PLACEMENT_KERNELS``
    off, or (auto) a graph below ``THRESHOLD`` nodes, or (auto) the kernels not loaded yet.

    In auto mode the first call starts loading them in a background thread and the caller goes on
    with its Python loops (the same results) until they are ready: a run never waits for numba's
    import (0.3-0.5 s) or a first compile (4-8 s), so its time limit and Ctrl-C hold as before."""
    setting = mode()
    if setting == "off" or (setting == "auto" and n < THRESHOLD):
        return None
    if setting == "on":
        return load()
    if _loaded is None:
        _load_in_background()
        return None
    return _loaded or None


def _one_signature(kernel):
    """``kernel`` called with its arrays as contiguous float64 / int64 and its numbers as int:
    the one signature compiled ahead, whatever dtypes a caller's problem holds (another would be
    compiled in the middle of a run)."""
    def call(*args):
        return kernel(*[_normal(a) for a in args])

    call.kernel = kernel
    return call


def _normal(a):
    if isinstance(a, np.ndarray):  # already right (the common case): the same array, so kernels may write into it
        kind = a.dtype.kind
        return np.ascontiguousarray(a, dtype=np.float64 if kind == "f" else np.bool_ if kind == "b" else np.int64)
    return float(a) if isinstance(a, float) else int(a)


def _load_in_background() -> None:
    """Start the loader thread once. Not under ``_lock``: the loader holds that lock for the whole
    import and compile, and until numba is imported ``_loaded`` is still None, so every caller in
    that window came here again; with ``_lock`` it then waited for the whole compile (30 s of the
    solver thread with a stale cache at load 4, session 14), against :func:`for_size`'s promise."""
    global _loader
    if _loader is not None:
        return
    with _start_lock:
        if _loader is None:
            _loader = threading.Thread(target=_load_quietly, name="placement.kernels", daemon=True)
            _loader.start()


def _load_quietly() -> None:
    """:func:`load` for the background thread: a failure means no kernels (load leaves them off),
    never a failed run: the Python loops give the same results."""
    try:
        load()
    except Exception as exc:  # noqa: BLE001
        print(f"placement.kernels: not compiled ({type(exc).__name__}: {exc}); running the Python loops "
              f"(the same results, slower)", file=sys.stderr)


def load() -> SimpleNamespace | None:
    """Import numba and compile every kernel (or load it from the disk cache), then return them;
    None without numba. Thread-safe: a second caller waits for the first."""
    global _loaded
    with _lock:
        if _loaded is None:
            try:
                import numba
            except ImportError:
                _loaded = False
            else:
                _loaded = False  # until they are all ready; for good if compiling fails (raised to the caller)
                module = globals()
                for name in _HELPERS:  # first: kernels find them compiled by name; inlined (15-20% faster heaps)
                    module[name] = numba.njit(inline="always")(module[name])
                for name in _INNER + _KERNELS:
                    module[name] = _jit(numba, module[name])
                fast = SimpleNamespace(**{name: _one_signature(module[name]) for name in _KERNELS})
                _call_each(fast)  # compile (or load) them all now, not one by one in the middle of a search
                _loaded = fast
    return _loaded or None


def _jit(numba, func):
    """``func`` compiled with its machine code cached on disk; without the cache when numba finds no
    writable cache directory (a read-only install and home: numba raises at decoration), so such a
    process still gets the kernels, compiled afresh each time, instead of none."""
    try:
        return numba.njit(cache=True, nogil=True)(func)
    except RuntimeError:  # "cannot cache function ...: no locator available"
        return numba.njit(nogil=True)(func)


# ----- heaps on index arrays: h[lo:lo + size] holds item ids, ordered by (k0, k1, k2) of the id ----

def _before(a, b, k0, k1, k2):
    if k0[a] != k0[b]:
        return k0[a] < k0[b]
    if k1[a] != k1[b]:
        return k1[a] < k1[b]
    return k2[a] < k2[b]


def _push(h, lo, size, x, k0, k1, k2):
    """Add item ``x`` to the heap h[lo:lo + size] (the caller counts it)."""
    i = size
    while i > 0:
        parent = (i - 1) >> 1
        y = h[lo + parent]
        if not _before(x, y, k0, k1, k2):
            break
        h[lo + i] = y
        i = parent
    h[lo + i] = x


def _pop(h, lo, size, k0, k1, k2):
    """Remove and return the first item of the heap h[lo:lo + size] (the caller counts it)."""
    top = h[lo]
    size -= 1
    last = h[lo + size]
    i = 0
    while True:
        c = 2 * i + 1
        if c >= size:
            break
        if c + 1 < size and _before(h[lo + c + 1], h[lo + c], k0, k1, k2):
            c += 1
        if not _before(h[lo + c], last, k0, k1, k2):
            break
        h[lo + i] = h[lo + c]
        i = c
    if size > 0:
        h[lo + i] = last
    return top


def _ipush(h, size, x):
    """Add ``x`` to the min-heap of integers h[:size] (the caller counts it)."""
    i = size
    while i > 0:
        parent = (i - 1) >> 1
        y = h[parent]
        if y <= x:
            break
        h[i] = y
        i = parent
    h[i] = x


def _queue_pushed(w, sptr, snbr, next_c, pos, queued, listed, nl, heap, hsize):
    """Queue (by position) what node w pushes later, its successors and its device successor, each
    once (``queued``, noted in ``listed``); returns the new counts (listed, heap)."""
    for j in range(sptr[w], sptr[w + 1]):
        x = snbr[j]
        if not queued[x]:
            queued[x] = True
            listed[nl] = x
            nl += 1
            _ipush(heap, hsize, pos[x])
            hsize += 1
    x = next_c[w]
    if x >= 0 and not queued[x]:
        queued[x] = True
        listed[nl] = x
        nl += 1
        _ipush(heap, hsize, pos[x])
        hsize += 1
    return nl, hsize


def _ipop(h, size):
    """Remove and return the smallest integer of the heap h[:size] (the caller counts it)."""
    top = h[0]
    size -= 1
    last = h[size]
    i = 0
    while True:
        c = 2 * i + 1
        if c >= size:
            break
        if c + 1 < size and h[c + 1] < h[c]:
            c += 1
        if h[c] >= last:
            break
        h[i] = h[c]
        i = c
    if size > 0:
        h[i] = last
    return top


def _segments(dev, k):
    """Per device, the start of its slice of an n-long array (slices sized by its node count)."""
    lo = np.zeros(k + 1, dtype=np.int64)
    for v in range(dev.size):
        lo[dev[v] + 1] += 1
    for d in range(k):
        lo[d + 1] += lo[d]
    return lo


# ----- kernels -------------------------------------------------------------------------------------

def bottom_levels(ptr, nbr, delay_e, dur, topo_order):
    """placement.bounds.bottom_levels: longest path to a sink, successors in CSR order."""
    n = dur.size
    bl = np.zeros(n)
    for i in range(n - 1, -1, -1):
        v = topo_order[i]
        best = 0.0
        for j in range(ptr[v], ptr[v + 1]):
            x = delay_e[j] + bl[nbr[j]]
            if x > best:
                best = x
        bl[v] = best + dur[v]
    return bl


def kept_order_start(at, prev, ptr, nbr, delay_e, dur):
    """placement.incremental.kept_order_start's pass: each node in position order ``at``, after its
    inputs (predecessor CSR) and its device predecessor ``prev``."""
    n = dur.size
    start = np.zeros(n)
    fin = np.zeros(n)
    for i in range(n):
        v = at[i]
        p = prev[v]
        t = 0.0 if p < 0 else fin[p]
        for j in range(ptr[v], ptr[v + 1]):
            a = fin[nbr[j]] + delay_e[j]
            if a > t:
                t = a
        start[v] = t
        fin[v] = t + dur[v]
    return start


def avoid_jumps(at, pos, prev, pl, finish, dur, tail, ptr, nbr, comm_e):
    """IncrementalSchedule._avoiding's range maximum: per position i, the longest path through an
    edge a -> b (graph edges with ``comm_e`` across devices, device chains ``prev``) that jumps
    over it (pos[a] < i < pos[b]). As the numpy version, each edge's value covers its range by two
    blocks of 2^k positions and the levels are pushed down from the longest blocks to single
    positions; here the edges are first bucketed by k and the levels kept one row at a time (the
    full table of the numpy version is 29 MB at 200K nodes). Maxima: the same numbers."""
    n = dur.size
    levels = 1
    while (1 << levels) <= n:
        levels += 1
    count = np.zeros(levels + 1, dtype=np.int64)
    for rnd in range(2):  # first count the edges of each level, then place them
        if rnd == 1:
            for k in range(levels):
                count[k + 1] += count[k]
            total = count[levels]
            e_val = np.empty(total)
            e_lo = np.empty(total, dtype=np.int64)
            e_r = np.empty(total, dtype=np.int64)
            slot = count[:levels].copy()
        for i in range(n):
            b = at[i]
            db = pl[b]
            hi = pos[b] - 1
            for j in range(ptr[b], ptr[b + 1] + 1):
                if j < ptr[b + 1]:
                    a = nbr[j]
                else:
                    a = prev[b]
                    if a < 0:
                        break
                lo = pos[a] + 1
                if hi < lo:
                    continue
                k = 0
                while (2 << k) <= hi - lo + 1:
                    k += 1
                if rnd == 0:
                    count[k + 1] += 1
                    continue
                val = finish[a]
                if j < ptr[b + 1] and pl[a] != db:
                    val += comm_e[j]
                s = slot[k]
                e_val[s] = val + dur[b] + tail[b]
                e_lo[s] = lo
                e_r[s] = hi - (1 << k) + 1
                slot[k] = s + 1
    row = np.zeros(n + 1)
    for lev in range(levels - 1, -1, -1):
        if lev < levels - 1:  # push the level above down: its blocks of 2^(lev+1) are two of 2^lev
            half = 1 << lev
            up = row
            row = up.copy()
            np.maximum(row[half:], up[:n + 1 - half], row[half:])
        for e in range(count[lev], count[lev + 1]):
            v = e_val[e]
            if v > row[e_lo[e]]:
                row[e_lo[e]] = v
            if v > row[e_r[e]]:
                row[e_r[e]] = v
    return row[:n].copy()

def merge_order(old, changed, added, k1, k2):
    """``old`` (every node once, sorted by (k1, k2) before the change) without the nodes flagged
    ``changed``, merged with ``added`` (exactly those nodes, sorted by the new (k1, k2)): every node
    sorted by (k1, k2), the order np.lexsort((k2, k1)) gives when the pairs are unique. Why: after
    an accepted move only the re-timed nodes' keys changed; a merge costs O(n), a sort O(n log n)."""
    n = old.size
    out = np.empty(n, dtype=np.int64)
    i = 0
    j = 0
    for o in range(n):
        while i < n and changed[old[i]]:
            i += 1
        if j < added.size and (i >= n or k1[added[j]] < k1[old[i]]
                               or (k1[added[j]] == k1[old[i]] and k2[added[j]] < k2[old[i]])):
            out[o] = added[j]
            j += 1
        else:
            out[o] = old[i]
            i += 1
    return out


def order_ties(nodes, key, tie):
    """``nodes`` sorted stably by ``key`` (numpy's stable argsort: fast on the nearly sorted keys of
    a cone): each run of equal keys re-sorted by ``tie`` (unique), in place, giving the order by
    (key, tie) that np.lexsort((tie[nodes], key[nodes])) gives."""
    i = 0
    m = nodes.size
    while i < m:
        j = i + 1
        while j < m and key[nodes[j]] == key[nodes[i]]:
            j += 1
        if j - i > 16:
            run = nodes[i:j].copy()
            ties = np.empty(j - i, dtype=np.int64)
            for a in range(j - i):
                ties[a] = tie[run[a]]
            o = np.argsort(ties)
            for a in range(j - i):
                nodes[i + a] = run[o[a]]
        else:
            for a in range(i + 1, j):  # insertion sort of a short run
                v = nodes[a]
                b = a - 1
                while b >= i and tie[nodes[b]] > tie[v]:
                    nodes[b + 1] = nodes[b]
                    b -= 1
                nodes[b + 1] = v
        i = j


def device_chains(at, pl, k):
    """Each device's nodes in position order ``at`` (``at[np.argsort(pl[at], kind="stable")]`` by
    counting), each device's first slot in it, and every node's device predecessor and successor
    (-1: none): the chains of IncrementalSchedule.reset."""
    n = at.size
    lo = _segments(pl, k)
    fill = lo[:k].copy()
    seq = np.empty(n, dtype=np.int64)
    prev = np.full(n, -1, dtype=np.int64)
    nxt = np.full(n, -1, dtype=np.int64)
    for i in range(n):
        v = at[i]
        d = pl[v]
        c = fill[d]
        if c > lo[d]:
            u = seq[c - 1]
            prev[v] = u
            nxt[u] = v
        seq[c] = v
        fill[d] = c + 1
    return seq, lo, prev, nxt


def retime_order(at, pos, prev, nxt, pl, start, dur, pptr, pnbr, pcomm, sptr, snbr):
    """The earliest schedule of the order ``at`` (positions ``pos``; device chains ``prev`` /
    ``nxt``) computed from ``start``, a schedule believed to be it: the nodes whose start is not the
    latest of their input arrivals and device predecessor's finish are re-timed, and what they
    push, in position order, with kept_order_start's sums (``start`` is changed in place). Returns
    (1, the re-timed nodes), or (0, none) when the positions are not a topological order of the
    graph (then ``start`` is untouched). Why: a reference that is not its own order's fixpoint
    differs from it in a node or two (zero-time nodes tied at one start); a full pass re-times all."""
    n = dur.size
    heap = np.empty(n, dtype=np.int64)
    hsize = 0
    queued = np.zeros(n, dtype=np.bool_)
    listed = np.empty(n, dtype=np.int64)
    nl = 0
    for v in range(n):
        t = 0.0
        p = prev[v]
        if p >= 0:
            t = start[p] + dur[p]
        dv = pl[v]
        for j in range(pptr[v], pptr[v + 1]):
            u = pnbr[j]
            if pos[u] >= pos[v]:
                return 0, np.empty(0, dtype=np.int64)
            a = start[u] + dur[u]
            if pl[u] != dv:
                a += pcomm[j]
            if a > t:
                t = a
        if t != start[v]:
            queued[v] = True
            listed[nl] = v
            nl += 1
            _ipush(heap, hsize, pos[v])
            hsize += 1
    nodes = np.empty(n, dtype=np.int64)
    k = 0
    while hsize > 0:
        w = at[_ipop(heap, hsize)]
        hsize -= 1
        p = prev[w]
        t = 0.0 if p < 0 else start[p] + dur[p]
        dw = pl[w]
        for j in range(pptr[w], pptr[w + 1]):
            u = pnbr[j]
            a = start[u] + dur[u]
            if pl[u] != dw:
                a += pcomm[j]
            if a > t:
                t = a
        if t != start[w]:
            start[w] = t
            nodes[k] = w
            k += 1
            nl, hsize = _queue_pushed(w, sptr, snbr, nxt, pos, queued, listed, nl, heap, hsize)
    return 1, nodes[:k].copy()


def tails(seq, pl, dur, ptr, nbr, comm_e, nxt):
    """IncrementalSchedule._tails: in reverse position order, the longest path from each finish to
    the end (device successor first, then successors in CSR order, strictly longer wins)."""
    n = dur.size
    tail = np.zeros(n)
    tail_next = np.full(n, -1, dtype=np.int64)
    through = np.zeros(n)
    for i in range(seq.size - 1, -1, -1):
        v = seq[i]
        best = 0.0
        arg = -1
        x = nxt[v]
        if x >= 0:
            best = through[x]
            arg = x
        dv = pl[v]
        for j in range(ptr[v], ptr[v + 1]):
            x = nbr[j]
            t = through[x] + comm_e[j] if pl[x] != dv else through[x]
            if t > best:
                best = t
                arg = x
        tail[v] = best
        tail_next[v] = arg
        through[v] = dur[v] + best
    return tail, tail_next


def _avoids(v, tin, lo, hi):
    """placement.incremental._Avoids.__call__: v's root path meets none of the intervals."""
    t = tin[v]
    a, b = 0, lo.size  # bisect_right(lo, t)
    while a < b:
        mid = (a + b) >> 1
        if t < lo[mid]:
            b = mid
        else:
            a = mid + 1
    i = a - 1
    return i < 0 or t >= hi[i]


def cone(seeds, at, pos, dev, fin, base_s, base_f, dur, pptr, pnbr, pcomm, sptr, snbr, prev_c, next_c, tail,
         moved, has_lb, t_lb, tin, lo, hi, cutoff, by_finish, queued, changed):
    """IncrementalSchedule.try_move's cone: the nodes re-timed in position order from ``seeds``,
    with the move's devices ``dev``, chains ``prev_c`` / ``next_c`` and the base finish times in
    ``fin`` (scratch arrays: ``fin``, ``queued`` and ``changed`` are restored before returning).
    Returns (stopped at the cutoff, makespan or its bound, nodes visited, the re-timed nodes in
    the order they were re-timed, their new starts)."""
    n = dur.size
    heap = np.empty(n, dtype=np.int64)
    hsize = 0
    listed = np.empty(n, dtype=np.int64)  # every node queued, to clear the flags
    nq = 0
    for i in range(seeds.size):
        v = seeds[i]
        queued[v] = True
        listed[nq] = v
        nq += 1
        _ipush(heap, hsize, pos[v])
        hsize += 1
    nodes = np.empty(n, dtype=np.int64)
    starts = np.empty(n)
    k = 0
    count = 0
    stopped = False
    value = 0.0
    while hsize > 0:
        w = at[_ipop(heap, hsize)]
        hsize -= 1
        count += 1
        dw = dev[w]
        p = prev_c[w]
        t = 0.0 if p < 0 else fin[p]
        for j in range(pptr[w], pptr[w + 1]):
            u = pnbr[j]
            a = fin[u]
            if dev[u] != dw:
                a += pcomm[j]
            if a > t:
                t = a
        if t == base_s[w]:
            if fin[w] + tail[w] >= cutoff and not moved[w] and _avoids(w, tin, lo, hi):
                stopped, value = True, fin[w] + tail[w]
                break
        else:
            nodes[k] = w
            starts[k] = t
            k += 1
            changed[w] = True
            fw = t + dur[w]
            fin[w] = fw
            if fw + tail[w] >= cutoff and _avoids(w, tin, lo, hi):
                stopped, value = True, fw + tail[w]
                break
            nq, hsize = _queue_pushed(w, sptr, snbr, next_c, pos, queued, listed, nq, heap, hsize)
        if has_lb[w] and t + dur[w] + t_lb[w] >= cutoff:  # a moved node: its new start is exact here
            stopped, value = True, t + dur[w] + t_lb[w]
            break
    if not stopped:
        value = 0.0
        for i in range(k):  # the first largest, as Python's max over the changed nodes
            if i == 0 or fin[nodes[i]] > value:
                value = fin[nodes[i]]
        for i in range(by_finish.size):  # the latest finish among unchanged nodes
            v = by_finish[i]
            if not changed[v]:
                if fin[v] > value:
                    value = fin[v]
                break
    for i in range(k):
        fin[nodes[i]] = base_f[nodes[i]]
        changed[nodes[i]] = False
    for i in range(nq):
        queued[listed[i]] = False
    return stopped, value, count, nodes[:k].copy(), starts[:k].copy()


def _outer(nodes, tin, end, lo, hi):
    """placement.incremental._Avoids.__init__: the outermost of the (nested or disjoint) Euler
    intervals of ``nodes``, sorted, written to lo / hi; returns how many."""
    m = nodes.size
    key = np.empty(m, dtype=np.int64)
    for i in range(m):
        key[i] = tin[nodes[i]]
    order = np.argsort(key)  # preorder numbers are unique: any sort gives this order
    cnt = 0
    for i in range(m):
        v = nodes[order[i]]
        if cnt == 0 or tin[v] >= hi[cnt - 1]:
            lo[cnt] = tin[v]
            hi[cnt] = end[v]
            cnt += 1
    return cnt


def _dropped(m, dm, start_lb, drop, pl, dev, dur, f, sptr, snbr, scomm, moved, prev_c, next_b, lbv, has_lb):
    """IncrementalSchedule._drop: how much earlier than in the base a constraint leaving moved node
    ``m`` can let a node start (the same sums and comparisons)."""
    old_f = f[m]
    new_f = start_lb + dur[m]
    worst = 0.0
    for j in range(sptr[m], sptr[m + 1]):
        x = snbr[j]
        if moved[x]:
            continue
        c = scomm[j]
        dx = pl[x]
        gone = old_f + (c if dx != pl[m] else 0.0) - new_f - (c if dx != dm else 0.0)
        if gone > worst:
            worst = gone
    q = next_b[m]
    if q >= 0 and not moved[q]:
        y = prev_c[q]
        if y < 0:
            got = 0.0
        elif has_lb[y]:
            got = lbv[y] + dur[y]
        elif moved[y]:
            got = dur[y]
        else:
            got = f[y] - drop
            if not got > dur[y]:  # Python's max(dur[y], f[y] - drop)
                got = dur[y]
        if old_f - got > worst:
            worst = old_f - got
    return worst


def _early(u, drop, f, dur, tin, lo, hi):
    """A lower bound of unmoved node u's new finish: its old finish if its head path avoids the
    moved nodes (``lo`` / ``hi``), else that less ``drop`` (at least its duration)."""
    if _avoids(u, tin, lo, hi):
        return f[u]
    a = f[u] - drop
    return a if a > dur[u] else dur[u]


def move_bound(order, pos, at, pl, dev, base_s, f, dur, pptr, pnbr, pcomm, sptr, snbr, scomm, prev_c, next_c, next_b,
               tail, moved, t_lb, has_tlb, lbv, has_lb, queued, head_tin, hlo, hhi, tail_tin, tlo, thi, witness,
               wlen, before, after, avoid, last_node, makespan, bridged, budget, cutoff):
    """IncrementalSchedule._bound on arrays, the moved nodes in position order ``order``, the
    move written into ``dev`` / ``moved`` / ``prev_c`` / ``next_c``: (bound, nodes visited), the
    moved nodes' tail bounds left in ``t_lb`` (flags ``has_tlb``) when the bound stays below the
    cutoff. The same sums, maxima and visiting order; ``lbv`` / ``has_lb`` / ``queued`` are
    scratch, cleared before returning."""
    n = dur.size
    nm = order.size
    best = makespan if _avoids(last_node, head_tin, hlo, hhi) else 0.0
    if best < cutoff:
        for i in range(witness.size):
            w = witness[i]
            if wlen[i] >= cutoff and not moved[w] and _avoids(w, head_tin, hlo, hhi) and _avoids(w, tail_tin, tlo, thi):
                return wlen[i], 0
    x = before[pos[order[0]]]
    if x > best:
        best = x
    x = after[pos[order[nm - 1]] + 1]
    if x > best:
        best = x
    if nm == 1:
        x = avoid[order[0]]
        if x > best:
            best = x
    for i in range(bridged.size):
        b = bridged[i]
        a = prev_c[b]
        if a >= 0 and not moved[a] and _avoids(a, head_tin, hlo, hhi) and _avoids(b, tail_tin, tlo, thi):
            x = f[a] + dur[b] + tail[b]
            if x > best:
                best = x
    if best >= cutoff:
        return best, 0
    for i in range(nm - 1, -1, -1):  # the moved nodes' new tails, from below, backward
        m = order[i]
        dm = dev[m]
        t = 0.0
        x = next_c[m]
        if x >= 0:
            t = dur[x] + (t_lb[x] if moved[x] else (tail[x] if _avoids(x, tail_tin, tlo, thi) else 0.0))
        for j in range(sptr[m], sptr[m + 1]):
            x = snbr[j]
            if moved[x]:
                b = dur[x] + t_lb[x]
            else:
                b = dur[x] + (tail[x] if _avoids(x, tail_tin, tlo, thi) else 0.0)
            if dev[x] != dm:
                b += scomm[j]
            if b > t:
                t = b
        t_lb[m] = t
        has_tlb[m] = True
    if nm > 1:  # the paths through each moved node alone, in position order
        drop = 0.0
        stop = False
        for i in range(nm):
            m = order[i]
            dm = dev[m]
            u = prev_c[m]
            if u < 0:
                t = 0.0
            elif moved[u]:
                t = lbv[u] + dur[u] if has_lb[u] else dur[u]
            elif drop == 0.0:
                t = f[u]
            else:
                t = _early(u, drop, f, dur, head_tin, hlo, hhi)
            for j in range(pptr[m], pptr[m + 1]):
                u = pnbr[j]
                if moved[u]:
                    a = lbv[u] + dur[u] if has_lb[u] else dur[u]
                    if dev[u] != dm:
                        a += pcomm[j]
                else:
                    a = f[u] if drop == 0.0 else _early(u, drop, f, dur, head_tin, hlo, hhi)
                    if pl[u] != dm:
                        a += pcomm[j]
                if a > t:
                    t = a
            lbv[m] = t
            has_lb[m] = True
            if t + dur[m] + t_lb[m] > best:
                best = t + dur[m] + t_lb[m]
                if best >= cutoff:
                    stop = True
                    break
            if i < nm - 1:
                drop += _dropped(m, dm, t, drop, pl, dev, dur, f, sptr, snbr, scomm, moved, prev_c, next_b, lbv, has_lb)
        for i in range(nm):
            has_lb[order[i]] = False
        if stop:
            return best, 0
    # Forward from the moved nodes through the nodes they push later (a heap of positions).
    heap = np.empty(n, dtype=np.int64)
    hsize = 0
    listed = np.empty(n, dtype=np.int64)  # nodes given a bound, to clear the flags
    nl = 0
    queue_list = np.empty(n, dtype=np.int64)
    nq = 0
    for i in range(nm):
        heap[hsize] = pos[order[i]]  # increasing: already a heap
        hsize += 1
        queued[order[i]] = True
        queue_list[nq] = order[i]
        nq += 1
    count = 0
    drop = 0.0
    while hsize > 0 and count < budget:
        w = at[_ipop(heap, hsize)]
        hsize -= 1
        count += 1
        dw = dev[w]
        if moved[w]:
            t = 0.0
        else:
            t = base_s[w] if _avoids(w, head_tin, hlo, hhi) else base_s[w] - drop
        u = prev_c[w]
        if u >= 0:
            if has_lb[u]:
                a = lbv[u] + dur[u]
            elif moved[u]:
                a = dur[u]
            else:
                a = _early(u, drop, f, dur, head_tin, hlo, hhi)
            if a > t:
                t = a
        for j in range(pptr[w], pptr[w + 1]):
            u = pnbr[j]
            if has_lb[u]:
                a = lbv[u] + dur[u]
            elif moved[u]:
                a = dur[u]
            else:
                a = _early(u, drop, f, dur, head_tin, hlo, hhi)
            if dev[u] != dw:
                a += pcomm[j]
            if a > t:
                t = a
        if moved[w]:
            through = t + dur[w] + t_lb[w]
            lbv[w] = t
            if not has_lb[w]:
                has_lb[w] = True
                listed[nl] = w
                nl += 1
            drop += _dropped(w, dw, t, drop, pl, dev, dur, f, sptr, snbr, scomm, moved, prev_c, next_b, lbv, has_lb)
        elif t > base_s[w]:
            through = t + dur[w] + tail[w] if _avoids(w, tail_tin, tlo, thi) else 0.0
            lbv[w] = t
            has_lb[w] = True
            listed[nl] = w
            nl += 1
        else:
            continue
        if through > best:
            best = through
            if best >= cutoff:
                break
        nq, hsize = _queue_pushed(w, sptr, snbr, next_c, pos, queued, queue_list, nq, heap, hsize)
    for i in range(nl):
        has_lb[listed[i]] = False
    for i in range(nq):
        queued[queue_list[i]] = False
    return best, count


def move_trial(mv, md, cutoff, bounded, ready, budget, at, pos, pl, base_s, base_f, dur, pptr, pnbr, pcomm, sptr, snbr,
               scomm, prev_b, next_b, dseq, dlo, tail, by_finish, head_tin, head_end, tail_tin, tail_end, witness, wlen,
               before, after, avoid, last_node, makespan, dev, prev_c, next_c, moved, t_lb, has_tlb, lbv, has_lb, fin,
               queued, changed, mark):
    """IncrementalSchedule.try_move on arrays (its Python code is the reference): the moved nodes
    ``mv`` (each to device ``md``, all off their base device) unlinked from their chains and
    linked into their new ones, then :func:`move_bound` when ``bounded`` (a finite cutoff), then
    :func:`cone`. The move is written into the scratch arrays ``dev`` / ``moved`` / ``prev_c`` /
    ``next_c`` (copies of the base) and taken out again before returning. Returns (0 complete,
    1 stopped by the bound, 2 stopped in the cone; makespan or its bound; nodes visited; the
    re-timed nodes in order; their new starts)."""
    nm = mv.size
    k = dlo.size - 1
    head_c = np.empty(k, dtype=np.int64)
    for d in range(k):
        head_c[d] = dseq[dlo[d]] if dlo[d] < dlo[d + 1] else -1
    touched = np.empty(6 * nm + 1, dtype=np.int64)
    nt = 0
    for i in range(nm):
        v = mv[i]
        dev[v] = md[i]
        moved[v] = True
    seeds = np.empty(dur.size, dtype=np.int64)
    ns = 0
    bridged = np.empty(nm, dtype=np.int64)
    nb = 0
    for i in range(nm):  # unlink them from their old chains (any order gives the same chains)
        v = mv[i]
        a = prev_c[v]
        b = next_c[v]
        if a >= 0:
            next_c[a] = b
            touched[nt] = a
            nt += 1
        else:
            head_c[pl[v]] = b
        if b >= 0:
            prev_c[b] = a
            touched[nt] = b
            nt += 1
            if not mark[b]:
                mark[b] = True
                seeds[ns] = b
                ns += 1
    for i in range(ns):
        if not moved[seeds[i]]:
            bridged[nb] = seeds[i]
            nb += 1
    key = np.empty(nm, dtype=np.int64)
    for i in range(nm):
        key[i] = pos[mv[i]]
    order = mv[np.argsort(key)]  # positions are unique
    last_v = np.full(k, -1, dtype=np.int64)
    last_anchor = np.full(k, -1, dtype=np.int64)
    has_last = np.zeros(k, dtype=np.bool_)
    for i in range(nm):  # link them into their new chains in position order
        v = order[i]
        d = dev[v]
        a, b = dlo[d], dlo[d + 1]  # bisect_left over the positions of d's base chain
        pv = pos[v]
        while a < b:
            mid = (a + b) >> 1
            if pos[dseq[mid]] < pv:
                a = mid + 1
            else:
                b = mid
        j = a - 1
        while j >= dlo[d] and moved[dseq[j]]:
            j -= 1
        anchor = dseq[j] if j >= dlo[d] else -1
        if has_last[d] and last_anchor[d] == anchor:
            left = last_v[d]
        else:
            left = anchor
        right = next_c[left] if left >= 0 else head_c[d]
        prev_c[v] = left
        next_c[v] = right
        touched[nt] = v
        nt += 1
        if left >= 0:
            next_c[left] = v
            touched[nt] = left
            nt += 1
        else:
            head_c[d] = v
        if right >= 0:
            prev_c[right] = v
            touched[nt] = right
            nt += 1
            if not mark[right]:
                mark[right] = True
                seeds[ns] = right
                ns += 1
        has_last[d] = True
        last_v[d] = v
        last_anchor[d] = anchor
        if not mark[v]:
            mark[v] = True
            seeds[ns] = v
            ns += 1
        for j in range(sptr[v], sptr[v + 1]):
            x = snbr[j]
            if not mark[x]:
                mark[x] = True
                seeds[ns] = x
                ns += 1
    for i in range(ns):
        mark[seeds[i]] = False
    hlo = np.empty(nm, dtype=np.int64)
    hhi = np.empty(nm, dtype=np.int64)
    tlo = np.empty(nm, dtype=np.int64)
    thi = np.empty(nm, dtype=np.int64)
    n_tail = _outer(mv, tail_tin, tail_end, tlo, thi) if ready and nm > 0 else 0
    kind = 0
    value = 0.0
    count = 0
    nodes = np.empty(0, dtype=np.int64)
    starts = np.empty(0)
    if bounded and nm > 0:
        n_head = _outer(mv, head_tin, head_end, hlo, hhi)
        value, count = move_bound(order, pos, at, pl, dev, base_s, base_f, dur, pptr, pnbr, pcomm, sptr, snbr, scomm,
                                  prev_c, next_c, next_b, tail, moved, t_lb, has_tlb, lbv, has_lb, queued, head_tin,
                                  hlo[:n_head], hhi[:n_head], tail_tin, tlo[:n_tail], thi[:n_tail], witness, wlen,
                                  before, after, avoid, last_node, makespan, bridged[:nb], budget, cutoff)
        if value >= cutoff:
            kind = 1
    if kind == 0:
        stopped, value, count, nodes, starts = cone(seeds[:ns], at, pos, dev, fin, base_s, base_f, dur, pptr, pnbr,
                                                    pcomm, sptr, snbr, prev_c, next_c, tail, moved, has_tlb, t_lb,
                                                    tail_tin, tlo[:n_tail], thi[:n_tail], cutoff, by_finish, queued,
                                                    changed)
        if stopped:
            kind = 2
    for i in range(nt):  # back to the base
        x = touched[i]
        prev_c[x] = prev_b[x]
        next_c[x] = next_b[x]
    for i in range(nm):
        v = mv[i]
        dev[v] = pl[v]
        moved[v] = False
        has_tlb[v] = False
    return kind, value, count, nodes, starts


def _root(parent, i):
    while parent[i] != i:
        parent[i] = parent[parent[i]]
        i = parent[i]
    return i


def spread_pieces(ch, devc, sptr, snbr, units_of, dur, need, where):
    """solvers.refine.spread_runs' pieces: the chain ``ch`` (first node first, ``devc`` its
    devices) cut into runs on one device, each run's nodes grouped by the connected components of
    the graph edges among them (pieces in order of their first node, nodes in run order); only
    runs of two pieces or more. Returns (per run: its first and last chain index; per piece: its
    run, its nodes (CSR), its sorted distinct units (CSR), the sum of its nodes' ``dur`` and of
    its units' ``need``, each summed one after the other, as Python's ``sum``). ``where``: an
    n-long scratch array of -1, left so."""
    m = ch.size
    run_first = np.empty(m, dtype=np.int64)
    run_last = np.empty(m, dtype=np.int64)
    piece_run = np.empty(m, dtype=np.int64)
    piece_ptr = np.zeros(m + 1, dtype=np.int64)
    nodes = np.empty(m, dtype=np.int64)
    unit_ptr = np.zeros(m + 1, dtype=np.int64)
    units = np.empty(m, dtype=np.int64)
    length = np.empty(m)
    size = np.empty(m)
    parent = np.empty(m, dtype=np.int64)
    label = np.full(m, -1, dtype=np.int64)
    fill = np.empty(m, dtype=np.int64)
    nr = 0
    npc = 0
    nn = 0
    nu = 0
    i = 0
    while i < m:
        j = i
        while j + 1 < m and devc[j + 1] == devc[i]:
            j += 1
        lo, hi = i, j + 1
        i = j + 1
        if hi - lo < 2:
            continue
        for t in range(lo, hi):
            where[ch[t]] = t
            parent[t] = t
        for t in range(lo, hi):
            v = ch[t]
            for e in range(sptr[v], sptr[v + 1]):
                s = where[snbr[e]]
                if s >= 0:
                    parent[_root(parent, s)] = _root(parent, t)
        comps = 0
        for t in range(lo, hi):
            where[ch[t]] = -1
            r = _root(parent, t)
            if label[r] < 0:
                label[r] = comps
                comps += 1
        if comps >= 2:
            run_first[nr] = lo
            run_last[nr] = hi - 1
            count = np.zeros(comps + 1, dtype=np.int64)
            for t in range(lo, hi):
                count[label[_root(parent, t)] + 1] += 1
            for c in range(comps):
                count[c + 1] += count[c]
                piece_ptr[npc + c + 1] = nn + count[c + 1]
                piece_run[npc + c] = nr
            for c in range(comps):
                fill[c] = nn + count[c]
            for t in range(lo, hi):
                c = label[_root(parent, t)]
                nodes[fill[c]] = ch[t]
                fill[c] += 1
            for c in range(comps):
                a, b = piece_ptr[npc + c], piece_ptr[npc + c + 1]
                total = 0.0
                for x in range(a, b):
                    total += dur[nodes[x]]
                length[npc + c] = total
                us = np.empty(b - a, dtype=np.int64)
                for x in range(a, b):
                    us[x - a] = units_of[nodes[x]]
                us.sort()
                total = 0.0
                for x in range(b - a):
                    if x == 0 or us[x] != us[x - 1]:
                        units[nu] = us[x]
                        nu += 1
                        total += need[us[x]]
                unit_ptr[npc + c + 1] = nu
                size[npc + c] = total
            nn = piece_ptr[npc + comps]
            npc += comps
            nr += 1
        for t in range(lo, hi):
            label[t] = -1
    return (run_first[:nr].copy(), run_last[:nr].copy(), piece_run[:npc].copy(), piece_ptr[:npc + 1].copy(),
            nodes[:nn].copy(), unit_ptr[:npc + 1].copy(), units[:nu].copy(), length[:npc].copy(), size[:npc].copy())


def _busy_before(d, t, blo, bs, bf, bcum):
    """How long device d computes before time t (solvers.refine._window_busy's ``before``): its
    nodes ``bs`` / ``bf`` (start, finish) from ``blo[d]``, ``bcum`` their running sums of
    durations (one more entry per device, from ``blo[d] + d``)."""
    a, b = blo[d], blo[d + 1]
    lo, hi = a, b  # bisect_right(bs[a:b], t)
    while lo < hi:
        mid = (lo + hi) >> 1
        if t < bs[mid]:
            hi = mid
        else:
            lo = mid + 1
    i = lo - a
    if i == 0:
        return 0.0
    x = bf[a + i - 1]
    if not x < t:  # Python's min(t, f)
        x = t
    x = x - bs[a + i - 1]
    if not x > 0.0:  # Python's max(0.0, x)
        x = 0.0
    return bcum[a + d + i - 1] + x


def spread_assign(run_first, run_last, piece_run, unit_ptr, units, length, size, ch, devc, start, finish, mask,
                  blo, bs, bf, bcum, load, cap, static, moved):
    """solvers.refine.spread_runs' greedy loop over the pieces of :func:`spread_pieces` (their
    lengths and sizes as the caller summed them): per run, each piece, longest first (stable),
    goes to the allowed device whose window holds the least compute so far (the run's own device
    first among equals), within capacity under the static model. ``load`` is updated; ``moved``
    (per unit, all False) is scratch, left so. Returns the moved units and their devices, in the
    order the Python loop adds them."""
    k = load.size
    out_u = np.empty(units.size, dtype=np.int64)
    out_d = np.empty(units.size, dtype=np.int64)
    no = 0
    window = np.empty(k)
    p0 = 0
    for r in range(run_first.size):
        p1 = p0
        while p1 < piece_run.size and piece_run[p1] == r:
            p1 += 1
        first, last = run_first[r], run_last[r]
        a = devc[first]
        lo, hi = start[ch[first]], finish[ch[last]]
        for d in range(k):
            window[d] = _busy_before(d, hi, blo, bs, bf, bcum) - _busy_before(d, lo, blo, bs, bf, bcum)
        total = 0.0
        for c in range(p0, p1):
            total += length[c]
        window[a] -= total
        order = np.argsort(-length[p0:p1], kind="mergesort")
        for oi in range(order.size):
            c = p0 + order[oi]
            u0, u1 = unit_ptr[c], unit_ptr[c + 1]
            skip = False
            for x in range(u0, u1):
                if moved[units[x]]:
                    skip = True
                    break
            if skip:
                continue
            sz = size[c]
            best = -1
            for d in range(k):
                ok = True
                for x in range(u0, u1):
                    if not mask[units[x], d]:
                        ok = False
                        break
                if not ok or not (d == a or not static or load[d] + sz <= cap[d]):
                    continue
                if best < 0 or window[d] < window[best] or (window[d] == window[best] and d == a and best != a):
                    best = d
            if best < 0:
                raise ValueError("spread_runs: a piece has no allowed device")
            window[best] += length[c]
            if best != a:
                load[best] += sz
                load[a] -= sz
                for x in range(u0, u1):
                    moved[units[x]] = True
                    out_u[no] = units[x]
                    out_d[no] = best
                    no += 1
        p0 = p1
    for i in range(no):
        moved[out_u[i]] = False
    return out_u[:no].copy(), out_d[:no].copy()


def chain_walk(v, start, finish, prev, pptr, pnbr, delay_e, eps):
    """solvers.refine.critical_chain's walk from node ``v``: back through each node's decider (the
    first input, in predecessor order, of latest arrival if it arrives by the start less ``eps``,
    else the device predecessor ``prev`` if it finishes by then), until a node starting at 0, a
    node without one, or a node already on the chain."""
    n = start.size
    seen = np.zeros(n, dtype=np.bool_)
    chain = np.empty(n, dtype=np.int64)
    chain[0] = v
    seen[v] = True
    k = 1
    while start[v] > eps:
        late = start[v] - eps
        nxt = -1
        p = prev[v]
        if p >= 0 and finish[p] >= late:
            nxt = p
        a, b = pptr[v], pptr[v + 1]
        if b > a:
            top = finish[pnbr[a]] + delay_e[a]
            first = a
            for j in range(a + 1, b):
                x = finish[pnbr[j]] + delay_e[j]
                if x > top:
                    top = x
                    first = j
            if top >= late:
                nxt = pnbr[first]
        if nxt < 0 or seen[nxt]:
            break
        v = nxt
        seen[v] = True
        chain[k] = v
        k += 1
    return chain[:k].copy()


def by_parent(ranked, parent):
    """The nodes ``ranked`` (every node once, in rank order) stably sorted by ``parent`` (-1 first):
    np.lexsort((rank, parent)) by counting, for :func:`forest_intervals`."""
    n = parent.size
    slot = np.zeros(n + 2, dtype=np.int64)
    for v in range(n):
        slot[parent[v] + 2] += 1
    for i in range(n + 1):
        slot[i + 1] += slot[i]
    seq = np.empty(n, dtype=np.int64)
    for i in range(n):
        v = ranked[i]
        k = parent[v] + 1
        seq[slot[k]] = v
        slot[k] += 1
    return seq


def forest_intervals(seq, parent):
    """placement.incremental._forest_intervals: preorder numbers ``tin`` and ``tin + subtree size``
    of a forest walked depth-first, roots and each node's children in the order of ``seq`` (the
    nodes sorted by (parent, rank): roots first); the same integers as its pointer doubling."""
    n = parent.size
    count = np.zeros(n, dtype=np.int64)  # children per node
    first = np.full(n, -1, dtype=np.int64)  # where a node's children start in seq
    roots = 0
    for i in range(n - 1, -1, -1):
        p = parent[seq[i]]
        if p < 0:
            roots += 1
        else:
            count[p] += 1
            first[p] = i
    tin = np.empty(n, dtype=np.int64)
    walk = np.empty(n, dtype=np.int64)  # the nodes in preorder
    stack = np.empty(n, dtype=np.int64)
    t = 0
    for r in range(roots):
        stack[0] = seq[r]
        top = 1
        while top > 0:
            top -= 1
            v = stack[top]
            tin[v] = t
            walk[t] = v
            t += 1
            for j in range(first[v] + count[v] - 1, first[v] - 1, -1):  # the first child on top
                stack[top] = seq[j]
                top += 1
    size = np.ones(n, dtype=np.int64)
    for i in range(n - 1, -1, -1):
        v = walk[i]
        if parent[v] >= 0:
            size[parent[v]] += size[v]
    return tin, tin + size


def release_starts(ptr, nbr, dly, indeg, dur, release, nxt):
    """Kahn's pass (stack order) over a graph given as one CSR (for formulations.common.longest_starts,
    as formulations.common.retime calls it, with release times; for placement.evaluator's ordered
    schedule with waits, the graph plus the device chains and waits) and, besides it, each node's
    one successor ``nxt[v]`` (-1 for none) reached with no delay (placement.evaluator's ordered
    schedule: the device chains, with no union CSR to build; ``indeg`` counts those edges too):
    each node starts when its inputs have arrived, no earlier than ``release``; ``done`` < n when
    the edges close a cycle (an order against the graph). Every start is a maximum of the same
    sums whichever way an edge is given, so the floats do not depend on it."""
    n = dur.size
    indeg = indeg.copy()
    start = release.copy()
    stack = np.empty(n, dtype=np.int64)
    top = 0
    for v in range(n):
        if indeg[v] == 0:
            stack[top] = v
            top += 1
    done = 0
    while top > 0:
        top -= 1
        v = stack[top]
        done += 1
        f = start[v] + dur[v]
        for j in range(ptr[v], ptr[v + 1] + 1):  # the CSR's edges, then the chain successor
            if j < ptr[v + 1]:
                w = nbr[j]
                t = f + dly[j]
            else:
                w = nxt[v]
                if w < 0:
                    break
                t = f
            if t > start[w]:
                start[w] = t
            indeg[w] -= 1
            if indeg[w] == 0:
                stack[top] = w
                top += 1
    return start, done


def fifo_schedule(ptr, nbr, delay_e, indeg, rank, dur, dev, k):
    """placement.evaluator._ready_simulation: each device runs its earliest-ready node (ties: rank)
    whenever idle; offers (start, head's rank, device, version) in one global heap."""
    n = dur.size
    m = nbr.size
    indeg = indeg.copy()
    ready = np.zeros(n)
    start = np.zeros(n)
    finish = np.zeros(n)
    rank_f = np.zeros(n)  # queues order by (ready, rank): k1 unused
    lo = _segments(dev, k)
    queue = np.empty(n, dtype=np.int64)
    qsize = np.zeros(k, dtype=np.int64)
    free = np.zeros(k)
    version = np.zeros(k, dtype=np.int64)
    cap = n + m + k + 1  # one offer per device at the start, then at most one per scheduled node and per edge
    big = cap + 1
    o_s = np.empty(cap)
    o_tie = np.empty(cap)
    o_key = np.empty(cap, dtype=np.int64)  # device * big + version: (device, version) in order
    o_dev = np.empty(cap, dtype=np.int64)
    o_ver = np.empty(cap, dtype=np.int64)
    offers = np.empty(cap, dtype=np.int64)
    n_off = 0
    hsize = 0
    for v in range(n):
        if indeg[v] == 0:
            d = dev[v]
            _push(queue, lo[d], qsize[d], v, ready, rank_f, rank)
            qsize[d] += 1
    for d in range(k):
        if qsize[d] > 0:
            version[d] += 1
            h = queue[lo[d]]
            o_s[n_off] = ready[h]
            o_tie[n_off] = rank[h]
            o_key[n_off] = d * big + version[d]
            o_dev[n_off] = d
            o_ver[n_off] = version[d]
            _push(offers, 0, hsize, n_off, o_s, o_tie, o_key)
            hsize += 1
            n_off += 1
    done = 0
    while hsize > 0:
        e = _pop(offers, 0, hsize, o_s, o_tie, o_key)
        hsize -= 1
        d = o_dev[e]
        if o_ver[e] != version[d]:
            continue
        s = o_s[e]
        v = _pop(queue, lo[d], qsize[d], ready, rank_f, rank)
        qsize[d] -= 1
        f = s + dur[v]
        start[v] = s
        finish[v] = f
        free[d] = f
        done += 1
        for j in range(ptr[v], ptr[v + 1]):
            w = nbr[j]
            arrive = f + delay_e[j]
            if arrive > ready[w]:
                ready[w] = arrive
            indeg[w] -= 1
            if indeg[w] == 0:
                dw = dev[w]
                _push(queue, lo[dw], qsize[dw], w, ready, rank_f, rank)
                qsize[dw] += 1
                if dw != d and queue[lo[dw]] == w:  # a new head on another device changes its offer
                    version[dw] += 1
                    fr = free[dw]
                    o_s[n_off] = ready[w] if ready[w] > fr else fr
                    o_tie[n_off] = rank[w]
                    o_key[n_off] = dw * big + version[dw]
                    o_dev[n_off] = dw
                    o_ver[n_off] = version[dw]
                    _push(offers, 0, hsize, n_off, o_s, o_tie, o_key)
                    hsize += 1
                    n_off += 1
        if qsize[d] > 0:  # this device is free again at f: offer its head
            version[d] += 1
            h = queue[lo[d]]
            r = ready[h]
            o_s[n_off] = r if r > f else f
            o_tie[n_off] = rank[h]
            o_key[n_off] = d * big + version[d]
            o_dev[n_off] = d
            o_ver[n_off] = version[d]
            _push(offers, 0, hsize, n_off, o_s, o_tie, o_key)
            hsize += 1
            n_off += 1
    return start, finish, done


def _reoffer(d, arrived_size, waiting, w_lo, waiting_size, ready, free, has_offer, offer_at, version,
             o_s, o_zero, o_key, o_dev, o_ver, offers, hsize, n_off, big):
    """solvers.reschedule.list_schedule_start's reoffer: returns the new (heap size, offers made)."""
    if arrived_size[d] > 0:
        s = free[d]
    elif waiting_size[d] > 0:
        r = ready[waiting[w_lo[d]]]
        s = r if r > free[d] else free[d]
    else:
        has_offer[d] = False
        return hsize, n_off
    if has_offer[d] and offer_at[d] <= s:
        return hsize, n_off
    version[d] += 1
    has_offer[d] = True
    offer_at[d] = s
    o_s[n_off] = s
    o_zero[n_off] = 0.0
    o_key[n_off] = d * big + version[d]
    o_dev[n_off] = d
    o_ver[n_off] = version[d]
    _push(offers, 0, hsize, n_off, o_s, o_zero, o_key)
    return hsize + 1, n_off + 1


def list_schedule(ptr, nbr, delay_e, indeg, rank, key, dur, dev, k):
    """solvers.reschedule.list_schedule_start: non-delay list scheduling by ``key`` (= -priority);
    returns the nodes in the order they start, and the start times."""
    n = dur.size
    m = nbr.size
    indeg = indeg.copy()
    ready = np.zeros(n)
    start = np.zeros(n)
    zero = np.zeros(n)
    lo = _segments(dev, k)
    waiting = np.empty(n, dtype=np.int64)  # by (arrival, key, rank)
    arrived = np.empty(n, dtype=np.int64)  # by (key, rank)
    w_size = np.zeros(k, dtype=np.int64)
    a_size = np.zeros(k, dtype=np.int64)
    free = np.zeros(k)
    version = np.zeros(k, dtype=np.int64)
    has_offer = np.zeros(k, dtype=np.bool_)
    offer_at = np.zeros(k)
    cap = n + m + k + 1
    big = cap + 1
    o_s = np.empty(cap)
    o_zero = np.empty(cap)
    o_key = np.empty(cap, dtype=np.int64)
    o_dev = np.empty(cap, dtype=np.int64)
    o_ver = np.empty(cap, dtype=np.int64)
    offers = np.empty(cap, dtype=np.int64)
    n_off = 0
    hsize = 0
    seq = np.empty(n, dtype=np.int64)
    for v in range(n):
        if indeg[v] == 0:
            d = dev[v]
            _push(waiting, lo[d], w_size[d], v, ready, key, rank)
            w_size[d] += 1
    for d in range(k):
        hsize, n_off = _reoffer(d, a_size, waiting, lo, w_size, ready, free, has_offer, offer_at, version,
                                o_s, o_zero, o_key, o_dev, o_ver, offers, hsize, n_off, big)
    done = 0
    while hsize > 0:
        e = _pop(offers, 0, hsize, o_s, o_zero, o_key)
        hsize -= 1
        d = o_dev[e]
        if o_ver[e] != version[d]:
            continue
        s = o_s[e]
        has_offer[d] = False
        while w_size[d] > 0 and ready[waiting[lo[d]]] <= s:
            x = _pop(waiting, lo[d], w_size[d], ready, key, rank)
            w_size[d] -= 1
            _push(arrived, lo[d], a_size[d], x, key, zero, rank)
            a_size[d] += 1
        v = _pop(arrived, lo[d], a_size[d], key, zero, rank)
        a_size[d] -= 1
        start[v] = s
        f = s + dur[v]
        free[d] = f
        seq[done] = v
        done += 1
        for j in range(ptr[v], ptr[v + 1]):
            w = nbr[j]
            t = f + delay_e[j]
            if t > ready[w]:
                ready[w] = t
            indeg[w] -= 1
            if indeg[w] == 0:
                dw = dev[w]
                if ready[w] <= free[dw]:
                    _push(arrived, lo[dw], a_size[dw], w, key, zero, rank)
                    a_size[dw] += 1
                else:
                    _push(waiting, lo[dw], w_size[dw], w, ready, key, rank)
                    w_size[dw] += 1
                if dw != d:
                    hsize, n_off = _reoffer(dw, a_size, waiting, lo, w_size, ready, free, has_offer, offer_at,
                                            version, o_s, o_zero, o_key, o_dev, o_ver, offers, hsize, n_off, big)
        hsize, n_off = _reoffer(d, a_size, waiting, lo, w_size, ready, free, has_offer, offer_at, version,
                                o_s, o_zero, o_key, o_dev, o_ver, offers, hsize, n_off, big)
    return seq[:done], start


def device_peaks(ptr, nbr, pl, start, finish, size, k):
    """placement.evaluator.peak_profile without the parameters, in one pass (the evaluator's
    ``buffers`` then its sweep): per device the highest level of tensor bytes held and the first
    time it is reached (nan where nothing is ever held). ``ptr``/``nbr``: the successor CSR.
    Bit for bit the numpy version on finite times (the evaluator's; a NaN would compare
    differently): the intervals in its order (holds by node then device, then
    the outputs no local consumer reads), the events sorted as its lexsort sorts them (device,
    time, releases first, then the order made), and the levels from one running sum over all
    devices, less its value at each device's first event, as its cumsum gives them."""
    n = pl.size
    cap = nbr.size + n
    dev = np.empty(cap, dtype=np.int64)
    t0 = np.empty(cap)
    t1 = np.empty(cap)
    sz = np.empty(cap)
    r_dev = np.empty(n, dtype=np.int64)
    r_t0 = np.empty(n)
    r_t1 = np.empty(n)
    r_sz = np.empty(n)
    latest = np.empty(k)
    seen = np.zeros(k, dtype=np.bool_)
    touched = np.empty(k, dtype=np.int64)
    m = 0
    runs = 0
    for u in range(n):
        nt = 0
        for j in range(ptr[u], ptr[u + 1]):
            v = nbr[j]
            d = pl[v]
            if not seen[d]:
                seen[d] = True
                latest[d] = finish[v]
                touched[nt] = d
                nt += 1
            elif finish[v] > latest[d]:
                latest[d] = finish[v]
        for i in range(1, nt):  # devices in ascending order, as the numpy version's key sorts them
            x = touched[i]
            j = i - 1
            while j >= 0 and touched[j] > x:
                touched[j + 1] = touched[j]
                j -= 1
            touched[j + 1] = x
        local = False
        for i in range(nt):
            d = touched[i]
            seen[d] = False
            if d == pl[u]:
                local = True
                a = start[u]
                b = latest[d] if latest[d] > finish[u] else finish[u]
            else:
                a = finish[u]
                b = latest[d]
            if b > a and size[u] > 0:
                dev[m] = d
                t0[m] = a
                t1[m] = b
                sz[m] = size[u]
                m += 1
        if not local and finish[u] > start[u] and size[u] > 0:
            r_dev[runs] = pl[u]
            r_t0[runs] = start[u]
            r_t1[runs] = finish[u]
            r_sz[runs] = size[u]
            runs += 1
    for i in range(runs):
        dev[m] = r_dev[i]
        t0[m] = r_t0[i]
        t1[m] = r_t1[i]
        sz[m] = r_sz[i]
        m += 1
    top = np.zeros(k)
    when = np.full(k, np.nan)
    count = 2 * _segments(dev[:m], k)  # two events per interval
    fill = count[:k].copy()
    ev = np.empty(2 * m, dtype=np.int64)  # event e < m: allocation of interval e; e >= m: release of e - m
    for i in range(m):  # per device: releases first, each kind in the order made
        ev[fill[dev[i]]] = m + i
        fill[dev[i]] += 1
    for i in range(m):
        ev[fill[dev[i]]] = i
        fill[dev[i]] += 1
    running = 0.0
    for d in range(k):
        lo, hi = count[d], count[d + 1]
        if hi == lo:
            continue
        seg = ev[lo:hi]
        times = np.empty(hi - lo)
        for i in range(hi - lo):
            e = seg[i]
            times[i] = t0[e] if e < m else t1[e - m]
        seg = seg[np.argsort(times, kind="mergesort")]
        base = running
        best = 0.0
        first = np.nan
        for i in range(hi - lo):
            e = seg[i]
            if e < m:
                running += sz[e]
            else:
                running -= sz[e - m]
            level = running - base
            if level > best:
                best = level
                first = t0[e] if e < m else t1[e - m]
        top[d] = best
        when[d] = first
    return top, when


_HELPERS = ["_before", "_push", "_pop", "_ipush", "_queue_pushed", "_ipop", "_segments", "_reoffer", "_avoids", "_outer",
            "_dropped", "_early", "_root", "_busy_before"]
_INNER = ["cone", "move_bound"]  # compiled, called by other kernels only (move_trial)
_KERNELS = ["bottom_levels", "kept_order_start", "avoid_jumps", "merge_order", "order_ties", "device_chains",
            "retime_order", "tails", "forest_intervals", "move_trial",
            "spread_pieces", "spread_assign", "chain_walk", "by_parent", "release_starts",
            "fifo_schedule", "list_schedule", "device_peaks"]


def warm_up() -> dict[str, float]:
    """Compile (or load from the cache) every kernel; seconds per kernel (of the first load in this
    process: 0 when they were already loaded)."""
    fresh = _loaded is None
    if load() is None:
        raise RuntimeError("numba is not installed: pip install 'dnn-placement[fast]'")
    return dict(_took) if fresh else {name: 0.0 for name in _KERNELS}


_took: dict[str, float] = {}


def _call_each(fast: SimpleNamespace) -> None:
    """Call every kernel once on a tiny graph (numba compiles a kernel at its first call, or loads
    it from its disk cache); the seconds each took go to ``_took``."""
    i64 = np.int64
    ptr = np.array([0, 1, 2, 2], dtype=i64)
    nbr = np.array([1, 2], dtype=i64)
    dly = np.array([0.5, 0.0])
    dur = np.array([1.0, 2.0, 0.0])
    order = np.arange(3, dtype=i64)
    dev = np.array([0, 1, 1], dtype=i64)
    indeg = np.array([0, 1, 1], dtype=i64)
    calls = {
        "bottom_levels": lambda: fast.bottom_levels(ptr, nbr, dly, dur, order),
        "kept_order_start": lambda: fast.kept_order_start(order, np.full(3, -1, dtype=i64), ptr, nbr, dly, dur),
        "tails": lambda: fast.tails(order, dev, dur, ptr, nbr, dly, np.full(3, -1, dtype=i64)),
        "merge_order": lambda: fast.merge_order(order, np.array([False, True, False]), order[1:2], dur, order),
        "device_chains": lambda: fast.device_chains(order, dev, 2),
        "retime_order": lambda: fast.retime_order(order, order, np.full(3, -1, dtype=i64), np.full(3, -1, dtype=i64), dev,
                                                  dur.copy(), dur, ptr, nbr, dly, ptr, nbr),
        "avoid_jumps": lambda: fast.avoid_jumps(order, order, np.full(3, -1, dtype=i64), dev, dur, dur, dur, ptr, nbr, dly),
        "order_ties": lambda: fast.order_ties(order.copy(), dur, order),
        "forest_intervals": lambda: fast.forest_intervals(order, np.array([-1, 0, 0], dtype=i64)),
        "move_trial": lambda: fast.move_trial(
            order[:1], order[1:2], 1.5, 1, 1, 10, order, order, dev, dur, dur, dur, ptr, nbr, dly, ptr, nbr, dly,
            np.full(3, -1, dtype=i64), np.full(3, -1, dtype=i64), order, np.array([0, 1, 3], dtype=i64), dur, order, order,
            order + 1, order, order + 1, order[:1], dur[:1], np.zeros(4), np.zeros(4), dur, 0, 1.0, dev.copy(),
            np.full(3, -1, dtype=i64), np.full(3, -1, dtype=i64), np.zeros(3, dtype=np.bool_), np.zeros(3),
            np.zeros(3, dtype=np.bool_), np.zeros(3), np.zeros(3, dtype=np.bool_), dur.copy(), np.zeros(3, dtype=np.bool_),
            np.zeros(3, dtype=np.bool_), np.zeros(3, dtype=np.bool_)),
        "spread_pieces": lambda: fast.spread_pieces(order, dev, ptr, nbr, order, dur, dur, np.full(3, -1, dtype=i64)),
        "spread_assign": lambda: fast.spread_assign(
            order[:1], order[2:], order[:2], np.array([0, 1, 2], dtype=i64), order[1:], dur[:2], dur[:2], order, dev, dur,
            dur, np.ones((3, 2), dtype=np.bool_), np.array([0, 1, 3], dtype=i64), dur, dur, np.zeros(5), np.zeros(2),
            np.ones(2), 1, np.zeros(3, dtype=np.bool_)),
        "chain_walk": lambda: fast.chain_walk(2, dur, dur + 1.0, np.full(3, -1, dtype=i64), ptr, nbr, dly, 1e-9),
        "by_parent": lambda: fast.by_parent(order, np.array([-1, 0, 0], dtype=i64)),
        "release_starts": lambda: fast.release_starts(ptr, nbr, dly, indeg, dur, np.zeros(3), np.full(3, -1, dtype=i64)),
        "fifo_schedule": lambda: fast.fifo_schedule(ptr, nbr, dly, indeg, order, dur, dev, 2),
        "list_schedule": lambda: fast.list_schedule(ptr, nbr, dly, indeg, order, -dur, dur, dev, 2),
        "device_peaks": lambda: fast.device_peaks(ptr, nbr, dev, dur, dur + 1.0, dur, 2),
    }
    for name, call in calls.items():
        t = time.perf_counter()
        call()
        _took[name] = time.perf_counter() - t


if __name__ == "__main__":
    # Through the package's module, not __main__: numba's disk cache is keyed by the module's name.
    from placement import kernels as _package_module

    t0 = time.perf_counter()
    try:
        times = _package_module.warm_up()
    except RuntimeError as exc:
        print(f"placement.kernels: {exc}", file=sys.stderr)
        sys.exit(2)
    print(f"placement.kernels: {len(times)} kernels ready in {time.perf_counter() - t0:.1f}s "
          f"(" + ", ".join(f"{k} {v:.2f}s" for k, v in times.items()) + ")")
