"""A lower bound from the work that bypasses a chain: it shares the chain's device, one piece at a
time, or pays a transfer out and a transfer back (issue 16, item 4).

Why: on the generated CNN training graphs the critical path (a chain through one branch of every
residual block, forward and backward) is far below every schedule. Each block's other branches
(the projection shortcut, the other ResNeXt paths, their gradients) leave the chain at one node and
rejoin it at a later one; their activations cost several operators' time to move. Running them on
the chain's device delays the chain by their work; running them elsewhere delays it by a transfer
out and one back. The critical path counts neither, the communication bound (comm_bound.py) only
the last join, and the forced bound (forced_bound.py) only transfers that alone reach the target.
This bound charges every block the cheaper of the two, added up along the chain.

The argument (docs/scale.md has it in full). Take a path p_0 .. p_{L-1} (the chain) and, for an
off-chain node u, a(u) = the last chain position with a path to u and b(u) = the first chain
position u has a path to. The off-chain nodes with the same (a, b) form the window G(a, b): each
runs after F(p_a) and finishes before S(p_b). Whatever the placement, S(p_b) - F(p_a) is at least
W(a, b), the smallest over three cases:

- A, p_a .. p_b on one device d: the chain between and the members kept on d run there one at a
  time; a member elsewhere lies on a path p_a ~> u ~> p_b that leaves d and comes back (two
  transfers), and those members share the other K - 1 devices after a transfer in and before a
  transfer out; a member that leaves waits for its pinned window ancestors, which run on d one at
  a time (its pinned kin, bypass_kin.py; session 16);
- B, p_a and p_b on two devices: the chain pays a transfer, every member is away from one end
  (one transfer), a member whose transfer would not fit is pinned to that end's device with the
  chain before the first cut, where the last of them still pays its way to the other end, a member
  that may leave that device only for the other end's (off both, its two transfers would not fit)
  runs there one at a time with the others that do (session 20), and the window's work fits the
  devices' free time;
- C, p_a and p_b on one device with the chain away in between: two chain transfers, and the chain
  before the first and after the last cut on d with the members as in A.

Windows that share p_a or p_b are also bounded together, as one window (session 20).
So F(p_j) >= t_j + max(F(p_{j-1}), head[p_j], F(p_a) + W(a, j) for the windows ending at j), and
the mirror image bounds C - S(p_j); their sum at any chain node bounds the makespan. The end of
the chain is a window too: off-chain nodes with a chain ancestor and no chain descendant (the
weight gradients and their updates) finish before the makespan minus their tail, on the last
device or after a transfer.

It needs no memory data and no placement: valid in the static and the peak model, with
colocation and allowed devices (they only remove placements). Two passes over the graph and a sort
per window: about as costly as the communication bound.
"""
from __future__ import annotations

import bisect

import numpy as np

from .bypass_kin import Kin, cover_floor
from .problem import Problem
from .window_exact import ExactSpans

MAX_END_POSITIONS = 200  # chain positions tried as the start of the end window
CUT_CHOICES = 4  # the cheapest cuts after it tried one by one
MAX_END_MEMBERS = 2000  # positions with more weight gradients after them are left out (cost)
MAX_KIN_WORK = 50_000  # windows with more members x thresholds leave the pinned kin out (cost)
MIN_KIN_MEMBERS = 8  # smaller windows leave the pinned kin out (cost; no gain seen on them)
MAX_CUT_PAIRS = 64  # windows with more (first cut, last cut) candidates keep only the chain before the first
MAX_MERGED = 8  # windows sharing an end in greater numbers are not bounded together (cost: the LSTMs' 1,652)
MERGE = True  # windows sharing an end are also bounded together (_merged; tests switch it off to compare)
EITHER = True  # case B's members that may cross only to the other end's device (_pinned_either; the same)
EXACT = True  # small windows also get their exact span (placement/window_exact.py; tests switch it off to compare)
INTEGRAL = True  # case B's split takes whole members' times (_subset_floor; tests switch it off to compare)
CHAIN_KIN = True  # case C counts the chain before its first cut (after its last) beside the kin (tests switch it off to compare)


def _chain_comm(problem: Problem, chain: list[int]) -> list[float]:
    """cc[i] (i >= 1): the largest comm over the edges chain[i-1] -> chain[i]."""
    return [0.0] + [problem.comm_between(u, v) for u, v in zip(chain, chain[1:])]


def reach(problem: Problem, pos: list[int], reverse: bool) -> tuple[list[int], list[float], list[float]]:
    """Per off-chain node u: its window end a(u) (the last chain position with a path to u; with
    ``reverse`` the first chain position u has a path to, b(u)), -1 / L if none, and the value of
    one path between that chain node and u: its interior times (u excluded) and its smallest
    transfer."""
    n, big = problem.n, len([p for p in pos if p >= 0])
    ptr, nbr, eid = problem.succ_ptr if reverse else problem.pred_ptr
    ptr_l, nbr_l, comm_l = ptr.tolist(), nbr.tolist(), problem.comm[eid].tolist()
    t = problem.time.tolist()
    order = problem.topo_order.tolist()
    if reverse:
        order.reverse()
    none = big if reverse else -1
    end = [none] * n
    length = [0.0] * n  # interior time of the witness path (u excluded)
    low = [0.0] * n  # its smallest transfer
    for v in order:
        if pos[v] >= 0:
            continue
        lo, hi = ptr_l[v], ptr_l[v + 1]
        best = none
        for j in range(lo, hi):
            u = nbr_l[j]
            e = pos[u] if pos[u] >= 0 else end[u]
            if (e < best) if reverse else (e > best):
                best = e
        end[v] = best
        if best == none:
            continue
        top, bl, bm = -1.0, 0.0, 0.0
        for j in range(lo, hi):
            u = nbr_l[j]
            if pos[u] == best:
                ln, mn = 0.0, comm_l[j]
            elif pos[u] < 0 and end[u] == best:
                ln, mn = length[u] + t[u], min(low[u], comm_l[j])
            else:
                continue
            if ln + mn > top:
                top, bl, bm = ln + mn, ln, mn
        length[v], low[v] = bl, bm
    return end, length, low


def _split(items: list[tuple[float, float]], base: float) -> float:
    """min over thresholds θ of max(θ, base + the times of the items with X > θ): the members with
    X <= θ leave the chain's device, the others run on it. ``items`` are (X, time) pairs."""
    items = sorted(items)
    local = base + sum(tv for _, tv in items)
    best = local
    for x, tv in items:
        local -= tv
        best = min(best, max(x, local))
    return best


def _thresholds(x: list[float], t: list[float], into: list[float], out: list[float]
                ) -> tuple[list[int], list[tuple[float, float, float, int]]]:
    """The members sorted by X, and per distinct θ: (θ, t(S(θ)), the smallest transfer in plus the
    smallest out over S(θ), |S(θ)|), S(θ) = {X <= θ}: what _away sweeps, the same for every base."""
    order = sorted(range(len(x)), key=x.__getitem__)
    prefix = []
    room, low_in, low_out = 0.0, np.inf, np.inf
    i = 0
    while i < len(order):
        theta = x[order[i]]
        while i < len(order) and x[order[i]] == theta:  # S(θ) takes every member with X <= θ
            u = order[i]
            room += t[u]
            low_in, low_out = min(low_in, into[u]), min(low_out, out[u])
            i += 1
        prefix.append((theta, room, low_in + low_out, i))
    return order, prefix


def _away(x: list[float], t: list[float], into: list[float], out: list[float], base: float, k: int,
          kin: list[tuple[tuple, tuple]] | None = None,
          pre: tuple[list[int], list[tuple[float, float, float, int]]] | None = None,
          chains: tuple[tuple[float, float] | None, ...] = ()) -> float:
    """A lower bound on min over subsets U (the members off the chain's device d) of
    max(base + t(members not in U), max X over U, energy(U), pinned(U)); energy(U) = the smallest
    transfer into U + the smallest out of U + t(U) / (K - 1): U runs on the other K - 1 devices
    after its first transfer in and before its last transfer out. With θ = max X over U, U lies
    in S(θ) = {X <= θ}, whose transfers are no larger and whose time bounds t(U); the best t(U) in
    [0, t(S(θ))] is where the falling line meets the rising ones.

    ``kin`` (per member: its window ancestor and descendant with the largest X, as (X, time, id,
    rho), placement/bypass_kin.py): those with X > θ stay on d, so pinned(U) = the time of the
    ancestors of U's members kept there, run one at a time, plus the least way from one of them
    out through a member of U and back (and the mirror image for descendants), relaxed to a
    fractional covering of t(U) by the groups of members that share their kin. ``pre``: the
    members' _thresholds, when already known. ``chains``: per kin side, (time, way) of the chain
    nodes known to be on d beside the kin (case C: before its first cut, after its last one;
    bypass_kin.lead)."""
    total = base + sum(t)
    if k < 2 or not x:
        return total
    order, prefix = pre if pre is not None else _thresholds(x, t, into, out)
    best = total
    steps: list[tuple[float, float, float, float, int]] = []  # per θ: (value without kin, θ, room, m, |S(θ)|)
    for theta, room, m, i in prefix:
        moved = min(max((total - m) * (k - 1) / k, 0.0), room)
        steps.append((max(theta, total - moved, m + moved / (k - 1)), theta, room, m, i))
    if kin is None:
        return min(best, min(s[0] for s in steps))
    for plain, theta, room, m, i in sorted(steps):  # the kin only raise a θ's value: stop once none can win
        if plain >= best:
            break
        sides: list = []
        for side in (0, 1):
            groups: dict[int, list[float]] = {}
            free = 0.0
            for u in order[:i]:
                gx, gt, gid, rho = kin[u][side]
                if gx <= theta:
                    free += t[u]
                elif gid in groups:
                    groups[gid][0] += t[u]
                else:
                    groups[gid] = [t[u], gt, rho]
            sides += [groups, free]
        best = min(best, cover_floor(total, room, theta, m, k, sides, chains))
    return best


def _same_device_span(work: float, delay: float, k: int) -> float:
    """The shortest span D in which ``work`` fits when one device has all of D and each of the
    K - 1 others only D - ``delay`` (nothing starts on them before a transfer in, nothing ends
    after a transfer out): D + (K - 1) max(0, D - delay) >= work."""
    if work <= delay or k < 2:
        return work
    return (work + (k - 1) * delay) / k


def _apart_span(work: float, late: float, early: float, k: int) -> float:
    """The same when the window's first and last chain nodes are on two devices: the first device
    loses ``early`` at the end, the second ``late`` at the start, the K - 2 others both."""
    if k < 2:
        return np.inf  # one device: the two ends cannot be apart
    parts = [(early, 1), (late, 1), (late + early, k - 2)]  # (delay, devices)
    cuts = sorted({d for d, c in parts if c > 0})
    for i, d in enumerate(cuts):  # capacity is piecewise linear in D with breakpoints ``cuts``
        slope = sum(c for dd, c in parts if dd <= d)
        have = sum(c * (d - dd) for dd, c in parts if dd <= d)
        nxt = cuts[i + 1] if i + 1 < len(cuts) else np.inf
        if have + slope * (nxt - d) >= work:
            return d + (work - have) / slope
    return np.inf


def _pinned_load(y: list[float], t: list[float], q: list[float] | None = None,
                 chain: tuple[float, float] | None = None, order: list[int] | None = None) -> float:
    """The smallest D >= the time of the members with y > D: a member whose path would last
    y > D off a device must be on it, where the members run one at a time within D. With ``q``
    the last of them still needs q (>= 0) before the window ends (its way to the other end's
    device), so D >= their time + their least q. ``chain`` = (T, r): chain nodes known to be on
    that device too, of time T, the last of them needing r: then also D >= (members' time) + T +
    min(least q, r). ``order``: the members by y, largest first, when already known."""
    if order is None:
        order = sorted(range(len(y)), key=lambda u: -y[u])
    best, load, least = y[order[0]], 0.0, np.inf
    kept, last = (chain if chain is not None and chain[0] > 0 else (0.0, 0.0))
    for i, u in enumerate(order):
        load += t[u]  # D in [next y, y[u]) pins exactly the members so far
        if load >= best:
            break  # every later interval's D is at least the load so far
        if q is not None:
            least = min(least, q[u])
        below = y[order[i + 1]] if i + 1 < len(order) else 0.0
        low = max(load + (least if q is not None else 0.0), below)
        if kept:
            low = max(low, load + kept + min(least, last))
        if low < y[u]:
            best = min(best, low)
    return best


def _pinned_either(y: list[float], x2: list[float], t: list[float], q: list[float], c_in: list[float],
                   c_out: list[float], chain: tuple[float, float] | None = None) -> float:
    """Case B's pinned load on one end's device E (docs/scale.md, "Members that may cross only
    to the other end"): the smallest D >= g(D). A member with y > D is on E (as in
    :func:`_pinned_load`); one with y <= D < x2 is on E or on the other end's device F (off both,
    its paths pay a transfer in and one out: x2 > D); those on F, S of time x, run there one at a
    time, the first no earlier than its ``c_in`` after F(p_a) and the last still needing its
    ``c_out``: D >= min c_in + x + min c_out. E runs the others with the chain nodes known there
    (``chain`` = (T, r) as in :func:`_pinned_load`), the first of them no earlier than the least
    ``q``: D >= (their time) - x + max(least q, T + min(least q, r)). g(D) is the least over x of
    the larger of the two (S empty: the second is void); the minima are taken over every member
    with x2 > D (a superset of those on E, of S: no larger). Never below :func:`_pinned_load`."""
    n = len(y)
    if n == 0:
        return 0.0
    x2 = [max(a, b) for a, b in zip(x2, y)]
    kept, last = chain if chain is not None and chain[0] > 0 else (0.0, 0.0)
    by_x2 = sorted(range(n), key=lambda u: x2[u])
    x2s = [x2[u] for u in by_x2]
    suf_t, suf_q = [0.0] * (n + 1), [np.inf] * (n + 1)
    suf_in, suf_out = [np.inf] * (n + 1), [np.inf] * (n + 1)
    for i in range(n - 1, -1, -1):  # over the members with x2 above a D: their time and minima
        u = by_x2[i]
        suf_t[i] = suf_t[i + 1] + t[u]
        suf_q[i] = min(suf_q[i + 1], q[u])
        suf_in[i] = min(suf_in[i + 1], c_in[u])
        suf_out[i] = min(suf_out[i + 1], c_out[u])
    ys = sorted(y)
    pre_y = [0.0]
    for u in sorted(range(n), key=lambda u: y[u]):
        pre_y.append(pre_y[-1] + t[u])
    points = sorted(set([0.0] + ys + x2s))
    for j, lo in enumerate(points):  # D in [lo, hi): the same members pinned, free and between
        hi = points[j + 1] if j + 1 < len(points) else np.inf
        i = bisect.bisect_right(x2s, lo)
        if i == n:
            return lo  # every member may leave both ends' devices
        least = suf_q[i]
        full = suf_t[i] + (max(least, kept + min(least, last)) if kept else least)
        either = max(0.0, pre_y[bisect.bisect_right(ys, lo)] - (suf_t[0] - suf_t[i]))  # y <= D < x2
        g = full  # S empty
        c = suf_in[i] + suf_out[i]
        split = either > 0 and full > c  # S of time x in (0, either]: E keeps some member while x < suf_t
        if split:
            x = min((full - c) / 2, either)
            g = max(full - x, c + x)
        alone = max(c + either, kept + last if kept else 0.0)
        every = either > 0 and either >= suf_t[i] * (1 - 1e-12)  # every member may be on F: E runs only the chain
        if every:
            g = min(g, alone)
        if split and INTEGRAL and max(lo, g) < hi:  # x is the time of a set of members, not any real
            g = _subset_floor(full, c, [t[u] for u in range(n) if y[u] <= lo < x2[u]])
            if every:
                g = min(g, alone)
        if max(lo, g) < hi:
            return max(lo, g)
    return np.inf


def _subset_floor(full: float, c: float, times: list[float]) -> float:
    """min over the subsets S of members of these ``times`` of: ``full`` for S empty, else
    max(full - T(S), c + T(S)); relaxed (a lower bound) by letting T(S) be any real between the
    time of the |S| shortest members and that of the |S| longest, since every subset of that size
    has its time there. What case B's split between the two ends' devices gains over a real x:
    on a CNN's backward block, where one more path's conv gradient on the first end's device is
    the step, about half a gradient's time (docs/scale.md)."""
    best = full
    if not times or full <= c:
        return best
    target = (full - c) / 2  # where the falling and the rising line cross
    asc = sorted(times)
    small = large = 0.0
    for j in range(1, len(asc) + 1):
        small += asc[j - 1]
        large += asc[-j]
        x = min(max(target, small), large)
        best = min(best, max(full - x, c + x))
        if small >= target:
            break  # larger sets start further right of the crossing: only c + x grows
    return best


def _window(between: float, firsts: list[tuple[float, float, float, int]], lasts: list[tuple[float, float, int]],
            items: list[tuple], k: int, kin_of: object = None) -> float:
    """W(a, b): a lower bound on S(p_b) - F(p_a) in every schedule (docs/scale.md, cases A, B, C):
    the least of :func:`_window_cases`."""
    return min(_window_cases(between, firsts, lasts, items, k, kin_of))


def _window_cases(between: float, firsts: list[tuple[float, float, float, int]], lasts: list[tuple[float, float, int]],
                  items: list[tuple], k: int, kin_of: object = None, every: bool = False) -> tuple[float, float, float]:
    """Lower bounds on S(p_b) - F(p_a) in the schedules of each case (A, B, C; inf: the case
    cannot happen), whose least is W(a, b).
    ``between``: the chain time strictly inside; ``firsts`` (never empty: a window holds a chain
    edge): per chain edge of the window that is cheaper than every edge before it, (its transfer,
    the chain time before it, the least transfer of the edges after it, the edge); ``lasts``: the same from the other end, (transfer, chain
    time after, edge);
    ``items``: per member (X, m_in, m_out, time, l_in, l_out): its witness paths' interior times
    and smallest transfers; ``kin_of()``: the members' pinned kin (placement/bypass_kin.py),
    asked for only when they could raise W (None: leave that term out), or with ``every`` whenever
    they are there (to name the case that binds: bench/bench_windows.py)."""
    x, into, out, tv, l_in, l_out = (list(col) for col in zip(*items))
    work = between + sum(tv)
    m_in, m_out = min(into), min(out)
    both = [p + i + o for p, i, o in zip(x, into, out)]  # off d, the path pays a transfer out and one back
    pre = _thresholds(both, tv, into, out)
    # A: p_a .. p_b all on one device d
    span_a = _same_device_span(work, m_in + m_out, k)
    w_a = max(_away(both, tv, into, out, between, k, pre=pre), span_a)
    cheapest = firsts[-1][0]
    late, early = min(m_in, cheapest), min(m_out, cheapest)
    # B: p_a and p_b on two devices: the chain pays its first cut (the chain before it stays on
    # p_a's device) and its last cut (the chain after it is on p_b's device); a member off p_a's
    # device pays its transfer in, one off p_b's device its transfer out; the members pinned to
    # p_a's device and the chain before the cut run there one at a time, and the last of them
    # still pays its way out to p_b (and the mirror image on p_b's device)
    y_in, q_in = [p + i for p, i in zip(x, into)], [lo + o for lo, o in zip(l_out, out)]
    y_out, q_out = [p + o for p, o in zip(x, out)], [li + i for li, i in zip(l_in, into)]
    by_in = sorted(range(len(y_in)), key=lambda u: -y_in[u])
    by_out = sorted(range(len(y_out)), key=lambda u: -y_out[u])
    # a member may leave its pinning end's device only to the other end's (x2 = both > D), where
    # those that do run one at a time: the way in, their time, the way out (_pinned_either)
    way_in = [li + i for li, i in zip(l_in, into)]  # from p_a's device to a member elsewhere
    way_out = [lo + o for lo, o in zip(l_out, out)]  # from a member to p_b's device elsewhere

    def pinned(y: list[float], q: list[float], order: list[int], c_in: list[float], c_out: list[float],
               chain: tuple[float, float]) -> float:
        old = _pinned_load(y, tv, q, chain, order)
        return max(old, _pinned_either(y, both, tv, q, c_in, c_out, chain)) if EITHER else old

    first = _cut_floor([(between + c, (c, before)) for c, before, _, _ in firsts],
                       lambda c: pinned(y_in, q_in, by_in, way_in, l_out, (c[1], between - c[1] + c[0])))
    last = _cut_floor([(between + c, (c, after)) for c, after, _ in lasts],
                      lambda c: pinned(y_out, q_out, by_out, l_in, way_out, (c[1], between - c[1] + c[0])))
    apart = max(between + cheapest, max(p + min(i, o) for p, i, o in zip(x, into, out)),
                _apart_span(work, late, early, k), first, last)
    # C: p_a and p_b on one device d, the chain away in between: it leaves at its first cut and
    # comes back at its last one; the chain before the first and after the last stays on d (with
    # many candidates, only the chain before the first, back at the cheapest later edge)
    span_c = _same_device_span(work, late + early, k)
    # (data: the chain time kept on d, and per kin side the chain nodes on d beside the kin with the
    # way from the last of them (the first) through the chain away and back: bypass_kin.lead)
    if len(firsts) * len(lasts) <= MAX_CUT_PAIRS:
        twice = [(between + ci + cj, (before + after, ((before, between - before + ci + cj),
                                                      (after, between - after + ci + cj))))
                 for ci, before, _, i in firsts for cj, after, j in lasts if j > i]
    else:
        twice = [(between + c + then, (before, ((before, between - before + c + then), None)))
                 for c, before, then, _ in firsts if then < np.inf]
    w_c = max(_cut_floor(twice, lambda c: _away(both, tv, into, out, c[0], k, pre=pre)), span_c)
    if apart <= min(w_a, w_c) and not every:
        return w_a, apart, w_c  # the kin only raise A and C
    kin = _kin(kin_of, len(items), len(set(x)))
    if kin is not None:
        w_a = max(_away(both, tv, into, out, between, k, kin, pre), span_a)
        w_c = max(_cut_floor(twice, lambda c: _away(both, tv, into, out, c[0], k, kin, pre, c[1] if CHAIN_KIN else ())), span_c)
    return w_a, apart, w_c


def _kin(kin_of: object, size: int, thresholds: int) -> list | None:
    """The members' pinned kin, or None when there are none to ask, too few members for many to
    wait on each other (the LSTMs' windows of 2-4: no gain there, a third of the bound's time), or
    a sweep that would cost too much: leaving the term out keeps the bound valid."""
    if kin_of is None or size < MIN_KIN_MEMBERS or size * thresholds > MAX_KIN_WORK:
        return None
    return kin_of()  # type: ignore[operator]


def _cut_floor(cands: list[tuple[float, object]], rest: object) -> float:
    """min over the candidate cuts (pay, data) of max(pay, rest(data)): the chain's own price of
    that cut and the rest of the case's terms; ``rest`` is only called where it can still lower
    the minimum (inf when there is no candidate: the case cannot happen)."""
    best = np.inf
    for pay, data in sorted(cands, key=lambda c: c[0]):
        if pay >= best:
            break
        best = min(best, max(pay, rest(data)))  # type: ignore[operator]
    return best


def _smaller(cc: list[float], step: int) -> list[int]:
    """For each chain edge i, the next edge in direction ``step`` (+1 or -1) with a strictly smaller
    transfer (len(cc) or -1 if none): walking these from a window's first (last) edge visits
    exactly the edges cheaper than every edge before (after) them in the window."""
    n = len(cc)
    out = [n if step > 0 else -1] * n
    stack: list[int] = []
    for i in (range(n) if step > 0 else range(n - 1, -1, -1)):
        while stack and cc[i] < cc[stack[-1]]:
            out[stack.pop()] = i
        stack.append(i)
    return out


def _cuts(lo: int, hi: int, cc: list[float], cc_np: np.ndarray, ct: list[float], nxt: list[int],
          prv: list[int]) -> tuple[list[tuple[float, float, float, int]], list[tuple[float, float, int]]]:
    """The window (lo, hi)'s first-cut and last-cut candidates for _window, each with its edge i
    (edge i enters chain position i, so the window's edges are lo + 1 .. hi). The least transfer after a first-cut
    candidate is the window's cheapest edge (the last candidate) for all but that last one, and
    the least of the edges after it for the last."""
    at = []
    i = lo + 1
    while i <= hi:
        at.append(i)
        i = nxt[i]
    low = cc[at[-1]]
    then = [low] * (len(at) - 1) + [float(cc_np[at[-1] + 1:hi + 1].min()) if at[-1] < hi else np.inf]
    firsts = [(cc[i], ct[i] - ct[lo + 1], th, i) for i, th in zip(at, then)]
    lasts = []
    j = hi
    while j > lo:
        lasts.append((cc[j], ct[hi] - ct[j], j))
        j = prv[j]
    return firsts, lasts


def chain_bound(problem: Problem, chain: list[int], head: np.ndarray, tail: np.ndarray,
                detail: dict[str, list[float]] | None = None,
                cases: dict[tuple[int, int], tuple[float, float, float]] | None = None) -> float:
    """The bound of the module docstring for one chain (a path of the graph, in order).

    ``detail``: a dict to receive, per chain position j, "fin" (a lower bound on F(p_j)) and "rest"
    (one on C - S(p_j)); ``cases``: a dict to receive, per window (a, b) of chain positions, the
    bounds of its cases A, B and C (the kin counted wherever they are, so it costs more).
    bench/bench_windows.py lays both beside an answer's times."""
    n, L, k = problem.n, len(chain), problem.k
    if L == 0:
        return 0.0
    t = problem.time.tolist()
    pos = [-1] * n
    for i, v in enumerate(chain):
        pos[v] = i
    a, into_len, into_low = reach(problem, pos, reverse=False)
    b, out_len, out_low = reach(problem, pos, reverse=True)
    cc = _chain_comm(problem, chain)
    ct = [0.0]
    for v in chain:
        ct.append(ct[-1] + t[v])  # ct[i]: chain time of positions < i
    kin: list[Kin] = []  # built when a window first asks for its members' kin

    def kin_of(lo: int, hi: int) -> list[tuple[tuple, tuple]]:
        if not kin:
            key = [a[u] * (L + 1) + b[u] if pos[u] < 0 and a[u] >= 0 and b[u] < L else -1 for u in range(n)]
            x2 = [into_len[u] + t[u] + out_len[u] + into_low[u] + out_low[u] for u in range(n)]
            kin.append(Kin(problem, key, x2, into_len, into_low, out_len, out_low))
        return kin[0].members(lo * (L + 1) + hi, ids[lo, hi])
    windows: dict[tuple[int, int], list[tuple]] = {}
    ids: dict[tuple[int, int], list[int]] = {}  # the members' nodes, for their kin
    ends: list[tuple[float, float, int]] = []  # the end window's members: (Y, time, a)
    tail_l = tail.tolist()
    for u in range(n):
        if pos[u] >= 0 or a[u] < 0 or t[u] <= 0:
            continue
        if b[u] < L:
            win = (a[u], b[u])
            if win not in windows:
                windows[win], ids[win] = [], []
            windows[win].append((into_len[u] + t[u] + out_len[u], into_low[u], out_low[u], t[u], into_len[u], out_len[u]))
            ids[win].append(u)
        else:  # finishes before C - tail[u]; remote: after F(p_a(u)) and a transfer
            ends.append((ct[a[u] + 1] + into_len[u] + into_low[u] + t[u] + tail_l[u], t[u], a[u]))
    by_end: dict[int, list[tuple[int, float]]] = {}
    cc_np, nxt, prv = np.asarray(cc), _smaller(cc, 1), _smaller(cc, -1)
    spans = ExactSpans(problem, chain, pos, a, b) if EXACT else None
    for (lo, hi), items in windows.items():
        each = _window_cases(ct[hi] - ct[lo + 1], *_cuts(lo, hi, cc, cc_np, ct, nxt, prv), items, k,
                             lambda lo=lo, hi=hi: kin_of(lo, hi), every=cases is not None)
        if cases is not None:
            cases[lo, hi] = each
        w = min(each)
        by_end.setdefault(hi, []).append((lo, max(w, spans.span(lo, hi, w)) if spans else w))
    if MERGE:
        for (lo, hi), items in _merged(windows, ct, cc):
            w = _window(ct[hi] - ct[lo + 1], *_cuts(lo, hi, cc, cc_np, ct, nxt, prv), items, k)
            by_end.setdefault(hi, []).append((lo, max(w, spans.span(lo, hi, w)) if spans else w))
    head_l = head.tolist()
    fin = [0.0] * L
    for j, v in enumerate(chain):
        s = head_l[v]
        if j and fin[j - 1] > s:
            s = fin[j - 1]
        for lo, w in by_end.get(j, ()):
            if fin[lo] + w > s:
                s = fin[lo] + w
        fin[j] = s + t[v]
    by_start: dict[int, list[tuple[int, float]]] = {}
    for hi, ws in by_end.items():
        for lo, w in ws:
            by_start.setdefault(lo, []).append((hi, w))
    rest = [0.0] * L  # rest[j]: a lower bound on C - S(p_j), the mirror image of fin
    for j in range(L - 1, -1, -1):
        v = chain[j]
        s = tail_l[v]
        if j + 1 < L and rest[j + 1] > s:
            s = rest[j + 1]
        for hi, w in by_start.get(j, ()):
            if rest[hi] + w > s:
                s = rest[hi] + w
        rest[j] = s + t[v]
    if detail is not None:
        detail.update(fin=fin, rest=rest)
    best = max(f - t[v] + r for f, r, v in zip(fin, rest, chain))
    return max(best, _end_bound(ends, fin, ct, cc, tail_l[chain[-1]]))


def _merged(windows: dict[tuple[int, int], list[tuple]], ct: list[float], cc: list[float]
            ) -> list[tuple[tuple[int, int], list[tuple]]]:
    """Windows that share their last chain node p_b, taken together from the first of their p_a
    (and those that share p_a, to the last of their p_b): every member runs between F(p_a) and
    S(p_b) of the joint window, its path from p_a runs through the chain to its own p_a (the chain
    nodes' time joins its way in, the chain edges' least transfer its least one), mirror-wise
    to p_b. A joint window is a window of the argument (docs/scale.md); its members' kin are left
    out (a bound without them is valid)."""
    out = []
    for side in (0, 1):
        groups: dict[int, list[int]] = {}
        for key in windows:
            groups.setdefault(key[1 - side], []).append(key[side])
        for shared, ends in groups.items():
            if not 2 <= len(ends) <= MAX_MERGED:
                continue  # any window may be left out
            far = min(ends) if side == 0 else max(ends)
            items = []
            for e in ends:
                for x, m_in, m_out, tv, l_in, l_out in windows[(e, shared) if side == 0 else (shared, e)]:
                    if side == 0:  # from p_far through the chain to p_e, then the member's own way in
                        gap, low = ct[e + 1] - ct[far + 1], min(cc[far + 1:e + 1], default=np.inf)
                        items.append((x + gap, min(m_in, low), m_out, tv, l_in + gap, l_out))
                    else:
                        gap, low = ct[far] - ct[e], min(cc[e + 1:far + 1], default=np.inf)
                        items.append((x + gap, m_in, min(m_out, low), tv, l_in, l_out + gap))
            out.append(((far, shared) if side == 0 else (shared, far), items))
    return out


def _end_bound(ends: list[tuple[float, float, int]], fin: list[float], ct: list[float], cc: list[float],
               last_tail: float) -> float:
    """The end window from the last chain positions a. If the chain has no cut after p_a, all of
    p_a .. p_{L-1} is on one device d and the members with a(u) >= a either run on d after
    F(p_a) with the rest of the chain, or elsewhere, finishing at F(p_a) + Y(u) - ct[a+1] at the
    earliest (Y: chain time up to a(u), the transfer path and the tail). If its first cut after
    p_a is before p_e, the chain pays that transfer and d still runs p_a .. p_{e-1} and the
    members with a <= a(u) < e that stay. The CUT_CHOICES cheapest cuts are tried one by one, the
    others together at the price of the next cheapest. Any set of positions a gives a valid bound;
    those whose remaining chain is shorter than the members' remote paths can gain."""
    if not ends:
        return 0.0
    L = len(fin)
    horizon = max(e[0] - ct[e[2] + 1] for e in ends)
    lows = [lo for lo in range(L - 1, -1, -1) if ct[L] - ct[lo + 1] <= horizon]
    if not lows:
        return 0.0
    if len(lows) > MAX_END_POSITIONS:
        lows = [lows[i] for i in np.linspace(0, len(lows) - 1, MAX_END_POSITIONS).astype(int).tolist()]
    ends = sorted(ends, key=lambda e: -e[2])
    wanted = set(lows)
    best, taken = 0.0, 0
    members: list[tuple[float, float, int]] = []  # those with a(u) >= lo
    cheap: list[tuple[float, int]] = []  # the CUT_CHOICES + 1 cheapest cuts after lo: (cc, e)
    for lo in range(L - 1, min(lows) - 1, -1):
        if lo + 1 < L:
            bisect.insort(cheap, (cc[lo + 1], lo + 1))
            del cheap[CUT_CHOICES + 1:]
        while taken < len(ends) and ends[taken][2] >= lo:
            members.append(ends[taken])
            taken += 1
        if len(members) > MAX_END_MEMBERS:
            break  # any position may be left out
        if lo not in wanted or not members:
            continue
        rest = ct[L] - ct[lo + 1]
        val = _split([(y, tv) for y, tv, _ in members], ct[L]) - ct[lo + 1]  # no cut after p_lo
        for c, e in cheap[:CUT_CHOICES]:
            stay = [(y, tv) for y, tv, at in members if at < e]
            val = min(val, max(rest + c + last_tail, _split(stay, ct[e]) - ct[lo + 1]))
        if len(cheap) > CUT_CHOICES:
            val = min(val, rest + cheap[CUT_CHOICES][0] + last_tail)
        best = max(best, fin[lo] + val)
    return best
