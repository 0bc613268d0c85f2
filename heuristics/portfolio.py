"""The heuristic portfolio behind ``solve --method auto``: run what fits the time limit, keep the best.

Members run in this order: the linear-time baselines (single, m-topo, greedy-fill) so a tight
budget still gets an answer, PARDNN (the project's reference), then the list schedulers that give
the best makespans on large generated graphs (etf, heft, chain-home for unrolled loops: heuristics/chain_home.py,
readers-first where a weight is slow to copy: heuristics/exclusive.py, critical-path), then pardnn-balanced,
m-etf, linear-clustering, random, band-split, min-memory, mem-span, chain-split, weight-bands,
chain-pin (heuristics/chain_pin.py), mem-repair (heuristics/memory_repair.py), band-repair
(heuristics/band_repair.py), halve-repair (heuristics/halve_repair.py), fewer-devices (PARDNN on K/2, K/4, ...
devices, heuristics/fewer_devices.py). Under the peak model etf and heft run before PARDNN and chain-pin, chain-split
and weight-bands right after them (PEAK_ORDER; with no capacity on any device the members run as in the static
model, which then constrains the same), and with tight memory band-split, chain-pin, min-memory, weight-bands,
band-repair, mem-span and chain-split right after the baselines (PEAK_TIGHT_ORDER); chain-home, which plans no
memory, runs last under the peak model. Before each, its running time is estimated from the graph size
(seconds per node + edge, measured on the generated 100K-node graphs at low load with about 1.5x to
spare, bench/results_pipeline.md "Warm-start members"; linear clustering is quadratic) and the
member is skipped when the estimate exceeds the time left. The answer is the memory-feasible member with the smallest
evaluator makespan (ties: earlier member). Every member's outcome is in info["members"]: method,
status, makespan (None without a feasible answer), feasible, seconds, and why it was skipped or
failed. A member that raises is recorded with its error and the portfolio goes on.
info["candidates"] holds the best pairwise-distinct member answers (at most CANDIDATES, best
first: :func:`keep_candidate`), for the pipeline's probe of where its search should start.
"""
from __future__ import annotations

import math
import time
from dataclasses import replace

import numpy as np
from typing import Callable

from placement.memory_bounds import memory_lower_bound
from placement.problem import Problem
from placement.solution import Solution, SolveOptions

from .memory_order import lower_peak_order
from .band_repair import band_repair
from .baselines import greedy_fill, single
from .chain_home import chain_home
from .chain_pin import chain_pin
from .chain_split import chain_split
from .critical_path import critical_path
from .fewer_devices import DEFAULT_METHODS, device_counts, fewer_devices
from .halve_repair import halve_repair
from .layer_bands import band_split, weight_bands
from .linear_clustering import linear_clustering
from .list_scheduling import etf, heft, m_etf, m_topo, readers_first
from .memory_repair import memory_repair
from .memory_span import memory_span
from .min_memory import min_memory
from .pardnn import pardnn, pardnn_balanced
from .random_feasible import random_feasible

# The members in the order they run, under their method names.
MEMBERS: dict[str, Callable[[Problem, SolveOptions], Solution]] = {
    "single": single, "m-topo": m_topo, "greedy-fill": greedy_fill, "pardnn": pardnn, "etf": etf, "heft": heft, "chain-home": chain_home,
    "readers-first": readers_first,
    "critical-path": critical_path, "pardnn-balanced": pardnn_balanced, "m-etf": m_etf,
    "linear-clustering": linear_clustering, "random": random_feasible, "band-split": band_split, "min-memory": min_memory,
    "mem-span": memory_span, "chain-split": chain_split, "weight-bands": weight_bands, "chain-pin": chain_pin,
    "mem-repair": memory_repair, "band-repair": band_repair, "halve-repair": halve_repair,
    "fewer-devices": fewer_devices,
}
ORDER = tuple(MEMBERS)
# chain-home (heuristics/chain_home.py: each accumulation chain beside the weight it updates) right after
# heft, the last of the members the pipeline sizes the warm budget for (solvers/pipeline.py WARM_FIRST):
# with memory to spare it answers 408.2 on the 50K LSTM at K = 16 where ETF answers 429.3, and 463.1
# at K = 8 where ETF answers 591.8 (bench/results_scale.md, session 13); about 10 s at 50K nodes
# (three ETFs), so after chain-pin it found no warm budget left at 120 s. On graphs without chains
# (CNN, transformer) it gives up at once and costs the members after it nothing. Its ETF plans no
# memory: under the peak model it runs last (LAST_UNDER_PEAK).
LAST_UNDER_PEAK = ("chain-home",)
# readers-first (ETF with a slow-to-copy weight's readers first on its device) right after chain-home,
# outside the members the warm budget is sized for: it costs one ETF where a graph has such a weight
# (the generated LSTMs: every layer's weight, the embedding, the output layer) and nothing elsewhere.
# On the inference part of the 10K LSTM (seed 7, K = 8) it answers 25.50 where ETF answers 27.87
# (bench/results_scale.md, session 38); on training steps chain-home's own variant does the same.
# Under the peak model the list schedulers run before PARDNN: they answer where PARDNN's overflow
# handler does not (bench/results_peak.md), in a fifth of its time (10K-node transformer at 1.27x
# the memory lower bound: etf 2.9 s, heft 3.7 s, pardnn 15.6 s without an answer), so a warm budget
# spent on PARDNN first left auto with greedy-fill's 4527 where ETF gives 3491.
# chain-split (the critical chain cut into memory-balanced segments, heuristics/chain_split.py) runs
# right after them: on the ResNet-1001 training step at 4 GB per device it answers 65.17 where
# every other member gives 79.9 or more (bench/results_scale.md, session 8), in about 2 s.
# weight-bands after chain-split: the 50K LSTM at 1.5 x its smallest memory (K = 4) is 2.02 x the
# memory bound, so this order runs there, and weight-bands alone gives 975.4 against ETF's 932.2
# with unlimited memory (bench/results_peak.md, session 9).
PEAK_FIRST = ("single", "m-topo", "greedy-fill", "etf", "heft", "chain-pin", "chain-split", "weight-bands", "min-memory", "pardnn")
PEAK_ORDER = PEAK_FIRST + tuple(m for m in ORDER if m not in PEAK_FIRST + LAST_UNDER_PEAK) + LAST_UNDER_PEAK
# When memory is tight (every device below TIGHT x memory_lower_bound) min-memory runs first after
# "single" (which gives up at once when params + a working set overflow): there the list
# schedulers and PARDNN rarely answer (the 10K LSTM: none below 2.16 x the bound) and at 200K nodes
# they would use the whole warm budget first; m-topo and greedy-fill too, at 200K nodes: with them
# first, auto at 1.5 x the bound on the 200K LSTM (K = 4) was cut inside min-memory's pass and
# answered nothing in 120 s, where that pass alone fits (bench/results_peak.md, session 8).
TIGHT = 2.0
# Then mem-span (min-memory's placement along ETF's order blended with the memory-light one) and
# chain-split (about 3 s on the 37K-node ResNet-1001): at 1.5 x the 10K CNN's smallest memory
# mem-span gave 531 where etf, heft and pardnn gave 605, 585 and 884 (bench/results_peak.md,
# "Session 8: makespan at 1.5 x"); with chain-split first (8 s on that CNN, no answer) a 120 s
# run's warm budget skipped mem-span (session 9). mem-span may use MEMBER_SHARE of the time left,
# so the members after it still run.
# band-split (each device a band of layers, balanced at the loss) runs first of all: one placement and
# its evaluation, 10 s on the 200K-node LSTM, where it fits at 1.11 / 1.21 x the bound (K = 4 / 8) and
# min-memory at 1.30 / 1.45, with a makespan 4-5 x shorter (bench/results_peak.md, session 9).
# weight-bands (layer-wise model parallelism) right after band-split and min-memory: on the 10K LSTM at 1.5 x its
# smallest memory it gives 226.8 where min-memory gives 584 and mem-span nothing (session 9); at
# most 0.35 of the time left, since where no band placement fits it learns so only after trying
# them all (10K LSTM, K = 8: 14 s; 50K: 99 s).
# mem-repair (ETF's unlimited-memory schedule, repaired until it fits) after band-split, min-memory and
# weight-bands:
# on the 200K CNN at K = 4 and 1.5 x its smallest memory ETF's schedule fits as it is (3468.8 in
# 6 s, where the warm start was chain-split's 3943.6; bench/results_peak.md, session 11).
# Below REPAIR_FROM x the bound it ran last (until session 35): at 1.02-1.25 x (the 10K graphs'
# smallest memories) it fitted nothing and took 2.5-4.3 s of an 18 s warm budget (session 11).
# band-repair (the fast schedule's overloaded devices split into bands of layers, then repaired) takes
# mem-repair's place: where ETF's schedule fits it answers the same, and where it overflows it fits
# on the 200K CNN at K = 8 (3453.0 against the unlimited answer's 3402.5, where mem-repair gave up)
# and from PARDNN's schedule on the 10K CNN at K = 4 (467.3 where mem-span gave 537.5;
# bench/results_peak.md, session 12). mem-repair then ran later, with the others.
# mem-repair comes back right after band-repair, and below REPAIR_FROM right after min-memory (band-repair
# alone last): on imported decoders and GRUs ETF's schedule repaired is by far the best warm start
# (the 32K LLaMA-style decoder, K = 4: 172.6 at 1.3 x and 180.3 at 1.2 x the bound in 3-5 s, where the
# portfolio answered mem-span's 241 and 240 with the repair skipped for time; the 30K GRU at 1.2 x:
# 78.0 against weight-bands' 92.4). Where it fits nothing it stops within its share (1-5 s of a 26 s
# warm budget on the 10K generated graphs and the 24K Inception-ResNet; bench/results_peak.md,
# session 35).
# halve-repair (mem-repair on K/2 devices with twice the memory, each device then split in two by
# layers, heuristics/halve_repair.py) right after mem-repair: where ETF leaves most of K = 8 devices
# idle, mem-repair stalls far over capacity; on the imported 32K decoder at K = 8 and 1.3 x the bound
# halve-repair fits at 174.5 in 4 s where the warm start was min-memory's 207-250, and on the
# imported T5 at 1.2-1.3 x it answers 34.5-34.9 where the best member gave 37.6-38.3
# (bench/results_peak.md, session 36).
REPAIR_FROM = 1.4
REPAIRS = ("band-repair", "mem-repair", "halve-repair")
PEAK_TIGHT_FIRST = ("single", "band-split", "chain-pin", "min-memory", "weight-bands", "band-repair", "mem-repair",
                    "halve-repair", "mem-span", "chain-split", "m-topo", "greedy-fill")
PEAK_TIGHT_ORDER = PEAK_TIGHT_FIRST + tuple(m for m in PEAK_ORDER if m not in PEAK_TIGHT_FIRST)  # chain-home still last
# Below REPAIR_FROM: mem-repair and halve-repair right after min-memory, band-repair last.
_NO_REPAIRS = tuple(m for m in PEAK_TIGHT_ORDER if m not in REPAIRS)
_AFTER_MIN = _NO_REPAIRS.index("min-memory") + 1
PEAK_TIGHTEST_ORDER = _NO_REPAIRS[:_AFTER_MIN] + ("mem-repair", "halve-repair") + _NO_REPAIRS[_AFTER_MIN:] + ("band-repair",)
# From HALVE_FIRST devices on, halve-repair runs just before mem-repair: at K = 8 and 1.2-1.3 x the bound
# mem-repair fitted nothing on the decoder, T5 and the 10K generated transformer (2.3-4.7 s each),
# while at K = 4 it beats halve-repair there (the decoder at 1.3 x: 172.6 against 180.4; session 36).
HALVE_FIRST = 8
# chain-pin (heuristics/chain_pin.py: ETF with each weight-gradient accumulation chain on one device)
# right after band-split, and after etf and heft when memory is looser: on the LSTMs at 1.5 x their
# smallest memory it fits with makespans 1.3-2.2 x shorter than band-split's (bench/results_peak.md,
# session 11); on graphs without such chains (CNN, transformer) it gives up at once. At most 0.3 of
# the time left (under tight memory all of it: TIGHT_SHARE): at 200K nodes its ETF and evaluations take 15-60 s.
# chain-split too: 2-3 s on the ResNet-1001 (37K nodes), but 40 s without an answer on the 50K LSTM at
# 2.02 x the memory bound, which left weight-bands (975.4 there) no time (session 9).
# band-split too: where its bands do not fit it moves parameter units between devices, one evaluation
# per try (session 10), which must not eat the warm budget of the members after it.
# fewer-devices runs PARDNN twice per smaller device count; it answers with the best of the runs
# done when its share ends.
# mem-repair too: each repair step is one evaluation and a pass over the peak's holders (0.5-3 s at 200K nodes).
# Under tight memory (PEAK_TIGHT_ORDER) chain-pin keeps the rest of the warm budget (TIGHT_SHARE): on the
# LSTMs at 1.5 x their smallest memory it is the member that fits near the unlimited-memory makespan,
# and the members after it there (min-memory, weight-bands, band-repair, mem-span) answered 1.2-20 x
# slower or nothing (bench/results_peak.md, sessions 11 and 16); on graphs without accumulation
# chains it gives up at once. With 0.3 its share at 200K nodes was its estimate, 28 s of a 51 s warm
# budget: the 200K LSTM at K = 4 (15.138 GB) needs its two ways' bases, about 23 s at load 1 and
# 35-40 s at load 4.5, and fell to band-split's 5362.2 (session 17).
# mem-repair may use half of the time left under tight memory (a quarter otherwise): a repair that
# still lowers the overflow is worth its time there, and one that does not stops by itself after
# ten steps (1-3.5 s on the 10K graphs and the real ones that it does not fit). On the 32K decoder
# at 1.1 x (K = 4) the repair and its descent take about 10 s to fit (189.2, where the portfolio's
# best was min-memory's 254.2), and a quarter of a 120 s run's warm budget cut it at 4.7 s
# (bench/results_peak.md, session 35).
TIGHT_SHARE = {"chain-pin": 1.0, "mem-repair": 0.5, "halve-repair": 0.5}
# When none of min-memory's passes fits, its peak descents (heuristics/peak_descent.py) may use at
# most this share of the time left: the members after it (band-split, chain-pin, mem-span, ...) fit
# where it does not on other graphs (the LSTMs' chains, ALBERT at its bound).
DESCENT_SHARE = 0.5
# A rescue run (``opts.extra["earlier"]``: the members of a run that found nothing) skips a member
# whose earlier run said no with less than this share of its time limit spent: it ended for a
# reason of its own, and being deterministic it would say no again. min-memory instead goes on with
# its descents where they stopped (``resume_descents``), and when every member has had its turn and
# nothing fits, the descents keep what time is left. Why: on the imported LSTMP (bench/
# real_models6.py, K = 4, 1.3 x its memory bound) a 30 s run answered nothing: the rescue ran
# every member again, min-memory's passes too, and cut the descents at half of its time, where
# going on with them fits (session 40).
RERUN_USED = 0.5
MEMBER_SHARE = {"chain-pin": 0.3, "chain-home": 0.3, "mem-repair": 0.25, "halve-repair": 0.25, "band-repair": 0.3, "mem-span": 0.5, "weight-bands": 0.35, "chain-split": 0.35, "band-split": 0.3,
                "fewer-devices": 0.35}
# The distinct placements kept besides the best (info["candidates"]) for the pipeline's probe
# (solvers/pipeline.py): at most CANDIDATES, best first; a member's placement counts as a
# near-copy of a kept one when fewer than DISTINCT of the nodes differ (devices matched first).
CANDIDATES = 3
DISTINCT = 0.1
# Peak-model list schedulers track live bytes and retry with headroom: their slowdown over the same
# scheduler in the static model, where the peak tracking places every node on its first try.
# Measured on the 50K transformer and CNN (K = 4, 8, 16) and the 200K transformer (K = 8), one run
# each, niced beside a locked run (session 15): etf 2.8-3.6 x, heft 3.0-5.6 x, m-etf 1.8-2.5 x,
# critical-path 4.2-5.3 x. The static rates below are themselves 1.5-4 x those runs, so a retry
# with headroom still fits inside the estimate. (Was 6 / 6 / 6 / 15: 4-10 x the running time,
# which stretched the warm budget at 200K nodes to 353 s of 600; bench/results_scale.md, session 14.)
PEAK_SLOWDOWN = {"etf": 3.5, "readers-first": 3.5, "heft": 4.0, "m-etf": 3.0, "critical-path": 5.0}


def member_order(problem: Problem, opts: SolveOptions) -> tuple[tuple[str, ...], float | None]:
    """The members in the order they run for this problem (see ORDER, PEAK_ORDER, PEAK_TIGHT_ORDER,
    PEAK_TIGHTEST_ORDER; under tight memory halve-repair first of the repairs from HALVE_FIRST devices on), and under
    the peak model with finite memory the memory lower bound (computed once, handed to min-memory)."""
    if opts.memory_model != "peak":
        return ORDER, None
    cap = float(np.max(problem.memory))
    if not np.isfinite(cap):
        return PEAK_ORDER, None
    lb = float(memory_lower_bound(problem, "peak")["best"])
    names = PEAK_ORDER if cap >= TIGHT * lb else PEAK_TIGHTEST_ORDER if cap < REPAIR_FROM * lb else PEAK_TIGHT_ORDER
    return (halve_first(names) if problem.k >= HALVE_FIRST and names != PEAK_ORDER else names), lb


def member_share(name: str, tight: bool, k: int) -> float | None:
    """The share of the time left a member may use (None: all of it): TIGHT_SHARE under tight memory,
    else MEMBER_SHARE; halve-repair all of it under tight memory from HALVE_FIRST devices on (on the
    decoder at K = 8 and 1.1 x it needs about 14 s, its pairs' repair a peak descent, and half of a
    120 s run's warm budget cut it at 6.7 s; where its pairs' repair fits nothing it ends in 1-2 s)."""
    if tight and name == "halve-repair" and k >= HALVE_FIRST:
        return 1.0
    return (TIGHT_SHARE if tight else {}).get(name, MEMBER_SHARE.get(name))


def halve_first(names: tuple[str, ...]) -> tuple[str, ...]:
    """``names`` with halve-repair moved to just before mem-repair."""
    rest = [m for m in names if m != "halve-repair"]
    at = rest.index("mem-repair")
    return tuple(rest[:at] + ["halve-repair"] + rest[at:])


def estimate_seconds(method: str, n: int, m: int, k: int, memory_model: str = "static") -> float:
    """Rough running time (2-core machine) of a member on a graph of n nodes, m edges, k devices."""
    size = n + m
    evaluate = 6e-6 * size
    rates = {
        "single": 0.0, "m-topo": 4e-6, "greedy-fill": 4e-6, "random": 5e-6,
        "pardnn": 2e-5 + 1e-6 * k, "pardnn-balanced": 2e-5 + 1e-6 * k,
        "etf": 4e-6 * k, "m-etf": 7e-6 * k, "readers-first": 4e-6 * k,
        # min-memory: its orders and one pass (it answers after one pass when little time is left:
        # the lowest floor's go first); at 1e-4 it was skipped at 200K nodes (67 s > the warm budget)
        "heft": 4e-6 * k, "critical-path": 2e-6 * k, "min-memory": 4e-5, "mem-span": 1.2e-4,
        "chain-split": 6e-6 * k, "band-split": 2e-5, "weight-bands": 1e-4, "mem-repair": 3e-6 * k,
        "band-repair": 5e-6 * k,  # ETF, a split and a repair: 20 s at 200K nodes, K = 8 (load 4)
        "halve-repair": 1.5e-6 * k + 6e-5,  # mem-repair on K/2 devices, then about ten evaluations (4 s on the 32K decoder, K = 8)
        "chain-pin": 4e-6 * k + 2e-5,  # ETF without the memory check, then a few evaluations
        # up to four ETFs and eight evaluations: 17.2 s on the 50K LSTM at K = 16 (12.3 s before its
        # readers-first variant, session 38)
        "chain-home": 5.3e-6 * k + 2.7e-5,
    }
    if method == "linear-clustering":
        return evaluate + 3e-7 * float(n) * size
    if method == "fewer-devices":  # its methods on each smaller count, each answer judged on all K
        return sum(evaluate + estimate_seconds(name, n, m, c, memory_model) for name in DEFAULT_METHODS
                   for c in device_counts(k))
    # PARDNN under the peak model: a few more evaluations (its answer checked and ordered); 8 evaluations
    # here was 5-9 x its running time at 50K and 200K nodes (session 15)
    extra = 2 * evaluate if (method.startswith("pardnn") and memory_model == "peak") else 0.0
    slow = PEAK_SLOWDOWN.get(method, 1.0) if memory_model == "peak" else 1.0
    return evaluate + slow * rates.get(method, 1e-4) * size + extra


def _reordered(problem: Problem, sol: Solution, stop: Callable[[], bool] | None = None) -> Solution:
    """A member's overflowing placement with the memory-aware order that fits (heuristics.memory_order),
    or the member's answer unchanged when none fits or ``stop()`` turned true first (at 200K nodes
    each of its rules takes tens of seconds: the portfolio had not returned 40 s after its limit)."""
    got = lower_peak_order(problem, np.asarray(sol.info["placement"], dtype=np.int64), stop=stop)
    if not got.evaluation.feasible(problem):
        return sol
    return Solution(sol.method, "heuristic", placement=got.evaluation.placement, order=got.order, start=got.evaluation.start,
                    objective=got.evaluation.makespan, seconds=sol.seconds, info={"memory_order": got.rule})


def placement_distance(a: np.ndarray, b: np.ndarray, k: int) -> float:
    """The fraction of nodes on different devices in placements ``a`` and ``b`` once ``b``'s devices
    are renamed to match ``a``'s (greedily, the largest overlap first): relabelled copies are at 0."""
    a, b = np.asarray(a, dtype=np.int64), np.asarray(b, dtype=np.int64)
    if a.size == 0:
        return 0.0
    overlap = np.zeros((k, k), dtype=np.int64)
    np.add.at(overlap, (a, b), 1)
    same = 0
    for _ in range(k):
        i, j = np.unravel_index(int(np.argmax(overlap)), overlap.shape)
        if overlap[i, j] <= 0:
            break
        same += int(overlap[i, j])
        overlap[i, :] = -1
        overlap[:, j] = -1
    return 1.0 - same / a.size


def keep_candidate(kept: list[Solution], sol: Solution, k: int, limit: int = CANDIDATES) -> list[Solution]:
    """``kept`` (best first, pairwise distinct) with ``sol`` added: it replaces the near-copies
    it beats, is dropped when a near-copy is at least as good, and only ``limit`` stay."""
    for other in kept:
        if placement_distance(other.placement, sol.placement, k) < DISTINCT and other.objective <= sol.objective:
            return kept
    rest = [o for o in kept if placement_distance(o.placement, sol.placement, k) >= DISTINCT]
    return sorted(rest + [sol], key=lambda o: o.objective)[:limit]  # stable: ties keep the earlier member


def _own_share_end(opts: SolveOptions, names: tuple[str, ...], t0: float) -> float | None:
    """When the portfolio's own share of its limit ends, or None when all of the limit is its own.

    A caller that stretched the limit so that some members fit (the pipeline's warm start:
    ``opts.extra["stretched_for"]``, solvers/pipeline.py WARM_FIRST) gives its unstretched share as
    ``opts.extra["own_seconds"]``. Once a feasible answer is in hand, the other members then run only
    within that share: on the 200K CNN (K = 8, peak, 600 s) the limit was stretched to 353 s for ETF
    and HEFT, which took 40 s, and weight-bands and mem-span filled the rest without a better answer
    (bench/results_scale.md, session 14). Under tight memory (the orders of PEAK_TIGHT_ORDER) every
    member keeps the whole limit: there the memory-planning members are what fits.
    """
    own = opts.extra.get("own_seconds")
    if own is None or names not in (ORDER, PEAK_ORDER):
        return None
    return t0 + float(own)


def _said_no(record: dict | None) -> str | None:
    """Why an earlier run's member would answer no again (None: it might not): it found no
    placement with less than RERUN_USED of its time limit spent (RERUN_USED)."""
    if record is None or record.get("feasible") or record.get("status") in ("skipped", "error"):
        return None
    limit, seconds = record.get("limit"), float(record.get("seconds", 0.0))
    if limit is not None and seconds >= RERUN_USED * float(limit):
        return None
    return f"{seconds:.2g} s of {'no limit' if limit is None else f'{float(limit):.2g} s'}"


def _nearest(info: dict) -> float:
    """The least peak / capacity (on the fullest device) of min-memory's overflowing placements:
    its passes' and its descents' ends (inf when it measured none)."""
    seen = [p["memory_over_capacity"] for p in info.get("passes", []) if not p["fits"]]
    seen += [d["to"] for d in info.get("descents", [])] + [r[0] for r in info.get("resume", []) + info.get("minima", [])]
    return float(min(seen, default=np.inf))


def _lowest(minima: list) -> list:
    """The local minimum (peak / capacity, placement, sequence, order name) nearest to fitting, as a
    list of at most one: a rescue turn's own minima must not replace an earlier run's lower one."""
    return sorted(minima, key=lambda m: m[0])[:1]


def _descend_on(problem: Problem, opts: SolveOptions, resume: list, minima: list, kicked: int,
                members: list[dict]) -> tuple[Solution | None, list, list, Solution]:
    """min-memory's descents from where they stopped, then its kicks from the lowest local minimum
    (heuristics/peak_kicks.py), with all the time left (RERUN_USED): its answer when one fits (else
    None), where the descents stopped again, the lowest minimum, and min-memory's own answer."""
    t = time.monotonic()
    sub = replace(opts, time_limit=opts.remaining(), started=t, hint=None,
                  extra={**opts.extra, "resume_descents": resume, "kick_from": minima, "kicked": kicked, "descent_share": None})
    sol = MEMBERS["min-memory"](problem, sub)
    ok = _answered(sol)
    members.append(_record("min-memory", sol, ok, time.monotonic() - t, sub.time_limit))
    if ok:
        return sol, [], [], sol
    return None, sol.info.get("resume", []), sol.info.get("minima", minima), sol


def _answered(sol: Solution) -> bool:
    """Whether a member's answer is a placement that fits."""
    return sol.placement is not None and sol.status in ("heuristic", "feasible", "optimal")


def _record(name: str, sol: Solution, ok: bool, seconds: float, limit: float | None) -> dict:
    """A member's line in info["members"]."""
    return {"method": name, "status": sol.status, "makespan": sol.objective if ok else None, "feasible": ok,
            "seconds": seconds, "limit": limit, "reason": sol.reason}


def portfolio(problem: Problem, opts: SolveOptions) -> Solution:
    t0 = time.monotonic()
    if opts.memory_model == "peak" and bool(np.isinf(problem.memory).all()):
        # No capacity anywhere: the peak model constrains nothing, so the members run as in the
        # static model, where the list schedulers do not pay for tracking live bytes (PEAK_SLOWDOWN).
        opts = replace(opts, memory_model="static")
    members: list[dict] = []
    best: Solution | None = None
    kept: list[Solution] = []
    names, mlb = member_order(problem, opts)
    own_end = _own_share_end(opts, names, t0)
    tight = names not in (ORDER, PEAK_ORDER)  # PEAK_TIGHT_ORDER or PEAK_TIGHTEST_ORDER
    stretched_for = tuple(opts.extra.get("stretched_for", ()))
    earlier = {m["method"]: m for m in opts.extra.get("earlier", {}).get("members", [])}
    resume = opts.extra.get("earlier", {}).get("resume")  # min-memory's descents still to go on with
    minima = opts.extra.get("earlier", {}).get("minima") or []  # and the lowest of its local minima
    kicked = int(opts.extra.get("earlier", {}).get("kicked", 0))  # and the kicks made from them
    nearest = float(opts.extra.get("earlier", {}).get("nearest", np.inf))  # the least overflow min-memory reached
    for name in names:
        said_no = _said_no(earlier.get(name))
        if said_no and not (name == "min-memory" and resume):
            members.append({"method": name, "status": "skipped", "makespan": None, "feasible": False, "seconds": 0.0,
                            "reason": f"it found no placement in the earlier run ({said_no})"})
            continue
        rem = opts.remaining()
        est = estimate_seconds(name, problem.n, problem.m, problem.k, opts.memory_model)
        if rem is not None and est > rem:
            members.append({"method": name, "status": "skipped", "makespan": None, "feasible": False, "seconds": 0.0,
                            "reason": f"estimated {est:.3g} s > {rem:.3g} s left"})
            continue
        own = None if own_end is None or best is None or name in stretched_for else own_end - time.monotonic()
        if own is not None and est > own:
            members.append({"method": name, "status": "skipped", "makespan": None, "feasible": False, "seconds": 0.0,
                            "reason": f"estimated {est:.3g} s > {max(own, 0.0):.3g} s left of the portfolio's own share "
                                      "(the rest is for the members its limit was stretched for)"})
            continue
        extra = opts.extra if name != "min-memory" or mlb is None else {**opts.extra, "memory_lower_bound": mlb,
                                                                         "descent_share": DESCENT_SHARE}
        if name == "min-memory" and resume:
            extra = {**extra, "resume_descents": resume}
        share = member_share(name, tight, problem.k)
        limit = rem if rem is None or share is None else max(est, share * rem)
        if own is not None:
            limit = own if limit is None else min(limit, own)
        sub = replace(opts, time_limit=limit, started=time.monotonic(), hint=None, extra=extra)
        t = time.monotonic()
        try:
            sol = MEMBERS[name](problem, sub)
        except Exception as exc:  # noqa: BLE001 - one broken member must not sink the portfolio
            members.append({"method": name, "status": "error", "makespan": None, "feasible": False,
                            "seconds": time.monotonic() - t, "reason": f"{type(exc).__name__}: {exc}"})
            continue
        if sol.placement is None and opts.memory_model == "peak" and sol.info.get("placement") is not None:
            sol = _reordered(problem, sol, sub.out_of_time)  # overflows in its own order: try a memory-aware one
        ok = _answered(sol)
        members.append(_record(name, sol, ok, time.monotonic() - t, limit))
        if name == "min-memory" and not ok:
            resume = sol.info.get("resume")
            minima = _lowest((sol.info.get("minima") or []) + minima)
            nearest = min(nearest, _nearest(sol.info))
        if ok:
            kept = keep_candidate(kept, sol, problem.k)
        if ok and (best is None or sol.objective < best.objective):
            best = sol
            opts.best_so_far.publish_answer(problem, sol)  # kept if a later member overruns the limit
    if best is None and (resume or minima) and mlb is not None and not opts.out_of_time():
        best, resume, minima, last = _descend_on(problem, opts, resume or [], minima, kicked, members)
        kicked = int(last.info.get("kicked", kicked))
        nearest = min(nearest, _nearest(last.info))
        if best is not None:
            kept = keep_candidate(kept, best, problem.k)
            opts.best_so_far.publish_answer(problem, best)
    info = {"members": members}
    if best is None:
        info["resume"], info["minima"], info["kicked"], info["nearest"] = resume, minima, kicked, nearest
        why = "portfolio: no member found a memory-feasible placement"
        if np.isfinite(nearest):  # what the user can do about it: its placement fits that much more memory
            why += f" (the nearest, min-memory's, fits {math.ceil(nearest * 1000) / 1000:.3f} x each device's capacity"
            caps = problem.memory
            why += f": {math.ceil(nearest * float(caps[0])):d} bytes per device)" if np.all(caps == caps[0]) else ")"
        return Solution("portfolio", "unknown", reason=why, seconds=time.monotonic() - t0, info=info)
    info["best"] = best.method
    info["candidates"] = kept  # the best first (Solutions: not for a report)
    info["best_info"] = {k: v for k, v in best.info.items() if k != "placement"}
    return Solution("portfolio", "heuristic", placement=best.placement, order=best.order, start=best.start, waits=best.waits,
                    objective=best.objective, seconds=time.monotonic() - t0, info=info)
