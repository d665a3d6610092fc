"""Locality orders: each is a permutation, relabelling is ``P A P^T``, and the orders do
what they are for (hubs first; a narrow band)."""
import numpy as np
import pytest
import scipy.sparse as sp

from distgnn.data.graph import CSRGraph
from distgnn.data.ordering import (
    ORDERS,
    choose_order,
    inverse,
    order_vertices,
    relabel,
    vertex_order,
)
from tests.helpers.graphs import out_degrees


def grid(side: int, seed: int) -> CSRGraph:
    """A ``side x side`` 4-neighbour grid (bandwidth ``side``) under shuffled ids."""
    n = side * side
    v = np.arange(n)
    right, down = v[(v % side) < side - 1], v[v < n - side]
    src = np.concatenate([right, right + 1, down, down + side])
    dst = np.concatenate([right + 1, right, down + side, down])
    ids = np.random.default_rng(seed).permutation(n)
    return CSRGraph.from_edges(ids[src], ids[dst], n)


def bandwidth(graph: CSRGraph) -> int:
    src, dst = graph.edges()
    return int(np.abs(src.astype(np.int64) - dst).max())


@pytest.mark.parametrize("method", ORDERS)
def test_relabel_is_the_permuted_matrix(random_graph, method):
    g, *_ = random_graph(seed=4, n=80, e=500, weighted=True, hub_degree=40, isolated=3,
                         self_loops=4, duplicates=5)
    perm = vertex_order(g, method)
    np.testing.assert_array_equal(np.sort(perm), np.arange(g.num_nodes))
    np.testing.assert_array_equal(inverse(perm)[perm], np.arange(g.num_nodes))
    r = relabel(g, perm)
    assert r.num_edges == g.num_edges
    p = sp.csr_matrix((np.ones(g.num_nodes), (np.arange(g.num_nodes), perm)),
                      shape=(g.num_nodes, g.num_nodes))
    want = (p @ g.to_scipy().astype(np.float64) @ p.T).toarray()
    np.testing.assert_allclose(r.to_scipy().toarray(), want, rtol=1e-6)
    rows = np.repeat(np.arange(r.num_nodes), np.diff(r.indptr))
    assert np.all((np.diff(r.indices) >= 0) | (np.diff(rows) > 0)), "rows are sorted"


def test_degree_order_puts_the_most_read_rows_first(random_graph):
    g, *_ = random_graph(seed=5, n=200, e=1500, hub_degree=120)
    r = relabel(g, vertex_order(g, "degree"))
    assert np.all(np.diff(out_degrees(r)) <= 0)


def test_rcm_narrows_the_band_of_a_shuffled_grid():
    g = grid(30, seed=1)
    assert bandwidth(g) > 500
    assert bandwidth(relabel(g, vertex_order(g, "rcm"))) <= 2 * 30


def test_auto_skips_the_trial_when_features_fit_in_cache_and_else_keeps_the_fastest():
    g = grid(20, seed=2)
    assert choose_order(g, width=16, llc=1 << 30)[0::2] == ("given", {})
    method, perm, times = choose_order(g, width=16, llc=0)
    assert set(times) == set(ORDERS) and method == min(times, key=times.get)
    np.testing.assert_array_equal(perm, vertex_order(g, method))


@pytest.mark.parametrize("method", ORDERS)
def test_an_empty_graph_has_an_empty_order(method):
    perm = vertex_order(CSRGraph(np.zeros(1, np.int64), np.zeros(0, np.int64), 0), method)
    assert perm.dtype == np.int64 and perm.shape == (0,)


def test_unknown_order_is_refused():
    with pytest.raises(ValueError, match="order must be one of"):
        order_vertices(grid(3, seed=0), "metis")
