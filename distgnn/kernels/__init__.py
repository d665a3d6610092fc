"""Numba aggregation kernels: SpMM forward/backward, source blocking, block-size autotune."""
from .blocking import SpMMPlan, plan_spmm
from .spmm import edge_weight_grad, inverse_degree, spmm

__all__ = ["SpMMPlan", "plan_spmm", "spmm", "edge_weight_grad", "inverse_degree"]
