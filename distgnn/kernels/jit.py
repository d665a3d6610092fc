"""How the Numba kernels compile: cached on disk, one process at a time, on canonical types.

Every kernel is ``numba.njit(cache=True)``: compiled once per machine and user, then loaded
from Numba's cache (``__pycache__`` beside the source, or, where the installed package is not
writable, the user-wide cache, ``~/.cache/numba``; ``NUMBA_CACHE_DIR`` overrides both).
Compiling one parallel SpMM variant costs seconds; loading it, milliseconds.

Two things would make more than the first process pay:

* **Ranks compiling at once.**  P ranks started on a cold cache all miss it and compile the
  same kernels side by side on the same cores: 4 ranks on 2 cores took 69 s for their first
  epoch, one rank alone 9 s.  :func:`kernel` compiles under a file lock of its own in the
  kernel's cache folder (:func:`lock_path`): the first process compiles and saves, the others
  wait for the lock and then find the kernel in the cache (Numba reads the cache index again
  before every compilation).  The lock is per kernel, not per folder, so that processes
  needing different kernels compile them side by side on different cores.
  Nested compilations run under the lock already held; a lock that cannot be had (a
  file system without ``flock``) or is held past :data:`LOCK_WAIT_S` is passed by, and the
  process compiles as it would without one.
* **Variants of one kernel.**  Numba compiles (and caches) a kernel once per type
  signature, and a read-only array (a partition's, memory-mapped) is another type than a
  writable one (the single-socket graph's).  The kernels' callers pass every array the
  kernel only reads as a read-only view (:func:`readonly`), so that both modes share one
  compiled variant per width and dtype.
"""
from __future__ import annotations

import os

import numba
import numpy as np
from numba.core import sigutils
from numba.core.compiler_lock import global_compiler_lock

from ..storage import file_lock

LOCK_WAIT_S = 600.0  # longer than any one compilation; then compile without the lock
_held = 0  # compilations running under this process's lock (nested ones do not lock again)


def readonly(a: np.ndarray) -> np.ndarray:
    """``a`` as a read-only view (``a`` itself when it is read-only already): the type the
    kernels are compiled for, whoever owns the array."""
    if not a.flags.writeable:
        return a
    view = a.view()
    view.flags.writeable = False
    return view


def lock_path(dispatcher) -> str | None:
    """The file whose ``flock`` serializes ``dispatcher``'s compilations: one per kernel in
    its cache folder (None without a disk cache)."""
    folder = getattr(getattr(dispatcher, "_cache", None), "cache_path", None)
    if folder is None:
        return None
    function = dispatcher.py_func
    return os.path.join(folder, f"distgnn-compile-{function.__module__}.{function.__qualname__}"
                                ".lock")


def serialize(dispatcher, wait_s: float | None = None):
    """``dispatcher`` (a ``numba.njit(cache=True)`` function) compiling new signatures under
    a file lock in its cache folder (see the module docstring); returned for decorator use.
    A dispatcher without a disk cache is returned as it is."""
    lock = lock_path(dispatcher)
    if lock is None or getattr(dispatcher.compile, "serialized", False):
        return dispatcher
    compile_now = dispatcher.compile

    def compile(sig):
        global _held
        with global_compiler_lock:  # Numba's own, re-entrant: one compilation per process
            args, _ = sigutils.normalize_signature(sig)
            if _held or tuple(args) in dispatcher.overloads:
                return compile_now(sig)
            with file_lock(lock, LOCK_WAIT_S if wait_s is None else wait_s):
                _held += 1
                try:
                    return compile_now(sig)  # loads what another process saved meanwhile
                finally:
                    _held -= 1

    compile.serialized = True
    dispatcher.compile = compile
    return dispatcher


def kernel(**options):
    """``numba.njit(cache=True, **options)`` whose compilations are serialized across
    processes (:func:`serialize`)."""
    def wrap(function):
        return serialize(numba.njit(cache=True, **options)(function))
    return wrap

