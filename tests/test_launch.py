"""distgnn-launch: mpirun / mpiexec command lines, finding each MPI implementation's
launcher and library, SLURM scripts, and real runs under Open MPI, MPICH and Intel MPI."""
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import pytest

from launch import LaunchError, LaunchPlan, cluster, plan, run, sbatch_script
from launch import job as job_module
from launch import mpirun as mpirun_module
from launch.cli import main
from launch.job import StderrCopy
from launch.mpirun import (
    IMPLEMENTATIONS,
    RANK_WRAPPER,
    ROOT_ENV,
    detect_implementation,
    find_launcher,
    find_mpirun,
    launcher_options,
)
from launch.rank import STARTED
from launch.slurm import LAUNCHERS, placement, time_limit_s
from tests.helpers.mpi import installed

BIN = Path(sys.executable).parent
MPIRUN = str(BIN / "mpirun")


def wrapper(hydra=False, gpus=0):
    """What every rank runs before its command (launch.rank)."""
    return [sys.executable, *RANK_WRAPPER, *(["--watch"] if hydra else []), str(gpus)]


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


def impi(ranks, command=("prog",), threads=1, cores=4, **kw):
    return plan(ranks, list(command), threads, implementation="impi", mpirun="mpiexec",
                cores=cores, **kw)


def fake_launcher(directory, banner, name="mpiexec"):
    """An executable ``directory/name`` whose ``--version`` prints ``banner``."""
    directory.mkdir(parents=True, exist_ok=True)
    fake = directory / name
    fake.write_text(f"#!/bin/sh\nprintf '%s\\n' '{banner}'\n")  # a builtin: PATH may be bare
    fake.chmod(0o755)
    return fake


HYDRA = "HYDRA build details:\n    Version: 4.1.2"
INTEL = "Intel(R) MPI Library for Linux* OS, Version 2021.10"


def test_find_mpirun_prefers_the_virtual_environment():
    assert find_mpirun() == MPIRUN
    with pytest.raises(LaunchError, match="no-such-mpirun"):
        find_mpirun("no-such-mpirun")


@pytest.mark.parametrize("banner, expected", [
    ("mpirun (Open MPI) 5.0.3", "openmpi"),
    (HYDRA, "mpich"),
    (INTEL, "impi"),
])
def test_detect_implementation(tmp_path, banner, expected):
    assert detect_implementation(str(fake_launcher(tmp_path, banner, "mpirun"))) == expected


@pytest.mark.mpi  # asks the installed mpirun its --version
def test_detect_implementation_of_the_installed_mpirun_and_of_strangers(tmp_path):
    assert detect_implementation(MPIRUN) == "openmpi"
    with pytest.raises(LaunchError, match="not the launcher of Open MPI, MPICH or Intel MPI"):
        detect_implementation("/bin/echo")
    with pytest.raises(LaunchError, match="cannot run"):
        detect_implementation(str(tmp_path / "missing"))


@pytest.mark.mpi  # asks the installed mpirun its --version
def test_find_launcher_asks_each_candidate(tmp_path, monkeypatch):
    """Every implementation's launcher is called mpiexec: the first candidate (its own
    prefix, then next to python, then PATH) whose --version names it wins."""
    home = tmp_path / "home"
    monkeypatch.setattr(mpirun_module, "MPI_HOME", home)
    intel = fake_launcher(tmp_path / "intel", INTEL)
    hydra = fake_launcher(tmp_path / "hydra", HYDRA)
    monkeypatch.setenv("PATH", f"{intel.parent}:{hydra.parent}")
    assert find_launcher("mpich") == str(hydra)
    assert find_launcher("impi") == str(intel)
    assert find_launcher("openmpi") == MPIRUN  # next to python
    own = fake_launcher(home / "mpich" / "bin", HYDRA)
    assert find_launcher("mpich") == str(own)


def test_a_missing_implementation_is_one_line_naming_its_install(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(mpirun_module, "MPI_HOME", tmp_path)
    monkeypatch.setenv("PATH", str(fake_launcher(tmp_path / "hydra", HYDRA).parent))
    install = f"pip install --prefix {tmp_path / 'impi'} impi-rt"
    with pytest.raises(LaunchError, match="Intel MPI is not installed") as e:
        find_launcher("impi")
    assert install in str(e.value) and "\n" not in str(e.value)
    assert main(["--mpi", "impi", "-n", "2", "--dry-run", "--", "prog"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and install in err


def test_plan_names_the_launchers_own_library(tmp_path):
    """The ranks load the libmpi installed with the launcher (MPI4PY_LIBMPI), not the first
    one mpi4py finds (the environment's Open MPI)."""
    hydra = fake_launcher(tmp_path / "mpich" / "bin", HYDRA)
    (tmp_path / "mpich" / "lib").mkdir()
    (tmp_path / "mpich" / "lib" / "libmpi.so.12").touch()
    p = plan(2, ["prog"], implementation="mpich", mpirun=str(hydra), cores=4)
    assert flags(p.argv, "-genv", "MPI4PY_LIBMPI", str(tmp_path / "mpich/lib/libmpi.so.12"),
                 *wrapper(hydra=True), "prog")
    ompi = fake_launcher(tmp_path / "ompi" / "bin", "mpirun (Open MPI) 5.0.3", "mpirun")
    (tmp_path / "ompi" / "lib64").mkdir()
    (tmp_path / "ompi" / "lib64" / "libmpi.so.40").touch()
    p = plan(2, ["prog"], mpirun=str(ompi), cores=4)  # implementation asked
    assert p.env["MPI4PY_LIBMPI"] == str(tmp_path / "ompi/lib64/libmpi.so.40")
    assert flags(p.argv, "-x", "MPI4PY_LIBMPI", *wrapper(), "prog")
    assert "MPI4PY_LIBMPI" not in mpich(2).env and "MPI4PY_LIBMPI" not in mpich(2).argv


def test_openmpi_one_thread_per_rank_binds_to_cores():
    p = openmpi(4, ["prog", "x"])
    assert p.argv[:3] == ["mpirun", "-np", "4"]
    assert flags(p.argv, "--bind-to", "core", "--map-by", "core")
    assert "--oversubscribe" not in p.argv
    assert flags(p.argv, "-x", "OMP_NUM_THREADS", "-x", "NUMBA_NUM_THREADS", *wrapper(),
                 "prog", "x")
    assert p.env["OMP_NUM_THREADS"] == p.env["NUMBA_NUM_THREADS"] == "1"
    # a session base of its own per job (Hydra's launchers keep no pid-named directories)
    assert flags(p.argv, "--prtemca", "prte_tmpdir_base", p.session_base)
    assert p.session_base != openmpi(4).session_base and mpich(4).session_base is None


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
                             "-genv", "NUMBA_NUM_THREADS", "1", *wrapper(hydra=True), "prog"]
    assert flags(mpich(2, threads=2).argv, "-bind-to", "core:2")
    assert flags(mpich(3, threads=2).argv, "-bind-to", "none")
    assert flags(mpich(8, hostfile=str(hosts), cores=1).argv, "-f", str(hosts),
                 "-bind-to", "core")
    assert mpich(2).env == {}


def test_impi_pins_with_its_own_variables():
    """Intel MPI ignores -bind-to; I_MPI_PIN_DOMAIN=omp gives each rank OMP_NUM_THREADS
    cores, I_MPI_PIN=0 leaves an oversubscribed node unpinned."""
    argv = impi(2, threads=2).argv
    assert argv[:3] == ["mpiexec", "-n", "2"] and "-bind-to" not in argv
    assert flags(argv, "-genv", "OMP_NUM_THREADS", "2", "-genv", "NUMBA_NUM_THREADS", "2")
    assert flags(argv, "-genv", "I_MPI_PIN_DOMAIN", "omp", "-genv", "I_MPI_PIN_CELL", "core")
    assert flags(impi(3, threads=2).argv, "-genv", "I_MPI_PIN", "0")
    assert impi(2).env == {}


def test_hydra_takes_an_openmpi_hostfile_as_a_host_list(tmp_path):
    """Hydra refuses Open MPI's 'host slots=N' lines; they become -hosts host:N,..."""
    hosts = tmp_path / "hosts"
    hosts.write_text("# two nodes\nnode1 slots=4\n\nnode2 slots=2 max_slots=8  # big\n")
    argv = mpich(6, hostfile=str(hosts)).argv
    assert flags(argv, "-hosts", "node1:4,node2:2") and "-f" not in argv
    # Intel MPI ignores ':N' in -hosts and fills the first node: -ppn, equal slots only
    with pytest.raises(LaunchError, match="same slots=N"):
        impi(6, hostfile=str(hosts))
    hosts.write_text("node1 slots=3\nnode2 slots=3\n")
    assert flags(impi(6, hostfile=str(hosts)).argv, "-hosts", "node1:3,node2:3", "-ppn", "3")
    hosts.write_text("# Hydra's own\nnode1:4\nnode2\n")
    assert flags(mpich(6, hostfile=str(hosts)).argv, "-f", str(hosts))


@pytest.mark.parametrize("compose", [mpich, impi])
def test_hydra_on_an_emulated_cluster(tmp_path, monkeypatch, compose):
    """The cluster's agent as an rsh-style launcher (HOST COMMAND...), callbacks to the
    host's bridge address, its nodes as a host list, TCP between them, no binding.
    (Composed here; tests/test_cluster.py runs jobs across emulated nodes under each.)"""
    monkeypatch.setattr(cluster, "STATE_ROOT", tmp_path)
    c = cluster.Cluster("t", nodes=2, rate="1gbit", slots=1)
    cluster.write_files(c)  # the files of cluster up, without its namespaces
    argv = compose(2, hostfile=str(c.state / "hostfile"), cores=64).argv
    assert flags(argv, "-launcher", "rsh", "-launcher-exec", str(c.state / "agent"),
                 "-iface", "t-br")
    assert flags(argv, "-hosts", "10.77.0.1:1,10.77.0.2:1")
    assert flags(argv, "-genv", "UCX_TLS", "tcp,self", "-genv", "FI_PROVIDER", "tcp",
                 "-genv", "I_MPI_FABRICS", "ofi")
    assert flags(argv, "-bind-to", "none") if compose is mpich else \
        flags(argv, "-genv", "I_MPI_PIN", "0")


def test_threads_appended_to_distgnn_train_once():
    assert openmpi(2, ["/venv/bin/distgnn-train", "--partitions=d"], threads=2).argv[-4:] == \
        ["/venv/bin/distgnn-train", "--partitions=d", "--threads", "2"]
    for given in (["--threads", "1"], ["--threads=1"]):
        assert openmpi(2, ["distgnn-train", "--partitions", "d", *given]).argv[-len(given):] \
            == given
    assert openmpi(2, ["./train.sh", "x"]).argv[-2:] == ["./train.sh", "x"]


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
                   {"OMP_NUM_THREADS": "2"}, 2)
    assert p.shell() == "OMP_NUM_THREADS=2 mpirun -np 2 python -c 'print('\"'\"'a b'\"'\"')'"


BANNERS = {"openmpi": "mpirun (Open MPI) 5.0.3", "mpich": HYDRA, "impi": INTEL}


@pytest.fixture
def fake_mpis(tmp_path):
    """``{mpi: (launcher, library)}``: a prefix of each MPI with a launcher that answers
    ``--version`` and a library beside it."""
    found = {}
    for mpi, impl in IMPLEMENTATIONS.items():
        launcher = fake_launcher(tmp_path / mpi / "bin", BANNERS[mpi], impl.launcher)
        library = tmp_path / mpi / "lib" / impl.libraries[0]
        library.parent.mkdir()
        library.touch()
        found[mpi] = str(launcher), str(library)
    return found


@pytest.fixture
def shared_environment(monkeypatch):
    """This Python's environment as if on storage every node shares (``sys.prefix``), so
    that a script's warnings do not depend on where the checkout is: a clone's environment
    under /tmp is on node-local storage, and the scripts rightly say so."""
    monkeypatch.setattr(sys, "prefix", "/shared/venv")


def script(fake_mpis, ranks=2, command=("prog",), mpi="openmpi", **kw):
    """The sbatch script of ``command`` under the fake ``mpi``."""
    return sbatch_script(ranks, list(command), implementation=mpi, mpirun=fake_mpis[mpi][0],
                         **kw)


def launch_line(text):
    """The script's line that starts the job (it ends with ``&``), the start's rank count
    (``$ranks``, set by a line ``ranks=P`` of a job of fixed size) written out."""
    ranks = next(line for line in text.splitlines() if line.startswith("ranks="))[6:]
    line = next(line for line in text.splitlines() if line.endswith(" &"))
    return line.replace('"$ranks"', ranks)


def test_sbatch_script(fake_mpis):
    s = script(fake_mpis, 8, ["distgnn-train", "--partitions", "a b"], threads_per_rank=4,
               nodes=4, time="00:30:00", partition="cpu", account="proj", job_name="gcn",
               env_setup="module load x; source ~/env/bin/activate")
    lines = s.splitlines()
    assert lines[:2] == ["#!/bin/bash", "# written by distgnn-launch --slurm"]
    for line in ("#SBATCH --ntasks=8", "#SBATCH --nodes=4", "#SBATCH --ntasks-per-node=2",
                 "#SBATCH --cpus-per-task=4", "#SBATCH --time=00:30:00",
                 "#SBATCH --partition=cpu", "#SBATCH --account=proj", "#SBATCH --job-name=gcn",
                 "#SBATCH --signal=B:USR1@120", "#SBATCH --open-mode=append",
                 "#SBATCH --no-requeue",  # it writes no checkpoints
                 "module load x; source ~/env/bin/activate", "set -euo pipefail",
                 "export OMP_NUM_THREADS=4", "export NUMBA_NUM_THREADS=4",
                 f"export MPI4PY_LIBMPI={fake_mpis['openmpi'][1]}"):
        assert line in lines
    # the environment first: a site's module and activate scripts are not written for set -u
    assert lines.index("module load x; source ~/env/bin/activate") < lines.index(
        "set -euo pipefail")
    assert launch_line(s).endswith("distgnn-train --partitions 'a b' --threads 4 &")
    assert "scontrol requeue" not in s
    plain = script(fake_mpis)
    for option in ("--nodes", "--ntasks-per-node", "--partition", "--account"):
        assert option not in plain


def test_sbatch_script_is_valid_bash(fake_mpis, tmp_path):
    for mpi in IMPLEMENTATIONS:
        for launcher in LAUNCHERS:
            path = tmp_path / f"{mpi}-{launcher}.sbatch"
            path.write_text(script(fake_mpis, 4, ["distgnn-train", "--partitions", "p",
                                                  "--checkpoint-dir", "ck"],
                                   mpi=mpi, slurm_launcher=launcher))
            proc = subprocess.run(["bash", "-n", str(path)], capture_output=True, text=True)
            assert proc.returncode == 0, proc.stderr


@pytest.mark.parametrize("mpi", list(IMPLEMENTATIONS))
def test_sbatch_mpirun_launcher_is_the_mpis_own(fake_mpis, mpi):
    """The default launcher: the MPI's own, with the options of a local job of the same
    sizes (inside an allocation it reads the nodes from SLURM), and its library for
    mpi4py in every rank."""
    launcher, library = fake_mpis[mpi]
    s = script(fake_mpis, 4, ["prog"], mpi=mpi, threads_per_rank=2, nodes=2)
    env = {"OMP_NUM_THREADS": "2", "NUMBA_NUM_THREADS": "2", "MPI4PY_LIBMPI": library}
    assert launch_line(s) == shlex.join([launcher, *launcher_options(mpi, 4, 2, env),
                                         "prog"]) + " &"
    assert f"export MPI4PY_LIBMPI={library}" in s.splitlines()
    assert ("OMPI_ALLOW_RUN_AS_ROOT=1" in s) is (mpi == "openmpi")  # checked at run time
    assert "srun" not in s


@pytest.mark.parametrize("mpi, plugin", [("openmpi", "pmix"), ("mpich", "pmi2"),
                                         ("impi", "pmi2")])
def test_sbatch_srun_launcher(fake_mpis, mpi, plugin):
    """srun starts the ranks through the MPI's plugin (PMIx for Open MPI 5, PMI-2 for
    MPICH's wheel), each bound to its cores; mpi4py still loads the chosen library."""
    s = script(fake_mpis, 4, ["prog"], mpi=mpi, threads_per_rank=2, slurm_launcher="srun")
    assert launch_line(s) == (f"srun --mpi={plugin} --kill-on-bad-exit=1 --cpus-per-task=2 "
                              "--cpu-bind=cores prog &")
    assert f"export MPI4PY_LIBMPI={fake_mpis[mpi][1]}" in s.splitlines()
    assert fake_mpis[mpi][0] not in s and "OMPI_ALLOW_RUN_AS_ROOT" not in s
    assert launch_line(script(fake_mpis, mpi=mpi, slurm_launcher="srun", srun_mpi="pmix_v4")
                       ).startswith("srun --mpi=pmix_v4 ")


def test_sbatch_environment_is_this_python_after_the_sites_lines(fake_mpis):
    """The environment distgnn runs in is activated on the nodes, then --env-setup's lines
    run (a module load, whose MPI then comes first on PATH), unless activate=False; the
    ranks' library stays named either way."""
    activate = Path(sys.prefix) / "bin" / "activate"
    activation = (f"source {activate}" if activate.is_file() else
                  f'export PATH={Path(sys.prefix) / "bin"}:"$PATH"')
    library = f"export MPI4PY_LIBMPI={fake_mpis['openmpi'][1]}"
    assert activation in script(fake_mpis).splitlines()
    lines = script(fake_mpis, env_setup="module load openmpi").splitlines()
    assert lines.index(activation) < lines.index("module load openmpi") < \
        lines.index("set -euo pipefail") < lines.index(library)
    lines = script(fake_mpis, env_setup="module load openmpi", activate=False).splitlines()
    assert "module load openmpi" in lines and library in lines
    assert not any(line.startswith(("source ", "export PATH")) for line in lines)


def test_sbatch_memory_per_node(fake_mpis):
    assert "#SBATCH --mem=64G" in script(fake_mpis, mem="64G").splitlines()
    assert "#SBATCH --mem=0" in script(fake_mpis, mem="0").splitlines()
    assert "--mem" not in script(fake_mpis)
    for bad in ("64 GB", "lots", "-1", "1.5G"):
        with pytest.raises(LaunchError, match=re.escape(f"--mem {bad!r} is not a SLURM memory")):
            script(fake_mpis, mem=bad)


@pytest.mark.parametrize("flags, activate, warned", [
    (["--partitions", "/tmp/p", "--checkpoint-dir", "/dev/shm/ck"], False,
     ["--partitions /tmp/p is on node-local storage (/tmp)",
      "--checkpoint-dir /dev/shm/ck is on node-local storage (/dev/shm)"]),
    (["--partitions", "runs/p", "--resume", "/var/tmp/ck"], False,
     ["--partitions runs/p is a relative path", "--resume /var/tmp/ck is on node-local"]),
    (["--partitions", "/shared/p", "--checkpoint-dir", "/shared/ck"], False, []),
    (["--partitions", "/shared/p"], True, []),  # the environment: shared
])
def test_sbatch_warns_of_node_local_paths(fake_mpis, shared_environment, flags, activate,
                                          warned):
    """One line for each directory a job on several nodes must share but that is on a
    node's own storage (/tmp, /var/tmp, /dev/shm, /run, $TMPDIR) or relative."""
    said = []
    script(fake_mpis, command=["distgnn-train", *flags], activate=activate, warn=said.append)
    assert len(said) == len(warned) and all(w in line for w, line in zip(warned, said)), said


def test_sbatch_warns_of_an_environment_on_node_local_storage(fake_mpis, monkeypatch):
    monkeypatch.setattr(sys, "prefix", "/tmp/venv")
    said = []
    script(fake_mpis, command=["./train.sh"], warn=said.append)
    assert said == ["the Python environment /tmp/venv is on node-local storage (/tmp): each "
                    "node sees its own, so the nodes do not share it; use a shared filesystem"]
    said.clear()
    script(fake_mpis, command=["./train.sh"], activate=False, warn=said.append)
    assert said == []


@pytest.mark.parametrize("launcher", LAUNCHERS)
def test_sbatch_for_an_mpi_not_installed_here(tmp_path, monkeypatch, shared_environment,
                                              launcher):
    """MPICH named but not installed where the script is written: the script runs its
    mpiexec from the nodes' PATH (as --env-setup leaves it), finds its library there (or
    ends the job, naming what the nodes need), and says so in its comments; writing it
    warns once."""
    monkeypatch.setattr(mpirun_module, "MPI_HOME", tmp_path / "none")
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    nodes = tmp_path / "mpich" / "bin"  # where the nodes' module puts MPICH
    said = []

    def head(**kw):
        """The script's lines up to the launch, then the library they found."""
        s = sbatch_script(2, ["prog"], implementation="mpich", slurm_launcher=launcher,
                          warn=said.append, **kw)
        path = tmp_path / f"head{len(said)}.sh"
        path.write_text(s[:s.index('stop="" launcher=""')] + 'echo "${MPI4PY_LIBMPI:-}"\n')
        return s, path

    s, module = head(env_setup=f'export PATH="{nodes}:$PATH"')
    assert said == ["MPICH is not installed here: the script runs mpiexec from the nodes' "
                    "PATH (its comments say what the nodes need)"]
    assert "# The nodes need MPICH's mpiexec on PATH (--env-setup, e.g. 'module load ...')," \
        in s.splitlines()
    assert launch_line(s).startswith("mpiexec -n 2 " if launcher == "mpirun" else "srun ")
    _, bare = head(activate=False)
    fake_launcher(nodes, HYDRA)
    (nodes.parent / "lib").mkdir()
    (nodes.parent / "lib" / "libmpi.so.12").touch()
    tools = tmp_path / "tools"  # what the lines run, and no MPI of this machine's
    tools.mkdir()
    for tool in ("dirname", "readlink", "hostname"):
        (tools / tool).symlink_to(shutil.which(tool, path="/usr/bin:/bin"))
    for path, found in ((module, True), (bare, False)):
        proc = subprocess.run([shutil.which("bash", path="/usr/bin:/bin"), str(path)],
                              capture_output=True, text=True, env={"PATH": str(tools)})
        if found:
            assert proc.returncode == 0, proc.stderr
            assert Path(proc.stdout.strip()).resolve() == nodes.parent / "lib/libmpi.so.12"
        elif launcher == "mpirun":
            assert proc.returncode == 2 and "no mpiexec on PATH on" in proc.stderr
        else:  # srun needs no launcher: mpi4py loads its own default, with a warning
            assert proc.returncode == 0 and "mpi4py loads its own default" in proc.stderr


def test_sbatch_finds_the_library_of_a_launcher_named_without_a_path(fake_mpis, capsys,
                                                                     shared_environment):
    """--mpirun mpirun with --slurm: the nodes' mpirun (after --env-setup), and the library
    beside it, forwarded to every rank (-x)."""
    out = Path(fake_mpis["openmpi"][0]).parents[2] / "job.sbatch"
    assert main(["-n", "2", "--slurm", str(out), "--mpi", "openmpi", "--mpirun", "mpirun",
                 "--env-setup", "module load openmpi", "--", "prog"]) == 0
    s = out.read_text()
    assert launch_line(s).startswith("mpirun -np 2 ") and flags(launch_line(s).split(),
                                                               "-x", "MPI4PY_LIBMPI")
    assert "if mpi_launcher=$(command -v mpirun); then" in s.splitlines()
    assert capsys.readouterr().err == ""


@pytest.mark.parametrize("nodes, per_node, expected", [
    (2, None, (2, 4)), (None, 4, (2, 4)), (2, 4, (2, 4)), (8, None, (8, 1)),
    (None, None, (None, None))])
def test_sbatch_placement(fake_mpis, nodes, per_node, expected):
    lines = script(fake_mpis, 8, nodes=nodes, ranks_per_node=per_node).splitlines()
    assert placement(8, nodes, per_node) == expected
    for option, value in zip(("nodes", "ntasks-per-node"), expected):
        assert (f"#SBATCH --{option}={value}" in lines) is (value is not None)


@pytest.mark.parametrize("command, requeue, expected", [
    # a distgnn-train that checkpoints: requeued, and resumes from where it checkpoints
    (["--checkpoint-dir", "ck"], None,
     ["--checkpoint-dir", "ck", "--threads", "1", "--resume-if-present", "ck"]),
    (["--checkpoint-dir=ck"], True,
     ["--checkpoint-dir=ck", "--threads", "1", "--resume-if-present", "ck"]),
    (["--resume", "ck"], None, ["--resume", "ck", "--threads", "1"]),
    (["--resume-if-present", "ck", "--checkpoint-dir", "ck/"], None,
     ["--resume-if-present", "ck", "--checkpoint-dir", "ck/", "--threads", "1"]),
    # not requeued: asked not to, or nothing to resume from
    (["--checkpoint-dir", "ck"], False, ["--checkpoint-dir", "ck", "--threads", "1"]),
    ([], None, ["--threads", "1"]),
])
def test_sbatch_requeues_a_run_that_checkpoints(fake_mpis, command, requeue, expected):
    s = script(fake_mpis, command=["distgnn-train", "--partitions", "p", *command],
               requeue=requeue)
    assert launch_line(s).endswith(shlex.join(["p", *expected]) + " &")
    requeued = "--resume" in shlex.join(expected) and requeue is not False
    assert ("#SBATCH --requeue" in s.splitlines()) is requeued
    assert ('    scontrol requeue "$SLURM_JOB_ID"' in s.splitlines()) is requeued
    assert ("#SBATCH --no-requeue" in s.splitlines()) is not requeued


def test_sbatch_requeues_another_command_only_when_asked(fake_mpis):
    assert "scontrol requeue" not in script(fake_mpis, command=["./train.sh"])
    assert "scontrol requeue" in script(fake_mpis, command=["./train.sh"], requeue=True)


@pytest.mark.parametrize("kw, message", [
    (dict(ranks=0), "ranks must be >= 1"),
    (dict(command=[]), "no command"),
    (dict(nodes=0), "--nodes must be from 1 to the 2 ranks, got 0"),
    (dict(nodes=3), "--nodes must be from 1 to the 2 ranks, got 3"),
    (dict(job_name="two words"), "--job-name"),
    (dict(partition="cpu\nrm -rf /"), "--partition"),
    (dict(stop_before=-1), "--stop-before must be from 0 to 65535 seconds"),
    (dict(stop_before=65536, time="2-00"), "--stop-before must be from 0 to 65535 seconds"),
    (dict(stop_before=120, time="2"), "--stop-before 120 s must be shorter than --time 2 "
                                      "(120 s)"),
    (dict(time="garbage"), "--time 'garbage' is not a SLURM time limit"),
    (dict(ranks=8, nodes=3), "8 ranks do not divide among --nodes 3: every node runs the same "
                             "number of ranks; give -n a multiple of --nodes"),
    (dict(ranks=8, ranks_per_node=3), "8 ranks do not fill nodes of --ranks-per-node 3"),
    (dict(ranks=8, nodes=2, ranks_per_node=2), "--nodes 2 x --ranks-per-node 2 is 4 ranks, "
                                               "not the 8 of -n"),
    (dict(ranks_per_node=0), "--ranks-per-node must be from 1 to the 2 ranks, got 0"),
    (dict(slurm_launcher="mpiexec"), "--slurm-launcher must be one of mpirun, srun"),
    (dict(srun_mpi="pmix"), "--srun-mpi applies to --slurm-launcher srun"),
    (dict(slurm_launcher="srun", srun_mpi="pmix --x"), "--srun-mpi must be the name of a "
                                                       "SLURM MPI plugin"),
    (dict(env_setup="a\0b"), "--env-setup must be shell text without NUL characters"),
    (dict(command=["distgnn-train", "--partitions", "p"], requeue=True),
     "--requeue: distgnn-train writes no checkpoints, so a requeued job would start again "
     "from epoch 0"),
    (dict(command=["distgnn-train", "--partitions", "p", "--resume", "old",
                   "--checkpoint-dir", "new"]),
     "a requeued job would resume from old again, not from the newer checkpoints in "
     "--checkpoint-dir new"),
])
def test_sbatch_script_rejects_bad_input(fake_mpis, kw, message):
    with pytest.raises(LaunchError, match=re.escape(message)):
        script(fake_mpis, **{"ranks": 2, "command": ["prog"], **kw})


@pytest.mark.parametrize("time, seconds", [
    ("90", 5400), ("90:30", 5430), ("1:00:00", 3600), ("01:02:03", 3723), ("2-12", 216000),
    ("2-12:30", 217800), ("2-12:30:15", 217815), ("unlimited", None), ("INFINITE", None),
    ("0", None),
])
def test_time_limit_takes_slurms_formats(time, seconds):
    assert time_limit_s(time) == seconds


@pytest.mark.parametrize("time", ["garbage", "", "1:2:3:4", "1-2-3", "-5", "1h", "１0", "1.5",
                                  "99999999-00"])
def test_time_limit_refuses_what_sbatch_would(time):
    with pytest.raises(LaunchError, match="--time"):
        time_limit_s(time)


def test_sbatch_signal_fits_the_time_limit(fake_mpis):
    """--signal=B:USR1@S (to the batch shell, which passes it on): S at most 65535 and
    shorter than --time; none at 0 or no limit."""
    lines = script(fake_mpis, time="2-00", stop_before=65535).splitlines()
    assert "#SBATCH --signal=B:USR1@65535" in lines and "#SBATCH --time=2-00" in lines
    assert "#SBATCH --signal=B:USR1@119" in script(fake_mpis, time="2", stop_before=119)
    assert "--signal" not in script(fake_mpis, time="1", stop_before=0)
    assert "#SBATCH --signal=B:USR1@600" in script(fake_mpis, time="UNLIMITED",
                                                   stop_before=600)


SLEEPER = """
import os, signal, sys, time
signal.signal(signal.SIGUSR1, lambda *a: sys.exit(128 + signal.SIGUSR1))
open(sys.argv[1], "w").close()
time.sleep(60)
"""


@pytest.mark.parametrize("sig, requeued", [(signal.SIGUSR1, True), (signal.SIGTERM, False)])
def test_sbatch_script_passes_the_signal_on_and_requeues(fake_mpis, tmp_path, sig, requeued):
    """The script run by bash as SLURM runs it, with srun and scontrol replaced by fakes:
    SIGUSR1 (the signal before the time limit) reaches the ranks, and once they have
    stopped the job is requeued; SIGTERM (scancel) reaches them too but requeues nothing."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name, body in (("srun", 'while [ "${1#--}" != "$1" ]; do shift; done; exec "$@"'),
                       ("scontrol", f'echo "$@" >> {tmp_path}/scontrol')):
        (bin_dir / name).write_text(f"#!/bin/sh\n{body}\n")
        (bin_dir / name).chmod(0o755)
    started = tmp_path / "started"
    job = tmp_path / "job.sbatch"
    job.write_text(script(fake_mpis, 1, [sys.executable, "-c", SLEEPER, str(started)],
                          slurm_launcher="srun", env_setup="", requeue=True))
    proc = subprocess.Popen(["bash", str(job)], stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}",
                                 "SLURM_JOB_ID": "7"})
    deadline = time.monotonic() + 30
    while not started.exists():
        assert proc.poll() is None and time.monotonic() < deadline
        time.sleep(0.01)
    proc.send_signal(sig)
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 128 + signal.SIGUSR1, err  # the ranks' status
    assert ((tmp_path / "scontrol").exists() and
            (tmp_path / "scontrol").read_text() == "requeue 7\n") is requeued
    assert ("stopped before the time limit (status 138); requeueing" in err) is requeued


def test_cli_refuses_a_hostfile_that_is_not_text(tmp_path, capsys):
    hosts = tmp_path / "hosts"
    hosts.write_bytes(b"node\xff1 slots=2\n")
    for mpi in ("openmpi", "mpich"):
        assert main(["--mpi", mpi, "--mpirun", "mpirun", "-n", "2", "--dry-run", "--hostfile",
                     str(hosts), "--", "prog"]) == 2
        assert capsys.readouterr().err == (f"distgnn-launch: error: hostfile {hosts} is not "
                                           "text: byte 4 is not UTF-8\n")
    assert main(["-n", "2", "--dry-run", "--hostfile", str(tmp_path), "--", "prog"]) == 2
    assert f"hostfile {tmp_path} is not a file" in capsys.readouterr().err


@pytest.mark.mpi  # asks the installed mpirun its --version
def test_cli_dry_run_prints_the_plan(capsys):
    assert main(["-n", "2", "--threads-per-rank", "1", "--dry-run", "--",
                 "distgnn-train", "--partitions", "d"]) == 0
    out = capsys.readouterr().out.strip()
    assert out.startswith("OMP_NUM_THREADS=1 NUMBA_NUM_THREADS=1 ")
    assert f"{MPIRUN} -np 2 " in out
    assert out.endswith("distgnn-train --partitions d --threads 1")


def test_cli_slurm_writes_the_script_atomically(fake_mpis, tmp_path, capsys):
    out = tmp_path / "job.sbatch"
    job = ["distgnn-train", "--partitions", "d"]
    out.write_text(script(fake_mpis, 2, job))  # an earlier script of ours: replaced
    mpich = fake_mpis["mpich"][0]
    assert main(["-n", "4", "--threads-per-rank", "2", "--slurm", str(out), "--partition",
                 "cpu", "--nodes", "2", "--mpi", "mpich", "--mpirun", mpich,
                 "--slurm-launcher", "srun", "--srun-mpi", "pmix", "--env-setup", "true",
                 "--no-requeue", "--", *job]) == 0
    assert out.read_text() == script(fake_mpis, 4, job, mpi="mpich", threads_per_rank=2,
                                     partition="cpu", nodes=2, slurm_launcher="srun",
                                     srun_mpi="pmix", env_setup="true", requeue=False)
    assert sorted(os.listdir(tmp_path)) == ["impi", "job.sbatch", "mpich", "openmpi"]
    assert str(out) in capsys.readouterr().out


@pytest.mark.parametrize("args, message", [
    (["-n", "0", "--dry-run", "--", "prog"], "ranks must be >= 1"),
    (["-n", "2", "--dry-run"], "no command"),
    (["-n", "2", "--dry-run", "--hostfile", "/no/such/hosts", "--", "prog"],
     "hostfile /no/such/hosts does not exist"),
    (["-n", "2", "--slurm", "x", "--hostfile", "h", "--", "prog"], "--hostfile"),
    (["-n", "2", "--dry-run", "--mpirun", "/bin/true", "--", "prog"],
     "not the launcher of Open MPI, MPICH or Intel MPI"),
    (["-n", "2", "--timeout", "0", "--", "prog"],
     "--timeout must be a finite number of seconds > 0"),
    (["-n", "2", "--start-timeout", "-1", "--", "prog"],
     "--start-timeout must be a finite number of seconds >= 0, got -1"),
    (["-n", "2", "--stop-grace", "nan", "--", "prog"],
     "--stop-grace must be a finite number of seconds >= 0, got nan"),
    (["-n", "2", "--slurm", "x", "--start-timeout", "5", "--", "prog"],
     "--start-timeout does not apply to --slurm"),
    (["-n", "2", "--mem", "4G", "--", "prog"], "--mem applies only to the sbatch script"),
    (["-n", "2", "--no-activate", "--", "prog"], "--activate applies only"),
    (["--dry-run", "--", "prog"], "--ranks"),
    (["-n", "2", "--slurm", "x", "--timeout", "60", "--", "prog"],
     "--timeout does not apply to --slurm (give the job's --time)"),
    (["-n", "2", "--slurm", "x", "--stop-grace", "5", "--", "prog"], "--stop-grace"),
    (["-n", "4", "--slurm", "x", "--nodes", "3", "--", "prog"],
     "4 ranks do not divide among --nodes 3"),
    (["-n", "2", "--dry-run", "--slurm-launcher", "srun", "--", "prog"],
     "--slurm-launcher applies only to the sbatch script of --slurm"),
    (["-n", "2", "--requeue", "--", "prog"], "--requeue applies only"),
    (["-n", "2", "--slurm", "x", "--srun-mpi", "pmix", "--", "prog"],
     "--srun-mpi applies to --slurm-launcher srun"),
    (["-n", "2", "--slurm", "x", "--gpus-per-node", "1", "--", "prog"], "--gpus-per-node"),
    (["-n", "2", "--dry-run", "--time", "10:00", "--", "prog"],
     "--time applies only to the sbatch script of --slurm"),
    (["-n", "2", "--stop-before", "10", "--", "prog"], "--stop-before applies only"),
    (["-n", "2", "--dry-run", "--gpus-per-node", "²", "--", "prog"],
     "--gpus-per-node must be a count or auto, got '²'"),
    (["-n", "2", "--slurm", "x", "--time", "soon", "--", "prog"], "--time 'soon'"),
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
    f.write(f"{MPI.COMM_WORLD.Get_size()} {os.environ['OMP_NUM_THREADS']} "
            f"{MPI.Get_library_version().split()[0]}")
"""
LIBRARY = {"openmpi": "Open", "mpich": "MPICH", "impi": "Intel(R)"}
MPIS = [installed(mpi) for mpi in LIBRARY]


@pytest.mark.parametrize("mpi", MPIS)
def test_real_run_starts_every_rank_with_its_thread_count(tmp_path, mpi):
    """One job of 2 ranks (not 2 singletons) under each MPI, its library in every rank."""
    assert main(["--mpi", mpi, "-n", "2", "--timeout", "60", "--",
                 sys.executable, "-c", RANK_SCRIPT, str(tmp_path)]) == 0
    assert {f.name: f.read_text() for f in tmp_path.iterdir()} == \
        {f"rank{r}": f"2 1 {LIBRARY[mpi]}" for r in range(2)}


@pytest.mark.parametrize("mpi", MPIS)
def test_timeout_stops_the_ranks(tmp_path, mpi):
    sleeper = ("import os, sys, time\n"
               "open(os.path.join(sys.argv[1], str(os.getpid())), 'w').close()\n"
               "time.sleep(60)")
    job = plan(2, [sys.executable, "-c", sleeper, str(tmp_path)], implementation=mpi)
    start = time.monotonic()
    with pytest.raises(LaunchError, match="did not finish within 3 s"):
        run(job, timeout=3)
    assert time.monotonic() - start < 15
    pids = [int(f.name) for f in tmp_path.iterdir()]
    assert len(pids) == 2
    assert not any(map(running, pids))


@pytest.mark.mpi
def test_a_session_left_by_a_killed_mpirun_does_not_stop_the_next_job(tmp_path, monkeypatch):
    """Open MPI keeps a job's session at ``<temporary directory>/ompi.<mpirun's pid>``; a
    killed mpirun leaves it behind, and the mpirun that later gets the same pid exits 213.
    Each planned job has a session base of its own, removed once the job ended."""
    env = {**os.environ, "TMPDIR": str(tmp_path), **(ROOT_ENV if os.geteuid() == 0 else {})}
    killed = subprocess.Popen([MPIRUN, "-np", "1", "sleep", "60"], env=env,
                              start_new_session=True, stderr=subprocess.DEVNULL)
    left = tmp_path / f"ompi.{killed.pid}"
    deadline = time.monotonic() + 60
    while not list(left.glob("pmix*")) and time.monotonic() < deadline:
        time.sleep(0.05)
    # mpirun, then its rank, as a crash ends them: mpirun first, for it cleans up its
    # session when it outlives its rank
    for pid in sorted(job_module.job_pids(killed.pid), key=lambda pid: pid != killed.pid):
        os.kill(pid, signal.SIGKILL)
    killed.wait()
    assert list(left.glob("pmix*")), "mpirun wrote no session directory"
    # the same session left for each pid the next processes may get (the pids wrap to 300)
    pid_max = int(Path("/proc/sys/kernel/pid_max").read_text())
    last = int(Path("/proc/sys/kernel/ns_last_pid").read_text())
    for i in range(1, 3000):
        pid = last + i if last + i < pid_max else 300 + last + i - pid_max
        copy = tmp_path / f"ompi.{pid}"
        if not copy.exists():
            shutil.copytree(left, copy)
            for f in list(copy.iterdir()):
                f.rename(copy / f.name.replace(str(killed.pid), str(pid)))
    plain = subprocess.run([MPIRUN, "-np", "1", "true"], env=env, capture_output=True,
                           text=True, timeout=60)
    assert plain.returncode == 213 and "listener thread failed" in plain.stderr, plain.stderr
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    job = plan(1, [sys.executable, "-c", "pass"])
    assert Path(job.session_base).parent == tmp_path
    assert run(job, timeout=60) == 0
    assert not Path(job.session_base).exists()


def running(pid):
    """Whether ``pid`` exists and is not a zombie (dead ranks wait for init to reap them)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def test_a_launcher_that_starts_no_rank_is_an_error(capfd):
    """Every rank says it started (launch.rank); a launcher that exits 0 before all of
    them did ran no job, one that fails before any did could not start it."""
    for launcher, message in [("/bin/true", "/bin/true exited 0 having started 0 of the 2 "
                                            "ranks: the job did not run"),
                              ("/bin/false", "/bin/false exited with status 1 before any "
                                             "rank started")]:
        job = plan(2, ["prog"], implementation="openmpi", mpirun=launcher)
        with pytest.raises(LaunchError, match=re.escape(message)):
            run(job)
    one = [sys.executable, *RANK_WRAPPER, "0", "true"]  # a "launcher" that starts one rank
    with pytest.raises(LaunchError, match="started 1 of the 2 ranks"):
        run(LaunchPlan(one, {}, 2))
    assert run(LaunchPlan(one, {}, 1)) == 0
    assert capfd.readouterr().err == ""  # the rank's STARTED line removed


def test_stderr_copy_removes_started_lines_cut_anywhere(capfdbinary):
    """What the launcher writes comes out as written, less the STARTED lines, wherever the
    pipe cuts them (here within, between and across reads)."""
    pieces = [b"epoch 1", STARTED[:5], STARTED[5:] + b" done\n" + STARTED, b"\x1eraw\n",
              STARTED[:-1], STARTED[-1:] + b"last \x1edist"]
    read, write = os.pipe()
    with os.fdopen(read, "rb") as stream:
        copy = StderrCopy(stream)
        copy.start()
        for piece in pieces:
            os.write(write, piece)
            time.sleep(0.02)
        os.close(write)
        copy.join(timeout=10)
    assert copy.started == 3
    assert capfdbinary.readouterr().err == b"epoch 1 done\n\x1eraw\nlast \x1edist"


def test_stderr_copy_drops_open_mpis_setpgid_race_warning(capfdbinary):
    """Open MPI's warning that ssh exec'd before it could get its own process group (seen
    on a CI machine before a 'could not resolve' line) does not reach the user."""
    read, write = os.pipe()
    with os.fdopen(read, "rb") as stream:
        copy = StderrCopy(stream)
        copy.start()
        os.write(write, b"[vm:18280] plm:ssh: Warning: setpgid(18284,18284) failed in parent "
                        b"with errno=Permission denied(13)\nssh: Could not resolve hostname "
                        b"nosuch.invalid: Name or service not known\n")
        os.close(write)
        copy.join(timeout=10)
    assert capfdbinary.readouterr().err == (b"ssh: Could not resolve hostname nosuch.invalid: "
                                            b"Name or service not known\n")
    assert list(copy.unreachable) == ["nosuch.invalid"]


def test_stderr_copy_notes_unreachable_nodes_and_the_checkpoint_of_a_stop(capfdbinary):
    read, write = os.pipe()
    with os.fdopen(read, "rb") as stream:
        copy = StderrCopy(stream)
        copy.start()
        os.write(write, b"ssh: connect to host node7 port 22: Connection timed out\n"
                        b"ssh: Could not resolve hostname nosuch.invalid: Name or service not "
                        b"known\ndistgnn cluster agent: node node1 unreachable for 3 s; "
                        b"session closed\ndistgnn-train: error: SIGUSR1 received: stopped "
                        b"after epoch 12; checkpoint runs/my ck/epoch-000012; continue with "
                        b"--resume runs/my ck\n")
        os.close(write)
        copy.join(timeout=10)
    assert list(copy.unreachable) == ["node7", "nosuch.invalid", "node1"]
    assert copy.unreachable["node7"] == "ssh: connect to host node7 port 22: Connection timed out"
    assert copy.checkpoint == (12, "runs/my ck/epoch-000012", "runs/my ck")
    assert capfdbinary.readouterr().err.count(b"\n") == 4  # passed on as it came


# A rank of the fake jobs below (run by the rank wrapper as its own launcher): it says that
# it is ready, then answers SIGUSR1 as distgnn-train does ("checkpoints"), or not ("deaf")
FAKE_RANK = """
import signal, sys, time
ready, mode = sys.argv[1], sys.argv[2]
def stop(signum, frame):
    if mode == "checkpoints":
        print("distgnn-train: error: SIGUSR1 received: stopped after epoch 3; checkpoint "
              "ck/epoch-000003; continue with --resume ck", file=sys.stderr, flush=True)
        sys.exit(128 + signum)
signal.signal(signal.SIGUSR1, stop)
open(ready, "w").close()
time.sleep(60)
"""
TRAIN = ["distgnn-train", "--dataset", "d.npz", "--checkpoint-dir", "ck"]
RELAUNCH = ["distgnn-launch", "-n", "1"]


def fake_job(tmp_path, mode, command=TRAIN):
    ready = tmp_path / "ready"
    return ready, LaunchPlan([sys.executable, *RANK_WRAPPER, "0", sys.executable, "-c",
                              FAKE_RANK, str(ready), mode], {}, 1, list(command))


def signal_when(ready, *signals):
    """Send this process ``signals`` (0.2 s apart) once ``ready`` exists (run() handles
    them meanwhile)."""
    def send():
        deadline = time.monotonic() + 30
        while not ready.exists() and time.monotonic() < deadline:
            time.sleep(0.01)
        for s in signals:
            os.kill(os.getpid(), s)
            time.sleep(0.2)
    thread = threading.Thread(target=send, daemon=True)
    thread.start()
    return thread


CONTINUE = ("the ranks wrote checkpoint ck/epoch-000003 (after epoch 3); continue with: "
            "distgnn-launch -n 1 -- distgnn-train --dataset d.npz --checkpoint-dir ck "
            "--resume ck")


@pytest.mark.parametrize("signals, mode, grace, status, says", [
    ([signal.SIGINT], "checkpoints", 30, 130, f"stopped on Ctrl-C: {CONTINUE}"),
    ([signal.SIGUSR1], "checkpoints", 30, 138, f"stopped on SIGUSR1: {CONTINUE}"),
    ([signal.SIGTERM], "checkpoints", 30, 138, f"stopped on SIGTERM: {CONTINUE}"),
    ([signal.SIGHUP], "checkpoints", 30, 138, f"stopped on SIGHUP: {CONTINUE}"),
    ([signal.SIGINT, signal.SIGINT], "deaf", 30, 130,
     "stopped on Ctrl-C (a second Ctrl-C ended the ranks at once): the ranks reported no "
     "checkpoint"),
    ([signal.SIGUSR1], "deaf", 1, 128 + signal.SIGUSR1,
     "stopped on SIGUSR1 (the ranks did not end within --stop-grace 1 s and were killed): "
     "the ranks reported no checkpoint"),
], ids=["ctrl-c", "sigusr1", "sigterm", "sighup", "ctrl-c-twice", "grace-over"])
def test_stop_signals_reach_the_ranks_and_the_report_says_how_to_continue(
        tmp_path, signals, mode, grace, status, says):
    """SIGTERM, SIGUSR1, Ctrl-C and SIGHUP (a closed terminal) to the launcher reach every
    rank as SIGUSR1 (a fake launcher here: the rank itself), the launcher waits for them,
    then says what stopped the job, the checkpoint they wrote and the command that
    continues from it."""
    ready, job = fake_job(tmp_path, mode)
    sender = signal_when(ready, *signals)
    start = time.monotonic()
    with pytest.raises(job_module.JobStopped) as e:
        run(job, stop_grace=grace, relaunch=RELAUNCH)
    sender.join()
    assert str(e.value) == says and e.value.exit_status == status
    assert time.monotonic() - start < 20


@pytest.mark.parametrize("command, then", [
    (TRAIN, TRAIN + ["--resume", "ck"]),
    # resumes of another directory give way to the one the checkpoint is in
    (TRAIN + ["--resume", "old"], TRAIN + ["--resume", "ck"]),
    (TRAIN + ["--resume-if-present=old"], TRAIN + ["--resume", "ck"]),
    # the same command continues
    (["distgnn-train", "--resume-if-present", "ck"], ["distgnn-train", "--resume-if-present",
                                                      "ck"]),
])
def test_timeout_reports_the_checkpoint_and_the_command_that_continues(tmp_path, command, then):
    ready, job = fake_job(tmp_path, "checkpoints", command)
    with pytest.raises(job_module.JobStopped) as e:
        run(job, timeout=2, relaunch=RELAUNCH)
    assert e.value.exit_status == 2
    assert str(e.value) == (f"{sys.executable} did not finish within 2 s; stopped it and its "
                            "ranks: the ranks wrote checkpoint ck/epoch-000003 (after epoch 3); "
                            f"continue with: {shlex.join([*RELAUNCH, '--', *then])}")
    ready, job = fake_job(tmp_path, "checkpoints", ["./train.sh"])  # not distgnn-train's flags
    with pytest.raises(job_module.JobStopped, match=r"continue with --resume ck$"):
        run(job, timeout=2, relaunch=RELAUNCH)


SLEEPING_LAUNCHER = """
import subprocess, sys, time
# a child of its own process group, as prterun starts ranks and remote shells, and one of
# its own session, as Hydra starts remote shells
children = [subprocess.Popen(["sleep", "300"], process_group=0),
            subprocess.Popen(["sleep", "300"], start_new_session=True)]
open(sys.argv[1], "w").write(" ".join(str(child.pid) for child in children))
print(sys.argv[2], file=sys.stderr, flush=True)
time.sleep(300)
"""


@pytest.mark.parametrize("said, start_timeout, message", [
    ("launching", 3, "python3 started 0 of the 2 ranks within 3 s (--start-timeout); stopped "
                     "the job"),
    ("ssh: connect to host node7 port 22: Connection timed out", 60,
     "python3 could not reach node7 (ssh: connect to host node7 port 22: Connection timed "
     "out); 0 of the 2 ranks started; stopped the job"),
])
def test_a_job_that_cannot_start_ends_naming_why(tmp_path, capfd, said, start_timeout,
                                                 message):
    """Ranks that have not all started within the start-up timeout, or a remote shell
    that cannot reach a node, end the job at once: one line, and nothing of the job left
    running (a child in a process group or a session of its own included)."""
    job = LaunchPlan([sys.executable, "-c", SLEEPING_LAUNCHER, str(tmp_path / "child"), said],
                     {}, 2)
    start = time.monotonic()
    with pytest.raises(LaunchError) as e:
        run(job, start_timeout=start_timeout)
    assert time.monotonic() - start < min(start_timeout, 10) + 5
    assert str(e.value).replace(Path(sys.executable).name, "python3") == message
    child = tmp_path / "child"  # absent where a loaded machine stopped the job before it
    assert not child.exists() or not any(map(running, map(int, child.read_text().split())))


def test_the_launcher_dies_with_distgnn_launch():
    """distgnn-launch killed outright (no handler runs): the kernel sends its launcher the
    implementation's orphan signal, which the launcher answers by ending its ranks."""
    code = ("import subprocess, sys, time\n"
            "from launch.job import dying_with_this_process\n"
            "child = subprocess.Popen(['sleep', '300'], start_new_session=True,\n"
            "                         preexec_fn=dying_with_this_process(15))\n"
            "print(child.pid, flush=True)\n"
            "time.sleep(300)\n")
    parent = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True,
                              cwd=Path(__file__).parents[1])
    child = int(parent.stdout.readline())
    assert running(child)
    parent.kill()
    parent.wait()
    deadline = time.monotonic() + 10
    while running(child) and time.monotonic() < deadline:
        time.sleep(0.02)
    assert not running(child)
    assert {IMPLEMENTATIONS[m].orphan_signal for m in ("mpich", "impi")} == {signal.SIGKILL}
    assert IMPLEMENTATIONS["openmpi"].orphan_signal == signal.SIGTERM


def test_stderr_copy_holds_back_the_start_of_a_line_that_names_an_unreachable_node(
        capfdbinary):
    """A launcher's line saying that a node cannot be reached mutes the copy before any of
    it is passed on, though a read cuts it; a progress line cut by a read is not held."""
    read, write = os.pipe()
    with os.fdopen(read, "rb") as stream:
        copy = StderrCopy(stream, ranks=2)
        copy.start()
        for piece in (b"epoch 1 ", b"of 5\n[mpiexec@vm] ", b"Error: Unable to run bstrap_proxy "
                      b"on nosuch.invalid:2 (pid 7, exit code 65280)\n[mpiexec@vm] reasons\n"):
            os.write(write, piece)
            time.sleep(0.05)
        os.close(write)
        copy.join(timeout=10)
    assert list(copy.unreachable) == ["nosuch.invalid"]
    assert capfdbinary.readouterr().err == b"epoch 1 of 5\n"


@pytest.mark.skipif(sys.byteorder != "little", reason="the words of /proc/net/tcp in this "
                                                      "machine's byte order")
def test_addresses_as_proc_net_tcp_writes_them():
    address = job_module.proc_address
    assert address("0100007F") == "127.0.0.1"
    assert address("0000000000000000FFFF00000200FB0A") == "10.251.0.2"  # IPv4 in IPv6
    assert address("00000000000000000000000001000000") == "::1"


def test_silent_hosts_are_those_no_ssh_server_answers_for(tmp_path):
    hosts = tmp_path / "hosts"
    hosts.write_text("localhost slots=2\n127.0.0.1:2\nnosuch.invalid slots=1\n")
    assert job_module.silent_hosts(str(hosts)) == ["nosuch.invalid"]


def test_a_bare_python_is_the_python_distgnn_runs_in(capsys, fake_mpis):
    """The nodes' PATH may find a python without mpi4py: a bare python, python3 or
    pythonX.Y of this version is this one, and --dry-run says so; others are kept."""
    p = openmpi(2, ["python", "-m", "mpi4py", "x.py"])
    assert p.argv[-4:] == [sys.executable, "-m", "mpi4py", "x.py"]
    assert p.shell().endswith(f"x.py  # python is {sys.executable}, the Python distgnn "
                              "runs in")
    assert openmpi(2, ["python3", "x.py"]).argv[-2] == sys.executable
    for kept in ("/usr/bin/python3", "python2", "./python"):
        assert openmpi(2, [kept, "x.py"]).argv[-2:] == [kept, "x.py"]
        assert "#" not in openmpi(2, [kept, "x.py"]).shell()
    assert main(["-n", "2", "--mpi", "openmpi", "--mpirun", fake_mpis["openmpi"][0],
                 "--dry-run", "--", "python", "x.py"]) == 0
    assert f"  # python is {sys.executable}" in capsys.readouterr().out


@pytest.fixture(scope="module")
def four_partitions(tmp_path_factory):
    from tests.helpers.hostile import Runner, partition, write_npz

    root = tmp_path_factory.mktemp("parts")
    partition(Runner(), write_npz(root / "d.npz", n=200), 4, root / "p4")
    return root / "p4"


def test_partition_count_is_checked_before_any_launcher_starts(four_partitions, fake_mpis,
                                                               tmp_path, capsys):
    """distgnn-train --partitions DIR on another number of ranks than DIR holds: refused
    from DIR/meta.json before the launcher starts (a real launch, a dry run and a script
    alike); a DIR that is not here is refused by a launch only."""
    launcher = ["--mpi", "openmpi", "--mpirun", fake_mpis["openmpi"][0]]
    job = ["--", "distgnn-train", "--partitions", str(four_partitions)]
    for mode in ([], ["--dry-run"], ["--slurm", str(tmp_path / "job.sbatch")]):
        assert main(["-n", "3", *launcher, *mode, *job]) == 2
        assert capsys.readouterr().err == (
            f"distgnn-launch: error: --partitions {four_partitions} holds 4 partitions but -n "
            "is 3: one rank per partition, launch with -n 4\n")
    assert not (tmp_path / "job.sbatch").exists()
    absent = ["--", "distgnn-train", "--partitions", str(tmp_path / "absent")]
    assert main(["-n", "3", *launcher, "--dry-run", *absent]) == 0
    assert main(["-n", "3", *launcher, *absent]) == 2
    assert "absent is not a partition directory (no meta.json)" in capsys.readouterr().err


def help_strings(parser):
    """``(flag, help as --help shows it)`` of every option of ``parser`` and its
    subcommands that takes a value or may be turned either way."""
    import argparse

    from distgnn.program import DefaultsHelpFormatter

    formatter = DefaultsHelpFormatter(parser.prog)
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                yield from help_strings(sub)
        elif action.option_strings and not isinstance(
                action, (argparse._HelpAction, argparse._StoreTrueAction)):
            yield f"{parser.prog} {action.option_strings[-1]}", formatter._expand_help(action)


def test_every_option_of_distgnn_launch_states_its_default():
    from launch.cli import cluster_parser, parser

    found = list(help_strings(parser())) + list(help_strings(cluster_parser()))
    assert len(found) > 30
    missing = [flag for flag, text in found if "default" not in text]
    assert not missing, missing
    stated = dict(found)
    assert "default 120)" in stated["distgnn-launch --start-timeout"]
    assert "(default: dgnn)" in stated["distgnn-launch cluster down --name"]


def test_rank_wrapper_usage():
    proc = subprocess.run([sys.executable, *RANK_WRAPPER, "two", "prog"], capture_output=True,
                          text=True)
    assert proc.returncode == 2 and proc.stderr.startswith("usage: ")


KILL_RANK_1 = ("import os, time\n"
               "time.sleep(1)\n"
               "if os.environ.get('PMI_RANK', os.environ.get('OMPI_COMM_WORLD_RANK')) == '1':\n"
               "    os.kill(os.getpid(), 9)\n"
               "time.sleep(5)")


@pytest.mark.parametrize("mpi", MPIS)
def test_a_killed_rank_is_named(mpi):
    """Open MPI's mpirun names a rank killed by a signal; under Hydra (MPICH, Intel MPI),
    whose own message names a PID, often another rank's, the rank's watcher does, in one
    line."""
    proc = subprocess.run([str(BIN / "distgnn-launch"), "--mpi", mpi, "-n", "2", "--",
                           sys.executable, "-c", KILL_RANK_1], capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode != 0
    assert "process rank 1 with PID" in proc.stderr and "signal 9" in proc.stderr, proc.stderr
    if mpi != "openmpi":
        assert re.fullmatch(r"distgnn-launch: error: process rank 1 with PID \d+ on node \S+ "
                            r"exited on signal 9 \(Killed\)\n", proc.stderr), proc.stderr


def test_sbatch_script_of_a_job_whose_nodes_vary(fake_mpis, tmp_path):
    """``--min-nodes``: SLURM gives each start 1 to 2 nodes, the start runs R ranks on each
    (``$ranks``, from the nodes it got), makes the partitions of that count when missing
    and trains on them; the lines run by bash with 3 nodes make ``DIR/cora-6``."""
    parts = str(tmp_path / "cora-{ranks}")
    train = ["distgnn-train", "--partitions", parts, "--checkpoint-dir", "/shared/ck"]
    s = script(fake_mpis, 4, train, nodes=2, ranks_per_node=2, min_nodes=1,
               partition_from="cora")
    lines = s.splitlines()
    assert "#SBATCH --nodes=1-2" in lines and "#SBATCH --ntasks-per-node=2" in lines
    assert not any(line.startswith("#SBATCH --ntasks=") for line in lines)
    assert "ranks=$((SLURM_JOB_NUM_NODES * 2))" in lines
    make = next(line for line in lines if line.startswith("distgnn-partition "))
    assert make == (f'distgnn-partition cora --parts "$ranks" --out {tmp_path}/cora-"$ranks" '
                    "--if-missing --no-progress")
    start = next(line for line in lines if line.endswith(" &"))
    assert ' -np "$ranks" ' in start and f'--partitions {tmp_path}/cora-"$ranks" ' in start
    assert "to restart on K nodes: scontrol update JobId=$SLURM_JOB_ID NumNodes=K " \
           "NumTasks=K*2" in s
    shown = subprocess.run(["bash", "-c", "\n".join(["SLURM_JOB_NUM_NODES=3", lines[
        lines.index("ranks=$((SLURM_JOB_NUM_NODES * 2))")], f"echo {make}"])],
        capture_output=True, text=True, check=True).stdout
    assert f"--out {tmp_path}/cora-6 " in shown
    fixed = script(fake_mpis, 4, train, nodes=2, partition_from="cora")
    assert "ranks=4" in fixed.splitlines() and "#SBATCH --ntasks=4" in fixed.splitlines()


@pytest.mark.parametrize("kw, command, fragment", [
    ({"nodes": 2, "min_nodes": 1}, ["distgnn-train", "--partitions", "d"], "{ranks}"),
    ({"nodes": 2, "min_nodes": 3}, ["distgnn-train", "--partitions", "d-{ranks}"],
     "--min-nodes must be from 1 to --nodes 2"),
    ({"min_nodes": 1}, ["distgnn-train", "--partitions", "d-{ranks}"], "needs the placement"),
    ({"partition_from": "cora"}, ["prog"], "has none"),
    # checkpoints of each rank count apart: a start on another finds none
    ({"nodes": 2, "min_nodes": 1}, ["distgnn-train", "--partitions", "d-{ranks}",
                                    "--checkpoint-dir", "ck-{ranks}"],
     "--checkpoint-dir ck-{ranks}: with --min-nodes a start on another rank count would find "
     "no checkpoint there"),
    ({"nodes": 2, "min_nodes": 1}, ["distgnn-train", "--partitions", "d-{ranks}",
                                    "--resume-if-present=ck-{ranks}"],
     "--resume-if-present ck-{ranks}: with --min-nodes")])
def test_sbatch_refuses_what_a_varying_job_cannot_run(fake_mpis, kw, command, fragment):
    with pytest.raises(LaunchError, match=re.escape(fragment)):
        script(fake_mpis, 4, command, **kw)
