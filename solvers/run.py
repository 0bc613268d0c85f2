"""Orchestration: run a method (or the ``auto`` choice) on a problem and judge its answer.

Whatever a method claims is re-checked here by the one evaluator: the reported makespan and memory
are the evaluator's, a claimed objective that differs from it is a bug (RuntimeError), and the gap
is computed against a lower bound valid for this problem.
"""
from __future__ import annotations

import math
import time

import numpy as np
from dataclasses import dataclass, field, replace
from typing import Any, Callable

from formulations.held_bound import KnapsackCheck, held_memory_bound
from heuristics.tofu import EVAL_SECONDS_PER_SHARD, plan_summary
from placement.bounds import infeasibility, lower_bounds
from placement.memory_bounds import memory_lower_bound
from placement.evaluator import Evaluation, check, evaluate
from placement.partition.plan import evaluate_plan
from placement.problem import Problem
from placement.report import OPTIMAL_GAP, _clean, build_report, gap, within_optimal_gap
from placement.solution import Solution, SolveOptions

from .ordering import fit_by_order, order_report, overflowing_placement
from .methods import get as method_info
from .methods import methods
from .pipeline import BASELINES, finish_reserve, pipeline

# From this size on, ``auto`` publishes a baseline answer before the bounds (publish_baseline).
BASELINE_FIRST_NODES = 10000
# auto, peak model: the held-tensor knapsacks' check and bisection (held_check) get this share of the
# time limit, at most HELD_CHECK_SECONDS (measured 0.05-0.5 s on imported graphs of 198-724 nodes,
# 1.0-2.4 s on a generated 778-node CNN, where it found a placement meeting them; session 45: up to
# 20,000 nodes, undecided rather than over budget where the model is too big for it).
HELD_CHECK_SHARE = 0.05
HELD_CHECK_SECONDS = 3.0
# ... of which, when a placement meets the knapsacks (the run goes on), the bisection for the
# report's bound may use only this share of the limit, and runs only when that is at least
# HELD_REPORT_SECONDS: each of its checks builds a model before CP-SAT's clock starts, and at
# 2% of a 30 s limit it cost answers 0.4-2% on three imported models of four (bench/results_peak.md,
# session 44), where the check alone cost nothing measurable.
HELD_REPORT_SHARE = 0.005
HELD_REPORT_SECONDS = 1.0


@dataclass
class RunResult:
    status: str
    method: str
    solution: Solution | None
    evaluation: Evaluation | None
    lower_bound: float
    seconds: float
    reason: str = ""
    bounds: dict[str, float] = field(default_factory=dict)
    history: list[dict[str, Any]] = field(default_factory=list)
    interrupted: bool = False
    objective_name: str = "makespan"
    value: float | None = None  # the objective's value (max-load, latency); the makespan otherwise
    split: np.ndarray | None = None  # max-load/latency: device per node, CPU core c as -1 - c
    breakdown: dict[str, Any] | None = None
    partition: dict[str, Any] | None = None  # a partitioned plan's summary (method tofu)
    memory_bound: dict[str, float] = field(default_factory=dict)  # placement.memory_bounds, by part

    @property
    def feasible(self) -> bool:
        return self.status in ("optimal", "feasible", "heuristic")

    @property
    def answered(self) -> bool:
        """Is there an answer to write (a schedule, or a split for max-load/latency)?"""
        return self.feasible and (self.evaluation is not None or self.split is not None or self.partition is not None)

    @property
    def gap(self) -> float | None:
        if self.objective_name != "makespan":
            return gap(self.value, self.lower_bound) if self.value is not None else None
        return gap(self.evaluation.makespan, self.lower_bound) if self.evaluation is not None else None

    def report(self, problem: Problem, memory_model: str) -> dict[str, Any]:
        if self.partition is not None or self.method in ("tofu", "tofu-hybrid"):
            return self._partition_report(problem, memory_model)
        if self.objective_name != "makespan":
            return self._objective_report(problem)
        return build_report(
            problem, status=self.status, method=self.method, memory_model=memory_model, seconds=self.seconds,
            evaluation=self.evaluation if self.feasible else None, lower_bound=self.lower_bound, reason=self.reason,
            extra={"bounds": self.bounds, "phases": self.history, "interrupted": self.interrupted,
                   **({"memory_lower_bound": self.memory_bound.get("best"), "memory_lower_bound_parts": self.memory_bound}
                      if self.memory_bound else {}),
                   **(order_report(problem, self.evaluation, memory_model) if self.feasible and self.evaluation is not None else {})},
        )


    def _partition_report(self, problem: Problem, memory_model: str) -> dict[str, Any]:
        """A partitioned plan has no device per node: its memory and makespan are those of the plan's
        shard graph, and the ``partition`` section says how every operator and tensor is split."""
        ok = self.feasible and self.partition is not None
        part = self.partition or {}
        rep = {
            "status": self.status, "objective_name": "makespan", "objective": self.value if ok else None,
            "makespan": self.value if ok else None, "lower_bound": None, "gap": None, "memory_model": memory_model,
            "capacity": problem.memory.tolist(), "static_memory": part.get("static_memory"),
            "peak_memory": part.get("peak_memory"), "placement": None, "start": None, "seconds": self.seconds,
            "method": self.method,
            "problem": {"name": problem.name, "nodes": problem.n, "edges": problem.m, "devices": problem.k},
            "partition": part or None, "phases": self.history, "interrupted": self.interrupted,
            "lower_bound_note": "placement lower bounds do not hold for partitioned plans (an operator's time is divided)",
        }
        if self.reason:
            rep["reason"] = self.reason
        return _clean(rep)

    def _objective_report(self, problem: Problem) -> dict[str, Any]:
        ok = self.feasible and self.split is not None
        rep = {
            "status": self.status, "objective_name": self.objective_name, "objective": self.value if ok else None,
            "makespan": None, "lower_bound": self.lower_bound, "gap": self.gap if ok else None,
            "memory_model": "static", "capacity": problem.memory.tolist(),
            "static_memory": [row.get("memory") for row in self.breakdown.get("devices", [])] if ok and self.breakdown else None,
            "peak_memory": None,
            "placement": {str(nid): int(d) for nid, d in zip(problem.ids, self.split.tolist())} if ok else None,
            "start": None, "seconds": self.seconds, "method": self.method,
            "problem": {"name": problem.name, "nodes": problem.n, "edges": problem.m, "devices": problem.k},
            "breakdown": self.breakdown if ok else None, "phases": self.history, "interrupted": self.interrupted,
            "placement_note": "device index per node; a CPU core c is written -1 - c",
        }
        if ok and self.solution is not None:
            rep["model"] = objective_model(self.objective_name, self.solution)
        slot = self.solution.info.get("slot") if ok and self.solution is not None else None
        if slot is not None:
            rep["slot"] = {str(nid): int(s) for nid, s in zip(problem.ids, np.asarray(slot).tolist())}
        if self.reason:
            rep["reason"] = self.reason
        return _clean(rep)


def objective_model(objective: str, sol: Solution) -> str:
    """One line saying which model the answer (and any optimality claim) belongs to."""
    if objective == "latency":
        text = "latency (Section 4): contiguous subgraphs invoked through CPU memory"
    else:
        kind = sol.info.get("objective_kind", objective)
        contiguity = sol.info.get("contiguity", "none")
        text = f"{kind}, contiguity={contiguity!r}"
    exact_in = sol.info.get("exact_in")
    return f"{text}; exact in: {exact_in}" if exact_in else text


def verify(problem: Problem, sol: Solution, memory_model: str) -> Evaluation:
    """The evaluator's verdict on a method's answer; raises if the method's claim disagrees."""
    assert sol.placement is not None
    if sol.start is not None:
        ev = check(problem, sol.placement, sol.start, memory_model, check_memory=False)
    else:
        ev = evaluate(problem, sol.placement, order=sol.order, memory_model=memory_model, waits=sol.waits)
    if sol.objective is not None and not math.isclose(sol.objective, ev.makespan, rel_tol=1e-6, abs_tol=1e-9):
        raise RuntimeError(f"method {sol.method!r} claims makespan {sol.objective!r} but the evaluator computes {ev.makespan!r}")
    return ev


def _check_bound(bound: float, makespan: float) -> None:
    """A valid lower bound never exceeds a feasible makespan (beyond rounding): if it does, a bound
    or an evaluation is wrong, and reporting either would be a lie."""
    if bound > makespan * (1 + 1e-6) + 1e-9:
        raise RuntimeError(f"lower bound {bound!r} exceeds the feasible makespan {makespan!r}: a bound is invalid")


def method_options(problem: Problem, opts: SolveOptions) -> SolveOptions:
    """The options one method runs with: the limit still counts from ``opts.started`` (the process's
    start, so loading counts) and leaves :func:`finish_reserve` for checking and writing the answer."""
    if opts.time_limit is None:
        return replace(opts, started=time.monotonic())
    return replace(opts, time_limit=max(0.0, opts.time_limit - finish_reserve(problem, opts.time_limit)))


def interrupted_result(problem: Problem, opts: SolveOptions, method: str, why: str, objective: str = "makespan") -> RunResult:
    """What to report when the run did not return in time (see the ``solve`` command's watchdog):
    the best answer published for this problem, re-checked by the evaluator (and dropped unless it
    fits memory), never a claim of optimality the published bound cannot show."""
    answer, bound = opts.best_so_far.get()
    lb = bound if bound is not None else 0.0
    seconds = time.monotonic() - opts.started
    found = None
    if answer is not None and objective == "makespan" and answer[0] is problem:
        _, sol, ev = answer
        if ev is None:
            try:
                ev = verify(problem, sol, opts.memory_model)
            except (ValueError, RuntimeError):  # a claim the evaluator rejects is no answer
                ev = None
        if ev is not None and ev.feasible(problem):
            found = (sol, ev)
    history = opts.best_so_far.phase_history()
    known = opts.best_so_far.memory_bound
    mem_lb = dict(known[1]) if known is not None and known[0] is problem and objective == "makespan" else {}
    if found is None:
        return RunResult("unknown", method, None, None, lb, seconds, reason=why, interrupted=True, objective_name=objective,
                         history=history, memory_bound=mem_lb)
    sol, ev = found
    status = "optimal" if ev.makespan <= lb * (1 + 1e-9) else "heuristic"
    return RunResult(status, f"{method}:{sol.method}" if method == "auto" else sol.method, sol, ev, min(lb, ev.makespan),
                     seconds, reason=why, interrupted=True, history=history, memory_bound=mem_lb)


def _call(name: str, problem: Problem, opts: SolveOptions) -> Solution:
    return method_info(name).func(problem, opts)


def run(
    problem: Problem,
    method: str = "auto",
    opts: SolveOptions | None = None,
    progress: Callable[[str], None] | None = None,
    objective: str = "makespan",
) -> RunResult:
    """Run ``method`` on ``problem`` and return the judged result (never raises for lack of time)."""
    opts = opts or SolveOptions()
    if objective == "makespan" and method in methods() and method_info(method).kind == "partition":
        return run_partitioned(problem, opts, progress, method)
    if (method == "auto" and objective == "makespan" and problem.node_meta is not None and opts.extra.get("auto_partition", True)
            and problem.n * problem.k <= AUTO_PARTITION_MAX_SHARDS):
        return run_auto_with_partitioning(problem, opts, progress)
    if objective != "makespan":
        return run_objective(problem, method, opts, objective, progress)
    t0 = time.monotonic()
    say = progress or (lambda msg: None)
    if method == "auto" and problem.n >= BASELINE_FIRST_NODES:
        opts.best_so_far.enter("baseline")
        publish_baseline(problem, opts)
    opts.best_so_far.enter("bounds")
    # The cheap bounds are published first: a run stopped in the communication, forced or memory path
    # bound (pure Python, a second or more at 200K nodes) still reports a valid one.
    lbs = lower_bounds(problem, communication=False)
    opts.best_so_far.publish_bound(lbs.best)
    lbs = lower_bounds(problem, opts.memory_model, opts.stop)
    lb = lbs.best
    opts.best_so_far.publish_bound(lb)
    mem_lb = memory_lower_bound(problem, opts.memory_model)
    opts.best_so_far.memory_bound = (problem, mem_lb)
    why = infeasibility(problem, opts.memory_model) or memory_infeasibility(problem, mem_lb)
    if not why and method == "auto":
        why, mem_lb = held_check(problem, opts, mem_lb)
        opts.best_so_far.memory_bound = (problem, mem_lb)
    if why:
        return RunResult("infeasible", method, None, None, lb, time.monotonic() - t0, reason=why, bounds=lbs.as_dict(),
                         memory_bound=mem_lb)
    res = _run_makespan(problem, method, opts, say, lbs, t0)
    res.memory_bound = mem_lb
    return res


def publish_baseline(problem: Problem, opts: SolveOptions) -> None:
    """Publish the first linear-time baseline (solvers.pipeline.BASELINES) that fits memory as the
    run's answer so far, before the bound suite runs.

    Why: on big graphs the bounds come before any heuristic and take seconds (2.4 s at 50K nodes),
    so a run whose limit ended or that was stopped (Ctrl-C) in them had nothing to report: a
    50K-node transformer with ``--time-limit 3`` answered ``unknown`` where topo-fill answers in
    0.3 s. The pipeline replaces this answer with its own as soon as it has one."""
    for baseline in BASELINES.values():
        if opts.stop.is_set():
            return
        sol = baseline(problem, replace(opts, time_limit=None, started=time.monotonic()))
        if sol.placement is None:
            continue
        ev = verify(problem, sol, opts.memory_model)
        if ev.feasible(problem):
            opts.best_so_far.publish_answer(problem, sol, ev)
            return


def memory_infeasibility(problem: Problem, mem_lb: dict[str, float]) -> str | None:
    """No placement fits when even the largest device is below the memory lower bound for K
    devices of equal capacity (devices no larger than it cannot do better)."""
    cap = float(problem.memory.max()) if problem.k else 0.0
    if mem_lb.get("best", 0.0) > cap * (1 + 1e-12) + 1e-9:
        part = max((k for k in mem_lb if k != "best"), key=lambda k: mem_lb[k])
        return (f"every placement on {problem.k} devices needs {mem_lb['best']:.6g} bytes on some device "
                f"(memory lower bound, {part}) but the largest device holds {cap:.6g}")
    return None


def held_check(problem: Problem, opts: SolveOptions, mem_lb: dict[str, float]) -> tuple[str | None, dict[str, float]]:
    """Under the peak model with finite capacities, the held-tensor knapsacks (formulations/
    held_bound.py) within HELD_CHECK_SHARE of the limit, at most HELD_CHECK_SECONDS: a proof that no
    placement fits (the reason, else None), and ``mem_lb`` raised by their bisection with what is
    left of that budget (part ``held_knapsacks``), so the report says how much memory per device
    no placement can do without. Why: on a capacity no placement fits, the warm start's descents
    and kicks searched the whole limit and auto answered ``unknown`` (an imported WGAN-GP at 1.3 x
    its memory lower bound: 28 s, where the knapsacks prove it in 0.07 s); and on imported models
    the per-device memory bound is 1.4-1.5 x too low on some."""
    if opts.memory_model != "peak" or not np.all(np.isfinite(problem.memory)) or opts.stop.is_set():
        return None, mem_lb
    budget = HELD_CHECK_SECONDS if opts.time_limit is None else min(HELD_CHECK_SECONDS, HELD_CHECK_SHARE * opts.time_limit)
    end = time.monotonic() + budget
    k, low = problem.k, float(mem_lb.get("best", 0.0))
    check = KnapsackCheck.build(problem, end, floor=low)  # one model for the check and the bisection
    fits = None if check is None else check.feasible(problem.memory, opts, end - time.monotonic())
    if fits is None:
        return None, mem_lb
    if fits:
        high = float(problem.memory.max())  # some placement meets the knapsacks there
    else:
        one = problem.with_devices(1, [math.inf])
        high = float(evaluate(one, np.zeros(one.n, dtype=np.int64), memory_model="peak").peak_memory.max())
    if fits and opts.time_limit is not None:
        end = min(end, time.monotonic() + HELD_REPORT_SHARE * opts.time_limit)
    left = end - time.monotonic()
    if high > low and left >= (HELD_REPORT_SECONDS if fits else 0.05):
        held = held_memory_bound(problem.with_devices(k, [math.inf] * k), low, high, opts, left, check=check, ask_low=fits)
        if held > low:
            mem_lb = {**mem_lb, "held_knapsacks": held, "best": held}
    if fits:
        return None, mem_lb
    return ("no placement keeps every tensor forced onto a device while a node runs within the peak memory "
            "capacities (held-tensor knapsacks, docs/exact.md)"), mem_lb


def _run_makespan(problem: Problem, method: str, opts: SolveOptions, say: Callable[[str], None], lbs, t0: float) -> RunResult:
    lb = lbs.best

    if method == "auto":
        res = pipeline(problem, opts, lb, verify, say)
        seconds = time.monotonic() - t0
        hist = [p.as_dict() for p in res.phases]
        if res.best is None:
            return RunResult("infeasible" if res.infeasible else "unknown", "auto", None, None, res.bound, seconds,
                             reason="; ".join(dict.fromkeys(res.reasons)) or "no feasible placement found", bounds=lbs.as_dict(), history=hist)
        sol, ev = res.best
        _check_bound(res.bound, ev.makespan)
        status = "optimal" if res.proved_optimal else ("feasible" if res.used_exact else "heuristic")
        return RunResult(status, f"auto:{sol.method}", sol, ev, min(res.bound, ev.makespan), seconds,
                         bounds=lbs.as_dict(), history=hist, interrupted=opts.stop.is_set())

    if method not in methods():
        raise KeyError(f"unknown method {method!r}; known: auto, {', '.join(methods())}")
    best: tuple[Solution, Evaluation] | None = None
    proved_lb = lb
    history: list[dict[str, Any]] = []
    reasons: list[str] = []
    opts.best_so_far.enter(method)
    sol = _call(method, problem, method_options(problem, opts))
    entry: dict[str, Any] = {"method": method, "status": sol.status, "seconds": sol.seconds}
    history.append(entry)
    if sol.status == "infeasible":
        return RunResult("infeasible", method, sol, None, lb, time.monotonic() - t0,
                         reason=sol.reason or f"{method} proved that no placement fits", bounds=lbs.as_dict(), history=history)
    if sol.lower_bound is not None:
        proved_lb = max(proved_lb, float(sol.lower_bound))
    if sol.placement is not None and sol.status in ("optimal", "feasible", "heuristic"):
        ev = verify(problem, sol, opts.memory_model)
        entry["makespan"] = ev.makespan
        if ev.feasible(problem):
            best = (sol, ev)
        else:
            best = fit_by_order(problem, sol.placement, sol, opts.memory_model, stop=opts.stop.is_set)
            if best is None:
                reasons.append(f"{method}: its answer exceeds memory by {ev.overflow(problem).tolist()} bytes per device")
    elif overflowing_placement(sol) is not None and (got := fit_by_order(problem, overflowing_placement(sol), sol, opts.memory_model,
                                                                          stop=opts.stop.is_set)):
        best = got  # its placement overflows in FIFO order but fits in a memory-aware order
        entry["memory_order"] = got[0].info.get("memory_order")
        sol = got[0]
        entry["makespan"] = got[1].makespan
    elif sol.reason:
        reasons.append(sol.reason)
    say(f"{method}: {sol.status} makespan={entry.get('makespan', '-')} bound={proved_lb:.6g}")
    seconds = time.monotonic() - t0
    if best is None:
        return RunResult("unknown", method, sol, None, proved_lb, seconds,
                         reason="; ".join(reasons) or "no feasible placement found", bounds=lbs.as_dict(), history=history,
                         interrupted=opts.stop.is_set())
    sol, ev = best
    _check_bound(proved_lb, ev.makespan)
    proved_lb = min(proved_lb, ev.makespan)
    if within_optimal_gap(ev.makespan, proved_lb) and (sol.status == "optimal" or ev.makespan <= proved_lb * (1 + 1e-9)):
        status = "optimal"
    elif method_info(method).kind == "exact":
        status = "feasible"
    else:
        status = "heuristic"
    return RunResult(status, sol.method, sol, ev, proved_lb, seconds, bounds=lbs.as_dict(), history=history,
                     interrupted=opts.stop.is_set(), reason="" if status == "optimal" else sol.reason)


# The method ``auto`` stands for, per objective other than makespan.
AUTO_FOR = {"max-load": "maxload-cpsat-nc", "latency": "latency-cpsat"}


def run_objective(problem: Problem, method: str, opts: SolveOptions, objective: str,
                  progress: Callable[[str], None] | None = None) -> RunResult:
    """Max-load or latency (Tarnawski et al.): run the method, re-evaluate its split with the
    objective's evaluator (placement/objectives.py), and check the claimed value against it."""
    from placement.objectives import evaluate_objective

    t0 = time.monotonic()
    name = AUTO_FOR[objective] if method == "auto" else method
    info = method_info(name)
    if info.objective != objective:
        raise KeyError(f"method {name!r} optimises {info.objective}, not {objective}")
    opts.best_so_far.enter(name)
    sol = info.func(problem, method_options(problem, opts))
    history = [{"method": name, "status": sol.status, "seconds": sol.seconds}]
    seconds = time.monotonic() - t0
    bound = float(sol.lower_bound) if sol.lower_bound is not None else 0.0
    if sol.status == "infeasible":
        return RunResult("infeasible", name, sol, None, bound, seconds, reason=sol.reason, history=history,
                         objective_name=objective)
    if sol.status not in ("optimal", "feasible", "heuristic") or "split" not in sol.info:
        return RunResult("unknown", name, sol, None, bound, seconds, reason=sol.reason or "no feasible split found",
                         history=history, objective_name=objective, interrupted=opts.stop.is_set())
    contiguity = {"contiguity": sol.info.get("contiguity", "none")} if objective != "latency" else {}
    value, breakdown = evaluate_objective(problem, sol, objective, **contiguity)
    if sol.objective is not None and not math.isclose(sol.objective, value, rel_tol=1e-6, abs_tol=1e-9):
        raise RuntimeError(f"method {name!r} claims {objective} {sol.objective!r} but the evaluator computes {value!r}")
    if breakdown.get("violations"):
        return RunResult("unknown", name, sol, None, bound, seconds, history=history, objective_name=objective,
                         reason=f"{name}: its split breaks constraints: {'; '.join(breakdown['violations'])}")
    _check_bound(bound, value)
    status, reason = sol.status, ""
    kind = sol.info.get("objective_kind", objective)
    if status == "optimal" and not within_optimal_gap(value, bound, kind if kind in OPTIMAL_GAP else objective):
        status, reason = "feasible", f"{name}: claimed optimal, but its gap to the proved bound exceeds {OPTIMAL_GAP[objective]:g}"
    if progress:
        progress(f"{name}: {status} {objective}={value:.6g} bound={bound:.6g}")
    return RunResult(status, name, sol, None, min(bound, value), seconds, history=history, objective_name=objective,
                     value=value, split=np.asarray(sol.info["split"]), breakdown=breakdown, interrupted=opts.stop.is_set(),
                     reason=reason or (sol.reason if status != "optimal" else ""))


def run_partitioned(problem: Problem, opts: SolveOptions, progress: Callable[[str], None] | None = None,
                    method: str = "tofu") -> RunResult:
    """Operator partitioning (Tofu, or its hybrid with placement): run the method, re-evaluate the
    plan with the plan evaluator (placement.partition.plan, which runs placement.evaluator on the
    plan's shard graph) and check the claimed makespan against it. Placement lower bounds do not
    apply to a partitioned plan."""
    t0 = time.monotonic()
    opts.best_so_far.enter(method)
    mopts = method_options(problem, opts)  # the limit counts from the run's start (it was restarted here: session 40)
    sol = _call(method, problem, mopts)
    history = [{"method": method, "status": sol.status, "seconds": sol.seconds}]
    plan, g = sol.info.get("plan"), sol.info.get("graph")
    if plan is None or g is None:
        return RunResult("unknown", method, sol, None, 0.0, time.monotonic() - t0, reason=sol.reason or "no plan", history=history)
    left = mopts.remaining()
    if left is not None and left < EVAL_SECONDS_PER_SHARD * len(g.ops) * problem.k:
        return RunResult("unknown", method, sol, None, 0.0, time.monotonic() - t0, history=history,
                         reason=f"a partitioned plan was found, but no time was left to check it ({len(g.ops) * problem.k} shard nodes)")
    pe = evaluate_plan(g, plan, opts.memory_model)
    if sol.objective is not None and not math.isclose(sol.objective, pe.makespan, rel_tol=1e-6, abs_tol=1e-9):
        raise RuntimeError(f"{method} claims makespan {sol.objective!r} but the plan evaluator computes {pe.makespan!r}")
    part = plan_summary(g, plan, pe, None)
    claimed = sol.info.get("partition", {})
    for key in ("kind", "search", "partitioned_operators", "placed", "note"):
        if key in claimed:
            part[key] = claimed[key]
    fits = pe.feasible(problem)
    status = "heuristic" if fits else "unknown"
    reason = "" if fits else sol.reason
    if progress:
        progress(f"{method}: {status} makespan={pe.makespan:.6g} max device memory={float(pe.memory.max()):.6g}")
    return RunResult(status, method, sol, None, 0.0, time.monotonic() - t0, reason=reason, history=history,
                     value=pe.makespan, partition=part, interrupted=opts.stop.is_set())


# auto tries a partitioned plan only while its shard graph (n x K nodes) evaluates in seconds.
AUTO_PARTITION_MAX_SHARDS = 200_000
# Tofu's plan on a graph with colocation groups is only a fallback (taken when no placement fits),
# so the placement runs first and keeps back this much time for it: the plan's measured cost (search
# and both evaluations: 1.95 s for the imported MoE's 7,528 shards at K = 8, about 3,900 shards per
# second on this project's machine, idle; less than halved for a busy one, and enough for the
# search and the two evaluations heuristics/tofu asks time for), at most this share of the limit.
# (Was 4,000 and 0.15: the reserve ended before the plan's check on the MoE at 20 s, session 40.)
TOFU_SHARDS_PER_SECOND = 1_600.0
TOFU_RESERVE_SHARE = 0.2


def tofu_reserve(problem: Problem, time_limit: float | None) -> float:
    """Seconds a grouped graph's placement run leaves for the fallback partitioned plan."""
    if time_limit is None:
        return 0.0
    return min(TOFU_RESERVE_SHARE * time_limit, problem.n * problem.k / TOFU_SHARDS_PER_SECOND)


def run_auto_with_partitioning(problem: Problem, opts: SolveOptions, progress: Callable[[str], None] | None = None) -> RunResult:
    """``auto`` on a graph with operator semantics: Tofu's partitioned plan (seconds) and the
    placement pipeline; the answer with the lower makespan among those that fit wins, and the
    report says which and why (``partition.choice`` or the tofu entry of ``phases``).

    A partitioned plan runs every operator on every device, so it cannot honour allowed devices
    (then it is not tried) and does not model colocation groups: then it is only a fallback, so the
    placement runs first (keeping :func:`tofu_reserve` seconds back until its warm start has an
    answer) and the plan is made only when no placement was found. Otherwise the plan comes first (it may win). The cheap makespan bounds are
    published before either, so a run stopped early still reports a valid bound."""
    placement_only = SolveOptions(**{**opts.__dict__, "extra": {**opts.extra, "auto_partition": False}})
    if problem.has_allowed:
        placed = run(problem, "auto", placement_only, progress)
        placed.history = placed.history + [{"method": "tofu", "status": "skipped",
                                            "choice": "nodes restricted to some devices: a partitioned plan runs every operator everywhere"}]
        return placed
    opts.best_so_far.publish_bound(lower_bounds(problem, communication=False).best)
    grouped = bool(problem.groups)
    if grouped:
        first = replace(placement_only, extra={**placement_only.extra, "fallback_reserve": tofu_reserve(problem, opts.time_limit)})
        placed = run(problem, "auto", first, progress)
        if placed.answered:
            placed.history = placed.history + [{"method": "tofu", "status": "skipped", "choice": (
                "the graph has colocation groups, which a partitioned plan does not model: it is only a fallback, "
                "and a placement was found")}]
            return placed
        part = run_partitioned(problem, opts, progress)
    else:
        part = run_partitioned(problem, opts, progress)
        placed = run(problem, "auto", placement_only, progress)
    p_ok, t_ok = placed.answered, part.answered
    if t_ok and (not p_ok or (part.value < placed.evaluation.makespan and not grouped)):
        why = (f"partitioned plan makespan {part.value:.6g} < best placement {placed.evaluation.makespan:.6g}" if p_ok else
               f"no whole-operator placement found ({placed.status}: {placed.reason or 'none fits'}); the partitioned plan fits")
        if grouped:
            why += "; the graph's colocation groups are not modelled by a partitioned plan"
        part.method = "auto:tofu"
        part.partition["choice"] = why
        part.history = placed.history + part.history
        part.seconds = placed.seconds + part.seconds
        return part
    if p_ok and t_ok:
        why = f"best placement makespan {placed.evaluation.makespan:.6g} <= partitioned plan {part.value:.6g}"
    else:
        why = f"the partitioned plan does not fit or failed ({part.status}: {part.reason})"
    placed.history = placed.history + [{"method": "tofu", "status": part.status, "makespan": part.value, "choice": why}]
    placed.seconds += part.seconds
    return placed
