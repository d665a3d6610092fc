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
- predicted memory of rank ``p`` (bytes): local CSR and its transpose
  ``2 (8 (n_p + 1) + s E_p)`` with ``s`` the index size; features ``4 n_p F``; labels,
  masks, in-degree and root tables ``31 n_p``; leaf tables ``16 L_p``; activations
  ``4 n_p sum_layers (d_in + 2 d_out)`` (input kept for the backward, aggregate, output);
  exchange buffers ``8 (l_p + L_p) max(d)``.
"""
from __future__ import annotations

import dataclasses

import numpy as np


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


def layer_widths(num_features: int, hidden: int, num_classes: int, layers: int) -> list[int]:
    """``[d_0, ..., d_L] = [F] + [H] * (L - 1) + [C]``: the widths of a stack of ``L`` layers
    (the built-in models', :mod:`distgnn.models`), what their aggregations and exchanges
    are sized by.  The one place they are computed."""
    return [num_features] + [hidden] * (layers - 1) + [num_classes]


def summarize(counts: list[PartCounts], num_nodes: int, split_vertices: int, *,
              width: int = 128, num_features: int = 0, num_classes: int = 0,
              hidden: int = 256, layers: int = 2, shares=None) -> dict:
    """The statistics of the module docstring as a JSON-ready dict (per-rank lists too).

    ``shares``: the requested edge share of each partition (default equal).
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
    dims = layer_widths(num_features, hidden, num_classes, layers)
    widths = list(zip(dims[:-1], dims[1:]))
    act = sum(d_in + 2 * d_out for d_in, d_out in widths)
    widest = max(max(w) for w in widths)
    memory = [2 * (8 * (c.vertices + 1) + c.index_bytes * c.edges) + 4 * c.vertices * num_features
              + 31 * c.vertices + 16 * c.leaf_entries + 4 * c.vertices * act
              + 8 * (c.leaves + c.leaf_entries) * widest for c in counts]
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
        "memory_model": {"hidden": hidden, "layers": layers, "num_features": num_features,
                         "num_classes": num_classes},
        "predicted_memory_bytes": {"max": max(memory, default=0),
                                   "mean": float(np.mean(memory)) if P else 0.0},
        "per_rank": [{"vertices": c.vertices, "edges": c.edges, "roots": c.roots,
                      "leaves": c.leaves, "leaf_entries": c.leaf_entries,
                      "exchange_floats_per_layer": x, "predicted_memory_bytes": m,
                      "requested_share": float(r), "edge_share": float(a),
                      "share_error": float(err)}
                     for c, x, m, r, a, err in zip(counts, exchange, memory, requested,
                                                   achieved, share_error)],
    }


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
        f"{stats['exchange_floats_per_layer']['max']:,} floats/rank   predicted memory max "
        f"{stats['predicted_memory_bytes']['max'] / mib:,.1f} MiB/rank "
        f"(hidden {stats['memory_model']['hidden']}, {stats['memory_model']['layers']} layers)",
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
