"""A user's own data: asymmetric edge lists, arbitrary vertex ids, keyed side files, split
files, unlabelled vertices, partitions that keep the ids, and PyG graphs."""
import gzip
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from distgnn.data.datasets import load
from distgnn.data.graph import GraphError
from distgnn.data.partition_checks import verify
from distgnn.data.partitions import read_meta, read_vertex_ids
from distgnn.data.pyg import from_pyg
from distgnn.data.side_files import check_classes
from distgnn.run import shard as shard_module
from distgnn.run.config import TrainConfig
from distgnn.run.shard import (
    ROW_NORM_WARNING,
    dataset_shard,
    negative_features,
    partition_shard,
)
from distgnn.timing import PhaseTimer
from partition.pyg import to_partitions
from tests.helpers.partitions import write_dir
from tests.helpers.threads_comm import run_ranks
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


def weighted_edges(graph) -> dict:
    """``{(src, dst): weight}`` of every stored edge of ``graph``."""
    src, dst = graph.edges()
    return dict(zip(zip(src.tolist(), dst.tolist()), graph.edge_weight.tolist()))


def test_symmetrize_keeps_the_weights(tmp_path):
    """Each edge keeps its weight, the reverse added takes the weight of the edge it reverses,
    a pair given both ways keeps both its weights, and the note that recommends
    --symmetrize says the weights go along."""
    edges = write(tmp_path / "g.txt", "0 1 5\n1 2 0.5\n2 0 3\n0 2 1\n3 3 2\n")
    assert "each with the weight of the edge it reverses" in load(edges).note
    graph = load(edges, symmetrize=True).graph
    assert weighted_edges(graph) == {(0, 1): 5, (1, 0): 5, (1, 2): 0.5, (2, 1): 0.5,
                                     (2, 0): 3, (0, 2): 1, (3, 3): 2}
    assert graph.num_edges == 7 and graph.unreciprocated_edges() == 0
    unweighted = load(write(tmp_path / "u.txt", "0 1\n1 2\n"))
    assert "--symmetrize" in unweighted.note and "weight" not in unweighted.note


def test_symmetrize_keeps_a_repeated_edge_once_and_refuses_two_weights(tmp_path):
    same = write(tmp_path / "same.txt", "a b 2\nb c 1\na b 2\n")
    assert weighted_edges(load(same, symmetrize=True).graph) == {
        (0, 1): 2, (1, 0): 2, (1, 2): 1, (2, 1): 1}
    assert load(same).graph.num_edges == 3  # without --symmetrize, kept as given
    two = write(tmp_path / "two.txt", "a b 2\nb c 1\nb a 4\na b 3\n")
    with pytest.raises(GraphError) as e:
        load(two, symmetrize=True)
    assert str(e.value) == (f"{two}: edge 'a' -> 'b' is given more than once, with the weights "
                            "2 and 3, and --symmetrize keeps each edge once: give it once, "
                            "with the weight meant")


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


# ---- headers, byte-order marks, line ends -----------------------------------------------------
RING = "".join(f"{i} {(i + 1) % 12}\n" for i in range(12))  # ids 0..11: "10" sorts before "2"


@pytest.mark.parametrize("text, note", [
    ("src dst\n" + RING, "line 1 ('src dst')"),
    ("source,target\n" + RING.replace(" ", ","), "line 1 ('source,target')"),
    ("from,to\n" + RING, "line 1 ('from,to')"),  # a comma header above whitespace data
    ("# my graph\n\nSource\tTarget\n" + RING.replace(" ", "\t"), r"line 3 ('Source\tTarget')"),
    ("\ufeffsrc dst\r\n" + RING.replace("\n", "\r\n"), "line 1 ('src dst')"),
    ("src dst weight\n" + RING.replace("\n", " 1.5\n"), "line 1 ('src dst weight')"),
])
def test_a_header_line_is_skipped_and_said(tmp_path, text, note):
    ds = load(write(tmp_path / "g.txt", text))
    assert ds.ids is None and ds.num_nodes == 12 and ds.graph.num_edges == 12
    plain = load(write(tmp_path / "plain.txt", RING))
    np.testing.assert_array_equal(ds.graph.indices, plain.graph.indices)
    assert f"note: g.txt: {note} is a header, skipped" in ds.summary()


def test_a_byte_order_mark_does_not_split_a_vertex(tmp_path):
    bom = "\ufeff"
    numbered = load(write(tmp_path / "n.txt", bom + RING))
    assert numbered.ids is None and numbered.num_nodes == 12 and not numbered.note.count("header")
    named = load(write(tmp_path / "names.txt", bom + "alice bob\nbob alice\n"))
    assert named.ids.tolist() == ["alice", "bob"]
    labels = write(tmp_path / "y.txt", bom + "alice 1\nbob 0\n")
    np.testing.assert_array_equal(load(tmp_path / "names.txt", labels=labels).y, [1, 0])
    gz = tmp_path / "g.txt.gz"
    with gzip.open(gz, "wt", encoding="utf-8") as f:
        f.write(bom + "src dst\n" + RING)
    ds = load(gz)
    assert ds.num_nodes == 12 and "g.txt.gz: line 1 ('src dst') is a header, skipped" in ds.note


def test_a_header_of_names_that_cannot_be_told_from_an_edge_is_refused(tmp_path):
    edges = write(tmp_path / "g.txt", "source target\nalice bob\nbob carol\n")
    with pytest.raises(GraphError, match="line 1: 'source target' looks like a header") as e:
        load(edges)
    assert e.value.source == str(edges) and "start it with #" in str(e.value)
    write(edges, "# source target\nalice bob\nbob carol\n")
    assert load(edges).ids.tolist() == ["alice", "bob", "carol"]
    # vertices that happen to be named like columns, with other edges: data, not a header
    ds = load(write(tmp_path / "words.txt", "from to\nto from\nfrom alice\n"))
    assert ds.ids.tolist() == ["alice", "from", "to"] and ds.graph.num_edges == 3
    # a weight column named in words tells a header apart even when the ids are names
    ds = load(write(tmp_path / "w.txt", "node_1,node_2,weight\nalice,bob,0.5\n"))
    assert ds.graph.num_edges == 1 and "line 1 ('node_1,node_2,weight')" in ds.note


def test_names_among_integer_ids_are_said(tmp_path):
    ds = load(write(tmp_path / "g.txt", "1 2\n2 10\n10 NA\n"))
    assert ds.ids.tolist() == ["1", "10", "2", "NA"]
    assert "sorted as text ('10' before '9'), because 'NA' is not an integer" in ds.note
    assert "sorted as text" not in load(write(tmp_path / "w.txt", "a b\nb c\n")).note


def test_side_files_with_headers_crlf_and_tabs(tmp_path):
    edges = write(tmp_path / "g.txt", RING)
    features = write(tmp_path / "x.csv", "f1,f2\r\n" + "".join(f"{i},{2 * i}\r\n"
                                                              for i in range(12)))
    labels = write(tmp_path / "y.txt", "label\n" + "".join(f"{i % 3}\n" for i in range(12)))
    ds = load(edges, features=features, labels=labels)
    np.testing.assert_array_equal(ds.x[:, 1], 2 * np.arange(12))
    np.testing.assert_array_equal(ds.y, np.arange(12) % 3)
    assert "x.csv: line 1 ('f1,f2') is a header, skipped" in ds.note
    assert "y.txt: line 1 ('label') is a header, skipped" in ds.note
    named = write(tmp_path / "n.txt", "a\tb\nb\tc\n")
    keyed = write(tmp_path / "k.txt", "\ufeffnode,f1,f2\r\nc,3,30\r\na,1,10\r\nb,2,20\r\n")
    keyed_labels = write(tmp_path / "kl.txt", "id\tclass\nb\t1\na\t0\n")
    ds = load(named, features=keyed, labels=keyed_labels)
    np.testing.assert_array_equal(ds.x, [[1, 10], [2, 20], [3, 30]])
    np.testing.assert_array_equal(ds.y, [0, 1, -1])
    assert "k.txt: line 1 ('node,f1,f2')" in ds.note and "kl.txt: line 1" in ds.note
    split = write(tmp_path / "s.txt", "vertex split\na train\nb test\n")
    ds = load(named, labels=keyed_labels, split_file=split)
    assert masks(ds) == [[0], [], [1]] and "s.txt: line 1 ('vertex split')" in ds.split_note


def test_side_file_lines_of_another_width_name_the_line(tmp_path):
    edges = write(tmp_path / "g.txt", RING)
    features = write(tmp_path / "x.txt", "1 2\n" * 5 + "1 2 3\n" + "1 2\n" * 6)
    with pytest.raises(GraphError, match="line 6: expected 2 fields like the first data line, "
                       "found 3") as e:
        load(edges, features=features)
    assert e.value.source == str(features)
    keyed = write(tmp_path / "k.txt", "a 1 2\nb x 2\n")
    with pytest.raises(GraphError, match="line 2: feature row value 'x' is not a number"):
        load(write(tmp_path / "n.txt", "a b\n"), features=keyed)


# ---- which file is wrong ----------------------------------------------------------------------
def test_a_side_file_of_the_wrong_length_is_the_one_blamed(tmp_path):
    edges = write(tmp_path / "g.txt", RING)  # largest id 11: 12 vertices
    labels = write(tmp_path / "y.txt", "".join(f"{i % 3}\n" for i in range(12)))
    extra = write(tmp_path / "x.txt", "1 2\n" * 13)  # one feature row too many

    def blamed(**files):
        with pytest.raises(GraphError) as e:
            load(edges, **files)
        assert "\n" not in str(e.value)
        return e.value.source, e.value.problem

    source, problem = blamed(features=extra, labels=labels)
    assert source == str(extra)
    assert problem == ("13 feature rows, but y.txt has 12 labels and g.txt's largest vertex id "
                       "is 11: both have one row per vertex 0..N-1")
    features = write(tmp_path / "x12.txt", "1 2\n" * 12)
    long_labels = write(tmp_path / "y13.txt", "0\n1\n2\n" * 4 + "1\n")
    assert blamed(features=features, labels=long_labels)[0] == str(long_labels)
    both = blamed(features=extra, labels=write(tmp_path / "y14.txt", "0\n1\n" * 7))
    assert both[0] == str(extra) and both[1].endswith("so one of the two files is wrong")
    short = write(tmp_path / "x5.txt", "1 2\n" * 5)
    assert blamed(features=short) == (str(short), "5 feature rows, but g.txt's largest vertex "
                                      "id is 11: one feature row per vertex 0..N-1 "
                                      "(N at least 12)")
    np.save(tmp_path / "nan.npy", np.where(np.arange(24).reshape(12, 2) == 7, np.nan, 1.0))
    assert blamed(features=tmp_path / "nan.npy") == (
        str(tmp_path / "nan.npy"), "features contain NaN or inf (first at vertex 3)")
    # isolated vertices after the largest id stay allowed when the side files agree
    ds = load(edges, features=write(tmp_path / "x14.txt", "1 2\n" * 14),
              labels=write(tmp_path / "y14b.txt", "0\n1\n" * 7))
    assert ds.num_nodes == 14 and ds.graph.in_degrees()[12:].tolist() == [0, 0]


def test_named_side_file_errors_name_the_file_and_vertex(tmp_path):
    edges = write(tmp_path / "g.txt", "b a\nc b\n")
    np.save(tmp_path / "x.npy", np.ones((4, 2), np.float32))
    with pytest.raises(GraphError, match="4 feature rows for the 3 distinct ids of g.txt") as e:
        load(edges, features=tmp_path / "x.npy")
    assert e.value.source == str(tmp_path / "x.npy")
    keyed = write(tmp_path / "x.txt", "a 1\nb inf\nc 2\n")
    with pytest.raises(GraphError, match="NaN or inf \\(first at vertex 'b'\\)") as e:
        load(edges, features=keyed)
    assert e.value.source == str(keyed)


# ---- vertices without edges, given by keyed files ---------------------------------------------
def test_keyed_files_add_vertices_without_edges(tmp_path):
    edges = write(tmp_path / "g.txt", "bob,alice\ncarol,bob\n")
    features = write(tmp_path / "x.txt", "zoe 5 50\nalice 1 10\ndave 4 40\ncarol 3 30\n"
                                         "bob 2 20\n")
    labels = write(tmp_path / "y.txt", "carol 1\ndave 0\nalice 0\nbob 1\n")  # zoe unlabelled
    ds = load(edges, features=features, labels=labels)
    assert ds.ids.tolist() == ["alice", "bob", "carol", "dave", "zoe"]  # the union, sorted
    np.testing.assert_array_equal(ds.x[:, 0], [1, 2, 3, 4, 5])
    np.testing.assert_array_equal(ds.y, [0, 1, 1, 0, -1])
    assert ds.graph.in_degrees().tolist() == [1, 1, 0, 0, 0]  # dave and zoe: no edges
    src, dst = ds.graph.edges()
    assert sorted(zip(ds.ids[src].tolist(), ds.ids[dst].tolist())) == [
        ("bob", "alice"), ("carol", "bob")]
    labelled = ds.train_mask | ds.val_mask | ds.test_mask
    assert labelled.tolist() == [True, True, True, True, False]
    assert "vertex ids: 5 strings" in ds.summary()
    assert "x.txt adds 2 vertices without edges (first 'zoe')" in ds.note
    assert "y.txt adds 1 vertex without edges (first 'dave')" in ds.note
    # ids that all miss the edge list's are other names for its vertices, not new vertices
    quoted = write(tmp_path / "q.txt", '"alice" 0\n"bob" 1\n')
    with pytest.raises(GraphError, match="none of its 2 ids is an id of g.txt \\(its first "
                       "'\"alice\"', the edge list's 'bob'\\)") as e:
        load(edges, labels=quoted)
    assert e.value.source == str(quoted)
    # a vertex only the labels file names needs a features line too
    with pytest.raises(GraphError, match="no features for vertex 'erin' .*6 distinct ids of "
                       "g.txt, x.txt and y2.txt") as e:
        load(edges, features=features, labels=write(tmp_path / "y2.txt", "erin 0\nbob 1\n"))
    assert e.value.source == str(features)
    # an .npy side file is in the order of the union of the edge list's and the keyed ids
    np.save(tmp_path / "x.npy", np.arange(8, dtype=np.float32).reshape(4, 2))
    ds = load(edges, features=tmp_path / "x.npy", labels=labels)
    assert ds.ids[3] == "dave" and ds.x[3].tolist() == [6, 7]
    # integer names (a negative id): the union sorts numerically
    ds = load(write(tmp_path / "i.txt", "-5 3\n3 -5\n"),
              labels=write(tmp_path / "yi.txt", "100 1\n-5 0\n3 1\n"))
    assert ds.ids.tolist() == [-5, 3, 100] and ds.y.tolist() == [0, 1, 1]
    with pytest.raises(GraphError, match="vertex 'bob' is not an integer of int64's range"):
        load(tmp_path / "i.txt", labels=write(tmp_path / "yb.txt", "bob 1\n"))


def test_partitions_keep_the_ids_of_vertices_without_edges(tmp_path):
    edges = write(tmp_path / "g.txt", "".join(f"v{i} v{(i + 1) % 8}\nv{(i + 1) % 8} v{i}\n"
                                              for i in range(8)))
    labels = write(tmp_path / "y.txt", "".join(f"v{i} {i % 2}\n" for i in range(10)))
    out = tmp_path / "parts"
    done = subprocess.run([str(BIN / "distgnn-partition"), str(edges), "--parts", "2",
                           "--out", str(out), "--labels", str(labels), "--no-progress"],
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert read_vertex_ids(out).tolist() == sorted(f"v{i}" for i in range(10))
    assert read_meta(out)["num_nodes"] == 10 and verify(out) == []


# ---- labels are classes 0..C-1 ----------------------------------------------------------------
@pytest.mark.parametrize("labels, problem", [
    ([1, 2, 3, 4, 1], "labels are 1..4: classes must be numbered 0..C-1 (subtract 1); class 0 "
                      "has no vertex"),
    ([3, 4, 3, -1], "labels are 3..4: classes must be numbered 0..C-1 (subtract 3); classes "
                    "0..2 have no vertex"),
    ([0, 1, 2, 5, -1], "labels are 0..5, but classes 3, 4 have no vertex: classes must be "
                       "numbered 0..C-1 without gaps (renumber the 4 labels in use as 0..3)"),
    ([0, 9, 20, 40, 80, 81], "labels are 0..81, but classes 1..8, 10..19, 21..39, ... have no "
                             "vertex"),
    ([0, 1, -2], "label -2 of vertex 2: classes are numbered 0..C-1 and -1 marks an "
                 "unlabelled vertex"),
])
def test_label_sets_that_are_not_classes_are_refused(labels, problem):
    with pytest.raises(GraphError) as e:
        check_classes(np.array(labels), "y.txt")
    assert str(e.value).startswith(f"y.txt: {problem}")


@pytest.mark.parametrize("labels", [[0, 1, 2, 1], [-1, -1], [], [0, -1, 0], [2, 0, 1, -1]])
def test_classes_0_to_c_minus_1_and_unlabelled_vertices_pass(labels):
    check_classes(np.array(labels, np.int64), "y.txt")


def test_labels_that_are_names_or_fractions_say_how_to_fix_them(tmp_path):
    edges = write(tmp_path / "g.txt", RING)
    gold = write(tmp_path / "y.txt", "".join(f"{['gold', 'silver'][i % 2]}\n" for i in range(12)))
    with pytest.raises(GraphError) as e:
        load(edges, labels=gold)
    assert e.value.source == str(gold) and e.value.problem == (
        "line 1: label 'gold' is a name: classes are numbered 0..C-1, so replace each class "
        "name by its number (gold = 0, silver = 1); -1 marks an unlabelled vertex")
    with pytest.raises(GraphError, match="line 3: label '2.5' is not an integer"):
        load(edges, labels=write(tmp_path / "f.txt", "0\n1\n2.5\n" + "0\n" * 9))
    names = write(tmp_path / "n.txt", "a b\nb c\n")
    with pytest.raises(GraphError, match="line 2: label 'silver' is a name"):
        load(names, labels=write(tmp_path / "k.txt", "a 0\nb silver\n"))
    shifted = write(tmp_path / "s.txt", "".join(f"{1 + i % 4}\n" for i in range(12)))
    with pytest.raises(GraphError, match="labels are 1..4: .*subtract 1") as e:
        load(edges, labels=shifted)
    assert e.value.source == str(shifted)
    # unlabelled vertices (-1, or no key) stay allowed
    ds = load(names, labels=write(tmp_path / "ok.txt", "a 1\nc 0\n"))
    assert ds.y.tolist() == [1, -1, 0] and ds.num_classes == 2


def test_npz_labels_must_be_classes(tmp_path):
    from tests.helpers.hostile import write_npz

    path = write_npz(tmp_path / "d.npz", y=np.arange(60) % 4 + 1)
    with pytest.raises(GraphError, match="labels are 1..4: .*subtract 1") as e:
        load(path)
    assert e.value.source == str(path)


# ---- features that row normalisation would spoil ----------------------------------------------
def test_negative_features_are_found_block_by_block(tmp_path, monkeypatch):
    monkeypatch.setattr(shard_module, "_NORM_BLOCK_ELEMENTS", 6)  # blocks of 3 rows of 2
    x = np.ones((10, 2), np.float32)
    assert not negative_features(x) and not negative_features(np.zeros((0, 2), np.float32))
    x[9, 1] = -1e-30  # in the last, partial block
    assert negative_features(x)
    mapped = np.lib.format.open_memmap(tmp_path / "x.npy", "w+", np.float32, (10, 2))
    mapped[:] = x
    assert negative_features(mapped) and not negative_features(np.abs(mapped))


def test_row_normalisation_of_negative_features_warns_once(tmp_path):
    said = []
    data = load("sbm:nodes=300,blocks=3,features=6,avg_degree=8")  # Gaussian noise: negative
    dataset_shard(data, TrainConfig(), PhaseTimer(), log=said.append)
    assert said.count(ROW_NORM_WARNING) == 1
    assert "--feature-norm none" in ROW_NORM_WARNING and "\n" not in ROW_NORM_WARNING
    said.clear()
    dataset_shard(data, TrainConfig(feature_norm="none"), PhaseTimer(), log=said.append)
    assert ROW_NORM_WARNING not in said
    dataset_shard(load("cora"), TrainConfig(), PhaseTimer(), log=said.append)  # counts
    assert ROW_NORM_WARNING not in said


@pytest.mark.parametrize("negative", [True, False])
def test_partitions_warn_once_from_rank_0(tmp_path, capsys, negative):
    from tests.helpers.hostile import write_npz

    x = np.random.default_rng(0).random((80, 4), dtype=np.float32)
    write_dir(load(write_npz(tmp_path / "d.npz", n=80, features=4, x=x)), tmp_path / "p", 2)
    ids = [np.load(tmp_path / "p" / f"part-{r:05d}" / "global_ids.npy") for r in (0, 1)]
    only_rank_1 = np.setdiff1d(ids[1], ids[0])[0]
    if negative:  # on a vertex that rank 0 does not hold: the ranks must agree to warn
        x[only_rank_1, 2] = -0.5
        write_dir(load(write_npz(tmp_path / "d.npz", n=80, features=4, x=x)), tmp_path / "p",
                  2, force=True)
    capsys.readouterr()
    run_ranks(2, lambda comm: partition_shard(tmp_path / "p", TrainConfig(), comm,
                                              PhaseTimer(), torch.device("cpu"), "numba"))
    assert capsys.readouterr().out.count(ROW_NORM_WARNING) == int(negative)


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


def test_an_empty_side_file_is_one_line_naming_its_flag(tmp_path):
    """A split file that puts no vertex in any mask (empty, comments only, masks all false)
    is refused when read, and every side file's error names it after its flag."""
    edges = write(tmp_path / "g.txt", "0 1\n1 2\n2 0\n")
    named = write(tmp_path / "n.txt", "a b\nb c\nc a\n")
    labels = write(tmp_path / "y.txt", "0\n1\n0\n")
    empty, comments = write(tmp_path / "e", ""), write(tmp_path / "c", "# nothing yet\n")
    none = tmp_path / "none.npz"
    np.savez(none, **{f"{m}_mask": np.zeros(3, bool) for m in ("train", "val", "test")})
    for split in (empty, comments, none):
        with pytest.raises(GraphError) as e:
            load(edges, labels=labels, split_file=split)
        assert str(e.value).startswith(f"--split-file {split}: puts no vertex in train, val "
                                       "or test") and e.value.source == str(split)
    for flag, files, problem in [
            ("--labels", dict(labels=empty), "0 labels, but g.txt's largest vertex id is 2"),
            ("--features", dict(features=empty), "0 feature rows, but g.txt's largest"),
            ("--labels", dict(labels=comments), "0 labels"),
            ("--labels", dict(labels=empty, spec=named), "holds no 'vertex label' line"),
            ("--features", dict(features=empty, spec=named),
             "holds no 'vertex feature...' line")]:
        with pytest.raises(GraphError) as e:
            load(files.pop("spec", edges), **files)
        source = next(iter(files.values()))
        assert str(e.value).startswith(f"{flag} {source}: {problem}"), str(e.value)
        assert (e.value.source, e.value.flag) == (str(source), flag)
    # the edge list's own error names no flag
    with pytest.raises(GraphError) as e:
        load(write(tmp_path / "bad.txt", "0 1\n1 2 3 4\n"), labels=labels)
    assert e.value.flag is None and str(e.value).startswith(f"{tmp_path / 'bad.txt'}: line 2")


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
    data.train_mask, data.val_mask, data.test_mask = (stacked, stacked.roll(5, 0),
                                                      stacked.roll(10, 0))
    ds = from_pyg(data, split=1)
    assert masks(ds)[0] == [0, 1, 2, 3, 4] and masks(ds)[2] == [10, 11, 12, 13, 14]
    assert "split 1 of 2" in ds.split_note
    with pytest.raises(GraphError, match="split 2 out of range"):
        from_pyg(data, split=2)
