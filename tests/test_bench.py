"""distgnn-bench subcommands run end to end on tiny graphs and write the documented JSON."""
import json
import subprocess
import sys
from pathlib import Path

import pytest

BIN = Path(sys.executable).parent


def test_bench_spmm_writes_json(tmp_path):
    out = tmp_path / "spmm.json"
    proc = subprocess.run(
        [str(BIN / "distgnn-bench"), "spmm", "--dataset", "rmat:scale=9,edge_factor=4,features=1",
         "--widths", "8,32", "--reps", "1", "--threads", "1", "--sweep", "--json", str(out)],
        capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    assert "fwd x" in proc.stdout and "sweep d=32" in proc.stdout
    result = json.loads(out.read_text())
    assert result["benchmark"] == "spmm" and result["num_nodes"] == 512
    assert result["machine"]["triad_gb_s"] > 0
    assert result["machine"]["cached_start_s"] > 0
    assert [r["width"] for r in result["results"]] == [8, 32]
    for r in result["results"]:
        for key in ("numba_fwd", "torch_fwd", "scipy_fwd", "numba_bwd", "torch_bwd"):
            assert r[key] > 0
        assert r["speedup_fwd"] > 0 and r["eff_gb_s_fwd"] > 0
    for s in result["sweep"]:
        assert str(s["chosen"]) in s["times"] and s["chosen_over_best"] >= 1.0


def test_bench_needs_a_subcommand():
    proc = subprocess.run([str(BIN / "distgnn-bench")], capture_output=True, text=True)
    assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1


EPOCH_ARGS = ["--dataset", "sbm:nodes=400,features=16", "--hidden", "16", "--epochs", "1",
              "--rounds", "1", "--threads", "1"]


def test_bench_epoch_checks_the_model_and_writes_json(tmp_path):
    """GraphSAGE-gcn against PyG: the same-model check passes, every implementation has a
    time, a range, a peak memory and a speed-up, and the chart is written."""
    pytest.importorskip("torch_geometric")
    pytest.importorskip("matplotlib")
    out = tmp_path / "epoch.json"
    proc = subprocess.run([str(BIN / "distgnn-bench"), "epoch", *EPOCH_ARGS, "--models", "sage",
                           "--json", str(out), "--plot", str(tmp_path / "plots")],
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    assert "same-model check" in proc.stdout
    result = json.loads(out.read_text())
    assert result["benchmark"] == "epoch" and result["machine"]["triad_gb_s"] > 0
    assert [r["model"] for r in result["results"]] == ["sage"]
    for row in result["results"]:
        assert row["same_model_check"]["ok"], row["same_model_check"]
        assert set(row["impls"]) == {"numba", "torch", "pyg"}
        for r in row["impls"].values():
            assert 0 < r["epoch_s_min"] <= r["epoch_s_median"] <= r["epoch_s_max"]
            assert r["peak_rss_mib"] >= r["rss_loaded_mib"] > 0
            assert r["speedup_vs_pyg"] > 0
        assert row["impls"]["pyg"]["speedup_vs_pyg"] == 1.0
    png = (tmp_path / "plots" / "epoch.png").read_bytes()
    assert png.startswith(b"\x89PNG")


def test_bench_epoch_without_pyg_says_so_and_runs_the_rest(tmp_path, monkeypatch, capsys):
    from distgnn.bench import pyg
    from distgnn.cli import bench_main

    monkeypatch.setattr(pyg, "available", lambda: False)
    out = tmp_path / "epoch.json"
    assert bench_main(["epoch", *EPOCH_ARGS, "--models", "gcn", "--impls", "numba,pyg",
                       "--json", str(out)]) == 0
    assert "PyTorch Geometric is not installed" in capsys.readouterr().out
    row = json.loads(out.read_text())["results"][0]
    assert set(row["impls"]) == {"numba"} and "same_model_check" not in row


def test_bench_epoch_refuses_unknown_implementations(capsys):
    from distgnn.cli import bench_main

    assert bench_main(["epoch", "--impls", "numba,dgl"]) == 2
    assert "dgl" in capsys.readouterr().err
