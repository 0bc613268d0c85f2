"""The side track (solvers/side_track.py, solvers/pipeline.py): when it runs, that its posts are
schedules the evaluator confirms, that it stops when asked or when its parent is gone, and that
the pipeline adopts its better answer and reports it."""
from __future__ import annotations

import math
import os
import socket
import time

import numpy as np
import pytest

import solvers.pipeline as pipeline
import solvers.side_track as side_track
from placement.evaluator import check
from placement.generate import generate
from placement.solution import SolveOptions
from solvers.pipeline import Incumbent, _side_start
from solvers.run import run, verify
from solvers.side_track import Post, Poster, SideTrack, bare, picklable_options, side_track_wanted

TARGET = pipeline.side_track_main


def _problem(n: int = 300, seed: int = 4):
    return generate("cnn", n, seed=seed, devices=4).with_devices(4, math.inf)


def test_a_side_track_runs_only_with_a_core_to_spare_and_time_to_use_it(monkeypatch):
    monkeypatch.setattr(side_track, "cores", lambda: 2)
    assert side_track_wanted(SolveOptions(), 60.0)
    assert side_track_wanted(SolveOptions(), None)  # no limit: the search's own default
    assert not side_track_wanted(SolveOptions(), side_track.SIDE_MIN_SECONDS - 1)
    assert not side_track_wanted(SolveOptions(workers=1), 60.0)  # the user asked for one core
    assert not side_track_wanted(SolveOptions(extra={"side_track": False}), 60.0)
    assert side_track_wanted(SolveOptions(extra={"side_min_seconds": 1.0}), 2.0)
    monkeypatch.setattr(side_track, "cores", lambda: 1)
    assert not side_track_wanted(SolveOptions(), 600.0)


def test_options_cross_to_the_child_without_what_cannot():
    opts = SolveOptions(memory_model="peak", workers=3, seed=7, extra={"lns_window": 60, "hook": lambda: None})
    fields = picklable_options(opts)
    assert fields == {"memory_model": "peak", "workers": 3, "seed": 7, "reserve": 0.0, "extra": {"lns_window": 60}}
    again = SolveOptions(**fields)
    assert again.memory_model == "peak" and again.extra == {"lns_window": 60}


def _start(prob, candidates, seconds: float, warm=None):
    """A side track searching from ``candidates`` for ``seconds`` against an answer of 1.0 x the best of them."""
    answer = min(verify(prob, c, "static").makespan for c in candidates)
    fields = picklable_options(SolveOptions(workers=1, extra={"lns_window": 60, "lns_window_seconds": 0.5}))
    warm = warm or candidates[0]
    return SideTrack(TARGET, prob, fields, [bare(c) for c in candidates], [c.method for c in candidates], bare(warm),
                     0.0, time.monotonic() + seconds, answer, verify)


@pytest.mark.slow  # 6 s: the default suite (CI 9:47 in all, session 42) sits near its cap
def test_the_side_track_posts_schedules_the_evaluator_confirms():
    prob = _problem()
    heft = run(prob, "heft", SolveOptions()).solution
    heft_ms = verify(prob, heft, "static").makespan
    side = _start(prob, [heft], 6.0)
    posts = []
    t = time.monotonic()
    while side.summary is None and time.monotonic() - t < 60:
        posts += side.poll(1.0)
    posts += side.close()
    assert side.summary is not None and not side.summary.startswith("failed"), side.summary
    assert side.proc.poll() is not None  # ended
    assert posts and side.posts == len(posts)
    for post in posts:
        ev = check(prob, post.placement, post.start, "static")  # raises unless a valid schedule that fits
        assert ev.makespan == pytest.approx(post.makespan)
    assert side.best.makespan == min(p.makespan for p in posts) <= heft_ms + 1e-9
    # the band start comes first when it is within reach of the answer; heft otherwise
    assert side.summary.startswith("from band-repair") or side.summary.startswith("from heft")


def test_the_side_track_stops_when_asked_and_when_its_parent_is_gone():
    prob = _problem(600, seed=6)
    etf = run(prob, "etf", SolveOptions()).solution
    side = _start(prob, [etf], 300.0)
    side.poll(5.0)  # started and searching
    side.close()
    assert side.proc.poll() is not None
    orphan = _start(prob, [etf], 300.0)
    orphan.poll(5.0)
    # as when the parent dies: no message, the socket closes (close() alone would wait for the reader thread)
    socket.socket(fileno=os.dup(orphan.conn.fileno())).shutdown(socket.SHUT_RDWR)
    assert orphan.proc.wait(30.0) == 0  # it noticed and ended by itself, long before its 300 s
    orphan.close()


def test_a_child_that_answers_nothing_is_killed_and_reaped_within_the_close_budget():
    """A child deaf to the stop message and to SIGTERM (here: stopped by SIGSTOP, as a child
    busy in a long native call is for a moment) is killed, and close() returns only once it is
    reaped: no zombie is left and poll() tells the truth (CI once saw the kill without the reap
    under load)."""
    import signal

    prob = _problem(300, seed=5)
    etf = run(prob, "etf", SolveOptions()).solution
    side = _start(prob, [etf], 300.0)
    side.poll(3.0)
    os.kill(side.proc.pid, signal.SIGSTOP)
    side.close()
    assert side.proc.poll() == -signal.SIGKILL  # killed, and reaped


def test_a_parent_that_is_stopping_kills_its_child_at_once_and_keeps_what_arrived():
    """On Ctrl-C the command answers STOP_GRACE (0.25 s) after the stop: the side track's close
    then kills the child instead of asking it and waiting up to half a second (a Ctrl-C run was
    answered by the watchdog, without the pipeline's report, while close waited)."""
    import signal

    prob = _problem()
    heft = run(prob, "heft", SolveOptions()).solution
    side = _start(prob, [heft], 300.0)
    posts = []
    t = time.monotonic()
    while not posts and time.monotonic() - t < 60:
        posts += side.poll(1.0)
    assert posts  # it has searched and posted
    posts += side.close(hurry=True)
    assert side.proc.poll() == -signal.SIGKILL  # killed, not asked (asked, it ends with 0)
    assert side.summary == "killed: the run was asked to stop"
    for post in posts:
        ev = check(prob, post.placement, post.start, "static")
        assert ev.makespan == pytest.approx(post.makespan)


def test_a_failing_side_track_says_why():
    fields = picklable_options(SolveOptions(workers=1))
    side = SideTrack(TARGET, None, fields, [], [], None, 0.0, time.monotonic() + 30.0, 1.0, verify)
    t = time.monotonic()
    while side.summary is None and time.monotonic() - t < 60:
        side.poll(1.0)
    side.close()
    assert side.summary.startswith("failed: ") and side.best is None


class _Side:
    def __init__(self, best):
        self.best = best


def test_a_stalled_track_starts_over_from_the_side_tracks_better_answer_only():
    prob = _problem()
    etf, heft = run(prob, "etf", SolveOptions()).solution, run(prob, "heft", SolveOptions()).solution
    (good_ms, good), (bad_ms, bad) = sorted(((verify(prob, s, "static").makespan, s) for s in (etf, heft)),
                                            key=lambda x: x[0])
    assert good_ms < bad_ms
    inc = Incumbent(prob, "static", verify)
    cur = inc.track()
    cur.offer(bad)
    ev = verify(prob, good, "static")
    post = Post("etf", ev.placement, ev.start, None, ev.makespan)
    track = _side_start(inc, cur, _Side(post))
    assert track is not None and track[1] == "the side track's best"
    assert track[0].makespan == pytest.approx(good_ms) and inc.makespan == pytest.approx(good_ms)
    worse = verify(prob, bad, "static")
    assert _side_start(inc, track[0], _Side(Post("heft", worse.placement, worse.start, None, worse.makespan))) is None
    assert _side_start(inc, track[0], _Side(None)) is None


@pytest.mark.slow  # 11 s: the default suite (CI 10:08 in all on a loaded machine, session 42) sits near its cap
def test_auto_with_a_side_track_reports_it_and_answers_the_evaluators_best(monkeypatch):
    monkeypatch.setattr(side_track, "cores", lambda: 2)
    prob = _problem(500, seed=3)
    extra = {"exact_max_nodes": 50, "lns_window": 60, "lns_window_seconds": 0.5, "side_min_seconds": 1.0}
    res = run(prob, "auto", SolveOptions(time_limit=10, extra=extra))
    side = next(p for p in res.history if p.get("name") == "side-track")
    assert "answers posted" in side["note"] and "failed" not in side["note"], side["note"]
    best = float(side["note"].split("the best ")[1].split(";")[0])
    ev = check(prob, res.evaluation.placement, res.evaluation.start, "static")
    assert ev.makespan == pytest.approx(res.evaluation.makespan)
    assert ev.makespan <= best * (1 + 1e-6)  # the side track's best was offered, and the answer is no worse
    off = run(prob, "auto", SolveOptions(time_limit=4, extra={**extra, "side_track": False}))
    assert not any(p.get("name") == "side-track" for p in off.history)


def test_auto_goes_on_without_a_side_track_it_cannot_start(monkeypatch):
    monkeypatch.setattr(side_track, "cores", lambda: 2)

    def no_process(*args, **kwargs):
        raise OSError("no more processes")

    monkeypatch.setattr(pipeline, "SideTrack", no_process)
    prob = _problem(500, seed=3)
    lines = []
    res = run(prob, "auto", SolveOptions(time_limit=4, extra={"exact_max_nodes": 50, "lns_window": 60,
                                                                "lns_window_seconds": 0.5, "side_min_seconds": 1.0}),
              progress=lines.append)
    assert any("side track: not started (no more processes)" in line for line in lines)
    assert not any(p.get("name") == "side-track" for p in res.history)
    check(prob, res.evaluation.placement, res.evaluation.start, "static")


def test_a_held_back_post_goes_out_when_its_time_comes(monkeypatch):
    """The child posts at most every POST_SECONDS; an answer held back by that limit is not kept
    from the parent until the next one (a slice can pass without another)."""
    monkeypatch.setattr(side_track, "POST_SECONDS", 0.2)
    sent = []

    class Conn:
        send = staticmethod(sent.append)

    poster = Poster(Conn())
    one = np.zeros(3)
    poster.offer(Post("start", one, one, None, 2.0))
    poster.offer(Post("start", one, one, None, 1.5))
    assert [body.makespan for _, body in sent] == [2.0]  # the second is held back
    t = time.monotonic()
    while len(sent) < 2 and time.monotonic() - t < 10.0:
        time.sleep(0.05)
    assert [body.makespan for _, body in sent] == [2.0, 1.5]
    poster.done("over")
    assert sent[-1] == ("done", "over") and len(sent) == 3  # nothing pending was sent twice
