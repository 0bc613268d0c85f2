"""Explicit waits (control dependencies): the evaluator's ordered schedule with waits against a
brute-force earliest schedule, cycles named, the compiled path equal to the Python one, a graph
where waits fit and no order does, and the report's control dependencies."""
from __future__ import annotations

import itertools
import random

import networkx as nx
import numpy as np
import pytest

from placement.evaluator import ScheduleError, check, evaluate, wait_delay
from placement.problem import Link, make_problem
from placement.solution import Solution
from solvers.ordering import device_orders, order_report, reproducing_waits
from solvers.run import verify
from tests.conftest import random_problem
from tests.test_evaluator import naive_peak
from tests.test_kernels import both, require_compiled


def random_order(prob, placement, rng):
    """A random topological order of the graph, split by device."""
    g = nx.DiGraph()
    g.add_nodes_from(range(prob.n))
    g.add_edges_from(zip(prob.src.tolist(), prob.dst.tolist()))
    seq, indeg = [], {v: g.in_degree(v) for v in g}
    ready = [v for v in g if indeg[v] == 0]
    while ready:
        v = ready.pop(rng.randrange(len(ready)))
        seq.append(v)
        for w in g.successors(v):
            indeg[w] -= 1
            if indeg[w] == 0:
                ready.append(w)
    return [[v for v in seq if placement[v] == d] for d in range(prob.k)]


def brute_earliest(prob, placement, order, waits, lat):
    """Earliest starts by relaxing every constraint until nothing changes (None on a cycle)."""
    cons = [(int(u), int(v), float(c) if placement[u] != placement[v] else 0.0)
            for u, v, c in zip(prob.src.tolist(), prob.dst.tolist(), prob.comm.tolist())]
    cons += [(a, b, 0.0) for seq in order for a, b in zip(seq, seq[1:])]
    cons += [(u, v, lat if placement[u] != placement[v] else 0.0) for u, v in waits]
    if not nx.is_directed_acyclic_graph(nx.DiGraph([(u, v) for u, v, _ in cons])):  # zero-time cycles relax too
        return None
    start = [0.0] * prob.n
    for _ in range(prob.n + 1):
        changed = False
        for u, v, d in cons:
            t = start[u] + float(prob.time[u]) + d
            if t > start[v] + 1e-12:
                start[v], changed = t, True
        if not changed:
            return np.array(start)
    return None


def random_case(seed):
    rng = random.Random(seed)
    prob = random_problem(seed, rng.randint(2, 10), rng.randint(1, 3))
    if rng.random() < 0.5:  # a link model: waits across devices pay its latency
        prob.link = Link(latency=float(rng.randint(1, 3)), bandwidth=1.0)
    placement = np.array([rng.randrange(prob.k) for _ in range(prob.n)])
    order = random_order(prob, placement, rng)
    waits = [tuple(rng.sample(range(prob.n), 2)) for _ in range(rng.randint(0, 4))] if prob.n > 1 else []
    return prob, placement, order, waits


@pytest.mark.parametrize("seed", range(60))
@pytest.mark.parametrize("model", ["static", "peak"])
def test_waits_give_the_brute_force_earliest_schedule(seed, model):
    prob, placement, order, waits = random_case(seed)
    lat = prob.link.latency if prob.link is not None else 0.0
    assert wait_delay(prob) == lat
    want = brute_earliest(prob, placement, order, waits, lat)
    if want is None:
        with pytest.raises(ScheduleError, match="wait .* closes a cycle"):
            evaluate(prob, placement, order=order, memory_model=model, waits=waits)
        return
    ev = evaluate(prob, placement, order=order, memory_model=model, waits=waits)
    np.testing.assert_allclose(ev.start, want)
    np.testing.assert_allclose(ev.peak_memory, naive_peak(prob, placement, ev.start, ev.finish))
    for u, v in waits:
        assert ev.start[v] >= ev.finish[u] + (lat if placement[u] != placement[v] else 0.0) - 1e-9
    check(prob, placement, ev.start, model, check_memory=False)


def test_no_waits_is_the_plain_ordered_schedule_bit_for_bit():
    for seed in range(20):
        prob, placement, order, _ = random_case(seed)
        a = evaluate(prob, placement, order=order, memory_model="peak")
        for w in (None, []):
            b = evaluate(prob, placement, order=order, memory_model="peak", waits=w)
            assert a.start.tobytes() == b.start.tobytes() and a.peak_memory.tobytes() == b.peak_memory.tobytes()


@pytest.mark.parametrize("seed", range(40))
def test_compiled_path_equals_python_path(seed):
    require_compiled()
    prob, placement, order, waits = random_case(seed)

    def call():
        try:
            ev = evaluate(prob, placement, order=order, memory_model="peak", waits=waits)
        except ScheduleError as exc:
            return str(exc)
        return ev.start.tobytes(), ev.peak_memory.tobytes()

    plain, fast = both(call)
    assert plain == fast


def chain_and_gradients(memory: float):
    """A running sum c1 -> c2 -> c3 on device 0 (2 time units each, 10-byte outputs) and its three
    100-byte gradients g1, g2, g3 on device 1 (1 unit each, no inputs), g_t -> c_t, no transfer time.

    Device 1 has nothing else to run, so in every order it makes the three gradients at 0, 1, 2
    (finishing at 1, 2, 3), and device 0 holds each from then until its sum finishes. In the order
    g1, g2, g3: c1 [1, 3), c2 [3, 5), c3 [5, 7); over [3, 5) device 0 holds g2, g3, c1 and c2:
    220 bytes (makespan 7). Waits (c1, g2) and (c2, g3) hold each gradient until the sum before it
    is done: g2 [3, 4), c2 [4, 6), g3 [6, 7), c3 [7, 9); device 0 holds at most one gradient and two
    sums: 120 bytes, makespan 9."""
    nodes = [{"id": f"c{t}", "time": 2, "out_bytes": 10, "param_bytes": 0} for t in (1, 2, 3)]
    nodes += [{"id": f"g{t}", "time": 1, "out_bytes": 100, "param_bytes": 0} for t in (1, 2, 3)]
    edges = [{"src": "c1", "dst": "c2", "comm": 0}, {"src": "c2", "dst": "c3", "comm": 0}]
    edges += [{"src": f"g{t}", "dst": f"c{t}", "comm": 0} for t in (1, 2, 3)]
    p = make_problem(nodes, edges, devices=2, memory=memory, name="chain-and-gradients")
    placement = np.array([0 if p.ids[v].startswith("c") else 1 for v in range(p.n)])
    return p, placement


def test_waits_fit_where_no_order_does():
    p, pl = chain_and_gradients(150)
    ix = p.index
    chain = [ix["c1"], ix["c2"], ix["c3"]]
    peaks = []
    for perm in itertools.permutations([ix["g1"], ix["g2"], ix["g3"]]):
        ev = evaluate(p, pl, order=[chain, list(perm)], memory_model="peak")
        peaks.append(ev.peak_memory[0])
        assert not ev.feasible(p)
    assert min(peaks) == 220
    fifo = evaluate(p, pl, memory_model="peak")
    assert not fifo.feasible(p)
    order = [chain, [ix["g1"], ix["g2"], ix["g3"]]]
    waits = [(ix["c1"], ix["g2"]), (ix["c2"], ix["g3"])]
    ev = evaluate(p, pl, order=order, memory_model="peak", waits=waits)
    assert ev.peak_memory.tolist() == [120.0, 100.0] and ev.makespan == 9.0
    assert [ev.start[ix[x]] for x in ("g1", "g2", "g3", "c1", "c2", "c3")] == [0, 3, 6, 1, 4, 7]
    check(p, pl, ev.start, "peak")  # the schedule with idle time is a valid answer
    # the wait closing a cycle is named: g1 -> c1 -> c2, and g1 waiting for c2
    with pytest.raises(ScheduleError, match=r"wait \('c2', 'g1'\) closes a cycle"):
        evaluate(p, pl, order=order, memory_model="peak", waits=[(ix["c2"], ix["g1"])])
    with pytest.raises(ScheduleError, match="itself"):
        evaluate(p, pl, order=order, waits=[(ix["c1"], ix["c1"])])
    with pytest.raises(ScheduleError, match="need a device order"):
        evaluate(p, pl, waits=waits)
    # by node ids, as a report gives them
    by_id = evaluate(p, pl, order=order, memory_model="peak", waits=[("c1", "g2"), ("c2", "g3")])
    assert by_id.start.tolist() == ev.start.tolist()
    with pytest.raises(ScheduleError, match="wait names node 'nope', not in the graph"):  # was a bare KeyError
        evaluate(p, pl, order=order, waits=[("c1", "nope")])


def test_a_link_latency_delays_a_wait_across_devices():
    p, pl = chain_and_gradients(150)
    p.link = Link(latency=0.5, bandwidth=1.0)
    ix = p.index
    order = [[ix["c1"], ix["c2"], ix["c3"]], [ix["g1"], ix["g2"], ix["g3"]]]
    ev = evaluate(p, pl, order=order, memory_model="peak", waits=[(ix["c1"], ix["g2"])])
    assert ev.start[ix["g2"]] == 3.5 and ev.start[ix["c2"]] == 4.5


def test_verify_and_the_report_keep_the_waits():
    p, pl = chain_and_gradients(150)
    ix = p.index
    order = [[ix["c1"], ix["c2"], ix["c3"]], [ix["g1"], ix["g2"], ix["g3"]]]
    waits = [(ix["c1"], ix["g2"]), (ix["c2"], ix["g3"])]
    sol = Solution("hand", "heuristic", placement=pl, order=order, waits=waits, objective=9.0)
    ev = verify(p, sol, "peak")
    assert ev.feasible(p) and ev.makespan == 9.0
    rep = order_report(p, ev, "peak")
    assert rep["order_fits"] is False and rep["order_peak_memory"] == [220.0, 100.0]
    assert rep["control_dependencies"] == [["c1", "g2"], ["c2", "g3"]]
    assert rep["control_dependencies_fit"] is True and rep["control_dependencies_makespan"] == 9.0
    assert rep["fits_fifo"] is False
    # the same schedule given by its start times alone (as CP-SAT gives it): the same waits back
    ev2 = check(p, pl, ev.start, "peak")
    assert reproducing_waits(p, ev2) == waits


def test_report_lists_no_waits_when_the_order_alone_fits():
    p, pl = chain_and_gradients(250)
    ix = p.index
    order = [[ix["c1"], ix["c2"], ix["c3"]], [ix["g1"], ix["g2"], ix["g3"]]]
    ev = evaluate(p, pl, order=order, memory_model="peak")
    rep = order_report(p, ev, "peak")
    assert rep["order_fits"] is True and "control_dependencies" not in rep


@pytest.mark.parametrize("seed", range(40))
def test_reproducing_waits_give_a_schedule_never_later_and_exact_for_idle_at_finishes(seed):
    """Start times with idle time inserted: the derived waits with the schedule's order never start
    a node later; where each idle ends at some node's finish (a schedule made by order + waits),
    they give it back exactly."""
    prob, placement, order, waits = random_case(seed)
    try:
        made = evaluate(prob, placement, order=order, memory_model="peak", waits=waits)
    except ScheduleError:
        return
    got = reproducing_waits(prob, made)
    again = evaluate(prob, placement, order=device_orders(prob, made), memory_model="peak", waits=got)
    np.testing.assert_allclose(again.start, made.start)
    # arbitrary idle (CP-SAT-like integer times): shift a suffix of the schedule later
    rng = random.Random(seed)
    late = made.start + np.where(made.start >= rng.choice(made.start.tolist()), rng.randint(1, 3), 0)
    ev = check(prob, placement, late, "peak", check_memory=False)
    got = reproducing_waits(prob, ev)
    again = evaluate(prob, placement, order=device_orders(prob, ev), memory_model="peak", waits=got)
    assert np.all(again.start <= ev.start + 1e-9)


@pytest.fixture(scope="module")
def lstm_held():
    """A generated LSTM (3000 nodes) at K = 8 and 3 x its memory bound: chain-pin's answer there
    holds gradients back with waits, and its device order alone does not fit."""
    from placement.generate import generate
    from placement.memory_bounds import memory_lower_bound

    p0 = generate("lstm", 3000, seed=0, memory_fraction=None)
    return p0.with_devices(8, 3.0 * memory_lower_bound(p0, "peak", 8)["best"])


def test_chain_pin_holds_gradients_with_waits_where_the_order_alone_overflows(lstm_held):
    from heuristics.chain_pin import chain_pin
    from placement.solution import SolveOptions

    p = lstm_held
    a = chain_pin(p, SolveOptions(memory_model="peak"))
    assert a.status == "heuristic" and a.waits
    ev = evaluate(p, a.placement, order=a.order, memory_model="peak", waits=a.waits)
    assert ev.feasible(p) and np.allclose(ev.start, a.start) and a.objective == pytest.approx(ev.makespan, rel=1e-12)
    check(p, a.placement, a.start, "peak")
    assert not evaluate(p, a.placement, order=a.order, memory_model="peak").feasible(p)  # the waits are needed
    without = chain_pin(p, SolveOptions(memory_model="peak", extra={"chain_pin_waits": False}))
    assert without.waits is None and without.objective > a.objective
    again = chain_pin(p, SolveOptions(memory_model="peak"))  # deterministic
    assert again.waits == a.waits and again.order == a.order and again.objective == a.objective


def test_report_control_dependencies_reproduce_a_feasible_schedule(lstm_held):
    from placement.solution import SolveOptions
    from solvers.run import run

    p = lstm_held
    res = run(p, "chain-pin", SolveOptions(memory_model="peak"))
    rep = res.report(p, "peak")
    assert rep["order_fits"] is False and rep["control_dependencies_fit"] is True
    assert rep["control_dependencies_makespan"] == pytest.approx(rep["makespan"], rel=1e-9)
    order = [rep["device_order"][name] for name in p.device_names]
    placement = {nid: d for d, seq in enumerate(order) for nid in seq}
    ev = evaluate(p, placement, order=order, memory_model="peak", waits=rep["control_dependencies"])
    check(p, ev.placement, ev.start, "peak")  # raises if over capacity
    assert ev.makespan == pytest.approx(rep["makespan"], rel=1e-9)


def test_the_incumbent_rejects_the_schedule_re_timed_without_its_waits(lstm_held):
    """refine and LNS re-time in kept order without waits: that schedule overflows here and the
    incumbent (the answer with waits) stays."""
    from heuristics.chain_pin import chain_pin
    from placement.solution import SolveOptions
    from solvers.pipeline import Incumbent

    p = lstm_held
    a = chain_pin(p, SolveOptions(memory_model="peak"))
    inc = Incumbent(p, "peak", verify)
    inc.offer(a)
    kept = evaluate(p, a.placement, order=a.order, memory_model="peak")
    assert kept.makespan <= a.objective and not kept.feasible(p)
    inc.offer(Solution("refine", "heuristic", placement=a.placement, start=kept.start, objective=kept.makespan))
    assert inc.best is not None and inc.best[1].feasible(p)
    check(p, inc.best[1].placement, inc.best[1].start, "peak")


@pytest.mark.slow  # 6 s: the default suite (CI 10:08 in all on a loaded machine, session 42) sits near its cap
def test_auto_answer_with_waits_stays_feasible(lstm_held):
    from placement.solution import SolveOptions
    from solvers.run import run

    p = lstm_held
    res = run(p, "auto", SolveOptions(memory_model="peak", time_limit=8.0))
    assert res.feasible
    check(p, res.evaluation.placement, res.evaluation.start, "peak")
    rep = res.report(p, "peak")
    assert rep["order_fits"] or rep["control_dependencies_fit"]


@pytest.mark.parametrize("seed", range(40))
def test_deadline_schedule_with_waits_runs_in_the_evaluator_as_simulated(seed):
    from heuristics.deadline_order import deadline_schedule

    prob, placement, _, waits = random_case(seed)
    rng = np.random.default_rng(seed)
    priority = rng.random(prob.n)
    try:
        order, start = deadline_schedule(prob, placement, priority, waits=waits)
    except ValueError:  # the waits close a cycle with the graph
        g = nx.DiGraph(list(zip(prob.src.tolist(), prob.dst.tolist())) + list(waits))
        assert not nx.is_directed_acyclic_graph(g)
        return
    ev = evaluate(prob, placement, order=order, memory_model="peak", waits=waits)
    np.testing.assert_allclose(ev.start, start)
    lat = wait_delay(prob)
    for u, v in waits:
        assert ev.start[v] >= ev.finish[u] + (lat if placement[u] != placement[v] else 0.0) - 1e-9


def test_report_says_plainly_when_derived_waits_do_not_reproduce_the_plan():
    """Start times as an exact model may give them: y idles from 1 to 5, and no node of device 0
    finishes at 5 (a at 4, b at 5.5). The derived wait (a, y) starts y at 4; received on device 0 at
    5, it overlaps a's output (held until b finishes at 5.5): 200 bytes > 150. The plan itself
    (y at 5, received at 6, after a is freed) holds 100 on each device."""
    nodes = [{"id": "a", "time": 4, "out_bytes": 100, "param_bytes": 0},
             {"id": "b", "time": 1.5, "out_bytes": 0, "param_bytes": 0},
             {"id": "h", "time": 1, "out_bytes": 0, "param_bytes": 0},
             {"id": "y", "time": 1, "out_bytes": 100, "param_bytes": 0},
             {"id": "z", "time": 1, "out_bytes": 0, "param_bytes": 0}]
    edges = [{"src": "a", "dst": "b", "comm": 0}, {"src": "h", "dst": "y", "comm": 0}, {"src": "y", "dst": "z", "comm": 0}]
    p = make_problem(nodes, edges, devices=2, memory=150)
    pl = {"a": 0, "b": 0, "z": 0, "h": 1, "y": 1}
    plan = check(p, pl, {"a": 0, "b": 4, "h": 0, "y": 5, "z": 6}, "peak")
    assert plan.peak_memory.tolist() == [100.0, 100.0]
    rep = order_report(p, plan, "peak")
    assert rep["order_fits"] is False and rep["order_peak_memory"][0] == 200.0
    assert rep["control_dependencies"] == [["a", "y"]]
    assert rep["control_dependencies_fit"] is False and rep["control_dependencies_peak_memory"] == [200.0, 100.0]
    assert "only the start times" in rep["control_dependencies_note"]
    assert rep["control_dependencies_makespan"] == 6.5
