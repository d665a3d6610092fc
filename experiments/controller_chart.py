"""The decisions of cd-r's default schedule over one run, as a chart: the training loss per
epoch, each epoch marked exact or stale, beside cd-0's loss on the same partitions and seed.

    python experiments/controller_chart.py --partitions DIR --ranks P [--seed S]
        [--epochs 200] [--extra "--feature-norm none"] --out chart.png [--json F]

Trains twice with ``distgnn-launch -n P -- distgnn-train`` (``--algo cd-r`` alone, then
``--algo cd-0``), reads the metrics files (``exact_exchange`` per epoch) and draws the
chart; prints the share of exact epochs, the longest loss rise of each run and the
accuracy at the best validation epoch.
"""
from __future__ import annotations

import argparse
import json
import shlex
import sys
import tempfile
from pathlib import Path

from drpa_figures import best_test  # beside this script

from bench.validate import train_records
from distgnn.run.epoch_log import longest_rise
from distgnn.storage import write_atomic


def chart(default: list[dict], cd0: list[dict], title: str, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 4))
    ax.plot([r["epoch"] for r in cd0], [r["loss"] for r in cd0], color="0.6", lw=1,
            label="cd-0")
    ax.plot([r["epoch"] for r in default], [r["loss"] for r in default], color="C0", lw=1,
            label="cd-r default")
    for exact, colour, label in ((True, "C3", "exact epoch"), (False, "C2", "stale epoch")):
        mine = [r for r in default if r["exact_exchange"] == exact]
        ax.scatter([r["epoch"] for r in mine], [r["loss"] for r in mine], s=6, color=colour,
                   label=label, zorder=3)
    ax.set_yscale("log")
    ax.set_xlabel("epoch")
    ax.set_ylabel("training loss")
    ax.set_title(title)
    ax.legend()
    fig.savefig(path, dpi=110, bbox_inches="tight")
    plt.close(fig)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--partitions", type=Path, required=True, help="partition folder")
    p.add_argument("--ranks", type=int, required=True, help="its partition count")
    p.add_argument("--seed", type=int, default=1, help="training seed")
    p.add_argument("--epochs", type=int, default=200, help="epochs per run")
    p.add_argument("--extra", default="", help="more distgnn-train flags, one string")
    p.add_argument("--title", default=None, help="chart title (default: the folder's name)")
    p.add_argument("--out", type=Path, required=True, help="the chart (.png)")
    p.add_argument("--json", type=Path, help="write both runs' records here")
    a = p.parse_args()
    common = ["--partitions", str(a.partitions), "--seed", str(a.seed), "--epochs",
              str(a.epochs), *shlex.split(a.extra)]
    with tempfile.TemporaryDirectory() as tmp:
        runs = {algo: train_records([*common, "--algo", algo], Path(tmp) / f"{algo}.jsonl",
                                    ranks=a.ranks)
                for algo in ("cd-r", "cd-0")}
    default, cd0 = runs["cd-r"], runs["cd-0"]
    exact = sum(r["exact_exchange"] for r in default)
    for name, records in (("cd-r default", default), ("cd-0", cd0)):
        print(f"{name:12} test {100 * best_test(records):.2f}  longest loss rise "
              f"{longest_rise([r['loss'] for r in records])}")
    print(f"exact epochs {exact} of {len(default)}")
    chart(default, cd0, a.title or f"{a.partitions.name}, seed {a.seed}: cd-r's default "
          "schedule", a.out)
    print(f"wrote {a.out}")
    if a.json:
        write_atomic(a.json, json.dumps(runs))
    return 0


if __name__ == "__main__":
    sys.exit(main())
