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

from .backends import NUMBA_DTYPES, KernelBackend, NumbaBackend, check_tensor
from .graph import CSRGraph, GraphError, check_count
from .kernels import attention as k
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


class SoftmaxAggregate(torch.autograd.Function):
    """GAT's edge softmax and aggregation over a neighbourhood in Numba kernels
    (:mod:`distgnn.kernels.attention`), with the clone exchanges between them: returns the
    partial ``y`` ``[N, H C]`` over this rank's in-edges (the caller combines it like any
    aggregate) and the self-loop coefficients ``[N, H]``; the gradients of the loop logits,
    source and destination scores and ``z``.  The per-edge coefficients (and, with dropout,
    the dropped ones) are the only ``[E, H]`` tensors kept for the backward pass."""

    @staticmethod
    def forward(ctx, loop, s, t, z, nbr, slope, p, key):
        graph, chunks = nbr.graph, NumbaBackend.row_chunks(nbr.graph)
        heads = z.shape[1] if z.ndim == 3 else None
        check_tensor("z", z, (graph.num_nodes, heads, None), NUMBA_DTYPES, "cpu")
        for name, v in (("loop", loop), ("s", s), ("t", t)):
            check_tensor(name, v, (graph.num_nodes, heads), (z.dtype,), "cpu")
        s_, t_, z_ = (_array(v) for v in (s, t, z))
        top = torch.from_numpy(k.softmax_max(graph.indptr, graph.indices, s_, t_, slope,
                                             _array(loop), chunks))
        top = nbr.combine(top, "max", empty_rows=False)
        weight, total = k.softmax_sum(graph.indptr, graph.indices, s_, t_, slope, _array(top),
                                      chunks)
        loop_weight = torch.exp(loop - top)
        total = nbr.combine(torch.from_numpy(total), exact=True) + loop_weight
        alpha, kept, y = k.softmax_aggregate(graph.indptr, graph.indices, weight, _array(total),
                                             z_, nbr.edge_keys()[0], key, p, chunks)
        loop_alpha = loop_weight / total
        ctx.nbr, ctx.slope, ctx.arrays = nbr, slope, (s_, t_, z_, alpha, kept)
        ctx.save_for_backward(loop_alpha)
        return torch.from_numpy(y), loop_alpha

    @staticmethod
    def backward(ctx, grad_y, grad_loop_alpha):
        (loop_alpha,) = ctx.saved_tensors
        s_, t_, z_, alpha, kept = ctx.arrays
        graph, chunks = ctx.nbr.graph, NumbaBackend.row_chunks(ctx.nbr.graph)
        g = _array(grad_y).reshape(z_.shape)
        grad, dot = k.softmax_grad_alpha(graph.indptr, graph.indices, g, z_, kept, chunks)
        # this clone's share of sum alpha dL/dalpha over the vertex's in-edges and its loop
        # (the loop's gradient here is this clone's part of it); summed over clones for edges
        dot = torch.from_numpy(dot) + loop_alpha * grad_loop_alpha
        grad_loop = loop_alpha * grad_loop_alpha - loop_alpha * dot
        dot = ctx.nbr.combine(dot, exact=True)
        grad_t = k.softmax_grad_logits(graph.indptr, graph.indices, s_, t_, ctx.slope, alpha,
                                       _array(dot), grad, chunks)
        grad_s, grad_z = k.softmax_grad_sources(NumbaBackend.transposed(graph), grad, kept, g)
        return (grad_loop, torch.from_numpy(grad_s), torch.from_numpy(grad_t),
                torch.from_numpy(grad_z), None, None, None, None)


def _array(t: torch.Tensor) -> np.ndarray:
    return t.detach().contiguous().numpy()


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
    Inputs of another shape (another graph's rows), and per-vertex arrays of another length,
    are refused with :class:`~distgnn.graph.GraphError` before any kernel reads them.
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
        for name, a in (("in_degree", deg), ("global_ids", self.global_ids)):
            if a.shape != (graph.num_nodes,):
                raise GraphError(f"{name} has shape {list(a.shape)}, expected "
                                 f"[{graph.num_nodes}] (one per vertex of the graph)")
        self.degree = torch.from_numpy(deg.astype(np.float64)).to(device, dtype).unsqueeze(1)
        # layer index -> (step, layer module) of its last training use; shared by every view
        self.users: dict[int, tuple[int, object]] = {}

    def at(self, layer: int, step: int, training: bool) -> "Neighbourhood":
        """This neighbourhood as layer ``layer`` of epoch ``step`` sees it (integers >= 0; the
        exchange keeps state per layer: cd-r's bins and stale partials; a layer may key its
        dropout by it)."""
        view = copy.copy(self)
        view.context = LayerContext(check_count(layer, "layer"), check_count(step, "step"),
                                    bool(training))
        return view

    @property
    def num_nodes(self) -> int:
        """``N``: the rows of every ``h`` this neighbourhood takes."""
        return self.graph.num_nodes

    def enter(self, layer, weight: torch.Tensor, **inputs: torch.Tensor | None) -> None:
        """What every layer of :mod:`distgnn.nn` calls first, with its input weight
        ``[d_out, d_in]``: each of ``inputs`` (``None``: absent) must be ``[N, d_in]`` of the
        weight's dtype.  On a partition, while training, no other layer may have used this
        view's index in this step: the exchange keeps its state per index (cd-r's delayed
        partials, a bf16 wire's error feedback), so two layers would share one.  The same
        layer again (``--recompute`` runs it in the backward pass) is allowed.  O(1)."""
        for name, h in inputs.items():
            if h is not None:
                check_tensor(f"{type(layer).__name__} input {name}", h,
                             (self.num_nodes, weight.shape[1]), (weight.dtype,))
        c = self.context
        if c.training and self.exchange is not None:
            step, user = self.users.get(c.layer, (None, layer))
            if step == c.step and user is not layer:
                raise GraphError(f"layer index {c.layer} is used by two layers in step {c.step} "
                                 f"({type(user).__name__} and {type(layer).__name__}): give "
                                 "each layer its own index, nbr.at(index, step, training)")
            self.users[c.layer] = (c.step, layer)

    def reduce(self, h: torch.Tensor, reduce: str) -> torch.Tensor:
        """``reduce`` over in-neighbours (``sum``, ``max`` or ``min``; ``mean`` uses ``degree``)."""
        if reduce == "mean":
            return self.reduce(h, "sum") / self.degree.clamp(min=1)
        return self.combine(SpMM.apply(h, self.graph, self.backend, reduce, self.timer), reduce)

    def combine(self, y: torch.Tensor, reduce: str = "sum", exact: bool = False,
                empty_rows: bool = True) -> torch.Tensor:
        """Partial per-vertex results ``y`` ``[N, d]`` (over this rank's in-edges) combined over
        every clone of each vertex: summed (through cd-0 or cd-r as configured; always cd-0
        when ``exact``) or, for ``max``/``min``, the extreme (cd-0; with ``empty_rows``, rows
        without local in-edges take no part, and rows without any stay 0).  The identity on
        a whole graph or under 0c."""
        if self.exchange is None:
            return y
        check_tensor("y", y, (self.num_nodes, None))
        if reduce != "sum":
            key = ("local_empty", empty_rows)
            if key not in self.graph.cache:
                empty = self.graph.in_degrees() == 0
                self.graph.cache[key] = torch.from_numpy(empty & empty_rows)
            return self.exchange.extreme(y, reduce, self.graph.cache[key].to(y.device))
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

    def attend(self, loop: torch.Tensor, s: torch.Tensor, t: torch.Tensor, z: torch.Tensor,
               slope: float, p: float, key: int) -> tuple[torch.Tensor, torch.Tensor]:
        """GAT's softmax over in-edges and aggregation (:class:`SoftmaxAggregate`, Numba on CPU):
        for loop logits ``loop``, source and destination scores ``s``, ``t`` ``[N, H]`` and
        ``z`` ``[N, H, C]``, returns ``sum_{e=(u,v)} alpha_e k_e z_u`` over all clones
        (:meth:`combine`; ``k``: dropout ``p`` keyed by ``key`` and the edge keys) and the
        undropped loop coefficients ``[N, H]``."""
        y, loop_alpha = SoftmaxAggregate.apply(loop, s, t, z, self, slope, p, key)
        return self.combine(y).view_as(z), loop_alpha

