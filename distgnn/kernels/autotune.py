"""Choose the SpMM hub-block size from the machine's caches and, on big graphs, a trial.

Candidates are "no blocking" and hub blocks whose feature rows fill 1/2, 1, 2 and 4 times
one core's L2 (``B = f * L2 / (s d)`` for ``s``-byte elements: 4 for float32, 2 for
bf16).  Graphs under ``TRIAL_MIN_EDGES`` are too small for blocking to matter and get no
trial (unblocked); larger ones time each candidate twice after a warm-up and keep the
fastest (best of the two, which filters out a noisy run).  Callers cache the result per
(graph, width, element size).
"""
from __future__ import annotations

import time

import numpy as np

from .blocking import SpMMPlan, cache_sizes, plan_spmm
from .lanes import BF16
from .spmm import as_aligned, empty_aligned, spmm

TRIAL_MIN_EDGES = 2_000_000
L2_FRACTIONS = (0.5, 1.0, 2.0, 4.0)
DEFAULT_L2 = 1 << 20


def candidate_hub_blocks(width: int, num_sources: int, itemsize: int = 4) -> list[int]:
    l2 = cache_sizes().get("L2", DEFAULT_L2)
    blocks = {int(f * l2 / (itemsize * max(width, 1))) for f in L2_FRACTIONS}
    return [0] + sorted(b for b in blocks if 0 < b < num_sources)


def time_plan(plan: SpMMPlan, indptr, indices, x, out, repeats: int = 1) -> float:
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        spmm(indptr, indices, x, out=out, plan=plan)
        best = min(best, time.perf_counter() - start)
    return best


def autotune_plan(indptr, indices, edge_weight, num_sources: int, width: int,
                  trial: bool | None = None, dtype=np.float32
                  ) -> tuple[SpMMPlan, dict[int, float]]:
    """Best plan for ``width``-wide features of ``dtype`` (float32, or ``BF16`` bits), and
    the trial times per hub-block size."""
    if trial is None:
        trial = len(indices) >= TRIAL_MIN_EDGES
    if not trial:
        return plan_spmm(indptr, indices, edge_weight, 0, num_sources), {}
    x = np.random.default_rng(0).standard_normal((num_sources, width), dtype=np.float32)
    if dtype == BF16:  # truncated, not rounded: only the timing matters
        x = (x.view(np.uint32) >> 16).astype(BF16)
    x = as_aligned(x)
    out = empty_aligned((len(indptr) - 1, width), np.float32)
    times, plans = {}, {}
    for hub in candidate_hub_blocks(width, num_sources, x.itemsize):
        plans[hub] = plan_spmm(indptr, indices, edge_weight, hub, num_sources)
        time_plan(plans[hub], indptr, indices, x, out)  # warm-up: caches, pages, JIT
        times[hub] = time_plan(plans[hub], indptr, indices, x, out, repeats=2)
    best = min(times, key=times.get)
    return plans[best], times
