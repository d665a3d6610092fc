"""Graphs the tests build, and queries of them that only the tests need."""
import numpy as np

from distgnn.data.graph import CSRGraph


def build_random_graph(seed=0, n=40, e=160, weighted=False, hub_degree=0, isolated=4,
                       self_loops=4, duplicates=4):
    """``(graph, src, dst, weight)`` for a random directed graph on ``n`` vertices.

    The raw edge arrays (``weight`` is None when unweighted) are returned so that tests
    can build references without going through CSRGraph.  The last ``isolated`` vertices
    have no edges at all; ``self_loops`` edges are ``v -> v``; ``duplicates`` edges are
    repeated; vertex 0 receives ``hub_degree`` extra in-edges.  Weights are in
    [-1.5, 1.5] (negative ones flip max and min).
    """
    rng = np.random.default_rng(seed)
    live = n - isolated
    src = rng.integers(0, live, e)
    dst = rng.integers(0, live, e)
    src[:self_loops] = dst[:self_loops]
    src[self_loops:self_loops + duplicates] = src[-duplicates:] if duplicates else []
    dst[self_loops:self_loops + duplicates] = dst[-duplicates:] if duplicates else []
    src = np.concatenate([src, rng.integers(0, live, hub_degree)])
    dst = np.concatenate([dst, np.zeros(hub_degree, np.int64)])
    weight = rng.uniform(-1.5, 1.5, len(src)).astype(np.float32) if weighted else None
    return CSRGraph.from_edges(src, dst, n, weight), src, dst, weight


def dedup(graph: CSRGraph) -> CSRGraph:
    """``graph`` with one copy of each ``(src, dst)`` pair (the first; columns sorted)."""
    src, dst = graph.edges()
    keys = np.asarray(dst, np.int64) * max(graph.num_nodes, 1) + np.asarray(src, np.int64)
    _, first = np.unique(keys, return_index=True)
    w = None if graph.edge_weight is None else graph.edge_weight[first]
    return CSRGraph.from_edges(src[first], dst[first], graph.num_nodes, w, graph.source)


def is_symmetric(graph: CSRGraph) -> bool:
    """Whether every edge ``u -> v`` has its reverse (as many times)."""
    src, dst = graph.edges()
    n = max(graph.num_nodes, 1)
    fwd = np.sort(np.asarray(dst, np.int64) * n + src)
    rev = np.sort(np.asarray(src, np.int64) * n + dst)
    return bool(np.array_equal(fwd, rev))


def out_degrees(graph: CSRGraph) -> np.ndarray:
    """int64 ``[N]``: how often each vertex is a source."""
    return np.bincount(graph.indices, minlength=graph.num_nodes).astype(np.int64)
