"""CSRGraph builders checked against scipy, and every validation error of graph.py."""
import numpy as np
import pytest
import scipy.sparse as sp

from distgnn.data.graph import INT32_MAX, CSRGraph, GraphError, NodeDataset, index_dtype
from tests.helpers.graphs import is_symmetric

N = 50


@pytest.fixture
def edges():
    """Random directed edges on N nodes with duplicates and self-loops, plus weights."""
    rng = np.random.default_rng(0)
    src = rng.integers(0, N, 400)
    dst = rng.integers(0, N, 400)
    src[:5] = dst[:5]  # make sure there are self-loops
    return src, dst, rng.random(400).astype(np.float32)


def dense(src, dst, weight=None, n=N):
    """Reference [N, N] matrix with entry (dst, src); duplicates summed."""
    data = np.ones(len(src)) if weight is None else weight
    return sp.coo_matrix((data, (dst, src)), shape=(n, n)).toarray()


def pattern(graph):
    return graph.to_scipy().toarray() != 0


# ---- builders -------------------------------------------------------------------------------
def test_from_edges_matches_scipy_and_keeps_row_order(edges):
    src, dst, w = edges
    g = CSRGraph.from_edges(src, dst, N, w)
    np.testing.assert_allclose(g.to_scipy().toarray(), dense(src, dst, w), rtol=1e-6)
    assert g.num_edges == len(src) and g.indptr.dtype == np.int64
    for v in (0, 7, N - 1):
        row = slice(g.indptr[v], g.indptr[v + 1])
        np.testing.assert_array_equal(g.indices[row], src[dst == v])
        np.testing.assert_array_equal(g.edge_weight[row], w[dst == v])


def test_from_edges_infers_num_nodes_and_handles_empty():
    assert CSRGraph.from_edges([0, 4], [1, 2]).num_nodes == 5
    g = CSRGraph.from_edges(np.zeros(0, np.int64), np.zeros(0, np.int64), 3)
    assert g.num_nodes == 3 and g.num_edges == 0
    np.testing.assert_array_equal(g.indptr, [0, 0, 0, 0])


def test_from_scipy_weights_and_unit_values(edges):
    src, dst, w = edges
    m = sp.random(N, N, density=0.1, random_state=1, format="csr", dtype=np.float32)
    g = CSRGraph.from_scipy(m)
    np.testing.assert_allclose(g.to_scipy().toarray(), m.toarray())
    assert g.edge_weight is not None
    unit = CSRGraph.from_scipy((m != 0).astype(np.float32))
    assert unit.edge_weight is None and unit.num_edges == m.nnz


def test_transpose(edges):
    src, dst, w = edges
    g = CSRGraph.from_edges(src, dst, N, w)
    np.testing.assert_allclose(g.transpose().to_scipy().toarray(), dense(src, dst, w).T,
                               rtol=1e-6)


def test_symmetrize(edges):
    src, dst, _ = edges
    g = CSRGraph.from_edges(src, dst, N)
    s = g.symmetrize()
    a = dense(src, dst) != 0
    np.testing.assert_array_equal(pattern(s), a | a.T)
    assert s.num_edges == np.count_nonzero(a | a.T)  # no duplicates left
    assert is_symmetric(s) and not is_symmetric(g)


def test_self_loops(edges):
    src, dst, w = edges
    g = CSRGraph.from_edges(src, dst, N, w)
    no_loops = g.remove_self_loops()
    assert not np.any(no_loops.to_scipy().diagonal())
    assert no_loops.num_edges == np.count_nonzero(src != dst)


def test_degrees(edges):
    src, dst, _ = edges
    g = CSRGraph.from_edges(src, dst, N)
    m = g.to_scipy()
    np.testing.assert_array_equal(g.in_degrees(), m.getnnz(axis=1))
    assert g.in_degrees().dtype == np.int64


def test_edges_round_trip(edges):
    src, dst, _ = edges
    g = CSRGraph.from_edges(src, dst, N)
    s, d = g.edges()
    np.testing.assert_array_equal(CSRGraph.from_edges(s, d, N).indices, g.indices)


def test_index_dtype_choice():
    assert index_dtype(10) is np.int32
    assert index_dtype(INT32_MAX) is np.int32
    assert index_dtype(INT32_MAX + 1) is np.int32  # ids 0..INT32_MAX fit
    assert index_dtype(INT32_MAX + 2) is np.int64
    g = CSRGraph(np.array([0, 1, 2]), np.array([1, 0], np.int64))
    assert g.indices.dtype == np.int32  # narrowed from int64


# ---- CSRGraph validation --------------------------------------------------------------------
@pytest.mark.parametrize("indptr, indices, kwargs, message", [
    (np.array([0.0, 1.0]), [0], {}, "indptr has dtype float64"),
    ([0, 1], np.array([0.0]), {}, "indices has dtype float64"),
    ([0, 1], np.array([True]), {}, "indices has dtype bool"),
    (np.array([True, False]), [0], {}, "indptr has dtype bool"),
    (np.zeros(0, np.int64), np.zeros(0, np.int64), {}, "indptr must be a 1-D"),
    (np.zeros((2, 2), np.int64), np.zeros(0, np.int64), {}, "indptr must be a 1-D"),
    ([0, 1], [0], {"num_nodes": 3}, "num_nodes is 3"),
    ([0, 1], [[0]], {}, "indices must be a 1-D"),
    ([1, 1], [0], {}, "indptr[0] must be 0"),
    ([0, 1, 1], [0, 0], {}, "indptr[-1] = 1 but there are 2 indices"),
    ([0, 2, 1, 2], [0, 1], {}, "not monotone"),
    ([0, 1, 2], [0, -1], {}, "negative vertex id -1"),
    ([0, 1, 2], [0, 2], {}, "vertex id 2 out of range for 2 vertices"),
    ([0, 1, 2], [0, 1], {"edge_weight": [1.0]}, "edge_weight has shape"),
    ([0, 1, 2], [0, 1], {"edge_weight": np.array(["a", "b"])}, "expected a number type"),
    ([0, 1, 2], [0, 1], {"edge_weight": [1.0, np.nan]}, "NaN or inf"),
    ([0, 1, 2], [0, 1], {"edge_weight": [np.inf, 1.0]}, "NaN or inf"),
])
def test_csr_validation(indptr, indices, kwargs, message):
    with pytest.raises(GraphError, match=r"^g\.txt: ") as info:
        CSRGraph(np.asarray(indptr), np.asarray(indices), source="g.txt", **kwargs)
    assert message in str(info.value)
    assert info.value.source == "g.txt"


@pytest.mark.parametrize("src, dst, kwargs, message", [
    (np.array([0.0]), [1], {}, "src has dtype float64"),
    ([0], np.array([True]), {}, "dst has dtype bool"),
    (np.zeros((1, 2), np.int64), np.zeros((1, 2), np.int64), {}, "src must be 1-D"),
    ([0, 1, 2], [1, 2], {}, "src has 3 entries but dst has 2"),
    ([0, -2], [1, 1], {}, "negative vertex id -2"),
    ([0, 5], [1, 1], {"num_nodes": 3}, "vertex id 5 out of range for 3 vertices"),
    ([0, 1, 2], [1, 2, 0], {"edge_weight": [1.0, 2.0]}, "one entry per edge"),
    ([0, 1], [1, 2], {"edge_weight": [1.0, 2.0, 3.0]}, "one entry per edge"),
])
def test_from_edges_validation(src, dst, kwargs, message):
    with pytest.raises(GraphError, match=r"^e\.csv: ") as info:
        CSRGraph.from_edges(np.asarray(src), np.asarray(dst), source="e.csv", **kwargs)
    assert message in str(info.value)


def test_from_scipy_needs_square():
    with pytest.raises(GraphError, match="must be square"):
        CSRGraph.from_scipy(sp.csr_matrix((2, 3)))


def test_error_without_source_is_just_the_problem():
    with pytest.raises(GraphError) as info:
        CSRGraph([1, 1], [0])
    assert str(info.value) == "indptr[0] must be 0, got 1" and info.value.source is None


# ---- NodeDataset validation -----------------------------------------------------------------
def small_dataset(**overrides):
    n = 4
    graph = CSRGraph.from_edges([0, 1, 2], [1, 2, 3], n, source="tiny.npz")
    fields = dict(graph=graph, x=np.ones((n, 2), np.float32), y=np.array([0, 1, 2, 0]),
                  train_mask=np.array([1, 0, 0, 0], bool), val_mask=np.array([0, 1, 0, 0], bool),
                  test_mask=np.array([0, 0, 1, 1], bool))
    fields.update(overrides)
    return NodeDataset(**fields)


def test_dataset_valid_and_normalised():
    ds = small_dataset(x=np.ones((4, 2), np.float64), y=np.array([0, 1, 2, 0], np.int32))
    assert ds.x.dtype == np.float32 and ds.y.dtype == np.int64
    assert ds.num_classes == 3 and ds.num_nodes == 4 and ds.num_features == 2
    assert "4 vertices" in ds.summary()


@pytest.mark.parametrize("overrides, message", [
    ({"x": np.ones(4)}, "features must be 2-D"),
    ({"x": np.ones((3, 2))}, "features have 3 rows but the graph has 4 vertices"),
    ({"x": np.array([["a", "b"]] * 4)}, "expected a number type"),
    ({"x": np.ones((4, 2), bool)}, "expected a number type"),
    ({"x": np.array([[0, 1], [0, np.nan], [0, 0], [0, 0]])}, "NaN or inf (first at vertex 1)"),
    ({"x": np.array([[0, 0], [0, 0], [np.inf, 0], [0, 0]])}, "NaN or inf (first at vertex 2)"),
    ({"y": np.array([0.0, 1.0, 2.0, 0.0])}, "labels have dtype float64"),
    ({"y": np.array([True, False, True, False])}, "labels have dtype bool"),
    ({"y": np.array([0, 1, 2])}, "labels have shape (3,) but the graph has 4"),
    ({"y": np.array([0, 1, -1, 0])}, "labels must lie in 0..1"),
    ({"y": np.array([0, 1, 2, 0]), "num_classes": 2}, "labels must lie in 0..1, found 0..2"),
    ({"train_mask": np.array([1, 0, 0, 0])}, "train_mask has dtype int64, expected bool"),
    ({"val_mask": np.array([0.0, 1, 0, 0])}, "val_mask has dtype float64, expected bool"),
    ({"test_mask": np.zeros(3, bool)}, "test_mask has shape (3,)"),
    ({"val_mask": np.array([1, 1, 0, 0], bool)}, "train_mask and val_mask overlap in 1"),
    ({"test_mask": np.array([1, 0, 1, 1], bool)}, "train_mask and test_mask overlap in 1"),
    ({"val_mask": np.array([0, 1, 1, 0], bool)}, "val_mask and test_mask overlap in 1"),
])
def test_dataset_validation(overrides, message):
    with pytest.raises(GraphError, match=r"^tiny\.npz: ") as info:
        small_dataset(**overrides)
    assert message in str(info.value)


@pytest.mark.parametrize("indptr,indices,expected", [
    ([0, 2, 3], [0, 1, 1], False),       # sorted rows, no repeat
    ([0, 3, 3], [0, 1, 1], True),        # sorted row with a repeat
    ([0, 3, 3], [1, 0, 1], True),        # unsorted row with a repeat
    ([0, 2, 4], [1, 0, 1, 0], False),    # unsorted rows, the same column in two rows
    ([0, 0, 0], [], False),
])
def test_has_duplicate_edges(indptr, indices, expected):
    assert CSRGraph(np.array(indptr), np.array(indices, np.int64), 2).has_duplicate_edges() \
        is expected
