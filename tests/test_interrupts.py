"""Ctrl-C and SIGTERM through the real command (issue 13): one line on stderr, never a traceback;
while solving, the first signal keeps the best answer so far and writes the report; a second
Ctrl-C leaves either the complete report or none. Subprocesses; no timed assertions (the
timeouts below only keep a broken build from hanging the suite)."""
from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from placement.formats.native import write_problem
from placement.generate import generate
from solvers.side_track import cores
from tests.conftest import ROOT


@pytest.fixture(scope="module")
def big_graph(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("graphs") / "t20k.json"
    write_problem(generate("transformer", nodes=20_000, devices=4, seed=1), path)
    return path


@pytest.fixture(scope="module")
def mid_graph(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("graphs") / "t2k.json"
    write_problem(generate("transformer", nodes=2_000, devices=4, seed=1), path)
    return path


def spawn(graph: Path, report: Path, *extra: str, quiet: bool = True) -> subprocess.Popen:
    args = [sys.executable, "-m", "solvers.cli", str(graph), "--report", str(report), *extra]
    return subprocess.Popen(args + (["--quiet"] if quiet else []), cwd=ROOT, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def report_state(report: Path) -> str:
    if not report.exists():
        return "none"
    json.loads(report.read_text())  # a half-written report fails here
    return "complete"


def wait_for_line(proc: subprocess.Popen, prefix: str) -> list[str]:
    """Read stderr lines until one contains ``prefix`` (progress lines of the pipeline)."""
    assert proc.stderr is not None
    seen = []
    for line in proc.stderr:
        seen.append(line)
        if prefix in line:
            return seen
    raise AssertionError(f"the run ended before printing {prefix!r}: {seen}")


@pytest.mark.parametrize("delay", [0.3, 1.0, 2.0])
def test_sigint_while_starting_or_loading(delay: float, big_graph: Path, tmp_path: Path) -> None:
    report = tmp_path / "r.json"
    proc = spawn(big_graph, report, "--time-limit", "60")
    time.sleep(delay)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=120)
    assert "Traceback" not in err, err
    if proc.returncode == 130:  # stopped before solving: one line, nothing written
        assert len(err.strip().splitlines()) == 1 and err.startswith("solve: interrupted while"), err
        assert report_state(report) == "none"
    else:  # the signal came after loading: the best answer so far, reported (none yet: "unknown", exit 1)
        assert err.strip().splitlines() == ["solve: SIGINT received, stopping with the best answer so far"]
        rep = json.loads(report.read_text())
        assert rep["interrupted"] is True
        assert (proc.returncode, rep["status"] == "unknown") in ((0, False), (1, True)), (proc.returncode, rep["status"])


# SIGTERM takes SIGINT's handler (test_signal_rules_per_stage): its whole run is with the slow tests
@pytest.mark.parametrize("sig", [signal.SIGINT, pytest.param(signal.SIGTERM, marks=pytest.mark.slow)])
def test_signal_while_solving_keeps_the_best_answer(sig: signal.Signals, mid_graph: Path, tmp_path: Path) -> None:
    report = tmp_path / "r.json"
    proc = spawn(mid_graph, report, "--time-limit", "120", quiet=False)
    wait_for_line(proc, "warm-start:")
    proc.send_signal(sig)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err
    assert "Traceback" not in err
    assert [ln for ln in err.splitlines() if ln.startswith("solve:")] == [
        f"solve: {sig.name} received, stopping with the best answer so far"]
    rep = json.loads(report.read_text())
    assert rep["interrupted"] is True and rep["status"] in ("heuristic", "feasible", "optimal")
    assert rep["makespan"] is not None and "(interrupted: best answer so far)" in out


def test_second_sigint_leaves_a_complete_report_or_none(mid_graph: Path, tmp_path: Path) -> None:
    report = tmp_path / "r.json"
    proc = spawn(mid_graph, report, "--time-limit", "120", quiet=False)
    wait_for_line(proc, "warm-start:")
    proc.send_signal(signal.SIGINT)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=120)
    assert "Traceback" not in err, err
    lines = [ln for ln in err.splitlines() if ln.startswith("solve:")]
    if proc.returncode == 130:
        assert lines[-1].startswith("solve: interrupted while"), err
        assert report_state(report) in ("none", "complete")
    else:  # the second signal came after the run had stopped and written its answer
        assert proc.returncode == 0 and report_state(report) == "complete"



def test_signal_rules_per_stage(capsys: pytest.CaptureFixture[str]) -> None:
    """Loading: the first signal ends the run. Solving: the first stops the methods, a second
    Ctrl-C aborts. Writing: the first lets the outputs finish, a second Ctrl-C aborts."""
    from solvers.cli import Command

    loading = Command()
    with pytest.raises(KeyboardInterrupt):
        loading._on_signal(signal.SIGINT, None)
    for stage, said in (("solving", "stopping with the best answer so far"), ("writing the outputs", "finishing them")):
        command = Command()
        command.stage = stage
        command._on_signal(signal.SIGTERM, None)
        assert command.stop.is_set() and said in capsys.readouterr().err
        command._on_signal(signal.SIGTERM, None)  # a second SIGTERM changes nothing
        with pytest.raises(KeyboardInterrupt):
            command._on_signal(signal.SIGINT, None)


# A command whose phase PHASE runs a pure-Python loop that never looks at the stop flag (as the
# communication bound, a clustering pass or the coarsening once did), announcing itself on stderr.
DEAF_COMMAND = """
import sys
from solvers.early_signals import install_early_handlers
install_early_handlers()
import heuristics.portfolio, placement.bounds, solvers.pipeline, solvers.restarts, solvers.run
from solvers.cli import run_as_program

def deaf(*args, **kwargs):
    print("deaf: entered", file=sys.stderr, flush=True)
    try:
        while True:
            pass
    finally:
        print("deaf: unwound", file=sys.stderr, flush=True)

target = sys.argv.pop(1)
if target == "bounds":
    placement.bounds.heads = deaf  # the communication bounds' heads and tails
elif target == "warm-start":
    heuristics.portfolio.MEMBERS["etf"] = deaf  # after single, m-topo, greedy-fill and pardnn answered
elif target == "exact-coarse: coarsening":
    solvers.pipeline.BIG_EXACT = "coarse"
    solvers.pipeline.coarsen = deaf
elif target == "exact-lns":
    solvers.pipeline.lns = deaf
    solvers.pipeline.WindowSearch = deaf  # big_search="alternate": after refine's first slice
elif target == "refine":
    solvers.pipeline._lns_phase = lambda *args: solvers.pipeline.Phase("exact-lns", status="skipped")  # refine sooner
    solvers.pipeline.refine = deaf
    solvers.pipeline.RefineSearch = deaf  # big_search="alternate": the first slice
elif target == "restart":
    solvers.pipeline.STALL_SLICES = solvers.pipeline.STALL_GAIN = 1.0  # stalled after a slice's seconds
    solvers.pipeline.RESTART_MIN_GAP = 0.0  # however close to the bound
    solvers.restarts.band_start = deaf  # the first start of the next track
run_as_program()
"""


# exact-lns and refine come after a warm start and more (12-22 s each): they run with the slow tests
@pytest.mark.parametrize("phase", ["bounds", "warm-start", "exact-coarse: coarsening",
                                   pytest.param("exact-lns", marks=pytest.mark.slow),
                                   pytest.param("refine", marks=pytest.mark.slow),
                                   pytest.param("restart", marks=pytest.mark.slow)])
def test_sigint_unwinds_a_phase_deaf_to_the_stop_flag(phase: str, mid_graph: Path, tmp_path: Path) -> None:
    """The first Ctrl-C in any phase, however deaf: the computation is unwound (not left running
    beside the report), one line on stderr, the best answer so far in a complete report that names
    the phase, or "unknown" with the valid bound known so far when there is no answer yet."""
    report = tmp_path / "r.json"
    # a restart starts the next track only without the side track (which otherwise supplies it)
    one = ["--workers", "1"] if phase == "restart" else []
    proc = subprocess.Popen([sys.executable, "-c", DEAF_COMMAND, phase, str(mid_graph), "--report", str(report),
                             "--time-limit", "120", "--quiet", *one], cwd=ROOT, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    seen = wait_for_line(proc, "deaf: entered")
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=120)
    err = "".join(seen) + err
    assert "Traceback" not in err, err
    assert [ln for ln in err.splitlines() if ln.startswith("solve:")] == [
        "solve: SIGINT received, stopping with the best answer so far"], err
    assert "deaf: unwound" in err  # ended by the stop, not left running
    rep = json.loads(report.read_text())
    assert rep["interrupted"] is True and rep["interrupted_in"] == phase
    assert "did not stop within" in rep["reason"]
    # The phases entered so far survive the watchdog's answer, the last one cut where the stop landed.
    names = [p["name"] for p in rep["phases"]]
    assert names[0] == "bounds" and names[-1] == phase and rep["phases"][-1]["status"] == "cut"
    assert all(p["seconds"] >= 0 for p in rep["phases"])
    if phase == "bounds":  # no answer yet: honest "unknown", exit 1, with the cheap bounds
        assert proc.returncode == 1 and rep["status"] == "unknown" and rep["makespan"] is None
        assert rep["lower_bound"] > 0
    else:  # the warm start's answer (at least), re-checked, exit 0
        assert proc.returncode == 0 and rep["status"] == "heuristic" and rep["makespan"] >= rep["lower_bound"] > 0
        assert len(rep["placement"]) == rep["problem"]["nodes"] and rep["explain"]["critical_path_steps"] >= 1


def test_sigint_while_writing_lets_the_report_finish(mid_graph: Path, tmp_path: Path) -> None:
    """A signal while the outputs are written: they finish (complete, not marked interrupted: the
    run was not), one line says so, exit 0."""
    report = tmp_path / "r.json"
    slow_explain = DEAF_COMMAND.replace("run_as_program()\n", """
import solvers.cli, time
real_explain = solvers.cli.explain
def slow_explain(*args):
    print("deaf: entered", file=sys.stderr, flush=True)
    until = time.monotonic() + 0.5
    while time.monotonic() < until:
        pass
    return real_explain(*args)
solvers.cli.explain = slow_explain
run_as_program()
""")
    # etf answers as soon as it has run (auto searched until its 4 s limit, and on a starved machine
    # that limit passed before any answer, so nothing was written and explain never ran)
    proc = subprocess.Popen([sys.executable, "-c", slow_explain, "none", str(mid_graph), "--report", str(report),
                             "--method", "etf", "--time-limit", "60", "--quiet"], cwd=ROOT, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    seen = wait_for_line(proc, "deaf: entered")
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=120)
    err = "".join(seen) + err
    assert proc.returncode == 0 and "Traceback" not in err, err
    assert [ln for ln in err.splitlines() if ln.startswith("solve:")] == [
        "solve: SIGINT received while writing the outputs; finishing them"]
    rep = json.loads(report.read_text())
    assert rep["interrupted"] is False and "interrupted_in" not in rep and rep["status"] in ("heuristic", "feasible")
    assert rep["explain"]["critical_path_steps"] >= 1 and "status: " in out


def test_fast_report_encoding_is_json_dumps(tmp_path: Path) -> None:
    """The report's big node maps are encoded by a faster path (Ctrl-C latency at 200K nodes): the
    text is exactly json.dumps', escapes included, and NaN is still refused."""
    from placement.report import _encode

    keys = [f"n{i}" for i in range(1500)] + ['quote"d', "back\\slash", "tab\there", "naïve", "雪", "new\nline"]
    placement = {k: i % 7 for i, k in enumerate(keys)}
    start = {k: i / 3.0 + 1e-300 * (i % 2) for i, k in enumerate(keys)}
    for value in (placement, start, {**start, "x": None}, {**placement, "b": True}, {**placement, "f": 1.5}):
        assert _encode(value) == json.dumps(value, allow_nan=False)
    with pytest.raises(ValueError):
        _encode({**start, "x": float("nan")})


def test_stop_watch_repeats_the_stop_until_the_block_ends() -> None:
    """CP-SAT ignores a stop_search that comes before its solve created its search, so the watch
    repeats the call while the block runs; it never calls after the block, and a MIP's (repeat=None)
    is called once."""
    import threading

    from placement.solution import SolveOptions, stop_watch

    for repeat, at_least, at_most in ((0.005, 3, None), (None, 1, 1)):
        opts = SolveOptions(stop=threading.Event())
        calls: list[float] = []
        opts.stop.set()
        with stop_watch(opts, lambda: calls.append(time.monotonic()), repeat=repeat):
            time.sleep(0.1)
        ended = time.monotonic()
        time.sleep(0.05)
        assert len(calls) >= at_least and (at_most is None or len(calls) <= at_most)
        assert all(t <= ended for t in calls)


def test_stop_watch_calls_nothing_without_a_stop() -> None:
    import threading

    from placement.solution import SolveOptions, stop_watch

    opts = SolveOptions(stop=threading.Event())
    calls: list[int] = []
    with stop_watch(opts, lambda: calls.append(1)):
        time.sleep(0.12)
    assert calls == []


def _children(pid: int) -> list[int]:
    """The processes whose parent is ``pid`` (from /proc)."""
    kids = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid:
            kids.append(int(stat.parent.name))
    return kids


@pytest.mark.slow
@pytest.mark.skipif(not Path("/proc").is_dir(), reason="reads the process table from /proc")
@pytest.mark.skipif(cores() < 2, reason="a side track needs a second core")
def test_sigint_to_the_solve_process_alone_ends_its_side_track(mid_graph: Path, tmp_path: Path) -> None:
    """A signal sent to the solve process only (kill, not the terminal's whole process group):
    the side track (solvers/side_track.py) is stopped with it, and the report names it."""
    report = tmp_path / "r.json"
    proc = spawn(mid_graph, report, "--time-limit", "120", "--workers", "2", quiet=False)
    wait_for_line(proc, "refine:")  # the alternating search, with its side track beside it
    kids = _children(proc.pid)
    assert kids, "no side track was started"
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0 and "Traceback" not in err, err
    assert not any(Path(f"/proc/{kid}").exists() for kid in kids)  # ended and reaped, not orphaned
    rep = json.loads(report.read_text())
    assert rep["interrupted"] is True
    assert any(p["name"] == "side-track" for p in rep["phases"])


def test_sigint_ends_a_frontier_with_what_it_has(mid_graph: Path, tmp_path: Path) -> None:
    """--frontier ran its solves in the main thread, where a signal waits for a native solve to end,
    and ignored the stop: every point ran to its share (15-18 s after Ctrl-C on a 570-node model,
    session 40). Now the first signal ends the running solve with its answer and skips the points
    not started: with a 600 s limit the sweep answers, the points after the interrupted solve say
    they were stopped, and the report is whole."""
    report = tmp_path / "f.json"
    args = [sys.executable, "-m", "solvers.cli", str(mid_graph), "--frontier", "--points", "3", "--parallel", "none",
            "--memory-model", "peak", "--time-limit", "600", "--report", str(report)]
    proc = subprocess.Popen(args, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    time.sleep(8)  # loading and part of the unconstrained solve (its share: 150 s)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=60)  # only keeps a broken build from hanging the suite
    assert "Traceback" not in err and "SIGINT received" in err
    rep = json.loads(report.read_text())
    assert [p["status"] for p in rep["points"]] == ["unknown"] * len(rep["points"])
    assert rep["unconstrained_makespan"] is not None  # the interrupted solve kept its answer
