"""GCNII's layer (Chen et al., ICML 2020): initial residual and identity mapping."""
from __future__ import annotations

import math
import numbers

import torch
from torch import nn

from ..data.graph import GraphError
from .aggregate import Neighbourhood
from .gcn_conv import GCNConv
from .graph_layer import GraphLayer, glorot


class GCN2Conv(GraphLayer):
    r"""GCNII layer: GCN propagation with an initial residual and an identity mapping.

    From Chen et al., *Simple and Deep Graph Convolutional Networks* (ICML 2020), as PyG's
    ``GCN2Conv`` with shared weights.

    .. math::
        \mathbf{X}' = \Big((1 - \alpha)\, \hat{\mathbf{P}} \mathbf{X} +
            \alpha \mathbf{X}^{(0)}\Big) \Big((1 - \beta) \mathbf{I} +
            \beta \mathbf{W}\Big),
        \qquad \beta = \log\Big(\frac{\theta}{\ell} + 1\Big)

    with ``P = D^-1/2 (A + I) D^-1/2`` (the GCN propagation, :class:`GCNConv`'s) and ``ell``
    the layer's depth (1-based).  With ``theta = None``, ``beta = 1``.

    Args:
        channels (int): width of ``X`` and ``X^(0)``.
        alpha (float): weight of the initial residual.
        theta (float, optional): identity-mapping strength. (default: ``None``)
        layer (int, optional): ``ell``. (default: ``None``)

    Shapes:
        - **input:** graph ``g`` over ``N`` vertices, ``x`` and ``x_0`` ``[N, channels]``,
          optional ``key``
        - **output:** ``[N, channels]``
    """

    def __init__(self, channels: int, alpha: float, theta: float | None = None,
                 layer: int | None = None):
        super().__init__()
        if (theta is None) != (layer is None):
            raise ValueError("give theta and layer together (or neither)")
        # as --alpha and --theta (distgnn.nn.config): NaN would train to NaN, and theta 0
        # makes beta 0, a layer whose weights never act
        if not (isinstance(alpha, numbers.Real) and 0 <= alpha <= 1):
            raise GraphError(f"GCN2Conv alpha must be in [0, 1], got {alpha!r}")
        if theta is not None and not (isinstance(theta, numbers.Real) and math.isfinite(theta)
                                      and theta > 0):
            raise GraphError(f"GCN2Conv theta must be a finite number > 0, got {theta!r}")
        if layer is not None and not (isinstance(layer, numbers.Integral) and layer >= 1):
            raise GraphError(f"GCN2Conv layer must be an integer >= 1, got {layer!r}")
        self.channels, self.alpha, self.theta, self.layer = channels, alpha, theta, layer
        self.beta = 1.0 if theta is None else math.log(theta / layer + 1)
        self.weight1 = nn.Parameter(torch.empty(channels, channels))
        self.reset_parameters()

    def reset_parameters(self) -> None:
        glorot(self)

    def extra_repr(self) -> str:
        return f"{self.channels}, alpha={self.alpha}, beta={self.beta:.4g}"

    def forward(self, g: Neighbourhood, x: torch.Tensor, x_0: torch.Tensor,
                key: int | None = None) -> torch.Tensor:
        g = g.enter(self, self.weight1, key, x=x, x_0=x_0)
        out = (1 - self.alpha) * GCNConv.aggregate(g, x) + self.alpha * x_0
        return torch.addmm(out, out, self.weight1, beta=1.0 - self.beta, alpha=self.beta)
