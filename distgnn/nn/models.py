"""The built-in models for full-batch node classification (``distgnn-train --model``).

:class:`GNN`, a stack of one kind of layer from :mod:`distgnn.nn` (GCN, GraphSAGE, GIN,
GAT), and :class:`GCNII`, the deep residual network.  Both are called as ``model(g, x)``
with the graph ``g`` (:class:`~distgnn.nn.aggregate.Neighbourhood`: the whole graph or a
rank's partition) and written as a user's own model would be: layers of :mod:`distgnn.nn`
called as ``conv(g, h)``, a :class:`~distgnn.nn.keyed_dropout.KeyedDropout` per place that
drops.
"""
from __future__ import annotations

import copy
import functools

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.checkpoint import checkpoint

from .aggregate import Neighbourhood
from .gat_conv import GATConv
from .gcn2_conv import GCN2Conv
from .gcn_conv import GCNConv
from .gin_conv import MLP, GINConv
from .graph_layer import relu
from .keyed_dropout import KeyedDropout
from .prepare import assign_keys
from .sage_conv import LINEAR_AGGREGATORS, SAGEConv
from .widths import layer_widths

MODELS = ("gcn", "sage", "gin", "gat", "gcnii")


def run_layer(layer, recompute: bool, *inputs: torch.Tensor) -> torch.Tensor:
    """``layer(*inputs)``; with ``recompute``, only the inputs are kept for the backward
    pass, which runs the layer again (its exchanges included: all ranks do so in the same
    order) instead of reading its stored activations."""
    if recompute and torch.is_grad_enabled():
        return checkpoint(layer, *inputs, use_reentrant=False)
    return layer(*inputs)

class GNN(nn.Module):
    r"""A stack of ``num_layers`` GCN, GraphSAGE, GIN or GAT layers for node classification.

    .. math::
        \mathbf{H}^{(0)} = \mathbf{X},\qquad
        \mathbf{H}^{(l+1)} = \sigma\big(\operatorname{conv}_l(\operatorname{dropout}
            (\mathbf{H}^{(l)}))\big) \;[+\, \mathbf{H}^{(l)}\ \text{if residual}]

    with ``sigma = ReLU`` (ELU for GAT, as in its paper) on all but the last layer, which
    returns logits.  Residual connections are added where ``d_in == d_out`` (the hidden-to-
    hidden layers).  Dropout masks are keyed by ``(seed, epoch, layer, global vertex id)``
    (:class:`~distgnn.nn.keyed_dropout.KeyedDropout`), so a partitioned run draws the whole
    graph's masks.

    The layers: ``gcn`` :class:`~distgnn.nn.gcn_conv.GCNConv`; ``sage``
    :class:`~distgnn.nn.sage_conv.SAGEConv` with ``aggregator``; ``gin``
    :class:`~distgnn.nn.gin_conv.GINConv` with an :class:`~distgnn.nn.gin_conv.MLP` of width
    ``hidden_channels``; ``gat`` :class:`~distgnn.nn.gat_conv.GATConv` with ``heads`` heads
    of ``hidden_channels / heads`` concatenated on the hidden layers and one head on the last
    (Velickovic et al.'s Cora model), attention dropout ``dropout``.

    Args:
        model (str): ``"gcn"``, ``"sage"``, ``"gin"`` or ``"gat"``.
        in_channels (int): feature width ``F``.
        hidden_channels (int): width of hidden layers.
        out_channels (int): number of classes ``C``.
        num_layers (int, optional): (default: ``2``)
        dropout (float, optional): dropout probability before each layer. (default: ``0.5``)
        aggregator (str, optional): GraphSAGE aggregator. (default: ``"gcn"``)
        residual (bool, optional): add skip connections. (default: ``False``)
        precompute_first (bool, optional): no dropout on the input features, and the first
            layer's aggregation of them (constant: ``x`` needs no gradient) computed once
            and reused every epoch, as SGC and MG-GCN do (when ``F > hidden`` it is
            ``F`` wide, where the plain model projects first: the same maths).  On a
            partition its exchange happens once, so cd-r leaves only the later layers
            stale.  GCN and GraphSAGE with a linear aggregator only.  (default: ``False``)
        heads (int, optional): attention heads of GAT's hidden layers. (default: ``8``)
        train_eps (bool, optional): GIN learns its ``epsilon``. (default: ``False``)
        recompute (bool, optional): keep only each layer's input for the backward pass and
            run the layer again there (activation checkpointing). (default: ``False``)

    Shapes:
        - **input:** graph ``g`` over ``N`` vertices, ``x`` ``[N, F]``
        - **output:** logits ``[N, C]``
    """

    def __init__(self, model: str, in_channels: int, hidden_channels: int, out_channels: int,
                 num_layers: int = 2, dropout: float = 0.5, aggregator: str = "gcn",
                 residual: bool = False, precompute_first: bool = False,
                 heads: int = 8, train_eps: bool = False, recompute: bool = False):
        super().__init__()
        if model not in ("gcn", "sage", "gin", "gat"):
            raise ValueError(f"model must be 'gcn', 'sage', 'gin' or 'gat', got {model!r}")
        if num_layers < 1:
            raise ValueError(f"num_layers must be >= 1, got {num_layers}")
        if not 0.0 <= dropout < 1.0:
            raise ValueError(f"dropout must be in [0, 1), got {dropout}")
        if model == "gat" and num_layers > 1 and hidden_channels % heads:
            raise ValueError(f"GAT's hidden width {hidden_channels} must be a multiple of "
                             f"its {heads} heads")
        dims = layer_widths(in_channels, hidden_channels, out_channels, num_layers)
        last = num_layers - 1

        def conv(layer: int, a: int, b: int) -> nn.Module:
            if model == "gcn":
                return GCNConv(a, b)
            if model == "sage":
                return SAGEConv(a, b, aggregator)
            if model == "gin":
                return GINConv(MLP(a, hidden_channels, b), train_eps=train_eps)
            if layer == last:
                return GATConv(a, b, 1, concat=False, dropout=dropout)
            return GATConv(a, b // heads, heads, dropout=dropout)

        self.convs = nn.ModuleList(conv(i, a, b) for i, (a, b) in enumerate(zip(dims[:-1],
                                                                                dims[1:])))
        self.dropouts = nn.ModuleList(KeyedDropout(dropout) for _ in range(num_layers))
        self.model, self.residual, self.recompute = model, residual, recompute
        first_linear = model == "gcn" or (model == "sage" and aggregator in LINEAR_AGGREGATORS)
        if precompute_first and not first_linear:
            raise ValueError("precompute_first needs GCN or GraphSAGE with a linear "
                             f"aggregator ({', '.join(LINEAR_AGGREGATORS)})")
        self.precompute_first = precompute_first
        self._first: tuple | None = None  # (graph, x, aggregate of x) when precomputed
        assign_keys(self)

    def forward(self, g: Neighbourhood, x: torch.Tensor) -> torch.Tensor:
        if not (self.residual or self.recompute or self.model == "gat"):
            return self.fused_forward(g, x)
        h = x
        for layer, (conv, drop) in enumerate(zip(self.convs, self.dropouts)):
            last = layer == len(self.convs) - 1
            if layer == 0 and self.precompute_first:
                out = conv(g, h, aggregated=self.first_aggregate(g, x))
                out = out if last else relu(out)
            else:
                def block(h, conv=conv, drop=drop, last=last):
                    out = conv(g, drop(g, h))
                    if last:
                        return out
                    return F.elu(out) if self.model == "gat" else relu(out)

                out = run_layer(block, self.recompute, h)
            if last:
                return out
            h = out + h if self.residual and out.shape == h.shape else out

    def fused_forward(self, g: Neighbourhood, x: torch.Tensor) -> torch.Tensor:
        """:meth:`forward` with each hidden layer's bias, ReLU and next dropout in one pass.

        It serves GCN, GraphSAGE and GIN without residual connections or recomputation:
        the same maths, the bias, the ReLU and the next layer's dropout applied in one pass
        over a layer's output (:meth:`~distgnn.nn.keyed_dropout.KeyedDropout.after_relu`),
        and, before a last layer that projects first (:meth:`projects_last`), its
        projection in that pass too.
        """
        h, first = x, {}
        if self.precompute_first:
            first = {"aggregated": self.first_aggregate(g, x)}
        elif self.model == "gin":
            h = self.dropouts[0](g, x)
        else:
            # the first layer drops its input itself: the dropped copy is freed once
            # aggregated instead of being held here through the layer's product
            first = {"dropout": self.dropouts[0]}
        last = len(self.convs) - 1
        for layer, conv in enumerate(self.convs):
            known = first if layer == 0 else {}
            if layer == last:
                return conv(g, h, **known)
            # (in training: an evaluation's forward gives the last layer its input, which
            # a hook reading the embeddings takes)
            if layer + 1 == last and torch.is_grad_enabled() and self.projects_last():
                # the last layer's projection made in the same pass as this epilogue
                after = functools.partial(self.dropouts[last].after_relu_project, g,
                                          weight=self.convs[last].weight, overwrite=True)
                projected = conv(g, h, epilogue=after, **known)
                h = None  # this layer's input is not held through the last layer
                return self.convs[last](g, None, projected=projected)
            # what the epilogue receives is held by nothing else: the product's output
            # inside a layer, or in training a GIN layer's output (in evaluation a hook
            # reading embeddings may hold that)
            after = functools.partial(self.dropouts[layer + 1].after_relu, g,
                                      overwrite=self.model != "gin" or torch.is_grad_enabled())
            h = after(conv(g, h)) if self.model == "gin" else conv(g, h, epilogue=after,
                                                                    **known)

    def projects_last(self) -> bool:
        """Whether the epilogue before the last layer makes its projection too.

        So it does where the last layer (of two or more) projects first and has no other
        term (GCN, GraphSAGE-gcn with ``C`` below the hidden width):
        :meth:`~distgnn.nn.keyed_dropout.KeyedDropout.after_relu_project`."""
        last = self.convs[-1]
        return (len(self.convs) > 1 and self.model in ("gcn", "sage") and last.project_first
                and getattr(last, "lin_root", None) is None)

    @torch.no_grad()
    def first_aggregate(self, g: Neighbourhood, x: torch.Tensor) -> torch.Tensor:
        """The first layer's aggregation of ``x``, computed on first use (an exact exchange
        on a partition, whatever the algorithm: it is done once)."""
        if self._first is None or self._first[0] is not g.graph or self._first[1] is not x:
            exact = copy.copy(g)  # evaluation's view: cd-0, whatever the run's algorithm
            exact.training, exact.key = False, self.convs[0].key
            self._first = (g.graph, x, self.convs[0].aggregate(exact, x))
        return self._first[2]


class GCNII(nn.Module):
    r"""GCNII: a deep residual GCN of ``num_layers`` layers between two projections.

    From Chen et al. (ICML 2020): ``num_layers`` :class:`~distgnn.nn.gcn2_conv.GCN2Conv`
    layers between an input and an output projection, as PyG's ``examples/gcn2_cora.py``.

    .. math::
        \mathbf{H}^{(0)} = \operatorname{ReLU}(\mathbf{W}_{in}\,
            \operatorname{dropout}(\mathbf{X})),\qquad
        \mathbf{H}^{(\ell)} = \operatorname{ReLU}\big(\operatorname{GCN2Conv}_\ell(
            \operatorname{dropout}(\mathbf{H}^{(\ell-1)}), \mathbf{H}^{(0)})\big),\qquad
        \mathbf{Z} = \mathbf{W}_{out}\, \operatorname{dropout}(\mathbf{H}^{(L)})

    Chosen over pre-activation residual blocks (DeepGCN) because its initial residual and
    identity mapping keep a 64-layer model from over-smoothing with no normalisation layer,
    which a distributed run would have to synchronise every layer.  With ``recompute``
    (activation checkpointing) a layer keeps only its input for the backward pass and runs
    again there, so each extra layer adds one ``[N, hidden]`` tensor to the peak.

    Args:
        in_channels (int): ``F``.
        hidden_channels (int): width of every ``H^(l)``.
        out_channels (int): ``C``.
        num_layers (int): ``L``.
        dropout (float, optional): (default: ``0.6``)
        alpha (float, optional): initial-residual weight. (default: ``0.1``)
        theta (float, optional): identity-mapping strength. (default: ``0.5``)
        recompute (bool, optional): activation checkpointing per layer. (default: ``False``)

    Shapes:
        - **input:** graph ``g`` over ``N`` vertices, ``x`` ``[N, F]``
        - **output:** logits ``[N, C]``
    """

    def __init__(self, in_channels: int, hidden_channels: int, out_channels: int,
                 num_layers: int, dropout: float = 0.6, alpha: float = 0.1, theta: float = 0.5,
                 recompute: bool = False):
        super().__init__()
        if num_layers < 1:
            raise ValueError(f"num_layers must be >= 1, got {num_layers}")
        if not 0.0 <= dropout < 1.0:
            raise ValueError(f"dropout must be in [0, 1), got {dropout}")
        self.lin_in = nn.Linear(in_channels, hidden_channels)
        self.convs = nn.ModuleList(GCN2Conv(hidden_channels, alpha, theta, layer + 1)
                                   for layer in range(num_layers))
        self.lin_out = nn.Linear(hidden_channels, out_channels)
        for lin in (self.lin_in, self.lin_out):
            nn.init.xavier_uniform_(lin.weight)
            nn.init.zeros_(lin.bias)
        # before the input projection, before each layer, before the output projection
        self.dropouts = nn.ModuleList(KeyedDropout(dropout) for _ in range(num_layers + 2))
        self.recompute = recompute
        assign_keys(self)

    def forward(self, g: Neighbourhood, x: torch.Tensor) -> torch.Tensor:
        x_0 = relu(self.lin_in(self.dropouts[0](g, x)))
        h = x_0
        for conv, drop in zip(self.convs, self.dropouts[1:]):
            def block(h, x_0, conv=conv, drop=drop):
                return relu(conv(g, drop(g, h), x_0))

            h = run_layer(block, self.recompute, h, x_0)
        return self.lin_out(self.dropouts[-1](g, h))


