"""Files the user may not read or write (issue 13): the real command run as a user who is not
root. Each case: one line on stderr naming the file and the problem, exit 2, nothing written
(no report, no placement file, no temporary file left); the standard streams (``--out
/dev/stdout``) work for any user.

Root passes every permission check, so when the tests run as root (CI containers, this
machine) each case runs in a forked child that drops to the unprivileged ``nobody`` (uid and gid
65534) before calling the command. A fresh interpreter started as ``nobody`` is not an option
where the interpreter itself lives under root's private home (mode 0700), so the child reuses the
parent's: everything the command needs is imported, and a first solve is run, before the fork.
When the tests do not run as root they run the command directly as a subprocess; the one case
that needs a file owned by another user then uses a read-only file of the user's own (the
kernel's answer, permission denied, is the same).
"""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tempfile
import threading
from pathlib import Path
from typing import Iterator

import pytest

from solvers.cli import Command, main
from tests.conftest import ROOT
from tests.test_bad_input_corpus import PARDNN, native

NOBODY = 65534
AS_ROOT = os.geteuid() == 0


def _read_all(fd: int, into: list[bytes]) -> None:
    with os.fdopen(fd, "rb") as fh:
        into.append(fh.read())


def run_unprivileged(args: list[str]) -> tuple[int, str, str]:
    """(exit status, stdout, stderr) of ``solve ARGS`` run by a user who is not root."""
    if not AS_ROOT:
        proc = subprocess.run([sys.executable, "-m", "solvers.cli", *args], cwd=ROOT, capture_output=True,
                              text=True, timeout=120)
        return proc.returncode, proc.stdout, proc.stderr
    out_r, out_w = os.pipe()
    err_r, err_w = os.pipe()
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:  # the child: never returns into pytest
        code = 70
        try:
            os.dup2(out_w, 1)
            os.dup2(err_w, 2)
            for fd in (out_r, out_w, err_r, err_w):
                os.close(fd)
            sys.stdout = open(1, "w", closefd=False)
            sys.stderr = open(2, "w", closefd=False)
            os.setgroups([])
            os.setgid(NOBODY)
            os.setuid(NOBODY)
            code = Command().main(args)
        except BaseException as exc:  # noqa: BLE001 - reported through the exit status and stderr
            print(f"child failed: {type(exc).__name__}: {exc}", file=sys.stderr)
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(code)
    os.close(out_w)
    os.close(err_w)
    got_out: list[bytes] = []
    got_err: list[bytes] = []
    readers = [threading.Thread(target=_read_all, args=(out_r, got_out)),
               threading.Thread(target=_read_all, args=(err_r, got_err))]
    for t in readers:
        t.start()
    _, status = os.waitpid(pid, 0)
    for t in readers:
        t.join(60)
    return os.waitstatus_to_exitcode(status), got_out[0].decode(), got_err[0].decode()


@pytest.fixture(scope="module", autouse=True)
def warm_imports(tmp_path_factory: pytest.TempPathFactory) -> None:
    """One solve before any fork: whatever the command imports on its way is then loaded (the
    unprivileged child could not read the interpreter's library under /root)."""
    report = tmp_path_factory.mktemp("warm") / "r.json"
    assert main([str(ROOT / "data" / "tiny.json"), "--time-limit", "5", "--quiet", "--report", str(report),
                 "--out", str(report.with_suffix(".txt"))]) == 0


@pytest.fixture
def shared_dir() -> Iterator[Path]:
    """A directory the unprivileged user can enter (pytest's own tmp_path is root's, mode 0700)
    and write in; removed afterwards."""
    path = Path(tempfile.mkdtemp(prefix="solve-perm-"))
    path.chmod(0o755)
    work = path / "w"
    work.mkdir()
    if AS_ROOT:
        os.chown(work, NOBODY, NOBODY)
    try:
        yield work
    finally:
        subprocess.run(["rm", "-rf", str(path)], check=False)


def unreadable(path: Path) -> None:
    """Make ``path`` unreadable by the user running the command (root's file, mode 0600, for
    ``nobody``; mode 0000 for a non-root test user)."""
    if AS_ROOT:
        os.chown(path, 0, 0)
        path.chmod(0o600)
    else:
        path.chmod(0o000)


def not_writable_dir(path: Path) -> None:
    path.mkdir()
    if AS_ROOT:
        path.chmod(0o755)  # root's, so nobody may not write in it
    else:
        path.chmod(0o555)


def snapshot(folder: Path) -> list[str]:
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*"))


def assert_refused(code: int, out: str, err: str, pattern: str) -> None:
    lines = err.strip().splitlines()
    assert code == 2, (code, err)
    assert len(lines) == 1 and lines[0].startswith("solve: error: ") and re.search(pattern, lines[0]), err
    assert out == "", out


def test_unreadable_graph_file(shared_dir: Path) -> None:
    graph = shared_dir / "g.json"
    graph.write_text(json.dumps(native()))
    unreadable(graph)
    before = snapshot(shared_dir)
    code, out, err = run_unprivileged([str(graph), "--quiet", "--report", str(shared_dir / "r.json")])
    assert_refused(code, out, err, r"g\.json.*(permission denied|Permission denied)")
    assert snapshot(shared_dir) == before


@pytest.mark.parametrize("side", ["times.txt", "devices.txt"])
def test_unreadable_pardnn_side_file(side: str, shared_dir: Path) -> None:
    folder = shared_dir / "g"
    folder.mkdir()
    for name, text in {**PARDNN, "devices.txt": "count::2\nmemory::1GB\n"}.items():
        (folder / name).write_text(text)
    unreadable(folder / side)
    before = snapshot(shared_dir)
    code, out, err = run_unprivileged([str(folder), "--quiet", "--report", str(shared_dir / "r.json")])
    assert_refused(code, out, err, re.escape(side) + r".*(permission denied|Permission denied)")
    assert snapshot(shared_dir) == before


@pytest.mark.parametrize("flag", ["--report", "--out"])
def test_unwritable_output_directory(flag: str, shared_dir: Path) -> None:
    graph = shared_dir / "g.json"
    graph.write_text(json.dumps(native()))
    locked = shared_dir / "locked"
    not_writable_dir(locked)
    before = snapshot(shared_dir)
    code, out, err = run_unprivileged([str(graph), "--quiet", flag, str(locked / "x.out")])
    assert_refused(code, out, err, re.escape(flag) + r": cannot write in directory .*locked.*ermission denied")
    assert snapshot(shared_dir) == before


def test_report_over_a_file_the_user_may_not_write(shared_dir: Path) -> None:
    """Someone else's file in a directory the user can write: replacing it by a rename would
    succeed, but a careful tool writes only what the user may write (as ``>`` would)."""
    graph = shared_dir / "g.json"
    graph.write_text(json.dumps(native()))
    theirs = shared_dir / "theirs.json"
    theirs.write_text("keep me\n")
    if AS_ROOT:
        os.chown(theirs, 0, 0)
    theirs.chmod(0o444 if not AS_ROOT else 0o644)
    before = snapshot(shared_dir)
    code, out, err = run_unprivileged([str(graph), "--quiet", "--report", str(theirs)])
    assert_refused(code, out, err, r"--report: cannot write .*theirs\.json.*permission denied")
    assert snapshot(shared_dir) == before and theirs.read_text() == "keep me\n"


@pytest.mark.parametrize("flag", ["--out", "--report"])
def test_standard_output_is_writable_by_anyone(flag: str, shared_dir: Path) -> None:
    """``/dev/stdout`` is a pipe the parent (root) created: the user cannot reopen it by name, but
    writes through the descriptor it was given."""
    graph = shared_dir / "g.json"
    graph.write_text(json.dumps(native()))
    code, out, err = run_unprivileged([str(graph), "--quiet", "--method", "topo-fill", flag, "/dev/stdout"])
    assert code == 0 and "Traceback" not in err and err == "", (code, err)
    if flag == "--out":
        assert sorted(ln.split()[0] for ln in out.splitlines() if ln.split()[:1] and ln.split()[0] in "abc" and len(ln.split()) == 2) == ["a", "b", "c"], out
    else:
        report = json.loads(out[: out.index("\n}\n") + 3])  # the report comes first, then the summary
        assert report["status"] in ("optimal", "heuristic") and sorted(report["placement"]) == ["a", "b", "c"]
