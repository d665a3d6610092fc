"""The PyTorch Geometric side of ``distgnn-bench epoch``: the same models, PyG's fastest path.

Same mathematics as :class:`distgnn.nn.models.GNN` and :class:`distgnn.nn.models.GCNII`, layer
for layer (dropout before each layer, ReLU between them, ELU for GAT, logits out):

- GraphSAGE-gcn, ``h'_v = W (h_v + sum_{u in N(v)} h_u) / (d_v + 1) + b``, is PyG's
  ``SAGEConv(aggr="mean", root_weight=False)`` on ``A + I`` (given an ``edge_index``, as
  :func:`distgnn.pyg.distribute` hands it, the model adds the self-loops itself);
- GraphSAGE with the mean aggregator (``sage-mean``), ``h'_v = W_r h_v + W_n mean_{u in
  N(v)} h_u + b``, is ``SAGEConv(aggr="mean")`` on ``A``;
- GCN is ``GCNConv(cached=True)`` on ``A`` (it adds the self-loops and the symmetric
  normalisation itself, once);
- GIN, ``MLP((1 + eps) h_v + sum_{u in N(v)} h_u)``, is ``GINConv(Sequential(Linear,
  ReLU, Linear), eps=0)`` on ``A`` (sum aggregation; our :class:`~distgnn.nn.gin_conv.MLP` is the
  same ``Sequential``);
- GAT is ``GATConv(heads=H)`` on the hidden layers (heads concatenated) and
  ``GATConv(heads=1, concat=False)`` on the last, attention dropout the model's, on the
  ``edge_index`` of ``A`` (it replaces any stored self-loop by one of its own every forward
  pass, which ours does too);
- GCNII is ``GCN2Conv(shared_weights=True, normalize=False)`` layers between an input and
  an output ``Linear``, as PyG's ``examples/gcn2_cora.py``, on ``D^-1/2 (A + I) D^-1/2``
  normalised once by PyG's ``gcn_norm`` (the example's preprocessing; ``normalize=True``
  would cache one normalised copy per layer).

The sparse adjacency is a ``torch.sparse`` CSR ``adj_t`` (rows = destinations), which PyG
sends straight to ``torch.sparse.mm`` with the reduction: its fastest CPU path without the
compiled ``torch_sparse`` extension.  GAT has no fused sparse path (it computes per-edge
attention), so it gets the ``[2, E]`` ``edge_index`` (sources, then destinations) that a
``torch.sparse`` input would be converted to on every call.
"""
from __future__ import annotations

import importlib.util
import warnings
from typing import Callable

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from distgnn.data.graph import CSRGraph, csr_rows
from distgnn.nn.backends import csr_tensor
from distgnn.nn.models import GCNII, GNN
from distgnn.nn.widths import layer_widths

__all__ = ["PyGNet", "available", "copy_weights", "distributed_factory", "model_name"]


def available() -> bool:
    return importlib.util.find_spec("torch_geometric") is not None


def model_name(cfg) -> str:
    """The benchmark's name of ``cfg``'s model (a :class:`~distgnn.run.config.TrainConfig`):
    its ``model``, or ``sage-mean`` for GraphSAGE with the mean aggregator."""
    if cfg.model == "sage" and cfg.aggregator == "mean":
        return "sage-mean"
    if cfg.model == "sage" and cfg.aggregator != "gcn":
        raise ValueError(f"no PyG model for GraphSAGE's {cfg.aggregator} aggregator here")
    return cfg.model


class PyGNet(nn.Module):
    """PyG's layers in the structure of this project's model.

    For ``"gcnii"`` that of :class:`distgnn.nn.models.GCNII` (``lin_in``, ``num_layers``
    ``GCN2Conv``, ``lin_out``), else of :class:`distgnn.nn.models.GNN` (``num_layers``
    convolutions).  Dropout is ``F.dropout``, as in PyG's examples; ``alpha`` and ``theta`` are
    GCNII's, ``heads`` GAT's."""

    def __init__(self, model: str, in_channels: int, hidden_channels: int, out_channels: int,
                 num_layers: int = 2, dropout: float = 0.0, heads: int = 8, alpha: float = 0.1,
                 theta: float = 0.5):
        super().__init__()
        from torch_geometric.nn import GATConv, GCN2Conv, GCNConv, GINConv, SAGEConv

        self.model, self.dropout = model, dropout
        if model == "gcnii":
            self.lin_in = nn.Linear(in_channels, hidden_channels)
            self.convs = nn.ModuleList(
                GCN2Conv(hidden_channels, alpha, theta, layer + 1, shared_weights=True,
                         normalize=False) for layer in range(num_layers))
            self.lin_out = nn.Linear(hidden_channels, out_channels)
            return
        dims = layer_widths(in_channels, hidden_channels, out_channels, num_layers)
        last = num_layers - 1

        def conv(layer: int, a: int, b: int) -> nn.Module:
            if model == "gcn":
                return GCNConv(a, b, cached=True)
            if model == "sage":
                return SAGEConv(a, b, aggr="mean", root_weight=False)
            if model == "sage-mean":
                return SAGEConv(a, b, aggr="mean")
            if model == "gin":
                return GINConv(nn.Sequential(nn.Linear(a, hidden_channels), nn.ReLU(),
                                             nn.Linear(hidden_channels, b)), eps=0.0)
            if model == "gat" and layer == last:
                return GATConv(a, b, heads=1, concat=False, dropout=dropout)
            if model == "gat":
                return GATConv(a, b // heads, heads=heads, dropout=dropout)
            raise ValueError(f"no PyG model {model!r}")

        self.convs = nn.ModuleList(conv(i, a, b)
                                   for i, (a, b) in enumerate(zip(dims[:-1], dims[1:])))

    def forward(self, x: torch.Tensor, adj_t: torch.Tensor) -> torch.Tensor:
        """Logits; ``adj_t`` is :func:`adjacency`'s for this model."""
        if self.model == "gcnii":
            x = x_0 = F.relu(self.lin_in(F.dropout(x, self.dropout, self.training)))
            for conv in self.convs:
                x = F.relu(conv(F.dropout(x, self.dropout, self.training), x_0, adj_t))
            return self.lin_out(F.dropout(x, self.dropout, self.training))
        if self.model == "sage" and adj_t.layout == torch.strided:  # an edge_index: A + I
            from torch_geometric.utils import add_self_loops

            adj_t = add_self_loops(adj_t, num_nodes=x.shape[0])[0]
        act = F.elu if self.model == "gat" else F.relu
        for i, conv in enumerate(self.convs):
            x = conv(F.dropout(x, self.dropout, self.training), adj_t)
            if i < len(self.convs) - 1:
                x = act(x)
        return x


def adjacency(graph: CSRGraph, model: str, device: torch.device | str = "cpu",
              dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """What :class:`PyGNet`'s layers take for ``model``, on ``device``: the CSR ``adj_t`` of
    ``A + I`` (SAGE-gcn), of ``A`` (GCN, GIN), of ``D^-1/2 (A + I) D^-1/2`` (GCNII), with
    values of ``dtype``, or the ``[2, E]`` ``edge_index`` of ``A`` (GAT)."""
    n, indptr, indices = graph.num_nodes, graph.indptr, graph.indices.astype(np.int64)
    if model == "gat":
        return torch.from_numpy(np.stack([indices, csr_rows(indptr)])).to(device)
    if model == "sage":  # one more entry per row, the vertex itself (kept beside a stored loop)
        rows = np.concatenate([csr_rows(indptr), np.arange(n)])
        cols = np.concatenate([indices, np.arange(n)])
        indices = cols[np.lexsort((cols, rows))]
        indptr = indptr + np.arange(n + 1)
    adj_t = csr_tensor(indptr, indices, torch.ones(len(indices), device=device, dtype=dtype),
                       n, device, torch.int64)
    if model == "gcnii":
        from torch_geometric.nn.conv.gcn_conv import gcn_norm

        with warnings.catch_warnings():  # "sparse invariant checks are disabled": as wanted
            warnings.simplefilter("ignore", UserWarning)
            adj_t, _ = gcn_norm(adj_t, num_nodes=n)  # adds I itself (beside any stored loop)
    return adj_t


def _pairs(ours: nn.Module, theirs: PyGNet) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """``(PyG tensor, our tensor)`` for every parameter (and GIN's ``eps``) of ``theirs``."""
    if isinstance(ours, GCNII):
        pairs = [(t, m) for a, b in ((theirs.lin_in, ours.lin_in), (theirs.lin_out, ours.lin_out))
                 for t, m in ((a.weight, b.weight), (a.bias, b.bias))]
        return pairs + [(conv.weight1, mine.weight1)
                        for mine, conv in zip(ours.convs, theirs.convs)]
    pairs = []
    for mine, conv in zip(ours.convs, theirs.convs):
        if theirs.model == "gin":
            pairs += [*zip(conv.nn.parameters(), mine.nn.parameters()), (conv.eps, mine.eps)]
        elif theirs.model == "gat":
            pairs += [(conv.lin.weight, mine.lin.weight), (conv.att_src, mine.att_src),
                      (conv.att_dst, mine.att_dst), (conv.bias, mine.bias)]
        elif theirs.model == "gcn":
            pairs += [(conv.lin.weight, mine.lin.weight), (conv.bias, mine.bias)]
        elif theirs.model == "sage-mean":
            pairs += [(conv.lin_l.weight, mine.lin_neigh.weight), (conv.lin_l.bias, mine.bias),
                      (conv.lin_r.weight, mine.lin_root.weight)]
        else:  # SAGEConv's bias is its lin_l's
            pairs += [(conv.lin_l.weight, mine.lin_neigh.weight), (conv.lin_l.bias, mine.bias)]
    return pairs


def copy_weights(ours: GNN | GCNII, theirs: PyGNet) -> None:
    """Give the PyG model the weights of ours (same sizes); every PyG parameter gets one."""
    pairs = _pairs(ours, theirs)
    missed = {id(p) for p in theirs.parameters()} - {id(t) for t, _ in pairs}
    if (missed or len(ours.convs) != len(theirs.convs)
            or any(t.shape != m.shape for t, m in pairs)):
        raise RuntimeError(f"PyG {theirs.model}: not the layers of ours")
    with torch.no_grad():
        for target, source in pairs:
            target.copy_(source)


def distributed_factory(cfg) -> Callable[[int, int], nn.Module]:
    """``make_model(in_channels, num_classes)`` of ``cfg``'s model in PyG, distributed.

    ``cfg`` is a :class:`~distgnn.run.config.TrainConfig`; the model starts from this
    project's initial weights for the seed the trainer sets and is made to train on
    partitions by :func:`distgnn.pyg.distribute` (GCNII is refused: this benchmark's GCNII
    feeds ``GCN2Conv`` a normalised sparse adjacency, not an ``edge_index``)."""
    from distgnn.nn.config import build_model
    from distgnn.pyg import distribute

    if cfg.model == "gcnii":
        raise NotImplementedError("GCN2Conv is not among the layers distgnn.pyg distributes")

    def make_model(f: int, c: int) -> nn.Module:
        ours = build_model(cfg.network, f, c, cfg.recompute)
        net = PyGNet(model_name(cfg), f, cfg.hidden, c, cfg.layers, cfg.dropout,
                     heads=cfg.heads)
        copy_weights(ours, net)
        return distribute(net)

    return make_model
