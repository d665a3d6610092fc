"""From an edge assignment to what each rank holds: local vertices, local CSR, roots, split tables.

Given ``part[e]`` for every CSR entry, partition ``p`` holds the vertices with an edge in
it (plus the isolated vertices placed on it), numbered locally in increasing global id
or, after :func:`order_layout`, in a locality order of its local graph
(:mod:`distgnn.data.ordering`), and its edges as a local CSR (rows = destinations, each row's
sources sorted).  Every vertex has exactly one
**root** clone; the others are **leaves**.  Roots are chosen at random among the clones,
or *balanced*: vertices with one clone own it, then split vertices (in a seeded random
order) go to their clone partition owning the fewest roots so far.  On a two-level cut
(``ranks_per_node`` K > 1) a split vertex whose clones span several nodes first takes the
node that keeps the busiest of their links least loaded in the node-aware exchange
(:func:`_root_node`; the root's node receives a row from each other node), then the rank
there owning the fewest roots: on R-MAT 2^18 cut by NE across 4 nodes of 2 ranks this took
the busiest link's rows from 30,790 to 16,886.

Split tables, for partition ``p`` with ``n_p`` local vertices:

- ``root_rank`` int32 ``[n_p]`` and ``root_local`` int64 ``[n_p]``: the partition and
  local id of each local vertex's root (itself when ``p`` holds the root);
- ``leaf_ptr`` int64 ``[P + 1]``, ``leaf_root_local`` and ``leaf_remote_local`` int64
  ``[L_p]``: for peer ``q``, entries ``leaf_ptr[q]:leaf_ptr[q+1]`` list the roots held
  here that have a leaf on ``q`` (local id here) and that leaf's local id on ``q``, in
  ``q``'s local order, the order in which ``q`` lists its leaves whose root is on ``p``.
  Both sides of an exchange can therefore pack and unpack without sending ids.
"""
from __future__ import annotations

import dataclasses
import time
from typing import Iterator

import numba
import numpy as np

from distgnn.data.graph import CSRGraph, csr_rows
from distgnn.data.ordering import CHOICES, choose_order, relabel, vertex_order
from distgnn.data.partitions import ROOTS
from partition.assign import membership
from partition.expand import holds


@numba.njit(cache=True)
def _place_isolated(member, capacity):
    """Place every vertex without edges on the partition with the fewest for its capacity.

    Each such vertex gets a bit in the partition with the fewest vertices so far for its
    ``capacity`` (float ``[P]``: the partitions' weights; a vertex without edges still costs
    its rank the dense work of a vertex, so a rank of a tenth of the weight takes about a
    tenth of them)."""
    num_parts = len(capacity)
    count = np.zeros(num_parts, np.float64)
    for v in range(member.shape[0]):
        for p in range(num_parts):
            count[p] += holds(member, v, p)
    for v in range(member.shape[0]):
        empty = True
        for w in range(member.shape[1]):
            if member[v, w]:
                empty = False
        if empty:
            p = np.argmin(count / capacity)
            member[v, p >> 6] |= np.uint64(1) << np.uint64(p & 63)
            count[p] += 1


@numba.njit(cache=True)
def _root_node(member, v, num_parts, per_node, out, into, on):
    """The node of a balanced root of ``v`` on a two-level cut (-1: one node holds all).

    ``out[n]`` and ``into[n]`` count the rows node ``n`` sends and receives across its link
    in the node-aware exchange (one per vertex and node off the root's node, see
    :func:`partition.stats.node_rows`): the node chosen among those holding ``v`` leaves
    the smallest largest ``max(out, into)`` over them once ``v``'s rows are added (the
    least loaded on ties); ``out`` and ``into`` are updated."""
    on[:] = False
    span = 0
    for p in range(num_parts):
        if holds(member, v, p) and not on[p // per_node]:
            on[p // per_node] = True
            span += 1
    if span < 2:
        return -1
    best, best_cost, best_load = -1, np.iinfo(np.int64).max, np.iinfo(np.int64).max
    for h in range(len(on)):
        if not on[h]:
            continue
        cost = max(out[h], into[h] + span - 1)
        for m in range(len(on)):
            if on[m] and m != h:
                cost = max(cost, max(out[m] + 1, into[m]))
        load = max(out[h], into[h])
        if cost < best_cost or (cost == best_cost and load < best_load):
            best, best_cost, best_load = h, cost, load
    for m in range(len(on)):
        if on[m] and m != best:
            out[m] += 1
    into[best] += span - 1
    return best


@numba.njit(cache=True)
def _choose_roots(member, num_parts, visit, balanced, seed, per_node):
    """int32 ``[N]`` root partition per vertex (see the module docstring); ``per_node``:
    ranks per node of a two-level cut (1: flat)."""
    np.random.seed(seed)
    n = member.shape[0]
    root = np.full(n, -1, np.int32)
    owned = np.zeros(num_parts, np.int64)
    clones = np.zeros(n, np.int32)
    nodes = num_parts // per_node
    out, into = np.zeros(nodes, np.int64), np.zeros(nodes, np.int64)
    on = np.zeros(nodes, np.bool_)
    for v in range(n):
        for p in range(num_parts):
            if holds(member, v, p):
                clones[v] += 1
                root[v] = p
        if clones[v] == 1:
            owned[root[v]] += 1
    for i in range(n):
        v = visit[i]
        if clones[v] < 2:
            continue
        node = (_root_node(member, v, num_parts, per_node, out, into, on)
                if balanced and per_node > 1 else -1)
        best, best_owned, seen = -1, np.iinfo(np.int64).max, 0
        for p in range(num_parts):
            if not holds(member, v, p) or (node >= 0 and p // per_node != node):
                continue
            if balanced:
                if owned[p] < best_owned:
                    best, best_owned, seen = p, owned[p], 1
                elif owned[p] == best_owned:
                    seen += 1
                    if np.random.random() * seen < 1.0:
                        best = p
            else:
                seen += 1
                if np.random.random() * seen < 1.0:
                    best = p
        root[v] = best
        owned[best] += 1
    return root


@numba.njit(cache=True)
def _vertex_lists(member, num_parts):
    """Per partition, its vertices in increasing id: ``(offsets [P+1], flat ids)``."""
    n = member.shape[0]
    counts = np.zeros(num_parts + 1, np.int64)
    for v in range(n):
        for p in range(num_parts):
            counts[p + 1] += holds(member, v, p)
    offsets = np.cumsum(counts)
    fill = offsets[:-1].copy()
    flat = np.empty(offsets[-1], np.int64)
    for v in range(n):
        for p in range(num_parts):
            if holds(member, v, p):
                flat[fill[p]] = v
                fill[p] += 1
    return offsets, flat


@numba.njit(cache=True)
def _group_by_part(part, counts):
    """Entry positions grouped by partition, increasing within each (a counting sort)."""
    fill = np.zeros(len(counts), np.int64)
    fill[1:] = np.cumsum(counts)[:-1]
    order = np.empty(len(part), np.int64)
    for e in range(len(part)):
        order[fill[part[e]]] = e
        fill[part[e]] += 1
    return order


@dataclasses.dataclass
class Layout:
    """Whole-graph view of a vertex-cut: who holds what, and where each root lives.

    Attributes:
        num_parts (int): ``P``.
        part (np.ndarray): int32 ``[E]`` partition of each CSR entry (``None`` for a
            streamed cut, whose edges are in files, :mod:`partition.stream`).
        vertex_offsets, vertex_ids (np.ndarray): partition ``p`` holds global vertices
            ``vertex_ids[vertex_offsets[p]:vertex_offsets[p+1]]``, in its local order
            (increasing unless reordered by :func:`order_layout`).
        root (np.ndarray): int32 ``[N]`` partition of each vertex's root clone.
        root_local (np.ndarray): int64 ``[N]`` local id of each vertex at its root.
        edge_counts (np.ndarray): int64 ``[P]`` entries per partition.
        vertex_order (str): the local order, ``"given"`` (increasing global id) or a
            method of :data:`distgnn.data.ordering.ORDERS`.
    """

    num_parts: int
    part: np.ndarray | None
    vertex_offsets: np.ndarray
    vertex_ids: np.ndarray
    root: np.ndarray
    root_local: np.ndarray
    edge_counts: np.ndarray
    vertex_order: str = "given"

    @property
    def num_nodes(self) -> int:
        return len(self.root)

    def vertices(self, p: int) -> np.ndarray:
        return self.vertex_ids[self.vertex_offsets[p]:self.vertex_offsets[p + 1]]

    def clones(self) -> np.ndarray:
        """int64 ``[N]``: number of partitions holding each vertex."""
        return np.bincount(self.vertex_ids, minlength=self.num_nodes)


def build_layout(indptr: np.ndarray, indices: np.ndarray, part: np.ndarray, num_parts: int,
                 roots: str = "balanced", seed: int = 0, weights=None,
                 ranks_per_node: int = 1) -> Layout:
    """Vertex sets, isolated-vertex placement (by ``weights``) and roots for the assignment
    ``part``."""
    member = membership(indptr, indices, part, num_parts)
    edge_counts = np.bincount(part, minlength=num_parts).astype(np.int64)
    return layout_from_membership(member, edge_counts, roots, seed, part, weights,
                                  ranks_per_node)


def layout_from_membership(member: np.ndarray, edge_counts: np.ndarray, roots: str = "balanced",
                           seed: int = 0, part: np.ndarray | None = None,
                           weights=None, ranks_per_node: int = 1) -> Layout:
    """The :class:`Layout` of a cut given by its membership bitsets and edges per partition.

    The bitsets are ``uint64 [N, words]``, bit ``p`` of row ``v``: partition ``p`` holds an
    edge of ``v``; isolated vertices are placed into them here, in proportion to
    ``weights``, the partitions' relative capacities, default equal.  ``part``, the
    partition of each CSR entry, where the caller holds it (``None`` when the edges were
    written out as they were assigned, :mod:`partition.stream`)."""
    if roots not in ROOTS:
        raise ValueError(f"roots must be one of {', '.join(ROOTS)}, got {roots!r}")
    n, num_parts = len(member), len(edge_counts)
    _place_isolated(member, np.ones(num_parts) if weights is None
                    else np.asarray(weights, np.float64))
    visit = np.random.default_rng(seed + 1).permutation(n)
    root = _choose_roots(member, num_parts, visit, roots == "balanced", seed + 2,
                         ranks_per_node)
    offsets, flat = _vertex_lists(member, num_parts)
    layout = Layout(num_parts, part, offsets, flat, root, np.empty(n, np.int64),
                    np.asarray(edge_counts, np.int64))
    _set_root_local(layout)
    return layout


def _set_root_local(layout: Layout) -> None:
    """``root_local`` from the partitions' current local orders."""
    for p in range(layout.num_parts):
        ids = layout.vertices(p)
        here = layout.root[ids] == p
        layout.root_local[ids[here]] = np.flatnonzero(here)


class _LocalGraphs:
    """Builds each partition's local CSR in increasing global id (the stored order before
    any reordering), sharing the whole-graph work between partitions."""

    def __init__(self, layout: Layout, indptr: np.ndarray, indices: np.ndarray):
        self.layout, self.indices = layout, indices
        self.dst = csr_rows(indptr, indices.dtype)
        self.by_part = _group_by_part(layout.part, layout.edge_counts)
        self.edge_offsets = np.zeros(layout.num_parts + 1, np.int64)
        np.cumsum(layout.edge_counts, out=self.edge_offsets[1:])
        self.local = np.empty(layout.num_nodes, np.int64)

    def given_order(self, p: int) -> tuple[np.ndarray, np.ndarray, CSRGraph]:
        """``(ids, edges, graph)``: partition ``p``'s vertices in increasing global id,
        its edges (positions in the whole CSR, grouped by destination in that order) and
        its local CSR over those ids."""
        ids = np.sort(self.layout.vertices(p))
        self.local[ids] = np.arange(len(ids))
        edges = self.by_part[self.edge_offsets[p]:self.edge_offsets[p + 1]]
        indptr = np.zeros(len(ids) + 1, np.int64)
        np.cumsum(np.bincount(self.local[self.dst[edges]], minlength=len(ids)), out=indptr[1:])
        return ids, edges, CSRGraph(indptr, self.local[self.indices[edges]], len(ids))


def order_layout(layout: Layout, indptr: np.ndarray, indices: np.ndarray, method: str,
                 progress=None) -> dict:
    """Renumber every partition's vertices in the locality order ``method``.

    The order, one of :data:`distgnn.data.ordering.CHOICES`, is computed on each partition's
    local graph; returns what was done (``vertex_order``, ``vertex_order_requested``,
    ``vertex_order_seconds`` and, for ``auto``, ``vertex_order_trial``: SpMM seconds per
    order on the largest partition, whose fastest order every partition then gets).
    ``progress`` is called per partition.
    """
    if method not in CHOICES:
        raise ValueError(f"vertex order must be one of {', '.join(CHOICES)}, got {method!r}")
    started = time.perf_counter()
    graphs = None if method == layout.vertex_order == "given" else _LocalGraphs(
        layout, indptr, indices)
    chosen, trial = method, {}
    if method == "auto":
        largest = int(np.argmax(layout.edge_counts))
        chosen, _, trial = choose_order(graphs.given_order(largest)[2])
    if chosen != "given" or layout.vertex_order != "given":
        for p in range(layout.num_parts):
            ids, _, graph = graphs.given_order(p)
            layout.vertex_ids[layout.vertex_offsets[p]:layout.vertex_offsets[p + 1]] = \
                ids[vertex_order(graph, chosen)]
            if progress:
                progress(1)
        _set_root_local(layout)
    layout.vertex_order = chosen
    info = {"vertex_order": chosen, "vertex_order_requested": method,
            "vertex_order_seconds": round(time.perf_counter() - started, 3)}
    if trial:
        info["vertex_order_trial"] = {k: round(v, 5) for k, v in trial.items()}
    return info


def leaf_tables(layout: Layout) -> list[dict[str, np.ndarray]]:
    """Per partition ``p``: ``leaf_ptr``, ``leaf_root_local``, ``leaf_remote_local``."""
    P = layout.num_parts
    pieces = [[] for _ in range(P)]  # pieces[p] = [(q, root_local, remote_local), ...]
    for q in range(P):
        ids = layout.vertices(q)
        leaf = np.flatnonzero(layout.root[ids] != q)
        owner = layout.root[ids[leaf]]
        by_owner = np.argsort(owner, kind="stable")
        bounds = np.searchsorted(owner[by_owner], np.arange(P + 1))
        for p in range(P):
            sel = by_owner[bounds[p]:bounds[p + 1]]
            if len(sel):
                pieces[p].append((q, layout.root_local[ids[leaf[sel]]], leaf[sel]))
    tables = []
    for p in range(P):
        counts = np.zeros(P, np.int64)
        for q, local, _ in pieces[p]:
            counts[q] = len(local)
        ptr = np.zeros(P + 1, np.int64)
        np.cumsum(counts, out=ptr[1:])
        cat = (lambda k: np.concatenate([piece[k] for piece in pieces[p]]).astype(np.int64)
               if pieces[p] else np.empty(0, np.int64))
        tables.append({"leaf_ptr": ptr, "leaf_root_local": cat(1), "leaf_remote_local": cat(2)})
    return tables


def partition_arrays(layout: Layout, indptr: np.ndarray, indices: np.ndarray, dataset
                     ) -> Iterator[tuple[int, dict[str, np.ndarray]]]:
    """Yield ``(p, arrays)`` with every array partition ``p`` stores (see ``format.py``)."""
    graphs = _LocalGraphs(layout, indptr, indices)
    in_degree = np.diff(indptr).astype(np.int64)
    weight = dataset.graph.edge_weight
    tables = leaf_tables(layout)
    for p in range(layout.num_parts):
        ids = layout.vertices(p)
        sorted_ids, edges, graph = graphs.given_order(p)
        if weight is not None:
            graph = CSRGraph(graph.indptr, graph.indices, graph.num_nodes, weight[edges])
        if layout.vertex_order != "given":
            graph = relabel(graph, np.searchsorted(sorted_ids, ids))
        yield p, part_arrays(layout, p, graph, dataset, in_degree, tables[p])


def part_arrays(layout: Layout, p: int, graph: CSRGraph, dataset, in_degree: np.ndarray,
                leaf_table: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Every array partition ``p`` stores (see ``format.py``).

    Built from its local graph over ``layout.vertices(p)``, the per-vertex ``x``, ``y`` and
    masks of ``dataset`` (arrays or memory maps ``[N, ...]``: only the partition's rows are
    read), the whole graph's ``in_degree`` ``[N]`` and its :func:`leaf_tables` entry."""
    ids = layout.vertices(p)
    is_root = layout.root[ids] == p
    arrays = {
        "global_ids": ids,
        "indptr": graph.indptr,
        "indices": graph.indices,
        "x": np.ascontiguousarray(dataset.x[ids]),
        "y": np.ascontiguousarray(dataset.y[ids]),
        "train_mask": dataset.train_mask[ids] & is_root,
        "val_mask": dataset.val_mask[ids] & is_root,
        "test_mask": dataset.test_mask[ids] & is_root,
        "in_degree": in_degree[ids],
        "root_rank": layout.root[ids],
        "root_local": layout.root_local[ids],
        **leaf_table,
    }
    if graph.edge_weight is not None:
        arrays["edge_weight"] = graph.edge_weight
    return arrays
