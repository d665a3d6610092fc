r"""The identity of a graph's content, the same however the graph is partitioned.

A checkpoint must be refused by a run on other data, yet accepted by a run on the same
graph split into another number of partitions (or on the whole graph in one process).  So
the identity is a sum of per-item hashes, a *multiset hash*: every edge and every vertex is
hashed alone, in global ids, and the hashes are added modulo :math:`2^{64}`:

.. math::
    H = \sum_{(u \to v, w) \in E} h_e(g_u, g_v, w)
        + \sum_{v \in V} h_v(g_v, y_v, m_v, x_v) \pmod{2^{64}}

(two such sums with independent constants: 128 bits).  A vertex cut places every edge on
exactly one partition and every vertex's root clone on exactly one, so the ranks' partial
sums over their edges and root clones add up to the whole graph's :math:`H`, whatever the
partitioning.  The sums travel as eight 16-bit lanes (:func:`partial_lanes`), which an int64
allreduce adds without overflow over any number of ranks; :func:`digest`
folds the summed lanes back into a hex string.
"""
from __future__ import annotations

import numba
import numpy as np

__all__ = ["digest", "partial_lanes"]

# splitmix64's constants (Steele et al., 2014), and an odd multiplier per hashed field
_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_M1 = np.uint64(0xBF58476D1CE4E5B9)
_M2 = np.uint64(0x94D049BB133111EB)
_SEEDS = (np.uint64(0x243F6A8885A308D3), np.uint64(0x13198A2E03707345))
LANE_BITS, LANES_PER_SUM = 16, 4


@numba.njit(cache=True, inline="always")
def _mix(z):
    """splitmix64's finaliser: a bijection of ``uint64`` whose bits all depend on all of
    ``z``'s."""
    z = (z ^ (z >> np.uint64(30))) * _M1
    z = (z ^ (z >> np.uint64(27))) * _M2
    return z ^ (z >> np.uint64(31))


@numba.njit(cache=True)
def _edge_sum(indptr, indices, weight_bits, global_ids, seed):
    """``sum h_e`` over the CSR's edges (``weight_bits`` ``uint32 [E]`` or empty)."""
    total = np.uint64(0)
    weighted = len(weight_bits) > 0
    for v in range(len(indptr) - 1):
        gv = np.uint64(global_ids[v])
        for k in range(indptr[v], indptr[v + 1]):
            z = _mix(seed ^ (np.uint64(global_ids[indices[k]]) * _GOLDEN))
            z = _mix(z ^ (gv + _M1))
            if weighted:
                z = _mix(z ^ np.uint64(weight_bits[k]))
            total += z
    return total


@numba.njit(cache=True)
def _vertex_sum(rows, global_ids, labels, mask_bits, x_bits, seed):
    """``sum h_v`` over vertices ``rows`` (labels, 3-bit masks and feature rows' bits)."""
    total = np.uint64(0)
    for v in rows:
        z = _mix(seed ^ (np.uint64(global_ids[v]) * _GOLDEN))
        z = _mix(z ^ np.uint64(labels[v] + 2))  # labels from -1 (unlabelled)
        z = _mix(z ^ np.uint64(mask_bits[v]))
        for j in range(x_bits.shape[1]):
            z = _mix(z ^ (np.uint64(x_bits[v, j]) + _GOLDEN))
        total += z
    return total


def _uint32_bits(a: np.ndarray) -> np.ndarray:
    """The bits of float32 (or int32) ``a`` as ``uint32``, with no copy when it is float32."""
    return np.ascontiguousarray(a, dtype=np.float32).view(np.uint32)


def partial_lanes(indptr: np.ndarray, indices: np.ndarray, edge_weight: np.ndarray | None,
                  global_ids: np.ndarray, rows: np.ndarray, y: np.ndarray,
                  masks: list[np.ndarray], x: np.ndarray) -> np.ndarray:
    """This rank's part of the identity: int64 ``[2 * LANES_PER_SUM]`` lanes to sum over ranks.

    Args:
        indptr, indices, edge_weight: the local CSR (destination rows, sources in ``indices``;
            :class:`~distgnn.data.graph.CSRGraph`'s convention), weights float32 or ``None``.
        global_ids: int ``[n]``, each local vertex's global id.
        rows: int ``[r]``, the local vertices this rank counts (its root clones).
        y: int ``[n]`` labels; masks: bool ``[n]`` each (train, val, test); x: float32
            ``[n, F]`` features as loaded (before any normalisation).
    """
    global_ids = np.asarray(global_ids, np.int64)
    weights = (np.empty(0, np.uint32) if edge_weight is None else _uint32_bits(edge_weight))
    mask_bits = np.zeros(len(y), np.uint8)
    for bit, m in enumerate(masks):
        mask_bits |= np.asarray(m, bool).astype(np.uint8) << bit
    rows = np.asarray(rows, np.int64)
    lanes = []
    for seed in _SEEDS:
        total = int(_edge_sum(np.asarray(indptr, np.int64), np.asarray(indices), weights,
                              global_ids, seed))
        total += int(_vertex_sum(rows, global_ids, np.asarray(y, np.int64), mask_bits,
                                 _uint32_bits(x), seed))
        total %= 1 << 64
        lanes += [(total >> (LANE_BITS * i)) & ((1 << LANE_BITS) - 1)
                  for i in range(LANES_PER_SUM)]
    return np.array(lanes, np.int64)


def digest(lanes: np.ndarray) -> str:
    """The hex identity of the lanes of every rank added up (32 hex digits)."""
    words = []
    for s in range(len(_SEEDS)):
        part = lanes[s * LANES_PER_SUM:(s + 1) * LANES_PER_SUM]
        words.append(sum(int(v) << (LANE_BITS * i) for i, v in enumerate(part)) % (1 << 64))
    return "".join(f"{w:016x}" for w in words)
