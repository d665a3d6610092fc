"""Single-socket trainer: determinism, metrics, early stopping, published accuracy."""
import dataclasses

import numpy as np
import pytest

from distgnn.errors import DistGNNError
from distgnn.placement import cpu_has_bf16
from distgnn.run import training
from distgnn.run.config import TrainConfig
from distgnn.run.epoch_log import PHASES, read_metrics
from distgnn.run.evaluation import roc_auc
from distgnn.run.shard import normalize_features
from tests.helpers.training import losses
from tests.helpers.training import train_quietly as run


def test_same_seed_same_loss_curve_and_different_seed_differs(cora):
    a = run(cora, epochs=8, seed=3)
    b = run(cora, epochs=8, seed=3)
    c = run(cora, epochs=8, seed=4)
    assert losses(a) == losses(b)
    assert losses(a) != losses(c)


def test_metrics_file_has_one_record_per_epoch(cora, tmp_path, monkeypatch):
    # the process's fault counter (tested in a fresh process in test_arena.py) is replaced by
    # one that rises by 7 a read: each record must hold the rise across its own epoch only;
    # the real count depends on what earlier tests left in this process's heap
    reads = iter(range(0, 10**6, 7))
    monkeypatch.setattr(training, "minor_faults", lambda: next(reads))
    out = tmp_path / "m.jsonl"
    run(cora, epochs=6, eval_every=3, metrics_out=str(out))
    records, summary = read_metrics(out)
    assert [r["epoch"] for r in records] == list(range(1, 7)) and summary["epochs"] == 6
    for r in records:
        assert {"epoch", "loss", "train_acc", "val_acc", "test_acc", "epoch_s", "phases"} <= set(r)
        assert (set(r["phases"]) == set(PHASES) == set(r["phases_mean"])
                == set(r["phases_max_rank"]))
        assert r["bytes_sent_max"] == 0  # one rank: nothing to exchange
        assert r["phases"]["aggregation"] > 0
        assert sum(r["phases"].values()) <= r["epoch_s"] * 1.05
        # one rank: the max over ranks is the mean; a process holding torch is > 100 MiB
        assert r["peak_rss_mib_max"] == r["peak_rss_mib_mean"] > 100
        assert r["page_faults_max"] == r["page_faults_mean"] == 7
    peaks = [r["peak_rss_mib_max"] for r in records]
    assert peaks == sorted(peaks)  # a peak since the start never falls
    assert [r["val_acc"] is not None for r in records] == [False, False, True] * 2


def test_early_stopping_stops_when_validation_stalls(cora):
    result = run(cora, epochs=100, lr=0.0, patience=3)  # lr 0: validation never improves
    assert len(result.history) == 4


def test_roc_auc_needs_a_binary_task(cora):
    with pytest.raises(DistGNNError, match="--roc-auc needs a binary task; .* 7 classes"):
        run(cora, epochs=1, roc_auc=True)


def test_empty_training_set_is_an_error(cora):
    data = dataclasses.replace(cora, train_mask=np.zeros_like(cora.train_mask))
    with pytest.raises(DistGNNError, match="no training vertices"):
        run(data, epochs=1)


def test_row_normalisation():
    x = np.array([[1.0, 3.0], [0.0, 0.0], [-2.0, 2.0]], np.float32)
    np.testing.assert_allclose(normalize_features(x, "row"),
                               [[0.25, 0.75], [0, 0], [-0.5, 0.5]])
    assert normalize_features(x, "none") is x


@pytest.mark.parametrize("model", ["gcn", "sage"])
def test_cora_reaches_published_accuracy(cora, model):
    # Kipf & Welling report 81.5 % for GCN; one seed varies by about +-1 point.
    result = run(cora, model=model, epochs=200, seed=0)
    assert result.best["test_acc"] >= 0.795


@pytest.mark.parametrize("seed", [0, 1])
def test_roc_auc_is_the_share_of_correctly_ordered_pairs(seed):
    """``roc_auc`` equals the fraction of (positive, negative) pairs whose scores are in
    order, ties counting one half; ``None`` when a class is missing."""
    rng = np.random.default_rng(seed)
    scores = rng.integers(0, 6, 200).astype(float)  # many ties
    positive = rng.random(200) < 0.3
    pos, neg = scores[positive], scores[~positive]
    pairs = (pos[:, None] > neg[None, :]).sum() + 0.5 * (pos[:, None] == neg[None, :]).sum()
    assert roc_auc(scores, positive) == pytest.approx(pairs / (len(pos) * len(neg)), abs=1e-12)
    assert roc_auc(scores, np.ones(200, bool)) is None


@pytest.mark.parametrize("flags, message", [
    (dict(model="gat", hidden=60, heads=8), "--hidden 60 must be a multiple of --heads 8"),
    (dict(model="sage", aggregator="max", algo="cd-r"), "max aggregator is exchanged exactly"),
    (dict(model="sage", aggregator="min", algo="cd-r"), "min aggregator is exchanged exactly"),
    (dict(model="gcnii", recompute=True, algo="cd-r"), "--recompute runs each layer's exchange"),
    (dict(model="gcnii", alpha=1.5), "--alpha must be in"),
    (dict(model="gcnii", theta=0), "--theta must be"),
    (dict(model="gat", heads=0), "--heads must be an integer >= 1"),
    (dict(model="gin", precompute_first=True), "--precompute-first-aggregation needs"),
    (dict(model="gcnii", precompute_first=True), "--precompute-first-aggregation needs"),
    (dict(model="gcnii", residual=True), "--residual applies to --model gcn or"),
    (dict(model="gcn", heads=4), "--heads applies to --model gat, not gcn"),
    (dict(model="gat", hidden=8, alpha=0.3), "--alpha applies to --model gcnii, not gat"),
    (dict(model="sage", train_eps=True), "--train-eps applies to --model gin"),
    (dict(model="gin", aggregator="mean"), "--aggregator applies to --model sage"),
    (dict(recompute=True, exchange_precision="bf16"), "error feedback twice"),
    (dict(algo="cd-r", delay=3), "--algo cd-r applies to --partitions"),
    (dict(exchange_precision="bf16"), "--exchange-precision bf16 applies to --partitions"),
    (dict(backward_exchange=False), "--no-backward-exchange applies to --partitions"),
    (dict(comm_timeout=5), "--comm-timeout 5 applies to --partitions"),
    (dict(comm_timeout=0.5), "--comm-timeout 0.5 applies to --partitions"),
    (dict(comm="mpi"), "--comm mpi applies to --partitions"),
    (dict(comm_wait="sleep"), "--comm-wait sleep applies to --partitions"),
    (dict(verify=False), "--no-verify applies to --partitions"),
    (dict(rank_devices="0:cpu,1:cpu"), "--rank-devices names rank 1, but the run has one"),
    (dict(checkpoint_every=5), "--checkpoint-every 5 applies to checkpoints, and without "
                               "--checkpoint-dir"),
    (dict(checkpoint_every=0), "--checkpoint-every 0 applies to checkpoints"),
    (dict(keep=3), "--keep 3 applies to checkpoints"),
    (dict(final_weights="last"), "--final-weights last chooses the weights --save-model"),
])
def test_model_flags_that_cannot_make_a_run_are_refused(cora, flags, message):
    """Each refused with one line naming the flag, before any training."""
    with pytest.raises(DistGNNError, match=message):
        run(cora, epochs=1, **flags)


def test_options_of_partitions_are_refused_on_one_socket_before_the_data_is_read(tmp_path):
    """``distgnn.train`` and ``distgnn.setup`` on a dataset path refuse a communicator option
    before reading it: the path does not exist, and the refusal names the flag, not it."""
    import distgnn

    for call in (distgnn.train, distgnn.setup):
        with pytest.raises(DistGNNError, match="--comm-timeout 5 applies to --partitions"):
            call(str(tmp_path / "absent.npz"), TrainConfig(comm_timeout=5), log=lambda s: None)


def test_what_applies_as_given_is_kept(cora, tmp_path):
    """The defaults given explicitly, rank 0's own device and backend on one process (it is
    that process's, and moves it: here onto the torch backend), and the checkpoint and
    output options with what they apply to, are accepted."""
    from distgnn.run.shard import dataset_shard
    from distgnn.timing import PhaseTimer

    cfg = TrainConfig(comm="auto", comm_timeout=20, verify=True, rank_devices="0:cpu",
                      rank_backends="0:torch", progress=False)
    cfg.check_single_socket()
    shard = dataset_shard(cora, cfg, PhaseTimer(), log=lambda s: None)
    assert shard.nbr.backend.name == "torch" and shard.x.device.type == "cpu"
    resumed = TrainConfig(resume_if_present=str(tmp_path / "ck"), checkpoint_every=3, keep=4)
    assert resumed.checkpoint_dir == str(tmp_path / "ck")
    assert TrainConfig(final_weights="last", predictions_out=str(tmp_path / "p.csv"))


@pytest.mark.parametrize("flags", [{}, {"model": "gat", "heads": 2, "hidden": 8}])
def test_reordered_training_follows_the_given_order(cora, flags):
    """``--reorder``: the same loss curve and accuracies as without (dropout masks, GAT's
    attention dropout included, are keyed by the dataset's own ids); only the order of
    each row's sum changes, so the losses agree to float32 rounding."""
    given = run(cora, epochs=15, dropout=0.5, **flags)
    for order in ("degree", "rcm"):
        logged = []
        result = run(cora, epochs=15, dropout=0.5, reorder=order, log=logged.append, **flags)
        assert any(line.startswith(f"vertex order {order}") for line in logged)
        np.testing.assert_allclose(losses(result), losses(given), rtol=2e-5)
        for key in ("val_acc", "test_acc"):
            assert abs(result.history[-1][key] - given.history[-1][key]) <= 0.002, key


def test_reordering_keeps_the_checkpoint_identity_of_the_data(cora, tmp_path):
    from distgnn.run.shard import dataset_shard
    from distgnn.timing import PhaseTimer

    def shard(order):
        cfg = TrainConfig(checkpoint_dir=str(tmp_path / order), reorder=order, progress=False)
        return dataset_shard(cora, cfg, PhaseTimer(), log=lambda s: None)

    given, degree = shard("given"), shard("degree")
    assert given.origin == degree.origin
    ids = degree.nbr.global_ids
    assert np.any(np.diff(ids) < 0)
    np.testing.assert_array_equal(degree.y.numpy(), given.y.numpy()[ids])


def test_the_package_exports_the_api_and_train_takes_a_name_or_a_dataset():
    """``import distgnn`` gives what a user needs; ``distgnn.train`` trains a dataset named
    or given as an object alike, and refuses a configuration or model of the wrong type in
    one line."""
    import distgnn

    for name in ("train", "setup", "TrainConfig", "TrainResult", "load", "NodeDataset",
                 "CSRGraph", "Neighbourhood", "DistGNNError"):
        assert name in dir(distgnn) and getattr(distgnn, name) is not None
    cfg = distgnn.TrainConfig(epochs=3, threads=1, progress=False)
    quiet = dict(log=lambda line: None)
    by_name = distgnn.train("cora", cfg, **quiet)
    by_data = distgnn.train(distgnn.load("cora"), cfg, **quiet)
    assert [r["loss"] for r in by_name.history] == [r["loss"] for r in by_data.history]
    assert isinstance(by_name, distgnn.TrainResult) and by_name.best["epoch"] <= 3
    with pytest.raises(distgnn.DistGNNError, match="must be a distgnn.TrainConfig, got dict"):
        distgnn.train("cora", {"epochs": 3}, **quiet)
    with pytest.raises(distgnn.DistGNNError, match=r"returned None \(NoneType\), not a "
                                                   "torch.nn.Module"):
        distgnn.train("cora", cfg, lambda features, classes: None, **quiet)


def test_gat_hidden_width_defaults_to_eight_channels_per_head():
    assert TrainConfig().hidden == 16 and TrainConfig(model="gat").hidden == 64
    assert TrainConfig(model="gat", heads=4).hidden == 32
    assert TrainConfig(model="gat", hidden=16, heads=2).hidden == 16


@pytest.mark.skipif(not cpu_has_bf16(),
                    reason="needs a CPU with bf16 units (--precision bf16-mixed refuses others)")
def test_bf16_mixed_trains_on_the_torch_backend_as_on_numba(cora):
    """Under --precision bf16-mixed the products hand the aggregation bf16 rows: the torch
    backend sums them in float32 outside autocast (torch.sparse has no bf16 CPU product),
    as the Numba kernels do, so both backends give one loss curve but for the order of
    their sums; backward included (the losses of later epochs follow the gradients)."""
    import torch

    from distgnn.nn.backends import NumbaBackend, TorchSparseBackend

    bf16 = dict(epochs=4, seed=2, precision="bf16-mixed")
    ours, theirs = (losses(run(cora, backend=b, **bf16)) for b in ("torch", "numba"))
    assert ours == pytest.approx(theirs, rel=1e-4)
    x = torch.randn(cora.num_nodes, 5).to(torch.bfloat16)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        for reduce in ("sum", "mean", "max"):
            got, _ = TorchSparseBackend("bf16").spmm(cora.graph, x, reduce)
            want, _ = NumbaBackend("bf16").spmm(cora.graph, x, reduce)
            assert got.dtype == want.dtype == torch.float32
            torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)


def test_a_refused_resume_names_each_option_by_a_flag_of_distgnn_train():
    """Every option a checkpoint's fingerprint holds (each that changes the computation),
    when it differs, is named by a flag distgnn-train has: the fingerprint's own keys are
    "--" and the field's name, which is not always the flag (--precompute-first-aggregation,
    --no-kernel-trial)."""
    from distgnn.cli.train import train_parser
    from distgnn.run.checkpoint_files import CheckpointMismatch, check_fingerprint
    from distgnn.run.checkpointing import RUN_ONLY, fingerprinted
    from distgnn.run.config import OWNER

    flags = train_parser()._option_string_actions
    keys = {"--" + name.replace("_", "-") for name in OWNER if name not in RUN_ONLY}
    assert set(fingerprinted(TrainConfig())) <= keys
    assert "--precompute-first" in keys and "--kernel-trial" in keys  # not flags themselves
    for key in sorted(keys):
        with pytest.raises(CheckpointMismatch) as refused:
            check_fingerprint("ck", {"ranks": 2, "options": {key: 1}},
                              {"ranks": 2, "options": {key: 2}})
        named = str(refused.value).split("written for another ", 1)[1].split(" than ")[0]
        assert named in flags, (key, str(refused.value))


@pytest.mark.parametrize("layers,hidden,refused", [(1, 16, True), (2, 16, True), (2, 8, False),
                                                   (3, 16, False)])
def test_residual_is_refused_where_no_layer_keeps_its_width(layers, hidden, refused):
    """--residual skips around each layer but the last whose widths in and out are equal:
    with one layer none, with two only the first, when the features' width (8 here) is
    --hidden."""
    from distgnn.nn.config import ModelConfig, check_residual

    network = ModelConfig(layers=layers, hidden=hidden, residual=True)
    if refused:
        with pytest.raises(DistGNNError, match=f"--residual would change nothing with "
                                               f"--layers {layers}.*give --layers 3 or more"):
            check_residual(network, 8)
    else:
        check_residual(network, 8)
    check_residual(dataclasses.replace(network, residual=False), 8)  # nothing to refuse


def test_an_embeddings_layer_the_model_lacks_is_refused_before_the_first_epoch(cora, tmp_path):
    """Of a built-in model and of make_model's alike, once it is built: no epoch runs, the
    metrics file is not written."""
    import torch

    from distgnn.nn import GCNConv

    class OneLayer(torch.nn.Module):
        def __init__(self, features, classes):
            super().__init__()
            self.conv = GCNConv(features, classes)

        def forward(self, g, x):
            return self.conv(g, x)

    said = []
    for make_model, layers in ((None, 2), (OneLayer, 1)):
        with pytest.raises(DistGNNError, match=f"--embeddings-layer 5: the model has {layers} "
                                               "layers"):
            training.train(cora, TrainConfig(epochs=3, progress=False, threads=1,
                                             metrics_out=str(tmp_path / "m.jsonl"),
                                             embeddings_out=str(tmp_path / "e.npy"),
                                             embeddings_layer=5),
                           log=said.append, make_model=make_model)
    assert not any(line.startswith("epoch") for line in said), said
    assert not list(tmp_path.iterdir())


def test_a_stop_request_names_its_signal_or_the_launcher():
    """SIGHUP stops as SIGTERM does, named as itself; a rank whose launcher is gone (no
    signal came) says so, with SIGHUP's status."""
    import signal
    from types import SimpleNamespace

    from distgnn.run.checkpointing import Checkpointer, Stopped
    from distgnn.signals import LAUNCHER_GONE

    stopper = object.__new__(Checkpointer)  # its policy alone: no checkpoint directory
    stopper.cfg = TrainConfig(epochs=10)
    for request, why, status in ((signal.SIGHUP, "SIGHUP received", 129),
                                 (signal.SIGTERM, "SIGTERM received", 143),
                                 (LAUNCHER_GONE, "the launcher (mpirun) is gone", 129)):
        with pytest.raises(Stopped) as stopped:
            stopper.after_epoch(3, request, SimpleNamespace(stalled=False))
        assert str(stopped.value) == f"{why}: stopped after epoch 3; no --checkpoint-dir, " \
                                     "nothing saved"
        assert stopped.value.exit_status == status
