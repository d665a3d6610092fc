"""Command-line behaviour: defaults run, bad input ends in one line and exit status 2."""
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from tests.helpers.hostile import Outcome, Runner

BIN = Path(sys.executable).parent


def cli(name, *args, cwd=None):
    """The installed command ``name`` run as a process (its exit status and streams)."""
    proc = subprocess.run([str(BIN / name), *map(str, args)], capture_output=True, text=True,
                          cwd=cwd, timeout=300)
    return Outcome(proc.returncode, proc.stdout, proc.stderr)


def train(*args):
    """``distgnn-train ARGS`` run by its entry point in this process (no interpreter or
    torch start-up): its exit status, stdout and stderr as a process would give them."""
    return Runner.in_process("train", list(args))


def assert_one_line_error(proc, *fragments):
    assert proc.status == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert "Traceback" not in proc.stderr
    for f in fragments:
        assert f in lines[0]


def test_default_run_trains_gcn_on_bundled_cora(tmp_path):
    metrics = tmp_path / "m.jsonl"
    proc = cli("distgnn-train", "--epochs", 3, "--metrics-out", metrics)  # the installed command
    assert proc.status == 0, proc.stderr
    assert "cora: 2,708 vertices" in proc.stdout
    assert "test accuracy" in proc.stdout
    assert "epoch    3/3" in proc.stdout
    lines = [json.loads(line) for line in metrics.read_text().splitlines()]
    assert [r.get("epoch") for r in lines] == [1, 2, 3, None]  # then the summary
    assert lines[-1]["summary"] and lines[-1]["epochs"] == 3


def test_missing_dataset_file(tmp_path):
    missing = tmp_path / "nope.npz"
    assert_one_line_error(train("--dataset", missing), str(missing))


def test_corrupt_npz(tmp_path):
    bad = tmp_path / "bad.npz"
    bad.write_bytes(np.random.default_rng(0).bytes(4096))
    # a process of the installed command: nothing else (a warning of an import) on its stderr
    assert_one_line_error(cli("distgnn-train", "--dataset", bad), str(bad))


def test_unknown_flag():
    assert_one_line_error(train("--no-such-flag"), "--no-such-flag")


def test_bad_flag_value():
    assert_one_line_error(train("--epochs", "many"), "--epochs")


def test_reorder_is_for_a_dataset_and_takes_a_known_order(tmp_path):
    assert_one_line_error(train("--partitions", tmp_path, "--reorder"),
                          "--reorder applies to --dataset")
    assert_one_line_error(train("--reorder", "metis"), "--reorder")


def test_options_of_partitions_and_of_checkpoints_are_refused_before_the_data_is_read(
        tmp_path):
    """On a dataset, the communicator's, verify's and a second rank's options are refused
    before the dataset is read (the missing file is not what is said), as are the checkpoint
    options without a checkpoint directory; rank 0's own choice is taken (the run goes on to
    the missing file)."""
    missing = tmp_path / "nope.npz"
    for flags, said in [(("--comm-timeout", 5), "--comm-timeout 5 applies to --partitions"),
                        (("--comm-wait", "sleep"), "--comm-wait sleep applies to --partitions"),
                        (("--no-verify",), "--no-verify applies to --partitions"),
                        (("--rank-backends", "1:torch"), "--rank-backends names rank 1"),
                        (("--keep", 3), "--keep 3 applies to checkpoints")]:
        assert_one_line_error(train("--dataset", missing, *flags), said)
    assert_one_line_error(train("--dataset", missing, "--rank-devices", "0:cpu"), str(missing))
    assert_one_line_error(train("--dataset", missing, "--keep", 3, "--resume-if-present",
                                tmp_path / "ck"), str(missing))


def test_missing_checkpoint(tmp_path):
    assert_one_line_error(train("--epochs", 1, "--resume", tmp_path / "x"),
                          "--resume", "not a directory of checkpoints")
    assert_one_line_error(train("--epochs", 1, "--resume", tmp_path),
                          "no checkpoint to resume from")
    assert_one_line_error(train("--resume", tmp_path, "--resume-if-present", tmp_path),
                          "--resume-if-present: not allowed with argument --resume")


def test_launch_without_ranks():
    assert_one_line_error(cli("distgnn-launch", "--", "true"), "--ranks")


def test_launch_bad_ranks():
    assert_one_line_error(cli("distgnn-launch", "-n", 0, "--", "true"), "ranks must be >= 1")


def test_launch_help_explains_every_flag():
    out = cli("distgnn-launch", "--help").stdout
    for flag in ("--ranks", "--threads-per-rank", "--hostfile", "--mpi", "--mpirun", "--dry-run",
                 "--slurm", "--nodes", "--time", "--partition", "--account", "--job-name",
                 "--timeout", "--stop-grace", "--stop-before", "--gpus-per-node"):
        assert flag in out


def test_help_explains_every_flag():
    out = train("--help").stdout
    for flag in ("--dataset", "--model", "--aggregator", "--layers", "--hidden", "--dropout",
                 "--lr", "--weight-decay", "--epochs", "--seed", "--eval-every",
                 "--metrics-out", "--checkpoint-dir", "--checkpoint-every", "--keep",
                 "--resume", "--resume-if-present", "--nan-policy", "--comm-timeout",
                 "--threads", "--device", "--rank-devices", "--rank-backends", "--comm",
                 "--backend", "--patience"):
        assert flag in out


def test_a_ctrl_c_during_an_import_waits_for_the_import_to_finish(tmp_path, monkeypatch,
                                                                 capsys):
    """A Ctrl-C that comes while a module is being imported (torch's initialisation aborts
    the process when the interrupt is raised inside it) is raised once the import is done:
    the module is whole, and the entry point ends with its one line and status 130."""
    import importlib
    import signal
    import time

    from distgnn.program import interruptible

    (tmp_path / "slow_extension.py").write_text(
        "import os, signal, time\n"
        "os.kill(os.getpid(), signal.SIGINT)\n"
        "time.sleep(0.3)\n"
        "initialised = True\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    after = []

    @interruptible("prog")
    def main(argv):
        module = importlib.import_module("slow_extension")
        after.append(module.initialised)
        time.sleep(5)  # the interrupt comes here
        after.append("not interrupted")
        return 0

    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        assert main([]) == 130
    finally:
        signal.signal(signal.SIGINT, previous)
        sys.modules.pop("slow_extension", None)
    assert after == [True]
    assert "prog: interrupted (Ctrl-C)" in capsys.readouterr().err


def test_a_swallowed_ctrl_c_during_start_up_still_ends_the_run(capsys):
    """A library that swallows the KeyboardInterrupt of a Ctrl-C during start-up (a bare
    ``except:`` around an import) does not make the run go on: training's stop handling
    notices the recorded Ctrl-C before the first epoch and the entry point ends with its
    one line and status 130."""
    import os
    import signal

    from distgnn.program import interruptible
    from distgnn.signals import EARLY_INTERRUPTS, StopRequests

    epochs = []

    @interruptible("prog")
    def main(argv):
        try:
            os.kill(os.getpid(), signal.SIGINT)
        except BaseException:  # noqa: B036 -- what such a library does
            pass
        with StopRequests():
            epochs.append(1)
        return 0

    # as in a fresh process (an earlier test of this session may have left another handler)
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        assert main([]) == 130 and not epochs
    finally:
        signal.signal(signal.SIGINT, previous)
    assert "prog: interrupted (Ctrl-C)" in capsys.readouterr().err
    assert not EARLY_INTERRUPTS  # cleared for the next call


@pytest.mark.parametrize("name", ["SIGTERM", "SIGHUP"])
def test_a_stop_signal_ends_an_entry_point_with_one_line_after_its_clean_ups(name, capsys):
    """SIGTERM, and SIGHUP (a closed terminal) as SIGTERM, outside training's epochs raise
    where the process is: the ``finally`` of a writer runs (what it made beside its target
    goes), a second signal meanwhile does not cut that short, the entry point ends with one
    line and 128 + the signal, and the signal's default is back afterwards."""
    import os
    import signal
    import time

    from distgnn.program import interruptible

    signum = getattr(signal, name)
    cleaned = []

    @interruptible("prog")
    def main(argv):
        try:
            os.kill(os.getpid(), signum)
            time.sleep(5)  # the stop comes here
        finally:
            os.kill(os.getpid(), signum)  # a second one, during the clean-up
            time.sleep(0.1)
            cleaned.append(True)
        return 0

    # as in a fresh process (a test runner's worker may have a handler of its own)
    previous = signal.signal(signum, signal.SIG_DFL)
    try:
        assert main([]) == 128 + signum and cleaned == [True]
        assert signal.getsignal(signum) == signal.SIG_DFL
    finally:
        signal.signal(signum, previous)
    assert capsys.readouterr().err == f"prog: stopped by {name}; nothing more was written\n"


def test_sighup_is_a_stop_request_in_training_unless_ignored_as_under_nohup():
    """Training's stop requests take SIGHUP as SIGTERM; a SIGHUP ignored when the tool
    starts (nohup) stays ignored there and in the entry point: the run goes on."""
    import os
    import signal

    from distgnn.program import interruptible
    from distgnn.signals import StopRequests

    previous = signal.signal(signal.SIGHUP, signal.SIG_DFL)
    try:
        with StopRequests() as stop:
            os.kill(os.getpid(), signal.SIGHUP)
            assert stop.request() == signal.SIGHUP
        assert signal.getsignal(signal.SIGHUP) == signal.SIG_DFL

        signal.signal(signal.SIGHUP, signal.SIG_IGN)  # what nohup leaves

        @interruptible("prog")
        def main(argv):
            with StopRequests() as stop:
                os.kill(os.getpid(), signal.SIGHUP)
                return stop.request()

        assert main([]) == 0
        assert signal.getsignal(signal.SIGHUP) == signal.SIG_IGN
    finally:
        signal.signal(signal.SIGHUP, previous)
