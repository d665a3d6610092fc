"""The memory check's prediction against the measured peak per rank, for cd-0 and cd-r's
default schedule, on real graphs with wide features.

    python experiments/memory_check.py ../shared/datasets/citeseer.npz \\
        ../shared/datasets/cora_ml.npz ../shared/datasets/squirrel_filtered.npz \\
        --ranks 4 --work runs/memory-check

For each dataset: a Libra cut into ``--ranks`` partitions (kept in ``--work``); for each
exchange, the prediction the run's start-up check makes for each rank
(:func:`distgnn.run.memory.predict` with the rank's vertices, edges and split entries), and
the measured peak of each rank (``peak_rss_mib_max`` of the last epoch record: ``VmHWM``,
loading included) of ``--epochs`` epochs of the default model under ``distgnn-launch``,
one thread per rank.  ``--predict-only`` prints the predictions without training (to set
another tree's predictions beside these: ``PYTHONPATH=OTHER python ...``).
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

from distgnn import TrainConfig, read_metrics
from distgnn.exchange import SplitIndex
from distgnn.run import memory
from partition import load

BIN = Path(sys.executable).parent
MIB = 1 << 20
ALGOS = {"cd-0": [], "cd-r default": ["--algo", "cd-r"]}


def predicted_mib(parts: Path, ranks: int, flags: list[str]) -> list[float]:
    """The start-up check's prediction for each rank of ``parts``, MiB."""
    cfg = TrainConfig(algo=flags[1] if flags else "cd-0")
    out = []
    for p in range(ranks):
        part = load(parts, p)
        index = SplitIndex.from_partition(part)
        need = memory.predict(cfg.network, cfg.exchange, cfg.execution, part.num_nodes,
                              part.graph.num_edges, part.x.shape[1],
                              int(part.meta["num_classes"]),
                              len(index.leaf_ids) + len(index.root_ids))
        out.append(need["total"] / MIB)
    return out


def measured_mib(parts: Path, ranks: int, flags: list[str], epochs: int, metrics: Path
                 ) -> float | str:
    """The largest rank's peak of a run, MiB; or the run's last line if it failed."""
    metrics.unlink(missing_ok=True)
    proc = subprocess.run([str(BIN / "distgnn-launch"), "-n", str(ranks), "--threads-per-rank",
                           "1", "--", str(BIN / "distgnn-train"), "--partitions", str(parts),
                           *flags, "--epochs", str(epochs), "--no-progress", "--metrics-out",
                           str(metrics)], capture_output=True, text=True)
    if proc.returncode:
        return (proc.stderr.strip().splitlines() or ["failed"])[-1]
    return read_metrics(metrics)[0][-1]["peak_rss_mib_max"]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("datasets", nargs="+", help=".npz datasets")
    p.add_argument("--ranks", type=int, default=4, help="partitions and ranks")
    p.add_argument("--epochs", type=int, default=20, help="epochs of each measured run")
    p.add_argument("--work", type=Path, default=Path("runs/memory-check"),
                   help="partitions and metrics files go here")
    p.add_argument("--predict-only", action="store_true", help="no training runs")
    p.add_argument("--json", type=Path, help="write the rows here")
    a = p.parse_args()
    a.work.mkdir(parents=True, exist_ok=True)
    rows = []
    print("| graph | exchange | predicted peak per rank (max) | measured (max) | "
          "measured / predicted |\n|---|---|---|---|---|")
    for dataset in a.datasets:
        name = Path(dataset).stem
        parts = a.work / f"{name}-p{a.ranks}"
        if not (parts / "meta.json").exists():
            subprocess.run([str(BIN / "distgnn-partition"), dataset, "--parts", str(a.ranks),
                            "--out", str(parts), "--no-progress"], check=True,
                           stdout=subprocess.DEVNULL)
        for algo, flags in ALGOS.items():
            predicted = max(predicted_mib(parts, a.ranks, flags))
            measured = None if a.predict_only else measured_mib(
                parts, a.ranks, flags, a.epochs, a.work / f"{name}-{len(rows)}.jsonl")
            rows.append({"graph": name, "exchange": algo, "predicted_mib": predicted,
                         "measured_mib": measured})
            ratio = (f"{measured / predicted:.2f}" if isinstance(measured, float) else "-")
            shown = (f"{measured:,.0f} MiB" if isinstance(measured, float)
                     else measured or "-")
            print(f"| {name} | {algo} | {predicted:,.0f} MiB | {shown} | {ratio} |", flush=True)
    if a.json:
        a.json.write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
