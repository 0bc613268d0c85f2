"""Refinement: local search on the original graph, judged by placement.evaluator.

Why: a placement mapped back from a coarse graph (or produced by a heuristic) leaves makespan on
the table: the coarse model serialised each coarse node and could not split it. This is the last
phase of the pipeline (multilevel refinement, as in graph partitioners), and it may only improve.

How: iterated local search. Each round computes the critical chain of the current FIFO schedule
(from the node that finishes last, back through the input or the device predecessor that decided
each start) and tries, in a seeded random order, moves that can shorten it:

- move one unit (a node, or its whole colocation group) of the chain to another allowed device
  (the devices of its neighbours first, then the least busy);
- move a boundary block: the unit plus its neighbours on the same device in the schedule (1, 3, 7,
  ... nodes on each side, up to a sixteenth of a device's share on big graphs, where single-node
  moves are too small to pay for an evaluation), and runs of the chain that share a device;
- swap a chain unit with a unit of another device whose static size keeps both within capacity;
- first of all, one batch move (:func:`spread_runs`): the chain's runs on one device split into
  independent pieces, spread over the devices idle in each run's time window (in ordered mode
  judged also by the bottom-level priority schedule of the new placement, solvers/reschedule.py);
- then every run of the chain on one device, whole, to each other device, from the chain's end
  back (session 20): a run joined by transfers that cost more than its nodes (the first layer's
  backward after the last gradient sum) gains nothing node by node, whole it can; a run of one
  node goes to the device of the run before or after it when the transfer between them costs
  more than the node (session 21: the last weight gradient that waited 10.29 for its input's
  transfer came up among 4,400 chain nodes' moves; session 25: not over cheaper links); once a pass
  over them (at most RUNS_FIRST_MOVES) keeps nothing they wait RUNS_AGAIN accepted moves (or an
  adopted schedule) among the single moves.

A move is accepted when it lowers the makespan (or, from an infeasible start, the memory overflow)
and never when it makes the placement infeasible. When a round finds nothing, a seeded random kick
perturbs the best placement and the search goes on, until the deadline, the evaluation budget or
``patience`` kicks without progress. The answer is the best evaluated placement, so it is never
worse than the input. Deterministic given ``opts.seed`` and the evaluation budget (the deadline
can only cut the search shorter).

With ``start`` (e.g. the coarse schedule projected back) or ``keep_order``, moves are judged by
the schedule that keeps the current per-device order instead of (or, with "both", as well as)
the FIFO executor: an exact solver's order is often better than what FIFO makes of its placement.

:func:`refine_multilevel` wraps it for big graphs, where one evaluation costs up to a second: it
coarsens in levels (placement.coarsen), refines the restricted placement from the coarsest level
up, and finishes on the original graph.
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Callable, Iterator

import numpy as np

from heuristics.memory_order import memory_aware_order
from placement import kernels
from placement.evaluator import Evaluation, as_placement, check_placement, edge_delay, evaluate, wait_delay
from placement.pieces import connected_pieces
from placement.problem import Problem
from placement.solution import SolveOptions

from placement.incremental import (IncrementalSchedule, TimingGraph, Trial, device_order, kept_order_start, ordered_evaluation,
                                   ordered_start, timing_graph)

from .reschedule import bottom_levels, list_schedule_start, priority_order


# How a batch move is judged in ordered mode from a feasible schedule: "lazy" (the priority
# schedule evaluated only when its list simulation beats the incumbent and the kept order:
# _Search._try_batch) or "full" (both schedules always evaluated in full, before session 8).
BATCH = "lazy"
SMALL_BATCH = 64  # a batch move of at most this many nodes is judged by the incremental schedule (_Search._kept_order)
# keep_order="auto": also judge by FIFO only while FIFO is as short as the kept order (within
# this rounding). "Both" costs every move a full FIFO evaluation and the incremental path: on a
# 10K CNN (K = 8) whose slack groups were re-homed (solvers/rehome.py) FIFO came within 1.5% of
# the kept order, the 2% allowed before session 39 chose "both", and refine tried 12K moves in
# 39 s instead of 400K (60 s answer 4.7% worse).
AUTO_FIFO_SLACK = 1e-9
# After this many batch moves rejected in a row, the next batch move waits 2, 4, ... up to
# BATCH_WAIT_MAX rounds (None: a batch move every round, as before session 13). On the 40K
# transformer 0 of 220 batch moves in 15 s were accepted, at 17 ms each (a third of the CPU);
# on the CNN 98 of 137, the LSTM 24 of 110 (bench/results_scale.md, "Session 13").
BATCH_PATIENCE: int | None = 4
BATCH_WAIT_MAX = 32
# After a pass over every run of the chain kept nothing, the runs go back to being tried among the
# single moves until this many moves have been accepted (200K CNN: a pass is ~3,800 moves, 4 s)
RUNS_AGAIN = 50
# Under the peak model a move whose schedule overflows gets a memory-aware order (it may fit
# that way). On the imported EfficientNet at K = 8 and 1.3x its memory bound 177 of 242 moves
# overflowed and no rescue fitted, at 0.2 s each (87% of refine's time, 6 moves a second); on the
# U-Net at K = 8 166 of 391 fitted and none beat the current schedule. After this many rescues in
# a row that made no move acceptable, the next overflowing schedules skip it, 2, 4, ... up to
# RESCUE_WAIT_MAX of them; one that pays resets the wait. Never while the current
# schedule itself overflows (refine is then repairing it).
RESCUE_PATIENCE = 8
RESCUE_WAIT_MAX = 256
RUNS_FIRST = True  # tests of other move kinds switch it off to keep their paths
# Whole-run moves tried first in one pass, at most (the rest wait among the single moves): with the
# incremental schedule a move costs about a millisecond (200K CNN: 3,800 runs, 4 s); judged by
# full evaluations (graphs up to 20K nodes, FIFO and kept order: two each) up to tens of milliseconds
RUNS_FIRST_MOVES = {True: 4000, False: 1000}


@dataclass
class RefineStats:
    """What a refine run did (pass one to :func:`refine` to have it filled in)."""

    evaluations: int = 0
    accepted: int = 0
    kicks: int = 0
    start_makespan: float = 0.0
    end_makespan: float = 0.0
    stopped: str = ""
    judged_by: str = ""  # "fifo", "order" (the kept per-device order) or "both"
    best_makespan: float | None = None  # the best feasible makespan so far, live (progress lines read it)


class Units:
    """Colocation units: a group moves as one; other nodes alone."""

    def __init__(self, problem: Problem) -> None:
        g = problem.colocate
        key = np.where(g < 0, len(problem.colocate_names) + np.arange(problem.n), g)
        _, self.of = np.unique(key, return_inverse=True)
        self.of = self.of.astype(np.int64).ravel()
        self.count = int(self.of.max()) + 1 if problem.n else 0
        order = np.argsort(self.of, kind="stable")
        bounds = np.searchsorted(self.of[order], np.arange(self.count + 1))
        self.members = [order[bounds[u]:bounds[u + 1]] for u in range(self.count)]
        self.order, self.bounds = order, bounds  # the members of all units, unit by unit
        self.first = order[bounds[:-1]] if self.count else np.zeros(0, dtype=np.int64)  # a member of each unit
        self.need = np.bincount(self.of, weights=problem.param_bytes + problem.out_bytes, minlength=self.count)
        self.time = np.bincount(self.of, weights=problem.time, minlength=self.count)
        mask = problem.allowed_mask()
        self.mask = mask[[m[0] for m in self.members]] if self.count else np.zeros((0, problem.k), dtype=bool)


def order_of(problem: Problem, placement: np.ndarray, start: np.ndarray,
             graph: TimingGraph | None = None) -> list[list[int]]:
    """Per-device node order of a schedule: by start time, ties zero-time nodes first, then by
    topological rank (placement.incremental.device_order: an order the evaluator accepts for any
    valid schedule, and for any placement re-using its start times, which keeps the schedule's own
    order). ``graph``: the schedule's TimingGraph (graph + waits), for a schedule with waits."""
    return device_order(problem, placement, start, graph=graph)


def kept_waits(problem: Problem, ev: Evaluation, waits: list[tuple[int, int]] | None) -> list[tuple[int, int]] | None:
    """The waits (u, v) of ``waits`` that the schedule ``ev`` meets (v starts no earlier than u
    finishes, plus the latency across devices: placement.evaluator.wait_delay), None for none:
    those a search from ``ev`` can keep as constraints (an answer re-ordered to fit memory, e.g. by
    solvers.ordering.fit_by_order, may no longer meet its method's waits)."""
    if not waits:
        return None
    w = np.asarray(waits, dtype=np.int64).reshape(-1, 2)
    pl = ev.placement
    lat = np.where(pl[w[:, 0]] != pl[w[:, 1]], wait_delay(problem), 0.0)
    met = ev.start[w[:, 1]] >= ev.finish[w[:, 0]] + lat  # exactly: an evaluator's schedule meets its waits with the same sums
    return [(int(u), int(v)) for u, v in w[met].tolist()] or None


def _key(problem: Problem, ev: Evaluation) -> tuple[float, float]:
    """Lexicographic objective: total memory overflow, then makespan."""
    return float(ev.overflow(problem).sum()), ev.makespan


def critical_chain(problem: Problem, ev: Evaluation, graph: TimingGraph | None = None) -> list[int]:
    """Nodes of a critical chain of the schedule, last first: from the node finishing last, back
    through the input arrival (or wait: ``graph``) or the previous node on the same device that
    fixed each start.

    Every node's decider (the first input of latest arrival if it arrives at the start, else the
    device predecessor in (start, finish) order if it finishes then) is computed at once in numpy;
    only the walk along the chain is a Python loop."""
    if problem.n == 0:
        return []
    n = problem.n
    start, finish, pl = ev.start, ev.finish, ev.placement
    eps = 1e-9 * max(1.0, ev.makespan)
    order = np.lexsort((finish, start, pl))
    prev = np.full(n, -1, dtype=np.int64)
    same = pl[order[1:]] == pl[order[:-1]]
    prev[order[1:][same]] = order[:-1][same]
    g = timing_graph(problem) if graph is None else graph
    fast = kernels.for_size(n)
    if fast is not None:  # the deciders of the chain's nodes only, compiled
        ptr, nbr, eid = g.pred_ptr
        return fast.chain_walk(int(np.argmax(finish)), start, finish, prev, ptr, nbr, g.delay(problem, pl)[eid],
                               eps).tolist()
    late = start - eps
    decider = np.full(n, -1, dtype=np.int64)
    has = prev >= 0
    chain_ok = np.zeros(n, dtype=bool)
    chain_ok[has] = finish[prev[has]] >= late[has]
    decider[chain_ok] = prev[chain_ok]
    ptr, nbr, eid = g.pred_ptr
    if nbr.size:
        arrive = finish[nbr] + g.delay(problem, pl)[eid]
        count = np.diff(ptr)
        nodes = np.flatnonzero(count)
        top = np.maximum.reduceat(arrive, ptr[nodes])  # the latest arrival of each node with inputs
        seg = np.repeat(np.arange(nodes.size), count[nodes])
        idx = np.where(arrive == top[seg], np.arange(nbr.size), nbr.size)
        first = np.minimum.reduceat(idx, ptr[nodes])  # its first input in pred order (np.argmax's choice)
        ok = top >= late[nodes]
        decider[nodes[ok]] = nbr[first[ok]]
    dec = decider.tolist()
    v = int(np.argmax(finish))
    chain = [v]
    seen = {v}
    while start[v] > eps:
        nxt = dec[v]
        if nxt < 0 or nxt in seen:
            break
        v = nxt
        seen.add(v)
        chain.append(v)
    return chain


def join_moves(problem: Problem, ev: Evaluation, v: int, unit_of: np.ndarray, mask: np.ndarray,
               pred: tuple[np.ndarray, np.ndarray, np.ndarray]) -> list[tuple[list[int], list[int]]]:
    """Moves that bring the remote inputs holding ``v`` back onto v's device, several at once.

    A node fed by many producers elsewhere (a gradient sum over a block's paths, a concat) starts
    when the last transfer lands; when two or more land at nearly the same time, moving any one
    of them home gains nothing, so single moves never leave the plateau (the 200K CNN's gradient
    sums, bench/results_scale.md "Session 19"). The remote inputs' units, latest arrival first,
    move together: the first 2, 4, 8, ... of them and all. Only when an input transfer decides
    v's start; units not allowed on v's device are left out. Inputs that share one unit give no
    move here (a single move brings that unit home)."""
    ptr, nbr, eid = pred
    lo, hi = int(ptr[v]), int(ptr[v + 1])
    if hi - lo < 2:
        return []
    pl = ev.placement
    d = int(pl[v])
    us, es = nbr[lo:hi], eid[lo:hi]
    far = pl[us] != d
    if np.count_nonzero(far) < 2:
        return []
    us, es = us[far], es[far]
    arrive = ev.finish[us] + problem.comm[es]
    if arrive.max() < ev.start[v] - 1e-9 * max(1.0, ev.makespan):
        return []
    finish = ev.finish
    ranked: list[int] = []
    for i in np.argsort(-arrive, kind="stable").tolist():
        u = int(us[i])
        # On v's device u would start once its own inputs reach d: if they too come from afar,
        # bringing u home only moves the transfer earlier on the path (a concat of branches).
        home = 0.0
        for j in range(int(ptr[u]), int(ptr[u + 1])):
            w = int(nbr[j])
            home = max(home, finish[w] + (0.0 if pl[w] == d else float(problem.comm[eid[j]])))
        if home + problem.time[u] < arrive[i]:
            ranked.append(int(unit_of[u]))
    units = [u for u in dict.fromkeys(ranked) if mask[u, d]]
    out: list[tuple[list[int], list[int]]] = []
    size = 2
    while units[size - 1:]:
        take = sorted(units[:size])
        out.append((take, [d] * len(take)))
        if size >= len(units):
            break
        size = min(2 * size, len(units))
    return out


def _window_busy(problem: Problem, ev: Evaluation) -> Callable[[int, float, float], float]:
    """``busy(d, a, b)``: how long device d computes during [a, b) in the schedule ``ev``."""
    pl = ev.placement
    seq = np.lexsort((ev.start, pl))
    bounds = np.searchsorted(pl[seq], np.arange(problem.k + 1))
    per = []
    for d in range(problem.k):
        nodes = seq[bounds[d]:bounds[d + 1]]
        s, f = ev.start[nodes], ev.finish[nodes]
        per.append((s, f, np.r_[0.0, np.cumsum(f - s)]))

    def before(d: int, t: float) -> float:
        s, f, cum = per[d]
        i = int(np.searchsorted(s, t, side="right"))
        return 0.0 if i == 0 else float(cum[i - 1] + max(0.0, min(t, f[i - 1]) - s[i - 1]))

    return lambda d, a, b: before(d, b) - before(d, a)


class _Slices:
    """``succs[v]``: v's successors sliced from the CSR arrays on demand (when no lists were built)."""

    def __init__(self, ptr: np.ndarray, nbr: np.ndarray) -> None:
        self.ptr, self.nbr = ptr, nbr

    def __getitem__(self, v: int) -> list[int]:
        return self.nbr[self.ptr[v]:self.ptr[v + 1]].tolist()


def spread_runs(problem: Problem, ev: Evaluation, chain: list[int], units_of: np.ndarray, need: np.ndarray,
                mask: np.ndarray, memory_model: str = "static", lists: dict[str, list] | None = None) -> dict[int, int]:
    """One batch move along the critical chain: {unit: new device}.

    The chain (``critical_chain(problem, ev)``, last first) is cut into runs on one device; the
    nodes of a run are split into the connected components of the graph edges among them: pieces
    that wait for each other only because they share the device (e.g. the attention heads of one
    layer that PARDNN put on one device). The pieces of each run are spread,
    longest first, over the devices least busy during the run's time window (the run's own device
    counted without them): a piece goes where the window holds the least compute so far. Under
    the static model a device's static memory is kept within capacity.

    ``lists``: Python views of ``units_of``, ``need``, ``mask``, the node times and successors,
    made at the first run with pieces; a caller that passes the same arrays every time (refine's
    search) keeps them across calls by passing the same dict."""
    fast = kernels.for_size(problem.n)
    if fast is not None and chain:
        return _spread_compiled(fast, problem, ev, chain, units_of, need, mask, memory_model)
    pl = ev.placement
    ch = chain[::-1]
    dev = pl[ch].tolist() if ch else []
    busy = _window_busy(problem, ev)
    load = np.bincount(pl, weights=problem.param_bytes + problem.out_bytes, minlength=problem.k).tolist()
    cap = (problem.memory * (1 + 1e-12) + 1e-9).tolist()
    if lists is None:
        lists = {"succs": _Slices(*problem.succ_ptr[:2])}  # one call: slices on demand
    if "succs" not in lists:
        ptr_l, nbr_l = problem.succ_ptr[0].tolist(), problem.succ_ptr[1].tolist()
        lists["succs"] = [nbr_l[ptr_l[v]:ptr_l[v + 1]] for v in range(problem.n)]
    succs = lists["succs"]

    def total(values: str, array: np.ndarray, idx: list[int]) -> float:
        # numpy sums fewer than 8 values one after the other, as Python does: same floats, no call
        if len(idx) >= 8:
            return float(array[idx].sum())
        got = lists.get(values)
        if got is None:
            got = lists[values] = array.tolist()
        return float(sum(got[x] for x in idx))

    moves: dict[int, int] = {}
    i = 0
    while i < len(ch):
        j = i
        while j + 1 < len(ch) and dev[j + 1] == dev[i]:
            j += 1
        run, i = ch[i:j + 1], j + 1
        if len(run) < 2:
            continue
        pieces = connected_pieces(run, succs)
        if len(pieces) < 2:
            continue
        if "units" not in lists:
            lists["units"], lists["mask"] = units_of.tolist(), mask.tolist()
        unit_l, mask_l = lists["units"], lists["mask"]
        a = int(pl[run[0]])
        lo, hi = float(ev.start[run[0]]), float(ev.finish[run[-1]])
        window = [busy(d, lo, hi) for d in range(problem.k)]
        length = [total("time", problem.time, piece) for piece in pieces]
        window[a] -= sum(length)
        for k in np.argsort(-np.asarray(length), kind="stable").tolist():
            us = sorted({unit_l[v] for v in pieces[k]})
            if any(u in moves for u in us):
                continue
            size = total("need", need, us)
            allowed = mask_l[us[0]] if len(us) == 1 else mask[us].all(axis=0).tolist()
            ok = [d for d in range(problem.k) if allowed[d]
                  and (d == a or memory_model != "static" or load[d] + size <= cap[d])]
            d = min(ok, key=lambda d: (window[d], d != a))
            window[d] += length[k]
            if d != a:
                load[d] += size
                load[a] -= size
                moves.update((u, d) for u in us)
    return moves


def _spread_compiled(fast, problem: Problem, ev: Evaluation, chain: list[int], units_of: np.ndarray, need: np.ndarray,
                     mask: np.ndarray, memory_model: str) -> dict[int, int]:
    """:func:`spread_runs` compiled (placement.kernels.spread_pieces and spread_assign: the same
    runs, pieces, windows and choices). Sums of 8 values or more are numpy's, as the Python loop's
    (numpy adds those pairwise, not one after the other), so they are taken here between the two."""
    pl = ev.placement
    ch = np.asarray(chain[::-1], dtype=np.int64)
    devc = pl[ch].astype(np.int64)
    sptr, snbr, _ = problem.succ_ptr
    run_first, run_last, piece_run, piece_ptr, nodes, unit_ptr, units, length, size = fast.spread_pieces(
        ch, devc, sptr, snbr, units_of, problem.time, need, np.full(problem.n, -1, dtype=np.int64))
    if run_first.size == 0:
        return {}
    for c in np.flatnonzero(np.diff(piece_ptr) >= 8).tolist():
        length[c] = float(problem.time[nodes[piece_ptr[c]:piece_ptr[c + 1]]].sum())
    for c in np.flatnonzero(np.diff(unit_ptr) >= 8).tolist():
        size[c] = float(need[units[unit_ptr[c]:unit_ptr[c + 1]]].sum())
    seq = np.lexsort((ev.start, pl))  # each device's nodes by start, as _window_busy
    blo = np.searchsorted(pl[seq], np.arange(problem.k + 1)).astype(np.int64)
    bs, bf = ev.start[seq], ev.finish[seq]
    bcum = np.concatenate([np.r_[0.0, np.cumsum(bf[blo[d]:blo[d + 1]] - bs[blo[d]:blo[d + 1]])] for d in range(problem.k)])
    load = np.bincount(pl, weights=problem.param_bytes + problem.out_bytes, minlength=problem.k).astype(np.float64)
    cap = problem.memory * (1 + 1e-12) + 1e-9
    moved_u, moved_d = fast.spread_assign(run_first, run_last, piece_run, unit_ptr, units, length, size, ch, devc, ev.start,
                                          ev.finish, np.asarray(mask, dtype=bool), blo, bs, bf, bcum, load, cap, memory_model == "static",
                                          np.zeros(len(need), dtype=np.bool_))
    return dict(zip(moved_u.tolist(), moved_d.tolist()))


class Backoff:
    """A trial that waits after repeated misses: from ``patience`` misses in a row (None: never),
    the next trial waits 2, 4, 8, ... chances, at most ``cap``; a hit ends the waits. Refine's batch
    moves (BATCH_PATIENCE) and memory-aware rescues (RESCUE_PATIENCE) use it."""

    def __init__(self, patience: int | None, cap: int) -> None:
        self.patience, self.cap = patience, cap
        self.misses = 0  # misses in a row
        self.wait = 0  # chances the next trial still skips

    def due(self) -> bool:
        """Is the trial to be made at this chance? Each skipped chance counts the wait down."""
        if self.wait > 0:
            self.wait -= 1
            return False
        return True

    def judged(self, hit: bool) -> None:
        if hit:
            self.misses = self.wait = 0
            return
        self.misses += 1
        if self.patience is not None and self.misses >= self.patience:
            self.wait = min(self.cap, 2 ** min(self.misses - self.patience + 1, self.cap.bit_length()))


class _Search:
    def __init__(self, problem: Problem, pl: np.ndarray, opts: SolveOptions, deadline: float, memory_model: str,
                 max_evals: int | None, patience: int, stats: RefineStats, keep_order: bool | str = False,
                 start: np.ndarray | None = None, incremental: bool = True, batch: str = BATCH,
                 waits: list[tuple[int, int]] | None = None) -> None:
        self.p = problem
        self.batch = batch
        self._set_waits(waits)
        if self.waits is not None:
            # Waits need an order (the FIFO executor takes none), and the schedule they came with.
            if start is None:
                raise ValueError("refine: waits need the start times of the schedule they belong to")
            keep_order = True
        self.rejected_batch: tuple[tuple[int, ...], tuple[int, ...]] | None = None  # the last batch move rejected
        self.runs_dry_at: int | None = None  # stats.accepted when a pass over every chain run kept nothing
        self.batch_waits = Backoff(BATCH_PATIENCE, BATCH_WAIT_MAX)  # rounds: a hit is an accepted batch move
        self.cur_key: tuple[float, float] | None = None  # set once the first schedule is evaluated
        # overflowing evaluations: a hit is a rescue that made a move acceptable
        self.rescue_waits = Backoff(RESCUE_PATIENCE, RESCUE_WAIT_MAX)
        self.keep_order = keep_order
        self.units = Units(problem)
        self.rng = np.random.default_rng(opts.seed)
        self.deadline = deadline
        self.stop = opts.stop  # Ctrl-C / SIGTERM: checked before every evaluation
        self.mm = memory_model
        self.max_evals = max_evals
        self.patience = patience
        self.stats = stats
        self.eval_seconds = 0.0
        self.full_seconds = 0.0  # the longest full evaluation so far: what a batch move or a kick costs
        self.succ = problem.succ_ptr
        # spread_runs' Python views of the units and of the graph, kept across rounds
        self._spread_lists: dict[str, list] = {}  # the successor lists made by the first Python spread_runs
        self.pred = problem.pred_ptr
        self.cur = pl
        self.cur_ev = self._eval(pl, None if self.waits is None else start)
        if keep_order and self.waits is None:
            # The FIFO schedule's order re-timed is never later than FIFO; a given schedule's may be better.
            fifo_ev = self.cur_ev
            self.keep_order = True  # no second FIFO evaluation per start below
            firsts = [self.cur_ev.start] + ([np.asarray(start, dtype=float)] if start is not None else [])
            evs = [self._eval(pl, s) for s in firsts[:1 if self.stop.is_set() else None]]
            self.cur_ev = min(evs, key=lambda e: _key(problem, e))
            self.keep_order = keep_order
            if keep_order == "auto":
                # FIFO behind the kept order (e.g. an ETF schedule, 30% faster than FIFO on its
                # placement): judging each move by both would cut the moves tried for nothing.
                behind = _key(problem, fifo_ev)[0] > _key(problem, self.cur_ev)[0] or \
                    fifo_ev.makespan > (1 + AUTO_FIFO_SLACK) * self.cur_ev.makespan
                self.keep_order = True if behind else "both"
        self.stats.judged_by = {False: "fifo", True: "order", "both": "both"}[self.keep_order]
        if self.waits is not None:
            self.stats.judged_by += f" with {len(self.waits)} waits"
        # In ordered mode a move re-times only the cone it affects (placement/incremental.py, equal
        # to the full ordered evaluation): built lazily, re-based whenever the current schedule changes.
        self._incremental = incremental
        self.incremental = self.keep_order is True and incremental
        self._inc: IncrementalSchedule | None = None
        self._inc_for: Evaluation | None = None
        self.cur_key = _key(problem, self.cur_ev)
        self.best, self.best_ev, self.best_key = pl, self.cur_ev, self.cur_key
        self.stats.start_makespan = self.cur_ev.makespan
        self.stale, self.last = 0, self.best_key  # kicks without progress, and the best when they started

    def _set_waits(self, waits: list[tuple[int, int]] | None) -> None:
        """The waits every schedule of this search keeps (docs/model.md, "Waits"): each evaluation,
        full or incremental, holds v until u finishes (+ latency across devices), wherever a move
        puts u and v (a wait names nodes, not devices, so it stays a valid constraint of any
        placement; it only closes a cycle against an order that runs v before u on one device, and
        every order here comes from start times that meet it)."""
        new = [(int(u), int(v)) for u, v in waits] if waits else None
        if getattr(self, "graph", None) is not None and new == self.waits:
            return  # the same waits: the timing graph and the incremental schedule stay
        self.graph = timing_graph(self.p, new)
        self.waits = self.graph.wait_list
        self._inc = None

    # -- budget --
    def _past_deadline(self) -> bool:
        return self.stop.is_set() or time.monotonic() >= self.deadline

    def out_of_budget(self) -> str:
        """Why to stop now, or "": an evaluation that would end past the deadline is not started."""
        if self.stop.is_set():
            return "stopped"
        per_eval = self.eval_seconds / max(1, self.stats.evaluations)
        if time.monotonic() + per_eval >= self.deadline:
            return "deadline"
        if self.max_evals is not None and self.stats.evaluations >= self.max_evals:
            return "evaluations"
        return ""

    def _eval(self, pl: np.ndarray, ref_start: np.ndarray | None, cutoff: float | None = None) -> Evaluation:
        """FIFO evaluation, or with ``ref_start`` the schedule that keeps each device's nodes in
        the order of those start times (moved nodes slot in where they ran before). ``cutoff``: a
        makespan the caller rejects at or above; when every schedule made ends there, the first is
        returned with its peak memory unmeasured and no rescue (the peak is the costly part)."""
        t0 = time.monotonic()
        fifo = None
        if ref_start is None:
            ev = evaluate(self.p, pl, memory_model=self.mm)
        else:
            ev = evaluate(self.p, pl, order=order_of(self.p, pl, ref_start, graph=self.graph), memory_model=self.mm,
                          waits=self.waits)
            if self.keep_order == "both":
                fifo = evaluate(self.p, pl, memory_model=self.mm)
        if cutoff is not None and ev.makespan >= cutoff and (fifo is None or fifo.makespan >= cutoff):
            self._count_eval(t0)
            return ev
        if fifo is not None and _key(self.p, fifo) < _key(self.p, ev):
            ev = fifo
        if self.mm == "peak" and not ev.feasible(self.p) and self.waits is None and self._rescue_due():
            # the placement may fit in a memory-aware order (heuristics/memory_order.py). Not with
            # waits: they are what holds the memory there, an order made without them rarely agrees
            # with them, and making it took 24 s on the 200K LSTM (one batch move's whole slice).
            # It stops at the deadline (or Ctrl-C): at 200K nodes it is tens of seconds of Python.
            order = memory_aware_order(self.p, pl, stop=self._past_deadline)
            alt = None if order is None else self._ordered(pl, order)
            if alt is not None and _key(self.p, alt) < _key(self.p, ev):
                ev = alt
            # it paid if it made a schedule the search can accept (the first evaluation has no key yet)
            self._rescue_judged(ev is alt and (self.cur_key is None or self._better(_key(self.p, alt), self.cur_key)))
        self._count_eval(t0)
        return ev

    def _count_eval(self, t0: float) -> None:
        self.full_seconds = max(self.full_seconds, time.monotonic() - t0)
        self.eval_seconds += time.monotonic() - t0
        self.stats.evaluations += 1

    def _rescue_due(self) -> bool:
        """Whether an overflowing schedule gets the memory-aware order now: always while the
        current schedule overflows (repairing it), else unless it waits after RESCUE_PATIENCE
        rescues in a row that made no move acceptable (a fit no better than the current schedule
        is rejected too)."""
        return self.cur_key is None or self.cur_key[0] > 0.0 or self.rescue_waits.due()

    def _rescue_judged(self, paid: bool) -> None:
        self.rescue_waits.judged(paid)

    def _ordered(self, pl: np.ndarray, order: list[list[int]]) -> Evaluation | None:
        """The evaluator's schedule of ``order`` with the search's waits; None when an order made
        without them (memory-aware, priority lists) contradicts a wait."""
        if self.waits is None:
            return evaluate(self.p, pl, order=order, memory_model=self.mm)
        start = ordered_start(self.p, pl, order, self.graph)  # None on a contradiction, without naming it
        if start is None:
            return None
        got = ordered_evaluation(self.p, pl, order, start, self.mm, self.graph)
        return got if got is not None else evaluate(self.p, pl, order=order, memory_model=self.mm, waits=self.waits)

    def _must_beat(self) -> float:
        """The makespan a schedule must end below to be better than the current one at equal
        overflow (:meth:`_better`'s tolerance)."""
        return self.cur_key[1] - 1e-9 * max(1.0, self.cur_key[1])

    def _better(self, key: tuple[float, float], than: tuple[float, float]) -> bool:
        tol = 1e-9 * max(1.0, than[1])
        if key[0] < than[0] - 1e-9 * max(1.0, than[0]):
            return True
        return key[0] <= than[0] + 1e-9 * max(1.0, than[0]) and key[1] < than[1] - tol

    # -- candidates --
    def _neighbour_devices(self, v: int, pl: np.ndarray) -> list[int]:
        devs: list[int] = []
        for ptr, nbr, _ in (self.pred, self.succ):
            for u in nbr[ptr[v]:ptr[v + 1]].tolist():
                d = int(pl[u])
                if d not in devs:
                    devs.append(d)
        return devs

    def _candidates(self, ev: Evaluation) -> Iterator[tuple]:
        """Moves as (units, target devices), lazily and in a seeded random order: per critical node
        its single moves, boundary blocks and swaps, interleaved with moves of chain runs."""
        p, pl, un = self.p, self.cur, self.units
        chain = critical_chain(p, ev, self.graph)
        busy = np.bincount(pl, weights=p.time, minlength=p.k)
        calm = [int(d) for d in np.argsort(busy, kind="stable")]
        by_dev = np.lexsort((ev.start, pl))
        pos = np.empty(p.n, dtype=np.int64)
        pos[by_dev] = np.arange(p.n)
        dev_start = np.searchsorted(pl[by_dev], np.arange(p.k + 1))
        seen: set[tuple] = set()
        # Block half-widths 1, 3, 7, ... up to 31, or a sixteenth of a device's nodes on big graphs.
        widest = max(31, p.n // (16 * p.k))
        halves = [2 ** i - 1 for i in range(1, 64) if 2 ** i - 1 <= widest]

        def fresh(units: list[int], devs: list[int]) -> bool:
            key = (tuple(units), tuple(devs))
            if key in seen:
                return False
            if not (all(un.mask[u, d] for u, d in zip(units, devs)) if len(units) <= 8 else un.mask[units, devs].all()):
                return False
            seen.add(key)
            return True

        def node_moves(v: int) -> list[tuple[list[int], list[int]]]:
            u, a = int(un.of[v]), int(pl[v])
            targets = list(dict.fromkeys(d for d in self._neighbour_devices(v, pl) + calm[:2] if d != a))
            out: list[tuple[list[int], list[int]]] = []
            lo_d, hi_d = int(dev_start[a]), int(dev_start[a + 1])
            for d in targets:
                out.append(([u], [d]))
                for half in halves:  # boundary blocks around v on its device, widening
                    lo, hi = max(lo_d, int(pos[v]) - half), min(hi_d, int(pos[v]) + half + 1)
                    block = sorted({int(x) for x in un.of[by_dev[lo:hi]].tolist()})
                    if len(block) > 1:
                        out.append((block, [d] * len(block)))
                    if hi - lo >= hi_d - lo_d:
                        break
                for x in self._swap_partners(u, a, d, ev):
                    out.append(([u, x], [d, a]))
            return [out[i] for i in self.rng.permutation(len(out)).tolist()]

        spread = spread_runs(p, ev, chain, un.of, un.need, un.mask, self.mm, self._spread_lists)
        if spread:  # first: one evaluation may shorten every run of the chain at once
            units = sorted(spread)
            devs = [spread[u] for u in units]
            batch = (tuple(units), tuple(devs))
            # A batch move the last round rejected comes back unchanged after a single move elsewhere
            # accepted (the chain's runs barely moved): at 50K nodes a second try costs a second for
            # nothing (bench/results_scale.md, "Session 8").
            if batch != self.rejected_batch and self._batch_due() and fresh(units, devs):
                yield units, devs, True  # a batch move: also judged re-ordered by priority
        runs: list[tuple[list[int], list[int]]] = []  # the chain's runs on one device, each to every other device
        if chain:
            chain_dev = pl[chain]
            cut = np.flatnonzero(chain_dev[1:] != chain_dev[:-1]) + 1
            first, end = np.r_[0, cut], np.r_[cut, len(chain)]
            chain_units = un.of[chain]
            for i, j in zip(first.tolist(), end.tolist()):
                units = np.unique(chain_units[i:j]).tolist()
                a = int(chain_dev[i])
                if j - i > 1:
                    runs.extend((units, [d] * len(units)) for d in range(p.k) if d != a)
                else:  # one node between dear transfers: to a neighbour's device (its single moves go anywhere)
                    near = dict.fromkeys(int(chain_dev[x]) for x in (i - 1, j)
                                         if 0 <= x < len(chain) and self._dear_link(chain[x], chain[i]))
                    runs.extend((units, [d]) for d in near if d != a)
        if RUNS_FIRST and (self.runs_dry_at is None or self.stats.accepted - self.runs_dry_at >= RUNS_AGAIN):
            for mv in runs[:RUNS_FIRST_MOVES[bool(self.incremental)]]:  # from the chain's end back (critical_chain lists it last first)
                if fresh(*mv):
                    yield mv
            self.runs_dry_at = self.stats.accepted  # reached only when none of them was kept
        runs = [runs[i] for i in self.rng.permutation(len(runs)).tolist()]
        for i, v in enumerate(self.rng.permutation(chain).tolist() if chain else []):
            if i < len(runs):
                if fresh(*runs[i]):
                    yield runs[i]
            for moves in (lambda: join_moves(p, ev, int(v), un.of, un.mask, self.pred), lambda: node_moves(int(v))):
                for mv in moves():  # node moves built only if no join move was taken
                    if fresh(*mv):
                        yield mv
        for mv in runs[len(chain):]:
            if fresh(*mv):
                yield mv

    def _dear_link(self, x: int, v: int) -> bool:
        """Does an edge between chain neighbours x and v (either way) cost more than v takes? Only
        then is v, a run of one node, moved to x's device in the whole-runs pass: a gradient that
        waits 10.29 for its input (the 200K CNN) is found there, while under a tight peak memory,
        where the chain hops between devices over transfers no dearer than its nodes, those
        greedy first moves led the U-Net's refine into a worse placement (1.225 -> 1.377)."""
        p = self.p
        return max(p.comm_between(x, v), p.comm_between(v, x)) > float(p.time[v])

    def _swap_partners(self, u: int, a: int, d: int, ev: Evaluation, limit: int = 3) -> list[int]:
        un, p = self.units, self.p
        load = ev.static_memory
        need = un.need
        room_a = p.memory[a] - load[a] + need[u]
        room_d = p.memory[d] - load[d] - need[u]
        on_d = np.flatnonzero((self.unit_dev == d) & un.mask[:, a])
        ok = on_d[(need[on_d] <= room_a) & (need[on_d] >= -room_d)]
        if ok.size == 0:
            return []
        pick = ok[np.argsort(un.time[ok], kind="stable")[:limit]]
        return [int(x) for x in pick if x != u]

    # -- apply --
    def _retime(self, units: list[int], devs: list[int]) -> tuple[Trial, Evaluation | None]:
        """The incremental ordered evaluation of a move; the Evaluation only when the move could be
        accepted (from a feasible current placement, a move that does not shorten the makespan is
        rejected without measuring memory)."""
        t0 = time.monotonic()
        self._current_inc()
        moves = self._node_moves(units, devs)
        feasible = self.cur_key[0] == 0.0
        need = self._must_beat()  # a feasible move must end before this
        trial = self._inc.try_move(moves, cutoff=need if feasible else float("inf"))
        ev = None
        if not feasible or (trial.complete and trial.makespan < need):
            ev = trial.evaluation(self.mm)
        self.eval_seconds += time.monotonic() - t0
        self.stats.evaluations += 1
        return trial, ev

    def _node_moves(self, units: list[int], devs: list[int]) -> dict[int, int]:
        """{node: device} of a move of units, unit by unit, each unit's members in order."""
        members = self.units.members
        if len(units) <= 8:
            return {int(v): d for u, d in zip(units, devs) for v in members[u].tolist()}
        un = self.units
        u = np.asarray(units, dtype=np.int64)
        size = un.bounds[u + 1] - un.bounds[u]
        nodes = un.order[np.repeat(un.bounds[u] - np.cumsum(size) + size, size) + np.arange(int(size.sum()))]
        return dict(zip(nodes.tolist(), np.repeat(np.asarray(devs, dtype=np.int64), size).tolist()))

    def _current_inc(self) -> IncrementalSchedule:
        """The incremental schedule based on the current schedule (built or re-based if stale)."""
        if self._inc is None:
            self._inc = IncrementalSchedule(self.p, self.cur, self.cur_ev.start, self.graph)
            self._inc_for = self.cur_ev
        elif self._inc_for is not self.cur_ev:
            self._inc.reset(self.cur, self.cur_ev.start)
            self._inc_for = self.cur_ev
        return self._inc

    def _try(self, units: list[int], devs: list[int], reorder: bool = False) -> bool:
        un = self.units
        if self.mm == "static" and self.cur_key[0] == 0.0:
            load = self.cur_ev.static_memory.copy()
            if len(units) <= 8:
                for u, d in zip(units, devs):
                    load[self.unit_dev[u]] -= un.need[u]
                    load[d] += un.need[u]
            else:  # the same additions in the same order per device (np.add.at applies them one by one)
                u = np.asarray(units, dtype=np.int64)
                need = un.need[u]
                np.add.at(load, np.column_stack([self.unit_dev[u], np.asarray(devs, dtype=np.int64)]).ravel(),
                          np.column_stack([-need, need]).ravel())
            if np.any(load > self.p.memory * (1 + 1e-12) + 1e-9):
                return False
        trial = trial_ev = None
        if (reorder or not self.incremental) and time.monotonic() + (3 if reorder else 1) * self.full_seconds >= self.deadline:
            return False  # full evaluations (a batch move: three) would end past the deadline (on 200K nodes: seconds)
        if reorder:
            self.rejected_batch = (tuple(units), tuple(devs))  # judged from here on; cleared if accepted
        if reorder and self.incremental and self.cur_key[0] == 0.0 and self.batch == "lazy":
            return self._try_batch(units, devs)
        if self.incremental and not reorder:  # a batch move is also judged re-ordered: see below
            trial, ev = self._retime(units, devs)
            if ev is None:
                return False
            pl, trial_ev = ev.placement, ev
        else:
            pl = self.cur.copy()
            for u, d in zip(units, devs):
                pl[un.members[u]] = d
            # a single move from a feasible schedule must end before the current makespan
            cutoff = None if reorder or self.cur_key[0] > 0.0 else self._must_beat()
            ev = self._eval(pl, self.cur_ev.start if self.keep_order else None, cutoff)
            if cutoff is not None and ev.makespan >= cutoff:
                return False
        if reorder and self.keep_order:
            # Slotting many moved nodes in at their old start times can serialise them badly: try
            # the bottom-level priority schedule of the new placement too (solvers/reschedule.py).
            t0 = time.monotonic()
            prio = bottom_levels(self.p, edge_delay(self.p, pl))
            other = self._ordered(pl, priority_order(self.p, pl, prio))
            self.eval_seconds += time.monotonic() - t0
            self.stats.evaluations += 1
            if other is not None and _key(self.p, other) < _key(self.p, ev):
                ev = other
        return self._accept(pl, ev, trial if trial is not None and ev is trial_ev else None)

    def _try_batch(self, units: list[int], devs: list[int]) -> bool:
        """A batch move from a feasible schedule in ordered mode, judged by the same two schedules
        as the full path in :meth:`_try` (the kept order, evaluated in full: re-timing a batch
        incrementally, its cone most of the graph, cost more than that on the 40K CNN) and the
        bottom-level priority schedule of the new placement, evaluated only when its list
        simulation's makespan (never below the evaluator's for the same order) beats the better
        of the incumbent and the kept order. At 50K nodes that saves one of the three full
        evaluations of every rejected batch move (bench/results_scale.md, "Session 8")."""
        pl = self.cur.copy()
        for u, d in zip(units, devs):
            pl[self.units.members[u]] = d
        ev, trial = self._kept_order(pl, units, devs)
        if ev is not None and not self._better(_key(self.p, ev), self.cur_key):
            ev = None
        kept = ev
        t0 = time.monotonic()
        bar = self.cur_key[1] if ev is None else min(self.cur_key[1], ev.makespan)
        order, start = list_schedule_start(self.p, pl, bottom_levels(self.p, edge_delay(self.p, pl)))
        sim = float((start + self.p.time).max()) if self.p.n else 0.0
        if sim < bar - 1e-9 * max(1.0, bar):
            # The simulation's times are the evaluator's schedule of its order: checked in numpy
            # instead of re-timed in full (evaluated in full only if the check fails).
            # (With waits the simulation, which does not know them, is a fixpoint only where no wait binds.)
            other = ordered_evaluation(self.p, pl, order, start, self.mm, self.graph)
            if other is None:
                other = self._ordered(pl, order)
            if other is not None and (ev is None or _key(self.p, other) < _key(self.p, ev)):
                ev = other
        self.eval_seconds += time.monotonic() - t0
        self.stats.evaluations += 1
        return ev is not None and self._accept(pl, ev, trial if trial is not None and ev is kept else None)

    def _kept_order(self, pl: np.ndarray, units: list[int], devs: list[int]) -> tuple[Evaluation | None, Trial | None]:
        """A batch move's placement ``pl`` judged by the current schedule's order (as ``_eval``):
        its Evaluation, or None when it cannot beat the current makespan. Under the static model
        the schedule is timed in one pass (placement.incremental.kept_order_start, the
        evaluator's schedule bit for bit at 2-3x less cost) and, when it beats the current
        makespan, checked as the fixpoint of its order and measured by the evaluator's memory
        functions (placement.incremental.ordered_evaluation).

        A batch of at most SMALL_BATCH nodes (on CNNs most batches move 1-7 nodes late in the
        schedule) is judged by the incremental schedule when it is current: the same schedule
        (placement/incremental.py), re-timed on its cone instead of over all nodes. No cutoff: the
        batch is a round's first move, and the bound's structures it would build first (30-50 ms
        at 40K nodes) cost more than the whole cone of a late batch and are wasted when the batch
        is accepted. The Trial comes back with the Evaluation, to be committed if the kept order
        is accepted."""
        ref = self.cur_ev.start
        if self.mm == "static":
            t0 = time.monotonic()
            need = self._must_beat()
            moves = self._small_batch(units, devs)
            if moves is not None:
                trial = self._inc.try_move(moves)
                ev = trial.evaluation(self.mm) if trial.makespan < need else None
                self.eval_seconds += time.monotonic() - t0
                self.stats.evaluations += 1
                return ev, trial
            start = kept_order_start(self.p, pl, ref, self.graph)
            if start is not None:
                ev = None
                if self.p.n and float((start + self.p.time).max()) < need:
                    ev = ordered_evaluation(self.p, pl, order_of(self.p, pl, ref, graph=self.graph), start, self.mm,
                                            self.graph)
                if ev is not None or self.p.n == 0 or float((start + self.p.time).max()) >= need:
                    self.eval_seconds += time.monotonic() - t0
                    self.stats.evaluations += 1  # one evaluation, as _eval would count
                    return ev, None
        return self._eval(pl, ref), None

    def _small_batch(self, units: list[int], devs: list[int]) -> dict[int, int] | None:
        """The batch move as {node: device} if the incremental schedule is current and the batch
        moves at most SMALL_BATCH nodes, else None."""
        if not self.incremental or self._inc is None or self._inc_for is not self.cur_ev:
            return None  # re-basing a stale one for a batch cost more than it saved on the 40K CNN
        members = self.units.members
        if sum(len(members[u]) for u in units) > SMALL_BATCH:
            return None
        return {int(v): d for u, d in zip(units, devs) for v in members[u].tolist()}

    def _accept(self, pl: np.ndarray, ev: Evaluation, trial: Trial | None = None) -> bool:
        """Make ``(pl, ev)`` the current schedule if it is better (never feasible -> infeasible);
        ``trial``: the incremental trial that produced ``ev``, committed as the new base."""
        key = _key(self.p, ev)
        if self.cur_key[0] == 0.0 and key[0] > 0.0:
            return False
        if self._better(key, self.cur_key):
            self.rejected_batch = None
            if trial is not None:
                self._inc.commit(trial)  # the next moves are tried on this schedule
                self._inc_for = ev
            self.cur, self.cur_ev, self.cur_key = pl, ev, key
            self.unit_dev = self._unit_dev(pl)
            self.stats.accepted += 1
            if self._better(key, self.best_key):
                self.best, self.best_ev, self.best_key = pl, ev, key
                if key[0] == 0.0:
                    self.stats.best_makespan = key[1]
            return True
        return False

    def _batch_due(self) -> bool:
        """Is this round's batch move to be tried? Not while it waits after BATCH_PATIENCE
        rejections in a row (each round it skips counts down its wait)."""
        return self.batch_waits.due()

    def _batch_judged(self, accepted: bool) -> None:
        """Count a batch move's outcome: an acceptance ends the waits; from BATCH_PATIENCE rejections
        in a row, each further one doubles the rounds the next batch move waits (up to BATCH_WAIT_MAX)."""
        self.batch_waits.judged(accepted)

    def _unit_dev(self, pl: np.ndarray) -> np.ndarray:
        return pl[self.units.first] if self.units.count else np.zeros(0, dtype=np.int64)

    def _kick(self) -> None:
        """Move a few random units to random allowed devices (keeping memory feasible) from the best."""
        un, p = self.units, self.p
        pl = self.best.copy()
        load = np.bincount(pl, weights=p.param_bytes + p.out_bytes, minlength=p.k)
        count = int(self.rng.integers(1, max(2, min(8, un.count // 4 + 1)) + 1))
        for u in self.rng.choice(un.count, size=min(count, un.count), replace=False).tolist():
            a = int(pl[un.members[u][0]])
            devs = [d for d in self.rng.permutation(p.k).tolist() if d != a and un.mask[u, d]
                    and load[d] + un.need[u] <= p.memory[d] * (1 + 1e-12)]
            if devs:
                pl[un.members[u]] = devs[0]
                load[a] -= un.need[u]
                load[devs[0]] += un.need[u]
        self.stats.kicks += 1
        self.rejected_batch = None  # a new neighbourhood: its batch moves deserve a new try
        self.cur = pl
        self.cur_ev = self._eval(pl, self.best_ev.start if self.keep_order else None)
        self.cur_key = _key(p, self.cur_ev)
        self.unit_dev = self._unit_dev(pl)
        if self.best_key[0] == 0.0 and self.cur_key[0] > 0.0:  # never wander into infeasibility
            self.cur, self.cur_ev, self.cur_key = self.best, self.best_ev, self.best_key
            self.unit_dev = self._unit_dev(self.best)

    def run(self) -> None:
        """Search until the deadline, the evaluation budget or convergence; may be called again
        (with a later ``self.deadline``) and goes on where it stopped."""
        self.unit_dev = self._unit_dev(self.cur)
        while True:
            why = self.out_of_budget()
            if why:
                self.stats.stopped = why
                return
            if self.stale > self.patience:  # converged in an earlier call, nothing adopted since
                self.stats.stopped = "converged"
                return
            improved = False
            for move in self._candidates(self.cur_ev):
                if self.out_of_budget():
                    break
                if len(move) == 3 and self.max_evals is not None and self.stats.evaluations + 3 > self.max_evals:
                    continue  # a batch move takes up to three evaluations: never past the budget
                ok = self._try(*move)
                if len(move) == 3:
                    self._batch_judged(ok)
                if ok:
                    improved = True
                    break
            if improved or self.out_of_budget():
                continue
            if self._better(self.best_key, self.last):
                self.stale, self.last = 0, self.best_key
            else:
                self.stale += 1
            if self.units.count < 2 or self.p.k < 2:
                self.stale = self.patience + 1  # nothing to kick: the next call returns at once too
            if self.stale > self.patience:
                self.stats.stopped = "converged"
                return
            if time.monotonic() + self.full_seconds >= self.deadline:
                self.stats.stopped = "deadline"  # a kick's full evaluation would end past it
                return
            self._kick()

    def adopt(self, pl: np.ndarray, ev: Evaluation, waits: list[tuple[int, int]] | None = None) -> bool:
        """Continue from placement ``pl`` with its schedule ``ev`` (and the ``waits`` it keeps: from
        here on the search's) when it is better than the search's best (another search found it);
        True if adopted. Moves are then judged by the order of ``ev``'s start times (ordered mode),
        and the kicks count starts again."""
        key = _key(self.p, ev)
        if not self._better(key, self.best_key):
            return False
        if waits or self.waits is not None:
            self._set_waits(waits)
            if self.waits is not None and self.keep_order is not True:
                self.keep_order = True  # waits need the kept order (FIFO takes none)
                self.incremental = self._incremental
        self.cur, self.cur_ev, self.cur_key = pl, ev, key
        self.best, self.best_ev, self.best_key = pl, ev, key
        self.unit_dev = self._unit_dev(pl)
        self.stale, self.last = 0, key
        self.rejected_batch = None
        self.runs_dry_at = None  # a new schedule: its runs are tried first again
        if key[0] == 0.0:
            self.stats.best_makespan = key[1]
        return True


def refine(problem: Problem, placement: np.ndarray, opts: SolveOptions, *, deadline: float,
           memory_model: str = "static", max_evals: int | None = None, patience: int = 20,
           stats: RefineStats | None = None, keep_order: bool | str = False,
           start: np.ndarray | None = None, incremental: bool = True, batch: str = BATCH,
           waits: list[tuple[int, int]] | None = None) -> tuple[np.ndarray, Evaluation]:
    """Improve ``placement`` by local search until ``deadline`` (a time.monotonic() value).

    Returns the best placement found and its evaluation (never worse than the input's: lower
    makespan at equal feasibility, and a feasible input stays feasible). ``max_evals`` bounds the
    number of evaluator calls; ``patience`` is the number of random kicks without improvement
    after which the search stops early; ``stats``, if given, is filled in. Colocation and allowed
    devices are always respected; an input that breaks them raises ScheduleError.

    ``keep_order`` (implied by ``start``, a schedule of the input such as the coarse schedule
    projected with Coarsening.project_order) judges every placement by the schedule that keeps
    the current schedule's per-device order (``order_of``), never later than FIFO from the same
    start. The returned Evaluation is then that ordered schedule: report its start times
    (``check`` accepts them) or ``order_of(problem, placement, ev.start)`` (re-timed, never
    later); plain ``evaluate`` of the placement (FIFO) may be slower. ``keep_order="auto"`` is
    "both" when FIFO on the input placement is within AUTO_FIFO_SLACK of the kept order, else True
    (each "both" move costs two evaluations).

    ``incremental`` (ordered mode only): re-time only the cone a move affects
    (placement/incremental.py), equal to the full evaluation and much faster on big graphs.
    ``batch``: how a batch move is judged (BATCH).

    ``waits`` (with ``start``, a schedule that meets them: :func:`kept_waits`): control dependencies
    (u, v) every schedule of the search keeps (docs/model.md, "Waits"; chain-pin's held gradients).
    Moves are then judged by the kept order with these waits only (never FIFO, which takes none),
    and the returned Evaluation is the evaluator's schedule of ``order_of(problem, placement,
    ev.start, graph=timing_graph(problem, waits))`` with the same waits, which meets them."""
    pl = as_placement(problem, placement)
    check_placement(problem, pl)
    search = _Search(problem, pl, opts, deadline, memory_model, max_evals, patience, stats or RefineStats(),
                     keep_order=keep_order or (start is not None), start=start, incremental=incremental, batch=batch,
                     waits=waits)
    search.run()
    search.stats.end_makespan = search.best_ev.makespan
    return search.best, search.best_ev


class RefineSearch:
    """:func:`refine` that stops at a deadline and goes on later, possibly from a better schedule
    found meanwhile by another search (the pipeline alternates it with window LNS:
    solvers/pipeline.py, "search"). Same moves, acceptance and guarantees as :func:`refine`."""

    def __init__(self, problem: Problem, placement: np.ndarray, opts: SolveOptions, *, memory_model: str = "static",
                 patience: int = 20, stats: RefineStats | None = None, keep_order: bool | str = False,
                 start: np.ndarray | None = None, max_evals: int | None = None,
                 waits: list[tuple[int, int]] | None = None) -> None:
        pl = as_placement(problem, placement)
        check_placement(problem, pl)
        self._search = _Search(problem, pl, opts, time.monotonic(), memory_model, max_evals, patience,
                               stats or RefineStats(), keep_order=keep_order or (start is not None), start=start,
                               waits=waits)
        self.stats = self._search.stats

    def run(self, deadline: float) -> tuple[np.ndarray, Evaluation]:
        """Search until ``deadline`` (time.monotonic()); the best placement and its schedule so far."""
        self._search.deadline = deadline
        self._search.run()
        self.stats.end_makespan = self._search.best_ev.makespan
        return self._search.best, self._search.best_ev

    def adopt(self, placement: np.ndarray, ev: Evaluation, waits: list[tuple[int, int]] | None = None) -> bool:
        """Go on from ``placement`` scheduled as ``ev`` (keeping ``waits``) if it is better than this search's best."""
        return self._search.adopt(as_placement(self.p, placement), ev, waits)

    @property
    def waits(self) -> list[tuple[int, int]] | None:
        """The waits the search's schedules keep (those of its best)."""
        return self._search.waits

    @property
    def p(self) -> Problem:
        return self._search.p

    @property
    def best(self) -> tuple[np.ndarray, Evaluation]:
        return self._search.best, self._search.best_ev


def refine_multilevel(problem: Problem, placement: np.ndarray, opts: SolveOptions, *, deadline: float,
                      memory_model: str = "static", coarsest: int = 1000, ratio: int = 8, final_share: float = 0.4,
                      max_evals: int | None = None, stats: RefineStats | None = None) -> tuple[np.ndarray, Evaluation]:
    """Multilevel refinement for graphs where one evaluation is expensive (V-cycle, as in graph
    partitioners): coarsen by ``ratio`` per level down to about ``coarsest`` nodes, restrict the
    placement to every level, then refine from the coarsest level up, each level starting from
    the better (by that level's evaluator) of the projection from below and the restriction of
    the input. The original level gets ``final_share`` of the time; coarse levels share the rest.
    ``max_evals`` bounds each level's evaluations. Never worse than the input on the original."""
    from placement.coarsen import coarsen  # placement.coarsen does not depend on solvers

    pl0 = as_placement(problem, placement)
    check_placement(problem, pl0)
    ev0 = evaluate(problem, pl0, memory_model=memory_model)
    stats = stats or RefineStats()
    chain = []  # coarsenings, finest first
    cur = problem
    # Coarsening costs about 40 us per node (measured, loaded machine): only when time allows.
    while cur.n > coarsest * 2 and deadline - time.monotonic() > 3 * 4e-5 * cur.n + 1.0 and not opts.stop.is_set():
        cz = coarsen(cur, max(coarsest, cur.n // ratio), seed=opts.seed)
        if cz.coarse is cur:
            break
        chain.append(cz)
        cur = cz.coarse
    starts = [pl0]
    for cz in chain:
        down = cz.restrict(starts[-1])
        if down is None:
            chain = chain[: len(starts) - 1]
            break
        starts.append(down)
    levels = len(chain)
    now = time.monotonic()
    share = (deadline - now) * (1.0 - final_share) / levels if levels else 0.0
    carried: np.ndarray | None = None
    for i in range(levels - 1, -1, -1):  # from the coarsest level up; level i's problem is chain[i].coarse
        if opts.stop.is_set():
            break
        prob_i = chain[i].coarse
        cands = [starts[i + 1]] + ([carried] if carried is not None else [])
        evs = [evaluate(prob_i, c, memory_model=memory_model) for c in cands]
        j = min(range(len(cands)), key=lambda t: _key(prob_i, evs[t]))
        lvl_deadline = min(deadline, time.monotonic() + share)
        got, _ = refine(prob_i, cands[j], opts, deadline=lvl_deadline, memory_model=memory_model,
                        max_evals=max_evals, stats=RefineStats())
        carried = chain[i].project(got)
    start = pl0
    if carried is not None and not opts.stop.is_set():
        ev_c = evaluate(problem, carried, memory_model=memory_model)
        if _key(problem, ev_c) < _key(problem, ev0) and not (_key(problem, ev0)[0] == 0.0 and _key(problem, ev_c)[0] > 0.0):
            start = carried
    best, ev = refine(problem, start, opts, deadline=deadline, memory_model=memory_model, max_evals=max_evals, stats=stats)
    stats.start_makespan = ev0.makespan
    if _key(problem, ev) > _key(problem, ev0):  # cannot happen: refine never worsens its start
        return pl0, ev0
    return best, ev
