"""Failure drills on real mpirun jobs: kill a rank, resume, compare; time to job exit.

For each P and exchange algorithm, three runs of the same ``distgnn-train --partitions``
command line (dropout on, fixed seed):

1. uninterrupted, to the end;
2. the same with ``--checkpoint-dir``, whose rank 1 gets SIGKILL as soon as a chosen
   checkpoint exists; the seconds from the kill to the exit of the whole job are timed;
3. resumed from that directory with the same command line plus ``--resume``.

The resumed run's loss curve and final weights are compared with the uninterrupted run's
(they should be identical: every source of randomness and all cd-r state is restored).
``--hang`` also stops a rank with SIGSTOP (a hung rank, which the launcher cannot see die)
and times the watchdog of ``--comm-timeout`` ending the job.
"""
from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

from distgnn.program import comma_list

BIN = Path(sys.executable).parent
JOB_MARKER = "DISTGNN_DRILL_JOB"
RANK_VARIABLES = ("OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK")


HELP = "kill a rank mid-run, resume, compare with the uninterrupted run"
DESCRIPTION = ("Failure drills on real mpirun jobs: for each P and algorithm, SIGKILL rank 1 "
               "after a checkpoint, time the job's exit, resume, and compare loss curve and "
               "final weights with an uninterrupted run.")


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--dataset", default="cora", help="dataset or generator spec")
    p.add_argument("--ranks", default=[2, 4], type=comma_list(int),
                   help="comma-separated P (more than the cores run oversubscribed)")
    p.add_argument("--algos", default=["cd-0", "cd-5"], type=comma_list(str),
                   help="comma-separated exchanges: 0c, cd-0, cd-R (cd-r with delay R)")
    p.add_argument("--epochs", type=int, default=100, help="epochs of every run")
    p.add_argument("--checkpoint-every", type=int, default=10, help="epochs between checkpoints")
    p.add_argument("--kill-after", type=int, default=20,
                   help="kill rank 1 once the checkpoint after this many epochs exists")
    p.add_argument("--seed", type=int, default=0, help="training seed")
    p.add_argument("--hang", action="store_true",
                   help="also SIGSTOP rank 1 (a hang) and time the --comm-timeout watchdog")
    p.add_argument("--comm-timeout", type=float,
                   help="--comm-timeout of the --hang job (default: distgnn-train's)")
    p.add_argument("--json", metavar="FILE", help="write the results here")

def start_job(ranks: int, flags: list[str], marker: str):
    """``(process, plan)`` of ``distgnn-train FLAGS`` started on ``ranks`` ranks.

    Each rank runs one thread, as :mod:`launch` composes it; every rank's environment
    carries ``marker`` so that :func:`rank_pid` can find it.  The caller removes the plan's
    session directories once the job ended (``plan.remove_session()``)."""
    import launch

    plan = launch.plan(ranks, [str(BIN / "distgnn-train"), *flags, "--no-progress"],
                       threads_per_rank=1)
    env = {**os.environ, **plan.env, JOB_MARKER: marker}
    return subprocess.Popen(plan.argv, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True), plan


def rank_pid(marker: str, rank: int) -> int | None:
    """PID of rank ``rank`` of the job started with ``marker`` (from /proc), if running."""
    want = {f"{JOB_MARKER}={marker}".encode()}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            env = set((entry / "environ").read_bytes().split(b"\0"))
        except OSError:
            continue
        if want <= env and any(f"{v}={rank}".encode() in env for v in RANK_VARIABLES):
            return int(entry.name)
    return None


def wait_for(condition, proc: subprocess.Popen, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if proc.poll() is not None:
            raise RuntimeError(f"the job ended ({proc.returncode}) before {what}:\n"
                               f"{proc.stderr.read()[-2000:]}")
        if time.monotonic() > deadline:
            proc.kill()
            raise RuntimeError(f"no {what} within {timeout:g} s")
        time.sleep(0.01)


def final_state(directory: Path) -> dict:
    """``state.pt`` of the newest checkpoint in ``directory``."""
    from distgnn.run.checkpoint_files import checkpoints

    return torch.load(checkpoints(directory)[0] / "state.pt", weights_only=True)


def run_to_end(ranks: int, flags: list[str], marker: str, timeout: float = 600):
    proc, plan = start_job(ranks, flags, marker)
    try:
        out, err = proc.communicate(timeout=timeout)
    finally:
        plan.remove_session()
    if proc.returncode:
        raise RuntimeError(f"distgnn-train {' '.join(flags)} failed ({proc.returncode}):\n"
                           f"{err[-2000:]}")
    return out


def interrupt(ranks: int, flags: list[str], checkpoint_dir: Path, after: int, sig: int,
              targets: tuple[int, ...] = (1,), timeout: float = 600) -> dict:
    """Start the job, send ``sig`` to ranks ``targets`` once checkpoint ``after`` exists;
    returns the job's exit status, stderr and seconds from the signal to the job's exit."""
    from distgnn.run.checkpoint_files import checkpoint_name

    marker = f"{os.getpid()}-{time.monotonic_ns()}"
    proc, plan = start_job(ranks, flags, marker)
    ready = checkpoint_dir / checkpoint_name(after) / "manifest.json"
    wait_for(ready.exists, proc, timeout, f"checkpoint {ready.parent.name}")
    pids = [rank_pid(marker, rank) for rank in targets]
    if None in pids:
        raise RuntimeError(f"ranks {targets} not all found in /proc")
    sent = time.monotonic()
    for pid in pids:
        os.kill(pid, sig)
    try:
        _, err = proc.communicate(timeout=timeout)
    finally:
        if sig == signal.SIGSTOP:
            for pid in pids:
                _kill_quietly(pid)
        plan.remove_session()
    return {"status": proc.returncode, "stderr": err, "exit_s": time.monotonic() - sent}


def _kill_quietly(pid: int) -> None:
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def max_relative_difference(a: list[float], b: list[float]) -> float:
    if len(a) != len(b):
        return float("inf")
    return max((abs(x - y) / max(abs(y), 1e-30) for x, y in zip(a, b)), default=0.0)


def kill_and_resume(partitions: Path, ranks: int, flags: list[str], work: Path,
                    after: int) -> dict:
    """The drill for one job (see the module docstring); ``after`` picks the checkpoint
    after which rank 1 is killed (``--checkpoint-every`` must reach it)."""
    common = ["--partitions", str(partitions), *flags]
    whole_dir, drill_dir = work / "whole", work / "drill"
    run_to_end(ranks, [*common, "--checkpoint-dir", str(whole_dir)], "whole")
    killed = interrupt(ranks, [*common, "--checkpoint-dir", str(drill_dir)], drill_dir, after,
                       signal.SIGKILL)
    if killed["status"] == 0:
        raise RuntimeError("the job finished before rank 1 was killed; use more --epochs")
    from distgnn.run.checkpoint_files import checkpoints

    resumed_from = int(checkpoints(drill_dir)[0].name.split("-")[1])
    run_to_end(ranks, [*common, "--checkpoint-dir", str(drill_dir), "--resume", str(drill_dir)],
               "resumed")
    whole, resumed = final_state(whole_dir), final_state(drill_dir)
    weights = max(float((whole["model"][k] - resumed["model"][k]).abs().max())
                  for k in whole["model"])
    return {"ranks": ranks, "flags": flags, "killed_status": killed["status"],
            "death_to_exit_s": killed["exit_s"], "resumed_from": resumed_from,
            "epochs": len(whole["history"]),
            "loss_max_rel_diff": max_relative_difference(
                [r["loss"] for r in resumed["history"]], [r["loss"] for r in whole["history"]]),
            "weights_max_abs_diff": weights}


def main(args) -> int:
    from bench.output import finish
    from distgnn.data.datasets import load
    from partition.vertex_cut import vertex_cut
    from partition.write import write_dataset

    data = load(args.dataset)
    rows, hangs = [], []
    print(f"{args.dataset}: {args.epochs} epochs, checkpoint every {args.checkpoint_every}, "
          f"rank 1 killed after epoch {args.kill_after}", flush=True)
    print(f"{'P':>2} {'algo':6} {'killed':>7} {'to exit':>8} {'resumed':>8} "
          f"{'loss rel diff':>14} {'weight diff':>12}", flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        for P in args.ranks:
            parts = tmp / f"p{P}"
            write_dataset(parts, data, vertex_cut(data.graph, P, "libra", seed=0),
                          {"method": "libra", "seed": 0})
            for algo in args.algos:
                flags = ["--algo", *(["cd-r", "--delay", algo[3:]] if algo.startswith("cd-")
                                     and algo != "cd-0" else [algo]),
                         "--epochs", str(args.epochs), "--eval-every", "5",
                         "--checkpoint-every", str(args.checkpoint_every),
                         "--seed", str(args.seed)]
                row = kill_and_resume(parts, P, flags, tmp / f"p{P}-{algo}", args.kill_after)
                rows.append(dict(row, algo=algo))
                print(f"{P:>2} {algo:6} {row['killed_status']:>7} "
                      f"{row['death_to_exit_s']:>7.2f}s {row['resumed_from']:>8} "
                      f"{row['loss_max_rel_diff']:>14.3g} {row['weights_max_abs_diff']:>12.3g}",
                      flush=True)
            if args.hang:
                drill = tmp / f"hang-p{P}"
                hung = interrupt(P, ["--partitions", str(parts), "--epochs", str(args.epochs),
                                     "--checkpoint-dir", str(drill), "--checkpoint-every",
                                     str(args.checkpoint_every),
                                     *(["--comm-timeout", str(args.comm_timeout)]
                                       if args.comm_timeout is not None else [])],
                                 drill, args.kill_after, signal.SIGSTOP)
                hangs.append({"ranks": P, "status": hung["status"], "exit_s": hung["exit_s"]})
                print(f"P={P}: rank 1 stopped (SIGSTOP): job exited with status "
                      f"{hung['status']} after {hung['exit_s']:.2f} s", flush=True)
    finish({"benchmark": "resume", "dataset": args.dataset, "epochs": args.epochs,
            "drills": rows, "hangs": hangs}, args)
    return 0
