"""Writing a cut as a partition directory: its ``meta.json`` fields and sizes from the
layout, then :func:`distgnn.data.partitions.write_partitions`."""
from __future__ import annotations

import datetime
from pathlib import Path

import numpy as np

from distgnn.data.partition_writing import FILE_OVERHEAD, write_partitions
from distgnn.data.partitions import PART_FILES
from partition.layout import Layout, partition_arrays
from partition.stats import PartCounts, counts_from_layout, summarize


def partition_bytes(counts: list[PartCounts], num_features: int, feature_bytes: int = 4,
                   weighted: bool = False) -> int:
    """Bytes :func:`write_dataset` writes for partitions of sizes ``counts``."""
    P = len(counts)
    # per vertex: global_ids, indptr, y, in_degree, root_local (8 each), root_rank (4),
    # three masks (1 each), features
    per_vertex = 5 * 8 + 4 + 3 + num_features * feature_bytes
    total = sum(c.vertices * per_vertex + 8 + c.edges * (c.index_bytes + 4 * weighted)
                + 8 * (P + 1) + 16 * c.leaf_entries for c in counts)
    return total + P * (len(PART_FILES) + weighted) * FILE_OVERHEAD


def layout_meta(layout: Layout, settings: dict, name: str, num_edges: int, num_features: int,
                num_classes: int, multigraph: bool) -> tuple[dict, list[PartCounts]]:
    """``meta.json``'s fields (without the file list) for the cut ``layout`` of a graph of
    ``num_edges`` edges, and the partitions' sizes (see :func:`write_dataset`)."""
    clones = layout.clones()
    counts = counts_from_layout(layout)
    split = int(np.count_nonzero(clones > 1))
    stats = summarize(counts, layout.num_nodes, split,
                      shares=settings.get("requested_shares"))
    meta = {"dataset": name, **settings, "vertex_order": layout.vertex_order,
            "num_parts": layout.num_parts, "num_nodes": layout.num_nodes,
            "num_edges": num_edges, "num_features": num_features,
            "num_classes": num_classes, "multigraph": multigraph, "split_vertices": split,
            **{k: stats[k] for k in ("replication_factor", "split_fraction", "edge_balance",
                                     "root_balance")},
            "created": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")}
    return meta, counts


def write_dataset(out: str | Path, data, layout: Layout, settings: dict, force: bool = False,
                  progress=None) -> dict:
    """Write the partitions of ``data`` (a NodeDataset) under ``layout`` to ``out``.

    ``settings`` (method, seed, order, roots; weights and requested_shares for a weighted
    cut, which make the edge balance relative to capacity; what
    :func:`~partition.layout.order_layout` returned) go into ``meta.json`` beside the
    sizes, the headline statistics and ``vertex_order``, the layout's local order; returns
    the meta written (without the file list).
    """
    graph = data.graph
    meta, counts = layout_meta(layout, settings, data.name, graph.num_edges,
                               data.num_features, data.num_classes,
                               graph.has_duplicate_edges())
    size = partition_bytes(counts, data.num_features, data.x.dtype.itemsize,
                           graph.edge_weight is not None)
    if data.ids is not None:
        size += data.ids.nbytes + FILE_OVERHEAD
    write_partitions(out, partition_arrays(layout, graph.indptr, graph.indices, data), meta,
                     force, progress, size, data.ids)
    return meta
