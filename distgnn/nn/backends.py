"""Aggregation backends: what does the neighbourhood sums, on which device.

A backend computes, for a :class:`~distgnn.data.graph.CSRGraph` ``A`` (rows = destinations) with
optional edge weights ``w``,

.. math::
    \\text{sum:}\\; y_v = \\sum_{u \\in N(v)} w_{uv} x_u \\qquad
    \\text{mean:}\\; y_v = \\frac{1}{|N(v)|} \\sum_{u \\in N(v)} w_{uv} x_u \\qquad
    \\text{max/min:}\\; y_{v,f} = \\max_{u \\in N(v)} w_{uv} x_{u,f}

and the backward of each: ``A^T g`` (scaled by ``1/|N(v)|`` for mean) for the linear
reduces, and a scatter of ``w g`` to the source of the arg-max edge for max/min.  Rows with
no entries give 0 and receive no gradient.

With ``aggregation_precision="bf16"``, sum and mean gather ``x`` (and, backward, ``g``)
rounded to bf16 (to nearest even) and accumulate and return float32: ``y = A bf16(x)``,
``g_x = A^T bf16(g)``.  The Numba kernels gather the bf16 rows themselves (half the bytes);
the torch backend computes the same numbers on float32 copies of the rounded values (no
bandwidth saved, but every rank of a mixed CPU/GPU job rounds alike).  Max and min stay
exact.

A backend also computes GAT's edge softmax and aggregation (``attend``, see
:class:`KernelBackend`), so an attention layer never asks which backend it runs on.

A backend is a plain object with three methods (:class:`KernelBackend`); two implement it:
:class:`NumbaBackend` (this project's cache-blocked CPU kernels, :mod:`distgnn.kernels`)
and :class:`TorchSparseBackend` (``torch.sparse`` CSR on any device, the one a GPU rank
uses).  To add one, implement the three methods and name it in :func:`get_backend`.
"""
from __future__ import annotations

import functools
import warnings
from typing import Protocol

import numpy as np
import torch
import torch.nn.functional as F

from ..data.graph import CSRGraph, GraphError, csr_rows
from ..errors import DistGNNError
from ..kernels import REDUCES, inverse_degree, plan_spmm, spmm
from ..kernels import attention as k
from ..kernels.attention import transposed_order
from ..kernels.autotune import autotune_plan
from ..kernels.blocking import balanced_chunks
from ..kernels.lanes import BF16
from ..kernels.spmm import as_aligned
from ..placement import AGGREGATION_PRECISIONS
from . import buffers
from .dropout import as_tensor as tensor_of
from .dropout import rows as rows_of
from .dropout import vertex_dropout
from .precision import autocast_backward, float32_inputs

__all__ = ["BACKENDS", "KernelBackend", "NumbaBackend", "TorchSparseBackend", "TritonBackend",
           "bf16_bits", "csr_tensor", "get_backend"]

LINEAR = ("sum", "mean")
NUMBA_DTYPES = (torch.float32, torch.float64)  # what the Numba kernels compute in


class KernelBackend(Protocol):
    """What an aggregation backend provides (CPU Numba kernels, torch.sparse on any device).

    ``spmm(graph, x, reduce)`` takes ``x`` ``[N_src, d]`` and returns ``(y, arg)`` with ``y``
    ``[N_dst, d]`` and, for max/min, ``arg`` ``[N_dst, d]`` int64 positions in ``indices`` of
    the edge that attains the extreme (-1 for empty rows), else ``None``.
    ``spmm_backward(graph, grad_y, reduce, arg)`` returns ``grad_x`` ``[N_src, d]``.
    Neither records autograd history.

    ``attend(nbr, loop, s, t, z, slope, p, key)`` is GAT's softmax over in-edges and
    aggregation, differentiable: for the loop logits ``loop``, source and destination
    scores ``s``, ``t`` ``[N, H]`` and ``z`` ``[N, H, C]`` it returns this rank's partial
    ``sum_{e=(u,v)} alpha_e k_e z_u`` ``[N, H C]`` over its own in-edges and the undropped
    self-loop coefficients ``[N, H]``, where ``alpha_e = exp(e_uv - m_v) / (sum over v's
    in-edges and loop)`` with ``e_uv = LeakyReLU_slope(s_u + t_v)`` and ``k_e`` dropout
    ``p`` keyed by ``key`` and the edge's global ends.  The maximum ``m`` and the softmax
    denominator are combined over ``v``'s clones inside (``nbr.combine``: max, and an exact
    sum), so they are the whole graph's; the caller combines the partial aggregate.
    """

    name: str

    def spmm(self, graph: CSRGraph, x: torch.Tensor, reduce: str
             ) -> tuple[torch.Tensor, torch.Tensor | None]: ...

    def spmm_backward(self, graph: CSRGraph, grad_y: torch.Tensor, reduce: str,
                      arg: torch.Tensor | None) -> torch.Tensor: ...

    def attend(self, nbr, loop: torch.Tensor, s: torch.Tensor, t: torch.Tensor,
               z: torch.Tensor, slope: float, p: float, key: int
               ) -> tuple[torch.Tensor, torch.Tensor]: ...


def check_tensor(name: str, x, shape: tuple, dtypes: tuple | None = None,
                 device: str | None = None) -> None:
    """Refuse an ``x`` of the wrong type, shape, dtype or device, in one line.

    The line names what was expected and what was given: ``x`` must be a floating-point
    tensor of ``shape`` (``None``: any size in that dimension) and, when given, of one of
    ``dtypes`` and on a ``device`` of that type.  The kernels index rows by vertex id without
    bounds checks, so every public entry point calls this first; O(1), no element is read.
    """
    if not isinstance(x, torch.Tensor):
        raise GraphError(f"{name} must be a torch.Tensor, got {type(x).__name__}")
    if x.ndim != len(shape) or any(e is not None and n != e for n, e in zip(x.shape, shape)):
        expected = ", ".join("d" if e is None else str(e) for e in shape)
        raise GraphError(f"{name} has shape [{', '.join(map(str, x.shape))}], expected "
                         f"[{expected}]")
    if not (x.is_floating_point() if dtypes is None else x.dtype in dtypes):
        expected = "a floating-point type" if dtypes is None else " or ".join(map(str, dtypes))
        raise GraphError(f"{name} has dtype {x.dtype}, expected {expected}")
    if device is not None and x.device.type != device:
        raise GraphError(f"{name} is on {x.device}, expected {device} (the numba backend runs "
                         "on CPU tensors; use the torch backend)")


def check_operand(graph: CSRGraph, x: torch.Tensor, reduce: str, name: str = "x",
                  dtypes: tuple | None = None, device: str | None = None) -> None:
    """What every backend checks before its kernels, in O(1).

    ``x`` is ``[N, d]`` for the graph's ``N`` vertices (:func:`check_tensor`), ``reduce`` is
    one of ``REDUCES``, and the graph's arrays still agree in length (``indptr`` ``[N + 1]``
    ending at ``E``, ``edge_weight`` ``[E]``; their values were checked when the graph was
    built).
    """
    check_tensor(name, x, (graph.num_nodes, None), dtypes, device)
    if reduce not in REDUCES:
        raise GraphError(f"reduce must be one of {', '.join(REDUCES)}, got {reduce!r}")
    if len(graph.indptr) != graph.num_nodes + 1 or graph.indptr[-1] != graph.num_edges:
        raise GraphError(f"the graph's indptr has {len(graph.indptr)} entries ending at "
                         f"{graph.indptr[-1]}, expected {graph.num_nodes + 1} ending at "
                         f"{graph.num_edges}")
    if graph.edge_weight is not None and graph.edge_weight.shape != (graph.num_edges,):
        raise GraphError(f"the graph's edge_weight has shape {list(graph.edge_weight.shape)}, "
                         f"expected [{graph.num_edges}] (one per edge)")


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


def bf16_bits(x: torch.Tensor) -> np.ndarray:
    """``x`` (CPU, ``[N, d]``) rounded to bf16 (to nearest even, by torch) as uint16 bit
    patterns ``[N, d]``, the form the Numba kernels gather."""
    return x.detach().to(torch.bfloat16).view(torch.int16).numpy().view(BF16)


def _check_precision(precision: str) -> str:
    if precision not in AGGREGATION_PRECISIONS:
        raise DistGNNError(f"unknown aggregation precision {precision!r}; choose from "
                           f"{', '.join(AGGREGATION_PRECISIONS)}")
    return precision


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
    ``graph.cache``.  ``aggregation_precision`` as in the module docstring.
    """

    name = "torch"

    def __init__(self, aggregation_precision: str = "fp32"):
        self.bf16 = _check_precision(aggregation_precision) == "bf16"

    def rounded(self, x: torch.Tensor, reduce: str) -> torch.Tensor:
        """``x`` as the sum/mean gathers it: rounded to bf16 when the precision says so."""
        return x.to(torch.bfloat16).to(x.dtype) if self.bf16 and reduce in LINEAR else x

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

    @staticmethod
    def sparse_product(a: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        """``a @ x`` for the sparse ``a`` in ``x``'s dtype, outside autocast: under
        ``--precision bf16-mixed`` autocast would run it in bf16, which ``torch.sparse`` has
        no CPU kernel for (the aggregation's precision is the backend's to set)."""
        with torch.autocast(x.device.type, enabled=False):
            return torch.sparse.mm(a.to(x.dtype), x)

    def spmm(self, graph, x, reduce):
        check_operand(graph, x, reduce)
        if x.dtype == torch.bfloat16:  # bf16 rows (a product's output under bf16-mixed):
            x = x.float()  # summed in float32 and returned so, as the Numba kernels do
        t = self.tensors(graph, x.device)
        if reduce in LINEAR:
            y = self.sparse_product(t["A"], self.rounded(x, reduce))
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
        check_operand(graph, grad_y, reduce, "grad_y")
        t = self.tensors(graph, grad_y.device)
        if reduce in LINEAR:
            if reduce == "mean":
                grad_y = grad_y * t["inv_deg"].to(grad_y.dtype)
            return self.sparse_product(t["AT"], self.rounded(grad_y, reduce))
        weight = None if graph.edge_weight is None else t["weight"]
        return scatter_argreduce_grad(grad_y, arg, t["src"], weight, graph.num_nodes)

    def attend(self, nbr, loop, s, t, z, slope, p, key):
        """In torch operations (any device; it materialises ``[E, H]`` and ``[E, H, C]``
        tensors, as PyG does)."""
        src, dst = nbr.edge_index()
        logits = F.leaky_relu(s[src] + t[dst], slope)  # [E, H]
        loops = nbr.loop_edges()
        if loops is not None:  # the self-loop is added once, as PyG replaces stored ones
            logits = logits.masked_fill(loops.unsqueeze(1), -torch.inf)
        with torch.no_grad():  # a per-vertex shift of the softmax: any value gives its result
            top = loop.scatter_reduce(0, dst.unsqueeze(1).expand_as(logits), logits, "amax")
            top = nbr.combine(top, "max", empty_rows=False)
        weight = torch.exp(logits - top[dst])
        loop_weight = torch.exp(loop - top)
        total = nbr.combine(torch.zeros_like(loop_weight).index_add(0, dst, weight),
                            exact=True) + loop_weight
        alpha = weight / total[dst]
        if p:
            alpha = vertex_dropout(alpha, nbr.edge_keys(alpha.device)[0], p, key)
        y = torch.zeros_like(z).index_add(0, dst, alpha.unsqueeze(-1) * z[src])
        return y.view(len(y), -1), loop_weight / total


class TritonBackend(TorchSparseBackend):
    """Deterministic Triton kernels on CUDA tensors (:mod:`distgnn.kernels.gpu`).

    The sum and mean aggregations and their backward (on the transposed CSR) run as
    row-parallel SpMM, and GAT's softmax and aggregation without an ``[E, H, C]`` tensor
    (:class:`TritonSoftmaxAggregate`), both formed in the same order every run, so that a GPU
    run repeats bit for bit.  Max and min are the torch backend's (scatter operations).  The
    default on GPU ranks where Triton is installed (it comes with CUDA builds of PyTorch).
    ``aggregation_precision`` as in the module docstring: under bf16 the kernels gather bf16
    rows (half the bytes).
    """

    name = "triton"

    def csr(self, graph: CSRGraph, device: torch.device) -> dict:
        """The CSR and its transpose on ``device``, made once per device and cached.

        A dict of ``indptr``, ``indices``, ``order`` (the rows by decreasing degree), ``weight``
        (or ``None``); the same with ``_t`` by source; ``rows`` (each edge's destination) and
        ``position`` (the edge of each transposed entry); ``loops`` (which edges are stored
        self-loops, ``None`` if none is), kept in ``graph.cache``.
        """
        from ..kernels import gpu

        key = f"triton:{device}"
        if key not in graph.cache:
            n = graph.num_nodes
            itype = np.int32 if max(n, graph.num_edges) < 2**31 - 1 else np.int64
            indptr_t, dst_t, position = transposed_order(graph.indptr, graph.indices, n)
            on = lambda a, dtype=None: torch.from_numpy(  # noqa: E731
                np.ascontiguousarray(a, dtype=dtype)).to(device)
            weight = graph.edge_weight
            t = {"indptr": on(graph.indptr, np.int64), "indices": on(graph.indices, itype),
                 "indptr_t": on(indptr_t), "indices_t": on(dst_t, itype),
                 "rows": on(csr_rows(graph.indptr, itype)), "position": on(position),
                 "weight": None if weight is None else on(weight, np.float32),
                 "weight_t": None if weight is None else on(weight[position], np.float32),
                 "inv_deg": (1.0 / torch.from_numpy(graph.in_degrees()).clamp(min=1)
                             ).to(device, torch.float32).unsqueeze(1)}
            t["order"], t["order_t"] = gpu.row_order(t["indptr"]), gpu.row_order(t["indptr_t"])
            loops = t["indices"] == t["rows"]
            t["loops"] = loops if bool(loops.any()) else None
            graph.cache[key] = t
        return graph.cache[key]

    def gathered(self, x: torch.Tensor, reduce: str) -> torch.Tensor:
        """What the kernels gather for ``x``: itself, or a bf16 copy (see the class)."""
        return x.to(torch.bfloat16) if self.bf16 and reduce in LINEAR else x

    def product(self, graph: CSRGraph, x: torch.Tensor, reduce: str, transposed: bool
                ) -> torch.Tensor:
        """``A x`` (``A^T x`` when ``transposed``), scaled for the mean."""
        from ..kernels import gpu

        t, side = self.csr(graph, x.device), "_t" if transposed else ""
        if reduce == "mean" and transposed:
            x = x * t["inv_deg"].to(x.dtype)
        y = gpu.spmm(t["indptr" + side], t["indices" + side], t["order" + side],
                     self.gathered(x.contiguous(), reduce), t["weight" + side],
                     out_dtype=x.dtype)
        return y * t["inv_deg"].to(x.dtype) if reduce == "mean" and not transposed else y

    def spmm(self, graph, x, reduce):
        if reduce not in LINEAR:
            return super().spmm(graph, x, reduce)
        check_operand(graph, x, reduce)
        return self.product(graph, x, reduce, False), None

    def spmm_backward(self, graph, grad_y, reduce, arg):
        if reduce not in LINEAR:
            return super().spmm_backward(graph, grad_y, reduce, arg)
        check_operand(graph, grad_y, reduce, "grad_y")
        return self.product(graph, grad_y, reduce, True)

    def attend(self, nbr, loop, s, t, z, slope, p, key):
        """In the kernels of :mod:`distgnn.kernels.gpu` (:class:`TritonSoftmaxAggregate`)."""
        return TritonSoftmaxAggregate.apply(loop, s, t, z, nbr, self, slope, p, key)


class TritonSoftmaxAggregate(torch.autograd.Function):
    """GAT's edge softmax and aggregation on a GPU, without any ``[E, H, C]`` tensor.

    The mathematics are those of :mod:`distgnn.kernels.attention`: per-edge ``[E, H]``
    logits, coefficients and their gradients in torch operations, every sum over a vertex's
    edges in :func:`distgnn.kernels.gpu.spmm` (the per-head aggregation of ``z`` too) and the
    coefficients' gradient ``k_e <g_v, z_u>`` in :func:`~distgnn.kernels.gpu.sddmm_heads`:
    no ``[E, H, C]`` tensor is made, and no sum depends on the order of atomics.  Returns,
    as :class:`SoftmaxAggregate` does, this rank's partial ``y`` ``[N, H C]`` and the
    self-loop coefficients ``[N, H]``.
    """

    @staticmethod
    def forward(ctx, loop, s, t, z, nbr, backend, slope, p, key):
        from ..kernels import gpu

        c = backend.csr(nbr.graph, z.device)
        n, heads = z.shape[0], z.shape[1]
        src, dst = c["indices"], c["rows"]
        rows = functools.partial(gpu.spmm, c["indptr"], c["indices"], c["order"], None,
                                 heads=heads)
        logits = F.leaky_relu(s[src] + t[dst], slope)  # [E, H]
        if c["loops"] is not None:  # stored self-loops take no part; the caller adds one
            logits.masked_fill_(c["loops"].unsqueeze(1), -torch.inf)
        top = nbr.combine(torch.maximum(loop, rows(logits, row_max=True)), "max",
                          empty_rows=False)
        alpha = logits.sub_(top[dst]).exp_()  # the weights, made the coefficients below
        loop_weight = torch.exp(loop - top)
        total = nbr.combine(rows(alpha), exact=True) + loop_weight
        alpha.div_(total[dst])
        kept = (gpu.keyed_dropout(alpha, torch.as_tensor(nbr.edge_keys(z.device)[0],
                                                         device=z.device), p, key)
                if p else alpha)
        y = gpu.spmm(c["indptr"], c["indices"], c["order"], z.reshape(n, -1), kept, heads)
        loop_alpha = loop_weight / total
        ctx.nbr, ctx.backend, ctx.slope = nbr, backend, slope
        ctx.save_for_backward(s, t, z, alpha, kept, loop_alpha)
        return y, loop_alpha

    @staticmethod
    def backward(ctx, grad_y, grad_loop_alpha):
        from ..kernels import gpu

        s, t, z, alpha, kept, loop_alpha = ctx.saved_tensors
        c = ctx.backend.csr(ctx.nbr.graph, z.device)
        n, heads = z.shape[0], z.shape[1]
        src, dst, position = c["indices"], c["rows"], c["position"]
        rows = functools.partial(gpu.spmm, c["indptr"], c["indices"], c["order"], None,
                                 heads=heads)
        g = grad_y.reshape(n, -1).contiguous()
        # alpha_e dL/dalpha_e = k_e <g_v, z_u>, summed per vertex over its in-edges and loop
        grad = gpu.sddmm_heads(src, dst, g, z.reshape(n, -1), heads, kept)
        dot = rows(grad) + loop_alpha * grad_loop_alpha
        grad_loop = loop_alpha * grad_loop_alpha - loop_alpha * dot  # this clone's part
        dot = ctx.nbr.combine(dot, exact=True)
        grad.sub_(alpha * dot[dst])  # dL/d(s_u + t_v), through the LeakyReLU below
        grad = torch.where(s[src] + t[dst] > 0, grad, grad * ctx.slope)
        grad_t = rows(grad)
        grad_s = gpu.spmm(c["indptr_t"], c["indices_t"], c["order_t"], None, grad[position],
                          heads)
        grad_z = gpu.spmm(c["indptr_t"], c["indices_t"], c["order_t"], g, kept[position],
                          heads)
        return (grad_loop, grad_s, grad_t, grad_z.view_as(z), None, None, None, None, None)


class NumbaBackend:
    """Cache-blocked, nnz-balanced Numba SpMM on CPU tensors (float32 or float64).

    Tensors are handed to the kernels as ``.numpy()`` views of their memory (no copies;
    under bf16 ``aggregation_precision``, sum and mean hand over a bf16 copy of float32
    ``x`` and ``g`` instead, see the module docstring).  Per graph it caches (in
    ``graph.cache``, beside the graph's own transpose) the per-edge source ids for the
    max/min backward, an autotuned plan per feature width, element size and direction,
    and the row chunks and edge transpose of the attention kernels.
    """

    name = "numba"

    def __init__(self, aggregation_precision: str = "fp32", kernel_trial: bool = True):
        self.bf16 = _check_precision(aggregation_precision) == "bf16"
        self.kernel_trial = kernel_trial

    def gathered(self, x: torch.Tensor, reduce: str) -> np.ndarray:
        """What the kernels gather for ``x``: its memory, or its bf16 bits (see above; a
        bf16 ``x``, a product's output under ``--precision bf16-mixed``, as it is)."""
        if x.dtype == torch.bfloat16:
            if self.bf16 and reduce in LINEAR:
                return x.detach().view(torch.int16).numpy().view(BF16)
            return x.detach().float().numpy()
        if self.bf16 and reduce in LINEAR and x.dtype == torch.float32:
            return bf16_bits(x)
        return x.detach().numpy()

    def plan(self, graph: CSRGraph, x: np.ndarray, out: np.ndarray, transposed: bool = False,
             source_scale: np.ndarray | None = None):
        """The autotuned SpMM plan for features as wide as ``x`` and of its dtype.

        It is tuned once, on ``x`` into ``out``, which the trial overwrites, then cached.
        Without ``kernel_trial``, the untimed plan (no hub blocking): the trial costs some 20
        SpMMs, which a single forward pass (inference) never wins back.

        With ``source_scale`` ``q`` ``[N_src]`` (float32 and bf16 ``x``; float64 sums keep
        gathering ``q`` in float64): the unblocked plan that folds ``q`` into its edge
        weights (:func:`~distgnn.kernels.blocking.plan_spmm`), one per ``q`` (compared by
        value: GCN's forward and backward pass fold the same one) and direction, for every
        width: 4 bytes per edge beside the graph's own arrays.  Unblocked, so that no width
        adds a copy of the edges and no trial holds two: on R-MAT 2^20 it took as long as
        the autotuned blocked plan, at 128 bf16 columns (0.80 s on an Intel Xeon).
        """
        width = x.shape[1]
        transposed = transposed and graph.transpose() is not graph  # symmetric: one plan
        if source_scale is not None and x.dtype != np.float64:  # the weights are float32
            folded = graph.cache.setdefault(("numba-folded-plans", transposed), [])
            for plan in folded:
                if np.array_equal(plan.source_scale, source_scale):
                    return plan
            g = graph.transpose() if transposed else graph
            folded.append(plan_spmm(g.indptr, g.indices, g.edge_weight, 0, g.num_nodes,
                                    source_scale))
            return folded[-1]
        key = ("numba-plan", transposed, width, x.dtype.itemsize)
        if key not in graph.cache:
            g = graph.transpose() if transposed else graph
            plan = autotune_plan(g.indptr, g.indices, g.edge_weight, g.num_nodes, width,
                                 None if self.kernel_trial else False, dtype=x.dtype,
                                 x=x, out=out)[0]
            # one plan per (direction, hub block): widths that choose the same blocking
            # share its arrays (each about 4 bytes per edge) instead of keeping a copy each
            shared = graph.cache.setdefault(("numba-plans", transposed), {})
            graph.cache[key] = shared.setdefault(plan.hub_block, plan)
        return graph.cache[key]

    @staticmethod
    def _output(graph: CSRGraph, x: np.ndarray) -> np.ndarray:
        """The aggregate's buffer ``[N_dst, d]``: float32 for bf16 ``x``, else ``x``'s dtype."""
        return buffers.empty((graph.num_nodes, x.shape[1]),
                             np.float32 if x.dtype == BF16 else x.dtype)

    def spmm(self, graph, x, reduce):
        check_operand(graph, x, reduce, dtypes=NUMBA_DTYPES + (torch.bfloat16,), device="cpu")
        xn = as_aligned(self.gathered(x, reduce))
        out = self._output(graph, xn)
        result = spmm(graph.indptr, graph.indices, xn, reduce, graph.edge_weight, out=out,
                      plan=self.plan(graph, xn, out))
        if reduce in ("max", "min"):
            return torch.from_numpy(result[0]), torch.from_numpy(result[1])
        return torch.from_numpy(result), None

    def spmm_backward(self, graph, grad_y, reduce, arg):
        check_operand(graph, grad_y, reduce, "grad_y", NUMBA_DTYPES, "cpu")
        g = grad_y.numpy()
        if reduce in ("max", "min"):
            if "src" not in graph.cache:
                graph.cache["src"] = torch.from_numpy(graph.indices.astype(np.int64))
            weight = None if graph.edge_weight is None else torch.from_numpy(graph.edge_weight)
            return scatter_argreduce_grad(grad_y, arg, graph.cache["src"], weight,
                                          graph.num_nodes)
        if reduce == "mean":
            g = np.multiply(g, inverse_degree(graph.indptr, g.dtype)[:, None],
                            out=buffers.empty_like(g))
        g = as_aligned(self.gathered(torch.from_numpy(g), reduce))
        t = graph.transpose()
        out = self._output(t, g)
        return torch.from_numpy(spmm(t.indptr, t.indices, g, "sum", t.edge_weight, out=out,
                                     plan=self.plan(graph, g, out, True)))

    def propagate(self, graph: CSRGraph, x: torch.Tensor, source_scale: torch.Tensor | None,
                  row_scale: torch.Tensor | None, transposed: bool = False) -> torch.Tensor:
        """``r * ((A + I) (q * x))`` in one kernel pass (``A^T`` where ``transposed``).

        :func:`~distgnn.kernels.spmm.spmm` with ``source_scale`` ``q`` and ``row_scale``
        ``r`` (``[N, 1]`` or ``None``: 1) and the self-loop.  The result has ``x``'s dtype:
        float32/float64, or bf16 rows (gathered and written as bf16, accumulated in
        float32), and holds no autograd history.
        """
        check_operand(graph, x, "sum", dtypes=NUMBA_DTYPES + (torch.bfloat16,), device="cpu")
        xn = as_aligned(rows_of(x))
        g = graph.transpose() if transposed else graph
        out = buffers.empty((g.num_nodes, x.shape[1]), xn.dtype)
        scales = [None if c is None else c.detach().contiguous().view(-1).numpy()
                  for c in (source_scale, row_scale)]
        spmm(g.indptr, g.indices, xn, "sum", g.edge_weight, out=out,
             plan=self.plan(graph, xn, out, transposed, scales[0]), source_scale=scales[0],
             row_scale=scales[1], self_loop=True)
        return tensor_of(out, x.dtype)

    def attend(self, nbr, loop, s, t, z, slope, p, key):
        """In the Numba kernels of :mod:`distgnn.kernels.attention` (:class:`SoftmaxAggregate`)."""
        return SoftmaxAggregate.apply(loop, s, t, z, nbr, slope, p, key)

    @staticmethod
    def row_chunks(graph: CSRGraph) -> np.ndarray:
        """Thread chunks of equal non-zeros over the graph's rows (made once, then cached)."""
        if "row-chunks" not in graph.cache:
            graph.cache["row-chunks"] = balanced_chunks(graph.indptr)
        return graph.cache["row-chunks"]

    @staticmethod
    def transposed(graph: CSRGraph) -> tuple[np.ndarray, ...]:
        """The CSR by source with each edge's position in the graph's CSR, and its row
        chunks: ``(indptr_t, dst_t, position, chunks_t)`` (made once, then cached)."""
        if "edge-transpose" not in graph.cache:
            indptr_t, dst_t, position = transposed_order(graph.indptr, graph.indices,
                                                         graph.num_nodes)
            graph.cache["edge-transpose"] = (indptr_t, dst_t, position,
                                             balanced_chunks(indptr_t))
        return graph.cache["edge-transpose"]


class SoftmaxAggregate(torch.autograd.Function):
    """GAT's edge softmax and aggregation over a neighbourhood in Numba kernels.

    The kernels are :mod:`distgnn.kernels.attention`'s, with the clone exchanges between them:
    returns the partial ``y`` ``[N, H C]`` over this rank's in-edges (the caller combines it
    like any aggregate) and the self-loop coefficients ``[N, H]``; the gradients of the loop
    logits, source and destination scores and ``z``.  The per-edge coefficients (and, with
    dropout, the dropped ones) are the only ``[E, H]`` tensors kept for the backward pass.
    """

    @staticmethod
    @float32_inputs
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
    @autocast_backward
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


BACKENDS = ("numba", "torch", "triton")


def get_backend(name: str, aggregation_precision: str = "fp32", kernel_trial: bool = True
                ) -> KernelBackend:
    """Instantiate the aggregation backend called ``name`` (one of ``BACKENDS``).

    It gathers sum/mean operands in ``aggregation_precision`` (one of
    ``AGGREGATION_PRECISIONS``); ``kernel_trial``: whether the Numba backend may time its SpMM
    plans (:meth:`NumbaBackend.plan`).
    """
    if name == "torch":
        return TorchSparseBackend(aggregation_precision)
    if name == "triton":
        return TritonBackend(aggregation_precision)
    if name == "numba":
        return NumbaBackend(aggregation_precision, kernel_trial)
    raise DistGNNError(f"unknown aggregation backend {name!r}; choose from "
                       f"{', '.join(BACKENDS)}")


