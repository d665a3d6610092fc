"""Checkpoints of single-socket runs: exact resume, refusals, retention, disk failures, stop
signals and the non-finite guard.  (Multi-rank drills are in test_reliability.py.)"""
import functools
import json
import os
import re
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from tests.helpers.hostile import Runner
from tests.helpers.hostile_training import files_limited
from tests.helpers.training import losses, train_quietly

# Bit-identical resume on CPU ranks here; on a GPU, with its default (triton) backend, in
# test_gpu_resume_continues_exactly (the torch backend's cuSPARSE sums are not repeatable)
run = functools.partial(train_quietly, device="cpu")

from distgnn.data.datasets import load
from distgnn.errors import DistGNNError
from distgnn.run import checkpoint_files as checkpoint
from distgnn.run.checkpoint_files import checkpoint_name, checkpoints
from distgnn.run.checkpointing import NonFiniteLoss
from distgnn.run.config import TrainConfig
from distgnn.run.training import train

BIN = Path(sys.executable).parent


def names(directory):
    return [p.name for p in checkpoints(directory)]


def written(directory) -> dict:
    """Every path under ``directory`` with its modification time, but the lock a run takes
    there (its holder writes itself into it, a run that fails later too)."""
    return {p: p.stat().st_mtime_ns for p in Path(directory).rglob("*")
            if p.name != checkpoint.LOCK}


@pytest.mark.parametrize("model", ["gcn", "sage"])
def test_resume_continues_exactly(cora, tmp_path, model):
    whole = run(cora, model=model, epochs=12, seed=1)
    ckpt = str(tmp_path / "ck")
    run(cora, model=model, epochs=7, seed=1, checkpoint_dir=ckpt, checkpoint_every=5)
    assert names(ckpt) == ["epoch-000007", "epoch-000005"]
    resumed = run(cora, model=model, epochs=12, seed=1, resume=ckpt)
    assert losses(resumed) == losses(whole)
    for (name, p), q in zip(resumed.model.state_dict().items(), whole.model.state_dict().values()):
        assert torch.equal(p, q), name
    assert resumed.best["epoch"] == whole.best["epoch"]
    assert names(ckpt) == ["epoch-000012", "epoch-000010"]  # --resume goes on writing there


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs an NVIDIA GPU")
@pytest.mark.parametrize("model", ["gcn", "gat"])
def test_gpu_resume_continues_exactly(cora, tmp_path, model):
    gpu = functools.partial(train_quietly, device="cuda", backend="auto", model=model, seed=1)
    whole = gpu(cora, epochs=12)
    assert losses(gpu(cora, epochs=12)) == losses(whole)  # a run repeats bit for bit
    ckpt = str(tmp_path / "ck")
    gpu(cora, epochs=6, checkpoint_dir=ckpt, checkpoint_every=6)
    assert losses(gpu(cora, epochs=12, resume=ckpt)) == losses(whole)


def test_resume_if_present_starts_afresh_then_resumes(cora, tmp_path):
    """--resume-if-present DIR: a new run checkpointing into DIR while DIR holds no
    checkpoint (missing, or empty), and the same command resumes once it holds one,
    continuing exactly as the uninterrupted run."""
    whole = run(cora, epochs=12, seed=1)
    for name, make in (("missing", False), ("empty", True)):
        ckpt = tmp_path / name
        if make:
            ckpt.mkdir()
        logged = []
        first = run(cora, epochs=7, seed=1, checkpoint_every=5, resume_if_present=str(ckpt),
                    log=logged.append)
        assert f"no checkpoint in {ckpt}: starting a new run" in logged
        assert losses(first) == losses(whole)[:7]
        assert names(ckpt) == ["epoch-000007", "epoch-000005"]
    logged = []
    resumed = run(cora, epochs=12, seed=1, checkpoint_every=5, resume_if_present=str(ckpt),
                  log=logged.append)
    assert f"resumed from {ckpt} after epoch 7" in logged
    assert losses(resumed) == losses(whole)
    assert names(ckpt) == ["epoch-000012", "epoch-000010"]


def test_resume_if_present_refuses_another_runs_checkpoint(cora, tmp_path):
    """A checkpoint in DIR is never taken for an absent one: another run's is refused, as
    --resume refuses it, and not overwritten."""
    run(cora, epochs=1, hidden=8, checkpoint_dir=str(tmp_path))
    with pytest.raises(DistGNNError, match=r"another --hidden than this run.s \(8 there, 16 "
                                           r"here\)"):
        run(cora, epochs=2, resume_if_present=str(tmp_path))
    assert names(tmp_path) == ["epoch-000001"]


@pytest.mark.parametrize("kw, message", [
    (dict(resume="a", resume_if_present="b"), "--resume and --resume-if-present exclude"),
    (dict(resume_if_present=__file__), f"--resume-if-present {__file__}: exists and is not "
                                       "a directory"),
])
def test_resume_if_present_flag_checks(tmp_path, kw, message):
    with pytest.raises(DistGNNError, match=re.escape(message)):
        TrainConfig(checkpoint_dir=str(tmp_path), **kw).check_paths()


def test_keep_retains_the_newest(cora, tmp_path):
    run(cora, epochs=9, checkpoint_dir=str(tmp_path), checkpoint_every=2, keep=3)
    assert names(tmp_path) == ["epoch-000009", "epoch-000008", "epoch-000006"]
    assert not list(tmp_path.glob(".partial-*"))


def test_manifest_lists_every_file_with_its_digest(cora, tmp_path):
    run(cora, epochs=2, checkpoint_dir=str(tmp_path))
    manifest = checkpoint.read_manifest(tmp_path / checkpoint_name(2))
    assert set(manifest["files"]) == {"state.pt", "rank-00000.pt"}
    assert manifest["epoch"] == 2 and manifest["ranks"] == 1


@pytest.mark.parametrize("change, fragment", [
    ({"hidden": 8}, r"another --hidden than this run.s \(16 there, 8 here\)"),
    ({"layers": 3}, r"another --layers than this run.s \(2 there, 3 here\)"),
    ({"model": "sage"}, "another --model"),
])
def test_checkpoint_of_another_model_is_refused(cora, tmp_path, change, fragment):
    run(cora, epochs=1, checkpoint_dir=str(tmp_path))
    with pytest.raises(DistGNNError, match=fragment):
        run(cora, epochs=2, resume=str(tmp_path), **change)


def test_checkpoint_of_other_data_is_refused(cora, tmp_path):
    run(cora, epochs=1, checkpoint_dir=str(tmp_path))
    with pytest.raises(DistGNNError, match="another data"):
        run(load("sbm:nodes=300"), epochs=2, resume=str(tmp_path))


def test_corrupted_newest_falls_back_to_the_previous(cora, tmp_path):
    whole = run(cora, epochs=6, seed=2)
    run(cora, epochs=4, seed=2, checkpoint_dir=str(tmp_path), checkpoint_every=2)
    state = tmp_path / checkpoint_name(4) / "state.pt"
    state.write_bytes(state.read_bytes()[:100])  # truncated
    logged = []
    resumed = train(cora, TrainConfig(progress=False, threads=1, epochs=6, seed=2,
                                      resume=str(tmp_path)), log=logged.append)
    assert any("skipping" in line and "state.pt" in line for line in logged)
    assert losses(resumed) == losses(whole)


def test_no_intact_checkpoint_is_an_error(cora, tmp_path):
    run(cora, epochs=2, checkpoint_dir=str(tmp_path))
    (tmp_path / checkpoint_name(2) / "rank-00000.pt").write_bytes(b"garbage")
    with pytest.raises(DistGNNError, match="none of its 1 checkpoints"):
        run(cora, epochs=3, resume=str(tmp_path))


def test_a_pickle_in_place_of_a_checkpoint_file_is_never_executed(cora, tmp_path):
    """A checkpoint file replaced by a pickle that would run code: refused, not run."""
    run(cora, epochs=1, checkpoint_dir=str(tmp_path))
    marker = tmp_path / "executed"
    target = tmp_path / checkpoint_name(1) / "state.pt"
    torch.save({"x": Exploit(str(marker))}, target)
    manifest_path = tmp_path / checkpoint_name(1) / "manifest.json"
    manifest = json.loads(manifest_path.read_text())  # a forger can fix the digests too
    import hashlib
    data = target.read_bytes()
    manifest["files"]["state.pt"] = {"bytes": len(data), "sha256": hashlib.sha256(data).hexdigest()}
    manifest_path.write_text(json.dumps(manifest))
    with pytest.raises(DistGNNError, match="objects other than tensors"):
        run(cora, epochs=2, resume=str(tmp_path))
    assert not marker.exists()


class Exploit:
    def __init__(self, path):
        self.path = path

    def __reduce__(self):
        return (Path.touch, (Path(self.path),))


def test_too_little_free_space_is_refused_before_writing(cora, tmp_path, monkeypatch):
    run(cora, epochs=2, checkpoint_dir=str(tmp_path), checkpoint_every=1, keep=5)
    before = written(tmp_path)
    usage = shutil.disk_usage(tmp_path)
    monkeypatch.setattr(shutil, "disk_usage",
                        lambda path: usage._replace(free=4096))
    with pytest.raises(DistGNNError, match="filesystem has only 4.0 KiB free"):
        run(cora, epochs=4, resume=str(tmp_path), checkpoint_every=1, keep=5)
    assert written(tmp_path) == before


def test_disk_full_mid_write_leaves_previous_checkpoints_intact(cora, tmp_path):
    """A real write failure: the resumed run may write files of at most the size of the
    previous state.pt, which grows with the metrics history (EFBIG, as a full disk gives
    ENOSPC)."""
    ckpt = tmp_path / "ck"
    run(cora, epochs=2, checkpoint_dir=str(ckpt))
    limit = (ckpt / checkpoint_name(2) / "state.pt").stat().st_size + 64
    with files_limited(limit):  # distgnn-train's entry point, in this process
        proc = Runner.in_process("train", ["--epochs", 8, "--threads", 1, "--no-progress",
                                           "--resume", ckpt, "--checkpoint-every", 2])
    assert proc.status == 2, proc.stderr
    assert "Traceback" not in proc.stderr
    assert "writing the checkpoint failed" in proc.stderr.strip().splitlines()[-1]
    assert names(ckpt) == ["epoch-000002"]
    assert not list(ckpt.glob(".partial-*"))
    checkpoint.read_manifest(ckpt / checkpoint_name(2))  # still verifies
    assert len(run(cora, epochs=3, resume=str(ckpt)).history) == 3


def test_non_finite_loss_stops_naming_epoch_and_rank(cora, tmp_path):
    # lr 1e30 overflows the weights after the first step: epoch 2's loss is not finite
    with pytest.raises(NonFiniteLoss, match="epoch 2 on rank 0") as e:
        run(cora, epochs=5, lr=1e30, checkpoint_dir=str(tmp_path))
    assert e.value.exit_status == 2
    assert names(tmp_path) == ["epoch-000001"]  # the last good state
    saved = torch.load(tmp_path / checkpoint_name(1) / "state.pt", weights_only=True)
    assert all(torch.isfinite(v).all() for v in saved["model"].values())


def test_nan_policy_skip_skips_the_step(cora):
    result = run(cora, epochs=4, lr=1e30, nan_policy="skip")
    assert [r.get("skipped_step", False) for r in result.history] == [False, True, True, True]


@pytest.mark.slow
def test_sigterm_checkpoints_then_exits_and_resume_matches(cora, tmp_path):
    """A real SIGTERM (what SLURM sends at the time limit) mid-run."""
    ckpt = tmp_path / "ck"
    flags = ["--dataset", "sbm:nodes=5000", "--device", "cpu", "--epochs", "400", "--threads", "1",
             "--no-progress",
             "--checkpoint-dir", str(ckpt), "--checkpoint-every", "1000", "--seed", "3"]
    proc = subprocess.Popen([str(BIN / "distgnn-train"), *flags, "--metrics-out",
                             str(tmp_path / "m.jsonl")],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    epochs_logged = 0
    while epochs_logged < 5:  # one line per epoch on stdout
        line = proc.stdout.readline()
        assert line, proc.stderr.read()
        epochs_logged += line.startswith("epoch ")
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 128 + signal.SIGTERM, err
    assert "SIGTERM received: stopped after epoch" in err
    stopped = int(checkpoints(ckpt)[0].name.split("-")[1])
    assert 5 <= stopped < 400
    # the resume is no signal drill: distgnn-train's entry point, in this process
    resumed = Runner.in_process("train", [*flags, "--resume", ckpt, "--epochs", stopped + 5])
    assert resumed.status == 0, resumed.stderr
    whole = run(load("sbm:nodes=5000"), epochs=stopped + 5, seed=3)
    state = torch.load(checkpoints(ckpt)[0] / "state.pt", weights_only=True)
    assert [r["loss"] for r in state["history"]] == losses(whole)
    assert os.path.exists(checkpoints(ckpt)[0] / "manifest.json")


def test_every_option_but_the_run_only_ones_is_fingerprinted():
    """The fingerprint is derived, not listed: a new TrainConfig field is in it unless it is
    named run-only; every run-only name is a field; an option away from its default is
    always there, a later one at its default is not (old checkpoints resume)."""
    from distgnn.run.checkpointing import ALWAYS, RUN_ONLY, fingerprinted

    names = set(TrainConfig().options())
    assert RUN_ONLY <= names and set(ALWAYS) <= names - RUN_ONLY
    changed = TrainConfig()  # then every option away from its default
    for name in names:
        setattr(changed, name, ("changed", name))
    assert set(fingerprinted(changed)) == {"--" + n.replace("_", "-") for n in names - RUN_ONLY}
    default = fingerprinted(TrainConfig())
    assert set(default) == {"--" + n.replace("_", "-") for n in ALWAYS}
    for flag in ("--alpha", "--theta", "--aggregation-precision", "--train-eps", "--heads"):
        assert flag in set(fingerprinted(changed)) - set(default)


def manifest(directory, epoch):
    return json.loads((directory / checkpoint_name(epoch) / "manifest.json").read_text())


def test_a_new_run_refuses_a_directory_of_another_runs_checkpoints(cora, tmp_path):
    """Every checkpoint names its run; a run writes into a directory only while every
    checkpoint there is its own.  A new run (same options or not) would otherwise prune the
    other run's checkpoints or its own, and a later --resume continue whichever is newer.
    Nothing is removed; the run's own restarts go on there."""
    ck = tmp_path / "ck"
    run(cora, epochs=2, hidden=8, checkpoint_dir=str(ck))
    before = written(ck)
    refusal = re.escape(f"{ck} holds checkpoints of another run (epoch-000002): continue "
                        f"that run with --resume {ck}, or give another --checkpoint-dir "
                        "(nothing was removed)")
    for kw in (dict(hidden=8), {}, dict(hidden=8, resume_if_present=str(tmp_path / "none"))):
        with pytest.raises(DistGNNError, match=refusal):
            run(cora, epochs=4, checkpoint_dir=str(ck), **kw)
    other = tmp_path / "other"
    run(cora, epochs=1, hidden=8, checkpoint_dir=str(other))
    with pytest.raises(DistGNNError, match="other holds checkpoints of another run"):
        run(cora, epochs=4, hidden=8, resume=str(ck), checkpoint_dir=str(other))
    assert written(ck) == before
    run(cora, epochs=5, hidden=8, checkpoint_every=2, resume_if_present=str(ck))
    assert names(ck) == ["epoch-000005", "epoch-000004"]
    ids = {manifest(ck, e)["run"] for e in (4, 5)}
    assert len(ids) == 1 and ids != {manifest(other, 1)["run"]}


def test_a_checkpoint_without_a_run_id_resumes_as_one_run(cora, tmp_path):
    """Checkpoints written before runs had ids resume, and their run goes on without one
    (pruning its own); a new run still refuses their directory."""
    run(cora, epochs=2, checkpoint_dir=str(tmp_path))
    path = tmp_path / checkpoint_name(2) / "manifest.json"
    older = manifest(tmp_path, 2)
    del older["run"]
    path.write_text(json.dumps(older))
    run(cora, epochs=6, checkpoint_every=2, keep=2, resume=str(tmp_path))
    assert names(tmp_path) == ["epoch-000006", "epoch-000004"]
    assert "run" not in manifest(tmp_path, 6)
    with pytest.raises(DistGNNError, match="holds checkpoints of another run"):
        run(cora, epochs=2, checkpoint_dir=str(tmp_path))


def test_a_run_holds_its_checkpoint_directory_for_its_life(cora, tmp_path):
    """While a run writes into D it holds D/.lock: another run on D, new or resumed, is
    refused before its first epoch, naming the holder; once the holder is done (refused,
    failed or finished), D is free again."""
    import socket

    from distgnn.storage import file_lock

    ck = tmp_path / "ck"
    run(cora, epochs=2, checkpoint_dir=str(ck))
    holder = re.escape(f"{ck} is in use by another run (process {os.getpid()} on "
                       f"{socket.gethostname()} holds {ck / checkpoint.LOCK}): wait for it to "
                       "end, or give another --checkpoint-dir")
    with file_lock(ck / checkpoint.LOCK) as held:  # what a run of another process holds
        assert held
        for kw in (dict(resume=str(ck)), dict(resume_if_present=str(ck))):
            with pytest.raises(DistGNNError, match=holder):
                run(cora, epochs=4, **kw)
    assert names(ck) == ["epoch-000002"]
    with pytest.raises(DistGNNError, match="nothing is left to train"):
        run(cora, epochs=2, resume=str(ck))  # refused after the lock: it is released
    run(cora, epochs=4, resume=str(ck))
    assert names(ck) == ["epoch-000004", "epoch-000002"]


def test_a_filesystem_that_cannot_lock_is_said_once_and_the_run_goes_on(cora, tmp_path,
                                                                         monkeypatch):
    """A lock refused with no holder recorded (flock unsupported: no process can hold it)
    is a warning, not a refusal."""
    import contextlib

    monkeypatch.setattr(checkpoint, "file_lock", contextlib.contextmanager(
        lambda path, wait_s=None: (yield False)))
    monkeypatch.setattr(checkpoint, "HOLDER_WAIT_S", 0.0)
    logged = []
    run(cora, epochs=2, checkpoint_dir=str(tmp_path / "ck"), log=logged.append)
    assert [line for line in logged if "cannot be locked" in line] == [
        f"warning: {tmp_path / 'ck' / checkpoint.LOCK} cannot be locked on this filesystem: a "
        f"second run started on {tmp_path / 'ck'} meanwhile would not be refused"]
    assert names(tmp_path / "ck") == ["epoch-000002"]
