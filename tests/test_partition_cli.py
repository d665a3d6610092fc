"""distgnn-partition, inspect and verify on the command line."""
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import partition
from distgnn.data.datasets import load as load_dataset
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


def test_ne_two_level_directories_verify_and_span_fewer_node_pairs_than_libra(tmp_path):
    """``--method ne`` through the command line, cut across 2 nodes of 2 ranks: a directory
    that verifies, records its method, and whose node-aware exchange carries fewer rows over
    the busiest node link than Libra's two-level cut of the same graph."""
    rows = {}
    for method in ("libra", "ne"):
        out = tmp_path / method
        assert run_cli([SMALL_RMAT, "--parts", 4, "--ranks-per-node", 2, "--out", out,
                        "--method", method, "--no-progress"]) == 0
        assert partition.verify(out, load_dataset(SMALL_RMAT).graph.edges()) == []
        assert partition.read_meta(out)["method"] == method
        assert run_cli(["inspect", out, "--ranks-per-node", 2, "--json",
                        tmp_path / f"{method}.json"]) == 0
        rows[method] = json.loads((tmp_path / f"{method}.json").read_text())["node_links"]
    assert rows["ne"]["node_rows"] < rows["libra"]["node_rows"], rows


def test_the_default_method_is_ne_in_memory_and_libra_when_streamed(tmp_path, capsys):
    """Without --method a graph in memory is cut by ne (Libra's cut is another); an edge
    file streamed by libra; --order alone is refused in memory (ne has no stream order),
    and --if-missing takes the default as the method asked for."""
    out = tmp_path / "p"
    assert run_cli([SMALL_RMAT, "--parts", 4, "--out", out, "--no-progress"]) == 0
    assert partition.read_meta(out)["method"] == "ne"
    graph = load_dataset(SMALL_RMAT).graph
    def replication(layout):
        return sum(len(layout.vertices(p)) for p in range(4)) / graph.num_nodes

    ne = replication(vertex_cut(graph, 4, "ne"))
    assert partition.read_meta(out)["replication_factor"] == pytest.approx(ne)
    assert ne < replication(vertex_cut(graph, 4, "libra"))
    capsys.readouterr()
    assert run_cli([SMALL_RMAT, "--parts", 4, "--out", out, "--if-missing"]) == 0
    assert "holds the 4 partitions asked for already" in capsys.readouterr().out
    rc = run_cli([SMALL_RMAT, "--parts", 4, "--out", out, "--if-missing", "--method", "libra"])
    assert_one_line_error(rc, capsys.readouterr().err, "--method ne, not --method libra")
    rc = run_cli([SMALL_RMAT, "--parts", 4, "--out", tmp_path / "o", "--order", "degree"])
    assert_one_line_error(rc, capsys.readouterr().err, "--order degree", "--method libra")
    assert not (tmp_path / "o").exists()
    src, dst = graph.edges()
    np.save(tmp_path / "edges.npy", np.stack([src, dst], axis=1).astype(np.int64))
    np.save(tmp_path / "x.npy", np.zeros((graph.num_nodes, 2), np.float32))
    np.save(tmp_path / "y.npy", np.zeros(graph.num_nodes, np.int64))
    assert run_cli([tmp_path / "edges.npy", "--features", tmp_path / "x.npy", "--labels",
                    tmp_path / "y.npy", "--parts", 4, "--mode", "stream", "--out",
                    tmp_path / "s", "--no-progress"]) == 0
    assert "libra in degree order" in capsys.readouterr().out
    meta = partition.read_meta(tmp_path / "s")
    assert meta["method"] == "libra" and meta["streamed"] is True


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


def test_cli_inspect_predicts_less_memory_for_bf16_mixed(good_dir, tmp_path):
    """``--precision bf16-mixed`` counts the saved activations at 2 bytes: every rank's
    prediction is lower, by the same model :func:`~distgnn.run.memory.training_memory` uses."""
    predicted = {}
    for precision in ("fp32", "bf16-mixed"):
        out = tmp_path / f"{precision}.json"
        assert run_cli(["inspect", good_dir, "--precision", precision, "--json", out]) == 0
        predicted[precision] = json.loads(out.read_text())["predicted_memory_bytes"]
    assert predicted["bf16-mixed"]["max"] < predicted["fp32"]["max"]
    assert predicted["bf16-mixed"]["mean"] < predicted["fp32"]["mean"]


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


# ---- the dataset as --dataset; outputs that collide; empty values; flags that do nothing ------
def test_the_dataset_is_taken_as_dataset_too_and_once(tmp_path, capsys):
    """``--dataset X`` partitions as the positional ``X`` does; both, or neither, is one line
    naming them, before anything is written."""
    assert run_cli(["--dataset", SMALL_RMAT, "--parts", 2, "--out", tmp_path / "a",
                    "--no-progress"]) == 0
    assert run_cli([SMALL_RMAT, "--parts", 2, "--out", tmp_path / "b", "--no-progress"]) == 0
    capsys.readouterr()
    for a, b in zip(load_all(tmp_path / "a"), load_all(tmp_path / "b")):
        np.testing.assert_array_equal(a.global_ids, b.global_ids)
        np.testing.assert_array_equal(a.graph.indices, b.graph.indices)
    rc = run_cli([SMALL_RMAT, "--dataset", "cora", "--parts", 2, "--out", tmp_path / "c"])
    assert_one_line_error(rc, capsys.readouterr().err, f"DATASET {SMALL_RMAT} and --dataset "
                          "cora: give the dataset once")
    rc = run_cli(["--parts", 2, "--out", tmp_path / "c"])
    assert_one_line_error(rc, capsys.readouterr().err, "no dataset: give DATASET")
    assert not (tmp_path / "c").exists()


def write_npz_dataset(path):
    from distgnn.data.datasets import load

    ds = load(SMALL_RMAT)
    np.savez(path, indptr=ds.graph.indptr, indices=ds.graph.indices, x=ds.x, y=ds.y,
             train_mask=ds.train_mask, val_mask=ds.val_mask, test_mask=ds.test_mask)


@pytest.mark.parametrize("argv, says", [
    (["{d}", "--out", "{t}/p", "--json", "{t}/p"], "--out and --json name the same path"),
    (["{d}", "--out", "{t}/./p", "--json", "{t}/q/../p"], "--out and --json name the same"),
    (["{d}", "--out", "{t}/p", "--json", "{t}/p/s.json"], "--json {t}/p/s.json is inside --out"),
    (["{d}", "--out", "{t}/sub/../d.npz"], "--out {t}/d.npz is DATASET {t}/d.npz"),
    (["--dataset", "{d}", "--out", "{t}/p", "--json", "{t}/link"], "--json {t}/d.npz is "
     "--dataset {t}/d.npz, which the run reads"),
    (["{t}/folder", "--out", "{t}/folder/p"], "--out {t}/folder/p is inside DATASET"),
    (["{d}", "--out", "{t}/p", "--json", "{t}/s.npz", "--split-file", "{t}/s.npz"],
     "--json {t}/s.npz is --split-file"),
    (["inspect", "{t}/good", "--json", "{t}/good/meta.json"], "is inside DIR {t}/good"),
    (["inspect", "{t}/good", "--json", "{t}/good"], "--json {t}/good is DIR")])
def test_outputs_on_one_path_or_on_an_input_are_refused_before_any_work(tmp_path, capsys,
                                                                         argv, says):
    """Every output compared, resolved, with every other and with what the run reads: one
    line naming both, and nothing written or changed."""
    write_npz_dataset(tmp_path / "d.npz")
    (tmp_path / "sub").mkdir()
    (tmp_path / "q").mkdir()
    (tmp_path / "folder").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "d.npz")
    (tmp_path / "s.npz").write_bytes(b"a split file")
    assert run_cli([SMALL_RMAT, "--parts", 2, "--out", tmp_path / "good",
                    "--no-progress"]) == 0
    capsys.readouterr()
    before = {f: f.read_bytes() for f in tmp_path.rglob("*") if f.is_file()}
    fill = {"d": tmp_path / "d.npz", "t": tmp_path}
    argv = [a.format(**fill) for a in argv]
    rc = run_cli(argv + ([] if argv[0] == "inspect" else ["--parts", 2]))
    out, err = capsys.readouterr()
    assert_one_line_error(rc, err, says.format(**fill))
    assert out == ""  # refused before reading the dataset (which prints its summary)
    assert {f: f.read_bytes() for f in tmp_path.rglob("*") if f.is_file()} == before


def test_a_dataset_name_is_the_bundled_dataset_not_a_folder_of_that_name(tmp_path, capsys,
                                                                          monkeypatch):
    """``distgnn-partition cora --out cora --force``: the input is the bundled cora, so an
    earlier partition directory named cora may be replaced."""
    monkeypatch.chdir(tmp_path)
    for _ in range(2):
        assert run_cli(["cora", "--parts", 2, "--out", "cora", "--force",
                        "--no-progress"]) == 0
    assert partition.read_meta(tmp_path / "cora")["dataset"] == "cora"


@pytest.mark.parametrize("argv, names", [
    (["", "--parts", 2, "--out", "{t}/p"], "DATASET"),
    (["--dataset", "", "--parts", 2, "--out", "{t}/p"], "--dataset"),
    (["cora", "--parts", 2, "--out", ""], "--out"),
    (["cora", "--parts", 2, "--out", "{t}/p", "--json", ""], "--json"),
    (["cora", "--parts", 2, "--out", "{t}/p", "--features", ""], "--features"),
    (["cora", "--parts", 2, "--out", "{t}/p", "--split-file", ""], "--split-file"),
    (["inspect", ""], "DIR"),
    (["inspect", "{t}/p", "--json", ""], "--json"),
    (["verify", ""], "DIR"),
    (["verify", "{t}/p", "--dataset", ""], "--dataset")])
def test_an_empty_path_is_one_line_naming_it(tmp_path, capsys, argv, names):
    rc = run_cli([str(a).format(t=tmp_path) for a in argv])
    err = capsys.readouterr().err
    assert_one_line_error(rc, err, f"{names}: the value is empty")
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("method", ["random", "dbh"])
@pytest.mark.parametrize("flag", [["--order", "degree"], ["--keep-pairs"], ["--no-keep-pairs"]])
def test_flags_a_hashing_method_has_no_use_for_are_refused(tmp_path, capsys, method, flag):
    rc = run_cli([SMALL_RMAT, "--parts", 2, "--out", tmp_path / "p", "--method", method,
                  *flag])
    assert_one_line_error(rc, capsys.readouterr().err, f"{' '.join(flag)} would change "
                          f"nothing with --method {method}")
    assert not (tmp_path / "p").exists()
    from partition.cli import partition_dataset

    with pytest.raises(partition.PartitionError, match="would change nothing"):
        partition_dataset(load_dataset(SMALL_RMAT), tmp_path / "p", 2, method=method,
                          order="degree")


def test_help_states_every_default():
    """Every flag of the three parsers with a default says it (argparse's ``(default:
    ...)`` or the help's own words); a switch is off unless given."""
    import argparse

    from partition.cli import inspect_parser, partition_parser, verify_parser

    for parser in (partition_parser(), inspect_parser(), verify_parser()):
        formatter = parser._get_formatter()
        for action in parser._actions:
            if (not action.option_strings or action.required or action.nargs == 0
                    or isinstance(action, argparse._HelpAction)):
                continue
            text = formatter._get_help_string(action)
            assert "default" in text.lower(), (parser.prog, action.option_strings, text)
        assert "DATASET" in parser.format_usage() or parser.prog.endswith("inspect")


@pytest.mark.slow
def test_jobs_partitioning_at_once_if_missing_take_turns(tmp_path):
    """Three ``--if-missing`` runs started together for one directory (the first start of
    three batch jobs): one writes it, the others wait for its lock and leave it as it is;
    all end with status 0 and one intact directory, and no lock file is left."""
    out = tmp_path / "shared" / "cora-2"
    argv = [str(Path(sys.executable).parent / "distgnn-partition"), "cora", "--parts", "2", "--out", str(out),
            "--if-missing", "--no-progress"]
    jobs = [subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            for _ in range(3)]
    outputs = [job.communicate(timeout=120) for job in jobs]
    assert [job.returncode for job in jobs] == [0, 0, 0], outputs
    said = [stdout for stdout, _ in outputs]
    assert sum(f"wrote {out}" in s for s in said) == 1, said
    assert sum("holds the 2 partitions asked for already" in s for s in said) == 2, said
    assert partition.verify(out) == []
    assert sorted(p.name for p in out.parent.iterdir()) == ["cora-2"]


def test_if_missing_refuses_another_count_and_force(tmp_path, capsys):
    out = tmp_path / "p"
    assert run_cli([SMALL_RMAT, "--parts", 2, "--out", out, "--no-progress"]) == 0
    capsys.readouterr()
    rc = run_cli([SMALL_RMAT, "--parts", 3, "--out", out, "--if-missing", "--no-progress"])
    assert_one_line_error(rc, capsys.readouterr().err, "was partitioned with --parts 2, not "
                          "--parts 3 as asked")
    rc = run_cli([SMALL_RMAT, "--parts", 2, "--out", out, "--if-missing", "--force"])
    assert_one_line_error(rc, capsys.readouterr().err, "--if-missing", "--force")


def test_if_missing_says_each_setting_as_it_is_given():
    """Every setting ``--if-missing`` compares is said as a command line gives it: the words
    said for a value, given to distgnn-partition, ask for that value again (``--no-keep-pairs``
    for False, ``--weights 1,3`` for a list); a setting not recorded is the default, said
    with its flag."""
    import shlex

    from partition.cli import _as_given, _requested_settings, partition_parser

    base = ["d.npz", "--parts", "2", "--out", "p"]
    meta = {"num_parts": 2}
    given = {"--parts": 3, "--method": "hdrf", "--seed": 5, "--order": "random",
             "--roots": "random", "--ranks-per-node": 2, "--weights": [1.0, 3.0],
             "--order-vertices": "rcm", "--keep-pairs": True}
    settings = _requested_settings(partition_parser().parse_args(base), meta)
    assert set(settings) == set(given)  # every setting has a value below
    for flag, value in [*given.items(), ("--keep-pairs", False)]:
        words = _as_given(flag, value)
        asked = _requested_settings(partition_parser().parse_args(base + shlex.split(words)),
                                    meta)
        assert asked[flag][1] == value, (flag, value, words)
    assert _as_given("--keep-pairs", False) == "--no-keep-pairs"
    for flag in given:
        assert flag in _as_given(flag, None) and "False" not in _as_given(flag, None)


def test_parts_auto_takes_the_fewest_partitions_that_fit_a_node(tmp_path, capsys):
    """The memory model picks the count before cutting and the one cut confirms it: a node
    that the fixed part of a rank (runtime and model) fills is refused at once, whatever
    the count; one that the estimate for two partitions fits, but not that of the whole
    graph, takes two, and the line names the model and the cut's figures."""
    from distgnn.run.memory import memory_rates
    from partition.stats import estimated_memory

    data = load_dataset("cora")
    # distgnn-train's default model, fp32: GCN's fused plan
    rates = memory_rates(data.num_features, data.num_classes, 16, 2, fused=True)
    node = estimated_memory(data.graph.indptr, data.graph.indices, rates)(2)[0] / 2**30
    out = tmp_path / "p"
    assert run_cli(["cora", "--parts", "auto", "--node-memory", node, "--out", out,
                    "--no-progress"]) == 0
    said = capsys.readouterr().out
    assert "--parts auto: 2 partitions (2 nodes of 1 rank) for hidden 16, 2 layers, fp32" \
        in said
    assert "fewer estimated over it (1: " in said
    assert partition.read_meta(out)["num_parts"] == 2
    rc = run_cli(["cora", "--parts", "auto", "--node-memory", rates["fixed"] / 2**30 * 0.99,
                  "--out", tmp_path / "q", "--no-progress"])
    assert_one_line_error(rc, capsys.readouterr().err, "the fixed part of a rank alone",
                          "whatever the partition count")
    assert not (tmp_path / "q").exists()
    for argv, fragment in ((["--parts", "auto", "--weights", "1,2"], "--weights"),
                           (["--parts", "2", "--node-memory", "1"], "--node-memory"),
                           (["--parts", "many"], "number of partitions or auto")):
        rc = run_cli(["cora", *argv, "--out", tmp_path / "r", "--no-progress"])
        assert_one_line_error(rc, capsys.readouterr().err, fragment)


def test_parts_auto_estimates_random_hashing_exactly_and_libra_from_above():
    """The estimate before cutting is random hashing's expected replication: what the
    random method's cut gives (within 1 %), and above Libra's, so the count it picks fits."""
    from distgnn.run.memory import memory_rates
    from partition.stats import estimated_memory

    data = load_dataset(SMALL_RMAT)
    graph = data.graph
    estimate = estimated_memory(graph.indptr, graph.indices,
                                memory_rates(data.num_features, data.num_classes, 16, 2))
    for parts in (2, 8):
        _, replication = estimate(parts)
        for method in ("random", "libra"):
            cut = vertex_cut(graph, parts, method)
            actual = cut.clones().mean()
            if method == "random":
                assert abs(replication - actual) < 0.01 * actual, (parts, replication, actual)
            else:
                assert replication > actual, (parts, replication, actual)
