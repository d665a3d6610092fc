"""PyTorch Geometric graphs in: a ``torch_geometric.data.Data`` as a dataset or partitions.

PyG's ``edge_index`` ``[2, E]`` lists each edge ``source -> target`` (row 0 the sources,
row 1 the targets, as its message passing reads them); distgnn's CSR rows are destinations,
so row ``v`` of the graph lists the ``edge_index[0, e]`` of the edges with
``edge_index[1, e] == v``, in the order of ``edge_index``.  Nothing here imports
``torch_geometric``: any object with the attributes below converts.
"""
from __future__ import annotations

import contextlib
import operator

import numpy as np

from .generators import random_split, random_split_note
from .graph import UNLABELLED, CSRGraph, GraphError, NodeDataset, check_count
from .side_files import MASK_KEYS, check_classes, select_split


def from_pyg(data, name: str = "graph", split: int = 0) -> NodeDataset:
    """The NodeDataset of a PyG ``Data`` (duck-typed).

    ``data.edge_index`` int ``[2, E]`` (source, target); ``data.num_nodes`` ``N``;
    ``data.x`` ``[N, F]`` (absent: the single feature 1.0); ``data.y`` int ``[N]`` (``-1``:
    unlabelled; absent: label 0, one class, empty masks); ``data.edge_weight`` ``[E]``
    (optional); ``train_mask``/``val_mask``/``test_mask`` bool ``[N]``, or ``[N, S]`` for
    ``S`` splits of which ``split`` picks column ``split``.  Without masks, a seeded (0)
    60/20/20 split of the labelled vertices.  Tensors may live on any device.
    """
    if hasattr(data, "node_types") and hasattr(data, "edge_types"):
        raise GraphError(f"a {type(data).__name__} has several vertex and edge types, and "
                         "distgnn trains graphs of one: convert it first, "
                         "from_pyg(data.to_homogeneous())", name)
    n = _num_nodes(data, name)
    missing = [key for key, value in (("edge_index", getattr(data, "edge_index", None)),
                                      ("num_nodes", n)) if value is None]
    if missing:
        raise GraphError(f"a {type(data).__name__} is not a graph: from_pyg takes a PyTorch "
                         f"Geometric Data (or an object like one), which has edge_index and "
                         f"num_nodes; this one lacks {' and '.join(missing)}", name)
    if not isinstance(n, (bool, np.bool_)):
        with contextlib.suppress(TypeError):  # a 0-d integer tensor; the rest: refused below
            n = operator.index(n)
    n = check_count(n, "num_nodes", name)
    edge_index = _array(data.edge_index, "edge_index", name)
    if edge_index.ndim != 2 or edge_index.shape[0] != 2:
        raise GraphError(f"edge_index has shape {edge_index.shape}, expected [2, E]", name)
    weight = _attribute(data, "edge_weight", name)
    graph = CSRGraph.from_edges(edge_index[0], edge_index[1], n, weight, source=name)
    x = _attribute(data, "x", name)
    x = np.ones((n, 1), np.float32) if x is None else x
    y = _attribute(data, "y", name)
    if y is not None:
        check_classes(y, name)
    if y is None:
        empty = np.zeros(n, bool)
        return NodeDataset(graph, x, np.zeros(n, np.int64), empty, empty.copy(), empty.copy(),
                           num_classes=1, name=name,
                           split_note="split: none (no labels: every vertex has label 0)")
    masks = [_attribute(data, key, name) for key in MASK_KEYS]
    if all(m is None for m in masks):
        labelled = y != UNLABELLED
        masks = random_split(n, np.random.default_rng(0), eligible=labelled)
        note = random_split_note(int(np.count_nonzero(labelled)), "labelled vertices", 0)
    elif any(m is None for m in masks):
        raise GraphError(f"has {', '.join(k for k, m in zip(MASK_KEYS, masks) if m is not None)}"
                         f" but not all of {', '.join(MASK_KEYS)}", name)
    else:  # [N, S] masks are select_split's [S, N]
        masks, note = select_split({key + "s" if m.ndim == 2 else key: m.T
                                    for key, m in zip(MASK_KEYS, masks)}, split, name)
    return NodeDataset(graph, x, y, *masks, name=name, split_note=note)


def _num_nodes(data, name: str):
    """``data.num_nodes`` as stored: PyG's ``Data.num_nodes`` reads ``None`` for a stored
    value that is not a count (a dict of counts per vertex type), which is then refused
    as what it is rather than as missing."""
    n = getattr(data, "num_nodes", None)
    if n is None and hasattr(data, "keys") and callable(data.keys) and \
            "num_nodes" in data.keys():
        n = data["num_nodes"]
    if isinstance(n, dict):
        raise GraphError(f"num_nodes is a dict ({n!r}): one count per vertex type; from_pyg "
                         "takes a graph of one type, whose num_nodes is an integer "
                         "(a HeteroData: from_pyg(data.to_homogeneous()))", name)
    return n


def _attribute(data, key: str, name: str) -> np.ndarray | None:
    """``data.key`` as a numpy array, or None when absent."""
    value = getattr(data, key, None)
    return None if value is None else _array(value, key, name)


def _array(value, key: str, name: str) -> np.ndarray:
    """A torch tensor (any device; its own copy) or array-like as a numpy array; a tensor
    without values (on the meta device) or of a sparse layout is refused, naming ``key``."""
    if hasattr(value, "detach"):
        if value.device.type == "meta":
            raise GraphError(f"{key} is on the meta device, which holds a shape and no values: "
                             "from_pyg needs the data itself (on the CPU or a GPU)", name)
        if str(value.layout) != "torch.strided":
            raise GraphError(f"{key} is a sparse tensor ({value.layout}): give a dense one, "
                             f"{key}.to_dense()", name)
        return value.detach().cpu().numpy()
    return np.asarray(value)
