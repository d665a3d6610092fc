"""Vertex-cut edge assignment: Libra (greedy), random (hash) and DBH (degree-based hashing).

A vertex-cut puts every edge in exactly one of ``P`` partitions; a vertex then has a
*clone* in every partition holding one of its edges.  The cost of a cut is its replication
factor (mean clones per vertex), which sets the volume of the split-vertex exchange; its
balance is ``max / mean`` edges per partition, which sets the slowest rank's work.

**Libra** (Xie et al. 2014, as DistGNN Sec. 5.1 uses it) streams the edges once, keeping
for each vertex the set ``A(v)`` of partitions that hold it and each partition's edge
load.  Edge ``(u, v)`` goes to the least-loaded partition of

- all partitions, when neither endpoint is placed;
- ``A(u)`` (or ``A(v)``), when only that endpoint is placed;
- ``A(u) & A(v)``, when both are placed and share a partition;
- ``A(w)`` for the endpoint ``w`` of lower (whole-graph) degree otherwise, so that the
  higher-degree endpoint is the one replicated.

With per-partition *weights* (relative capacities: a rank with weight 2 should hold twice
the edges of one with weight 1), "least-loaded" means least ``load[p] / weight[p]``; with
all weights equal the choices, ties and random draws are exactly those of the unweighted
stream.  Ties go to a seeded random choice among the tied partitions.  With ``keep_pairs`` the
two directions of an undirected edge are one streamed item and land in the same
partition (load 2).  The sets are bitsets ``uint64 [N, ceil(P / 64)]``.

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

from distgnn.errors import DistGNNError
from distgnn.graph import csr_rows
from distgnn.kernels import prefetch

# a random stream order makes both bitset reads cache misses: hint them this far ahead
PREFETCH_DISTANCE = 32
STREAM_CHUNK = 1 << 22  # edges per Numba call, so a progress bar can advance between calls
METHODS = ("libra", "random", "dbh")
ORDERS = ("given", "random")


class PartitionError(DistGNNError, ValueError):
    """Arguments that no partitioning can satisfy (P < 1, more parts than edges, ...)."""


def check_weights(weights, num_parts: int) -> np.ndarray:
    """float64 ``[P]`` copy of ``weights`` (relative capacity of each partition), or
    ``PartitionError`` with a one-line message: one per partition, finite, > 0."""
    try:
        w = np.array(weights, dtype=np.float64)
    except (TypeError, ValueError):
        raise PartitionError(f"--weights must be numbers, got {weights!r}") from None
    if w.ndim != 1:
        raise PartitionError(f"--weights must be a list of numbers, got shape {w.shape}")
    if len(w) != num_parts:
        raise PartitionError(f"--weights needs one weight per partition: got {len(w)} "
                             f"for {num_parts} partitions")
    bad = np.flatnonzero(~(np.isfinite(w) & (w > 0)))
    if len(bad):
        raise PartitionError(f"--weights must be finite and > 0, got {float(w[bad[0]]):g} for "
                             f"partition {bad[0]}")
    return w


def requested_shares(weights) -> np.ndarray:
    """The edge share each partition is asked for: ``weights / sum(weights)``."""
    w = np.asarray(weights, np.float64)
    return w / w.sum()


def membership_words(num_parts: int) -> int:
    """Number of 64-bit words in one vertex's partition bitset."""
    return (num_parts + 63) // 64


@numba.njit(cache=True)
def _has(member, v, p):
    return (member[v, p >> 6] >> np.uint64(p & 63)) & np.uint64(1)


@numba.njit(cache=True)
def _placed(member, v):
    for w in range(member.shape[1]):
        if member[v, w]:
            return True
    return False


@numba.njit(cache=True)
def _in_set(member, a, b, mode, p):
    """Whether ``p`` is in: all partitions (mode 0), ``A(a)`` (1), ``A(a) & A(b)`` (2)."""
    if mode == 0:
        return True
    if mode == 1:
        return _has(member, a, p) != 0
    return (_has(member, a, p) & _has(member, b, p)) != 0


@numba.njit(cache=True)
def _least_loaded(key, member, a, b, mode):
    """Partition of least ``key[p]`` in the set of ``_in_set``; -1 if the set is empty.

    ``key`` is the int64 load itself when unweighted, else the float64 ``load / weight``
    (scaled), which equals the load exactly when the weights are equal.

    Ties are broken uniformly at random with one draw per call: loads move in steps of
    1 or 2, so most calls see ties, and a draw per tied partition cost 4x the time.
    """
    best, ties = key[0], 0
    for p in range(len(key)):
        if _in_set(member, a, b, mode, p):
            if ties == 0 or key[p] < best:
                best, ties = key[p], 1
            elif key[p] == best:
                ties += 1
    if ties == 0:
        return -1
    pick = np.random.randint(0, ties) if ties > 1 else 0
    for p in range(len(key)):
        if key[p] == best and _in_set(member, a, b, mode, p):
            if pick == 0:
                return p
            pick -= 1
    return -1


@numba.njit(cache=True)
def _libra_stream(src, dst, paired, degree, member, load, key, scale, part, seed):
    """``part[k]`` for the streamed edges ``(src[k], dst[k])``; updates ``member``/``load``
    and ``key = load * scale`` (int64 with ``scale`` all ones when unweighted, so the
    comparisons are integer ones; float64 ``max(weight) / weight`` when weighted).

    With ``paired`` an item stands for an entry and its reverse: load 2 (1 for a self-loop).
    """
    np.random.seed(seed)
    for k in range(len(src)):
        if k + PREFETCH_DISTANCE < len(src):
            prefetch(member, src[k + PREFETCH_DISTANCE], 0)
            prefetch(member, dst[k + PREFETCH_DISTANCE], 0)
        u, v = src[k], dst[k]
        pu, pv = _placed(member, u), _placed(member, v)
        if not pu and not pv:
            p = _least_loaded(key, member, u, v, 0)
        elif pu and not pv:
            p = _least_loaded(key, member, u, v, 1)
        elif pv and not pu:
            p = _least_loaded(key, member, v, u, 1)
        else:
            p = _least_loaded(key, member, u, v, 2)
            if p < 0:
                low = u if degree[u] <= degree[v] else v
                p = _least_loaded(key, member, low, low, 1)
        part[k] = p
        load[p] += 2 if paired and u != v else 1
        key[p] = load[p] * scale[p]
        bit = np.uint64(1) << np.uint64(p & 63)
        member[u, p >> 6] |= bit
        member[v, p >> 6] |= bit


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
    """``(ok, rev)``: for a symmetric CSR with sorted rows, ``rev[e]`` = position of the
    reverse of entry ``e``; ``ok`` is False if some entry has no reverse.

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


def assign_edges(indptr: np.ndarray, indices: np.ndarray, num_parts: int,
                 method: str = "libra", seed: int = 0, order: str = "random",
                 keep_pairs: bool | None = None, progress=None, weights=None) -> np.ndarray:
    """Partition of every CSR entry: int32 ``[E]`` in ``0..num_parts-1``.

    Args:
        indptr, indices: the CSR (rows = destinations).
        num_parts (int): ``P >= 1``.
        method (str): ``"libra"``, ``"random"`` or ``"dbh"``.
        seed (int): seeds the stream order, ties and hashes.
        order (str): ``"random"`` (seeded permutation, default) or ``"given"`` (CSR
            order); Libra only.  "given" is faster (R-MAT 2^20 x 16, P = 16: replication
            1.939 in 5.2 s against 1.952 in 11.0 s) but streams each row's edges together,
            so a hub row fills one partition and on small graphs with many parts some
            partitions stay empty (R-MAT 2^12 x 8, P = 70).
        keep_pairs (bool, optional): both directions of an undirected edge in one
            partition; default: on when the graph is symmetric.  Requested on a graph that
            is not symmetric, it raises ``ValueError``.
        progress (callable, optional): called with the number of edges just streamed.
        weights (sequence of float, optional): relative capacity of each partition (``P``
            finite numbers > 0; default equal): partition ``p`` is asked for a share
            ``weights[p] / sum(weights)`` of the edges.  Libra balances ``load / weight``;
            random and DBH hash into buckets of those sizes.  Equal weights give exactly
            the unweighted assignment.  Bad weights raise :class:`PartitionError`.
    """
    if method not in METHODS:
        raise ValueError(f"method must be one of {', '.join(METHODS)}, got {method!r}")
    if order not in ORDERS:
        raise ValueError(f"order must be one of {', '.join(ORDERS)}, got {order!r}")
    w = np.ones(num_parts) if weights is None else check_weights(weights, num_parts)
    equal = bool(np.all(w == w[0])) if num_parts else True
    n, num_edges = len(indptr) - 1, len(indices)
    dst = csr_rows(indptr, indices.dtype)
    src = indices
    degree = (np.diff(indptr) + np.bincount(indices, minlength=n)).astype(np.int64)
    rev = reverse_positions(indptr, indices) if keep_pairs in (None, True) else None
    if keep_pairs and rev is None:
        raise ValueError("keep_pairs needs a symmetric graph with sorted, duplicate-free rows")
    part = np.empty(num_edges, np.int32)
    if method != "libra":
        cumulative = np.empty(0) if equal else np.cumsum(requested_shares(w))
        if not equal:
            cumulative[-1] = 1.0  # the last bucket ends at 1 whatever the rounding
        _hash_assign(src, dst, degree, num_parts, seed, method == "dbh", cumulative, part)
        if progress:
            progress(num_edges)
        return part
    # one streamed item per undirected pair: the entry with src <= dst; its reverse follows
    items = np.flatnonzero(src <= dst) if rev is not None else np.arange(num_edges)
    if order == "random":
        items = np.random.default_rng(seed).permutation(items)
    member = np.zeros((n, membership_words(num_parts)), np.uint64)
    load = np.zeros(num_parts, np.int64)
    if weights is None:
        scale, key = np.ones(num_parts, np.int64), np.zeros(num_parts, np.int64)
    else:  # exactly 1.0 everywhere for equal weights: the same choices as unweighted
        scale, key = w.max() / w, np.zeros(num_parts, np.float64)
    for start in range(0, len(items), STREAM_CHUNK):
        chunk = items[start:start + STREAM_CHUNK]
        # gathered up front, so the sequential loop reads them in order
        chunk_src, chunk_dst = src[chunk], dst[chunk]
        chunk_part = np.empty(len(chunk), np.int32)
        _libra_stream(chunk_src, chunk_dst, rev is not None, degree, member, load, key,
                      scale, chunk_part, (seed * 1_000_003 + start) % (1 << 32))
        part[chunk] = chunk_part
        if progress:
            progress(len(chunk) if rev is None else
                     2 * len(chunk) - int(np.count_nonzero(chunk_src == chunk_dst)))
    if rev is not None:
        part[rev[items]] = part[items]
    return part


def membership(indptr: np.ndarray, indices: np.ndarray, part: np.ndarray,
               num_parts: int) -> np.ndarray:
    """uint64 ``[N, ceil(P / 64)]``: bit ``p`` of row ``v`` set iff partition ``p`` holds
    an edge of ``v``."""
    member = np.zeros((len(indptr) - 1, membership_words(num_parts)), np.uint64)
    dst = csr_rows(indptr, indices.dtype)
    _fill_membership(indices, dst, part, member, numba.get_num_threads())
    return member
