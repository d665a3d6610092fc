"""The dropout layer of models trained on partitions: its mask is a function of the vertex's
global id, so every clone of a vertex drops alike (:mod:`.dropout` computes it)."""
from __future__ import annotations

import torch
from torch import nn

from ..kernels.dropout import dropout_key
from .aggregate import Neighbourhood
from .dropout import (
    bias_relu_dropout,
    bias_relu_dropout_project,
    check_dropout,
    fusable,
    projectable,
    vertex_dropout,
)
from .graph_layer import relu


class KeyedDropout(nn.Module):
    r"""Dropout whose masks every clone of a vertex draws alike.

    The mask of ``h`` ``[N, d]`` is a function of (seed, epoch, this module's key, global
    vertex id, column) (:mod:`distgnn.nn.dropout`), so a partitioned run drops exactly what
    the whole graph drops and trains the same model.  Use it where a PyG model uses
    ``F.dropout``, whose masks differ from rank to rank (in a model trained on partitions,
    ``torch.nn.Dropout`` and ``F.dropout`` are refused).

    .. math::
        \mathbf{h}'_{v,f} = \frac{m_{v,f}}{1 - p}\, \mathbf{h}_{v,f},\qquad
        m_{v,f} \sim \operatorname{Bernoulli}(1 - p) \text{ keyed by }
        (\text{seed}, \text{epoch}, \text{key}, v, f)

    Active while ``g`` trains (:meth:`~distgnn.nn.aggregate.Neighbourhood.set_epoch`); the
    identity in evaluation.  The seed is the run's (``TrainConfig.seed``).

    Args:
        p (float, optional): probability of dropping an element. (default: ``0.5``)

    Shapes:
        - **input:** graph ``g`` over ``N`` vertices, ``h`` ``[N, d]``, optional ``key``
        - **output:** ``[N, d]``
    """

    def __init__(self, p: float = 0.5):
        super().__init__()
        check_dropout(torch.empty(0, 0), (), p)
        self.p = p
        self.key: int | None = None

    def extra_repr(self) -> str:
        return f"p={self.p}"

    def forward(self, g: Neighbourhood, h: torch.Tensor, key: int | None = None
                ) -> torch.Tensor:
        check_dropout(h, g.global_ids, self.p)
        if not g.training or not self.p:
            return h
        key = g.claim("dropout", self, key)
        return vertex_dropout(h, g.vertex_ids(h.device), self.p,
                              dropout_key(g.seed, g.epoch, key))

    def after_relu(self, g: Neighbourhood, y: torch.Tensor, bias: torch.Tensor | None = None,
                   key: int | None = None, overwrite: bool = False) -> torch.Tensor:
        r"""``self(g, relu(y + bias))``, the bias, the ReLU and this dropout in one pass.

        What a model applies between two layers: the previous layer's product ``y`` (its
        bias left out), its activation and this layer's dropout.  On the CPU it is
        :func:`~distgnn.nn.dropout.bias_relu_dropout` (the backward pass keeps a bit per
        element); elsewhere the separate operations.
        The values and the mask are those of the separate operations (in evaluation, where
        nothing drops, ``relu(y + bias)``).  ``overwrite``: ``y`` is the product's own output,
        which nothing else reads (what a layer's epilogue receives), and the result may be
        written over it.

        Shapes: ``y`` ``[N, d]``, ``bias`` ``[d]`` or ``None``; returns ``[N, d]``.
        """
        check_dropout(y, g.global_ids, self.p)
        if not fusable(y, bias):
            return self(g, relu(y if bias is None else y + bias), key)
        p, mask_key = 0.0, 0
        if g.training and self.p:
            p, mask_key = self.p, dropout_key(g.seed, g.epoch, g.claim("dropout", self, key))
        return bias_relu_dropout(y, bias, g.global_ids, p, mask_key, overwrite)

    def after_relu_project(self, g: Neighbourhood, y: torch.Tensor, bias: torch.Tensor | None,
                           weight: torch.Tensor, key: int | None = None,
                           overwrite: bool = False) -> torch.Tensor:
        r"""``self(g, relu(y + bias)) W^T``: :meth:`after_relu` and a projection, one pass.

        What a model applies between a hidden layer and a last layer that projects first
        (``W`` ``[c, d]``, few classes): on the CPU
        :func:`~distgnn.nn.dropout.bias_relu_dropout_project` (the activation is multiplied
        while its row is in registers, and the backward pass is one pass too); elsewhere
        :meth:`after_relu` and ``F.linear``.  The same values to rounding; ``overwrite`` as
        for :meth:`after_relu`.

        Shapes: ``y`` ``[N, d]``, ``bias`` ``[d]`` or ``None``, ``weight`` ``[c, d]``; returns
        ``[N, c]``.
        """
        check_dropout(y, g.global_ids, self.p)
        if not projectable(y, bias, weight):
            return torch.nn.functional.linear(self.after_relu(g, y, bias, key, overwrite),
                                              weight)
        p, mask_key = 0.0, 0
        if g.training and self.p:
            p, mask_key = self.p, dropout_key(g.seed, g.epoch, g.claim("dropout", self, key))
        return bias_relu_dropout_project(y, bias, weight, g.global_ids, p, mask_key,
                                         overwrite)
