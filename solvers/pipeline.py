"""The ``auto`` pipeline: warm start, exact solve (by windows when the graph is big), refine.

1. Warm start: the heuristic portfolio on the original graph; its best feasible placement is the
   fallback answer at every moment.
2. Exact phase: CP-SAT on the original graph when it is small enough (its proved bound is then
   valid for the original problem), otherwise on windows of about a hundred nodes of the original
   graph against the fixed rest of the incumbent (formulations/window_lns.py, docs/scale.md), or
   with ``big_exact="coarse"`` on a coarsened graph hinted with the warm start restricted to it (a
   coarse optimum is only a good placement: its bound does not count), or with
   ``big_exact="multilevel"`` a V-cycle (solvers/multilevel.py): CP-SAT on the coarsest of a
   hierarchy of coarse graphs, refinement at every level on the way back.
3. Refine: local moves on the original graph, judged by the evaluator, memory kept feasible.

Between them, the incumbent's placement is re-scheduled by priority lists (solvers/reschedule.py:
FIFO on a placement that holds a long critical chain on one device, as PARDNN's does, delays
critical nodes), after the warm start and again when the exact phase changed the incumbent. When
the search alternates (big graphs), the probe re-schedules the portfolio's best distinct
placements instead, and the search starts from the one that schedules lowest (docs/scale.md,
"Where the search starts").

A status line is printed at least every HEARTBEAT_SECONDS in every phase (solvers/progress.py).

Every candidate is judged by the one evaluator on the original graph; the answer is the best of
them, so the pipeline never returns worse than its warm start.

Time: the limit counts from ``opts.started`` (the CLI's start, so loading counts) and keeps a
finish reserve for the report; the warm start gets WARM_SHARE of the rest, stretched so PARDNN,
ETF and HEFT fit, refine REFINE_SHARE at the end, the exact phase what lies between (docs/coarsening.md).
"""
from __future__ import annotations

import math
import threading
import time
from dataclasses import dataclass, field, replace
from typing import Any, Callable, Iterator

import numpy as np

from formulations.cpsat import cpsat
from formulations.held_split import held_split
from formulations.saved_bytes import MAX_NODES as HELD_SPLIT_MAX_NODES
from formulations.warmstart import topo_split
from heuristics.baselines import greedy_fill, single, topo_fill
from heuristics.portfolio import estimate_seconds, portfolio
from heuristics.band_repair import positions, split_repaired
from heuristics.memory_repair import repair
from heuristics.layer_bands import loss_pivot
from heuristics.window_gather import FILL as GATHER_FILL, Windows, find_windows, gather_windows
from formulations.window_lns import LnsStats, WindowSearch, lns
from placement.coarsen import coarsen
from placement.evaluator import Evaluation, evaluate, schedule_order
from placement.problem import Problem
from placement.repeats import repeat_classes, repeats
from placement.solution import BestSoFar, Solution, SolveOptions

from .join_sweep import JoinStats, JoinSweep
from .multilevel import MultilevelStats, multilevel
from .ordering import fit_by_order
from .progress import HEARTBEAT_SECONDS, Heartbeat
from .refine import RefineSearch, RefineStats, kept_waits, refine, refine_multilevel
from .relist_sweep import RelistStats, RelistSweep
from .reschedule import reschedule, reschedule_seconds
from .restarts import RESTART_MAX_ABOVE, RESTART_MIN_GAP, RESTART_MIN_SLICES, STALL_GAIN, STALL_SLICES, StallWatch, restart_starts
from .echo_sweep import EchoStats, EchoSweep
from .segments import SEGMENT_GRAPH_NODES, SEGMENT_NODES, SEGMENT_SECONDS, SegmentSearch, SegmentStats
from .side_track import CLOSE_SECONDS, Post, Poster, SideTrack, bare, child_stop, cores, picklable_options, side_track_wanted

# Budget shares of the usable time (the limit minus the finish reserve), chosen by measurement:
# bench/results_pipeline.md. opts.extra["warm_share"] / ["refine_share"] override them.
WARM_SHARE = 0.15
REFINE_SHARE = 0.15  # also on coarse graphs: 0.5 lost 25% on a 100K LSTM and won nowhere (results_pipeline.md)
# The warm start may take up to this share so that PARDNN (which the portfolio runs after the
# linear-time baselines) fits: on 100K-node graphs it needs ~25 s, more than 15% of 120 s; at
# 200K nodes and 120 s, 50% was not enough and PARDNN alone beat the pipeline by up to 2.8x.
WARM_MAX_SHARE = 0.6
# The warm budget is stretched so that these portfolio members fit: PARDNN and the two list
# schedulers that gave the best warm starts on the 100K-node graphs (etf: transformer, CNN; heft:
# LSTM; bench/results_pipeline.md "Warm-start members"), and chain-home, the best member on every
# generated LSTM (bench/results_scale.md, session 14's grid). Only they run in the stretch: the
# other members keep to WARM_SHARE once an answer is in hand (heuristics/portfolio.py
# _own_share_end), except under tight memory.
WARM_FIRST = ("single", "m-topo", "greedy-fill", "pardnn", "etf", "heft", "chain-home")
# Members that may also run in the stretch (the budget is not sized for them): the best single
# member of session 14's grid on the transformers (chain-split) and on the 10K / 50K CNNs under the
# peak model (band-repair). Without chain-split in it the 200K transformer at K = 16 (peak, 600 s)
# ended at 260730, 0.007% above chain-split alone (bench/results_scale.md, session 15).
WARM_ALSO = ("chain-split", "band-repair")
# Kept free at the end of the limit for what follows the pipeline: re-checking the answer, the
# report, --explain, writing JSON: 7.8 s for 335K nodes + edges at load 10 when the report was
# indented JSON (60% of it); written one field per line since, that write fell from 1.4 s to
# 0.4 s at 200K nodes (low load). At 2.5e-5 per element the 200K-node goal runs (560-600K nodes +
# edges, reserve 15-16 s) ended 1.4-3.6 s after the reserve began (load 5-8: wall 104-108 s of
# 120), so the reserve was 4x what it paid for; 8e-6 keeps about twice the measured cost.
FINISH_SECONDS = 1.0  # also Python's start-up before the CLI's clock starts (~0.9 s under load) and exit
FINISH_SECONDS_PER_ELEMENT = 8e-6
EXACT_MAX_NODES = 1200  # solve the original graph exactly up to this size
# Under the peak model above this size refine runs before the exact phase too (REFINE_SHARE):
# cpsat's unit LNS (formulations/unit_lns.py) then starts from refine's answer, not the warm
# start's (NASNet: refine 8.37 -> 7.42 in 17 s, the unit LNS from 8.81 far slower).
PRE_REFINE_NODES = 400
IDLE_SLICE_SECONDS = 0.05  # a search slice this short that gained nothing returned at once: nothing to try
SMALL_SEARCH_SHARE = 0.5  # peak model, up to EXACT_MAX_NODES: the alternating search's share of the exact phase (0: CP-SAT alone)
EXACT_TRY_SHARE = 0.1  # ... after a CP-SAT try of this share of it (peak model)
STATIC_EXACT_SHARE = 0.5  # static model: CP-SAT first, in one run, for this share of the exact phase
# Above EXACT_MAX_NODES the exact phase is "lns" (CP-SAT on windows of the original graph) or
# "coarse" (CP-SAT on a coarsened graph) or "multilevel" (a V-cycle: solvers/multilevel.py);
# opts.extra["big_exact"] overrides (bench/results_scale.md).
BIG_EXACT = "lns"
# Nodes per LNS window and CP-SAT's limit per window: measured from ETF's schedules of 10K-node
# graphs (bench/results_scale.md "Window size and selection"): 300 nodes in 5 s improved nothing on the
# transformer; 100 nodes in 2 s improved most windows (CP-SAT rarely proves one, but the hinted
# search finds better sequences), 50 gained less per window, 150-200 less per second.
LNS_WINDOW = 100
LNS_SELECT = "critical"  # how windows are chosen (formulations/window_lns.py SELECT)
# Above EXACT_MAX_NODES with big_exact="lns": "alternate" runs window LNS and refine in turns, each
# slice to the one that gained most per second in its last slice (both keep their state between
# slices); "phases" runs LNS, then refine with REFINE_SHARE (before session 7).
# opts.extra["big_search"] overrides (bench/results_scale.md, "Session 7").
BIG_SEARCH = "alternate"
# The alternating search starts over elsewhere when it has stalled (solvers/restarts.py);
# opts.extra["restarts"] = False keeps one track.
RESTARTS = True
# With a core to spare, those restarts run beside the first track instead, in a second process
# (solvers/side_track.py); opts.extra["side_track"] = False keeps them in turn.
# On a graph that repeats its blocks, the echo sweep (solvers/echo_sweep.py) tries each fix the search
# finds in the other copies of its block, after every piece of a slice that gained; opts.extra["echo"]
# = False skips it (docs/scale.md, "Echoes in repeated blocks").
ECHO = True
ECHO_SHARE = 0.5  # of ECHO_EVERY: the most one echo may take
ECHO_MIN_SECONDS = 0.5  # the least, after echoes that gained nothing (on the decoder they took 13% of 600 s)
ECHO_EVERY = 10.0  # seconds: a slice runs its search in pieces this long, each gain echoed at once
SEARCH_SLICES = 10  # slices of the search's budget, at least SEARCH_SLICE_SECONDS each
SEARCH_SLICE_SECONDS = 8.0  # a few LNS windows or refine rounds at 50K nodes
# A waiting search's last rate grows by this per slice it waits: on the 10K CNN refine's second
# slice gained 0.43%, LNS's 0.42-0.61% per slice after it, and without growth LNS kept every later
# slice although refine after LNS had gained 10% in 18 s in the old sequence.
SEARCH_STALE_GROWTH = 1.5
STALE_WAIT_CAP = 40  # slices waited beyond this grow the estimate no more (1.5 ** 40 is 1e7)
# A search whose last slice gained nothing keeps a zero estimate (it runs again only when all are
# dry). Tried in session 9: a quarter of its best rate instead; on the CNN 200K at 600 s refine
# then came back three times after its first slice and gained 0.00% each time (145 s lost).
MULTILEVEL_COARSEST = 250  # nodes of the coarsest level of big_exact="multilevel"
LNS_WINDOW_SECONDS = 2.0  # the phase runs only with time for one window after its set-up
LNS_SETUP_SECONDS_PER_ELEMENT = 2e-5  # incremental schedule and tails, ~1 s per 40K nodes + 80K edges
# Above REFINE_MULTILEVEL_NODES, when FIFO is the incumbent's best schedule: "multilevel" (FIFO,
# coarse levels first) or "ordered" (the original graph, moves judged by the kept order, re-timed
# incrementally: placement/incremental.py); opts.extra["big_refine"] overrides.
BIG_REFINE = "multilevel"
COARSE_TARGET = 250  # coarse graph size for the exact phase on bigger graphs (bench/results_coarsen.md)
REFINE_MULTILEVEL_NODES = 20000  # above this, one evaluation is costly: refine on coarse levels first
# The linear-time baselines that answer when nothing else did in time.
BASELINES: dict[str, Callable[[Problem, SolveOptions], Solution]] = {
    "topo-fill": topo_fill, "greedy-fill": greedy_fill, "single": single}
# The warm start's methods by name (which of them run: warm_start_methods).
WARM_START: dict[str, Callable[[Problem, SolveOptions], Solution]] = {"portfolio": portfolio, "topo-split": topo_split,
                                                                      "held-split": held_split}
# The probe (big graphs, alternating search): the portfolio's distinct placements (at most
# PROBE_CANDIDATES, heuristics/portfolio.py CANDIDATES) each re-scheduled by the priority lists
# (and refined for the same PROBE_SECONDS when that is above 0), the search going on from the
# one that leads; all probes together take at most PROBE_SHARE of the time left, else fewer
# candidates (none, or fewer than two with refine in the probe: the re-schedule phase of the incumbent alone).
# Why: the placement that starts lowest is not always the one that re-schedules lowest (50K CNN,
# K = 4: ETF's 1272.78 re-scheduled to 1263.59, pardnn-balanced's 1304.11 to 1226.17;
# bench/results_scale.md, session 12). Refine in the probe (8 s each) is off: on the 50K LSTM at
# K = 8 it chose HEFT's placement (580.66 after 8 s, ETF's stuck at 591.82), but refine from ETF's
# gained 11.9% in its third 10 s slice after kicks, and the 120 s run ended at 564.88 against
# 515.09 from ETF's: 8 s of refine does not tell which start refines furthest.
PROBE_CANDIDATES = 3
PROBE_SECONDS = 0.0
PROBE_SHARE = 0.3
# Under the peak model the fits of overflowing gathered placements (_fit_promising) may go on until
# this share of the time left at the probe's start: on the 50K CNN at K = 8 (4.58 GB, 120 s: about
# 50 s left after the warm start) mem-span's fit alone took 15.1 s after 5 s of re-schedules and
# gathering (niced, load 5-6), past PROBE_SHARE's 15 s, and its 1208.82 start is worth more than
# the search's seconds (the search gained 3% in 45 s from band-repair's 1260.57; session 17).
PROBE_FIT_SHARE = 0.5
# A probe's re-schedule (two priority lists and their evaluations, compiled kernels): 0.8-1.3 s on
# the 200K-node graphs (about 600K nodes + edges) at load 5 in session 12; 3e-6 keeps 1.5x spare.
PROBE_RESCHEDULE_SECONDS_PER_ELEMENT = 3e-6
# Each probe's placement is also tried with its expensive-to-return windows gathered on the
# chain's device (heuristics/window_gather.py), with each of these factors of the balancing share
# of a window's time left away; each is re-scheduled and the lowest schedule of all is the probe's
# start. ETF's placement re-scheduled / gathered (1.0, 1.3): 200K CNN K = 4 3455.98 / 3281.72,
# 3297.63; K = 8 3331.23 / 3250.9, 3240.91; 50K K = 4 1271.15 / 1114.57, 1115.68 (docs/scale.md,
# "Window gathering"). Every probe, not only the first: on the 200K CNN at K = 4 under the peak
# model PARDNN's 3424.62 leads the warm start and gathers to 3440.85 / 3467.58, where ETF's
# 3468.83 gathers to 3281 (session 15); the windows are found once, each gathering is ~1 s there.
GATHER_FACTORS = (1.0, 1.3)
# The same with the light pieces of the units left on the chain's device shed to the others
# (window_gather ``light``, session 18): D then runs only the chain and the anchored ops, so a
# smaller share of whole units goes away. ETF's placement, K = 8, static, re-scheduled: 10K CNN
# 405.88 (plain 1.0 / 1.3) -> 388.24 (light 0.4), 50K 1101.16 -> 1020.60, 200K 3230.70 -> 3199.88
# (light 0.15-1.0 at 200K: within 0.7%). Tried first: the better start on every CNN of 8K nodes
# or more measured (below that either wins), and the probe's clock may not reach the last one.
GATHER_LIGHT_FACTORS = (0.4,)
TOPO_SPLIT_MAX_NODES = 3000  # topo-split does not watch the clock and is O(K n^2): 100K nodes took 490 s


@dataclass
class Phase:
    name: str
    seconds: float = 0.0
    makespan: float | None = None
    bound: float | None = None
    status: str = ""
    note: str = ""

    def as_dict(self) -> dict[str, Any]:
        return {k: v for k, v in self.__dict__.items() if v not in (None, "")}


@dataclass
class PipelineResult:
    best: tuple[Solution, Evaluation] | None
    bound: float  # valid for the original problem
    proved_optimal: bool
    phases: list[Phase] = field(default_factory=list)
    reasons: list[str] = field(default_factory=list)
    used_exact: bool = False
    infeasible: bool = False  # proved for the original problem (never by a coarsened graph)


@dataclass
class Probe:
    """The leading probe (see :func:`_probe_phase`): its refine search, which the alternating search
    goes on with, that search's rate (makespan fraction gained per second of refine), the index
    of its start among the candidates, and what the probe made of every candidate it judged."""
    search: RefineSearch | None  # None: the probe did not refine, or its refine was bounded by evaluations
    stats: RefineStats
    rate: float | None
    lead: int = 0
    # candidate index -> (label, its best schedule after the probe's re-scheduling, gathering and
    # refine): the later tracks start there rather than from the member's own answer
    answers: dict[int, tuple[str, Solution]] = field(default_factory=dict)


class Incumbent:
    """The best feasible answer so far, judged on the original graph."""

    def __init__(self, problem: Problem, memory_model: str, verify: Callable[[Problem, Solution, str], Evaluation],
                 publish: Callable[[tuple[Solution, Evaluation]], None] | None = None,
                 stop: threading.Event | None = None):
        self.problem, self.memory_model, self.verify = problem, memory_model, verify
        self.publish = publish  # told every new best (the solve command's watchdog reads it)
        self.stop = stop  # Ctrl-C / the CLI's time limit
        self.deadline: float | None = None  # the pipeline's end: no memory-aware re-order runs past it
        self.best: tuple[Solution, Evaluation] | None = None
        self.check_seconds = 0.0  # the longest verification so far: what judging one more answer costs

    def offer(self, sol: Solution) -> Evaluation | None:
        if sol.placement is None or sol.status not in ("optimal", "feasible", "heuristic"):
            return None
        t = time.monotonic()
        ev = self.verify(self.problem, sol, self.memory_model)
        self.check_seconds = max(self.check_seconds, time.monotonic() - t)
        if not ev.feasible(self.problem):
            got = fit_by_order(self.problem, ev.placement, sol, self.memory_model, stop=self._stopped)
            if got is None:
                return None
            sol, ev = got
        self.take((sol, ev))
        return ev

    def take(self, best: tuple[Solution, Evaluation]) -> None:
        """An answer judged on this problem and model (by :meth:`offer`, or by another incumbent's): kept when better."""
        if self.best is None or best[1].makespan < self.best[1].makespan - 1e-12:
            self.best = best
            if self.publish is not None:
                self.publish(self.best)

    def track(self) -> "Incumbent":
        """A fresh incumbent for a search restarted elsewhere (solvers/restarts.py): its own best,
        every new best of it handed on to this one (:meth:`take`)."""
        child = Incumbent(self.problem, self.memory_model, self.verify, publish=self.take, stop=self.stop)
        child.deadline, child.check_seconds = self.deadline, self.check_seconds
        return child

    def _stopped(self) -> bool:
        return (self.stop is not None and self.stop.is_set()) or (self.deadline is not None and time.monotonic() >= self.deadline)

    def hint(self) -> Solution | None:
        """The incumbent as a full schedule (placement and the evaluator's start times)."""
        if self.best is None:
            return None
        sol, ev = self.best
        return Solution(sol.method, "heuristic", placement=ev.placement, start=ev.start, objective=ev.makespan)

    @property
    def makespan(self) -> float | None:
        return None if self.best is None else self.best[1].makespan

    @property
    def waits(self) -> list[tuple[int, int]] | None:
        """The incumbent's waits that its schedule meets (solvers.refine.kept_waits): the searches
        keep them as constraints (docs/peak.md, "Waits in the search")."""
        return None if self.best is None else kept_waits(self.problem, self.best[1], self.best[0].waits)


def finish_reserve(problem: Problem, total: float) -> float:
    """Seconds of the limit kept for the work after the pipeline (checking, report, writing)."""
    return min(0.2 * total, FINISH_SECONDS + FINISH_SECONDS_PER_ELEMENT * (problem.n + problem.m))


def known_makespan(inc: Incumbent, best_so_far: BestSoFar) -> float | None:
    """What the progress lines show as the incumbent: ``inc``'s makespan, or before it has one (the
    portfolio's members answer one after another: 57 s on the 200K CNN), the best answer a member
    published for the same problem (None: none yet)."""
    if inc.makespan is not None:
        return inc.makespan
    answer, _ = best_so_far.get()
    if answer is None or answer[0] is not inc.problem or answer[1].objective is None:
        return None
    return float(answer[1].objective)


def pipeline(
    problem: Problem,
    opts: SolveOptions,
    lower_bound: float,
    verify: Callable[[Problem, Solution, str], Evaluation],
    say: Callable[[str], None],
) -> PipelineResult:
    """Run the phases within ``opts.time_limit`` counted from ``opts.started`` (the CLI sets it when
    the process starts, so loading the graph counts too), leaving :func:`finish_reserve` at the end."""
    inc = Incumbent(problem, opts.memory_model, verify,
                    publish=lambda best: opts.best_so_far.publish_answer(problem, best[0], best[1]), stop=opts.stop)
    interval = float(opts.extra.get("progress_seconds", HEARTBEAT_SECONDS))
    with Heartbeat(say, lambda: known_makespan(inc, opts.best_so_far), lower_bound, started=min(opts.started, time.monotonic()), interval=interval,
                   on_enter=opts.best_so_far.enter) as hb:
        return _pipeline(problem, opts, lower_bound, inc, hb)


def _pipeline(problem: Problem, opts: SolveOptions, lower_bound: float, inc: Incumbent, hb: Heartbeat) -> PipelineResult:
    say = hb.say
    now = time.monotonic()
    t0 = min(opts.started, now)
    total = opts.time_limit
    # Time a caller keeps for its fallback (Tofu's plan) while nothing fits; freed by the warm start's answer.
    fallback = float(opts.extra.get("fallback_reserve", 0.0))
    end = None if total is None else t0 + total - finish_reserve(problem, total) - fallback
    usable = None if end is None else max(0.0, end - now)
    inc.deadline = end
    warm_share = float(opts.extra.get("warm_share", WARM_SHARE))
    coarse = problem.n > int(opts.extra.get("exact_max_nodes", EXACT_MAX_NODES))
    refine_share = float(opts.extra.get("refine_share", REFINE_SHARE))
    bound = lower_bound
    phases: list[Phase] = []
    reasons: list[str] = []

    def until(when: float | None) -> float | None:
        """Seconds from now to ``when`` (0 once stopped)."""
        if opts.stop.is_set():
            return 0.0
        return None if when is None else max(0.0, when - time.monotonic())

    def sub(budget: float | None, **changes: Any) -> SolveOptions:
        return replace(opts, time_limit=budget, started=time.monotonic(), **changes)

    def progress(phase: str) -> None:
        hb.bound = bound
        say(hb.status(phase))

    # 1. Warm start.
    hb.enter("warm-start")
    ph = Phase("warm-start")
    t = time.monotonic()
    warm_end = None if usable is None else t + warm_seconds(problem, usable, warm_share, opts.memory_model)
    # the stretch beyond the warm share is for WARM_FIRST (the portfolio's own share ends with it)
    warm_extra = {} if usable is None else {"own_seconds": warm_share * usable, "stretched_for": WARM_FIRST + WARM_ALSO}
    candidates: list[Solution] = []  # the portfolio's distinct placements, best first (the probe's)
    warm: Solution | None = None  # the portfolio's answer: its members and min-memory's descents, for a rescue run
    for name in warm_start_methods(problem):
        budget = until(warm_end)
        if budget is not None and budget <= 0.0:
            break  # topo-split would not watch the clock
        sol = WARM_START[name](problem, sub(budget, extra={**opts.extra, **warm_extra}))
        candidates.extend(sol.info.get("candidates", []) if sol.info else [])
        if name == "portfolio":
            warm = sol
        if sol.status == "infeasible":
            return PipelineResult(None, bound, False, phases + [Phase("warm-start", time.monotonic() - t, status="infeasible", note=sol.reason)],
                                  [sol.reason], infeasible=True)
        if inc.offer(sol) is None and sol.reason:
            reasons.append(sol.reason)
    left = until(end)
    if inc.best is None and (left is None or left > 0.0):
        # Nothing fits yet (memory binds): every other phase needs an incumbent. Under the peak
        # model held-split gets half the time left (finding any placement meeting its knapsacks
        # can take most of a warm budget), then the portfolio the rest, for the members the warm
        # budget skipped or cut; those that said no on their own are not asked again, and
        # min-memory's descents go on where they stopped (heuristics/portfolio.py RERUN_USED).
        if opts.memory_model == "peak" and problem.n <= HELD_SPLIT_MAX_NODES:
            sol = held_split(problem, sub(None if left is None else 0.5 * left))
            if inc.offer(sol) is None and sol.reason:
                reasons.append(sol.reason)
        if inc.best is None:
            sol = portfolio(problem, sub(until(end), extra={**opts.extra, "earlier": warm.info if warm else {}}))
            candidates.extend(sol.info.get("candidates", []))
            if inc.offer(sol) is None and sol.reason:
                # it went on from the warm start's run: its reason replaces that one's
                reasons = [r for r in reasons if warm is None or r != warm.reason] + [sol.reason]
    if inc.best is None:
        # Out of time or stopped before anything answered (e.g. loading took the limit): the linear-time
        # baselines still answer, late rather than never (one already published before the bounds,
        # solvers.run.publish_baseline, is not made again).
        published = opts.best_so_far.get()[0]
        if published is not None and published[0] is problem:
            _, sol, ev = published
            if ev is not None and ev.feasible(problem):
                inc.take((sol, ev))  # judged by the evaluator when it was published
            else:
                inc.offer(sol)
        for baseline in BASELINES.values():
            if inc.best is not None or inc.offer(baseline(problem, sub(None))) is not None:
                break
    if end is not None and inc.best is not None:
        end += fallback
    ph.seconds, ph.makespan, ph.status = time.monotonic() - t, inc.makespan, "heuristic"
    ph.note = _method_name(inc.best[0]) if inc.best else "no feasible warm start"
    phases.append(ph)
    progress("warm-start")
    alternate = coarse and str(opts.extra.get("big_exact", BIG_EXACT)) == "lns" and \
        str(opts.extra.get("big_search", BIG_SEARCH)) == "alternate"
    probed: Probe | None = None
    if alternate and inc.best is not None and not opts.stop.is_set() and \
            inc.makespan > bound * (1 + 1e-9):
        probed = _probe_phase(problem, opts, inc, candidates, phases, until(end), hb)
    if probed is None:
        hb.enter("reschedule")
        _reschedule_phase(problem, opts, inc, phases, until(end))
    rescheduled_from = None if inc.best is None else inc.best[0]  # the exact phase may replace it

    # 2. Exact phase.
    proved = inc.makespan is not None and inc.makespan <= bound * (1 + 1e-9)
    used_exact = False
    if alternate and not proved and not opts.stop.is_set() and inc.best is not None:
        # 2+3. Window LNS and refine in turns until the end (docs/scale.md, "Alternating search").
        budget = until(None if end is None else end - inc.check_seconds)
        restarts = side = None
        search_opts = opts
        if opts.extra.get("restarts", RESTARTS):
            led = 0 if probed is None else probed.lead  # the portfolio's best leads without a probe
            # each from where the probe took it, if it did (HEFT's placement on the 200K CNN: 3438.79
            # as the member left it, 3201.36 gathered, 0.05% above the lead)
            from_probe = {} if probed is None else probed.answers
            later = [from_probe.get(i, (_method_name(c), c)) for i, c in enumerate(candidates) if i != led]
            labels = [label for label, _ in later]
            others = [c for _, c in later]
            if side_track_wanted(opts, budget):
                fields = picklable_options(opts)
                if opts.workers is None:  # CP-SAT's workers: half the cores each
                    fields["workers"] = max(1, cores() // 2)
                try:
                    side = SideTrack(side_track_main, problem, fields, [bare(c) for c in others], labels,
                                     inc.hint(), bound, None if budget is None else time.monotonic() + budget - CLOSE_SECONDS,
                                     inc.makespan, inc.verify)
                    search_opts = replace(opts, workers=fields["workers"])
                except OSError as exc:  # no process to be had: the restarts run in turn, as on one core
                    say(f"side track: not started ({exc}); restarts run in turn")
            if side is None:
                restarts = restart_starts(problem, opts, others, labels,
                                          lambda: until(None if end is None else end - inc.check_seconds))
        done = _alternate_phase(problem, search_opts, inc, bound, budget, hb, probed, restarts, side)
        used_exact = any(ph.name == "exact-lns" and ph.status == "feasible" for ph in done)
        phases.extend(done)
        progress("search")
        if inc.makespan <= bound * (1 + 1e-9):
            proved = True
        return PipelineResult(inc.best, bound, proved, phases, reasons, used_exact)
    if not proved and not opts.stop.is_set():
        exact_budget = None if end is None or usable is None else until(end - refine_share * usable)
        t = time.monotonic()
        if not coarse:
            search_share = float(opts.extra.get("small_search_share", SMALL_SEARCH_SHARE))
            # (the search needs an incumbent: without one CP-SAT keeps the whole phase to find one)
            search_first = search_share > 0.0 and exact_budget is not None and inc.best is not None
            if not search_first and opts.memory_model == "peak" and problem.n > PRE_REFINE_NODES and \
                    exact_budget is not None and usable:
                # Refine first (cpsat's unit LNS then starts from its answer): formulations/cpsat.py.
                _refine_phase(problem, opts, inc, phases, bound, until(time.monotonic() + refine_share * usable),
                              hb, sub, name="pre-refine")
                exact_budget = until(end - refine_share * usable)

            def exact_once(budget: float | None) -> tuple[Phase, Solution]:
                """CP-SAT on the whole graph from the incumbent; its answer offered, its bound kept."""
                nonlocal bound, used_exact
                hb.enter("exact")
                # CP-SAT's two-phase "auto" schedule (formulations/cpsat.py): a bound phase after the
                # search when the hint's gap is large; the option in opts.extra wins.
                sol = cpsat(problem, sub(budget, hint=inc.hint(), extra={"schedule": "auto", **opts.extra}))
                used_exact = True
                if sol.lower_bound is not None and sol.status != "infeasible":
                    bound = max(bound, float(sol.lower_bound))
                    opts.best_so_far.publish_bound(bound)
                inc.offer(sol)
                return Phase("exact", status=sol.status, note=sol.reason if sol.status == "infeasible" else ""), sol

            # With search_first, under the peak model: a short CP-SAT try (a small graph is proved
            # in it), the alternating search, then CP-SAT again from the search's answer with the
            # rest. Under the static model CP-SAT runs first, for STATIC_EXACT_SHARE of the phase in
            # one piece (its proofs need it whole: msr-fiddle's bert_l-6 is proved in 51 s by one
            # run, and by none in 600 s when cut at 50 s and run again from the optimum), then the
            # search, until it runs dry.
            static = opts.memory_model == "static"
            ph, sol = exact_once(exact_budget * (STATIC_EXACT_SHARE if static else EXACT_TRY_SHARE)
                                 if search_first else exact_budget)
            unproved = search_first and sol.status not in ("optimal", "infeasible") and not opts.stop.is_set()
            if unproved:
                ph.seconds, ph.makespan, ph.bound = time.monotonic() - t, inc.makespan, bound
                phases.append(ph)
                rest = until(end - refine_share * usable)
                phases.extend(_alternate_phase(problem, opts, inc, bound, rest, hb, stop_when_dry=True) if static else
                              _alternate_phase(problem, opts, inc, bound, search_share * rest, hb))
                t = time.monotonic()
                if static:
                    ph = Phase("exact", status="skipped", note="CP-SAT ran first (static model); the search had the rest")
                elif inc.makespan <= bound * (1 + 1e-9) or opts.stop.is_set():
                    ph = Phase("exact", status="skipped",
                               note="the search reached the bound" if not opts.stop.is_set() else "stopped")
                else:
                    ph, sol = exact_once(until(end - refine_share * usable))
            if sol.status == "infeasible":
                phases.append(Phase("exact", time.monotonic() - t, status="infeasible", note=sol.reason))
                return PipelineResult(None, bound, False, phases, [sol.reason], True, infeasible=True)
            proved = sol.status == "optimal" or inc.makespan is not None and inc.makespan <= bound * (1 + 1e-9)
        elif str(opts.extra.get("big_exact", BIG_EXACT)) == "lns":
            hb.enter("exact-lns")
            ph = _lns_phase(problem, opts, inc, exact_budget, hb)
            used_exact = ph.status not in ("", "skipped")
        elif str(opts.extra.get("big_exact", BIG_EXACT)) == "multilevel":
            ph = _multilevel_phase(problem, opts, inc, exact_budget, hb)
            used_exact = ph.status not in ("", "skipped")
        else:
            hb.enter("exact-coarse")
            ph = _coarse_phase(problem, opts, inc, sub, exact_budget, say)
            used_exact = ph.status not in ("", "skipped")
            if inc.best is None and ph.note:
                reasons.append(f"exact-coarse: {ph.note}")
        ph.seconds, ph.makespan, ph.bound = time.monotonic() - t, inc.makespan, bound
        phases.append(ph)
        progress(ph.name)
        if not proved and inc.best is not None and inc.best[0] is not rescheduled_from:
            hb.enter("reschedule")
            _reschedule_phase(problem, opts, inc, phases, until(end))

    # 3. Refine on the original graph, stopping early enough to judge its answer before the end.
    if inc.best is not None and not proved and inc.makespan > bound * (1 + 1e-9):
        if _refine_phase(problem, opts, inc, phases, bound, until(None if end is None else end - inc.check_seconds), hb, sub):
            progress("refine")
    if inc.best is not None and inc.makespan <= bound * (1 + 1e-9):
        proved = True
    return PipelineResult(inc.best, bound, proved, phases, reasons, used_exact)


def searched(method: str, problem: Problem, placement: np.ndarray, ev: Evaluation,
             waits: list[tuple[int, int]] | None) -> Solution:
    """A search's answer as a Solution: its start times (what the incumbent's check measures) and,
    when the search kept waits, those of them its schedule meets (all of them, for refine and
    window LNS: each of their schedules is the evaluator's with its waits), so the next phase
    keeps them too."""
    return Solution(method, "heuristic", placement=np.asarray(placement), start=ev.start, objective=ev.makespan,
                    waits=kept_waits(problem, ev, waits))


def _refine_phase(problem: Problem, opts: SolveOptions, inc: Incumbent, phases: list[Phase], bound: float,
                  budget: float | None, hb: Heartbeat, sub: Callable[..., SolveOptions], name: str = "refine") -> bool:
    """Refine the incumbent (solvers/refine.py) for ``budget`` seconds (60 without a limit) and
    offer the answer; False when there was no time for it."""
    if inc.best is None or not (budget is None or budget > 0.05):
        return False
    t = time.monotonic()
    deadline = t + (budget if budget is not None else 60.0)
    best_ev = inc.best[1]
    waits = inc.waits  # kept by every move (a FIFO refine takes none: then the kept order)
    stats = RefineStats()
    hb.enter(name, moves=lambda: stats.evaluations, best=lambda: stats.best_makespan)
    multilevel_nodes = int(opts.extra.get("refine_multilevel_nodes", REFINE_MULTILEVEL_NODES))
    multilevel = str(opts.extra.get("big_refine", BIG_REFINE)) == "multilevel"
    if problem.n > multilevel_nodes and multilevel and waits is None and not _ordered_beats_fifo(problem, best_ev, opts.memory_model):
        placement, ev = refine_multilevel(problem, best_ev.placement, sub(budget), deadline=deadline,
                                          memory_model=opts.memory_model, stats=stats)
    elif problem.n > multilevel_nodes:
        # The incumbent's own order beats FIFO on its placement: keep it (moves judged by the
        # ordered schedule; one evaluation per move, not two, on graphs this big).
        placement, ev = refine(problem, best_ev.placement, sub(budget), deadline=deadline,
                               memory_model=opts.memory_model, start=best_ev.start, keep_order=True, stats=stats,
                               waits=waits)
    else:
        # Keep the incumbent's device order as a candidate schedule: FIFO can be worse.
        placement, ev = refine(problem, best_ev.placement, sub(budget), deadline=deadline,
                               memory_model=opts.memory_model, start=best_ev.start, keep_order="auto", stats=stats,
                               waits=waits)
    before = inc.makespan
    inc.offer(searched("refine", problem, placement, ev, waits))
    phases.append(Phase(name, time.monotonic() - t, inc.makespan, bound, "heuristic", f"{before:.6g} -> {inc.makespan:.6g}"))
    return True


def _ordered_beats_fifo(problem: Problem, ev: Evaluation, memory_model: str) -> bool:
    """Is the schedule ``ev`` (the incumbent's) faster than FIFO on the same placement?"""
    fifo = evaluate(problem, ev.placement, memory_model=memory_model)
    return ev.makespan < fifo.makespan * (1 - 1e-9) or not fifo.feasible(problem)


def _reschedule_phase(problem: Problem, opts: SolveOptions, inc: Incumbent, phases: list[Phase],
                      left: float | None) -> None:
    """Offer the incumbent's placement re-scheduled by priority lists (solvers/reschedule.py), when
    the time left pays for it several times over."""
    if inc.best is None or opts.stop.is_set():
        return
    if left is not None and left < 3 * reschedule_seconds(problem) + inc.check_seconds:
        return
    t = time.monotonic()
    before = inc.makespan
    best = inc.best[1]

    def stop() -> bool:  # after a list: is there time for another one, three times over?
        return opts.stop.is_set() or (left is not None and 4 * (time.monotonic() - t) > left)

    for name, order, ev in reschedule(problem, best.placement, opts.memory_model, stop=stop):
        inc.offer(Solution(f"reschedule:{name}", "heuristic", placement=ev.placement, order=order, objective=ev.makespan))
    won = inc.best[0].method if inc.best[1] is not best else "incumbent kept"
    phases.append(Phase("reschedule", time.monotonic() - t, inc.makespan, status="heuristic",
                        note=f"{before:.6g} -> {inc.makespan:.6g} ({won})"))


def probe_plan(problem: Problem, count: int, left: float | None, seconds: float = PROBE_SECONDS) -> tuple[int, float]:
    """How many of ``count`` candidates the probe takes (at most PROBE_CANDIDATES) and the seconds
    of refine each gets (``seconds``), with ``left`` seconds to the end: as many as fit, with
    their re-schedules, in PROBE_SHARE of ``left``; (0, 0.0) when not even two fit with refine
    (one probe's refine is the search's own), not even one without. Why one: the probe also
    gathers and fits (:func:`_gathered`), which the re-schedule phase does not; on the 50K CNN at
    K = 8 (4.58 GB, load 4.5-8) the warm start kept only min-memory's 1874.03 and the run ended at
    1565-1699, where that placement gathered and fitted starts at about 1270 (session 17)."""
    each = seconds + PROBE_RESCHEDULE_SECONDS_PER_ELEMENT * (problem.n + problem.m)
    fit = min(count, PROBE_CANDIDATES) if left is None else min(count, PROBE_CANDIDATES, int(PROBE_SHARE * left / each))
    return (fit, seconds) if fit >= (2 if seconds > 0.0 else 1) else (0, 0.0)


def _probe_phase(problem: Problem, opts: SolveOptions, inc: Incumbent, candidates: list[Solution], phases: list[Phase],
                 left: float | None, hb: Heartbeat) -> Probe | None:
    """Each of the portfolio's distinct placements (best first) judged by the evaluator,
    re-scheduled by priority lists (solvers/reschedule.py) and, with probe seconds above 0,
    refined from its best schedule for the same seconds (:func:`probe_plan`). Every answer better
    than the incumbent is offered, so the incumbent is the leading probe's answer (or a better one
    found before): the search starts from it. Each placement is also gathered (:func:`_gathered`);
    under the peak model the gathered placements that overflow are fitted after every candidate
    was gathered, the fastest first, within PROBE_FIT_SHARE of ``left`` (:func:`_fit_promising`).
    Returns the leading probe (with refine: its search, which the alternating search goes on
    with), or None when :func:`probe_plan` takes none (the re-schedule phase then runs as before)."""
    most = int(opts.extra.get("probe_candidates", PROBE_CANDIDATES))
    count, seconds = probe_plan(problem, min(most, len(candidates)), left,
                                float(opts.extra.get("probe_seconds", PROBE_SECONDS)))
    if count < 1:
        return None
    evals = opts.extra.get("probe_evals")  # refine's evaluations per probe instead of seconds (tests: deterministic)
    t0 = time.monotonic()
    model = opts.memory_model
    keep: bool | str = True if problem.n > int(opts.extra.get("refine_multilevel_nodes", REFINE_MULTILEVEL_NODES)) else "auto"
    resched_s = 2 * PROBE_RESCHEDULE_SECONDS_PER_ELEMENT * (problem.n + problem.m)  # then no further list
    runs: list[tuple[float, int, str, float, RefineSearch | None, RefineStats, float]] = []
    windows: list[Windows | None] = []  # the graph's windows, found once when first needed
    until = math.inf if left is None else t0 + PROBE_SHARE * left
    fit_until = math.inf if left is None else t0 + PROBE_FIT_SHARE * left
    judged: list[tuple[int, Evaluation, list[Evaluation], list[Evaluation]]] = []  # (index, offered, starts, gathered)
    answers: dict[int, tuple[str, Solution]] = {}  # Probe.answers
    unfit: list[tuple[float, int, str, Evaluation]] = []  # gathered schedules to fit: (makespan, index, label, schedule)
    for i, cand in enumerate(candidates[:count]):
        if opts.stop.is_set():
            break
        t = time.monotonic()
        hb.enter(f"probe {i + 1}/{count}")
        ev = inc.offer(cand)  # the evaluator's schedule of the member's answer (or of an order that fits)
        if ev is None:
            continue
        starts = [ev] + _rescheduled(problem, opts, inc, ev.placement, t + resched_s, "reschedule")
        in_time = left is None or time.monotonic() - t0 < PROBE_SHARE * left
        if in_time and not windows:
            windows.append(_windows(problem, opts))
        gathered, over = _gathered(problem, opts, inc, ev.placement, resched_s, windows[0]) if in_time else ([], None)
        if over is not None:
            unfit.append((over[1].makespan, i, over[0], over[1]))
        judged.append((i, ev, starts, gathered))
    fits: list[str] = []
    # a fit's other splits only within the probe's own share (the fits' share is for first fits)
    fitted = _fit_promising(problem, opts, inc, unfit, fit_until, resched_s, hb, fits, until)
    for i, ev, starts, gathered in judged:
        cand = candidates[i]
        gathered = gathered + fitted.get(i, [])
        start = min(starts + gathered, key=lambda e: e.makespan)
        label = _method_name(cand) + (" gathered" if any(start is g for g in gathered) else "")
        stats = RefineStats()
        waits = kept_waits(problem, start, cand.waits if start is ev else None)  # the member's waits its schedule meets
        answers[i] = (label, searched(cand.method, problem, start.placement, start, waits))
        if seconds <= 0.0 or opts.stop.is_set():
            runs.append((start.makespan, i, label, start.makespan, None, stats, 0.0))
            continue
        hb.enter(f"probe {i + 1}/{count}", moves=lambda st=stats: st.evaluations, best=lambda st=stats: st.best_makespan)
        search = RefineSearch(problem, start.placement, opts, memory_model=model, stats=stats, keep_order=keep,
                              start=start.start, max_evals=None if evals is None else int(evals), waits=waits)
        t_run = time.monotonic()
        placement, got = search.run(t_run + seconds - inc.check_seconds if evals is None else math.inf)
        run_s = time.monotonic() - t_run
        if got.makespan < inc.makespan * (1 - 1e-12):
            inc.offer(searched("refine", problem, placement, got, waits))
        if got.makespan < start.makespan:
            answers[i] = (f"{label} refined", searched(cand.method, problem, placement, got, waits))
        gain = (start.makespan - got.makespan) / start.makespan
        runs.append((got.makespan, i, label, start.makespan, search, stats, gain / max(run_s, 1e-3)))
    if not runs:
        return None
    lead = min(runs, key=lambda r: (r[0], r[1]))
    notes = ", ".join(f"{r[2]} {candidates[r[1]].objective:.6g} -> {r[3]:.6g}" + (f" -> {r[0]:.6g}" if r[4] is not None else "")
                      for r in runs)
    what = f"{seconds:.1f}s of refine each" if seconds > 0.0 else "re-scheduled"
    phases.append(Phase("probe", time.monotonic() - t0, inc.makespan, status="heuristic",
                        note=f"{len(runs)} starts, {what}: {notes}; " + (f"fits: {', '.join(fits)}; " if fits else "")
                        + f"on from {lead[2]}"))
    if lead[4] is None or evals is not None:  # a search bounded by evaluations would stay bounded
        return Probe(None, lead[5], None, lead[1], answers)
    return Probe(lead[4], lead[5], 0.0 if lead[5].stopped == "converged" else lead[6], lead[1], answers)


def _windows(problem: Problem, opts: SolveOptions) -> Windows | None:
    """The graph's windows for gathering (heuristics/window_gather.py ``find_windows``), or None
    when there are no factors to gather with or the search was stopped first."""
    if not _gather_variants(opts):
        return None
    return find_windows(problem, stop=opts.stop.is_set)


def _gathered(problem: Problem, opts: SolveOptions, inc: Incumbent, placement: np.ndarray,
              resched_s: float, found: Windows | None) -> tuple[list[Evaluation], tuple[str, Evaluation] | None]:
    """``placement`` with its windows gathered (heuristics/window_gather.py; ``found``: the
    graph's windows, :func:`_windows`) for each variant of :func:`_gather_variants`, each
    re-scheduled (:func:`_rescheduled`): the schedules that fit, and under the peak model (where
    the gathering ignores static memory) the fastest schedule of a gathered placement that
    overflows in every schedule, with its label (None: none), for :func:`_fit_promising`."""
    out: list[Evaluation] = []
    best_over: tuple[str, Evaluation] | None = None
    peak = opts.memory_model == "peak"
    for factor, light in _gather_variants(opts):
        if found is None or opts.stop.is_set():
            break
        t = time.monotonic()
        gathered = gather_windows(problem, placement, factor=float(factor), found=found,
                                  fill=math.inf if peak else GATHER_FILL, light=light)
        if not np.array_equal(gathered, placement):
            over: list[Evaluation] = []
            label = f"gather:{factor}{' light' if light else ''}"
            got = _rescheduled(problem, opts, inc, gathered, t + resched_s, label, over)
            if not got and over and peak and (best_over is None or over[0].makespan < best_over[1].makespan):
                best_over = (label, over[0])
            out += got
    return out, best_over


def _gather_variants(opts: SolveOptions) -> list[tuple[float, bool]]:
    """(factor, light) for each gathering the probe tries, the light ones first:
    ``opts.extra["gather_light_factors"]`` (default GATHER_LIGHT_FACTORS), then
    ``opts.extra["gather_factors"]`` (GATHER_FACTORS); both empty: no gathering."""
    light = opts.extra.get("gather_light_factors", GATHER_LIGHT_FACTORS)
    plain = opts.extra.get("gather_factors", GATHER_FACTORS)
    return [(float(f), True) for f in light] + [(float(f), False) for f in plain]


def _fit_promising(problem: Problem, opts: SolveOptions, inc: Incumbent, unfit: list[tuple[float, int, str, Evaluation]],
                   until: float, resched_s: float, hb: Heartbeat | None = None,
                   notes: list[str] | None = None, more_until: float | None = None) -> dict[int, list[Evaluation]]:
    """The overflowing gathered schedules ``unfit`` ((makespan, candidate index, label, schedule),
    one per candidate: :func:`_gathered`) fitted (:func:`_fitted`) fastest first, until the clock
    reads ``until``, each only while it promises to beat the incumbent: its makespan times the
    least ratio of a fit's best schedule to its overflowing one so far (1 before the first fit: a
    fit moves bands of layers off the chain's device and adds their transfers, it has not come out
    faster). Per candidate index, the fitting schedules; ``notes`` gets a line per fit. Each fit
    repairs its other splits after the first that fits until ``more_until`` (:func:`_fitted`;
    None: ``until``).

    Why this order and not the candidates': a fit takes seconds (a repair, an evaluation per step),
    the probe's share rarely holds all of them, and the candidate that starts lowest is not the one
    whose gathered placement does (50K CNN, K = 8 at 4.58 GB: band-repair's 1260.57 gathers to
    1201.31 and fits at 1303.84, mem-span's 1317.91 gathers to 1121.94 and fits at 1208.82;
    band-repair's fit ran first and took the share). Why the ratio: there min-memory's 1129.42
    fits at 1273.04 in 14 s and band-repair's at 1304.24, both far above 1208.82 (1.077 x its
    1121.94); promising less than the incumbent by that much they are not fitted."""
    out: dict[int, list[Evaluation]] = {}
    ratios: list[float] = []  # per fit that fitted: its best schedule's makespan / the overflowing one's
    for makespan, i, label, over in sorted(unfit, key=lambda u: (u[0], u[1])):
        if opts.stop.is_set() or time.monotonic() >= until:
            break
        if inc.makespan is not None and makespan * min(ratios, default=1.0) >= inc.makespan:
            continue
        if hb is not None:
            hb.enter(f"probe: fit {label} of start {i + 1}")
        t = time.monotonic()
        out[i] = _fitted(problem, opts, inc, over, until, resched_s, label, until if more_until is None else more_until)
        if out[i]:
            ratios.append(min(e.makespan for e in out[i]) / makespan)
        if notes is not None:
            got = f"{min(e.makespan for e in out[i]):.6g}" if out[i] else "none"
            notes.append(f"start {i + 1} {label} {makespan:.6g} fitted {got} ({time.monotonic() - t:.1f}s)")
    return out


def _fitted(problem: Problem, opts: SolveOptions, inc: Incumbent, over: Evaluation, until: float,
            resched_s: float, label: str, more_until: float = math.inf) -> list[Evaluation]:
    """The schedule ``over`` (a gathered placement, over the capacity under the peak model) with
    its overloaded devices split into bands of layers and repaired (heuristics/band_repair.py
    ``split_repaired``, its splits least over first; stopped at ``until``, the splits after the first
    that fits at ``more_until``), then re-scheduled: the fitting schedules, each
    better than the incumbent offered to it. Empty when the graph has no loss to place layers by or
    nothing fits. Why: gathering puts a CNN's backward blocks on the chain's device, which then
    also receives the forward activations they read and overflows (50K CNN, K = 4: 17.5 GB at
    9.87 GB); the band split moves whole layers off it, so the gathered blocks stay together."""
    pivot = loss_pivot(problem)
    if pivot is None:
        return []
    seq = schedule_order(problem, over.start)  # each device in the schedule's start order
    rep, _ = split_repaired(problem, label, over.placement, seq, positions(problem, pivot), pivot,
                            lambda: opts.stop.is_set() or time.monotonic() > until, first_fit=True,
                            more=lambda: time.monotonic() < more_until)
    if rep is None:
        return []
    ev = rep.evaluation
    _offer_better(inc, f"{label}:band-repair", rep.placement, rep.order, ev)
    again: list[Evaluation] = []
    out = [ev] + _rescheduled(problem, opts, inc, rep.placement, time.monotonic() + resched_s, f"{label}:band-repair", again)
    if again and again[0].makespan < min(e.makespan for e in out) and time.monotonic() < until:
        # the faster priority schedule overflows again (50K CNN, K = 8: 1208.25 against the fit's
        # 1281.65, a little over on one device): repaired once more on its own order
        rep = repair(problem, again[0].placement, schedule_order(problem, again[0].start),
                     stop=lambda: opts.stop.is_set() or time.monotonic() > until)
        if rep.evaluation.feasible(problem):
            out.append(rep.evaluation)
            _offer_better(inc, f"{label}:band-repair:again", rep.placement, rep.order, rep.evaluation)
    return out


def _offer_better(inc: Incumbent, label: str, placement: np.ndarray, order: object, ev: Evaluation) -> None:
    """Offer the schedule ``ev`` (``placement`` run in ``order``) to the incumbent when it beats it:
    the offer re-checks it with the evaluator, which is not worth paying for a worse one."""
    if inc.makespan is None or ev.makespan < inc.makespan * (1 - 1e-12):
        inc.offer(Solution(label, "heuristic", placement=placement, order=order, objective=ev.makespan))


def _rescheduled(problem: Problem, opts: SolveOptions, inc: Incumbent, placement: np.ndarray, until_t: float,
                 label: str, over: list[Evaluation] | None = None) -> list[Evaluation]:
    """``placement`` scheduled by the priority lists (solvers/reschedule.py; no further list after
    ``until_t``): the feasible schedules, every one better than the incumbent offered to it; the
    others, best first, appended to ``over`` when given."""
    out: list[Evaluation] = []
    for name, order, rev in reschedule(problem, placement, opts.memory_model,
                                       stop=lambda: opts.stop.is_set() or time.monotonic() > until_t):
        if rev.feasible(problem):
            out.append(rev)
            _offer_better(inc, f"{label}:{name}", rev.placement, order, rev)
        elif over is not None:
            over.append(rev)
    return out


def _method_name(sol: Solution) -> str:
    """The method behind an answer: the portfolio's winning member too (e.g. "portfolio:etf")."""
    member = sol.info.get("best") if sol.info else None
    return f"{sol.method}:{member}" if member else sol.method


def warm_seconds(problem: Problem, usable: float, share: float, memory_model: str) -> float:
    """The warm start's budget: ``share`` of the usable time, stretched up to WARM_MAX_SHARE when
    the portfolio's estimate for its members up to PARDNN needs more (with 25% to spare)."""
    need = sum(estimate_seconds(name, problem.n, problem.m, problem.k, memory_model) for name in WARM_FIRST)
    return max(share * usable, min(WARM_MAX_SHARE * usable, 1.25 * need))


def warm_start_methods(problem: Problem) -> list[str]:
    """The heuristics of the warm start (keys of WARM_START), in order: the portfolio, then
    topo-split on graphs small enough for its quadratic DP (it does not watch the clock), then
    held-split (peak model) on graphs small enough for its quadratic cuts."""
    names = ["portfolio"]
    if problem.n <= TOPO_SPLIT_MAX_NODES:
        names.append("topo-split")  # the best hint on the msr-fiddle graphs
    if problem.n <= HELD_SPLIT_MAX_NODES:
        names.append("held-split")  # peak model only (returns at once otherwise); uses the warm start's time left
    return names


def _lns_phase(problem: Problem, opts: SolveOptions, inc: Incumbent, budget: float | None, hb: Heartbeat) -> Phase:
    """CP-SAT on windows of the original graph around the critical path (formulations/window_lns.py),
    from the incumbent's schedule; the answer is offered with its start times."""
    ph = Phase("exact-lns")
    if inc.best is None:
        ph.status, ph.note = "skipped", "no incumbent"
        return ph
    window_seconds = float(opts.extra.get("lns_window_seconds", LNS_WINDOW_SECONDS))
    if budget is not None and budget < 1.0 + window_seconds + LNS_SETUP_SECONDS_PER_ELEMENT * (problem.n + problem.m):
        ph.status, ph.note = "skipped", f"{budget:.1f}s left: too little for a window after the set-up"
        return ph
    ev0 = inc.best[1]
    stats = LnsStats()
    hb.enter("exact-lns", moves=lambda: stats.windows, best=lambda: stats.best_makespan)
    deadline = time.monotonic() + (budget if budget is not None else 60.0)
    window = int(opts.extra.get("lns_window", LNS_WINDOW))
    select = str(opts.extra.get("lns_select", LNS_SELECT))
    waits = inc.waits
    placement, ev = lns(problem, ev0.placement, ev0.start, opts, deadline=deadline - inc.check_seconds,
                        memory_model=opts.memory_model, window=window, window_seconds=window_seconds, stats=stats,
                        select=select, waits=waits)
    inc.offer(searched("lns", problem, placement, ev, waits))
    ph.status = "feasible"
    ph.note = (f"{stats.windows} windows of {window} nodes ({select}), {stats.closed} closed, {stats.improved} improved: "
               f"{stats.start_makespan:.6g} -> {ev.makespan:.6g}")
    return ph


def _alternate_phase(problem: Problem, opts: SolveOptions, inc: Incumbent, bound: float, budget: float | None,
                     hb: Heartbeat, probed: Probe | None = None,
                     restarts: Iterator[tuple[str, Solution]] | None = None,
                     side: SideTrack | None = None, stop_when_dry: bool = False) -> list[Phase]:
    """Window LNS (formulations/window_lns.py) and refine (solvers/refine.py) in turns, from the
    incumbent, until ``budget`` seconds from now are spent (60 s without a limit); on graphs of
    SEGMENT_GRAPH_NODES or more, refine on segments of the schedule (solvers/segments.py) takes
    turns too, and on every graph the join sweep (solvers/join_sweep.py), which runs first, and
    the relist sweep (solvers/relist_sweep.py), which runs next: both are quick, and what they fix
    (remote inputs landing together at a join; a launch order that leaves a join waiting for a
    branch's return trip) refine rarely finds; once a sweep keeps nothing its rate is 0, so it
    runs again only when every search has run dry.

    Why: which of them improves a big graph faster depends on the graph and on the schedule
    reached (on generated CNNs refine gained several times what LNS gained per second; LNS wins
    where refine's single moves are stuck), and a fixed split wastes the time of the one that has
    run dry. Each slice (the budget over SEARCH_SLICES, at least SEARCH_SLICE_SECONDS or a
    quarter of a short budget) goes to the search whose last slice gained the most makespan per
    second, that rate grown by SEARCH_STALE_GROWTH per slice the search has waited; the join sweep
    first, then the relist sweep, then refine, then LNS. Each keeps its state between slices and
    takes over the incumbent when another improved it.
    A search that stops early (refine converged, a sweep that kept nothing) hands the rest of
    its slice back. Every answer is offered to the incumbent, so the result is never worse than
    it. ``probed``: the leading probe's refine (:func:`_probe_phase`), which counts as refine's first slice.

    When the graph repeats its blocks (placement/repeats.py), a slice runs its search in pieces of
    ECHO_EVERY seconds (relist: one sweep), and after each piece that improved the schedule the
    echo sweep (solvers/echo_sweep.py) tries the piece's fixes in the other copies of their blocks.

    When the current track has stalled (solvers/restarts.py StallWatch: less than STALL_GAIN over
    the last STALL_SLICES slices) with RESTART_MIN_SLICES slices left, the search starts over from
    the next of ``restarts`` (a label and an answer) that fits: a new track, with its own incumbent
    and fresh searches; every new best of a track is the pipeline's too when it is better.
    With a ``side`` track (solvers/side_track.py: those restarts, searched in a second process for
    the whole time), its answers are offered to ``inc`` after every piece, and a stalled track starts
    over from the side track's best when that is better than its own. With ``stop_when_dry`` the
    search ends, its time unspent, once every search's last slice gained nothing."""
    t0 = time.monotonic()
    end = t0 + (budget if budget is not None else 60.0)
    slice_s = max(min(SEARCH_SLICE_SECONDS, (end - t0) / 4), (end - t0) / SEARCH_SLICES)  # short budgets: 4 slices
    window = int(opts.extra.get("lns_window", LNS_WINDOW))
    window_seconds = float(opts.extra.get("lns_window_seconds", LNS_WINDOW_SECONDS))
    select = str(opts.extra.get("lns_select", LNS_SELECT))
    multilevel_nodes = int(opts.extra.get("refine_multilevel_nodes", REFINE_MULTILEVEL_NODES))
    lns_stats, ref_stats, seg_stats, join_stats = LnsStats(), RefineStats(), SegmentStats(), JoinStats()
    relist_stats = RelistStats()
    arms: dict[str, Any] = {}
    if probed is not None and probed.search is not None:
        arms["refine"], ref_stats = probed.search, probed.stats
    made = dict(arms)  # every search built on any track, by name (the last of each): the phases' notes
    names = ["joins", "relist", "refine", "exact-lns"]  # the order of their first slices
    seg_nodes = int(opts.extra.get("segment_graph_nodes", SEGMENT_GRAPH_NODES))
    if problem.n >= seg_nodes:
        names.append("segments")
    spent = {name: 0.0 for name in names}
    rate: dict[str, float] = {} if probed is None or probed.search is None else {"refine": probed.rate}
    log: list[str] = []
    start_makespan = inc.makespan
    cur = inc  # the current track's incumbent (after a restart a fresh one: Incumbent.track)
    watch = StallWatch(float(opts.extra.get("stall_slices", STALL_SLICES)) * slice_s,
                       float(opts.extra.get("stall_gain", STALL_GAIN)))
    restart_left = float(opts.extra.get("restart_min_slices", RESTART_MIN_SLICES)) * slice_s  # a restart needs this left
    restart_gap = float(opts.extra.get("restart_min_gap", RESTART_MIN_GAP))  # and a gap above this
    watch.restart(t0, inc.makespan)
    # the graph's repeat classes (0.7 s at 200K nodes): without repeats the slices run as before, whole
    colors = repeat_classes(problem) if opts.extra.get("echo", ECHO) else None
    echoes = colors is not None and repeats(colors)
    echo: EchoSweep | None = None  # made at the first gain; a restart's track makes its own
    echo_stats = EchoStats()
    echo_allow = ECHO_SHARE * ECHO_EVERY  # seconds the next echo may take

    def build(name: str) -> Any:
        sol, ev = cur.best
        if name == "refine":
            keep = True if problem.n > multilevel_nodes else "auto"
            return RefineSearch(problem, ev.placement, opts, memory_model=opts.memory_model, stats=ref_stats,
                                keep_order=keep, start=ev.start, waits=inc.waits)
        if name == "segments":
            return SegmentSearch(problem, ev.placement, ev.start, opts, memory_model=opts.memory_model,
                                 size=int(opts.extra.get("segment_nodes", SEGMENT_NODES)),
                                 seconds=float(opts.extra.get("segment_seconds", SEGMENT_SECONDS)), stats=seg_stats)
        if name == "joins":
            return JoinSweep(problem, ev.placement, ev.start, opts, memory_model=opts.memory_model, stats=join_stats,
                             waits=inc.waits)
        if name == "relist":
            return RelistSweep(problem, ev.placement, ev.start, opts, memory_model=opts.memory_model,
                               stats=relist_stats, waits=inc.waits)
        return WindowSearch(problem, ev.placement, ev.start, opts, memory_model=opts.memory_model, window=window,
                            window_seconds=window_seconds, stats=lns_stats, select=select, waits=inc.waits,
                            target_seconds=opts.extra.get("lns_target_seconds"))

    waited = {name: 0 for name in names}  # slices since each search last ran
    idle_streak = 0  # slices in a row that returned at once with nothing

    def estimate(k: str) -> float:
        # A waiting search's rate was measured on an older schedule, and the others' moves may
        # have opened room for it: its estimate grows by SEARCH_STALE_GROWTH per slice waited.
        return stale_estimate(rate[k], waited[k])

    def pick() -> str:
        for k in names:
            if k not in rate:
                return k
        if all(estimate(k) <= 0.0 for k in names):  # all dry: take turns, the longest waiting first
            return max(names, key=lambda k: (waited[k], -names.index(k)))
        return max(names, key=estimate)

    while not opts.stop.is_set():
        left = end - time.monotonic()
        if left < 1.0 + cur.check_seconds:
            break  # each arm runs until its slice's end minus a check: none would run (nor stop spinning)
        name = pick()
        if name == "exact-lns" and left < 1.0 + window_seconds:
            name = "refine"  # no time for a window
        this_end = end if left < 1.5 * slice_s else time.monotonic() + slice_s
        t = time.monotonic()
        before = cur.makespan
        stats = {"refine": ref_stats, "exact-lns": lns_stats, "segments": seg_stats, "joins": join_stats,
                 "relist": relist_stats}[name]
        moves = {"refine": lambda: ref_stats.evaluations, "exact-lns": lambda: lns_stats.windows,
                 "segments": lambda: seg_stats.sub_evaluations, "joins": lambda: join_stats.tried,
                 "relist": lambda: relist_stats.windows}[name]
        if name not in arms:
            hb.enter(name, moves=moves, best=lambda s=stats: s.best_makespan)
            arms[name] = made[name] = build(name)
        run_s = arm_gain = echo_s = echo_gain = 0.0
        while True:  # the slice, in pieces of ECHO_EVERY seconds while the echo sweep is on
            hb.enter(name, moves=moves, best=lambda s=stats: s.best_makespan)
            _adopt(arms[name], name, cur)
            # a relist sweep visits the joins latest first: cut short, it would never reach the early ones
            piece_end = min(this_end, time.monotonic() + ECHO_EVERY) if echoes and name != "relist" else this_end
            piece_ms, piece_ev = cur.makespan, cur.best[1]
            t_run = time.monotonic()
            if name == "refine":
                placement, ev = arms[name].run(piece_end - cur.check_seconds)
            elif name == "relist":
                homed = arms[name].homed_ev
                ev = arms[name].run(piece_end - cur.check_seconds, once=echoes)
                placement = ev.placement
                if arms[name].homed_ev is not homed:
                    # re-homed (no shorter) before its windows: the echo learns the windows' fixes
                    piece_ev = arms[name].homed_ev
            else:
                ev = arms[name].run(piece_end - cur.check_seconds)
                placement = ev.placement
            run_s += time.monotonic() - t_run
            if ev.makespan < piece_ms * (1 - 1e-12):
                method = {"refine": "refine", "exact-lns": "lns", "segments": "segments", "joins": "joins",
                          "relist": "relist"}[name]
                cur.offer(searched(method, problem, placement, ev, getattr(arms[name], "waits", None)))
            arm_gain += (piece_ms - cur.makespan) / before
            if echoes and cur.makespan < piece_ms * (1 - 1e-12):
                hb.enter("echo", moves=lambda: echo_stats.tried, best=lambda: echo_stats.best_makespan)
                echo_ms = cur.makespan
                echo, (seconds, _) = _echo_phase(problem, opts, cur, echo, echo_stats, piece_ev, colors,
                                                 min(this_end, time.monotonic() + echo_allow) - cur.check_seconds)
                echo_s += seconds
                echo_gain += (echo_ms - cur.makespan) / before
                # an echo that gained nothing halves the next one's time; one that gained restores it
                echo_allow = ECHO_SHARE * ECHO_EVERY if cur.makespan < echo_ms * (1 - 1e-12) else \
                    max(ECHO_MIN_SECONDS, echo_allow / 2)
                if echo is None:
                    echoes = False  # no block of the graph repeats
                else:
                    made["echo"] = echo
            if side is not None:
                _side_posts(inc, side.poll())
            dry = (name in ("joins", "relist") and arms[name].converged) or \
                (name == "refine" and ref_stats.stopped == "converged")
            idle = time.monotonic() - t_run < 0.05 and cur.makespan >= piece_ms  # returned at once, with nothing
            if not echoes or dry or idle or opts.stop.is_set() or this_end - time.monotonic() < 1.0 + cur.check_seconds:
                break
        took = time.monotonic() - t
        spent[name] += took - echo_s
        if echo_s:
            spent["echo"] = spent.get("echo", 0.0) + echo_s
        for other in waited:
            waited[other] = 0 if other == name else waited[other] + 1
        rate[name] = arm_gain / max(run_s, 1e-3)  # the set-up of a search's first slice is not its rate
        log.append(f"{name} {took - echo_s:.0f}s {100 * arm_gain:.2f}%")
        if echo_s:
            log.append(f"echo {echo_s:.0f}s {100 * echo_gain:.2f}%")
        if name in ("joins", "relist") and arms[name].converged:
            rate[name] = 0.0  # a sweep kept nothing: the rest of its slice goes to the others
        if name == "refine" and ref_stats.stopped == "converged":
            rate[name] = 0.0  # ran dry: the rest of its slice goes to LNS
            if end - time.monotonic() < 1.0 + window_seconds:
                break  # and LNS has no time for a window
        if stop_when_dry and len(rate) == len(names) and all(r <= 0.0 for r in rate.values()):
            break
        # every search returning at once with nothing, a whole round: taking turns would spin
        idle_streak = idle_streak + 1 if took < IDLE_SLICE_SECONDS and cur.makespan >= before else 0
        spinning = idle_streak >= len(names)
        watch.record(time.monotonic(), cur.makespan)
        if (restarts is not None or side is not None) and (watch.stalled(time.monotonic()) or spinning) and \
                end - time.monotonic() >= restart_left and inc.makespan > bound * (1 + restart_gap):
            if side is not None:
                track = _side_start(inc, cur, side)
                if track is None:
                    continue  # the side track is behind: the current track goes on
            else:
                hb.enter("restart")
                track = _next_track(inc, restarts, stop=lambda: opts.stop.is_set() or end - time.monotonic() < restart_left,
                                    max_above=float(opts.extra.get("restart_max_above", RESTART_MAX_ABOVE)))
                if track is None:
                    restarts = None  # none left (or no time for one): the current track goes on
                    continue
            cur, label = track
            arms.clear()
            echo = None
            rate.clear()
            for k in waited:
                waited[k] = 0
            watch.restart(time.monotonic(), cur.makespan)
            idle_streak = 0
            log.append(f"restart from {label} {cur.makespan:.6g}")
        elif spinning:
            break  # and no restart follows: nothing would change until the budget ends
    phases = []
    if side is not None:
        _side_posts(inc, side.close(hurry=opts.stop.is_set()))
        note = f"{side.posts} answers posted, the best {side.best.makespan:.6g}" if side.best else "no answer posted"
        phases.append(Phase("side-track", time.monotonic() - side.started, inc.makespan, bound, "heuristic",
                            f"{note}; {side.summary or 'it did not end within its close'}"))
    if "exact-lns" in made:
        phases.append(Phase("exact-lns", spent["exact-lns"], inc.makespan, bound, "feasible",
                            f"{lns_stats.windows} windows of {window} nodes ({select}), {lns_stats.closed} closed, "
                            f"{lns_stats.improved} improved; {lns_stats.targeted} targeted, "
                            f"{lns_stats.targets_improved} of them improved"))
    if "refine" in made:
        phases.append(Phase("refine", spent["refine"], inc.makespan, bound, "heuristic",
                            f"{ref_stats.evaluations} moves, {ref_stats.accepted} accepted, judged by {ref_stats.judged_by}"))
    if "joins" in made:
        phases.append(Phase("joins", spent["joins"], inc.makespan, bound, "heuristic",
                            f"{join_stats.sweeps} sweeps, {join_stats.tried} join moves, {join_stats.improved} kept"))
    if "relist" in made:
        phases.append(Phase("relist", spent["relist"], inc.makespan, bound, "heuristic",
                            f"{relist_stats.sweeps} sweeps, {relist_stats.windows} windows ({relist_stats.forks} from a "
                            f"fork, the others of {made['relist'].size} nodes), {relist_stats.promising} "
                            f"promising, {relist_stats.kept} kept, {relist_stats.rehomed} slack groups re-homed"))
    if "echo" in made:
        phases.append(Phase("echo", spent["echo"], inc.makespan, bound, "heuristic",
                            f"{echo_stats.patterns} patterns, {echo_stats.tried} echoes tried, {echo_stats.kept} kept, "
                            f"{echo_stats.copies} block copies changed"))
    if "segments" in made:
        phases.append(Phase("segments", spent["segments"], inc.makespan, bound, "heuristic",
                            f"{seg_stats.segments} segments of {made['segments'].size} nodes, {seg_stats.improved} "
                            f"improved, {seg_stats.sub_evaluations} moves in them"))
    phases.append(Phase("search", time.monotonic() - t0, inc.makespan, bound, "heuristic",
                        f"{start_makespan:.6g} -> {inc.makespan:.6g} in slices: " + ", ".join(log)))
    return phases


def _adopt(arm: Any, name: str, cur: Incumbent) -> None:
    """Hand the track's incumbent to a search of the alternating phase (each takes it only when it
    is better than its own best)."""
    ev = cur.best[1]
    if name == "refine":
        arm.adopt(ev.placement, ev, cur.waits)
    elif name in ("exact-lns", "joins", "relist"):
        arm.adopt(ev, cur.waits)
    else:
        arm.adopt(ev)


def _echo_phase(problem: Problem, opts: SolveOptions, cur: Incumbent, echo: "EchoSweep | None", stats: EchoStats,
                before: Evaluation, colors: np.ndarray | None, until: float) -> tuple["EchoSweep | None", tuple[float, float]]:
    """After a piece of a slice that improved ``cur`` from ``before``: the echo sweep (solvers/echo_sweep.py)
    tries that piece's fixes in the graph's other copies of their blocks until ``until``; what it
    finds goes to ``cur``. The sweep (made here the first time, None when the graph has no
    repeats), and (seconds, relative gain)."""
    t = time.monotonic()
    ms = cur.makespan
    sol, ev = cur.best
    if echo is None:
        colors = repeat_classes(problem) if colors is None else colors
        if not repeats(colors):
            return None, (time.monotonic() - t, 0.0)
        echo = EchoSweep(problem, ev.placement, ev.start, opts, memory_model=opts.memory_model, stats=stats,
                         waits=cur.waits, colors=colors)
    echo.learn(before, ev)
    got = echo.run(until)
    if got.makespan < ms * (1 - 1e-12):
        cur.offer(searched("echo", problem, got.placement, got, echo.waits))
    return echo, (time.monotonic() - t, (ms - cur.makespan) / ms)


def _side_posts(inc: Incumbent, posts: list[Post]) -> None:
    """Offer the best of the side track's new ``posts`` to ``inc`` (the evaluator judges it there)."""
    if posts:
        inc.offer(min(posts, key=lambda post: post.makespan).solution())


def _side_start(inc: Incumbent, cur: Incumbent, side: SideTrack) -> tuple[Incumbent, str] | None:
    """A fresh track of ``inc`` from the side track's best, when that is better than the current
    track ``cur``'s own; with its label."""
    best = side.best
    if best is None or cur.makespan is None or best.makespan >= cur.makespan * (1 - 1e-9):
        return None
    child = inc.track()
    return (child, "the side track's best") if child.offer(best.solution()) is not None else None


def side_track_main(conn: Any, problem: Problem, fields: dict[str, Any], candidates: list[Solution], labels: list[str],
                    warm: Solution, bound: float, deadline: float | None, answer: float,
                    verify: Callable[[Problem, Solution, str], Evaluation]) -> None:
    """The side track's process (solvers/side_track.py): the alternating search from the first
    restart start (solvers/restarts.py ``restart_starts``, over ``candidates``) within
    RESTART_MAX_ABOVE of ``answer`` (the pipeline's when the track began), restarting among the
    others when it stalls; from ``warm`` with the next seed when none is that close. Every better
    answer is posted to the parent; the last message is a summary of the search."""
    stop = child_stop(conn)
    poster = Poster(conn)
    opts = SolveOptions(**fields, stop=stop, time_limit=None if deadline is None else max(0.0, deadline - time.monotonic()))
    try:
        def left() -> float | None:
            return None if deadline is None else max(0.0, deadline - time.monotonic())

        root = Incumbent(problem, opts.memory_model, verify, stop=stop)  # posts nothing until a start is chosen
        root.deadline = deadline
        starts = restart_starts(problem, opts, candidates, labels, left)
        track = _next_track(root, starts, stop=lambda: stop.is_set() or left() == 0.0,
                            max_above=float(opts.extra.get("restart_max_above", RESTART_MAX_ABOVE)), above=answer)
        if track is None:
            opts = replace(opts, seed=opts.seed + 1)
            cur, label = root.track(), f"the warm start, seed {opts.seed}"
            cur.offer(warm)
        else:
            cur, label = track
        root.publish = lambda best: poster.offer(Post(label, best[1].placement, best[1].start,
                                                      kept_waits(problem, best[1], best[0].waits), best[1].makespan))
        if stop.is_set() or cur.best is None:
            poster.done(f"from {label}: stopped before the search")
            return
        hb = Heartbeat(None, lambda: cur.makespan, bound)
        done = _alternate_phase(problem, opts, cur, bound, left(), hb, None, starts)
        poster.done(f"from {label}: {done[-1].note}")
    except Exception as exc:  # the parent's answer stands: tell it why this track has none
        poster.done(f"failed: {type(exc).__name__}: {exc}")


def _next_track(inc: Incumbent, restarts: Iterator[tuple[str, Solution]], stop: Callable[[], bool],
                max_above: float = RESTART_MAX_ABOVE, above: float | None = None) -> tuple[Incumbent, str] | None:
    """The first of ``restarts`` that fits and is at most ``max_above`` (a fraction) above the
    incumbent (or above ``above``, when given), on a fresh track of ``inc`` (:meth:`Incumbent.track`),
    with its label; None when none is left or ``stop()`` says there is no time for one."""
    for label, sol in restarts:
        if stop():
            return None
        limit = (inc.makespan if above is None else above) * (1 + max_above)
        child = inc.track()
        ev = child.offer(sol)
        if ev is not None and ev.makespan <= limit:
            return child, label
    return None


def stale_estimate(rate: float, waited: int) -> float:
    """A waiting search's estimated rate: its last rate grown by SEARCH_STALE_GROWTH per slice
    waited, the growth capped at STALE_WAIT_CAP slices (uncapped, a long wait raised
    OverflowError: a float power past 1e308)."""
    return rate * SEARCH_STALE_GROWTH ** min(waited, STALE_WAIT_CAP)


def _multilevel_phase(problem: Problem, opts: SolveOptions, inc: Incumbent, budget: float | None, hb: Heartbeat) -> Phase:
    """A V-cycle from the incumbent's schedule (solvers/multilevel.py): CP-SAT on the coarsest
    level, refinement on every level on the way up; the answer is offered with its start times."""
    ph = Phase("exact-multilevel")
    if inc.best is None:
        ph.status, ph.note = "skipped", "no incumbent"
        return ph
    if budget is not None and budget < 2.0 + LNS_SETUP_SECONDS_PER_ELEMENT * (problem.n + problem.m):
        ph.status, ph.note = "skipped", f"{budget:.1f}s left: too little for the levels"
        return ph
    ev0 = inc.best[1]
    stats = MultilevelStats()
    hb.enter("exact-multilevel", moves=lambda: stats.evaluations, best=lambda: stats.best_makespan)
    deadline = time.monotonic() + (budget if budget is not None else 60.0)
    coarsest = int(opts.extra.get("multilevel_coarsest", MULTILEVEL_COARSEST))
    placement, ev = multilevel(problem, ev0.placement, ev0.start, opts, deadline=deadline - inc.check_seconds,
                               memory_model=opts.memory_model, coarsest=coarsest, stats=stats, say=hb.say)
    inc.offer(Solution("multilevel", "heuristic", placement=placement, start=ev.start, objective=ev.makespan))
    ph.status = "feasible"
    levels = " > ".join(f"{m:.6g}" for m in stats.level_makespans)
    ph.note = (f"levels {' > '.join(map(str, stats.sizes))} nodes, {stats.kept_edges} critical transfers kept; coarsest "
               f"{stats.coarse_status}; makespan per level (coarsest first) {levels}; original refined from the "
               f"{stats.original_start or '-'}; {stats.start_makespan:.6g} -> {ev.makespan:.6g}")
    return ph


def _coarse_phase(problem: Problem, opts: SolveOptions, inc: Incumbent, sub: Callable[..., SolveOptions],
                  budget: float | None, say: Callable[[str], None]) -> Phase:
    """CP-SAT on a coarsened graph, hinted by the warm start; the answer is mapped back and offered."""
    ph = Phase("exact-coarse")
    t = time.monotonic()
    target = int(opts.extra.get("coarse_size", COARSE_TARGET))
    opts.best_so_far.enter("exact-coarse: coarsening")
    co = coarsen(problem, target, seed=opts.seed)
    opts.best_so_far.enter("exact-coarse")
    ph.note = f"{problem.n} -> {co.coarse.n} nodes in {time.monotonic() - t:.1f}s"
    say(f"coarsened {ph.note}")
    hint = None
    if inc.best is not None:
        restricted = co.restrict(inc.best[1].placement)
        if restricted is not None:
            hint = Solution("warm-start", "heuristic", placement=np.asarray(restricted))
    remaining = None if budget is None else max(0.0, budget - (time.monotonic() - t))
    sol = cpsat(co.coarse, sub(remaining, hint=hint))
    # Merging nodes can make packing impossible when the original graph fits: an infeasible
    # coarse graph proves nothing about the original one.
    ph.status = "feasible" if sol.placement is not None else "unknown"
    if sol.status == "infeasible":
        ph.note += "; the coarse graph is infeasible (not a proof for the original graph)"
    if sol.placement is not None:
        mapped = np.asarray(co.project(sol.placement))
        # The coarse schedule's device order is never slower on the original than the coarse
        # makespan (docs/coarsening.md); the FIFO executor on the same placement can be either.
        order = co.project_order(sol.placement, sol.start)
        fifo = inc.offer(Solution("cpsat-coarse", "heuristic", placement=mapped))
        ordered = inc.offer(Solution("cpsat-coarse", "heuristic", placement=mapped, order=order))
        got = [ev.makespan for ev in (fifo, ordered) if ev is not None]
        ph.note += f"; coarse {sol.status} {sol.objective if sol.objective is not None else '-'}, on the original graph " + \
            (f"{min(got):.6g}" if got else "infeasible")
    return ph
