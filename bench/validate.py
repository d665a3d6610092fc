"""Measured epochs at small P, to check ``distgnn-bench predict`` against.

P = 1 is single-socket training; P > 1 partitions the graph (libra) into a temporary
directory and runs ``distgnn-train --partitions`` under mpirun (composed by
:mod:`launch`, oversubscribed when ``P x T`` exceeds the cores, which the report states).
"""
from __future__ import annotations

import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from distgnn.run.epoch_log import read_metrics

__all__ = ["train_records"]

BIN = Path(sys.executable).parent


def train_records(flags: list[str], metrics: Path, ranks: int = 1, threads: int = 1
                  ) -> list[dict]:
    """Metrics records of ``distgnn-train FLAGS`` with ``threads`` threads, under mpirun (as
    :mod:`launch` composes it) when ``ranks`` > 1."""
    import launch

    command = [str(BIN / "distgnn-train"), *flags, "--threads", str(threads), "--no-progress",
               "--metrics-out", str(metrics)]
    env, plan = dict(os.environ), None
    if ranks > 1:
        plan = launch.plan(ranks, command, threads_per_rank=threads)
        command, env = plan.argv, {**env, **plan.env}
    try:
        proc = subprocess.run(command, env=env, capture_output=True, text=True)
    finally:
        if plan is not None:
            plan.remove_session()
    if proc.returncode:
        raise RuntimeError(f"failed ({proc.returncode}): {' '.join(command)}\n"
                           f"{proc.stderr[-2000:]}")
    return read_metrics(metrics)[0]


def measured_epoch(flags: list[str], ranks: int, threads: int, metrics: Path) -> float:
    """Median epoch seconds (first epoch excluded) of a ``distgnn-train`` run."""
    records = train_records(flags, metrics, ranks, threads)[1:]
    return statistics.median(r["epoch_s"] for r in records)


def validate(args, rows: list[dict]) -> list[dict]:
    """Prediction error ``(predicted - measured) / measured`` at each P of ``--validate``."""
    predicted = {r["parts"]: r for r in rows}
    common = ["--model", args.model, "--hidden", str(args.hidden), "--layers", str(args.layers),
              "--epochs", "4", "--eval-every", "4"]
    algos = {"0c": ["--algo", "0c"], "cd-0": ["--algo", "cd-0"],
             "cd-r": ["--algo", "cd-r", "--delay", str(args.delay)],
             "cd-r default": ["--algo", "cd-r"]}
    out = []
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        for P in args.validate:
            if P not in predicted:
                raise RuntimeError(f"--validate {P}: no prediction for P={P} (add it to --parts)")
            oversubscribed = P * args.threads > (os.cpu_count() or 1)
            if P == 1:
                runs = {a: ["--dataset", args.dataset] for a in algos}
            else:
                directory = tmp / f"p{P}"
                subprocess.run([str(BIN / "distgnn-partition"), args.dataset, "--parts", str(P),
                                "--out", str(directory), "--no-progress"], check=True,
                               stdout=subprocess.DEVNULL)
                runs = {a: ["--partitions", str(directory), *flags] for a, flags in algos.items()}
            for algo, flags in runs.items():
                seconds = measured_epoch([*flags, *common], P, args.threads, tmp / "m.jsonl")
                pred = predicted[P][algo]["epoch"]
                out.append({"parts": P, "algo": algo, "measured_s": seconds, "predicted_s": pred,
                            "error": (pred - seconds) / seconds,
                            "oversubscribed": oversubscribed})
                print(f"  validate P={P} {algo:12} measured {seconds:.4f} s, predicted "
                      f"{pred:.4f} s, error {100 * (pred - seconds) / seconds:+.1f} %"
                      + (" (oversubscribed)" if oversubscribed else ""), flush=True)
                if P == 1:
                    break  # one rank: the algorithms are the same run
    return out
