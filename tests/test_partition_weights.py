"""Weighted shares (--weights): unequal capacities for ranks of unequal speed."""
import json
import shutil

import numpy as np
import pytest

import partition
from distgnn.data.datasets import load as load_dataset
from distgnn.data.partition_writing import FILE_OVERHEAD
from distgnn.data.partitions import PART_FILES, PartitionFormatError, requested_shares
from partition.assign import assign_edges
from partition.stats import counts_from_layout, summarize
from partition.vertex_cut import PartitionError, vertex_cut
from partition.write import partition_bytes
from tests.helpers.graphs import out_degrees
from tests.helpers.partitions import (
    METHODS,
    RMAT,
    SMALL_RMAT,
    assert_one_line_error,
    check_layout,
    run_cli,
    stats_of,
    write_dir,
)


# ---- weighted shares (--weights: unequal capacities) --------------------------------------------
def files_of(d):
    return {str(f.relative_to(d)): f.read_bytes() for f in d.rglob("*") if f.is_file()}


def test_write_estimate_covers_what_is_written(small_ds, tmp_path):
    layout = write_dir(small_ds, tmp_path / "parts", 3)
    written = sum(len(data) for data in files_of(tmp_path / "parts").values())
    estimate = partition_bytes(counts_from_layout(layout),
                                                small_ds.num_features)
    assert written <= estimate <= written + 3 * len(PART_FILES) * FILE_OVERHEAD


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
        import partition.write
        from partition.cli import main

        write = partition.write.write_partitions

        def limited(*args, **kwargs):  # loading and partitioning may write caches
            resource.setrlimit(resource.RLIMIT_FSIZE, (2048, 2048))
            signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
            return write(*args, **kwargs)

        partition.write.write_partitions = limited
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


# ---- weighted shares: the Libra assignment and the hashes ---------------------------------------
WEIGHTED_RMAT = "rmat:scale=13,edge_factor=16,features=1"


@pytest.fixture(scope="module")
def weighted_graph():
    return load_dataset(WEIGHTED_RMAT).graph


def shares_of(part, num_parts):
    return np.bincount(part, minlength=num_parts) / len(part)


@pytest.mark.parametrize("method, order", [("libra", "random"), ("libra", "given"),
                                           ("random", "random"), ("dbh", "random"),
                                           ("ne", "random")])
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
                                               ("dbh", 0.10), ("ne", 0.01)])
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
    degree = g.in_degrees() + out_degrees(g)
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


def test_weights_near_the_float64_maximum_give_finite_shares(small_ds):
    assert requested_shares([1e308, 1e308, 5e307]).tolist() == [0.4, 0.4, 0.2]
    assert requested_shares([1e308, 1e308]).tolist() == [0.5, 0.5]
    stats = stats_of(vertex_cut(small_ds.graph, 2, weights=[1e308, 1e308]))
    assert stats["requested_shares"] == [0.5, 0.5]


@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("weights", [[1, 1e-300], [1e-320, 1], [1, 1e-9]])
def test_a_share_of_less_than_one_edge_is_refused(small_ds, method, weights):
    """A partition asked for less than one edge would be empty, and its share error and
    balance near infinite."""
    with pytest.raises(PartitionError, match="partition 1 a share|partition 0 a share") as e:
        vertex_cut(small_ds.graph, 2, method, weights=weights)
    assert "less than one edge" in str(e.value)


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


def test_vertices_without_edges_go_to_ranks_by_weight():
    """A vertex without edges still costs its rank a vertex's dense work: weights 9:1 put
    about nine in ten of them on the first rank (equal weights: about half each)."""
    from distgnn.data.graph import CSRGraph

    rng = np.random.default_rng(0)
    src, dst = rng.integers(0, 500, 4000), rng.integers(0, 500, 4000)
    graph = CSRGraph.from_edges(src, dst, 5500)  # vertices 500..5499 have no edges
    isolated = np.arange(500, 5500)
    for weights, share in (([9.0, 1.0], 0.9), (None, 0.5)):
        layout = vertex_cut(graph, 2, "libra", weights=weights)
        on = [np.isin(isolated, layout.vertices(p)) for p in range(2)]
        assert abs(on[0].mean() - share) < 0.03, (weights, on[0].mean())
        assert not (on[0] & on[1]).any()  # each on one rank
