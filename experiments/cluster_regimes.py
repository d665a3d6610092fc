"""Where delayed aggregation pays: 0c, cd-0 and cd-r across emulated nodes at several link
rates, with bytes on the wire and the scaling model's prediction beside each point.

    python experiments/cluster_regimes.py [--graphs rmat18,tolokers] [--nodes 2,4]
        [--ranks-per-node K] [--topologies flat,node] [--rates 10gbit,1gbit,200mbit]
        [--delays 2,5,10] [--epochs 5] [--json F] [--plot DIR]
        [--variants "cd-5 smooth,adaptive,cd-0 bf16,cd-5 bf16 smooth"]

For each graph and node count N it partitions the graph (libra, seed 0) into N K parts,
brings up an emulated cluster of N nodes (:mod:`launch.cluster`, needs CAP_NET_ADMIN; K
ranks of one thread per node, consecutive ranks on one node), and for each link rate:

1. fits the network (latency, a node link's bandwidth, the allreduce) with ``distgnn-bench
   comm`` on every rank of the job (:func:`bench.scaling.measured_network`);
2. trains GraphSAGE-gcn (hidden 256) with 0c, cd-0 in each ``--topologies``
   (``--exchange-topology``) and cd-r for each delay, reading the median epoch (the first
   epoch excluded) and its phases (max over ranks);
3. reads the bytes each node's link carried (sent and received, from the interface
   counters), against the trainer's payload (split-vertex exchanges of training and of the
   one evaluation, and the gradient allreduce) and against the partition tables'
   prediction of the exchange (``4 bytes x sum_k d_k x (leaves + leaf entries)`` per rank
   over the epoch's exchanges ``k``, over r for cd-r);
   ``--variants`` adds exchange configurations of ``drpa_figures.py staleness`` (smoothing,
   the adaptive schedule, compressed wires, cd-r's default schedule), timed and counted
   the same way, predicted only for ``default``;
4. predicts the epoch of 0c, cd-0 (each topology) and cd-r with
   :func:`bench.scaling.predict` from this network, the partition statistics (with
   K > 1, the rows on each node link from the clone sets), and rates measured by training
   the N K partitions here at once (:func:`~bench.rates.host_rates`): all
   emulated nodes share this host's cores and memory, as the ranks do during the runs
   (whose communicator waits by sleeping there: ``--comm-wait auto``);
5. with ``--exact-epochs E``, once per graph and N: cd-0 in each topology without dropout
   for E epochs at the first rate, against single-socket training (the largest relative
   loss difference).

Prints one line per point, and writes a JSON and one chart per graph and N (epoch time
against link rate, one line per algorithm: where cd-r's line crosses below cd-0's).
"""
from __future__ import annotations

import argparse
import json
import re
import statistics
import subprocess
import sys
from pathlib import Path

from bench.rates import RATE_EPOCHS, directory_graphs, host_rates
from bench.scaling import (
    Network,
    exchange_bytes,
    measured_network,
    predict,
)
from distgnn import read_metrics
from distgnn.comm import WAITS
from distgnn.exchange import DEFAULT_SCHEDULE_PRECISION, EXACT_EVERY
from distgnn.nn.widths import exchange_widths
from distgnn.program import use_huge_pages
from distgnn.storage import write_atomic
from launch import cluster
from partition.stats import node_rows

BIN = Path(sys.executable).parent
DEFAULT_DATA = Path(__file__).resolve().parents[1].parent / "shared" / "datasets"
GRAPHS = {"rmat18": "rmat:scale=18,edge_factor=16,features=128"}
MODEL = ["--model", "sage", "--hidden", "256", "--layers", "2"]
NAME = "regimes"


def spec(graph: str, data: Path) -> str:
    if graph in GRAPHS:
        return GRAPHS[graph]
    path = data / f"{graph}.npz"
    if not path.is_file():
        sys.exit(f"cluster_regimes: {path}: no such dataset (give --data DIR)")
    return str(path)


def run(argv: list, **kw) -> subprocess.CompletedProcess:
    proc = subprocess.run([str(a) for a in argv], capture_output=True, text=True, **kw)
    if proc.returncode:
        sys.exit(f"cluster_regimes: failed ({proc.returncode}): {' '.join(map(str, argv))}\n"
                 f"{proc.stderr[-3000:]}")
    return proc


def launch(c: cluster.Cluster, command: list, ranks: int | None = None
           ) -> subprocess.CompletedProcess:
    """``command`` on ``ranks`` ranks of the cluster (default: its nodes x slots)."""
    return run([BIN / "distgnn-launch", "--hostfile", c.state / "hostfile", "-n",
                ranks or c.nodes * c.slots, "--", *command])


def network_fit(c: cluster.Cluster, out: Path, wait: str) -> Network:
    """The network as the job's ranks see it (:func:`~bench.scaling.measured_network`):
    ``distgnn-bench comm`` on every slot of the cluster, its communicator waiting as the
    training runs' do (``--comm-wait wait``)."""
    launch(c, [BIN / "distgnn-bench", "comm", "--comms", "mpi", "--max-bytes", 4 << 20,
               "--reps", 5, "--comm-wait", wait, "--json", out])
    return measured_network(json.loads(out.read_text()))


def train_point(c: cluster.Cluster, parts: Path, flags: list, epochs: int,
                metrics: Path) -> dict:
    before = [cluster.link_bytes(c, i) for i in range(c.nodes)]
    launch(c, [BIN / "distgnn-train", "--partitions", parts, *MODEL, *flags, "--epochs",
               epochs, "--eval-every", epochs, "--no-progress", "--metrics-out", metrics])
    links = [{k: cluster.link_bytes(c, i)[k] - before[i][k] for k in ("tx", "rx")}
             for i in range(c.nodes)]
    wire = max(link["tx"] for link in links)
    records = read_metrics(metrics)[0]  # the epochs, without the summary record
    timed = records[1:]  # the first epoch compiles and allocates
    phases = {k: statistics.median(r["phases"][k] for r in timed) for k in timed[0]["phases"]}
    payload = sum(r["bytes_sent_max"] + r["allreduce_bytes"] + r.get("eval_bytes_sent_mean", 0)
                  for r in records)
    # the mean too: under cd-r's default schedule exact and stale epochs alternate
    return {"epoch_s": statistics.median(r["epoch_s"] for r in timed),
            "epoch_mean_s": statistics.mean(r["epoch_s"] for r in timed), "phases": phases,
            "exchange_bytes_per_epoch": statistics.median(r["bytes_sent_max"] for r in timed),
            "payload_bytes": payload, "wire_bytes": wire, "link_bytes": links,
            "busiest_link_bytes": max(max(link.values()) for link in links),
            "wire_over_payload": wire / payload if payload else None}


def exactness(c: cluster.Cluster, parts: Path, graph: str, source: str, topology: str,
              epochs: int, work: Path) -> float:
    """The largest relative difference of cd-0's losses (``topology``, no dropout) from
    single-socket training over ``epochs`` epochs."""
    flags = [*MODEL, "--dropout", 0, "--epochs", epochs, "--eval-every", epochs,
             "--no-progress", "--threads", 1]
    single = work / f"single-{graph}-{epochs}.jsonl"
    if not single.exists():
        run([BIN / "distgnn-train", "--dataset", source, *flags, "--metrics-out", single])
    metrics = work / "exact.jsonl"
    launch(c, [BIN / "distgnn-train", "--partitions", parts, *flags, "--algo", "cd-0",
               "--exchange-topology", topology, "--metrics-out", metrics])
    want = [r["loss"] for r in read_metrics(single)[0]]
    got = [r["loss"] for r in read_metrics(metrics)[0]]
    return max(abs(g - w) / abs(w) for g, w in zip(got, want))


def predicted_exchange_bytes(per_rank: list[dict], widths: list[int], algo: str,
                             delay: int) -> float:
    """Split-vertex bytes per epoch the busiest rank sends (:func:`exchange_bytes` of each
    rank's leaves and leaf entries in the partition tables; cd-r's default schedule sends
    cd-0's rows on its wire on its exact epochs, counted as one in ``EXACT_EVERY``)."""
    if len(per_rank) == 1:
        return 0.0
    default = algo == "cd-r default"  # cd-0's rows on its wire, on one epoch in EXACT_EVERY
    return max(exchange_bytes([r["leaves"]], [r["leaf_entries"]], widths,
                              "cd-0" if default else algo, delay,
                              DEFAULT_SCHEDULE_PRECISION if default else "fp32")
               for r in per_rank) / (EXACT_EVERY if default else 1)


def chart(rows: list[dict], graph: str, nodes: int, directory: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    mine = [r for r in rows if r["graph"] == graph and r["nodes"] == nodes and "rate" in r]
    fig, ax = plt.subplots(figsize=(6, 4))
    for label in dict.fromkeys(r["label"] for r in mine):
        points = sorted((r["rate_mbit"], r["epoch_s"]) for r in mine if r["label"] == label)
        line, = ax.plot([p[0] for p in points], [p[1] for p in points], marker="o",
                        label=label)
        predicted = sorted((r["rate_mbit"], r["predicted_s"]) for r in mine
                           if r["label"] == label and r["predicted_s"] is not None)
        ax.plot([p[0] for p in predicted], [p[1] for p in predicted], ":",
                color=line.get_color())
    ax.set_xscale("log")
    ax.set_xlabel("link rate per node (Mbit/s)")
    ax.set_ylabel("epoch (s); dotted: predicted")
    ax.set_title(f"{graph}, {nodes} emulated nodes x {mine[0]['ranks_per_node']} ranks: "
                 "SAGE h256")
    ax.legend()
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"regimes_{graph}_{nodes}x{mine[0]['ranks_per_node']}.png"
    fig.savefig(path, dpi=110, bbox_inches="tight")
    plt.close(fig)
    return path


def rate_mbit(rate: str) -> float:
    """A tc rate in Mbit/s (``10gbit`` -> 10000)."""
    number, unit = re.fullmatch(r"([0-9.]+)([kmg])bit", rate).groups()
    return float(number) * {"k": 1e-3, "m": 1.0, "g": 1e3}[unit]


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--graphs", default="rmat18,tolokers",
                   help="comma-separated: rmat18 or names of ../shared/datasets")
    p.add_argument("--nodes", default="2,4", help="comma-separated emulated node counts")
    p.add_argument("--ranks-per-node", type=int, default=1, metavar="K",
                   help="ranks on each emulated node (partitions: nodes x K)")
    p.add_argument("--topologies", default="flat",
                   help="comma-separated --exchange-topology of the cd-0 points (flat, node)")
    p.add_argument("--exact-epochs", type=int, default=0, metavar="E",
                   help="check cd-0 in each topology against single-socket training over E "
                        "epochs, once per graph and node count (0: not)")
    p.add_argument("--rates", default="10gbit,1gbit,200mbit", help="comma-separated tc rates")
    p.add_argument("--delays", default="2,5,10", help="comma-separated r of cd-r (may be empty)")
    p.add_argument("--comm-wait", default="auto", choices=WAITS,
                   help="distgnn-train's and distgnn-bench comm's --comm-wait (auto: sleep "
                        "here, where the emulated nodes share this host's cores)")
    p.add_argument("--variants", default="",
                   help="comma-separated exchange configurations of drpa_figures.py "
                        "staleness to time too (e.g. 'cd-5 smooth,adaptive,cd-0 bf16')")
    p.add_argument("--smoothing", type=float, default=0.5, help="gamma of smoothed variants")
    p.add_argument("--budget", type=float, default=0.2, help="--comm-budget of 'adaptive'")
    p.add_argument("--epochs", type=int, default=5, help="epochs per run (first not timed)")
    p.add_argument("--data", type=Path, default=DEFAULT_DATA, help="shared datasets folder")
    p.add_argument("--work", type=Path, default=Path("runs/regimes"), help="scratch folder")
    p.add_argument("--json", type=Path, help="write the rows here")
    p.add_argument("--plot", type=Path, help="write the charts here")
    a = p.parse_args()
    use_huge_pages()  # as distgnn-train does: the rates must be measured the same way
    from distgnn import TrainConfig, load
    from distgnn.nn import build_model
    from distgnn.run.training import configure_threads

    a.work.mkdir(parents=True, exist_ok=True)
    from drpa_figures import STALENESS_CONFIGS  # beside this script

    K = a.ranks_per_node
    topologies = a.topologies.split(",")
    # (label, flags, (algo, delay, topology) when the scaling model predicts it)
    points = [("0c", ["--algo", "0c"], ("0c", 0, "flat"))]
    points += [("cd-0" if topologies == ["flat"] else f"cd-0 {t}",
                ["--algo", "cd-0", "--exchange-topology", t], ("cd-0", 0, t))
               for t in topologies]
    points += [(f"cd-{r}", ["--algo", "cd-r", "--delay", r], ("cd-r", int(r), "flat"))
               for r in filter(None, a.delays.split(","))]
    points += [(name, [f.format(g=a.smoothing, budget=a.budget)
                       for f in STALENESS_CONFIGS[name][0]],
                ("cd-r default", 1, "flat") if name == "default" else None)
               for name in filter(None, a.variants.split(","))]
    points = [(label, [*flags, "--comm-wait", a.comm_wait], modelled)
              for label, flags, modelled in points]
    rows = []
    for graph in a.graphs.split(","):
        source = spec(graph, a.data)
        configure_threads(1)
        data = load(source)
        cfg = TrainConfig(model="sage", hidden=256, layers=2, epochs=RATE_EPOCHS,
                          eval_every=RATE_EPOCHS, threads=1, progress=False)
        widths = exchange_widths(data.num_features, 256, data.num_classes, 2)
        params = sum(q.numel() for q in build_model(cfg.network, data.num_features,
                                                     data.num_classes).parameters())
        for nodes in map(int, a.nodes.split(",")):
            P = nodes * K
            parts = a.work / f"{graph}-p{P}"
            stats_file = a.work / f"{graph}-p{P}.json"
            if not stats_file.exists():
                run([BIN / "distgnn-partition", source, "--parts", P, "--out", parts,
                     "--force", "--no-progress", "--json", stats_file])
            # every rank of the emulated cluster runs on this host: its P partitions
            # measured together
            rates = host_rates(directory_graphs(parts, P), cfg)
            stats = json.loads(stats_file.read_text())
            per_rank = stats["per_rank"]
            of = [p // K for p in range(P)]
            links = {t: node_rows(stats["clone_sets"], of, t) if K > 1 else None
                     for t in ("flat", "node")}
            c = cluster.up(nodes, a.rates.split(",")[0], slots=K, name=NAME)
            try:
                if a.exact_epochs:
                    for t in topologies:
                        worst = exactness(c, parts, graph, source, t, a.exact_epochs,
                                          a.work)
                        rows.append({"graph": graph, "nodes": nodes, "ranks_per_node": K,
                                     "label": f"exactness cd-0 {t}", "max_rel_loss_diff": worst})
                        print(f"{graph} N={nodes}x{K} cd-0 {t}: losses within {worst:.2e} "
                              "of single socket", flush=True)
                for rate in a.rates.split(","):
                    for i in range(nodes):
                        cluster.shape(c, i, rate)
                    net = network_fit(c, a.work / f"comm-{nodes}x{K}-{rate}.json",
                                      a.comm_wait)
                    alpha, beta = net.alpha, net.beta
                    for label, flags, modelled in points:
                        point = train_point(c, parts, flags, a.epochs, a.work / "m.jsonl")
                        row = {"graph": graph, "nodes": nodes, "ranks_per_node": K,
                               "rate": rate, "rate_mbit": rate_mbit(rate), "label": label,
                               "alpha_s": alpha, "beta_b_s": beta, **point,
                               "predicted_s": None, "error": None}
                        if modelled:
                            algo, delay, topology = modelled
                            pred = predict(per_rank, rates, widths, params, alpha, beta, algo,
                                           max(delay, 1), 1.0, links[topology], topology,
                                           net.allreduce)
                            row.update(predicted_s=pred["epoch"], predicted_phases=pred,
                                       predicted_exchange_bytes=predicted_exchange_bytes(
                                           per_rank, widths, algo, max(delay, 1))
                                       if topology == "flat" else None)
                            row["error"] = ((row["predicted_s"] - row["epoch_s"])
                                            / row["epoch_s"])
                        ph = row["phases"]
                        row["exchange_share"] = (ph["exchange_pre"] + ph["exchange_wait"]
                                                 + ph["exchange_post"]) / row["epoch_s"]
                        rows.append(row)
                        predicted = ("" if not modelled else
                                     f" (pred {row['predicted_s']:.3f}, "
                                     f"{100 * row['error']:+.0f} %)")
                        print(f"{graph} N={nodes} {rate:>8} {label:16} epoch "
                              f"{row['epoch_s']:.3f} s (mean {row['epoch_mean_s']:.3f})"
                              f"{predicted} exch "
                              f"{100 * row['exchange_share']:.0f} % "
                              f"wait {ph['exchange_wait']:.3f} allred {ph['allreduce']:.3f} "
                              f"bytes {row['exchange_bytes_per_epoch']:,.0f}"
                              + (f"/{row['predicted_exchange_bytes']:,.0f}"
                                 if row.get("predicted_exchange_bytes") is not None else "")
                              + f" wire/payload {row['wire_over_payload'] or 0:.3f}"
                              + f" busiest link {row['busiest_link_bytes']:,}", flush=True)
                        if a.json:
                            write_atomic(a.json, json.dumps(rows, indent=1))
            finally:
                cluster.down(NAME)
            if a.plot:
                print(f"wrote {chart(rows, graph, nodes, a.plot)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
