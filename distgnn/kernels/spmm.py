"""Numba SpMM kernels over CSR (rows = destinations), forward and backward.

For ``A`` ``[N_dst, N_src]`` with optional edge weights ``w`` and ``x`` float32 ``[N_src, d]``:

.. math::
    \\text{sum: } y_v = \\sum_{e=(u,v)} w_e x_u, \\quad
    \\text{mean: } y_v = \\frac{1}{|N(v)|} \\sum_{e=(u,v)} w_e x_u, \\quad
    \\text{max/min: } y_{v,f} = \\max/\\min_{e=(u,v)} w_e x_{u,f}

Rows with no entries give 0.  The aggregation is memory-bound (a random gather of one
``d``-float row per edge), so the kernels (a) split the rows into chunks of equal
non-zeros, not equal rows, because power-law rows differ by orders of magnitude; (b)
accumulate each output row in a private buffer and write it once per pass; (c) prefetch
the source row :func:`prefetch_distance` edges ahead, which keeps more cache misses in
flight than the hardware prefetcher does for random rows; (d) work on 64-byte aligned
``x`` and ``y``, so that a row of ``16 k`` floats spans ``k`` cache lines, not ``k + 1``;
and (e) run over the *source blocks*
of an :class:`~distgnn.kernels.blocking.SpMMPlan`: the first block holds the highest
out-degree sources, small enough to stay in L2 while every row reads it.
"""
from __future__ import annotations

import numba
import numpy as np
from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic

from .blocking import SpMMPlan, plan_spmm

PREFETCH_FLOATS = 1024
CACHE_LINE = 64


def prefetch_distance(width: int) -> int:
    """Edges to prefetch ahead: about ``PREFETCH_FLOATS`` floats in flight, 4 to 32 rows.

    Measured on R-MAT 2^20 x 16, 2 threads, aligned rows (distance: seconds): d = 16
    0: 0.42, 8: 0.24, 32: 0.22; d = 64 0: 0.71, 4: 0.46, 16: 0.34; d = 128 0: 1.13,
    4: 0.56, 16: 0.68.
    """
    return int(np.clip(PREFETCH_FLOATS // max(width, 1), 4, 32))


def empty_aligned(shape: tuple[int, int], dtype) -> np.ndarray:
    """An uninitialised C-contiguous array whose first byte sits on a cache-line boundary."""
    dtype = np.dtype(dtype)
    count = int(np.prod(shape))
    buffer = np.empty(count * dtype.itemsize + CACHE_LINE, np.uint8)
    start = -buffer.ctypes.data % CACHE_LINE
    return buffer[start:start + count * dtype.itemsize].view(dtype).reshape(shape)


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
NO_WEIGHT = np.empty(0, np.float32)
NO_SCALE = np.empty(0, np.float32)


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


@numba.njit(parallel=True, fastmath=True, cache=True, nogil=True)
def _sum_block(chunks, indptr, indices, weight, x, out, accumulate, row_scale, distance):
    """``out[v] (+)= sum_e w_e x[u_e]`` over the rows of one block; then ``*= row_scale[v]``."""
    d = x.shape[1]
    nnz = len(indices)
    weighted = len(weight) > 0
    scaled = len(row_scale) > 0
    for c in numba.prange(len(chunks) - 1):
        acc = np.empty(d, x.dtype)
        for v in range(chunks[c], chunks[c + 1]):
            if accumulate:
                for f in range(d):
                    acc[f] = out[v, f]
            else:
                for f in range(d):
                    acc[f] = 0.0
            for e in range(indptr[v], indptr[v + 1]):
                ahead = e + distance
                if distance > 0 and ahead < nnz:
                    for f in range(0, d, 16):  # one hint per 64-byte line
                        prefetch(x, indices[ahead], f)
                u = indices[e]
                if weighted:
                    w = weight[e]
                    for f in range(d):
                        acc[f] += w * x[u, f]
                else:
                    for f in range(d):
                        acc[f] += x[u, f]
            if scaled:
                s = row_scale[v]
                for f in range(d):
                    out[v, f] = acc[f] * s
            else:
                for f in range(d):
                    out[v, f] = acc[f]


@numba.njit(parallel=True, fastmath=True, cache=True, nogil=True)
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


def _weight_array(edge_weight) -> np.ndarray:
    return NO_WEIGHT if edge_weight is None else np.ascontiguousarray(edge_weight, np.float32)


def inverse_degree(indptr: np.ndarray, dtype=np.float32) -> np.ndarray:
    """``[N]``: ``1 / max(row length, 1)``, the ``mean`` scaling."""
    return (1.0 / np.maximum(np.diff(indptr), 1)).astype(dtype)


def spmm(indptr, indices, x, reduce: str = "sum", edge_weight=None, out=None,
         plan: SpMMPlan | None = None):
    """``y = reduce_{e=(u,v)} w_e x_u`` for CSR ``(indptr, indices)`` and ``x`` ``[N_src, d]``.

    Args:
        indptr (np.ndarray): int64 ``[N_dst + 1]``.
        indices (np.ndarray): int32/int64 ``[E]`` source ids.
        x (np.ndarray): float32 (or float64) ``[N_src, d]``.
        reduce (str): ``"sum"``, ``"mean"``, ``"max"`` or ``"min"``.
        edge_weight (np.ndarray, optional): float32 ``[E]``.
        out (np.ndarray, optional): ``[N_dst, d]`` of ``x``'s dtype to write into.
        plan (SpMMPlan, optional): source blocking and row chunks (sum/mean); built
            unblocked when omitted.  Build one with :func:`plan_spmm` and reuse it.

    Returns:
        ``y`` ``[N_dst, d]`` for sum/mean; ``(y, arg)`` for max/min, where ``arg`` int64
        ``[N_dst, d]`` is the position in ``indices`` of the edge attaining the extreme
        (-1 for empty rows).
    """
    x = as_aligned(np.asarray(x, dtype=x.dtype if x.dtype == np.float64 else np.float32))
    n_dst = len(indptr) - 1
    if out is None:
        out = empty_aligned((n_dst, x.shape[1]), x.dtype)
    if reduce in ("max", "min"):
        plan = plan or plan_spmm(indptr, indices, edge_weight, hub_block=0)
        arg = np.empty(out.shape, np.int64)
        _extreme(plan.chunks_full, indptr, indices, _weight_array(edge_weight), x, out, arg,
                 reduce == "max")
        return out, arg
    if reduce not in REDUCES:
        raise ValueError(f"reduce must be one of {', '.join(REDUCES)}, got {reduce!r}")
    plan = plan or plan_spmm(indptr, indices, edge_weight, hub_block=0)
    scale = inverse_degree(indptr, x.dtype) if reduce == "mean" else NO_SCALE
    last = len(plan.blocks) - 1
    for i, block in enumerate(plan.blocks):
        _sum_block(block.chunks, block.indptr, block.indices, block.weight, x, out, i > 0,
                   scale if i == last else NO_SCALE, prefetch_distance(x.shape[1]))
    if not plan.blocks:  # a graph without rows
        out[:] = 0
    return out
