r"""Numba kernels of GAT's edge softmax and aggregation on a CSR (rows = destinations).

From per-vertex scores ``s`` (sources) and ``t`` (destinations), ``[N, H]``, and source
states ``z`` ``[N, H, C]``:

.. math::
    e_{uv} = \operatorname{LeakyReLU}(s_u + t_v),\quad
    m_v = \max(\ell_v, \max_{u} e_{uv}),\quad
    S_v = \sum_u \exp(e_{uv} - m_v),\quad
    \alpha_{uv} = \exp(e_{uv} - m_v) / S_v,\quad
    y_v = \sum_u \alpha_{uv} k_{uv} z_u

(stored self-loops ``u = v`` take no part: the caller adds the loop, logit ``l_v``, once).
``k`` is dropout's keep-and-scale factor, a hash of ``(key, edge key, head)`` recomputed
where it is needed (:mod:`distgnn.nn.dropout`'s formula).  Between the kernels the caller
combines ``m``, ``S`` and ``y`` over the clones of split vertices.  In the backward pass,
with ``g = dL/dy`` and ``a_e = dL/d alpha_e = k_e <g_v, z_u>``,
``dL/de_{uv} = alpha_{uv} a_{uv} - alpha_{uv} D_v`` where ``D_v = sum alpha a`` over every in-edge
(again combined over clones), and ``dL/ds``, ``dL/dt`` follow through the LeakyReLU.  The
``[E, H]`` coefficients (and, with dropout, the dropped ones, ``alpha k``) are the only
per-edge values kept between passes: the backward pass needs no hash and no exponential.

Each kernel is one pass over the edges, a thread owning whole destination rows (sources, on
the transposed CSR, for ``dL/ds`` and ``dL/dz``), so nothing ``[E, H, C]`` is materialised,
nor any other ``[E, H]`` tensor: what a message-passing implementation (PyG's
``propagate``) allocates for the gathered ``z_u``, the weighted messages, the logits and the
exponentials is never written here.
"""
from __future__ import annotations

import numba
import numpy as np

from . import jit
from .dropout import splitmix64
from .jit import readonly


@numba.njit(inline="always")
def _keep_scale(key, edge_key, heads, h, threshold, scale):
    """Dropout's factor for head ``h`` of the edge keyed ``edge_key`` (1 without dropout)."""
    if threshold == 0:
        return scale
    c = key + np.uint64(edge_key) * np.uint64(heads) + np.uint64(h)
    return scale if (splitmix64(c) >> np.uint64(40)) >= threshold else 0.0


@numba.njit(inline="always")
def _leaky(x, slope):
    return x if x > 0 else slope * x


@jit.kernel(parallel=True, fastmath=True, nogil=True)
def _softmax_max(chunks, indptr, indices, s, t, slope, loop, top):
    """``top[v] = max(loop[v], max_u LeakyReLU(s_u + t_v))`` (stored loops skipped)."""
    heads = s.shape[1]
    for c in numba.prange(len(chunks) - 1):
        for v in range(chunks[c], chunks[c + 1]):
            for h in range(heads):
                top[v, h] = loop[v, h]
            for e in range(indptr[v], indptr[v + 1]):
                u = indices[e]
                if u == v:
                    continue
                for h in range(heads):
                    top[v, h] = max(top[v, h], _leaky(s[u, h] + t[v, h], slope))


@jit.kernel(parallel=True, fastmath=True, nogil=True)
def _softmax_sum(chunks, indptr, indices, s, t, slope, top, weight, total):
    """``weight[e] = exp(LeakyReLU(s_u + t_v) - top[v])`` (0 on stored loops) and
    ``total[v] = sum_e weight[e]``."""
    heads = s.shape[1]
    for c in numba.prange(len(chunks) - 1):
        for v in range(chunks[c], chunks[c + 1]):
            for h in range(heads):
                total[v, h] = 0.0
            for e in range(indptr[v], indptr[v + 1]):
                u = indices[e]
                for h in range(heads):
                    w = 0.0 if u == v else np.exp(_leaky(s[u, h] + t[v, h], slope) - top[v, h])
                    weight[e, h] = w
                    total[v, h] += w


@jit.kernel(parallel=True, fastmath=True, nogil=True)
def _softmax_aggregate(chunks, indptr, indices, total, z, edge_keys, key, threshold, scale,
                       alpha, kept, out):
    """``alpha[e] /= total[v]`` in place (it held the weights), ``kept[e] = alpha_e k_e``
    (when ``kept`` is not ``alpha``: dropout) and ``out[v] = sum_e kept_e z_u``."""
    heads, width = z.shape[1], z.shape[2]
    for c in numba.prange(len(chunks) - 1):
        acc = np.empty((heads, width), z.dtype)
        for v in range(chunks[c], chunks[c + 1]):
            acc[:] = 0.0
            for e in range(indptr[v], indptr[v + 1]):
                u = indices[e]
                for h in range(heads):
                    a = alpha[e, h] / total[v, h]
                    alpha[e, h] = a
                    if threshold > 0:
                        a *= _keep_scale(key, edge_keys[e], heads, h, threshold, scale)
                        kept[e, h] = a
                    for f in range(width):
                        acc[h, f] += a * z[u, h, f]
            out[v] = acc


@jit.kernel(parallel=True, fastmath=True, nogil=True)
def _softmax_grad_alpha(chunks, indptr, indices, g, z, kept, grad, dot):
    """``grad[e] = kept_e <g_v, z_u>`` (``alpha_e dL/dalpha_e``) and ``dot[v] = sum_e grad[e]``."""
    heads, width = z.shape[1], z.shape[2]
    for c in numba.prange(len(chunks) - 1):
        for v in range(chunks[c], chunks[c + 1]):
            for h in range(heads):
                dot[v, h] = 0.0
            for e in range(indptr[v], indptr[v + 1]):
                u = indices[e]
                for h in range(heads):
                    acc = 0.0
                    for f in range(width):
                        acc += g[v, h, f] * z[u, h, f]
                    q = kept[e, h] * acc
                    grad[e, h] = q
                    dot[v, h] += q


@jit.kernel(parallel=True, fastmath=True, nogil=True)
def _softmax_grad_logits(chunks, indptr, indices, s, t, slope, alpha, dot, grad, grad_t):
    """In place, ``grad[e] <- dL/d(s_u + t_v) = (grad_e - alpha_e dot_v) LeakyReLU'``; and
    ``grad_t[v] = sum_e grad[e]``."""
    heads = s.shape[1]
    for c in numba.prange(len(chunks) - 1):
        for v in range(chunks[c], chunks[c + 1]):
            for h in range(heads):
                grad_t[v, h] = 0.0
            for e in range(indptr[v], indptr[v + 1]):
                u = indices[e]
                for h in range(heads):
                    d = grad[e, h] - alpha[e, h] * dot[v, h]
                    if s[u, h] + t[v, h] <= 0:
                        d *= slope
                    grad[e, h] = d
                    grad_t[v, h] += d


@jit.kernel(parallel=True, fastmath=True, nogil=True)
def _softmax_grad_sources(chunks, indptr_t, dst_t, position, grad_logits, kept, g, grad_s,
                          grad_z):
    """By source ``u`` (transposed CSR): ``grad_s[u] = sum_e grad_logits[e]`` and
    ``grad_z[u] = sum_e kept_e g_v`` over ``u``'s out-edges."""
    heads, width = g.shape[1], g.shape[2]
    for c in numba.prange(len(chunks) - 1):
        acc = np.empty((heads, width), g.dtype)
        for u in range(chunks[c], chunks[c + 1]):
            acc[:] = 0.0
            for h in range(heads):
                grad_s[u, h] = 0.0
            for k in range(indptr_t[u], indptr_t[u + 1]):
                e = position[k]
                v = dst_t[k]
                for h in range(heads):
                    grad_s[u, h] += grad_logits[e, h]
                    a = kept[e, h]
                    for f in range(width):
                        acc[h, f] += a * g[v, h, f]
            grad_z[u] = acc


def transposed_order(indptr: np.ndarray, indices: np.ndarray, num_sources: int):
    """The CSR by source: ``(indptr_t, dst_t, position)`` with ``position[k]`` the original
    CSR position of the ``k``-th transposed edge (a stable sort, so rows keep their order)."""
    position = np.argsort(indices, kind="stable")
    dst = np.repeat(np.arange(len(indptr) - 1, dtype=np.int64), np.diff(indptr))
    indptr_t = np.zeros(num_sources + 1, np.int64)
    np.cumsum(np.bincount(indices, minlength=num_sources), out=indptr_t[1:])
    return indptr_t, dst[position], position


def _graph(*arrays) -> list[np.ndarray]:
    """The graph's arrays as the kernels are compiled for them: read-only, whether they
    come from a partition (memory-mapped) or were built here (see :mod:`~.jit`)."""
    return [readonly(a) for a in arrays]


def dropout_args(p: float, dtype) -> tuple[np.uint64, object]:
    """``(threshold, scale)`` of dropout probability ``p`` as the kernels take them."""
    return np.uint64(int(p * (1 << 24))), np.dtype(dtype).type(1.0 / (1.0 - p))


def softmax_max(indptr, indices, s, t, slope: float, loop, chunks) -> np.ndarray:
    """``m`` ``[N, H]`` of the module docstring over this CSR's edges and the loop logits."""
    top = np.empty_like(s)
    _softmax_max(*_graph(chunks, indptr, indices), s, t, s.dtype.type(slope), loop, top)
    return top


def softmax_sum(indptr, indices, s, t, slope: float, top, chunks
                ) -> tuple[np.ndarray, np.ndarray]:
    """``(exp(e - m) [E, H], S [N, H])`` of the module docstring over this CSR's edges."""
    weight = np.empty((len(indices), s.shape[1]), s.dtype)
    total = np.empty_like(s)
    _softmax_sum(*_graph(chunks, indptr, indices), s, t, s.dtype.type(slope), top, weight,
                 total)
    return weight, total


def softmax_aggregate(indptr, indices, weight, total, z, edge_keys, key: int, p: float,
                      chunks) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(alpha, kept, y)``: the coefficients ``[E, H]`` (made in place from ``weight``), the
    same after dropout ``p`` keyed by ``key`` and ``edge_keys`` (``alpha`` itself when
    ``p = 0``) and ``y`` ``[N, H C]`` of the module docstring."""
    kept = np.empty_like(weight) if p else weight
    out = np.empty((len(indptr) - 1, z.shape[1], z.shape[2]), z.dtype)
    _softmax_aggregate(*_graph(chunks, indptr, indices), total, z, readonly(edge_keys),
                       np.uint64(key),
                       *dropout_args(p, z.dtype), weight, kept, out)
    return weight, kept, out.reshape(len(out), -1)


def softmax_grad_alpha(indptr, indices, g, z, kept, chunks) -> tuple[np.ndarray, np.ndarray]:
    """``(alpha dL/dalpha [E, H], its sum over each row [N, H])`` for ``g = dL/dy``."""
    grad = np.empty_like(kept)
    dot = np.empty((len(indptr) - 1, z.shape[1]), z.dtype)
    _softmax_grad_alpha(*_graph(chunks, indptr, indices), g, z, kept, grad, dot)
    return grad, dot


def softmax_grad_logits(indptr, indices, s, t, slope: float, alpha, dot, grad, chunks
                        ) -> np.ndarray:
    """``grad`` (``alpha dL/dalpha``) becomes ``dL/d(s_u + t_v)`` in place; returns ``dL/dt``."""
    grad_t = np.empty_like(t)
    _softmax_grad_logits(*_graph(chunks, indptr, indices), s, t, s.dtype.type(slope), alpha,
                         dot, grad, grad_t)
    return grad_t


def softmax_grad_sources(transposed, grad_logits, kept, g) -> tuple[np.ndarray, np.ndarray]:
    """``(dL/ds [N, H], dL/dz [N, H, C])`` by sources; ``transposed`` is
    :func:`transposed_order`'s result plus its row chunks."""
    indptr_t, dst_t, position, chunks = transposed
    grad_s = np.empty((len(indptr_t) - 1, g.shape[1]), g.dtype)
    grad_z = np.empty((len(indptr_t) - 1, g.shape[1], g.shape[2]), g.dtype)
    _softmax_grad_sources(*_graph(chunks, indptr_t, dst_t, position), grad_logits, kept, g,
                          grad_s, grad_z)
    return grad_s, grad_z
