"""Binary edge files (distgnn/edge_file.py): the R-MAT files written without holding the
graph (generators.write_rmat_files), their in-memory loading (datasets.load of a .npy edge
file) and the one-line refusal of malformed files."""
import os

import numpy as np
import pytest

from distgnn.data import generators
from distgnn.data.binary_edges import EdgeFileWriter, edge_count, iter_edges
from distgnn.data.datasets import load
from distgnn.data.generators import write_rmat_files
from distgnn.data.graph import CSRGraph, GraphError

SCALE, EDGE_FACTOR, FEATURES, CLASSES = 8, 4, 6, 5
N = 1 << SCALE
E = 2 * EDGE_FACTOR * N


def rmat_files(out, seed=0, **options):
    return write_rmat_files(out, SCALE, edge_factor=EDGE_FACTOR, num_features=FEATURES,
                            num_classes=CLASSES, seed=seed, **options)


def sorted_pairs(pairs):
    return pairs[np.lexsort((pairs[:, 1], pairs[:, 0]))]


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    out = tmp_path_factory.mktemp("rmat") / "graph"
    return out, rmat_files(out)


# ---- write_rmat_files --------------------------------------------------------------------------
def test_rmat_files_have_the_stated_shapes_and_types(files):
    out, info = files
    assert info == {"num_nodes": N, "num_edges": E, "num_features": FEATURES,
                    "num_classes": CLASSES,
                    "files": {"edges": str(out / "edges.npy"), "features": str(out / "x.npy"),
                              "labels": str(out / "y.npy"), "split": str(out / "split.npz")}}
    assert sorted(os.listdir(out)) == ["edges.npy", "split.npz", "x.npy", "y.npy"]
    edges = np.load(out / "edges.npy")
    assert edges.dtype == np.dtype("<i4") and edges.shape == (E, 2)
    assert edge_count(out / "edges.npy") == E
    assert edges.min() >= 0 and edges.max() < N
    x = np.load(out / "x.npy")
    assert x.dtype == np.float32 and x.shape == (N, FEATURES)
    assert abs(x.mean()) < 0.1 and abs(x.std() - 1) < 0.1  # standard normal
    y = np.load(out / "y.npy")
    assert y.dtype == np.int64 and y.shape == (N,)
    assert set(np.unique(y)) == set(range(CLASSES))
    with np.load(out / "split.npz") as split:
        masks = [split[k] for k in ("train_mask", "val_mask", "test_mask")]
    assert all(m.dtype == np.bool_ and m.shape == (N,) for m in masks)
    assert np.array_equal(sum(m.astype(int) for m in masks), np.ones(N))  # disjoint, cover
    assert [int(m.sum()) for m in masks] == [int(0.6 * N), int(0.8 * N) - int(0.6 * N),
                                             N - int(0.8 * N)]


def test_rmat_files_hold_every_drawn_edge_in_both_directions(files):
    edges = np.load(files[0] / "edges.npy")
    assert np.array_equal(sorted_pairs(edges), sorted_pairs(edges[:, ::-1]))
    # an R-MAT graph, not a degenerate one: skewed degrees over most of the vertices
    degree = np.bincount(edges[:, 1], minlength=N)
    assert np.count_nonzero(degree) > N // 2 and degree.max() > 5 * degree.mean()


def test_rmat_files_are_seeded(files, tmp_path):
    rmat_files(tmp_path / "same")
    rmat_files(tmp_path / "other", seed=1)
    for name in ("edges.npy", "x.npy", "y.npy", "split.npz"):
        assert (tmp_path / "same" / name).read_bytes() == (files[0] / name).read_bytes()
    for name in ("edges.npy", "x.npy", "y.npy"):
        assert not np.array_equal(np.load(tmp_path / "other" / name),
                                  np.load(files[0] / name))


def test_rmat_files_in_many_chunks_report_progress(tmp_path, monkeypatch):
    monkeypatch.setattr(generators, "_CHUNK", 300)  # 1024 drawn edges: 4 chunks
    seen = []
    rmat_files(tmp_path / "g", progress=seen.append)
    assert seen == [600, 1200, 1800, 2048]
    edges = np.load(tmp_path / "g" / "edges.npy")
    assert np.array_equal(sorted_pairs(edges), sorted_pairs(edges[:, ::-1]))
    assert np.load(tmp_path / "g" / "x.npy").shape == (N, FEATURES)  # x in blocks of 50 rows


def test_an_existing_folder_is_refused_untouched(tmp_path):
    out = tmp_path / "g"
    out.mkdir()
    (out / "mine.txt").write_text("keep")
    with pytest.raises(GraphError, match="g: already exists"):
        rmat_files(out)
    assert os.listdir(tmp_path) == ["g"] and os.listdir(out) == ["mine.txt"]
    with pytest.raises(GraphError, match="does not exist"):
        rmat_files(tmp_path / "missing" / "g")
    with pytest.raises(GraphError, match="scale must lie in 1..31"):
        write_rmat_files(tmp_path / "h", 0)
    assert os.listdir(tmp_path) == ["g"]


@pytest.mark.parametrize("error", [OSError("disk gone"), KeyboardInterrupt()])
def test_a_failure_leaves_nothing_behind(tmp_path, monkeypatch, error):
    monkeypatch.setattr(generators, "_CHUNK", 300)
    write = EdgeFileWriter.write

    def fail_after_the_first_chunk(self, src, dst):
        if self.written:
            raise error
        write(self, src, dst)

    monkeypatch.setattr(EdgeFileWriter, "write", fail_after_the_first_chunk)
    with pytest.raises(type(error)):
        rmat_files(tmp_path / "g")
    assert os.listdir(tmp_path) == []


def test_a_failing_progress_callback_leaves_nothing_behind(tmp_path):
    def interrupt(_):
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        rmat_files(tmp_path / "g", progress=interrupt)
    assert os.listdir(tmp_path) == []


# ---- loading an edge file ----------------------------------------------------------------------
def test_load_reads_the_rmat_files(files):
    out, _ = files
    ds = load(out / "edges.npy", features=out / "x.npy", labels=out / "y.npy",
              split_file=out / "split.npz")
    edges = np.load(out / "edges.npy")
    expected = CSRGraph.from_edges(edges[:, 0], edges[:, 1], N)
    assert np.array_equal(ds.graph.indptr, expected.indptr)
    assert np.array_equal(ds.graph.indices, expected.indices)
    assert ds.graph.edge_weight is None
    assert np.array_equal(ds.x, np.load(out / "x.npy"))
    assert np.array_equal(ds.y, np.load(out / "y.npy"))
    with np.load(out / "split.npz") as split:
        for key in ("train_mask", "val_mask", "test_mask"):
            assert np.array_equal(getattr(ds, key), split[key])
    assert ds.split_note == f"split: from {out / 'split.npz'}"
    assert "no reverse" not in ds.summary()  # every edge's reverse is in the file


def test_load_keeps_file_order_within_a_row_and_splits_at_random(tmp_path):
    path = tmp_path / "e.npy"
    pairs = np.array([[3, 0], [1, 0], [2, 0], [0, 4], [0, 3]], np.int64)
    np.save(path, pairs)
    labels = tmp_path / "y.npy"
    np.save(labels, np.arange(5) % 2)
    ds = load(path, labels=labels)
    assert ds.graph.indices[:3].tolist() == [3, 1, 2] and ds.num_nodes == 5
    assert "split: random 60/20/20" in ds.split_note
    assert [int(m.sum()) for m in (ds.train_mask, ds.val_mask, ds.test_mask)] == [3, 1, 1]
    features = tmp_path / "x.npy"
    np.save(features, np.ones((7, 2), np.float32))  # isolated vertices 5 and 6
    assert load(path, features=features).num_nodes == 7
    np.save(features, np.ones((4, 2), np.float32))
    with pytest.raises(GraphError, match="4 feature rows, but e.npy's largest vertex id is 4"
                       ) as caught:
        load(path, features=features)
    assert caught.value.source == str(features)  # the short file is blamed, not the edges
    src, dst = map(np.concatenate, zip(*iter_edges(path, 2)))  # chunks of 2, 2 and 1
    assert np.array_equal(src, pairs[:, 0]) and np.array_equal(dst, pairs[:, 1])


def npy_header(path, descr, shape, fortran=False):
    with open(path, "wb") as f:
        np.lib.format.write_array_header_1_0(
            f, {"descr": descr, "fortran_order": fortran, "shape": shape})
    return path


def truncated(path):
    np.save(path, np.arange(20).reshape(10, 2))
    with open(path, "r+b") as f:
        f.truncate(path.stat().st_size - 8)
    return path


@pytest.mark.parametrize("make, problem", [
    (lambda p: np.save(p, np.zeros((3, 2))), r"int32 or int64 \[E, 2\].*holds float64 \[3, 2\]"),
    (lambda p: np.save(p, np.zeros((3, 3), np.int64)), r"holds int64 \[3, 3\]"),
    (lambda p: np.save(p, np.zeros(3, np.int64)), r"holds int64 \[3\]"),
    (lambda p: np.save(p, np.zeros((3, 2), ">i8")), r"holds >i8 \[3, 2\]"),
    (lambda p: npy_header(p, "<i8", (2, 2), fortran=True), "in Fortran order"),
    (truncated, "truncated: 280 bytes, the header promises 288"),
    (lambda p: npy_header(p, "<i8", (10**15, 2)), "truncated"),
    (lambda p: npy_header(p, "<i8", (-1, 2)), r"negative dimension in shape \[-1, 2\]"),
    (lambda p: np.save(p, np.array([[0, 1], [2, -1]], np.int32)), "negative vertex id -1"),
    (lambda p: p.write_bytes(b"0 1\n1 0\n"), "not a readable .npy edge file"),
], ids=["float", "3 columns", "1-D", "big-endian", "Fortran", "truncated", "huge", "negative shape",
        "negative id", "text"])
def test_malformed_edge_files_are_refused_in_one_line(tmp_path, make, problem):
    path = tmp_path / "edges.npy"
    make(path)
    with pytest.raises(GraphError, match=problem) as caught:
        load(path)
    message = str(caught.value)
    assert message.startswith(str(path)) and "\n" not in message
