"""Numba aggregation kernels on plain arrays: SpMM forward/backward (float32, float64, and
bf16 gathers for sum/mean) on register panels, source blocking, block-size autotune, and
the prefetch intrinsic they share with the partitioner."""
from .blocking import SpMMPlan, plan_spmm
from .spmm import REDUCES, inverse_degree, prefetch, spmm

__all__ = ["REDUCES", "SpMMPlan", "inverse_degree", "plan_spmm", "prefetch", "spmm"]
