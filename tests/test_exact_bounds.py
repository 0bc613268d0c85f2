"""Lower bounds of the exact models against brute force: the memory-aware path bound (which may
not cut an edge inside a colocation unit) and CP-SAT's reported bound with a dedicated bound
subsolver, on tiny random instances with many colocation units and zero-comm edges inside them
(the structure of the msr-fiddle graphs)."""
from __future__ import annotations

import random

import pytest

from formulations.bruteforce import brute
from formulations.cpsat import cpsat
from formulations.cpsolver import cp_solver, set_params
from formulations.pathbound import path_lower_bound
from placement.evaluator import check
from placement.problem import Problem, make_problem
from placement.solution import SolveOptions


def unit_problem(seed: int) -> Problem:
    """6-8 nodes, 2-3 devices, a random DAG over a chain, one or two colocation units whose inner
    edges carry no comm, and tight memory (often forcing transfers)."""
    r = random.Random(seed)
    n, k = r.randint(6, 8), r.randint(2, 3)
    nodes = [{"id": i, "time": r.choice([0, 1, 2, 3, 5]), "out_bytes": r.randint(0, 3), "param_bytes": r.randint(1, 6)}
             for i in range(n)]
    groups = r.sample(range(n - 1), r.randint(1, 2))
    for j, a in enumerate(groups):
        nodes[a].setdefault("colocate", f"g{j}")
        nodes[a + 1]["colocate"] = nodes[a]["colocate"]
    same = {(i, i + 1) for i in range(n - 1) if nodes[i].get("colocate") and nodes[i].get("colocate") == nodes[i + 1].get("colocate")}
    edges = [{"src": i, "dst": i + 1, "comm": 0 if (i, i + 1) in same else r.choice([1, 2, 4, 7])} for i in range(n - 1)]
    edges += [{"src": u, "dst": v, "comm": r.choice([0, 1, 3])} for v in range(2, n) for u in range(v - 1) if r.random() < 0.2]
    total = sum(x["out_bytes"] + x["param_bytes"] for x in nodes)
    unit_mem: dict[str, int] = {}
    for x in nodes:
        if x.get("colocate"):
            unit_mem[x["colocate"]] = unit_mem.get(x["colocate"], 0) + x["out_bytes"] + x["param_bytes"]
    biggest = max([x["out_bytes"] + x["param_bytes"] for x in nodes] + list(unit_mem.values()))
    cap = max(total / k * r.uniform(1.0, 1.5), biggest)
    return make_problem(nodes, edges, devices=k, memory=float(int(cap)), name=f"u{seed}")


def opts(**kw) -> SolveOptions:
    kw.setdefault("time_limit", 30)
    kw.setdefault("workers", 1)
    return SolveOptions(**kw)


@pytest.mark.parametrize("seed", range(40))
def test_path_bound_with_units_never_exceeds_the_optimum(seed: int) -> None:
    p = unit_problem(seed)
    for model in ("static", "peak"):  # each model's bound against its own optimum
        ref = brute(p, opts(memory_model=model))
        if ref.status == "optimal":
            assert path_lower_bound(p, model) <= ref.objective + 1e-9


def test_path_bound_does_not_cut_inside_a_unit() -> None:
    """Chain 0 -> 1 -> 2 -> 3 with {1, 2} one unit joined by a free edge: 0, the unit and 3 do not
    all fit on one device, so 0 -> 1 or 2 -> 3 (comm 5 each) must be cut. Cutting the free edge
    1 -> 2 would put the unit on two devices, which no placement can do."""
    nodes = [{"id": 0, "time": 1, "out_bytes": 0, "param_bytes": 6},
             {"id": 1, "time": 1, "out_bytes": 0, "param_bytes": 1, "colocate": "u"},
             {"id": 2, "time": 1, "out_bytes": 0, "param_bytes": 1, "colocate": "u"},
             {"id": 3, "time": 1, "out_bytes": 0, "param_bytes": 6}]
    edges = [{"src": 0, "dst": 1, "comm": 5}, {"src": 1, "dst": 2, "comm": 0}, {"src": 2, "dst": 3, "comm": 5}]
    p = make_problem(nodes, edges, devices=2, memory=8.0)
    assert brute(p, opts()).objective == pytest.approx(9)
    assert path_lower_bound(p) == pytest.approx(9)


def test_set_params_replaces_repeated_fields_and_rejects_unknown_names() -> None:
    prm = cp_solver(opts()).parameters
    set_params(prm, {"subsolvers": ["objective_lb_search"], "linearization_level": 2})
    assert list(prm.subsolvers) == ["objective_lb_search"] and prm.linearization_level == 2
    set_params(prm, {"subsolvers": ["max_lp", "default_lp"]})
    assert list(prm.subsolvers) == ["max_lp", "default_lp"]
    with pytest.raises(ValueError, match="no_such_parameter"):
        set_params(prm, {"no_such_parameter": 1})


@pytest.mark.parametrize("seed", range(12))
def test_bound_subsolver_keeps_the_optimum(seed: int) -> None:
    """CP-SAT with the bound worker of formulations.cpsat (2 workers) proves the brute-force
    optimum, and its answer is the evaluator's."""
    p = unit_problem(100 + seed)
    ref = brute(p, opts())
    sol = cpsat(p, opts(workers=2, seed=seed, extra={"bound_worker": "objective_lb_search"}))
    assert sol.status == ref.status
    if ref.status == "optimal":
        assert sol.objective == pytest.approx(ref.objective, abs=1e-6)
        ev = check(p, sol.placement, sol.start, "static")
        assert sol.objective == pytest.approx(ev.makespan, rel=1e-12)
        assert sol.lower_bound <= sol.objective * (1 + 1e-9)


def test_two_phase_schedule_keeps_the_best_answer_and_bound() -> None:
    """A search phase then a bound phase (hinted with the first phase's best): the answer is never
    worse than the hint, both phases ran, the bound is honest and at least the first phase's."""
    from heuristics.baselines import topo_fill
    from test_exact import chain_problem

    p = chain_problem(3)
    hint = topo_fill(p, SolveOptions())
    one = cpsat(p, opts(time_limit=1.0, workers=2, hint=hint))
    two = cpsat(p, opts(time_limit=2.0, workers=2, hint=hint,
                        extra={"phases": [(0.5, {}), (1.0, {"subsolvers": ["objective_lb_search"]})]}))
    assert "cp_status1" in two.info and two.info["phases"] == 2
    for sol in (one, two):
        assert sol.objective <= hint.objective + 1e-9
        ev = check(p, sol.placement, sol.start, "static")
        assert sol.objective == pytest.approx(ev.makespan, rel=1e-12)
        assert sol.lower_bound <= sol.objective * (1 + 1e-9)
    assert two.lower_bound <= one.objective * (1 + 1e-9) and one.lower_bound <= two.objective * (1 + 1e-9)


def test_phase_schedule_proves_tiny_optima() -> None:
    for seed in range(6):
        p = unit_problem(300 + seed)
        ref = brute(p, opts())
        sol = cpsat(p, opts(workers=2, extra={"phases": [(0.5, {"subsolvers": ["objective_lb_search"]}), (1.0, {})]}))
        assert sol.status == ref.status
        if ref.status == "optimal":
            assert sol.objective == pytest.approx(ref.objective, abs=1e-6)


def test_auto_schedule_adds_a_bound_phase_only_for_a_large_starting_gap() -> None:
    from formulations.cpsat import AUTO_GAP
    from heuristics.baselines import topo_fill
    from placement.bounds import makespan_lower_bound
    from test_exact import chain_problem

    p = chain_problem(5)
    hint = topo_fill(p, SolveOptions())
    assert (hint.objective - path_lower_bound(p)) / hint.objective > AUTO_GAP
    # 5 s, not 2: at nice 19 under load 4 a 2 s limit ran out while building the model (no phases)
    sol = cpsat(p, opts(time_limit=5.0, workers=2, hint=hint, extra={"schedule": "auto"}))
    assert sol.info["phases"] == 2 and sol.objective <= hint.objective + 1e-9
    q = make_problem([{"id": 0, "time": 3, "out_bytes": 0, "param_bytes": 1}, {"id": 1, "time": 2, "out_bytes": 0, "param_bytes": 1}],
                     [{"src": 0, "dst": 1, "comm": 4}], devices=2, memory=10.0)
    exact = cpsat(q, opts(workers=2, hint=brute(q, opts()), extra={"schedule": "auto"}))
    assert exact.info["phases"] == 1 and exact.status == "optimal"
    assert exact.objective == pytest.approx(5) == pytest.approx(makespan_lower_bound(q, "static"))
