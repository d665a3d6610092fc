"""Inference (``distgnn-predict``) against a training epoch: time and peak memory per rank,
on one socket and on partitions.

    python experiments/inference_cost.py --scale 20 --ranks 4 --work runs/inference

For the graph ``rmat:scale=S,edge_factor=16,features=128`` it trains ``--model`` (hidden
``--hidden``) for ``--epochs`` epochs with ``--save-model``, then applies the saved model
with ``distgnn-predict`` to the same graph: in one process (``--threads``) and on
``--ranks`` partitions under ``distgnn-launch`` (one thread per rank).  Reported per mode:
the first training epoch and the median of the others (``epoch_s`` of the metrics file), the
last epoch's evaluation (``eval_s_mean``: the same forward pass as inference, in a warm
process), the inference time ``distgnn-predict`` reports (forward pass and accuracies in a
fresh process, the slowest rank), and the peak resident memory of the ranks (``VmHWM``, max
and mean over ranks; loading the data included) of each command.
Prints a Markdown table and writes the figures as JSON to ``--out``.
"""
from __future__ import annotations

import argparse
import json
import re
import statistics
import subprocess
import sys
from pathlib import Path

from distgnn import read_metrics

BIN = Path(sys.executable).parent


def run(cmd: list) -> str:
    """stdout of ``cmd``; its output and the command on failure."""
    proc = subprocess.run([str(c) for c in cmd], capture_output=True, text=True)
    if proc.returncode:
        sys.exit(f"failed ({proc.returncode}): {' '.join(map(str, cmd))}\n"
                 f"{proc.stdout[-2000:]}{proc.stderr[-3000:]}")
    return proc.stdout


def peak_line(out: str) -> tuple[float, float]:
    """(max, mean) GiB of the ``peak memory per rank`` line."""
    line = next(li for li in out.splitlines() if li.startswith("peak memory per rank"))
    high, mean = (float(w) for w in re.findall(r"([0-9.]+) GiB", line))
    return high, mean


def measure(mode: str, train_prefix: list, predict_prefix: list, data: list, a, work: Path
            ) -> dict:
    name = mode.replace(" ", "-")
    model, metrics = work / f"{name}.pt", work / f"{name}.jsonl"
    for stale in (model, metrics):
        stale.unlink(missing_ok=True)
    run([*train_prefix, BIN / "distgnn-train", *data, "--model", a.model, "--hidden", a.hidden,
         "--epochs", a.epochs, "--no-progress", "--save-model", model, "--metrics-out",
         metrics])
    records, _ = read_metrics(metrics)
    out = run([*predict_prefix, BIN / "distgnn-predict", model, *data])
    inference_ms = float(re.search(r"inference ([0-9.]+) ms", out).group(1))
    high, mean = peak_line(out)
    return {"mode": mode, "first_epoch_s": records[0]["epoch_s"],
            "epoch_s": statistics.median(r["epoch_s"] for r in records[1:]),
            "eval_s": records[-1]["eval_s_mean"],
            "train_peak_gib_max": records[-1]["peak_rss_mib_max"] / 1024,
            "train_peak_gib_mean": records[-1]["peak_rss_mib_mean"] / 1024,
            "inference_s": inference_ms / 1e3, "predict_peak_gib_max": high,
            "predict_peak_gib_mean": mean}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--scale", type=int, default=20, help="R-MAT scale (2^S vertices)")
    p.add_argument("--model", default="gcn", help="distgnn-train --model")
    p.add_argument("--hidden", type=int, default=256)
    p.add_argument("--epochs", type=int, default=3, help="training epochs (the first is "
                   "not timed)")
    p.add_argument("--ranks", type=int, default=4, help="partitions and ranks")
    p.add_argument("--threads", type=int, default=2, help="threads of the one-socket run")
    p.add_argument("--work", type=Path, default=Path("runs/inference"),
                   help="folder for partitions, models and metrics (kept)")
    p.add_argument("--out", type=Path, help="JSON file of the figures")
    a = p.parse_args()
    a.work.mkdir(parents=True, exist_ok=True)
    spec = f"rmat:scale={a.scale},edge_factor=16,features=128"
    parts = a.work / f"rmat{a.scale}-p{a.ranks}"
    if not (parts / "meta.json").exists():
        run([BIN / "distgnn-partition", spec, "--parts", a.ranks, "--out", parts])
    launch = [BIN / "distgnn-launch", "-n", a.ranks, "--threads-per-rank", 1, "--"]
    rows = [measure("one socket", [], [], ["--dataset", spec, "--threads", a.threads], a,
                    a.work),
            measure(f"{a.ranks} ranks", launch, launch, ["--partitions", parts], a, a.work)]
    print(f"{spec}, --model {a.model} --hidden {a.hidden}\n")
    print("| run | training epoch (first, median of the rest) | evaluation in training | "
          "distgnn-predict inference | training peak/rank (max, mean) "
          "| distgnn-predict peak/rank (max, mean) | peak ratio (max) |")
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['mode']} | {r['first_epoch_s']:.2f}, {r['epoch_s']:.2f} s | "
              f"{r['eval_s']:.2f} s | {r['inference_s']:.2f} s | "
              f"{r['train_peak_gib_max']:.2f}, "
              f"{r['train_peak_gib_mean']:.2f} GiB | {r['predict_peak_gib_max']:.2f}, "
              f"{r['predict_peak_gib_mean']:.2f} GiB | "
              f"{r['predict_peak_gib_max'] / r['train_peak_gib_max']:.2f} |")
    if a.out:
        a.out.write_text(json.dumps({"spec": spec, "model": a.model, "hidden": a.hidden,
                                     "rows": rows}, indent=1) + "\n")


if __name__ == "__main__":
    main()
