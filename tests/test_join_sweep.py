"""The join sweep (solvers/join_sweep.py): remote inputs that land together at a join come home,
never worse, memory respected, stop and deadline obeyed, the evaluator's figures."""
from __future__ import annotations

import threading
import time

import numpy as np
import pytest

from placement.evaluator import check, check_placement, evaluate, wait_delay
from placement.problem import make_problem
from placement.solution import SolveOptions
from solvers.join_sweep import JoinSweep, joins
from tests.conftest import filled_random


def _fan_in(m: int, out_bytes: float = 1.0, memory: float = float("inf"), times: list[float] | None = None,
            param_bytes: float = 0.0):
    """s -> a_i -> g, s and g on device 0 and a_i on device i + 1; the a_i land at g within
    (m - 1) / 10 of each other (transfers 5 + i / 10), so no single move gains."""
    nodes = [{"id": "s", "time": 1.0, "out_bytes": 1.0, "param_bytes": 0.0}]
    nodes += [{"id": f"a{i}", "time": 1.0 if times is None else times[i], "out_bytes": out_bytes, "param_bytes": param_bytes}
              for i in range(m)]
    nodes.append({"id": "g", "time": 1.0, "out_bytes": 1.0, "param_bytes": 0.0})
    edges = [{"src": "s", "dst": f"a{i}", "comm": 0.1} for i in range(m)]
    edges += [{"src": f"a{i}", "dst": "g", "comm": 5.0 + i / 10} for i in range(m)]
    prob = make_problem(nodes, edges, devices=m + 1, memory=memory)
    return prob, np.array([0] + list(range(1, m + 1)) + [0])


def _far() -> float:
    return time.monotonic() + 60


@pytest.mark.parametrize("m", [2, 3, 6])
def test_a_sweep_brings_the_inputs_home(m: int) -> None:
    prob, pl = _fan_in(m)
    ev0 = evaluate(prob, pl)
    assert ev0.makespan == pytest.approx(1 + 0.1 + 1 + 5 + (m - 1) / 10 + 1)
    search = JoinSweep(prob, pl, ev0.start, SolveOptions())
    ev = search.run(_far())
    assert ev.makespan == pytest.approx(m + 2)  # s, the m inputs and g one after another on device 0
    assert np.all(ev.placement == 0)
    again = check(prob, ev.placement, ev.start, "static")
    assert again.makespan == pytest.approx(ev.makespan)  # the evaluator's figure
    assert search.converged and search.stats.improved >= 1 and search.stats.sweeps >= 2
    assert search.run(_far()) is ev  # dry: nothing more to do until a better schedule is adopted


def test_memory_keeps_the_inputs_away() -> None:
    """Device 0 holds s, g and at most one 10-byte input: no join move fits."""
    prob, pl = _fan_in(3, out_bytes=10.0, memory=13.0)
    ev0 = evaluate(prob, pl)
    assert ev0.feasible(prob)
    ev = JoinSweep(prob, pl, ev0.start, SolveOptions()).run(_far())
    assert ev.feasible(prob)
    assert ev.makespan == pytest.approx(ev0.makespan)
    assert np.array_equal(ev.placement, pl)


def test_deadline_and_stop_return_the_start_schedule() -> None:
    prob, pl = _fan_in(4)
    ev0 = evaluate(prob, pl)
    search = JoinSweep(prob, pl, ev0.start, SolveOptions())
    search.eval_seconds = 1.0  # as if one evaluation took a second
    ev = search.run(time.monotonic() + 0.5)
    assert ev.makespan == pytest.approx(ev0.makespan) and search.stats.tried == 0
    stop = threading.Event()
    stop.set()
    stopped = JoinSweep(prob, pl, ev0.start, SolveOptions(stop=stop))
    assert stopped.run(_far()).makespan == pytest.approx(ev0.makespan) and stopped.stats.tried == 0


def test_adopt_takes_only_a_better_schedule_and_wakes_a_dry_sweep() -> None:
    prob, pl = _fan_in(3)
    ev0 = evaluate(prob, pl)
    search = JoinSweep(prob, pl, ev0.start, SolveOptions())
    best = search.run(_far())
    assert search.converged
    assert not search.adopt(ev0)  # worse
    assert search.converged
    home = np.zeros(prob.n, dtype=np.int64)
    better = evaluate(prob, home, order=[[prob.index[x] for x in ("s", "a2", "a1", "a0", "g")], [], [], []])
    assert better.makespan == pytest.approx(best.makespan)
    assert not search.adopt(better)  # equal is not better
    prob2, pl2 = _fan_in(3)
    search2 = JoinSweep(prob2, pl2, evaluate(prob2, pl2).start, SolveOptions())
    search2.dry = True
    assert search2.adopt(better) and not search2.converged


def test_joins_are_nodes_with_two_dear_inputs() -> None:
    prob, _ = _fan_in(3)
    assert joins(prob).tolist() == [prob.index["g"]]


@pytest.mark.parametrize("memory_model", ["static", "peak"])
@pytest.mark.parametrize("seed", range(5))
def test_never_worse_and_feasible_on_random_problems(seed: int, memory_model: str) -> None:
    prob, placement, ev0 = filled_random(seed, memory_model, 40, 0.3)
    ev = JoinSweep(prob, placement, ev0.start, SolveOptions(), memory_model=memory_model).run(_far())
    check_placement(prob, ev.placement)  # colocation and allowed devices
    assert ev.feasible(prob)
    assert ev.makespan <= ev0.makespan + 1e-9
    again = check(prob, ev.placement, ev.start, memory_model)  # the evaluator's checker: a valid schedule that fits
    assert again.makespan == pytest.approx(ev.makespan)


def test_a_move_that_only_ties_is_not_kept() -> None:
    """Two inputs of time t land at g at 1 + 0.1 + t + 5 and 1 + 0.1 + t + 5.1; home, device 0
    runs s, a0, a1 and g starts at 1 + 2t. t = 2.5: 6 against 8.7, kept. t = 5.2: 11.4 both
    ways, a tie: the sweep keeps nothing and goes dry."""
    prob, pl = _fan_in(2, times=[2.5, 2.5])
    ev0 = evaluate(prob, pl)
    ev = JoinSweep(prob, pl, ev0.start, SolveOptions()).run(_far())
    assert ev.makespan == pytest.approx(7.0) and np.all(ev.placement == 0)
    prob, pl = _fan_in(2, times=[5.2, 5.2])
    ev0 = evaluate(prob, pl)
    assert ev0.start[prob.index["g"]] == pytest.approx(1 + 0.1 + 5.2 + 5.1)
    assert evaluate(prob, np.zeros(prob.n, dtype=np.int64)).makespan == pytest.approx(ev0.makespan)
    search = JoinSweep(prob, pl, ev0.start, SolveOptions())
    ev = search.run(_far())
    assert np.array_equal(ev.placement, pl) and ev.makespan == pytest.approx(ev0.makespan)
    assert search.converged and search.stats.tried == 1 and search.stats.improved == 0


def test_peak_memory_keeps_the_inputs_away() -> None:
    """Peak model: each input holds 10 bytes of parameters on its device (the outputs, 1 byte,
    are held on device 0 either way: a transferred tensor lands there); device 0 has room for
    none of the parameters, so no join move fits."""
    prob, pl = _fan_in(3, param_bytes=10.0, memory=13.0)
    ev0 = evaluate(prob, pl, memory_model="peak")
    assert ev0.feasible(prob)
    home = pl.copy()
    home[prob.index["a2"]] = 0
    assert not evaluate(prob, home, memory_model="peak").feasible(prob)  # not even one input fits home
    search = JoinSweep(prob, pl, ev0.start, SolveOptions(), memory_model="peak")
    ev = search.run(_far())
    assert search.stats.tried >= 1 and search.stats.improved == 0
    assert np.array_equal(ev.placement, pl) and ev.feasible(prob)


def test_waits_are_kept_in_every_schedule() -> None:
    """Waits (a2, a0) and (a0, z): a0 starts after a2 has finished, z (fed by s only, on a device
    of its own) after a0. The sweep's answer meets both and is the evaluator's schedule with them."""
    nodes = [{"id": x, "time": 1.0, "out_bytes": 1.0, "param_bytes": 0.0} for x in ("s", "a0", "a1", "a2", "g", "z")]
    edges = [{"src": "s", "dst": f"a{j}", "comm": 0.1} for j in range(3)]
    edges += [{"src": f"a{j}", "dst": "g", "comm": 5.0 + j / 10} for j in range(3)] + [{"src": "s", "dst": "z", "comm": 0.1}]
    prob = make_problem(nodes, edges, devices=5)
    i = prob.index
    pl = np.array([0, 1, 2, 3, 0, 4])
    waits = [(i["a2"], i["a0"]), (i["a0"], i["z"])]
    ev0 = evaluate(prob, pl, order=[[i["s"], i["g"]], [i["a0"]], [i["a1"]], [i["a2"]], [i["z"]]], waits=waits)
    search = JoinSweep(prob, pl, ev0.start, SolveOptions(), waits=waits)
    ev = search.run(_far())
    assert search.waits == waits
    assert ev.makespan < ev0.makespan - 1e-9
    for u, v in waits:
        gap = 0.0 if ev.placement[u] == ev.placement[v] else wait_delay(prob)
        assert ev.start[v] >= ev.finish[u] + gap - 1e-9
    seq = np.lexsort((ev.start, ev.placement))
    order = [[int(v) for v in seq if ev.placement[v] == d] for d in range(prob.k)]
    again = evaluate(prob, ev.placement, order=order, waits=waits)
    assert again.makespan == pytest.approx(ev.makespan)
