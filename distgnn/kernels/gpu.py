r"""Triton kernels for CUDA tensors: CSR SpMM, per-head SDDMM and keyed dropout.

What a GPU rank's aggregation (:class:`distgnn.nn.backends.TritonBackend`) and dropout
(:mod:`distgnn.nn.dropout`) run.  Each kernel is deterministic: a sum is always formed in the
same order, by one program, without atomics, so a run repeats bit for bit (cuSPARSE's SpMM
and ``index_add`` do not promise that).

- :func:`spmm`: for a CSR ``A`` (rows = destinations) with no weights, a weight per edge
  ``w_e`` or a weight per edge and head ``w_{e,h}`` (``x``'s columns in ``H`` equal heads
  of ``C``),

  .. math::
      y_{v,c} = \sum_{e=(u,v)} w_{e,h(c)}\, x_{u,c}, \qquad h(c) = \lfloor c / C \rfloor

  or, without ``x``, the row sums ``y_{v,h} = \sum_e w_{e,h}``.  One program per
  destination row and block of columns, rows started in decreasing degree so that the
  hubs do not finish last; ``x`` may be bf16 (its rows are gathered at half the bytes and
  summed in ``y``'s type).
- :func:`sddmm_heads`: ``out_{e,h} = s_{e,h} \langle a_{v,h}, b_{u,h} \rangle`` per edge
  ``e = (u, v)`` and head: GAT's gradient of its coefficients, without gathering the
  ``[E, H, C]`` rows a message-passing implementation writes.
- :func:`keyed_dropout`: ``out_{r,f} = x_{r,f} / (1 - p)`` where
  ``splitmix64(k + i_r W + f) >> 40 >= \lfloor p 2^{24} \rfloor``, else 0 (``W`` the width,
  ``i`` the row ids): :mod:`distgnn.nn.dropout`'s mask, the same bits as its Numba kernel,
  recomputed from the key in the backward pass instead of stored.

Triton comes with every CUDA build of PyTorch; :func:`available` says whether it could be
imported (this module imports it: import the module where a GPU computes).  With
``TRITON_INTERPRET=1`` set before the import, the kernels run on CPU tensors (slowly: the
tests use that).
"""
from __future__ import annotations

import torch

try:
    import triton
    import triton.language as tl
except ImportError:  # a CPU build of PyTorch: the kernels are not defined
    triton = None


def available() -> bool:
    """Whether Triton could be imported (it ships with CUDA builds of PyTorch)."""
    return triton is not None


if triton is not None:
    @triton.jit
    def _splitmix64(z):
        z = z + 0x9E3779B97F4A7C15
        z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9
        z = (z ^ (z >> 27)) * 0x94D049BB133111EB
        return z ^ (z >> 31)

    # integers equal to 1 would become compile-time constants, which have no .to()
    @triton.jit(do_not_specialize=["width", "head_width", "stride_x", "stride_y"])
    def _spmm_rows(indptr, indices, values, x, y, order, width, head_width,
                   stride_x, stride_y, WEIGHTS: tl.constexpr, HAS_X: tl.constexpr,
                   MAX: tl.constexpr, HEADS: tl.constexpr, BLOCK_E: tl.constexpr,
                   BLOCK_D: tl.constexpr):
        row = tl.load(order + tl.program_id(0)).to(tl.int64)
        cols = tl.program_id(1) * BLOCK_D + tl.arange(0, BLOCK_D)
        in_cols = cols < width
        start = tl.load(indptr + row).to(tl.int64)
        end = tl.load(indptr + row + 1).to(tl.int64)
        if MAX:
            acc = tl.full([BLOCK_D], float("-inf"), dtype=y.dtype.element_ty)
        else:
            acc = tl.zeros([BLOCK_D], dtype=y.dtype.element_ty)
        for first in range(start, end, BLOCK_E):
            e = first + tl.arange(0, BLOCK_E)
            in_row = e < end
            both = in_row[:, None] & in_cols[None, :]
            if HAS_X:
                src = tl.load(indices + e, mask=in_row, other=0).to(tl.int64)
                terms = tl.load(x + src[:, None] * stride_x + cols[None, :], mask=both,
                                other=0.0).to(acc.dtype)
                if WEIGHTS == 1:
                    w = tl.load(values + e, mask=in_row, other=0.0).to(acc.dtype)
                    terms = terms * w[:, None]
                if WEIGHTS == 2:
                    terms = terms * tl.load(values + e[:, None] * HEADS
                                            + (cols // head_width)[None, :], mask=both,
                                            other=0.0).to(acc.dtype)
            elif MAX:  # row maxima of the per-head values
                terms = tl.load(values + e[:, None] * HEADS + cols[None, :], mask=both,
                                other=float("-inf")).to(acc.dtype)
            else:  # row sums of the per-head values
                terms = tl.load(values + e[:, None] * HEADS + cols[None, :], mask=both,
                                other=0.0).to(acc.dtype)
            if MAX:
                acc = tl.maximum(acc, tl.max(terms, axis=0))
            else:
                acc += tl.sum(terms, axis=0)
        tl.store(y + row * stride_y + cols, acc, mask=in_cols)

    @triton.jit(do_not_specialize=["num_edges", "head_width", "stride_a", "stride_b"])
    def _sddmm(src, dst, a, b, scale, out, num_edges, head_width, stride_a, stride_b,
              HAS_SCALE: tl.constexpr, HEADS: tl.constexpr, BLOCK_E: tl.constexpr,
              BLOCK_C: tl.constexpr):
        e = tl.program_id(0) * BLOCK_E + tl.arange(0, BLOCK_E)
        in_edges = e < num_edges
        u = tl.load(src + e, mask=in_edges, other=0).to(tl.int64)
        v = tl.load(dst + e, mask=in_edges, other=0).to(tl.int64)
        c = tl.arange(0, BLOCK_C)
        both = in_edges[:, None] & (c < head_width)[None, :]
        for h in tl.static_range(HEADS):
            col = h * head_width + c
            av = tl.load(a + v[:, None] * stride_a + col[None, :], mask=both, other=0.0)
            bv = tl.load(b + u[:, None] * stride_b + col[None, :], mask=both, other=0.0)
            dot = tl.sum(av * bv, axis=1)
            if HAS_SCALE:
                dot = dot * tl.load(scale + e * HEADS + h, mask=in_edges, other=0.0)
            tl.store(out + e * HEADS + h, dot.to(out.dtype.element_ty), mask=in_edges)

    @triton.jit(do_not_specialize=["rows", "width", "threshold", "stride_x", "stride_out"])
    def _dropout(x, ids, key, out, rows, width, threshold, scale, stride_x, stride_out,
                BLOCK_R: tl.constexpr, BLOCK_W: tl.constexpr):
        r = tl.program_id(0) * BLOCK_R + tl.arange(0, BLOCK_R)
        f = tl.program_id(1) * BLOCK_W + tl.arange(0, BLOCK_W)
        inside = (r < rows)[:, None] & (f < width)[None, :]
        base = tl.load(ids + r, mask=r < rows, other=0).to(tl.uint64, bitcast=True)
        k = tl.load(key).to(tl.uint64, bitcast=True)
        z = _splitmix64(k + base[:, None] * width.to(tl.uint64) + f[None, :].to(tl.uint64))
        keep = (z >> 40) >= threshold.to(tl.uint64)
        r64 = r.to(tl.int64)[:, None]
        v = tl.load(x + r64 * stride_x + f[None, :], mask=inside, other=0.0)
        kept = tl.where(keep, v * tl.load(scale), 0.0).to(out.dtype.element_ty)
        tl.store(out + r64 * stride_out + f[None, :], kept, mask=inside)


def _pow2(n: int) -> int:
    return 1 << max(0, (int(n) - 1).bit_length())


def row_order(indptr: torch.Tensor) -> torch.Tensor:
    """int32 ``[N]``: the rows in decreasing degree (stable), the order :func:`spmm` starts
    them in (longest first, so that the last wave of programs is short)."""
    degree = indptr[1:] - indptr[:-1]
    return torch.sort(degree, descending=True, stable=True).indices.to(torch.int32)


def spmm(indptr: torch.Tensor, indices: torch.Tensor, order: torch.Tensor,
         x: torch.Tensor | None, values: torch.Tensor | None = None, heads: int = 1,
         out_dtype: torch.dtype | None = None, row_max: bool = False) -> torch.Tensor:
    """``y`` ``[N, d]``, the module docstring's SpMM of ``x`` (or row sums of ``values``).

    The CSR is ``(indptr [N + 1], indices [E])`` with rows started in ``order``
    (:func:`row_order`): ``values`` ``None``, ``[E]`` or ``[E, heads]``; ``x`` ``[N_src, d]``
    (``d`` a multiple of ``heads``), or ``None`` for the row sums of ``values``
    ``[E, heads]`` (``y`` ``[N, heads]``; with ``row_max``, the row maxima, ``-inf`` on
    empty rows).  ``y`` is of ``out_dtype`` (default: ``x``'s, or ``values``' without
    ``x``).
    """
    n = len(indptr) - 1
    width = heads if x is None else x.shape[1]
    dtype = out_dtype or (values.dtype if x is None else x.dtype)
    y = torch.empty(n, width, dtype=dtype, device=indptr.device)
    if n == 0 or width == 0:
        return y
    weights = 0 if values is None else (1 if values.ndim == 1 else 2)
    block_d = min(_pow2(width), 128)
    block_e = max(16, min(128, 4096 // block_d))
    _spmm_rows[(n, -(-width // block_d))](
        indptr, indices, values if values is not None else indptr,
        x if x is not None else indptr, y, order, width, width // heads,
        x.stride(0) if x is not None else 0, y.stride(0),
        WEIGHTS=weights, HAS_X=x is not None, MAX=row_max, HEADS=heads, BLOCK_E=block_e,
        BLOCK_D=block_d)
    return y


def sddmm_heads(src: torch.Tensor, dst: torch.Tensor, a: torch.Tensor, b: torch.Tensor,
                heads: int, scale: torch.Tensor | None = None) -> torch.Tensor:
    """``[E, heads]``: ``scale_{e,h} <a[dst_e], b[src_e]>`` per head of ``a`` ``[N, H C]``
    and ``b`` ``[N_src, H C]`` (``scale`` ``[E, heads]``, or 1), in ``a``'s type."""
    num_edges, head_width = len(src), a.shape[1] // heads
    out = torch.empty(num_edges, heads, dtype=a.dtype, device=a.device)
    if num_edges == 0:
        return out
    block_c = _pow2(head_width)
    block_e = max(1, min(128, 4096 // block_c))
    _sddmm[(-(-num_edges // block_e),)](
        src, dst, a, b, scale if scale is not None else out, out, num_edges, head_width,
        a.stride(0), b.stride(0), HAS_SCALE=scale is not None, HEADS=heads,
        BLOCK_E=block_e, BLOCK_C=block_c)
    return out


def keyed_dropout(x: torch.Tensor, ids: torch.Tensor, p: float, key: int) -> torch.Tensor:
    """``x`` ``[R, W]`` times :mod:`distgnn.nn.dropout`'s mask for row ids ``ids`` (int64
    ``[R]``, on ``x``'s device), probability ``p`` and 64-bit ``key`` (a new tensor)."""
    rows, width = x.shape
    x = x if x.stride(1) == 1 else x.contiguous()
    out = torch.empty(rows, width, dtype=x.dtype, device=x.device)
    if rows == 0 or width == 0:
        return out
    key64 = torch.tensor([key - (1 << 64) if key >= 1 << 63 else key], dtype=torch.int64,
                         device=x.device)
    # a tensor of x's type: a float argument would reach the kernel as float32
    scale = torch.tensor([1.0 / (1.0 - p)], dtype=x.dtype, device=x.device)
    block_w = min(_pow2(width), 128)
    block_r = max(1, 4096 // block_w)
    _dropout[(-(-rows // block_r), -(-width // block_w))](
        x, ids, key64, out, rows, width, int(p * (1 << 24)), scale, x.stride(0),
        out.stride(0), BLOCK_R=block_r, BLOCK_W=block_w)
    return out
