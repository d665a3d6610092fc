"""Partition a graph: edge assignment, then layout (vertex sets, roots, split tables).

:func:`vertex_cut` is the one entry point the CLI, the benchmarks and the tests call.
"""
from __future__ import annotations

import numpy as np

from distgnn.data.graph import CSRGraph
from distgnn.data.partitions import PartitionError
from partition.assign import HASHED, HDRF_LAMBDA, assign_edges
from partition.layout import Layout, build_layout

__all__ = ["PartitionError", "vertex_cut"]

SECOND_LEVEL_SEED = 0x5DEECE66D  # XORed into the seed of a hash's second level (< 2^63)


def vertex_cut(graph: CSRGraph, num_parts: int, method: str = "ne", seed: int = 0,
               order: str | None = None, roots: str = "balanced",
               keep_pairs: bool | None = None, progress=None, weights=None,
               hdrf_lambda: float = HDRF_LAMBDA, ranks_per_node: int = 1) -> Layout:
    """Vertex-cut of ``graph`` into ``num_parts`` (see :mod:`partition.assign`).

    ``order`` (default: the method's own), ``weights`` (relative capacity of each
    partition, default equal) and ``hdrf_lambda``: see
    :func:`~partition.assign.assign_edges`.  With ``ranks_per_node`` K > 1 the cut has two
    levels (:func:`two_level_parts`): partitions ``n K .. n K + K - 1`` are the ranks of
    node ``n``.  A cut that leaves a partition without vertices (more partitions than the
    graph fills) is refused: that rank would have nothing to train on.
    """
    if num_parts < 1:
        raise PartitionError(f"--parts must be at least 1, got {num_parts}")
    if ranks_per_node < 1 or num_parts % ranks_per_node:
        raise PartitionError(f"--ranks-per-node {ranks_per_node} does not divide --parts "
                             f"{num_parts}: every node runs the same number of ranks")
    if num_parts > max(graph.num_edges, 1):
        raise PartitionError(f"--parts {num_parts} is larger than the number of edges "
                             f"({graph.num_edges}): some partitions would be empty")
    try:
        part = two_level_parts(graph, num_parts, ranks_per_node, method, seed, order,
                               keep_pairs, progress, weights, hdrf_lambda)
        layout = build_layout(graph.indptr, graph.indices, part, num_parts, roots, seed,
                              weights, ranks_per_node)
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


def two_level_parts(graph: CSRGraph, num_parts: int, ranks_per_node: int, method: str,
                    seed: int, order: str | None, keep_pairs: bool | None, progress,
                    weights, hdrf_lambda: float) -> np.ndarray:
    """The partition of every CSR entry, int32 ``[E]``: across nodes, then within each.

    With ``K`` = ``ranks_per_node`` and ``N = P / K`` nodes, the edges are first cut into
    ``N`` node parts (each asked for the summed capacity of its ranks), then each node's
    edges into its ``K`` ranks; rank ``n K + k`` gets node ``n``'s ``k``-th part.  The first
    cut minimises the nodes each vertex spans, which is what crosses the links: the
    node-aware exchange sends one row per vertex and remote node.  Random and DBH hash the
    second level with another seed than the first, independent of it.  ``K = 1`` is the flat
    cut.  The streaming progress counts every edge twice (once per level).
    """
    if ranks_per_node == 1:
        return assign_edges(graph.indptr, graph.indices, num_parts, method, seed, order,
                            keep_pairs, progress, weights, hdrf_lambda)
    nodes = num_parts // ranks_per_node
    capacity = (None if weights is None
                else np.asarray(weights, np.float64).reshape(nodes, ranks_per_node))
    node = assign_edges(graph.indptr, graph.indices, nodes, method, seed, order, keep_pairs,
                        progress, None if capacity is None else capacity.sum(axis=1),
                        hdrf_lambda)
    # a hash of the first level's seed would split each node's edges by bits the first level
    # has fixed already (one rank of the node would get them all): the hashing methods
    # hash again with a seed of the second level's own
    inner_seed = seed ^ SECOND_LEVEL_SEED if method in HASHED else seed
    rows = np.repeat(np.arange(graph.num_nodes), np.diff(graph.indptr))
    part = np.empty(graph.num_edges, np.int32)
    for n in range(nodes):
        mine = np.flatnonzero(node == n)  # CSR order: the node's entries stay in rows
        indptr = np.zeros(graph.num_nodes + 1, np.int64)
        np.cumsum(np.bincount(rows[mine], minlength=graph.num_nodes), out=indptr[1:])
        part[mine] = n * ranks_per_node + assign_edges(
            indptr, graph.indices[mine], ranks_per_node, method, inner_seed, order, keep_pairs,
            progress, None if capacity is None else capacity[n], hdrf_lambda)
    return part
