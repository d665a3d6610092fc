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
                  trial: bool | None = None, dtype=np.float32, x=None, out=None
                  ) -> tuple[SpMMPlan, dict[int, float]]:
    """``(plan, times)``: the best SpMM plan and the trial times per hub-block size.

    The plan is the best for ``width``-wide features of ``dtype`` (float32, or ``BF16``
    bits); ``times`` maps each hub-block size tried to its time (empty without a trial).

    The trial times the SpMM on ``x`` ``[num_sources, width]`` into ``out``
    ``[N_dst, width]`` (float32; float64 for float64 ``x``) where the caller passes them (its
    operand and the buffer its result goes to, so that the trial allocates no feature-sized
    arrays of its own; ``out`` is overwritten), else on random features.  It holds two plans
    at a time, the fastest so far and the one being timed: a blocked plan copies the graph's
    edges (about 8 bytes per edge), and the first epoch's peak memory is where the trial runs."""
    if trial is None:
        trial = len(indices) >= TRIAL_MIN_EDGES
    if not trial:
        return plan_spmm(indptr, indices, edge_weight, 0, num_sources), {}
    if x is None:
        x = np.random.default_rng(0).standard_normal((num_sources, width), dtype=np.float32)
        if dtype == BF16:  # truncated, not rounded: only the timing matters
            x = (x.view(np.uint32) >> 16).astype(BF16)
    x = as_aligned(x)
    if out is None:
        out = empty_aligned((len(indptr) - 1, width), np.float32)
    times, best, best_time = {}, None, float("inf")
    for hub in candidate_hub_blocks(width, num_sources, x.itemsize):
        plan = plan_spmm(indptr, indices, edge_weight, hub, num_sources)
        time_plan(plan, indptr, indices, x, out)  # warm-up: caches, pages, JIT
        times[hub] = time_plan(plan, indptr, indices, x, out, repeats=2)
        if times[hub] < best_time:
            best, best_time = plan, times[hub]
        del plan  # a slower plan's edge copies go before the next candidate is built
    return best, times
