"""A model made ready to train on a graph: its layers and dropouts keyed, torch's own
dropout refused on partitions, activations optionally stored in bf16."""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn
from torch.overrides import TorchFunctionMode

from ..errors import DistGNNError
from .aggregate import Neighbourhood
from .graph_layer import GraphLayer
from .keyed_dropout import KeyedDropout
from .saved_activations import store_in_bf16


def assign_keys(model: nn.Module) -> None:
    """Number ``model``'s graph layers and :class:`KeyedDropout` modules (their keys).

    They are numbered by their positions in ``model.modules()`` (layers and dropouts counted
    apart, each from 0): the keys their exchange state and dropout masks are kept under, the
    same on every rank.  Idempotent; a module that appears twice in the model gets one key.
    """
    for kind in (GraphLayer, KeyedDropout):
        for key, module in enumerate(m for m in model.modules() if isinstance(m, kind)):
            module.key = key


TORCH_DROPOUTS = (nn.Dropout, nn.Dropout1d, nn.Dropout2d, nn.Dropout3d, nn.AlphaDropout,
                  nn.FeatureAlphaDropout)


DROPOUT_FUNCTIONS = {F.dropout, F.dropout1d, F.dropout2d, F.dropout3d, F.alpha_dropout,
                     F.feature_alpha_dropout, torch.dropout, torch.alpha_dropout,
                     torch.feature_dropout, torch.feature_alpha_dropout}


TORCH_DROPOUT_PROBLEM = ("its masks differ between a vertex's clones on different ranks, so a "
                         "partitioned run would train another model: use "
                         "distgnn.nn.KeyedDropout")


class _FunctionalDropoutCheck(TorchFunctionMode):
    """Refuses a torch dropout function that drops something (``training`` true, ``p > 0``)."""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func in DROPOUT_FUNCTIONS:
            p = args[1] if len(args) > 1 else kwargs.get("p", 0.5)
            on = args[2] if len(args) > 2 else kwargs.get("training", kwargs.get("train", True))
            if on and p:
                raise DistGNNError(f"the model calls torch's {func.__name__}: "
                                   f"{TORCH_DROPOUT_PROBLEM}")
        return func(*args, **kwargs)


def prepare(model: nn.Module, g: Neighbourhood, bf16_activations: bool = False) -> None:
    """Make ``model`` ready to train on ``g``.

    It runs :func:`assign_keys`; with ``bf16_activations``, stores what its training passes
    keep for the backward pass in bf16 (:mod:`distgnn.nn.saved_activations`); and on a
    partition refuses torch's own dropout, as a module at once and as a function
    (``F.dropout``) in the first training forward pass, with one line naming it (unless the
    model keys torch's dropout itself, ``keys_torch_dropout``: :class:`distgnn.pyg.PyGModel`).
    """
    assign_keys(model)
    if bf16_activations:
        store_in_bf16(model, lambda: g.training)
    if not g.exchange.combines_clones or getattr(model, "keys_torch_dropout", False):
        return
    for name, module in model.named_modules():
        if isinstance(module, TORCH_DROPOUTS) and module.p:
            raise DistGNNError(f"{name or 'the model'} is a torch.nn.{type(module).__name__}: "
                               f"{TORCH_DROPOUT_PROBLEM}")
    check = _FunctionalDropoutCheck()

    def enter(module, inputs):
        if g.training:
            check.__enter__()

    def leave(module, inputs, output):
        if g.training:
            check.__exit__(None, None, None)
            for hook in hooks:
                hook.remove()

    hooks = [model.register_forward_pre_hook(enter),
             model.register_forward_hook(leave, always_call=True)]
