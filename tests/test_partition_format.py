"""The on-disk format: round trip, verify catching damage, atomic writes."""
import json
import shutil

import numpy as np
import pytest

import partition
from distgnn.data.graph import CSRGraph, NodeDataset
from distgnn.data.partition_writing import write_partitions
from distgnn.data.partitions import (
    FORMAT_VERSION,
    PART_FILES,
    PartitionFormatError,
    fields_sha256,
    part_dir,
    row_digests,
    sha256,
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


# ---- 9b. each partition's own checks run at every load (so at training start-up) -------------
def leaf_and_root(d, p=1):
    """A leaf's and a root's local id on partition ``p``."""
    root_rank = np.load(d / part_dir(p) / "root_rank.npy")
    return int(np.flatnonzero(root_rank != p)[0]), int(np.flatnonzero(root_rank == p)[0])


def set_at(d, name, index, value, p=1):
    a = np.load(d / part_dir(p) / f"{name}.npy").copy()
    a[index] = value
    rewrite(d, f"{part_dir(p)}/{name}.npy", a)


def mask_at_leaf(d):
    set_at(d, "val_mask", leaf_and_root(d)[0], True)
    return "val_mask.npy: set at a leaf clone"


def root_elsewhere(d):
    root = leaf_and_root(d)[1]
    set_at(d, "root_local", root, root + 1)
    return "a root does not point at itself"


def entries_for_itself(d):
    ptr = np.load(d / part_dir(1) / "leaf_ptr.npy").copy()
    assert ptr[1] > 0
    ptr[1] -= 1  # the last entry for peer 0 becomes one for partition 1 itself
    rewrite(d, f"{part_dir(1)}/leaf_ptr.npy", ptr)
    return "leaf entries for partition 1 itself"


def entry_names_a_leaf(d):
    set_at(d, "leaf_root_local", 0, leaf_and_root(d)[0])
    return "leaf_root_local.npy: names a vertex whose root is not here"


@pytest.mark.parametrize("forge", [mask_at_leaf, root_elsewhere, entries_for_itself,
                                   entry_names_a_leaf])
def test_load_refuses_a_partition_that_contradicts_itself(good_dir, tmp_path, forge):
    """What one partition alone can disprove is refused by ``load`` (each rank's start-up),
    not only by ``verify``; the other partitions still load."""
    d = tmp_path / "forged"
    shutil.copytree(good_dir, d)
    fragment = forge(d)
    with pytest.raises(PartitionFormatError, match=fragment):
        partition.load(d, 1)
    partition.load(d, 0)
    assert any(fragment in p for p in partition.verify(d))


def forge_meta(d, reseal=True, **fields):
    meta = json.loads((d / "meta.json").read_text())
    meta.update(fields)
    if reseal:
        meta["fields_sha256"] = fields_sha256(meta)
    (d / "meta.json").write_text(json.dumps(meta))


@pytest.mark.parametrize("fields, fragment", [
    ({"num_classes": 5}, "fields_sha256"), ({"dataset": "other"}, "fields_sha256"),
    ({"fields_sha256": None}, "fields_sha256")])
def test_an_edited_field_of_meta_json_is_refused(good_dir, tmp_path, fields, fragment):
    """Version 3 records the SHA-256 of meta.json's fields: a num_classes raised by one
    (which no array can disprove: a class may have no vertex) builds no model."""
    d = tmp_path / "edited"
    shutil.copytree(good_dir, d)
    meta = partition.read_meta(d)
    assert meta["format_version"] == 3 and meta["fields_sha256"] == fields_sha256(meta)
    forge_meta(d, reseal=False, **fields)
    with pytest.raises(PartitionFormatError, match=fragment):
        partition.load(d, 0)
    assert run_cli(["verify", d]) == 1


def test_version_2_directories_load_with_a_note(good_dir, tmp_path, capsys):
    d = tmp_path / "v2"
    shutil.copytree(good_dir, d)
    meta = json.loads((d / "meta.json").read_text())
    del meta["fields_sha256"]
    (d / "meta.json").write_text(json.dumps({**meta, "format_version": 2, "num_classes": 9}))
    partition.load(d, 0)
    assert run_cli(["verify", d]) == 0
    out = capsys.readouterr().out
    assert "OK" in out and "format version 2" in out and "no checksum" in out
    forge_meta(d, reseal=False, format_version=3)  # version 3 without its checksum
    with pytest.raises(PartitionFormatError, match="missing field 'fields_sha256'"):
        partition.read_meta(d)


@pytest.mark.parametrize("fields, fragment", [
    ({"vertex_order": "spiral"}, "vertex_order 'spiral'"),
    ({"vertex_order": 3}, "vertex_order 3"),
    ({"vertex_order_requested": "degree"}, "vertex_order_requested"),
    ({"method": "metis"}, "method 'metis'"),
    ({"weights": [1.0, -2.0, 1.0]}, "weights must be finite and > 0"),
    ({"weights": [0.0, 1.0, 1.0]}, "weights must be finite and > 0"),
    ({"weights": [1.0, 1.0]}, "one weight per partition"),
    ({"weights": [1.0, 1e-300, 1.0]}, "less than one edge"),
    ({"split_vertices": 10**6}, "more than num_nodes")])
def test_meta_json_values_that_cannot_be_are_refused(good_dir, tmp_path, fields, fragment):
    """Checked even when fields_sha256 agrees (a careful forger), so verify and every load
    refuse them."""
    d = tmp_path / "forged"
    shutil.copytree(good_dir, d)
    forge_meta(d, **fields)
    with pytest.raises(PartitionFormatError, match=fragment):
        partition.read_meta(d)
    assert run_cli(["verify", d]) == 1


@pytest.mark.parametrize("order, claim, fragment", [("degree", "given", "not increasing"),
                                                    ("rcm", "degree", "not in vertex_order")])
def test_a_vertex_order_the_ids_do_not_follow_is_refused(cora_ds, tmp_path, order, claim,
                                                          fragment):
    d = tmp_path / order
    write_dir(cora_ds, d, 2, "libra", seed=2, order_vertices=order)
    forge_meta(d, vertex_order=claim, vertex_order_requested=claim)
    with pytest.raises(PartitionFormatError, match=fragment):
        partition.load(d, 0)


def test_verify_counts_split_vertices_and_checks_the_sizes_of_the_input(good_dir, small_ds,
                                                                        tmp_path):
    d = tmp_path / "forged"
    shutil.copytree(good_dir, d)
    split = partition.read_meta(d)["split_vertices"]
    assert split > 0
    sizes = {"num_nodes": small_ds.num_nodes, "num_edges": small_ds.graph.num_edges,
             "num_features": small_ds.num_features, "num_classes": small_ds.num_classes}
    assert partition.verify(d, small_ds.graph.edges(), sizes) == []
    assert partition.verify(d, sizes={**sizes, "num_classes": sizes["num_classes"] - 1}) == [
        f"{d}: meta.json says num_classes {sizes['num_classes']}, the dataset has "
        f"{sizes['num_classes'] - 1}"]
    forge_meta(d, split_vertices=split - 1)
    assert partition.verify(d) == [f"{d}: meta.json says {split - 1} split vertices, the "
                                   f"partitions have {split}"]


def test_row_digests_tell_every_single_change():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((50, 7)).astype(np.float32)
    y = rng.integers(0, 5, 50)
    rows = np.arange(50)
    base = row_digests(x, y, rows)
    assert len(np.unique(base)) == 50
    np.testing.assert_array_equal(row_digests(x, y, rows[::-1]), base[::-1])
    for r, c in [(0, 0), (3, 6), (49, 2)]:
        for value in (x[r, c] + 1e-7 * abs(x[r, c]), -x[r, c], 0.0):
            changed = x.copy()
            changed[r, c] = value
            assert row_digests(changed, y, rows)[r] != base[r], (r, c, value)
        other = y.copy()
        other[r] += 1
        assert row_digests(x, other, rows)[r] != base[r]
    zeros = np.zeros((1, 3), np.float32)
    assert row_digests(zeros, y[:1], [0]) == row_digests(-zeros, y[:1], [0])  # -0 == 0


@pytest.mark.parametrize("after", [1, 2])  # the old directory moved aside; the new in place
def test_an_interrupt_between_the_renames_of_a_replacement_loses_nothing(
        good_dir, small_ds, tmp_path, monkeypatch, after):
    """A signal raising right after one of the two renames of ``--force``: after the first,
    the previous directory is put back; after the second, the new one is complete and the
    rest of the previous one is ``.NAME.old-PID`` (what a stopped stream removes)."""
    import os
    from pathlib import Path

    out = tmp_path / "parts"
    shutil.copytree(good_dir, out)
    before = {f.relative_to(out): f.read_bytes() for f in out.rglob("*") if f.is_file()}
    rename, done = Path.rename, []

    def interrupted(self, target):
        moved = rename(self, target)
        done.append(target)
        if len(done) == after:
            raise KeyboardInterrupt
        return moved

    monkeypatch.setattr(Path, "rename", interrupted)
    with pytest.raises(KeyboardInterrupt):
        write_dir(small_ds, out, 2, force=True)
    monkeypatch.undo()
    left = sorted(f.name for f in tmp_path.iterdir())
    if after == 1:
        assert left == ["parts"]
        assert {f.relative_to(out): f.read_bytes() for f in out.rglob("*")
                if f.is_file()} == before
    else:
        assert left == [f".parts.old-{os.getpid()}", "parts"]
        assert partition.verify(out) == [] and partition.read_meta(out)["num_parts"] == 2
