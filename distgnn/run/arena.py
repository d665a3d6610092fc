"""The planned memory arena: an epoch's large blocks planned once and reused.

Each epoch of full-batch training allocates the same large blocks (activations, gradients,
the kernels' outputs and workspaces) in the same order.  Left to malloc, a block of
:data:`~distgnn.run.memory.RETURN_BLOCKS_FROM` bytes or more is a fresh mapping, faulted in
page by page at first touch and unmapped when freed (:func:`~distgnn.run.memory.return_freed_blocks`),
so every epoch pays its page faults and system calls again.

The arena (``arena.cpp``, installed as torch's CPU allocator) records the first epoch's
large blocks: their sizes and, on one event clock, when each was allocated and freed.  It
then plans them into one slab: block ``b`` gets an offset ``o_b`` such that blocks alive
at the same time never overlap (largest first, each at the lowest offset free over its
lifetime), so the slab's size is at least the largest sum of live blocks at any moment and
usually equal to it.  The slab is allocated and touched once; from the next epoch on the
``k``-th large block of an epoch is served at ``o_k``.  A block the plan does not foresee
(another size, or its place still held) comes from torch's default allocator and is
counted as a miss; an epoch with a miss is recorded again and planned anew.

Only blocks allocated on the thread that runs the epoch are planned; blocks still alive at
the end of the recorded epoch (gradients kept for the optimizer, the optimizer's state) are
not, and come from the default allocator each time.  Allocations outside an epoch
(evaluation, checkpoints) are not the arena's.

The arena is C++ because torch lets only native code replace its CPU allocator; it is
compiled on first use with the system's C++ compiler against the installed torch's headers
(a few seconds, once per torch version: cached beside this module or, where the package
is not writable, in ``~/.cache/distgnn``).  Without a compiler, training runs without it.
"""
from __future__ import annotations

import contextlib
import ctypes
import dataclasses
import hashlib
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import torch

from ..kernels.jit import LOCK_WAIT_S
from ..storage import file_lock
from .memory import RETURN_BLOCKS_FROM

SOURCE = Path(__file__).with_name("arena.cpp")
KINDS = ("train", "eval")  # the epochs that have a plan each


@dataclasses.dataclass(frozen=True)
class ArenaStats:
    """The slab and the last epoch: ``slab_bytes`` the slab (the largest plan's);
    ``blocks`` the large blocks in the last epoch's plan, ``planned`` of them in the slab; ``epoch_blocks`` the large blocks of
    the last epoch, ``epoch_misses`` of them not served as planned; ``plans`` made so far."""

    slab_bytes: int
    blocks: int
    planned: int
    epoch_blocks: int
    epoch_misses: int
    plans: int


class Arena:
    """The process's arena (:func:`install`); :meth:`epoch` brackets one training epoch."""

    def __init__(self, library: ctypes.CDLL):
        self._lib = library
        library.distgnn_arena_end_epoch.restype = ctypes.c_uint64

    @contextlib.contextmanager
    def epoch(self, kind: str = "train"):
        """Serve the large blocks allocated on this thread inside the block from the plan
        of ``kind`` (``"train"`` or ``"eval"``: each its own plan, both in the one slab),
        recording them first where there is no plan, or the last epoch missed."""
        self._lib.distgnn_arena_begin_epoch(ctypes.c_uint64(KINDS.index(kind)))
        try:
            yield
        finally:
            self._lib.distgnn_arena_end_epoch()

    def release(self) -> None:
        """Give the slab back (at once, or when the last tensor in it is freed) and forget
        the plans: the next epoch is recorded anew."""
        self._lib.distgnn_arena_release()

    def stats(self) -> ArenaStats:
        out = (ctypes.c_uint64 * 6)()
        self._lib.distgnn_arena_stats(out)
        return ArenaStats(*map(int, out))


_installed: Arena | None = None


def _cache_folder() -> Path:
    """Beside the source when the package is writable (as Numba's ``__pycache__``), else
    the user's cache."""
    here = SOURCE.parent / "__pycache__"
    with contextlib.suppress(OSError):
        here.mkdir(exist_ok=True)
    if os.access(here, os.W_OK):
        return here
    folder = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "distgnn"
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def build() -> Path:
    """The arena's shared library for this torch, compiled if not cached (one process at a
    time; the others wait and load it).  Raises ``RuntimeError`` with the reason when it
    cannot be built."""
    compiler = os.environ.get("CXX") or shutil.which("g++") or shutil.which("c++")
    if compiler is None:
        raise RuntimeError("no C++ compiler (g++ or $CXX)")
    root = Path(torch.__file__).parent
    abi = int(torch.compiled_with_cxx11_abi())
    tag = hashlib.sha256(SOURCE.read_bytes() + f"{torch.__version__} {abi}".encode())
    folder = _cache_folder()
    library = folder / f"distgnn-arena-{tag.hexdigest()[:16]}.so"
    with file_lock(str(folder / "distgnn-arena.lock"), LOCK_WAIT_S):
        if library.exists():
            return library
        with tempfile.TemporaryDirectory(dir=folder) as work:
            built = Path(work) / library.name
            command = [compiler, "-std=c++17", "-O2", "-fPIC", "-shared",
                       f"-D_GLIBCXX_USE_CXX11_ABI={abi}", f"-I{root / 'include'}",
                       str(SOURCE), f"-L{root / 'lib'}", "-lc10",
                       f"-Wl,-rpath,{root / 'lib'}", "-o", str(built)]
            done = subprocess.run(command, capture_output=True, text=True)
            if done.returncode != 0:
                raise RuntimeError(f"{Path(compiler).name} failed: "
                                   + (done.stderr.strip().splitlines() or ["?"])[-1])
            os.replace(built, library)  # whole or not at all: others may be loading it
    return library


def install() -> Arena:
    """Make the arena torch's CPU allocator in this process (once; later calls return the
    same arena).  Blocks below :data:`~distgnn.run.memory.RETURN_BLOCKS_FROM` bytes stay
    malloc's.  Raises ``RuntimeError`` with the reason when the arena cannot be built."""
    global _installed
    if _installed is None:
        library = ctypes.CDLL(str(build()))
        library.distgnn_arena_install(ctypes.c_uint64(RETURN_BLOCKS_FROM))
        _installed = Arena(library)
    return _installed
