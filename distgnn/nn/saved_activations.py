r"""Activations kept for the backward pass stored in bf16 (``--aggregation-precision bf16``).

Autograd keeps, per layer, the tensors its backward needs (a linear layer's input, a
ReLU's output): for a 2-layer GraphSAGE that is ``N (d_0 + 2 d_1)`` floats, the largest
part of a training step's memory.  Under :func:`store_in_bf16` each float32 tensor of at
least :data:`MIN_ELEMENTS` elements that is saved for the backward pass, other than the
model's parameters, is kept as bfloat16 and widened back to float32 when the backward pass
reads it:

.. math::
    \tilde{\mathbf{a}} = \operatorname{fp32}(\operatorname{bf16}(\mathbf{a}))

so the gradients differ from float32 storage by the rounding of ``a`` (a relative error of
at most ``2^{-9}`` per element) and the forward pass not at all.  The memory of the saved
tensors halves.  A tensor saved twice in one forward pass is stored once.
"""
from __future__ import annotations

import weakref

import torch
from torch import nn

# smaller saved tensors (biases, per-vertex scalars, small weights) are not worth a copy
MIN_ELEMENTS = 1 << 16


def _storage_key(t: torch.Tensor) -> tuple:
    return (t.untyped_storage().data_ptr(), t.storage_offset(), tuple(t.shape), t.stride(),
            t._version)


def saved_in_bf16(parameters: set[int], packed: dict):
    """The ``saved_tensors_hooks`` context of the module docstring.

    ``parameters``: the storage addresses of the tensors kept exact (the model's parameters);
    ``packed``: the bf16 copies made so far in this pass, each as (weak reference to the
    tensor it was made from, copy), to clear when the pass ends (autograd holds the copies).
    """

    def pack(t: torch.Tensor):
        if (t.dtype != torch.float32 or t.numel() < MIN_ELEMENTS
                or t.untyped_storage().data_ptr() in parameters):
            return t, False
        key = _storage_key(t)
        # the address names the storage only while the tensor first saved under it lives:
        # an intermediate freed within the pass leaves its address to the next allocation
        first, narrow = packed.get(key, (lambda: None, None))
        if first() is None:
            narrow = t.detach().to(torch.bfloat16)
            packed[key] = weakref.ref(t), narrow
        return narrow, True

    def unpack(saved):
        t, narrowed = saved
        return t.to(torch.float32) if narrowed else t

    return torch.autograd.graph.saved_tensors_hooks(pack, unpack)


def store_in_bf16(model: nn.Module, is_training) -> None:
    """Keep what ``model``'s training forward passes save for the backward pass in bf16
    (see the module docstring).  ``is_training()``: whether the pass now starting trains
    (evaluation saves nothing); the hooks are entered only then, and with autograd on."""
    state = {}

    def enter(module, inputs):
        if is_training() and torch.is_grad_enabled():
            parameters = {p.untyped_storage().data_ptr() for p in model.parameters()}
            state["packed"] = {}
            state["hooks"] = saved_in_bf16(parameters, state["packed"])
            state["hooks"].__enter__()

    def leave(module, inputs, output):
        hooks = state.pop("hooks", None)
        if hooks is not None:
            hooks.__exit__(None, None, None)
            state.pop("packed").clear()

    model.register_forward_pre_hook(enter)
    model.register_forward_hook(leave, always_call=True)
