r"""Graph convolutions and dropout as ``torch.nn`` modules, for the built-in models and your own.

A model is called as ``model(g, x)`` and calls each layer as ``conv(g, h)``, as DGL's
layers are: ``g`` is the graph (a :class:`~distgnn.nn.aggregate.Neighbourhood`), ``h`` the node
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

The package, one concept per module: the layers (``gcn_conv``, ``sage_conv``, ``gin_conv``,
``gat_conv``, ``gcn2_conv``) on what they share (``graph_layer``); ``dropout``
(:class:`KeyedDropout`); ``aggregate`` (the graph ``g`` a layer aggregates through and the
SpMM autograd function) over ``backends`` (which kernels do the sums, on which device);
``models`` (the built-in ones) and ``widths`` (the widths they compute and exchange at);
``prepare`` (a model keyed and checked for a graph) and ``saved_activations``.
It imports the kernels and the data (:mod:`distgnn.data`), never the run above it.
"""
from __future__ import annotations

from .config import ModelConfig, build_model
from .gat_conv import GATConv
from .gcn2_conv import GCN2Conv
from .gcn_conv import GCNConv
from .gin_conv import MLP, GINConv
from .graph_layer import GraphLayer, relu
from .keyed_dropout import KeyedDropout
from .prepare import assign_keys, prepare
from .sage_conv import SAGEConv

__all__ = ["GCNConv", "SAGEConv", "GINConv", "GATConv", "GCN2Conv", "KeyedDropout", "MLP",
           "GraphLayer", "ModelConfig", "assign_keys", "build_model", "prepare", "relu"]
