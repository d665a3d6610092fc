"""distgnn-partition, inspect and verify on the command line."""
import json

import numpy as np
import pytest

import partition
from distgnn.datasets import load as load_dataset
from partition.vertex_cut import vertex_cut
from tests.helpers.partitions import (
    SMALL_RMAT,
    assert_one_line_error,
    load_all,
    run_cli,
)


# ---- 11. the command line ------------------------------------------------------------------------
def test_inspect_counts_the_node_links_of_both_exchanges(tmp_path, capsys):
    """``--ranks-per-node 2``: the busiest node link's rows per alltoallv of the flat and the
    node-aware exchange, from the clone sets, on the command line and in the JSON; the
    node-aware exchange sends at most the flat one's rows."""
    from partition.stats import node_rows

    out = tmp_path / "parts"
    assert run_cli([SMALL_RMAT, "--parts", 4, "--out", out, "--no-progress"]) == 0
    capsys.readouterr()
    assert run_cli(["inspect", out, "--ranks-per-node", 2, "--json", tmp_path / "s.json"]) == 0
    text = capsys.readouterr().out
    stats = json.loads((tmp_path / "s.json").read_text())
    links = stats["node_links"]
    nodes = [0, 0, 1, 1]
    assert links["flat_rows"] == node_rows(stats["clone_sets"], nodes, "flat")["across"]
    assert links["node_rows"] == node_rows(stats["clone_sets"], nodes, "node")["across"]
    assert 0 < links["node_rows"] <= links["flat_rows"]
    assert links["ratio"] == pytest.approx(links["node_rows"] / links["flat_rows"])
    assert (f"(2 consecutive ranks per node): flat exchange {links['flat_rows']:,} rows, "
            f"node-aware {links['node_rows']:,} ({links['ratio']:.3f}x)") in text
    assert run_cli(["inspect", out, "--json", tmp_path / "one.json"]) == 0
    assert "node_links" not in json.loads((tmp_path / "one.json").read_text())


def test_cli_partitions_and_inspect_reports_the_same_statistics(tmp_path, capsys):
    out = tmp_path / "parts"
    rc = run_cli([SMALL_RMAT, "--parts", 3, "--out", out, "--seed", 4, "--no-progress",
                  "--json", tmp_path / "made.json"])
    made_out, err = capsys.readouterr()
    assert rc == 0, err
    assert "replication factor" in made_out
    assert partition.verify(out, load_dataset(SMALL_RMAT).graph.edges()) == []
    rc = run_cli(["inspect", out, "--json", tmp_path / "inspect.json"])
    text, err = capsys.readouterr()
    assert rc == 0, err
    stats = json.loads((tmp_path / "inspect.json").read_text())
    for key in ("replication_factor", "edge_balance", "root_balance", "split_fraction",
                "exchange_floats_per_layer", "predicted_memory_bytes", "per_rank"):
        assert key in stats, key
    assert len(stats["per_rank"]) == 3
    meta = partition.read_meta(out)
    assert stats["replication_factor"] == pytest.approx(meta["replication_factor"])
    assert f"replication factor {meta['replication_factor']:.3f}" in text
    made = json.loads((tmp_path / "made.json").read_text())
    for key in ("replication_factor", "edge_balance", "root_balance", "split_fraction"):
        assert made[key] == pytest.approx(stats[key]), key
    for key in ("exchange_floats_per_layer", "predicted_memory_bytes", "per_rank"):
        assert made[key] == stats[key], key


@pytest.mark.parametrize("order, chosen", [("rcm", "rcm"), ("auto", "given")])
def test_cli_orders_the_vertices_and_records_the_order(tmp_path, capsys, order, chosen):
    """``--order-vertices``: the order is applied and recorded; ``auto`` keeps a graph whose
    features fit in cache (this one) as given, without a trial."""
    out = tmp_path / order
    rc = run_cli([SMALL_RMAT, "--parts", 2, "--out", out, "--order-vertices", order,
                  "--no-progress"])
    text, err = capsys.readouterr()
    assert rc == 0, err
    assert f"vertex order {chosen}" in text
    meta = partition.read_meta(out)
    assert (meta["vertex_order"], meta["vertex_order_requested"]) == (chosen, order)
    assert "vertex_order_trial" not in meta
    increasing = [bool(np.all(np.diff(np.asarray(p.global_ids)) > 0)) for p in load_all(out)]
    assert increasing == [chosen == "given"] * 2
    assert partition.verify(out, load_dataset(SMALL_RMAT).graph.edges()) == []
    rc = run_cli(["inspect", out])
    assert f"vertex order {chosen}" in capsys.readouterr().out


def test_cli_stats_match_the_layout(small_ds, tmp_path, capsys):
    out = tmp_path / "parts"
    assert run_cli([SMALL_RMAT, "--parts", 4, "--out", out, "--method", "dbh", "--seed", 1,
                    "--no-progress"]) == 0
    layout = vertex_cut(small_ds.graph, 4, "dbh", seed=1)
    assert run_cli(["inspect", out, "--json", tmp_path / "s.json"]) == 0
    stats = json.loads((tmp_path / "s.json").read_text())
    assert stats["replication_factor"] == pytest.approx(layout.clones().mean())
    np.testing.assert_array_equal([r["edges"] for r in stats["per_rank"]], layout.edge_counts)
    np.testing.assert_array_equal([r["roots"] for r in stats["per_rank"]],
                                  np.bincount(layout.root, minlength=4))


@pytest.mark.parametrize("parts, fragment", [(0, "--parts"), (-3, "--parts"),
                                             (20000, "larger than the number of edges")])
def test_cli_bad_parts(tmp_path, capsys, parts, fragment):
    rc = run_cli(["cora", "--parts", parts, "--out", tmp_path / "o", "--no-progress"])
    _, err = capsys.readouterr()
    assert_one_line_error(rc, err, fragment)
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize("seed", [-1, 2**63, 2**64])
def test_cli_seed_out_of_range(tmp_path, capsys, seed):
    rc = run_cli(["cora", "--parts", 2, "--out", tmp_path / "o", "--seed", seed])
    out, err = capsys.readouterr()
    assert_one_line_error(rc, err, "--seed", str(seed))
    assert out == "" and not (tmp_path / "o").exists()  # before the dataset is loaded


@pytest.mark.parametrize("extra", [[], ["--order-vertices", "rcm"],
                                   ["--method", "random", "--weights", "1,1,1,1,1,1,1,1e-9"]])
def test_cli_refuses_partitions_without_vertices(tmp_path, capsys, extra):
    edges = tmp_path / "g.txt"
    edges.write_text("".join(f"{i} {(i + 1) % 6}\n{(i + 1) % 6} {i}\n" for i in range(6)))
    rc = run_cli([edges, "--parts", 8, "--out", tmp_path / "o", *extra])
    assert_one_line_error(rc, capsys.readouterr().err, "partition", "--")
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize("flag, value", [("--width", -5), ("--width", 0), ("--hidden", 0),
                                         ("--layers", 0), ("--layers", 10**6),
                                         ("--width", "x")])
def test_cli_stat_flags_that_cannot_be(good_dir, tmp_path, capsys, flag, value):
    for argv in (["inspect", good_dir], ["cora", "--parts", 2, "--out", tmp_path / "o"]):
        rc = run_cli([*argv, flag, value])
        assert_one_line_error(rc, capsys.readouterr().err, flag, str(value))
    assert not (tmp_path / "o").exists()


def test_cli_inspect_counts_split_vertices_itself(good_dir, tmp_path, capsys):
    """The split fraction comes from the partitions, not from meta.json's record."""
    assert run_cli(["inspect", good_dir, "--json", tmp_path / "s.json"]) == 0
    meta = partition.read_meta(good_dir)
    stats = json.loads((tmp_path / "s.json").read_text())
    assert meta["split_vertices"] > 0
    assert stats["split_fraction"] == meta["split_vertices"] / meta["num_nodes"]
    assert f"predicted memory max {stats['predicted_memory_bytes']['max'] / 2**20:,.1f} MiB" \
        in capsys.readouterr().out


def test_cli_verify_with_the_dataset_checks_meta_json_against_it(good_dir, capsys):
    assert run_cli(["verify", good_dir, "--dataset", SMALL_RMAT]) == 0
    capsys.readouterr()
    other = SMALL_RMAT.replace("classes=2", "classes=3")
    assert run_cli(["verify", good_dir, "--dataset", other]) == 1
    assert "meta.json says num_classes 2, the dataset has 3" in capsys.readouterr().err


def test_cli_unreadable_dataset(tmp_path, capsys):
    missing = tmp_path / "nope.npz"
    rc = run_cli([missing, "--parts", 2, "--out", tmp_path / "o"])
    assert_one_line_error(rc, capsys.readouterr().err, str(missing))
    bad = tmp_path / "bad.npz"
    bad.write_bytes(np.random.default_rng(0).bytes(4096))
    rc = run_cli([bad, "--parts", 2, "--out", tmp_path / "o"])
    assert_one_line_error(rc, capsys.readouterr().err, str(bad))
    assert not (tmp_path / "o").exists()


def test_cli_bad_flags(tmp_path, capsys):
    rc = run_cli(["cora", "--parts", "many", "--out", tmp_path / "o"])
    assert_one_line_error(rc, capsys.readouterr().err, "--parts")
    rc = run_cli(["cora", "--parts", 2, "--out", tmp_path / "o", "--method", "metis"])
    assert_one_line_error(rc, capsys.readouterr().err, "--method")
    rc = run_cli(["cora", "--parts", 2])
    assert_one_line_error(rc, capsys.readouterr().err, "--out")


def test_cli_existing_out_needs_force(tmp_path, capsys):
    out = tmp_path / "parts"
    out.mkdir()
    (out / "keep.txt").write_text("mine")
    rc = run_cli([SMALL_RMAT, "--parts", 2, "--out", out, "--no-progress"])
    assert_one_line_error(rc, capsys.readouterr().err, str(out), "--force")
    assert (out / "keep.txt").read_text() == "mine"
    # --force replaces only partitions this tool wrote: the user's folder is kept
    rc = run_cli([SMALL_RMAT, "--parts", 2, "--out", out, "--no-progress", "--force"])
    assert_one_line_error(rc, capsys.readouterr().err, str(out), "not a partition directory")
    assert (out / "keep.txt").read_text() == "mine"
    (out / "keep.txt").unlink()
    out.rmdir()
    for parts in (2, 3):  # a first write, then one replacing it
        rc = run_cli([SMALL_RMAT, "--parts", parts, "--out", out, "--no-progress", "--force"])
        _, err = capsys.readouterr()
        assert rc == 0, err
    assert partition.verify(out) == [] and partition.read_meta(out)["num_parts"] == 3
    assert [f.name for f in tmp_path.iterdir()] == ["parts"]


def test_cli_keep_pairs_on_directed_graph_is_a_one_line_error(tmp_path, capsys):
    edges = tmp_path / "g.txt"
    edges.write_text("1 0\n2 0\n0 2\n3 1\n")  # 1 -> 0 has no reverse
    rc = run_cli([edges, "--parts", 2, "--out", tmp_path / "o", "--keep-pairs"])
    assert_one_line_error(rc, capsys.readouterr().err, "symmetric")


def test_cli_partitions_a_directed_edge_list(tmp_path, capsys):
    # one undirected pair (0 <-> 29), the other edges one way from a lower to a higher id
    lines = ["29 0", "0 29"] + [f"{i} {j}" for i in range(1, 29) for j in range(i + 1, 29)
                                if (i * 7 + j) % 3 == 0]
    edges = tmp_path / "directed.txt"
    edges.write_text("\n".join(lines) + "\n")
    dirs = {}
    for flag in ("--keep-pairs", "--no-keep-pairs", None):
        out = dirs[flag] = tmp_path / f"o{flag}"
        rc = run_cli([edges, "--parts", 3, "--out", out, "--no-progress", "--seed", 2]
                     + ([flag] if flag else []))
        _, err = capsys.readouterr()
        if flag == "--keep-pairs":  # asked for on a graph that is not symmetric
            assert_one_line_error(rc, err, "symmetric")
            continue
        assert rc == 0, err
        assert partition.verify(out, load_dataset(edges).graph.edges()) == []
    # the default is "keep pairs when symmetric": here the same cut as --no-keep-pairs
    for a, b in zip(load_all(dirs[None]), load_all(dirs["--no-keep-pairs"])):
        np.testing.assert_array_equal(a.global_ids, b.global_ids)
        np.testing.assert_array_equal(a.graph.indices, b.graph.indices)
        np.testing.assert_array_equal(a.graph.indptr, b.graph.indptr)


def test_cli_inspect_and_verify_of_missing_directory(tmp_path, capsys):
    rc = run_cli(["inspect", tmp_path / "none"])
    assert_one_line_error(rc, capsys.readouterr().err, "none")
    rc = run_cli(["verify", tmp_path / "none"])  # verify: 1 for every problem it finds
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 1 and len(err) == 1 and "none" in err[0], err
