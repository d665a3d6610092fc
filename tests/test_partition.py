"""The partition package: Libra/random/DBH vertex-cuts, layout (roots, isolated vertices,
split tables), the on-disk format (round trip, atomic writes, verify) and the CLI.

Hand-made Libra cases build a CSR whose stream order is known: with ``order="given"`` the
entries are streamed row by row (destination), columns as stored, so a list of edges whose
destinations never decrease is streamed exactly in list order (see :func:`stream_csr`).
"""
import json
import shutil

import numpy as np
import pytest

import partition
from distgnn.datasets import load as load_dataset
from distgnn.graph import CSRGraph, NodeDataset
from partition.assign import assign_edges, membership, reverse_positions
from partition.cli import main as cli_main
from partition.format import (FORMAT_VERSION, PART_FILES, PartitionFormatError, part_dir,
                              sha256, write_dataset, write_partitions)
from partition.stats import counts_from_layout, summarize
from partition.vertex_cut import PartitionError, vertex_cut


RMAT = "rmat:scale=12,edge_factor=8,features=4,classes=3,seed=1"
SMALL_RMAT = "rmat:scale=8,edge_factor=4,features=3,classes=2,seed=2"
METHODS = ("libra", "random", "dbh")


# ---- helpers ------------------------------------------------------------------------------------
def stream_csr(edges, num_nodes):
    """``(indptr, indices)`` streamed by Libra (order "given") exactly in ``edges`` order."""
    src = np.array([s for s, _ in edges], np.int64)
    dst = np.array([d for _, d in edges], np.int64)
    assert np.all(np.diff(dst) >= 0), "destinations must not decrease"
    indptr = np.zeros(num_nodes + 1, np.int64)
    np.cumsum(np.bincount(dst, minlength=num_nodes), out=indptr[1:])
    return indptr, src.astype(np.int32)


def libra(edges, num_nodes, num_parts, seed):
    indptr, indices = stream_csr(edges, num_nodes)
    part = assign_edges(indptr, indices, num_parts, method="libra", seed=seed, order="given",
                        keep_pairs=False)
    assert part.dtype == np.int32 and part.shape == (len(edges),)
    return part, indptr, indices


def partitions_of(member_row, num_parts):
    return {p for p in range(num_parts) if (int(member_row[p >> 6]) >> (p & 63)) & 1}


def edge_keys(src, dst, n):
    return np.asarray(dst, np.int64) * n + np.asarray(src, np.int64)


def write_dir(ds, out, num_parts, method="libra", seed=0, roots="balanced", order="random",
              keep_pairs=None, force=False):
    """Partition ``ds`` and write it to ``out`` the way the CLI does; returns the layout."""
    graph = ds.graph
    layout = vertex_cut(graph, num_parts, method, seed, order, roots, keep_pairs)
    write_dataset(out, ds, layout, {"method": method, "seed": seed}, force=force)
    return layout


def load_all(directory, mmap=True):
    meta = partition.read_meta(directory)
    return [partition.load(directory, p, mmap=mmap) for p in range(meta["num_parts"])]


def check_layout(graph, layout):
    """Edge partitions in range; vertex sets = endpoints (+ isolated, each once); roots."""
    P, n = layout.num_parts, graph.num_nodes
    src, dst = graph.edges()
    part = layout.part
    assert part.shape == (graph.num_edges,)
    assert part.min(initial=0) >= 0 and part.max(initial=0) < P
    np.testing.assert_array_equal(layout.edge_counts, np.bincount(part, minlength=P))
    holds = np.zeros((P, n), bool)
    holds[part, src] = True
    holds[part, dst] = True
    placed = np.zeros((P, n), bool)
    for p in range(P):
        ids = layout.vertices(p)
        assert np.all(np.diff(ids) > 0)
        placed[p, ids] = True
    isolated = (graph.in_degrees() + graph.out_degrees()) == 0
    np.testing.assert_array_equal(placed[:, ~isolated], holds[:, ~isolated])
    np.testing.assert_array_equal(placed[:, isolated].sum(axis=0), 1)
    # every vertex has exactly one root, on a partition holding it, at the right local id
    assert placed[layout.root, np.arange(n)].all()
    for p in range(P):
        ids = layout.vertices(p)
        mine = layout.root[ids] == p
        np.testing.assert_array_equal(layout.root_local[ids[mine]], np.flatnonzero(mine))
    np.testing.assert_array_equal(layout.clones(), placed.sum(axis=0))


def stats_of(layout):
    return summarize(counts_from_layout(layout), layout.num_nodes,
                     int(np.count_nonzero(layout.clones() > 1)))


def run_cli(argv):
    try:
        return cli_main([str(a) for a in argv])
    except SystemExit as e:  # argparse errors exit from inside main
        return e.code


def assert_one_line_error(rc, err, *fragments):
    assert rc == 2, err
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("distgnn-partition"), err
    assert "Traceback" not in err
    for fragment in fragments:
        assert fragment in lines[0], err


@pytest.fixture(scope="module")
def rmat_ds():
    return load_dataset(RMAT)


@pytest.fixture(scope="module")
def cora_ds():
    return load_dataset("cora")


@pytest.fixture(scope="module")
def small_ds():
    return load_dataset(SMALL_RMAT)


@pytest.fixture(scope="module")
def datasets(rmat_ds, cora_ds):
    return {"rmat": rmat_ds, "cora": cora_ds}


@pytest.fixture(scope="module")
def good_dir(tmp_path_factory, small_ds):
    """A valid 3-partition directory of a small R-MAT (copy it before damaging it)."""
    out = tmp_path_factory.mktemp("good") / "parts"
    write_dir(small_ds, out, 3, "libra", seed=5)
    return out


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


# ---- 2. keep_pairs --------------------------------------------------------------------------------
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
    assert g.is_symmetric()
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
    assert not g.is_symmetric()
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
    return CSRGraph.from_edges(src, dst, n).deduplicate()


# (A pure DAG, pair=False, is wrongly accepted too, but only when uninitialised memory
# happens to hold a non-negative number; each case below fails on every run.)
ONE_WAY = [(6, 1, 0, True), (20, 40, 1, True), (300, 3000, 2, True), (2000, 40000, 3, True)]


@pytest.mark.parametrize("n, e, seed, pair", ONE_WAY)
def test_reverse_positions_is_none_when_an_edge_has_no_reverse(n, e, seed, pair):
    g = one_way_graph(n, e, seed, pair)
    assert g.num_edges >= 3 and not g.is_symmetric()
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


# ---- 4. isolated vertices ---------------------------------------------------------------------
def graph_with_isolated(n=200, live=12, seed=0):
    rng = np.random.default_rng(seed)
    s, d = rng.integers(0, live, 30), rng.integers(0, live, 30)
    keep = s != d
    return CSRGraph.from_edges_symmetric(s[keep], d[keep], n)


@pytest.mark.parametrize("method", METHODS)
def test_isolated_vertices_are_placed_once_as_roots_on_the_emptiest_partitions(method):
    g = graph_with_isolated()
    P = 4
    layout = vertex_cut(g, P, method, seed=2)
    check_layout(g, layout)
    isolated = np.flatnonzero(g.in_degrees() + g.out_degrees() == 0)
    assert len(isolated) >= 180
    holder = np.full(g.num_nodes, -1)
    count = np.zeros(P, np.int64)
    for p in range(P):
        ids = layout.vertices(p)
        holder[ids] = p
        count[p] = len(ids)
    np.testing.assert_array_equal(layout.clones()[isolated], 1)
    np.testing.assert_array_equal(layout.root[isolated], holder[isolated])
    # replay: each isolated vertex (in id order) joined a partition with the fewest vertices
    replay = count.copy()
    np.subtract.at(replay, holder[isolated], 1)
    for v in isolated:
        assert replay[holder[v]] == replay.min(), v
        replay[holder[v]] += 1
    assert count.max() - count.min() <= 1


def test_isolated_vertices_are_in_the_files(tmp_path):
    g = graph_with_isolated(n=60, live=8, seed=1)
    n = g.num_nodes
    rng = np.random.default_rng(0)
    train = rng.random(n) < 0.5
    ds = NodeDataset(g, rng.standard_normal((n, 3)).astype(np.float32), rng.integers(0, 2, n),
                     train, np.zeros(n, bool), ~train, name="iso")
    write_dir(ds, tmp_path / "iso", 3, "libra", seed=0)
    assert partition.verify(tmp_path / "iso", g.edges()) == []
    seen = np.zeros(n, np.int64)
    for part in load_all(tmp_path / "iso"):
        ids = np.asarray(part.global_ids)
        seen[ids] += 1
        iso = (g.in_degrees() + g.out_degrees())[ids] == 0
        assert np.all(np.asarray(part.root_rank)[iso] == part.rank)
        np.testing.assert_array_equal(np.asarray(part.train_mask)[iso], train[ids][iso])
    np.testing.assert_array_equal(seen[(g.in_degrees() + g.out_degrees()) == 0], 1)


# ---- 5. roots and masks ---------------------------------------------------------------------------
@pytest.mark.parametrize("num_parts", [4, 8])
def test_balanced_roots_are_at_least_as_balanced_as_random(rmat_ds, num_parts):
    g = rmat_ds.graph
    balance = {}
    for roots in ("balanced", "random"):
        layout = vertex_cut(g, num_parts, "libra", seed=4, roots=roots)
        check_layout(g, layout)
        owned = np.bincount(layout.root, minlength=num_parts)
        assert owned.sum() == g.num_nodes
        balance[roots] = stats_of(layout)["root_balance"]
        assert balance[roots] == pytest.approx(owned.max() / owned.mean())
    assert balance["balanced"] < balance["random"], balance
    assert balance["balanced"] <= 1.01, balance


def test_roots_random_differs_from_balanced_only_in_roots(rmat_ds):
    g = rmat_ds.graph
    a = vertex_cut(g, 4, "libra", seed=4, roots="balanced")
    b = vertex_cut(g, 4, "libra", seed=4, roots="random")
    np.testing.assert_array_equal(a.part, b.part)
    assert np.any(a.root != b.root)
    with pytest.raises(PartitionError, match="roots"):
        vertex_cut(g, 4, roots="largest")


@pytest.mark.parametrize("name", ["rmat", "cora"])
def test_masks_are_true_only_at_roots(datasets, name, tmp_path):
    ds = datasets[name]
    write_dir(ds, tmp_path / "m", 4, "libra", seed=1)
    roots = np.zeros(ds.num_nodes, np.int64)
    for mask in ("train_mask", "val_mask", "test_mask"):
        hits, total = [], 0
        for part in load_all(tmp_path / "m"):
            m = np.asarray(getattr(part, mask))
            assert m.dtype == np.bool_
            is_root = np.asarray(part.root_rank) == part.rank
            assert not np.any(m & ~is_root)
            ids = np.asarray(part.global_ids)
            np.testing.assert_array_equal(m[is_root], getattr(ds, mask)[ids[is_root]])
            hits.append(ids[m])
            total += int(m.sum())
            if mask == "train_mask":
                roots[ids[is_root]] += 1
        assert total == int(getattr(ds, mask).sum())
        np.testing.assert_array_equal(np.sort(np.concatenate(hits)),
                                      np.flatnonzero(getattr(ds, mask)))
    np.testing.assert_array_equal(roots, 1)


# ---- 6. split tables --------------------------------------------------------------------------
@pytest.mark.parametrize("roots", ["balanced", "random"])
def test_split_tables_mirror_each_other(rmat_ds, roots, tmp_path):
    layout = write_dir(rmat_ds, tmp_path / "s", 4, "libra", seed=3, roots=roots)
    parts = load_all(tmp_path / "s")
    P = len(parts)
    clones = layout.clones()
    for p in parts:
        ptr = np.asarray(p.leaf_ptr)
        assert ptr.shape == (P + 1,) and ptr[0] == 0 and ptr[-1] == len(p.leaf_root_local)
        assert np.all(np.diff(ptr) >= 0)
        assert ptr[p.rank + 1] == ptr[p.rank]  # no table for itself
        p_ids = np.asarray(p.global_ids)
        # one entry per (root here, leaf elsewhere)
        here = np.asarray(p.root_rank) == p.rank
        assert len(p.leaf_root_local) == int((clones[p_ids[here]] - 1).sum())
        for q in parts:
            if q.rank == p.rank:
                continue
            q_ids = np.asarray(q.global_ids)
            leaves = np.flatnonzero(np.asarray(q.root_rank) == p.rank)  # q's local order
            table_root = np.asarray(p.leaf_root_local[ptr[q.rank]:ptr[q.rank + 1]])
            table_leaf = np.asarray(p.leaf_remote_local[ptr[q.rank]:ptr[q.rank + 1]])
            np.testing.assert_array_equal(table_leaf, leaves)
            np.testing.assert_array_equal(table_root, np.asarray(q.root_local)[leaves])
            np.testing.assert_array_equal(p_ids[table_root], q_ids[table_leaf])
            assert np.all(np.diff(q_ids[table_leaf]) > 0)  # increasing global id
            assert np.all(np.asarray(p.root_rank)[table_root] == p.rank)
    # every leaf's root pointer names the same global vertex
    for q in parts:
        q_ids = np.asarray(q.global_ids)
        rr, rl = np.asarray(q.root_rank), np.asarray(q.root_local)
        for p in parts:
            sel = rr == p.rank
            np.testing.assert_array_equal(np.asarray(p.global_ids)[rl[sel]], q_ids[sel])
    assert partition.verify(tmp_path / "s") == []


# ---- 7. determinism ------------------------------------------------------------------------------
@pytest.mark.parametrize("method", METHODS)
def test_same_seed_same_files_other_seed_differs(small_ds, method, tmp_path):
    write_dir(small_ds, tmp_path / "a", 4, method, seed=11)
    write_dir(small_ds, tmp_path / "b", 4, method, seed=11)
    write_dir(small_ds, tmp_path / "c", 4, method, seed=12)
    a, b, c = (load_all(tmp_path / d) for d in "abc")
    differs = False
    for pa, pb, pc in zip(a, b, c):
        for name in PART_FILES:
            if name in ("indptr", "indices"):  # the local CSR, checked below
                continue
            xa, xb = np.asarray(getattr(pa, name)), np.asarray(getattr(pb, name))
            assert xa.dtype == xb.dtype and xa.shape == xb.shape, name
            assert xa.tobytes() == xb.tobytes(), name
            xc = np.asarray(getattr(pc, name))
            differs |= xa.shape != xc.shape or xa.tobytes() != xc.tobytes()
        for name in ("indptr", "indices"):
            assert np.asarray(getattr(pa.graph, name)).tobytes() == \
                np.asarray(getattr(pb.graph, name)).tobytes()
    assert differs
    files_a = partition.read_meta(tmp_path / "a")["files"]
    assert files_a == partition.read_meta(tmp_path / "b")["files"]
    assert files_a != partition.read_meta(tmp_path / "c")["files"]


@pytest.mark.parametrize("method", METHODS)
def test_assignment_is_deterministic_under_seed(rmat_ds, method):
    g = rmat_ds.graph
    first = assign_edges(g.indptr, g.indices, 8, method, seed=21)
    np.testing.assert_array_equal(first, assign_edges(g.indptr, g.indices, 8, method, seed=21))
    assert np.any(first != assign_edges(g.indptr, g.indices, 8, method, seed=22))


# ---- 8. format round trip -----------------------------------------------------------------------
def test_round_trip_gives_back_what_was_written(cora_ds, tmp_path):
    ds, g = cora_ds, cora_ds.graph
    layout = write_dir(ds, tmp_path / "rt", 3, "libra", seed=2)
    src, dst = g.edges()
    keys = edge_keys(src, dst, g.num_nodes)
    in_degree = g.in_degrees()
    meta = partition.read_meta(tmp_path / "rt")
    assert meta["format_version"] == FORMAT_VERSION
    assert (meta["num_parts"], meta["num_nodes"], meta["num_edges"]) == (3, g.num_nodes,
                                                                        g.num_edges)
    for p, part in enumerate(load_all(tmp_path / "rt")):
        ids = np.asarray(part.global_ids)
        assert part.rank == p and part.num_parts == 3 and part.num_nodes == len(ids)
        np.testing.assert_array_equal(ids, layout.vertices(p))
        assert part.x.dtype == np.float32
        np.testing.assert_array_equal(part.x, ds.x[ids])
        np.testing.assert_array_equal(part.y, ds.y[ids])
        np.testing.assert_array_equal(part.in_degree, in_degree[ids])
        np.testing.assert_array_equal(part.root_rank, layout.root[ids])
        np.testing.assert_array_equal(part.root_local, layout.root_local[ids])
        assert part.graph.num_nodes == len(ids) and part.graph.edge_weight is None
        lsrc, ldst = part.graph.edges()
        local = edge_keys(ids[lsrc], ids[ldst], g.num_nodes)
        np.testing.assert_array_equal(local, keys[layout.part == p])  # CSR order kept
        # every local entry's destination row lies within this partition's vertices
        assert np.all(np.diff(np.asarray(part.graph.indptr)) <= in_degree[ids])


def test_weighted_graph_round_trip(random_graph, tmp_path):
    g, *_ = random_graph(seed=3, n=50, e=300, weighted=True, hub_degree=30, duplicates=0)
    g = CSRGraph.from_edges(*g.edges(), g.num_nodes, g.edge_weight).deduplicate()
    n = g.num_nodes
    rng = np.random.default_rng(0)
    ds = NodeDataset(g, rng.standard_normal((n, 2)).astype(np.float32), rng.integers(0, 3, n),
                     rng.random(n) < 0.3, np.zeros(n, bool), np.zeros(n, bool), name="w")
    layout = write_dir(ds, tmp_path / "w", 3, "libra", seed=0, keep_pairs=False)
    check_layout(g, layout)
    src, dst = g.edges()
    assert partition.verify(tmp_path / "w", edges=(src, dst)) == []
    got_keys, got_w = [], []
    for p, part in enumerate(load_all(tmp_path / "w")):
        assert (tmp_path / "w" / part_dir(p) / "edge_weight.npy").exists()
        ids = np.asarray(part.global_ids)
        lsrc, ldst = part.graph.edges()
        got_keys.append(edge_keys(ids[lsrc], ids[ldst], n))
        got_w.append(np.asarray(part.graph.edge_weight))
    got_keys, got_w = np.concatenate(got_keys), np.concatenate(got_w)
    want_keys, want_w = edge_keys(src, dst, n), g.edge_weight
    o1, o2 = np.lexsort((got_w, got_keys)), np.lexsort((want_w, want_keys))
    np.testing.assert_array_equal(got_keys[o1], want_keys[o2])
    np.testing.assert_array_equal(got_w[o1], want_w[o2])


def test_arrays_are_memory_mapped_and_read_only(good_dir):
    part = partition.load(good_dir, 1, mmap=True)
    for name in PART_FILES:
        if name in ("indptr", "indices"):
            continue
        arr = getattr(part, name)
        assert isinstance(arr, np.memmap), name
        assert not arr.flags.writeable, name
    for arr in (part.graph.indptr, part.graph.indices):
        assert isinstance(arr, np.memmap) or isinstance(arr.base, np.memmap)
    eager = partition.load(good_dir, 1, mmap=False)
    assert not isinstance(eager.x, np.memmap)
    np.testing.assert_array_equal(eager.x, part.x)
    np.testing.assert_array_equal(eager.graph.indices, part.graph.indices)


def test_no_file_is_a_pickle(good_dir):
    files = [f for f in good_dir.rglob("*") if f.is_file()]
    meta = json.loads((good_dir / "meta.json").read_text())
    assert {str(f.relative_to(good_dir)) for f in files} == set(meta["files"]) | {"meta.json"}
    for f in files:
        if f.name == "meta.json":
            continue
        assert f.suffix == ".npy"
        arr = np.load(f, allow_pickle=False)
        assert arr.dtype != object and not arr.dtype.hasobject, f


def test_load_rejects_out_of_range_rank_and_non_partition_dir(good_dir, tmp_path):
    with pytest.raises(PartitionFormatError, match="rank"):
        partition.load(good_dir, 3)
    with pytest.raises(PartitionFormatError, match="meta.json"):
        partition.load(tmp_path, 0)


# ---- 9. verify catches damage ------------------------------------------------------------------
def truncate(d):
    f = d / part_dir(1) / "x.npy"
    f.write_bytes(f.read_bytes()[:-16])
    return ["x.npy", "truncated"]


def flip(d):
    f = d / part_dir(0) / "indices.npy"
    data = bytearray(f.read_bytes())
    data[-1] ^= 0xFF
    f.write_bytes(bytes(data))
    return ["indices.npy", "checksum"]


def drop_partition(d):
    shutil.rmtree(d / part_dir(2))
    return [part_dir(2), "missing"]


def wrong_version(d):
    meta = json.loads((d / "meta.json").read_text())
    meta["format_version"] = FORMAT_VERSION + 1
    (d / "meta.json").write_text(json.dumps(meta))
    return ["version"]


@pytest.mark.parametrize("damage", [truncate, flip, drop_partition, wrong_version])
def test_verify_catches_damage(good_dir, tmp_path, capsys, damage):
    d = tmp_path / "damaged"
    shutil.copytree(good_dir, d)
    fragments = damage(d)
    try:
        problems = partition.verify(d)
    except PartitionFormatError as e:
        problems = [str(e)]
    assert problems
    assert any(all(f in p for f in fragments) for p in problems), problems
    capsys.readouterr()
    rc = run_cli(["verify", d])
    out, err = capsys.readouterr()
    assert rc != 0
    assert err.strip() and "Traceback" not in err
    assert all(line.startswith("distgnn-partition verify") for line in err.strip().splitlines())
    assert any(all(f in line for f in fragments) for line in err.splitlines()), err
    assert "OK" not in out


def test_load_refuses_a_truncated_file(good_dir, tmp_path):
    d = tmp_path / "t"
    shutil.copytree(good_dir, d)
    truncate(d)
    partition.load(d, 0)  # other partitions still load
    for mmap in (True, False):
        with pytest.raises(PartitionFormatError, match="x.npy"):
            partition.load(d, 1, mmap=mmap)


def rewrite(d, rel, array):
    """Replace one array and fix its size and checksum in meta.json (a consistent lie)."""
    np.save(d / rel, array, allow_pickle=False)
    meta = json.loads((d / "meta.json").read_text())
    meta["files"][rel] = {"bytes": (d / rel).stat().st_size, "sha256": sha256(d / rel)}
    (d / "meta.json").write_text(json.dumps(meta))


def test_verify_catches_inconsistent_roots_and_edges(good_dir, small_ds, tmp_path):
    d = tmp_path / "roots"
    shutil.copytree(good_dir, d)
    rel = f"{part_dir(0)}/root_rank.npy"
    root_rank = np.load(d / rel).copy()
    root_rank[np.flatnonzero(root_rank == 0)[0]] = 1  # a root that claims to live on 1
    rewrite(d, rel, root_rank)
    assert partition.verify(d)

    d = tmp_path / "edges"
    shutil.copytree(good_dir, d)
    rel = f"{part_dir(1)}/indices.npy"
    indices = np.load(d / rel).copy()
    indices[0] = (indices[0] + 1) % np.load(d / f"{part_dir(1)}/global_ids.npy").shape[0]
    rewrite(d, rel, indices)
    problems = partition.verify(d, edges=small_ds.graph.edges())
    assert any("differs from the input" in p for p in problems), problems


def test_verify_cli_on_good_directory(good_dir, capsys):
    assert run_cli(["verify", good_dir]) == 0
    out, err = capsys.readouterr()
    assert "OK" in out and err == ""
    assert run_cli(["verify", good_dir, "--dataset", SMALL_RMAT]) == 0
    assert run_cli(["verify", good_dir, "--dataset", "cora"]) == 1  # other edges
    out, err = capsys.readouterr()
    assert "differs from the input" in err


# ---- 10. atomic writes ------------------------------------------------------------------------
def failing_parts(exc):
    yield 0, {"global_ids": np.arange(3), "x": np.zeros((3, 2), np.float32)}
    raise exc


@pytest.mark.parametrize("exc", [RuntimeError("disk on fire"), KeyboardInterrupt()])
def test_interrupted_write_leaves_nothing(tmp_path, exc):
    parent = tmp_path / "parent"
    parent.mkdir()
    out = parent / "parts"
    with pytest.raises(type(exc)):
        write_partitions(out, failing_parts(exc), {"num_parts": 2, "num_nodes": 3,
                                                   "num_edges": 0})
    assert not out.exists()
    assert list(parent.iterdir()) == []


def test_failed_forced_write_keeps_the_old_directory(good_dir, tmp_path):
    parent = tmp_path / "parent"
    parent.mkdir()
    out = parent / "parts"
    shutil.copytree(good_dir, out)
    before = {str(f.relative_to(out)): f.read_bytes() for f in out.rglob("*") if f.is_file()}
    with pytest.raises(RuntimeError):
        write_partitions(out, failing_parts(RuntimeError("boom")),
                         {"num_parts": 2, "num_nodes": 3, "num_edges": 0}, force=True)
    assert [f.name for f in parent.iterdir()] == ["parts"]
    after = {str(f.relative_to(out)): f.read_bytes() for f in out.rglob("*") if f.is_file()}
    assert after == before
    assert partition.verify(out) == []
    partition.load(out, 0)


def test_write_refuses_existing_directory_without_force(good_dir, small_ds, tmp_path):
    out = tmp_path / "parts"
    shutil.copytree(good_dir, out)
    with pytest.raises(PartitionFormatError, match="force"):
        write_dir(small_ds, out, 2)
    assert partition.read_meta(out)["num_parts"] == 3
    write_dir(small_ds, out, 2, force=True)
    assert partition.read_meta(out)["num_parts"] == 2
    assert partition.verify(out, small_ds.graph.edges()) == []
    assert [f.name for f in tmp_path.iterdir()] == ["parts"]


# ---- 11. the command line ------------------------------------------------------------------------
def test_cli_partitions_and_inspect_reports_the_same_statistics(tmp_path, capsys):
    out = tmp_path / "parts"
    rc = run_cli([SMALL_RMAT, "--parts", 3, "--out", out, "--seed", 4, "--no-progress",
                  "--json", tmp_path / "made.json"])
    made_out, err = capsys.readouterr()
    assert rc == 0, err
    assert "replication factor" in made_out
    assert partition.verify(out, load_dataset(SMALL_RMAT).graph.edges()) == []
    rc = run_cli(["inspect", out, "--json", tmp_path / "inspect.json"])
    text, err = capsys.readouterr()
    assert rc == 0, err
    stats = json.loads((tmp_path / "inspect.json").read_text())
    for key in ("replication_factor", "edge_balance", "root_balance", "split_fraction",
                "exchange_floats_per_layer", "predicted_memory_bytes", "per_rank"):
        assert key in stats, key
    assert len(stats["per_rank"]) == 3
    meta = partition.read_meta(out)
    assert stats["replication_factor"] == pytest.approx(meta["replication_factor"])
    assert f"replication factor {meta['replication_factor']:.3f}" in text
    made = json.loads((tmp_path / "made.json").read_text())
    for key in ("replication_factor", "edge_balance", "root_balance", "split_fraction"):
        assert made[key] == pytest.approx(stats[key]), key
    for key in ("exchange_floats_per_layer", "predicted_memory_bytes", "per_rank"):
        assert made[key] == stats[key], key


def test_cli_stats_match_the_layout(small_ds, tmp_path, capsys):
    out = tmp_path / "parts"
    assert run_cli([SMALL_RMAT, "--parts", 4, "--out", out, "--method", "dbh", "--seed", 1,
                    "--no-progress"]) == 0
    layout = vertex_cut(small_ds.graph, 4, "dbh", seed=1)
    assert run_cli(["inspect", out, "--json", tmp_path / "s.json"]) == 0
    stats = json.loads((tmp_path / "s.json").read_text())
    assert stats["replication_factor"] == pytest.approx(layout.clones().mean())
    np.testing.assert_array_equal([r["edges"] for r in stats["per_rank"]], layout.edge_counts)
    np.testing.assert_array_equal([r["roots"] for r in stats["per_rank"]],
                                  np.bincount(layout.root, minlength=4))


@pytest.mark.parametrize("parts, fragment", [(0, "--parts"), (-3, "--parts"),
                                             (20000, "larger than the number of edges")])
def test_cli_bad_parts(tmp_path, capsys, parts, fragment):
    rc = run_cli(["cora", "--parts", parts, "--out", tmp_path / "o", "--no-progress"])
    _, err = capsys.readouterr()
    assert_one_line_error(rc, err, fragment)
    assert not (tmp_path / "o").exists()


def test_cli_unreadable_dataset(tmp_path, capsys):
    missing = tmp_path / "nope.npz"
    rc = run_cli([missing, "--parts", 2, "--out", tmp_path / "o"])
    assert_one_line_error(rc, capsys.readouterr().err, str(missing))
    bad = tmp_path / "bad.npz"
    bad.write_bytes(np.random.default_rng(0).bytes(4096))
    rc = run_cli([bad, "--parts", 2, "--out", tmp_path / "o"])
    assert_one_line_error(rc, capsys.readouterr().err, str(bad))
    assert not (tmp_path / "o").exists()


def test_cli_bad_flags(tmp_path, capsys):
    rc = run_cli(["cora", "--parts", "many", "--out", tmp_path / "o"])
    assert_one_line_error(rc, capsys.readouterr().err, "--parts")
    rc = run_cli(["cora", "--parts", 2, "--out", tmp_path / "o", "--method", "metis"])
    assert_one_line_error(rc, capsys.readouterr().err, "--method")
    rc = run_cli(["cora", "--parts", 2])
    assert_one_line_error(rc, capsys.readouterr().err, "--out")


def test_cli_existing_out_needs_force(tmp_path, capsys):
    out = tmp_path / "parts"
    out.mkdir()
    (out / "keep.txt").write_text("mine")
    rc = run_cli([SMALL_RMAT, "--parts", 2, "--out", out, "--no-progress"])
    assert_one_line_error(rc, capsys.readouterr().err, str(out), "--force")
    assert (out / "keep.txt").read_text() == "mine"
    # --force replaces only partitions this tool wrote: the user's folder is kept
    rc = run_cli([SMALL_RMAT, "--parts", 2, "--out", out, "--no-progress", "--force"])
    assert_one_line_error(rc, capsys.readouterr().err, str(out), "not a partition directory")
    assert (out / "keep.txt").read_text() == "mine"
    (out / "keep.txt").unlink()
    out.rmdir()
    for parts in (2, 3):  # a first write, then one replacing it
        rc = run_cli([SMALL_RMAT, "--parts", parts, "--out", out, "--no-progress", "--force"])
        _, err = capsys.readouterr()
        assert rc == 0, err
    assert partition.verify(out) == [] and partition.read_meta(out)["num_parts"] == 3
    assert [f.name for f in tmp_path.iterdir()] == ["parts"]


def test_cli_keep_pairs_on_directed_graph_is_a_one_line_error(tmp_path, capsys):
    edges = tmp_path / "g.txt"
    edges.write_text("1 0\n2 0\n0 2\n3 1\n")  # 1 -> 0 has no reverse
    rc = run_cli([edges, "--parts", 2, "--out", tmp_path / "o", "--keep-pairs"])
    assert_one_line_error(rc, capsys.readouterr().err, "symmetric")


def test_cli_partitions_a_directed_edge_list(tmp_path, capsys):
    # one undirected pair (0 <-> 29), the other edges one way from a lower to a higher id
    lines = ["29 0", "0 29"] + [f"{i} {j}" for i in range(1, 29) for j in range(i + 1, 29)
                                if (i * 7 + j) % 3 == 0]
    edges = tmp_path / "directed.txt"
    edges.write_text("\n".join(lines) + "\n")
    dirs = {}
    for flag in ("--keep-pairs", "--no-keep-pairs", None):
        out = dirs[flag] = tmp_path / f"o{flag}"
        rc = run_cli([edges, "--parts", 3, "--out", out, "--no-progress", "--seed", 2]
                     + ([flag] if flag else []))
        _, err = capsys.readouterr()
        if flag == "--keep-pairs":  # asked for on a graph that is not symmetric
            assert_one_line_error(rc, err, "symmetric")
            continue
        assert rc == 0, err
        assert partition.verify(out, load_dataset(edges).graph.edges()) == []
    # the default is "keep pairs when symmetric": here the same cut as --no-keep-pairs
    for a, b in zip(load_all(dirs[None]), load_all(dirs["--no-keep-pairs"])):
        np.testing.assert_array_equal(a.global_ids, b.global_ids)
        np.testing.assert_array_equal(a.graph.indices, b.graph.indices)
        np.testing.assert_array_equal(a.graph.indptr, b.graph.indptr)


def test_cli_inspect_and_verify_of_missing_directory(tmp_path, capsys):
    rc = run_cli(["inspect", tmp_path / "none"])
    assert_one_line_error(rc, capsys.readouterr().err, "none")
    rc = run_cli(["verify", tmp_path / "none"])  # verify: 1 for every problem it finds
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 1 and len(err) == 1 and "none" in err[0], err


# ---- 12. weighted shares (--weights: unequal capacities) -----------------------------------------
def files_of(d):
    return {str(f.relative_to(d)): f.read_bytes() for f in d.rglob("*") if f.is_file()}


def test_write_estimate_covers_what_is_written(small_ds, tmp_path):
    layout = write_dir(small_ds, tmp_path / "parts", 3)
    written = sum(len(data) for data in files_of(tmp_path / "parts").values())
    estimate = partition.format.partition_bytes(counts_from_layout(layout),
                                                small_ds.num_features)
    assert written <= estimate <= written + 3 * len(PART_FILES) * partition.format.FILE_OVERHEAD


def test_write_refuses_a_filesystem_without_room(good_dir, small_ds, tmp_path, monkeypatch,
                                                 capsys):
    import types
    monkeypatch.setattr(shutil, "disk_usage", lambda path: types.SimpleNamespace(
        total=1 << 40, used=(1 << 40) - 4096, free=4096))
    out = tmp_path / "new" / "parts"
    with pytest.raises(PartitionFormatError) as info:
        write_dir(small_ds, out, 2)
    message = str(info.value)
    assert message.startswith(f"{out}: needs ") and "only 4.0 KiB free" in message
    assert "\n" not in message
    assert list(tmp_path.iterdir()) == []  # not even the parent directory
    rc = run_cli([SMALL_RMAT, "--parts", 2, "--out", out, "--no-progress"])
    assert_one_line_error(rc, capsys.readouterr().err, str(out), "free")
    assert list(tmp_path.iterdir()) == []
    old = tmp_path / "old"  # with --force, the directory being replaced stays as it was
    shutil.copytree(good_dir, old)
    before = files_of(old)
    rc = run_cli([SMALL_RMAT, "--parts", 2, "--out", old, "--no-progress", "--force"])
    assert_one_line_error(rc, capsys.readouterr().err, str(old), "free")
    assert files_of(old) == before and [f.name for f in tmp_path.iterdir()] == ["old"]


def test_full_disk_mid_write_keeps_the_previous_directory(good_dir, tmp_path):
    """A real failed write: the child process may write no file over 2 KiB (RLIMIT_FSIZE,
    with SIGXFSZ ignored, so that the write fails with EFBIG as on a full disk), which a
    partition's indices.npy exceeds after smaller files were written."""
    import subprocess
    import sys
    import textwrap
    out = tmp_path / "parts"
    shutil.copytree(good_dir, out)
    before = files_of(out)
    argv = [SMALL_RMAT, "--parts", "2", "--out", str(out), "--force", "--no-progress"]
    script = textwrap.dedent(f"""
        import resource, signal, sys
        import partition.format
        from partition.cli import main

        write = partition.format.write_partitions

        def limited(*args, **kwargs):  # loading and partitioning may write caches
            resource.setrlimit(resource.RLIMIT_FSIZE, (2048, 2048))
            signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
            return write(*args, **kwargs)

        partition.format.write_partitions = limited
        sys.exit(main({argv!r}))
    """)
    child = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                           timeout=300)
    assert child.returncode == 2, child.stderr
    lines = child.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in child.stderr, child.stderr
    assert lines[0].startswith(f"distgnn-partition: error: {out}: writing part-00000/"
                               "indices.npy failed: only 2048 of ")
    assert lines[0].endswith("; nothing was changed")
    assert files_of(out) == before
    assert partition.verify(out) == []
    assert [f.name for f in tmp_path.iterdir()] == ["parts"]  # no temporary directory left


# ---- 12. weighted shares (--weights: unequal capacities) -----------------------------------------
WEIGHTED_RMAT = "rmat:scale=13,edge_factor=16,features=1"


@pytest.fixture(scope="module")
def weighted_graph():
    return load_dataset(WEIGHTED_RMAT).graph


def shares_of(part, num_parts):
    return np.bincount(part, minlength=num_parts) / len(part)


@pytest.mark.parametrize("method, order", [("libra", "random"), ("libra", "given"),
                                           ("random", "random"), ("dbh", "random")])
@pytest.mark.parametrize("weights", [[1, 1, 1, 1], [2.5] * 4, [0.3] * 7, [1] * 70])
def test_equal_weights_give_exactly_the_unweighted_assignment(weighted_graph, method, order,
                                                              weights):
    g, P = weighted_graph, len(weights)
    plain = assign_edges(g.indptr, g.indices, P, method, seed=3, order=order)
    weighted = assign_edges(g.indptr, g.indices, P, method, seed=3, order=order,
                            weights=weights)
    np.testing.assert_array_equal(weighted, plain)


def test_equal_weights_give_the_same_layout_and_statistics(weighted_graph):
    plain = vertex_cut(weighted_graph, 4, seed=1)
    weighted = vertex_cut(weighted_graph, 4, seed=1, weights=np.full(4, 7.0))
    np.testing.assert_array_equal(weighted.part, plain.part)
    np.testing.assert_array_equal(weighted.root, plain.root)
    counts = counts_from_layout(plain)
    split = int(np.count_nonzero(plain.clones() > 1))
    # equal shares leave the edge balance bit-identical to the unweighted max / mean
    assert (summarize(counts, plain.num_nodes, split, shares=np.full(4, 0.25))
            ["edge_balance"] == stats_of(plain)["edge_balance"])


@pytest.mark.parametrize("method, tolerance", [("libra", 0.05), ("random", 0.05),
                                               ("dbh", 0.10)])
@pytest.mark.parametrize("weights", [[1, 1, 2, 4], [3, 1]])
def test_weighted_cut_achieves_the_requested_shares(weighted_graph, method, tolerance,
                                                    weights):
    # DBH hashes whole vertices (all edges of a low-degree endpoint together), so its
    # shares are coarser than the per-edge hash of "random"
    P, requested = len(weights), np.array(weights) / sum(weights)
    layout = vertex_cut(weighted_graph, P, method, seed=0, weights=weights)
    check_layout(weighted_graph, layout)
    achieved = shares_of(layout.part, P)
    assert np.all(np.abs(achieved - requested) / requested < tolerance), achieved
    stats = summarize(counts_from_layout(layout), layout.num_nodes,
                      int(np.count_nonzero(layout.clones() > 1)), shares=requested)
    assert stats["weighted_shares"]
    assert stats["edge_balance"] == pytest.approx(np.max(achieved / requested))
    assert stats["edge_shares"] == pytest.approx(achieved.tolist())
    assert stats["max_share_error"] == pytest.approx(
        np.max(np.abs(achieved - requested) / requested))
    for r, a, s in zip(stats["per_rank"], achieved, requested):
        assert r["requested_share"] == pytest.approx(s)
        assert r["edge_share"] == pytest.approx(a)
        assert r["share_error"] == pytest.approx((a - s) / s)


def test_weighted_libra_is_tight_and_dbh_keeps_low_degree_vertices_whole(weighted_graph):
    g = weighted_graph
    part = assign_edges(g.indptr, g.indices, 4, "libra", seed=0, weights=[1, 1, 2, 4])
    assert np.max(np.abs(shares_of(part, 4) - [0.125, 0.125, 0.25, 0.5]) / 0.125) < 0.01
    part = assign_edges(g.indptr, g.indices, 4, "dbh", seed=0, weights=[1, 1, 2, 4])
    src, dst = g.edges()
    degree = g.in_degrees() + g.out_degrees()
    low = np.where((degree[src] < degree[dst]) | ((degree[src] == degree[dst]) & (src <= dst)),
                   src, dst)
    order = np.argsort(low, kind="stable")
    same = np.diff(low[order]) == 0
    np.testing.assert_array_equal(part[order][1:][same], part[order][:-1][same])


@pytest.mark.parametrize("weights, fragment", [
    ([1, 1, 2], "one weight per partition"), ([1, 0, 2, 4], "> 0"), ([1, -1, 2, 4], "> 0"),
    ([1, np.nan, 2, 4], "finite"), ([1, np.inf, 2, 4], "finite"), (["a", 1, 2, 4], "numbers"),
    ([[1, 2], [3, 4]], "list")])
@pytest.mark.parametrize("method", METHODS)
def test_bad_weights_raise_partition_error(small_ds, weights, fragment, method):
    with pytest.raises(PartitionError, match="weights") as info:
        vertex_cut(small_ds.graph, 4, method, weights=weights)
    assert fragment in str(info.value) and "\n" not in str(info.value)
    g = small_ds.graph
    with pytest.raises(PartitionError, match="weights"):
        assign_edges(g.indptr, g.indices, 4, method, weights=weights)


@pytest.mark.parametrize("weights, fragment", [
    ("1,1,2", "one weight per partition"), ("1,1,2,4,8", "one weight per partition"),
    ("1,0,2,4", "> 0"), ("1,-1,2,4", "> 0"), ("1,nan,2,4", "finite"), ("1,inf,2,4", "finite"),
    ("1,a,2,4", "--weights"), ("1,,2,4", "--weights"), ("", "--weights")])
def test_cli_bad_weights_are_a_one_line_error(tmp_path, capsys, weights, fragment):
    rc = run_cli(["cora", "--parts", 4, "--out", tmp_path / "o", "--weights", weights,
                  "--no-progress"])
    out, err = capsys.readouterr()
    assert_one_line_error(rc, err, fragment)
    assert out == ""  # refused before the dataset is even loaded
    assert not (tmp_path / "o").exists()


def test_cli_weighted_partition_and_inspect_report_requested_and_achieved_shares(tmp_path,
                                                                                capsys):
    out = tmp_path / "parts"
    rc = run_cli([RMAT, "--parts", 4, "--out", out, "--weights", "1,1,2,4", "--no-progress",
                  "--json", tmp_path / "made.json"])
    made_text, err = capsys.readouterr()
    assert rc == 0, err
    assert partition.verify(out, load_dataset(RMAT).graph.edges()) == []
    meta = partition.read_meta(out)
    assert meta["weights"] == [1.0, 1.0, 2.0, 4.0]
    assert meta["requested_shares"] == [0.125, 0.125, 0.25, 0.5]
    rc = run_cli(["inspect", out, "--json", tmp_path / "inspect.json"])
    text, err = capsys.readouterr()
    assert rc == 0, err
    stats = json.loads((tmp_path / "inspect.json").read_text())
    made = json.loads((tmp_path / "made.json").read_text())
    assert stats == made
    assert stats["weighted_shares"] and stats["requested_shares"] == meta["requested_shares"]
    assert stats["edge_balance"] == pytest.approx(meta["edge_balance"])
    edges = np.array([r["edges"] for r in stats["per_rank"]])
    achieved = edges / edges.sum()
    np.testing.assert_allclose(stats["edge_shares"], achieved)
    assert stats["edge_balance"] == pytest.approx(np.max(achieved / meta["requested_shares"]))
    assert stats["max_share_error"] < 0.05
    assert "weights 1,1,2,4: requested edge shares 12.50 % 12.50 % 25.00 % 50.00 %" in text
    assert "edge balance" in text and "of capacity" in text
    header = next(line for line in text.splitlines() if "share req." in line)
    assert "achieved" in header and "rel. err" in header
    rows = text.splitlines()[text.splitlines().index(header) + 1:]
    for rank, (row, r) in enumerate(zip(rows, stats["per_rank"])):
        fields = row.split()
        assert fields[0] == str(rank)
        assert fields[-6:] == [f"{100 * r['requested_share']:.2f}", "%",
                               f"{100 * r['edge_share']:.2f}", "%",
                               f"{100 * r['share_error']:+.2f}", "%"]
    assert made_text.count("of capacity") == 1


def test_unweighted_directory_reports_equal_shares(good_dir, tmp_path, capsys):
    rc = run_cli(["inspect", good_dir, "--json", tmp_path / "s.json"])
    text, err = capsys.readouterr()
    assert rc == 0, err
    stats = json.loads((tmp_path / "s.json").read_text())
    P = stats["num_parts"]
    assert "weights" not in partition.read_meta(good_dir) and not stats["weighted_shares"]
    assert stats["requested_shares"] == [1 / P] * P
    assert "of capacity" not in text and "requested edge shares" not in text
    edges = np.array([r["edges"] for r in stats["per_rank"]])
    assert stats["edge_balance"] == pytest.approx(edges.max() / edges.mean())
    # the share error counts the emptiest partition too, the balance only the fullest
    assert stats["max_share_error"] == pytest.approx(np.max(np.abs(edges / edges.mean() - 1)))
    assert stats["max_share_error"] >= stats["edge_balance"] - 1 - 1e-12


@pytest.mark.parametrize("weights", [[1, 2], [1, 0, 1], "1,2,3", [1, None, 1], {"a": 1}])
def test_inspect_refuses_bad_weights_in_meta(good_dir, tmp_path, capsys, weights):
    d = tmp_path / "copy"
    shutil.copytree(good_dir, d)
    meta = json.loads((d / "meta.json").read_text())
    assert meta["num_parts"] == 3
    meta["weights"] = weights
    (d / "meta.json").write_text(json.dumps(meta))
    rc = run_cli(["inspect", d])
    assert_one_line_error(rc, capsys.readouterr().err, "meta.json", "weights")
