"""The relist sweep (solvers/relist_sweep.py): windows ending at the critical joins a transfer holds
up, list re-scheduled, merged and judged by the evaluator; never worse, memory and waits kept,
deadline and stop obeyed."""
from __future__ import annotations

import threading
import time

import numpy as np
import pytest

from placement.evaluator import check, check_placement, evaluate, wait_delay
from placement.incremental import IncrementalSchedule, timing_graph
from placement.problem import make_problem
from placement.solution import SolveOptions
from solvers.relist_sweep import RelistSweep, held_joins
from tests.conftest import filled_random
from tests.test_window_relist import _fan_in


def _far() -> float:
    return time.monotonic() + 60


def test_the_fan_in_reaches_the_work_bound_and_the_sweep_then_runs_dry() -> None:
    prob, ev0 = _fan_in()
    search = RelistSweep(prob, ev0.placement, ev0.start, SolveOptions())
    ev = search.run(_far())
    assert ev.makespan == pytest.approx(8.8)  # F and the heads one at a time, a tail, J (tests/test_window_relist.py)
    again = check(prob, ev.placement, ev.start, "static")
    assert again.makespan == pytest.approx(ev.makespan)
    assert search.converged and search.stats.kept >= 1 and search.stats.sweeps >= 2
    assert search.run(_far()) is ev  # dry: nothing more until a better schedule is adopted


def test_held_joins_are_critical_and_held_by_a_transfer() -> None:
    prob, ev0 = _fan_in()
    base = IncrementalSchedule(prob, ev0.placement, ev0.start, timing_graph(prob))
    assert held_joins(prob, base).tolist() == [prob.index["J"]]  # t2's return decides J's start


def test_memory_that_keeps_the_last_tail_away_keeps_the_schedule() -> None:
    """The three tails away hold 10 bytes each, the one home (after the short head) none; device 0
    has room for 5 bytes. A long head launched last needs its tail home, where it does not fit,
    and launched last the short head's return still lands 0.2 after its tail: nothing is kept."""
    prob0, ev0 = _fan_in()
    nodes = [{"id": prob0.ids[v], "time": float(prob0.time[v]), "out_bytes": 10.0 if prob0.ids[v] in ("t0", "t1", "t2") else 0.0,
              "param_bytes": 0.0} for v in range(prob0.n)]
    edges = [{"src": prob0.ids[u], "dst": prob0.ids[v], "comm": float(c)}
             for u, v, c in zip(prob0.src.tolist(), prob0.dst.tolist(), prob0.comm.tolist())]
    prob = make_problem(nodes, edges, devices=2, memory=[5.0, 40.0])
    ix = prob.index
    order = [[ix[x] for x in ("F", "h0", "h1", "h2", "h3", "t3", "J")], [ix[f"t{i}"] for i in range(3)]]
    ev = evaluate(prob, ev0.placement, order=order)
    assert ev.feasible(prob) and ev.makespan == pytest.approx(9.0)
    search = RelistSweep(prob, ev.placement, ev.start, SolveOptions())
    got = search.run(_far())
    assert got.feasible(prob)
    assert got.makespan == pytest.approx(9.0) and search.stats.kept == 0 and search.converged


def test_deadline_and_stop_return_the_start_schedule() -> None:
    prob, ev0 = _fan_in()
    search = RelistSweep(prob, ev0.placement, ev0.start, SolveOptions())
    search.eval_seconds = 1.0  # as if one evaluation took a second
    ev = search.run(time.monotonic() + 0.5)
    assert ev.makespan == pytest.approx(ev0.makespan) and search.stats.windows == 0 and not search.converged
    stop = threading.Event()
    stop.set()
    stopped = RelistSweep(prob, ev0.placement, ev0.start, SolveOptions(stop=stop))
    assert stopped.run(_far()).makespan == pytest.approx(ev0.makespan) and stopped.stats.windows == 0


def test_adopt_takes_only_a_better_schedule_and_wakes_a_dry_sweep() -> None:
    prob, ev0 = _fan_in()
    search = RelistSweep(prob, ev0.placement, ev0.start, SolveOptions())
    best = search.run(_far())
    assert search.converged
    assert not search.adopt(ev0)  # worse
    assert not search.adopt(best)  # equal is not better
    assert search.converged
    fresh = RelistSweep(prob, ev0.placement, ev0.start, SolveOptions())
    fresh.dry = True
    assert fresh.adopt(best) and not fresh.converged


@pytest.mark.parametrize("memory_model", ["static", "peak"])
@pytest.mark.parametrize("seed", range(5))
def test_never_worse_and_feasible_on_random_problems(seed: int, memory_model: str) -> None:
    prob, placement, ev0 = filled_random(seed, memory_model, 60, 0.2)
    search = RelistSweep(prob, placement, ev0.start, SolveOptions(seed=seed), memory_model=memory_model, size=20)
    ev = search.run(_far())
    check_placement(prob, ev.placement)  # colocation and allowed devices
    assert ev.feasible(prob)
    assert ev.makespan <= ev0.makespan + 1e-9
    again = check(prob, ev.placement, ev.start, memory_model)
    assert again.makespan == pytest.approx(ev.makespan)
    assert search.stats.best_makespan == pytest.approx(ev.makespan)


def test_waits_are_kept_in_every_schedule() -> None:
    """A wait (t1, t0): t0 may start only after t1 has finished. The sweep's answer meets it and
    is the evaluator's schedule with it."""
    prob, _ = _fan_in()
    ix = prob.index
    waits = [(ix["t1"], ix["t0"])]
    pl = np.zeros(prob.n, dtype=np.int64)
    for i in range(3):
        pl[ix[f"t{i}"]] = 1
    order = [[ix[x] for x in ("F", "h0", "h1", "h2", "h3", "t3", "J")], [ix[x] for x in ("t1", "t0", "t2")]]
    ev0 = evaluate(prob, pl, order=order, waits=waits)
    search = RelistSweep(prob, pl, ev0.start, SolveOptions(), waits=waits)
    ev = search.run(_far())
    assert search.waits == waits
    assert ev.makespan <= ev0.makespan + 1e-9
    for u, v in waits:
        gap = 0.0 if ev.placement[u] == ev.placement[v] else wait_delay(prob)
        assert ev.start[v] >= ev.finish[u] + gap - 1e-9
    seq = np.lexsort((ev.start, ev.placement))
    again = evaluate(prob, ev.placement, order=[[int(v) for v in seq if ev.placement[v] == d] for d in range(prob.k)],
                     waits=waits)
    assert again.makespan == pytest.approx(ev.makespan)
