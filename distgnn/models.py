"""GNN layers and models for full-batch node classification.

Every layer takes a :class:`~distgnn.aggregate.Neighbourhood` and node states ``h``
``[N, d_in]`` and returns ``[N, d_out]``.  Linear aggregations commute with the projection,
``A (H W) = (A H) W``, so each layer aggregates on the narrower side: it projects first when
``d_out < d_in``.  This shrinks the SpMM (and, in a distributed run, the exchange).
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from .aggregate import Neighbourhood
from .dropout import dropout_key, vertex_dropout

SAGE_AGGREGATORS = ("gcn", "mean", "sum", "max")


def glorot(layer: nn.Module) -> None:
    """Glorot-uniform weights and zero biases, as in Kipf & Welling's and PyG's layers."""
    for name, p in layer.named_parameters():
        if p.dim() > 1:
            nn.init.xavier_uniform_(p)
        else:
            nn.init.zeros_(p)


def aggregate_and_project(conv, lin: nn.Module, nbr: Neighbourhood, h: torch.Tensor,
                          aggregated: torch.Tensor | None) -> torch.Tensor:
    """``lin(aggregated)`` when ``agg(h)`` is known; else ``lin`` on the narrower side of
    ``conv.aggregate``: ``agg(lin(h))`` when the layer projects first, else ``lin(agg(h))``
    (equal for the linear aggregators)."""
    if aggregated is not None:
        return lin(aggregated)
    if conv.project_first:
        return conv.aggregate(nbr, lin(h))
    return lin(conv.aggregate(nbr, h))


class SAGEConv(nn.Module):
    r"""GraphSAGE layer (Hamilton et al., *Inductive Representation Learning on Large
    Graphs*, NeurIPS 2017) with DistGNN's ``gcn`` aggregator as the default.

    .. math::
        \text{gcn:}\quad \mathbf{h}'_v = \mathbf{W}\,
            \frac{\mathbf{h}_v + \sum_{u \in N(v)} \mathbf{h}_u}{d_v + 1} + \mathbf{b}

        \text{mean/sum/max:}\quad \mathbf{h}'_v = \mathbf{W}_r \mathbf{h}_v +
            \mathbf{W}_n \operatorname{agg}_{u \in N(v)} \mathbf{h}_u + \mathbf{b}

    where ``agg`` is the mean, sum or element-wise max over in-neighbours and ``d_v`` is the
    in-degree (the global one in a distributed run).

    Args:
        in_channels (int): ``d_in``.
        out_channels (int): ``d_out``.
        aggregator (str, optional): ``"gcn"``, ``"mean"``, ``"sum"`` or ``"max"``.
            (default: ``"gcn"``)
        bias (bool, optional): learn ``b``. (default: ``True``)

    Shapes:
        - **input:** neighbourhood over ``N`` vertices, ``h`` ``[N, d_in]``
        - **output:** ``[N, d_out]``
    """

    def __init__(self, in_channels: int, out_channels: int, aggregator: str = "gcn",
                 bias: bool = True):
        super().__init__()
        if aggregator not in SAGE_AGGREGATORS:
            raise ValueError(f"aggregator must be one of {SAGE_AGGREGATORS}, got {aggregator!r}")
        self.aggregator = aggregator
        self.lin_neigh = nn.Linear(in_channels, out_channels, bias=False)
        self.lin_root = (None if aggregator == "gcn"
                         else nn.Linear(in_channels, out_channels, bias=False))
        self.bias = nn.Parameter(torch.zeros(out_channels)) if bias else None
        self.project_first = out_channels < in_channels and aggregator != "max"
        glorot(self)

    def aggregate(self, nbr: Neighbourhood, z: torch.Tensor) -> torch.Tensor:
        """The neighbourhood term before (or, when projecting first, after) ``W``."""
        if self.aggregator == "gcn":
            return (nbr.reduce(z, "sum") + z) / (nbr.degree + 1)
        return nbr.reduce(z, self.aggregator)

    def forward(self, nbr: Neighbourhood, h: torch.Tensor,
                aggregated: torch.Tensor | None = None) -> torch.Tensor:
        """``aggregated``: ``aggregate(nbr, h)`` computed earlier (constant input features)."""
        out = aggregate_and_project(self, self.lin_neigh, nbr, h, aggregated)
        if self.lin_root is not None:
            out = out + self.lin_root(h)
        return out if self.bias is None else out + self.bias


class GCNConv(nn.Module):
    r"""Graph convolution (Kipf & Welling, *Semi-Supervised Classification with Graph
    Convolutional Networks*, ICLR 2017).

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
        - **input:** neighbourhood over ``N`` vertices, ``h`` ``[N, d_in]``
        - **output:** ``[N, d_out]``
    """

    def __init__(self, in_channels: int, out_channels: int, bias: bool = True):
        super().__init__()
        self.lin = nn.Linear(in_channels, out_channels, bias=False)
        self.bias = nn.Parameter(torch.zeros(out_channels)) if bias else None
        self.project_first = out_channels < in_channels
        glorot(self)

    def aggregate(self, nbr: Neighbourhood, z: torch.Tensor) -> torch.Tensor:
        """``D^-1/2 (A + I) D^-1/2 z``."""
        scale = (nbr.degree + 1).rsqrt()
        z = scale * z
        return scale * (nbr.reduce(z, "sum") + z)

    def forward(self, nbr: Neighbourhood, h: torch.Tensor,
                aggregated: torch.Tensor | None = None) -> torch.Tensor:
        """``aggregated``: ``aggregate(nbr, h)`` computed earlier (constant input features)."""
        out = aggregate_and_project(self, self.lin, nbr, h, aggregated)
        return out if self.bias is None else out + self.bias


class GNN(nn.Module):
    r"""A stack of ``num_layers`` GCN or GraphSAGE layers for node classification.

    .. math::
        \mathbf{H}^{(0)} = \mathbf{X},\qquad
        \mathbf{H}^{(l+1)} = \sigma\big(\operatorname{conv}_l(\operatorname{dropout}
            (\mathbf{H}^{(l)}))\big) \;[+\, \mathbf{H}^{(l)}\ \text{if residual}]

    with ``sigma = ReLU`` on all but the last layer, which returns logits.  Residual
    connections are added where ``d_in == d_out`` (the hidden-to-hidden layers).  Dropout
    masks are keyed by ``(seed, step, layer, global vertex id)`` (:mod:`distgnn.dropout`),
    so a partitioned run draws the same masks as the whole graph.

    Args:
        model (str): ``"gcn"`` or ``"sage"``.
        in_channels (int): feature width ``F``.
        hidden_channels (int): width of hidden layers.
        out_channels (int): number of classes ``C``.
        num_layers (int, optional): (default: ``2``)
        dropout (float, optional): dropout probability before each layer. (default: ``0.5``)
        aggregator (str, optional): GraphSAGE aggregator. (default: ``"gcn"``)
        residual (bool, optional): add skip connections. (default: ``False``)
        seed (int, optional): seed of the dropout masks. (default: ``0``)
        precompute_first (bool, optional): no dropout on the input features, and the first
            layer's aggregation of them (constant: ``x`` needs no gradient) computed once
            and reused every epoch, as SGC and MG-GCN do (when ``F > hidden`` it is
            ``F`` wide, where the plain model projects first: the same maths).  On a
            partition its exchange happens once, so cd-r leaves only the later layers
            stale.  Needs a linear first aggregation (not max).  (default: ``False``)

    Shapes:
        - **input:** neighbourhood over ``N`` vertices, ``x`` ``[N, F]``, ``step`` (the
          epoch, which selects the dropout masks)
        - **output:** logits ``[N, C]``
    """

    def __init__(self, model: str, in_channels: int, hidden_channels: int, out_channels: int,
                 num_layers: int = 2, dropout: float = 0.5, aggregator: str = "gcn",
                 residual: bool = False, seed: int = 0, precompute_first: bool = False):
        super().__init__()
        if model not in ("gcn", "sage"):
            raise ValueError(f"model must be 'gcn' or 'sage', got {model!r}")
        if num_layers < 1:
            raise ValueError(f"num_layers must be >= 1, got {num_layers}")
        if not 0.0 <= dropout < 1.0:
            raise ValueError(f"dropout must be in [0, 1), got {dropout}")
        dims = [in_channels] + [hidden_channels] * (num_layers - 1) + [out_channels]
        self.convs = nn.ModuleList(
            GCNConv(a, b) if model == "gcn" else SAGEConv(a, b, aggregator)
            for a, b in zip(dims[:-1], dims[1:]))
        self.dropout = dropout
        self.residual = residual
        self.seed = seed
        first = self.convs[0]
        if precompute_first and getattr(first, "aggregator", "gcn") == "max":
            raise ValueError("precompute_first needs a linear first aggregation, not max")
        self.precompute_first = precompute_first
        self._first: tuple | None = None  # (graph, x, aggregate of x) when precomputed

    def forward(self, nbr: Neighbourhood, x: torch.Tensor, step: int = 0) -> torch.Tensor:
        h = x
        for layer, conv in enumerate(self.convs):
            if layer == 0 and self.precompute_first:
                out = conv(nbr, h, aggregated=self.first_aggregate(nbr, x))
            else:
                if self.training and self.dropout:
                    key = dropout_key(self.seed, step, layer)
                    h = vertex_dropout(h, nbr.global_ids, self.dropout, key)
                out = conv(nbr.at(layer, step, self.training), h)
            if layer == len(self.convs) - 1:
                return out
            out = F.relu(out)
            h = out + h if self.residual and out.shape == h.shape else out

    @torch.no_grad()
    def first_aggregate(self, nbr: Neighbourhood, x: torch.Tensor) -> torch.Tensor:
        """The first layer's aggregation of ``x``, computed on first use (an exact exchange
        on a partition, whatever the algorithm: it is done once)."""
        if self._first is None or self._first[0] is not nbr.graph or self._first[1] is not x:
            self._first = (nbr.graph, x, self.convs[0].aggregate(nbr.at(0, 0, False), x))
        return self._first[2]
