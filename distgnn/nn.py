r"""Graph convolutions and dropout as ``torch.nn`` modules, for the built-in models and your own.

A model is called as ``model(g, x)`` and calls each layer as ``conv(g, h)``, as DGL's
layers are: ``g`` is the graph (a :class:`~distgnn.aggregate.Neighbourhood`), ``h`` the node
states ``[N, d_in]``, and the layer returns ``[N, d_out]``.  ``g`` is the whole graph in one
process or one rank's partition under ``mpirun``; on a partition every aggregation a layer
makes is combined over the clones of each split vertex inside ``g`` (the exchange of
:mod:`distgnn.exchange`), so the same model code trains on one socket and on many, and under
``--algo cd-0`` a partitioned layer computes what the whole-graph layer computes.

The exchange keeps state per layer (cd-r's delayed partials) and dropout masks are drawn
per module, so every layer and :class:`KeyedDropout` has a *key*: its position among the
model's layers (dropouts) in ``model.modules()`` (:func:`assign_keys`, which the trainer
calls), the same on every rank.  A layer object called at two places of one forward pass
(shared weights) passes ``key=`` at the second: ``conv(g, h, key=7)``.  Every layer checks
its input against the graph (``[N, d_in]`` of its weights' dtype) before it aggregates.

Argument names follow PyTorch Geometric's layers of the same name (a subset of them;
defaults as there, except where a docstring says otherwise).  Linear aggregations commute
with the projection, ``A (H W) = (A H) W``, so the GCN, GraphSAGE and GIN layers aggregate
on the narrower side: they project first when ``d_out < d_in``.  This shrinks the SpMM and,
in a distributed run, the exchange.
"""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn
from torch.overrides import TorchFunctionMode

from .aggregate import Neighbourhood
from .backends import check_tensor
from .dropout import check_dropout, dropout_key, vertex_dropout
from .errors import DistGNNError
from .saved_activations import store_in_bf16

__all__ = ["GCNConv", "SAGEConv", "GINConv", "GATConv", "GCN2Conv", "KeyedDropout", "MLP",
           "assign_keys", "prepare", "relu"]

SAGE_AGGREGATORS = ("gcn", "mean", "sum", "max", "min")
LINEAR_AGGREGATORS = ("gcn", "mean", "sum")


def glorot(layer: nn.Module) -> None:
    """Glorot-uniform weights and zero biases, as in Kipf & Welling's and PyG's layers."""
    for name, p in layer.named_parameters():
        if p.dim() > 1:
            nn.init.xavier_uniform_(p)
        else:
            nn.init.zeros_(p)


class GraphLayer(nn.Module):
    """A layer that aggregates over the graph, hence exchanges on a partition: it holds the
    ``key`` its exchange state is kept under (:func:`assign_keys`).

    A layer of your own subclasses it and aggregates through the view ``enter`` returns::

        def forward(self, g, h, key=None):
            g = g.enter(self, self.lin.weight, key, h=h)  # checks h, takes the layer's key
            return self.lin(g.reduce(h, "mean"))
    """

    key: int | None = None


def aggregate_and_project(conv, weight: torch.Tensor, bias: torch.Tensor | None,
                          g: Neighbourhood, h: torch.Tensor,
                          aggregated: torch.Tensor | None) -> torch.Tensor:
    """``agg(h) W^T + b`` on the narrower side of ``conv.aggregate``: ``agg(h W^T) + b`` when
    the layer projects first (equal for the linear aggregators), else one matrix product
    with the bias added in it (a pass fewer over the output); ``aggregated``: ``agg(h)``,
    known."""
    if aggregated is None and conv.project_first:
        out = conv.aggregate(g, F.linear(h, weight))
        return out if bias is None else out + bias
    return F.linear(conv.aggregate(g, h) if aggregated is None else aggregated, weight, bias)


class SAGEConv(GraphLayer):
    r"""GraphSAGE layer (Hamilton et al., *Inductive Representation Learning on Large
    Graphs*, NeurIPS 2017), with DGL's ``gcn`` aggregator besides PyG's.

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
        if self.aggr == "gcn":  # in place on the new sum: a pass and a tensor fewer
            return torch.add(g.reduce(z, "sum"), z).div_(g.degree + 1)
        return g.reduce(z, self.aggr)

    def forward(self, g: Neighbourhood, h: torch.Tensor,
                aggregated: torch.Tensor | None = None, key: int | None = None
                ) -> torch.Tensor:
        """``aggregated``: ``aggregate(g, h)`` computed earlier (constant input features)."""
        g = g.enter(self, self.lin_neigh.weight, key, h=h, aggregated=aggregated)
        out = aggregate_and_project(self, self.lin_neigh.weight, self.bias, g, h, aggregated)
        return out if self.lin_root is None else out + self.lin_root(h)


class GCNConv(GraphLayer):
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
        z = scale * z
        return torch.add(g.reduce(z, "sum"), z).mul_(scale)  # in place on the new sum

    def forward(self, g: Neighbourhood, h: torch.Tensor,
                aggregated: torch.Tensor | None = None, key: int | None = None
                ) -> torch.Tensor:
        """``aggregated``: ``aggregate(g, h)`` computed earlier (constant input features)."""
        g = g.enter(self, self.lin.weight, key, h=h, aggregated=aggregated)
        return aggregate_and_project(self, self.lin.weight, self.bias, g, h, aggregated)


class _MaskReLU(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        out = torch.relu(x)
        ctx.save_for_backward(out > 0)
        return out

    @staticmethod
    def backward(ctx, grad):
        (kept,) = ctx.saved_tensors
        return torch.where(kept, grad, 0.0)


def relu(x: torch.Tensor) -> torch.Tensor:
    r"""``max(x, 0)`` whose backward pass keeps a bool mask of the positive elements (one
    byte each) instead of the output (four):

    .. math::
        \frac{\partial L}{\partial x} = \frac{\partial L}{\partial y} \odot [y > 0]

    the same gradient as ``torch.relu``'s, bit for bit.  Between layers of a GNN the output
    is not kept by anything else (the next layer's dropout makes a new tensor from it), so
    this frees ``3 N d`` bytes of what the backward pass holds per hidden layer of width
    ``d`` -- on a 2-layer GraphSAGE of hidden 256 the backward pass's peak falls by about a
    fifth.  Without autograd it is ``torch.relu``."""
    if not (torch.is_grad_enabled() and x.requires_grad):
        return torch.relu(x)
    return _MaskReLU.apply(x)


class KeyedDropout(nn.Module):
    r"""Dropout whose masks every clone of a vertex draws alike: the mask of ``h`` ``[N, d]``
    is a function of (seed, epoch, this module's key, global vertex id, column)
    (:mod:`distgnn.dropout`), so a partitioned run drops exactly what the whole graph drops
    and trains the same model.  Use it where a PyG model uses ``F.dropout``, whose masks
    differ from rank to rank (in a model trained on partitions, ``torch.nn.Dropout`` and
    ``F.dropout`` are refused).

    .. math::
        \mathbf{h}'_{v,f} = rac{m_{v,f}}{1 - p}\, \mathbf{h}_{v,f},\qquad
        m_{v,f} \sim \operatorname{Bernoulli}(1 - p) 	ext{ keyed by }
        (	ext{seed}, 	ext{epoch}, 	ext{key}, v, f)

    Active while ``g`` trains (:meth:`~distgnn.aggregate.Neighbourhood.set_epoch`); the
    identity in evaluation.  The seed is the run's (``TrainConfig.seed``).

    Args:
        p (float, optional): probability of dropping an element. (default: ``0.5``)

    Shapes:
        - **input:** graph ``g`` over ``N`` vertices, ``h`` ``[N, d]``, optional ``key``
        - **output:** ``[N, d]``
    """

    def __init__(self, p: float = 0.5):
        super().__init__()
        check_dropout(torch.empty(0, 0), (), p)
        self.p = p
        self.key: int | None = None

    def extra_repr(self) -> str:
        return f"p={self.p}"

    def forward(self, g: Neighbourhood, h: torch.Tensor, key: int | None = None
                ) -> torch.Tensor:
        check_dropout(h, g.global_ids, self.p)
        if not g.training or not self.p:
            return h
        key = g.claim("dropout", self, key)
        return vertex_dropout(h, g.vertex_ids(h.device), self.p,
                              dropout_key(g.seed, g.epoch, key))


class MLP(nn.Sequential):
    r"""``Linear -> ReLU -> Linear``, Glorot-initialised: the MLP of the built-in GIN.

    .. math::
        \operatorname{MLP}(\mathbf{x}) = \mathbf{W}_2\,
            \operatorname{ReLU}(\mathbf{W}_1 \mathbf{x} + \mathbf{b}_1) + \mathbf{b}_2

    Args:
        in_channels (int): width of ``x``.
        hidden_channels (int): width of the hidden layer.
        out_channels (int): width of the output.
    """

    def __init__(self, in_channels: int, hidden_channels: int, out_channels: int):
        first = nn.Linear(in_channels, hidden_channels, bias=False)
        # b_1 made without a random draw (reset_parameters zeroes it anyway), so the seeded
        # initial weights of the models built from this MLP stay what they were
        first.bias = nn.Parameter(torch.zeros(hidden_channels))
        super().__init__(first, nn.ReLU(), nn.Linear(hidden_channels, out_channels))
        self.reset_parameters()

    def reset_parameters(self) -> None:
        glorot(self)


class GINConv(GraphLayer):
    r"""Graph isomorphism layer (Xu et al., *How Powerful are Graph Neural Networks?*,
    ICLR 2019), as PyG's ``GINConv``.

    .. math::
        \mathbf{h}'_v = h_{\Theta}\Big((1 + \epsilon)\, \mathbf{h}_v +
            \sum_{u \in N(v)} \mathbf{h}_u\Big)

    with ``h_Theta`` the module ``nn`` (for example :class:`MLP`).  When ``nn`` is a
    ``torch.nn.Sequential`` that starts with a ``torch.nn.Linear`` ``W_1 x + b_1``, the sum
    commutes with ``W_1``: the layer aggregates ``W_1 h`` when ``W_1`` narrows, adds ``b_1``
    after the sum, and runs the rest of ``nn`` on the result (the same maths, a narrower
    SpMM and exchange).  The built-in GIN's MLP has no batch normalisation (PyG's ``GIN``
    model adds one): its statistics would need a reduction over all ranks every layer.

    Args:
        nn (torch.nn.Module): ``h_Theta``, mapping ``[N, d_in]`` to ``[N, d_out]``.
        eps (float, optional): initial ``epsilon``. (default: ``0.``)
        train_eps (bool, optional): learn ``epsilon``. (default: ``False``)

    Shapes:
        - **input:** graph ``g`` over ``N`` vertices, ``h`` ``[N, d_in]``, optional ``key``
        - **output:** ``[N, d_out]``
    """

    def __init__(self, nn: torch.nn.Module, eps: float = 0.0, train_eps: bool = False):
        super().__init__()
        self.nn = nn
        self.initial_eps = eps
        if train_eps:
            self.eps = torch.nn.Parameter(torch.tensor([eps]))
        else:
            self.register_buffer("eps", torch.tensor([eps]))
        first = self.first_linear()
        self.project_first = first is not None and first.out_features < first.in_features

    def first_linear(self) -> torch.nn.Linear | None:
        """``nn``'s leading ``Linear`` (``W_1``), which the sum commutes with, if it has one."""
        if isinstance(self.nn, torch.nn.Sequential) and len(self.nn) and isinstance(
                self.nn[0], torch.nn.Linear):
            return self.nn[0]
        return None

    def reset_parameters(self) -> None:
        """``epsilon`` to its initial value and ``nn``'s parameters (its own
        ``reset_parameters``, else each of its layers')."""
        with torch.no_grad():
            self.eps.fill_(self.initial_eps)
        layers = [self.nn] if hasattr(self.nn, "reset_parameters") else self.nn.children()
        for layer in layers:
            if hasattr(layer, "reset_parameters"):
                layer.reset_parameters()

    def extra_repr(self) -> str:
        return f"eps={self.initial_eps}, train_eps={isinstance(self.eps, torch.nn.Parameter)}"

    def aggregate(self, g: Neighbourhood, z: torch.Tensor) -> torch.Tensor:
        """``(1 + eps) z + sum_{u in N(v)} z_u``."""
        return g.reduce(z, "sum") + (1 + self.eps) * z

    def forward(self, g: Neighbourhood, h: torch.Tensor, key: int | None = None
                ) -> torch.Tensor:
        first = self.first_linear()
        if first is None:
            g = g.enter(self, torch.empty(0, h.shape[-1], dtype=self.eps.dtype), key, h=h)
            return self.nn(self.aggregate(g, h))
        g = g.enter(self, first.weight, key, h=h)
        hidden = aggregate_and_project(self, first.weight, first.bias, g, h, None)
        for layer in list(self.nn)[1:]:
            hidden = layer(hidden)
        return hidden


class GATConv(GraphLayer):
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


class GCN2Conv(GraphLayer):
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
        - **input:** graph ``g`` over ``N`` vertices, ``x`` and ``x_0`` ``[N, channels]``,
          optional ``key``
        - **output:** ``[N, channels]``
    """

    def __init__(self, channels: int, alpha: float, theta: float | None = None,
                 layer: int | None = None):
        super().__init__()
        if (theta is None) != (layer is None):
            raise ValueError("give theta and layer together (or neither)")
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


def assign_keys(model: nn.Module) -> None:
    """Number the graph layers and the :class:`KeyedDropout` modules of ``model`` by their
    positions in ``model.modules()`` (layers and dropouts counted apart, each from 0): the
    keys their exchange state and dropout masks are kept under, the same on every rank.
    Idempotent; a module that appears twice in the model gets one key."""
    for kind in (GraphLayer, KeyedDropout):
        for key, module in enumerate(m for m in model.modules() if isinstance(m, kind)):
            module.key = key


TORCH_DROPOUTS = (nn.Dropout, nn.Dropout1d, nn.Dropout2d, nn.Dropout3d, nn.AlphaDropout,
                  nn.FeatureAlphaDropout)
DROPOUT_FUNCTIONS = {F.dropout, F.dropout1d, F.dropout2d, F.dropout3d, F.alpha_dropout,
                     F.feature_alpha_dropout, torch.dropout, torch.alpha_dropout,
                     torch.feature_dropout, torch.feature_alpha_dropout}
TORCH_DROPOUT_PROBLEM = ("its masks differ between a vertex's clones on different ranks, so a "
                         "partitioned run would train another model: use "
                         "distgnn.nn.KeyedDropout")


class _FunctionalDropoutCheck(TorchFunctionMode):
    """Refuses a torch dropout function that drops something (``training`` true, ``p > 0``)."""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func in DROPOUT_FUNCTIONS:
            p = args[1] if len(args) > 1 else kwargs.get("p", 0.5)
            on = args[2] if len(args) > 2 else kwargs.get("training", kwargs.get("train", True))
            if on and p:
                raise DistGNNError(f"the model calls torch's {func.__name__}: "
                                   f"{TORCH_DROPOUT_PROBLEM}")
        return func(*args, **kwargs)


def prepare(model: nn.Module, g: Neighbourhood, bf16_activations: bool = False) -> None:
    """Make ``model`` ready to train on ``g``: :func:`assign_keys`; with
    ``bf16_activations``, what its training passes keep for the backward pass stored in
    bf16 (:mod:`distgnn.saved_activations`); and on a partition refuse torch's own dropout,
    as a module at once and as a function (``F.dropout``) in the first training forward
    pass, with one line naming it."""
    assign_keys(model)
    if bf16_activations:
        store_in_bf16(model, lambda: g.training)
    if g.exchange is None:
        return
    for name, module in model.named_modules():
        if isinstance(module, TORCH_DROPOUTS) and module.p:
            raise DistGNNError(f"{name or 'the model'} is a torch.nn.{type(module).__name__}: "
                               f"{TORCH_DROPOUT_PROBLEM}")
    check = _FunctionalDropoutCheck()

    def enter(module, inputs):
        if g.training:
            check.__enter__()

    def leave(module, inputs, output):
        if g.training:
            check.__exit__(None, None, None)
            for hook in hooks:
                hook.remove()

    hooks = [model.register_forward_pre_hook(enter),
             model.register_forward_hook(leave, always_call=True)]
