"""The masked cross-entropy of node classification and its gradient, in one pass.

For logits ``z`` ``[N, C]``, labels ``y`` ``[N]``, a mask ``m`` ``[N]`` and a scale ``s``
(one over the number of masked vertices of the whole graph):

.. math::
    L = s \\sum_{v: m_v} \\Big( \\log \\sum_c e^{z_{v,c}} - z_{v,y_v} \\Big),\\qquad
    \\frac{\\partial L}{\\partial z_{v,c}} = s\\, m_v \\big(\\operatorname{softmax}(z_v)_c
        - [c = y_v]\\big)

Each row is read once and its gradient written once (the separate operations index the
masked rows out, take the log-softmax, gather the labels' entries, sum, and write the
gradient back through the index: five passes and two ``[n_train, C]`` copies).
"""
from __future__ import annotations

import math

import numba
import numpy as np

# rows per block of the loss's partial sums: fixed, so the sum's order is too
LOSS_BLOCK_ROWS = 4096


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
            s = 0.0
            for k in range(c):
                e = math.exp(logits[i, k] - top)
                grad[i, k] = e
                s += e
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
