"""``distgnn-launch``: compose and run mpirun / SLURM jobs for distgnn-train.

It also runs an emulated cluster of network namespaces on this host.

    distgnn-launch -n P [--threads-per-rank T] [--hostfile H] [--mpi auto|openmpi|mpich|impi]
                   [--mpirun PATH] [--dry-run | --slurm FILE] [--timeout S]
                   [--start-timeout S] -- COMMAND ...
    distgnn-launch -n P --slurm FILE [--nodes N] [--slurm-launcher mpirun|srun] -- COMMAND ...
    distgnn-launch cluster up --nodes N [--rate 1gbit] | down | status | shape | link | kill
"""
from __future__ import annotations

import argparse
import os
import re
import shutil
import sys

from distgnn.program import (
    DefaultsHelpFormatter,
    OneLineParser,
    fail,
    interruptible,
    run_guarded,
)
from distgnn.storage import check_output_file, check_replaceable, write_atomic
from launch import cluster
from launch.job import (
    DEFAULT_START_TIMEOUT_S,
    DEFAULT_STOP_GRACE_S,
    PROBE_S,
    check_times,
    run,
)
from launch.mpirun import IMPLEMENTATIONS, MPI_HOME, LaunchError, count_gpus, plan
from launch.slurm import (
    DEFAULT_STOP_BEFORE_S,
    DEFAULT_TIME,
    LAUNCHERS,
    MAX_SIGNAL_S,
    SRUN_MPI,
    TIME_FORMATS,
    is_sbatch_script,
    sbatch_script,
)

PROG = "distgnn-launch"
# Options of one way of running the job only (their defaults are None, so that given ones
# can be told apart): those of running it here, with why each does not apply to --slurm,
# and those of the sbatch script, which would change nothing here.
RUN_ONLY = {"hostfile": "SLURM chooses the nodes", "gpus_per_node": "the script binds no GPUs",
            "timeout": "give the job's --time", "stop_grace": "give --stop-before",
            "start_timeout": "SLURM starts the job on nodes it has checked"}
SLURM_ONLY = ("nodes", "min_nodes", "ranks_per_node", "partition_from", "time", "partition", "account", "job_name",
              "stop_before", "slurm_launcher", "srun_mpi", "env_setup", "requeue", "mem",
              "activate")


def parser() -> argparse.ArgumentParser:
    p = OneLineParser(
        prog=PROG, formatter_class=DefaultsHelpFormatter,
        description="Run COMMAND on P MPI ranks of T threads each, with thread counts and "
                    "core binding set for every rank, or write the equivalent SLURM script.",
        epilog="example: distgnn-launch -n 4 --threads-per-rank 8 -- distgnn-train "
               "--partitions runs/rmat20-4; distgnn-launch cluster --help for an emulated "
               "cluster on this host")
    p.add_argument("-n", "--ranks", type=int, required=True, metavar="P",
                   help="number of MPI ranks (required: there is no default)")
    p.add_argument("--threads-per-rank", type=int, default=1, metavar="T",
                   help="torch and Numba threads per rank; each rank is bound to T cores")
    p.add_argument("--hostfile", metavar="H",
                   help="MPI hostfile naming the nodes (default: every rank on this node)")
    p.add_argument("--mpi", choices=("auto", *IMPLEMENTATIONS),
                   help="MPI implementation: openmpi (Open MPI), mpich (MPICH), impi (Intel "
                        f"MPI); its launcher is looked for in {MPI_HOME}/NAME/bin, next to "
                        "python, then on PATH, and recognised by its --version; auto (the "
                        "default): the implementation of --mpirun, or of the first mpirun "
                        "found. Every rank's mpi4py loads the library beside that launcher "
                        "(MPI4PY_LIBMPI); with --slurm, the script runs that launcher (or "
                        "srun with that library) on the nodes, at the same path, or where "
                        "it is not installed here, from the nodes' PATH")
    p.add_argument("--mpirun", metavar="PATH",
                   help="the launcher to use (mpirun or mpiexec); its implementation is "
                        "asked with --version unless --mpi names it (default: the one --mpi "
                        "finds). With --slurm, a name without a path is found on the nodes' "
                        "PATH; with --slurm-launcher srun, only its MPI library is used")
    p.add_argument("--gpus-per-node", metavar="G",
                   help="GPUs of each node; with G > 0 each rank sees only the GPU of its "
                        "local rank (CUDA_VISIBLE_DEVICES), so distgnn-train's --device auto "
                        "puts it there; auto (the default): count them with nvidia-smi here")
    p.add_argument("--timeout", type=float, metavar="SECONDS",
                   help="stop the job and its ranks after this long (default: no limit); "
                        "like SIGTERM to distgnn-launch, this first asks distgnn-train to "
                        "checkpoint and exit (see --stop-grace)")
    p.add_argument("--stop-grace", type=float, metavar="SECONDS",
                   help="on --timeout, SIGTERM, SIGUSR1, SIGHUP or Ctrl-C: how long the "
                        "ranks get, "
                        "after SIGUSR1 (forwarded by mpirun), to finish the epoch, write a "
                        "checkpoint and exit before they are killed (0: kill at once; a "
                        f"second Ctrl-C kills them at once too; default "
                        f"{DEFAULT_STOP_GRACE_S:g})")
    p.add_argument("--start-timeout", type=float, metavar="SECONDS",
                   help="end the job when its ranks have not all started after this long, "
                        "naming the nodes that did not answer, or at once when the remote "
                        "shell of a node says it cannot reach it or its connection to the "
                        f"node has no answer for {PROBE_S:g} s (0: wait for ever; default "
                        f"{DEFAULT_START_TIMEOUT_S:g})")
    mode = p.add_mutually_exclusive_group()
    mode.add_argument("--dry-run", action="store_true",
                      help="print the mpirun command line instead of running it")
    mode.add_argument("--slurm", metavar="FILE",
                      help="write an sbatch script for the job to FILE instead of running it "
                           "(default: run the job)")
    _slurm_arguments(p)
    p.add_argument("command", nargs=argparse.REMAINDER,
                   help="the program every rank runs, after --; a bare python or python3 "
                        "is the Python distgnn runs in")
    return p



def _slurm_arguments(p: argparse.ArgumentParser) -> None:
    """The flags of the sbatch script that ``--slurm`` writes, as a group of ``p``."""
    g = p.add_argument_group("SLURM (with --slurm)")
    g.add_argument("--nodes", type=int,
                   help="number of nodes, each running the same number of ranks (default: "
                        "P / --ranks-per-node, or as SLURM places the tasks)")
    g.add_argument("--min-nodes", type=int, metavar="M",
                   help="let each start (the first, and every requeued one) run on as few "
                        "as M of the --nodes N nodes, as SLURM has them free (sbatch "
                        "--nodes=M-N): a start runs R ranks on each node it got, on the "
                        "partitions of its rank count (put {ranks} in distgnn-train's "
                        "--partitions path), and resumes the checkpoint of another rank "
                        "count (so its --checkpoint-dir, one for every start, holds no "
                        "{ranks}; default: every start gets the N nodes)")
    g.add_argument("--ranks-per-node", type=int, metavar="R",
                   help="ranks on each node (sbatch --ntasks-per-node; default: P / --nodes, "
                        "or as SLURM places the tasks); with --nodes, R x N must be P")
    g.add_argument("--partition-from", metavar="DATASET",
                   help="a start whose --partitions directory (for its rank count) is "
                        "missing makes it first with distgnn-partition DATASET --parts P "
                        "--if-missing: jobs that start at once take turns, one partitions "
                        "(default: the directory must exist)")
    g.add_argument("--time", help=f"wall-clock limit of the job: {TIME_FORMATS}, or "
                                  f"UNLIMITED (default {DEFAULT_TIME})")
    g.add_argument("--mem", metavar="SIZE",
                   help="memory per node (sbatch --mem): megabytes, or a number with K, M, "
                        "G or T, such as 64G; 0: all of each node's (default: the "
                        "partition's default)")
    g.add_argument("--partition",
                   help="partition (queue) to submit to (default: the cluster's default)")
    g.add_argument("--account", help="account to charge the core hours to (default: your "
                                     "default account)")
    g.add_argument("--job-name", help="job name shown by squeue (default distgnn)")
    g.add_argument("--stop-before", type=int, metavar="SECONDS",
                   help="SLURM signals the script this long before --time runs out (or up "
                        "to about 30 s earlier), and the script the ranks, so that "
                        "distgnn-train checkpoints and exits (see --requeue; 0: no signal, "
                        f"SIGTERM at the limit only; at most {MAX_SIGNAL_S}, less than --time; "
                        f"default {DEFAULT_STOP_BEFORE_S})")
    g.add_argument("--slurm-launcher", choices=LAUNCHERS,
                   help="what starts the ranks: mpirun, the launcher of --mpi inside the "
                        "allocation (works with any MPI, the pip wheels included); or srun, "
                        "for a site MPI built with support for srun's --srun-mpi plugin "
                        "(default mpirun)")
    g.add_argument("--srun-mpi", metavar="PLUGIN",
                   help="srun --mpi=PLUGIN with --slurm-launcher srun (srun --mpi=list names "
                        "a cluster's); default: " + ", ".join(
                            f"{p} for {IMPLEMENTATIONS[m].title}" for m, p in SRUN_MPI.items()))
    g.add_argument("--env-setup", metavar="LINES",
                   help="shell lines run first on the nodes, such as 'module load openmpi' "
                        "(default: none)")
    g.add_argument("--activate", action=argparse.BooleanOptionalAction,
                   help="after --env-setup, activate the environment of this python, "
                        f"{sys.prefix}, which must be at that path on every node, so that "
                        "distgnn-train and python are found there (default: activate; "
                        "--no-activate when --env-setup makes them runnable)")
    g.add_argument("--requeue", action=argparse.BooleanOptionalAction,
                   help="when SLURM signals the job before its time limit, requeue it once "
                        "the ranks have checkpointed, to resume where it stopped "
                        "(distgnn-train gets --resume-if-present DIR of its --checkpoint-dir "
                        "DIR); default: for a distgnn-train that checkpoints")

def cluster_parser() -> argparse.ArgumentParser:
    p = OneLineParser(prog=f"{PROG} cluster", formatter_class=DefaultsHelpFormatter,
                      description="An emulated cluster on this host: one network namespace "
                                  "per node, links shaped with tc (bandwidth only: this "
                                  "kernel cannot inject latency). Needs CAP_NET_ADMIN.")
    sub = p.add_subparsers(dest="action", required=True, parser_class=OneLineParser)

    def action(name: str, text: str) -> argparse.ArgumentParser:
        s = sub.add_parser(name, help=text, description=text,
                           formatter_class=DefaultsHelpFormatter)
        s.add_argument("--name", default=cluster.DEFAULT_NAME, help="cluster name")
        return s

    def node(s: argparse.ArgumentParser) -> None:
        s.add_argument("--node", type=int, required=True,
                       help="node index (required: there is no default)")

    s = action("up", "make the nodes, links, hostfile and agent, and record each link and "
                     "namespace so that down removes only those")
    s.add_argument("--nodes", type=int, required=True,
                   help="emulated nodes (required: there is no default)")
    s.add_argument("--rate", default="1gbit",
                   help="bandwidth of every node's link, each direction (tc rate)")
    s.add_argument("--slots", type=int, default=1, help="MPI slots per node")
    action("down", "remove what up made and recorded, naming anything of the cluster's names "
                   "it did not make (idempotent)")
    action("status", "nodes, rates and the bytes each node sent")
    s = action("shape", "change one node's link rate")
    node(s)
    s.add_argument("--rate", required=True,
                   help="the new rate (tc rate, e.g. 100mbit; required: there is no default)")
    s = action("link", "bring one node's link down or up (failure drills)")
    node(s)
    s.add_argument("state", choices=("down", "up"), help="the link's new state")
    node(action("kill", "kill every process of one node, as if it crashed (failure drills)"))
    return p


def cluster_main(argv: list[str]) -> int:
    args = cluster_parser().parse_args(argv)

    def existing() -> cluster.Cluster:
        found = cluster.load(args.name)
        if found is None:
            raise cluster.ClusterError(f"no emulated cluster {args.name!r} is up; "
                                       f"start one with {PROG} cluster up --nodes N")
        if not 0 <= getattr(args, "node", 0) < found.nodes:
            raise cluster.ClusterError(f"--node must be from 0 to {found.nodes - 1}")
        return found

    def act() -> int:
        if args.action == "up":
            c = cluster.up(args.nodes, args.rate, args.slots, args.name)
            addresses = ", ".join(map(c.address, range(c.nodes)))
            print(f"cluster {c.name}: {c.nodes} nodes ({addresses}), links at {c.rate}; "
                  f"{cluster.NO_NETEM}")
            print(f"run jobs with: {PROG} --hostfile {c.state / 'hostfile'} -n {c.nodes} -- "
                  "COMMAND (or mpirun --hostfile with the options of --dry-run)")
        elif args.action == "down":
            removed = cluster.summary(cluster.down(args.name))
            print(f"cluster {args.name}: " + (f"removed {removed}" if removed
                                              else "nothing to remove"))
        elif args.action == "status":
            c = existing()
            print(f"cluster {c.name}: {c.nodes} nodes, links at {c.rate}; {cluster.NO_NETEM}")
            for i in range(c.nodes):
                counts = cluster.link_bytes(c, i)
                print(f"  node{i} {c.address(i)} ({c.namespace(i)}): sent {counts['tx']:,} "
                      f"bytes, received {counts['rx']:,}")
        elif args.action == "shape":
            c = existing()
            cluster.shape(c, args.node, args.rate)
            print(f"node{args.node}: link at {args.rate}")
        elif args.action == "link":
            c = existing()
            cluster.set_link(c, args.node, args.state)
            print(f"node{args.node}: link {args.state}")
        else:
            killed = cluster.kill_node(existing(), args.node)
            print(f"node{args.node}: killed {killed} processes")
        return 0

    return run_guarded(f"{PROG} cluster", act)


@interruptible("distgnn-launch")
def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["cluster"]:
        return cluster_main(argv[1:])
    args = parser().parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    for dest, why in RUN_ONLY.items():
        if args.slurm and getattr(args, dest) is not None:
            return fail(PROG, f"--{dest.replace('_', '-')} does not apply to --slurm ({why})")
    for dest in SLURM_ONLY:
        if not args.slurm and getattr(args, dest) is not None:
            return fail(PROG, f"--{dest.replace('_', '-')} applies only to the sbatch script "
                              "of --slurm")

    implementation = None if args.mpi in (None, "auto") else args.mpi
    mpirun = args.mpirun
    if mpirun and os.sep not in mpirun and not args.slurm:  # a script's: the nodes' PATH
        mpirun = shutil.which(mpirun) or mpirun
    if mpirun and os.sep in mpirun:  # absolute: the ranks find its library by it
        mpirun = os.path.abspath(mpirun)

    def write_slurm():
        out = check_output_file(args.slurm, "--slurm")
        check_replaceable(out, is_sbatch_script, "an sbatch script written by distgnn-launch")
        given = {dest: getattr(args, dest) for dest in SLURM_ONLY
                 if getattr(args, dest) is not None}
        script = sbatch_script(args.ranks, command, args.threads_per_rank,
                               implementation=implementation, mpirun=mpirun,
                               warn=lambda line: print(f"{PROG}: warning: {line}",
                                                       file=sys.stderr), **given)
        write_atomic(out, script)
        print(f"wrote {out}; submit it with: sbatch {out}")
        return 0

    def launch():
        stop_grace = DEFAULT_STOP_GRACE_S if args.stop_grace is None else args.stop_grace
        start_timeout = (DEFAULT_START_TIMEOUT_S if args.start_timeout is None
                         else args.start_timeout)
        check_times(args.timeout, stop_grace, start_timeout)
        given = args.gpus_per_node or "auto"
        if given != "auto" and not re.fullmatch(r"[0-9]+", given):
            raise LaunchError(f"--gpus-per-node must be a count or auto, got {given!r}")
        gpus = count_gpus() if given == "auto" else int(given)
        job = plan(args.ranks, command, args.threads_per_rank, hostfile=args.hostfile,
                   implementation=implementation, mpirun=mpirun, gpus_per_node=gpus)
        if args.dry_run:
            print(job.shell())
            return 0
        # the words before COMMAND: what a stopped job's line says to run again
        relaunch = [PROG, *argv[:len(argv) - len(args.command)]]
        return run(job, timeout=args.timeout, stop_grace=stop_grace,
                   start_timeout=start_timeout, relaunch=relaunch)

    return run_guarded(PROG, write_slurm if args.slurm else launch)
