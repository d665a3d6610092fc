"""Vertex-cut edge assignment: Libra (greedy), HDRF, random (hash) and DBH (degree-based hashing).

A vertex-cut puts every edge in exactly one of ``P`` partitions; a vertex then has a
*clone* in every partition holding one of its edges.  The cost of a cut is its replication
factor (mean clones per vertex), which sets the volume of the split-vertex exchange; its
balance is ``max / mean`` edges per partition, which sets the slowest rank's work.

**Libra** (Xie et al. 2014, as DistGNN Sec. 5.1 and DGL's ``libra_partition`` use it)
streams the edges once, keeping for each vertex the set ``A(v)`` of partitions that hold
it and each partition's edge load.  Edge ``(u, v)`` goes to the least-loaded partition of

- all partitions, when neither endpoint is placed;
- ``A(u)`` (or ``A(v)``), when only that endpoint is placed;
- ``A(u) & A(v)``, when both are placed and share a partition;
- ``A(w)`` for the endpoint ``w`` of lower (whole-graph) degree otherwise, so that the
  higher-degree endpoint is the one replicated.

Only the last case creates a clone, so the stream order decides the replication.  The
default order, ``"degree"``, streams the rows in increasing degree, each row's edges
together: a low-degree vertex is placed whole with its neighbourhood before the hubs
arrive, and the hubs, streamed last, are the ones replicated; it replicates less than
DGL 2.1's own Libra (which streams the CSR entries in order, one at a time) on the graphs
measured in ``docs/results/partitioners.md``.  ``"random"`` gives about DGL's figures with
its edges permuted, ``"given"`` DGL's own up to tie-breaking.

**HDRF** (Petroni et al. 2015) scores every partition ``p`` for edge ``(u, v)`` with the
*partial* degrees ``d`` (edges of each vertex streamed so far) and
``theta(u) = d(u) / (d(u) + d(v))``:

    score(p) = g(u, p) + g(v, p) + lambda (maxload - load(p)) / (1 + maxload - minload),
    g(x, p) = 2 - theta(x) if p in A(x) else 0,

and takes the best, so an edge joins the partitions of its endpoints, preferring to
replicate the endpoint of higher degree.  ``lambda`` (:data:`HDRF_LAMBDA`, tuned on
squirrel_filtered: ``docs/results/partitioners.md``) weighs the balance; besides, a
partition whose load would pass :data:`HDRF_CAP` times its share of the load streamed so
far is not a candidate unless it is among the least loaded.  Its default order is
``"random"``: in the degree order the partial degrees mislead it.

With per-partition *weights* (relative capacities: a rank with weight 2 should hold twice
the edges of one with weight 1), "load" means ``load[p] / weight[p]``; with all weights
equal the choices, ties and random draws are exactly those of the unweighted stream.  Ties
go to a seeded random choice among the tied partitions.  With ``keep_pairs`` the two
directions of an undirected edge are one streamed item and land in the same partition
(load 2).  The sets are bitsets ``uint64 [N, ceil(P / 64)]``.

**NE** (``"ne"``) grows each partition along the graph instead of streaming it
(:mod:`partition.expand`); it takes the same weights and pairs.

**Random** sends each edge to a seeded hash of the edge; **DBH** (Xie et al. 2014) to a
seeded hash of its lower-degree endpoint, which replicates hubs and keeps leaves whole.
The hash picks partition ``h mod P``; with unequal weights it is read as a fraction in
``[0, 1)`` and looked up in the cumulative table of the requested shares, so partition
``p`` gets a share ``weight[p] / sum(weight)`` of the hash range (equal weights keep
``h mod P``).
"""
from __future__ import annotations

import numba
import numpy as np
from numba.cpython.unsafe.numbers import trailing_zeros

from distgnn.data.graph import csr_rows
from distgnn.data.partitions import (
    EDGE_ORDERS,
    METHODS,
    PartitionError,
    check_weights,
    requested_shares,
)
from distgnn.kernels import prefetch
from partition.expand import expand_parts, expansion_items, holds

HASHED = ("random", "dbh")  # the methods without a stream: each edge goes by a hash
# a random stream order makes both bitset reads cache misses: hint them this far ahead
PREFETCH_DISTANCE = 32
STREAM_CHUNK = 1 << 22  # edges per Numba call, so a progress bar can advance between calls
HDRF_LAMBDA = 1.0  # balance weight, tuned on squirrel_filtered (docs/results/partitioners.md)
HDRF_CAP = 1.05  # no partition passes this many times its share of the streamed load
MAX_SEED = 2**63 - 1


def check_seed(seed) -> int:
    """``seed`` as an int, or ``PartitionError`` with a one-line message: an integer from 0
    to 2^63 - 1 (the range of ``distgnn-train --seed``; the hashes take it as 64 bits)."""
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) \
            or not 0 <= seed <= MAX_SEED:
        raise PartitionError(f"--seed must be an integer from 0 to 2^63-1, got {seed!r}")
    return int(seed)


def membership_words(num_parts: int) -> int:
    """Number of 64-bit words in one vertex's partition bitset."""
    return (num_parts + 63) // 64


@numba.njit(cache=True)
def _next(state):
    """xorshift64 step: the next state of the tie-breaking generator (never 0 from non-0)."""
    state ^= state << np.uint64(13)
    state ^= state >> np.uint64(7)
    return state ^ (state << np.uint64(17))


@numba.njit(cache=True)
def _draw(state, n):
    """``(i, state)``: ``i`` uniform in ``0..n-1`` (``n < 2^32``) from the next state."""
    state = _next(state)
    return ((state >> np.uint64(32)) * np.uint64(n)) >> np.uint64(32), state


@numba.njit(cache=True)
def _candidates(member, a, b, mode, w, num_parts):
    """Word ``w`` of the candidate set: all partitions (mode 0), ``A(a)`` (1) or
    ``A(a) & A(b)`` (2)."""
    if mode == 1:
        return member[a, w]
    if mode == 2:
        return member[a, w] & member[b, w]
    rest = num_parts - 64 * w
    return ~np.uint64(0) if rest >= 64 else (np.uint64(1) << np.uint64(rest)) - np.uint64(1)


@numba.njit(cache=True)
def _least_loaded(key, member, a, b, mode, state, limit):
    """``(p, state)``: the partition of least ``key[p]`` among :func:`_candidates`.

    Only partitions with ``key[p] < limit`` are candidates (a full partition is none).  Ties
    are broken uniformly at random; ``p = -1`` if there is no candidate.

    ``key`` is the int64 load itself when unweighted, else the float64 ``load / weight``
    (scaled), which equals the load exactly when the weights are equal.  The set bits are
    visited with trailing-zero counts, so a vertex on 2 of 16 partitions costs 2 steps;
    loads move in steps of 1 or 2, so most calls see ties: one draw picks among them all.
    """
    ties, best = 0, key[0]
    for w in range(member.shape[1]):
        word = _candidates(member, a, b, mode, w, len(key))
        while word:
            p = 64 * w + trailing_zeros(word)
            word &= word - np.uint64(1)
            if key[p] >= limit:
                continue
            if ties == 0 or key[p] < best:
                ties, best = 1, key[p]
            elif key[p] == best:
                ties += 1
    if ties == 0:
        return -1, state
    pick = 0
    if ties > 1:
        pick, state = _draw(state, ties)
    for w in range(member.shape[1]):
        word = _candidates(member, a, b, mode, w, len(key))
        while word:
            p = 64 * w + trailing_zeros(word)
            word &= word - np.uint64(1)
            if key[p] == best:
                if pick == 0:
                    return p, state
                pick -= 1
    return -1, state


@numba.njit(cache=True)
def _placed(member, v):
    for w in range(member.shape[1]):
        if member[v, w]:
            return True
    return False


@numba.njit(cache=True)
def _libra_choice(member, key, degree, u, v, state, limit):
    """``(p, state)``: Libra's partition for edge ``(u, v)`` (see the module docstring).

    Only partitions whose ``key`` is below ``limit`` are candidates; when Libra's set has
    none, the endpoint of higher degree's set is tried, then all partitions (``limit`` is
    infinite unless a stream continues a cut it must keep balanced, :class:`GreedyStream`).
    """
    pu, pv = _placed(member, u), _placed(member, v)
    p = -1
    if pu and pv:
        p, state = _least_loaded(key, member, u, v, 2, state, limit)
        if p < 0:
            low, high = (u, v) if degree[u] <= degree[v] else (v, u)
            p, state = _least_loaded(key, member, low, low, 1, state, limit)
            if p < 0:
                p, state = _least_loaded(key, member, high, high, 1, state, limit)
    elif pu or pv:
        p, state = _least_loaded(key, member, u if pu else v, 0, 1, state, limit)
    if p < 0:
        p, state = _least_loaded(key, member, 0, 0, 0, state, limit)
    if p < 0:  # every partition full (the limit is below the mean): the least loaded
        p, state = _least_loaded(key, member, 0, 0, 0, state, np.inf)
    return p, state


@numba.njit(cache=True)
def _hdrf_choice(member, key, scale, partial, u, v, units, cap, lam, state):
    """``(p, state)``: HDRF's partition for edge ``(u, v)`` of load ``units`` (see the module
    docstring): the best score among the partitions whose ``key`` stays within ``cap``
    (the least loaded ones always qualify)."""
    theta = partial[u] / (partial[u] + partial[v])
    low, high = key[0], key[0]
    for p in range(1, len(key)):
        low, high = min(low, key[p]), max(high, key[p])
    balance = lam / (1.0 + high - low)
    pick, ties, best = -1, 0, 0.0
    for p in range(len(key)):
        if key[p] > low and key[p] + units * scale[p] > cap:
            continue
        score = balance * (high - key[p])
        if holds(member, u, p):
            score += 2.0 - theta
        if holds(member, v, p):
            score += 1.0 + theta
        if ties == 0 or score > best:
            pick, ties, best = p, 1, score
        elif score == best:
            ties += 1  # reservoir sampling: the ties-th tie replaces the pick w.p. 1 / ties
            draw, state = _draw(state, ties)
            if draw == 0:
                pick = p
    return pick, state


@numba.njit(cache=True)
def _stream(src, dst, paired, hdrf, degree, partial, member, load, key, scale, cap, lam,
            limit, part, rng):
    """Assign the streamed edges ``(src[k], dst[k])`` their partitions ``part[k]``.

    Each is chosen through Libra or (``hdrf``) HDRF; updates ``member``, ``load`` and
    ``key = load * scale`` (int64 with ``scale`` all ones when unweighted, so the comparisons
    are integer ones; float64 ``max(weight) / weight`` when weighted).  With ``paired`` an
    item stands for an entry and its reverse: load 2 (1 for a self-loop).  HDRF also updates
    the partial degrees ``partial`` and ``cap[0]``, the key no partition may pass, by
    ``cap[1]`` per streamed load unit.  Libra takes no partition whose key has reached
    ``limit``.  ``rng[0]`` is the tie-breaking state, carried from one call to the next.
    Returns the number of CSR entries assigned.
    """
    state = rng[0]
    assigned = 0
    for k in range(len(src)):
        if k + PREFETCH_DISTANCE < len(src):
            prefetch(member, src[k + PREFETCH_DISTANCE], 0)
            prefetch(member, dst[k + PREFETCH_DISTANCE], 0)
        u, v = src[k], dst[k]
        units = 2 if paired and u != v else 1
        if hdrf:
            partial[u] += 1
            partial[v] += 1
            cap[0] += units * cap[1]
            p, state = _hdrf_choice(member, key, scale, partial, u, v, units, cap[0], lam,
                                    state)
        else:
            p, state = _libra_choice(member, key, degree, u, v, state, limit)
        part[k] = p
        assigned += units
        load[p] += units
        key[p] = load[p] * scale[p]
        bit = np.uint64(1) << np.uint64(p & 63)
        member[u, p >> 6] |= bit
        member[v, p >> 6] |= bit
    rng[0] = state
    return assigned


@numba.njit(cache=True)
def _hash(a, b, seed):
    """splitmix64 of ``(a, b, seed)``."""
    z = np.uint64(a) * np.uint64(0x9E3779B97F4A7C15) ^ np.uint64(b) ^ np.uint64(seed)
    z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return z ^ (z >> np.uint64(31))


@numba.njit(cache=True)
def _bucket(h, cumulative):
    """First ``p`` with ``x < cumulative[p]`` for ``x`` = the top 53 bits of ``h`` as a
    fraction in ``[0, 1)``; ``cumulative[-1]`` must be 1."""
    x = np.float64(h >> np.uint64(11)) * (1.0 / 9007199254740992.0)  # 2^-53
    lo, hi = 0, len(cumulative) - 1
    while lo < hi:
        mid = (lo + hi) // 2
        if x < cumulative[mid]:
            hi = mid
        else:
            lo = mid + 1
    return lo


@numba.njit(parallel=True, cache=True)
def _hash_assign(src, dst, degree, num_parts, seed, by_low_degree, cumulative, part):
    """``part[e]`` = hash bucket of edge ``e``: ``h mod P`` when ``cumulative`` is empty,
    else the weighted bucket of :func:`_bucket`."""
    weighted = len(cumulative) > 0
    for e in numba.prange(len(src)):
        u, v = src[e], dst[e]
        if by_low_degree:
            w = u if (degree[u], u) <= (degree[v], v) else v
            h = _hash(w, 0, seed)
        else:
            h = _hash(min(u, v), max(u, v), seed)
        if weighted:
            part[e] = _bucket(h, cumulative)
        else:
            part[e] = h % np.uint64(num_parts)


@numba.njit(parallel=True, cache=True)
def _fill_membership(src, dst, part, member, threads):
    """Set bit ``part[e]`` for both endpoints of every edge (threads own vertex ranges)."""
    n = member.shape[0]
    for t in numba.prange(threads):
        lo, hi = t * n // threads, (t + 1) * n // threads
        for e in range(len(src)):
            p = part[e]
            bit = np.uint64(1) << np.uint64(p & 63)
            u, v = src[e], dst[e]
            if lo <= u < hi:
                member[u, p >> 6] |= bit
            if lo <= v < hi:
                member[v, p >> 6] |= bit


@numba.njit(cache=True)
def _reverse_positions(indptr, indices):
    """``(ok, rev)``: each entry's reverse position in a symmetric CSR with sorted rows.

    ``rev[e]`` is the position of the reverse of entry ``e``; ``ok`` is False if some entry
    has no reverse.

    Rows are visited in order; row ``u``'s entries ``(u, v < u)`` are met in increasing
    ``v``, so a cursor per row finds each reverse in O(1).  When row ``v`` is reached, its
    entries below the diagonal must all have been matched: any left beyond the cursor
    have no reverse.
    """
    n = len(indptr) - 1
    cursor = indptr[:-1].copy()
    rev = np.empty(len(indices), np.int64)
    for v in range(n):
        for e in range(indptr[v], indptr[v + 1]):
            u = indices[e]
            if u < v:
                if e >= cursor[v]:
                    return False, rev
                continue
            if u == v:
                rev[e] = e
                continue
            r = cursor[u]
            if r >= indptr[u + 1] or indices[r] != v:
                return False, rev
            cursor[u] = r + 1
            rev[e] = r
            rev[r] = e
    return True, rev


def reverse_positions(indptr: np.ndarray, indices: np.ndarray) -> np.ndarray | None:
    """int64 ``[E]`` position of each entry's reverse, or None if the CSR is not symmetric
    (or its rows are not sorted)."""
    ok, rev = _reverse_positions(indptr, indices)
    return rev if ok else None


@numba.njit(cache=True)
def _rows_stream(indptr, indices, visit, rank, paired):
    """int64 positions of the streamed entries: the rows in ``visit`` order, each row's
    entries as stored; with ``paired`` only the entries whose source ranks not below the
    row, so each pair is streamed once, in the row of its lower-ranked endpoint."""
    items = np.empty(len(indices), np.int64)
    count = 0
    for v in visit:
        for e in range(indptr[v], indptr[v + 1]):
            if not paired or rank[indices[e]] >= rank[v]:
                items[count] = e
                count += 1
    return items[:count]


def degree_order(degree: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """int64 ``[N]``: the vertices in increasing ``degree``, ties in a random order drawn
    from ``rng`` (Libra's ``degree`` stream visits the rows so)."""
    shuffled = rng.permutation(len(degree))
    return shuffled[np.argsort(degree[shuffled], kind="stable")]


def stream_order(indptr, indices, degree, order, paired, seed):
    """int64 CSR positions in stream order (one per pair with ``paired``), see
    :func:`assign_edges`."""
    n = len(indptr) - 1
    rng = np.random.default_rng(seed)
    if order == "degree":
        visit = degree_order(degree, rng)
    else:  # "given" visits the rows as stored; its entries come first in CSR order
        visit = np.arange(n)
    rank = np.empty(n, np.int32)  # int32: half the cache misses of the lookups below
    rank[visit] = np.arange(n, dtype=np.int32)
    items = _rows_stream(indptr, indices, visit, rank, paired)
    return rng.permutation(items) if order == "random" else items


def stream_order_name(method: str, order: str | None = None) -> str:
    """The stream order :func:`assign_edges` uses: ``order``, else the method's own
    (``"degree"`` for libra, ``"random"`` for the others)."""
    return order or ("degree" if method == "libra" else "random")


def assign_edges(indptr: np.ndarray, indices: np.ndarray, num_parts: int,
                 method: str = "libra", seed: int = 0, order: str | None = None,
                 keep_pairs: bool | None = None, progress=None, weights=None,
                 hdrf_lambda: float = HDRF_LAMBDA) -> np.ndarray:
    """Partition of every CSR entry: int32 ``[E]`` in ``0..num_parts-1``.

    Args:
        indptr, indices: the CSR (rows = destinations).
        num_parts (int): ``P >= 1``.
        method (str): ``"libra"``, ``"hdrf"``, ``"random"``, ``"dbh"`` or ``"ne"``
            (neighbourhood expansion, :mod:`partition.expand`).
        seed (int): seeds the stream order, ties and hashes; 0 to 2^63 - 1.
        order (str, optional): stream order of Libra and HDRF (default: ``"degree"`` for
            Libra, ``"random"`` for HDRF).  ``"degree"``: rows in increasing whole-graph
            degree (seeded random among equal degrees), each row's edges together, a pair
            streamed in the row of its lower-degree endpoint; ``"random"``: a seeded
            permutation; ``"given"``: CSR order, a pair at its first entry (DGL's stream
            without the repeats).  See the module docstring for measurements.
        keep_pairs (bool, optional): both directions of an undirected edge in one
            partition; default: on when the graph is symmetric.  Requested on a graph that
            is not symmetric, it raises ``ValueError``.
        progress (callable, optional): called with the number of edges just streamed.
        weights (sequence of float, optional): relative capacity of each partition (``P``
            finite numbers > 0; default equal): partition ``p`` is asked for a share
            ``weights[p] / sum(weights)`` of the edges.  Libra and HDRF balance
            ``load / weight``; random and DBH hash into buckets of those sizes.  Equal
            weights give exactly the unweighted assignment.  Bad weights (see
            :func:`check_weights`) and a bad seed raise :class:`PartitionError`.
        hdrf_lambda (float): HDRF's balance weight ``lambda``.
    """
    if method not in METHODS:
        raise ValueError(f"method must be one of {', '.join(METHODS)}, got {method!r}")
    order = stream_order_name(method, order)
    if order not in EDGE_ORDERS:
        raise ValueError(f"order must be one of {', '.join(EDGE_ORDERS)}, got {order!r}")
    seed = check_seed(seed)
    w = (np.ones(num_parts) if weights is None
         else check_weights(weights, num_parts, len(indices)))
    equal = bool(np.all(w == w[0])) if num_parts else True
    n, num_edges = len(indptr) - 1, len(indices)
    dst = csr_rows(indptr, indices.dtype)
    src = indices
    rev = reverse_positions(indptr, indices) if keep_pairs in (None, True) else None
    if keep_pairs and rev is None:
        raise ValueError("keep_pairs needs a symmetric graph with sorted, duplicate-free rows")
    # in + out degree; symmetric: twice the row length, without counting E sources
    degree = (2 * np.diff(indptr) if rev is not None else
              np.diff(indptr) + np.bincount(indices, minlength=n)).astype(np.int64)
    part = np.empty(num_edges, np.int32)
    if method in HASHED:
        cumulative = np.empty(0) if equal else np.cumsum(requested_shares(w))
        if not equal:
            cumulative[-1] = 1.0  # the last bucket ends at 1 whatever the rounding
        _hash_assign(src, dst, degree, num_parts, seed, method == "dbh", cumulative, part)
        if progress:
            progress(num_edges)
        return part
    if method == "ne":
        items = expansion_items(num_edges, rev)
        capacity = np.ceil(requested_shares(w) * num_edges).astype(np.int64)
        item_part = expand_parts(n, dst[items], src[items], 1 if rev is None else 2,
                                 capacity, seed, progress)
    else:
        items = stream_order(indptr, indices, degree, order, rev is not None, seed)
        stream = GreedyStream(method, degree, num_parts, seed, None if weights is None else w,
                              rev is not None, hdrf_lambda)
        # gathered up front (the random reads overlap), so the sequential loop reads in order
        item_part = stream.assign(src[items], dst[items], progress)
    part[items] = item_part
    if rev is not None:
        part[rev[items]] = item_part
    return part


class GreedyStream:
    """The state of a Libra or HDRF stream, which is per vertex and per partition only.

    It holds the membership bitsets ``member`` ``uint64 [N, ceil(P / 64)]``, the loads,
    HDRF's partial degrees and the tie-breaking state.  :meth:`assign` streams the next
    edges, so a graph can be streamed in pieces (:mod:`partition.stream`) with the choices of
    one pass.

    Args:
        method (str): ``"libra"`` or ``"hdrf"``.
        degree (np.ndarray): int64 ``[N]`` whole-graph degree (in + out) of each vertex.
        num_parts, seed, weights, hdrf_lambda: as :func:`assign_edges` takes them.
        paired (bool): an item stands for an entry and its reverse (load 2).
    """

    def __init__(self, method: str, degree: np.ndarray, num_parts: int, seed: int = 0,
                 weights=None, paired: bool = False, hdrf_lambda: float = HDRF_LAMBDA):
        n = len(degree)
        w = np.ones(num_parts) if weights is None else np.asarray(weights, np.float64)
        self.hdrf, self.paired, self.hdrf_lambda = method == "hdrf", paired, hdrf_lambda
        self.degree = degree
        self.member = np.zeros((n, membership_words(num_parts)), np.uint64)
        self.load = np.zeros(num_parts, np.int64)
        if weights is None:
            self.scale, self.key = np.ones(num_parts, np.int64), np.zeros(num_parts, np.int64)
        else:  # exactly 1.0 everywhere for equal weights: the same choices as unweighted
            self.scale, self.key = w.max() / w, np.zeros(num_parts, np.float64)
        self.rng = np.array([_hash(seed, 1, 0) | np.uint64(1)], np.uint64)
        self.partial = np.zeros(n if self.hdrf else 0, np.int64)
        # max(w) / sum(w), not overflowing
        self.cap = np.array([0.0, HDRF_CAP / (w / w.max()).sum()])
        self.limit = np.inf  # Libra's key no partition may reach (:meth:`continue_cut`)

    def continue_cut(self, src: np.ndarray, dst: np.ndarray, part: np.ndarray,
                     capacity: int) -> None:
        """Continue a cut made by another method, filling no partition beyond ``capacity``.

        The edges ``src[k] -> dst[k]`` already in partitions ``part[k]`` (each of load 1)
        are taken as if streamed; the edges streamed next go by Libra's rule (unweighted)
        among the partitions with room, so the cut stays balanced."""
        _fill_membership(src, dst, part, self.member, numba.get_num_threads())
        self.load += np.bincount(part, minlength=len(self.load))
        self.key[:] = self.load * self.scale
        self.limit = float(capacity)

    def assign(self, src: np.ndarray, dst: np.ndarray, progress=None) -> np.ndarray:
        """int32 partition of each streamed edge ``src[k] -> dst[k]``, in order;
        ``progress`` is called with the CSR entries assigned, every ``STREAM_CHUNK``."""
        part = np.empty(len(src), np.int32)
        for start in range(0, len(src), STREAM_CHUNK):
            chunk = slice(start, start + STREAM_CHUNK)
            assigned = _stream(src[chunk], dst[chunk], self.paired, self.hdrf, self.degree,
                               self.partial, self.member, self.load, self.key, self.scale,
                               self.cap, self.hdrf_lambda, self.limit, part[chunk], self.rng)
            if progress:
                progress(assigned)
        return part


def membership(indptr: np.ndarray, indices: np.ndarray, part: np.ndarray,
               num_parts: int) -> np.ndarray:
    """uint64 ``[N, ceil(P / 64)]``: bit ``p`` of row ``v`` set iff partition ``p`` holds
    an edge of ``v``."""
    member = np.zeros((len(indptr) - 1, membership_words(num_parts)), np.uint64)
    dst = csr_rows(indptr, indices.dtype)
    _fill_membership(indices, dst, part, member, numba.get_num_threads())
    return member
