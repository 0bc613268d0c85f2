"""Window LNS (formulations/window_lns.py): the exact optimum when one window covers the graph
(brute force), the boundary kept, the model's makespan honest, never worse than its start."""
from __future__ import annotations

import random
import time

import numpy as np
import pytest

from formulations.bruteforce import enumerate_best, placements
from formulations.window_lns import LnsStats, lns, solve_window, timed, window_at
from heuristics.baselines import greedy_fill
from placement.evaluator import check, evaluate
from placement.generate import generate
from placement.incremental import IncrementalSchedule
from placement.solution import SolveOptions
from tests.conftest import random_problem, with_slow


def tiny(seed: int):
    rng = random.Random(seed)
    prob = random_problem(seed, rng.randint(4, 7), rng.randint(2, 3), colocate_p=0.2)
    need = prob.param_bytes + prob.out_bytes
    return prob.with_devices(prob.k, max(float(need.sum()) * 0.6, float(need.max()) * 1.5))


@pytest.mark.parametrize("select", ["critical", "sweep"])
@pytest.mark.parametrize("seed", range(10))
def test_one_window_over_the_whole_graph_reaches_the_brute_force_optimum(seed, select):
    prob = tiny(seed)
    best, complete = enumerate_best(prob, "static")
    assert complete
    if best is None:
        return
    # start from the last feasible placement the enumeration meets (any one will do)
    pl = [np.asarray(x) for x in placements(prob) if evaluate(prob, np.asarray(x)).feasible(prob)][-1]
    ev0 = evaluate(prob, pl)
    stats = LnsStats()
    got, ev = lns(prob, pl, ev0.start, SolveOptions(workers=2, seed=seed), deadline=time.monotonic() + 30,
                  window=prob.n, stats=stats, select=select)
    assert ev.makespan == pytest.approx(best[0], rel=1e-9)
    assert stats.stopped == "converged"
    check(prob, got, ev.start, "static")


@pytest.mark.parametrize("seed", range(6))
def test_window_model_makespan_is_the_evaluators_and_the_boundary_holds(seed):
    prob = random_problem(100 + seed, 24, 3, edge_p=0.15)  # integer data: the model is exact
    rng = np.random.default_rng(seed)
    pl = rng.integers(0, prob.k, size=prob.n)
    base = IncrementalSchedule(prob, pl, evaluate(prob, pl).start)
    lo, hi, seq = window_at(base, int(seq_mid(base)), 10)
    new_pl, order, model_makespan = solve_window(prob, base, lo, hi, seq, SolveOptions(workers=2, time_limit=20))
    outside = np.ones(prob.n, dtype=bool)
    outside[seq[lo:hi]] = False
    assert np.array_equal(new_pl[outside], pl[outside])  # the boundary keeps its devices
    ev = timed(prob, new_pl, order, "static")
    check(prob, new_pl, ev.start, "static")
    before = seq[:lo]
    assert np.all(ev.start[before] <= base.start[before])  # the part before is not delayed
    for d, nodes in enumerate(order):  # the part after keeps its order
        after = [v for v in nodes if v in set(seq[hi:].tolist())]
        assert after == [v for v in base.order[d] if v in set(seq[hi:].tolist())]
    assert ev.makespan <= model_makespan + 1e-9  # the model never promises less than it gets
    assert model_makespan <= base.makespan + 1e-9  # the incumbent is a solution of the window model


def seq_mid(base):
    seq = np.lexsort((base.problem.topo_rank, base.start))
    return seq[len(seq) // 2]


@pytest.mark.parametrize("seed", range(4))
def test_nodes_outside_movable_keep_their_device_and_the_model_stays_honest(seed):
    prob = random_problem(200 + seed, 24, 3, edge_p=0.15, colocate_p=0.2)
    rng = np.random.default_rng(seed)
    pl = rng.integers(0, prob.k, size=prob.n)
    for members in prob.groups:
        pl[members] = pl[members[0]]
    base = IncrementalSchedule(prob, pl, evaluate(prob, pl).start)
    lo, hi, seq = window_at(base, int(seq_mid(base)), 14)
    movable = rng.random(prob.n) < 0.4
    new_pl, order, model_makespan = solve_window(prob, base, lo, hi, seq, SolveOptions(workers=2, time_limit=20),
                                                 movable=movable)
    fixed = ~movable
    for members in prob.groups:  # a group moves only when all its members may
        if not movable[members].all():
            fixed[members] = True
    fixed[seq[:lo]] = True
    fixed[seq[hi:]] = True
    assert np.array_equal(new_pl[fixed], pl[fixed])
    ev = timed(prob, new_pl, order, "static")
    check(prob, new_pl, ev.start, "static")
    assert ev.makespan <= model_makespan + 1e-9 and model_makespan <= base.makespan + 1e-9


@pytest.mark.parametrize("select", with_slow(["sweep", "focus", "pair"], {"focus", "pair"}))  # 3 s each
def test_lns_selections_are_never_worse(select):
    prob = generate("lstm", 500, seed=5, devices=3, memory_fraction=0.5)
    pl = np.asarray(greedy_fill(prob, SolveOptions()).placement)
    ev0 = evaluate(prob, pl)
    stats = LnsStats()
    got, ev = lns(prob, pl, ev0.start, SolveOptions(workers=2, seed=1), deadline=time.monotonic() + 3, window=60,
                  window_seconds=0.5, stats=stats, select=select)
    assert stats.windows > 0 and stats.closed <= stats.windows
    assert ev.makespan <= ev0.makespan + 1e-9 and ev.feasible(prob)
    check(prob, got, ev.start, "static")


def test_unknown_selection_is_refused():
    prob = random_problem(1, 8, 2)
    pl = np.zeros(prob.n, dtype=np.int64)
    with pytest.raises(ValueError, match="select"):
        lns(prob, pl, evaluate(prob, pl).start, SolveOptions(), deadline=time.monotonic() + 1, select="everywhere")


@pytest.mark.parametrize("family", with_slow(["transformer", "cnn"], {"transformer"}))  # 4 s each
def test_lns_on_a_generated_graph_is_never_worse_and_keeps_memory(family):
    prob = generate(family, 500, seed=5, devices=3, memory_fraction=0.5)
    pl = np.asarray(greedy_fill(prob, SolveOptions()).placement)
    ev0 = evaluate(prob, pl)
    stats = LnsStats()
    got, ev = lns(prob, pl, ev0.start, SolveOptions(workers=2, seed=1), deadline=time.monotonic() + 4, window=80,
                  window_seconds=1.0, stats=stats)
    assert stats.windows > 0
    assert ev.makespan <= ev0.makespan + 1e-9
    assert ev.feasible(prob)
    check(prob, got, ev.start, "static")
    assert stats.best_makespan == ev.makespan


def test_auto_with_lns_and_no_incumbent_claims_nothing(monkeypatch):
    """Without a warm start the LNS phase has nothing to improve: auto must not call the problem
    infeasible (a perfect packing exists) nor return an answer it does not have."""
    from solvers import pipeline
    from solvers.run import run
    from tests.test_exactness import packing_problem

    p = packing_problem(2)
    monkeypatch.setattr(pipeline, "warm_start_methods", lambda problem: [])
    monkeypatch.setattr(pipeline, "BASELINES", {})
    res = run(p, "auto", SolveOptions(time_limit=10, workers=1))
    assert res.status != "infeasible"
    phases = {ph["name"]: ph for ph in res.history}
    assert phases["exact-lns"]["status"] == "skipped"
    if res.evaluation is not None:
        check(p, res.evaluation.placement, res.evaluation.start, "static")


def test_a_window_answered_after_a_stop_is_dropped_not_retimed(monkeypatch):
    """Re-timing a window's answer is a whole-graph evaluation (about a second at 200K nodes): after
    a stop (Ctrl-C) the search returns its best so far at once instead."""
    import threading

    import formulations.window_lns as wl

    prob = generate("lstm", 500, seed=5, devices=3, memory_fraction=0.5)
    pl = np.asarray(greedy_fill(prob, SolveOptions()).placement)
    ev0 = evaluate(prob, pl)
    opts = SolveOptions(workers=2, seed=1, stop=threading.Event())
    real_solve, real_timed, timings = wl.solve_window, wl.timed, []

    def solve_then_stop(*args, **kwargs):
        got = real_solve(*args, **kwargs)
        opts.stop.set()  # the signal lands while the window's model was being solved
        return got

    monkeypatch.setattr(wl, "solve_window", solve_then_stop)
    monkeypatch.setattr(wl, "timed", lambda *a, **k: timings.append(1) or real_timed(*a, **k))
    search = wl.WindowSearch(prob, pl, ev0.start, opts, window=60, window_seconds=0.5)
    before = len(timings)
    best = search.run(time.monotonic() + 30)
    assert search.stats.windows == 1 and search.stats.stopped == "stopped"
    assert len(timings) == before  # the window's answer was not re-timed
    assert best.makespan == search.stats.start_makespan
