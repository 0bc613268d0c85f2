"""The memory frontier, --min-devices and solve-batch."""
from __future__ import annotations

import json

import numpy as np
import pytest

from placement.evaluator import check, evaluate
from placement.generate import generate
from placement.memory_bounds import memory_lower_bound
from solvers import batch, cli
from solvers.frontier import capacities, frontier, min_devices
from solvers.sweep import Point
from tests.conftest import DATA


@pytest.fixture(scope="module")
def transformer():
    return generate("transformer", 300, devices=4, memory_fraction=None)


def test_frontier_points_are_monotone_and_each_answer_fits_its_capacity(transformer):
    fr = frontier(transformer, "peak", method="etf", points=6, time_limit=None, parallel="none")
    caps = [p.capacity for p in fr.points]
    assert caps == sorted(caps) and caps[0] == pytest.approx(memory_lower_bound(transformer, "peak")["best"])
    found = [p for p in fr.points if p.makespan is not None]
    assert len(found) >= 3
    # once an answer exists it exists at every larger capacity, never slower
    first = fr.points.index(found[0])
    assert all(p.makespan is not None for p in fr.points[first:])
    spans = [p.makespan for p in fr.points[first:]]
    assert all(b <= a + 1e-9 for a, b in zip(spans, spans[1:]))
    bounds = [p.lower_bound for p in fr.points]
    assert all(b <= a + 1e-9 for a, b in zip(bounds, bounds[1:]))
    for p, ans in zip(fr.points, fr.answers):
        if p.makespan is None:
            assert ans is None
            continue
        q = transformer.with_devices(4, p.capacity)
        ev = evaluate(q, ans[0], order=ans[1], memory_model="peak")  # independently of the frontier
        assert ev.feasible(q) and ev.makespan == pytest.approx(p.makespan)
        assert p.lower_bound <= p.makespan * (1 + 1e-9)
    assert fr.points[-1].makespan == pytest.approx(fr.unconstrained_makespan)


def test_frontier_keeps_the_waits_an_answer_needs():
    """chain-pin's answer on this LSTM holds gradients back with waits: its device order alone
    overflows. The frontier re-evaluates each kept answer with its waits (dropping them made it
    raise "does not fit" on its own answer)."""
    p0 = generate("lstm", 3000, seed=0, memory_fraction=None)
    lstm = p0.with_devices(8, 3.0 * memory_lower_bound(p0, "peak", 8)["best"])
    fr = frontier(lstm, "peak", method="chain-pin", points=2, time_limit=None, parallel="none")
    kept = [(pt, ans) for pt, ans in zip(fr.points, fr.answers) if ans is not None]
    assert kept
    for pt, (placement, order, waits, _start) in kept:
        q = lstm.with_devices(8, pt.capacity)
        ev = evaluate(q, placement, order=order, memory_model="peak", waits=waits)
        assert ev.feasible(q) and ev.makespan == pytest.approx(pt.makespan)
    assert any(w and not evaluate(lstm.with_devices(8, pt.capacity), pl, order=o, memory_model="peak").feasible(
        lstm.with_devices(8, pt.capacity)) for pt, (pl, o, w, _s) in kept)


def idle_plan():
    """Two devices, capacity 5 bytes each, link latency 0.2. Device 0 runs B (4 s, 5 bytes, read by
    C) then C (1 s) then W; device 1 runs U (0.5 s, 5 bytes, read by W on device 0). A received copy
    is held from its producer's finish, so U must finish no earlier than C (5), when B's bytes are
    freed: the plan starts U at 5. The waits the report derives hold U on the last node finishing
    by 5 - 0.2, which is B (4), so they start U at 4.2 and its copy overlaps B's bytes (10 > 5)."""
    from placement.problem import Link, make_problem
    nodes = [{"id": "B", "time": 4, "out_bytes": 5, "param_bytes": 0}, {"id": "C", "time": 1, "out_bytes": 0, "param_bytes": 0},
             {"id": "U", "time": 0.5, "out_bytes": 5, "param_bytes": 0}, {"id": "W", "time": 1, "out_bytes": 0, "param_bytes": 0}]
    edges = [{"src": "B", "dst": "C", "bytes": 5}, {"src": "C", "dst": "W", "bytes": 0}, {"src": "U", "dst": "W", "bytes": 5}]
    p = make_problem(nodes, edges, devices=2, memory=5, link=Link(latency=0.2, bandwidth=1.0))
    ix = p.index
    pl = np.array([0, 0, 1, 0])
    start = np.zeros(4)
    start[[ix["B"], ix["C"], ix["U"], ix["W"]]] = [0, 4, 5, 5.5 + 0.2 + 5]
    return p, pl, start


def test_the_idle_plan_fits_by_its_start_times_only():
    from placement.evaluator import check
    from solvers.ordering import order_report
    p, pl, start = idle_plan()
    ev = check(p, pl, start, "peak")  # by hand: 11.7, 5 bytes at most on each device
    assert ev.makespan == pytest.approx(11.7) and ev.peak_memory.tolist() == [5.0, 5.0]
    rep = order_report(p, ev, "peak")
    assert rep["order_fits"] is False and rep["control_dependencies"] == [["B", "U"]]
    assert rep["control_dependencies_fit"] is False and "start times" in rep["control_dependencies_note"]


def test_frontier_keeps_an_answer_that_fits_by_its_start_times_only(monkeypatch):
    """An answer whose order and derived waits overflow (CP-SAT's integer times) but whose start
    times fit: the frontier checks it by its start times (it used to raise "does not fit" on its own
    answer)."""
    import solvers.frontier as fmod
    from solvers.ordering import device_orders, order_report
    from placement.evaluator import check
    p, pl, start = idle_plan()
    ev = check(p, pl, start, "peak")
    rep = order_report(p, ev, "peak")
    answer = {"feasible": True, "status": "feasible", "makespan": ev.makespan, "lower_bound": None, "seconds": 0.0,
              "placement": pl.tolist(), "order": device_orders(p, ev), "start": start.tolist(), "memory": [5.0, 5.0],
              "waits": [[p.index[u], p.index[v]] for u, v in rep["control_dependencies"]]}
    monkeypatch.setattr(fmod, "solve_point", lambda point, stop=None: answer)
    monkeypatch.setattr(fmod, "run_points", lambda todo, parallel, address, stop=None: ([answer for _ in todo], "sequential"))
    fr = fmod.frontier(p, "peak", method="cpsat", points=3, time_limit=None, parallel="none")
    assert fr.points and all(pt.makespan == pytest.approx(11.7) for pt in fr.points)
    for pt, ans in zip(fr.points, fr.answers):
        assert check(p.with_devices(2, pt.capacity), ans.placement, ans.start, "peak").feasible(p.with_devices(2, pt.capacity))


def test_solve_point_returns_the_answers_start_times(transformer):
    from solvers.sweep import Point, solve_point
    res = solve_point(Point(transformer, "etf", "peak", None, 0))
    ev = evaluate(transformer, np.asarray(res["placement"]), order=res["order"], memory_model="peak")
    assert np.allclose(res["start"], ev.start) and res["makespan"] == pytest.approx(ev.makespan)

def test_capacities_are_geometric_from_the_bound():
    assert capacities(10.0, 80.0, 4) == pytest.approx([10, 20, 40, 80])
    assert capacities(10.0, 5.0, 4) == [10.0]


def test_min_devices_finds_a_placement_and_proves_it_only_at_the_bound(transformer):
    cap = 1.2 * memory_lower_bound(transformer, "peak", 3)["best"]
    md = min_devices(transformer, cap, "peak", method="etf", time_limit=None)
    assert md.devices is not None and md.devices >= md.fewest_by_bound
    assert memory_lower_bound(transformer, "peak", md.fewest_by_bound)["best"] <= cap
    if md.fewest_by_bound > 1:
        assert memory_lower_bound(transformer, "peak", md.fewest_by_bound - 1)["best"] > cap
    assert md.proved == (md.devices == md.fewest_by_bound)
    q = transformer.with_devices(md.devices, cap)
    from solvers.run import run
    from placement.solution import SolveOptions
    assert run(q, "etf", SolveOptions(memory_model="peak")).feasible


def test_cli_frontier_writes_a_report(tmp_path, transformer, capsys):
    from placement.formats.native import write_problem

    graph = tmp_path / "g.json"
    write_problem(transformer, graph)
    rep = tmp_path / "fr.json"
    code = cli.main([str(graph), "--memory-model", "peak", "--frontier", "--points", "3", "--method", "etf",
                     "--parallel", "none", "--report", str(rep), "--quiet"])
    assert code == 0
    doc = json.loads(rep.read_text())
    assert len(doc["points"]) == 3 and doc["smallest_feasible_memory"] is not None
    assert "memory/device" in capsys.readouterr().out


@pytest.mark.parametrize("extra", [["--frontier", "--min-devices"], ["--min-devices"], ["--plot", "x.png"],
                                   ["--frontier", "--points", "0"]])
def test_cli_sweep_bad_options_exit_2(tmp_path, extra, capsys):
    assert cli.main([str(DATA / "tiny.json"), *extra]) == 2
    assert "error" in capsys.readouterr().err


def test_solve_batch_writes_one_report_per_cell_and_a_summary(tmp_path):
    man = tmp_path / "m.json"
    man.write_text(json.dumps({"graphs": [str(DATA / "tiny.json"), str(DATA / "cnn_small.json")], "devices": [2],
                               "methods": ["etf", "greedy-fill"], "memory_model": "peak", "time_limit": 10, "out": "res"}))
    code = batch.main([str(man), "--parallel", "none"])
    out = tmp_path / "res"
    files = sorted(f.name for f in out.iterdir())
    assert "summary.md" in files and len(files) == 5
    table = (out / "summary.md").read_text()
    assert table.count("| etf |") == 2 and table.count("| greedy-fill |") == 2
    for f in files:
        if f.endswith(".json"):
            rep = json.loads((out / f).read_text())
            assert rep["memory_model"] == "peak" and "memory_lower_bound" in rep
    assert code in (0, 1)


@pytest.mark.parametrize("manifest, what", [
    ({"graphs": []}, "graphs"),
    ({"graphs": ["x.json"], "devices": [0]}, "devices"),
    ({"graphs": ["x.json"], "methods": ["nope"]}, "nope"),
    ({"graphs": ["x.json"], "memory": ["lots"]}, "lots"),
    ({"graphs": ["x.json"], "colour": 1}, "colour"),
])
def test_solve_batch_bad_manifest_exits_2_and_writes_nothing(tmp_path, capsys, manifest, what):
    man = tmp_path / "m.json"
    man.write_text(json.dumps(manifest))
    assert batch.main([str(man), "--parallel", "none"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and what in err[0]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.json"]


@pytest.mark.slow  # 8 s: the default suite (CI 9:47 in all, session 42) sits near its cap
def test_frontier_on_ray_equals_the_sequential_frontier(transformer):
    """The `ray` extra runs the same points as Ray tasks: same capacities, answers and bounds
    (a deterministic method, so the two runs must agree exactly)."""
    pytest.importorskip("ray")
    seq = frontier(transformer, "peak", method="etf", points=3, time_limit=None, parallel="none")
    par = frontier(transformer, "peak", method="etf", points=3, time_limit=None, parallel="ray")
    assert [p.capacity for p in par.points] == [p.capacity for p in seq.points]
    assert [p.makespan for p in par.points] == [p.makespan for p in seq.points]
    assert [p.lower_bound for p in par.points] == [p.lower_bound for p in seq.points]
    assert any(p.makespan is not None for p in par.points)


def test_frontier_points_stay_monotone_when_an_answer_re_evaluates_shorter(monkeypatch):
    """Session 14 review. An answer with idle time (start times later than its order needs: CP-SAT's
    integer plans) re-evaluates shorter by its order; a later point's answer that is shorter by its
    own solve's makespan but not by the evaluator's at that capacity must not replace it: the
    points were 3, 4 (a larger capacity reporting a longer makespan)."""
    import solvers.frontier as fmod
    from placement.evaluator import check
    from placement.problem import make_problem

    nodes = [{"id": x, "time": 1.0, "out_bytes": int(x == "a"), "param_bytes": 0} for x in "abc"]  # fits anywhere
    edges = [{"src": "a", "dst": "b", "comm": 0.5}, {"src": "b", "dst": "c", "comm": 0.5}]
    p = make_problem(nodes, edges, devices=2)

    def answer(pl, start):
        pl, start = np.asarray(pl), np.asarray(start, dtype=float)
        ev = check(p, pl, start, "static")
        order = [[v for v in np.argsort(start, kind="stable").tolist() if pl[v] == d] for d in range(2)]
        return {"feasible": True, "status": "feasible", "makespan": ev.makespan, "lower_bound": None, "seconds": 0.0,
                "placement": pl.tolist(), "order": order, "waits": [], "start": start.tolist(),
                "memory": ev.memory.tolist()}

    idle = answer([0, 0, 0], [0, 1, 5])  # claims 6; its order gives 3 (one device, no transfers)
    tight = answer([0, 1, 0], [0, 1.5, 3])  # claims 4 = what its order gives: two transfers
    top = dict(answer([0, 1, 0], [0, 1.5, 9]), memory=[2.0, 2.0])  # claims 10; "needs" 2 bytes: capacities 1 to 2
    results = {0: idle, 1: tight}
    monkeypatch.setattr(fmod, "solve_point", lambda point, stop=None: top)
    monkeypatch.setattr(fmod, "run_points",
                        lambda todo, parallel, address, stop=None: ([results.get(i, tight) for i in range(len(todo))], "sequential"))
    fr = fmod.frontier(p, "static", method="cpsat", points=3, time_limit=None, parallel="none")
    spans = [pt.makespan for pt in fr.points]
    assert len(spans) == 3 and spans[0] == 3.0
    assert all(b <= a for a, b in zip(spans, spans[1:])), spans
    for pt, ans in zip(fr.points, fr.answers):  # each point's makespan is its kept answer's, at its capacity
        assert fmod.evaluate_at(p.with_devices(2, pt.capacity), ans, "static").makespan == pt.makespan


def test_the_sweep_shares_what_is_left_of_its_limit_by_waves(transformer, monkeypatch):
    """The limit counts from ``started`` (the process's start in the CLI), and the points run in
    waves of as many as run at once: with 5 of 20 s left and one point at a time (sequential), the
    unconstrained solve gets at most a quarter of them and each of the 3 points at most
    POINT_SHARE of a third of what is left then; with 4 s passed, the first min-devices solve at
    most a quarter of the 16 left."""
    import time as _time

    import solvers.frontier as fm

    given: list[float | None] = []
    real = fm.solve_point

    def fake(point, stop=None):
        given.append(point.time_limit)
        return real(Point(point.problem, "etf", point.memory_model, None, point.seed, point.label))

    monkeypatch.setattr(fm, "solve_point", fake)
    monkeypatch.setattr(fm, "run_points", lambda todo, parallel, address, stop=None: ([fake(p) for p in todo], "sequential"))
    fm.frontier(transformer, "peak", method="etf", points=3, time_limit=20.0, parallel="none",
                started=_time.monotonic() - 15.0)
    assert len(given) == 4 and 0 < given[0] <= 5.0 / 4
    assert all(0 < g <= fm.POINT_SHARE * 5.0 / 3 for g in given[1:])
    given.clear()
    fm.min_devices(transformer, float(transformer.memory.max()), "peak", "etf", 20.0, started=_time.monotonic() - 4.0)
    assert given and 0 < given[0] <= 16.0 / 4


def test_a_stopped_point_shows_no_bound_rather_than_zero(monkeypatch):
    """Points a Ctrl-C left unanswered (sweep.stopped_point) have no bound of their own. One below
    an answered point takes that point's bound (valid at every smaller capacity); one with no
    bounded point above keeps none: the table shows "-", not a bound of 0 and a gap of 100%."""
    import solvers.frontier as fmod
    from placement.evaluator import check
    from placement.problem import make_problem
    from solvers.sweep import stopped_point

    nodes = [{"id": x, "time": 1.0, "out_bytes": 1, "param_bytes": 0} for x in "ab"]
    p = make_problem(nodes, [{"src": "a", "dst": "b", "comm": 0.5}], devices=2)
    ev = check(p, np.array([0, 0]), np.array([0.0, 1.0]), "peak")
    done = {"feasible": True, "status": "optimal", "makespan": ev.makespan, "lower_bound": 2.0, "seconds": 0.0,
            "placement": [0, 0], "order": [[0, 1], []], "waits": [], "start": [0.0, 1.0], "memory": ev.memory.tolist()}
    top = dict(done, memory=[1.0e6, 0.0])  # needs more than any point: no point carries it

    def run(todo, parallel, address, stop=None, answered=()):
        return [done if i in answered else stopped_point(pt) for i, pt in enumerate(todo)], "sequential"

    monkeypatch.setattr(fmod, "solve_point", lambda point, stop=None: top)
    monkeypatch.setattr(fmod, "run_points", lambda *a, **kw: run(*a, **kw, answered=(1,)))
    fr = fmod.frontier(p, "peak", method="cpsat", points=3, time_limit=None, parallel="none")
    assert [pt.lower_bound for pt in fr.points] == [2.0, 2.0, None]
    last = fmod.frontier_table(fr).splitlines()[-1].split()
    assert last[2:6] == ["2", "-", "-", "unknown"]  # the answer carried from below, no bound, no gap


def test_an_imported_models_frontier_keeps_to_placements():
    """Session 44: at a capacity no placement fits, auto answers an imported model with Tofu's
    partitioned plan, which has no placement: the frontier then raised KeyError 'placement'.
    Its points now ask auto for placements only; the lowest point, at the memory lower bound the
    held-tensor knapsacks raise, is proved infeasible, and the points above it are placements
    that fit their capacities."""
    torch = pytest.importorskip("torch")
    from placement.importers.torch import capture

    torch.manual_seed(0)
    layers = []
    for _ in range(6):
        layers += [torch.nn.Linear(256, 256), torch.nn.ReLU()]
    p = capture(torch.nn.Sequential(*layers), (torch.randn(64, 256),), devices=4).problem
    fr = frontier(p, "peak", "auto", points=3, time_limit=10, parallel="none")
    assert fr.memory_lower_bound > memory_lower_bound(p, "peak")["best"]
    assert fr.points[0].status == "infeasible"
    found = [(pt, ans) for pt, ans in zip(fr.points, fr.answers) if pt.makespan is not None]
    assert found
    for pt, ans in found:
        at = p.with_devices(4, pt.capacity)
        ev = check(at, ans.placement, ans.start, "peak")
        assert ev.feasible(at) and ev.makespan >= pt.makespan * (1 - 1e-9)  # its start times, or later: never shorter


@pytest.mark.parametrize("before, proved", [(["infeasible", "infeasible"], True), (["infeasible", "unknown"], False),
                                            (["unknown", "infeasible"], False)])
def test_min_devices_is_proved_fewest_when_every_smaller_count_was_proved_infeasible(transformer, monkeypatch, before, proved):
    """Session 44: auto proves a capacity too small at once where the held-tensor knapsacks do; a
    placement found two counts above the memory bound's fewest is then the proved fewest, but
    only when each count before it was proved infeasible, not merely left unanswered."""
    import solvers.frontier as fm

    statuses = iter(before + ["feasible"])

    def fake(point, stop=None):
        status = next(statuses)
        res = {"status": status, "feasible": status == "feasible", "makespan": 1.0 if status == "feasible" else None}
        if status == "feasible":
            res["placement"] = [0] * point.problem.n
        return res

    monkeypatch.setattr(fm, "solve_point", fake)
    cap = 1.2 * memory_lower_bound(transformer, "peak", 3)["best"]
    md = fm.min_devices(transformer, cap, "peak", "auto", None)
    assert md.devices == md.fewest_by_bound + 2 and md.proved is proved


def test_a_lowest_capacity_the_knapsacks_proved_too_small_reads_infeasible_without_a_solve():
    """Under the peak model the frontier starts at the knapsacks' raised memory bound, a capacity
    proved too small: that point is infeasible (enumeration agrees) and costs no solve; the
    points above it are solved."""
    from placement.memory_bounds import memory_lower_bound
    from tests.test_held_bound import INSTANCES, instance, optimum

    for kind, seed in INSTANCES:
        p = instance(kind, seed).with_devices(instance(kind, seed).k, float("inf"))
        fr = frontier(p, "peak", method="auto", points=3, time_limit=30, parallel="none")
        if fr.memory_lower_bound <= memory_lower_bound(p, "peak")["best"] or len(fr.points) < 2:
            continue  # the knapsacks did not raise this one's bound
        low = fr.points[0]
        assert low.capacity == fr.memory_lower_bound
        assert low.status == "infeasible" and low.seconds == 0.0 and low.makespan is None
        assert optimum(p.with_devices(p.k, [low.capacity] * p.k)) is None
        assert all(pt.seconds > 0 for pt in fr.points[1:])
        return
    pytest.fail("no instance whose memory bound the knapsacks raise")
