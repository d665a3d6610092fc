"""The sbatch script of a distgnn job: P tasks of T cores each, started by ``srun``."""
from __future__ import annotations

import shlex
from pathlib import Path

from distgnn.storage import file_head

from .mpirun import RANK_ENV, LaunchError, rank_command

MARK = "# written by distgnn-launch --slurm"


def is_sbatch_script(path: Path) -> bool:
    """A script :func:`sbatch_script` wrote (its second line is ``MARK``)."""
    return file_head(path, 256).decode(errors="replace").split("\n")[1:2] == [MARK]


def sbatch_script(ranks: int, command: list[str], threads_per_rank: int = 1,
                  nodes: int | None = None, time: str = "01:00:00",
                  partition: str | None = None, job_name: str = "distgnn",
                  account: str | None = None, stop_before: int = 120) -> str:
    """A bash script for ``sbatch`` that runs ``command`` on ``ranks`` tasks.

    ``--cpus-per-task`` reserves T cores per rank and ``srun --cpu-bind=cores`` pins each
    rank to its own, for the reasons given in :mod:`launch.mpirun`.  ``--signal`` has
    SLURM send SIGTERM to every rank ``stop_before`` seconds before the time limit, so
    that ``distgnn-train`` finishes its epoch and writes a checkpoint in time (at the
    limit itself only SLURM's KillWait, often 30 s, is left before SIGKILL).
    """
    if stop_before < 0:
        raise LaunchError(f"stop_before must be >= 0 seconds, got {stop_before}")
    command = rank_command(ranks, command, threads_per_rank)
    if nodes is not None and nodes < 1:
        raise LaunchError(f"nodes must be >= 1, got {nodes}")
    options = {"job-name": job_name, "ntasks": ranks, "cpus-per-task": threads_per_rank,
               "nodes": nodes, "time": time, "partition": partition, "account": account,
               "signal": f"TERM@{stop_before}" if stop_before else None}
    lines = ["#!/bin/bash", MARK]
    for key, value in options.items():
        if value is None:
            continue
        # sbatch splits an #SBATCH line at whitespace, and a newline would end the header.
        if not str(value) or any(c.isspace() for c in str(value)):
            raise LaunchError(f"--{key} must be a non-empty word without spaces, got {value!r}")
        lines.append(f"#SBATCH --{key}={value}")
    lines += ["set -euo pipefail",
              *(f"export {name}=$SLURM_CPUS_PER_TASK" for name in RANK_ENV),
              # srun no longer inherits --cpus-per-task from sbatch (Slurm >= 22.05), and
              # without it every rank would be bound to a single core.
              'srun --cpus-per-task="$SLURM_CPUS_PER_TASK" --cpu-bind=cores '
              + shlex.join(command),
              ""]
    return "\n".join(lines)
