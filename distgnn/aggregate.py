"""Neighbourhood aggregation: the backend interface, its autograd wiring, and what layers call.

A *kernel backend* computes, for a :class:`~distgnn.graph.CSRGraph` ``A`` (rows =
destinations) with optional edge weights ``w``,

.. math::
    \\text{sum:}\\; y_v = \\sum_{u \\in N(v)} w_{uv} x_u \\qquad
    \\text{mean:}\\; y_v = \\frac{1}{|N(v)|} \\sum_{u \\in N(v)} w_{uv} x_u \\qquad
    \\text{max/min:}\\; y_{v,f} = \\max_{u \\in N(v)} w_{uv} x_{u,f}

and the backward of each: ``A^T g`` (scaled by ``1/|N(v)|`` for mean) for the linear
reduces, and a scatter of ``w g`` to the source of the arg-max edge for max/min.  Rows
with no entries give 0 and receive no gradient.  Backends are plain objects with two
methods (``spmm``, ``spmm_backward``); :class:`SpMM` is the one autograd function that
calls any of them, and :class:`Neighbourhood` is what a layer holds.  A distributed run wraps the same
``Neighbourhood`` around a partition and adds the split-vertex exchange.
"""
from __future__ import annotations

import copy
import time
import warnings
from collections import defaultdict
from contextlib import contextmanager
from typing import Protocol

import numpy as np
import torch

from .errors import DistGNNError
from .graph import CSRGraph

REDUCES = ("sum", "mean", "max", "min")


class PhaseTimer:
    """Accumulates wall-clock seconds per named phase (``timer.seconds[name]``)."""

    def __init__(self):
        self.seconds: dict[str, float] = defaultdict(float)

    @contextmanager
    def __call__(self, name: str):
        start = time.perf_counter()
        try:
            yield
        finally:
            self.seconds[name] += time.perf_counter() - start

    def reset(self) -> None:
        self.seconds.clear()


class KernelBackend(Protocol):
    """What an aggregation backend provides (CPU Numba kernels, torch.sparse on any device).

    ``spmm(graph, x, reduce)`` takes ``x`` ``[N_src, d]`` and returns ``(y, arg)`` with ``y``
    ``[N_dst, d]`` and, for max/min, ``arg`` ``[N_dst, d]`` int64 positions in ``indices`` of
    the edge that attains the extreme (-1 for empty rows), else ``None``.
    ``spmm_backward(graph, grad_y, reduce, arg)`` returns ``grad_x`` ``[N_src, d]``.
    Neither records autograd history.
    """

    name: str

    def spmm(self, graph: CSRGraph, x: torch.Tensor, reduce: str
             ) -> tuple[torch.Tensor, torch.Tensor | None]: ...

    def spmm_backward(self, graph: CSRGraph, grad_y: torch.Tensor, reduce: str,
                      arg: torch.Tensor | None) -> torch.Tensor: ...


def scatter_argreduce_grad(grad_y: torch.Tensor, arg: torch.Tensor, src: torch.Tensor,
                           weight: torch.Tensor | None, num_src: int) -> torch.Tensor:
    """Backward of max/min: ``grad_x[src[e], f] += w[e] * grad_y[v, f]`` for ``e = arg[v, f]``.

    ``arg`` is ``[N_dst, d]`` int64 edge positions (-1: empty row, no gradient); ``src`` and
    ``weight`` are the per-edge source ids and weights (``None``: all 1).
    """
    d = grad_y.shape[1]
    grad_x = torch.zeros(num_src * d, dtype=grad_y.dtype, device=grad_y.device)
    valid = arg >= 0
    edge = arg[valid]
    g = grad_y[valid]
    if weight is not None:
        g = g * weight[edge].to(g.dtype)
    cols = torch.arange(d, device=arg.device).expand_as(arg)[valid]
    grad_x.index_add_(0, src[edge] * d + cols, g)
    return grad_x.view(num_src, d)


def _edge_values(graph: CSRGraph) -> torch.Tensor:
    """float32 ``[E]``: the edge weights, or ones."""
    if graph.edge_weight is None:
        return torch.ones(graph.num_edges, dtype=torch.float32)
    return torch.tensor(graph.edge_weight)  # a copy: partitions memory-map it read-only


def csr_tensor(indptr, indices, values, n, device, itype) -> torch.Tensor:
    """``[n, n]`` torch CSR tensor from numpy ``indptr``/``indices`` (index type ``itype``)."""
    with warnings.catch_warnings():  # "sparse CSR support is in beta": known, and tested here
        warnings.simplefilter("ignore", UserWarning)
        return torch.sparse_csr_tensor(
            torch.from_numpy(indptr).to(device, itype),
            torch.from_numpy(indices.astype(np.int64)).to(device, itype),
            values, (n, n), check_invariants=False)


class TorchSparseBackend:
    """Reference backend on ``torch.sparse`` CSR tensors; runs on whatever device ``x`` is on.

    The CSR tensor and its transpose are built once per (graph, device) and kept in
    ``graph.cache``.
    """

    name = "torch"

    def tensors(self, graph: CSRGraph, device: torch.device) -> dict:
        """CSR tensors of the graph and its transpose, edge ids and weights on ``device``."""
        key = f"torch:{device}"
        if key not in graph.cache:
            n = graph.num_nodes
            itype = torch.int32 if max(n, graph.num_edges) < 2**31 - 1 else torch.int64
            weight = _edge_values(graph).to(device)
            src, dst = graph.edges()
            t = graph.transpose()
            graph.cache[key] = {
                "A": csr_tensor(graph.indptr, graph.indices, weight, n, device, itype),
                "AT": csr_tensor(t.indptr, t.indices, _edge_values(t).to(device), n, device,
                                  itype),
                "src": torch.from_numpy(src.astype(np.int64)).to(device),
                "dst": torch.from_numpy(dst.astype(np.int64)).to(device),
                "weight": weight,
                "inv_deg": (1.0 / torch.from_numpy(graph.in_degrees()).clamp(min=1)
                            ).to(device, torch.float32).unsqueeze(1),
            }
        return graph.cache[key]

    def spmm(self, graph, x, reduce):
        t = self.tensors(graph, x.device)
        if reduce in ("sum", "mean"):
            y = torch.sparse.mm(t["A"].to(x.dtype), x)
            return (y * t["inv_deg"].to(x.dtype) if reduce == "mean" else y), None
        src, dst = t["src"], t["dst"]
        msg = x[src] * t["weight"].to(x.dtype).unsqueeze(1)
        index = dst.unsqueeze(1).expand_as(msg)
        y = torch.zeros(graph.num_nodes, x.shape[1], dtype=x.dtype, device=x.device)
        y.scatter_reduce_(0, index, msg, "amax" if reduce == "max" else "amin",
                          include_self=False)
        # The arg is the first edge (in CSR order) that attains the extreme value.
        edge_ids = torch.arange(len(src), device=x.device).unsqueeze(1).expand_as(msg)
        hit = torch.where(msg == y[dst], edge_ids, len(src))
        first = torch.full_like(y, len(src), dtype=torch.int64)
        first.scatter_reduce_(0, index, hit, "amin", include_self=True)
        return y, torch.where(first == len(src), -1, first)

    def spmm_backward(self, graph, grad_y, reduce, arg):
        t = self.tensors(graph, grad_y.device)
        if reduce in ("sum", "mean"):
            if reduce == "mean":
                grad_y = grad_y * t["inv_deg"].to(grad_y.dtype)
            return torch.sparse.mm(t["AT"].to(grad_y.dtype), grad_y)
        weight = None if graph.edge_weight is None else t["weight"]
        return scatter_argreduce_grad(grad_y, arg, t["src"], weight, graph.num_nodes)


BACKENDS = ("numba", "torch")


def get_backend(name: str) -> KernelBackend:
    """Instantiate the aggregation backend called ``name`` (one of ``BACKENDS``)."""
    if name == "torch":
        return TorchSparseBackend()
    if name == "numba":
        from .kernels.backend import NumbaBackend  # deferred: it imports this module

        return NumbaBackend()
    raise DistGNNError(f"unknown aggregation backend {name!r}; choose from "
                       f"{', '.join(BACKENDS)}")


class SpMM(torch.autograd.Function):
    """Differentiable ``y = reduce_{u in N(v)} w_uv x_u`` through a kernel backend."""

    @staticmethod
    def forward(ctx, x, graph, backend, reduce, timer):
        with timer("aggregation_forward"):
            y, arg = backend.spmm(graph, x.contiguous(), reduce)
        ctx.graph, ctx.backend, ctx.reduce, ctx.timer = graph, backend, reduce, timer
        ctx.has_arg = arg is not None  # not arg.numel(): a [0, d] or [N, 0] arg is still one
        ctx.save_for_backward(arg if arg is not None else torch.empty(0))
        return y

    @staticmethod
    def backward(ctx, grad_y):
        (arg,) = ctx.saved_tensors
        with ctx.timer("aggregation_backward"):
            grad_x = ctx.backend.spmm_backward(ctx.graph, grad_y.contiguous(), ctx.reduce,
                                               arg if ctx.has_arg else None)
        return grad_x, None, None, None, None


class Neighbourhood:
    """The graph as a layer sees it: reductions over in-neighbours and in-degrees.

    Args:
        graph (CSRGraph): adjacency, rows = destinations.
        backend (KernelBackend): the kernels that do the work.
        in_degree (np.ndarray, optional): ``[N]`` degrees used for normalisation; defaults to
            the graph's own in-degrees (a partition passes the global ones).
        timer (PhaseTimer, optional): receives ``aggregation_forward``/``_backward`` seconds.
        global_ids (np.ndarray, optional): int64 ``[N]`` global id of each vertex (a
            partition's local -> global map); defaults to ``0..N-1``.
        exchange (callable, optional): on a partition, the split-vertex exchange
            (:class:`distgnn.drpa.DRPA`) applied to every sum: ``exchange(y, layer, step,
            training) -> y``.  Layers see it through :meth:`at`.

    Shapes: ``h`` is ``[N, d]``; every reduction returns ``[N, d]``; ``degree`` is ``[N, 1]``.
    """

    def __init__(self, graph: CSRGraph, backend: KernelBackend, in_degree=None,
                 timer: PhaseTimer | None = None, device="cpu", global_ids=None,
                 exchange=None):
        self.graph = graph
        self.exchange = exchange
        self.context = (0, 0, False)
        self.global_ids = (np.arange(graph.num_nodes, dtype=np.int64) if global_ids is None
                           else np.asarray(global_ids, dtype=np.int64))
        self.backend = backend
        self.timer = timer if timer is not None else PhaseTimer()
        deg = graph.in_degrees() if in_degree is None else np.asarray(in_degree)
        self.degree = torch.from_numpy(deg.astype(np.float32)).to(device).unsqueeze(1)

    def at(self, layer: int, step: int, training: bool) -> "Neighbourhood":
        """This neighbourhood as layer ``layer`` of epoch ``step`` sees it (the exchange keeps
        state per layer: cd-r's bins and stale partials)."""
        if self.exchange is None:
            return self
        view = copy.copy(self)
        view.context = (layer, step, training)
        return view

    def reduce(self, h: torch.Tensor, reduce: str) -> torch.Tensor:
        """``reduce`` over in-neighbours (``sum``, ``max`` or ``min``; ``mean`` uses ``degree``)."""
        if reduce == "mean":
            return self.reduce(h, "sum") / self.degree.clamp(min=1)
        y = SpMM.apply(h, self.graph, self.backend, reduce, self.timer)
        if self.exchange is None:
            return y
        if reduce != "sum":
            raise DistGNNError(f"the split-vertex exchange adds partial aggregates; {reduce} "
                               "aggregation is only supported with --algo 0c")
        return self.exchange(y, *self.context)
