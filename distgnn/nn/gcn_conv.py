"""Graph convolution (Kipf & Welling, ICLR 2017)."""
from __future__ import annotations

import torch
from torch import nn

from .aggregate import Neighbourhood
from .graph_layer import GraphLayer, aggregate_and_project, glorot


class GCNConv(GraphLayer):
    r"""Graph convolution layer with symmetric normalisation and a self-loop.

    From Kipf & Welling, *Semi-Supervised Classification with Graph Convolutional Networks*
    (ICLR 2017).

    .. math::
        \mathbf{H}' = \hat{\mathbf{D}}^{-1/2} (\mathbf{A} + \mathbf{I})
            \hat{\mathbf{D}}^{-1/2} \mathbf{H} \mathbf{W} + \mathbf{b},
        \qquad \hat{d}_v = d_v + 1

    The self-loop is applied as the ``+ h`` term rather than stored in the graph, so the
    same code runs on a partition (where only the root would own the loop) and the
    normalisation only needs the in-degree vector.

    Args:
        in_channels (int): ``d_in``.
        out_channels (int): ``d_out``.
        bias (bool, optional): learn ``b``. (default: ``True``)

    Shapes:
        - **input:** graph ``g`` over ``N`` vertices, ``h`` ``[N, d_in]``, optional ``key``
        - **output:** ``[N, d_out]``
    """

    def __init__(self, in_channels: int, out_channels: int, bias: bool = True):
        super().__init__()
        self.in_channels, self.out_channels = in_channels, out_channels
        self.lin = nn.Linear(in_channels, out_channels, bias=False)
        self.bias = nn.Parameter(torch.zeros(out_channels)) if bias else None
        self.project_first = out_channels < in_channels
        self.reset_parameters()

    def reset_parameters(self) -> None:
        glorot(self)

    def extra_repr(self) -> str:
        return f"{self.in_channels}, {self.out_channels}"

    @staticmethod
    def aggregate(g: Neighbourhood, z: torch.Tensor) -> torch.Tensor:
        """``D^-1/2 (A + I) D^-1/2 z`` (GCN2Conv's propagation too)."""
        scale = (g.degree + 1).rsqrt()
        return g.loop_sum(z, scale, scale)

    @property
    def weight(self) -> torch.Tensor:
        """``W`` ``[d_out, d_in]``."""
        return self.lin.weight

    def forward(self, g: Neighbourhood, h: torch.Tensor | None,
                aggregated: torch.Tensor | None = None, key: int | None = None,
                epilogue=None, projected: torch.Tensor | None = None,
                dropout=None) -> torch.Tensor:
        """The layer's output ``[N, d_out]``.

        ``aggregated``: ``aggregate(g, h)`` computed earlier (constant input features);
        ``epilogue(y, b)``: applied in place of ``y + b`` (a model fusing the activation and
        dropout that follow, :meth:`~distgnn.nn.keyed_dropout.KeyedDropout.after_relu`);
        ``projected``: ``h W^T`` made by the epilogue before (``h`` then ``None``);
        ``dropout(g, h)``: the input's dropout, applied inside the layer so that the
        dropped copy is freed once aggregated (a model's first layer)."""
        g = g.enter(self, self.lin.weight, key, h=h, aggregated=aggregated)
        return aggregate_and_project(self, self.lin.weight, self.bias, g, h, aggregated,
                                     epilogue, projected, dropout)
