"""The sbatch script of a distgnn job on SLURM's nodes.

The job is P ranks of T cores each on SLURM's nodes, started by an MPI launcher inside the
allocation or by ``srun``, stopped with a checkpoint before the time limit and requeued to
go on from it.

What the script does, in order:

1. ``#SBATCH`` options: the ranks (``--ntasks``, and ``--nodes``/``--ntasks-per-node`` when
   the placement is given), T cores per rank (``--cpus-per-task``), the time limit and the
   signal before it (``--signal=B:USR1@S``), ``--requeue`` and ``--open-mode=append`` (a
   requeued job writes on in the same log).  With a smallest node count (``min_nodes``) the
   job asks for ``--nodes=M-N`` and R ranks per node: each start runs R ranks on each node
   SLURM gave it, so a requeued job goes on with the nodes that are free, on the partitions
   of its new rank count (``{ranks}`` in ``--partitions``), and ``distgnn-train`` resumes
   the checkpoint of the other rank count (from the one checkpoint directory of every
   start: ``{ranks}`` in it is refused).  (SLURM gives a requeued job the node count of
   its last start; ``scontrol update JobId=J NumNodes=K NumTasks=K*R`` while it waits
   changes that, and the script says so when it requeues.)
2. The environment: the Python environment of the ``distgnn-launch`` that wrote it
   (``sys.prefix``: its ``bin/activate``, or its ``bin`` first on ``PATH``; not with
   ``--no-activate``), which must be at the same path on every node (a shared
   filesystem), then the site's own lines (``--env-setup``: ``module load ...``), so that
   what they put first on ``PATH`` (a site MPI's launcher) comes before the environment's
   (the pip Open MPI's).
3. Every rank's variables, as :func:`launch.mpirun.plan` sets them for a job run here:
   ``OMP_NUM_THREADS`` and ``NUMBA_NUM_THREADS`` (T), and ``MPI4PY_LIBMPI``, the library of
   the chosen MPI, so that mpi4py loads the one its launcher speaks to.  Where that MPI is
   not installed here (an MPI of the nodes only, or a launcher named without a path), the
   script finds its launcher on the nodes' ``PATH`` and the library beside it
   (:func:`_library_lines`), and says in a comment what the nodes need.
4. This start's rank count ``$ranks``, and with ``partition_from`` the partition directory
   for it made when missing (``distgnn-partition --if-missing``: jobs starting at once take
   turns, one partitions, the others use its directory).
5. The launch, in the background of the batch shell:

   * ``mpirun`` (the default): the chosen MPI's own launcher, with the options of
     :func:`launch.mpirun.launcher_options`.  Inside an allocation, Open MPI's ``mpirun``
     and the Hydra ``mpiexec`` of MPICH and Intel MPI read the nodes and the ranks per node
     from SLURM and start their daemons with ``srun``; this works with MPIs built without
     SLURM support, such as the pip wheels.
   * ``srun --mpi=PLUGIN``: SLURM starts the ranks itself, which needs an MPI built with
     the plugin's support: PMIx for Open MPI 5 (``pmix``; Open MPI 5 has no PMI-2, and under
     ``pmi2`` each rank would run alone), PMI-2 for MPICH (``pmi2``; the pip wheel refuses
     PMIx), either for Intel MPI.  ``--cpu-bind=cores`` binds each rank to its T cores.

6. Stopping and restarting.  SLURM sends SIGUSR1 to the batch shell alone (``B:``) S seconds
   before the time limit (or up to about half a minute earlier: slurmctld checks the
   limits periodically).  The
   shell passes it to the launcher, which passes it to every rank; ``distgnn-train``
   finishes its epoch, writes a checkpoint and exits.  The shell then requeues the job
   (``scontrol requeue``): it goes back to the queue under the same job id and starts the
   script again from the top, and ``distgnn-train --resume-if-present DIR`` resumes from
   the newest checkpoint.  The script adds ``--resume-if-present`` to a ``distgnn-train``
   that checkpoints (``--checkpoint-dir DIR``), and requeues only such a job: one that
   checkpoints nowhere would start again from epoch 0 at every requeue, forever.  SIGTERM
   (``scancel``, or the limit itself) is passed on as SIGUSR1 too, but never requeues; it
   reaches the job's steps at the same time, so a last checkpoint is written only where
   the ranks outlive that (SLURM kills them ``KillWait`` later; Open MPI's daemons at
   once).  Signalling the shell rather than the ranks matters for the
   ``mpirun`` launcher: Open MPI's ``mpirun`` answers SIGTERM by killing its ranks.
"""
from __future__ import annotations

import os
import re
import shlex
import sys
import textwrap
from pathlib import Path
from typing import Callable

from distgnn.storage import file_head
from launch.mpirun import (
    IMPLEMENTATIONS,
    LIBMPI_ENV,
    ROOT_ENV,
    LaunchError,
    check_partitions,
    find_launcher,
    flag_value,
    launcher_options,
    library_paths,
    rank_command,
    rank_environment,
    resolve_launcher,
)

MARK = "# written by distgnn-launch --slurm"
DEFAULT_TIME = "01:00:00"
DEFAULT_STOP_BEFORE_S = 120
# sbatch --signal takes its time in a 16-bit field
MAX_SIGNAL_S = 65535
# SLURM reads a time limit into a C int of seconds
MAX_TIME_S = 2**31 - 1
TIME_FORMATS = "minutes, MM:SS, HH:MM:SS, D-HH, D-HH:MM or D-HH:MM:SS"
LAUNCHERS = ("mpirun", "srun")
# srun --mpi of each MPI (see the module docstring)
SRUN_MPI = {"openmpi": "pmix", "mpich": "pmi2", "impi": "pmi2"}
# sbatch --mem: megabytes, or a number with the unit K, M, G or T (0: all of a node's)
MEMORY = re.compile(r"[0-9]+[KMGT]?", re.IGNORECASE)
# where a path is on each node's own storage, not on one that every node shares
NODE_LOCAL = ("/tmp", "/var/tmp", "/dev/shm", "/run")
# the flags of distgnn-train that name its checkpoints
CHECKPOINT_FLAGS = ("--checkpoint-dir", "--resume", "--resume-if-present")
# the flags of distgnn-train whose directories every node must see at the same path
SHARED_PATH_FLAGS = ("--partitions", *CHECKPOINT_FLAGS)
# in a command's words: the rank count of the start (the script's $ranks)
RANKS = "{ranks}"


def shell_word(word: str) -> str:
    """``word`` quoted for the script's shell, each :data:`RANKS` in it the start's
    ``$ranks``."""
    return '"$ranks"'.join(shlex.quote(piece) if piece else "" for piece in word.split(RANKS)
                           ) or "''"


def is_sbatch_script(path: Path) -> bool:
    """A script :func:`sbatch_script` wrote (its second line is ``MARK``)."""
    return file_head(path, 256).decode(errors="replace").split("\n")[1:2] == [MARK]


def time_limit_s(time: str) -> int | None:
    """The seconds of SLURM time limit ``time`` (:data:`TIME_FORMATS`; ``None``: no limit,
    written INFINITE, UNLIMITED or 0)."""
    if time.lower() in ("infinite", "unlimited"):
        return None
    days, dash, clock = time.partition("-")
    if not dash:
        days, clock = "0", time
    fields = clock.split(":")
    if len(fields) > 3 or not all(re.fullmatch(r"[0-9]+", f) for f in [days, *fields]):
        raise LaunchError(f"--time {time!r} is not a SLURM time limit ({TIME_FORMATS})")
    if dash or len(fields) == 3:  # D-HH[:MM[:SS]] or HH:MM:SS
        hours, minutes, seconds = (fields + ["0", "0"])[:3]
    else:  # MM[:SS]
        hours, minutes, seconds = "0", fields[0], (fields + ["0"])[1]
    limit = ((int(days) * 24 + int(hours)) * 60 + int(minutes)) * 60 + int(seconds)
    if limit > MAX_TIME_S:
        raise LaunchError(f"--time {time!r} is longer than SLURM can take ({MAX_TIME_S} s)")
    return limit or None


def placement(ranks: int, nodes: int | None,
              ranks_per_node: int | None) -> tuple[int | None, int | None]:
    """``(nodes, ranks per node)`` of ``ranks`` ranks from either or both (``None`` and
    ``None``: SLURM places them); refused unless the ranks fill every node alike."""
    if nodes is not None and not 1 <= nodes <= ranks:
        raise LaunchError(f"--nodes must be from 1 to the {ranks} ranks, got {nodes}")
    if ranks_per_node is not None and not 1 <= ranks_per_node <= ranks:
        raise LaunchError(f"--ranks-per-node must be from 1 to the {ranks} ranks, got "
                          f"{ranks_per_node}")
    if nodes is not None and ranks_per_node is not None:
        if nodes * ranks_per_node != ranks:
            raise LaunchError(f"--nodes {nodes} x --ranks-per-node {ranks_per_node} is "
                              f"{nodes * ranks_per_node} ranks, not the {ranks} of -n")
    elif nodes is not None:
        if ranks % nodes:
            raise LaunchError(f"{ranks} ranks do not divide among --nodes {nodes}: every node "
                              "runs the same number of ranks; give -n a multiple of --nodes")
        ranks_per_node = ranks // nodes
    elif ranks_per_node is not None:
        if ranks % ranks_per_node:
            raise LaunchError(f"{ranks} ranks do not fill nodes of --ranks-per-node "
                              f"{ranks_per_node}; give -n a multiple of it")
        nodes = ranks // ranks_per_node
    return nodes, ranks_per_node


def resumable(command: list[str], requeue: bool | None) -> tuple[list[str], bool]:
    """``(command, requeue)``: the command a requeued job reruns, and whether it requeues.

    The job requeues itself when stopped before its time limit as ``requeue`` says
    (``None``: when the command is a ``distgnn-train`` that checkpoints).

    A ``distgnn-train`` with ``--checkpoint-dir DIR`` and neither ``--resume`` nor
    ``--resume-if-present`` gets ``--resume-if-present DIR``: the first run starts afresh,
    every restart resumes.  One that resumes from another directory than it checkpoints
    into is refused when requeued: every restart would resume from the same old checkpoint.
    """
    if os.path.basename(command[0]) != "distgnn-train":
        return command, bool(requeue)
    written = flag_value(command, "--checkpoint-dir")
    read = flag_value(command, "--resume-if-present") or flag_value(command, "--resume")
    if requeue is False:
        return command, False
    if not (written or read):
        if requeue:
            raise LaunchError("--requeue: distgnn-train writes no checkpoints, so a requeued "
                              "job would start again from epoch 0; give --checkpoint-dir DIR")
        return command, False
    if read and written and os.path.normpath(read) != os.path.normpath(written):
        raise LaunchError(f"a requeued job would resume from {read} again, not from the newer "
                          f"checkpoints in --checkpoint-dir {written}: give one directory to "
                          "both, or --no-requeue")
    if not read:
        command = [*command, "--resume-if-present", written]
    return command, True


def activation() -> str:
    """The shell line that puts this Python environment (``sys.prefix``) first, for the
    ranks' ``distgnn-train`` and ``python``: its ``bin/activate``, else its ``bin`` on
    ``PATH``."""
    activate = Path(sys.prefix) / "bin" / "activate"
    if activate.is_file():
        return f"source {shlex.quote(str(activate))}"
    return f'export PATH={shlex.quote(str(Path(sys.prefix) / "bin"))}:"$PATH"'


def sbatch_script(ranks: int, command: list[str], threads_per_rank: int = 1,
                  nodes: int | None = None, ranks_per_node: int | None = None,
                  time: str = DEFAULT_TIME, partition: str | None = None,
                  job_name: str = "distgnn", account: str | None = None,
                  stop_before: int = DEFAULT_STOP_BEFORE_S, slurm_launcher: str = "mpirun",
                  implementation: str | None = None, mpirun: str | None = None,
                  srun_mpi: str | None = None, env_setup: str | None = None,
                  requeue: bool | None = None, mem: str | None = None, activate: bool = True,
                  min_nodes: int | None = None, partition_from: str | None = None,
                  warn: Callable[[str], None] = lambda line: None) -> str:
    """A bash script for ``sbatch`` that runs ``command`` on ``ranks`` ranks.

    Each rank has ``threads_per_rank`` cores (see the module docstring).

    Parameters
    ----------
    nodes, ranks_per_node
        The placement, either or both (:func:`placement`).
    stop_before
        Seconds before the time limit at which SLURM signals the job (0: none).
    slurm_launcher
        ``mpirun`` (the MPI's own launcher) or ``srun``; ``srun_mpi`` is srun's ``--mpi``
        (``None``: :data:`SRUN_MPI` of the MPI).
    implementation, mpirun
        The MPI, as :func:`launch.mpirun.resolve_launcher` takes them: its launcher (an
        absolute path, the same on every node, or a name the nodes' ``PATH`` finds) and its
        library for ``MPI4PY_LIBMPI``; an ``implementation`` not installed here is run from
        the nodes' ``PATH``.
    env_setup
        Shell lines that make ``command`` runnable on the nodes, run after the activation
        (``None`` or ``""``: none).
    activate
        Activate this Python environment (:func:`activation`) first.
    requeue
        As :func:`resumable` takes it.
    mem
        sbatch ``--mem`` (memory per node, :data:`MEMORY`; ``None``: SLURM's default).
    min_nodes
        The fewest nodes a start may get (``None``: the ``nodes`` of the placement); the
        rank count is then ranks-per-node x the nodes of each start, and ``distgnn-train``'s
        ``--partitions`` must say where each count's partitions are (``{ranks}``).
    partition_from
        A dataset (as ``distgnn-partition`` takes it): a start whose ``--partitions``
        directory is missing makes it from this first.
    warn
        Called with one line for each path of the job on a node's own storage
        (:func:`node_local_warnings`), and for an MPI not installed here.
    """
    command = rank_command(ranks, command, threads_per_rank)
    nodes, ranks_per_node = placement(ranks, nodes, ranks_per_node)
    elastic = _check_elastic(command, nodes, min_nodes, partition_from)
    check_partitions(ranks, [w.replace(RANKS, str(ranks)) for w in command], missing_ok=True)
    _check_options(stop_before, time, slurm_launcher, srun_mpi, env_setup, mem)
    for line in node_local_warnings(command, activate):
        warn(line)
    command, requeue = resumable(command, requeue)
    lines = ["#!/bin/bash", MARK, *_sbatch_lines({
        "job-name": job_name, "ntasks": None if elastic else ranks,
        "nodes": f"{min_nodes}-{nodes}" if elastic else nodes,
        "ntasks-per-node": ranks_per_node, "cpus-per-task": threads_per_rank, "mem": mem,
        "time": time, "partition": partition, "account": account,
        "signal": f"B:USR1@{stop_before}" if stop_before else None})]
    mpirun, implementation, elsewhere = nodes_launcher(implementation, mpirun)
    impl = IMPLEMENTATIONS[implementation]
    if elsewhere:
        warn(f"{impl.title} is not installed here: the script runs {mpirun} from the nodes' "
             "PATH (its comments say what the nodes need)")
    env = rank_environment(threads_per_rank, mpirun, implementation)
    lines += ["#SBATCH --requeue" if requeue else "#SBATCH --no-requeue",
              "#SBATCH --open-mode=append",
              *_comments(ranks, threads_per_rank, slurm_launcher, implementation, requeue,
                         stop_before),
              *([activation()] if activate else []),
              *([env_setup] if env_setup else []),
              "set -euo pipefail",
              *(f"export {name}={shlex.quote(value)}" for name, value in env.items())]
    if LIBMPI_ENV not in env:  # the library is where the nodes' launcher is
        lines += _library_lines(mpirun, implementation, slurm_launcher == "mpirun")
    if slurm_launcher == "mpirun" and not impl.hydra:
        allow = " ".join(f"{k}={v}" for k, v in ROOT_ENV.items())
        lines += ["# Open MPI's mpirun refuses to run as root without these",
                  f'if [ "$(id -u)" -eq 0 ]; then export {allow}; fi']
    if elastic:
        lines += [f"# this start's ranks: {ranks_per_node} on each of the nodes it got",
                  f"ranks=$((SLURM_JOB_NUM_NODES * {ranks_per_node}))"]
    else:
        lines.append(f"ranks={ranks}")
    if partition_from:
        lines += _partition_lines(command, partition_from)
    launch = _launch_words(slurm_launcher, mpirun, implementation, ranks, threads_per_rank,
                           env, srun_mpi)
    return "\n".join([*lines, *_run_lines([*launch, *command], requeue,
                                            ranks_per_node if elastic else None)])


def _check_elastic(command: list[str], nodes: int | None, min_nodes: int | None,
                   partition_from: str | None) -> bool:
    """Whether the job's starts may get fewer nodes than ``nodes`` (from ``min_nodes``);
    refuses what cannot work with it or with ``partition_from``."""
    train = os.path.basename(command[0]) == "distgnn-train"
    partitions = flag_value(command, "--partitions") if train else None
    if partition_from is not None and partitions is None:
        raise LaunchError("--partition-from makes the directory of distgnn-train's "
                          "--partitions DIR; the command has none")
    if min_nodes is None:
        return False
    if nodes is None:
        raise LaunchError("--min-nodes needs the placement: give --nodes (the most) and "
                          "--ranks-per-node, or -n and one of them")
    if not 1 <= min_nodes <= nodes:
        raise LaunchError(f"--min-nodes must be from 1 to --nodes {nodes}, got {min_nodes}")
    if min_nodes == nodes:
        return False
    if train and RANKS not in (partitions or ""):
        raise LaunchError(f"with --min-nodes the rank count of each start varies: give "
                          f"--partitions a path with {RANKS} for it (e.g. "
                          f"/shared/cora-{RANKS}), with --partition-from to make each when "
                          "missing")
    # a start on another rank count would look for checkpoints where none were written and
    # train again from epoch 0; one directory serves every count (a checkpoint resumes on any)
    for flag in CHECKPOINT_FLAGS:
        if train and RANKS in (path := flag_value(command, flag) or ""):
            raise LaunchError(f"{flag} {path}: with --min-nodes a start on another rank count "
                              "would find no checkpoint there and train again from epoch 0; "
                              f"give one directory without {RANKS} (distgnn-train resumes a "
                              "checkpoint on any rank count)")
    return True


def _partition_lines(command: list[str], dataset: str) -> list[str]:
    """The lines that make the start's ``--partitions`` directory from ``dataset`` when it
    is missing, jobs starting at once taking turns (``distgnn-partition --if-missing``)."""
    here = os.path.dirname(command[0])
    tool = os.path.join(here, "distgnn-partition") if here else "distgnn-partition"
    out = flag_value(command, "--partitions")
    return ["# the partitions of this rank count, made first when missing (one job at a time)",
            " ".join([shell_word(tool), shell_word(dataset), "--parts", '"$ranks"', "--out",
                      shell_word(out), "--if-missing", "--no-progress"])]


def _check_options(stop_before: int, time: str, slurm_launcher: str, srun_mpi: str | None,
                   env_setup: str | None, mem: str | None) -> None:
    """Refuse, in one line naming the flag, the :func:`sbatch_script` options SLURM would."""
    if not 0 <= stop_before <= MAX_SIGNAL_S:
        raise LaunchError(f"--stop-before must be from 0 to {MAX_SIGNAL_S} seconds (sbatch "
                          f"--signal), got {stop_before}")
    limit = time_limit_s(time)
    if stop_before and limit is not None and stop_before >= limit:
        raise LaunchError(f"--stop-before {stop_before} s must be shorter than --time {time} "
                          f"({limit} s): SLURM would signal the job as it starts")
    if slurm_launcher not in LAUNCHERS:
        raise LaunchError(f"--slurm-launcher must be one of {', '.join(LAUNCHERS)}, got "
                          f"{slurm_launcher!r}")
    if srun_mpi is not None and slurm_launcher != "srun":
        raise LaunchError("--srun-mpi applies to --slurm-launcher srun; mpirun starts the "
                          "ranks through its own daemons")
    if srun_mpi is not None and not re.fullmatch(r"[A-Za-z0-9_]+", srun_mpi):
        raise LaunchError(f"--srun-mpi must be the name of a SLURM MPI plugin (srun "
                          f"--mpi=list), got {srun_mpi!r}")
    if env_setup is not None and "\0" in env_setup:
        raise LaunchError("--env-setup must be shell text without NUL characters")
    if mem is not None and not MEMORY.fullmatch(mem):
        raise LaunchError(f"--mem {mem!r} is not a SLURM memory size: megabytes, or a number "
                          "with K, M, G or T (e.g. 64G; 0: all of each node's)")


def _sbatch_lines(options: dict[str, object]) -> list[str]:
    """The ``#SBATCH --key=value`` lines of ``options`` (a None value: no line)."""
    lines = []
    for key, value in options.items():
        if value is None:
            continue
        # sbatch splits an #SBATCH line at whitespace, and a newline would end the header.
        if not str(value) or any(c.isspace() for c in str(value)):
            raise LaunchError(f"--{key} must be a non-empty word without spaces, got {value!r}")
        lines.append(f"#SBATCH --{key}={value}")
    return lines


def _launch_words(slurm_launcher: str, mpirun: str, implementation: str, ranks: int,
                  threads_per_rank: int, env: dict[str, str], srun_mpi: str | None
                  ) -> list[str]:
    """The launcher's words before the command: ``mpirun`` and its options, or ``srun``'s."""
    if slurm_launcher == "mpirun":
        forwarded = dict(env)
        if not IMPLEMENTATIONS[implementation].hydra:
            # Open MPI forwards by name (-x) what Hydra forwards by itself
            forwarded.setdefault(LIBMPI_ENV, "found on the node")
        options = launcher_options(implementation, ranks, threads_per_rank, forwarded)
        # the options open with the rank count (-n P or -np P): the start's, in the script
        return [mpirun, options[0], RANKS, *options[2:]]
    # srun does not inherit --cpus-per-task from sbatch (Slurm 22.05 to 23.02), and
    # without it every rank would be bound to a single core.
    return ["srun", f"--mpi={srun_mpi or SRUN_MPI[implementation]}", "--kill-on-bad-exit=1",
            f"--cpus-per-task={threads_per_rank}", "--cpu-bind=cores"]


def _run_lines(launch: list[str], requeue: bool, ranks_per_node: int | None) -> list[str]:
    """The script's body: run ``launch``, pass signals on, requeue, exit its status.

    ``launch`` runs in the background; SLURM's USR1 or TERM is passed on to it; once it
    ended, a job stopped early requeues (``requeue``; saying how to give the waiting job
    fewer nodes when its rank count follows its nodes, ``ranks_per_node``)."""
    lines = [
        'stop="" launcher=""',
        """trap 'stop=USR1; kill -USR1 "$launcher" 2>/dev/null || true' USR1""",
        """trap 'stop=TERM; kill -USR1 "$launcher" 2>/dev/null || true' TERM""",
        " ".join(map(shell_word, launch)) + " &",
        'launcher=$!',
        '[ -z "$stop" ] || kill -USR1 "$launcher"  # signalled while it started',
        'while :; do  # until the launcher ends: a trapped signal ends a wait early',
        '    wait "$launcher" && status=0 || status=$?',
        '    kill -0 "$launcher" 2>/dev/null || break',
        'done',
        'launcher=""  # gone: a later signal must not reach whatever process takes its id']
    if requeue:
        lines += [
            'if [ "$stop" = USR1 ] && [ "$status" -ne 0 ]; then',
            '    echo "distgnn-launch: stopped before the time limit (status $status);'
            ' requeueing" >&2',
            *([f'    echo "distgnn-launch: it keeps its $SLURM_JOB_NUM_NODES nodes; to restart on '
               f'K nodes: scontrol update JobId=$SLURM_JOB_ID NumNodes=K NumTasks=K*'
               f'{ranks_per_node}" >&2'] if ranks_per_node else []),
            '    scontrol requeue "$SLURM_JOB_ID"',
            'fi']
    return [*lines, 'exit "$status"', ""]


def nodes_launcher(implementation: str | None, mpirun: str | None) -> tuple[str, str, bool]:
    """``(launcher, implementation, elsewhere)`` of a script.

    As :func:`launch.mpirun.resolve_launcher` finds them, except that an ``implementation``
    named but not installed here is run as its launcher's bare name, from the nodes' ``PATH``
    (``elsewhere``)."""
    if implementation is not None and mpirun is None:
        try:
            return find_launcher(implementation), implementation, False
        except LaunchError:
            return IMPLEMENTATIONS[implementation].launcher, implementation, True
    return (*resolve_launcher(implementation, mpirun), False)


def node_local_warnings(command: list[str], activate: bool) -> list[str]:
    """One line per directory a multi-node job needs shared that is node-local or relative.

    The directories are those a job on several nodes needs on storage that every node
    shares: the environment activated (``sys.prefix``), ``distgnn-train``'s partitions and
    checkpoint directories (:data:`SHARED_PATH_FLAGS`); a line names each that is on each
    node's own storage (:data:`NODE_LOCAL`, ``$TMPDIR``) or relative."""
    paths = {"the Python environment": sys.prefix} if activate else {}
    if os.path.basename(command[0]) == "distgnn-train":
        paths.update((flag, value) for flag in SHARED_PATH_FLAGS
                     if (value := flag_value(command, flag)))
    local = [*NODE_LOCAL, *filter(None, [os.environ.get("TMPDIR")])]
    lines = []
    for what, path in paths.items():
        if not os.path.isabs(path):
            lines.append(f"{what} {path} is a relative path: every node resolves it from the "
                         "directory sbatch runs in, which must be on storage all nodes share")
            continue
        root = next((r for r in local if os.path.commonpath([os.path.normpath(path), r]) == r),
                    None)
        if root is not None:
            lines.append(f"{what} {path} is on node-local storage ({root}): each node sees its "
                         "own, so the nodes do not share it; use a shared filesystem")
    return lines


def _library_lines(launcher: str, implementation: str, required: bool) -> list[str]:
    """Lines that find ``launcher`` on the node and export ``MPI4PY_LIBMPI``, the library
    beside it (:func:`launch.mpirun.library_paths`), unless the lines before set it; a
    ``required`` launcher that the node lacks ends the job."""
    impl = IMPLEMENTATIONS[implementation]
    name = shlex.quote(launcher)
    missing = (f'    echo "distgnn-launch: error: no {launcher} on PATH on $(hostname); see the '
               'comments of this script" >&2', "    exit 2")
    candidates = textwrap.wrap(" ".join(library_paths(implementation)), 70)
    where = "" if os.sep in launcher else " on PATH (--env-setup, e.g. 'module load ...')"
    return [
        f"# The nodes need {impl.title}'s {launcher}{where},",
        f"# and mpi4py its library ({' or '.join(impl.libraries)}): {LIBMPI_ENV} names",
        f"# the one beside {launcher}, unless the lines above set it.",
        f"if mpi_launcher=$(command -v {name}); then",
        '    for mpi_bin in "$(dirname "$mpi_launcher")" '
        '"$(dirname "$(readlink -f "$mpi_launcher")")"; do',
        "        for mpi_library in " + " \\\n                ".join(candidates) + "; do",
        f'            if [ -z "${{{LIBMPI_ENV}:-}}" ] && [ -f "$mpi_bin/../$mpi_library" ]; then',
        f'                export {LIBMPI_ENV}="$mpi_bin/../$mpi_library"',
        "            fi",
        "        done",
        "    done",
        *(["else", *missing] if required else []),
        "fi",
        f'[ -n "${{{LIBMPI_ENV}:-}}" ] || echo "distgnn-launch: warning: no {impl.title} '
        f'library beside a {launcher} on PATH on $(hostname): mpi4py loads its own default" >&2']


def _comments(ranks: int, threads: int, launcher: str, implementation: str, requeue: bool,
              stop_before: int) -> list[str]:
    """The script's own explanation of what it does, after the header."""
    title = IMPLEMENTATIONS[implementation].title
    started = (f"started by {title}'s launcher inside the allocation" if launcher == "mpirun"
               else f"started by srun, which needs {title} built with its --mpi plugin")
    lines = [f"# {ranks} ranks of {threads} cores each, {started}."]
    if stop_before:
        lines += ["# SLURM sends SIGUSR1 to this shell before the time limit; it passes it to "
                  "the ranks,",
                  "# which checkpoint and exit"
                  + (", then requeues the job, which resumes from the checkpoint."
                     if requeue else ".")]
    if not requeue:
        lines.append("# Not requeued (--no-requeue, or a command that writes no checkpoints "
                     "to resume from).")
    return lines
