"""Statistics of a vertex-cut: replication, balance, cd-0 exchange volume, memory per rank.

All figures derive from per-partition counts (:class:`PartCounts`), which come either from
an in-memory :class:`~partition.layout.Layout` or from a partition directory on disk, so
``distgnn-partition``, ``distgnn-partition inspect`` and ``distgnn-bench partition`` print
the same numbers.

With ``n_p`` vertices, ``E_p`` edges, ``l_p`` leaves (local clones whose root is
elsewhere) and ``L_p`` leaf entries (copies elsewhere of roots held here) on partition
``p``, and ``N`` vertices overall:

- replication factor ``sum_p n_p / N``; split fraction: vertices with two or more clones;
- edge balance ``max_p E_p / mean_p E_p``; root balance ``max_p (n_p - l_p) / mean``;
- with requested edge shares ``s_p`` (``distgnn-partition --weights``: ``s_p`` = weight
  over the sum of weights) the edge balance is relative to capacity,
  ``max_p (E_p / E) / s_p`` (equal shares give the plain figure exactly); every rank
  reports its achieved share ``E_p / E`` and the relative error ``(E_p / E - s_p) / s_p``
  (shares default to ``1 / P``);
- cd-0 exchange per layer at width ``d`` (forward; the backward sends as much again):
  rank ``p`` sends ``d (l_p + L_p)`` floats (its leaves' partials to their roots, then its
  roots' sums back to their leaves) and receives as many;
- the split vertices by root rank and set of ranks holding a clone (:func:`clone_sets`): what
  any grouping of the ranks into nodes sends across them is counted from it
  (:func:`node_rows`); with ``K`` consecutive ranks per node, the busiest node link's rows
  per alltoallv of the flat and the node-aware exchange (:func:`node_links`);
- predicted peak memory of rank ``p``: :func:`training_memory` of its ``n_p`` vertices,
  ``E_p`` edges and ``l_p + L_p`` split entries, for GraphSAGE-gcn (or GCN) of the given
  hidden width, layers and precision; of it, the fixed part (runtime and model, the same on
  every rank and for any cut: :func:`~distgnn.run.memory.memory_rates`) on its own.
"""
from __future__ import annotations

import dataclasses

import numpy as np

from distgnn.errors import DistGNNError
from distgnn.exchange.config import ExchangeConfig
from distgnn.nn.config import ModelConfig
from distgnn.placement import ExecutionConfig
from distgnn.run.memory import (
    limited_plan,
    memory_rates,
    saved_activation_bytes,
    training_memory,
)
from distgnn.storage import format_bytes

__all__ = ["clone_sets", "counts_from_layout", "node_rows", "summarize"]


@dataclasses.dataclass
class PartCounts:
    """Sizes of one partition (see the module docstring for the symbols)."""

    vertices: int
    edges: int
    roots: int
    leaves: int
    leaf_entries: int
    index_bytes: int = 4


def counts_from_layout(layout) -> list[PartCounts]:
    clones = layout.clones()
    result = []
    for p in range(layout.num_parts):
        ids = layout.vertices(p)
        roots = int(np.count_nonzero(layout.root[ids] == p))
        leaf_entries = int((clones[ids][layout.root[ids] == p] - 1).sum())
        result.append(PartCounts(len(ids), int(layout.edge_counts[p]), roots,
                                 len(ids) - roots, leaf_entries,
                                 4 if len(ids) < 2**31 else 8))
    return result


# the widest job whose clone sets fit a bit mask of an int64
MAX_CLONE_SET_PARTS = 62


def clone_sets(layout) -> list[list[int]] | None:
    """The split vertices grouped by their root's partition and the partitions holding a
    clone: ``[[root, mask, count], ...]``, bit ``p`` of ``mask`` set when partition ``p``
    holds one, sorted (``None`` above :data:`MAX_CLONE_SET_PARTS` partitions)."""
    if layout.num_parts > MAX_CLONE_SET_PARTS:
        return None
    return clone_sets_of(layout.root, [layout.vertices(p) for p in range(layout.num_parts)])


def clone_sets_of(root: np.ndarray, held: list[np.ndarray]) -> list[list[int]]:
    """:func:`clone_sets` from each vertex's ``root`` partition ``[N]`` and the global ids
    each partition holds (``held[p]``; at most :data:`MAX_CLONE_SET_PARTS` partitions)."""
    mask = np.zeros(len(root), np.int64)
    for p, ids in enumerate(held):
        mask[ids] |= np.int64(1) << p
    split = np.bitwise_count(mask) > 1
    keys = np.stack([np.asarray(root)[split].astype(np.int64), mask[split]], axis=1)
    if not len(keys):
        return []
    found, counts = np.unique(keys, axis=0, return_counts=True)
    return [[int(r), int(m), int(c)] for (r, m), c in zip(found, counts)]


def node_rows(sets: list[list[int]], nodes: list[int], topology: str) -> dict[str, int]:
    """Rows of one exact exchange for ranks on ``nodes`` ``[P]``.

    Counted from the cut's clone sets (:func:`partition.stats.clone_sets`), each node's link
    full duplex:

    - ``across``: the most rows one node sends or receives across its link in one alltoallv
      (up, leaves to roots, or down, the same rows back): ``flat``, one per clone off its
      root's node; ``node`` (``distgnn.exchange.nodes``), one per vertex and node off
      the root's node;
    - ``touched``: the most rows one node's ranks gather, scatter and add per direction:
      ``flat``, its ranks' leaves and leaf entries; ``node``, at the leader, twice the
      clones of its node (in through shared memory, then out) plus its rows across.
    """
    out = np.zeros(max(nodes) + 1, np.int64)
    into, touched = out.copy(), out.copy()
    for root, mask, count in sets:
        holders = [p for p in range(len(nodes)) if mask >> p & 1]
        home = nodes[root]
        if topology == "flat":
            off = [nodes[p] for p in holders if nodes[p] != home]
            np.add.at(out, off, count)
            into[home] += len(off) * count
            np.add.at(touched, [nodes[p] for p in holders if p != root], count)
            touched[home] += (len(holders) - 1) * count
        else:
            on = {nodes[p] for p in holders}
            for n in on - {home}:
                out[n] += count
            into[home] += (len(on) - 1) * count
            np.add.at(touched, [nodes[p] for p in holders], 2 * count)
    if topology == "node":
        touched += out + into
    return {"across": int(np.maximum(out, into).max()), "touched": int(touched.max())}


def node_links(sets: list[list[int]], num_parts: int, ranks_per_node: int) -> dict:
    """The busiest node link's rows per alltoallv of the flat and the node-aware exchange
    (:func:`node_rows`) with ``ranks_per_node`` consecutive ranks on each node, and their
    ratio."""
    nodes = [p // ranks_per_node for p in range(num_parts)]
    flat, node = (node_rows(sets, nodes, t)["across"] for t in ("flat", "node"))
    return {"ranks_per_node": ranks_per_node, "flat_rows": flat, "node_rows": node,
            "ratio": node / flat if flat else None}


def summarize(counts: list[PartCounts], num_nodes: int, split_vertices: int, *,
              width: int = 128, num_features: int = 0, num_classes: int = 0,
              hidden: int = 256, layers: int = 2, shares=None,
              sets: list[list[int]] | None = None, ranks_per_node: int = 1,
              precision: str = "fp32") -> dict:
    """The statistics of the module docstring as a JSON-ready dict (per-rank lists too).

    ``shares``: the requested edge share of each partition (default equal); ``sets``: the
    :func:`clone_sets` of the cut, when known (written as ``clone_sets``, and with
    ``ranks_per_node`` > 1 its :func:`node_links` as ``node_links``); ``precision``: the
    training run's, for the predicted memory (bf16-mixed keeps its saved activations in
    bf16).
    """
    P = len(counts)
    edges = np.array([c.edges for c in counts], np.float64)
    requested = (np.asarray(shares, np.float64) if shares is not None
                 else np.full(P, 1 / max(P, 1)))
    if requested.shape != (P,):
        raise ValueError(f"{requested.size} shares for {P} partitions")
    weighted = shares is not None and P > 0 and not np.all(requested == requested[0])
    achieved = edges / edges.sum() if edges.sum() > 0 else np.zeros(P)
    share_error = (achieved - requested) / requested
    if not weighted:
        edge_balance = float(edges.max() / max(edges.mean(), 1e-300)) if P else 0.0
    else:
        edge_balance = float((achieved / requested).max())
    roots = np.array([c.roots for c in counts], np.float64)
    exchange = [width * (c.leaves + c.leaf_entries) for c in counts]
    # distgnn-train's default model (GCN: fused epilogues)
    model = {"saved_bytes": saved_activation_bytes(precision), "fused": True,
             "feature_bytes": saved_activation_bytes(precision)}
    memory = [training_memory(c.vertices, c.edges, num_features, num_classes, hidden, layers,
                              split_entries=c.leaves + c.leaf_entries, **model)["total"]
              for c in counts]
    fixed = memory_rates(num_features, num_classes, hidden, layers, **model)["fixed"]
    return {
        "num_parts": P,
        "num_nodes": num_nodes,
        "num_edges": int(edges.sum()),
        "replication_factor": sum(c.vertices for c in counts) / max(num_nodes, 1),
        "split_fraction": split_vertices / max(num_nodes, 1),
        "edge_balance": edge_balance,
        "weighted_shares": bool(weighted),
        "requested_shares": requested.tolist(),
        "edge_shares": achieved.tolist(),
        "max_share_error": float(np.abs(share_error).max()) if P else 0.0,
        "root_balance": float(roots.max() / max(roots.mean(), 1e-300)) if P else 0.0,
        "exchange_width": width,
        "exchange_floats_per_layer": {"max": max(exchange, default=0),
                                      "mean": float(np.mean(exchange)) if P else 0.0},
        "memory_model": {"hidden": hidden, "layers": layers, "precision": precision,
                         "num_features": num_features, "num_classes": num_classes},
        "predicted_memory_bytes": {"max": max(memory, default=0),
                                   "mean": float(np.mean(memory)) if P else 0.0,
                                   "fixed": fixed},
        "per_rank": [{"vertices": c.vertices, "edges": c.edges, "roots": c.roots,
                      "leaves": c.leaves, "leaf_entries": c.leaf_entries,
                      "exchange_floats_per_layer": x, "predicted_memory_bytes": m,
                      "requested_share": float(r), "edge_share": float(a),
                      "share_error": float(err)}
                     for c, x, m, r, a, err in zip(counts, exchange, memory, requested,
                                                   achieved, share_error)],
        **({"clone_sets": sets} if sets is not None else {}),
        **({"node_links": node_links(sets, P, ranks_per_node)}
           if sets is not None and ranks_per_node > 1 else {}),
    }


def limited_plans(stats: dict, limit_gib: float) -> dict:
    """What each rank of :func:`summarize`'s ``stats`` does under a memory limit.

    Under ``--memory-limit limit_gib``: ``{"limit_gib", "streamed": bool, "panel",
    "per_rank": [{"ram", "disk", "read", "written"}]}`` (bytes: the plan's RAM and disk,
    and what an epoch reads and writes), or ``{"limit_gib", "refused": line}``.  As ``distgnn-train`` decides: all ranks
    stream when one must, with the narrowest panel any rank chose
    (:func:`distgnn.run.memory.limited_plan`)."""
    model = stats["memory_model"]
    network = ModelConfig(model="sage", aggregator="gcn", hidden=model["hidden"],
                          layers=model["layers"])
    try:
        execution = ExecutionConfig(memory_limit=limit_gib, precision=model["precision"])

        def plans(panel=None):
            return [limited_plan(network, ExchangeConfig(), execution,
                                 {"total": r["predicted_memory_bytes"]}, r["vertices"],
                                 r["edges"], model["num_features"], model["num_classes"],
                                 f"rank {rank}", panel=panel, partitioned=True,
                                 split_entries=r["leaves"] + r["leaf_entries"])
                    for rank, r in enumerate(stats["per_rank"])]

        first = plans()
        if all(p is None for p in first):
            return {"limit_gib": limit_gib, "streamed": False}
        panel = min(p["layout"].panel for p in first if p is not None)
        chosen = plans(panel)
    except DistGNNError as e:
        return {"limit_gib": limit_gib, "refused": str(e)}
    return {"limit_gib": limit_gib, "streamed": True, "panel": panel,
            "per_rank": [{"ram": p["ram"]["total"], "disk": p["disk"], "read": p["read"],
                          "written": p["written"]} for p in chosen]}


def limited_plan_line(plans: dict) -> str:
    """The line :func:`format_summary` prints of :func:`limited_plans`."""
    head = f"  under --memory-limit {plans['limit_gib']:g} GiB: "
    if "refused" in plans:
        return head + "refused: " + plans["refused"]
    if not plans["streamed"]:
        return head + "every rank trains in memory"
    most = {k: max(r[k] for r in plans["per_rank"]) for k in ("ram", "disk", "read", "written")}
    return (head + f"every rank streams through disk (panels of {plans['panel']} columns): "
            f"RAM max {format_bytes(most['ram'])}/rank, disk max {format_bytes(most['disk'])}"
            f"/rank, each epoch reads max {format_bytes(most['read'])} and writes max "
            f"{format_bytes(most['written'])} per rank")


def estimated_memory(indptr: np.ndarray, indices: np.ndarray, rates: dict[str, int]):
    """The busiest rank's memory for ``P`` partitions, before any cut: ``P -> (bytes, r)``.

    For a cut of the CSR ``indptr``, ``indices``.
    ``rates``: :func:`~distgnn.run.memory.memory_rates` of the run.  The replication ``r`` is
    what hashing every edge into one of ``P`` partitions gives in expectation, a vertex of
    ``m`` edges (a pair of directions counted once on a symmetric graph) having
    ``P (1 - (1 - 1/P)^m)`` clones, at least one: the random method's own figure, and above
    what Libra, HDRF and DBH replicate on the graphs measured (docs/partitioning.md).  A
    rank then holds ``r N / P`` vertices, ``E / P`` edges and ``2 (r - 1) N / P`` split
    entries (every clone beyond the first is a leaf on its rank and a leaf entry at its
    root's).  The busiest rank of a real cut holds a little more than this mean (its
    balance): the cut's own prediction is the one that decides."""
    from partition.assign import reverse_positions

    n, e = len(indptr) - 1, len(indices)
    edges = np.diff(indptr)
    if reverse_positions(indptr, indices) is None:  # directed: a vertex's in and out edges
        edges = edges + np.bincount(indices, minlength=n)
    degree, vertices = np.unique(edges, return_counts=True)

    def estimate(parts: int) -> tuple[int, float]:
        clones = np.maximum(1.0, parts * -np.expm1(degree * np.log1p(-1 / parts))
                            if parts > 1 else 1.0)
        r = float((clones * vertices).sum() / max(n, 1))
        share = n / parts
        total = (rates["fixed"] + rates["vertex"] * r * share + rates["edge"] * e / parts
                 + rates["split_entry"] * 2 * (r - 1) * share)
        return int(np.ceil(total)), r
    return estimate


def model_words(model: dict) -> str:
    """The model a memory prediction is for, in words: ``hidden 16, 2 layers, fp32``."""
    return (f"hidden {model['hidden']}, {model['layers']} layers, "
            f"{model.get('precision', 'fp32')}")


def format_summary(stats: dict) -> str:
    """Aligned text: the headline figures, then one row per rank."""
    mib = 1 << 20
    lines = [
        f"{stats['num_parts']} partitions of {stats['num_nodes']:,} vertices and "
        f"{stats['num_edges']:,} edges",
        f"  replication factor {stats['replication_factor']:.3f}   split vertices "
        f"{100 * stats['split_fraction']:.1f} %   edge balance {stats['edge_balance']:.3f}"
        f"{' of capacity' if stats['weighted_shares'] else ''}   "
        f"root balance {stats['root_balance']:.3f}   max share error "
        f"{100 * stats['max_share_error']:.2f} %",
        f"  cd-0 exchange per layer at d={stats['exchange_width']}: max "
        f"{stats['exchange_floats_per_layer']['max']:,} floats/rank",
        f"  predicted memory max {stats['predicted_memory_bytes']['max'] / mib:,.1f} MiB/rank "
        f"for {model_words(stats['memory_model'])}, of which "
        f"{stats['predicted_memory_bytes']['fixed'] / mib:,.1f} MiB is fixed (runtime and "
        "model, whatever the cut)",
        *([limited_plan_line(stats["memory_limit"])] if "memory_limit" in stats else []),
        *([] if "node_links" not in stats else [
            f"  busiest node link per alltoallv ({stats['node_links']['ranks_per_node']} "
            f"consecutive ranks per node): flat exchange {stats['node_links']['flat_rows']:,} "
            f"rows, node-aware {stats['node_links']['node_rows']:,}"
            + (f" ({stats['node_links']['ratio']:.3f}x)"
               if stats['node_links']['ratio'] is not None else "")]),
        f"  {'rank':>5} {'vertices':>12} {'edges':>13} {'roots':>12} {'leaves':>12} "
        f"{'leaf entries':>12} {'exchange':>13} {'memory MiB':>10} {'share req.':>10} "
        f"{'achieved':>8} {'rel. err':>8}",
    ]
    for rank, r in enumerate(stats["per_rank"]):
        lines.append(f"  {rank:>5} {r['vertices']:>12,} {r['edges']:>13,} {r['roots']:>12,} "
                     f"{r['leaves']:>12,} {r['leaf_entries']:>12,} "
                     f"{r['exchange_floats_per_layer']:>13,} "
                     f"{r['predicted_memory_bytes'] / mib:>10,.1f} "
                     f"{100 * r['requested_share']:>8.2f} % "
                     f"{100 * r['edge_share']:>6.2f} % "
                     f"{100 * r['share_error']:>+6.2f} %")
    return "\n".join(lines)
