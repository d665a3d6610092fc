"""The training loss: cross-entropy over the masked vertices, scaled to the whole graph."""
from __future__ import annotations

import torch
import torch.nn.functional as F

from ..kernels.jit import readonly
from ..kernels.loss import cross_entropy


class MaskedCrossEntropy(torch.autograd.Function):
    """:func:`masked_cross_entropy` on the CPU: the loss and its gradient in one Numba
    pass (:func:`~distgnn.kernels.loss.cross_entropy`), the gradient kept for the backward
    pass (``[N, C]``, what the separate operations also make)."""

    @staticmethod
    def forward(ctx, logits, labels, mask, total):
        z = logits.detach().contiguous()
        grad = torch.empty_like(z)
        loss = cross_entropy(readonly(z.numpy()), readonly(labels.contiguous().numpy()),
                             readonly(mask.contiguous().numpy()), 1.0 / total, grad.numpy())
        ctx.save_for_backward(grad)
        return torch.tensor(loss, dtype=z.dtype)

    @staticmethod
    def backward(ctx, grad_loss):
        (grad,) = ctx.saved_tensors
        return grad * grad_loss, None, None, None


def masked_cross_entropy(logits: torch.Tensor, labels: torch.Tensor, mask: torch.Tensor,
                         total: float) -> torch.Tensor:
    r"""``sum_{v in mask} CE(logits_v, labels_v) / total``: a rank's share of the mean loss.

    .. math::
        L = \frac{1}{\text{total}} \sum_{v:\, m_v} \Big( \log \sum_c e^{z_{v,c}}
            - z_{v,y_v} \Big)

    On the CPU in float32/float64, one pass forward (which also writes the gradient) and
    none backward but the scaling by the upstream gradient; elsewhere (a GPU, bf16 logits)
    ``F.cross_entropy`` of the masked rows.  The values are those of ``F.cross_entropy``
    to rounding (the sum taken in float64).

    Shapes: ``logits`` ``[N, C]``, ``labels`` int64 ``[N]``, ``mask`` bool ``[N]``; returns
    a scalar of ``logits``' dtype.
    """
    if (logits.device.type == "cpu" and logits.dtype in (torch.float32, torch.float64)
            and labels.dtype == torch.int64 and mask.dtype == torch.bool
            and labels.device.type == "cpu" and mask.device.type == "cpu"):
        return MaskedCrossEntropy.apply(logits, labels, mask, float(total))
    return F.cross_entropy(logits[mask], labels[mask], reduction="sum") / total
