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
from .lanes import BF16, add, as_float, load, scale, scaled_add, store, zeros

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
def _panel(indices, weight, source_scale, x, row, r, start, end, col, n, lanes, distance,
           line, lines):
    """Add the edges ``start:end`` of one row into ``row[r, col:col + n]``, one panel.

    ``row[r, col:col + n] += sum_{start <= e < end} w_e q_{u_e} x[u_e, col:col + n]`` in
    one register panel of ``lanes`` (a compile-time constant), prefetching the panel's
    ``lines`` cache lines (of ``line`` elements) of the source ``distance`` edges ahead;
    ``w`` (``weight``) and ``q`` (``source_scale``) are 1 where empty.
    """
    acc = load(row, r, col, n, lanes)
    weighted, scaled = len(weight) > 0, len(source_scale) > 0
    for e in range(start, end):
        ahead = e + distance
        if distance > 0 and ahead < len(indices):
            for k in range(lines):
                prefetch(x, indices[ahead], col + k * line)
            if scaled and col == 0:  # a random read per edge too, as the row's
                prefetch(source_scale, indices[ahead], 0)
        u = indices[e]
        if weighted or scaled:
            w = (weight[e] if weighted else 1.0) * (source_scale[u, 0] if scaled else 1.0)
            acc = scaled_add(acc, w, load(x, u, col, n, lanes))
        else:
            acc = add(acc, load(x, u, col, n, lanes))
    store(row, r, col, n, acc)


@numba.njit(fastmath=True, cache=True, nogil=True, inline="always")
def _row_start(x, out, source_scale, row, r, v, col, n, lanes, accumulate, self_loop):
    """``row[r, col:col + n]`` = the partial ``out[v]`` of earlier blocks (``accumulate``),
    else the self-loop's ``q_v x_v`` (``self_loop``), else 0."""
    if accumulate:
        acc = load(out, v, col, n, lanes)
    elif self_loop:
        acc = load(x, v, col, n, lanes)
        if len(source_scale) > 0:
            acc = scale(acc, source_scale[v, 0])
    else:
        acc = zeros(row, lanes)
    store(row, r, col, n, acc)


@numba.njit(fastmath=True, cache=True, nogil=True, inline="always")
def _row_end(row, r, out, v, col, n, lanes, factor):
    """``out[v, col:col + n] = factor * row[r, col:col + n]`` (rounded to bf16 for bf16
    ``out``)."""
    store(out, v, col, n, scale(load(row, r, col, n, lanes), factor))


@functools.cache
def sum_kernel(lanes: int):
    """The sum kernel compiled for panels of ``lanes`` features (see :func:`panel_lanes`).

    ``kernel(chunks, indptr, indices, weight, source_scale, loop_scale, x, out, rows,
    accumulate, self_loop, row_scale, distance, edge_block)`` does, over the rows of one
    source block,

    .. math::
        \\mathbf{o}_v = r_v \\Big( [\\text{accumulate}]\\, \\mathbf{o}_v
            + [\\text{self\\_loop}]\\, p_v \\mathbf{x}_v
            + \\sum_{e=(u,v)} w_e q_u \\mathbf{x}_u \\Big)

    with ``q`` = ``source_scale`` ``[N_src]``, ``p`` = ``loop_scale`` ``[N_dst]`` (the
    caller's ``q``; where a plan folded ``q`` into ``w``, ``source_scale`` is empty and
    ``p`` still ``q``), ``r`` = ``row_scale`` ``[N_dst]`` and the edge weights ``w`` (each 1
    where its array is empty).  ``x`` is float32/float64 or
    bf16 bits (uint16, gathered as float32); ``out`` the accumulator's float type or bf16
    bits (rounded once per row and block).  Each chunk of rows accumulates a row in its
    own row of ``rows`` (``[len(chunks) - 1, d]`` of the accumulator's type, in L1) and
    writes ``out[v]`` once.  A row's edges go in runs of ``edge_block``, whose source rows
    stay in L1 while each run is swept once per panel: panels of ``lanes`` features, then
    of 8, then one masked panel of the last ``d % 8`` (full panels are plain vector loads;
    only the last pays for masking).  Numba caches each ``lanes`` (and type) separately on
    disk; every array but ``out`` and ``rows`` comes read-only
    (:func:`~distgnn.kernels.jit.readonly`).
    """
    @jit.kernel(parallel=True, fastmath=True, nogil=True)
    def kernel(chunks, indptr, indices, weight, source_scale, loop_scale, x, out, rows,
               accumulate, self_loop, row_scale, distance, edge_block):
        d = out.shape[1]
        wide, narrow = d - d % lanes, d - d % NARROW
        line = CACHE_LINE // x.itemsize
        lines = (lanes + line - 1) // line  # a narrow panel is within one line
        for c in numba.prange(len(chunks) - 1):
            for v in range(chunks[c], chunks[c + 1]):
                for col in range(0, wide, lanes):
                    _row_start(x, out, loop_scale, rows, c, v, col, lanes, lanes,
                               accumulate, self_loop)
                for col in range(wide, narrow, NARROW):
                    _row_start(x, out, loop_scale, rows, c, v, col, NARROW, NARROW,
                               accumulate, self_loop)
                if narrow < d:
                    _row_start(x, out, loop_scale, rows, c, v, narrow, d - narrow, NARROW,
                               accumulate, self_loop)
                first, end = indptr[v], indptr[v + 1]
                for start in range(first, end, edge_block):
                    stop = min(start + edge_block, end)
                    for col in range(0, wide, lanes):
                        _panel(indices, weight, source_scale, x, rows, c, start, stop, col,
                               lanes, lanes, distance, line, lines)
                    for col in range(wide, narrow, NARROW):
                        _panel(indices, weight, source_scale, x, rows, c, start, stop, col,
                               NARROW, NARROW, distance, line, 1)
                    if narrow < d:
                        _panel(indices, weight, source_scale, x, rows, c, start, stop,
                               narrow, d - narrow, NARROW, distance, line, 1)
                factor = row_scale[v] if len(row_scale) > 0 else 1.0
                for col in range(0, wide, lanes):
                    _row_end(rows, c, out, v, col, lanes, lanes, factor)
                for col in range(wide, narrow, NARROW):
                    _row_end(rows, c, out, v, col, NARROW, NARROW, factor)
                if narrow < d:
                    _row_end(rows, c, out, v, narrow, d - narrow, NARROW, factor)

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
    or product (no fused multiply-add).  ``y``, ``z``, ``out`` ``[N, d]``; ``c`` ``[N]``;
    ``z`` may hold bf16 bit patterns beside a float32 ``y`` (widened exactly, as
    ``torch.add`` promotes them); ``out`` may be ``y`` itself (element by element).
    """
    for i in numba.prange(y.shape[0]):
        s = c[i]
        if divide:
            for f in range(y.shape[1]):
                out[i, f] = (y[i, f] + as_float(z[i, f])) / s
        else:
            for f in range(y.shape[1]):
                out[i, f] = (y[i, f] + as_float(z[i, f])) * s


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
         plan: SpMMPlan | None = None, source_scale=None, row_scale=None,
         self_loop: bool = False):
    """``y = reduce_{e=(u,v)} w_e x_u`` for CSR ``(indptr, indices)`` and ``x`` ``[N_src, d]``.

    Sum and mean also fuse the scalings and the self-loop of a normalised aggregation:

    .. math::
        \\mathbf{y}_v = r_v \\Big( [\\text{self\\_loop}]\\, q_v \\mathbf{x}_v
            + \\sum_{e=(u,v)} w_e q_u \\mathbf{x}_u \\Big)

    (``q`` = ``source_scale``, ``r`` = ``row_scale``: GraphSAGE-gcn's ``r = 1 / (d + 1)``,
    GCN's ``q = r = (d + 1)^{-1/2}``; ``mean`` is ``r = 1 / max(d, 1)``), in the one pass
    over the edges.

    Args:
        indptr (np.ndarray): int64 ``[N_dst + 1]``.
        indices (np.ndarray): int32/int64 ``[E]`` source ids.
        x (np.ndarray): float32 (or float64) ``[N_src, d]``; for sum/mean also bf16 as
            uint16 bit patterns (:data:`~distgnn.kernels.lanes.BF16`), gathered as float32.
        reduce (str): ``"sum"``, ``"mean"``, ``"max"`` or ``"min"``.
        edge_weight (np.ndarray, optional): float32 ``[E]``.
        out (np.ndarray, optional): ``[N_dst, d]`` to write into: of ``x``'s dtype, float32
            or bf16 bits for bf16 ``x`` (default float32).
        plan (SpMMPlan, optional): source blocking and row chunks (sum/mean); built
            unblocked when omitted.  Build one with :func:`plan_spmm` and reuse it.
        source_scale (np.ndarray, optional): ``q`` ``[N_src]`` (sum only); the same ``q``
            the plan folded into its weights where it did (``plan.source_scale``: then
            read with the edges, not gathered per edge).
        row_scale (np.ndarray, optional): ``r`` ``[N_dst]`` (sum only).
        self_loop (bool, optional): add ``q_v x_v`` (sum only; ``N_src == N_dst``).

    Returns:
        ``y`` ``[N_dst, d]`` for sum/mean; ``(y, arg)`` for max/min, where ``arg`` int64
        ``[N_dst, d]`` is the position in ``indices`` of the edge attaining the extreme
        (-1 for empty rows).
    """
    if x.dtype == BF16 and reduce not in ("sum", "mean"):
        raise ValueError(f"bf16 features aggregate by sum or mean, not {reduce}")
    fused = source_scale is not None or row_scale is not None or self_loop
    if fused and reduce != "sum":
        raise ValueError(f"source_scale, row_scale and self_loop go with sum, not {reduce}")
    folded = plan is not None and plan.source_scale is not None
    if folded and (source_scale is None or np.shape(source_scale)[0] != len(plan.source_scale)):
        raise ValueError("the plan folds a source scale into its edge weights: pass the same "
                         "source_scale")
    x = as_aligned(np.asarray(x, dtype=x.dtype if x.dtype in (np.float64, BF16) else np.float32))
    n_dst = len(indptr) - 1
    if self_loop and len(x) != n_dst:
        raise ValueError(f"a self-loop needs as many sources as rows, got {len(x)} and {n_dst}")
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
    accumulator = np.float64 if x.dtype == np.float64 else np.float32
    if reduce == "mean":
        row_scale = inverse_degree(indptr, accumulator)
    none = readonly(np.empty(0, accumulator))
    row_scale = none if row_scale is None else \
        readonly(np.ascontiguousarray(row_scale, accumulator))
    # [N_src, 1]: prefetched edges ahead as the rows are (the 2-D prefetch)
    loop_scale = readonly(np.empty((0, 1), accumulator) if source_scale is None else
                          np.ascontiguousarray(source_scale, accumulator).reshape(-1, 1))
    source_scale = readonly(np.empty((0, 1), accumulator)) if folded else loop_scale
    run_block = sum_kernel(panel_lanes(x.shape[1], np.dtype(accumulator).itemsize))
    last = len(plan.blocks) - 1
    distance = prefetch_distance(x.shape[1], x.itemsize, len(x))
    run = edge_block(x.shape[1], x.itemsize)
    x = readonly(x)
    for i, block in enumerate(plan.blocks):
        rows = np.empty((len(block.chunks) - 1, x.shape[1]), accumulator)
        run_block(readonly(block.chunks), readonly(block.indptr), readonly(block.indices),
                  readonly(block.weight), source_scale, loop_scale, x, out, rows, i > 0,
                  self_loop and i == 0, row_scale if i == last else none, distance, run)
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
