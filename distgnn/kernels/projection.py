"""A hidden layer's epilogue fused with the narrow projection of the layer after it.

Forward, for the product ``x`` ``[N, d]`` of a hidden layer, its bias ``b``, the next
layer's keyed dropout (:func:`~distgnn.kernels.dropout.keeps`, scale ``s = 1 / (1 - p)``)
and the next layer's weight ``W`` ``[c, d]``:

.. math::
    \\mathbf{h} = \\mathbf{m} \\odot s \\max(\\mathbf{x} + \\mathbf{b}, 0),\\qquad
    \\mathbf{z} = \\mathbf{h} \\mathbf{W}^\\top

and backward, from ``g = dL/dz`` ``[N, c]`` and the kept ``h``:

.. math::
    \\frac{\\partial L}{\\partial \\mathbf{x}} = s\\,[\\mathbf{h} > 0] \\odot
        \\mathbf{g} \\mathbf{W},\\qquad
    \\frac{\\partial L}{\\partial \\mathbf{b}} = \\sum_v
        \\frac{\\partial L}{\\partial \\mathbf{x}_v},\\qquad
    \\frac{\\partial L}{\\partial \\mathbf{W}} = \\mathbf{g}^\\top \\mathbf{h}

Each is one pass over the rows.  A narrow product (``c`` a few classes) read apart from the
epilogue reads all of ``h`` again for little arithmetic, and the library's GEMMs run these
shapes at a fifth to two fifths of their rate; here each row of ``h`` is multiplied while it
is in registers, ``c`` outputs in panels of :data:`LANES` over :data:`ROWS` rows at a time
(each panel of ``W`` loaded once per block of rows).  ``x``, ``h``, ``z``, ``g`` and
``dL/dx`` may hold bf16 bit patterns (widened exactly, rounded once on store); the sums
are float32 within a block of :data:`BLOCK_ROWS` rows and float64 over the blocks, in a
fixed order.
"""
from __future__ import annotations

import numba
import numpy as np

from .dropout import EPILOGUE_ROWS, bias_relu_mask_row
from .lanes import as_float, load, scale, scaled_add, store, stored, where_positive, zeros

LANES = 16  # outputs per register panel (one AVX-512 register of float32)
ROWS = 4  # rows sharing each loaded panel of the weight
BLOCK_ROWS = 4096  # rows per partial sum of the backward pass's weight and bias gradients


@numba.njit(cache=True, parallel=True, nogil=True)
def bias_relu_dropout_project(x, bias, global_ids, key, threshold, s, weight_t, out, z):
    """``out = h`` and ``z = h W^T`` of the module docstring; ``weight_t`` is ``W^T``
    ``[d, c]`` float32 (``threshold`` 0 keeps every element without hashing); ``out`` may
    be ``x``."""
    n, d = x.shape
    width = np.uint64(d)
    for task in numba.prange((n + EPILOGUE_ROWS - 1) // EPILOGUE_ROWS):
        row = np.empty(d, bias.dtype)
        end = min(n, (task + 1) * EPILOGUE_ROWS)
        for first in range(task * EPILOGUE_ROWS, end, ROWS):
            rows = min(end, first + ROWS) - first
            for i in range(first, first + rows):
                bias_relu_mask_row(x, bias, i, key + np.uint64(global_ids[i]) * width,
                                   threshold, s, row, out)
            _project_rows(out, weight_t, first, rows, z)


@numba.njit(cache=True, inline="always")
def _project_rows(out, weight_t, first, rows, z):
    """``z[first:first + rows] = out[first:first + rows] W^T``, ``rows <= ROWS`` (the rows as
    stored: a bf16 row is multiplied as rounded)."""
    d, c = weight_t.shape
    for col in range(0, c, LANES):
        m = min(LANES, c - col)
        if rows == ROWS:
            a0 = zeros(weight_t, LANES)
            a1, a2, a3 = a0, a0, a0
            for f in range(d):
                w = load(weight_t, f, col, m, LANES)
                a0 = scaled_add(a0, as_float(out[first, f]), w)
                a1 = scaled_add(a1, as_float(out[first + 1, f]), w)
                a2 = scaled_add(a2, as_float(out[first + 2, f]), w)
                a3 = scaled_add(a3, as_float(out[first + 3, f]), w)
            store(z, first, col, m, a0)
            store(z, first + 1, col, m, a1)
            store(z, first + 2, col, m, a2)
            store(z, first + 3, col, m, a3)
        else:
            for i in range(first, first + rows):
                a = zeros(weight_t, LANES)
                for f in range(d):
                    a = scaled_add(a, as_float(out[i, f]), load(weight_t, f, col, m, LANES))
                store(z, i, col, m, a)


@numba.njit(cache=True, inline="always")
def _gradient_panel(g, out, weight, s, i, col, m, grad_x, pb, pw):
    """Row ``i``'s panel ``col:col + m`` of ``dL/dx`` (stored), added to the bias partial
    ``pb``, and its products ``g_ik h_i`` added to the weight partial ``pw``."""
    h = load(out, i, col, m, LANES)
    acc = zeros(weight, LANES)
    for k in range(weight.shape[0]):
        gk = as_float(g[i, k])
        acc = scaled_add(acc, gk, load(weight, k, col, m, LANES))
        store(pw, k, col, m, scaled_add(load(pw, k, col, m, LANES), gk, h))
    grad = scale(where_positive(acc, h), s)
    store(grad_x, i, col, m, grad)
    store(pb, 0, col, m, scaled_add(load(pb, 0, col, m, LANES), 1.0, grad))


@numba.njit(cache=True, parallel=True, nogil=True)
def relu_dropout_project_backward(g, out, weight, s, grad_x, grad_bias, grad_weight):
    """The three gradients of the module docstring, in one pass over the rows.

    ``grad_x``, ``grad_bias`` ``[d]`` and ``grad_weight`` ``[c, d]`` from ``g`` ``[N, c]``,
    the kept ``out`` ``[N, d]`` and ``weight`` ``W`` ``[c, d]`` float32.  :data:`ROWS` rows
    at a time share each panel of ``W`` and each update of the weight's partial sum."""
    n, d = out.shape
    c = weight.shape[0]
    blocks = (n + BLOCK_ROWS - 1) // BLOCK_ROWS
    partial_bias = np.zeros((blocks, d), np.float32)
    partial_weight = np.zeros((blocks, c, d), np.float32)
    for b in numba.prange(blocks):
        pb, pw = partial_bias[b:b + 1], partial_weight[b]
        end = min(n, (b + 1) * BLOCK_ROWS)
        for i in range(b * BLOCK_ROWS, end, ROWS):
            for col in range(0, d, LANES):
                m = min(LANES, d - col)
                if end - i < ROWS:
                    for r in range(i, end):
                        _gradient_panel(g, out, weight, s, r, col, m, grad_x, pb, pw)
                    continue
                h0, h1 = load(out, i, col, m, LANES), load(out, i + 1, col, m, LANES)
                h2, h3 = load(out, i + 2, col, m, LANES), load(out, i + 3, col, m, LANES)
                a0 = zeros(weight, LANES)
                a1, a2, a3 = a0, a0, a0
                for k in range(c):
                    w = load(weight, k, col, m, LANES)
                    g0, g1 = as_float(g[i, k]), as_float(g[i + 1, k])
                    g2, g3 = as_float(g[i + 2, k]), as_float(g[i + 3, k])
                    a0, a1 = scaled_add(a0, g0, w), scaled_add(a1, g1, w)
                    a2, a3 = scaled_add(a2, g2, w), scaled_add(a3, g3, w)
                    p = scaled_add(scaled_add(load(pw, k, col, m, LANES), g0, h0), g1, h1)
                    store(pw, k, col, m, scaled_add(scaled_add(p, g2, h2), g3, h3))
                a0, a1 = scale(where_positive(a0, h0), s), scale(where_positive(a1, h1), s)
                a2, a3 = scale(where_positive(a2, h2), s), scale(where_positive(a3, h3), s)
                store(grad_x, i, col, m, a0)
                store(grad_x, i + 1, col, m, a1)
                store(grad_x, i + 2, col, m, a2)
                store(grad_x, i + 3, col, m, a3)
                p = scaled_add(scaled_add(load(pb, 0, col, m, LANES), 1.0, a0), 1.0, a1)
                store(pb, 0, col, m, scaled_add(scaled_add(p, 1.0, a2), 1.0, a3))
    for f in range(d):
        total = 0.0
        for b in range(blocks):
            total += partial_bias[b, f]
        grad_bias[f] = total
    for k in range(c):
        for f in range(d):
            total = 0.0
            for b in range(blocks):
                total += partial_weight[b, k, f]
            grad_weight[k, f] = total
