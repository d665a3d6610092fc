"""``distgnn-bench predict``: per-epoch time of 0c, cd-0 and cd-r at P ranks, before booking them.

Inputs: each P's partition statistics (partitioning the graph here, or ``--stats`` files
written by ``distgnn-partition --json``); this machine's rates, measured by training the
model on the whole graph with ``T`` threads for a few epochs (local aggregation seconds
per edge, dense seconds per vertex, optimizer seconds) and by the STREAM triad; and a
network (latency ``alpha``, bandwidth ``beta`` per rank: presets, or measured by
``distgnn-bench comm``).  With ``E_p``, ``n_p``, ``l_p`` leaves and ``L_p`` leaf entries of
rank ``p`` (see :mod:`partition.stats`) and the widths ``d_k`` of the ``K`` exchanges of one
epoch (each layer's forward aggregation, then its backward one, except for a first layer
that aggregates the input features, which need no gradient; :func:`exchange_widths`):

.. math::
    t_{local} = a \\max_p E_p, \\quad t_{dense} = u \\max_p n_p, \\quad
    t_{prepost} = \\frac{3 \\cdot 4 \\sum_k d_k \\max_p (l_p + L_p)}{B_{triad}}

    t_{comm}^{cd\\text{-}0} = \\sum_k 2 \\Big(\\alpha (P - 1) +
        \\frac{4 d_k \\max_p \\max(l_p, L_p)}{\\beta}\\Big)
    \\qquad t_{wait}^{cd\\text{-}r} = \\max\\big(0, t_{comm}^{cd\\text{-}0} / r
        - r (t_{local} + t_{dense})\\big)

    t_{allreduce} = 2 \\alpha \\lceil \\log_2 P \\rceil + \\frac{2 (P - 1)}{P}
        \\frac{4 G}{\\beta}, \\qquad
    t_{epoch} = s (t_{local} + t_{dense} + t_{prepost}) + t_{comm} + t_{allreduce} + t_{opt}

where ``a`` and ``u`` are the measured rates (forward and backward together), the factor
2 in ``t_comm`` counts the two alltoallvs of an exchange (leaves to roots, roots back),
``G`` the parameters, and ``s = max(1, P T / cores)`` the slow-down of an oversubscribed
node (only when ``--cores`` is given; on a cluster each rank has its own cores).  0c has
no ``t_comm`` and no ``t_prepost``.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import math

import numpy as np

from partition.stats import layer_widths

from ..cli_common import comma_list
from ..exchange.adaptive import POSITION_BYTES, budgeted_rows
from .output import finish, output_arguments

NETWORKS = {  # alpha (s), beta (bytes/s per rank)
    "100gbe": (5e-6, 10e9),
    "hdr-ib": (1.5e-6, 22e9),
}
ALGOS = ("0c", "cd-0", "cd-r")


@dataclasses.dataclass
class Rates:
    """Seconds per unit on one rank of ``T`` threads (measured by :func:`measure_rates`)."""

    aggregation_per_edge: float  # forward + backward, all layers
    dense_per_vertex: float  # forward + backward, all layers
    optimizer: float  # one step
    triad_bytes_s: float


HELP = "scaling model: epoch time of 0c, cd-0, cd-r at P ranks"
DESCRIPTION = ("Predict per-epoch time and phases of 0c, cd-0 and cd-r at each P from partition "
               "statistics, rates measured here and a network model; --validate P... checks it "
               "against runs on this machine.")


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--dataset", default="rmat:scale=18,edge_factor=16,features=128",
                   help="dataset or generator spec")
    p.add_argument("--parts", default=[1, 2, 4, 8, 16, 32, 64, 128], type=comma_list(int),
                   help="comma-separated P to partition the graph into (libra)")
    p.add_argument("--stats", nargs="+", metavar="FILE",
                   help="use these distgnn-partition --json statistics instead of partitioning")
    p.add_argument("--model", choices=("gcn", "sage"), default="sage", help="model")
    p.add_argument("--hidden", type=int, default=256, help="hidden width")
    p.add_argument("--layers", type=int, default=2, help="layers")
    p.add_argument("--threads", type=int, default=1,
                   help="threads per rank (the rates are measured with this many)")
    p.add_argument("--delay", type=int, default=5, help="r of cd-r")
    p.add_argument("--network", default="100gbe",
                   help=f"a preset ({', '.join(NETWORKS)}) or a distgnn-bench comm --json file")
    p.add_argument("--latency", type=float,
                   help="override the network latency in seconds (default: the network's)")
    p.add_argument("--bandwidth", type=float,
                   help="override the bandwidth in GB/s per rank (default: the network's)")
    p.add_argument("--cores", type=int,
                   help="cores of the one node all ranks share (slows oversubscribed P); "
                        "leave out for a cluster with cores per rank")
    p.add_argument("--validate", type=comma_list(int),
                   help="comma-separated P to measure here and compare (e.g. 1,2,4)")
    output_arguments(p, "scaling.png and forward_aggregation.png")

def predict(per_rank: list[dict], rates: Rates, widths: list[int], params: int,
            alpha: float, beta: float, algo: str, delay: int = 5, slowdown: float = 1.0
            ) -> dict[str, float]:
    """Predicted phases (seconds) of one epoch; ``per_rank`` as in ``partition.stats``,
    ``widths`` those of the epoch's exchanges (:func:`exchange_widths`)."""
    P = len(per_rank)
    local = rates.aggregation_per_edge * max(r["edges"] for r in per_rank)
    dense = rates.dense_per_vertex * max(r["vertices"] for r in per_rank)
    split_rows = max(r["leaves"] + r["leaf_entries"] for r in per_rank)
    out = {"local_aggregation": local * slowdown, "dense": dense * slowdown,
           "prepost": 0.0, "comm": 0.0, "optimizer": rates.optimizer}
    if P > 1 and algo != "0c":
        out["prepost"] = slowdown * 3 * 4 * sum(widths) * split_rows / rates.triad_bytes_s
        cd0 = exchange_seconds(per_rank, widths, alpha, beta)
        out["comm"] = (cd0 if algo == "cd-0"
                       else max(0.0, cd0 / delay - delay * (local + dense) * slowdown))
    out["allreduce"] = (2 * alpha * math.ceil(math.log2(P)) + 2 * (P - 1) / P * 4 * params / beta
                        if P > 1 else 0.0)
    out["epoch"] = sum(out.values())
    return out


def exchange_seconds(per_rank: list[dict], widths: list[int], alpha: float, beta: float
                     ) -> float:
    """cd-0 exchanges of ``widths``: each two alltoallvs (leaves to roots, roots to
    leaves), bounded by the rank with the most rows to move."""
    P = len(per_rank)
    if P == 1:
        return 0.0
    rows = max(max(r["leaves"], r["leaf_entries"]) for r in per_rank)
    return sum(2 * (alpha * (P - 1) + 4 * d * rows / beta) for d in widths)


def forward_aggregation(per_rank: list[dict], rates: Rates, widths: list[int], alpha: float,
                        beta: float) -> tuple[float, float]:
    """``(local, remote)`` seconds of the forward pass's aggregation under cd-0 (Fig. 6 shape):
    half of the local rate's forward+backward, and one reduce-broadcast per layer."""
    local = rates.aggregation_per_edge * max(r["edges"] for r in per_rank) / 2
    return local, exchange_seconds(per_rank, widths, alpha, beta)


def aggregation_widths(num_features: int, hidden: int, num_classes: int, layers: int
                       ) -> list[int]:
    """Width each layer aggregates at: the narrower side (``distgnn.models``)."""
    dims = layer_widths(num_features, hidden, num_classes, layers)
    return [min(a, b) for a, b in zip(dims[:-1], dims[1:])]


def exchange_widths(num_features: int, hidden: int, num_classes: int, layers: int,
                    precompute_first: bool = False) -> list[int]:
    """Widths of the split-vertex exchanges of one training epoch: every layer's forward
    aggregation, then the backward ones, without the first layer's when it aggregates the
    input features (``F <= hidden``: they need no gradient).  With the first aggregation
    precomputed (``--precompute-first-aggregation``) neither pass exchanges at the first
    layer: its one exchange, ``F`` wide, is made once before the first epoch."""
    forward = aggregation_widths(num_features, hidden, num_classes, layers)
    if precompute_first:
        return forward[1:] * 2
    first = hidden if layers > 1 else num_classes
    return forward + (forward[1:] if num_features <= first else forward)


def exchange_bytes(leaf_counts: list[int], root_counts: list[int], widths: list[int],
                   algo: str, delay: int = 5, precision: str = "fp32",
                   budget: float | None = None) -> float:
    """Bytes one rank sends per training epoch (mean over epochs) for the exchanges of widths
    ``d_k``, from its leaves per root rank (``leaf_counts``) and its leaf entries per leaf
    rank (``root_counts``), with ``e`` bytes per value (4, or 2 for bf16):
    cd-0 ``sum_k e d_k (l + L)``; cd-r ``1/r`` of that; the adaptive schedule
    ``sum_k sum_blocks k_b (e d_k + 4)`` (:func:`distgnn.exchange.adaptive.budgeted_rows`);
    0c none."""
    if algo == "0c":
        return 0.0
    e = 2 if precision == "bf16" else 4
    if algo == "cd-r" and budget is not None:
        return float(sum(budgeted_rows(n, budget, e * d) * (e * d + POSITION_BYTES)
                         for d in widths for n in [*leaf_counts, *root_counts]))
    rows = sum(leaf_counts) + sum(root_counts)
    return e * sum(widths) * rows / (delay if algo == "cd-r" else 1)


def measure_rates(data, cfg) -> Rates:
    """Train ``cfg`` on the whole graph for a few epochs; rates from the median phases."""
    from ..training import train
    from .machine import triad_bandwidth

    result = train(data, cfg, log=lambda s: None)
    records = result.history[1:]  # the first epoch compiles and allocates
    med = lambda key: float(np.median([r["phases"][key] for r in records]))  # noqa: E731
    return Rates(aggregation_per_edge=med("aggregation") / max(data.graph.num_edges, 1),
                 dense_per_vertex=med("dense") / data.graph.num_nodes,
                 optimizer=med("optimizer"), triad_bytes_s=triad_bandwidth() * 1e9)


def partition_statistics(graph, parts: list[int], seed: int = 0) -> dict[int, list[dict]]:
    """Per P, the per-rank counts of a libra vertex-cut of ``graph``."""
    from partition.stats import counts_from_layout
    from partition.vertex_cut import vertex_cut

    stats = {}
    for P in parts:
        layout = vertex_cut(graph, P, "libra", seed=seed)
        stats[P] = [dataclasses.asdict(c) for c in counts_from_layout(layout)]
        print(f"  partitioned P={P}", flush=True)
    return stats


def read_statistics(paths: list[str]) -> dict[int, list[dict]]:
    """Per P, ``per_rank`` of each ``distgnn-partition --json`` file."""
    stats = {}
    for path in paths:
        with open(path) as f:
            s = json.load(f)
        stats[s["num_parts"]] = s["per_rank"]
    return stats


def table(stats: dict[int, list[dict]], rates: Rates, widths, exchanges, params, alpha, beta,
          delay, threads: int, cores: int | None) -> list[dict]:
    """Per P, the prediction of each algorithm; ``widths`` per layer (forward),
    ``exchanges`` those of an epoch's exchanges."""
    rows = []
    for P, per_rank in sorted(stats.items()):
        slowdown = max(1.0, P * threads / cores) if cores else 1.0
        row = {"parts": P, "slowdown": slowdown}
        for algo in ALGOS:
            row[algo] = predict(per_rank, rates, exchanges, params, alpha, beta, algo, delay,
                                slowdown)
        row["forward_local_s"], row["forward_remote_s"] = forward_aggregation(
            per_rank, rates, widths, alpha, beta)
        rows.append(row)
    for row in rows:  # against the smallest P (normally 1, where the algorithms coincide)
        for algo in ALGOS:
            row[algo]["speedup"] = rows[0]["cd-0"]["epoch"] / row[algo]["epoch"]
    return rows


def format_table(rows: list[dict], delay: int) -> str:
    names = {"0c": "0c", "cd-0": "cd-0", "cd-r": f"cd-{delay}"}
    lines = [f"  {'P':>4} " + " ".join(f"{names[a] + ' s':>10} {'x':>6}" for a in ALGOS)
             + f" {'fwd local ms':>13} {'fwd remote ms':>14}"]
    for r in rows:
        lines.append(f"  {r['parts']:>4} " + " ".join(
            f"{r[a]['epoch']:>10.4f} {r[a]['speedup']:>6.2f}" for a in ALGOS)
            + f" {r['forward_local_s'] * 1e3:>13.2f} {r['forward_remote_s'] * 1e3:>14.2f}"
            + ("  (oversubscribed)" if r["slowdown"] > 1 else ""))
    return "\n".join(lines)


def main(args) -> int:
    from ..config import TrainConfig
    from ..datasets import load
    from ..training import build_model, configure_threads
    from .machine import machine_info

    configure_threads(args.threads)
    data = load(args.dataset)
    print(f"{data.name}: {data.graph.num_nodes:,} vertices, {data.graph.num_edges:,} edges",
          flush=True)
    cfg = TrainConfig(model=args.model, hidden=args.hidden, layers=args.layers, epochs=4,
                      eval_every=4, threads=args.threads, progress=False)
    rates = measure_rates(data, cfg)
    widths = aggregation_widths(data.num_features, args.hidden, data.num_classes, args.layers)
    params = sum(p.numel() for p in build_model(cfg, data.num_features,
                                                 data.num_classes).parameters())
    alpha, beta = network(args)
    stats = (read_statistics(args.stats) if args.stats
             else partition_statistics(data.graph, args.parts))
    exchanges = exchange_widths(data.num_features, args.hidden, data.num_classes, args.layers)
    rows = table(stats, rates, widths, exchanges, params, alpha, beta, args.delay,
                 args.threads, args.cores)
    print(f"rates: aggregation {rates.aggregation_per_edge * 1e9:.2f} ns/edge, dense "
          f"{rates.dense_per_vertex * 1e6:.2f} us/vertex, optimizer "
          f"{rates.optimizer * 1e3:.2f} ms; network alpha {alpha * 1e6:.1f} us, beta "
          f"{beta / 1e9:.1f} GB/s")
    print(format_table(rows, args.delay))
    result = {"benchmark": "predict", "dataset": data.name, "model": args.model,
              "hidden": args.hidden, "layers": args.layers, "threads": args.threads,
              "delay": args.delay, "network": {"alpha_s": alpha, "beta_b_s": beta},
              "rates": dataclasses.asdict(rates), "widths": widths,
              "exchange_widths": exchanges, "params": params,
              "machine": machine_info(args.threads), "rows": rows}
    if args.validate:
        from .validate import validate

        result["validation"] = validate(args, rows)
    finish(result, args)
    return 0


def network(args) -> tuple[float, float]:
    """``(alpha, beta)`` of ``--network`` (a preset or a ``distgnn-bench comm`` JSON),
    overridden by ``--latency``/``--bandwidth``."""
    if args.network in NETWORKS:
        alpha, beta = NETWORKS[args.network]
    else:
        with open(args.network) as f:
            fit = json.load(f)["results"][0]
        alpha, beta = fit["alltoallv_alpha_s"], fit["alltoallv_beta_b_s"]
    return (args.latency if args.latency is not None else alpha,
            args.bandwidth * 1e9 if args.bandwidth is not None else beta)
