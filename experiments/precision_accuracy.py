"""Test accuracy under ``--precision fp32`` and ``bf16-mixed``, several seeds per dataset.

    python experiments/precision_accuracy.py --data ../shared/datasets --dataset cora \\
        --dataset citeseer --dataset tolokers --dataset squirrel_filtered \\
        --dataset "sbm:nodes=60000,noise=3" --models gcn,sage --seeds 0,1,2 \\
        --out runs/precision-accuracy.json

Each run is ``distgnn.train`` in this process (one process, ``--threads`` threads, every
other option at its default; ``sbm:`` specs with ``--feature-norm none``, their features
being noise around the block one-hot): the test metric at the evaluation of best validation
accuracy, and for a two-class dataset (tolokers) the test ROC-AUC at the best validation
ROC-AUC instead.  Prints a Markdown table of mean +- standard deviation over the seeds and
the difference bf16-mixed - fp32 in points, and writes every run as JSON to ``--out``.
"""
from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

from distgnn import TrainConfig, load, train

PRECISIONS = ("fp32", "bf16-mixed")


def test_metric(data, model: str, precision: str, seed: int, threads: int) -> tuple[str, float]:
    """(metric name, value in points) of one run."""
    binary = data.num_classes == 2
    cfg = TrainConfig(model=model, precision=precision, seed=seed, threads=threads,
                      roc_auc=binary, progress=False,
                      **({"feature_norm": "none"} if data.name.startswith("sbm") else {}))
    result = train(data, cfg, log=lambda s: None)
    if binary:
        best = max((r for r in result.history if r.get("val_roc_auc") is not None),
                   key=lambda r: r["val_roc_auc"])
        return "test ROC-AUC", 100 * best["test_roc_auc"]
    return "test accuracy", 100 * result.best["test_acc"]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--data", type=Path, default=Path("../shared/datasets"),
                   help="folder of the datasets' .npz files")
    p.add_argument("--dataset", action="append",
                   help="a name (a file in --data) or a generator spec; repeat for several "
                        "(default: cora, citeseer, tolokers, squirrel_filtered)")
    p.add_argument("--models", default="gcn", help="comma-separated built-in models")
    p.add_argument("--seeds", default="0,1,2", help="comma-separated seeds")
    p.add_argument("--precisions", default=",".join(PRECISIONS),
                   help="comma-separated precisions to run (default: both; the table's "
                        "difference needs both)")
    p.add_argument("--threads", type=int, default=2, help="threads of each run")
    p.add_argument("--out", type=Path, help="JSON file of every run")
    a = p.parse_args()
    seeds = [int(s) for s in a.seeds.split(",")]
    precisions = a.precisions.split(",")
    if not set(precisions) <= set(PRECISIONS):
        p.error(f"--precisions takes {', '.join(PRECISIONS)}, got {a.precisions!r}")
    runs, lines = [], ["| dataset | model | metric | fp32 | bf16-mixed | difference |",
                       "|---|---|---|---|---|---|"]
    for spec in a.dataset or ["cora", "citeseer", "tolokers", "squirrel_filtered"]:
        data = load(spec if ":" in spec else str(a.data / f"{spec}.npz"))
        for model in a.models.split(","):
            values = {}
            for precision in precisions:
                values[precision] = []
                for seed in seeds:
                    started = time.perf_counter()
                    metric, value = test_metric(data, model, precision, seed, a.threads)
                    values[precision].append(value)
                    runs.append({"dataset": data.name, "model": model, "precision": precision,
                                 "seed": seed, "metric": metric, "value": value,
                                 "seconds": time.perf_counter() - started})
                    print(json.dumps(runs[-1]), flush=True)
            mean = {k: statistics.mean(v) for k, v in values.items()}
            sd = {k: statistics.stdev(v) if len(v) > 1 else 0.0 for k, v in values.items()}
            both = len(mean) == len(PRECISIONS)
            lines.append(f"| {data.name} | {model} | {metric} | "
                         + " | ".join(f"{mean[k]:.2f} +- {sd[k]:.2f}" if k in mean else "-"
                                      for k in PRECISIONS)
                         + (f" | {mean['bf16-mixed'] - mean['fp32']:+.2f} |" if both
                            else " | - |"))
    print("\n".join(lines))
    if a.out:
        a.out.parent.mkdir(parents=True, exist_ok=True)
        a.out.write_text(json.dumps(runs, indent=1))


if __name__ == "__main__":
    main()
