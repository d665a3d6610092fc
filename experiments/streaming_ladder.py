"""Training R-MAT graphs beyond memory: a run under ``--memory-limit`` against the in-memory
run of the same graph, rung by rung.

    python experiments/streaming_ladder.py --scales 20,21 --limit 2 --in-memory --work runs/stream
    python experiments/streaming_ladder.py --scales 24 --limit 16 --epochs 3 --drop-files

For each scale ``S`` it writes (once) the R-MAT files of ``2^S`` vertices, ``2 * 16 * 2^S``
directed edges and ``--features`` features (:func:`distgnn.data.generators.write_rmat_files`),
partitions them into ``--ranks`` parts (``distgnn-partition --mode auto``, kept; with
``--drop-files`` the generator's files are removed once partitioned, to leave the disk to
the spill), then trains GraphSAGE-gcn (``--hidden``, 2 layers, fp32) for ``--epochs``
epochs with ``--memory-limit`` (``--limit``, GiB per rank) and ``--spill-dir``, and with
``--in-memory`` also without a limit.  One rank runs ``distgnn-train`` directly; more run
under ``distgnn-launch`` (one thread each).

Reported per run: the plan's RAM and disk (the start-up line), the measured peak per rank
(``peak_rss_mib_max`` of the last record: ``VmHWM``, loading included), the spill files'
most (``spill_disk_bytes_max``), the bytes a rank read and wrote on disk in an epoch, the
median epoch after the first with its phases (aggregation, ``io_wait``, dense), and the
epoch's disk traffic in GB/s.  Prints a Markdown table and writes the rows as JSON to
``--out``.
"""
from __future__ import annotations

import argparse
import json
import re
import shlex
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

from distgnn import read_metrics
from distgnn.data.generators import write_rmat_files
from training_ladder import partitions  # experiments/, beside this script

BIN = Path(sys.executable).parent
GIB = 1 << 30


def train(parts: Path, a, metrics: Path, limit: float | None) -> dict:
    metrics.unlink(missing_ok=True)
    train_cmd = [str(BIN / "distgnn-train"), "--partitions", str(parts), "--model", "sage",
                 "--aggregator", "gcn", "--hidden", str(a.hidden), "--epochs", str(a.epochs),
                 "--eval-every", str(a.epochs), "--no-progress", "--metrics-out", str(metrics),
                 "--threads", str(a.threads if a.ranks == 1 else 1), *a.extra]
    if limit is not None:
        train_cmd += ["--memory-limit", str(limit), "--spill-dir", str(a.spill_dir)]
    cmd = train_cmd if a.ranks == 1 else [
        str(BIN / "distgnn-launch"), "-n", str(a.ranks), "--threads-per-rank", "1", "--",
        *train_cmd]
    print("$", shlex.join(cmd), flush=True)
    started = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True)
    wall = time.perf_counter() - started
    out = proc.stdout + proc.stderr
    plan = re.search(r"RAM ([\d.]+ [KMG]iB).*?disk ([\d.]+ [KMG]iB)", out)
    if proc.returncode:
        lines = [li for li in out.splitlines() if li.strip() and not li.startswith("---")]
        errors = [li for li in lines if "error:" in li]  # the refusal, not MPI's banner
        return {"limit_gib": limit, "failed": proc.returncode,
                "last_line": (errors or lines or [""])[0 if errors else -1]}
    records, _ = read_metrics(metrics)
    later = records[1:] or records
    median = statistics.median(r["epoch_s"] for r in later)
    nearest = min(later, key=lambda r: abs(r["epoch_s"] - median))
    row = {"limit_gib": limit, "wall_s": wall,
           "plan_ram": plan.group(1) if plan else None, "plan_disk": plan.group(2) if plan
           else None, "peak_gib": records[-1]["peak_rss_mib_max"] / 1024,
           "first_epoch_s": records[0]["epoch_s"], "epoch_s": median,
           "phases": nearest["phases"], "loss": [r["loss"] for r in records],
           "streamed": "spill_read_bytes_max" in records[-1]}
    if row["streamed"]:
        row.update(read=nearest["spill_read_bytes_max"], written=nearest["spill_written_bytes_max"],
                   disk=records[-1]["spill_disk_bytes_max"])
        row["disk_gb_s"] = (row["read"] + row["written"]) / 1e9 / median
    return row


def print_row(scale: int, ranks: int, row: dict) -> None:
    if "failed" in row:
        print(f"| {scale} | {ranks} | {row.get('limit_gib')} | failed: {row['last_line']} |",
              flush=True)
        return
    ph = row["phases"]
    io = (f"{row['read'] / 1e9:.1f} / {row['written'] / 1e9:.1f} | {row['disk'] / GIB:.1f} GiB | "
          f"{row['disk_gb_s']:.2f}" if row["streamed"] else "- | - | -")
    print(f"| {scale} | {ranks} | {row['limit_gib'] or '-'} | {row['plan_ram'] or '-'} | "
          f"{row['plan_disk'] or '-'} | {row['peak_gib']:.2f} GiB | {io} | "
          f"{row['epoch_s']:.2f} | {ph['aggregation']:.2f} / {ph['io_wait']:.2f} / "
          f"{ph['dense']:.2f} |", flush=True)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--scales", default="20", help="comma-separated R-MAT scales")
    p.add_argument("--ranks", type=int, default=1, help="partitions and ranks")
    p.add_argument("--limit", type=float, required=True, help="--memory-limit per rank, GiB")
    p.add_argument("--in-memory", action="store_true", help="also train without a limit")
    p.add_argument("--epochs", type=int, default=4)
    p.add_argument("--hidden", type=int, default=256)
    p.add_argument("--features", type=int, default=128)
    p.add_argument("--threads", type=int, default=2, help="threads of a one-rank run")
    p.add_argument("--work", type=Path, default=Path("runs/stream"),
                   help="folder for the generated files and partitions (kept)")
    p.add_argument("--spill-dir", type=Path, default=None,
                   help="--spill-dir of the runs (default: WORK/spill)")
    p.add_argument("--drop-files", action="store_true",
                   help="remove the generator's files once partitioned")
    p.add_argument("--extra", nargs=argparse.REMAINDER, default=[],
                   help="further distgnn-train flags (last)")
    p.add_argument("--out", type=Path, help="JSON file of the rows")
    a = p.parse_args()
    a.work.mkdir(parents=True, exist_ok=True)
    a.spill_dir = a.spill_dir or a.work / "spill"
    rows = []
    print("| scale | ranks | limit GiB | plan RAM | plan disk | peak | read / written GB per "
          "epoch | disk used | disk GB/s | epoch s | aggregation / io_wait / dense s |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for scale in (int(s) for s in a.scales.split(",")):
        files = a.work / f"rmat{scale}-f{a.features}"
        parts = a.work / f"rmat{scale}-f{a.features}-p{a.ranks}"
        if not (parts / "meta.json").exists() and not (files / "edges.npy").exists():
            write_rmat_files(files, scale, 16, a.features)
        seconds = partitions(files, a.ranks, parts)
        if a.drop_files:
            shutil.rmtree(files, ignore_errors=True)
        for limit in ((None,) if a.in_memory else ()) + (a.limit,):
            row = {"scale": scale, "ranks": a.ranks, "partition_s": seconds,
                   **train(parts, a, a.work / f"metrics-{scale}-{a.ranks}.jsonl", limit)}
            rows.append(row)
            print_row(scale, a.ranks, row)
    if a.out:
        a.out.write_text(json.dumps(rows, indent=1) + "\n")


if __name__ == "__main__":
    main()
