"""Dropout whose mask is a function of (seed, step, layer, global vertex id, feature).

A partition of the graph holds its vertices under local ids; keying the mask by the
*global* id means every clone of a vertex, on every rank, draws the same mask as the
single-socket run, so distributed training with dropout follows the same trajectory.
It is also several times faster than ``torch.nn.functional.dropout`` on CPU, whose
Mersenne-Twister draws dominate a small model's epoch.

Mask: with ``c = g * d + f`` and ``k`` a 64-bit key hashed from ``(seed, step, layer)``,

.. math::
    m_{g,f} = \\frac{1}{1 - p}\\,\\big[\\operatorname{splitmix64}(k + c) \\gg 40
        \\;\\ge\\; \\lfloor p \\cdot 2^{24} \\rfloor\\big]

so an element is kept with probability ``1 - p`` (to within ``2^{-24}``).
"""
from __future__ import annotations

import numpy as np
import torch

from ..data.graph import GraphError
from ..kernels.dropout import (
    bias_relu_masked_scale,
    dropout_keep_torch,
    masked_scale,
    masked_scale_backward,
)
from ..kernels.lanes import BF16
from ..kernels import projection
from . import buffers


def check_dropout(x, global_ids, p: float) -> None:
    """Refuse ``p`` outside ``[0, 1)`` and an ``x`` (array or tensor) that is not
    ``[len(global_ids), d]``: the kernel reads ``global_ids[i]`` for every row ``i`` of ``x``
    without bounds checks.  O(1)."""
    if not 0 <= p < 1:  # also NaN
        raise GraphError(f"dropout probability must be in [0, 1), got {p}")
    if x.ndim != 2 or x.shape[0] != len(global_ids):
        raise GraphError(f"dropout input has shape [{', '.join(map(str, x.shape))}], expected "
                         f"[{len(global_ids)}, d] (one row per vertex)")


def apply_dropout_mask(x: np.ndarray, global_ids: np.ndarray, p: float, key: int,
                       width: int | None = None, first: int = 0) -> np.ndarray:
    """``x * mask``, the mask ``0`` or ``1/(1-p)``.

    ``x`` is float (or bf16 bits) ``[len(global_ids), d]``.

    ``x`` may be columns ``first .. first + d`` of rows ``width`` wide (a panel): they take
    the mask of those columns of the whole rows."""
    check_dropout(x, global_ids, p)
    out = buffers.empty_like(x)
    scale = (np.float32 if x.dtype == BF16 else x.dtype.type)(1.0 / (1.0 - p))
    masked_scale(x, np.ascontiguousarray(global_ids, dtype=np.int64), np.uint64(key),
                 np.uint64(int(p * (1 << 24))), scale, out,
                 x.shape[1] if width is None else width, first)
    return out


class VertexDropout(torch.autograd.Function):
    """Keyed dropout as an autograd function: one mask, forward and backward.

    Forward and backward both multiply by the same mask, recomputed from the key each
    time: by the Numba kernel on the CPU (float32, float64, or bf16 rows kept bf16: the
    features under ``--precision bf16-mixed``), by a Triton kernel on a GPU
    (:func:`distgnn.kernels.gpu.keyed_dropout`).  Without Triton, a GPU computes it with
    torch operations and keeps it as a bool tensor for the backward pass.
    """

    @staticmethod
    def forward(ctx, h, ids, p, key):
        key = int(key)
        ctx.args = (ids, p, key)
        if h.device.type == "cpu":
            return as_tensor(apply_dropout_mask(rows(h.contiguous()), ids, p, key), h.dtype)
        from ..kernels import gpu

        if gpu.available():
            return gpu.keyed_dropout(h, ids, p, key)
        keep = dropout_keep_torch(ids, h.shape[1], p, key)
        ctx.args = (keep, 1.0 / (1.0 - p))
        return h * keep * ctx.args[1]

    @staticmethod
    def backward(ctx, grad):
        if len(ctx.args) == 2:  # the torch operations' kept mask and scale
            keep, scale = ctx.args
            return grad * keep * scale, None, None, None
        return VertexDropout.forward(ctx, grad, *ctx.args), None, None, None


def vertex_dropout(h: torch.Tensor, ids, p: float, key: int) -> torch.Tensor:
    """Dropout of ``h`` ``[N, d]`` with the mask of the module docstring for row ids ``ids``
    ``[N]``: an int64 numpy array for a CPU ``h``, an int64 tensor on ``h``'s device for
    another (:meth:`distgnn.nn.aggregate.Neighbourhood.vertex_ids` gives either)."""
    check_dropout(h, ids, p)
    if p == 0.0:
        return h
    if h.device.type != "cpu" and not isinstance(ids, torch.Tensor):
        ids = torch.from_numpy(np.asarray(ids, dtype=np.int64)).to(h.device)
    # a numpy uint64, not a Python int: torch's profiler records a function's arguments as
    # int64 and fails on keys of 2^63 and more
    return VertexDropout.apply(h, ids, p, np.uint64(key))


class BiasReLUDropout(torch.autograd.Function):
    """``vertex_dropout(relu(x + b))`` on the CPU in one pass over ``x`` forward and one over
    the gradient backward, keeping a bit per element between them
    (:func:`bias_relu_dropout`)."""

    @staticmethod
    def forward(ctx, x, bias, ids, p, key, overwrite):
        x = x.detach().contiguous()
        # a bf16 x (a product's output under autocast) is computed with a float32 bias
        values = np.float32 if x.dtype == torch.bfloat16 else x.numpy().dtype
        b = (np.zeros(x.shape[1], values) if bias is None
             else bias.detach().contiguous().numpy())
        out, kept = bias_relu_dropout_rows(rows(x), b, ids, p, key, overwrite)
        ctx.p, ctx.has_bias, ctx.bias_dtype = p, bias is not None, b.dtype
        ctx.save_for_backward(torch.from_numpy(kept))
        return as_tensor(out, x.dtype)

    @staticmethod
    def backward(ctx, grad):
        (kept,) = ctx.saved_tensors
        grad_x, grad_bias = relu_dropout_backward_rows(rows(grad.contiguous()), kept.numpy(),
                                                       ctx.p, ctx.bias_dtype)
        return (as_tensor(grad_x, grad.dtype),
                torch.from_numpy(grad_bias) if ctx.has_bias else None, None, None, None, None)


class BiasReLUDropoutProject(torch.autograd.Function):
    """:func:`bias_relu_dropout_project`'s autograd function.

    ``vertex_dropout(relu(x + b)) W^T`` on the CPU in one pass over ``x`` forward and one
    over the kept activation backward.  The backward pass writes ``dL/dx`` over the kept activation, each panel after its last
    read, so it runs once (a second backward pass through the same graph is refused)."""

    @staticmethod
    def forward(ctx, x, bias, weight, ids, p, key, overwrite):
        x = x.detach().contiguous()
        d, c = x.shape[1], weight.shape[0]
        b = (np.zeros(d, np.float32) if bias is None
             else bias.detach().contiguous().numpy())
        kept = rows(x) if overwrite else buffers.empty(tuple(x.shape), rows(x).dtype)
        z = buffers.empty((x.shape[0], c), rows(x).dtype)
        projection.bias_relu_dropout_project(
            rows(x), b, ids, np.uint64(int(key)), np.uint64(int(p * (1 << 24))),
            np.float32(1.0 / (1.0 - p)), weight.detach().t().contiguous().numpy(), kept, z)
        ctx.p, ctx.has_bias, ctx.spent = p, bias is not None, False
        ctx.save_for_backward(as_tensor(kept, x.dtype), weight)
        return as_tensor(z, x.dtype)

    @staticmethod
    def backward(ctx, grad_z):
        if ctx.spent:
            raise RuntimeError("bias_relu_dropout_project's backward pass wrote the input "
                               "gradient over what it kept: it cannot run twice "
                               "(retain_graph)")
        ctx.spent = True
        kept, weight = ctx.saved_tensors
        grad_bias = np.empty(kept.shape[1], np.float32)
        grad_weight = np.empty(tuple(weight.shape), np.float32)
        projection.relu_dropout_project_backward(
            rows(grad_z.contiguous()), rows(kept), weight.detach().contiguous().numpy(),
            np.float32(1.0 / (1.0 - ctx.p)), rows(kept), grad_bias, grad_weight)
        return (kept, torch.from_numpy(grad_bias) if ctx.has_bias else None,
                torch.from_numpy(grad_weight), None, None, None, None)


def projectable(x: torch.Tensor, bias: torch.Tensor | None, weight: torch.Tensor) -> bool:
    """Whether :func:`bias_relu_dropout_project` takes ``x``, ``bias`` and ``weight``: CPU
    tensors, ``x`` float32 or bf16 (a product's output under autocast), the bias and the
    weight float32."""
    return (x.device.type == "cpu" and x.dtype in (torch.float32, torch.bfloat16)
            and weight.dtype == torch.float32 and weight.device.type == "cpu"
            and (bias is None or (bias.dtype == torch.float32 and bias.device.type == "cpu")))


def bias_relu_dropout_project(x: torch.Tensor, bias: torch.Tensor | None,
                              weight: torch.Tensor, ids, p: float, key: int,
                              overwrite: bool = False) -> torch.Tensor:
    r"""``vertex_dropout(relu(x + b), ids, p, key) W^T`` in one pass.

    A hidden layer's epilogue and the next layer's projection, for the tensors
    :func:`projectable` accepts.

    .. math::
        \mathbf{h} = \mathbf{m} \odot \max(\mathbf{x} + \mathbf{b}, 0),\qquad
        \mathbf{z} = \mathbf{h} \mathbf{W}^\top

    The values of :func:`bias_relu_dropout` followed by ``F.linear(h, W)`` to rounding (the
    products summed in float32 in another order; a bf16 ``h`` is multiplied as stored, by
    the float32 weight).  The backward pass keeps ``h`` (the product's input, which
    ``F.linear`` would keep too) and no bits: ``[h > 0]`` is the ReLU's and the mask's
    gradient together (:mod:`distgnn.kernels.projection`); it writes ``dL/dx`` over ``h``.
    With ``overwrite``, ``h`` is written over ``x`` (a product's output that nothing else
    reads): the epilogue then adds only ``z`` to what is held.

    Shapes: ``x`` ``[N, d]``, ``bias`` ``[d]`` or ``None``, ``weight`` ``[c, d]``, ``ids``
    int64 numpy ``[N]``; returns ``[N, c]`` of ``x``'s dtype.
    """
    check_dropout(x, ids, p)
    return BiasReLUDropoutProject.apply(x, bias, weight, ids, p, np.uint64(key), overwrite)


def bias_relu_dropout_rows(x: np.ndarray, bias: np.ndarray, ids, p: float, key: int,
                           overwrite: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """``(y, kept)``: :func:`bias_relu_dropout` of numpy rows.

    ``x`` ``[n, d]`` (float, or bf16 bits) holds the rows whose global ids are ``ids``
    ``[n]``; ``kept`` holds the bits of ``y > 0`` ``[n, ceil(d / 8)]`` uint8 that the
    backward pass reads (:func:`relu_dropout_backward_rows`); ``y`` is written over ``x``
    with ``overwrite``."""
    out = x if overwrite else buffers.empty(tuple(x.shape), x.dtype)
    kept = buffers.empty((x.shape[0], (x.shape[1] + 7) // 8), np.uint8)
    bias_relu_masked_scale(x, bias, ids, np.uint64(int(key)), np.uint64(int(p * (1 << 24))),
                           bias.dtype.type(1.0 / (1.0 - p)), out, kept)
    return out, kept


def relu_dropout_backward_rows(grad: np.ndarray, kept: np.ndarray, p: float, bias_dtype
                               ) -> tuple[np.ndarray, np.ndarray]:
    """``(grad_x, grad_bias)`` of :func:`bias_relu_dropout_rows` from its bits ``kept``:
    ``grad / (1 - p)`` where a bit is set, else 0, and its column sums ``[d]``."""
    grad_x = buffers.empty(tuple(grad.shape), grad.dtype)
    grad_bias = np.empty(grad.shape[1], bias_dtype)
    masked_scale_backward(grad, kept, np.dtype(bias_dtype).type(1.0 / (1.0 - p)), grad_x,
                          grad_bias)
    return grad_x, grad_bias


def rows(t: torch.Tensor) -> np.ndarray:
    """``t``'s memory as the kernels read it (bf16 as uint16 bit patterns; no copy)."""
    t = t.detach()
    return t.view(torch.int16).numpy().view(BF16) if t.dtype == torch.bfloat16 else t.numpy()


def as_tensor(a: np.ndarray, dtype: torch.dtype) -> torch.Tensor:
    """The kernels' output ``a`` as a tensor of ``dtype`` (bf16 bit patterns viewed as bf16)."""
    t = torch.from_numpy(a.view(np.int16) if dtype == torch.bfloat16 else a)
    return t.view(torch.bfloat16) if dtype == torch.bfloat16 else t


def fusable(x: torch.Tensor, bias: torch.Tensor | None) -> bool:
    """Whether :func:`bias_relu_dropout` takes ``x`` and ``bias``: CPU, float32 or float64
    (the bias of ``x``'s type), or bf16 (a product's output under autocast; a float32
    bias)."""
    if x.device.type != "cpu" or x.dtype not in (torch.float32, torch.float64, torch.bfloat16):
        return False
    want = torch.float32 if x.dtype == torch.bfloat16 else x.dtype
    return bias is None or (bias.dtype == want and bias.device.type == "cpu")


def bias_relu_dropout(x: torch.Tensor, bias: torch.Tensor | None, ids, p: float, key: int,
                      overwrite: bool = False) -> torch.Tensor:
    r"""``vertex_dropout(relu(x + b), ids, p, key)`` in one pass (what follows a product).

    For the tensors :func:`fusable` accepts.

    .. math::
        \mathbf{y} = \mathbf{m} \odot \max(\mathbf{x} + \mathbf{b}, 0),\qquad
        \frac{\partial L}{\partial \mathbf{x}} = \frac{\partial L}{\partial \mathbf{y}}
            \odot \tfrac{1}{1-p} [\mathbf{y} > 0],\qquad
        \frac{\partial L}{\partial \mathbf{b}} = \sum_v
            \frac{\partial L}{\partial \mathbf{x}_v}

    with ``m`` the keyed mask of the module docstring (``p = 0``: all ones).  One Numba pass
    computes ``y`` and a bit per element, ``[y > 0]``, which is all the backward pass keeps
    (``N d / 8`` bytes, where a ReLU's bool mask takes ``N d`` and its output ``4 N d``);
    the backward pass reads the gradient and the bits once and gives the bias gradient from
    the same pass (summed in float64 in a fixed order).  The values are those of the
    separate operations, bit for bit, but for the bias gradient's order of summation.
    With ``overwrite``, ``y`` is written over ``x`` (a product's output that nothing else
    reads; no tensor of its size is added to what is held).

    Shapes: ``x`` ``[N, d]``, ``bias`` ``[d]`` or ``None``, ``ids`` int64 numpy ``[N]``;
    returns ``[N, d]``.
    """
    check_dropout(x, ids, p)
    return BiasReLUDropout.apply(x, bias, ids, p, np.uint64(key), overwrite)
