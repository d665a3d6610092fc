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

Grown parts are balanced on edges but not on vertices: on a power-law graph the first take
the dense core (many edges among few vertices) and the last the sparse periphery, the
low-degree vertices hanging off the hubs (on R-MAT the last holds 2-4x the others'
vertices, and a rank's dense work follows its vertices).  So growth is followed by
*vertex-balancing moves* (:func:`balance_vertices`), which add no clone: a vertex held by
one vertex-heavy partition only moves, with all its edges, to a vertex-light partition that
already holds all its neighbours; edges whose two ends both partitions hold then move back,
hubs' edges first, until the loads are within their capacity again (on R-MAT 2^20 at
``P = 4``: from 203,199 / 203,199 / 203,198 / 588,524 vertices to 293,474 / 293,473 /
293,473 / 317,700, the replication factor unchanged).

Grown regions hold whole neighbourhoods, so on graphs with community structure and on
power-law graphs NE replicates far less than one-pass greedy streaming, which decides
each edge seeing only the edges before it.  It holds all its items in memory:
:data:`BYTES_PER_ITEM` per item and :data:`BYTES_PER_VERTEX` per vertex at most
(:mod:`partition.stream` expands as many as a memory budget holds, HEP's hybrid).
"""
from __future__ import annotations

import heapq

import numba
import numpy as np
from numba.cpython.unsafe.numbers import trailing_zeros

# what expand_parts holds per item (its two ends, its partition, both ends' adjacency
# entries, room for the heap) and per vertex (offsets, counts, flags, the seed order; the
# moves' bitset and degree order), with int32 ids and up to 64 partitions: what a memory
# budget for it is divided by (partition.stream)
BYTES_PER_ITEM = 36
BYTES_PER_VERTEX = 68
# a vertex-balancing move may fill a partition this much beyond its capacity; the moves
# back bring it under again where they can
MOVE_SLACK = 0.01
MOVE_ROUNDS = 50  # rounds of moves out and back, while any vertex moves


@numba.njit(cache=True)
def holds(member, v, p):
    """Whether the membership bitsets ``member`` ``uint64 [N, ceil(P / 64)]`` put vertex
    ``v`` in partition ``p`` (1 or 0)."""
    return (member[v, p >> 6] >> np.uint64(p & 63)) & np.uint64(1)


def expansion_degree(edges_by_degree: np.ndarray, items: int) -> int:
    """The largest degree ``tau`` whose edges fit ``items`` (-1 when ``items < 0``).

    The edges of ``tau`` are those whose two ends have degree ``<= tau``.

    Args:
        edges_by_degree: int ``[D + 1]``: at ``t``, the number of edges whose ends' larger
            degree is ``t``.
        items (int): the edges the expansion may hold.
    """
    fits = np.flatnonzero(np.cumsum(edges_by_degree) <= items)
    return int(fits[-1]) if len(fits) and items >= 0 else -1


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

    The grown parts then go through :func:`balance_vertices`.

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
    balance_vertices(a, b, unit, part, capacity, adj_ptr, adj_item, adj_nbr)
    if progress:
        progress(int(np.count_nonzero(left)) * unit
                 - (unit - 1) * int(np.count_nonzero(left & (a == b))))
    return part


def balance_vertices(a: np.ndarray, b: np.ndarray, unit: int, part: np.ndarray,
                     capacity: np.ndarray, adj_ptr: np.ndarray, adj_item: np.ndarray,
                     adj_nbr: np.ndarray) -> tuple[int, int]:
    """Vertex-balancing moves on the cut ``part``, in place: ``(vertices moved, items moved)``.

    See the module docstring.  A partition's vertex target is its share of the capacity
    times the vertices of all partitions (clones counted).  Each round visits the vertices
    in increasing degree: a vertex ``v`` held by partition ``h`` only, while ``h`` is above
    its target, moves with all its items to the partition ``l`` below its target (the least
    filled) that holds every neighbour of ``v``, unless that would fill ``l`` beyond
    ``1 +`` :data:`MOVE_SLACK` times its load limit (its capacity, or its load as grown
    when growth passed the capacity by one item).  Then, visiting the vertices in
    decreasing degree, each item of a partition above its limit moves to the least loaded
    partition with room that holds both its ends.  Rounds stop when no vertex moves; a last
    pass moves what is still above a limit to a partition with room holding one end, or
    none (a clone), so every partition ends within its limit.  The vertex sets are kept as
    bitsets that moves back do not shrink (a vertex may keep a bit for a partition it left,
    which the next moves out then trust), so apart from that and the last pass no move
    adds a clone.  A vertex whose neighbours no partition below its target holds is not
    tried again in later rounds (only one that lacked room is).

    Args:
        a, b, unit, part, capacity: the items' ends, load, partitions (int32, changed)
            and the partitions' capacities, as :func:`expand_parts` has them.
        adj_ptr, adj_item, adj_nbr: the items' undirected adjacency (:func:`_adjacency`).
    """
    order = np.argsort(np.diff(adj_ptr), kind="stable")
    moved = back = 0
    member = np.zeros((len(adj_ptr) - 1, (len(capacity) + 63) // 64), np.uint64)
    eload = np.zeros(len(capacity), np.int64)
    _fill(a, b, unit, part, member, eload)
    vcount = _counts(member, len(capacity))
    share = capacity / capacity.sum()
    limit = np.maximum(capacity, eload)  # growth may pass a capacity by one item
    # the vertices that can move: held by one partition; each round keeps those that may
    movable = order[_held_once(member, order, adj_ptr)]
    for _ in range(MOVE_ROUNDS):
        out, kept = _move_out(a, b, unit, part, adj_ptr, adj_item, adj_nbr, member, vcount,
                              eload, limit * (1 + MOVE_SLACK), share * vcount.sum(),
                              movable)
        movable = movable[:kept]
        moved += out
        back += _move_back(a, b, unit, part, adj_ptr, adj_item, member, eload, limit,
                           order, 2)
        if out == 0:
            break
    # what the moves back could not bring under the limit goes where there is room
    back += _move_back(a, b, unit, part, adj_ptr, adj_item, member, eload, limit, order, 0)
    return moved, back


@numba.njit(cache=True)
def _fill(a, b, unit, part, member, load):
    """The partitions' vertex bitsets ``member`` and loads ``load`` of the items."""
    for k in range(len(a)):
        bit = np.uint64(1) << np.uint64(part[k] & 63)
        member[a[k], part[k] >> 6] |= bit
        member[b[k], part[k] >> 6] |= bit
        load[part[k]] += unit if a[k] != b[k] else 1


@numba.njit(cache=True)
def _counts(member, num_parts):
    count = np.zeros(num_parts, np.int64)
    for v in range(member.shape[0]):
        for w in range(member.shape[1]):
            word = member[v, w]
            while word:
                count[64 * w + trailing_zeros(word)] += 1
                word &= word - np.uint64(1)
    return count


@numba.njit(cache=True)
def _only(member, v):
    """The one partition holding ``v``, or -1 (none, or several)."""
    only = -1
    for w in range(member.shape[1]):
        word = member[v, w]
        if word:
            if only >= 0 or word & (word - np.uint64(1)):
                return -1
            only = 64 * w + trailing_zeros(word)
    return only


@numba.njit(cache=True)
def _held_once(member, order, adj_ptr):
    """bool ``[N]``: whether ``order[i]`` has edges, all in one partition."""
    once = np.zeros(len(order), np.bool_)
    for i in range(len(order)):
        v = order[i]
        once[i] = adj_ptr[v] < adj_ptr[v + 1] and _only(member, v) >= 0
    return once


@numba.njit(cache=True)
def _move_out(a, b, unit, part, adj_ptr, adj_item, adj_nbr, member, vcount, eload, room,
              target, movable):
    """Step one of :func:`balance_vertices` over ``movable``: ``(moved, kept)``.

    It stops once no partition is above its vertex target.  ``movable`` is compacted in
    place to its first ``kept`` vertices, those the next round may move: a vertex that
    moved, whose partition is no longer above its target, or whose neighbours no
    partition below its target holds, is not tried again (only room stopped the others).
    """
    moved = kept = 0
    heavy = np.count_nonzero(vcount > target)
    for i in range(len(movable)):
        v = movable[i]
        if heavy == 0:
            movable[kept] = v
            kept += 1
            continue
        h = _only(member, v)
        if h < 0 or vcount[h] <= target[h]:
            continue
        best = -1
        for p in range(len(vcount)):
            if p == h or vcount[p] >= target[p]:
                continue
            if best >= 0 and vcount[p] * target[best] >= vcount[best] * target[p]:
                continue
            for j in range(adj_ptr[v], adj_ptr[v + 1]):
                if adj_nbr[j] != v and not holds(member, adj_nbr[j], p):
                    break
            else:
                best = p
        if best < 0:
            continue
        load = loops = 0
        for j in range(adj_ptr[v], adj_ptr[v + 1]):
            if adj_nbr[j] == v:
                loops += 1  # a self-loop is in v's list twice, and its load is 1
            else:
                load += unit
        load += loops // 2
        if eload[best] + load > room[best]:
            movable[kept] = v
            kept += 1
            continue
        for j in range(adj_ptr[v], adj_ptr[v + 1]):
            part[adj_item[j]] = best
        member[v, :] = 0
        member[v, best >> 6] |= np.uint64(1) << np.uint64(best & 63)
        vcount[h] -= 1
        vcount[best] += 1
        heavy -= vcount[h] <= target[h]
        eload[h] -= load
        eload[best] += load
        moved += 1
    return moved, kept


@numba.njit(cache=True)
def _move_back(a, b, unit, part, adj_ptr, adj_item, member, eload, capacity, order, need):
    """Step two of :func:`balance_vertices`: the items moved.

    Each item of a partition above its capacity, its hubs' first, goes to the partition
    with room that holds the most of its ends, at least ``need`` (the least loaded among
    equals; a new clone is recorded).  It stops once no partition is above its capacity
    (moves never put one above)."""
    back = 0
    over = np.count_nonzero(eload > capacity)
    for i in range(len(order) - 1, -1, -1):
        if over == 0:
            break
        x = order[i]
        for j in range(adj_ptr[x], adj_ptr[x + 1]):
            k = adj_item[j]
            q = part[k]
            if eload[q] <= capacity[q]:
                continue
            load = unit if a[k] != b[k] else 1
            best, most = -1, need - 1
            for p in range(len(eload)):
                if p == q or eload[p] + load > capacity[p]:
                    continue
                ends = holds(member, a[k], p) + holds(member, b[k], p)
                if ends > most or (ends == most and best >= 0 and eload[p] * capacity[best]
                                   < eload[best] * capacity[p]):
                    best, most = p, ends
            if best >= 0:
                part[k] = best
                eload[q] -= load
                eload[best] += load
                over -= eload[q] <= capacity[q]
                bit = np.uint64(1) << np.uint64(best & 63)
                member[a[k], best >> 6] |= bit
                member[b[k], best >> 6] |= bit
                back += 1
    return back


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
