"""Orchestration: run a method (or the ``auto`` choice) on a problem and judge its answer.

Whatever a method claims is re-checked here by the one evaluator: the reported makespan and memory
are the evaluator's, a claimed objective that differs from it is a bug (RuntimeError), and the gap
is computed against a lower bound valid for this problem.
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Any, Callable

from placement.bounds import infeasibility, lower_bounds
from placement.evaluator import Evaluation, check, evaluate
from placement.problem import Problem
from placement.report import build_report, gap
from placement.solution import Solution, SolveOptions

from . import registry

AUTO_HEURISTICS = ("topo-fill", "greedy-fill", "single")


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

    @property
    def feasible(self) -> bool:
        return self.status in ("optimal", "feasible", "heuristic")

    @property
    def gap(self) -> float | None:
        return gap(self.evaluation.makespan, self.lower_bound) if self.evaluation is not None else None

    def report(self, problem: Problem, memory_model: str) -> dict[str, Any]:
        return build_report(
            problem, status=self.status, method=self.method, memory_model=memory_model, seconds=self.seconds,
            evaluation=self.evaluation if self.feasible else None, lower_bound=self.lower_bound, reason=self.reason,
            extra={"bounds": self.bounds, "history": self.history},
        )


def verify(problem: Problem, sol: Solution, memory_model: str) -> Evaluation:
    """The evaluator's verdict on a method's answer; raises if the method's claim disagrees."""
    assert sol.placement is not None
    if sol.start is not None:
        ev = check(problem, sol.placement, sol.start, memory_model, check_memory=False)
    else:
        ev = evaluate(problem, sol.placement, order=sol.order, memory_model=memory_model)
    if sol.objective is not None and not math.isclose(sol.objective, ev.makespan, rel_tol=1e-6, abs_tol=1e-9):
        raise RuntimeError(f"method {sol.method!r} claims makespan {sol.objective!r} but the evaluator computes {ev.makespan!r}")
    return ev


def _call(name: str, problem: Problem, opts: SolveOptions) -> Solution:
    return registry.get(name).func(problem, opts)


def run(
    problem: Problem,
    method: str = "auto",
    opts: SolveOptions | None = None,
    progress: Callable[[str], None] | None = None,
) -> RunResult:
    """Run ``method`` on ``problem`` and return the judged result (never raises for lack of time)."""
    opts = opts or SolveOptions()
    t0 = time.monotonic()
    say = progress or (lambda msg: None)
    lbs = lower_bounds(problem)
    lb = lbs.best
    why = infeasibility(problem, opts.memory_model)
    if why:
        return RunResult("infeasible", method, None, None, lb, time.monotonic() - t0, reason=why, bounds=lbs.as_dict())

    names = _plan(method, problem, opts)
    best: tuple[Solution, Evaluation] | None = None
    proved_lb = lb
    history: list[dict[str, Any]] = []
    reasons: list[str] = []
    for name in names:
        sub = SolveOptions(**{**opts.__dict__, "started": time.monotonic()})
        if opts.time_limit is not None:
            sub.time_limit = max(0.0, opts.time_limit - (time.monotonic() - t0))
        if best is not None:
            sub.hint = best[0]
        sol = _call(name, problem, sub)
        entry: dict[str, Any] = {"method": name, "status": sol.status, "seconds": sol.seconds}
        if sol.status == "infeasible":
            history.append(entry)
            return RunResult("infeasible", name, sol, None, lb, time.monotonic() - t0,
                             reason=sol.reason or f"{name} proved that no placement fits", bounds=lbs.as_dict(), history=history)
        if sol.lower_bound is not None:
            proved_lb = max(proved_lb, float(sol.lower_bound))
        if sol.placement is not None and sol.status in ("optimal", "feasible", "heuristic"):
            ev = verify(problem, sol, opts.memory_model)
            entry["makespan"] = ev.makespan
            if ev.feasible(problem) and (best is None or ev.makespan < best[1].makespan - 1e-12):
                best = (sol, ev)
            elif not ev.feasible(problem):
                entry["status"] = "unknown"
                reasons.append(f"{name}: answer exceeds memory")
        elif sol.reason:
            reasons.append(sol.reason)
        say(f"{name}: {entry.get('status')} makespan={entry.get('makespan', '-')} bound={proved_lb:.6g}")
        history.append(entry)
        if best is not None and best[0].status == "optimal":
            break
    seconds = time.monotonic() - t0
    if best is None:
        return RunResult("unknown", method, None, None, proved_lb, seconds,
                         reason="; ".join(reasons) or "no feasible placement found", bounds=lbs.as_dict(), history=history)
    sol, ev = best
    if proved_lb > ev.makespan * (1 + 1e-6) + 1e-9:
        raise RuntimeError(f"lower bound {proved_lb!r} exceeds the feasible makespan {ev.makespan!r}: a bound is invalid")
    proved_lb = min(proved_lb, ev.makespan)
    if sol.status == "optimal" or ev.makespan <= proved_lb * (1 + 1e-9):
        status = "optimal"
    elif any(registry.get(h["method"]).kind == "exact" for h in history):
        status = "feasible"
    else:
        status = "heuristic"
    return RunResult(status, sol.method, sol, ev, proved_lb, seconds, bounds=lbs.as_dict(), history=history)


def _plan(method: str, problem: Problem, opts: SolveOptions) -> list[str]:
    """The methods to run, in order: one for a named method; for ``auto`` the heuristic portfolio
    (or the simple baselines) then, if an exact model is available, that model hinted by them."""
    table = registry.methods()
    if method != "auto":
        if method not in table:
            raise KeyError(f"unknown method {method!r}; known: auto, {', '.join(table)}")
        return [method]
    plan = ["portfolio"] if "portfolio" in table else [h for h in AUTO_HEURISTICS if h in table]
    if "cpsat" in table:
        plan.append("cpsat")
    return plan
