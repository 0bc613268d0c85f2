"""Writing outputs as a careful Unix tool does (issue 13): atomic replacement of regular files with
the umask's mode, devices / FIFOs / symlinks written through and never replaced, write failures
as one-line errors, a closed stdout pipe handled quietly, ids that a placement line cannot carry
refused before solving, and reports that are strict JSON."""
from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from placement.formats import load_problem
from placement.output import OutputError, check_writable, write_atomic
from placement.report import read_placement
from solvers.cli import main
from tests.conftest import DATA, ROOT

TINY = DATA / "tiny.json"


def strict_json(text: str) -> dict:
    def refuse(token: str) -> None:
        raise AssertionError(f"not JSON: {token}")
    return json.loads(text, parse_constant=refuse)


def test_new_file_mode_follows_the_umask(tmp_path: Path) -> None:
    old = os.umask(0o027)
    try:
        write_atomic(tmp_path / "a.txt", "x")
    finally:
        os.umask(old)
    assert stat.S_IMODE((tmp_path / "a.txt").stat().st_mode) == 0o640
    old = os.umask(0o022)
    try:
        write_atomic(tmp_path / "b.txt", "x")
    finally:
        os.umask(old)
    assert stat.S_IMODE((tmp_path / "b.txt").stat().st_mode) == 0o644


def test_replacing_keeps_the_files_mode(tmp_path: Path) -> None:
    path = tmp_path / "r.json"
    path.write_text("old")
    path.chmod(0o604)
    write_atomic(path, "new")
    assert path.read_text() == "new" and stat.S_IMODE(path.stat().st_mode) == 0o604


def test_symlink_is_followed_not_replaced(tmp_path: Path) -> None:
    target = tmp_path / "real.json"
    target.write_text("old")
    link = tmp_path / "link.json"
    link.symlink_to(target)
    write_atomic(link, "new")
    assert link.is_symlink() and target.read_text() == "new"


def test_fifo_is_written_through(tmp_path: Path) -> None:
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    got: list[bytes] = []
    reader = threading.Thread(target=lambda: got.append(fifo.read_bytes()))
    reader.start()
    write_atomic(fifo, "a" * 200_000)  # bigger than a pipe's buffer
    reader.join(10)
    assert stat.S_ISFIFO(fifo.stat().st_mode)
    assert got == [b"a" * 200_000]


def test_dev_null_stays_a_device() -> None:
    write_atomic("/dev/null", "x")
    assert stat.S_ISCHR(os.stat("/dev/null").st_mode)


def test_full_device_is_an_error() -> None:
    if not os.path.exists("/dev/full"):
        pytest.fail("/dev/full is missing on this machine")
    with pytest.raises(OutputError, match="No space left"):
        write_atomic("/dev/full", "x" * 10)
    assert stat.S_ISCHR(os.stat("/dev/full").st_mode)


def test_interrupted_write_leaves_the_old_file_and_no_temporary(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A second Ctrl-C while writing: the complete old report or the complete new one, nothing else."""
    path = tmp_path / "r.json"
    path.write_text("complete old report")

    def interrupt(fd: int) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(os, "fsync", interrupt)
    with pytest.raises(KeyboardInterrupt):
        write_atomic(path, "new report")
    assert path.read_text() == "complete old report"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r.json"]


def test_check_writable(tmp_path: Path) -> None:
    check_writable(tmp_path / "new.json")
    check_writable("/dev/null")
    for bad, message in ((tmp_path, "is a directory"), (tmp_path / "no" / "x", "does not exist"), ("/proc/x.json", "cannot write")):
        with pytest.raises(OutputError, match=message):
            check_writable(bad)
    assert list(tmp_path.iterdir()) == []  # the probe left nothing behind


def test_report_to_dev_full_is_exit_2_with_the_answer_printed(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = main([str(TINY), "--method", "topo-fill", "--quiet", "--report", "/dev/full"])
    captured = capsys.readouterr()
    assert code == 2
    assert captured.err.strip().splitlines() == ["solve: error: cannot write '/dev/full': No space left on device"]
    assert "makespan:" in captured.out  # the answer is not lost
    assert stat.S_ISCHR(os.stat("/dev/full").st_mode)


def test_report_to_dev_stdout(tmp_path: Path) -> None:
    """--report /dev/stdout works for any user, with stdout a pipe or a redirected file."""
    proc = subprocess.run([sys.executable, "-m", "solvers.cli", str(TINY), "--method", "topo-fill", "--quiet",
                           "--report", "/dev/stdout"], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0 and proc.stderr == ""
    report_text = proc.stdout[: proc.stdout.index("\n}\n") + 3]
    assert strict_json(report_text)["status"] == "heuristic"
    out = tmp_path / "out.txt"
    with open(out, "w") as fh:
        fh.write("before\n")
        fh.flush()
        proc = subprocess.run([sys.executable, "-m", "solvers.cli", str(TINY), "--method", "topo-fill", "--quiet",
                               "--report", "/dev/stdout"], cwd=ROOT, stdout=fh, stderr=subprocess.PIPE, text=True, timeout=120)
    text = out.read_text()
    assert proc.returncode == 0 and text.startswith("before\n{\n") and "makespan:" in text


def test_closed_stdout_pipe_is_quiet(tmp_path: Path) -> None:
    """``solve ... | head -1``: no BrokenPipe traceback, and the exit status is the answer's."""
    report = tmp_path / "r.json"
    proc = subprocess.Popen([sys.executable, "-m", "solvers.cli", str(TINY), "--method", "topo-fill", "--quiet",
                             "--explain", "--report", str(report), "--out", "/dev/stdout"],
                            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert proc.stdout is not None and proc.stderr is not None
    first = proc.stdout.readline()
    proc.stdout.close()  # the reader goes away, as head does
    err = proc.stderr.read().decode()
    code = proc.wait(timeout=120)
    assert first.strip()
    assert "Traceback" not in err and err == ""
    assert code == 0
    assert strict_json(report.read_text())["status"] == "heuristic"


def test_placement_file_round_trips_and_has_the_umask_mode(tmp_path: Path) -> None:
    out = tmp_path / "pl.txt"
    old = os.umask(0o022)
    try:
        assert main([str(TINY), "--method", "topo-fill", "--quiet", "--out", str(out)]) == 0
    finally:
        os.umask(old)
    problem = load_problem(TINY)
    assert read_placement(out, problem).shape == (problem.n,)
    assert stat.S_IMODE(out.stat().st_mode) == 0o644


@pytest.mark.parametrize("bad_id", ["a\nb", " a", "a ", "", "#a", "a\rb"])
def test_ids_a_placement_line_cannot_carry_are_refused_for_out(bad_id: str, tmp_path: Path,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    doc = {"devices": {"count": 2}, "nodes": [{"id": bad_id, "time": 1, "out_bytes": 0, "param_bytes": 0},
                                              {"id": "z", "time": 1, "out_bytes": 0, "param_bytes": 0}]}
    path = tmp_path / "p.json"
    path.write_text(json.dumps(doc))
    out = tmp_path / "pl.txt"
    assert main([str(path), "--method", "topo-fill", "--quiet", "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and repr(bad_id) in err and not out.exists()
    # The report (JSON) carries any id: without --out the same graph solves.
    report = tmp_path / "r.json"
    assert main([str(path), "--method", "topo-fill", "--quiet", "--report", str(report)]) == 0
    assert set(strict_json(report.read_text())["placement"]) == {bad_id, "z"}


def test_huge_but_finite_times_give_finite_json(tmp_path: Path) -> None:
    """Times near the overflow limit are accepted only while their total stays finite; the report
    then holds finite numbers only (no NaN, no Infinity)."""
    doc = {"devices": {"count": 2}, "nodes": [{"id": "a", "time": 1e99, "out_bytes": 0, "param_bytes": 0},
                                              {"id": "b", "time": 1e99, "out_bytes": 0, "param_bytes": 0}],
           "edges": [{"src": "a", "dst": "b", "comm": 1e98}]}
    path = tmp_path / "p.json"
    path.write_text(json.dumps(doc))
    report = tmp_path / "r.json"
    assert main([str(path), "--quiet", "--time-limit", "10", "--report", str(report)]) == 0
    rep = strict_json(report.read_text())
    assert rep["status"] == "optimal" and rep["makespan"] == pytest.approx(2e99)
    assert all(v is not None for v in rep["start"].values())
