"""Partitioning R-MAT graphs of growing scale: time, peak memory and replication, streamed
out of core and (where it fits) in memory.

    python experiments/partition_ladder.py --scales 20,21,22 --memory-up-to 22 --parts 16 \\
        --work runs/ladder

For each scale ``S`` it writes (once) the R-MAT files of ``2^S`` vertices and
``2 * 16 * 2^S`` directed edges with ``--features`` features
(:func:`distgnn.data.generators.write_rmat_files`), then runs ``distgnn-partition`` on them with
``--mode stream`` and, up to ``--memory-up-to``, ``--mode memory``, each under
``/usr/bin/time`` for its peak resident memory; ``--methods libra,ne`` runs each method
(streamed ``ne`` is the hybrid, its expansion held to ``--expansion-memory``).  Prints a
Markdown table (seconds, peak memory, nanoseconds per edge, replication factor, edge
balance) and writes the rows as JSON to ``--out``.
"""
from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

from distgnn.data.generators import write_rmat_files

BIN = Path(sys.executable).parent


def partition(files: Path, mode: str, parts: int, out: Path, method: str = "libra",
              memory: float | None = None) -> dict:
    shutil.rmtree(out, ignore_errors=True)
    cmd = ["/usr/bin/time", "-f", "peak_kib %M", str(BIN / "distgnn-partition"),
           str(files / "edges.npy"), "--features", str(files / "x.npy"), "--labels",
           str(files / "y.npy"), "--split-file", str(files / "split.npz"), "--parts",
           str(parts), "--mode", mode, "--order-vertices", "given", "--no-progress",
           "--out", str(out), "--method", method]
    if memory is not None and mode == "stream" and method == "ne":
        cmd += ["--memory", str(memory)]
    started = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True)
    seconds = time.perf_counter() - started
    if proc.returncode:
        sys.exit(f"failed: {' '.join(cmd)}\n{proc.stdout[-2000:]}{proc.stderr[-3000:]}")
    peak = int(proc.stderr.split("peak_kib")[-1].split()[0]) * 1024
    meta = json.loads((out / "meta.json").read_text())
    return {"mode": mode, "method": method, "seconds": seconds, "peak_bytes": peak,
            "replication_factor": meta["replication_factor"],
            "edge_balance": meta["edge_balance"], "num_nodes": meta["num_nodes"],
            "num_edges": meta["num_edges"], "output": proc.stdout}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--scales", default="20,21,22", help="comma-separated R-MAT scales")
    p.add_argument("--memory-up-to", type=int, default=22,
                   help="also partition in memory up to this scale")
    p.add_argument("--parts", type=int, default=16, help="partitions to cut each graph into")
    p.add_argument("--features", type=int, default=16,
                   help="float32 features per vertex written with each graph")
    p.add_argument("--work", type=Path, default=Path("runs/ladder"),
                   help="folder for the generated files and partitions (kept)")
    p.add_argument("--keep-partitions", action="store_true",
                   help="keep each partition directory (default: removed after its row)")
    p.add_argument("--methods", default="libra",
                   help="comma-separated methods (libra, ne: streamed, ne is the hybrid)")
    p.add_argument("--expansion-memory", type=float, metavar="GIB",
                   help="--memory of the streamed ne (default: distgnn-partition's)")
    p.add_argument("--out", type=Path, help="JSON file of the rows")
    a = p.parse_args()
    a.work.mkdir(parents=True, exist_ok=True)
    rows = []
    print("| scale | vertices | edges | method | mode | seconds | peak memory | ns per edge | "
          "replication | edge balance |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for scale in (int(s) for s in a.scales.split(",")):
        files = a.work / f"rmat{scale}-f{a.features}"
        generated = 0.0
        if not (files / "edges.npy").exists():
            started = time.perf_counter()
            write_rmat_files(files, scale, 16, a.features)
            generated = time.perf_counter() - started
        modes = ("stream", "memory") if scale <= a.memory_up_to else ("stream",)
        for method, mode in ((m, mode) for m in a.methods.split(",") for mode in modes):
            out = a.work / f"rmat{scale}-p{a.parts}-{method}-{mode}"
            row = {"scale": scale, "generate_seconds": generated,
                   **partition(files, mode, a.parts, out, method, a.expansion_memory)}
            if not a.keep_partitions:
                shutil.rmtree(out)
            rows.append(row)
            print(f"| {scale} | {row['num_nodes']:,} | {row['num_edges']:,} | {method} | {mode} | "
                  f"{row['seconds']:.1f} | {row['peak_bytes'] / 2**30:.2f} GiB | "
                  f"{1e9 * row['seconds'] / row['num_edges']:.0f} | "
                  f"{row['replication_factor']:.4f} | {row['edge_balance']:.3f} |",
                  flush=True)
    if a.out:
        a.out.write_text(json.dumps(rows, indent=1) + "\n")


if __name__ == "__main__":
    main()
