"""What layers aggregate through: the autograd function over any aggregation backend
(:mod:`distgnn.backends`) and the :class:`Neighbourhood` a layer holds.

:class:`SpMM` is the one autograd function that calls a backend's ``spmm`` forward and
``spmm_backward`` backward.  A distributed run wraps the same ``Neighbourhood`` around a
partition and adds the split-vertex exchange (:mod:`distgnn.drpa`) to every sum.
"""
from __future__ import annotations

import copy
import dataclasses

import numpy as np
import torch

from .backends import KernelBackend
from .errors import DistGNNError
from .graph import CSRGraph
from .timing import PhaseTimer


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


@dataclasses.dataclass(frozen=True)
class LayerContext:
    """Which aggregation an exchange serves: the model's ``layer``, the epoch (``step``),
    and whether the model trains (cd-r keeps state per layer and runs only in training)."""

    layer: int = 0
    step: int = 0
    training: bool = False


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
        dtype (torch.dtype, optional): floating type of ``degree`` (the features' type).

    Shapes: ``h`` is ``[N, d]``; every reduction returns ``[N, d]``; ``degree`` is ``[N, 1]``.
    """

    def __init__(self, graph: CSRGraph, backend: KernelBackend, in_degree=None,
                 timer: PhaseTimer | None = None, device="cpu", global_ids=None,
                 exchange=None, dtype: torch.dtype = torch.float32):
        self.graph = graph
        self.exchange = exchange
        self.context = LayerContext()
        self.global_ids = (np.arange(graph.num_nodes, dtype=np.int64) if global_ids is None
                           else np.asarray(global_ids, dtype=np.int64))
        self.backend = backend
        self.timer = timer if timer is not None else PhaseTimer()
        deg = graph.in_degrees() if in_degree is None else np.asarray(in_degree)
        self.degree = torch.from_numpy(deg.astype(np.float64)).to(device, dtype).unsqueeze(1)

    def at(self, layer: int, step: int, training: bool) -> "Neighbourhood":
        """This neighbourhood as layer ``layer`` of epoch ``step`` sees it (the exchange keeps
        state per layer: cd-r's bins and stale partials)."""
        if self.exchange is None:
            return self
        view = copy.copy(self)
        view.context = LayerContext(layer, step, training)
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
        c = self.context
        return self.exchange(y, c.layer, c.step, c.training)
