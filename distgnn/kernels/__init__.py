"""Numba aggregation kernels on plain arrays: SpMM, blocking, autotune and prefetch.

SpMM forward/backward (float32, float64, and bf16 gathers for sum/mean) on register panels,
source blocking, block-size autotune, and the prefetch intrinsic they share with the
partitioner.  How they compile -- cached on disk, one process at a time, one variant for
read-only and writable arrays -- is :mod:`~distgnn.kernels.jit`'s.
"""
from .blocking import SpMMPlan, plan_spmm
from .spmm import REDUCES, inverse_degree, prefetch, spmm

__all__ = ["REDUCES", "SpMMPlan", "inverse_degree", "plan_spmm", "prefetch", "spmm"]
