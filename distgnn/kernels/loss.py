"""The masked cross-entropy of node classification and its gradient, in one pass.

For logits ``z`` ``[N, C]``, labels ``y`` ``[N]``, a mask ``m`` ``[N]`` and a scale ``s``
(one over the number of masked vertices of the whole graph):

.. math::
    L = s \\sum_{v: m_v} \\Big( \\log \\sum_c e^{z_{v,c}} - z_{v,y_v} \\Big),\\qquad
    \\frac{\\partial L}{\\partial z_{v,c}} = s\\, m_v \\big(\\operatorname{softmax}(z_v)_c
        - [c = y_v]\\big)

Each row is read once and its gradient written once (the separate operations index the
masked rows out, take the log-softmax, gather the labels' entries, sum, and write the
gradient back through the index: five passes and two ``[n_train, C]`` copies).  Float32
logits take their exponentials from :func:`exp_nonpositive`, which the compiler vectorises
(a libm ``expf`` call per element is not, and was most of the pass).
"""
from __future__ import annotations

import math

import numba
import numpy as np
from numba.extending import overload

from .lanes import float32_from_bits

# rows per block of the loss's partial sums: fixed, so the sum's order is too
LOSS_BLOCK_ROWS = 4096

_F32 = np.float32
# e^x = 2^n e^r with n = round(x / ln 2), r = x - n ln 2 in [-ln 2 / 2, ln 2 / 2]; ln 2 in two
# parts (the first exact in float32, so n ln 2 loses nothing for the n a float32 x gives)
_LOG2E, _LN2_HI, _LN2_LO = _F32(1.4426950408889634), _F32(0.693359375), _F32(-2.12194440e-4)
# e^r - 1 - r = r^2 (1/2 + r/6 + ...): the minimax coefficients of Cephes' expf
_EXP_POLY = tuple(_F32(c) for c in (1.9875691500e-4, 1.3981999507e-3, 8.3334519073e-3,
                                    4.1665795894e-2, 1.6666665459e-1, 5.0000001201e-1))
# below ln(smallest normal float32), 2^n has no normal float32; e^x is 0 to within 1.2e-38
_EXP_LOWEST = _F32(-87.33654)


def exp_nonpositive(x):
    """``e^x`` for ``x <= 0`` (a logit minus its row's maximum), in Numba kernels.

    Float32: ``2^n e^r`` with ``n = round(x log2 e)`` and ``e^r`` a degree-7 polynomial on
    ``|r| <= ln 2 / 2``, straight-line arithmetic that vectorises; within one unit in
    the last place of the exact value (measured at 2 million points of ``[-87.3, 0]``);
    ``x < -87.34`` gives ``e^-87.34`` (1.2e-38) instead of a denormal or 0, a NaN gives a
    NaN.  Float64: ``math.exp``."""


@overload(exp_nonpositive, inline="always")
def _exp_nonpositive(x):
    if x == numba.types.float32:
        p0, p1, p2, p3, p4, p5 = _EXP_POLY

        def exp32(x):
            if x < _EXP_LOWEST:  # a NaN stays one
                x = _EXP_LOWEST
            n = np.floor(x * _LOG2E + _F32(0.5))
            r = (x - n * _LN2_HI) - n * _LN2_LO
            p = ((((p0 * r + p1) * r + p2) * r + p3) * r + p4) * r + p5
            two_n = float32_from_bits(np.uint32(np.int32(n) + np.int32(127)) << np.uint32(23))
            return ((p * r) * r + r + _F32(1.0)) * two_n
        return exp32
    return lambda x: math.exp(x)


@numba.njit(cache=True, parallel=True, nogil=True, fastmath=False)
def _cross_entropy_rows(logits, labels, mask, scale, grad, partial, bad):
    n, c = logits.shape
    for b in numba.prange(len(partial)):
        total = 0.0
        for i in range(b * LOSS_BLOCK_ROWS, min(n, (b + 1) * LOSS_BLOCK_ROWS)):
            if not mask[i]:
                for k in range(c):
                    grad[i, k] = 0.0
                continue
            label = labels[i]
            if label < 0 or label >= c:
                bad[b] += 1
                for k in range(c):
                    grad[i, k] = 0.0
                continue
            top = logits[i, 0]
            for k in range(1, c):
                top = max(top, logits[i, k])
            for k in range(c):  # vectorised: no sum in this loop
                grad[i, k] = exp_nonpositive(logits[i, k] - top)
            s = 0.0
            for k in range(c):
                s += grad[i, k]
            total += top + math.log(s) - logits[i, label]
            inv = scale / s
            for k in range(c):
                grad[i, k] *= inv
            grad[i, label] -= scale
        partial[b] = total


def cross_entropy(logits: np.ndarray, labels: np.ndarray, mask: np.ndarray, scale: float,
                  grad: np.ndarray) -> float:
    """``L`` of the module docstring; ``dL/dz`` written into ``grad``.

    The sum is taken in float64, its blocks in a fixed order; ``grad`` has ``logits``' shape
    and dtype (float32 or float64).

    Raises ``ValueError`` for a masked row whose label is not in ``0..C-1``.
    """
    blocks = (len(logits) + LOSS_BLOCK_ROWS - 1) // LOSS_BLOCK_ROWS
    partial, bad = np.zeros(blocks), np.zeros(blocks, np.int64)
    _cross_entropy_rows(logits, labels, mask, grad.dtype.type(scale), grad, partial, bad)
    if bad.any():
        raise ValueError(f"{int(bad.sum())} masked vertices have labels outside 0.."
                         f"{logits.shape[1] - 1}")
    return float(partial.sum()) * scale
