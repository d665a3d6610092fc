r"""Numba kernels of multi-head attention aggregation (GAT) on a CSR (rows = destinations).

For edges ``e = (u -> v)`` with per-head weights ``alpha`` ``[E, H]`` and source states
``z`` ``[N_src, H, C]``:

.. math::
    y_{v,h,:} = \sum_{e = (u, v)} \alpha_{e,h}\, z_{u,h,:}

    \frac{\partial L}{\partial \alpha_{e,h}} = \langle g_{v,h,:},\, z_{u,h,:} \rangle
    \qquad
    \frac{\partial L}{\partial z_{u,h,:}} = \sum_{e = (u, v)} \alpha_{e,h}\, g_{v,h,:}

Each is one pass over the edges with one row of output per thread-owned destination (the
last on the transposed CSR), so nothing ``[E, H, C]`` is ever materialised: what a
message-passing implementation (PyG's ``propagate``) allocates and writes for the gathered
``z_u`` and the weighted messages is never written here.
"""
from __future__ import annotations

import numba
import numpy as np

from .blocking import balanced_chunks


@numba.njit(parallel=True, fastmath=True, cache=True, nogil=True)
def _weighted_heads(chunks, indptr, indices, alpha, z, out):
    """``out[v, h] = sum_e alpha[e, h] z[indices[e], h]`` (``alpha`` indexed by CSR position)."""
    heads, width = z.shape[1], z.shape[2]
    for c in numba.prange(len(chunks) - 1):
        acc = np.empty((heads, width), z.dtype)
        for v in range(chunks[c], chunks[c + 1]):
            acc[:] = 0.0
            for e in range(indptr[v], indptr[v + 1]):
                u = indices[e]
                for h in range(heads):
                    a = alpha[e, h]
                    for f in range(width):
                        acc[h, f] += a * z[u, h, f]
            out[v] = acc


@numba.njit(parallel=True, fastmath=True, cache=True, nogil=True)
def _head_dots(chunks, indptr, indices, g, z, out):
    """``out[e, h] = <g[v, h], z[indices[e], h]>`` for every edge ``e`` of row ``v``."""
    heads, width = z.shape[1], z.shape[2]
    for c in numba.prange(len(chunks) - 1):
        for v in range(chunks[c], chunks[c + 1]):
            for e in range(indptr[v], indptr[v + 1]):
                u = indices[e]
                for h in range(heads):
                    s = 0.0
                    for f in range(width):
                        s += g[v, h, f] * z[u, h, f]
                    out[e, h] = s


def transposed_order(indptr: np.ndarray, indices: np.ndarray, num_sources: int):
    """The CSR by source: ``(indptr_t, dst_t, position)`` with ``position[k]`` the original
    CSR position of the ``k``-th transposed edge (a stable sort, so rows keep their order)."""
    position = np.argsort(indices, kind="stable")
    dst = np.repeat(np.arange(len(indptr) - 1, dtype=np.int64), np.diff(indptr))
    indptr_t = np.zeros(num_sources + 1, np.int64)
    np.cumsum(np.bincount(indices, minlength=num_sources), out=indptr_t[1:])
    return indptr_t, dst[position], position


def weighted_heads(indptr, indices, alpha: np.ndarray, z: np.ndarray,
                   chunks: np.ndarray | None = None) -> np.ndarray:
    """``y`` ``[N_dst, H, C]`` of the module docstring; ``alpha`` ``[E, H]``, ``z``
    ``[N_src, H, C]`` of one floating type; ``chunks`` from :func:`balanced_chunks`."""
    out = np.empty((len(indptr) - 1, z.shape[1], z.shape[2]), z.dtype)
    chunks = balanced_chunks(indptr) if chunks is None else chunks
    _weighted_heads(chunks, indptr, indices, alpha, z, out)
    return out


def head_dots(indptr, indices, g: np.ndarray, z: np.ndarray,
              chunks: np.ndarray | None = None) -> np.ndarray:
    """``dL/dalpha`` ``[E, H]`` of the module docstring for ``g`` ``[N_dst, H, C]``."""
    out = np.empty((len(indices), z.shape[1]), z.dtype)
    chunks = balanced_chunks(indptr) if chunks is None else chunks
    _head_dots(chunks, indptr, indices, g, z, out)
    return out
