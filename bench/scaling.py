"""``distgnn-bench predict``: predicted epoch time of 0c, cd-0 and cd-r at P ranks.

The prediction comes before booking the ranks, and says whether cd-r pays.

Inputs: each P's partition statistics (partitioning the graph here, or ``--stats`` files
written by ``distgnn-partition --json``); this machine's rates at each P, measured by
training that P's partitions with ``T`` threads for a few epochs, ``R`` of them at once as
``R`` ranks of one host (:mod:`bench.rates`: local aggregation seconds per edge,
dense seconds per vertex, optimizer seconds; at P = 1 the whole graph), and by the STREAM
triad; and a network (latency ``alpha``, bandwidth ``beta`` of a node's link: presets, or
measured by ``distgnn-bench comm``).  With ``E_p``, ``n_p``, ``l_p`` leaves and ``L_p`` leaf
entries of rank ``p`` (see :mod:`partition.stats`) and the widths ``d_k`` of the ``K``
exchanges of one epoch (each layer's forward aggregation, then its backward one, except for
a first layer that aggregates the input features, which need no gradient;
:func:`exchange_widths`):

.. math::
    t_{local} = a \\max_p E_p, \\quad t_{dense} = u \\max_p n_p, \\quad
    t_{prepost} = \\frac{3 \\cdot 4 \\sum_k d_k \\max_p (l_p + L_p)}{B_{triad}}

    t_{comm}^{cd\\text{-}0} = \\sum_k 2 \\Big(\\alpha (P - 1) +
        \\frac{4 d_k \\max_p \\max(l_p, L_p)}{\\beta}\\Big)
    \\qquad t_{wait}^{cd\\text{-}r} = \\max\\big(0, t_{comm}^{cd\\text{-}0} / r
        - r (t_{local} + t_{dense})\\big)

    t_{wait}^{default} = t_w / T

    t_{allreduce} = 2 \\alpha \\lceil \\log_2 P \\rceil + \\frac{2 (P - 1)}{P}
        \\frac{4 G}{\\beta}, \\qquad
    t_{epoch} = s (t_{local} + t_{dense} + t_{prepost}) + t_{comm} + t_{allreduce} + t_{opt}

where ``t_w`` is ``t_comm^{cd-0}`` with the bytes of a row of the default schedule's int4
wire (:func:`~distgnn.exchange.wire.row_bytes`) in place of ``4 d_k``: cd-r's default
schedule (:mod:`distgnn.exchange.controller`) waits for the whole exchange on its exact
epochs (at least one in ``T`` = ``EXACT_EVERY``; counted as exactly that) and sends nothing
on the stale ones.  A line per ``P`` then says whether
cd-r pays: whether the faster of cd-``r`` and the default schedule saves at least
``PAYS`` of cd-0's epoch; on an oversubscribed node (``--cores``) it adds that a measured
exchange wait beyond the prediction is ranks waiting for each other's compute.
``a`` and ``u`` are the measured rates (forward and backward together), the factor
2 in ``t_comm`` counts the two alltoallvs of an exchange (leaves to roots, roots back),
``G`` the parameters, and ``s = max(1, P T / cores)`` the slow-down of an oversubscribed
node (only when ``--cores`` is given; on a cluster each rank has its own cores).  0c has
no ``t_comm`` and no ``t_prepost``.  Each row also gives the largest rank's memory by the
model of :func:`partition.stats.summarize` (``predicted_memory_bytes``, evaluated on the
same per-rank counts).

Ranks sharing nodes (``--ranks-per-node K``: ranks ``kK .. kK + K - 1`` on node ``k``, whose
link runs at ``beta``): the bandwidth term of ``t_comm`` takes the rows of the busiest node
link in one alltoallv instead of the busiest rank's, counted from the cut's clone sets
(:func:`partition.stats.node_rows`; the flat exchange sends a row per clone off its root's node, the
node-aware one of :mod:`distgnn.exchange.nodes` a row per vertex and node off it, with 4
alltoallvs' latency instead of 2 and its leader's copies in ``t_prepost``), and the rates are
measured with ``R`` (``--host-ranks``, default ``K``) partitions training at once on this
host, as ranks sharing a node's cores and memory slow each other.

A ``distgnn-bench comm`` network (:func:`measured_network`), run on the nodes and ranks per
node of the job (``distgnn-launch -n P --hostfile ...``, the communicator waiting as the
job's will: ``--comm-wait``), gives ``alpha``, the smallest alltoallv's time per peer, and
``beta``, the bytes a node's link carries per second in its alltoallvs, both as the job's
ranks see them (where the ranks of several nodes share one host's cores, as in an emulated
cluster, that includes the CPU time the transfers take from them); at the P it was measured
at, ``t_allreduce`` is its allreduce time at ``4 G`` bytes instead of the formula.

A graph too large to load here (``--size nodes=N,edges=E``): the ``--dataset`` is a proxy,
trained to measure the rates and partitioned at each ``P``, and each rank's counts at that
``P`` are scaled to the target's size,

.. math::
    E_p' = \\mathrm{round}(E_p \\, E' / E), \\qquad
    x_p' = \\mathrm{round}(x_p \\, N' / N) \\quad (x = n, \\text{roots}, l, L)

with ``N`` and ``E`` the proxy's vertices (the sum of its roots: one per vertex) and edges
(the sum of ``E_p``), ``N'`` and ``E'`` the target's.  The proxy's replication factor,
split fraction and balance at each ``P`` are thus carried over unchanged (an assumption:
pick a proxy of the target's average degree and degree skew).  ``t_local``, ``t_dense``,
``t_prepost`` and the bandwidth part of ``t_comm`` grow with the counts (by exactly ``k``
when ``N'`` and ``E'`` are ``k`` times the proxy's); the latency part, the allreduce and the
optimizer do not.  The memory is the same model evaluated on the scaled counts (its terms
proportional to them grow by ``k`` too).  The rates are per edge and per vertex, so they
carry over when the proxy has the target's feature and class widths (``features=`` and
``classes=`` of ``--size``, when given, must be the proxy's) and is itself too large for
the caches, as the target is.  ``E`` counts the edges as the trainer stores them: both
directions of an undirected (symmetrised) graph.  ``--validate`` does not combine with
``--size``: it can only measure the proxy.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import math

import numpy as np

from bench.output import finish, output_arguments
from bench.rates import RATE_EPOCHS, Rates, host_rates, measure_rates, partition_graphs
from distgnn.errors import DistGNNError
from distgnn.exchange.adaptive import POSITION_BYTES, budgeted_rows
from distgnn.exchange.config import DEFAULT_SCHEDULE_PRECISION
from distgnn.exchange.controller import EXACT_EVERY
from distgnn.exchange.wire import row_bytes
from distgnn.nn.widths import aggregation_widths, exchange_widths
from distgnn.program import comma_list
from distgnn.run.memory import training_memory
from partition.stats import node_rows

__all__ = ["Network", "exchange_bytes", "measured_network", "predict"]

NETWORKS = {  # alpha (s), beta (bytes/s of a node's link)
    "100gbe": (5e-6, 10e9),
    "hdr-ib": (1.5e-6, 22e9),
}
# "cd-r default": cd-r's default schedule (distgnn.exchange.controller)
ALGOS = ("0c", "cd-0", "cd-r", "cd-r default")
# the epoch saving below which a delayed exchange is not worth its staleness
PAYS = 0.1


SIZE_KEYS = ("nodes", "edges", "features", "classes")
SIZE_FORM = "nodes=N,edges=E[,features=F][,classes=C]"


@dataclasses.dataclass
class TargetSize:
    """The graph a projection is for (``--size``): ``edges`` as the trainer stores them
    (both directions of an undirected graph); ``features``/``classes``, when given, must be
    the proxy dataset's."""

    nodes: int
    edges: int
    features: int | None = None
    classes: int | None = None


def parse_size(text: str) -> TargetSize:
    """``--size nodes=N,edges=E[,features=F][,classes=C]``: whole numbers >= 1; a bad
    item is one line naming it."""
    fields: dict[str, int] = {}
    for item in text.split(","):
        key, sep, value = (part.strip() for part in item.partition("="))
        if not sep or not key:
            raise argparse.ArgumentTypeError(f"{item.strip()!r} is not KEY=VALUE; expected "
                                             f"{SIZE_FORM}")
        if key not in SIZE_KEYS:
            raise argparse.ArgumentTypeError(f"unknown key {key!r}; the keys are "
                                             f"{', '.join(SIZE_KEYS)}")
        if key in fields:
            raise argparse.ArgumentTypeError(f"{key} is given twice")
        try:
            number = int(value)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{key}={value!r} is not a whole number") from None
        if number < 1:
            raise argparse.ArgumentTypeError(f"{key}={number} must be at least 1")
        fields[key] = number
    missing = [k for k in ("nodes", "edges") if k not in fields]
    if missing:
        raise argparse.ArgumentTypeError(f"{' and '.join(missing)} missing; expected "
                                         f"{SIZE_FORM}")
    return TargetSize(**fields)


def check_size(size: TargetSize, num_features: int, num_classes: int, name: str) -> None:
    """Refuse a ``--size`` whose widths are not the proxy's: the rates measured on the
    proxy hold at its widths only."""
    for key, given, proxy in (("features", size.features, num_features),
                              ("classes", size.classes, num_classes)):
        if given is not None and given != proxy:
            raise DistGNNError(f"--size {key}={given} but the dataset {name} has {proxy} "
                               f"{key}: the rates are measured on the dataset, so give it "
                               f"{given} {key} too (a generator spec takes {key}={given})")


def scale_statistics(stats: dict[int, list[dict]], nodes: int, edges: int
                     ) -> tuple[dict[int, list[dict]], dict[int, dict]]:
    """Per P, each rank's counts scaled to a graph of ``nodes`` vertices and ``edges`` edges
    (the module docstring), and the proxy's size and the ratios used."""
    scaled, ratios = {}, {}
    for P, per_rank in stats.items():
        proxy_nodes = sum(r["roots"] for r in per_rank)
        proxy_edges = sum(r["edges"] for r in per_rank)
        if proxy_nodes < 1 or proxy_edges < 1:
            raise DistGNNError(f"P={P}: the partitioned graph has {proxy_nodes} vertices and "
                               f"{proxy_edges} edges; --size needs a proxy with both")
        vx, ex = nodes / proxy_nodes, edges / proxy_edges
        rows = []
        for r in per_rank:  # the fields of partition.stats.PartCounts
            vertices = round(r["vertices"] * vx)
            rows.append({"vertices": vertices, "edges": round(r["edges"] * ex),
                         "roots": round(r["roots"] * vx), "leaves": round(r["leaves"] * vx),
                         "leaf_entries": round(r["leaf_entries"] * vx),
                         "index_bytes": 4 if vertices < 2**31 else 8})
        scaled[P] = rows
        ratios[P] = {"proxy_nodes": proxy_nodes, "proxy_edges": proxy_edges,
                     "vertex_ratio": vx, "edge_ratio": ex}
    return scaled, ratios


def predicted_memory(per_rank: list[dict], num_features: int, num_classes: int, hidden: int,
                     layers: int) -> int:
    """The largest rank's peak memory in bytes (:func:`distgnn.run.memory.training_memory`,
    what :func:`~partition.stats.summarize` reports per rank)."""
    return max(training_memory(r["vertices"], r["edges"], num_features, num_classes, hidden,
                               layers, split_entries=r["leaves"] + r["leaf_entries"],
                               fused=True)["total"]
               for r in per_rank)


HELP = "scaling model: epoch time of 0c, cd-0, cd-r at P ranks"
DESCRIPTION = ("Predict per-epoch time and phases of 0c, cd-0 and cd-r at each P from partition "
               "statistics, rates measured here and a network model; --validate P... checks it "
               "against runs on this machine.")


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--dataset", default="rmat:scale=18,edge_factor=16,features=128",
                   help="dataset or generator spec (with --size: the proxy, trained for the "
                        "rates and partitioned)")
    p.add_argument("--size", type=parse_size, metavar=SIZE_FORM,
                   help="project to a graph of this size that is not loaded: each rank's "
                        "counts of the --dataset at each P are scaled by the vertex and edge "
                        "ratios (replication taken from the dataset); E counts the edges as "
                        "trained (both directions of an undirected graph); features and "
                        "classes, if given, must be the dataset's; not with --validate")
    p.add_argument("--parts", default=[1, 2, 4, 8, 16, 32, 64, 128], type=comma_list(int),
                   help="comma-separated P to partition the graph into (libra)")
    p.add_argument("--stats", nargs="+", metavar="FILE",
                   help="use these distgnn-partition --json statistics instead of partitioning")
    p.add_argument("--model", choices=("gcn", "sage"), default="sage", help="model")
    p.add_argument("--hidden", type=int, default=256, help="hidden width")
    p.add_argument("--layers", type=int, default=2, help="layers")
    p.add_argument("--threads", type=int, default=1,
                   help="threads per rank (the rates are measured with this many)")
    p.add_argument("--delay", type=int, default=5,
                   help="r of the cd-r column (binned cd-r); the 'cd-r dflt' column is cd-r's "
                        "default schedule (no --delay)")
    p.add_argument("--network", default="100gbe",
                   help=f"a preset ({', '.join(NETWORKS)}) or a distgnn-bench comm --json file, "
                        "best measured on the job's nodes and ranks per node (its allreduce "
                        "times are then used at that P)")
    p.add_argument("--latency", type=float,
                   help="override the network latency in seconds (default: the network's)")
    p.add_argument("--bandwidth", type=float,
                   help="override the bandwidth in GB/s of a node's link (default: the "
                        "network's)")
    p.add_argument("--cores", type=int,
                   help="cores of the one node all ranks share (slows oversubscribed P); "
                        "leave out for a cluster with cores per rank")
    p.add_argument("--ranks-per-node", type=int, default=1, metavar="K",
                   help="ranks sharing each node and its link (consecutive ranks): the "
                        "exchanges are counted per node link (the network's bandwidth is "
                        "then each node's), and a 'cd-0 node' column gives cd-0 with "
                        "--exchange-topology node")
    p.add_argument("--host-ranks", type=int, metavar="R",
                   help="measure each P's rates on R of its partitions trained at once on "
                        "this host, as R ranks sharing a node's cores and memory slow each "
                        "other (default: --ranks-per-node; at most P)")
    p.add_argument("--rate-epochs", type=int, default=RATE_EPOCHS, metavar="E",
                   help="epochs each rate measurement trains, the first not counted "
                        f"(default {RATE_EPOCHS}; fewer is quicker and noisier)")
    p.add_argument("--validate", type=comma_list(int),
                   help="comma-separated P to measure here and compare (e.g. 1,2,4)")
    output_arguments(p, "scaling.png and forward_aggregation.png")


def predict(per_rank: list[dict], rates: Rates | list[Rates], widths: list[int], params: int,
            alpha: float, beta: float, algo: str, delay: int = 5, slowdown: float = 1.0,
            links: dict[str, int] | None = None, topology: str = "flat",
            allreduce: list[list[float]] | None = None) -> dict[str, float]:
    """Predicted phases (seconds) of one epoch of ``algo``.

    ``per_rank`` as in ``partition.stats``, ``widths`` those of the epoch's exchanges
    (:func:`exchange_widths`); ``links``: the :func:`~partition.stats.node_rows` of the ranks'
    nodes for cd-0's exchange in ``topology`` (``None``: a rank per node); ``allreduce``: the
    job's allreduce measured (:func:`allreduce_seconds`), else the formula of the module
    docstring.  ``rates``: the ranks' (alike), or one per rank for ranks that differ (a job
    mixing GPUs and CPUs), whose compute ``a_p E_p + u_p n_p`` the epoch waits for at its
    slowest rank."""
    P = len(per_rank)
    if isinstance(rates, list):  # the slowest rank's phases (and its optimizer)
        p = max(range(P), key=lambda q: rates[q].aggregation_per_edge * per_rank[q]["edges"]
                + rates[q].dense_per_vertex * per_rank[q]["vertices"])
        local = rates[p].aggregation_per_edge * per_rank[p]["edges"]
        dense = rates[p].dense_per_vertex * per_rank[p]["vertices"]
        rates = rates[p]
    else:
        local = rates.aggregation_per_edge * max(r["edges"] for r in per_rank)
        dense = rates.dense_per_vertex * max(r["vertices"] for r in per_rank)
    split_rows = (max(r["leaves"] + r["leaf_entries"] for r in per_rank) if links is None
                  else links["touched"])
    out = {"local_aggregation": local * slowdown, "dense": dense * slowdown,
           "prepost": 0.0, "comm": 0.0, "optimizer": rates.optimizer}
    if P > 1 and algo != "0c":
        out["prepost"] = slowdown * 3 * 4 * sum(widths) * split_rows / rates.triad_bytes_s
        cd0 = exchange_seconds(per_rank, widths, alpha, beta, links=links, topology=topology)
        if algo == "cd-0":
            out["comm"] = cd0
        elif algo == "cd-r":
            out["comm"] = max(0.0, cd0 / delay - delay * (local + dense) * slowdown)
        else:  # exact epochs wait for the whole exchange, stale ones send nothing
            out["comm"] = exchange_seconds(per_rank, widths, alpha, beta,
                                           DEFAULT_SCHEDULE_PRECISION, links) / EXACT_EVERY
    out["allreduce"] = allreduce_seconds(P, 4 * params, alpha, beta, allreduce)
    out["epoch"] = sum(out.values())
    return out


def allreduce_seconds(P: int, nbytes: int, alpha: float, beta: float,
                      measured: list[list[float]] | None = None) -> float:
    """Seconds of the gradient allreduce of ``nbytes`` over ``P`` ranks.

    Interpolated in ``measured`` (``[[bytes, seconds], ...]`` of the job's own ranks, from
    ``distgnn-bench comm``: linear between sizes, and beyond the largest at its seconds per
    byte), else ``2 alpha ceil(log2 P) + 2 (P - 1) / P nbytes / beta``."""
    if P == 1:
        return 0.0
    if not measured:
        return 2 * alpha * math.ceil(math.log2(P)) + 2 * (P - 1) / P * nbytes / beta
    sizes, seconds = zip(*sorted(measured))
    if nbytes > sizes[-1]:
        return seconds[-1] * nbytes / sizes[-1]
    return float(np.interp(nbytes, sizes, seconds))


def exchange_seconds(per_rank: list[dict], widths: list[int], alpha: float, beta: float,
                     precision: str = "fp32", links: dict[str, int] | None = None,
                     topology: str = "flat") -> float:
    """Seconds of cd-0's blocking exchanges of ``widths`` on a ``precision`` wire.

    Each is two alltoallvs across the network (leaves to roots, roots to leaves), bounded by
    the rank with the most rows to move (a rank per node, ``beta`` its link), or, with
    ``links`` (:func:`~partition.stats.node_rows`), by the node link with the most rows
    (``beta`` each node's link); at :func:`~distgnn.exchange.wire.row_bytes` per row.  The
    ``node`` topology adds two alltoallvs within the nodes (their latency; their copies are in
    ``prepost``)."""
    P = len(per_rank)
    if P == 1:
        return 0.0
    rows = (max(max(r["leaves"], r["leaf_entries"]) for r in per_rank) if links is None
            else links["across"])
    steps = 4 if topology == "node" else 2
    return sum(steps * alpha * (P - 1) + 2 * row_bytes(precision, d) * rows / beta
               for d in widths)


def forward_aggregation(per_rank: list[dict], rates: Rates, widths: list[int], alpha: float,
                        beta: float) -> tuple[float, float]:
    """``(local, remote)`` seconds of the forward pass's aggregation under cd-0 (Fig. 6 shape):
    half of the local rate's forward+backward, and one reduce-broadcast per layer."""
    local = rates.aggregation_per_edge * max(r["edges"] for r in per_rank) / 2
    return local, exchange_seconds(per_rank, widths, alpha, beta)


def exchange_bytes(leaf_counts: list[int], root_counts: list[int], widths: list[int],
                   algo: str, delay: int = 5, precision: str = "fp32",
                   budget: float | None = None) -> float:
    """Mean bytes one rank sends per training epoch under ``algo``.

    For the exchanges of widths ``d_k``, from its leaves per root rank (``leaf_counts``) and
    its leaf entries per leaf rank (``root_counts``), with ``u_k`` bytes per row of width
    ``d_k`` on the wire (:func:`distgnn.exchange.wire.row_bytes`: ``4 d_k`` in fp32): cd-0
    ``sum_k u_k (l + L)``; cd-r ``1/r`` of that; the adaptive schedule
    ``sum_k sum_blocks k_b (u_k + 4)`` (:func:`distgnn.exchange.adaptive.budgeted_rows`);
    0c none."""
    if algo == "0c":
        return 0.0
    if algo == "cd-r" and budget is not None:
        return float(sum(budgeted_rows(n, budget, row_bytes(precision, d))
                         * (row_bytes(precision, d) + POSITION_BYTES)
                         for d in widths for n in [*leaf_counts, *root_counts]))
    rows = sum(leaf_counts) + sum(root_counts)
    return (sum(row_bytes(precision, d) for d in widths) * rows
            / (delay if algo == "cd-r" else 1))


def cut_statistics(graph, P: int, seed: int = 0) -> tuple:
    """``(layout, per_rank, clone_sets)`` of a libra vertex-cut of ``graph`` into ``P``
    (the per-rank counts of :mod:`partition.stats`, its
    :func:`~partition.stats.clone_sets`)."""
    from partition.stats import clone_sets, counts_from_layout
    from partition.vertex_cut import vertex_cut

    layout = vertex_cut(graph, P, "libra", seed=seed)
    return (layout, [dataclasses.asdict(c) for c in counts_from_layout(layout)],
            clone_sets(layout))


def partition_rates(data, layout, cfg, host_ranks: int) -> Rates:
    """The rates of the ranks of ``layout`` (a cut of ``data``): ``min(host_ranks, P)`` of
    its partitions trained at once (:func:`~bench.rates.host_rates`), or the whole
    graph alone at P = 1."""
    P = layout.num_parts
    return (measure_rates(data, cfg) if P == 1 else
            host_rates(partition_graphs(data, layout, min(host_ranks, P)), cfg))


def read_statistics(paths: list[str]) -> tuple[dict[int, list[dict]], dict[int, list | None]]:
    """Per P, ``per_rank`` and ``clone_sets`` (``None`` if absent) of each
    ``distgnn-partition --json`` file."""
    stats, sets = {}, {}
    for path in paths:
        with open(path) as f:
            s = json.load(f)
        stats[s["num_parts"]] = s["per_rank"]
        sets[s["num_parts"]] = s.get("clone_sets")
    return stats, sets


def table(stats: dict[int, list[dict]], rates: dict[int, Rates], widths, exchanges, params,
          alpha, beta, delay, threads: int, cores: int | None, ranks_per_node: int = 1,
          sets: dict[int, list] | None = None, allreduce: dict[int, list] | None = None
          ) -> list[dict]:
    """Per P, the prediction of each algorithm from that P's ``rates``.

    ``widths`` per layer (forward), ``exchanges`` those of an epoch's exchanges.  With
    ``ranks_per_node`` K > 1, ranks ``kK .. kK + K - 1`` share node ``k`` and its link
    (``beta``), counted from the clone ``sets`` of each P, and ``"cd-0 node"`` is cd-0 with
    the node-aware exchange; ``allreduce``: per P, the allreduce measured at that P, as
    :func:`predict` takes it."""
    rows = []
    for P, per_rank in sorted(stats.items()):
        rate, measured = rates[P], (allreduce or {}).get(P)
        slowdown = max(1.0, P * threads / cores) if cores else 1.0
        row = {"parts": P, "slowdown": slowdown}
        nodes = [p // ranks_per_node for p in range(P)]
        links = {t: node_rows(sets[P], nodes, t) if ranks_per_node > 1 else None
                 for t in ("flat", "node")}
        for algo in ALGOS:
            row[algo] = predict(per_rank, rate, exchanges, params, alpha, beta, algo, delay,
                                slowdown, links["flat"], allreduce=measured)
        if ranks_per_node > 1:
            row["cd-0 node"] = predict(per_rank, rate, exchanges, params, alpha, beta,
                                       "cd-0", delay, slowdown, links["node"], "node",
                                       measured)
            row["links"] = links
        row["forward_local_s"], row["forward_remote_s"] = forward_aggregation(
            per_rank, rate, widths, alpha, beta)
        row["rates"] = dataclasses.asdict(rate)
        rows.append(row)
    for row in rows:  # against the smallest P (normally 1, where the algorithms coincide)
        for algo in (*ALGOS, "cd-0 node"):
            if algo in row:
                row[algo]["speedup"] = rows[0]["cd-0"]["epoch"] / row[algo]["epoch"]
    return rows


def verdict(row: dict, delay: int) -> str:
    """One line per P: the exchange's share of cd-0's epoch, and whether cd-r saves at least
    ``PAYS`` of it (plain cd-``delay`` or the default schedule, whichever is faster)."""
    cd0 = row["cd-0"]["epoch"]
    epochs = {f"cd-{delay}": row["cd-r"]["epoch"], "cd-r default": row["cd-r default"]["epoch"]}
    best = min(epochs, key=epochs.get)
    ratio = epochs[best] / cd0
    line = (f"P={row['parts']}: the exchange is {row['cd-0']['comm'] / cd0:.0%} of cd-0's "
            f"epoch; {best} takes {ratio:.2f}x it: ")
    line += ("cd-r pays" if ratio <= 1 - PAYS else
             f"cd-r does not pay (it saves less than {PAYS:.0%}; use cd-0)")
    if row["slowdown"] > 1:
        line += ("; the ranks share this node's cores, so an exchange wait measured here "
                 "beyond this is ranks waiting for each other's compute, which cd-r does not "
                 "remove")
    return line


def format_table(rows: list[dict], delay: int) -> str:
    names = {"0c": "0c", "cd-0": "cd-0", "cd-r": f"cd-{delay}", "cd-r default": "cd-r dflt",
             "cd-0 node": "cd-0 node"}
    columns = [*ALGOS, *(["cd-0 node"] if rows and "cd-0 node" in rows[0] else [])]
    lines = [f"  {'P':>4} " + " ".join(f"{names[a] + ' s':>10} {'x':>6}" for a in columns)
             + f" {'fwd local ms':>13} {'fwd remote ms':>14} {'memory MiB/rank':>16}"]
    for r in rows:
        memory = r.get("predicted_memory_bytes")
        lines.append(f"  {r['parts']:>4} " + " ".join(
            f"{r[a]['epoch']:>10.4f} {r[a]['speedup']:>6.2f}" for a in columns)
            + f" {r['forward_local_s'] * 1e3:>13.2f} {r['forward_remote_s'] * 1e3:>14.2f}"
            + (f" {memory / 2**20:>16,.1f}" if memory is not None else f" {'':>16}")
            + ("  (oversubscribed)" if r["slowdown"] > 1 else ""))
    return "\n".join(lines)


def main(args) -> int:
    from bench.machine import machine_info
    from distgnn.data.datasets import load
    from distgnn.nn.config import build_model
    from distgnn.run.config import TrainConfig
    from distgnn.run.training import configure_threads

    if args.size and args.validate:
        raise DistGNNError("--validate runs the --dataset itself and cannot check a projection "
                           "to --size; validate without --size")
    if args.ranks_per_node < 1 or (args.host_ranks is not None and args.host_ranks < 1):
        raise DistGNNError("--ranks-per-node and --host-ranks must be at least 1")
    if args.rate_epochs < 2:
        raise DistGNNError(f"--rate-epochs must be at least 2 (the first is not counted), "
                           f"got {args.rate_epochs}")
    configure_threads(args.threads)
    data = load(args.dataset)
    print(f"{data.name}: {data.graph.num_nodes:,} vertices, {data.graph.num_edges:,} edges",
          flush=True)
    if args.size:
        check_size(args.size, data.num_features, data.num_classes, data.name)
    cfg = TrainConfig(model=args.model, hidden=args.hidden, layers=args.layers,
                      epochs=args.rate_epochs, eval_every=args.rate_epochs, threads=args.threads,
                      progress=False)
    widths = aggregation_widths(data.num_features, args.hidden, data.num_classes, args.layers)
    params = sum(p.numel() for p in build_model(cfg.network, data.num_features,
                                                 data.num_classes).parameters())
    net = network(args)
    alpha, beta = net.alpha, net.beta
    stats, sets = read_statistics(args.stats) if args.stats else ({}, {})
    rates = {}
    for P in sorted(stats) or args.parts:  # the rates on this graph's cut at each P
        layout, per_rank, clones = cut_statistics(data.graph, P)
        if not args.stats:
            stats[P], sets[P] = per_rank, clones
        rates[P] = partition_rates(data, layout, cfg, args.host_ranks or args.ranks_per_node)
        print(f"  P={P}: partitioned, rates measured", flush=True)
    if args.ranks_per_node > 1:
        missing = [P for P in stats if sets.get(P) is None]
        if missing:
            raise DistGNNError(f"--ranks-per-node needs the clone sets of each P (written by "
                               f"distgnn-partition --json up to 62 parts); P={missing[0]} has "
                               "none")
    exchanges = exchange_widths(data.num_features, args.hidden, data.num_classes, args.layers)
    ratios = {}
    if args.size:
        stats, ratios = scale_statistics(stats, args.size.nodes, args.size.edges)
        sets = {P: s and [[root, mask, round(count * ratios[P]["vertex_ratio"])]
                          for root, mask, count in s] for P, s in sets.items()}
    rows = table(stats, rates, widths, exchanges, params, alpha, beta, args.delay,
                 args.threads, args.cores, args.ranks_per_node, sets,
                 {net.ranks: net.allreduce} if net.allreduce else None)
    for row in rows:
        row["predicted_memory_bytes"] = predicted_memory(
            stats[row["parts"]], data.num_features, data.num_classes, args.hidden, args.layers)
        if args.size:
            row["scale"] = ratios[row["parts"]]
    if args.size:
        first = ratios[rows[0]["parts"]]
        print(f"projected to {args.size.nodes:,} vertices and {args.size.edges:,} edges: "
              f"vertex counts x{first['vertex_ratio']:.4g}, edge counts "
              f"x{first['edge_ratio']:.4g} (replication of {data.name}'s partitions)")
    print(f"network: alpha {alpha * 1e6:.1f} us, beta {beta / 1e9:.3g} GB/s per node link"
          + (f", allreduce measured over {net.ranks} ranks" if net.allreduce else ""))
    for P, r in sorted(rates.items()):
        print(f"rates at P={P}: aggregation {r.aggregation_per_edge * 1e9:.2f} ns/edge, dense "
              f"{r.dense_per_vertex * 1e6:.2f} us/vertex, optimizer {r.optimizer * 1e3:.2f} ms")
    print(format_table(rows, args.delay))
    for row in rows:
        if row["parts"] > 1:
            row["verdict"] = verdict(row, args.delay)
            print("  " + row["verdict"])
    result = {"benchmark": "predict", "dataset": data.name, "model": args.model,
              "hidden": args.hidden, "layers": args.layers, "threads": args.threads,
              "delay": args.delay, "network": {"alpha_s": alpha, "beta_b_s": beta,
                                               "allreduce_ranks": net.ranks,
                                               "allreduce": net.allreduce},
              "rates": {P: dataclasses.asdict(r) for P, r in sorted(rates.items())},
              "widths": widths,
              "exchange_widths": exchanges, "params": params,
              "size": (None if not args.size else
                       {"nodes": args.size.nodes, "edges": args.size.edges,
                        "features": data.num_features, "classes": data.num_classes}),
              "machine": machine_info(args.threads), "rows": rows}
    if args.validate:
        from bench.validate import validate

        result["validation"] = validate(args, rows)
    finish(result, args)
    return 0


@dataclasses.dataclass
class Network:
    """The network the model assumes: ``alpha`` (s) the latency of an alltoallv per peer,
    ``beta`` (bytes/s) what one node's link carries, and, when measured, ``allreduce``
    ``[[bytes, seconds], ...]`` of a job of ``ranks`` ranks."""

    alpha: float
    beta: float
    ranks: int | None = None
    allreduce: list[list[float]] | None = None


def measured_network(measured: dict) -> Network:
    """The :class:`Network` of a ``distgnn-bench comm`` result.

    The result is over its ``ranks`` ranks, ``K`` on each node (``ranks_per_node``): ``alpha``
    the smallest alltoallv's time per peer (the model's ``alpha (P - 1)`` counts it), ``beta``
    the bytes one node's link carries per second between the smallest and the largest
    alltoallv (``K (P - K)`` blocks of each size leave a node; with ``K = 1``, the bytes each
    rank sends), and its allreduce times."""
    P, K = measured.get("ranks", 2), measured.get("ranks_per_node", 1)
    sizes = sorted(measured["results"][0]["sizes"], key=lambda r: r["bytes"])
    small, large = sizes[0], sizes[-1]
    spent = large["alltoallv_s"] - small["alltoallv_s"]
    crossing = K * max(P - K, 1) * (large["bytes"] - small["bytes"])
    return Network(alpha=small["alltoallv_s"] / max(1, P - 1),
                   beta=crossing / spent if spent > 0 else float("inf"), ranks=P,
                   allreduce=[[r["bytes"], r["allreduce_s"]] for r in sizes])


def network(args) -> Network:
    """The :class:`Network` of ``--network`` (a preset or a ``distgnn-bench comm`` JSON),
    ``alpha`` and ``beta`` overridden by ``--latency``/``--bandwidth``."""
    if args.network in NETWORKS:
        net = Network(*NETWORKS[args.network])
    else:
        with open(args.network) as f:
            net = measured_network(json.load(f))
    if args.latency is not None:
        net.alpha = args.latency
    if args.bandwidth is not None:
        net.beta = args.bandwidth * 1e9
    return net
