"""Layout of a vertex-cut: isolated vertices, roots and masks, split tables, determinism."""

import numpy as np
import pytest

import partition
from distgnn.data.graph import CSRGraph, NodeDataset
from distgnn.data.partitions import PART_FILES
from partition.assign import assign_edges
from partition.vertex_cut import PartitionError, vertex_cut
from tests.helpers.graphs import out_degrees
from tests.helpers.partitions import (
    METHODS,
    check_layout,
    load_all,
    stats_of,
    write_dir,
)


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
    isolated = np.flatnonzero(g.in_degrees() + out_degrees(g) == 0)
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
        iso = (g.in_degrees() + out_degrees(g))[ids] == 0
        assert np.all(np.asarray(part.root_rank)[iso] == part.rank)
        np.testing.assert_array_equal(np.asarray(part.train_mask)[iso], train[ids][iso])
    np.testing.assert_array_equal(seen[(g.in_degrees() + out_degrees(g)) == 0], 1)


# ---- 5. roots and masks --------------------------------------------------------------------------
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


def test_two_level_balanced_roots_even_out_the_node_links(rmat_ds):
    """On a cut across 4 nodes of 2 ranks, roots chosen node link first send fewer rows over
    the busiest link of the node-aware exchange than roots balanced by rank alone, on the
    same vertex sets, every root still a clone of its vertex."""
    from partition.assign import HDRF_LAMBDA
    from partition.layout import build_layout
    from partition.stats import clone_sets, node_links
    from partition.vertex_cut import two_level_parts

    g = rmat_ds.graph
    part = two_level_parts(g, 8, 2, "ne", 0, None, None, None, None, HDRF_LAMBDA)
    rows, held = {}, {}
    for per_node in (1, 2):
        layout = build_layout(g.indptr, g.indices, part, 8, "balanced", 0, None, per_node)
        check_layout(g, layout)
        held[per_node] = [layout.vertices(p) for p in range(8)]
        rows[per_node] = node_links(clone_sets(layout), 8, 2)["node_rows"]
    for a, b in zip(held[1], held[2]):
        np.testing.assert_array_equal(a, b)
    assert rows[2] < 0.8 * rows[1], rows


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


@pytest.mark.parametrize("num_parts", [2, 5])
def test_clone_sets_count_every_split_vertex_by_root_and_holders(rmat_ds, num_parts):
    """:func:`partition.stats.clone_sets` holds each split vertex once, under its root's
    partition and the set of partitions holding a clone, as counted vertex by vertex."""
    from partition.stats import clone_sets

    layout = vertex_cut(rmat_ds.graph, num_parts, "libra", seed=0)
    want = {}
    holders = [set() for _ in range(layout.num_nodes)]
    for p in range(num_parts):
        for v in layout.vertices(p):
            holders[v].add(p)
    for v, held in enumerate(holders):
        if len(held) > 1:
            key = (int(layout.root[v]), sum(1 << p for p in held))
            want[key] = want.get(key, 0) + 1
    got = clone_sets(layout)
    assert {(r, m): c for r, m, c in got} == want and len(got) == len(want)
    assert sum(c for _, _, c in got) == int(np.count_nonzero(layout.clones() > 1)) > 0
