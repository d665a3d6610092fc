r"""Graph convolutions as ``torch.nn`` modules, for the built-in models and for your own.

Every layer is called as ``conv(nbr, h, ...)`` with a :class:`~distgnn.aggregate.Neighbourhood`
``nbr`` and node states ``h`` ``[N, d_in]`` and returns ``[N, d_out]``.  The neighbourhood is
either the whole graph (one process) or one rank's partition under ``mpirun``; on a
partition, every aggregation a layer makes is combined over the clones of each split vertex
inside ``nbr`` (the exchange of :mod:`distgnn.drpa`), so the same model code trains on one
socket and on many.  Under ``--algo cd-0`` a partitioned layer computes what the whole-graph
layer computes.  A model gives each layer its own exchange state by calling it with
``nbr.at(layer, step, self.training)`` (the layer's index and the epoch: what cd-r keeps
per layer, and what the dropout masks are keyed by); on a partition, a second layer at an
index already used in the training step is refused.  Every layer checks its input against
the neighbourhood (``[N, d_in]`` of its weights' dtype) before it aggregates anything.

Argument names and defaults follow PyTorch Geometric's layers of the same name.  Linear
aggregations commute with the projection, ``A (H W) = (A H) W``, so the GCN, GraphSAGE and
GIN layers aggregate on the narrower side: they project first when ``d_out < d_in``.  This
shrinks the SpMM and, in a distributed run, the exchange.
"""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from .aggregate import Neighbourhood
from .backends import check_tensor
from .dropout import check_dropout, dropout_key, vertex_dropout

SAGE_AGGREGATORS = ("gcn", "mean", "sum", "max", "min")
LINEAR_AGGREGATORS = ("gcn", "mean", "sum")


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

    where ``agg`` is the mean, sum or element-wise max (min) over in-neighbours (0 where there
    are none) and ``d_v`` is the in-degree (the global one in a distributed run).

    Args:
        in_channels (int): ``d_in``.
        out_channels (int): ``d_out``.
        aggregator (str, optional): ``"gcn"``, ``"mean"``, ``"sum"``, ``"max"`` or ``"min"``.
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
        self.project_first = out_channels < in_channels and aggregator in LINEAR_AGGREGATORS
        glorot(self)

    def aggregate(self, nbr: Neighbourhood, z: torch.Tensor) -> torch.Tensor:
        """The neighbourhood term before (or, when projecting first, after) ``W``."""
        if self.aggregator == "gcn":
            return (nbr.reduce(z, "sum") + z) / (nbr.degree + 1)
        return nbr.reduce(z, self.aggregator)

    def forward(self, nbr: Neighbourhood, h: torch.Tensor,
                aggregated: torch.Tensor | None = None) -> torch.Tensor:
        """``aggregated``: ``aggregate(nbr, h)`` computed earlier (constant input features)."""
        nbr.enter(self, self.lin_neigh.weight, h=h, aggregated=aggregated)
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

    @staticmethod
    def aggregate(nbr: Neighbourhood, z: torch.Tensor) -> torch.Tensor:
        """``D^-1/2 (A + I) D^-1/2 z`` (GCN2Conv's propagation too)."""
        scale = (nbr.degree + 1).rsqrt()
        z = scale * z
        return scale * (nbr.reduce(z, "sum") + z)

    def forward(self, nbr: Neighbourhood, h: torch.Tensor,
                aggregated: torch.Tensor | None = None) -> torch.Tensor:
        """``aggregated``: ``aggregate(nbr, h)`` computed earlier (constant input features)."""
        nbr.enter(self, self.lin.weight, h=h, aggregated=aggregated)
        out = aggregate_and_project(self, self.lin, nbr, h, aggregated)
        return out if self.bias is None else out + self.bias


def keyed_dropout(h: torch.Tensor, nbr: Neighbourhood, p: float, training: bool, seed: int,
                  step: int, layer: int) -> torch.Tensor:
    """Dropout of ``h`` ``[N, d]`` (while ``training``) whose mask is a function of ``(seed,
    step, layer, global vertex id, column)`` (:mod:`distgnn.dropout`): every clone of a vertex
    draws the mask the whole graph draws, so a partitioned run trains the same model.  Use it
    between layers instead of ``F.dropout``, whose masks differ from rank to rank."""
    check_dropout(h, nbr.global_ids, p)
    if not training or not p:
        return h
    return vertex_dropout(h, nbr.global_ids, p, dropout_key(seed, step, layer))


class GINConv(nn.Module):
    r"""Graph isomorphism layer (Xu et al., *How Powerful are Graph Neural Networks?*,
    ICLR 2019).

    .. math::
        \mathbf{h}'_v = \operatorname{MLP}\Big((1 + \epsilon)\, \mathbf{h}_v +
            \sum_{u \in N(v)} \mathbf{h}_u\Big),
        \qquad \operatorname{MLP}(\mathbf{x}) = \mathbf{W}_2\,
            \operatorname{ReLU}(\mathbf{W}_1 \mathbf{x} + \mathbf{b}_1) + \mathbf{b}_2

    The MLP has no batch normalisation (PyG's ``GIN`` model adds one): its statistics
    would need a reduction over all ranks every layer, and a full-batch step sees the whole
    graph anyway.  The sum commutes with ``W_1``, so the layer aggregates ``W_1 h`` when
    ``hidden < d_in``.

    Args:
        in_channels (int): ``d_in``.
        out_channels (int): ``d_out``.
        hidden_channels (int, optional): width of the MLP's hidden layer.
            (default: ``out_channels``)
        eps (float, optional): initial ``epsilon``. (default: ``0.``)
        train_eps (bool, optional): learn ``epsilon``. (default: ``False``)

    Shapes:
        - **input:** neighbourhood over ``N`` vertices, ``h`` ``[N, d_in]``
        - **output:** ``[N, d_out]``
    """

    def __init__(self, in_channels: int, out_channels: int, hidden_channels: int | None = None,
                 eps: float = 0.0, train_eps: bool = False):
        super().__init__()
        hidden = out_channels if hidden_channels is None else hidden_channels
        self.lin1 = nn.Linear(in_channels, hidden, bias=False)
        self.bias1 = nn.Parameter(torch.zeros(hidden))
        self.lin2 = nn.Linear(hidden, out_channels)
        self.initial_eps = eps
        if train_eps:
            self.eps = nn.Parameter(torch.tensor([eps]))
        else:
            self.register_buffer("eps", torch.tensor([eps]))
        self.project_first = hidden < in_channels
        glorot(self)
        with torch.no_grad():
            self.eps.fill_(eps)

    def aggregate(self, nbr: Neighbourhood, z: torch.Tensor) -> torch.Tensor:
        """``(1 + eps) z + sum_{u in N(v)} z_u``."""
        return nbr.reduce(z, "sum") + (1 + self.eps) * z

    def forward(self, nbr: Neighbourhood, h: torch.Tensor) -> torch.Tensor:
        nbr.enter(self, self.lin1.weight, h=h)
        hidden = aggregate_and_project(self, self.lin1, nbr, h, None)
        return self.lin2(F.relu(hidden + self.bias1))


class GATConv(nn.Module):
    r"""Graph attention layer (Velickovic et al., *Graph Attention Networks*, ICLR 2018),
    multi-head, with self-loops, as PyG's ``GATConv``.

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
        seed (int, optional): seed of the dropout masks (not in PyG: masks here are a
            function of seed, epoch, layer and edge). (default: ``0``)

    Shapes:
        - **input:** neighbourhood over ``N`` vertices, ``h`` ``[N, d_in]``, ``step`` (the
          epoch: keys the dropout masks)
        - **output:** ``[N, H C]`` when ``concat``, else ``[N, C]``
    """

    def __init__(self, in_channels: int, out_channels: int, heads: int = 1,
                 concat: bool = True, negative_slope: float = 0.2, dropout: float = 0.0,
                 bias: bool = True, seed: int = 0):
        super().__init__()
        if heads < 1:
            raise ValueError(f"heads must be >= 1, got {heads}")
        if not 0.0 <= dropout < 1.0:
            raise ValueError(f"dropout must be in [0, 1), got {dropout}")
        self.heads, self.out_channels, self.concat = heads, out_channels, concat
        self.negative_slope, self.dropout, self.seed = negative_slope, dropout, seed
        self.lin = nn.Linear(in_channels, heads * out_channels, bias=False)
        self.att_src = nn.Parameter(torch.empty(1, heads, out_channels))
        self.att_dst = nn.Parameter(torch.empty(1, heads, out_channels))
        width = heads * out_channels if concat else out_channels
        self.bias = nn.Parameter(torch.zeros(width)) if bias else None
        glorot(self)

    def forward(self, nbr: Neighbourhood, h: torch.Tensor, step: int = 0) -> torch.Tensor:
        nbr.enter(self, self.lin.weight, h=h)
        heads, width = self.heads, self.out_channels  # a [1, 1, C] att_* would broadcast
        for name, param, shape in (("att_src", self.att_src, (1, heads, width)),
                                   ("att_dst", self.att_dst, (1, heads, width)),
                                   ("lin.weight", self.lin.weight, (heads * width, None))):
            check_tensor(f"GATConv {name}", param, shape)
        z = self.lin(h).view(-1, self.heads, self.out_channels)
        score_src = (z * self.att_src).sum(-1)  # [N, H]
        score_dst = (z * self.att_dst).sum(-1)
        loop = F.leaky_relu(score_src + score_dst, self.negative_slope)  # the self-loops' logits
        p = self.dropout if self.training else 0.0
        # layer ~l (-l-1): apart from the keys of the vertex dropout before layer l
        key = dropout_key(self.seed, step, ~nbr.context.layer) if p else 0
        if nbr.backend.name == "numba":
            out, loop_alpha = nbr.attend(loop, score_src, score_dst, z, self.negative_slope, p,
                                         key)
        else:
            out, loop_alpha = self.attend(nbr, loop, score_src, score_dst, z, p, key)
        if p:
            loop_alpha = vertex_dropout(loop_alpha, nbr.edge_keys()[1], p, key)
        out = out + loop_alpha.unsqueeze(-1) * z
        out = out.flatten(1) if self.concat else out.mean(1)
        return out if self.bias is None else out + self.bias

    def attend(self, nbr: Neighbourhood, loop, score_src, score_dst, z, p: float, key: int):
        """:meth:`Neighbourhood.attend` in torch operations (any device, the torch backend's
        path; it materialises ``[E, H]`` and ``[E, H, C]`` tensors as PyG does): the aggregate
        over in-edges and the undropped loop coefficients."""
        src, dst = nbr.edge_index()
        logits = F.leaky_relu(score_src[src] + score_dst[dst], self.negative_slope)  # [E, H]
        loops = nbr.loop_edges()
        if loops is not None:  # the self-loop is added once, as PyG replaces stored ones
            logits = logits.masked_fill(loops.unsqueeze(1), -torch.inf)
        with torch.no_grad():  # a per-vertex shift of the softmax: any value gives its result
            top = loop.scatter_reduce(0, dst.unsqueeze(1).expand_as(logits), logits, "amax")
            top = nbr.combine(top, "max", empty_rows=False)
        weight = torch.exp(logits - top[dst])
        loop_weight = torch.exp(loop - top)
        total = nbr.combine(torch.zeros_like(loop_weight).index_add(0, dst, weight),
                            exact=True) + loop_weight
        alpha = weight / total[dst]
        if p:
            alpha = vertex_dropout(alpha, nbr.edge_keys()[0], p, key)
        y = torch.zeros_like(z).index_add(0, dst, alpha.unsqueeze(-1) * z[src])
        return nbr.combine(y.view(len(y), -1)).view_as(z), loop_weight / total


class GCN2Conv(nn.Module):
    r"""GCNII layer (Chen et al., *Simple and Deep Graph Convolutional Networks*, ICML 2020):
    a GCN propagation with an initial residual and an identity mapping, as PyG's
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
        - **input:** neighbourhood over ``N`` vertices, ``x`` and ``x_0`` ``[N, channels]``
        - **output:** ``[N, channels]``
    """

    def __init__(self, channels: int, alpha: float, theta: float | None = None,
                 layer: int | None = None):
        super().__init__()
        if (theta is None) != (layer is None):
            raise ValueError("give theta and layer together (or neither)")
        self.alpha = alpha
        self.beta = 1.0 if theta is None else math.log(theta / layer + 1)
        self.weight1 = nn.Parameter(torch.empty(channels, channels))
        glorot(self)

    def forward(self, nbr: Neighbourhood, x: torch.Tensor, x_0: torch.Tensor) -> torch.Tensor:
        nbr.enter(self, self.weight1, x=x, x_0=x_0)
        out = (1 - self.alpha) * GCNConv.aggregate(nbr, x) + self.alpha * x_0
        return torch.addmm(out, out, self.weight1, beta=1.0 - self.beta, alpha=self.beta)
