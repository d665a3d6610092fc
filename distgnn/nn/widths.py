"""The widths a model's layers compute at, and those its split-vertex exchanges carry."""
from __future__ import annotations

__all__ = ["aggregation_widths", "exchange_widths", "layer_widths"]


def layer_widths(num_features: int, hidden: int, num_classes: int, layers: int) -> list[int]:
    """``[d_0, ..., d_L] = [F] + [H] * (L - 1) + [C]``: the widths of a stack of ``L`` layers
    (the built-in models', :mod:`distgnn.nn.models`), what their aggregations and exchanges
    are sized by.  The one place they are computed."""
    return [num_features] + [hidden] * (layers - 1) + [num_classes]


def aggregation_widths(num_features: int, hidden: int, num_classes: int, layers: int
                       ) -> list[int]:
    """Width each layer aggregates (and exchanges) at: the narrower side of its weight (a
    linear aggregation commutes with the projection, :mod:`distgnn.nn`)."""
    d = layer_widths(num_features, hidden, num_classes, layers)
    return [min(a, b) for a, b in zip(d[:-1], d[1:])]


def exchange_widths(num_features: int, hidden: int, num_classes: int, layers: int,
                    precompute_first: bool = False, backward: bool = True) -> list[int]:
    """Widths of the split-vertex exchanges of one training epoch.

    The list holds every layer's forward aggregation, then (``backward``) the gradients',
    without the first layer's when it aggregates the input features (``F <= hidden``: they
    need no gradient).  With the first aggregation precomputed
    (``--precompute-first-aggregation``) neither pass exchanges at the first layer: its one
    exchange, ``F`` wide, is made once before the first epoch.
    """
    forward = aggregation_widths(num_features, hidden, num_classes, layers)
    if precompute_first:
        forward = forward[1:]
        return forward * 2 if backward else forward
    first = hidden if layers > 1 else num_classes
    return forward + ((forward[1:] if num_features <= first else forward) if backward else [])
