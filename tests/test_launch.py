"""distgnn-launch: mpirun / mpiexec command lines, SLURM scripts, and real runs under mpirun."""
import os
import sys
import time
from pathlib import Path

import pytest

from launch import LaunchError, LaunchPlan, plan, run, sbatch_script
from launch.cli import main
from launch.mpirun import detect_implementation, find_mpirun

BIN = Path(sys.executable).parent
MPIRUN = str(BIN / "mpirun")


def flags(argv, *expected):
    """Whether ``expected`` occurs in ``argv`` as one contiguous run."""
    n = len(expected)
    return any(tuple(argv[i:i + n]) == expected for i in range(len(argv) - n + 1))


def openmpi(ranks, command=("prog",), threads=1, cores=4, **kw):
    return plan(ranks, list(command), threads, implementation="openmpi", mpirun="mpirun",
                cores=cores, **kw)


def mpich(ranks, command=("prog",), threads=1, cores=4, **kw):
    return plan(ranks, list(command), threads, implementation="mpich", mpirun="mpiexec",
                cores=cores, **kw)


def test_find_mpirun_prefers_the_virtual_environment():
    assert find_mpirun() == MPIRUN
    with pytest.raises(LaunchError, match="no-such-mpirun"):
        find_mpirun("no-such-mpirun")


@pytest.mark.parametrize("banner, expected", [
    ("mpirun (Open MPI) 5.0.3", "openmpi"),
    ("HYDRA build details:\n    Version: 4.1.2", "mpich"),
    ("Intel(R) MPI Library for Linux* OS, Version 2021.10", "mpich"),
])
def test_detect_implementation(tmp_path, banner, expected):
    fake = tmp_path / "mpirun"
    fake.write_text(f"#!/bin/sh\ncat <<'EOF'\n{banner}\nEOF\n")
    fake.chmod(0o755)
    assert detect_implementation(str(fake)) == expected


def test_detect_implementation_of_the_installed_mpirun_and_of_strangers(tmp_path):
    assert detect_implementation(MPIRUN) == "openmpi"
    with pytest.raises(LaunchError, match="neither Open MPI nor"):
        detect_implementation("/bin/echo")
    with pytest.raises(LaunchError, match="cannot run"):
        detect_implementation(str(tmp_path / "missing"))


def test_openmpi_one_thread_per_rank_binds_to_cores():
    p = openmpi(4, ["prog", "x"])
    assert p.argv[:3] == ["mpirun", "-np", "4"]
    assert flags(p.argv, "--bind-to", "core", "--map-by", "core")
    assert "--oversubscribe" not in p.argv
    assert flags(p.argv, "-x", "OMP_NUM_THREADS", "-x", "NUMBA_NUM_THREADS", "prog", "x")
    assert p.env["OMP_NUM_THREADS"] == p.env["NUMBA_NUM_THREADS"] == "1"


def test_openmpi_threads_per_rank_reserves_that_many_cores():
    p = openmpi(2, threads=2)
    assert flags(p.argv, "--map-by", "slot:PE=2", "--bind-to", "core")
    assert p.env["OMP_NUM_THREADS"] == p.env["NUMBA_NUM_THREADS"] == "2"


@pytest.mark.parametrize("ranks, threads", [(5, 1), (3, 2)])
def test_openmpi_oversubscribes_only_beyond_the_cores(ranks, threads):
    p = openmpi(ranks, threads=threads, cores=4)
    assert flags(p.argv, "--oversubscribe", "--bind-to", "none")
    assert "--map-by" not in p.argv


def test_openmpi_hostfile_ignores_the_local_cores(tmp_path):
    hosts = tmp_path / "hosts"
    hosts.write_text("node1 slots=64\nnode2 slots=64\n")
    p = openmpi(64, hostfile=str(hosts), cores=2)
    assert flags(p.argv, "--hostfile", str(hosts))
    assert "--oversubscribe" not in p.argv and flags(p.argv, "--bind-to", "core")


@pytest.mark.parametrize("euid, allowed", [(0, True), (1000, False)])
def test_openmpi_root_variables_only_as_root(monkeypatch, euid, allowed):
    monkeypatch.setattr(os, "geteuid", lambda: euid)
    env = openmpi(2).env
    assert (env.get("OMPI_ALLOW_RUN_AS_ROOT") == env.get("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM")
            == "1") is allowed


def test_mpich_flags(tmp_path):
    hosts = tmp_path / "hosts"
    hosts.write_text("node1:64\n")
    assert mpich(4).argv == ["mpiexec", "-n", "4", "-bind-to", "core",
                             "-genv", "OMP_NUM_THREADS", "1",
                             "-genv", "NUMBA_NUM_THREADS", "1", "prog"]
    assert flags(mpich(2, threads=2).argv, "-bind-to", "core:2")
    assert flags(mpich(3, threads=2).argv, "-bind-to", "none")
    assert flags(mpich(8, hostfile=str(hosts), cores=1).argv, "-f", str(hosts),
                 "-bind-to", "core")
    assert mpich(2).env == {}


def test_threads_appended_to_distgnn_train_once():
    assert openmpi(2, ["/venv/bin/distgnn-train", "--partitions=d"], threads=2).argv[-4:] == \
        ["/venv/bin/distgnn-train", "--partitions=d", "--threads", "2"]
    for given in (["--threads", "1"], ["--threads=1"]):
        assert openmpi(2, ["distgnn-train", "--partitions", "d", *given]).argv[-len(given):] \
            == given
    assert openmpi(2, ["python", "train.py"]).argv[-2:] == ["python", "train.py"]


def test_whole_graph_training_on_several_ranks_is_refused():
    """Without --partitions every rank would train the whole graph alone: P identical jobs."""
    for command in (["distgnn-train"], ["/venv/bin/distgnn-train", "--dataset", "cora"]):
        with pytest.raises(LaunchError, match="2 identical jobs; partition it first"):
            openmpi(2, command)
    assert openmpi(1, ["distgnn-train", "--dataset", "cora"]).argv[-4:] == \
        ["--dataset", "cora", "--threads", "1"]


@pytest.mark.parametrize("kw, message", [
    (dict(ranks=0), "ranks must be >= 1"),
    (dict(threads=0), "threads per rank must be >= 1"),
    (dict(command=[]), "no command"),
    (dict(hostfile="/no/such/hosts"), "hostfile /no/such/hosts does not exist"),
])
def test_plan_rejects_bad_input(kw, message):
    with pytest.raises(LaunchError, match=message):
        openmpi(**{"ranks": 2, **kw})


def test_plan_rejects_unknown_implementation():
    with pytest.raises(LaunchError, match="unknown MPI implementation"):
        plan(2, ["prog"], implementation="lam")


def test_shell_line_quotes_what_the_shell_would_split():
    p = LaunchPlan(["mpirun", "-np", "2", "python", "-c", "print('a b')"],
                   {"OMP_NUM_THREADS": "2"})
    assert p.shell() == "OMP_NUM_THREADS=2 mpirun -np 2 python -c 'print('\"'\"'a b'\"'\"')'"


def test_sbatch_script():
    s = sbatch_script(8, ["distgnn-train", "--partitions", "a b"], threads_per_rank=4, nodes=2,
                      time="00:30:00", partition="cpu", account="proj", job_name="gcn")
    lines = s.splitlines()
    assert lines[0] == "#!/bin/bash"
    for line in ("#SBATCH --ntasks=8", "#SBATCH --cpus-per-task=4", "#SBATCH --nodes=2",
                 "#SBATCH --time=00:30:00", "#SBATCH --partition=cpu",
                 "#SBATCH --account=proj", "#SBATCH --job-name=gcn",
                 "#SBATCH --signal=TERM@120",
                 "export OMP_NUM_THREADS=$SLURM_CPUS_PER_TASK",
                 "export NUMBA_NUM_THREADS=$SLURM_CPUS_PER_TASK"):
        assert line in lines
    assert lines[-1].startswith("srun ") and "--cpu-bind=cores" in lines[-1]
    assert lines[-1].endswith("distgnn-train --partitions 'a b' --threads 4")
    plain = sbatch_script(2, ["prog"])
    assert "--nodes" not in plain and "--partition" not in plain and "--account" not in plain


@pytest.mark.parametrize("kw, message", [
    (dict(ranks=0), "ranks must be >= 1"),
    (dict(command=[]), "no command"),
    (dict(nodes=0), "nodes must be >= 1"),
    (dict(job_name="two words"), "--job-name"),
    (dict(partition="cpu\nrm -rf /"), "--partition"),
    (dict(stop_before=-1), "stop_before must be >= 0"),
])
def test_sbatch_script_rejects_bad_input(kw, message):
    with pytest.raises(LaunchError, match=message):
        sbatch_script(**{"ranks": 2, "command": ["prog"], **kw})


def test_cli_dry_run_prints_the_plan(capsys):
    assert main(["-n", "2", "--threads-per-rank", "1", "--dry-run", "--",
                 "distgnn-train", "--partitions", "d"]) == 0
    out = capsys.readouterr().out.strip()
    assert out.startswith("OMP_NUM_THREADS=1 NUMBA_NUM_THREADS=1 ")
    assert f"{MPIRUN} -np 2 " in out
    assert out.endswith("distgnn-train --partitions d --threads 1")


def test_cli_slurm_writes_the_script_atomically(tmp_path, capsys):
    out = tmp_path / "job.sbatch"
    job = ["distgnn-train", "--partitions", "d"]
    out.write_text(sbatch_script(2, job))  # an earlier script of ours: replaced
    assert main(["-n", "4", "--threads-per-rank", "2", "--slurm", str(out), "--partition",
                 "cpu", "--", *job]) == 0
    assert out.read_text() == sbatch_script(4, job, 2, partition="cpu")
    assert os.listdir(tmp_path) == ["job.sbatch"]
    assert str(out) in capsys.readouterr().out


@pytest.mark.parametrize("args, message", [
    (["-n", "0", "--dry-run", "--", "prog"], "ranks must be >= 1"),
    (["-n", "2", "--dry-run"], "no command"),
    (["-n", "2", "--dry-run", "--hostfile", "/no/such/hosts", "--", "prog"],
     "hostfile /no/such/hosts does not exist"),
    (["-n", "2", "--slurm", "x", "--hostfile", "h", "--", "prog"], "--hostfile"),
    (["-n", "2", "--timeout", "0", "--", "prog"], "timeout must be a finite number of seconds > 0"),
    (["--dry-run", "--", "prog"], "--ranks"),
])
def test_cli_errors_are_one_line(capsys, args, message):
    try:
        status = main(args)
    except SystemExit as e:  # argparse's own errors
        status = e.code
    assert status == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("distgnn-launch: error: ")
    assert message in err


RANK_SCRIPT = """
import os, sys
from mpi4py import MPI
rank = MPI.COMM_WORLD.Get_rank()
with open(os.path.join(sys.argv[1], f"rank{rank}"), "w") as f:
    f.write(f"{MPI.COMM_WORLD.Get_size()} {os.environ['OMP_NUM_THREADS']}")
"""


def test_real_run_starts_every_rank_with_its_thread_count(tmp_path):
    assert main(["-n", "2", "--timeout", "60", "--",
                 sys.executable, "-c", RANK_SCRIPT, str(tmp_path)]) == 0
    assert {f.name: f.read_text() for f in tmp_path.iterdir()} == \
        {"rank0": "2 1", "rank1": "2 1"}


def test_timeout_stops_the_ranks(tmp_path):
    sleeper = ("import os, sys, time\n"
               "open(os.path.join(sys.argv[1], str(os.getpid())), 'w').close()\n"
               "time.sleep(60)")
    job = plan(2, [sys.executable, "-c", sleeper, str(tmp_path)])
    start = time.monotonic()
    with pytest.raises(LaunchError, match="did not finish within 3 s"):
        run(job, timeout=3)
    assert time.monotonic() - start < 15
    pids = [int(f.name) for f in tmp_path.iterdir()]
    assert len(pids) == 2
    assert not any(map(running, pids))


def running(pid):
    """Whether ``pid`` exists and is not a zombie (dead ranks wait for init to reap them)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"
