"""Writing what a user keeps, without ever losing what was there.

The one home of every durable writer (partitions, checkpoints, metrics, JSON results,
charts, reports, scripts).

The rules, in the order a writer applies them:

1. **Check outputs before the work** (:func:`check_output_file`, :func:`check_output_dir`):
   a path that is a directory where a file is wanted (or the reverse), or whose directory
   is missing or not writable, is refused with one line at start-up, not after the work.
2. **Replace only what this tool wrote** (:func:`check_replaceable`): an existing target is
   replaced only when its owner recognises it as its own output (a partition directory with
   its ``meta.json``, a checkpoint with its manifest, a JSON result, a chart carrying the
   project's PNG tag, ...); anything else is refused with one line saying why.
3. **Write beside, then rename** (:func:`write_atomic`, :class:`AtomicStream`): data goes
   to ``.NAME.tmp-PID`` in the target's directory, is fsync'ed and renamed over ``NAME``
   (then the directory is fsync'ed), so a reader sees the old file or the new one, never a
   half-written one.  The temporary file takes the user's umask; a failed write, or a stop
   on the way (Ctrl-C, or SIGTERM: :mod:`distgnn.signals`), removes it.
4. **Leave nothing behind** (:func:`remove_leftovers`): the hidden ``.NAME.tmp-PID...`` and
   ``.NAME.old-PID`` entries of a writer that was killed are removed by the next writer of
   ``NAME`` once their process is gone.

Writers that may run at once for one target (jobs of a cluster making the same partition
directory) take turns with :func:`exclusive`.
"""
from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import re
import shutil
import socket
import time
from pathlib import Path
from typing import Callable

from .errors import DistGNNError

__all__ = ["AtomicStream", "OutputError", "check_distinct_outputs", "check_json_output",
           "check_output_dir", "check_output_file", "check_replaceable", "exclusive", "file_head",
           "file_lock",
           "format_bytes", "free_space_problem", "fsync_path", "pid_alive", "remove_leftovers",
           "temp_path", "user_mode", "write_atomic", "write_failed", "write_json"]


class OutputError(DistGNNError):
    """An output path that cannot be written, or an existing file that must not be replaced."""


def free_space_problem(target: str | Path, nbytes: float) -> str | None:
    """Why ``nbytes`` cannot be written at ``target`` (or under it, if it does not exist
    yet), or ``None`` when its filesystem has the room."""
    path = Path(target).absolute()
    while not path.exists() and path != path.parent:
        path = path.parent
    free = shutil.disk_usage(path).free
    if nbytes > free:
        return (f"needs {format_bytes(nbytes)} but the filesystem has only "
                f"{format_bytes(free)} free")
    return None


def fsync_path(path: str | Path) -> None:
    """Make the data of the file ``path``, or the entries of the directory ``path`` (new
    names, renames), durable."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def user_mode(directory: bool) -> int:
    """The permission bits a new file (``0o666``) or directory (``0o777``) gets under the
    process's umask."""
    mask = os.umask(0)
    os.umask(mask)
    return (0o777 if directory else 0o666) & ~mask


# ---- 1. outputs checked at start-up ------------------------------------------------------------
def _nearest_existing(path: Path) -> Path:
    path = path.absolute()
    while not path.exists() and path != path.parent:
        path = path.parent
    return path


def check_output_file(path: str | Path, flag: str) -> Path:
    """``path`` as a file this run can create or replace, else :class:`OutputError` naming
    ``flag``: not a directory, in an existing, writable directory."""
    path = Path(path)
    if path.is_dir():
        raise OutputError(f"{flag} {path}: is a directory; give a file name")
    parent = path.absolute().parent
    if not parent.is_dir():
        raise OutputError(f"{flag} {path}: directory {parent} does not exist")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise OutputError(f"{flag} {path}: directory {parent} is not writable")
    if path.exists() and not path.is_file():
        raise OutputError(f"{flag} {path}: not a regular file")
    return path


def check_output_dir(path: str | Path, flag: str) -> Path:
    """``path`` as a directory this run can create or write into, else
    :class:`OutputError` naming ``flag``."""
    path = Path(path)
    if path.exists() and not path.is_dir():
        raise OutputError(f"{flag} {path}: exists and is not a directory")
    base = _nearest_existing(path)
    if not base.is_dir():
        raise OutputError(f"{flag} {path}: {base} is not a directory")
    if not os.access(base, os.W_OK | os.X_OK):
        raise OutputError(f"{flag} {path}: {base} is not writable")
    return path


# ---- 2. replace only our own -------------------------------------------------------------------
def check_distinct_outputs(outputs: dict[str, str | Path | None],
                           inputs: dict[str, str | Path | None] | None = None) -> None:
    """Refuse, before any work, two outputs on one path, or an output on or in an input.

    Refused: two outputs of one run on the same path, and an output that is one of the
    run's ``inputs`` or lies inside an input directory (``{flag: path}``; ``None``: not
    given; an input that is not an existing path, a dataset name, is skipped).  Paths are
    compared resolved (``res/./c.pt``, ``res/../res/c.pt`` and a symbolic link to it are one
    file), so no output silently replaces another or what the run reads.  An output inside
    another output directory is allowed (a run folder holding the checkpoints and the
    metrics file)."""
    def resolved(paths: dict, existing: bool) -> list[tuple[str, Path]]:
        return [(flag, Path(os.path.realpath(path))) for flag, path in paths.items()
                if path is not None and (not existing or Path(path).exists())]

    given = resolved(outputs, False)
    for i, (flag, path) in enumerate(given):
        for other, there in given[i + 1:]:
            if path == there:
                raise OutputError(f"{flag} and {other} name the same path {there}: give "
                                  "each output a path of its own")
        for source, there in resolved(inputs or {}, True):
            if path == there or (there.is_dir() and there in path.parents):
                where = "is" if path == there else "is inside"
                raise OutputError(f"{flag} {path} {where} {source} {there}, which the run "
                                  "reads: write the output elsewhere")


def check_replaceable(path: str | Path, recognise: Callable[[Path], bool], what: str) -> None:
    """Refuse to replace an existing ``path`` unless ``recognise(path)`` says it is ``what``
    (an output of this tool).  Nothing is read beyond what ``recognise`` reads."""
    path = Path(path)
    if not (path.exists() or path.is_symlink()):
        return
    if path.is_symlink():  # written beside and renamed over: the link would go, not its file
        raise OutputError(f"{path} is a symbolic link (to {os.readlink(path)}); refusing to "
                          "replace it with a file (give the path it points to, or another)")
    try:
        ours = recognise(path)
    except (OSError, ValueError):
        ours = False
    if not ours:
        raise OutputError(f"{path} exists and is not {what}; refusing to replace it (move it "
                          "away or choose another path)")


def file_head(path: Path, nbytes: int = 4096) -> bytes:
    """The first ``nbytes`` of the regular file ``path`` (``b""`` for anything else)."""
    if not path.is_file():
        return b""
    with open(path, "rb") as f:
        return f.read(nbytes)


# ---- 3. write beside, then rename --------------------------------------------------------------
def temp_path(target: Path, kind: str = "tmp") -> Path:
    """``.NAME.KIND-PID`` beside ``target``: hidden, and owned by this process."""
    return target.parent / f".{target.name}.{kind}-{os.getpid()}"


def _commit(tmp: Path, target: Path) -> None:
    os.replace(tmp, target)
    fsync_path(target.absolute().parent)


def write_failed(path: Path, error: OSError, existed: bool) -> OutputError:
    """The one line for a write of ``path`` that failed (a full disk, a quota, a file size
    limit, an I/O error): the file, why, the room left, and what was kept -- the earlier
    ``path`` unchanged, or nothing there (the temporary file is removed)."""
    try:
        room = f", {format_bytes(shutil.disk_usage(_nearest_existing(path)).free)} free there"
    except OSError:
        room = ""
    kept = (f"the earlier {path.name} is unchanged" if existed
            else f"nothing was written at {path.name}")
    return OutputError(f"{path}: writing it failed ({error.strerror or error}{room}); {kept}")


def write_atomic(path: str | Path, data: bytes | str) -> Path:
    """Write ``data`` to ``path`` durably and atomically (see the module docstring); a
    failed write raises :func:`write_failed`'s error, leaving ``path`` as it was."""
    path = Path(path)
    remove_leftovers(path)
    tmp = temp_path(path)
    existed = path.exists()
    try:
        with open(tmp, "wb") as f:
            f.write(data.encode() if isinstance(data, str) else data)
            f.flush()
            os.fsync(f.fileno())
        _commit(tmp, path)
    except OSError as e:
        tmp.unlink(missing_ok=True)
        raise write_failed(path, e, existed) from None
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return path


class AtomicStream:
    """A text file written line by line (a metrics file) that replaces ``path`` only on
    :meth:`commit`; until then it is ``.NAME.tmp-PID`` beside it, flushed after every
    :meth:`write` (so it can be followed), and :meth:`discard` removes it."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        remove_leftovers(self.path)
        self.existed = self.path.exists()
        self.tmp = temp_path(self.path)
        self.file = open(self.tmp, "w", encoding="utf-8")

    def write(self, text: str) -> None:
        try:
            self.file.write(text)
            self.file.flush()
        except OSError as e:
            self.discard()
            raise write_failed(self.path, e, self.existed) from None

    def commit(self) -> None:
        try:
            self.file.flush()
            os.fsync(self.file.fileno())
            self.file.close()
            _commit(self.tmp, self.path)
        except OSError as e:
            self.discard()
            raise write_failed(self.path, e, self.existed) from None
        except BaseException:  # a stop (Ctrl-C, SIGTERM) on the way: no temporary is left
            self.discard()
            raise

    def discard(self) -> None:
        try:
            self.file.close()
        except OSError:  # the buffer's last flush failed: the file goes anyway
            pass
        self.tmp.unlink(missing_ok=True)


# seconds a waiter for a lock waits before saying, once, who holds it
LOCK_NOTICE_S = 3.0


def _open_lock(path: str | Path) -> int:
    """The lock file ``path`` opened for writing, made when missing, never through a
    symbolic link (``O_NOFOLLOW``: a dangling link would make a file where it points)."""
    return os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o666)


def _is_at(fd: int, path: str | Path) -> bool:
    """Whether the open file ``fd`` is still the one named ``path`` (a holder that is done
    removes the name: a waiter that then gets the lock of the removed file must retry)."""
    try:
        there = os.stat(path, follow_symlinks=False)
    except FileNotFoundError:
        return False
    mine = os.fstat(fd)
    return (there.st_dev, there.st_ino) == (mine.st_dev, mine.st_ino)


def recorded_holder(record: str) -> tuple[int, str] | None:
    """The ``(pid, host)`` the holder of a lock wrote into it (:func:`_acquire`), from the
    lock file's text ``record``; ``None`` where it holds none."""
    words = record.split()
    if len(words) >= 2 and words[0].isdigit():
        return int(words[0]), words[1]
    return None


def _holder(fd: int) -> str:
    """Who holds the lock of ``fd``, as its holder recorded it (:func:`_acquire`)."""
    try:
        held = recorded_holder(os.pread(fd, 256, 0).decode(errors="replace"))
    except OSError:
        held = None
    return (f"process {held[0]} on {held[1]}" if held is not None
            else "another process (it recorded no process id)")


def _acquire(path: Path, wait_s: float | None, waiting: Callable[[str], None] | None,
             prepare: Callable[[], None] | None = None) -> int | None:
    """A descriptor of ``path`` holding its exclusive ``flock``, or ``None`` after a wait.

    ``None`` comes after ``wait_s`` seconds of another holder (``None``: wait as long as
    it holds it).
    The holder's process id and host go into the file, so that ``waiting``, called once
    after :data:`LOCK_NOTICE_S` seconds of waiting, can say who holds it.  ``prepare`` is
    called before each open (to make the folder a previous holder may have removed); the
    open's ``OSError`` (a directory or a symbolic link in the lock's place) is raised."""
    started = time.monotonic()
    said = False
    while True:
        if prepare is not None:
            prepare()
        try:
            fd = _open_lock(path)
        except FileNotFoundError:
            if prepare is None:
                raise
            continue  # the folder went with a previous holder's lock: make it again
        try:
            while True:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except OSError as e:
                    if e.errno not in (errno.EAGAIN, errno.EACCES):
                        raise
                waited = time.monotonic() - started
                if wait_s is not None and waited > wait_s:
                    os.close(fd)
                    return None
                if waiting is not None and not said and waited >= LOCK_NOTICE_S:
                    waiting(_holder(fd))
                    said = True
                time.sleep(0.05)
            if _is_at(fd, path):
                os.ftruncate(fd, 0)
                os.pwrite(fd, f"{os.getpid()} {socket.gethostname()}\n".encode(), 0)
                return fd
        except BaseException:
            os.close(fd)
            raise
        os.close(fd)  # a previous holder removed this file: lock the one at ``path`` now


def _release(fd: int, path: Path | None = None) -> None:
    """Unlock and close ``fd``; with ``path``, remove the lock file first, while still held
    (a waiter that then gets the lock of the removed file sees it and takes a new one)."""
    try:
        if path is not None and _is_at(fd, path):
            path.unlink()
        fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)


@contextlib.contextmanager
def file_lock(path: str | Path, wait_s: float | None = None,
              waiting: Callable[[str], None] | None = None):
    """An exclusive ``flock`` on ``path`` for the block; yields whether it was had.

    ``path`` is made when missing and kept.  The lock is not had when ``path`` cannot be
    opened (never through a symbolic link), nor after ``wait_s`` seconds of another holder
    (``None``: wait as long as it holds it).  ``waiting`` is told once, after
    :data:`LOCK_NOTICE_S` seconds, who holds it.

    A process that dies releases its lock with its file descriptors, so no holder is waited
    for after it is gone.  Linux takes ``flock`` on NFS as a lock on the server, so processes
    on several nodes of a shared filesystem take turns too."""
    try:
        fd = _acquire(Path(path), wait_s, waiting)
    except OSError:
        fd = None
    if fd is None:
        yield False
        return
    try:
        yield True
    finally:
        _release(fd)


def _made_folders(folder: Path) -> list[Path]:
    """Make ``folder`` and its missing parents; returns those this call made, outermost
    first."""
    missing = []
    while not folder.exists() and folder != folder.parent:
        missing.append(folder)
        folder = folder.parent
    made = []
    for path in reversed(missing):
        try:
            path.mkdir()
        except FileExistsError:  # another writer made it meanwhile: not ours to remove
            continue
        made.append(path)
    return made


@contextlib.contextmanager
def exclusive(target: str | Path, waiting: Callable[[str], None] | None = None):
    """Hold the lock of ``target`` while the block runs, waiting for another holder.

    The lock is an exclusive ``flock`` of the hidden ``.NAME.lock`` beside ``target``, for
    writers of ``target`` that may run at once; ``waiting`` is given one line, once, after
    :data:`LOCK_NOTICE_S` seconds of waiting: who holds it.  Nothing of the lock is left
    after the block: the lock file is removed while still held (a waiter on it then takes a
    new one), and the folders made for it are removed again when the block left them empty.
    A lock file that cannot be opened (a directory or a symbolic link in its place, a
    folder that is not writable) is refused with :class:`OutputError`."""
    target = Path(target)
    lock = target.parent / f".{target.name}.lock"
    made: list[Path] = []
    notice = None if waiting is None else lambda holder: waiting(
        f"waiting for the lock {lock}: {holder} holds it while it writes {target}")
    try:
        try:
            fd = _acquire(lock, None, notice, lambda: made.extend(_made_folders(lock.parent)))
        except OSError as e:
            kind = ("is a symbolic link" if e.errno == errno.ELOOP
                    else "is a directory" if e.errno == errno.EISDIR
                    else f"cannot be opened: {e.strerror or e}")
            raise OutputError(f"{lock}: the lock file of {target.name} {kind}; writers of "
                              f"{target} take turns by it: move it away, or give another "
                              "output path") from None
        try:
            yield
        finally:
            _release(fd, lock)
    finally:
        _remove_empty(made)


def _remove_empty(made: list[Path]) -> None:
    """Remove the folders of ``made`` (outermost first) from the innermost out, while they
    are empty."""
    for folder in reversed(made):
        try:
            folder.rmdir()
        except OSError:  # holds an output, or another writer's lock: kept
            break


@contextlib.contextmanager
def made_folders(folder: str | Path):
    """Make ``folder`` and its missing parents for the block; afterwards remove those this
    call made that the block left empty, so that a write that failed or was stopped leaves
    no folder of its own behind."""
    made = _made_folders(Path(folder))
    try:
        yield
    finally:
        _remove_empty(made)


# ---- 4. no leftovers ---------------------------------------------------------------------------
def pid_alive(pid: int) -> bool:
    """Whether a process ``pid`` exists on this host."""
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's process
        return True
    return True


def remove_leftovers(target: str | Path) -> list[Path]:
    """Remove ``.NAME.tmp-PID...`` and ``.NAME.old-PID`` beside ``target`` whose process is
    gone (a writer killed mid-write); returns what was removed."""
    target = Path(target)
    directory = target.absolute().parent
    pattern = re.compile(rf"^\.{re.escape(target.name)}\.(tmp|old)-(\d+)(-.*)?$")
    removed = []
    try:
        entries = list(directory.iterdir())
    except OSError:
        return removed
    for entry in entries:
        m = pattern.match(entry.name)
        if not m or pid_alive(int(m.group(2))):
            continue
        if entry.is_dir() and not entry.is_symlink():
            shutil.rmtree(entry, ignore_errors=True)
        else:
            entry.unlink(missing_ok=True)
        removed.append(entry)
    return removed


# ---- JSON results of the tools ---------------------------------------------------------------
# what a JSON written by this project carries, so that a later run may replace it
WRITTEN_BY = "written_by"


def is_result_json(path: Path) -> bool:
    """A JSON object written by this project's tools (or by earlier versions of them, which
    carried no mark: a benchmark result, or partition statistics)."""
    try:
        data = json.loads(path.read_bytes())
    except (ValueError, RecursionError):
        return False
    if not isinstance(data, dict):
        return False
    return (str(data.get(WRITTEN_BY, "")).startswith("distgnn")
            or {"benchmark", "machine"} <= data.keys()
            or {"replication_factor", "edge_balance"} <= data.keys())


def check_json_output(path: str | None, flag: str = "--json") -> None:
    """At start-up: ``path`` can be written and, if it exists, is a result of ours."""
    if path:
        check_replaceable(check_output_file(path, flag), is_result_json,
                          "a JSON result written by distgnn")


def write_json(path: str, result: dict, writer: str) -> None:
    """``result`` as JSON at ``path``, marked as written by ``writer``."""
    check_json_output(path)
    write_atomic(path, json.dumps({WRITTEN_BY: writer, **result}, indent=1))


def format_bytes(nbytes: float) -> str:
    """``nbytes`` in GiB, MiB or KiB with one decimal, e.g. ``"7450.6 GiB"``."""
    if nbytes >= 1 << 60:  # int arithmetic: an absurd declared size must not overflow a float
        return f"{int(nbytes) >> 60:,} EiB" if nbytes < 1 << 80 else "over a million EiB"
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20)):
        if nbytes >= scale:
            return f"{nbytes / scale:.1f} {unit}"
    return f"{nbytes / 1024:.1f} KiB"
