"""Partition a graph: edge assignment, then layout (vertex sets, roots, split tables).

:func:`vertex_cut` is the one entry point the CLI, the benchmarks and the tests call.
"""
from __future__ import annotations

import numpy as np

from distgnn.data.graph import CSRGraph
from distgnn.data.partitions import PartitionError
from partition.assign import HDRF_LAMBDA, assign_edges
from partition.layout import Layout, build_layout

__all__ = ["PartitionError", "vertex_cut"]


def vertex_cut(graph: CSRGraph, num_parts: int, method: str = "libra", seed: int = 0,
               order: str | None = None, roots: str = "balanced",
               keep_pairs: bool | None = None, progress=None, weights=None,
               hdrf_lambda: float = HDRF_LAMBDA) -> Layout:
    """Vertex-cut of ``graph`` into ``num_parts`` (see :mod:`partition.assign`).

    ``order`` (default: the method's own), ``weights`` (relative capacity of each
    partition, default equal) and ``hdrf_lambda``: see
    :func:`~partition.assign.assign_edges`.  A cut that leaves a partition without
    vertices (more partitions than the graph fills) is refused: that rank would have
    nothing to train on.
    """
    if num_parts < 1:
        raise PartitionError(f"--parts must be at least 1, got {num_parts}")
    if num_parts > max(graph.num_edges, 1):
        raise PartitionError(f"--parts {num_parts} is larger than the number of edges "
                             f"({graph.num_edges}): some partitions would be empty")
    try:
        part = assign_edges(graph.indptr, graph.indices, num_parts, method, seed, order,
                            keep_pairs, progress, weights, hdrf_lambda)
        layout = build_layout(graph.indptr, graph.indices, part, num_parts, roots, seed,
                              weights)
    except ValueError as e:
        raise PartitionError(str(e)) from None
    filled = np.diff(layout.vertex_offsets) > 0
    if not filled.all():
        raise PartitionError(
            f"--parts {num_parts}: partition {np.flatnonzero(~filled)[0]} would hold no "
            f"vertices ({method} fills only {np.count_nonzero(filled)} of the {num_parts} "
            f"partitions with the {graph.num_edges:,} edges and {graph.num_nodes:,} "
            "vertices); use fewer --parts"
            + (" or less uneven --weights" if weights is not None else ""))
    return layout
