"""Training R-MAT graphs of growing scale on ranks of one machine: predicted against
measured peak memory per rank, epoch time and its phases.

    python experiments/training_ladder.py --scales 20,21,22 --ranks 4 --work runs/train-ladder

For each scale ``S`` it writes (once) the R-MAT files of ``2^S`` vertices, ``2 * 16 * 2^S``
directed edges and ``--features`` features (:func:`distgnn.data.generators.write_rmat_files`),
partitions them into ``--ranks`` (``distgnn-partition --mode auto``, kept), takes
``distgnn-partition inspect``'s predicted peak memory per rank for the model, then trains
GraphSAGE-gcn (``--hidden``, 2 layers) for ``--epochs`` epochs under ``distgnn-launch``
(one thread per rank) with ``--extra`` flags.  Reported: the predicted peak per rank (max
and mean over ranks), the measured one (``peak_rss_mib_max/mean`` of the last epoch record:
each rank's ``VmHWM``, loading included), their ratio, the median epoch after the first and
its phases (max over ranks), and the bytes of a rank's training memory per local edge and
per local vertex.  A run that is refused (``memory.require``) or killed is a row too, with
its last line.  Prints a Markdown table and writes the rows as JSON to ``--out``.
"""
from __future__ import annotations

import argparse
import json
import shlex
import statistics
import subprocess
import sys
import time
from pathlib import Path

from distgnn import read_metrics
from distgnn.data.generators import write_rmat_files

BIN = Path(sys.executable).parent
MIB = 1 << 20


def partitions(files: Path, ranks: int, out: Path) -> float:
    """Seconds to partition ``files`` into ``out`` (skipped, 0, when ``out`` exists)."""
    if (out / "meta.json").exists():
        return 0.0
    started = time.perf_counter()
    subprocess.run([str(BIN / "distgnn-partition"), str(files / "edges.npy"), "--features",
                    str(files / "x.npy"), "--labels", str(files / "y.npy"), "--split-file",
                    str(files / "split.npz"), "--parts", str(ranks), "--mode", "auto",
                    "--no-progress", "--out", str(out)], check=True, stdout=subprocess.DEVNULL)
    return time.perf_counter() - started


def predicted(parts: Path, hidden: int, precision: str) -> dict:
    """``inspect``'s statistics of ``parts`` for the model (its JSON, written beside the
    partitions: ``inspect`` refuses to write into the folder it reads)."""
    out = parts.with_name(parts.name + "-inspect.json")
    out.unlink(missing_ok=True)
    subprocess.run([str(BIN / "distgnn-partition"), "inspect", str(parts), "--hidden",
                    str(hidden), "--layers", "2", "--precision", precision, "--json", str(out)],
                   check=True, stdout=subprocess.DEVNULL)
    return json.loads(out.read_text())


def train(parts: Path, a, metrics: Path) -> dict:
    metrics.unlink(missing_ok=True)
    cmd = [str(BIN / "distgnn-launch"), "-n", str(a.ranks), "--threads-per-rank", "1", "--",
           str(BIN / "distgnn-train"), "--partitions", str(parts), "--model", "sage",
           "--aggregator", "gcn", "--hidden", str(a.hidden), "--epochs", str(a.epochs),
           "--eval-every", str(a.epochs), "--no-progress", "--metrics-out", str(metrics),
           *a.extra]
    print("$", shlex.join(cmd), flush=True)
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode:
        lines = [li for li in (proc.stderr + proc.stdout).splitlines()
                 if li.strip() and not li.startswith("---")]
        refused = [li for li in lines if "need about" in li]  # memory.require's line
        return {"failed": proc.returncode,
                "last_line": (refused or lines or [""])[0 if refused else -1]}
    records, _ = read_metrics(metrics)
    later = records[1:] or records
    median = statistics.median(r["epoch_s"] for r in later)
    nearest = min(later, key=lambda r: abs(r["epoch_s"] - median))
    return {"peak_mib_max": records[-1]["peak_rss_mib_max"],
            "peak_mib_mean": records[-1]["peak_rss_mib_mean"],
            "first_epoch_s": records[0]["epoch_s"], "epoch_s": median,
            "phases": nearest["phases"]}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--scales", default="20,21,22", help="comma-separated R-MAT scales")
    p.add_argument("--ranks", type=int, default=4, help="partitions and ranks")
    p.add_argument("--features", type=int, default=128,
                   help="input features per vertex (random values)")
    p.add_argument("--hidden", type=int, default=256,
                   help="hidden width of the 2-layer GraphSAGE-gcn")
    p.add_argument("--epochs", type=int, default=4, help="epochs (the first is not timed)")
    p.add_argument("--extra", default="", help="more distgnn-train flags, one string")
    p.add_argument("--work", type=Path, default=Path("runs/train-ladder"),
                   help="folder for the generated files, partitions and metrics (kept)")
    p.add_argument("--out", type=Path, help="JSON file of the rows")
    a = p.parse_args()
    a.extra = shlex.split(a.extra)
    a.work.mkdir(parents=True, exist_ok=True)
    rows = []
    for scale in (int(s) for s in a.scales.split(",")):
        files = a.work / f"rmat{scale}-f{a.features}"
        if not (files / "edges.npy").exists():
            write_rmat_files(files, scale, 16, a.features)
        parts = a.work / f"rmat{scale}-p{a.ranks}"
        partition_s = partitions(files, a.ranks, parts)
        precision = (a.extra[a.extra.index("--precision") + 1] if "--precision" in a.extra
                     else "fp32")
        stats = predicted(parts, a.hidden, precision)
        per_rank = stats["per_rank"]
        row = {"scale": scale, "vertices": stats["num_nodes"], "edges": stats["num_edges"],
               "ranks": a.ranks, "extra": a.extra, "partition_s": partition_s,
               "replication": stats["replication_factor"],
               "local_edges_max": max(r["edges"] for r in per_rank),
               "local_vertices_max": max(r["vertices"] for r in per_rank),
               "predicted_mib_max": stats["predicted_memory_bytes"]["max"] / MIB,
               "predicted_mib_mean": stats["predicted_memory_bytes"]["mean"] / MIB,
               **train(parts, a, a.work / f"rmat{scale}-p{a.ranks}.jsonl")}
        rows.append(row)
        print(json.dumps(row), flush=True)
    print(f"\nR-MAT edge factor 16, {a.features} features, GraphSAGE-gcn hidden {a.hidden}, "
          f"2 layers, {a.ranks} ranks x 1 thread, {shlex.join(a.extra) or 'default flags'}\n")
    print("| scale | vertices | edges | predicted peak/rank (max, mean) | measured peak/rank "
          "(max, mean) | measured / predicted (max) | epoch (first, median) | phases of the "
          "median epoch (s) | bytes per local edge | bytes per local vertex |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        head = (f"| 2^{r['scale']} | {r['vertices']:,} | {r['edges']:,} | "
                f"{r['predicted_mib_max'] / 1024:.2f}, {r['predicted_mib_mean'] / 1024:.2f} GiB | ")
        if "failed" in r:
            print(head + f"failed ({r['failed']}): {r['last_line']} | | | | | |")
            continue
        phases = ", ".join(f"{k} {v:.2f}" for k, v in r["phases"].items() if v >= 0.005)
        print(head + f"{r['peak_mib_max'] / 1024:.2f}, {r['peak_mib_mean'] / 1024:.2f} GiB | "
              f"{r['peak_mib_max'] / r['predicted_mib_max']:.3f} | "
              f"{r['first_epoch_s']:.1f}, {r['epoch_s']:.1f} s | {phases} | "
              f"{r['peak_mib_max'] * MIB / r['local_edges_max']:.0f} | "
              f"{r['peak_mib_max'] * MIB / r['local_vertices_max']:.0f} |")
    if a.out:
        a.out.write_text(json.dumps(rows, indent=1) + "\n")


if __name__ == "__main__":
    main()
