"""Locality orders of the vertices: which order a graph's feature rows are stored in.

Aggregation gathers one feature row per edge, ``x[u]`` for every source ``u`` of a row.
Stored in a random order, most gathered rows come from DRAM.  An order that puts the
rows read together, or read often, next to each other lets the caches serve them:

- ``degree``: sources by decreasing out-degree (the number of rows that gather them),
  ties by id.  On power-law graphs a few percent of the vertices carry most of the
  edges; hub-first packs their rows into a prefix small enough to stay in cache (and
  makes the hub block of :mod:`distgnn.kernels.blocking` one contiguous id range).
- ``rcm``: reverse Cuthill-McKee on the symmetrised graph (scipy), a breadth-first order
  that narrows the bandwidth ``max |u - v|``: neighbours get nearby ids, so a row's
  gathers fall into a few pages and consecutive rows re-read the same lines.  It is the
  order for graphs with locality (meshes, communities, citation graphs).  Chosen over a
  Rabbit-Order-like community order because scipy's implementation is one tested call,
  and on the graphs measured here the community order's extra gain
  over RCM would be its better treatment of hubs, which ``degree`` already covers.
- ``given``: as stored.

Single-socket training applies an order once on load (:func:`reorder_dataset`,
``distgnn-train --reorder``); partitions get theirs from ``distgnn-partition
--order-vertices``.

``auto`` picks one per graph by a short measurement (:func:`choose_order`): graphs whose
``[N, d]`` features fit in the last-level cache get ``given`` (every order is served from
cache), larger ones time one SpMM per candidate order and keep the fastest.

An order is a permutation ``perm`` int64 ``[N]``: new id ``i`` is the vertex of old id
``perm[i]``.  :func:`relabel` applies it to a CSR (both ends of every edge), keeping each
row's sources sorted.
"""
from __future__ import annotations

import dataclasses
import time

import numba
import numpy as np
import scipy.sparse as sp
from scipy.sparse.csgraph import reverse_cuthill_mckee

from ..kernels import spmm
from ..kernels.blocking import last_level_cache
from ..kernels.spmm import as_aligned, empty_aligned
from .graph import CSRGraph, NodeDataset

ORDERS = ("given", "degree", "rcm")
CHOICES = ("auto",) + ORDERS
AUTO_WIDTH = 64  # the feature width the auto measurement times
DEFAULT_LLC = 32 << 20  # when the system does not say


def vertex_order(graph: CSRGraph, method: str) -> np.ndarray:
    """int64 ``[N]`` permutation for ``method`` in :data:`ORDERS` (see the module docstring)."""
    n = graph.num_nodes
    if method == "given":
        return np.arange(n, dtype=np.int64)
    if method == "degree":
        out_degree = np.bincount(graph.indices, minlength=n)
        return np.argsort(-out_degree, kind="stable").astype(np.int64)
    if method == "rcm":
        if n == 0:  # scipy's RCM fails on an empty matrix
            return np.empty(0, np.int64)
        a = sp.csr_matrix((np.ones(graph.num_edges, np.int8), graph.indices, graph.indptr),
                          shape=(n, n))
        return reverse_cuthill_mckee((a + a.T).tocsr(), symmetric_mode=True).astype(np.int64)
    raise ValueError(f"order must be one of {', '.join(ORDERS)}, got {method!r}")


def inverse(perm: np.ndarray) -> np.ndarray:
    """int64 ``[N]``: the new id of each old id (``inverse(perm)[perm[i]] == i``)."""
    inv = np.empty(len(perm), np.int64)
    inv[perm] = np.arange(len(perm), dtype=np.int64)
    return inv


@numba.njit(parallel=True, cache=True)
def _relabel_rows(indptr, indices, weight, perm, inv, new_indptr, new_indices, new_weight):
    weighted = len(weight) > 0
    for i in numba.prange(len(perm)):
        old = perm[i]
        start, end, at = indptr[old], indptr[old + 1], new_indptr[i]
        cols = np.empty(end - start, np.int64)
        for k in range(end - start):
            cols[k] = inv[indices[start + k]]
        order = np.argsort(cols, kind="mergesort")
        for k in range(end - start):
            new_indices[at + k] = cols[order[k]]
            if weighted:
                new_weight[at + k] = weight[start + order[k]]


def relabel(graph: CSRGraph, perm: np.ndarray) -> CSRGraph:
    """``graph`` with vertex ``perm[i]`` renamed ``i``: row ``i`` is old row ``perm[i]``,
    every source ``u`` becomes ``inverse(perm)[u]``, rows sorted (weights follow)."""
    perm = np.ascontiguousarray(perm, np.int64)
    inv = inverse(perm)
    lengths = np.diff(graph.indptr)[perm]
    indptr = np.zeros(graph.num_nodes + 1, np.int64)
    np.cumsum(lengths, out=indptr[1:])
    indices = np.empty(graph.num_edges, graph.indices.dtype)
    weighted = graph.edge_weight is not None
    weight = graph.edge_weight if weighted else np.empty(0, np.float32)
    new_weight = np.empty(graph.num_edges if weighted else 0, np.float32)
    _relabel_rows(graph.indptr, graph.indices, weight, perm, inv, indptr, indices, new_weight)
    return CSRGraph(indptr, indices, graph.num_nodes, new_weight if weighted else None,
                    graph.source)


def time_order(graph: CSRGraph, width: int = AUTO_WIDTH, repeats: int = 2) -> float:
    """Seconds of one unblocked sum SpMM of ``graph`` on random ``[N, width]`` features
    (best of ``repeats`` after a warm-up)."""
    x = as_aligned(np.random.default_rng(0).standard_normal((graph.num_nodes, width),
                                                            dtype=np.float32))
    out = empty_aligned(x.shape, np.float32)
    spmm(graph.indptr, graph.indices, x, out=out)
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        spmm(graph.indptr, graph.indices, x, out=out)
        best = min(best, time.perf_counter() - start)
    return best


def choose_order(graph: CSRGraph, width: int = AUTO_WIDTH, llc: int | None = None
                 ) -> tuple[str, np.ndarray, dict[str, float]]:
    """``(method, perm, trial seconds by method)`` for ``auto`` (see the module docstring).

    The trial times each order's SpMM at ``width`` on the relabelled graph; the trial is
    skipped (``given``, no times) when ``N * width * 4`` bytes fit in ``llc``.
    """
    llc = (last_level_cache() or DEFAULT_LLC) if llc is None else llc
    if graph.num_nodes * width * 4 <= llc:
        return "given", vertex_order(graph, "given"), {}
    times, perms = {}, {}
    for method in ORDERS:
        perms[method] = vertex_order(graph, method)
        times[method] = time_order(relabel(graph, perms[method]), width)
    best = min(times, key=times.get)
    return best, perms[best], times


def order_vertices(graph: CSRGraph, method: str, width: int = AUTO_WIDTH
                   ) -> tuple[str, np.ndarray, dict[str, float]]:
    """``(method chosen, perm, trial times)`` for ``method`` in :data:`CHOICES`."""
    if method == "auto":
        return choose_order(graph, width)
    if method not in ORDERS:
        raise ValueError(f"order must be one of {', '.join(CHOICES)}, got {method!r}")
    return method, vertex_order(graph, method), {}


def reorder_dataset(data: NodeDataset, method: str, width: int = AUTO_WIDTH
                    ) -> tuple[NodeDataset, np.ndarray, str]:
    """``(reordered data, perm, method chosen)``: graph, features, labels and masks of
    ``data`` with vertex ``perm[i]`` renamed ``i`` (``perm`` maps back to ``data``'s ids);
    ``data`` itself when the order is ``given``."""
    chosen, perm, _ = order_vertices(data.graph, method, width)
    if chosen == "given":
        return data, perm, chosen
    return dataclasses.replace(
        data, graph=relabel(data.graph, perm), x=data.x[perm], y=data.y[perm],
        train_mask=data.train_mask[perm], val_mask=data.val_mask[perm],
        test_mask=data.test_mask[perm]), perm, chosen
