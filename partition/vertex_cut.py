"""Partition a graph: edge assignment, then layout (vertex sets, roots, split tables).

:func:`vertex_cut` is the one entry point the CLI, the benchmarks and the tests call.
"""
from __future__ import annotations

from distgnn.errors import DistGNNError
from distgnn.graph import CSRGraph

from .assign import assign_edges
from .layout import Layout, build_layout


class PartitionError(DistGNNError, ValueError):
    """Arguments that no partitioning can satisfy (P < 1, more parts than edges, ...)."""


def vertex_cut(graph: CSRGraph, num_parts: int, method: str = "libra", seed: int = 0,
               order: str = "random", roots: str = "balanced", keep_pairs: bool | None = None,
               progress=None) -> Layout:
    """Vertex-cut of ``graph`` into ``num_parts`` (see :mod:`partition.assign`)."""
    if num_parts < 1:
        raise PartitionError(f"--parts must be at least 1, got {num_parts}")
    if num_parts > max(graph.num_edges, 1):
        raise PartitionError(f"--parts {num_parts} is larger than the number of edges "
                             f"({graph.num_edges}): some partitions would be empty")
    try:
        part = assign_edges(graph.indptr, graph.indices, num_parts, method, seed, order,
                            keep_pairs, progress)
        return build_layout(graph.indptr, graph.indices, part, num_parts, roots, seed)
    except ValueError as e:
        raise PartitionError(str(e)) from None
