"""Progress lines of ``auto``: the heartbeat speaks during the phases (phase, incumbent, bound,
gap, moves tried) and ``--quiet`` silences everything."""
from __future__ import annotations

import re
import threading
import time

import pytest

from placement.generate import generate
from placement.solution import SolveOptions
from solvers.cli import main
from solvers.progress import Heartbeat, gap_text
from solvers.run import run
from tests.conftest import DATA

LINE = re.compile(r"^(?P<phase>[\w-]+): incumbent=(?P<inc>\S+) bound=(?P<bound>\S+) gap=(?P<gap>\S+)"
                  r"(?: moves=(?P<moves>\d+))? elapsed=\S+s$")


def test_gap_text():
    assert gap_text(None, 1.0) == "-"
    assert gap_text(200.0, 150.0) == "25.00%"
    assert gap_text(100.0, 120.0) == "0.00%"  # never negative


def test_heartbeat_speaks_while_a_phase_runs_and_reads_its_counters():
    lines: list[str] = []
    heard = threading.Event()
    moves = [0]

    def say(msg: str) -> None:
        lines.append(msg)
        if "moves=" in msg and int(LINE.match(msg)["moves"]) >= 3:
            heard.set()

    with Heartbeat(say, lambda: 120.0, 100.0, interval=0.05) as hb:
        hb.enter("refine", moves=lambda: moves[0], best=lambda: 110.0)
        for _ in range(2000):  # a phase at work: it only bumps its counter
            moves[0] += 1
            if heard.wait(0.005):
                break
    assert heard.is_set()
    m = LINE.match(lines[-1])
    assert m["phase"] == "refine"
    assert float(m["inc"]) == 110.0  # the phase's own better answer, not yet offered
    assert m["gap"] == "9.09%"


def test_heartbeat_without_a_callback_starts_no_thread():
    with Heartbeat(None, lambda: None, 1.0, interval=0.01) as hb:
        assert hb._thread is None
        hb.say("nothing")  # no error, nothing printed


@pytest.mark.slow  # 7 s; the heartbeat itself is checked above, the CLI's lines below
def test_auto_heartbeat_names_phases_with_moves_in_refine():
    prob = generate("transformer", 400, seed=3, devices=3, memory_fraction=0.5)
    lines: list[str] = []
    extra = {"progress_seconds": 0.1, "exact_max_nodes": 50, "refine_share": 0.4, "lns_window": 60, "lns_window_seconds": 0.5}
    res = run(prob, "auto", SolveOptions(time_limit=8, workers=2, extra=extra), progress=lines.append)
    assert res.feasible
    status = [m for m in map(LINE.match, lines) if m]
    phases = {m["phase"] for m in status}
    assert {"warm-start", "exact-lns", "refine"} <= phases
    assert any(m["phase"] == "exact-lns" and m["moves"] is not None for m in status), "no heartbeat during LNS"
    beats = [m for m in status if m["phase"] == "refine" and m["moves"] is not None]
    assert beats, "no heartbeat during refine"
    for m in status:
        if m["inc"] != "-":
            # every incumbent shown is a real answer: never below the final one's bound or above the warm start
            assert float(m["inc"]) >= res.lower_bound * (1 - 1e-6)
    # moves tried only grow within the phase
    counts = [int(m["moves"]) for m in beats]
    assert counts == sorted(counts)


@pytest.mark.parametrize("quiet", [True, False])
def test_cli_quiet_prints_no_progress(tmp_path, capsys, quiet):
    args = [str(DATA / "pardnn_example"), "--time-limit", "3"] + (["--quiet"] if quiet else [])
    assert main(args) == 0
    err = capsys.readouterr().err
    assert (err == "") == quiet


def test_cli_keeps_speaking_outside_autos_heartbeat(tmp_path, capsys, monkeypatch):
    """A method without a heartbeat of its own (CP-SAT) still gets a line whenever nothing was said
    for KEEPALIVE_SECONDS (shortened here), naming the phase with the bound; the first line says
    what was loaded."""
    import solvers.cli as cli
    from placement.formats.native import write_problem

    monkeypatch.setattr(cli, "KEEPALIVE_SECONDS", 0.3)
    path = tmp_path / "g.json"
    write_problem(generate("transformer", nodes=400, devices=4, seed=3), path)
    assert main([str(path), "--method", "cpsat", "--time-limit", "4"]) in (0, 1)  # 1: no answer in 4 s
    lines = [ln.split("] ", 1)[1] for ln in capsys.readouterr().err.splitlines() if ln.startswith("[")]
    assert lines[0].startswith("loaded transformer-400-s3: 391 nodes, 679 edges, 4 devices")
    alive = [ln for ln in lines[1:] if ln.startswith("cpsat: incumbent=")]
    assert len(alive) >= 3, lines
    assert all(re.search(r"bound=[0-9.e+]+ elapsed=[0-9.]+s$", ln) for ln in alive), alive


def test_the_warm_start_shows_a_members_published_answer_until_the_incumbent_has_one(monkeypatch):
    """While the portfolio's members answer one after another the pipeline's incumbent is empty;
    the lines show the best answer a member published for this problem, never "-" after a value."""
    from heuristics import portfolio as portfolio_mod
    prob = generate("transformer", 400, seed=3, devices=3, memory_fraction=0.5)
    real = portfolio_mod.MEMBERS["etf"]

    def slow_etf(problem, opts):  # a member that takes a while, after the quick ones published
        time.sleep(1.0)
        return real(problem, opts)

    monkeypatch.setitem(portfolio_mod.MEMBERS, "etf", slow_etf)
    lines: list[str] = []
    extra = {"progress_seconds": 0.1, "exact_max_nodes": 50, "lns_window": 60, "lns_window_seconds": 0.5}
    res = run(prob, "auto", SolveOptions(time_limit=6, workers=1, extra=extra), progress=lines.append)
    warm = [m["inc"] for m in map(LINE.match, lines) if m and m["phase"] == "warm-start"]
    # ETF's second alone gives ten lines; the quick members (single first) answered before it
    assert len(warm) >= 10 and warm.count("-") <= 2
    shown = [i for i, v in enumerate(warm) if v != "-"]
    assert all(v != "-" for v in warm[shown[0]:])
    assert all(float(v) >= res.evaluation.makespan - 1e-9 for v in warm[shown[0]:])


def test_known_makespan_is_the_incumbents_else_a_published_answer_for_the_same_problem():
    from placement.solution import BestSoFar
    from solvers.pipeline import Incumbent, known_makespan
    from solvers.run import verify
    prob, other = generate("cnn", 60, seed=1, devices=2), generate("cnn", 60, seed=2, devices=2)
    inc, best = Incumbent(prob, "static", verify), BestSoFar()
    assert known_makespan(inc, best) is None
    single = run(prob, "single", SolveOptions()).solution
    best.publish_answer(other, single)
    assert known_makespan(inc, best) is None  # another problem's answer is not shown
    best.publish_answer(prob, single)
    assert known_makespan(inc, best) == single.objective
    etf = run(prob, "etf", SolveOptions()).solution
    ev = inc.offer(etf)
    assert known_makespan(inc, best) == ev.makespan != single.objective
