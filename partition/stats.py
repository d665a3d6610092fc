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
  hidden width and layers.
"""
from __future__ import annotations

import dataclasses

import numpy as np

# bytes of one cd-r bin's index tensors and bookkeeping (measured: 4.3 to 6.3 KiB)
DELAY_BIN_BYTES = 6 * 1024


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
    """Rows of one exact exchange for ranks on ``nodes`` ``[P]``, from the cut's clone sets
    (:func:`partition.stats.clone_sets`), each node's link full duplex:

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


def layer_widths(num_features: int, hidden: int, num_classes: int, layers: int) -> list[int]:
    """``[d_0, ..., d_L] = [F] + [H] * (L - 1) + [C]``: the widths of a stack of ``L`` layers
    (the built-in models', :mod:`distgnn.models`), what their aggregations and exchanges
    are sized by.  The one place they are computed."""
    return [num_features] + [hidden] * (layers - 1) + [num_classes]


def aggregation_widths(num_features: int, hidden: int, num_classes: int, layers: int
                       ) -> list[int]:
    """Width each layer aggregates (and exchanges) at: the narrower side of its weight (a
    linear aggregation commutes with the projection, :mod:`distgnn.nn`)."""
    d = layer_widths(num_features, hidden, num_classes, layers)
    return [min(a, b) for a, b in zip(d[:-1], d[1:])]


def exchange_widths(num_features: int, hidden: int, num_classes: int, layers: int,
                    precompute_first: bool = False, backward: bool = True) -> list[int]:
    """Widths of the split-vertex exchanges of one training epoch: every layer's forward
    aggregation, then (``backward``) the gradients', without the first layer's when it
    aggregates the input features (``F <= hidden``: they need no gradient).  With the first
    aggregation precomputed (``--precompute-first-aggregation``) neither pass exchanges at
    the first layer: its one exchange, ``F`` wide, is made once before the first epoch."""
    forward = aggregation_widths(num_features, hidden, num_classes, layers)
    if precompute_first:
        forward = forward[1:]
        return forward * 2 if backward else forward
    first = hidden if layers > 1 else num_classes
    return forward + ((forward[1:] if num_features <= first else forward) if backward else [])


#: resident memory of a rank apart from its data: Python, torch, Numba, mpi4py and the MPI
#: library (300 MiB after the imports) and the kernels Numba compiles in the first epoch
#: (fitted with the other terms on R-MAT 2^19 to 2^21, 4 ranks, fp32, 2026-11-25)
RUNTIME_BYTES = 450 << 20


def training_memory(num_nodes: int, num_edges: int, num_features: int, num_classes: int,
                    hidden: int, layers: int, two_weights: bool = False,
                    value_bytes: int = 4,
                    precompute_first: bool = False, heads: int = 0, mlp: int = 0,
                    split_entries: int = 0, delayed_widths: tuple[int, ...] = (),
                    delay: int = 0, wire_row_bytes=None,
                    recompute: bool = False) -> dict[str, int]:
    r"""Predicted peak resident memory (bytes) of one training process over ``N`` vertices
    and ``E`` edges (a whole graph, or a rank's partition with ``S`` split entries: its
    leaves plus its leaf entries), by part, and their ``total``.

    With layer widths ``d_0 = F, d_1 .. d_{L-1} = H, d_L = C`` (:func:`layer_widths`),
    ``s``-byte floats (``value_bytes``: 4, or 8 under ``--dtype float64``):

    .. math::
        \text{runtime} = 450\ \text{MiB} \qquad
        \text{model} = 5 s \sum_{l=1}^{L} w_l
            \quad\text{(weights, gradients, two Adam moments, best weights)}

        \text{activations} = s N \sum_{l=1}^{L} (d_{l-1} + 3 m) + s N d_L
            + a N \sum_{l=1}^{L-1} d_l + (1 + \rho)\, s N \max_l d_l + 3 s N C + 6 s E H' L

        \text{graph} = 22 E + 40 N \qquad \text{features} = c\, s N F + 24 N
        \qquad \text{exchange} = S (s\, w + 80)

        \text{delayed exchange} = \sum_{w \in W} \Big(B\, r + S\, \big(3 s w + u(w)
            + [\text{compressed}]\, (s w + u(w))\big)\Big)

    with ``w_l = k (d_{l-1} + 1) d_l`` parameters per layer (``k = 2`` for GraphSAGE's
    mean/sum/max aggregators, a root and a neighbour weight, else 1), except GIN, whose MLP
    of width ``m = H`` has ``w_l = d_{l-1} m + m + (m + 1) d_l`` (``m = 0`` for the other
    models).  Activations: autograd keeps per layer its input (the linear layer's, or the
    aggregate it projects), the output layer's output, per hidden layer the mask of its
    ReLU (``a = 1`` byte per element, :func:`distgnn.nn.relu`) or the output of GAT's ELU
    (``a = s``), and GIN three ``m``-wide tensors in its MLP; the backward pass holds a
    gradient at the widest width besides them, and one more with ``recompute`` (``\rho = 1``,
    else 0): it recomputes a layer's forward while its output's gradient is held (measured
    +0.30 and +0.66 GiB per rank at R-MAT 2^20 and 2^21 with 2 layers, where recompute
    raises the peak rather than lowering it); the logits, their softmax and their gradient
    add ``3 N C``; GAT keeps six ``[E, H']`` per-edge tensors per layer (``H'`` =
    ``heads``: logits, exponentials, coefficients, dropped coefficients, two gradients).
    Graph: the CSR and its transpose (int32 indices), the SpMM kernels' plans for both
    directions (about 4.6 bytes per edge each, measured), 4 bytes per edge more at the peak
    (fitted; the kernels' trial in the first epoch times the operand itself and holds two
    candidate plans at a time, and stays under the later epochs' peak), per-vertex row
    pointers and ids.  Features: the normalised copy the
    model reads (``c = 2`` with ``--precompute-first-aggregation``, which keeps their
    aggregate too), labels, masks and degrees.  Exchange: the split tables and one buffer
    row per split entry at the widest exchanged width ``w = max_l min(d_{l-1}, d_l)`` (a
    layer aggregates on its narrower side).  cd-r keeps, for each of its exchanges, of the
    widths ``W`` it really carries (``delayed_widths``: :func:`exchange_widths`), ``r`` bins
    (``delay``) of ``B`` = 6 KiB of index tensors and bookkeeping each (measured), and per
    split entry three rows of ``w`` values in the run's type (the kept partials or
    complement, the staged messages, the roots' own partials) and a received row of ``u(w)``
    bytes on the wire (``wire_row_bytes(w)``; default: the run's type), twice as much with a
    compressed wire (its error-feedback residual and encoded send buffer).  GCNII counts as
    ``L + 1`` layers of width ``H``.

    The runtime and the graph's bytes per edge were fitted on R-MAT 2^19 to 2^21
    (GraphSAGE-gcn, hidden 256, 4 ranks, fp32); R-MAT 2^22 and the runs with activations in
    bf16 check them (docs/results/training-ladder.md).
    Python ints: no overflow for absurd sizes.
    """
    d = layer_widths(num_features, hidden, num_classes, layers)
    k = 2 if two_weights else 1
    s = value_bytes
    N, E, S = num_nodes, num_edges, split_entries
    weights = (i * mlp + mlp + (mlp + 1) * o if mlp else k * (i + 1) * o
               for i, o in zip(d[:-1], d[1:]))
    parts = {
        "runtime": RUNTIME_BYTES,
        "model": s * 5 * sum(weights),
        "activations": (s * N * sum(i + 3 * mlp for i in d[:-1]) + s * N * d[-1]
                        + (s if heads else 1) * N * sum(d[1:-1])
                        + (1 + recompute) * s * N * max(d) + 3 * s * N * num_classes
                        + 6 * s * E * heads * layers),
        "graph": 22 * E + 40 * N,
        "features": (2 if precompute_first else 1) * s * N * num_features + 24 * N,
        "exchange": S * (s * max(min(i, o) for i, o in zip(d[:-1], d[1:])) + 80),
        "delayed exchange": sum(delayed_exchange_bytes(w, S, delay, s, wire_row_bytes)
                                for w in delayed_widths),
    }
    return {**parts, "total": sum(parts.values())}


def delayed_exchange_bytes(width: int, split_entries: int, delay: int, value_bytes: int = 4,
                           wire_row_bytes=None) -> int:
    """What one delayed exchange of ``width`` keeps (the term of :func:`training_memory`):
    ``delay`` bins of bookkeeping, and per split entry three rows of values and a received
    row on the wire (``wire_row_bytes(width)``, ``None``: uncompressed), twice that with a
    compressed wire."""
    values = value_bytes * width
    wire = values if wire_row_bytes is None else wire_row_bytes(width)
    compressed = wire_row_bytes is not None
    return (DELAY_BIN_BYTES * delay
            + split_entries * (3 * values + wire + compressed * (values + wire)))


def summarize(counts: list[PartCounts], num_nodes: int, split_vertices: int, *,
              width: int = 128, num_features: int = 0, num_classes: int = 0,
              hidden: int = 256, layers: int = 2, shares=None,
              sets: list[list[int]] | None = None, ranks_per_node: int = 1) -> dict:
    """The statistics of the module docstring as a JSON-ready dict (per-rank lists too).

    ``shares``: the requested edge share of each partition (default equal); ``sets``: the
    :func:`clone_sets` of the cut, when known (written as ``clone_sets``, and with
    ``ranks_per_node`` > 1 its :func:`node_links` as ``node_links``).
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
    memory = [training_memory(c.vertices, c.edges, num_features, num_classes, hidden, layers,
                              split_entries=c.leaves + c.leaf_entries)["total"]
              for c in counts]
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
        **({"clone_sets": sets} if sets is not None else {}),
        **({"node_links": node_links(sets, P, ranks_per_node)}
           if sets is not None and ranks_per_node > 1 else {}),
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
