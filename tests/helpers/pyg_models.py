"""PyTorch Geometric models as their users write them, one per layer that
:func:`distgnn.pyg.distribute` takes, and a graph with edge weights to train them on.

Every model is ``Net(layer, F, C)``: dropout (``F.dropout``) before each of two layers, ReLU
between them, ``forward(x, edge_index, edge_weight=None)``; a layer that reads edges gets the
weights (``edge_weight`` or, as ``edge_attr``, ``[E, 1]``).  :data:`LAYERS` are the most used
layers and a user's own; :data:`MORE_LAYERS` PyG's others that
``distribute`` takes; :data:`REFUSED` some it refuses.  ``python -m tests.test_pyg_models``
trains :data:`LAYERS` on partitions and prints how far each run is from one process;
``--survey`` does it for the others."""
from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn
from torch_geometric import nn as gnn
from torch_geometric.nn import MessagePassing
from torch_geometric.utils import add_self_loops, degree

import distgnn


class EdgeGate(MessagePassing):
    r"""A user's layer reading both ends and the edge:
    :math:`\mathbf{x}'_i = \bigoplus_j \sigma(\mathbf{a}^\top \mathbf{x}_i + b\, e_{j,i})
    \mathbf{W}_1 \mathbf{x}_j + \mathbf{W}_2 \mathbf{x}_i`, with :math:`\bigoplus` ``aggr``."""

    def __init__(self, a: int, b: int, aggr: str):
        super().__init__(aggr=aggr)
        self.lin_j, self.lin_root = nn.Linear(a, b), nn.Linear(a, b, bias=False)
        self.gate_x, self.gate_e = nn.Linear(a, 1), nn.Linear(1, 1)

    def forward(self, x, edge_index, edge_attr):
        return self.propagate(edge_index, x=x, edge_attr=edge_attr) + self.lin_root(x)

    def message(self, x_i, x_j, edge_attr):
        gate = torch.sigmoid(self.gate_x(x_i) + self.gate_e(edge_attr))
        return gate * self.lin_j(x_j)


class TutorialGCN(MessagePassing):
    """The GCN layer of PyG's tutorial "Creating message passing networks": self-loops and
    ``degree`` in ``forward``, the normalisation in ``message``."""

    def __init__(self, a: int, b: int):
        super().__init__(aggr="add")
        self.lin = nn.Linear(a, b, bias=False)
        self.bias = nn.Parameter(torch.zeros(b))

    def forward(self, x, edge_index):
        edge_index, _ = add_self_loops(edge_index, num_nodes=x.size(0))
        x = self.lin(x)
        row, col = edge_index
        deg = degree(col, x.size(0), dtype=x.dtype)
        deg_inv_sqrt = deg.pow(-0.5)
        deg_inv_sqrt[deg_inv_sqrt == float("inf")] = 0
        norm = deg_inv_sqrt[row] * deg_inv_sqrt[col]
        return self.propagate(edge_index, x=x, norm=norm) + self.bias

    def message(self, x_j, norm):
        return norm.view(-1, 1) * x_j


def mlp(a: int, b: int) -> nn.Module:
    return nn.Sequential(nn.Linear(a, b), nn.ReLU(), nn.Linear(b, b))


# layer name -> (make(a, b), what it takes of the edges: None, "edge_weight" or "edge_attr")
LAYERS = {
    "GCNConv": (lambda a, b: gnn.GCNConv(a, b), "edge_weight"),
    "SAGEConv-mean": (lambda a, b: gnn.SAGEConv(a, b), None),
    "SAGEConv-max": (lambda a, b: gnn.SAGEConv(a, b, aggr="max"), None),
    "SAGEConv-sum": (lambda a, b: gnn.SAGEConv(a, b, aggr="sum"), None),
    "GINConv": (lambda a, b: gnn.GINConv(mlp(a, b), train_eps=True), None),
    "GINEConv": (lambda a, b: gnn.GINEConv(mlp(a, b), edge_dim=1), "edge_attr"),
    "GATConv": (lambda a, b: gnn.GATConv(a, b, heads=2, concat=False, dropout=0.3), None),
    "GATv2Conv": (lambda a, b: gnn.GATv2Conv(a, b, heads=2, dropout=0.3, concat=False), None),
    "GraphConv": (lambda a, b: gnn.GraphConv(a, b), "edge_weight"),
    "TransformerConv": (lambda a, b: gnn.TransformerConv(a, b, heads=2, concat=False,
                                                         dropout=0.3), None),
    "ResGatedGraphConv": (lambda a, b: gnn.ResGatedGraphConv(a, b), None),
    "SGConv": (lambda a, b: gnn.SGConv(a, b, K=2), "edge_weight"),
    "TAGConv": (lambda a, b: gnn.TAGConv(a, b, K=2), "edge_weight"),
    "own-sum": (lambda a, b: EdgeGate(a, b, "sum"), "edge_attr"),
    "own-mean": (lambda a, b: EdgeGate(a, b, "mean"), "edge_attr"),
    "own-max": (lambda a, b: EdgeGate(a, b, "max"), "edge_attr"),
    "tutorial-GCN": (lambda a, b: TutorialGCN(a, b), None),
}


class Then(nn.Module):
    """``second(first(x), edge_index, ...)``: a projection, then a propagation (APPNP,
    LGConv), or ``second`` given the projection twice (``x`` and ``x_0``: GCN2Conv, FAConv)."""

    def __init__(self, first: nn.Module, second: nn.Module, initial: bool = False):
        super().__init__()
        self.first, self.second, self.initial = first, second, initial

    def forward(self, x, edge_index, **edges):
        h = self.first(x)
        if self.initial:
            return self.second(h, h, edge_index, **edges)
        return self.second(h, edge_index, **edges)


class Read(nn.Module):
    """``lin(conv(x, edge_index, ...))``: a layer whose output is wider than wanted."""

    def __init__(self, conv: nn.Module, lin: nn.Module):
        super().__init__()
        self.conv, self.lin = conv, lin

    def forward(self, x, edge_index, **edges):
        return self.lin(self.conv(x, edge_index, **edges))


# PyG's other layers and models that distgnn.pyg takes (tested in float64)
MORE_LAYERS = {
    "APPNP": (lambda a, b: Then(nn.Linear(a, b), gnn.APPNP(K=2, alpha=0.1)), None),
    "LGConv": (lambda a, b: Then(nn.Linear(a, b), gnn.LGConv()), None),
    "GCN2Conv": (lambda a, b: Then(nn.Linear(a, b), gnn.GCN2Conv(b, alpha=0.1, theta=0.5,
                                                                  layer=1), True), None),
    "FAConv": (lambda a, b: Then(nn.Linear(a, b), gnn.FAConv(b), True), None),
    "SSGConv": (lambda a, b: gnn.SSGConv(a, b, alpha=0.1, K=2), None),
    "MixHopConv": (lambda a, b: Read(gnn.MixHopConv(a, b), nn.Linear(3 * b, b)), None),
    "ClusterGCNConv": (lambda a, b: gnn.ClusterGCNConv(a, b), None),
    "EdgeConv": (lambda a, b: gnn.EdgeConv(mlp(2 * a, b), aggr="max"), None),
    "LEConv": (lambda a, b: gnn.LEConv(a, b), None),
    "GeneralConv": (lambda a, b: gnn.GeneralConv(a, b), None),
    "GeneralConv-attention": (lambda a, b: gnn.GeneralConv(a, b, attention=True), None),
    "MFConv": (lambda a, b: gnn.MFConv(a, b), None),
    "FiLMConv": (lambda a, b: gnn.FiLMConv(a, b), None),
    "AGNNConv": (lambda a, b: Then(nn.Linear(a, b), gnn.AGNNConv()), None),
    "NNConv": (lambda a, b: gnn.NNConv(a, b, nn.Linear(1, a * b), aggr="mean"), "edge_attr"),
    "CGConv": (lambda a, b: Then(nn.Linear(a, b), gnn.CGConv(b, dim=1)), "edge_attr"),
    "GatedGraphConv": (lambda a, b: Then(nn.Linear(a, b), gnn.GatedGraphConv(b, 2)), None),
    "PDNConv": (lambda a, b: gnn.PDNConv(a, b, edge_dim=1, hidden_channels=8), "edge_attr"),
    "SimpleConv": (lambda a, b: Then(nn.Linear(a, b), gnn.SimpleConv(aggr="mean")), None),
    "AntiSymmetricConv": (lambda a, b: Then(nn.Linear(a, b), gnn.AntiSymmetricConv(b)), None),
    "DirGNNConv": (lambda a, b: gnn.DirGNNConv(gnn.GCNConv(a, b)), None),
    "nn.Sequential": (lambda a, b: gnn.Sequential("x, edge_index", [
        (gnn.GCNConv(a, b), "x, edge_index -> x"), nn.ReLU()]), None),
    "models.GCN": (lambda a, b: gnn.models.GCN(a, 16, 2, b, dropout=0.5), None),
    "models.GraphSAGE": (lambda a, b: gnn.models.GraphSAGE(a, 16, 2, b, dropout=0.5), None),
    "models.GIN": (lambda a, b: gnn.models.GIN(a, 16, 2, b, dropout=0.5), None),
    "models.GAT": (lambda a, b: gnn.models.GAT(a, 16, 2, b, dropout=0.5, heads=2), None),
}

# PyG layers and models that distgnn.pyg refuses, and a fragment of the line it refuses with
REFUSED = {
    "ChebConv": (lambda a, b: gnn.ChebConv(a, b, K=2), "PyG's ChebConv is not among"),
    "ARMAConv": (lambda a, b: gnn.ARMAConv(a, b), "PyG's ARMAConv is not among"),
    "GENConv": (lambda a, b: gnn.GENConv(a, b), "aggregation SoftmaxAggregation"),
    "PNAConv": (lambda a, b: gnn.PNAConv(a, b, ["mean", "max"], ["identity"],
                                         torch.tensor([0, 10, 10])),
                "aggregation DegreeScalerAggregation"),
    "EGConv": (lambda a, b: Then(nn.Linear(a, 16), gnn.EGConv(16, 16)),
               "overrides aggregate()"),
    "GPSConv": (lambda a, b: Then(nn.Linear(a, b), gnn.GPSConv(b, gnn.GINConv(mlp(b, b)),
                                                               norm=None)),
                "PyG's GPSConv is not among the modules"),
    "models.GAT-batch-norm": (lambda a, b: gnn.models.GAT(a, 16, 2, b, norm="batch_norm"),
                              "(BatchNorm): its statistics run over all vertices"),
}


class Net(nn.Module):
    """Two ``layer`` layers, dropout ``p`` before each, ReLU between."""

    def __init__(self, layer: str, in_channels: int, num_classes: int, hidden: int = 16,
                 p: float = 0.5):
        super().__init__()
        make, self.edges = {**LAYERS, **MORE_LAYERS}.get(layer) or (REFUSED[layer][0], None)
        self.conv1, self.conv2 = make(in_channels, hidden), make(hidden, num_classes)
        self.p = p

    def forward(self, x, edge_index, edge_weight=None):
        extra = {}
        if self.edges == "edge_weight":
            extra = {"edge_weight": edge_weight}
        elif self.edges == "edge_attr":
            extra = {"edge_attr": edge_weight.view(-1, 1)}
        x = F.dropout(x, p=self.p, training=self.training)
        x = self.conv1(x, edge_index, **extra).relu()
        x = F.dropout(x, p=self.p, training=self.training)
        return self.conv2(x, edge_index, **extra)


def weighted_graph(n: int = 200, e: int = 1600, features: int = 12, classes: int = 4,
                   seed: int = 0) -> distgnn.NodeDataset:
    """A random graph without self-loops whose edges mostly join vertices of one class,
    edge weights in [0.5, 1.5], features correlated with the labels, half the vertices for
    training."""
    from torch_geometric.data import Data

    rng = np.random.default_rng(seed)
    y = rng.integers(0, classes, n)
    # homophilous: 4 edges in 5 join two vertices of one class
    src = rng.integers(0, n, e)
    by_class = [np.flatnonzero(y == c) for c in range(classes)]
    same = np.array([rng.choice(by_class[y[s]]) for s in src])
    dst = np.where(rng.random(e) < 0.8, same, rng.integers(0, n, e))
    keep = src != dst
    x = rng.normal(size=(n, features)) + 2 * np.eye(classes, features)[y]
    order = rng.permutation(n)
    masks = {name: torch.zeros(n, dtype=torch.bool) for name in ("train", "val", "test")}
    masks["train"][order[: n // 2]] = True
    masks["val"][order[n // 2: 3 * n // 4]] = True
    masks["test"][order[3 * n // 4:]] = True
    data = Data(x=torch.tensor(x, dtype=torch.float32),
                edge_index=torch.from_numpy(np.stack([src[keep], dst[keep]])),
                edge_weight=torch.from_numpy(rng.uniform(0.5, 1.5, keep.sum())).float(),
                y=torch.from_numpy(y), train_mask=masks["train"], val_mask=masks["val"],
                test_mask=masks["test"])
    return distgnn.from_pyg(data, name="weighted")
