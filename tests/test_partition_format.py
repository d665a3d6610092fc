"""The on-disk format: round trip, verify catching damage, atomic writes."""
import json
import shutil

import numpy as np
import pytest

import partition
from distgnn.graph import CSRGraph, NodeDataset
from partition.format import (
    FORMAT_VERSION,
    PART_FILES,
    PartitionFormatError,
    part_dir,
    sha256,
    write_partitions,
)
from tests.helpers.graphs import dedup
from tests.helpers.partitions import (
    SMALL_RMAT,
    check_layout,
    edge_keys,
    load_all,
    run_cli,
    write_dir,
)


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


@pytest.mark.parametrize("order", ["degree", "rcm"])
def test_reordered_partitions_hold_the_same_graph_in_a_locality_order(cora_ds, tmp_path, order):
    """Version 2: local ids follow the order, the split tables follow the local ids, and
    every check of ``verify`` (edges against the input included) still passes."""
    g = cora_ds.graph
    d = tmp_path / order
    layout = write_dir(cora_ds, d, 3, "libra", seed=2, order_vertices=order)
    meta = partition.read_meta(d)
    assert meta["vertex_order"] == order == layout.vertex_order
    assert meta["vertex_order_requested"] == order
    assert partition.verify(d, g.edges()) == []
    src, dst = g.edges()
    keys = edge_keys(src, dst, g.num_nodes)
    for p, part in enumerate(load_all(d)):
        ids = np.asarray(part.global_ids)
        assert np.any(np.diff(ids) < 0), "a locality order is not the increasing one"
        np.testing.assert_array_equal(np.sort(ids), np.unique(ids))
        np.testing.assert_array_equal(part.x, cora_ds.x[ids])
        lsrc, ldst = part.graph.edges()
        np.testing.assert_array_equal(np.sort(edge_keys(ids[lsrc], ids[ldst], g.num_nodes)),
                                      np.sort(keys[layout.part == p]))
        indptr, indices = np.asarray(part.graph.indptr), np.asarray(part.graph.indices)
        rows = np.repeat(np.arange(part.num_nodes), np.diff(indptr))
        assert np.all((np.diff(indices) >= 0) | (np.diff(rows) > 0)), "rows stay sorted"
        if order == "degree":
            assert np.all(np.diff(np.bincount(indices, minlength=part.num_nodes)) <= 0)


def as_version_1(d):
    meta = json.loads((d / "meta.json").read_text())
    meta["format_version"] = 1
    for key in [k for k in meta if k.startswith("vertex_order")]:
        del meta[key]
    (d / "meta.json").write_text(json.dumps(meta))


def test_version_1_directories_still_load_and_verify(cora_ds, tmp_path):
    d = tmp_path / "v1"
    write_dir(cora_ds, d, 3, "libra", seed=2)
    as_version_1(d)
    assert partition.verify(d, cora_ds.graph.edges()) == []
    assert partition.read_meta(d)["format_version"] == 1
    assert np.all(np.diff(np.asarray(partition.load(d, 1).global_ids)) > 0)
    # version 1 promised increasing global ids: a reordered directory is not version 1
    reordered = tmp_path / "v1-reordered"
    write_dir(cora_ds, reordered, 3, "libra", seed=2, order_vertices="degree")
    as_version_1(reordered)
    with pytest.raises(PartitionFormatError, match="not increasing"):
        partition.load(reordered, 0)


def test_load_refuses_a_vertex_stored_twice(good_dir, tmp_path):
    d = tmp_path / "twice"
    shutil.copytree(good_dir, d)
    path = d / part_dir(0) / "global_ids.npy"
    ids = np.load(path)
    ids[1] = ids[0]
    np.save(path, ids)
    with pytest.raises(PartitionFormatError, match="repeats a vertex"):
        partition.load(d, 0)


@pytest.mark.parametrize("order", ["given", "rcm"])
def test_weighted_graph_round_trip(random_graph, tmp_path, order):
    g, *_ = random_graph(seed=3, n=50, e=300, weighted=True, hub_degree=30, duplicates=0)
    g = dedup(CSRGraph.from_edges(*g.edges(), g.num_nodes, g.edge_weight))
    n = g.num_nodes
    rng = np.random.default_rng(0)
    ds = NodeDataset(g, rng.standard_normal((n, 2)).astype(np.float32), rng.integers(0, 3, n),
                     rng.random(n) < 0.3, np.zeros(n, bool), np.zeros(n, bool), name="w")
    layout = write_dir(ds, tmp_path / "w", 3, "libra", seed=0, keep_pairs=False,
                       order_vertices=order)
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
