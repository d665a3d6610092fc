"""Predictions and embeddings of partitioned training against single-socket training.

    python experiments/results_agreement.py --dataset cora --ranks 4 --work runs/agree

Trains ``--dataset`` for ``--epochs`` epochs (seed 0, dropout on) in one process and on
``--ranks`` libra partitions under each of ``--algos``, every run writing
``--predictions-out`` (``.npz``) and ``--embeddings-out``; then compares each partitioned
run's files with the single-socket run's: every vertex once, the share of vertices with the
same predicted class, the largest relative difference of the probabilities, and the
largest row-wise relative difference of the embeddings (``|e - e_1| / |e_1|`` per vertex).
Prints a Markdown table with each run's test accuracy (at best validation).  ``--flags``
adds flags to every run (``--dtype float64`` separates the exchange's exactness from
float32 rounding, which grows over many epochs).
"""
from __future__ import annotations

import argparse
import re
from pathlib import Path

import numpy as np
from inference_cost import BIN, run  # this folder's: the command runner of both scripts


def train(prefix: list, data: list, name: str, a, work: Path) -> tuple[str, Path, Path]:
    """(test accuracy line, predictions, embeddings) of one run."""
    pred, emb = work / f"{name}.npz", work / f"{name}.npy"
    for stale in (pred, emb):
        stale.unlink(missing_ok=True)
    out = run([*prefix, BIN / "distgnn-train", *data, *a.flags.split(), "--epochs", a.epochs,
               "--threads", 1, "--no-progress", "--predictions-out", pred, "--embeddings-out", emb])
    acc = re.search(r"test accuracy ([0-9.]+ %) at epoch (\d+)", out)
    return f"{acc.group(1)} (epoch {acc.group(2)})", pred, emb


def compare(one: tuple[Path, Path], other: tuple[Path, Path]) -> dict:
    a, b = np.load(one[0]), np.load(other[0])
    if not np.array_equal(a["vertex"], b["vertex"]):
        raise SystemExit(f"{other[0]}: not the same vertices, in the same order")
    ea, eb = np.load(one[1]), np.load(other[1])
    rel = np.abs(b["probabilities"] - a["probabilities"]) / np.abs(a["probabilities"])
    rows = np.linalg.norm(eb - ea, axis=1) / np.maximum(np.linalg.norm(ea, axis=1), 1e-30)
    return {"vertices": len(b["vertex"]), "distinct": len(np.unique(b["vertex"])),
            "argmax_equal": float((a["predicted_class"] == b["predicted_class"]).mean()),
            "prob_rel": float(rel.max()), "emb_row_rel": float(rows.max())}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--dataset", default="cora", help="a dataset distgnn-train reads")
    p.add_argument("--ranks", type=int, default=4)
    p.add_argument("--epochs", type=int, default=20)
    p.add_argument("--algos", default="cd-0,cd-r,0c", help="comma-separated --algo values")
    p.add_argument("--flags", default="", help="more distgnn-train flags for every run, "
                   "such as '--dtype float64'")
    p.add_argument("--work", type=Path, default=Path("runs/agree"),
                   help="folder for partitions and outputs (kept)")
    a = p.parse_args()
    a.work.mkdir(parents=True, exist_ok=True)
    parts = a.work / f"p{a.ranks}"
    if not (parts / "meta.json").exists():
        run([BIN / "distgnn-partition", a.dataset, "--parts", a.ranks, "--out", parts])
    acc, *one = train([], ["--dataset", a.dataset], "one", a, a.work)
    print(f"{a.dataset} {a.flags}, {a.epochs} epochs, single socket: test accuracy {acc}\n")
    print(f"| {a.ranks} ranks | test accuracy | vertices written (distinct) | same class as "
          "one socket | probabilities, max rel. diff | embeddings, max row-wise rel. diff |")
    print("|---|---|---|---|---|---|")
    launch = [BIN / "distgnn-launch", "-n", a.ranks, "--threads-per-rank", 1, "--"]
    for algo in a.algos.split(","):
        acc, *files = train(launch, ["--partitions", parts, "--algo", algo], algo, a, a.work)
        c = compare(one, files)
        print(f"| {algo} | {acc} | {c['vertices']} ({c['distinct']}) | "
              f"{100 * c['argmax_equal']:.2f} % | {c['prob_rel']:.1e} | "
              f"{c['emb_row_rel']:.1e} |")


if __name__ == "__main__":
    main()
