"""The out-of-core partitioner (partition/stream.py) against the in-memory one."""
from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys

import numpy as np
import pytest

from distgnn.data.binary_edges import EdgeFileWriter
from distgnn.data.generators import random_split
from distgnn.data.graph import CSRGraph, GraphError, NodeDataset
from distgnn.data.partition_checks import verify
from distgnn.data.partitions import load
from partition import stream
from partition.cli import partition_dataset
from tests.helpers.partitions import (
    held_stream_code,
    run_cli,
    start_held,
    write_edge_files,
)


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
    partition_dataset(whole, tmp_path / "memory", 4, method="libra", seed=3,
                      order_vertices="given")
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


# ---- stop signals and what a killed run left -----------------------------------------------------
def stream_argv(tmp_path, out, *extra):
    edges, x, y = write_edge_files(tmp_path)
    return [edges, "--features", x, "--labels", y, "--parts", 2, "--mode", "stream",
            "--no-progress", "--out", out, *extra]


def hidden(folder) -> list[str]:
    return sorted(f.name for f in folder.iterdir() if f.name.startswith("."))


@pytest.mark.parametrize("sig, at, says", [
    (signal.SIGTERM, "assign", "SIGTERM received: stopped streaming, removed its work folder "),
    (signal.SIGINT, "write", "and any partly written copy of ")])
def test_a_stop_signal_removes_the_work_files_and_says_so_in_one_line(tmp_path, sig, at, says):
    """A real process, held in pass 3 or after writing its first partition, gets a real
    signal: it removes the work folder (and the partly written copy of --out), says so in
    one line and exits 128 + the signal; nothing is left beside --out."""
    out = tmp_path / "p"
    proc = start_held([sys.executable, "-c", held_stream_code(at),
                       *stream_argv(tmp_path, out)])
    assert len(hidden(tmp_path)) == (1 if at == "assign" else 2)  # the work folder (+ copy)
    proc.send_signal(sig)
    _, err = proc.communicate(timeout=60)
    lines = err.strip().splitlines()
    assert proc.returncode == 128 + sig and len(lines) == 1, err
    assert lines[0].startswith("distgnn-partition: ") and says in lines[0], err
    assert lines[0].endswith(f"; nothing was written to {out}"), err
    assert "of bucket and partition files" in lines[0], err
    assert hidden(tmp_path) == [] and not out.exists()


def test_a_stop_signal_while_replacing_keeps_the_old_partitions(tmp_path):
    out = tmp_path / "p"
    argv = stream_argv(tmp_path, out, "--force")
    assert run_cli([*argv, "--seed", 5]) == 0
    before = {f: f.read_bytes() for f in out.rglob("*") if f.is_file()}
    proc = start_held([sys.executable, "-c", held_stream_code("write"), *argv])
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 128 + signal.SIGTERM and "nothing was written" in err, err
    assert {f: f.read_bytes() for f in out.rglob("*") if f.is_file()} == before
    assert hidden(tmp_path) == []


def test_a_stop_signal_after_the_directory_is_in_place_says_it_was_written(tmp_path):
    out = tmp_path / "p"
    proc = start_held([sys.executable, "-c", held_stream_code("written"),
                       *stream_argv(tmp_path, out)])
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 128 + signal.SIGTERM, err
    assert err.startswith(f"distgnn-partition: SIGTERM received after {out} was written; "
                          "removed its work folder ") and err.count("\n") == 1, err
    assert verify(out) == [] and hidden(tmp_path) == []


def test_the_work_folder_of_a_killed_run_is_removed_by_the_next(tmp_path, capsys):
    """SIGKILL leaves the work folder (nothing can run); the next run for the same --out
    proves it is a work folder of a run that is gone, removes it and says so."""
    out = tmp_path / "p"
    argv = stream_argv(tmp_path, out)
    proc = start_held([sys.executable, "-c", held_stream_code("assign"), *argv])
    proc.kill()
    proc.communicate(timeout=60)
    [left] = hidden(tmp_path)
    marker = json.loads((tmp_path / left / stream.WORK_MARKER).read_text())
    assert marker["pid"] == proc.pid and left.endswith(marker["token"])
    assert run_cli(argv) == 0
    assert f"removed {tmp_path / left}: left by an earlier run that was killed" in \
        capsys.readouterr().out
    assert hidden(tmp_path) == [] and verify(out) == []


def dead_pid() -> int:
    """The id of a process that has ended (and been reaped)."""
    proc = subprocess.Popen(["true"])
    proc.wait()
    return proc.pid


def work_like(tmp_path, token="0123456789abcdef", marker: dict | None = None):
    """A folder beside ``tmp_path/p`` named as a work folder, with spill files and a marker:
    a dead writer of this host, its fields changed by ``marker`` (None: no marker)."""
    folder = tmp_path / f".p.stream-{token}"
    (folder / "parts").mkdir(parents=True)
    (folder / "parts" / "00000.bin").write_bytes(b"\0" * 64)
    if marker is not None:
        fields = {"writer": stream.WORK_WRITER, "pid": dead_pid(),
                  "host": socket.gethostname(), "token": token, **marker}
        (folder / stream.WORK_MARKER).write_text(json.dumps(fields))
    return folder


@pytest.mark.parametrize("marker, user_file, removed", [
    ({}, False, True),
    (None, False, False),  # made by hand: no marker
    ({"pid": os.getpid()}, False, False),  # its writer still runs
    ({"host": "elsewhere"}, False, False),  # another host's: its process cannot be looked up
    ({"token": "fedcba9876543210"}, False, False),  # a marker copied from another folder
    ({"pid": "1"}, False, False),  # not what the writer writes
    ({"writer": "someone"}, False, False),
    ({}, True, False)])  # a file of someone else's inside
def test_only_provable_work_folders_of_runs_that_are_gone_are_removed(tmp_path, marker,
                                                                       user_file, removed):
    folder = work_like(tmp_path, marker=marker)
    if user_file:
        (folder / "notes.txt").write_text("mine")
    got = stream.remove_stale_work(tmp_path / "p")
    assert got == ([folder] if removed else []) and folder.exists() != removed


def test_another_outputs_work_folder_and_a_short_token_are_left_alone(tmp_path):
    other = work_like(tmp_path, marker={})
    other.rename(tmp_path / ".q.stream-0123456789abcdef")
    short = work_like(tmp_path, token="0123", marker={})
    assert stream.remove_stale_work(tmp_path / "p") == []
    assert short.exists() and (tmp_path / ".q.stream-0123456789abcdef").exists()


def test_the_stream_says_what_it_takes_instead_of_auto_and_refuses_split(tmp_path, capsys):
    argv = stream_argv(tmp_path, tmp_path / "p")
    assert run_cli(argv) == 0
    first = capsys.readouterr().out.splitlines()[0]
    assert first.endswith("libra in degree order, local vertex order given (what "
                          "--order-vertices auto takes when streaming), the two directions "
                          "of an edge placed independently"), first
    assert run_cli([*argv[:-2], "--out", tmp_path / "q", "--split", 1]) == 2
    assert capsys.readouterr().err.strip().endswith("a split from --split-file only; not "
                                                    "--split 1")
    assert not (tmp_path / "q").exists()


# --- the hybrid (method ne): expansion of the low-degree edges, the rest streamed ---

def rmat_files(folder, scale=11):
    from distgnn.data.generators import write_rmat_files

    write_rmat_files(folder, scale, 8, 3, 3, seed=4)
    data = stream.vertex_data(folder / "x.npy", folder / "y.npy", folder / "split.npz")
    return folder / "edges.npy", data


def edge_list(path):
    from distgnn.data.binary_edges import iter_edges

    pieces = list(iter_edges(path, 1 << 20))
    return np.concatenate([p[0] for p in pieces]), np.concatenate([p[1] for p in pieces])


@pytest.mark.parametrize("bucket_edges", [1 << 24, 5000])  # one bucket; several
def test_the_hybrid_cuts_every_edge_once_balanced_and_replicates_less_than_libra(
        tmp_path, monkeypatch, bucket_edges):
    """With a budget for about half of the edges, some are expanded and the others streamed;
    the directory holds every edge once (verify against the file), no partition passes
    ceil(E / P), the repeats of the file are seen, and it replicates less than the stream's
    Libra on R-MAT."""
    monkeypatch.setattr(stream, "BUCKET_EDGES", bucket_edges)
    monkeypatch.setattr(stream, "CHUNK_EDGES", 3000)
    edges, data = rmat_files(tmp_path / "g")
    src, dst = edge_list(edges)
    n, total = len(data.y), len(src)
    lines = []
    budget = stream.BYTES_PER_VERTEX * n + stream.BYTES_PER_ITEM * total // 2
    hybrid = stream.partition_edge_file(edges, data, tmp_path / "ne", 8, seed=1,
                                        log=lines.append, expansion_bytes=budget)
    libra = stream.partition_edge_file(edges, data, tmp_path / "libra", 8, seed=1,
                                       log=lambda s: None)
    assert verify(tmp_path / "ne", (src, dst)) == []
    expanded = [line for line in lines if line.startswith("expansion of the ")]
    assert len(expanded) == 1
    count = int(expanded[0].split()[3].replace(",", ""))
    assert total // 8 < count <= total // 2
    assert hybrid["method"] == "ne" and hybrid["multigraph"] is True
    sizes = [load(tmp_path / "ne", p).graph.num_edges for p in range(8)]
    assert sum(sizes) == total and max(sizes) <= -(-total // 8)
    assert hybrid["replication_factor"] < 0.97 * libra["replication_factor"]


def test_the_hybrid_holds_what_its_budget_allows(tmp_path):
    """A budget below the per-vertex state is refused before any edge is bucketed; a budget
    of the per-vertex state only expands nothing (the stream's Libra, the same cut); one of
    every edge expands them all."""
    edges, data = rmat_files(tmp_path / "g", 9)
    n, total = len(data.y), len(edge_list(edges)[0])
    with pytest.raises(GraphError, match="does not hold the expansion's state of 512 "):
        stream.partition_edge_file(edges, data, tmp_path / "no", 4,
                                   expansion_bytes=stream.BYTES_PER_VERTEX * n - 1)
    assert not (tmp_path / "no").exists()
    runs = {}
    for name, budget in (("none", stream.BYTES_PER_VERTEX * n), ("all", 10**9), ("libra", None)):
        lines = []
        runs[name] = stream.partition_edge_file(edges, data, tmp_path / name, 4,
                                                log=lines.append, expansion_bytes=budget)
        runs[name]["lines"] = lines
    assert any(line.startswith("expansion of the 0 edges") for line in runs["none"]["lines"])
    assert runs["none"]["replication_factor"] == runs["libra"]["replication_factor"]
    assert any(line.startswith(f"expansion of the {total:,} edges")
               for line in runs["all"]["lines"])
    assert runs["all"]["edge_balance"] <= 1.001


def test_expansion_degree_is_the_largest_that_fits():
    from partition.expand import expansion_degree

    by_degree = np.array([0, 4, 0, 6, 10])  # cumulative 0, 4, 4, 10, 20
    assert expansion_degree(by_degree, 3) == 0
    assert expansion_degree(by_degree, 4) == 2
    assert expansion_degree(by_degree, 19) == 3
    assert expansion_degree(by_degree, 20) == 4
    assert expansion_degree(by_degree, -1) == -1


def test_a_continued_cut_fills_no_partition_beyond_its_capacity():
    """Libra after another cut (:meth:`GreedyStream.continue_cut`): the edges of a vertex
    whose partitions are full go elsewhere, and no partition passes the capacity."""
    from partition.assign import GreedyStream

    rng = np.random.default_rng(0)
    n = 200
    src, dst = rng.integers(0, n, 4000), rng.integers(0, n, 4000)
    degree = np.bincount(src, minlength=n) + np.bincount(dst, minlength=n)
    stream_ = GreedyStream("libra", degree.astype(np.int64), 4, 0)
    first = np.zeros(500, np.int32)  # 500 edges all in partition 0: its hubs live there
    stream_.continue_cut(src[:500], dst[:500], first, 1000)
    part = stream_.assign(src[500:], dst[500:])
    load = np.bincount(np.concatenate([first, part]), minlength=4)
    assert load.tolist() == [1000] * 4  # partition 0 took 500 more, its room, and no more


def test_the_cli_streams_ne_as_the_hybrid_and_refuses_memory_elsewhere(files, tmp_path, capsys):
    """``--method ne --mode stream`` says what it expands and records method ne; --memory
    with another method or in memory is refused in one line, before anything is read."""
    from partition.cli import main

    folder = files[0]
    data = [str(folder / "edges.npy"), "--features", str(folder / "x.npy"), "--labels",
            str(folder / "y.npy"), "--parts", "2"]
    assert main([*data, "--mode", "stream", "--method", "ne", "--memory", "0.001",
                 "--out", str(tmp_path / "ne")]) == 0
    out = capsys.readouterr().out
    assert "ne on the edges between vertices of low degree within 1.0 MiB" in out
    assert "expansion of the " in out
    assert json.loads((tmp_path / "ne" / "meta.json").read_text())["method"] == "ne"
    for extra in (["--mode", "memory", "--method", "ne", "--memory", "1"],
                  ["--mode", "stream", "--memory", "1"],
                  ["--mode", "stream", "--method", "ne", "--memory", "0"]):
        assert run_cli([*data, *extra, "--out", tmp_path / "no"]) == 2
        err = capsys.readouterr().err
        assert "--memory bounds the expansion of --method ne when streaming" in err, err
        assert len(err.strip().splitlines()) == 1
    assert not (tmp_path / "no").exists()
