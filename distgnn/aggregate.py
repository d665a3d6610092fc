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


class HeadsSpMM(torch.autograd.Function):
    """Differentiable ``y[v, h] = sum_{e=(u,v)} alpha[e, h] z[u, h]`` (attention's
    aggregation) through a kernel backend; ``alpha`` ``[E, H]``, ``z`` ``[N, H, C]``, ``y``
    returned flat, ``[N, H C]`` (what the exchange takes)."""

    @staticmethod
    def forward(ctx, alpha, z, graph, backend, timer):
        with timer("aggregation_forward"):
            y = backend.heads_spmm(graph, alpha, z)
        ctx.graph, ctx.backend, ctx.timer = graph, backend, timer
        ctx.save_for_backward(alpha, z)
        return y

    @staticmethod
    def backward(ctx, grad_y):
        alpha, z = ctx.saved_tensors
        with ctx.timer("aggregation_backward"):
            grad_alpha, grad_z = ctx.backend.heads_spmm_backward(
                ctx.graph, alpha, z, grad_y.contiguous().view_as(z))
        return grad_alpha, grad_z, None, None, None


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
        state per layer: cd-r's bins and stale partials; a layer may key its dropout by it)."""
        view = copy.copy(self)
        view.context = LayerContext(layer, step, training)
        return view

    def reduce(self, h: torch.Tensor, reduce: str) -> torch.Tensor:
        """``reduce`` over in-neighbours (``sum``, ``max`` or ``min``; ``mean`` uses ``degree``)."""
        if reduce == "mean":
            return self.reduce(h, "sum") / self.degree.clamp(min=1)
        return self.combine(SpMM.apply(h, self.graph, self.backend, reduce, self.timer), reduce)

    def combine(self, y: torch.Tensor, reduce: str = "sum", exact: bool = False
                ) -> torch.Tensor:
        """Partial per-vertex results ``y`` ``[N, d]`` (over this rank's in-edges) combined over
        every clone of each vertex: summed (through cd-0 or cd-r as configured; always cd-0
        when ``exact``) or, for ``max``/``min``, the extreme (cd-0; rows without local
        in-edges take no part, and rows without any stay 0).  The identity on a whole graph
        or under 0c."""
        if self.exchange is None:
            return y
        if reduce != "sum":
            if "local_empty" not in self.graph.cache:
                self.graph.cache["local_empty"] = torch.from_numpy(self.graph.in_degrees() == 0)
            return self.exchange.extreme(y, reduce, self.graph.cache["local_empty"].to(y.device))
        if exact:
            return self.exchange.exact(y)
        c = self.context
        return self.exchange(y, c.layer, c.step, c.training)

    def edge_index(self) -> tuple[torch.Tensor, torch.Tensor]:
        """int64 ``(src, dst)`` ``[E]`` local ids of every in-edge, in CSR order."""
        key = ("edge_index", str(self.degree.device))
        if key not in self.graph.cache:
            src, dst = self.graph.edges()
            device = self.degree.device
            self.graph.cache[key] = tuple(torch.from_numpy(a.astype(np.int64)).to(device)
                                          for a in (src, dst))
        return self.graph.cache[key]

    def loop_edges(self) -> torch.Tensor | None:
        """bool ``[E]``: which stored edges are self-loops ``v -> v`` (``None`` when none is)."""
        key = ("loop_edges", str(self.degree.device))
        if key not in self.graph.cache:
            src, dst = self.edge_index()
            loops = src == dst
            self.graph.cache[key] = loops if bool(loops.any()) else None
        return self.graph.cache[key]

    def edge_keys(self) -> tuple[np.ndarray, np.ndarray]:
        """int64 ``[E]`` and ``[N]``: a key per edge (in CSR order) and per self-loop from
        the global ids of both ends, ``(g_u << 32) | g_v``, so a partition keys each edge as
        the whole graph does (edge dropout draws the same masks)."""
        if "edge_keys" not in self.graph.cache:
            src, dst = self.graph.edges()
            g = self.global_ids
            self.graph.cache["edge_keys"] = ((g[src] << 32) | g[dst], (g << 32) | g)
        return self.graph.cache["edge_keys"]

    def weighted_heads(self, alpha: torch.Tensor, z: torch.Tensor) -> torch.Tensor:
        """``y[v, h] = sum_{e=(u,v)} alpha[e, h] z[u, h]`` over all clones (:meth:`combine`);
        ``alpha`` ``[E, H]`` in CSR order, ``z`` and ``y`` ``[N, H, C]``."""
        y = HeadsSpMM.apply(alpha.contiguous(), z.contiguous(), self.graph, self.backend,
                            self.timer)
        return self.combine(y).view_as(z)
