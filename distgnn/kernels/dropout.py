"""The keyed dropout mask as kernels.

The mask is splitmix64 of (key, row id, column); the Numba kernels apply it without
materialising it (alone, and fused with a bias and a ReLU before it, forward and
backward); its torch form serves GPUs without Triton (:mod:`distgnn.nn.dropout` is the
layer; :mod:`.gpu` the Triton kernel)."""
from __future__ import annotations

import numba
import numpy as np
import torch

from .lanes import as_float, stored

_GAMMA = np.uint64(0x9E3779B97F4A7C15)


_MIX1 = np.uint64(0xBF58476D1CE4E5B9)


_MIX2 = np.uint64(0x94D049BB133111EB)


@numba.njit(cache=True, inline="always")
def splitmix64(x):
    z = x + _GAMMA
    z = (z ^ (z >> np.uint64(30))) * _MIX1
    z = (z ^ (z >> np.uint64(27))) * _MIX2
    return z ^ (z >> np.uint64(31))


@numba.njit(cache=True, inline="always")
def keeps(base, f, threshold):
    """Whether the mask keeps column ``f`` of the row whose key is ``base``
    (``key + global id * width``)."""
    return (splitmix64(base + np.uint64(f)) >> np.uint64(40)) >= threshold


@numba.njit(cache=True, parallel=True, nogil=True)
def masked_scale(x, global_ids, key, threshold, scale, out, width, first):
    """``out = x * mask`` without materialising the mask (it is recomputed from the key).

    ``x`` holds columns ``first ..`` of rows ``width`` wide (a panel of them: ``width =
    x.shape[1]``, ``first = 0`` for whole rows), so a panel is masked as its rows are.
    ``x`` and ``out`` may hold bf16 bit patterns (the product rounded once)."""
    width = np.uint64(width)
    for i in numba.prange(x.shape[0]):
        base = key + np.uint64(global_ids[i]) * width + np.uint64(first)
        for f in range(x.shape[1]):
            out[i, f] = stored(as_float(x[i, f]) * scale if keeps(base, f, threshold) else 0.0,
                               out)


@numba.njit(cache=True, inline="always")
def _positive(row, f):
    return as_float(row[f]) > 0


@numba.njit(cache=True, inline="always")
def _positive_bits(row, f):
    """Bit ``j`` set where ``row[f + j] > 0``, ``j < 8`` (written out: a loop over the bits
    runs five times slower)."""
    return (_positive(row, f) | (_positive(row, f + 1) << 1) | (_positive(row, f + 2) << 2)
            | (_positive(row, f + 3) << 3) | (_positive(row, f + 4) << 4)
            | (_positive(row, f + 5) << 5) | (_positive(row, f + 6) << 6)
            | (_positive(row, f + 7) << 7))


# rows per parallel task of the row-wise epilogues: each task makes one scratch row
EPILOGUE_ROWS = 256


@numba.njit(cache=True, inline="always")
def bias_relu_mask_row(x, bias, i, base, threshold, scale, row, out):
    """Row ``i`` of ``out = mask * scale * max(x + b, 0)``, made in ``row`` and stored.

    ``row`` ``[d]`` is scratch of the bias' float type (the row is computed in it, then
    rounded once into ``out``): ``out`` may be ``x`` (written over), and a loop that reads
    and writes the same row is left scalar by LLVM, whose runtime overlap check fails,
    where two loops over distinct arrays vectorise (2.3x faster with the mask on an Intel
    Xeon).  ``base`` is the row's mask key (``key + global id * width``); ``threshold``
    0 keeps every element without hashing.  A NaN of ``x + b`` stays NaN where the mask
    keeps it."""
    d = x.shape[1]
    # the element loops stay branch-free (vectorised)
    if threshold == 0:
        for f in range(d):
            v = as_float(x[i, f]) + bias[f]
            row[f] = v * scale if not v <= 0 else 0.0
    else:
        for f in range(d):
            v = as_float(x[i, f]) + bias[f]
            row[f] = v * scale if keeps(base, f, threshold) and not v <= 0 else 0.0
    for f in range(d):
        out[i, f] = stored(row[f], out)


@numba.njit(cache=True, parallel=True, nogil=True)
def bias_relu_masked_scale(x, bias, global_ids, key, threshold, scale, out, kept):
    """``out = mask * max(x + b, 0)`` and the bits of ``out > 0``, in one pass over the rows.

    ``bias`` ``[d]``; the mask is :func:`masked_scale`'s (``threshold`` 0 keeps every element
    without hashing); ``out`` may be ``x``.  ``x`` and ``out`` may hold bf16 bit patterns
    (uint16): ``x`` is widened, the row computed in float32 and rounded once into ``out``.
    ``kept`` ``[N, ceil(d / 8)]`` uint8 receives bit ``f % 8`` of byte
    ``f // 8`` set where ``out[i, f] > 0`` (all the backward pass needs: 1 bit where a float
    copy takes 32).  A NaN of ``x + b`` stays NaN where the mask keeps it, as through
    ``relu`` and a separate dropout (and receives no gradient, as there).
    """
    n, d = x.shape
    width = np.uint64(d)
    for task in numba.prange((n + EPILOGUE_ROWS - 1) // EPILOGUE_ROWS):
        row = np.empty(d, bias.dtype)
        for i in range(task * EPILOGUE_ROWS, min(n, (task + 1) * EPILOGUE_ROWS)):
            bias_relu_mask_row(x, bias, i, key + np.uint64(global_ids[i]) * width, threshold,
                               scale, row, out)
            # the bits come from the row as stored (a tiny positive float32 can round to a
            # bf16 zero), still in cache
            stored_row = out[i]
            for k in range(d >> 3):
                kept[i, k] = _positive_bits(stored_row, 8 * k)
            if d & 7:
                bits = 0
                for f in range(d & ~7, d):
                    bits |= _positive(stored_row, f) << (f & 7)
                kept[i, d >> 3] = bits


# rows per partial sum of the bias gradient: a fixed split, so the sum is the same whatever
# the number of threads
_BIAS_GRAD_ROWS = 4096


@numba.njit(cache=True, parallel=True, nogil=True)
def masked_scale_backward(grad, kept, scale, grad_x, grad_bias):
    """Backward of :func:`bias_relu_masked_scale` from its bits ``kept``.

    ``grad_x = scale * grad`` where the bit is set (the mask kept a positive ``x + b``),
    else 0; ``grad_bias`` ``[d]`` receives the column sums of ``grad_x``, accumulated in
    float64 per block of :data:`_BIAS_GRAD_ROWS` rows, the blocks added in order.  ``grad``
    and ``grad_x`` may hold bf16 bit patterns (the sums take the unrounded products).
    """
    n, d = grad.shape
    blocks = (n + _BIAS_GRAD_ROWS - 1) // _BIAS_GRAD_ROWS
    partial = np.zeros((blocks, d), dtype=np.float64)
    for b in numba.prange(blocks):
        for i in range(b * _BIAS_GRAD_ROWS, min(n, (b + 1) * _BIAS_GRAD_ROWS)):
            for f in range(d):
                on = (kept[i, f >> 3] >> (f & 7)) & 1
                g = as_float(grad[i, f]) * scale if on else 0.0
                grad_x[i, f] = stored(g, grad_x)
                partial[b, f] += g
    for f in range(d):
        total = 0.0
        for b in range(blocks):
            total += partial[b, f]
        grad_bias[f] = total


def dropout_key(seed: int, step: int, layer: int) -> int:
    """64-bit key for one (seed, step, layer) draw."""
    mix = splitmix64.py_func
    with np.errstate(over="ignore"):
        k = mix(np.uint64(seed & 0xFFFFFFFFFFFFFFFF))
        k = mix(k ^ np.uint64(step & 0xFFFFFFFFFFFFFFFF))
        return int(mix(k ^ np.uint64(layer & 0xFFFFFFFFFFFFFFFF)))


def _as_int64(value: int) -> int:
    """The int64 with the bits of the uint64 ``value`` (torch has no uint64 arithmetic)."""
    return value - (1 << 64) if value >= 1 << 63 else value


def _shift_right(z: torch.Tensor, bits: int) -> torch.Tensor:
    """Logical right shift of int64 bit patterns (``>>`` on int64 is arithmetic)."""
    return (z >> bits) & ((1 << (64 - bits)) - 1)


def _splitmix64_torch_(z: torch.Tensor, tmp: torch.Tensor) -> torch.Tensor:
    """:func:`splitmix64` in place on int64 tensors holding uint64 bit patterns (products
    wrap); ``tmp`` is scratch of the same shape."""
    z.add_(_as_int64(int(_GAMMA)))
    for bits, mix in ((30, _MIX1), (27, _MIX2), (31, None)):
        torch.bitwise_right_shift(z, bits, out=tmp)
        z.bitwise_xor_(tmp.bitwise_and_((1 << (64 - bits)) - 1))  # a logical shift
        if mix is not None:
            z.mul_(_as_int64(int(mix)))
    return z


# rows per block of the torch mask: bounds its int64 scratch to 2 x 32 MiB
_MASK_BLOCK_ELEMENTS = 1 << 22


def dropout_keep_torch(global_ids: torch.Tensor, width: int, p: float, key: int
                       ) -> torch.Tensor:
    """bool ``[len(global_ids), width]`` on the device of ``global_ids`` (int64): which
    elements the mask of the module docstring keeps, the same bits as the Numba kernel (for
    GPU ranks).  Computed in row blocks, in place, so its scratch stays small."""
    n, device = len(global_ids), global_ids.device
    keep = torch.empty(n, width, dtype=torch.bool, device=device)
    cols = torch.arange(width, device=device, dtype=torch.int64) + _as_int64(key)
    rows = max(1, _MASK_BLOCK_ELEMENTS // max(width, 1))
    for start in range(0, n, rows):
        ids = global_ids[start:start + rows]
        z = torch.add(ids.unsqueeze(1) * width, cols)
        _splitmix64_torch_(z, torch.empty_like(z))
        torch.ge(_shift_right(z, 40), int(p * (1 << 24)), out=keep[start:start + rows])
    return keep


def dropout_mask_torch(global_ids: torch.Tensor, width: int, p: float, key: int,
                       dtype: torch.dtype) -> torch.Tensor:
    """The mask of the module docstring as ``[len(global_ids), width]`` values ``0`` or
    ``1/(1-p)`` of ``dtype`` (see :func:`dropout_keep_torch`)."""
    return dropout_keep_torch(global_ids, width, p, key).to(dtype) * (1.0 / (1.0 - p))
