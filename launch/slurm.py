"""The sbatch script of a distgnn job: P tasks of T cores each, started by ``srun``."""
from __future__ import annotations

import re
import shlex
from pathlib import Path

from distgnn.storage import file_head

from .mpirun import RANK_ENV, LaunchError, rank_command

MARK = "# written by distgnn-launch --slurm"
DEFAULT_TIME = "01:00:00"
DEFAULT_STOP_BEFORE_S = 120
# sbatch --signal takes its time in a 16-bit field
MAX_SIGNAL_S = 65535
# SLURM reads a time limit into a C int of seconds
MAX_TIME_S = 2**31 - 1
TIME_FORMATS = "minutes, MM:SS, HH:MM:SS, D-HH, D-HH:MM or D-HH:MM:SS"


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


def sbatch_script(ranks: int, command: list[str], threads_per_rank: int = 1,
                  nodes: int | None = None, time: str = DEFAULT_TIME,
                  partition: str | None = None, job_name: str = "distgnn",
                  account: str | None = None,
                  stop_before: int = DEFAULT_STOP_BEFORE_S) -> str:
    """A bash script for ``sbatch`` that runs ``command`` on ``ranks`` tasks.

    ``--cpus-per-task`` reserves T cores per rank and ``srun --cpu-bind=cores`` pins each
    rank to its own, for the reasons given in :mod:`launch.mpirun`.  ``--signal`` has
    SLURM send SIGTERM to every rank ``stop_before`` seconds before the time limit, so
    that ``distgnn-train`` finishes its epoch and writes a checkpoint in time (at the
    limit itself only SLURM's KillWait, often 30 s, is left before SIGKILL).
    """
    command = rank_command(ranks, command, threads_per_rank)
    if nodes is not None and not 1 <= nodes <= ranks:
        raise LaunchError(f"--nodes must be from 1 to the {ranks} ranks, got {nodes}")
    if not 0 <= stop_before <= MAX_SIGNAL_S:
        raise LaunchError(f"--stop-before must be from 0 to {MAX_SIGNAL_S} seconds (sbatch "
                          f"--signal), got {stop_before}")
    limit = time_limit_s(time)
    if stop_before and limit is not None and stop_before >= limit:
        raise LaunchError(f"--stop-before {stop_before} s must be shorter than --time {time} "
                          f"({limit} s): SLURM would signal the job as it starts")
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
