"""The out-of-core partitioner (partition/stream.py) against the in-memory one."""
from __future__ import annotations

import json

import numpy as np
import pytest

from distgnn.edge_file import EdgeFileWriter
from distgnn.generators import random_split
from distgnn.graph import CSRGraph, GraphError, NodeDataset
from partition import stream
from partition.cli import partition_dataset
from partition.format import load, verify


def directed_graph(n=400, e=3000, seed=0):
    """A skewed directed multigraph: repeated edges, self-loops, isolated vertices."""
    rng = np.random.default_rng(seed)
    src = (rng.pareto(1.2, e) * 7).astype(np.int64) % (n - 20)
    dst = rng.integers(0, n - 20, e)
    src[:50], dst[:50] = src[50:100], dst[50:100]  # repeats
    return src, dst, n


@pytest.fixture
def files(tmp_path):
    src, dst, n = directed_graph()
    writer = EdgeFileWriter(tmp_path / "edges.npy", len(src))
    writer.write(src[:1000], dst[:1000])
    writer.write(src[1000:], dst[1000:])
    writer.close()
    rng = np.random.default_rng(1)
    x = rng.standard_normal((n, 5), dtype=np.float32)
    y = rng.integers(0, 3, n)
    y[:7] = -1  # unlabelled
    np.save(tmp_path / "x.npy", x)
    np.save(tmp_path / "y.npy", y)
    return tmp_path, src, dst, x, y


@pytest.mark.parametrize("bucket_edges", [1 << 24, 700])  # one bucket; five
def test_streamed_partitions_equal_the_in_memory_ones(files, tmp_path, monkeypatch,
                                                      bucket_edges):
    """The same edge partition, roots, local graphs, rows and split tables as the in-memory
    Libra (degree order, local order given) on the same graph, for one bucket and for many."""
    folder, src, dst, x, y = files
    monkeypatch.setattr(stream, "BUCKET_EDGES", bucket_edges)
    monkeypatch.setattr(stream, "CHUNK_EDGES", 512)
    data = stream.vertex_data(folder / "x.npy", folder / "y.npy", None)
    meta = stream.partition_edge_file(folder / "edges.npy", data, tmp_path / "streamed", 4,
                                      seed=3, log=lambda s: None)
    masks = random_split(len(y), np.random.default_rng(0), eligible=y != -1)
    whole = NodeDataset(CSRGraph.from_edges(src, dst, len(y)), x, y, *masks, name="edges")
    partition_dataset(whole, tmp_path / "memory", 4, seed=3, order_vertices="given")
    assert verify(tmp_path / "streamed", whole.graph.edges()) == []
    want = json.loads((tmp_path / "memory" / "meta.json").read_text())
    for key in ("num_nodes", "num_edges", "replication_factor", "edge_balance",
                "root_balance", "split_vertices", "multigraph", "num_classes"):
        assert meta[key] == want[key], key
    assert meta["multigraph"] is True
    for p in range(4):
        a, b = load(tmp_path / "streamed", p), load(tmp_path / "memory", p)
        for name in ("global_ids", "root_rank", "root_local", "in_degree", "leaf_ptr",
                     "leaf_root_local", "leaf_remote_local", "train_mask", "x", "y"):
            np.testing.assert_array_equal(np.asarray(getattr(a, name)),
                                          np.asarray(getattr(b, name)), err_msg=name)
        np.testing.assert_array_equal(a.graph.indptr, b.graph.indptr)
        np.testing.assert_array_equal(a.graph.indices, b.graph.indices)
    leftovers = [f for f in tmp_path.iterdir() if f.name.startswith(".")]
    assert leftovers == []  # the bucket and spill files are gone


def test_an_id_beyond_the_features_is_refused_and_nothing_is_written(files, tmp_path):
    folder, src, dst, x, y = files
    data = stream.vertex_data(folder / "x.npy", folder / "y.npy", None)
    short = stream.VertexData(x[:100], y[:100], *(m[:100] for m in (
        data.train_mask, data.val_mask, data.test_mask)))
    with pytest.raises(GraphError, match="out of range for the 100 vertices"):
        stream.partition_edge_file(folder / "edges.npy", short, tmp_path / "out", 2,
                                   log=lambda s: None)
    assert not (tmp_path / "out").exists()
    assert [f for f in tmp_path.iterdir() if f.name.startswith(".")] == []


def test_the_mode_is_chosen_and_said_and_unsupported_flags_are_refused(files, tmp_path,
                                                                        capsys):
    """auto loads an edge file that fits (and says so); --mode stream streams it; flags the
    stream does not support are refused by name; a text edge list cannot be streamed."""
    from partition.cli import main

    folder = files[0]
    data = [str(folder / "edges.npy"), "--features", str(folder / "x.npy"), "--labels",
            str(folder / "y.npy"), "--parts", "2"]
    assert main([*data, "--out", str(tmp_path / "auto")]) == 0
    assert capsys.readouterr().out.startswith("partitioning in memory (the in-memory path "
                                              "needs about ")
    assert main([*data, "--mode", "stream", "--out", str(tmp_path / "stream")]) == 0
    out = capsys.readouterr().out
    assert out.startswith("streaming ") and "pass 3 (assignment)" in out
    assert main([*data, "--mode", "stream", "--method", "hdrf", "--weights", "1,2",
                 "--out", str(tmp_path / "no")]) == 2
    assert "not --method hdrf, --weights" in capsys.readouterr().err
    (tmp_path / "e.txt").write_text("0 1\n1 2\n")
    assert main([str(tmp_path / "e.txt"), "--parts", "2", "--mode", "stream",
                 "--out", str(tmp_path / "no")]) == 2
    assert "--mode stream needs a binary edge file" in capsys.readouterr().err
    assert not (tmp_path / "no").exists()


def test_a_disk_without_room_for_the_stream_is_refused_before_any_pass(files, tmp_path,
                                                                        monkeypatch):
    folder = files[0]
    data = stream.vertex_data(folder / "x.npy", folder / "y.npy", None)
    seen = []
    monkeypatch.setattr(stream, "free_space_problem",
                        lambda path, nbytes: seen.append(nbytes) or "needs more")
    with pytest.raises(GraphError, match="streaming it needs more"):
        stream.partition_edge_file(folder / "edges.npy", data, tmp_path / "out", 2,
                                   log=lambda s: None)
    assert seen[0] >= 2 * (folder / "edges.npy").stat().st_size
    assert not (tmp_path / "out").exists()
