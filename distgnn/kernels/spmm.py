"""Numba SpMM kernels over CSR (rows = destinations), forward and backward.

Also the epilogue of an aggregation with a self-loop and a row normalisation
(:func:`add_rows_scaled`).

For ``A`` ``[N_dst, N_src]`` with optional edge weights ``w`` and ``x`` ``[N_src, d]``:

.. math::
    \\text{sum: } y_v = \\sum_{e=(u,v)} w_e x_u, \\quad
    \\text{mean: } y_v = \\frac{1}{|N(v)|} \\sum_{e=(u,v)} w_e x_u, \\quad
    \\text{max/min: } y_{v,f} = \\max/\\min_{e=(u,v)} w_e x_{u,f}

Rows with no entries give 0.  The aggregation is memory-bound (a random gather of one
``d``-float row per edge), so the kernels (a) split the rows into chunks of equal
non-zeros, not equal rows, because power-law rows differ by orders of magnitude; (b)
accumulate each output row in registers, in panels of a compile-time width
(:mod:`~distgnn.kernels.lanes`), over runs of the row's edges whose source rows stay in
L1 (:func:`edge_block`), writing each panel once per run; (c) prefetch each panel's lines
of the source :func:`prefetch_distance` edges ahead, which keeps more cache misses in
flight than the hardware prefetcher does for random rows; (d) work on 64-byte aligned
``x`` and ``y``, so that a row of ``16 k`` floats spans ``k`` cache lines, not ``k + 1``;
and (e) run over the *source blocks*
of an :class:`~distgnn.kernels.blocking.SpMMPlan`: the first block holds the highest
out-degree sources, small enough to stay in L2 while every row reads it.

Sum and mean also gather bf16 features (``x`` as uint16 bit patterns, see
:func:`~distgnn.kernels.lanes.load`): half the bytes per gathered row, accumulated and
written in float32.  Max and min take float32/float64 only.
"""
from __future__ import annotations

import functools

import numba
import numpy as np
from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic

from ..spill import CACHE_LINE, empty_aligned
from . import jit
from .blocking import SpMMPlan, last_level_cache, plan_spmm
from .jit import readonly
from .lanes import BF16, add, load, scale, scaled_add, store, zeros

PREFETCH_BYTES = 4096
PANEL_LANES = (8, 16, 32, 64)
PANEL_BYTES = 256
NARROW = PANEL_LANES[0]
EDGE_BLOCK_BYTES = 16 << 10


def prefetch_distance(width: int, itemsize: int = 4, rows: int | None = None) -> int:
    """Edges to prefetch ahead: about ``PREFETCH_BYTES`` of rows in flight, 4 to 64 rows.

    None (0) when ``rows`` such rows fit in half the last-level cache, where the hints only
    cost; the measurements behind both choices are in
    ``docs/results/spmm-prefetch-distance.md``.
    """
    if rows is not None and rows * width * itemsize <= last_level_cache() // 2:
        return 0
    return int(np.clip(PREFETCH_BYTES // max(width * itemsize, 1), 4, 64))


def as_aligned(x: np.ndarray) -> np.ndarray:
    """``x`` itself when contiguous and cache-line aligned, else an aligned copy.

    A misaligned ``x`` makes every gathered row straddle one extra line: at d = 16 that
    took 0.47 s against 0.26 s aligned, far more than the copy costs.
    """
    if x.flags.c_contiguous and x.ctypes.data % CACHE_LINE == 0:
        return x
    copy = empty_aligned(x.shape, x.dtype)
    copy[...] = x
    return copy
REDUCES = ("sum", "mean", "max", "min")
NO_WEIGHT = readonly(np.empty(0, np.float32))
NO_SCALE = readonly(np.empty(0, np.float32))


@intrinsic
def prefetch(typingctx, arr, row, col):
    """Hint the CPU to load ``arr[row, col]`` into cache (``llvm.prefetch``, read, keep)."""
    sig = types.void(arr, row, col)

    def codegen(context, builder, signature, args):
        arrty = signature.args[0]
        ary = context.make_array(arrty)(context, builder, args[0])
        r = context.cast(builder, args[1], signature.args[1], types.intp)
        c = context.cast(builder, args[2], signature.args[2], types.intp)
        ptr = cgutils.get_item_pointer(context, builder, arrty, ary, [r, c], wraparound=False)
        i8p = ir.IntType(8).as_pointer()
        i32 = ir.IntType(32)
        fn = cgutils.get_or_insert_function(
            builder.module, ir.FunctionType(ir.VoidType(), [i8p, i32, i32, i32]),
            "llvm.prefetch.p0")
        builder.call(fn, [builder.bitcast(ptr, i8p), i32(0), i32(3), i32(1)])
        return context.get_dummy_value()

    return sig, codegen


@numba.njit(fastmath=True, cache=True, nogil=True, inline="always")
def _panel(indices, weight, x, out, v, start, end, col, n, lanes, keep, factor, distance,
           line, lines):
    """Sum the edges ``start:end`` of row ``v`` into ``out[v, col:col + n]``, one panel.

    ``out[v, col:col + n] = factor * (out[v, col:col + n] if keep else 0
    + sum_{start <= e < end} w_e x[u_e, col:col + n])`` in one register panel of ``lanes``
    (a compile-time constant), prefetching the panel's ``lines`` cache lines (of ``line``
    elements) of the source ``distance`` edges ahead.
    """
    acc = load(out, v, col, n, lanes) if keep else zeros(out, lanes)
    weighted = len(weight) > 0
    for e in range(start, end):
        ahead = e + distance
        if distance > 0 and ahead < len(indices):
            for k in range(lines):
                prefetch(x, indices[ahead], col + k * line)
        if weighted:
            acc = scaled_add(acc, weight[e], load(x, indices[e], col, n, lanes))
        else:
            acc = add(acc, load(x, indices[e], col, n, lanes))
    store(out, v, col, n, scale(acc, factor))


@functools.cache
def sum_kernel(lanes: int):
    """The sum kernel compiled for panels of ``lanes`` features (see :func:`panel_lanes`).

    ``kernel(chunks, indptr, indices, weight, x, out, accumulate, row_scale, distance,
    edge_block)`` does ``out[v] (+)= sum_e w_e x[u_e]`` over the rows of one block, then
    ``out[v] *= row_scale[v]`` (``row_scale`` ``[N_dst]``, or empty for none); ``x`` is
    float32/float64 or bf16 bits (uint16, gathered as float32).  A row's edges go in runs
    of ``edge_block``, whose source rows stay in L1 while each run is swept once per
    panel: panels of ``lanes`` features, then of 8, then one masked panel of the last
    ``d % 8`` (full panels are plain vector loads; only the last pays for masking).
    Numba caches each ``lanes`` (and ``x`` type) separately on disk; every array but ``out``
    comes read-only (:func:`~distgnn.kernels.jit.readonly`).
    """
    @jit.kernel(parallel=True, fastmath=True, nogil=True)
    def kernel(chunks, indptr, indices, weight, x, out, accumulate, row_scale, distance,
               edge_block):
        d = out.shape[1]
        wide, narrow = d - d % lanes, d - d % NARROW
        line = CACHE_LINE // x.itemsize
        lines = (lanes + line - 1) // line  # a narrow panel is within one line
        for c in numba.prange(len(chunks) - 1):
            for v in range(chunks[c], chunks[c + 1]):
                first, end = indptr[v], indptr[v + 1]
                for start in range(first, max(end, first + 1), edge_block):  # empty: once
                    stop = min(start + edge_block, end)
                    keep = accumulate or start > first
                    factor = row_scale[v] if stop == end and len(row_scale) > 0 else 1.0
                    for col in range(0, wide, lanes):
                        _panel(indices, weight, x, out, v, start, stop, col, lanes, lanes,
                               keep, factor, distance, line, lines)
                    for col in range(wide, narrow, NARROW):
                        _panel(indices, weight, x, out, v, start, stop, col, NARROW, NARROW,
                               keep, factor, distance, line, 1)
                    if narrow < d:
                        _panel(indices, weight, x, out, v, start, stop, narrow, d - narrow,
                               NARROW, keep, factor, distance, line, 1)

    return kernel


def edge_block(width: int, itemsize: int = 4) -> int:
    """Edges per run: ``EDGE_BLOCK_BYTES`` of source rows (half of L1), at least 1."""
    return max(EDGE_BLOCK_BYTES // max(width * itemsize, 1), 1)


def panel_lanes(width: int, itemsize: int = 4) -> int:
    """Features per register panel: the widest of ``PANEL_LANES`` that is at most ``width``
    and holds at most ``PANEL_BYTES`` of the accumulator (8 of the 16 AVX registers)."""
    fits = [n for n in PANEL_LANES if n <= width and n * itemsize <= PANEL_BYTES]
    return max(fits, default=NARROW)


@jit.kernel(parallel=True, fastmath=True, nogil=True)
def _extreme(chunks, indptr, indices, weight, x, out, arg, is_max):
    """Row-wise max (or min) of ``w_e x[u_e]`` with the position ``e`` that attains it."""
    d = x.shape[1]
    weighted = len(weight) > 0
    for c in numba.prange(len(chunks) - 1):
        for v in range(chunks[c], chunks[c + 1]):
            start, end = indptr[v], indptr[v + 1]
            if start == end:
                for f in range(d):
                    out[v, f] = 0.0
                    arg[v, f] = -1
                continue
            w = weight[start] if weighted else np.float32(1.0)
            u = indices[start]
            for f in range(d):
                out[v, f] = w * x[u, f]
                arg[v, f] = start
            for e in range(start + 1, end):
                w = weight[e] if weighted else np.float32(1.0)
                u = indices[e]
                for f in range(d):
                    val = w * x[u, f]
                    if (val > out[v, f]) if is_max else (val < out[v, f]):
                        out[v, f] = val
                        arg[v, f] = e


@jit.kernel(parallel=True, nogil=True)
def add_rows_scaled(y, z, c, divide, out):
    """``out = (y + z) / c`` (``divide``) or ``(y + z) * c``, row ``i`` by ``c[i]``, in one pass.

    The epilogue of an aggregation with a self-loop and a row normalisation (GraphSAGE-gcn's
    ``1 / (d + 1)``, GCN's ``D^-1/2``): the separate ``add`` and ``div_``/``mul_`` would
    read and write the rows twice.  Same rounding as they: one addition, then one division
    or product (no fused multiply-add).  ``y``, ``z``, ``out`` ``[N, d]``; ``c`` ``[N]``.
    """
    for i in numba.prange(y.shape[0]):
        s = c[i]
        if divide:
            for f in range(y.shape[1]):
                out[i, f] = (y[i, f] + z[i, f]) / s
        else:
            for f in range(y.shape[1]):
                out[i, f] = (y[i, f] + z[i, f]) * s


@jit.kernel(parallel=True, nogil=True)
def scale_rows(g, c, divide, out):
    """``out = g / c`` (``divide``) or ``g * c``, row ``i`` by ``c[i]``: the gradient of
    :func:`add_rows_scaled` with respect to both its inputs."""
    for i in numba.prange(g.shape[0]):
        s = c[i]
        if divide:
            for f in range(g.shape[1]):
                out[i, f] = g[i, f] / s
        else:
            for f in range(g.shape[1]):
                out[i, f] = g[i, f] * s


def _weight_array(edge_weight) -> np.ndarray:
    return NO_WEIGHT if edge_weight is None else \
        readonly(np.ascontiguousarray(edge_weight, np.float32))


def inverse_degree(indptr: np.ndarray, dtype=np.float32) -> np.ndarray:
    """``[N]``: ``1 / max(row length, 1)``, the ``mean`` scaling."""
    return (1.0 / np.maximum(np.diff(indptr), 1)).astype(dtype)


def spmm(indptr, indices, x, reduce: str = "sum", edge_weight=None, out=None,
         plan: SpMMPlan | None = None):
    """``y = reduce_{e=(u,v)} w_e x_u`` for CSR ``(indptr, indices)`` and ``x`` ``[N_src, d]``.

    Args:
        indptr (np.ndarray): int64 ``[N_dst + 1]``.
        indices (np.ndarray): int32/int64 ``[E]`` source ids.
        x (np.ndarray): float32 (or float64) ``[N_src, d]``; for sum/mean also bf16 as
            uint16 bit patterns (:data:`~distgnn.kernels.lanes.BF16`), gathered as float32.
        reduce (str): ``"sum"``, ``"mean"``, ``"max"`` or ``"min"``.
        edge_weight (np.ndarray, optional): float32 ``[E]``.
        out (np.ndarray, optional): ``[N_dst, d]`` to write into: of ``x``'s dtype, float32
            for bf16.
        plan (SpMMPlan, optional): source blocking and row chunks (sum/mean); built
            unblocked when omitted.  Build one with :func:`plan_spmm` and reuse it.

    Returns:
        ``y`` ``[N_dst, d]`` for sum/mean; ``(y, arg)`` for max/min, where ``arg`` int64
        ``[N_dst, d]`` is the position in ``indices`` of the edge attaining the extreme
        (-1 for empty rows).
    """
    if x.dtype == BF16 and reduce not in ("sum", "mean"):
        raise ValueError(f"bf16 features aggregate by sum or mean, not {reduce}")
    x = as_aligned(np.asarray(x, dtype=x.dtype if x.dtype in (np.float64, BF16) else np.float32))
    n_dst = len(indptr) - 1
    if out is None:
        out = empty_aligned((n_dst, x.shape[1]), np.float32 if x.dtype == BF16 else x.dtype)
    if reduce in ("max", "min"):
        plan = plan or plan_spmm(indptr, indices, edge_weight, hub_block=0)
        arg = np.empty(out.shape, np.int64)
        _extreme(readonly(plan.chunks_full), readonly(indptr), readonly(indices),
                 _weight_array(edge_weight), readonly(x), out, arg, reduce == "max")
        return out, arg
    if reduce not in REDUCES:
        raise ValueError(f"reduce must be one of {', '.join(REDUCES)}, got {reduce!r}")
    plan = plan or plan_spmm(indptr, indices, edge_weight, hub_block=0)
    row_scale = readonly(inverse_degree(indptr, out.dtype)) if reduce == "mean" else NO_SCALE
    run_block = sum_kernel(panel_lanes(x.shape[1], out.itemsize))
    last = len(plan.blocks) - 1
    distance = prefetch_distance(x.shape[1], x.itemsize, len(x))
    run = edge_block(x.shape[1], x.itemsize)
    x = readonly(x)
    for i, block in enumerate(plan.blocks):
        run_block(readonly(block.chunks), readonly(block.indptr), readonly(block.indices),
                  readonly(block.weight), x, out, i > 0, row_scale if i == last else NO_SCALE,
                  distance, run)
    if not plan.blocks:  # a graph without rows
        out[:] = 0
    return out


@numba.njit(cache=True, nogil=True)
def _scatter_by_source(indptr, indices, fill, indices_t):
    for v in range(len(indptr) - 1):
        for k in range(indptr[v], indptr[v + 1]):
            u = indices[k]
            indices_t[fill[u]] = v
            fill[u] += 1


@numba.njit(cache=True, nogil=True)
def _scatter_weights(indptr, indices, weight, fill, weight_t):
    for v in range(len(indptr) - 1):
        for k in range(indptr[v], indptr[v + 1]):
            u = indices[k]
            weight_t[fill[u]] = weight[k]
            fill[u] += 1


def transpose_csr(indptr: np.ndarray, indices: np.ndarray, num_sources: int, edge_weight=None
                  ) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """``(indptr_t, indices_t, weight_t)``: the CSR of the reversed graph (rows = sources).

    A counting sort: each source's row lists its destinations in CSR order (what a stable
    sort by source gives), in O(E) time and with no memory beyond the result (no ``[E]``
    int64 permutation).  ``indices_t`` has ``indices``'s integer type.
    """
    counts = np.bincount(indices, minlength=num_sources) if len(indices) else \
        np.zeros(num_sources, np.int64)
    indptr_t = np.zeros(num_sources + 1, np.int64)
    np.cumsum(counts, out=indptr_t[1:])
    del counts
    indices_t = np.empty(len(indices), indices.dtype)
    _scatter_by_source(readonly(indptr), readonly(indices), indptr_t[:-1].copy(), indices_t)
    weight_t = None
    if edge_weight is not None:
        weight_t = np.empty(len(indices), np.asarray(edge_weight).dtype)
        _scatter_weights(readonly(indptr), readonly(indices), readonly(np.asarray(edge_weight)),
                         indptr_t[:-1].copy(), weight_t)
    return indptr_t, indices_t, weight_t
