"""Graph attention (Velickovic et al., ICLR 2018)."""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from ..kernels.dropout import dropout_key
from .aggregate import Neighbourhood
from .backends import check_tensor
from .dropout import vertex_dropout
from .graph_layer import GraphLayer, glorot


class GATConv(GraphLayer):
    r"""Multi-head graph attention layer with self-loops, as PyG's ``GATConv``.

    From Velickovic et al., *Graph Attention Networks* (ICLR 2018):

    .. math::
        \mathbf{z}_v = \mathbf{W} \mathbf{h}_v \in \mathbb{R}^{H \times C},\qquad
        e_{uv}^h = \operatorname{LeakyReLU}\big(\mathbf{a}_{src}^h \cdot \mathbf{z}_u^h +
            \mathbf{a}_{dst}^h \cdot \mathbf{z}_v^h\big)

        \alpha_{uv}^h = \frac{\exp(e_{uv}^h - m_v^h)}{\sum_{w \in N(v) \cup \{v\}}
            \exp(e_{wv}^h - m_v^h)},\quad m_v^h = \max_{w \in N(v) \cup \{v\}} e_{wv}^h,
        \qquad
        \mathbf{h}'^h_v = \sum_{u \in N(v) \cup \{v\}} \alpha_{uv}^h \mathbf{z}_u^h

    and the heads concatenated (``[H C]``) or averaged (``[C]``), plus a bias.  Dropout
    with probability ``dropout`` applies to the coefficients ``alpha`` while training, keyed by
    the edge's global end points, so a partition draws the masks the whole graph does.

    Under a vertex cut, ``v``'s in-edges are spread over its clones.  Each clone computes
    over its own edges the maximum ``m``, the sum of ``exp(e - m)`` and the weighted sum of
    ``z``; the maximum is combined over clones by a max-exchange (no gradient: the
    softmax does not depend on ``m``), the sum of exponentials by an exact sum-exchange, and
    the weighted sums by the layer's exchange, each backward pass through the matching sum
    exchange; the self-loop is added once, after the exchanges.  Under cd-0 this is the
    whole-graph layer exactly.  Under cd-r the maximum and the sum of exponentials are still
    exchanged exactly every epoch (they are ``H`` values per split vertex), while the
    ``H C``-wide weighted sums travel on cd-r's delayed schedule; their stale part is
    normalised with the normaliser of the epoch it was computed in.  Under 0c every rank
    takes the softmax over its own in-edges.  Edge weights are not used, and self-loops
    stored in the graph are ignored (PyG removes them before adding its own).

    Args:
        in_channels (int): ``d_in``.
        out_channels (int): ``C``, the width per head.
        heads (int, optional): ``H``. (default: ``1``)
        concat (bool, optional): concatenate the heads (else average them).
            (default: ``True``)
        negative_slope (float, optional): LeakyReLU slope. (default: ``0.2``)
        dropout (float, optional): dropout on ``alpha``. (default: ``0.``)
        bias (bool, optional): learn a bias. (default: ``True``)

    The attention dropout masks are a function of the run's seed, the epoch, the layer's key
    and the edge (PyG draws them from torch's generator).

    Shapes:
        - **input:** graph ``g`` over ``N`` vertices, ``h`` ``[N, d_in]``, optional ``key``
        - **output:** ``[N, H C]`` when ``concat``, else ``[N, C]``
    """

    def __init__(self, in_channels: int, out_channels: int, heads: int = 1,
                 concat: bool = True, negative_slope: float = 0.2, dropout: float = 0.0,
                 bias: bool = True):
        super().__init__()
        if heads < 1:
            raise ValueError(f"heads must be >= 1, got {heads}")
        if not 0.0 <= dropout < 1.0:
            raise ValueError(f"dropout must be in [0, 1), got {dropout}")
        self.in_channels, self.heads, self.out_channels = in_channels, heads, out_channels
        self.concat, self.negative_slope, self.dropout = concat, negative_slope, dropout
        self.lin = nn.Linear(in_channels, heads * out_channels, bias=False)
        self.att_src = nn.Parameter(torch.empty(1, heads, out_channels))
        self.att_dst = nn.Parameter(torch.empty(1, heads, out_channels))
        width = heads * out_channels if concat else out_channels
        self.bias = nn.Parameter(torch.zeros(width)) if bias else None
        self.reset_parameters()

    def reset_parameters(self) -> None:
        glorot(self)

    def extra_repr(self) -> str:
        return (f"{self.in_channels}, {self.out_channels}, heads={self.heads}, "
                f"concat={self.concat}, dropout={self.dropout}")

    def forward(self, g: Neighbourhood, h: torch.Tensor, key: int | None = None
                ) -> torch.Tensor:
        g = g.enter(self, self.lin.weight, key, h=h)
        heads, width = self.heads, self.out_channels  # a [1, 1, C] att_* would broadcast
        for name, param, shape in (("att_src", self.att_src, (1, heads, width)),
                                   ("att_dst", self.att_dst, (1, heads, width)),
                                   ("lin.weight", self.lin.weight, (heads * width, None))):
            check_tensor(f"GATConv {name}", param, shape)
        z = self.lin(h).view(-1, self.heads, self.out_channels)
        score_src = (z * self.att_src).sum(-1)  # [N, H]
        score_dst = (z * self.att_dst).sum(-1)
        loop = F.leaky_relu(score_src + score_dst, self.negative_slope)  # the self-loops' logits
        p = self.dropout if g.training else 0.0
        # key ~k (-k-1): apart from the keys of the KeyedDropouts, which count from 0
        mask_key = dropout_key(g.seed, g.epoch, ~g.key) if p else 0
        out, loop_alpha = g.attend(loop, score_src, score_dst, z, self.negative_slope, p,
                                   mask_key)
        if p:
            loop_alpha = vertex_dropout(loop_alpha, g.edge_keys(loop_alpha.device)[1], p,
                                        mask_key)
        out = out + loop_alpha.unsqueeze(-1) * z
        out = out.flatten(1) if self.concat else out.mean(1)
        return out if self.bias is None else out + self.bias
