"""What every graph layer shares: the base class that holds its exchange key,
Glorot initialisation, the projection on the narrower side, and the ReLU that keeps a mask."""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from ..data.graph import GraphError
from .aggregate import Neighbourhood
from .backends import check_tensor
from .precision import product_operand


def glorot(layer: nn.Module) -> None:
    """Glorot-uniform weights and zero biases, as in Kipf & Welling's and PyG's layers."""
    for name, p in layer.named_parameters():
        if p.dim() > 1:
            nn.init.xavier_uniform_(p)
        else:
            nn.init.zeros_(p)


class GraphLayer(nn.Module):
    """A layer that aggregates over the graph, hence exchanges on a partition.

    It holds the ``key`` its exchange state is kept under (:func:`assign_keys`).

    A layer of your own subclasses it and aggregates through the view ``enter`` returns::

        def forward(self, g, h, key=None):
            g = g.enter(self, self.lin.weight, key, h=h)  # checks h, takes the layer's key
            return self.lin(g.reduce(h, "mean"))
    """

    key: int | None = None

    def __call__(self, *args, **kwargs):
        """The module's call, once the graph is known to be one: a layer called as
        ``conv(h)``, ``conv(None, h)`` or ``conv(h, g)`` is refused in one line naming the
        call it takes."""
        g = args[0] if args else kwargs.get("g")
        if not isinstance(g, Neighbourhood):
            raise GraphError(f"{type(self).__name__} is called as conv(g, h, ...) with g the "
                             "graph (a distgnn.Neighbourhood: run.g, or the g that a model's "
                             f"forward(g, x) receives); its first argument is a "
                             f"{type(g).__name__}")
        return super().__call__(*args, **kwargs)


def add_bias(y: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    """``y + b`` (``y`` when there is no bias): a layer's epilogue unless a model gives its
    own."""
    return y if bias is None else y + bias


def aggregate_and_project(conv, weight: torch.Tensor, bias: torch.Tensor | None,
                          g: Neighbourhood, h: torch.Tensor | None,
                          aggregated: torch.Tensor | None, epilogue=None,
                          projected: torch.Tensor | None = None,
                          dropout=None) -> torch.Tensor:
    """``epilogue(agg(h) W^T, b)``, computed on the narrower side of ``conv.aggregate``.

    That is ``agg(h W^T)`` when the layer projects first (equal for the linear
    aggregators), else one matrix product; ``aggregated``: ``agg(h)``, known;
    ``projected``: ``h W^T``, known (a layer that projects first, whose input's epilogue
    made it: :meth:`~distgnn.nn.keyed_dropout.KeyedDropout.after_relu_project`; ``h`` is
    then ``None``).  The ``epilogue`` defaults to :func:`add_bias`, which the product then
    does itself (a pass fewer over the output); a model passes its own to fuse what follows
    the layer (:meth:`~distgnn.nn.keyed_dropout.KeyedDropout.after_relu`).  The epilogue
    receives a tensor that nothing else holds (the product's or the aggregation's output),
    so it may write its own output over it.  ``dropout(g, h)``: the layer's input dropout
    (:class:`~distgnn.nn.keyed_dropout.KeyedDropout`), applied here so that the dropped
    copy is held only until it is aggregated (or projected), not through the product.
    """
    if projected is not None:
        check_tensor("projected", projected, (g.num_nodes, weight.shape[0]))
        return (epilogue or add_bias)(conv.aggregate(g, projected), bias)
    if dropout is not None:
        # the caller keeps ``h`` (the features); the dropped copy is this frame's only
        h = dropout(g, h)
    if aggregated is None and conv.project_first:
        return (epilogue or add_bias)(conv.aggregate(g, F.linear(h, weight)), bias)
    agg = conv.aggregate(g, h) if aggregated is None else aggregated
    h = None  # a dropped input is freed before the cast
    # cast before the product: float32 sums are freed before the product's output exists
    agg = product_operand(agg)
    if epilogue is None:
        return F.linear(agg, weight, bias)
    y = F.linear(agg, weight)
    del agg  # what the product keeps (its operand) it holds itself
    return epilogue(y, bias)


class _MaskReLU(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        out = torch.relu(x)
        ctx.save_for_backward(out > 0)
        return out

    @staticmethod
    def backward(ctx, grad):
        (kept,) = ctx.saved_tensors
        return torch.where(kept, grad, 0.0)


def relu(x: torch.Tensor) -> torch.Tensor:
    r"""``max(x, 0)`` whose backward pass keeps a bool mask instead of the output.

    The mask marks the positive elements (one byte each, where the output takes four):

    .. math::
        \frac{\partial L}{\partial x} = \frac{\partial L}{\partial y} \odot [y > 0]

    the same gradient as ``torch.relu``'s, bit for bit.  Between layers of a GNN the output
    is not kept by anything else (the next layer's dropout makes a new tensor from it), so
    this frees ``3 N d`` bytes of what the backward pass holds per hidden layer of width
    ``d`` -- on a 2-layer GraphSAGE of hidden 256 the backward pass's peak falls by about a
    fifth.  Without autograd it is ``torch.relu``.
    """
    if not (torch.is_grad_enabled() and x.requires_grad):
        return torch.relu(x)
    return _MaskReLU.apply(x)
