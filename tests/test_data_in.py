"""A user's own data: asymmetric edge lists, arbitrary vertex ids, keyed side files, split
files, unlabelled vertices, partitions that keep the ids, and PyG graphs."""
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from distgnn.datasets import load
from distgnn.graph import GraphError
from distgnn.pyg import from_pyg, to_partitions
from partition.format import read_meta, read_vertex_ids, verify
from tests.helpers.training import losses
from tests.helpers.training import train_quietly as run

BIN = Path(sys.executable).parent


def write(path, text):
    path.write_text(text)
    return path


def masks(ds):
    return [np.flatnonzero(m).tolist() for m in (ds.train_mask, ds.val_mask, ds.test_mask)]


# ---- symmetry -------------------------------------------------------------------------------
def test_summary_counts_edges_without_reverse(tmp_path):
    edges = write(tmp_path / "g.txt", "0 1\n1 0\n1 2\n2 3\n3 3\n")  # 1->2, 2->3 unreciprocated
    ds = load(edges)
    assert ds.graph.unreciprocated_edges() == 2
    assert "2 of the 5 edges have no reverse edge" in ds.summary()
    assert "--symmetrize" in ds.summary()
    sym = load(edges, symmetrize=True)
    assert sym.graph.unreciprocated_edges() == 0 and "no reverse" not in sym.summary()
    both = write(tmp_path / "both.txt", "0 1\n1 0\n2 2\n")
    assert "no reverse" not in load(both).summary()


def test_one_line_per_undirected_edge_doubles_with_symmetrize(tmp_path):
    edges = write(tmp_path / "citeseer-like.txt", "0 1\n1 2\n2 3\n3 0\n0 2\n")
    assert load(edges).graph.num_edges == 5
    ds = load(edges, symmetrize=True)
    assert ds.graph.num_edges == 10
    assert ds.graph.unreciprocated_edges() == 0


# ---- vertex ids -------------------------------------------------------------------------------
def test_string_ids_with_keyed_features_and_labels(tmp_path):
    edges = write(tmp_path / "g.txt", "# users\nbob,alice\ncarol,bob\nalice,dave\n")
    features = write(tmp_path / "x.txt", "dave 4 40\nalice 1 10\ncarol 3 30\nbob 2 20\n")
    labels = write(tmp_path / "y.txt", "carol 1\nalice 0\nbob 1\n")  # dave: unlabelled
    ds = load(edges, features=features, labels=labels)
    assert ds.ids.tolist() == ["alice", "bob", "carol", "dave"]  # sorted
    np.testing.assert_array_equal(ds.x[:, 0], [1, 2, 3, 4])
    np.testing.assert_array_equal(ds.y, [0, 1, 1, -1])
    src, dst = ds.graph.edges()
    assert sorted(zip(ds.ids[src].tolist(), ds.ids[dst].tolist())) == [
        ("alice", "dave"), ("bob", "alice"), ("carol", "bob")]
    assert "vertex ids: 4 strings" in ds.summary()
    npy = tmp_path / "x.npy"  # an .npy side file is in the sorted ids' order
    np.save(npy, np.arange(8, dtype=np.float32).reshape(4, 2))
    np.testing.assert_array_equal(load(edges, features=npy).x[3], [6, 7])


def test_keyed_file_errors_name_the_vertex(tmp_path):
    edges = write(tmp_path / "g.txt", "a b\nb c\n")
    with pytest.raises(GraphError, match="no features for vertex 'c'"):
        load(edges, features=write(tmp_path / "x.txt", "a 1\nb 2\n"))
    with pytest.raises(GraphError, match="vertex 'a' is listed more than once"):
        load(edges, labels=write(tmp_path / "y2.txt", "a 0\na 1\n"))
    with pytest.raises(GraphError, match="expected 'vertex label'"):
        load(edges, labels=write(tmp_path / "y3.txt", "0\n1\n0\n"))


def test_large_and_negative_integer_ids(tmp_path):
    edges = write(tmp_path / "g.txt", "1000000007 -5\n-5 3\n3 1000000007\n")
    labels = write(tmp_path / "y.txt", "-5 2\n3 0\n1000000007 1\n")
    ds = load(edges, labels=labels)
    assert ds.ids.dtype == np.int64 and ds.ids.tolist() == [-5, 3, 1000000007]
    np.testing.assert_array_equal(ds.y, [2, 0, 1])
    assert ds.num_nodes == 3 and ds.graph.unreciprocated_edges() == 3


def test_plain_integer_ids_are_vertex_numbers(tmp_path):
    ds = load(write(tmp_path / "g.txt", "0 1\n1 4\n"))
    assert ds.ids is None and ds.num_nodes == 5


# ---- split files ------------------------------------------------------------------------------
def test_split_file_in_the_users_ids(tmp_path):
    edges = write(tmp_path / "g.txt", "x1 x2\nx2 x3\nx3 x4\nx4 x1\n")
    labels = write(tmp_path / "y.txt", "x1 0\nx2 1\nx3 0\nx4 1\n")
    split = write(tmp_path / "split.txt", "x4 train\nx1 train\nx2 val\nx3 test\n")
    ds = load(edges, labels=labels, split_file=split)
    assert masks(ds) == [[0, 3], [1], [2]]
    assert ds.split_note == f"split: from {split}"
    assert f"split: from {split}" in ds.summary()
    unknown = write(tmp_path / "bad.txt", "x1 train\nx9 val\n")
    with pytest.raises(GraphError, match="unknown vertex 'x9'") as info:
        load(edges, labels=labels, split_file=unknown)
    assert info.value.source == str(unknown)
    with pytest.raises(GraphError, match="'valid' of vertex 'x2' is not one of train"):
        load(edges, labels=labels, split_file=write(tmp_path / "b2.txt", "x2 valid\n"))


def test_split_file_npz_and_plain_ids(tmp_path):
    cora = load("cora")
    n = cora.num_nodes
    train = np.zeros(n, bool)
    train[:10] = True
    npz = tmp_path / "split.npz"
    np.savez(npz, train_mask=train, val_mask=np.roll(train, 10), test_mask=np.roll(train, 20))
    ds = load("cora", split_file=npz)
    assert [len(m) for m in masks(ds)] == [10, 10, 10] and masks(ds)[1][0] == 10
    text = write(tmp_path / "split.txt", "5 train\n7 test\n")
    assert masks(load("cora", split_file=text)) == [[5], [], [7]]
    with pytest.raises(GraphError, match=f"unknown vertex '{n}'"):
        load("cora", split_file=write(tmp_path / "bad.txt", f"{n} train\n"))


def test_split_notes():
    assert load("cora").split_note == "split: the dataset's own masks"
    assert load("rmat:scale=6,edge_factor=2,features=2").split_note == (
        "split: random 60/20/20 of the 64 vertices (seed 0)")


# ---- unlabelled vertices ----------------------------------------------------------------------
def test_unlabelled_vertices_are_in_no_mask_and_train(tmp_path):
    n = 60
    edges = write(tmp_path / "g.txt", "".join(f"{i} {(i + 1) % n}\n{(i + 1) % n} {i}\n"
                                              for i in range(n)))
    y = np.arange(n) % 3
    y[::4] = -1  # 15 unlabelled
    labels = tmp_path / "y.npy"
    np.save(labels, y)
    ds = load(edges, labels=labels, features=None)
    unlabelled = y == -1
    assert not (ds.train_mask | ds.val_mask | ds.test_mask)[unlabelled].any()
    assert (ds.train_mask | ds.val_mask | ds.test_mask)[~unlabelled].all()
    assert ds.num_classes == 3
    assert ds.split_note == "split: random 60/20/20 of the 45 labelled vertices (seed 0)"
    assert "(15 vertices unlabelled)" in ds.summary()
    result = run(ds, epochs=3, hidden=8)
    assert len(losses(result)) == 3 and all(np.isfinite(losses(result)))
    with pytest.raises(GraphError, match="unlabelled vertex 0 in train"):
        load(edges, labels=labels, split_file=write(tmp_path / "s.txt", "0 train\n"))
    bad = tmp_path / "bad.npy"
    np.save(bad, np.where(unlabelled, -2, y))
    with pytest.raises(GraphError, match="label -2 of vertex 0: classes are numbered 0..C-1 "
                       "and -1 marks an unlabelled vertex") as caught:
        load(edges, labels=bad)
    assert caught.value.source == str(bad)


# ---- partitions keep the ids ------------------------------------------------------------------
def test_partitions_keep_vertex_ids(tmp_path):
    words = ["kiwi", "apple", "fig", "date", "cherry", "banana", "grape", "elder"]
    edges = write(tmp_path / "g.txt", "".join(f"{a} {b}\n{b} {a}\n"
                                              for a, b in zip(words, words[1:] + words[:1])))
    split = write(tmp_path / "split.txt", "apple train\nkiwi val\n")
    labels = write(tmp_path / "y.txt", "".join(f"{w} {i % 2}\n" for i, w in enumerate(words)))
    out = tmp_path / "parts"
    done = subprocess.run([str(BIN / "distgnn-partition"), str(edges), "--parts", "2",
                           "--out", str(out), "--labels", str(labels), "--split-file",
                           str(split), "--no-progress"], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert f"split: from {split}" in done.stdout
    ids = read_vertex_ids(out)
    assert ids.tolist() == sorted(words) and not ids.flags.writeable
    assert "vertex_ids.npy" in read_meta(out)["files"]
    assert verify(out) == []
    assert read_vertex_ids(_plain_partitions(tmp_path)) is None


def _plain_partitions(tmp_path):
    out = tmp_path / "plain"
    to_partitions(_pyg_cora(), out, 2, name="cora", seed=1)
    return out


# ---- PyG --------------------------------------------------------------------------------------
def _pyg_cora():
    from torch_geometric.data import Data

    cora = load("cora")
    src, dst = cora.graph.edges()
    return Data(x=torch.from_numpy(cora.x), y=torch.from_numpy(cora.y),
                edge_index=torch.stack([torch.from_numpy(src.astype(np.int64)),
                                        torch.from_numpy(dst.astype(np.int64))]),
                **{k: torch.from_numpy(getattr(cora, k))
                   for k in ("train_mask", "val_mask", "test_mask")})


def test_from_pyg_round_trip_and_same_training():
    pytest.importorskip("torch_geometric")
    cora = load("cora")
    data = _pyg_cora()
    ds = from_pyg(data, name="cora")
    assert (ds.graph.to_scipy() != cora.graph.to_scipy()).nnz == 0
    for field in ("x", "y", "train_mask", "val_mask", "test_mask"):
        np.testing.assert_array_equal(getattr(ds, field), getattr(cora, field))
    # PyG's edge_index is source -> target: an edge 0 -> 1 lands in row 1 of the CSR
    one = from_pyg(type(data)(edge_index=torch.tensor([[0], [1]]), num_nodes=2))
    assert one.graph.indptr.tolist() == [0, 0, 1] and one.graph.indices.tolist() == [0]
    assert losses(run(ds, epochs=3)) == losses(run(cora, epochs=3))


def test_from_pyg_several_splits():
    pytest.importorskip("torch_geometric")
    data = _pyg_cora()
    n = data.num_nodes
    stacked = torch.zeros(n, 2, dtype=torch.bool)
    stacked[:5, 1] = True
    data.train_mask, data.val_mask, data.test_mask = stacked, stacked.roll(5, 0), stacked.roll(10, 0)
    ds = from_pyg(data, split=1)
    assert masks(ds)[0] == [0, 1, 2, 3, 4] and masks(ds)[2] == [10, 11, 12, 13, 14]
    assert "split 1 of 2" in ds.split_note
    with pytest.raises(GraphError, match="split 2 out of range"):
        from_pyg(data, split=2)
