"""Dataset loading (npz, OGB layout, edge lists, names) and the synthetic generators."""
import gzip
import os
import re
from pathlib import Path

import numpy as np
import pytest

from distgnn.data.datasets import load
from distgnn.data.edge_lists import read_edge_list
from distgnn.data.generators import GENERATORS, rmat, rmat_edges, sbm
from distgnn.data.graph import GraphError
from tests.helpers.datasets import Payload, make_ogb, tiny_arrays, write_gz
from tests.helpers.graphs import dedup, is_symmetric

SHARED = Path(__file__).resolve().parents[1].parent / "shared" / "datasets"


def shared(name):
    path = SHARED / f"{name}.npz"
    if not path.is_file():
        pytest.skip(f"{path} not available")
    return path


def raises(spec_or_call, *fragments, source=None, flag=None):
    """Assert a one-line GraphError naming ``source``, after ``flag`` (the flag of a side
    file) if given, and containing every fragment."""
    with pytest.raises(GraphError) as info:
        spec_or_call() if callable(spec_or_call) else load(spec_or_call)
    message = str(info.value)
    assert "\n" not in message
    if source is not None:
        named = f"{flag} {source}" if flag else str(source)
        assert message.startswith(f"{named}: ") and info.value.source == str(source)
        assert info.value.flag == flag
    for fragment in fragments:
        assert fragment in message
    return message


def assert_same_dataset(a, b):
    for field in ("x", "y", "train_mask", "val_mask", "test_mask"):
        np.testing.assert_array_equal(getattr(a, field), getattr(b, field))
    np.testing.assert_array_equal(a.graph.indptr, b.graph.indptr)
    np.testing.assert_array_equal(a.graph.indices, b.graph.indices)
    assert a.num_classes == b.num_classes


# ---- .npz files -----------------------------------------------------------------------------
def write_npz(path, **overrides):
    arrays = tiny_arrays()
    arrays.update(overrides)
    np.savez(path, **{k: v for k, v in arrays.items() if v is not None})
    return path


def test_shared_cora_by_path():
    ds = load(shared("cora"))
    assert (ds.num_nodes, ds.graph.num_edges, ds.num_features, ds.num_classes) == (
        2708, 10556, 1433, 7)
    assert [int(m.sum()) for m in (ds.train_mask, ds.val_mask, ds.test_mask)] == [140, 500, 1000]
    assert ds.name == "cora" and ds.graph.indices.dtype == np.int32
    assert is_symmetric(ds.graph)


def test_shared_tolokers_and_split_selection():
    path = shared("tolokers")
    raw = np.load(path)
    ds = load(path)
    assert (ds.num_nodes, ds.graph.num_edges, ds.num_classes) == (11758, 1038000, 2)
    np.testing.assert_array_equal(ds.train_mask, raw["train_masks"][0])
    three = load(path, split=3)
    for part in ("train", "val", "test"):
        np.testing.assert_array_equal(getattr(three, f"{part}_mask"), raw[f"{part}_masks"][3])
    assert not np.array_equal(three.train_mask, ds.train_mask)
    raises(lambda: load(path, split=10), "split 10 out of range", "10 splits", source=path)
    raises(lambda: load(path, split=-1), "out of range", source=path)


def test_bundled_cora_equals_shared():
    assert_same_dataset(load("cora"), load(shared("cora")))
    assert load("cora").name == "cora"


def test_data_path_lookup(tmp_path, monkeypatch):
    folder = tmp_path / "data"
    folder.mkdir()
    write_npz(folder / "tiny.npz")
    monkeypatch.setenv("DISTGNN_DATA_PATH",
                       os.pathsep.join([str(tmp_path / "absent"), "", str(folder)]))
    ds = load("tiny")
    assert ds.name == "tiny" and ds.num_nodes == 4
    raises("not_there", "no such file, directory, bundled dataset or generator",
           source="not_there")


def test_unknown_spec():
    raises("/no/such/file.npz", "no such file", source="/no/such/file.npz")
    raises("", "no such file")


def test_single_split_file_rejects_other_splits(tmp_path):
    path = write_npz(tmp_path / "tiny.npz")
    raises(lambda: load(path, split=1), "holds a single split", source=path)


def test_npz_stacked_split_shapes_checked(tmp_path):
    masks = np.zeros((2, 4), bool)
    path = write_npz(tmp_path / "partial.npz", train_masks=masks, val_masks=masks)
    raises(path, "test_masks", source=path)
    path = write_npz(tmp_path / "shapes.npz", train_masks=masks, val_masks=masks,
                     test_masks=np.zeros((3, 4), bool))
    raises(path, "must all be [S, N]", source=path)


def test_corrupt_npz_random_bytes(tmp_path):
    path = tmp_path / "random.npz"
    path.write_bytes(np.random.default_rng(0).bytes(4096))
    raises(path, "not an .npz (zip) archive", source=path)


def test_corrupt_npz_truncated(tmp_path):
    path = write_npz(tmp_path / "cut.npz")
    data = path.read_bytes()
    path.write_bytes(data[:len(data) // 2])
    raises(path, "not an .npz", source=path)


def test_corrupt_npz_member(tmp_path):
    x = np.arange(4000, dtype=np.float32).reshape(4, 1000)
    path = write_npz(tmp_path / "crc.npz", x=x)
    data = bytearray(path.read_bytes())
    data[data.index(x.tobytes()) + 100] ^= 0xFF  # flips a byte inside x: CRC mismatch
    path.write_bytes(bytes(data))
    raises(path, "unreadable .npz archive", source=path)


def test_npz_edge_weights_are_read_and_other_members_named(tmp_path):
    weights = np.array([0.5, 2.0, 1.0, 3.0], np.float32)
    ds = load(write_npz(tmp_path / "w.npz", edge_weight=weights, edge_wieght=weights))
    np.testing.assert_array_equal(ds.graph.edge_weight, weights)
    assert ds.note == "members not read: edge_wieght"
    raises(write_npz(tmp_path / "short.npz", edge_weight=weights[:3]), "edge_weight has shape")
    assert load(write_npz(tmp_path / "plain.npz")).graph.edge_weight is None


def test_npz_missing_key(tmp_path):
    path = write_npz(tmp_path / "nolabels.npz", y=None, val_mask=None)
    raises(path, "missing key(s) y, val_mask", source=path)


@pytest.mark.parametrize("key", ["x", "extra"])
def test_npz_pickled_object_array_is_refused(tmp_path, key):
    marker = tmp_path / "pwned"
    path = write_npz(tmp_path / "evil.npz", **{key: np.array([Payload(marker)], object)})
    raises(path, "allow_pickle", source=path)
    assert not marker.exists()
    np.load(path, allow_pickle=True)[key]  # the payload is live: unpickling does run it
    assert marker.exists()


def test_npz_invalid_contents_name_the_file(tmp_path):
    path = write_npz(tmp_path / "bad.npz", indices=np.array([1, 0, 3, 9]))
    raises(path, "out of range", source=path)
    path = write_npz(tmp_path / "nan.npz", x=np.full((4, 2), np.nan, np.float32))
    raises(path, "NaN", source=path)


# ---- edge lists -----------------------------------------------------------------------------
@pytest.mark.parametrize("text, weights", [
    ("0 1\n1 2\n2 0\n", None),
    ("# header\n\n0\t1\n  1   2  \n2 0 # trailing comment\n", None),
    ("0,1\n1, 2\n2 ,0\n", None),
    ("0 1 0.5\n1 2 1\n2 0 2.5\n", [0.5, 1.0, 2.5]),
    ("# src,dst,w\n0,1,0.5\n1,2,1\n\n2,0,2.5\n", [0.5, 1.0, 2.5]),
])
def test_read_edge_list_formats(tmp_path, text, weights):
    path = tmp_path / "g.txt"
    path.write_text(text)
    src, dst, w = read_edge_list(path)
    np.testing.assert_array_equal(src, [0, 1, 2])
    np.testing.assert_array_equal(dst, [1, 2, 0])
    assert src.dtype == dst.dtype == np.int64
    if weights is None:
        assert w is None
    else:
        assert w.dtype == np.float32
        np.testing.assert_array_equal(w, weights)


def test_read_edge_list_gzip_and_empty(tmp_path):
    path = tmp_path / "g.csv.gz"
    with gzip.open(path, "wt") as f:
        f.write("5,6\n7,8\n")
    src, dst, _ = read_edge_list(path)
    np.testing.assert_array_equal(src, [5, 7])
    empty = tmp_path / "empty.txt"
    empty.write_text("# nothing\n\n")
    src, dst, w = read_edge_list(empty)
    assert len(src) == len(dst) == 0 and src.dtype == np.int64 and w is None


@pytest.mark.parametrize("text, fragments", [
    ("0 1\n1 x\n", ["line 2", "'x' is not an integer"]),
    ("0 1\n\n1.5 2\n", ["line 3", "'1.5' is not an integer"]),
    ("0 1\n1 2 3\n", ["line 2", "expected 2 fields", "found 3"]),
    ("0 1 1.0\n1 2\n", ["line 2", "expected 3 fields", "found 2"]),
    ("# c\n7\n", ["line 2", "found 1 fields"]),
    ("0 1 2 3\n", ["line 1", "found 4 fields"]),
    ("0 1\n# c\n-3 2\n", ["line 3", "negative vertex id -3"]),
    ("0,1\n2,-1\n", ["line 2", "negative vertex id -1"]),
    ("0 1 0.5\n1 2 abc\n", ["line 2", "weight 'abc' is not a number"]),
    ("0,1\n1 2\n", ["line 2", "expected 2 fields", "found 1"]),
])
def test_read_edge_list_malformed(tmp_path, text, fragments):
    path = tmp_path / "bad.txt"
    path.write_text(text)
    raises(lambda: read_edge_list(path), *fragments, source=path)


@pytest.mark.parametrize("data, line", [(b"0 1\n1 \xff\n", 2), (b"\xfe\xff0 1\n", 1)])
def test_read_edge_list_not_utf8(tmp_path, data, line):
    path = tmp_path / "latin.txt"
    path.write_bytes(data)
    raises(lambda: read_edge_list(path), f"line {line}", "not UTF-8", source=path)


def test_edge_list_dataset_defaults(tmp_path):
    path = tmp_path / "g.txt"
    path.write_text("0 1\n1 2\n2 0\n4 0\n")
    ds = load(path)
    assert ds.num_nodes == 5 and ds.graph.num_edges == 4 and ds.name == "g"
    np.testing.assert_array_equal(ds.x, np.ones((5, 1), np.float32))
    assert ds.num_classes == 1 and not ds.y.any()
    assert not (ds.train_mask.any() or ds.val_mask.any() or ds.test_mask.any())
    assert not is_symmetric(ds.graph)
    sym = load(path, symmetrize=True)
    assert is_symmetric(sym.graph) and sym.graph.num_edges == 8


def test_edge_list_with_features_and_labels(tmp_path):
    n = 50
    rng = np.random.default_rng(1)
    edges = tmp_path / "g.csv"
    edges.write_text("".join(f"{i},{(i + 1) % n}\n" for i in range(n - 5)))
    features = tmp_path / "x.npy"
    np.save(features, rng.random((n, 3)).astype(np.float32))
    labels = tmp_path / "y.txt"
    labels.write_text("".join(f"{i % 3}\n" for i in range(n)))
    ds = load(edges, features=features, labels=labels)
    assert ds.num_nodes == n and ds.num_classes == 3 and ds.num_features == 3
    np.testing.assert_array_equal(ds.x, np.load(features))
    sizes = [int(m.sum()) for m in (ds.train_mask, ds.val_mask, ds.test_mask)]
    assert sizes == [30, 10, 10]
    assert (ds.train_mask | ds.val_mask | ds.test_mask).all()
    assert_same_dataset(ds, load(edges, features=features, labels=labels))  # seeded split
    text_features = tmp_path / "x.txt"
    np.savetxt(text_features, np.load(features))
    np.testing.assert_allclose(load(edges, features=text_features).x, ds.x, rtol=1e-6)


def test_edge_list_side_file_errors(tmp_path):
    edges = tmp_path / "g.txt"
    edges.write_text("0 1\n1 5\n")
    labels = tmp_path / "y.txt"
    labels.write_text("0\n1\n0\n")
    # the short side file is wrong, not the edge list
    raises(lambda: load(edges, labels=labels), "3 labels, but g.txt's largest vertex id is 5",
           "one label per vertex", source=labels, flag="--labels")
    features = tmp_path / "x.npy"
    np.save(features, np.ones((6, 2)))
    raises(lambda: load(edges, features=features, labels=labels), "3 labels", source=labels,
           flag="--labels")
    float_labels = tmp_path / "y.npy"
    np.save(float_labels, np.zeros(6))
    raises(lambda: load(edges, labels=float_labels), "dtype float64", source=float_labels,
           flag="--labels")
    text_labels = tmp_path / "y2.txt"
    text_labels.write_text("0\nfoo\n")
    raises(lambda: load(edges, labels=text_labels), "line 2: label 'foo' is a name",
           source=text_labels, flag="--labels")
    raises(lambda: load(edges, features=tmp_path / "missing.npy"), "cannot read",
           source=tmp_path / "missing.npy", flag="--features")


def test_options_only_where_they_apply(tmp_path):
    npz = write_npz(tmp_path / "tiny.npz")
    raises(lambda: load(npz, labels=npz), "edge-list files only")
    raises(lambda: load("rmat:scale=4", split=1), "several splits")


# ---- OGB node-property layout ---------------------------------------------------------------
def test_ogb_layout(tmp_path):
    root = make_ogb(tmp_path / "ogbn-toy", ["0", "1", "2", "1", "0", "nan"], num_nodes_file=True)
    ds = load(root)
    assert ds.name == "ogbn-toy" and ds.num_nodes == 6 and ds.num_classes == 3
    assert ds.graph.num_edges == 6 and not is_symmetric(ds.graph)
    np.testing.assert_array_equal(ds.x[2], [2, 2.5, -1])
    np.testing.assert_array_equal(ds.y, [0, 1, 2, 1, 0, -1])  # nan: unlabelled
    np.testing.assert_array_equal(np.flatnonzero(ds.train_mask), [0, 1, 2])  # a_time
    np.testing.assert_array_equal(np.flatnonzero(ds.val_mask), [3])
    np.testing.assert_array_equal(np.flatnonzero(ds.test_mask), [4])
    src, dst = ds.graph.edges()
    assert sorted(zip(src.tolist(), dst.tolist())) == [(i, (i + 1) % 6) for i in range(6)]
    sym = load(root, symmetrize=True)
    assert is_symmetric(sym.graph) and sym.graph.num_edges == 12


def test_ogb_unlabelled_node_in_split(tmp_path):
    root = make_ogb(tmp_path / "ogb", ["0", "nan", "2", "1", "0", "1"])
    raises(root, "have no label (nan), first 1",
           source=root / "split" / "a_time" / "train.csv.gz")


def test_ogb_labels_must_be_classes(tmp_path):
    root = make_ogb(tmp_path / "ogb", ["1", "2", "3", "1", "nan", "2"])
    raises(root, "labels are 1..3: classes must be numbered 0..C-1 (subtract 1)",
           source=root / "raw" / "node-label.csv.gz")


def test_ogb_errors(tmp_path):
    root = make_ogb(tmp_path / "ogb", ["0", "1", "2", "1", "0", "1"], train=(0, 9))
    raises(root, "node id out of range 0..5", source=root / "split" / "a_time" / "train.csv.gz")
    root = make_ogb(tmp_path / "ogb2", ["0", "1", "2.5", "1", "0", "1"])
    raises(root, "non-negative integers or nan", source=root / "raw" / "node-label.csv.gz")
    root = make_ogb(tmp_path / "ogb3", ["0", "1", "2", "1", "0", "1"], num_nodes_file=True)
    write_gz(root / "raw" / "num-node-list.csv.gz", [7])
    raises(root, "6 feature rows but num-node-list.csv.gz says 7 nodes")
    (root / "raw" / "edge.csv.gz").unlink()
    write_gz(root / "raw" / "num-node-list.csv.gz", [6])
    raises(root, "missing file", source=root / "raw" / "edge.csv.gz")
    raises(tmp_path / "ogb3" / "split", "needs raw/node-feat.csv.gz")


# ---- generators -----------------------------------------------------------------------------
def test_generator_specs():
    ds = load("rmat:scale=8,edge_factor=4,features=16,classes=3,seed=1")
    assert (ds.num_nodes, ds.num_features, ds.num_classes) == (256, 16, 3)
    assert ds.name == "rmat-s8-ef4"
    assert_same_dataset(ds, rmat(8, 4, 16, 3, seed=1))
    ds = load("sbm: nodes=500, blocks=4, avg_degree=6, p_in=0.9, features=8, noise=0.5")
    assert (ds.num_nodes, ds.num_features, ds.num_classes) == (500, 8, 4)
    assert load("rmat").num_nodes == 2 ** 14  # every key has a default


@pytest.mark.parametrize("spec, fragments", [
    ("rmat:scale=abc", ["'scale' needs an integer", "'abc'"]),
    ("rmat:scale=1.5", ["'scale' needs an integer"]),
    ("sbm:p_in=high", ["'p_in' needs a number"]),
    ("rmat:bogus=1", ["unknown key 'bogus'", "known: scale"]),
    ("sbm:nodes", ["'nodes' needs an integer"]),
    ("rmat:scale=0", ["scale must lie in 1..31"]),
    ("rmat:scale=4,a=0.9", ["a + b + c <= 1"]),
    ("rmat:scale=4,classes=0", ["rmat:scale=4,classes=0: classes must be >= 1"]),
    ("sbm:nodes=100,blocks=8,features=4", ["features must be >= blocks"]),
    ("sbm:nodes=100,p_in=1.5", ["p_in must lie in [0, 1]"]),
    ("sbm:nodes=100,p_in=nan", ["p_in must lie in [0, 1]"]),
    ("sbm:nodes=100,degree_exponent=1", ["degree_exponent must be > 1"]),
    ("sbm:nodes=100,noise=-1", ["noise must be >= 0"]),
    ("sbm:nodes=100,noise=inf", ["noise must be >= 0 and finite"]),
    ("sbm:nodes=100,feature_density=1.5", ["feature_density must lie in [0, 1]"]),
    ("sbm:nodes=100,label_noise=nan", ["label_noise must lie in [0, 1]"]),
    ("rmat:scale=12,scale=13", ["key 'scale' is given twice"]),
    ("sbm:nodes=100, seed=1, nodes=100", ["key 'nodes' is given twice"]),
    ("sbm:nodes=500,avg_degree=1000", ["avg_degree must lie in (0, 499] for 500 nodes"]),
    ("sbm:nodes=100,avg_degree=nan", ["avg_degree must lie in (0, 99]"]),
    ("sbm:nodes=1", ["sbm:nodes=1: nodes must be >= 2"]),
    ("sbm:nodes=50,blocks=80,features=80", ["blocks must lie in 1..50 (nodes)"]),
    ("sbm:blocks=1,p_in=0.5", ["key 'p_in' does nothing with blocks=1"]),
    ("rmat:scale=3,edge_factor=2,classes=16", ["classes must lie in 1..8 for scale 3"]),
    ("rmat:scale=4", ["edge_factor must lie in 1..7 for scale 4", "at most 120 undirected",
                      "edge_factor * 2^scale = 256"]),
    ("rmat:scale=1,edge_factor=1", ["scale must be >= 2"]),
])
def test_bad_generator_specs(spec, fragments):
    raises(spec, *fragments)


# A value of each key of each generator that the generator refuses.
_REFUSED = {"rmat": {"scale": 0, "edge_factor": 0, "features": 0, "classes": 0, "a": -1,
                     "b": -1, "c": -1, "seed": -1},
            "sbm": {"nodes": 1, "blocks": 0, "avg_degree": 0, "p_in": 2,
                    "degree_exponent": 1, "features": 0, "noise": -1, "feature_density": 2,
                    "label_noise": -0.5, "seed": -1}}


def test_every_generator_error_names_the_spec_and_its_key():
    """A refused value of each key of every generator is said with the spec and that key as
    the spec writes it, never the Python keyword behind it (``blocks``, not ``num_blocks``)."""
    assert {kind: set(keys) for kind, (_, keys) in GENERATORS.items()} == \
        {kind: set(values) for kind, values in _REFUSED.items()}  # every key has a case
    for kind, (_, keys) in GENERATORS.items():
        keywords = {keyword for key, (keyword, _, _) in keys.items() if keyword != key}
        for key, value in _REFUSED[kind].items():
            spec = f"{kind}:{key}={value}"
            problem = raises(spec, source=spec).removeprefix(f"{spec}: ")
            assert re.search(rf"\b{key}\b", problem), (spec, problem)
            assert not any(re.search(rf"\b{k}\b", problem) for k in keywords), (spec, problem)


def test_sbm_binary_features_favour_blocks_and_noisy_labels_leave_the_rest():
    """Binary features: 0/1 at about the density asked for, each column more often 1 in the
    block it favours (d (1 + a) against d (1 - a / (B - 1)), a = 1 / (1 + noise)).  Noisy
    labels change about q (B - 1) / B of the labels and nothing else: graph, features and
    split are the same spec's without them."""
    spec = "sbm:nodes=6000,blocks=2,avg_degree=10,features=400,feature_density=0.05,noise=1"
    ds = load(spec)
    x, y = np.asarray(ds.x), np.asarray(ds.y)
    assert set(np.unique(x)) == {0.0, 1.0}
    assert abs(x.mean() - 0.05) < 0.002
    in_block = np.stack([x[y == b].mean(0) for b in range(2)])  # [B, F]
    assert abs(in_block.max(0).mean() - 0.075) < 0.004
    assert abs(in_block.min(0).mean() - 0.025) < 0.004
    noisy = load(spec + ",label_noise=0.5")
    for field in ("x", "train_mask", "val_mask", "test_mask"):
        np.testing.assert_array_equal(getattr(noisy, field), getattr(ds, field))
    np.testing.assert_array_equal(noisy.graph.indices, ds.graph.indices)
    assert 0.22 < np.mean(np.asarray(noisy.y) != y) < 0.28
    assert_same_dataset(load("sbm:nodes=500,seed=3"), load("sbm:nodes=500,seed=3,label_noise=0"))


def test_generators_say_when_repeated_draws_merge_most_edges():
    dense = load("sbm:nodes=500,avg_degree=400,features=8")  # 100,000 draws on 500 vertices
    assert dense.graph.num_edges < 100_000
    assert f"{dense.graph.num_edges // 2:,} undirected edges" in dense.note
    assert "under half the nodes * avg_degree / 2 = 100,000 drawn" in dense.note
    assert load("sbm:nodes=2000,avg_degree=10,features=8").note == ""
    small = load("rmat:scale=4,edge_factor=7,features=2,classes=2")
    assert "under half the edge_factor * 2^scale = 112 drawn" in small.note
    assert "under half" not in load("rmat:scale=10,features=2,classes=2").note
    assert load("sbm:blocks=1,nodes=200").num_classes == 1  # p_in not given: nothing refused


def test_rmat_edges_size_range_determinism():
    src, dst = rmat_edges(10, 8, seed=3)
    assert len(src) == len(dst) == 8 * 2 ** 10 and src.dtype == dst.dtype == np.int64
    assert 0 <= min(src.min(), dst.min()) and max(src.max(), dst.max()) < 2 ** 10
    again = rmat_edges(10, 8, seed=3)
    np.testing.assert_array_equal(src, again[0])
    np.testing.assert_array_equal(dst, again[1])
    assert not np.array_equal(src, rmat_edges(10, 8, seed=4)[0])


def test_rmat_dataset_structure_and_skew():
    ds = rmat(12, 16, num_features=8, num_classes=5, seed=0)
    g = ds.graph
    assert g.num_nodes == 4096 and is_symmetric(g)
    src, dst = g.edges()
    assert not np.any(src == dst)
    assert dedup(g).num_edges == g.num_edges
    degrees = g.in_degrees()
    assert degrees.max() > 20 * degrees.mean()
    assert np.argmax(degrees) != 0  # hubs were permuted away from id 0
    assert ds.x.dtype == np.float32 and abs(float(ds.x.std()) - 1) < 0.05
    assert set(np.unique(ds.y)) == set(range(5))
    assert (ds.train_mask.sum(), ds.val_mask.sum(), ds.test_mask.sum()) == (2457, 819, 820)
    assert_same_dataset(ds, rmat(12, 16, num_features=8, num_classes=5, seed=0))
    assert not np.array_equal(ds.x, rmat(12, 16, num_features=8, num_classes=5, seed=1).x)


def test_sbm_determinism_homophily_and_labels():
    ds = sbm(20000, num_blocks=4, avg_degree=10, p_in=0.8, num_features=6, noise=1.0, seed=2)
    assert_same_dataset(ds, sbm(20000, num_blocks=4, avg_degree=10, p_in=0.8, num_features=6,
                                noise=1.0, seed=2))
    g = ds.graph
    assert is_symmetric(g) and ds.num_classes == 4
    src, dst = g.edges()
    assert not np.any(src == dst)
    intra = np.mean(ds.y[src] == ds.y[dst])
    assert abs(intra - (0.8 + 0.2 / 4)) < 0.02
    assert 8 < g.num_edges / g.num_nodes <= 10  # duplicates merge, so a little under 10
    degrees = g.in_degrees()
    assert degrees.max() > 20 * degrees.mean()  # degree-corrected: power-law weights
    # the one-hot block is where the label is; noise makes it imperfect
    assert np.mean(np.argmax(ds.x[:, :4], axis=1) == ds.y) < 0.9
    clean = sbm(2000, num_blocks=4, num_features=6, noise=0.0, seed=2)
    np.testing.assert_array_equal(clean.x[:, :4], np.eye(4, dtype=np.float32)[clean.y])
    assert not clean.x[:, 4:].any()
    assert np.bincount(clean.y).min() > 400  # blocks are uniform


@pytest.mark.parametrize("p_in", [0.0, 0.5])
def test_sbm_p_in(p_in):
    ds = sbm(20000, num_blocks=4, avg_degree=10, p_in=p_in, num_features=4, seed=0)
    src, dst = ds.graph.edges()
    assert abs(np.mean(ds.y[src] == ds.y[dst]) - (p_in + (1 - p_in) / 4)) < 0.02
