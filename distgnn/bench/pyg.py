"""The PyTorch Geometric side of ``distgnn-bench epoch``: the same models, PyG's fastest path.

Same mathematics as :class:`distgnn.models.GNN`:

- GraphSAGE-gcn, ``h'_v = W (h_v + sum_{u in N(v)} h_u) / (d_v + 1) + b``, is PyG's
  ``SAGEConv(aggr="mean", root_weight=False)`` on ``A + I``;
- GCN is ``GCNConv(cached=True)`` (it adds the self-loops and the symmetric normalisation
  itself, once).

The adjacency is a ``torch.sparse`` CSR ``adj_t`` (rows = destinations), which PyG sends
straight to ``torch.sparse.mm`` with the reduction: its fastest CPU path without the
compiled ``torch_sparse`` extension.
"""
from __future__ import annotations

import importlib.util

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from ..backends import csr_tensor
from ..graph import CSRGraph, csr_rows
from ..models import GNN


def available() -> bool:
    return importlib.util.find_spec("torch_geometric") is not None


class PyGNet(nn.Module):
    """PyG convolutions with dropout before each and ReLU between them, logits out (the
    structure of :class:`distgnn.models.GNN`; dropout is ``F.dropout``, as PyG's examples)."""

    def __init__(self, model: str, dims: list[int], dropout: float = 0.0):
        super().__init__()
        self.dropout = dropout
        from torch_geometric.nn import GCNConv, SAGEConv

        self.convs = nn.ModuleList(
            GCNConv(a, b, cached=True) if model == "gcn"
            else SAGEConv(a, b, aggr="mean", root_weight=False)
            for a, b in zip(dims[:-1], dims[1:]))

    def forward(self, x: torch.Tensor, adj_t: torch.Tensor) -> torch.Tensor:
        for i, conv in enumerate(self.convs):
            x = conv(F.dropout(x, self.dropout, self.training), adj_t)
            if i < len(self.convs) - 1:
                x = F.relu(x)
        return x


def adjacency(graph: CSRGraph, model: str, device: torch.device | str = "cpu") -> torch.Tensor:
    """``adj_t`` on ``device`` as PyG's layers want it: ``A`` for GCN, ``A + I`` for SAGE-gcn."""
    indptr, indices = graph.indptr, graph.indices.astype(np.int64)
    if model == "sage":  # one more entry per row, the vertex itself (kept beside a stored loop)
        n = graph.num_nodes
        rows = np.concatenate([csr_rows(indptr), np.arange(n)])
        cols = np.concatenate([indices, np.arange(n)])
        indices = cols[np.lexsort((cols, rows))]
        indptr = indptr + np.arange(n + 1)
    return csr_tensor(indptr, indices, torch.ones(len(indices), device=device),
                      graph.num_nodes, device, torch.int64)


def copy_weights(ours: GNN, theirs: PyGNet) -> None:
    """Give the PyG model the weights of ours (same layer sizes)."""
    with torch.no_grad():
        for mine, conv in zip(ours.convs, theirs.convs):
            lin = mine.lin if hasattr(mine, "lin") else mine.lin_neigh
            target = conv.lin if hasattr(conv, "lin") else conv.lin_l
            target.weight.copy_(lin.weight)
            bias = getattr(conv, "bias", None)  # GCNConv has its own; SAGEConv's is lin_l's
            (target.bias if bias is None else bias).copy_(mine.bias)
