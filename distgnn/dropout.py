"""Dropout whose mask is a function of (seed, step, layer, global vertex id, feature).

A partition of the graph holds its vertices under local ids; keying the mask by the
*global* id means every clone of a vertex, on every rank, draws the same mask as the
single-socket run, so distributed training with dropout follows the same trajectory.
It is also several times faster than ``torch.nn.functional.dropout`` on CPU, whose
Mersenne-Twister draws dominate a small model's epoch.

Mask: with ``c = g * d + f`` and ``k`` a 64-bit key hashed from ``(seed, step, layer)``,

.. math::
    m_{g,f} = \\frac{1}{1 - p}\\,\\big[\\operatorname{splitmix64}(k + c) \\gg 40
        \\;\\ge\\; \\lfloor p \\cdot 2^{24} \\rfloor\\big]

so an element is kept with probability ``1 - p`` (to within ``2^{-24}``).
"""
from __future__ import annotations

import numba
import numpy as np
import torch

from .graph import GraphError

_GAMMA = np.uint64(0x9E3779B97F4A7C15)
_MIX1 = np.uint64(0xBF58476D1CE4E5B9)
_MIX2 = np.uint64(0x94D049BB133111EB)


@numba.njit(cache=True, inline="always")
def splitmix64(x):
    z = x + _GAMMA
    z = (z ^ (z >> np.uint64(30))) * _MIX1
    z = (z ^ (z >> np.uint64(27))) * _MIX2
    return z ^ (z >> np.uint64(31))


@numba.njit(cache=True, parallel=True, nogil=True)
def _masked_scale(x, global_ids, key, threshold, scale, out):
    """``out = x * mask`` without materialising the mask (it is recomputed from the key)."""
    width = np.uint64(x.shape[1])
    for i in numba.prange(x.shape[0]):
        base = key + np.uint64(global_ids[i]) * width
        for f in range(x.shape[1]):
            keep = (splitmix64(base + np.uint64(f)) >> np.uint64(40)) >= threshold
            out[i, f] = x[i, f] * scale if keep else 0.0


def dropout_key(seed: int, step: int, layer: int) -> int:
    """64-bit key for one (seed, step, layer) draw."""
    mix = splitmix64.py_func
    with np.errstate(over="ignore"):
        k = mix(np.uint64(seed & 0xFFFFFFFFFFFFFFFF))
        k = mix(k ^ np.uint64(step & 0xFFFFFFFFFFFFFFFF))
        return int(mix(k ^ np.uint64(layer & 0xFFFFFFFFFFFFFFFF)))


def check_dropout(x, global_ids, p: float) -> None:
    """Refuse ``p`` outside ``[0, 1)`` and an ``x`` (array or tensor) that is not
    ``[len(global_ids), d]``: the kernel reads ``global_ids[i]`` for every row ``i`` of ``x``
    without bounds checks.  O(1)."""
    if not 0 <= p < 1:  # also NaN
        raise GraphError(f"dropout probability must be in [0, 1), got {p}")
    if x.ndim != 2 or x.shape[0] != len(global_ids):
        raise GraphError(f"dropout input has shape [{', '.join(map(str, x.shape))}], expected "
                         f"[{len(global_ids)}, d] (one row per vertex)")


def apply_dropout_mask(x: np.ndarray, global_ids: np.ndarray, p: float, key: int) -> np.ndarray:
    """``x * mask`` for ``x`` float ``[len(global_ids), d]``; the mask is ``0`` or ``1/(1-p)``."""
    check_dropout(x, global_ids, p)
    out = np.empty_like(x)
    _masked_scale(x, np.ascontiguousarray(global_ids, dtype=np.int64), np.uint64(key),
                  np.uint64(int(p * (1 << 24))), x.dtype.type(1.0 / (1.0 - p)), out)
    return out


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


class VertexDropout(torch.autograd.Function):
    """Forward and backward both multiply by the same mask, recomputed from the key each
    time: by the Numba kernel on the CPU, by a Triton kernel on a GPU
    (:func:`distgnn.kernels.gpu.keyed_dropout`).  Without Triton, a GPU computes it with
    torch operations and keeps it as a bool tensor for the backward pass."""

    @staticmethod
    def forward(ctx, h, ids, p, key):
        ctx.args = (ids, p, key)
        if h.device.type == "cpu":
            return torch.from_numpy(apply_dropout_mask(h.detach().contiguous().numpy(),
                                                       ids, p, key))
        from .kernels import gpu

        if gpu.available():
            return gpu.keyed_dropout(h, ids, p, key)
        keep = dropout_keep_torch(ids, h.shape[1], p, key)
        ctx.args = (keep, 1.0 / (1.0 - p))
        return h * keep * ctx.args[1]

    @staticmethod
    def backward(ctx, grad):
        if len(ctx.args) == 2:  # the torch operations' kept mask and scale
            keep, scale = ctx.args
            return grad * keep * scale, None, None, None
        return VertexDropout.forward(ctx, grad, *ctx.args), None, None, None


def vertex_dropout(h: torch.Tensor, ids, p: float, key: int) -> torch.Tensor:
    """Dropout of ``h`` ``[N, d]`` with the mask of the module docstring for row ids ``ids``
    ``[N]``: an int64 numpy array for a CPU ``h``, an int64 tensor on ``h``'s device for
    another (:meth:`distgnn.aggregate.Neighbourhood.vertex_ids` gives either)."""
    check_dropout(h, ids, p)
    if p == 0.0:
        return h
    if h.device.type != "cpu" and not isinstance(ids, torch.Tensor):
        ids = torch.from_numpy(np.asarray(ids, dtype=np.int64)).to(h.device)
    return VertexDropout.apply(h, ids, p, key)
