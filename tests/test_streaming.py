"""Training beyond memory: the streamed execution (``distgnn/nn/streamed.py``) against
autograd's on the same model, its spill files (``distgnn/spill.py``), the plan under a
memory limit (``distgnn/run/memory.py``) and runs under ``--memory-limit`` against the same
runs in memory, in one process and on ranks."""
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import distgnn
from distgnn.data.generators import rmat
from distgnn.data.graph import CSRGraph
from distgnn.errors import DistGNNError
from distgnn.kernels.spmm import transpose_csr
from distgnn.nn.aggregate import Neighbourhood
from distgnn.nn.backends import get_backend
from distgnn.nn.dropout import apply_dropout_mask
from distgnn.nn.models import GNN
from distgnn.nn.streamed import StreamedGNN, StreamLayout, schedule_bytes
from distgnn.run import memory
from distgnn.run.config import TrainConfig
from distgnn.spill import SPILL_NAME, SpillError, SpillFolder, check_spill_room, npy_rows
from tests.helpers.training import fit_on_threads


@pytest.fixture(scope="module")
def small():
    return rmat(9, 8, num_features=20, num_classes=5, seed=1)


def autograd_step(model, nbr, x, y, train):
    """Logits, loss and gradients of one epoch through autograd (the in-memory model)."""
    model.zero_grad(set_to_none=True)
    logits = model(nbr, x)
    loss = F.cross_entropy(logits[train], y[train], reduction="sum") / train.sum()
    loss.backward()
    return logits.detach(), loss.item(), {n: p.grad.clone() for n, p in model.named_parameters()}


def streamed_step(model, nbr, x, y, train, folder, layout):
    model.zero_grad(set_to_none=True)
    features = folder.matrix("x", x.shape[0], x.shape[1], x.numpy().dtype, layout.panel)
    features.write_rows(0, x.numpy())
    run = StreamedGNN(model, nbr, features, folder, layout)
    logits, tape, _ = run.forward(keep=True)
    logits.requires_grad_(True)
    loss = F.cross_entropy(logits[train], y[train], reduction="sum") / train.sum()
    loss.backward()
    run.backward(tape, logits.grad)
    features.close()
    return logits.detach(), loss.item(), {n: p.grad.clone() for n, p in model.named_parameters()}


@pytest.mark.parametrize("kind,hidden,layers,dtype", [
    ("sage", 32, 2, torch.float32),   # aggregate first, then project first
    ("gcn", 32, 2, torch.float32),
    ("sage", 16, 3, torch.float32),   # a hidden-to-hidden layer between
    ("gcn", 4, 3, torch.float32),     # the first layer projects first (20 > 4)
    ("sage", 8, 1, torch.float64),    # one layer: the features straight to the logits
    ("gcn", 24, 3, torch.float64),
])
def test_streamed_epoch_equals_autograd(small, tmp_path, kind, hidden, layers, dtype):
    """Logits, loss and every gradient of a streamed epoch, with every matrix on disk in
    ragged panels and row chunks, against autograd's on the same model and dropout masks."""
    g = small.graph
    nbr = Neighbourhood(g, get_backend("numba", "fp32", False), seed=3, dtype=dtype)
    torch.manual_seed(0)
    model = GNN(kind, 20, hidden, 5, layers, dropout=0.5).to(dtype)
    x = torch.from_numpy(np.asarray(small.x)).to(dtype)
    y = torch.from_numpy(np.asarray(small.y))
    train = torch.from_numpy(np.asarray(small.train_mask))
    nbr.set_epoch(7)
    want = autograd_step(model, nbr, x, y, train)
    folder = SpillFolder(tmp_path)
    try:
        nbr.set_epoch(7)
        got = streamed_step(model, nbr, x, y, train, folder, StreamLayout(3, 37, 0))
        assert folder.bytes_read and folder.bytes_written  # every matrix was on disk
        assert os.listdir(folder.path) == []  # each file removed once read for the last time
    finally:
        folder.close()
    assert not folder.path.exists()
    tol = 1e-6 if dtype == torch.float32 else 1e-13
    torch.testing.assert_close(got[0], want[0], rtol=tol, atol=tol)
    assert got[1] == pytest.approx(want[1], rel=tol)
    for name, grad in want[2].items():
        scale = float(grad.abs().max()) or 1.0
        assert float((got[2][name] - grad).abs().max()) <= 20 * tol * scale, name


def test_eval_forward_and_embeddings_equal_the_model(small, tmp_path):
    g = small.graph
    nbr = Neighbourhood(g, get_backend("numba", "fp32", False), seed=1)
    torch.manual_seed(0)
    model = GNN("sage", 20, 16, 5, 3).eval()
    x = torch.from_numpy(np.asarray(small.x))
    nbr.set_epoch(2, training=False)
    captured = []
    hook = model.convs[2].register_forward_pre_hook(lambda m, a: captured.append(a[1]))
    with torch.no_grad():
        want = model(nbr, x)
    hook.remove()
    folder = SpillFolder(tmp_path)
    try:
        features = folder.matrix("x", g.num_nodes, 20, np.float32, 6)
        features.write_rows(0, x.numpy())
        with torch.no_grad():
            logits, _, emb = StreamedGNN(model, nbr, features, folder,
                                         StreamLayout(6, 100, 0)).forward(False, embeddings=2)
    finally:
        folder.close()
    torch.testing.assert_close(logits, want, rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(emb, captured[0], rtol=1e-6, atol=1e-6)


def test_schedule_bytes_are_what_an_epoch_reads_and_writes(small, tmp_path):
    """The plan's bytes per vertex times N are the bytes a real epoch moves."""
    g = small.graph
    nbr = Neighbourhood(g, get_backend("numba", "fp32", False))
    for hidden, layers in ((32, 2), (8, 3), (16, 3)):
        model = GNN("gcn", 20, hidden, 5, layers)
        per_vertex = schedule_bytes(model, 5)
        folder = SpillFolder(tmp_path)
        try:
            features = folder.matrix("x", g.num_nodes, 20, np.float32, 8)
            features.write_rows(0, np.asarray(small.x, np.float32))
            before = folder.bytes_written
            run = StreamedGNN(model, nbr, features, folder, StreamLayout(8, 50, 5))
            nbr.set_epoch(0)
            logits, tape, _ = run.forward(True)
            run.backward(tape, torch.ones_like(logits))
            assert folder.bytes_read == g.num_nodes * per_vertex["read"]
            assert folder.bytes_written - before == g.num_nodes * per_vertex["written"]
            assert folder.peak_bytes - features.nbytes == g.num_nodes * per_vertex["disk"]
        finally:
            folder.close()


def test_panel_dropout_is_the_whole_rows_mask():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((50, 13)).astype(np.float32)
    ids = rng.permutation(1000)[:50].astype(np.int64)
    whole = apply_dropout_mask(x, ids, 0.4, 1234)
    for c0, c1 in ((0, 5), (5, 10), (10, 13)):
        part = apply_dropout_mask(np.ascontiguousarray(x[:, c0:c1]), ids, 0.4, 1234, 13, c0)
        np.testing.assert_array_equal(part, whole[:, c0:c1])


@pytest.mark.parametrize("weighted", [False, True])
def test_transpose_csr_is_the_graphs_transpose(small, weighted):
    g = small.graph
    if weighted:
        g = CSRGraph(g.indptr, g.indices, g.num_nodes,
                     np.random.default_rng(1).random(g.num_edges).astype(np.float32))
    t = g.transpose()
    indptr, indices, weight = transpose_csr(g.indptr, g.indices, g.num_nodes, g.edge_weight)
    np.testing.assert_array_equal(indptr, t.indptr)
    np.testing.assert_array_equal(indices, t.indices)
    assert indices.dtype == g.indices.dtype
    if weighted:
        np.testing.assert_array_equal(weight, t.edge_weight)
    else:
        assert weight is None


def test_disk_matrix_round_trips_panels_and_rows(tmp_path):
    folder = SpillFolder(tmp_path)
    try:
        a = np.arange(7 * 10, dtype=np.float64).reshape(7, 10)
        m = folder.matrix("m", 7, 10, np.float64, 4)  # panels of 4, 4 and 2 columns
        assert m.panels == 3
        m.write_rows(0, a[:3])
        m.write_rows(3, a[3:])
        np.testing.assert_array_equal(m.read_rows(2, 6), a[2:6])
        np.testing.assert_array_equal(m.read_panel(2), a[:, 8:])
        m.write_panel(1, -a[:, 4:8])
        np.testing.assert_array_equal(m.read_rows(0, 7)[:, 4:8], -a[:, 4:8])
        assert (folder.path / "m.bin").stat().st_size == a.nbytes
        m.close()
        assert not (folder.path / "m.bin").exists()
    finally:
        folder.close()


def test_spill_folder_removes_a_dead_runs_leftovers(tmp_path):
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True).stdout.strip()
    left = tmp_path / f".{SPILL_NAME}.tmp-{dead}-rank3"
    left.mkdir()
    (left / "001-a.bin").write_bytes(b"x" * 100)
    live = tmp_path / f".{SPILL_NAME}.tmp-{os.getpid()}-rank9"  # this process's: kept
    live.mkdir()
    folder = SpillFolder(tmp_path)
    assert not left.exists() and live.exists()
    folder.close()
    live.rmdir()
    assert os.listdir(tmp_path) == []


def test_spill_refusals_name_the_directory_need_and_room(tmp_path):
    with pytest.raises(SpillError, match=rf"--spill-dir {tmp_path}: the run needs .* of disk "
                       r"for its spilled state but .* free"):
        check_spill_room(tmp_path, 1 << 60)
    (tmp_path / "file").write_text("")
    with pytest.raises(SpillError, match="is not a directory"):
        SpillFolder(tmp_path / "file")


def test_npy_rows_reads_a_memory_map_without_mapping_it(tmp_path):
    a = np.random.default_rng(0).standard_normal((100, 3)).astype(np.float32)
    np.save(tmp_path / "x.npy", a)
    mapped = np.load(tmp_path / "x.npy", mmap_mode="r")
    np.testing.assert_array_equal(npy_rows(mapped, 17, 60), a[17:60])
    np.testing.assert_array_equal(npy_rows(a, 5, 9), a[5:9])


@pytest.mark.parametrize("flags,message", [
    ({"memory_limit": 0}, "--memory-limit must be a positive number"),
    ({"memory_limit": float("nan")}, "--memory-limit must be a positive number"),
    ({"memory_limit": True}, "--memory-limit must be a positive number"),
    ({"spill_dir": "/tmp"}, "give --memory-limit with it"),
    ({"memory_limit": 1.0, "spill_dir": ""}, "--spill-dir: the value is empty"),
])
def test_bad_limits_are_refused(flags, message):
    with pytest.raises(DistGNNError, match=message):
        TrainConfig(**flags)


# ---- runs under a limit ---------------------------------------------------------------------
@pytest.fixture(scope="module")
def medium():
    return rmat(14, 8, num_features=32, num_classes=6, seed=4)


@pytest.fixture
def tight(monkeypatch):
    """In-memory plans of ten times their size, so that a small graph streams under a limit
    it would fit."""
    predict = memory.predict

    def inflated(*args, **kwargs):
        need = predict(*args, **kwargs)
        return {**need, "total": 10 * need["total"]}

    monkeypatch.setattr(memory, "predict", inflated)


def quiet_train(data, **flags):
    cfg = TrainConfig(progress=False, eval_every=2, **flags)
    lines = []
    return distgnn.train(data, cfg, log=lines.append), lines


def test_a_run_under_a_limit_it_fits_is_the_run_without(medium, tmp_path):
    base = dict(model="sage", hidden=64, epochs=4, seed=2)
    plain, _ = quiet_train(medium, **base)
    limited, lines = quiet_train(medium, memory_limit=20.0, spill_dir=str(tmp_path), **base)
    assert [r["loss"] for r in limited.history] == [r["loss"] for r in plain.history]
    assert not any("streamed" in li for li in lines)
    assert "spill_read_bytes_max" not in limited.history[-1]


@pytest.mark.parametrize("model", ["sage", "gcn"])
def test_a_streamed_run_follows_the_run_in_memory(medium, tmp_path, tight, model):
    """Losses over epochs, accuracies, predictions and embeddings alike; the records carry
    the spill's bytes, and its folder is gone at the end."""
    base = dict(model=model, hidden=64, epochs=6, seed=5, layers=2)
    outputs = {}
    for name, extra in (("memory", {}), ("streamed", {"memory_limit": 1.0,
                                                      "spill_dir": str(tmp_path / "spill")})):
        out = tmp_path / name
        out.mkdir()
        result, lines = quiet_train(medium, predictions_out=str(out / "p.npz"),
                                    embeddings_out=str(out / "e.npy"), embeddings_layer=1,
                                    **base, **extra)
        outputs[name] = result, lines, np.load(out / "p.npz"), np.load(out / "e.npy")
    (plain, _, p0, e0), (streamed, lines, p1, e1) = outputs["memory"], outputs["streamed"]
    a = np.array([r["loss"] for r in plain.history])
    b = np.array([r["loss"] for r in streamed.history])
    np.testing.assert_allclose(b, a, rtol=1e-5)
    assert streamed.best["val_acc"] == pytest.approx(plain.best["val_acc"], abs=1e-3)
    np.testing.assert_allclose(p1["probabilities"], p0["probabilities"], rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(e1, e0, rtol=1e-4, atol=1e-5)
    assert any(li.startswith("memory plan: streamed under --memory-limit 1 GiB") for li in lines)
    last = streamed.history[-1]
    assert last["spill_read_bytes_max"] > 0 and last["spill_written_bytes_max"] > 0
    assert last["spill_disk_bytes_max"] > 0 and "io_wait" in last["phases"]
    assert os.listdir(tmp_path / "spill") == []


@pytest.mark.parametrize("flags,message", [
    ({"precision": "bf16-mixed"}, "takes --precision fp32 only, not --precision bf16-mixed"),
    ({"aggregation_precision": "bf16"}, "takes fp32 aggregations only"),
    ({"model": "gat"}, "streams through disk for the built-in GCN and GraphSAGE-gcn .* "
                       "only, not --model gat$"),
    ({"model": "sage", "aggregator": "mean"}, "only, not --model sage --aggregator mean$"),
    ({"residual": True, "layers": 3, "hidden": 32}, "only, not --residual$"),
    ({"model": "gcnii", "layers": 2}, "only, not a GCNII model$"),
])
def test_what_cannot_stream_is_refused_in_one_line(medium, tmp_path, tight, flags, message):
    if flags.get("precision") == "bf16-mixed" and not distgnn.placement.cpu_has_bf16():
        pytest.skip("this CPU has no bf16 units")
    with pytest.raises(DistGNNError, match=message) as e:
        quiet_train(medium, epochs=1, memory_limit=1.0, spill_dir=str(tmp_path),
                    **{"model": "sage", **flags})
    assert "\n" not in str(e.value)


def test_a_limit_too_small_even_streamed_is_refused(medium, tmp_path):
    with pytest.raises(DistGNNError, match=r"even streamed, the run needs about .* but "
                       r"--memory-limit is 1\.0 MiB"):
        quiet_train(medium, memory_limit=1 / 1024, spill_dir=str(tmp_path))
    assert os.listdir(tmp_path) == []


def test_streamed_ranks_follow_the_ranks_in_memory(tmp_path, tight):
    """cd-0 on 3 ranks (threads of this process) streamed against the same ranks in
    memory: the same losses to rounding."""
    from tests.test_distributed import write_parts

    data = rmat(12, 8, num_features=24, num_classes=4, seed=6)
    parts = write_parts(data, tmp_path / "parts", 3)
    histories = []
    for extra in ({}, {"memory_limit": 1.0, "spill_dir": str(tmp_path / "spill")}):
        cfg = TrainConfig(model="sage", hidden=32, epochs=5, threads=1, progress=False,
                          seed=3, **extra)
        histories.append(fit_on_threads(parts, 3, cfg)[0].history)
    a = np.array([r["loss"] for r in histories[0]])
    b = np.array([r["loss"] for r in histories[1]])
    np.testing.assert_allclose(b, a, rtol=1e-6)
    assert histories[1][-1]["bytes_sent_max"] > 0  # the panels were summed over clones
    cfg = TrainConfig(model="sage", hidden=32, epochs=1, threads=1, progress=False, algo="cd-r",
                      memory_limit=1.0, spill_dir=str(tmp_path / "spill"))
    with pytest.raises(Exception, match="stream through disk, which takes --algo cd-0 or 0c "
                       "only, not --algo cd-r"):
        fit_on_threads(parts, 3, cfg)


def test_predict_under_a_limit_equals_predict_in_memory(medium, tmp_path, tight):
    model = tmp_path / "m.pt"
    quiet_train(medium, model="gcn", hidden=48, epochs=2, save_model=str(model))
    plain = distgnn.predict(model, medium, with_embeddings=True, embeddings_layer=1,
                            log=lambda line: None)
    lines = []
    streamed = distgnn.predict(model, medium, with_embeddings=True, embeddings_layer=1,
                               memory_limit=1.0, spill_dir=str(tmp_path / "spill"),
                               log=lines.append)
    assert any("streamed under --memory-limit 1 GiB" in li for li in lines)
    np.testing.assert_allclose(streamed.probabilities, plain.probabilities, rtol=1e-5,
                               atol=1e-6)
    np.testing.assert_allclose(streamed.embeddings, plain.embeddings, rtol=1e-5, atol=1e-6)
    assert streamed.scores == pytest.approx(plain.scores)
    assert os.listdir(tmp_path / "spill") == []


def test_inspect_says_what_each_rank_does_under_a_limit(tmp_path, capsys):
    from partition.cli import main as partition_cli
    from partition.stats import limited_plans
    from tests.test_distributed import write_parts

    data = rmat(17, 8, num_features=24, num_classes=4, seed=6)
    parts = write_parts(data, tmp_path / "parts", 2)
    partition_cli(["inspect", str(parts), "--hidden", "256", "--json",
                   str(tmp_path / "s.json")])
    stats = json.loads((tmp_path / "s.json").read_text())
    need = stats["predicted_memory_bytes"]["max"]
    plans = limited_plans(stats, (need - 1) / 2**30)  # one byte short: the ranks stream
    assert plans["streamed"] and len(plans["per_rank"]) == 2
    for rank, plan in zip(stats["per_rank"], plans["per_rank"]):
        assert plan["ram"] < need and plan["disk"] >= rank["vertices"] * 24 * 4
        assert plan["read"] > 0
    assert limited_plans(stats, need / 2**30 + 1) == {"limit_gib": need / 2**30 + 1,
                                                       "streamed": False}
    capsys.readouterr()
    partition_cli(["inspect", str(parts), "--hidden", "256", "--memory-limit",
                   str((need - 1) / 2**30)])
    assert "every rank streams through disk (panels of" in capsys.readouterr().out
    partition_cli(["inspect", str(parts), "--hidden", "256", "--memory-limit", "0.001"])
    assert "refused: rank 0: even streamed" in capsys.readouterr().out


def test_a_streamed_run_checkpoints_and_resumes_as_in_memory(medium, tmp_path, tight):
    """A streamed run stopped after 2 epochs and resumed to 4 follows the uninterrupted one
    (checkpoints hold the model, optimizer and records, whatever holds the activations)."""
    base = dict(model="sage", hidden=32, seed=1, memory_limit=1.0,
                spill_dir=str(tmp_path / "spill"))
    whole, _ = quiet_train(medium, epochs=4, **base)
    quiet_train(medium, epochs=2, checkpoint_dir=str(tmp_path / "ck"), **base)
    resumed, _ = quiet_train(medium, epochs=4, resume=str(tmp_path / "ck"), **base)
    np.testing.assert_allclose([r["loss"] for r in resumed.history],
                               [r["loss"] for r in whole.history], rtol=1e-6)
    assert os.listdir(tmp_path / "spill") == []


# ---- real processes ---------------------------------------------------------------------------
SPEC = "rmat:scale=16,edge_factor=8,features=24,classes=4,seed=6"


def streaming_limit(data, hidden: int) -> float:
    """A limit (GiB) one byte below the in-memory plan of ``data``: the run streams."""
    cfg = TrainConfig(model="sage", hidden=hidden)
    need = memory.predict(cfg.network, cfg.exchange, cfg.execution, data.num_nodes,
                          data.graph.num_edges, data.num_features, data.num_classes)
    return (need["total"] - 1) / 2**30


@pytest.mark.slow
def test_a_run_killed_while_spilling_leaves_what_the_next_run_removes(tmp_path):
    from distgnn.data.datasets import load

    # hidden 512: wide enough that the streamed plan is under the in-memory one
    limit = streaming_limit(load(SPEC), 512)
    spill = tmp_path / "spill"
    train = [str(Path(sys.executable).parent / "distgnn-train"), "--dataset", SPEC,
             "--model", "sage", "--hidden", "512", "--threads", "1", "--no-progress",
             "--memory-limit", str(limit), "--spill-dir", str(spill)]
    proc = subprocess.Popen([*train, "--epochs", "1000"], stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    try:
        for line in proc.stdout:  # the plan's line comes once the features are on disk
            if "memory plan: streamed" in line:
                break
        time.sleep(2)
        left = list(spill.iterdir())
        assert len(left) == 1 and any(left[0].iterdir())
    finally:
        proc.kill()
        proc.wait()
    assert left[0].exists()  # SIGKILL: nothing could remove it
    done = subprocess.run([*train, "--epochs", "1"], capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "memory plan: streamed" in done.stdout
    assert list(spill.iterdir()) == []


@pytest.mark.slow
@pytest.mark.mpi
def test_streamed_ranks_of_a_real_job_follow_the_job_in_memory(tmp_path):
    """Two mpirun ranks, each under a limit its partition's in-memory plan exceeds, spill
    to their own folders and train as the same job in memory (cd-0)."""
    from partition.cli import main as partition_cli
    from partition.stats import limited_plans
    from tests.test_distributed import TRAIN, mpirun, write_parts

    data = rmat(17, 8, num_features=24, num_classes=4, seed=6)
    parts = write_parts(data, tmp_path / "parts", 2)
    partition_cli(["inspect", str(parts), "--hidden", "256", "--json", str(tmp_path / "s.json")])
    stats = json.loads((tmp_path / "s.json").read_text())
    limit = (stats["predicted_memory_bytes"]["max"] - 1) / 2**30
    assert limited_plans(stats, limit)["streamed"]
    losses = []
    for extra in ([], ["--memory-limit", str(limit), "--spill-dir", str(tmp_path / "spill")]):
        metrics = tmp_path / f"m{len(losses)}.jsonl"
        proc, _ = mpirun(2, [TRAIN, "--partitions", parts, "--model", "sage", "--hidden", "256",
                             "--epochs", "4", "--threads", "1", "--no-progress",
                             "--metrics-out", metrics, *extra])
        assert proc.returncode == 0, proc.stdout + proc.stderr
        assert ("streamed under --memory-limit" in proc.stdout) == bool(extra)
        records, _ = distgnn.read_metrics(metrics)
        losses.append([r["loss"] for r in records if "loss" in r])
    np.testing.assert_allclose(losses[1], losses[0], rtol=1e-5)
    assert list((tmp_path / "spill").iterdir()) == []


def test_a_loop_written_by_hand_is_refused_when_the_run_would_stream(medium, tmp_path, tight):
    with pytest.raises(DistGNNError, match="trains inside distgnn.train only"):
        distgnn.setup(medium, TrainConfig(memory_limit=1.0, spill_dir=str(tmp_path)),
                      log=lambda line: None)
    assert os.listdir(tmp_path) == []


def test_a_model_of_ones_own_is_refused_before_it_trains_when_the_run_streams(
        medium, tmp_path, tight):
    from torch import nn

    class Mine(nn.Module):
        def __init__(self, f, c):
            super().__init__()
            self.lin = nn.Linear(f, c)

        def forward(self, g, x):
            return self.lin(x)

    cfg = TrainConfig(memory_limit=1.0, spill_dir=str(tmp_path), epochs=1, progress=False)
    with pytest.raises(DistGNNError, match="only, not a Mine model$"):
        distgnn.train(medium, cfg, make_model=Mine, log=lambda line: None)
    assert os.listdir(tmp_path) == []
