"""Failure drills on real mpirun jobs with real signals: kill a rank and resume (the result
equals the uninterrupted run), a hung rank ends the job through the --comm-timeout
watchdog, SIGTERM to the ranks or to distgnn-launch checkpoints and exits, and a
non-finite loss stops every rank with one message.  The drills are those of
``distgnn-bench resume`` (:mod:`bench.resume`).  What follows a drill without being one (a
resume, a refusal by the resume checks) may run on ranks that are threads of this process
(:func:`train_on_threads`), without a job's start-up."""
import os
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

import launch
from bench.resume import interrupt, kill_and_resume, run_to_end
from distgnn.data.datasets import load
from distgnn.run.checkpoint_files import checkpoints
from partition.vertex_cut import vertex_cut
from partition.write import write_dataset
from tests.helpers.mpi import run_plan
from tests.helpers.training import train_on_threads

BIN = Path(sys.executable).parent
EPOCHS = 40


@pytest.fixture(scope="module")
def cora_parts(tmp_path_factory):
    """Libra partitions of Cora into 2 and 4 parts."""
    root = tmp_path_factory.mktemp("cora")
    data = load("cora")
    out = {}
    for P in (2, 4):
        out[P] = root / f"p{P}"
        write_dataset(out[P], data, vertex_cut(data.graph, P, "libra", seed=0),
                      {"method": "libra", "seed": 0})
    return out


def flags(*extra):
    return ["--epochs", str(EPOCHS), "--eval-every", "5", "--checkpoint-every", "10",
            "--seed", "4", *extra]


def newest_epoch(directory):
    return int(checkpoints(directory)[0].name.split("-")[1])


# the state a kill can leave half-done: cd-r's messages in flight (bins, smoothed values; the
# adaptive schedule on 4 ranks), the compressed wires' error-feedback residuals (bf16; int4
# under cd-r's default schedule) and the default schedule's controller (cd-0's residuals
# round-trip in tests/test_exchange.py)
@pytest.mark.parametrize("ranks, algo", [
    (2, ["--algo", "cd-r"]),
    (2, ["--algo", "cd-r", "--delay", "5", "--smoothing", "0.5", "--exchange-precision", "bf16"]),
    (4, ["--algo", "cd-r", "--comm-budget", "0.3"])],
    ids=["2-cd-r-default", "2-cd-5-smooth-bf16", "4-adaptive"])
def test_killed_rank_then_resume_equals_uninterrupted(cora_parts, tmp_path, ranks, algo):
    row = kill_and_resume(cora_parts[ranks], ranks, flags(*algo), tmp_path, after=20)
    assert row["killed_status"] != 0
    assert row["death_to_exit_s"] < 30
    assert 20 <= row["resumed_from"] < EPOCHS
    assert row["epochs"] == EPOCHS
    assert row["loss_max_rel_diff"] <= 1e-6, row
    assert row["weights_max_abs_diff"] <= 1e-6, row


def test_hung_rank_ends_the_job_through_the_watchdog(cora_parts, tmp_path):
    hung = interrupt(2, ["--partitions", str(cora_parts[2]), *flags("--comm-timeout", "4",
                                                                    "--checkpoint-dir",
                                                                    str(tmp_path))],
                     tmp_path, 10, signal.SIGSTOP)
    assert hung["status"] == 3, hung["stderr"]
    assert "rank 0: allreduce waited more than 4 s" in hung["stderr"] or \
        "rank 0: wait on ialltoallv waited more than 4 s" in hung["stderr"] or \
        "rank 0: alltoallv waited more than 4 s" in hung["stderr"], hung["stderr"]
    assert 4 <= hung["exit_s"] < 30


def test_sigterm_to_every_rank_checkpoints_then_exits(cora_parts, tmp_path):
    """What SLURM does at the time limit: SIGTERM to every task."""
    ck = tmp_path / "ck"
    job = ["--partitions", str(cora_parts[2]), *flags("--checkpoint-dir", str(ck))]
    stopped = interrupt(2, job, ck, 10, signal.SIGTERM, targets=(0, 1))
    assert stopped["status"] == 128 + signal.SIGTERM, stopped["stderr"]
    message = [line for line in stopped["stderr"].splitlines() if "SIGTERM received" in line]
    assert len(message) == 1, stopped["stderr"]  # one line for the whole job
    at = newest_epoch(ck)
    assert f"stopped after epoch {at}" in message[0]
    assert 10 <= at < EPOCHS
    resumed = train_on_threads(2, [*job, "--resume", str(ck)])  # no drill: ranks as threads
    assert resumed.status == 0, resumed.stderr
    assert newest_epoch(ck) == EPOCHS


@pytest.mark.parametrize("sig, status", [(signal.SIGTERM, 128 + signal.SIGUSR1),
                                         (signal.SIGUSR1, 128 + signal.SIGUSR1),
                                         (signal.SIGINT, 130)])
def test_a_stop_signal_to_the_launcher_checkpoints_and_says_how_to_continue(
        cora_parts, tmp_path, sig, status):
    """SIGTERM, SIGUSR1 and Ctrl-C to distgnn-launch reach every rank as SIGUSR1; the
    launcher waits for them, then names the checkpoint they wrote and the command that
    continues from it, which (for Ctrl-C) resumes the run to its end."""
    ck = tmp_path / "ck"
    proc = subprocess.Popen([str(BIN / "distgnn-launch"), "-n", "2", "--",
                             str(BIN / "distgnn-train"), "--partitions", str(cora_parts[2]),
                             "--no-progress", *flags("--checkpoint-dir", str(ck))],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    deadline = time.monotonic() + 120
    while not (ck / "epoch-000010" / "manifest.json").exists():
        assert proc.poll() is None and time.monotonic() < deadline
        time.sleep(0.01)
    proc.send_signal(sig)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == status, err
    assert "SIGUSR1 received: stopped after epoch" in err
    at = newest_epoch(ck)
    assert 10 <= at < EPOCHS
    name = "Ctrl-C" if sig == signal.SIGINT else signal.Signals(sig).name
    last = err.strip().splitlines()[-1]
    head = (f"distgnn-launch: error: stopped on {name}: the ranks wrote checkpoint "
            f"{ck}/epoch-{at:06d} (after epoch {at}); continue with: ")
    assert last.startswith(head), last
    again = shlex.split(last[len(head):])
    assert again[:4] == ["distgnn-launch", "-n", "2", "--"] and again[-2:] == ["--resume",
                                                                               str(ck)]
    if sig == signal.SIGINT:
        done = subprocess.run([str(BIN / again[0]), *again[1:]], capture_output=True,
                              text=True, timeout=300)
        assert done.returncode == 0, done.stderr
        assert f"resumed from {ck} after epoch {at}" in done.stdout
        assert newest_epoch(ck) == EPOCHS


def test_non_finite_loss_stops_every_rank_with_one_message(cora_parts, tmp_path):
    job = launch.plan(2, [str(BIN / "distgnn-train"), "--partitions", str(cora_parts[2]),
                          "--epochs", "5", "--lr", "1e30", "--no-progress",
                          "--checkpoint-dir", str(tmp_path)], threads_per_rank=1)
    proc = run_plan(job, timeout=300)
    assert proc.returncode == 2, proc.stderr
    errors = [line for line in proc.stderr.splitlines() if "error:" in line]
    assert len(errors) == 1, proc.stderr
    assert "non-finite loss or gradients in epoch 2 on rank 0, 1" in errors[0]
    assert newest_epoch(tmp_path) == 1


def test_checkpoint_of_another_exchange_is_refused_and_of_another_rank_count_resumed(
        cora_parts, tmp_path):
    """The first run, with --resume-if-present of a folder that does not exist yet, starts
    afresh on every rank.  Its checkpoint is refused by a job of another exchange (exit
    status 2, one line under mpirun), and resumed on 4 ranks by --resume-if-present (ranks
    that are threads, :func:`train_on_threads`), which says what it accepted."""
    first = run_to_end(2, ["--partitions", str(cora_parts[2]), "--epochs", "2",
                           "--resume-if-present", str(tmp_path / "ck")], "first")
    assert f"no checkpoint in {tmp_path / 'ck'}: starting a new run" in first
    argv = ["--partitions", str(cora_parts[2]), "--epochs", "4", "--no-progress", "--resume",
            str(tmp_path / "ck"), "--algo", "cd-r", "--delay", "5"]
    job = launch.plan(2, [str(BIN / "distgnn-train"), *argv], threads_per_rank=1)
    proc = run_plan(job, timeout=300)
    assert proc.returncode == 2, proc.stderr
    assert "another split-vertex exchange than this run's (cd-0 there, cd-r delay 5 here)" \
        in proc.stderr
    assert "Traceback" not in proc.stderr
    assert newest_epoch(tmp_path / "ck") == 2
    out = train_on_threads(4, ["--partitions", str(cora_parts[4]), "--epochs", "4",
                               "--no-progress", "--resume-if-present", str(tmp_path / "ck")])
    assert out.status == 0, out.stderr
    assert "after epoch 2: checkpoint of 2 ranks resumed on 4 ranks" in out.stdout
    assert newest_epoch(tmp_path / "ck") == 4
