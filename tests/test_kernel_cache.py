"""How the Numba kernels compile (distgnn.kernels.jit): processes started together compile a
kernel once and load it from the disk cache, read-only and writable arrays share one
compiled variant, and every parallel kernel goes through the lock."""
import fcntl
import subprocess
import sys
import textwrap
import time

import numpy as np
import pytest

from distgnn.kernels import jit
from distgnn.kernels.spmm import _extreme, panel_lanes, spmm, sum_kernel


def toy_module(folder):
    """A module ``toy`` in ``folder`` with one kernel, cached beside it."""
    (folder / "toy.py").write_text(textwrap.dedent("""
        from distgnn.kernels.jit import kernel

        @kernel()
        def twice(x):
            return 2 * x

        @kernel()
        def thrice(x):
            return 3 * x
    """))
    return folder


def test_processes_started_together_compile_once(tmp_path):
    """Two processes need the same uncached kernel at once: one compiles and saves it, the
    other waits for the lock and loads it (without the lock both would compile)."""
    toy_module(tmp_path)
    cache = tmp_path / "__pycache__"
    cache.mkdir()
    report = ("import toy; toy.twice(21); s = toy.twice.stats; "
              "print(sum(s.cache_misses.values()), sum(s.cache_hits.values()))")
    with open(cache / "distgnn-compile-toy.twice.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # held until both wait for it
        procs = [subprocess.Popen([sys.executable, "-c", report], cwd=tmp_path, text=True,
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE)
                 for _ in range(2)]
        time.sleep(3)  # both start, import numba and block on the lock
        assert all(p.poll() is None for p in procs), [p.communicate() for p in procs]
        fcntl.flock(lock, fcntl.LOCK_UN)
    outcomes = []
    for p in procs:
        out, err = p.communicate(timeout=120)
        assert p.returncode == 0, err
        outcomes.append(tuple(map(int, out.split())))
    assert sorted(outcomes) == [(0, 1), (1, 0)]  # (compiled, loaded) per process


def test_a_lock_held_too_long_is_passed_by(tmp_path, monkeypatch):
    """A lock nobody releases (a stopped process) delays compilation by the wait, not for
    ever: the process then compiles without it."""
    toy_module(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(jit, "LOCK_WAIT_S", 0.5)
    import toy

    with open(jit.lock_path(toy.twice), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        start = time.monotonic()
        assert toy.twice(21) == 42
        assert 0.5 <= time.monotonic() - start < 60
    sys.modules.pop("toy")


def test_another_kernels_lock_does_not_hold_a_compilation(tmp_path, monkeypatch):
    """Locks are per kernel: a process compiling ``twice`` does not delay ``thrice``."""
    toy_module(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(jit, "LOCK_WAIT_S", 60.0)
    import toy

    assert jit.lock_path(toy.twice) != jit.lock_path(toy.thrice)
    with open(jit.lock_path(toy.twice), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        start = time.monotonic()
        assert toy.thrice(14) == 42
        assert time.monotonic() - start < 30  # far below the 60 s it would wait on the lock
    sys.modules.pop("toy")


def test_read_only_and_writable_arrays_share_one_variant():
    """A partition's arrays are memory-mapped read-only, the single-socket graph's are
    writable: the kernels see both as read-only, so one compiled variant serves both."""
    rng = np.random.default_rng(0)
    indptr = np.array([0, 2, 3, 3, 5], np.int64)
    indices = np.array([1, 2, 0, 3, 1], np.int32)
    x = rng.random((4, 24), dtype=np.float32)
    frozen = [a.copy() for a in (indptr, indices, x)]
    for a in frozen:
        a.flags.writeable = False
    kernel = sum_kernel(panel_lanes(24))
    for reduce in ("sum", "max"):
        expected = spmm(indptr, indices, x, reduce)
        before = (len(kernel.overloads), len(_extreme.overloads))
        got = spmm(*frozen, reduce)
        assert (len(kernel.overloads), len(_extreme.overloads)) == before
        np.testing.assert_array_equal(got[0] if reduce == "max" else got,
                                      expected[0] if reduce == "max" else expected)
    assert all(not sig[1].mutable and not sig[2].mutable for sig in kernel.signatures)


def test_readonly_views_share_the_data():
    a = np.arange(6.0)
    view = jit.readonly(a)
    assert not view.flags.writeable and a.flags.writeable and np.shares_memory(a, view)
    assert jit.readonly(view) is view
    with pytest.raises(ValueError):
        view[0] = 1


def test_every_parallel_kernel_is_serialized():
    """The kernels that cost seconds to compile go through jit.kernel (cached, locked)."""
    from distgnn.kernels import attention

    kernels = [sum_kernel(lanes) for lanes in (8, 16, 32, 64)] + [_extreme] + [
        getattr(attention, name) for name in dir(attention) if name.startswith("_softmax_")]
    assert len(kernels) == 11
    for k in kernels:
        assert k.compile.serialized and k._cache.cache_path, k
