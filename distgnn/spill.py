"""Matrices on local disk: what a run under ``--memory-limit`` keeps out of RAM.

A run whose state does not fit under its memory limit keeps its ``[N, d]`` matrices
(features, saved aggregates, activations) in files of a folder of its own on local disk
(:class:`SpillFolder`).  Each file holds one matrix *panel-major*: the columns cut into
panels of ``p`` columns, each panel ``[N, p]`` stored whole, in row order, one after the
other.  So both kinds of pass read and write in long sequential runs:

- a *panel pass* (an aggregation, which reads source rows at random but is linear per
  column) reads and writes one panel ``[N, p]`` at a time, one contiguous range each;
- a *row pass* (the dense work: products, bias, activation, dropout) reads and writes
  ``R`` rows across all panels, ``ceil(d / p)`` contiguous ranges of ``R p`` values each.

The files are read and written with ``pread``/``pwrite`` into the process's own buffers,
not memory-mapped, so a file's pages never count in the process's resident memory; the
reads of the next block and the writes of the last run on two I/O threads while the
caller computes (:meth:`SpillFolder.read_ahead`, :meth:`SpillFolder.write_behind`).
:class:`MemoryMatrix` is the same interface over an array in RAM, for the matrices that
fit there.
"""
from __future__ import annotations

import mmap
import os
import shutil
import threading
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Callable

import numpy as np

from .errors import DistGNNError
from .storage import format_bytes, remove_leftovers
from .timing import PhaseTimer

#: the name of a run's spill folder under ``--spill-dir``: ``.distgnn-spill.tmp-PID-rankR``
#: (hidden; removed at the run's end, or by the next run once the process is gone)
SPILL_NAME = "distgnn-spill"

# pread/pwrite move at most this many bytes per call (Linux's limit is 2 GiB - 4 KiB)
_IO_BYTES = 1 << 30


CACHE_LINE = 64


def empty_aligned(shape: tuple[int, ...], dtype) -> np.ndarray:
    """An uninitialised C-contiguous array whose first byte sits on a cache-line boundary
    (what the SpMM kernels gather from without a copy; a read block's buffer here)."""
    dtype = np.dtype(dtype)
    count = int(np.prod(shape))
    buffer = np.empty(count * dtype.itemsize + CACHE_LINE, np.uint8)
    start = -buffer.ctypes.data % CACHE_LINE
    return buffer[start:start + count * dtype.itemsize].view(dtype).reshape(shape)


class SpillError(DistGNNError):
    """A spill folder that cannot be made, or a disk without the room a run needs."""


def check_spill_room(directory: str | Path, nbytes: int) -> None:
    """Refuse, in one line naming ``directory``, a spill of ``nbytes`` that its filesystem
    has no room for (what the run needs and what is free)."""
    path = Path(directory).absolute()
    while not path.exists() and path != path.parent:
        path = path.parent
    free = shutil.disk_usage(path).free
    if nbytes > free:
        raise SpillError(f"--spill-dir {directory}: the run needs {format_bytes(nbytes)} of "
                         f"disk for its spilled state but {path} has {format_bytes(free)} "
                         "free; name a larger local disk with --spill-dir, or raise "
                         "--memory-limit")


class SpillFolder:
    """A run's folder of spill files under ``directory``, and its two I/O threads.

    The folder is ``directory/.distgnn-spill.tmp-PID-rankR``, made when opened; the folders
    of runs whose process is gone (killed while spilling) are removed first, so a later run
    leaves no stale files behind.  :meth:`close` removes the folder.  Counters:
    ``bytes_read``, ``bytes_written`` (every matrix's traffic), ``peak_bytes`` (the most
    the files held at once) and, in ``timer``, ``io_wait`` (seconds the computation waited
    for I/O).
    """

    def __init__(self, directory: str | Path, rank: int = 0, timer: PhaseTimer | None = None):
        directory = Path(directory)
        if directory.exists() and not directory.is_dir():
            raise SpillError(f"--spill-dir {directory} is not a directory")
        try:
            directory.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise SpillError(f"--spill-dir {directory}: cannot make it: "
                             f"{e.strerror or e}") from None
        remove_leftovers(directory / SPILL_NAME)
        self.path = directory / f".{SPILL_NAME}.tmp-{os.getpid()}-rank{rank}"
        try:
            self.path.mkdir()
        except OSError as e:
            raise SpillError(f"--spill-dir {directory}: cannot write there: "
                             f"{e.strerror or e}") from None
        self.bytes_read = self.bytes_written = self.peak_bytes = 0
        self.timer = timer if timer is not None else PhaseTimer()
        self._count = threading.Lock()  # the counters are added to from both I/O threads
        self.matrices: list[DiskMatrix] = []
        self._reader = ThreadPoolExecutor(1, thread_name_prefix="spill-read")
        self._writer = ThreadPoolExecutor(1, thread_name_prefix="spill-write")
        self._writes: list[Future] = []

    def matrix(self, name: str, rows: int, cols: int, dtype, panel: int) -> "DiskMatrix":
        """A new ``[rows, cols]`` matrix of ``dtype`` in panels of ``panel`` columns."""
        m = DiskMatrix(self, self.path / f"{name}.bin", rows, cols, dtype, panel)
        self.matrices = [*(k for k in self.matrices if not k.closed), m]
        self.peak_bytes = max(self.peak_bytes, self.used_bytes())
        return m

    def count(self, read: int = 0, written: int = 0) -> None:
        """Add to the byte counters (from any thread)."""
        with self._count:
            self.bytes_read += read
            self.bytes_written += written

    def used_bytes(self) -> int:
        """Bytes of the folder's files now."""
        return sum(m.nbytes for m in self.matrices if not m.closed)

    def read_ahead(self, load: Callable[[], np.ndarray]) -> Future:
        """``load()`` on the read thread; :meth:`wait` takes its result."""
        return self._reader.submit(load)

    def write_behind(self, store: Callable[[], None]) -> None:
        """``store()`` on the write thread, after the writes before it; at most two wait,
        so that the buffers they hold stay bounded."""
        while len(self._writes) >= 2:
            self.wait(self._writes.pop(0))
        self._writes.append(self._writer.submit(store))

    def wait(self, future: Future):
        """``future``'s result, its wait added to the timer's ``io_wait``."""
        with self.timer("io_wait"):
            return future.result()

    def flush(self) -> None:
        """Wait for every write submitted."""
        while self._writes:
            self.wait(self._writes.pop(0))

    def close(self) -> None:
        """Wait for the I/O threads, then remove the folder and its files."""
        try:
            for f in self._writes:
                f.exception()  # the run is ending: a write's error does not matter now
            self._writes.clear()
            self._reader.shutdown(wait=True)
            self._writer.shutdown(wait=True)
        finally:
            for m in self.matrices:
                m.close()
            shutil.rmtree(self.path, ignore_errors=True)


class MemoryMatrix:
    """A ``[rows, cols]`` matrix in RAM with :class:`DiskMatrix`'s interface."""

    closed = False

    def __init__(self, rows: int, cols: int, dtype, panel: int):
        self.rows, self.cols, self.panel = rows, cols, max(1, min(panel, cols or 1))
        self.dtype = np.dtype(dtype)
        self.array = np.empty((rows, cols), self.dtype)

    @property
    def panels(self) -> int:
        return -(-self.cols // self.panel)

    def columns(self, j: int) -> tuple[int, int]:
        return j * self.panel, min(self.cols, (j + 1) * self.panel)

    def read_panel(self, j: int) -> np.ndarray:
        c0, c1 = self.columns(j)
        out = empty_aligned((self.rows, c1 - c0), self.dtype)
        out[...] = self.array[:, c0:c1]
        return out

    def write_panel(self, j: int, values: np.ndarray) -> None:
        c0, c1 = self.columns(j)
        self.array[:, c0:c1] = values

    def read_rows(self, r0: int, r1: int) -> np.ndarray:
        return self.array[r0:r1]

    def write_rows(self, r0: int, values: np.ndarray) -> None:
        self.array[r0:r0 + len(values)] = values

    def close(self) -> None:
        self.array = np.empty((0, self.cols), self.dtype)


class DiskMatrix(MemoryMatrix):
    """A ``[rows, cols]`` matrix in a panel-major file of its :class:`SpillFolder`.

    Panel ``j`` holds columns ``[j p, min((j + 1) p, cols))`` as a C-order block
    ``[rows, p_j]`` at byte ``rows * j * p * itemsize``.  Reads return new arrays; writes
    take any array of the right shape.  The file is allocated whole when made (a full disk
    fails there, not mid-epoch).
    """

    def __init__(self, folder: SpillFolder, path: Path, rows: int, cols: int, dtype,
                 panel: int):
        self.rows, self.cols, self.panel = rows, cols, max(1, min(panel, cols or 1))
        self.dtype = np.dtype(dtype)
        self.folder, self.path = folder, path
        self.nbytes = rows * cols * self.dtype.itemsize
        self.fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
        self.closed = False
        try:
            if self.nbytes:
                os.posix_fallocate(self.fd, 0, self.nbytes)
        except OSError as e:
            self.close()
            raise SpillError(f"spill file {path}: cannot allocate "
                             f"{format_bytes(self.nbytes)}: {e.strerror or e}") from None

    def _offset(self, j: int, r0: int = 0) -> int:
        c0, c1 = self.columns(j)
        return (self.rows * c0 + r0 * (c1 - c0)) * self.dtype.itemsize

    def _pread(self, out: np.ndarray, offset: int) -> None:
        view = memoryview(out.reshape(-1).view(np.uint8))
        done = 0
        while done < len(view):
            got = os.preadv(self.fd, [view[done:done + _IO_BYTES]], offset + done)
            if got <= 0:
                raise SpillError(f"spill file {self.path}: short read at byte "
                                 f"{offset + done}")
            done += got
        self.folder.count(read=len(view))

    def _pwrite(self, values: np.ndarray, offset: int) -> None:
        view = memoryview(np.ascontiguousarray(values, self.dtype).reshape(-1).view(np.uint8))
        done = 0
        while done < len(view):
            done += os.pwritev(self.fd, [view[done:done + _IO_BYTES]], offset + done)
        self.folder.count(written=len(view))

    def read_panel(self, j: int) -> np.ndarray:
        c0, c1 = self.columns(j)
        out = empty_aligned((self.rows, c1 - c0), self.dtype)
        self._pread(out, self._offset(j))
        return out

    def write_panel(self, j: int, values: np.ndarray) -> None:
        self._pwrite(values, self._offset(j))

    def read_rows(self, r0: int, r1: int) -> np.ndarray:
        out = empty_aligned((r1 - r0, self.cols), self.dtype)
        for j in range(self.panels):
            c0, c1 = self.columns(j)
            block = np.empty((r1 - r0, c1 - c0), self.dtype)
            self._pread(block, self._offset(j, r0))
            out[:, c0:c1] = block
        return out

    def write_rows(self, r0: int, values: np.ndarray) -> None:
        for j in range(self.panels):
            c0, c1 = self.columns(j)
            self._pwrite(values[:, c0:c1], self._offset(j, r0))

    def close(self) -> None:
        """Close and remove the file (its bytes are free again)."""
        if not self.closed:
            self.closed = True
            os.close(self.fd)
            self.path.unlink(missing_ok=True)


def npy_rows(array: np.ndarray, r0: int, r1: int) -> np.ndarray:
    """Rows ``[r0, r1)`` of ``array``, read with ``pread`` when it is a memory-mapped
    ``.npy`` file (so its pages never count in this process's resident memory), else
    sliced."""
    if not isinstance(array, np.memmap) or array.filename is None or not array.flags.c_contiguous:
        return np.asarray(array[r0:r1])
    row_bytes = array.dtype.itemsize * int(np.prod(array.shape[1:], dtype=np.int64))
    out = np.empty((r1 - r0, *array.shape[1:]), array.dtype)
    view = memoryview(out.reshape(-1).view(np.uint8))
    fd = os.open(array.filename, os.O_RDONLY)
    try:
        done, offset = 0, array.offset + r0 * row_bytes
        while done < len(view):
            got = os.preadv(fd, [view[done:done + _IO_BYTES]], offset + done)
            if got <= 0:
                raise SpillError(f"{array.filename}: short read at byte {offset + done}")
            done += got
    finally:
        os.close(fd)
    return out


def release_pages(array: np.ndarray) -> None:
    """Drop the pages of a memory-mapped ``array`` from this process's resident memory.

    ``array``: a ``.npy`` read with ``mmap_mode``; its pages stay in the page cache.
    Nothing for an array in memory.  What reads a mapped file in blocks calls it after
    each, so that the resident memory it takes stays a block's."""
    base = array
    while base is not None and not isinstance(getattr(base, "_mmap", None), mmap.mmap):
        base = getattr(base, "base", None)
    if base is not None:
        base._mmap.madvise(mmap.MADV_DONTNEED)
