"""GraphSAGE (Hamilton et al., NeurIPS 2017), with DGL's ``gcn`` aggregator beside PyG's."""
from __future__ import annotations

import torch
from torch import nn

from .aggregate import Neighbourhood
from .graph_layer import GraphLayer, aggregate_and_project, glorot

SAGE_AGGREGATORS = ("gcn", "mean", "sum", "max", "min")


LINEAR_AGGREGATORS = ("gcn", "mean", "sum")


class SAGEConv(GraphLayer):
    r"""GraphSAGE layer, with DGL's ``gcn`` aggregator besides PyG's.

    From Hamilton et al., *Inductive Representation Learning on Large Graphs* (NeurIPS 2017).

    .. math::
        \text{gcn:}\quad \mathbf{h}'_v = \mathbf{W}\,
            \frac{\mathbf{h}_v + \sum_{u \in N(v)} \mathbf{h}_u}{d_v + 1} + \mathbf{b}

        \text{mean/sum/max:}\quad \mathbf{h}'_v = \mathbf{W}_r \mathbf{h}_v +
            \mathbf{W}_n \operatorname{agg}_{u \in N(v)} \mathbf{h}_u + \mathbf{b}

    where ``agg`` is the mean, sum or element-wise max (min) over in-neighbours (0 where there
    are none) and ``d_v`` is the in-degree (the global one in a distributed run).

    Args:
        in_channels (int): ``d_in``.
        out_channels (int): ``d_out``.
        aggr (str, optional): ``"mean"``, ``"sum"``, ``"max"``, ``"min"`` or ``"gcn"``.
            (default: ``"mean"``)
        bias (bool, optional): learn ``b``. (default: ``True``)

    Shapes:
        - **input:** graph ``g`` over ``N`` vertices, ``h`` ``[N, d_in]``, optional ``key``
        - **output:** ``[N, d_out]``
    """

    def __init__(self, in_channels: int, out_channels: int, aggr: str = "mean",
                 bias: bool = True):
        super().__init__()
        if aggr not in SAGE_AGGREGATORS:
            raise ValueError(f"aggr must be one of {SAGE_AGGREGATORS}, got {aggr!r}")
        self.in_channels, self.out_channels, self.aggr = in_channels, out_channels, aggr
        self.lin_neigh = nn.Linear(in_channels, out_channels, bias=False)
        self.lin_root = (None if aggr == "gcn"
                         else nn.Linear(in_channels, out_channels, bias=False))
        self.bias = nn.Parameter(torch.zeros(out_channels)) if bias else None
        self.project_first = out_channels < in_channels and aggr in LINEAR_AGGREGATORS
        self.reset_parameters()

    def reset_parameters(self) -> None:
        glorot(self)

    def extra_repr(self) -> str:
        return f"{self.in_channels}, {self.out_channels}, aggr={self.aggr!r}"

    def aggregate(self, g: Neighbourhood, z: torch.Tensor) -> torch.Tensor:
        """The neighbourhood term before (or, when projecting first, after) ``W``."""
        if self.aggr == "gcn":
            return g.loop_sum(z, row_scale=(g.degree + 1).reciprocal())
        return g.reduce(z, self.aggr)

    @property
    def weight(self) -> torch.Tensor:
        """``W`` (``W_n`` beside ``W_r`` for mean/sum/max) ``[d_out, d_in]``."""
        return self.lin_neigh.weight

    def forward(self, g: Neighbourhood, h: torch.Tensor | None,
                aggregated: torch.Tensor | None = None, key: int | None = None,
                epilogue=None, projected: torch.Tensor | None = None,
                dropout=None) -> torch.Tensor:
        """The layer's output ``[N, d_out]``.

        ``aggregated``: ``aggregate(g, h)`` computed earlier (constant input features);
        ``epilogue(y, b)``: applied in place of ``y + b`` (a model fusing the activation and
        dropout that follow, :meth:`~distgnn.nn.keyed_dropout.KeyedDropout.after_relu`);
        ``projected``: ``h W^T`` made by the epilogue before (``h`` then ``None``; the
        ``gcn`` aggregator only, which has no root term); ``dropout(g, h)``: the input's
        dropout, applied inside the layer so that, with the ``gcn`` aggregator, the dropped
        copy is freed once aggregated (a model's first layer; the root term of the others
        reads it after)."""
        g = g.enter(self, self.lin_neigh.weight, key, h=h, aggregated=aggregated)
        if self.lin_root is None:
            return aggregate_and_project(self, self.lin_neigh.weight, self.bias, g, h,
                                         aggregated, epilogue, projected, dropout)
        if dropout is not None:
            h = dropout(g, h)
        if projected is not None:
            raise ValueError(f"SAGEConv(aggr={self.aggr!r}) adds W_r h: it needs h, not "
                             "its projection")
        if epilogue is None:
            return (aggregate_and_project(self, self.lin_neigh.weight, self.bias, g, h,
                                          aggregated) + self.lin_root(h))
        out = aggregate_and_project(self, self.lin_neigh.weight, None, g, h, aggregated)
        return epilogue(out + self.lin_root(h), self.bias)
