"""Charts of the partitioning and training ladders, from the JSON rows their scripts write.

    python experiments/ladder_charts.py --partition runs/ladder/ladder-20-22.json \\
        runs/ladder/ladder-23-25.json --training runs/tl-fp32.json runs/tl-bf16.json \\
        --out docs/results

Writes ``partition-ladder.png`` (seconds and peak memory against edges, streamed and in
memory; :mod:`partition_ladder`) and ``training-ladder.png`` (predicted and measured peak
memory per rank against edges, one line per run's flags, with the node's memory per rank;
:mod:`training_ladder`).
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

GIB = 1 << 30


def rows_of(paths: list[Path]) -> list[dict]:
    return [row for path in paths for row in json.loads(path.read_text())]


def partition_chart(rows: list[dict], out: Path) -> None:
    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 4))
    for mode, marker in (("stream", "o"), ("memory", "s")):
        mine = sorted((r for r in rows if r["mode"] == mode), key=lambda r: r["num_edges"])
        edges = [r["num_edges"] for r in mine]
        left.plot(edges, [r["seconds"] for r in mine], marker=marker, label=mode)
        right.plot(edges, [r["peak_bytes"] / GIB for r in mine], marker=marker, label=mode)
    for ax, label in ((left, "seconds"), (right, "peak memory (GiB)")):
        ax.set_xscale("log", base=2)
        ax.set_yscale("log", base=2)
        ax.set_xlabel("directed edges")
        ax.set_ylabel(label)
        ax.grid(True, alpha=0.3)
        ax.legend()
    fig.suptitle("distgnn-partition, R-MAT edge factor 16, 16 partitions")
    fig.tight_layout()
    fig.savefig(out / "partition-ladder.png", dpi=110)


def training_chart(rows: list[dict], out: Path) -> None:
    fig, ax = plt.subplots(figsize=(6.5, 4.5))
    for flags in dict.fromkeys(" ".join(r["extra"]) for r in rows):
        mine = sorted((r for r in rows if " ".join(r["extra"]) == flags),
                      key=lambda r: r["edges"])
        name = flags or "default flags"
        color = None
        if not flags:  # inspect's prediction knows the defaults only, not the extra flags
            color = ax.plot([r["edges"] for r in mine],
                            [r["predicted_mib_max"] / 1024 for r in mine], linestyle="--",
                            marker="x", label=f"{name}: predicted")[0].get_color()
        ran = [r for r in mine if "peak_mib_max" in r]
        ax.plot([r["edges"] for r in ran], [r["peak_mib_max"] / 1024 for r in ran],
                marker="o", color=color, label=f"{name}: measured")
    ax.set_xscale("log", base=2)
    ax.set_xlabel("directed edges of the graph")
    ax.set_ylabel("peak memory per rank, max over ranks (GiB)")
    ax.axhline(23.5 / rows[0]["ranks"], color="grey", linewidth=0.8)
    ax.text(rows[0]["edges"], 23.5 / rows[0]["ranks"] * 1.02, "MemTotal (23.5 GiB) / ranks",
            fontsize=8, color="grey")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8)
    ax.set_title(f"GraphSAGE-gcn hidden 256 on {rows[0]['ranks']} ranks, R-MAT edge factor 16")
    fig.tight_layout()
    fig.savefig(out / "training-ladder.png", dpi=110)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--partition", nargs="+", type=Path, required=True,
                   help="partition_ladder.py --out files")
    p.add_argument("--training", nargs="+", type=Path, required=True,
                   help="training_ladder.py --out files")
    p.add_argument("--out", type=Path, default=Path("docs/results"))
    a = p.parse_args()
    partition_chart(rows_of(a.partition), a.out)
    training_chart(rows_of(a.training), a.out)


if __name__ == "__main__":
    main()
