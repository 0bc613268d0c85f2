"""The exactness guard: random tiny instances, every method and option, judged against enumeration.

:func:`tiny_problem` draws an instance from a seed (2-5 nodes, 1-3 devices, a random DAG,
sometimes a colocation pair, a pinned node, half-unit times, an unsupported node and CPU
latencies for the max-load/latency objectives); capacities are drawn around the point where
memory starts to bind, so proofs of infeasibility and forced trade-offs are common.
:func:`judge` runs one method with one option set through solvers.run (what the CLI runs) and
checks the claims against the enumerated optimum of the problem as stated:

- every answer passes the evaluator (placement.evaluator.check / placement.objectives) and its
  objective is the evaluator's (run() re-evaluates and raises otherwise);
- "optimal" equals the optimum within the documented gap (placement.report.OPTIMAL_GAP);
- "infeasible" only when enumeration finds no feasible answer;
- the reported lower bound is at most the optimum.

It returns the outcome ("optimal", "infeasible", ...) so bench/bench_guard.py can count them.
Used by tests/test_guard.py (hypothesis picks the seeds) and bench/bench_guard.py (the long run).
"""
from __future__ import annotations

import itertools
import random
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from formulations.bruteforce import enumerate_best, placements
from formulations.peak_search import best_schedule_bb
from placement.evaluator import check
from placement.objectives import evaluate_latency, evaluate_maxload
from placement.problem import Problem, make_problem
from placement.report import OPTIMAL_GAP
from placement.solution import SolveOptions
from solvers.run import run


@dataclass(frozen=True)
class Case:
    """One method with one option set."""

    method: str
    objective: str = "makespan"
    memory_model: str = "static"
    reserve: float = 0.0
    workers: int = 1
    extra: tuple[tuple[str, Any], ...] = ()

    def options(self) -> SolveOptions:
        opts = SolveOptions(memory_model=self.memory_model, time_limit=20.0, workers=self.workers,
                            reserve=self.reserve, seed=0)
        opts.extra.update(dict(self.extra))
        return opts

    def __str__(self) -> str:
        bits = [self.method, self.objective, self.memory_model, f"reserve={self.reserve:g}", f"workers={self.workers}"]
        bits += [f"{k}={v}" for k, v in self.extra]
        return " ".join(bits)


COARSE = (("exact_max_nodes", 1), ("coarse_size", 2))  # forces auto's coarse path on tiny graphs
UNIT_LNS = (("unit_lns_nodes", 0), ("unit_lns_window_seconds", 0.2))  # cpsat's unit LNS on tiny graphs
CUT_BOUND = (("cut_bound_nodes", 0),)  # cpsat's cut-vertex bound (peak model) on tiny graphs
LATENCY_FAST = (("ls_seconds", 0.2), ("polish_seconds", 0.1), ("bound_seconds", 1.0))

MAKESPAN_CASES = [
    Case(m, memory_model=mm, reserve=r, workers=w, extra=x)
    for mm in ("static", "peak")
    for m, w, r, x in (
        ("cpsat", 1, 0.0, ()), ("cpsat", 2, 0.0, ()), ("cpsat", 1, 0.2, ()), ("cpsat", 1, 0.0, (("held_bound", False),)),
        ("cpsat", 1, 0.0, CUT_BOUND),
        ("mip", 1, 0.0, ()), ("mip", 1, 0.2, ()),
        ("brute", 1, 0.0, ()), ("brute", 1, 0.2, ()),
        ("auto", 1, 0.0, ()), ("auto", 2, 0.0, ()), ("auto", 1, 0.2, ()),
        ("auto", 1, 0.0, COARSE), ("auto", 2, 0.2, COARSE),
        ("auto", 1, 0.0, UNIT_LNS), ("auto", 2, 0.2, UNIT_LNS),
    )
]
OBJECTIVE_CASES = [
    Case("maxload-cpsat", "max-load"), Case("maxload-cpsat-nc", "max-load"), Case("maxload-cpsat-nc", "max-load", workers=2),
    Case("maxload-mip", "max-load"), Case("maxload-mip-nc", "max-load"), Case("dp", "max-load"),
    Case("latency-cpsat", "latency", extra=LATENCY_FAST), Case("latency-cpsat", "latency", workers=2, extra=LATENCY_FAST),
    Case("latency-cpsat", "latency", extra=(("q", 2),) + LATENCY_FAST),
    Case("latency-mip", "latency", extra=LATENCY_FAST), Case("latency-mip", "latency", extra=(("q", 2),) + LATENCY_FAST),
]
CASES = MAKESPAN_CASES + OBJECTIVE_CASES


def tiny_problem(seed: int, objective: str = "makespan") -> Problem:
    r = random.Random(seed)
    n = r.randint(2, 5)
    k = r.randint(1, 3)
    # half units: CP-SAT scales them exactly; thirds: no round factor does (relaxed, floored data)
    frac = r.choice([0.0] * 7 + [0.5, 0.5, 1 / 3])
    frac_bytes = r.random() < 0.1  # bytes that are not whole numbers (quarters: CP-SAT scales them)
    nodes = []
    for i in range(n):
        t = r.choice([0, 1, 2, 3, 4, 6]) + (frac if r.random() < 0.5 else 0)
        b = r.randint(0, 8) + (r.choice([0, 0.25, 0.5]) if frac_bytes else 0)
        nodes.append({"id": i, "time": t, "out_bytes": r.choice([0, 0, 2, 5, 8]), "param_bytes": b})
    if n >= 2 and r.random() < 0.35:
        a, b = r.sample(range(n), 2)
        nodes[a]["colocate"] = nodes[b]["colocate"] = "g"
    if objective == "makespan" and k > 1 and r.random() < 0.2:
        nodes[r.randrange(n)]["devices"] = [r.randrange(k)]
    edges = [{"src": u, "dst": v, "comm": r.choice([0, 1, 2, 5]) + (frac if r.random() < 0.3 else 0)}
             for v in range(1, n) for u in range(v) if r.random() < 0.45]
    need = [x["param_bytes"] + x["out_bytes"] for x in nodes]
    # from just below the largest node to everything on one device: tight more often than not
    memory = float(max(1, round(r.uniform(0.9 * max(need), max(sum(need), max(need) + 1)))))
    if r.random() < 0.1:
        memory += 0.5  # a capacity that is not a whole number of bytes
    if r.random() < 0.05:
        memory = float("inf")
    kwargs: dict[str, Any] = {}
    if objective != "makespan":
        kwargs["node_attrs"] = {"cpu_latency": [float(r.randint(1, 12)) for _ in range(n)],
                                "supported": [r.random() > 0.1 for _ in range(n)]}
        kwargs["attrs"] = {"max_cpus": r.choice([0, 1, 1])}
        if objective == "max-load" and r.random() < 0.3:  # a training graph: the later half is backward
            kwargs["node_attrs"]["is_backward"] = [i >= (n + 1) // 2 for i in range(n)]
    return make_problem(nodes, edges, devices=k, memory=memory, name=f"tiny{seed}", **kwargs)


def makespan_optimum(problem: Problem, memory_model: str) -> float | None:
    """The enumerated optimum (None: nothing fits)."""
    if memory_model == "static":
        got, complete = enumerate_best(problem, "static")
    else:
        got, complete = best_schedule_bb(problem, placements(problem), "peak")
    assert complete
    return None if got is None else got[0]


def maxload_optimum(problem: Problem, contiguity: str) -> float | None:
    devices = list(range(problem.k)) + [-1 - c for c in range(int(problem.attrs.get("max_cpus", 0)))]
    best = None
    for combo in itertools.product(devices, repeat=problem.n):
        ev = evaluate_maxload(problem, np.array(combo), contiguity=contiguity)
        if not ev.violations and (best is None or ev.value < best):
            best = ev.value
    return best


def latency_optimum(problem: Problem, q: int) -> float | None:
    """Least latency over every split with at most q subgraphs per accelerator (CPUs unlimited)."""
    choices = [(-1, 0)] + [(d, s) for d in range(problem.k) for s in range(q)]
    best = None
    for combo in itertools.product(choices, repeat=problem.n):
        ev = evaluate_latency(problem, np.array([c[0] for c in combo]), np.array([c[1] for c in combo]))
        if not ev.violations and (best is None or ev.value < best):
            best = ev.value
    return best


CONTIGUITY = {"maxload-cpsat": "forward", "maxload-mip": "forward", "maxload-cpsat-nc": "none",
              "maxload-mip-nc": "none", "dp": "pipeline"}


@dataclass
class Verdict:
    outcome: str
    optimum: float | None
    value: float | None = None
    bound: float | None = None
    problems: list[str] = field(default_factory=list)


def judge(problem: Problem, case: Case) -> Verdict:
    """Run ``case`` on ``problem`` and list every claim that enumeration refutes."""
    res = run(problem, case.method, case.options(), objective=case.objective)
    if case.objective == "makespan":
        opt = makespan_optimum(problem, case.memory_model)
        value = res.evaluation.makespan if res.evaluation is not None else None
        tol = OPTIMAL_GAP["makespan"]
    elif case.objective == "max-load":
        if case.method == "dp" and not np.all(problem.memory == problem.memory[0]):
            raise AssertionError("the guard's instances have identical accelerators")
        opt = maxload_optimum(problem, CONTIGUITY[case.method])
        value = res.value
        tol = OPTIMAL_GAP["max-load"]
    else:
        opt = latency_optimum(problem, int(dict(case.extra).get("q", 1)))
        value = res.value
        tol = OPTIMAL_GAP["latency"]
    v = Verdict(res.status, opt, value, res.lower_bound)
    if res.status == "infeasible" and opt is not None:
        v.problems.append(f"'infeasible' but the optimum is {opt}")
    if res.answered:
        if opt is None:
            v.problems.append(f"an answer of {value} where enumeration finds none")
        if case.objective == "makespan":
            try:
                check(problem, res.evaluation.placement, res.evaluation.start, case.memory_model)
            except Exception as exc:  # noqa: BLE001 - any refusal is the finding
                v.problems.append(f"invalid schedule: {exc}")
        elif case.objective == "max-load":
            ev = evaluate_maxload(problem, res.split, contiguity=CONTIGUITY[case.method])
            if ev.violations or abs(ev.value - value) > 1e-9 * max(1.0, value):
                v.problems.append(f"split {res.split.tolist()}: {ev.violations or ev.value}")
        else:
            slot = res.solution.info.get("slot")
            ev = evaluate_latency(problem, res.split, slot)
            q = int(dict(case.extra).get("q", 1))
            if ev.violations or abs(ev.value - value) > 1e-9 * max(1.0, value):
                v.problems.append(f"split {res.split.tolist()}: {ev.violations or ev.value}")
            if slot is not None and np.any(np.asarray(slot)[res.split >= 0] >= q):
                v.problems.append(f"more than q = {q} subgraphs on an accelerator: {np.asarray(slot).tolist()}")
        if opt is not None and value is not None and value < opt * (1 - 1e-9) - 1e-9:
            v.problems.append(f"value {value} below the enumerated optimum {opt}")
    if res.status == "optimal" and (opt is None or value is None or value > opt * (1 + tol) + 1e-9):
        v.problems.append(f"'optimal' {value} but the optimum is {opt}")
    if opt is not None and res.lower_bound is not None and res.lower_bound > opt * (1 + 1e-9) + 1e-9:
        v.problems.append(f"lower bound {res.lower_bound} above the optimum {opt}")
    return v
