"""What ``--algo auto`` chooses, and what two-level partitions put on the node links.

    python experiments/adaptive_jobs.py auto [--graph rmat18] [--ranks 4] [--rate 200mbit]
        [--epochs 12] [--json F]
    python experiments/adaptive_jobs.py links [--graphs rmat18,tolokers] [--shapes 2x2,4x2]
        [--methods libra,ne] [--epochs 2] [--json F]

``auto``: the graph in ``--ranks`` partitions (libra, seed 0), trained with cd-0, cd-r's
default schedule and ``--algo auto`` (GraphSAGE-gcn, hidden 256) in two settings: every rank
on this host (shared memory), and one rank on each of ``--ranks`` emulated nodes whose links
run at ``--rate`` (:mod:`launch.cluster`, needs CAP_NET_ADMIN).  Prints, per setting, the
choice and its line, and the median epoch after the choice of each run (the epochs from
``WARMUP + MEASURED + 2`` on, the same epochs for all three), and the final test accuracy.

``links``: for each graph and ``NxK`` (N emulated nodes of K ranks), libra's flat cut into N K
partitions and the two-level cut of each of ``--methods`` (``distgnn-partition
--ranks-per-node K --method M``); cd-0 trained for ``--epochs`` with the flat exchange on
the flat cut, and the node-aware exchange on all;
the busiest node link's bytes (sent or received, from the interface counters) of each, and
the replication factors.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

from cluster_regimes import (  # beside this
    BIN,
    DEFAULT_DATA,
    MODEL,
    run,
    spec,
    train_point,
)

from distgnn import read_metrics
from distgnn.exchange.auto import MEASURED, WARMUP
from distgnn.storage import write_atomic
from launch import cluster

NAME = "adaptive"


def partitions(source: str, parts: int, out: Path, *flags) -> dict:
    """``distgnn-partition`` into ``out`` (once); returns its statistics."""
    stats = out.with_suffix(".json")
    if not stats.exists():
        run([BIN / "distgnn-partition", source, "--parts", parts, "--out", out, "--force",
             "--no-progress", "--json", stats, *flags])
    return json.loads(stats.read_text())


def local_point(parts: Path, ranks: int, flags: list, epochs: int, metrics: Path) -> None:
    run([BIN / "distgnn-launch", "-n", ranks, "--", BIN / "distgnn-train", "--partitions",
         parts, *MODEL, *flags, "--epochs", epochs, "--eval-every", epochs, "--no-progress",
         "--metrics-out", metrics])


def auto_table(a) -> list[dict]:
    source = spec(a.graph, a.data)
    parts = a.work / f"{a.graph}-p{a.ranks}"
    partitions(source, a.ranks, parts)
    rows = []
    after = WARMUP + MEASURED + 1  # records from here on ran after the choice's first epoch
    settings = {"host": "one host", "cluster": f"{a.ranks} nodes at {a.rate}"}
    for setting in (settings[s] for s in a.settings.split(",")):
        c = None if setting == "one host" else cluster.up(a.ranks, a.rate, slots=1, name=NAME)
        try:
            for label in a.runs.split(","):
                flags = ["--algo", label]
                metrics = a.work / f"auto-{label}.jsonl"
                if c is None:
                    local_point(parts, a.ranks, flags, a.epochs, metrics)
                else:
                    train_point(c, parts, flags, a.epochs, metrics)
                records = read_metrics(metrics)[0]
                chose = next((r["exchange_choice"] for r in records
                              if "exchange_choice" in r), None)
                row = {"setting": setting, "run": label,
                       "epoch_s": statistics.median(r["epoch_s"] for r in records[after:]),
                       "mean_epoch_s": statistics.mean(r["epoch_s"] for r in records[1:]),
                       "test_acc": records[-1]["test_acc"],
                       "choice": chose and chose["algo"], "reason": chose and chose["reason"]}
                rows.append(row)
                print(f"{setting:22} {label:5} epoch {row['epoch_s']:.3f} s (mean "
                      f"{row['mean_epoch_s']:.3f}) test {row['test_acc']:.4f}"
                      + (f"  {row['reason']}" if chose else ""), flush=True)
        finally:
            if c is not None:
                cluster.down(NAME)
    return rows


def links_table(a) -> list[dict]:
    rows = []
    for graph in a.graphs.split(","):
        source = spec(graph, a.data)
        for shape in a.shapes.split(","):
            nodes, per_node = map(int, shape.split("x"))
            P = nodes * per_node
            flat = a.work / f"{graph}-p{P}"
            # every ratio's baseline: Libra's flat cut, with the flat exchange
            stats = {"flat": partitions(source, P, flat, "--method", "libra")}
            runs = [("flat", flat, "flat"), ("flat", flat, "node")]
            for method in a.methods.split(","):
                two = a.work / f"{graph}-p{P}-two{per_node}-{method}"
                cut = "two-level" + ("" if method == "libra" else f" {method}")
                stats[cut] = partitions(source, P, two, "--ranks-per-node", per_node,
                                        "--method", method)
                runs.append((cut, two, "node"))
            c = cluster.up(nodes, "10gbit", slots=per_node, name=NAME)
            try:
                for cut, parts, topology in runs:
                    point = train_point(c, parts, ["--algo", "cd-0", "--exchange-topology",
                                                   topology, "--dropout", "0"],
                                        a.epochs, a.work / "links.jsonl")
                    row = {"graph": graph, "shape": shape, "cut": cut, "topology": topology,
                           "busiest_link_bytes": point["busiest_link_bytes"],
                           "replication": stats[cut]["replication_factor"]}
                    rows.append(row)
            finally:
                cluster.down(NAME)
            base = next(r for r in rows if r["graph"] == graph and r["shape"] == shape)
            for r in rows:
                if r["graph"] == graph and r["shape"] == shape:
                    r["vs_flat"] = r["busiest_link_bytes"] / base["busiest_link_bytes"]
                    r["replication_vs_libra"] = r["replication"] / base["replication"]
                    print(f"{graph} {shape} {r['cut']:12} cut, {r['topology']:4} exchange: "
                          f"busiest link {r['busiest_link_bytes']:,} bytes ({r['vs_flat']:.3f}"
                          f"x), replication {r['replication']:.3f} "
                          f"({r['replication_vs_libra']:.3f}x)", flush=True)
    return rows


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("table", choices=("auto", "links"))
    p.add_argument("--graph", default="rmat18", help="auto: rmat18 or a shared dataset")
    p.add_argument("--graphs", default="rmat18,tolokers", help="links: comma-separated")
    p.add_argument("--ranks", type=int, default=4, help="auto: ranks (and emulated nodes)")
    p.add_argument("--rate", default="200mbit", help="auto: the emulated links' tc rate")
    p.add_argument("--settings", default="host,cluster", help="auto: host, cluster or both")
    p.add_argument("--runs", default="cd-0,cd-r,auto", help="auto: the --algo of each run")
    p.add_argument("--shapes", default="2x2,4x2", help="links: NxK, comma-separated")
    p.add_argument("--methods", default="libra",
                   help="links: the --method of each two-level cut, comma-separated")
    p.add_argument("--epochs", type=int, help="epochs per run (default: auto 12, links 2)")
    p.add_argument("--data", type=Path, default=DEFAULT_DATA, help="shared datasets folder")
    p.add_argument("--work", type=Path, default=Path("runs/adaptive"), help="scratch folder")
    p.add_argument("--json", type=Path, help="write the rows here")
    a = p.parse_args()
    a.work.mkdir(parents=True, exist_ok=True)
    a.epochs = a.epochs or (12 if a.table == "auto" else 2)
    rows = auto_table(a) if a.table == "auto" else links_table(a)
    if a.json:
        write_atomic(a.json, json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
