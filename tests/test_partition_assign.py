"""Edge assignment: the four Libra cases on hand-made streams, keep_pairs, every edge in
exactly one partition, Libra's quality against random and DBH, neighbourhood expansion's
regions and capacities."""

import numpy as np
import pytest

import partition
from distgnn.data.graph import CSRGraph, NodeDataset
from partition.assign import assign_edges, membership, reverse_positions
from partition.vertex_cut import PartitionError, vertex_cut
from tests.helpers.graphs import dedup, is_symmetric
from tests.helpers.partitions import (
    METHODS,
    check_layout,
    edge_keys,
    libra,
    load_all,
    partitions_of,
    run_cli,
    stats_of,
    stream_csr,
    write_dir,
)


# ---- 1. the four Libra cases ------------------------------------------------------------------
@pytest.mark.parametrize("seed", range(5))
def test_libra_neither_placed_goes_to_least_loaded_partition(seed):
    # P = 3.  e0 seeds partition a; e1, e2 follow vertex 0 onto a (one endpoint placed);
    # e3 is unplaced: a has load 3, so it goes to b != a; e4 follows 3 onto b.  Loads are
    # now a 3, b 2, c 0: the unplaced e5 must go to c, and e6 (loads 3, 2, 1) to c again.
    edges = [(10, 0), (0, 1), (0, 2), (11, 3), (3, 4), (12, 5), (13, 6)]
    part, _, _ = libra(edges, 14, 3, seed)
    a, b, c = part[0], part[3], part[5]
    assert len({a, b, c}) == 3
    np.testing.assert_array_equal(part, [a, a, a, b, b, c, c])


@pytest.mark.parametrize("seed", range(5))
def test_libra_one_placed_goes_to_least_loaded_of_its_partitions(seed):
    # Vertices: B0 D1 F2 G3 I4 K5 A6 J7 L8 L9 L10 C11 E12; A has degree 6, D degree 4.
    # s0 (A,B) -> a; s1 (C,D) -> b; s2 (E,F) -> c (all three distinct: least loaded);
    # s3, s4 follow D onto b; s5 follows B onto a.  Loads a 2, b 3, c 1.
    # s6 (D,A): both placed, nothing in common: D has the lower degree -> b; A now on {a, b}.
    # s7 (A,J): only A placed: least loaded of A(A) = {a (2), b (4)} is a, although c (1)
    # is the least loaded partition overall.
    edges = [(6, 0), (11, 1), (12, 2), (1, 3), (1, 4), (0, 5), (1, 6), (6, 7), (6, 8),
             (6, 9), (6, 10)]
    part, indptr, indices = libra(edges, 13, 3, seed)
    a, b, c = part[0], part[1], part[2]
    assert len({a, b, c}) == 3
    np.testing.assert_array_equal(part[:8], [a, b, c, b, b, a, b, a])
    # the rest (A with J... on {a, b}) never leaves A's partitions
    assert set(part[8:].tolist()) <= {a, b}


@pytest.mark.parametrize("seed", range(5))
def test_libra_both_placed_goes_to_least_loaded_common_partition(seed):
    # Ids: Y1 0, Y2 1, Y3 2, X1 3, X2 4, X3 5, V 6, Z1 7, H 8, W 9, T 10 11.
    # t0..t2 seed a, b, c; t3..t5 replicate the hub H onto a, b, c (degree rule: H has
    # degree 4, X2 and X3 degree 2); t6 puts V on b; t7 replicates V (degree 4) onto Y3's c
    # (Y3 has degree 3); t8 adds load to c.  Loads a 2, b 3, c 4.
    # t9 (V, H): common partitions {b, c} -> b (3 < 4), although a (2) is the least loaded.
    # t10 puts W on a; t11 replicates W (degree 5) onto Y2's b (degree 3).  Loads a 3, b 5,
    # c 4.  t12 (V, W): V on {b, c}, W on {a, b}: the only common partition is b, the most
    # loaded of all, although A(V) offers c (4) and A(W) offers a (3).
    edges = [(3, 0), (4, 1), (5, 2), (8, 3), (8, 4), (8, 5), (1, 6), (2, 6), (2, 7), (6, 8),
             (0, 9), (1, 9), (6, 9), (9, 10), (9, 11)]
    part, indptr, indices = libra(edges, 12, 3, seed)
    a, b, c = part[0], part[1], part[2]
    assert len({a, b, c}) == 3
    np.testing.assert_array_equal(part[:13], [a, b, c, a, b, c, b, c, c, b, a, b, b])
    member = membership(indptr, indices, part, 3)
    assert partitions_of(member[8], 3) == {a, b, c}  # H is on all three
    assert partitions_of(member[6], 3) == {b, c}     # V on two
    assert partitions_of(member[9], 3) == {a, b}     # W on two


@pytest.mark.parametrize("seed", range(5))
@pytest.mark.parametrize("heavy", ["A", "D"])
def test_libra_no_common_partition_replicates_the_higher_degree_endpoint(seed, heavy):
    # The graph of the one-placed test; s6 = (D, A) with A on a (load 2) and D on b (load 3).
    # heavy="A": A has degree 6 > D's 4 -> s6 goes to D's b (not the less loaded a), and A
    # is replicated.  heavy="D": three extra edges give D degree 7 > 6 -> s6 goes to A's a.
    edges = [(6, 0), (11, 1), (12, 2), (1, 3), (1, 4), (0, 5), (1, 6), (6, 7), (6, 8),
             (6, 9), (6, 10)]
    n = 13
    if heavy == "D":
        edges += [(1, 13), (1, 14), (1, 15)]
        n = 16
    part, indptr, indices = libra(edges, n, 3, seed)
    a, b = part[0], part[1]
    assert a != b
    member = membership(indptr, indices, part, 3)
    if heavy == "A":
        assert part[6] == b
        assert partitions_of(member[6], 3) == {a, b}  # A replicated
        assert partitions_of(member[1], 3) == {b}     # D whole
    else:
        assert part[6] == a
        assert b in partitions_of(member[1], 3) and a in partitions_of(member[1], 3)
        assert partitions_of(member[6], 3) == {a}     # A whole


def test_libra_ties_are_random_but_seeded():
    indptr, indices = stream_csr([(1, 0)], 2)  # one edge: every partition tied at load 0
    chosen = []
    for seed in range(24):
        first = assign_edges(indptr, indices, 8, "libra", seed=seed, order="given",
                             keep_pairs=False)
        again = assign_edges(indptr, indices, 8, "libra", seed=seed, order="given",
                             keep_pairs=False)
        np.testing.assert_array_equal(first, again)
        chosen.append(int(first[0]))
    assert len(set(chosen)) > 1
    assert all(0 <= p < 8 for p in chosen)


def test_assign_rejects_unknown_method_and_order():
    indptr, indices = stream_csr([(1, 0)], 2)
    with pytest.raises(ValueError, match="method"):
        assign_edges(indptr, indices, 2, method="metis")
    with pytest.raises(ValueError, match="order"):
        assign_edges(indptr, indices, 2, order="sorted")


@pytest.mark.parametrize("seed", [-1, 2**63, 2**64, 1.5, True])
def test_seeds_outside_0_to_2_63_are_one_line_errors(seed):
    indptr, indices = stream_csr([(1, 0), (0, 1)], 2)
    for method in METHODS:
        with pytest.raises(PartitionError, match=r"--seed must be an integer from 0 to 2\^63-1"):
            assign_edges(indptr, indices, 2, method, seed=seed)
    assign_edges(indptr, indices, 2, seed=2**63 - 1)


@pytest.mark.parametrize("method", METHODS)
def test_a_cut_that_leaves_a_partition_without_vertices_is_refused(method):
    """Six vertices cannot fill eight partitions; the error names the empty one."""
    g = CSRGraph.from_edges_symmetric(np.arange(6), (np.arange(6) + 1) % 6, 6)
    with pytest.raises(PartitionError, match=r"--parts 8: partition \d+ would hold no "
                                             "vertices") as info:
        vertex_cut(g, 8, method)
    assert "use fewer --parts" in str(info.value) and "\n" not in str(info.value)


# ---- 2. keep_pairs ----------------------------------------------------------------------------
def sym_graph(seed=0, n=60, e=200):
    rng = np.random.default_rng(seed)
    return CSRGraph.from_edges_symmetric(rng.integers(0, n, e), rng.integers(0, n, e), n)


def reverse_by_keys(graph):
    """Position of each entry's reverse, found by sorting (independent of assign.py)."""
    src, dst = graph.edges()
    n = graph.num_nodes
    keys = edge_keys(src, dst, n)
    order = np.argsort(keys)
    pos = np.searchsorted(keys[order], edge_keys(dst, src, n))
    assert np.array_equal(keys[order][pos], edge_keys(dst, src, n))
    return order[pos]


@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("keep_pairs", [None, True])
def test_keep_pairs_puts_both_directions_together(method, keep_pairs):
    g = sym_graph()
    assert is_symmetric(g)
    rev = reverse_by_keys(g)
    np.testing.assert_array_equal(reverse_positions(g.indptr, g.indices), rev)
    for order in ("given", "random"):
        part = assign_edges(g.indptr, g.indices, 4, method, seed=3, order=order,
                            keep_pairs=keep_pairs)
        np.testing.assert_array_equal(part, part[rev])


@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("keep_pairs", [None, False])
def test_progress_counts_every_edge_once(method, keep_pairs):
    rng = np.random.default_rng(1)
    s, d = rng.integers(0, 80, 300), rng.integers(0, 80, 300)
    s[:40] = d[:40]  # self-loops: their own reverse, streamed with load 1
    g = CSRGraph.from_edges_symmetric(s, d, 80)
    assert np.any(g.edges()[0] == g.edges()[1])
    calls = []
    assign_edges(g.indptr, g.indices, 3, method, seed=0, keep_pairs=keep_pairs,
                 progress=calls.append)
    assert calls and sum(calls) == g.num_edges


def test_without_keep_pairs_libra_splits_some_pairs():
    g = sym_graph()
    part = assign_edges(g.indptr, g.indices, 4, "libra", seed=3, order="random",
                        keep_pairs=False)
    assert np.any(part != part[reverse_by_keys(g)])


def test_keep_pairs_on_non_symmetric_graph_raises(random_graph):
    g, *_ = random_graph(seed=1)
    assert not is_symmetric(g)
    assert reverse_positions(g.indptr, g.indices) is None
    with pytest.raises(ValueError, match="symmetric"):
        assign_edges(g.indptr, g.indices, 2, "libra", keep_pairs=True)
    with pytest.raises(PartitionError):
        vertex_cut(g, 2, keep_pairs=True)


def one_way_graph(n, e, seed, pair=True):
    """Directed graph whose one-way edges all go from a lower to a higher id.

    With ``pair``, one undirected pair ``0 <-> n-1`` is added: the first CSR entry then has
    a genuine reverse, and every entry without one sits below the diagonal (src < dst).
    """
    rng = np.random.default_rng(seed)
    s, d = rng.integers(1, n - 1, e), rng.integers(1, n - 1, e)
    lo, hi = np.minimum(s, d), np.maximum(s, d)
    keep = lo < hi
    src, dst = lo[keep], hi[keep]
    if pair:
        src, dst = np.concatenate([[n - 1, 0], src]), np.concatenate([[0, n - 1], dst])
    return dedup(CSRGraph.from_edges(src, dst, n))


# (A pure DAG, pair=False, is wrongly accepted too, but only when uninitialised memory
# happens to hold a non-negative number; each case below fails on every run.)
ONE_WAY = [(6, 1, 0, True), (20, 40, 1, True), (300, 3000, 2, True), (2000, 40000, 3, True)]


@pytest.mark.parametrize("n, e, seed, pair", ONE_WAY)
def test_reverse_positions_is_none_when_an_edge_has_no_reverse(n, e, seed, pair):
    g = one_way_graph(n, e, seed, pair)
    assert g.num_edges >= 3 and not is_symmetric(g)
    assert reverse_positions(g.indptr, g.indices) is None


@pytest.mark.parametrize("n, e, seed, pair", ONE_WAY)
def test_keep_pairs_raises_when_an_edge_has_no_reverse(n, e, seed, pair):
    g = one_way_graph(n, e, seed, pair)
    with pytest.raises(ValueError, match="symmetric"):
        assign_edges(g.indptr, g.indices, 2, "libra", keep_pairs=True)


@pytest.mark.parametrize("n, e, seed, pair", ONE_WAY[1:])
def test_default_keep_pairs_is_off_when_an_edge_has_no_reverse(n, e, seed, pair):
    # keep_pairs=None means "on when the graph is symmetric": here it must act like False.
    g = one_way_graph(n, e, seed, pair)
    for order in ("given", "random"):
        off = assign_edges(g.indptr, g.indices, 4, "libra", seed=5, order=order,
                           keep_pairs=False)
        default = assign_edges(g.indptr, g.indices, 4, "libra", seed=5, order=order)
        np.testing.assert_array_equal(default, off)
    layout = vertex_cut(g, 4, "libra", seed=0)
    check_layout(g, layout)


def test_multigraph_partitions_pass_verify(random_graph, tmp_path, capsys):
    # Edge lists and CSRGraph keep duplicate edges; each stored entry still goes to exactly
    # one partition, so the partitioner's own output must pass its own verify.
    g, src, dst, _ = random_graph(seed=4, n=40, e=160, duplicates=4, isolated=0)
    assert len(np.unique(edge_keys(src, dst, 40))) < len(src)  # duplicates present
    n = g.num_nodes
    ds = NodeDataset(g, np.ones((n, 1), np.float32), np.zeros(n, np.int64), np.ones(n, bool),
                     np.zeros(n, bool), np.zeros(n, bool), name="multi")
    layout = write_dir(ds, tmp_path / "multi", 3, "libra", seed=0)
    check_layout(g, layout)
    keys = np.concatenate([edge_keys(np.asarray(p.global_ids)[p.graph.edges()[0]],
                                     np.asarray(p.global_ids)[p.graph.edges()[1]], n)
                           for p in load_all(tmp_path / "multi")])
    np.testing.assert_array_equal(np.sort(keys), np.sort(edge_keys(*g.edges(), n)))
    assert partition.verify(tmp_path / "multi", edges=g.edges()) == []
    assert run_cli(["verify", tmp_path / "multi"]) == 0, capsys.readouterr().err


# ---- 3. every edge in exactly one partition; Libra quality -------------------------------------
@pytest.mark.parametrize("name", ["rmat", "cora"])
@pytest.mark.parametrize("method", METHODS)
def test_partitions_hold_every_edge_exactly_once(datasets, name, method, tmp_path):
    ds = datasets[name]
    g = ds.graph
    out = tmp_path / "parts"
    layout = write_dir(ds, out, 4, method, seed=7)
    check_layout(g, layout)
    src, dst = g.edges()
    assert partition.verify(out, edges=(src, dst)) == []
    # independently: reload every partition and rebuild the global edge keys
    n = g.num_nodes
    keys = []
    for p, part in enumerate(load_all(out)):
        lsrc, ldst = part.graph.edges()
        ids = np.asarray(part.global_ids)
        local_keys = edge_keys(ids[lsrc], ids[ldst], n)
        assert len(local_keys) == layout.edge_counts[p]
        np.testing.assert_array_equal(
            np.sort(local_keys), np.sort(edge_keys(src, dst, n)[layout.part == p]))
        keys.append(local_keys)
    all_keys = np.sort(np.concatenate(keys))
    np.testing.assert_array_equal(all_keys, np.sort(edge_keys(src, dst, n)))
    assert len(np.unique(all_keys)) == len(all_keys)  # the input has no duplicates


@pytest.mark.parametrize("num_parts", [4, 8])
def test_libra_balances_edges_and_replicates_less_than_random_and_dbh(rmat_ds, num_parts):
    g = rmat_ds.graph
    rf = {}
    for method in METHODS:
        layout = vertex_cut(g, num_parts, method, seed=0)
        check_layout(g, layout)
        stats = stats_of(layout)
        assert stats["replication_factor"] == pytest.approx(layout.clones().mean())
        rf[method] = stats["replication_factor"]
        if method == "libra":
            assert stats["edge_balance"] <= 1.05
            assert stats["edge_balance"] == pytest.approx(
                layout.edge_counts.max() / layout.edge_counts.mean())
    assert rf["libra"] < rf["random"], rf
    assert rf["libra"] < rf["dbh"], rf
    assert rf["libra"] > 1.0  # a real cut, not a degenerate one


@pytest.mark.parametrize("method", METHODS)
def test_many_partitions_use_multiword_bitsets(rmat_ds, method):
    g = rmat_ds.graph
    layout = vertex_cut(g, 70, method, seed=1)  # 70 > 64: two words per vertex
    check_layout(g, layout)
    assert layout.edge_counts[64:].min() > 0  # the second word is used
    if method == "libra":
        assert layout.edge_counts.max() / layout.edge_counts.mean() <= 1.05


def test_single_partition_holds_everything(small_ds, tmp_path):
    layout = write_dir(small_ds, tmp_path / "one", 1)
    assert np.all(layout.part == 0) and np.all(layout.root == 0)
    assert partition.verify(tmp_path / "one", small_ds.graph.edges()) == []
    part = partition.load(tmp_path / "one", 0)
    np.testing.assert_array_equal(part.global_ids, np.arange(small_ds.num_nodes))
    assert len(part.leaf_root_local) == 0


# ---- 4. HDRF -----------------------------------------------------------------------------------
@pytest.mark.parametrize("keep_pairs", [None, True, False])
def test_hdrf_assigns_every_edge_once_and_keeps_pairs(keep_pairs):
    g = sym_graph(seed=2, n=80, e=400)
    calls = []
    part = assign_edges(g.indptr, g.indices, 4, "hdrf", seed=1, keep_pairs=keep_pairs,
                        progress=calls.append)
    assert part.dtype == np.int32 and part.shape == (g.num_edges,)
    assert part.min() >= 0 and part.max() < 4
    assert sum(calls) == g.num_edges
    together = np.array_equal(part, part[reverse_by_keys(g)])
    assert together == (keep_pairs is not False)
    check_layout(g, vertex_cut(g, 4, "hdrf", seed=1, keep_pairs=keep_pairs))


def test_hdrf_is_deterministic_per_seed():
    g = sym_graph(seed=4)
    runs = {seed: assign_edges(g.indptr, g.indices, 5, "hdrf", seed=seed) for seed in range(4)}
    for seed, part in runs.items():
        np.testing.assert_array_equal(assign_edges(g.indptr, g.indices, 5, "hdrf", seed=seed),
                                      part)
    assert len({part.tobytes() for part in runs.values()}) > 1


def test_hdrf_weights_set_the_shares_and_equal_weights_change_nothing(rmat_ds):
    g = rmat_ds.graph
    plain = assign_edges(g.indptr, g.indices, 4, "hdrf", seed=2)
    np.testing.assert_array_equal(
        assign_edges(g.indptr, g.indices, 4, "hdrf", seed=2, weights=[3.0] * 4), plain)
    weights = np.array([1.0, 1.0, 2.0, 4.0])
    part = assign_edges(g.indptr, g.indices, 4, "hdrf", seed=2, weights=weights)
    share = np.bincount(part, minlength=4) / len(part)
    np.testing.assert_allclose(share, weights / weights.sum(), rtol=0.05)


@pytest.mark.parametrize("num_parts", [4, 8])
def test_hdrf_balances_edges_and_replicates_less_than_random(rmat_ds, num_parts):
    g = rmat_ds.graph
    stats = {m: stats_of(vertex_cut(g, num_parts, m, seed=0)) for m in ("hdrf", "random")}
    assert stats["hdrf"]["edge_balance"] <= 1.05
    assert 1.0 < stats["hdrf"]["replication_factor"] < stats["random"]["replication_factor"]


def test_hdrf_lambda_trades_replication_for_balance(rmat_ds):
    # lambda 0: only the cap keeps the loads level; a large lambda levels them at every step
    g = rmat_ds.graph
    rf = {lam: stats_of(vertex_cut(g, 4, "hdrf", hdrf_lambda=lam))["replication_factor"]
          for lam in (0.0, 20.0)}
    assert rf[0.0] < rf[20.0]


def test_libra_default_degree_order_replicates_less_than_random_order(rmat_ds):
    g = rmat_ds.graph
    rf = {order: stats_of(vertex_cut(g, 8, "libra", order=order))["replication_factor"]
          for order in ("degree", "random")}
    assert rf["degree"] < rf["random"], rf


@pytest.mark.parametrize("nodes, per_node", [(2, 2), (3, 2), (2, 3)])
def test_a_two_level_cut_cuts_across_nodes_then_within_each(random_graph, nodes, per_node):
    """Rank ``n K + k`` holds node ``n``'s ``k``-th part: the edges cut into the nodes as
    a flat cut into N parts would, then each node's edges (its own CSR, rows in order) cut
    into its K ranks; weights go to the nodes summed and to the ranks as given."""
    from partition.vertex_cut import two_level_parts

    g, *_ = random_graph(seed=2, n=120, e=900, isolated=0)
    P = nodes * per_node
    weights = np.arange(1, P + 1, dtype=float)
    part = two_level_parts(g, P, per_node, "libra", 3, None, None, None, weights, 1.0)
    node = assign_edges(g.indptr, g.indices, nodes, "libra", 3,
                        weights=weights.reshape(nodes, per_node).sum(axis=1))
    np.testing.assert_array_equal(part // per_node, node)
    rows = np.repeat(np.arange(g.num_nodes), np.diff(g.indptr))
    for n in range(nodes):
        mine = np.flatnonzero(node == n)
        indptr = np.concatenate([[0], np.cumsum(np.bincount(rows[mine],
                                                            minlength=g.num_nodes))])
        np.testing.assert_array_equal(part[mine] % per_node, assign_edges(
            indptr, g.indices[mine], per_node, "libra", 3,
            weights=weights[n * per_node:(n + 1) * per_node]))
    layout = vertex_cut(g, P, "libra", seed=3, ranks_per_node=per_node)
    assert layout.num_parts == P and layout.edge_counts.sum() == g.num_edges
    with pytest.raises(PartitionError, match="does not divide --parts"):
        vertex_cut(g, P + 1, "libra", ranks_per_node=per_node)


# ---- 5. neighbourhood expansion ----------------------------------------------------------------
def components_graph(sizes, seed=0):
    """Disjoint rings with one chord per vertex (every component 2 n undirected edges), the
    vertex ids shuffled across components."""
    rng = np.random.default_rng(seed)
    src, dst, start = [], [], 0
    for n in sizes:
        ids = np.arange(start, start + n)
        src += [ids, ids]
        dst += [np.roll(ids, 1), np.roll(ids, n // 2 - 1)]
        start += n
    perm = rng.permutation(start)
    return CSRGraph.from_edges_symmetric(perm[np.concatenate(src)], perm[np.concatenate(dst)],
                                         start)


@pytest.mark.parametrize("seed", range(3))
def test_ne_grows_each_of_equal_components_into_a_partition_of_its_own(seed):
    """Four components of equal size and four partitions: each region grows over one whole
    component and stops at its capacity, so nothing is replicated (Libra's stream splits
    some of them)."""
    g = components_graph([40, 40, 40, 40], seed)
    layout = vertex_cut(g, 4, "ne", seed=seed)
    check_layout(g, layout)
    assert layout.clones().max() == 1
    np.testing.assert_array_equal(layout.edge_counts, [g.num_edges // 4] * 4)


def test_ne_stops_a_partition_at_its_capacity_even_inside_a_hub():
    """A star's hub would carry its whole neighbourhood into the first partition; growth
    stops at the capacity instead, also in the middle of a vertex's edges."""
    g = CSRGraph.from_edges_symmetric(np.zeros(99, np.int64), np.arange(1, 100), 100)
    for weights in (None, [1, 2, 1]):
        part = assign_edges(g.indptr, g.indices, 3, "ne", seed=0, weights=weights)
        shares = np.full(3, 1 / 3) if weights is None else np.array(weights) / 4
        # a pair of entries is the unit of growth: at most one pair over the capacity
        assert np.all(np.bincount(part, minlength=3) <= np.ceil(shares * g.num_edges) + 2)


def community_graph(seed=0, blocks=8, size=60):
    rng = np.random.default_rng(seed)
    n = blocks * size
    block = np.repeat(np.arange(blocks), size)
    src, dst = rng.integers(0, n, 12 * n), rng.integers(0, n, 12 * n)
    keep = (block[src] == block[dst]) | (rng.random(len(src)) < 0.05)
    return CSRGraph.from_edges_symmetric(src[keep], dst[keep], n)


@pytest.mark.parametrize("num_parts", [4, 8])
def test_ne_replicates_less_than_libra_on_communities_and_rmat(rmat_ds, num_parts):
    for g, margin in ((community_graph(), 0.9), (rmat_ds.graph, 0.95)):
        rf = {}
        for method in ("libra", "ne"):
            layout = vertex_cut(g, num_parts, method, seed=0)
            check_layout(g, layout)
            rf[method] = stats_of(layout)["replication_factor"]
        assert stats_of(layout)["edge_balance"] <= 1.01  # ne's
        assert rf["ne"] < margin * rf["libra"], rf


def test_ne_on_a_directed_graph_assigns_each_entry_once(rmat_ds):
    """Without pairs each CSR entry is an item of its own, read as undirected for growth."""
    g = rmat_ds.graph
    part = assign_edges(g.indptr, g.indices, 4, "ne", seed=2, keep_pairs=False)
    assert part.min() == 0 and part.max() == 3
    assert np.bincount(part).max() <= np.ceil(g.num_edges / 4) + 1


def test_vertex_balancing_moves_leaves_to_their_hubs_and_hub_edges_back():
    """Partition 1 holds two hubs and 200 leaves of hub 0, partition 0 the two hubs and as
    many hub-to-hub edges: the leaves move to partition 0 (which holds their hub) and
    hub-to-hub edges back to partition 1 (which holds both hubs), until both hold about
    half the vertices, with no clone added and no partition past its capacity."""
    from partition.expand import _adjacency, balance_vertices

    leaves = np.arange(2, 202)
    a = np.concatenate([np.zeros(201, np.int32), [0], leaves]).astype(np.int32)
    b = np.concatenate([np.ones(201, np.int32), [1], np.zeros(200)]).astype(np.int32)
    part = np.repeat(np.array([0, 1], np.int32), [201, 201])
    capacity = np.array([201, 201], np.int64)
    adjacency = _adjacency(202, a, b, np.int32(0))
    moved, back = balance_vertices(a, b, 1, part, capacity, *adjacency)
    holders = [set(a[part == p]) | set(b[part == p]) for p in range(2)]
    assert moved >= 95 and back >= 95
    assert abs(len(holders[0]) - len(holders[1])) <= 6
    assert len(holders[0]) + len(holders[1]) <= 204  # 2 + 202 before: no clone added
    assert np.bincount(part, minlength=2).tolist() == [201, 201]


def test_ne_balances_vertices_on_rmat_without_more_clones(rmat_ds, monkeypatch):
    """On R-MAT NE's last partition holds the periphery; the moves bring the partitions'
    vertex counts closer at the same replication and within the grown capacities."""
    import partition.expand as expand

    g = rmat_ds.graph
    counts = {}
    for rounds in (0, expand.MOVE_ROUNDS):
        monkeypatch.setattr(expand, "MOVE_ROUNDS", rounds)
        part = assign_edges(g.indptr, g.indices, 4, "ne", seed=0)
        assert np.bincount(part).max() <= np.ceil(g.num_edges / 4) + 2
        member = membership(g.indptr, g.indices, part, 4)[:, 0]
        counts[rounds] = np.array([np.count_nonzero(member >> np.uint64(p) & np.uint64(1))
                                   for p in range(4)])
    before, after = counts[0], counts[expand.MOVE_ROUNDS]
    assert after.max() / after.mean() < 0.9 * before.max() / before.mean(), counts
    assert after.sum() <= before.sum()  # the clones


def test_ne_takes_no_stream_order(small_ds, tmp_path):
    with pytest.raises(PartitionError, match="--order degree would change nothing with "
                                             "--method ne"):
        from partition.cli import check_options
        check_options(tmp_path / "p", 2, 0, None, False, "ne", "degree")
