"""distgnn-bench subcommands run end to end on tiny graphs and write the documented JSON."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers.mpi import run_plan

BIN = Path(sys.executable).parent


@pytest.mark.slow
def test_bench_spmm_writes_json(tmp_path, capsys):
    from bench.cli import bench_main

    # in this process (the benchmark itself still starts the two processes it times)
    out = tmp_path / "spmm.json"
    status = bench_main(
        ["spmm", "--dataset", "rmat:scale=9,edge_factor=4,features=1",
         "--widths", "8,32", "--orders", "given,degree", "--reps", "1", "--threads", "1",
         "--sweep", "--json", str(out), "--plot", str(tmp_path)])
    stdout, stderr = capsys.readouterr()
    assert status == 0, stderr
    assert "bf16 fwd x" in stdout and "sweep d=32" in stdout
    assert "order degree: ordering" in stdout
    result = json.loads(out.read_text())
    assert result["benchmark"] == "spmm" and result["num_nodes"] == 512
    assert result["machine"]["triad_gb_s"] > 0
    assert result["machine"]["cached_start_s"] > 0
    assert [o["order"] for o in result["orders"]] == ["given", "degree"]
    assert result["orders"][1]["ordering_s"] > 0 and result["orders"][1]["relabel_s"] > 0
    assert [(r["order"], r["width"]) for r in result["results"]] == [
        ("given", 8), ("given", 32), ("degree", 8), ("degree", 32)]
    for r in result["results"]:
        for key in ("torch_fwd", "scipy_fwd", "torch_bwd", "bf16_convert"):
            assert r[key] > 0
        for p in ("fp32", "bf16"):
            assert r[f"numba_fwd_{p}"] > 0 and r[f"numba_bwd_{p}"] > 0
            assert r[f"speedup_fwd_{p}"] > 0 and r[f"eff_gb_s_fwd_{p}"] > 0
    for s in result["sweep"]:
        assert str(s["chosen"]) in s["times"] and s["chosen_over_best"] >= 1.0
    assert (tmp_path / "spmm.png").read_bytes().startswith(b"\x89PNG")


def test_bench_spmm_device_mode_agrees_with_pyg(capsys):
    """The --device mode's comparison, run on the CPU (the code is device-agnostic): the
    torch backend and PyG's two routes compute the same sums, forward and backward."""
    import argparse

    from bench.spmm import run_device

    pytest.importorskip("torch_geometric")
    # 3 reps: the median leaves out the first call, which loads the kernels (with 1 rep a
    # 4-wide row's effective bandwidth rounded to 0.0)
    result = run_device(argparse.Namespace(device="cpu", widths=[4, 16], reps=3,
                                           dataset="rmat:scale=9,edge_factor=4,features=1"))
    assert [r["width"] for r in result["results"]] == [4, 16]
    for r in result["results"]:
        assert r["rel_err_fwd"] < 1e-5 and r["rel_err_bwd"] < 1e-5
        # times are measured, not asserted: a loaded machine may round the rates to 0
        assert r["ours_fwd"] > 0 and r["pyg_mp_bwd"] > 0 and r["eff_over_copy"] >= 0
    assert "PyG mp fwd" in capsys.readouterr().out


def test_bench_partition_writes_json_and_chart(tmp_path, capsys):
    from bench.cli import bench_main

    out = tmp_path / "partition.json"
    assert bench_main(["partition", "--dataset", "rmat:scale=8,edge_factor=4,features=1",
                       "--parts", "2,4", "--methods", "libra,ne", "--threads", "1",
                       "--json", str(out), "--plot", str(tmp_path)]) == 0
    rows = json.loads(out.read_text())["results"]
    assert [(r["parts"], r["method"]) for r in rows] == [(2, "libra"), (2, "ne"),
                                                         (4, "libra"), (4, "ne")]
    assert all(1.0 <= r["replication_factor"] <= r["parts"] for r in rows)
    # the peak is what the cut added to the process (here, where /proc allows its reset)
    assert all(0 <= r["peak_mib"] < 100 for r in rows)
    assert (tmp_path / "partition.png").read_bytes().startswith(b"\x89PNG")
    assert "libra" in capsys.readouterr().out


def test_bench_needs_a_subcommand(capsys):
    from bench.cli import bench_main

    with pytest.raises(SystemExit) as exit:  # what the command line exits with
        bench_main([])
    assert exit.value.code == 2 and len(capsys.readouterr().err.strip().splitlines()) == 1


EPOCH_ARGS = ["--dataset", "sbm:nodes=400,features=16", "--hidden", "16", "--epochs", "1",
              "--rounds", "1", "--threads", "1"]


@pytest.mark.slow
def test_bench_epoch_checks_the_model_and_writes_json(tmp_path, capsys):
    """GraphSAGE-gcn against PyG on a degree-ordered graph: the same-model check passes,
    every implementation has a time, a range, a peak memory and a speed-up, and the chart
    is written."""
    from bench.cli import bench_main

    pytest.importorskip("torch_geometric")
    pytest.importorskip("matplotlib")
    out = tmp_path / "epoch.json"
    # in this process; the benchmark starts its own worker per implementation (peak memory)
    status = bench_main(["epoch", *EPOCH_ARGS, "--models", "sage", "--order", "degree",
                         "--json", str(out), "--plot", str(tmp_path / "plots")])
    stdout, stderr = capsys.readouterr()
    assert status == 0, stderr
    assert "same-model check" in stdout
    result = json.loads(out.read_text())
    assert result["benchmark"] == "epoch" and result["machine"]["triad_gb_s"] > 0
    assert [r["model"] for r in result["results"]] == ["sage"]
    assert "vertex order degree" in stdout
    for row in result["results"]:
        assert row["order"] == "degree" and row["order_s"] > 0
        assert row["same_model_check"]["ok"], row["same_model_check"]
        assert set(row["impls"]) == {"numba", "torch", "pyg"}
        for r in row["impls"].values():
            assert 0 < r["epoch_s_min"] <= r["epoch_s_median"] <= r["epoch_s_max"]
            assert r["peak_rss_mib"] >= r["rss_loaded_mib"] > 0
            assert r["speedup_vs_pyg"] > 0
        assert row["impls"]["pyg"]["speedup_vs_pyg"] == 1.0
    png = (tmp_path / "plots" / "epoch.png").read_bytes()
    assert png.startswith(b"\x89PNG")


@pytest.mark.slow
def test_bench_epoch_runs_pyg_under_bf16_autocast_where_torch_can(tmp_path, capsys):
    """impl pyg-bf16: GraphSAGE-gcn trains under autocast (bf16 sparse products with a
    reduction exist) and the speed-ups against it are given; GCN's sparse product has no
    bf16 kernel on the CPU, so its row says so instead of a time."""
    from bench.cli import bench_main

    pytest.importorskip("torch_geometric")
    out = tmp_path / "epoch.json"
    assert bench_main(["epoch", *EPOCH_ARGS, "--models", "sage,gcn", "--impls",
                       "numba,pyg-bf16", "--json", str(out)]) == 0, capsys.readouterr().err
    sage, gcn = json.loads(out.read_text())["results"]
    assert sage["same_model_check"]["ok"]  # checked in fp32 whatever the timed precision
    assert sage["impls"]["pyg-bf16"]["speedup_vs_pyg_bf16"] == 1.0
    assert sage["impls"]["numba"]["speedup_vs_pyg_bf16"] > 0
    assert "BFloat16" in gcn["impls"]["pyg-bf16"]["unsupported"]
    assert "speedup_vs_pyg_bf16" not in gcn["impls"]["numba"]
    assert "not supported" in capsys.readouterr().out


@pytest.mark.slow
def test_bench_epoch_without_pyg_says_so_and_runs_the_rest(tmp_path, monkeypatch, capsys):
    from bench import pyg
    from bench.cli import bench_main

    monkeypatch.setattr(pyg, "available", lambda: False)
    out = tmp_path / "epoch.json"
    assert bench_main(["epoch", *EPOCH_ARGS, "--models", "gcn", "--impls", "numba,pyg",
                       "--aggregation-precision", "bf16", "--json", str(out)]) == 0
    assert "PyTorch Geometric is not installed" in capsys.readouterr().out
    row = json.loads(out.read_text())["results"][0]
    assert set(row["impls"]) == {"numba"} and "same_model_check" not in row
    assert row["aggregation_precision"] == "bf16"


def test_bench_epoch_refuses_unknown_implementations(capsys):
    from bench.cli import bench_main

    with pytest.raises(SystemExit) as exit:  # refused by the parser, before any work
        bench_main(["epoch", "--impls", "numba,jax"])
    assert exit.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "unknown jax" in err[0], err


def test_predict_matches_hand_computed_times():
    """The scaling model on two hand-made ranks (see the docstring of bench/scaling.py)."""
    from bench.scaling import Rates, exchange_widths, predict

    per_rank = [{"vertices": 100, "edges": 1000, "leaves": 10, "leaf_entries": 20},
                {"vertices": 80, "edges": 900, "leaves": 20, "leaf_entries": 10}]
    rates = Rates(aggregation_per_edge=1e-6, dense_per_vertex=1e-5, optimizer=1e-3,
                  triad_bytes_s=1e9)
    # an epoch's exchanges: forward at 16 and 8, backward at 8 only (the first layer
    # aggregates the input features, which need no gradient)
    assert exchange_widths(16, 32, 8, 2) == [16, 8, 8]
    assert exchange_widths(64, 32, 8, 2) == [32, 8, 32, 8]  # projects first: both passes
    assert exchange_widths(64, 32, 8, 2, precompute_first=True) == [8, 8]
    assert exchange_widths(16, 32, 8, 3, precompute_first=True) == [32, 8, 32, 8]
    args = (per_rank, rates, [16, 8, 8], 1000, 1e-5, 1e9)
    compute = 1e-3 + 1e-3  # 1000 edges x 1 us + 100 vertices x 10 us
    prepost = 3 * 4 * 32 * 30 / 1e9  # 30 split rows on the busiest rank
    comm = sum(2 * (1e-5 + 4 * d * 20 / 1e9) for d in (16, 8, 8))
    allreduce = 2 * 1e-5 + 2 * 0.5 * 4 * 1000 / 1e9
    cd0 = predict(*args, "cd-0")
    assert cd0["comm"] == pytest.approx(comm) and cd0["prepost"] == pytest.approx(prepost)
    assert cd0["epoch"] == pytest.approx(compute + prepost + comm + allreduce + 1e-3)
    # cd-5 hides its fifth of the exchange behind 5 epochs of compute
    assert predict(*args, "cd-r", 5)["epoch"] == pytest.approx(
        compute + prepost + allreduce + 1e-3)
    zero_c = predict(*args, "0c")
    assert zero_c["epoch"] == pytest.approx(compute + allreduce + 1e-3)
    slow = predict(*args, "0c", slowdown=2.0)  # an oversubscribed node halves compute speed
    assert slow["epoch"] == pytest.approx(2 * compute + allreduce + 1e-3)
    one = predict(per_rank[:1], rates, [16, 8], 1000, 1e-5, 1e9, "cd-0")
    assert one["comm"] == one["allreduce"] == one["prepost"] == 0.0


@pytest.mark.slow
def test_bench_predict_and_report_write_json_charts_and_markdown(tmp_path, capsys):
    """predict on a tiny graph (P = 1, 2; validated at P = 1) writes the documented JSON and
    both charts; report turns it into Markdown that links the charts it drew."""
    from bench.cli import bench_main

    pytest.importorskip("matplotlib")
    out = tmp_path / "predict.json"
    # in this process (--validate still runs distgnn-train); 2 rate epochs, the fewest
    assert bench_main(["predict", "--rate-epochs", "2", "--dataset",
                       "sbm:nodes=400,features=16", "--parts", "1,2", "--hidden", "8",
                       "--validate", "1", "--cores", "2", "--json", str(out),
                       "--plot", str(tmp_path / "plots")]) == 0, capsys.readouterr().err
    result = json.loads(out.read_text())
    assert [r["parts"] for r in result["rows"]] == [1, 2]
    for r in result["rows"]:
        for algo in ("0c", "cd-0", "cd-r"):
            assert r[algo]["epoch"] > 0 and r[algo]["speedup"] > 0
    assert result["rows"][0]["cd-0"]["speedup"] == 1.0
    assert all(r["aggregation_per_edge"] > 0 for r in result["rates"].values())
    (check,) = result["validation"]
    assert check["parts"] == 1 and check["measured_s"] > 0
    for name in ("scaling.png", "forward_aggregation.png"):
        assert (tmp_path / "plots" / name).read_bytes().startswith(b"\x89PNG")
    page = tmp_path / "report.md"
    assert bench_main(["report", str(out), "--out", str(page)]) == 0, capsys.readouterr().err
    text = page.read_text()
    assert "## predict" in text and "| P |" in text
    for link in ("scaling.png", "forward_aggregation.png"):
        target = next(line for line in text.splitlines() if link in line).split("(")[1][:-1]
        assert (tmp_path / target).exists()


@pytest.mark.mpi
def test_bench_comm_under_mpirun(tmp_path):
    """Two ranks: every size timed for both communicators, an alpha-beta fit, JSON by rank 0."""
    import launch

    out = tmp_path / "comm.json"
    plan = launch.plan(2, [str(BIN / "distgnn-bench"), "comm", "--max-bytes", "16384",
                           "--reps", "2", "--json", str(out), "--plot", str(tmp_path)])
    proc = run_plan(plan, timeout=300)
    assert proc.returncode == 0, proc.stderr
    result = json.loads(out.read_text())
    assert result["ranks"] == 2
    assert [r["communicator"] for r in result["results"]] == ["mpi", "gloo"]
    for r in result["results"]:
        assert [s["bytes"] for s in r["sizes"]] == [1024, 4096, 16384]
        assert all(s["alltoallv_s"] > 0 and s["allreduce_s"] > 0 for s in r["sizes"])
        assert r["alltoallv_alpha_s"] > 0 and r["alltoallv_beta_b_s"] > 0
    assert (tmp_path / "comm.png").read_bytes().startswith(b"\x89PNG")


def test_phase_split_counts_matmul_flops_and_elementwise_bytes():
    """A product, a ReLU and an optimizer-like update, profiled: the product's flops are
    2 m k n, the ReLU moves its input and output, the update's bytes are the optimizer's."""
    import torch

    from bench.phases import ProfiledTimer, split_profile

    a, b, p, g = torch.randn(64, 32), torch.randn(32, 16), torch.zeros(100), torch.ones(100)
    timer = ProfiledTimer()
    with torch.profiler.profile(record_shapes=True, with_flops=True) as prof:
        with timer("forward"):
            torch.relu(torch.mm(a, b))
        with timer("aggregation_forward"):
            torch.relu(a)  # timed as aggregation: not in the profile's phases
        with timer("optimizer"):
            p.add_(g)
    totals = split_profile(prof.events())
    assert totals["matmul"]["flops"] == 2 * 64 * 32 * 16
    assert totals["matmul"]["products"] == [(2 * 64 * 32 * 16, (64 * 32 + 32 * 16 + 64 * 16) * 4)]
    assert totals["elementwise"]["bytes"] == 2 * 64 * 16 * 4
    assert totals["optimizer"]["bytes"] == 3 * 100 * 4
    assert set(timer.seconds) == {"forward", "aggregation_forward", "optimizer"}


def test_counted_aggregation_bytes_follow_the_rows_the_kernels_gather():
    """bf16 rows (--aggregation-precision bf16, or bf16-mixed) count 2 bytes an element for
    sum and mean, 4 for max, whose kernels gather float32."""
    import torch

    from bench.phases import CountingBackend
    from bench.spmm import moved_bytes
    from distgnn.nn.backends import get_backend
    from tests.helpers.graphs import build_random_graph

    graph, *_ = build_random_graph(seed=2, n=50, e=300)
    x = torch.randn(50, 8)
    for precision, reduce, itemsize in (("fp32", "sum", 4), ("bf16", "sum", 2),
                                        ("bf16", "max", 4)):
        counting = CountingBackend(get_backend("numba", precision))
        counting.spmm(graph, x, reduce)
        assert counting.bytes == moved_bytes(graph, 8, itemsize), (precision, reduce)


def test_fused_loop_sums_count_their_own_row_and_output_in_the_rows_size():
    """A fused loop sum needs the SpMM's bytes with its output in its rows' size, and the
    vertex's own row: 2 bytes an element for bf16 rows in and out, 4 for float32."""
    import torch

    from bench.phases import CountingBackend
    from distgnn.nn.backends import get_backend
    from tests.helpers.graphs import build_random_graph

    graph, *_ = build_random_graph(seed=2, n=50, e=300)
    for dtype, size in ((torch.float32, 4), (torch.bfloat16, 2)):
        counting = CountingBackend(get_backend("numba"))
        counting.propagate(graph, torch.randn(50, 8).to(dtype), None, None)
        assert counting.bytes == graph.indices.nbytes + (300 + 2 * 50) * 8 * size


def test_elementwise_needed_bytes_are_one_pass_each_way_per_activation():
    """2 layers, hidden H: the hidden activation read and written each way with its bits,
    the features read and written by their dropout, the logits and labels by the loss; half
    the activations' bytes under bf16-mixed; no model for GAT."""
    from bench.phases import elementwise_needed_bytes
    from distgnn.run.config import TrainConfig

    n, f, h, c = 1000, 32, 64, 5
    fp32 = TrainConfig(model="sage", hidden=h, layers=2, dropout=0.5)
    assert elementwise_needed_bytes(fp32, n, f, c) == (2 * (2 * n * h * 4 + n * h // 8)
                                                      + 2 * n * f * 4 + 8 * n * c + 9 * n)
    bf16 = TrainConfig(model="gcn", hidden=h, layers=2, dropout=0.0, precision="bf16-mixed")
    assert elementwise_needed_bytes(bf16, n, f, c) == (2 * (2 * n * h * 2 + n * h // 8)
                                                      + 8 * n * c + 9 * n)
    assert elementwise_needed_bytes(TrainConfig(model="gat"), n, f, c) is None


def test_the_elementwise_bound_adds_the_folded_projection_at_the_product_rate():
    """2 layers, hidden 64, 5 classes: the epilogue's projection is 3 products of 2 N H C
    flops an epoch (none for GIN, or where the classes are not narrower, or for one layer).
    At 10 GB/s and 100 GFLOP/s, 1e9 needed bytes (0.1 s) and 1e10 flops (0.1 s) an epoch,
    measured at 0.4 s, are half the bound, a quarter of the triad by the bytes alone."""
    from bench.phases import folded_projection_flops, phase_rows
    from distgnn.nn.models import GNN

    n, f, h, c = 1000, 32, 64, 5
    assert folded_projection_flops(GNN("gcn", f, h, c), n, h, c) == 3 * 2 * n * h * c
    assert folded_projection_flops(GNN("sage", f, h, c), n, h, c) == 3 * 2 * n * h * c
    assert folded_projection_flops(GNN("gcn", f, h, 100), n, h, 100) == 0
    assert folded_projection_flops(GNN("gin", f, h, c), n, h, c) == 0
    assert folded_projection_flops(GNN("gcn", f, h, c, num_layers=1), n, h, c) == 0
    idle = {"s": 0.0, "flops": 0, "bytes": 0}
    measured = {"epochs": 2, "epoch_s": 1.0, "aggregation": idle, "optimizer": idle,
                "matmul": {**idle, "products": []},
                "elementwise": {"s": 0.8, "flops": 0, "bytes": 2e9, "folded_flops": 2e10}}
    elementwise = phase_rows(measured, 10.0, 100.0)[2]
    assert elementwise["fraction"] == 0.25
    assert elementwise["bound_fraction"] == 0.5
    assert elementwise["folded_gflop_per_epoch"] == 10.0


def test_roofline_bounds_each_product_by_its_flops_or_its_bytes():
    """At 100 GFLOP/s and 10 GB/s a product of 1e9 flops and 1e9 bytes is bound by its bytes
    (0.1 s), one of 1e10 flops and 1e8 bytes by its flops (0.1 s): two epochs of both are
    bound to 0.4 s, and measured at 0.8 s they run at half their roofline."""
    from bench.phases import roofline_rows

    matmul = {"s": 0.8, "products": [(1e9, 1e9), (1e10, 1e8)] * 2}
    assert roofline_rows(matmul, 10.0, 100.0, epochs=2) == {
        "roofline_fraction": 0.5, "products": 2, "bytes_bound_products": 1}


def test_phase_split_counts_the_fused_epilogue_as_elementwise():
    """The fused bias-ReLU-dropout (an autograd function of Numba kernels, no aten operator)
    is elementwise work: forward it reads x and the bias and writes y, backward it reads
    the gradient and writes the input's."""
    import numpy as np
    import torch

    from bench.phases import split_profile
    from distgnn.nn.dropout import bias_relu_dropout

    x, bias = torch.randn(300, 64, requires_grad=True), torch.zeros(64, requires_grad=True)
    y = bias_relu_dropout(x, bias, np.arange(300), 0.5, 7)  # compiled outside the profile
    with torch.profiler.profile(record_shapes=True) as prof:
        y = bias_relu_dropout(x, bias, np.arange(300), 0.5, 7)
        y.backward(torch.ones_like(y))
    elementwise = split_profile(prof.events())["elementwise"]
    assert elementwise["bytes"] >= (2 + 2) * 300 * 64 * 4 + 64 * 4
    assert elementwise["s"] > 0


@pytest.mark.slow
def test_bench_phases_writes_rows_chart_and_report(tmp_path, capsys):
    """phases on a tiny graph: every phase has its time and a fraction of its limit, the
    shares of the epoch add up to one, and report draws the chart."""
    from bench.cli import bench_main

    pytest.importorskip("matplotlib")
    out = tmp_path / "phases.json"
    assert bench_main(["phases", "--dataset", "sbm:nodes=2000,features=64", "--hidden", "64",
                       "--warmup", "2", "--epochs", "2", "--threads", "1",
                       "--matmul-size", "512", "--json", str(out)]) == 0, \
        capsys.readouterr().err
    result = json.loads(out.read_text())
    assert result["machine"]["matmul_gflops"] > 0 and result["machine"]["triad_gb_s"] > 0
    rows = {r["phase"]: r for r in result["results"]}
    assert list(rows) == ["aggregation", "matrix products", "elementwise", "optimizer", "other"]
    for name in ("aggregation", "matrix products", "elementwise", "optimizer"):
        assert rows[name]["s"] > 0 and 0 < rows[name]["fraction"] < 5, rows[name]
    assert abs(sum(r["share"] for r in rows.values()) - 1) < 0.01
    page = tmp_path / "report.md"
    assert bench_main(["report", str(out), "--out", str(page)]) == 0, capsys.readouterr().err
    assert "## phases" in page.read_text() and "| matrix products |" in page.read_text()
    assert (tmp_path / "report-charts" / "phases" / "phases.png").exists()
