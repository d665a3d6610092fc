"""distgnn-bench predict: a proxy's partitions scaled to a graph that is not loaded (--size),
ranks sharing nodes, a measured network and the rates measured on partitions."""
import argparse
import functools
import json

import pytest

from bench.scaling import (
    Rates,
    TargetSize,
    check_size,
    cut_statistics,
    exchange_widths,
    parse_size,
    predicted_memory,
    scale_statistics,
    table,
)
from distgnn.errors import DistGNNError

RATES = Rates(aggregation_per_edge=2e-9, dense_per_vertex=3e-6, optimizer=1e-3,
              triad_bytes_s=1e10)
F, H, C, LAYERS = 16, 32, 4, 2
ALPHA, BETA, PARAMS = 5e-6, 1e9, 5000


@pytest.fixture(scope="module")
def proxy():
    """A tiny R-MAT graph and its libra partitions at P = 1, 2, 4."""
    from distgnn.data.datasets import load

    data = load(f"rmat:scale=9,edge_factor=8,features={F},classes={C}")
    return data, {P: cut_statistics(data.graph, P)[1] for P in (1, 2, 4)}


def rates(stats):
    return dict.fromkeys(stats, RATES)


def rows_of(stats):
    widths = [min(a, b) for a, b in zip([F, H], [H, C])]
    return table(stats, rates(stats), widths, exchange_widths(F, H, C, LAYERS), PARAMS, ALPHA, BETA,
                 5, 1, None)


def memory(stats, P):
    return predicted_memory(stats[P], F, C, H, LAYERS)


def test_parse_size_reads_every_key():
    assert parse_size("nodes=111059956,edges=3231371744,features=128,classes=172") == \
        TargetSize(111059956, 3231371744, 128, 172)
    assert parse_size(" edges = 10 , nodes=3") == TargetSize(3, 10)


@pytest.mark.parametrize("text, message", [
    ("nodes=10", "edges missing"),
    ("edges=10", "nodes missing"),
    ("", "is not KEY=VALUE"),
    ("nodes=10,edges", "'edges' is not KEY=VALUE"),
    ("nodes=10,=5,edges=3", "is not KEY=VALUE"),
    ("vertices=10,edges=5", "unknown key 'vertices'"),
    ("nodes=1e8,edges=5", "nodes='1e8' is not a whole number"),
    ("nodes=10,edges=2.5", "edges='2.5' is not a whole number"),
    ("nodes=0,edges=5", "nodes=0 must be at least 1"),
    ("nodes=10,edges=-5", "edges=-5 must be at least 1"),
    ("nodes=10,nodes=11,edges=5", "nodes is given twice"),
])
def test_parse_size_refuses_malformed_text(text, message):
    with pytest.raises(argparse.ArgumentTypeError, match=message.replace("(", r"\(")):
        parse_size(text)


def test_size_must_keep_the_proxys_widths():
    check_size(TargetSize(10, 20), 128, 172, "proxy")  # widths left out: the proxy's
    check_size(TargetSize(10, 20, 128, 172), 128, 172, "proxy")
    with pytest.raises(DistGNNError, match="classes=172 but the dataset proxy has 16 classes"):
        check_size(TargetSize(10, 20, 128, 172), 128, 16, "proxy")
    with pytest.raises(DistGNNError, match="features=100"):
        check_size(TargetSize(10, 20, features=100), 128, 16, "proxy")


def test_malformed_size_is_one_line_on_the_command_line(capsys):
    from bench.cli import bench_main

    # in this process: the parser's exit status is SystemExit's code, a refusal's the return
    with pytest.raises(SystemExit) as exit:
        bench_main(["predict", "--size", "nodes=10,edge=5"])
    assert exit.value.code == 2
    stderr = capsys.readouterr().err
    lines = stderr.strip().splitlines()
    assert len(lines) == 1, stderr
    assert "argument --size" in lines[0] and "unknown key 'edge'" in lines[0]
    # a projection cannot be validated here: refused before anything is loaded
    status = bench_main(["predict", "--dataset", "no-such-file", "--size", "nodes=10,edges=20",
                         "--validate", "1"])
    stderr = capsys.readouterr().err
    assert status == 2 and "--validate" in stderr, stderr
    assert "no-such-file" not in stderr
    status = bench_main(["predict", "--dataset", "no-such-file", "--rate-epochs", "1"])
    stderr = capsys.readouterr().err
    assert status == 2 and "--rate-epochs must be at least 2" in stderr, stderr


def test_target_of_the_proxys_size_gives_the_unscaled_prediction(proxy):
    data, stats = proxy
    N, E = data.graph.num_nodes, data.graph.num_edges
    for per_rank in stats.values():  # what the ratios rest on: one root per vertex
        assert sum(r["roots"] for r in per_rank) == N
        assert sum(r["edges"] for r in per_rank) == E
    scaled, ratios = scale_statistics(stats, N, E)
    assert scaled == stats
    assert all(r["vertex_ratio"] == r["edge_ratio"] == 1.0 for r in ratios.values())
    assert rows_of(scaled) == rows_of(stats)
    for P in stats:
        assert memory(scaled, P) == memory(stats, P) > 0


@pytest.mark.parametrize("k", [2, 3, 1000])
def test_scaling_the_target_by_k_scales_the_local_terms_and_memory(proxy, k):
    data, stats = proxy
    N, E = data.graph.num_nodes, data.graph.num_edges
    scaled, ratios = scale_statistics(stats, k * N, k * E)
    for P, per_rank in stats.items():
        assert ratios[P]["vertex_ratio"] == ratios[P]["edge_ratio"] == k
        for small, big in zip(per_rank, scaled[P]):
            for key in ("vertices", "edges", "roots", "leaves", "leaf_entries"):
                assert big[key] == k * small[key]
    base, rows = rows_of(stats), rows_of(scaled)
    for b, r in zip(base, rows):
        P = r["parts"]
        latency = sum(2 * ALPHA * (P - 1) for _ in exchange_widths(F, H, C, LAYERS))
        for algo in ("0c", "cd-0", "cd-r"):
            for phase in ("local_aggregation", "dense", "prepost"):
                assert r[algo][phase] == pytest.approx(k * b[algo][phase], rel=1e-12)
            for phase in ("optimizer", "allreduce"):  # the model's size: unchanged
                assert r[algo][phase] == b[algo][phase]
        if P > 1:  # the bandwidth part of the exchange grows by k, the latency part does not
            assert b["cd-0"]["prepost"] > 0
            assert r["cd-0"]["comm"] - latency == pytest.approx(
                k * (b["cd-0"]["comm"] - latency), rel=1e-9)
        # memory: the summarize() model on the scaled counts, affine in k
        m1, m2, mk = (memory(s, P) for s in
                      (stats, scale_statistics(stats, 2 * N, 2 * E)[0], scaled))
        assert m1 < m2 < mk if k > 2 else m1 < m2
        assert mk - m1 == pytest.approx((k - 1) * (m2 - m1), rel=1e-9)


def test_memory_is_the_largest_ranks_by_summarize(proxy):
    from partition.stats import PartCounts, summarize

    data, stats = proxy
    scaled, _ = scale_statistics(stats, 111_059_956, 3_231_371_744)
    counts = [PartCounts(**r) for r in scaled[4]]
    expected = summarize(counts, 111_059_956, 0, num_features=F, num_classes=C, hidden=H,
                         layers=LAYERS)["predicted_memory_bytes"]["max"]
    assert memory(scaled, 4) == expected
    # a ratio that is not whole: each count within rounding of its exact scaled value
    ratio = 111_059_956 / data.graph.num_nodes
    for small, big in zip(stats[4], scaled[4]):
        assert abs(big["leaves"] - small["leaves"] * ratio) <= 0.5
        assert abs(big["vertices"] - small["vertices"] * ratio) <= 0.5


@pytest.mark.slow
def test_predict_with_size_writes_memory_and_the_ratios(tmp_path, capsys):
    """End to end on a tiny proxy: the JSON rows carry the memory and the ratios, and the
    report shows both."""
    from bench.cli import bench_main

    out = tmp_path / "predict.json"
    spec = "rmat:scale=8,edge_factor=8,features=8,classes=4"
    # in this process; 2 rate epochs, the fewest
    status = bench_main(["predict", "--rate-epochs", "2", "--dataset", spec,
                         "--parts", "1,2", "--hidden", "8", "--size",
                         "nodes=2560,edges=100000,features=8,classes=4", "--json", str(out)])
    stdout, stderr = capsys.readouterr()
    assert status == 0, stderr
    assert "projected to 2,560 vertices and 100,000 edges" in stdout
    assert "memory MiB/rank" in stdout
    result = json.loads(out.read_text())
    assert result["size"] == {"nodes": 2560, "edges": 100000, "features": 8, "classes": 4}
    (one, two) = result["rows"]
    assert one["scale"]["vertex_ratio"] == 10.0
    assert one["scale"]["edge_ratio"] == pytest.approx(100000 / one["scale"]["proxy_edges"])
    assert one["predicted_memory_bytes"] > two["predicted_memory_bytes"] > 0
    page = tmp_path / "report.md"
    assert bench_main(["report", str(out), "--out", str(page)]) == 0, capsys.readouterr().err
    text = page.read_text()
    assert "Projected to 2,560 vertices and 100,000 edges" in text
    assert "memory MiB/rank" in text


def test_default_schedule_waits_half_its_epochs_and_the_verdict_follows_the_network(proxy):
    """cd-r's default schedule waits for the whole int4 exchange on its exact epochs (one in
    ``EXACT_EVERY``) and sends nothing on the others; the verdict says cd-r pays on a slow
    network and not on a fast one, and names oversubscription."""
    from bench.scaling import exchange_seconds, verdict
    from distgnn.exchange.controller import EXACT_EVERY

    _, stats = proxy
    widths = exchange_widths(F, H, C, LAYERS)
    for beta, pays in ((1e6, True), (1e12, False)):
        for slowdown in (1.0, 2.0):
            row = table(stats, rates(stats), [16, 4], widths, PARAMS, ALPHA, beta, 5, 1,
                        None if slowdown == 1 else 2)[2]
            assert row["parts"] == 4
            wire = exchange_seconds(stats[4], widths, ALPHA, beta, "int4")
            assert row["cd-r default"]["comm"] == pytest.approx(wire / EXACT_EVERY)
            if pays:  # bandwidth-bound: int4 rows are under a quarter of fp32's
                assert 0 < wire < exchange_seconds(stats[4], widths, ALPHA, beta) / 4
            said = verdict(row, 5)
            assert ("cd-r pays" in said) == pays and ("does not pay" in said) != pays
            assert ("waiting for each other's compute" in said) == (slowdown > 1)


def test_ranks_per_node_counts_node_links_and_predicts_the_node_aware_exchange(proxy):
    """With 2 ranks per node the exchange is counted on the node links: the flat cd-0's
    busiest link carries at least the busiest rank's rows (two ranks share it) and the
    node-aware cd-0's fewer; on a slow network its epoch is the shorter, with two more
    alltoallvs' latency, and on a latency-bound one the longer."""
    from partition.stats import node_rows

    data, _ = proxy
    _, per_rank, clones = cut_statistics(data.graph, 4)
    stats, sets = {4: per_rank}, {4: clones}
    widths = exchange_widths(F, H, C, LAYERS)
    nodes = [0, 0, 1, 1]
    flat, node = (node_rows(sets[4], nodes, t) for t in ("flat", "node"))
    assert 0 < node["across"] < flat["across"]
    busiest = max(max(r["leaves"], r["leaf_entries"]) for r in stats[4])
    assert flat["across"] >= busiest
    for alpha, beta, node_faster in ((0.0, 1e6, True), (1e-3, 1e15, False)):
        row = table(stats, rates(stats), [16, 4], widths, PARAMS, alpha, beta, 5, 1, None, 2,
                    sets)[0]
        assert row["links"] == {"flat": flat, "node": node}
        assert (row["cd-0 node"]["comm"] < row["cd-0"]["comm"]) == node_faster
        assert row["cd-0 node"]["local_aggregation"] == row["cd-0"]["local_aggregation"]


@pytest.mark.slow
def test_predict_measures_the_rates_of_ranks_sharing_the_host(tmp_path, capsys, monkeypatch):
    """End to end: ``--ranks-per-node 2`` measures each P's rates on two of its partitions
    at once (the whole graph alone at P = 1) and adds the node-aware cd-0 column; the
    two-level counts and the rates of each P are in the JSON."""
    from bench import rates, scaling
    from bench.cli import bench_main

    # in this process, and one measurement of the two processes at once instead of
    # HOST_TRIALS (each process starts Python, imports torch and loads the kernels)
    monkeypatch.setattr(scaling, "host_rates", functools.partial(rates.host_rates, trials=1))
    out = tmp_path / "predict.json"
    status = bench_main(["predict", "--rate-epochs", "2", "--dataset",
                         "rmat:scale=8,edge_factor=8,features=8,classes=4", "--parts", "1,4",
                         "--hidden", "8", "--ranks-per-node", "2", "--json", str(out)])
    stdout, stderr = capsys.readouterr()
    assert status == 0, stderr
    assert "cd-0 node s" in stdout
    result = json.loads(out.read_text())
    assert sorted(result["rates"]) == ["1", "4"] and "rates at P=4" in stdout
    four = result["rows"][1]
    assert four["rates"] == result["rates"]["4"]
    assert four["parts"] == 4 and four["cd-0 node"]["epoch"] > 0
    assert 0 < four["links"]["node"]["across"] < four["links"]["flat"]["across"]


def test_a_measured_network_gives_a_node_links_bandwidth_and_its_allreduce():
    """``distgnn-bench comm``'s JSON as predict reads it: with a rank per node, alpha and
    beta are the bench's own fit (per peer); with K ranks per node, K (P - K) blocks of each
    size cross a node's link; the allreduce it measured is interpolated at that P only."""
    from bench.comm import fit_alpha_beta
    from bench.scaling import allreduce_seconds, measured_network

    sizes = [{"bytes": 1024, "alltoallv_s": 3e-4, "allreduce_s": 1e-4},
             {"bytes": 4096, "alltoallv_s": 5e-4, "allreduce_s": 2e-4},
             {"bytes": 65536, "alltoallv_s": 4.3e-3, "allreduce_s": 9e-4}]
    one = measured_network({"ranks": 4, "results": [{"sizes": sizes}]})
    fit = fit_alpha_beta([(r["bytes"] * 3, r["alltoallv_s"]) for r in sizes])
    assert one.alpha == pytest.approx(fit[0] / 3) and one.beta == pytest.approx(fit[1])
    two = measured_network({"ranks": 8, "ranks_per_node": 2, "results": [{"sizes": sizes}]})
    assert two.beta == pytest.approx(2 * 6 * (65536 - 1024) / 4e-3)
    assert two.ranks == 8 and two.allreduce[-1] == [65536, 9e-4]
    assert allreduce_seconds(8, 4096, two.alpha, two.beta, two.allreduce) == 2e-4
    assert allreduce_seconds(8, 2560, two.alpha, two.beta, two.allreduce) == \
        pytest.approx(1.5e-4)
    assert allreduce_seconds(8, 131072, two.alpha, two.beta, two.allreduce) == \
        pytest.approx(1.8e-3)  # beyond the largest: its seconds per byte
    assert allreduce_seconds(1, 4096, two.alpha, two.beta, two.allreduce) == 0.0
    rows = table(*proxy_rows_inputs(two))
    assert rows[0]["cd-0"]["allreduce"] == allreduce_seconds(4, 4 * PARAMS, two.alpha, two.beta)
    assert rows[1]["cd-0"]["allreduce"] == allreduce_seconds(8, 4 * PARAMS, two.alpha, two.beta,
                                                             two.allreduce)


def proxy_rows_inputs(net):
    """table()'s arguments for two hand-made P (4 and 8) under ``net``'s allreduce at 8."""
    rank = {"vertices": 100, "edges": 1000, "roots": 50, "leaves": 10, "leaf_entries": 10,
            "index_bytes": 4}
    stats = {4: [dict(rank)] * 4, 8: [dict(rank)] * 8}
    return (stats, rates(stats), [16, 4], exchange_widths(F, H, C, LAYERS), PARAMS,
            net.alpha, net.beta, 5, 1, None, 1, None, {net.ranks: net.allreduce})


def test_partition_graphs_are_what_each_rank_computes_on(tmp_path, proxy):
    """The rates are measured on partitions as graphs of their own: a layout's (in memory)
    and a partition directory's hold each partition's vertices, edges and feature rows."""
    from bench.rates import directory_graphs, partition_graphs
    from partition.write import write_dataset

    data, _ = proxy
    layout, per_rank, _ = cut_statistics(data.graph, 4)
    write_dataset(tmp_path / "p", data, layout, {"method": "libra", "seed": 0})
    for graphs in (partition_graphs(data, layout, 3), directory_graphs(tmp_path / "p", 3)):
        assert len(graphs) == 3
        for p, g in enumerate(graphs):
            ids = layout.vertices(p)
            assert g.graph.num_nodes == per_rank[p]["vertices"] == len(ids)
            assert g.graph.num_edges == per_rank[p]["edges"]
            assert g.train_mask.any() and g.num_classes == data.num_classes
            assert sorted(map(tuple, g.x.tolist())) == sorted(map(tuple, data.x[ids].tolist()))
