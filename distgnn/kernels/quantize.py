r"""Block-scaled integers for the split-vertex wire (:mod:`distgnn.exchange.wire`).

Encoding and decoding take one pass per row, rows in parallel.  A row of ``d`` values is
cut into blocks of ``BLOCK`` = 32 columns; block ``B`` gets the least power of two
``s_B = 2^k`` with ``max_B |x| / s_B <= q_max = 2^(b-1) - 1`` and every value becomes
``q = clamp(round(x / s_B), -q_max, q_max)``, rounded to nearest, ties to even.
The row is stored as ``ceil(d / 32)`` exponent bytes (``k + 127``, ``k`` clamped to
``[-126, 127]``; 0 marks an all-zero block) and then the codes ``q + 2^(b-1)``, ``8 / b`` to a
byte, lowest bits first.  Dividing by a power of two is exact, so ``q s_B`` is exactly what
the receiver decodes.
"""
from __future__ import annotations

import math

import numba
import numpy as np

from . import jit

BLOCK = 32  # values per scale (OCP microscaling's block)
EXPONENT_BIAS = 127  # stored exponent byte = k + 127; 0: the block is all zeros


def columns(width: int, bits: int) -> int:
    """Bytes of one encoded row of ``width`` values."""
    return -(-width // BLOCK) + -(-width * bits // 8)


@numba.njit(inline="always")
def _round_half_even(v):
    r = math.floor(v + 0.5)
    if r - v == 0.5 and r % 2 != 0:  # a tie rounded up to an odd integer: down instead
        r -= 1.0
    return r


@jit.kernel(parallel=True, nogil=True)
def _quantize(x, bits, codes, sent):
    n, d = x.shape
    blocks = (d + BLOCK - 1) // BLOCK
    qmax = (1 << (bits - 1)) - 1
    offset = 1 << (bits - 1)
    per = 8 // bits
    for i in numba.prange(n):
        for c in range(blocks, codes.shape[1]):
            codes[i, c] = 0
        for b in range(blocks):
            lo, hi = b * BLOCK, min(d, (b + 1) * BLOCK)
            top = 0.0
            for j in range(lo, hi):
                a = abs(x[i, j])
                if a > top:
                    top = a
            scale = 0.0
            codes[i, b] = 0
            if top > 0.0:
                m, e = math.frexp(top / qmax)
                k = min(max(e - 1 if m == 0.5 else e, 1 - EXPONENT_BIAS), EXPONENT_BIAS)
                scale = math.ldexp(1.0, k)
                codes[i, b] = k + EXPONENT_BIAS
            for j in range(lo, hi):
                q = 0.0
                if scale > 0.0:
                    q = min(max(_round_half_even(x[i, j] / scale), -qmax), qmax)
                    if q != q:  # NaN: travels as 0 (the loss is NaN anyway)
                        q = 0.0
                sent[i, j] = q * scale
                c = blocks + j // per
                codes[i, c] = codes[i, c] | ((int(q) + offset) << ((j % per) * bits))


@jit.kernel(parallel=True, nogil=True)
def _dequantize(codes, bits, out):
    n, d = out.shape
    blocks = (d + BLOCK - 1) // BLOCK
    offset = 1 << (bits - 1)
    per = 8 // bits
    mask = (1 << bits) - 1
    for i in numba.prange(n):
        for b in range(blocks):
            stored = int(codes[i, b])
            scale = 0.0 if stored == 0 else math.ldexp(1.0, stored - EXPONENT_BIAS)
            for j in range(b * BLOCK, min(d, (b + 1) * BLOCK)):
                u = (int(codes[i, blocks + j // per]) >> ((j % per) * bits)) & mask
                out[i, j] = (u - offset) * scale


def quantize(x: np.ndarray, bits: int) -> tuple[np.ndarray, np.ndarray]:
    """``(codes, sent)`` of ``x`` ``[n, d]`` (float32 or float64, C-contiguous): the encoded
    rows, uint8 ``[n, columns(d, bits)]``, and what they decode to, ``x``'s type."""
    codes = np.empty((x.shape[0], columns(x.shape[1], bits)), np.uint8)
    sent = np.empty_like(x)
    _quantize(jit.readonly(x), bits, codes, sent)
    return codes, sent


def dequantize(codes: np.ndarray, bits: int, width: int, dtype) -> np.ndarray:
    """The ``[n, width]`` values of ``dtype`` that :func:`quantize`'s ``codes`` encode."""
    out = np.empty((codes.shape[0], width), dtype)
    _dequantize(jit.readonly(codes), bits, out)
    return out
