"""Neighbourhood expansion (NE, Zhang et al., KDD 2017): a vertex cut grown part by part.

Partitions ``p = 0 .. P - 2`` are grown one after another from a seed vertex; the last
takes the edges left.  While partition ``p`` grows it keeps a *core* ``C`` and a
*boundary* ``S`` (``C`` within ``S``): every edge between two vertices of ``S`` is in
``p``.  Each step moves to the core the boundary vertex ``x`` with the fewest edges
still unassigned, ``x = argmin_{v in S \\ C} rest(v)``; its unassigned edges all lead out
of ``S`` (the edges inside ``S`` are already ``p``'s), so ``rest(x) = |N(x) \\ S|`` counts
the vertices its expansion adds to the boundary, and the choice adds the fewest clones.
Each neighbour ``y`` that joins ``S`` brings with it its unassigned edges to vertices
already in ``S`` (the two-hop closure), which gives ``p`` the edges it can take without
replicating anything.  When ``S \\ C`` is empty, the next vertex with edges left, in a
seeded random order, starts a new region.  A partition stops growing once its load
reaches its capacity, ``share_p`` times the graph's edges (``weights``, as Libra's), also
in the middle of a vertex's expansion, so a hub cannot overfill it.

Grown regions hold whole neighbourhoods, so on graphs with community structure and on
power-law graphs NE replicates far less than one-pass greedy streaming, which decides
each edge seeing only the edges before it.  It needs the whole graph in memory:
``16 E + 8 N`` bytes of adjacency and state besides the CSR (``E`` entries).
"""
from __future__ import annotations

import heapq

import numba
import numpy as np



def expansion_items(num_entries: int, rev: np.ndarray | None) -> np.ndarray:
    """The CSR entries NE assigns, int64: all ``num_entries``, or with ``rev`` (the position
    of each entry's reverse, :func:`partition.assign.reverse_positions`) one entry per pair,
    the first of the two (a self-loop is its own pair)."""
    if rev is None:
        return np.arange(num_entries, dtype=np.int64)
    return np.flatnonzero(rev >= np.arange(len(rev)))


def expand_parts(num_nodes: int, a: np.ndarray, b: np.ndarray, unit: int,
                 capacity: np.ndarray, seed: int, progress=None) -> np.ndarray:
    """Partition of each item, int32 ``[len(a)]``, by neighbourhood expansion.

    Args:
        num_nodes (int): ``N``.
        a, b: the two ends of each item (an edge read as undirected), ints ``< N``.
        unit (int): load of one item (2 when it stands for a pair of entries; a
            self-loop is 1 entry).
        capacity: int64 ``[P]`` load at which each partition stops growing (the last
            takes what is left, whatever its capacity).
        seed (int): seeds the order regions are started in.
        progress (callable, optional): called with the CSR entries assigned, once per
            partition.
    """
    index = np.int32 if len(a) < 2**31 else np.int64
    adj_ptr, adj_item, adj_nbr = _adjacency(num_nodes, a, b, index(0))
    order = np.random.default_rng(seed).permutation(num_nodes).astype(np.int32)
    part = np.full(len(a), -1, np.int32)
    rest = np.diff(adj_ptr).astype(np.int64)
    in_s = np.full(num_nodes, -1, np.int32)
    in_c = np.full(num_nodes, -1, np.int32)
    cursor = np.zeros(1, np.int64)
    for p in range(len(capacity) - 1):
        load = _grow(p, int(capacity[p]), unit, adj_ptr, adj_item, adj_nbr, order, cursor,
                     part, rest, in_s, in_c)
        if progress:
            progress(load)
    left = part < 0
    part[left] = len(capacity) - 1
    if progress:
        progress(int(np.count_nonzero(left)) * unit
                 - (unit - 1) * int(np.count_nonzero(left & (a == b))))
    return part


@numba.njit(cache=True)
def _adjacency(n, a, b, like):
    """Undirected adjacency of the items ``a[k] -- b[k]``: ``ptr [N + 1]``, and for each
    end of each item the item (``like``'s type) and the vertex at its other end (int32)."""
    ptr = np.zeros(n + 1, np.int64)
    for k in range(len(a)):
        ptr[a[k] + 1] += 1
        ptr[b[k] + 1] += 1
    for v in range(n):
        ptr[v + 1] += ptr[v]
    fill = ptr[:-1].copy()
    item = np.empty(2 * len(a), type(like))
    nbr = np.empty(2 * len(a), np.int32)
    for k in range(len(a)):
        u, v = a[k], b[k]
        item[fill[u]], nbr[fill[u]] = k, v
        fill[u] += 1
        item[fill[v]], nbr[fill[v]] = k, u
        fill[v] += 1
    return ptr, item, nbr


@numba.njit(cache=True)
def _join(y, p, room, unit, adj_ptr, adj_item, adj_nbr, part, rest, in_s, in_c, heap):
    """``y`` joins partition ``p``'s boundary with its unassigned edges to the boundary
    (the two-hop closure), as many as ``room`` (load) takes; the load it adds."""
    in_s[y] = p
    load = 0
    for j in range(adj_ptr[y], adj_ptr[y + 1]):
        if load >= room:
            break  # the edges left inside the boundary go to later partitions
        k, z = adj_item[j], adj_nbr[j]
        if part[k] < 0 and in_s[z] == p:
            part[k] = p
            rest[y] -= 1
            rest[z] -= 1
            load += unit if z != y else 1  # a self-loop is one entry, paired or not
            if in_c[z] != p and z != y:
                heapq.heappush(heap, (rest[z], np.int64(z)))
    if in_c[y] != p:
        heapq.heappush(heap, (rest[y], np.int64(y)))
    return load


@numba.njit(cache=True)
def _grow(p, capacity, unit, adj_ptr, adj_item, adj_nbr, order, cursor, part, rest, in_s,
          in_c):
    """Grow partition ``p`` to ``capacity`` (module docstring); the load it got."""
    heap = [(np.int64(0), np.int64(0))]
    heap.pop()
    load = 0
    n = len(order)
    while load < capacity:
        x = -1
        while heap:
            key, v = heapq.heappop(heap)
            if in_c[v] != p and rest[v] == key:  # else an entry left by a later change
                x = v
                break
        if x < 0:  # the boundary is all core: start a new region
            while cursor[0] < n and rest[order[cursor[0]]] == 0:
                cursor[0] += 1
            if cursor[0] == n:
                break  # every edge is assigned
            x = order[cursor[0]]
            load += _join(x, p, capacity - load, unit, adj_ptr, adj_item, adj_nbr, part, rest,
                          in_s, in_c, heap)
        in_c[x] = p
        for j in range(adj_ptr[x], adj_ptr[x + 1]):
            if load >= capacity:
                break
            k, y = adj_item[j], adj_nbr[j]
            if part[k] >= 0:
                continue
            if in_s[y] != p:
                load += _join(y, p, capacity - load, unit, adj_ptr, adj_item, adj_nbr, part,
                              rest, in_s, in_c, heap)
            if part[k] < 0 and load < capacity:  # not reached by the closure
                part[k] = p
                rest[x] -= 1
                rest[y] -= 1
                load += unit if y != x else 1
                if in_c[y] != p:
                    heapq.heappush(heap, (rest[y], np.int64(y)))
    return load
