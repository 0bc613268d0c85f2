"""Ctrl-C in a sweep (solve-batch, the frontier's points): the running solves answer with what
they have, sequentially and on Ray; the cells not started are listed as stopped, not lost."""
from __future__ import annotations

import json
import os
import signal
import threading
from pathlib import Path

import pytest

from placement.evaluator import check
from placement.formats import load_problem
from solvers import batch
from solvers import sweep
from solvers.sweep import Point, run_points, solve_point
from tests.conftest import DATA


def _started_then(flag: Path):
    """A sweep's solve that first leaves ``flag`` behind (so a test knows a solve is running)."""
    def fn(point: Point, stop: threading.Event | None) -> dict:
        flag.touch()
        return solve_point(point, stop)
    return fn


def _when(flag: Path, action, timeout: float = 120.0) -> threading.Thread:
    """``action()`` on a thread, one second after ``flag`` appears."""
    def body() -> None:
        ev = threading.Event()
        for _ in range(int(timeout / 0.05)):
            if flag.exists():
                break
            ev.wait(0.05)
        ev.wait(1.0)
        action()
    t = threading.Thread(target=body, daemon=True)
    t.start()
    return t


def test_ctrl_c_in_solve_batch_writes_the_cells_answered_and_lists_the_rest(tmp_path, monkeypatch, capsys):
    """Before, a KeyboardInterrupt traceback, exit 130 and nothing written: a long batch lost every
    cell it had finished. Now the running cell answers with its best so far (a placement the
    evaluator accepts), the cells not started are 'stopped' in the summary, exit 1."""
    man = tmp_path / "m.json"
    man.write_text(json.dumps({"graphs": [str(DATA / "cnn_small.json")], "devices": [4, 3, 2], "methods": ["auto"],
                               "memory_model": "peak", "time_limit": 120, "out": "res"}))
    flag = tmp_path / "started"
    real = batch.run_points
    monkeypatch.setattr(batch, "run_points", lambda points, parallel, address, stop=None:
                        real(points, parallel, address, fn=_started_then(flag), stop=stop))
    _when(flag, lambda: os.kill(os.getpid(), signal.SIGINT))
    code = batch.main([str(man), "--parallel", "none"])
    assert code == 1
    assert "SIGINT received" in capsys.readouterr().err
    out = tmp_path / "res"
    assert sorted(f.name for f in out.iterdir()) == ["cnn_small_K4_Mfile_auto.json", "summary.md"]
    rep = json.loads((out / "cnn_small_K4_Mfile_auto.json").read_text())
    assert rep["status"] == "feasible" and rep["seconds"] < 60  # stopped, long before its limit
    problem = load_problem(DATA / "cnn_small.json").with_devices(4)
    ev = check(problem, rep["placement"], rep["start"], "peak")
    assert ev.feasible(problem) and ev.makespan <= rep["makespan"] * (1 + 1e-9)
    rows = [r for r in (out / "summary.md").read_text().splitlines() if r.startswith("| cnn_small.json")]
    assert [r.split(" | ")[4] for r in rows] == ["feasible", "stopped", "stopped"]


@pytest.mark.slow  # starts a local Ray cluster (about 10 s)
def test_a_stopped_ray_sweep_returns_the_running_points_answers(tmp_path):
    """Before, a stop left the Ray tasks running to be killed by Ray's shutdown: every running
    point came back 'unknown', its answer lost, and the shutdown took 1.4 s of the exit."""
    pytest.importorskip("ray")
    problem = load_problem(DATA / "cnn_small.json")
    points = [Point(problem.with_devices(k), "auto", "peak", 120.0, label={"k": k}) for k in (4, 3)]
    stop, flag = threading.Event(), tmp_path / "started"
    _when(flag, stop.set)
    results, ran = run_points(points, "ray", fn=_started_then(flag), stop=stop)
    assert ran == "ray"
    answered = [r for r in results if r["report"]]
    assert answered, "no running point answered"
    for r in answered:
        assert r["feasible"] and r["seconds"] < 60
        p = points[[pt.label["k"] for pt in points].index(r["label"]["k"])].problem
        ev = check(p, r["placement"], r["start"], "peak")
        assert ev.feasible(p) and abs(ev.makespan - r["makespan"]) <= 1e-9 * r["makespan"]


def test_a_sweep_stopped_before_it_starts_runs_nothing():
    stop = threading.Event()
    stop.set()
    calls = []
    points = [Point(load_problem(DATA / "tiny.json"), "etf", label={"i": i}) for i in range(3)]
    results, _ = run_points(points, "none", fn=lambda p, s: calls.append(p) or {}, stop=stop)
    assert calls == [] and [r["status"] for r in results] == ["unknown"] * 3 and all(not r["report"] for r in results)
    assert sweep.stopped_point(points[0])["reason"].startswith("stopped")
