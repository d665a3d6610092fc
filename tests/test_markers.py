"""The markers that sort the tests by kind (tests/conftest.py): the guard that fails a test
starting MPI without the ``mpi`` marker, in the test's process and in those it starts, and
the code scan that gives the marker."""
import os
import subprocess
import sys
from pathlib import Path

from tests.conftest import GUARD, MPI_STARTERS, names_any
from tests.helpers.hostile import Case, Runner
from tests.helpers.mpi_guard import sitecustomize as guard

MPIRUN = str(Path(sys.executable).parent / "mpirun")


def test_a_launcher_is_recognised_by_name_wherever_it_is_installed(tmp_path):
    assert guard.launcher_call([MPIRUN, "-np", "2", "prog"]) == f"{MPIRUN} -np 2 prog"
    assert guard.launcher_call([MPIRUN, "--version"]) is None  # a question, not a job
    assert guard.launcher_call(["/bin/sh", "-c", f"{MPIRUN} -np 2 prog > out"]) is not None
    assert guard.launcher_call(["python", "-c", "print('mpirun')"]) is None
    assert guard.launcher_call(["/bin/true", "-np", "2"]) is None
    fake = tmp_path / "mpiexec"  # a test's own fake launcher
    fake.write_text("#!/bin/sh\necho 'HYDRA build details'\n")
    fake.chmod(0o755)
    assert guard.launcher_call([str(fake), "-n", "2", "prog"]) == f"{fake} -n 2 prog"
    assert guard.launcher_call([str(fake), "-n", "2", "prog"], fakes=str(tmp_path)) is None


def test_a_process_the_test_starts_cannot_start_mpirun(tmp_path):
    """What the fixture gives a test's processes (PYTHONPATH, the log): a Python program
    that starts mpirun gets PermissionError, and the command is logged for the fixture."""
    log = tmp_path / "log"
    program = ("import subprocess, sys\n"
               "try:\n"
               f"    subprocess.run([{MPIRUN!r}, '-np', '1', 'true'])\n"
               "except PermissionError as e:\n"
               "    sys.exit(f'refused: {e}')\n")
    env = {**os.environ, guard.ENV: str(log), "PYTHONPATH": str(GUARD)}
    proc = subprocess.run([sys.executable, "-c", program], env=env, capture_output=True,
                          text=True, timeout=60, check=False)
    assert proc.returncode == 1 and "refused: an MPI job in a test not marked mpi" in proc.stderr
    assert log.read_text() == f"{MPIRUN} -np 1 true\n"


def test_the_scan_finds_the_helpers_that_start_jobs():
    """A hostile case whose run calls a Runner.mpi* method (directly, or through a closure
    of the suite's) is an MPI case; one that runs a tool in this process is not."""
    def job(tmp, run):
        return run.mpirun(2, "train", ["--partitions", tmp])

    def wrapped(inner):
        return lambda tmp, run: inner(tmp, run)

    def local(tmp, run):
        return run("partition", ["verify", tmp])

    assert names_any(Case(11, "job", wrapped(job)), MPI_STARTERS)
    assert names_any(Case(11, "popen", lambda tmp, run: run.mpi_popen([])), MPI_STARTERS)
    assert not names_any(Case(11, "local", wrapped(local)), MPI_STARTERS)
    assert {m for m in dir(Runner) if m.startswith("mpi")} <= MPI_STARTERS
