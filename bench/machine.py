"""What a benchmark result must say about the machine: CPU, caches, bandwidth, versions."""
from __future__ import annotations

import os
import platform
import time

import numba
import numpy as np
import scipy
import torch

from distgnn.kernels.autotune import cache_sizes

__all__ = ["matmul_gflops", "triad_bandwidth"]


@numba.njit(parallel=True, fastmath=True, cache=True)
def _triad(a, b, c, s):
    for i in numba.prange(len(a)):
        a[i] = b[i] + s * c[i]


def triad_bandwidth(num_floats: int = 1 << 25, repeats: int = 5) -> float:
    """STREAM triad ``a = b + s c`` on float32 arrays (3 x 128 MiB by default): GB/s, best."""
    b = np.random.default_rng(0).random(num_floats, dtype=np.float32)
    c = b[::-1].copy()
    a = np.empty_like(b)
    _triad(a, b, c, np.float32(3.0))
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        _triad(a, b, c, np.float32(3.0))
        best = min(best, time.perf_counter() - start)
    return 3 * a.nbytes / best / 1e9


def matmul_gflops(size: int = 4096, repeats: int = 5,
                  dtype: torch.dtype = torch.float32) -> float:
    """The matrix-product rate of torch in ``dtype`` on this process's threads: ``C = A B``
    for ``A``, ``B`` ``[size, size]`` (``2 size^3`` flops), GFLOP/s, best of ``repeats``."""
    a = torch.randn(size, size, dtype=dtype)
    b = torch.randn(size, size, dtype=dtype)
    c = torch.mm(a, b)
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        torch.mm(a, b, out=c)
        best = min(best, time.perf_counter() - start)
    return 2 * size ** 3 / best / 1e9


def cpu_model() -> str:
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def machine_info(threads: int) -> dict:
    return {"cpu": cpu_model(), "cores": os.cpu_count(), "threads": threads,
            "caches": cache_sizes(), "triad_gb_s": round(triad_bandwidth(), 2),
            "thp_mem_alloc_enable": os.environ.get("THP_MEM_ALLOC_ENABLE", ""),
            "versions": {"python": platform.python_version(), "numpy": np.__version__,
                         "scipy": scipy.__version__, "numba": numba.__version__,
                         "torch": torch.__version__}}
