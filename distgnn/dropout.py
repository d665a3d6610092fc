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

_GAMMA = np.uint64(0x9E3779B97F4A7C15)
_MIX1 = np.uint64(0xBF58476D1CE4E5B9)
_MIX2 = np.uint64(0x94D049BB133111EB)


@numba.njit(cache=True, inline="always")
def _splitmix64(x):
    z = x + _GAMMA
    z = (z ^ (z >> np.uint64(30))) * _MIX1
    z = (z ^ (z >> np.uint64(27))) * _MIX2
    return z ^ (z >> np.uint64(31))


@numba.njit(cache=True, parallel=True)
def _masked_scale(x, global_ids, key, threshold, scale, out):
    """``out = x * mask`` without materialising the mask (it is recomputed from the key)."""
    width = np.uint64(x.shape[1])
    for i in numba.prange(x.shape[0]):
        base = key + np.uint64(global_ids[i]) * width
        for f in range(x.shape[1]):
            keep = (_splitmix64(base + np.uint64(f)) >> np.uint64(40)) >= threshold
            out[i, f] = x[i, f] * scale if keep else 0.0


def dropout_key(seed: int, step: int, layer: int) -> int:
    """64-bit key for one (seed, step, layer) draw."""
    mix = _splitmix64.py_func
    with np.errstate(over="ignore"):
        k = mix(np.uint64(seed & 0xFFFFFFFFFFFFFFFF))
        k = mix(k ^ np.uint64(step & 0xFFFFFFFFFFFFFFFF))
        return int(mix(k ^ np.uint64(layer & 0xFFFFFFFFFFFFFFFF)))


def apply_dropout_mask(x: np.ndarray, global_ids: np.ndarray, p: float, key: int) -> np.ndarray:
    """``x * mask`` for ``x`` float ``[len(global_ids), d]``; the mask is ``0`` or ``1/(1-p)``."""
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


def _splitmix64_torch(x: torch.Tensor) -> torch.Tensor:
    """:func:`_splitmix64` on int64 tensors holding uint64 bit patterns (products wrap)."""
    z = x + _as_int64(int(_GAMMA))
    z = (z ^ _shift_right(z, 30)) * _as_int64(int(_MIX1))
    z = (z ^ _shift_right(z, 27)) * _as_int64(int(_MIX2))
    return z ^ _shift_right(z, 31)


def dropout_mask_torch(global_ids: torch.Tensor, width: int, p: float, key: int,
                       dtype: torch.dtype) -> torch.Tensor:
    """The mask of the module docstring as a ``[len(global_ids), width]`` tensor on the
    device of ``global_ids`` (int64): the same bits as the Numba kernel, for GPU ranks."""
    c = (global_ids.unsqueeze(1) * width
         + torch.arange(width, device=global_ids.device, dtype=torch.int64))
    keep = _shift_right(_splitmix64_torch(c + _as_int64(key)), 40) >= int(p * (1 << 24))
    return keep.to(dtype) * (1.0 / (1.0 - p))


def _masked(x: torch.Tensor, global_ids: np.ndarray, p: float, key: int) -> torch.Tensor:
    if x.device.type == "cpu":
        return torch.from_numpy(apply_dropout_mask(x.detach().contiguous().numpy(),
                                                   global_ids, p, key))
    ids = torch.from_numpy(np.asarray(global_ids, dtype=np.int64)).to(x.device)
    return x * dropout_mask_torch(ids, x.shape[1], p, key, x.dtype)


class VertexDropout(torch.autograd.Function):
    """Forward and backward both multiply by the same mask, recomputed from the key."""

    @staticmethod
    def forward(ctx, h, global_ids, p, key):
        ctx.args = (global_ids, p, key)
        return _masked(h, global_ids, p, key)

    @staticmethod
    def backward(ctx, grad):
        return _masked(grad, *ctx.args), None, None, None


def vertex_dropout(h: torch.Tensor, global_ids: np.ndarray, p: float, key: int) -> torch.Tensor:
    """Dropout of ``h`` ``[N, d]`` (on any device) with the mask of the module docstring."""
    if p == 0.0:
        return h
    return VertexDropout.apply(h, global_ids, p, key)
