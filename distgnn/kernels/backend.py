"""The Numba aggregation backend: the kernels of this package behind the backend interface.

Tensors are handed to the kernels as ``.numpy()`` views of their memory (no copies).  Per
graph it caches (in ``graph.cache``, beside the graph's own transpose) the per-edge source
ids for the max/min backward and an autotuned :class:`~distgnn.kernels.blocking.SpMMPlan` per feature width
and direction.
"""
from __future__ import annotations

import numpy as np
import torch

from ..aggregate import scatter_argreduce_grad
from ..graph import CSRGraph
from .autotune import autotune_plan
from .spmm import empty_aligned, inverse_degree, spmm


class NumbaBackend:
    """Cache-blocked, nnz-balanced Numba SpMM on CPU tensors (float32 or float64)."""

    name = "numba"

    def plan(self, graph: CSRGraph, width: int, transposed: bool = False):
        """The autotuned plan for ``width``-wide features (tuned once, then cached)."""
        key = ("numba-plan", transposed, width)
        if key not in graph.cache:
            g = graph.transpose() if transposed else graph
            graph.cache[key] = autotune_plan(g.indptr, g.indices, g.edge_weight,
                                             g.num_nodes, width)[0]
        return graph.cache[key]

    def spmm(self, graph, x, reduce):
        if x.device.type != "cpu":
            raise ValueError("the numba backend runs on CPU tensors; use the torch backend")
        xn = x.detach().numpy()
        result = spmm(graph.indptr, graph.indices, xn, reduce, graph.edge_weight,
                      plan=self.plan(graph, xn.shape[1]))
        if reduce in ("max", "min"):
            return torch.from_numpy(result[0]), torch.from_numpy(result[1])
        return torch.from_numpy(result), None

    def spmm_backward(self, graph, grad_y, reduce, arg):
        g = grad_y.numpy()
        if reduce in ("max", "min"):
            if "src" not in graph.cache:
                graph.cache["src"] = torch.from_numpy(graph.indices.astype(np.int64))
            weight = None if graph.edge_weight is None else torch.from_numpy(graph.edge_weight)
            return scatter_argreduce_grad(grad_y, arg, graph.cache["src"], weight,
                                          graph.num_nodes)
        if reduce == "mean":
            g = np.multiply(g, inverse_degree(graph.indptr, g.dtype)[:, None],
                            out=empty_aligned(g.shape, g.dtype))
        t = graph.transpose()
        return torch.from_numpy(spmm(t.indptr, t.indices, g, "sum", t.edge_weight,
                                     plan=self.plan(graph, g.shape[1], transposed=True)))
