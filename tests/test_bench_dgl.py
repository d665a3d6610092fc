"""``distgnn-bench epoch --impls dgl``: DGL's GraphSAGE-gcn and GCN in DGL's own environment.

The runs need that environment's interpreter: ``$DISTGNN_DGL_PYTHON``, else ``dglenv`` beside
the repository (docs/benchmarks.md says how to create it); without one they skip.  Refusing
``dgl`` where no interpreter is given needs none."""
import json
import os
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
TINY = ["--dataset", "sbm:nodes=400,features=16", "--hidden", "16", "--epochs", "1",
        "--rounds", "1", "--threads", "1"]


def dgl_interpreter() -> str | None:
    """DGL's Python: ``$DISTGNN_DGL_PYTHON``, else ``../dglenv/bin/python``; ``None``."""
    path = os.environ.get("DISTGNN_DGL_PYTHON") or str(ROOT.parent / "dglenv" / "bin" / "python")
    return path if os.path.isfile(path) and os.access(path, os.X_OK) else None


needs_dgl = pytest.mark.skipif(
    dgl_interpreter() is None,
    reason="no DGL environment: set DISTGNN_DGL_PYTHON or create ../dglenv (docs/benchmarks.md)")


def test_dgl_without_an_interpreter_is_refused_in_one_line_before_any_work(monkeypatch,
                                                                           capsys, tmp_path):
    """No ``--dgl-python`` and no ``$DISTGNN_DGL_PYTHON``: one line that says how to give one
    and how to create the environment; a path that is no interpreter is named."""
    from bench import epoch
    from bench.cli import bench_main

    def no_work(*a, **k):
        raise AssertionError("the benchmark started")

    monkeypatch.delenv("DISTGNN_DGL_PYTHON", raising=False)
    monkeypatch.setattr(epoch, "machine_info", no_work)
    assert bench_main(["epoch", *TINY, "--impls", "numba,dgl"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    assert "--dgl-python PATH" in err[0] and "$DISTGNN_DGL_PYTHON" in err[0], err
    assert "python3 -m venv" in err[0] and "dgl==2.1.0" in err[0], err
    absent = tmp_path / "absent" / "python"
    assert bench_main(["epoch", *TINY, "--impls", "dgl", "--dgl-python", str(absent)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and f"--dgl-python {absent}: no such interpreter" in err[0], err


def test_dgl_rows_check_the_model_and_give_speed_ups_against_dgl(monkeypatch, tmp_path,
                                                                 capsys):
    """With the workers' results given (no worker starts): the DGL worker runs under
    ``--dgl-python`` for the check (dropout 0, ``CHECK_EPOCHS`` epochs, no warm-up) and per
    round (a warm-up epoch, then the timed ones); the row has DGL's check and the speed-ups
    against DGL, the table a DGL column; a model DGL has no peer for is a row that says so."""
    import argparse

    from bench import epoch
    from distgnn.data.datasets import load

    data = load("sbm:nodes=400,features=16")
    npz = tmp_path / "data.npz"
    epoch.save_npz(data, npz)
    calls = []

    def fake_worker(job, command=None):
        calls.append((job, command))
        if job.get("impl") == "check":
            return {"ours": [2.0, 1.9, 1.8]}
        if command is None:  # ours, timed
            return {"times": [0.5], "rss_loaded_mib": 10.0, "peak_rss_mib": 20.0}
        if job["warmup"] == 0:  # DGL's check
            return {"losses": [2.0, 1.9, 1.8 * (1 + 1e-6)], "times": [1.0] * 3}
        return {"losses": [1.0], "times": [2.0], "rss_loaded_mib": 11.0,
                "peak_rss_mib": 30.0, "versions": {"dgl": "x", "torch": "y"}}

    monkeypatch.setattr(epoch, "run_worker", fake_worker)
    args = argparse.Namespace(hidden=16, layers=2, heads=8, recompute=False, threads=1,
                              epochs=1, rounds=2, dropout=0.5, device="cpu",
                              aggregation_precision=None, precision="fp32",
                              dgl_python="/bin/sh")
    row = epoch.measure(npz, "sbm", "gcn", ["numba", "dgl"], args, data)
    check_job, command = calls[1]
    assert command == ["/bin/sh", "-I", str(epoch.DGL_WORKER)]
    assert (check_job["dropout"], check_job["epochs"], check_job["warmup"]) == (
        0.0, epoch.CHECK_EPOCHS, 0)
    assert check_job["npz"] == str(npz) and Path(check_job["weights"]).exists()
    timed = [job for job, command in calls[2:] if command is not None]
    assert [(j["dropout"], j["epochs"], j["warmup"]) for j in timed] == [(0.5, 1, 1)] * 2
    assert row["same_model_check_dgl"]["ok"] and "same_model_check" not in row
    assert row["impls"]["numba"]["speedup_vs_dgl"] == 4.0
    assert row["impls"]["dgl"]["speedup_vs_dgl"] == 1.0
    assert row["impls"]["dgl"]["versions"] == {"dgl": "x", "torch": "y"}
    table = epoch.format_row(row)
    assert "vs PyG, DGL" in table and "- 4.00x" in table
    assert "same-model check (numba against DGL" in capsys.readouterr().out
    calls.clear()
    row = epoch.measure(npz, "sbm", "gin", ["numba", "dgl"], args, data)
    assert all(command is None for _, command in calls)  # no DGL worker for GIN
    assert "sage, gcn" in row["impls"]["dgl"]["unsupported"]
    assert "not supported" in epoch.format_row(row)


@pytest.mark.slow
@needs_dgl
def test_dgl_gcn_is_the_same_model_and_is_timed(tmp_path, capsys):
    """GCN (``GraphConv``, whose weight is the transpose of ours, on ``A + I``), end to
    end: the same-model check against DGL passes and is printed, DGL's row has an epoch
    time, memory and the versions it ran."""
    from bench.cli import bench_main

    out = tmp_path / "epoch.json"
    status = bench_main(["epoch", *TINY, "--models", "gcn", "--impls", "dgl",
                         "--dgl-python", dgl_interpreter(), "--json", str(out)])
    stdout, stderr = capsys.readouterr()
    assert status == 0, stderr
    assert "same-model check (numba against DGL" in stdout and "vs PyG, DGL" in stdout
    row = json.loads(out.read_text())["results"][0]
    assert row["same_model_check_dgl"]["ok"], row["same_model_check_dgl"]
    dgl = row["impls"]["dgl"]
    assert dgl["device"] == "cpu" and dgl["versions"]["dgl"]
    assert 0 < dgl["epoch_s_min"] <= dgl["epoch_s_median"] <= dgl["epoch_s_max"]
    assert dgl["peak_rss_mib"] >= dgl["rss_loaded_mib"] > 0
    assert dgl["speedup_vs_dgl"] == 1.0


@pytest.mark.slow
@needs_dgl
def test_dgl_graphsage_gcn_trains_as_ours_from_the_same_weights(tmp_path):
    """GraphSAGE-gcn (``SAGEConv(aggregator_type="gcn")``): DGL's worker, from this
    project's initial weights, trains to our losses (ours computed here, in this process)."""
    import argparse

    from bench import epoch
    from distgnn.data.datasets import load

    data = load("sbm:nodes=400,features=16")
    npz, weights = tmp_path / "data.npz", tmp_path / "weights.npz"
    epoch.save_npz(data, npz)
    args = argparse.Namespace(hidden=16, layers=2, heads=8, recompute=False, threads=1,
                              epochs=1, dropout=0.0, device="cpu",
                              aggregation_precision="fp32", precision="fp32")
    job = epoch.make_job("sage", args, npz=str(npz), impl="numba")
    epoch.save_initial_weights(data, job, weights)
    ours, _ = epoch.train_ours(data, job, 0.0, epoch.CHECK_EPOCHS)
    theirs = epoch.run_worker(epoch.dgl_job(job, weights, 0.0, epoch.CHECK_EPOCHS, 0),
                              [dgl_interpreter(), "-I", str(epoch.DGL_WORKER)])
    assert len(theirs["losses"]) == epoch.CHECK_EPOCHS
    # a tenth of the check's bound: GCN's normalisation with these weights is 3e-4 away
    assert theirs["losses"] == pytest.approx(ours, rel=epoch.CHECK_RTOL / 10)
