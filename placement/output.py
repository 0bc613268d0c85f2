"""Writing output files as a careful Unix tool does.

- A regular file (new or existing) is replaced atomically: the text goes to a temporary file in the
  same directory, is flushed to disk, and is renamed over the target, so a crash, a full disk or a
  second Ctrl-C leaves either the complete old file or the complete new one, never half of one.
- The new file gets the mode a plain ``open()`` would give (0666 less the umask) or, when it
  replaces a file, that file's mode; not mkstemp's 0600. A file the user may not write is not
  replaced, although the rename would succeed in a directory the user may write.
- A symlink is followed: the file it points to is replaced, the link stays a link.
- Anything that is not a regular file (``/dev/stdout``, ``/dev/null``, a FIFO, a terminal, a
  device) is written in place, never replaced by a regular file; a write that fails there
  (``/dev/full``) is an error like any other.

Every failure is an :class:`OutputError` whose message names the path and the reason.
"""
from __future__ import annotations

import fcntl
import os
import stat
import sys
import tempfile
from pathlib import Path


class OutputError(OSError):
    """An output cannot be written: the message names the file and why."""


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def _target(path: Path) -> tuple[Path, os.stat_result | None]:
    """The file a rename would replace (symlinks followed) and the stat of what ``path`` reaches
    (None if nothing yet). /dev/stdout reaches a pipe through a name that is no file: stat it, do
    not resolve it."""
    try:
        st = os.stat(path)
    except (FileNotFoundError, NotADirectoryError):
        st = None
    return Path(os.path.realpath(path)), st


def _reason(exc: OSError) -> str:
    return exc.strerror or str(exc)


def _in_place(path: Path, st: os.stat_result | None) -> bool:
    """Written where it is rather than replaced: not a regular file, or reached through /dev or
    /proc (``/dev/stdout`` redirected to a file must write into that open file, not replace it)."""
    if st is not None and not stat.S_ISREG(st.st_mode):
        return True
    return st is not None and os.path.abspath(path).startswith(("/dev/", "/proc/"))


def check_writable(path: str | Path) -> None:
    """Raise OutputError now, before any work, if ``path`` cannot be written later: its directory
    is missing or not writable (a temporary file is created and removed to find out, which also
    catches read-only file systems and /proc), or it names a directory."""
    path = Path(path)
    real, st = _target(path)
    if st is not None and stat.S_ISDIR(st.st_mode):
        raise OutputError(f"{str(path)!r} is a directory")
    if _in_place(path, st):
        assert st is not None
        own = _standard_stream(st)
        # Our own stdout may be a pipe we could not reopen by name (another user's), yet we write
        # through the descriptor we were given: what counts is that it is open for writing.
        if not (_open_for_writing(own) if own is not None else os.access(path, os.W_OK)):
            raise OutputError(f"cannot write {str(path)!r}: permission denied")
        return
    if st is not None and not os.access(real, os.W_OK):
        # A rename would replace it (the directory is ours), but the user may not write it: refuse,
        # as a shell's ``>`` would.
        raise OutputError(f"cannot write {str(path)!r}: permission denied")
    folder = real.parent
    if not folder.is_dir():
        raise OutputError(f"directory {str(path.parent)!r} does not exist")
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{real.name}.", suffix=".check", dir=folder)
    except OSError as exc:
        raise OutputError(f"cannot write in directory {str(folder)!r}: {_reason(exc)}") from None
    os.close(fd)
    os.unlink(tmp)


def write_atomic(path: str | Path, data: str | bytes) -> None:
    """Write ``data`` to ``path`` (see the module docstring); raises OutputError on failure."""
    path = Path(path)
    raw = data.encode() if isinstance(data, str) else data
    real, st = _target(path)
    if _in_place(path, st):
        assert st is not None
        _write_in_place(path, raw, st)
        return
    mode = stat.S_IMODE(st.st_mode) if st is not None else 0o666 & ~_umask()
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{real.name}.", suffix=".tmp", dir=real.parent)
    except OSError as exc:
        raise OutputError(f"cannot write {str(path)!r}: {_reason(exc)}") from None
    try:
        try:
            os.fchmod(fd, mode)
            view = memoryview(raw)
            while view:
                view = view[os.write(fd, view):]
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, real)
    except BaseException as exc:  # a second Ctrl-C included: no half file, no temporary left behind
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        if isinstance(exc, OSError):
            raise OutputError(f"cannot write {str(path)!r}: {_reason(exc)}") from None
        raise


def _standard_stream(st: os.stat_result) -> int | None:
    """1 or 2 when ``st`` is this process's stdout or stderr (e.g. ``/dev/stdout``), else None."""
    for fd, stream in ((1, sys.stdout), (2, sys.stderr)):
        try:
            if os.path.samestat(os.fstat(fd), st):
                stream.flush()
                return fd
        except (OSError, ValueError):
            continue
    return None


def _open_for_writing(fd: int) -> bool:
    try:
        return fcntl.fcntl(fd, fcntl.F_GETFL) & os.O_ACCMODE in (os.O_WRONLY, os.O_RDWR)
    except OSError:
        return False


def _write_in_place(path: Path, raw: bytes, st: os.stat_result) -> None:
    """Write into what ``path`` reaches. Our own stdout/stderr is written through its open
    descriptor, sharing its offset with what the program prints (``--report /dev/stdout > f``)."""
    own = _standard_stream(st)
    try:
        fd = own if own is not None else os.open(path, os.O_WRONLY | os.O_APPEND)
    except OSError as exc:
        raise OutputError(f"cannot write {str(path)!r}: {_reason(exc)}") from None
    try:
        view = memoryview(raw)
        while view:
            view = view[os.write(fd, view):]
    except BrokenPipeError:
        raise  # the reader went away (``| head``): the caller decides, quietly
    except OSError as exc:
        raise OutputError(f"cannot write {str(path)!r}: {_reason(exc)}") from None
    finally:
        if own is None:
            os.close(fd)

