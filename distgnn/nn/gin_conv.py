"""Graph isomorphism layer (Xu et al., ICLR 2019) and the MLP of the built-in GIN."""
from __future__ import annotations

import torch
from torch import nn

from .aggregate import Neighbourhood
from .graph_layer import GraphLayer, aggregate_and_project, glorot


class MLP(nn.Sequential):
    r"""``Linear -> ReLU -> Linear``, Glorot-initialised: the MLP of the built-in GIN.

    .. math::
        \operatorname{MLP}(\mathbf{x}) = \mathbf{W}_2\,
            \operatorname{ReLU}(\mathbf{W}_1 \mathbf{x} + \mathbf{b}_1) + \mathbf{b}_2

    Args:
        in_channels (int): width of ``x``.
        hidden_channels (int): width of the hidden layer.
        out_channels (int): width of the output.
    """

    def __init__(self, in_channels: int, hidden_channels: int, out_channels: int):
        first = nn.Linear(in_channels, hidden_channels, bias=False)
        # b_1 made without a random draw (reset_parameters zeroes it anyway), so the seeded
        # initial weights of the models built from this MLP stay what they were
        first.bias = nn.Parameter(torch.zeros(hidden_channels))
        super().__init__(first, nn.ReLU(), nn.Linear(hidden_channels, out_channels))
        self.reset_parameters()

    def reset_parameters(self) -> None:
        glorot(self)


class GINConv(GraphLayer):
    r"""Graph isomorphism layer, as PyG's ``GINConv``.

    From Xu et al., *How Powerful are Graph Neural Networks?* (ICLR 2019).

    .. math::
        \mathbf{h}'_v = h_{\Theta}\Big((1 + \epsilon)\, \mathbf{h}_v +
            \sum_{u \in N(v)} \mathbf{h}_u\Big)

    with ``h_Theta`` the module ``nn`` (for example :class:`MLP`).  When ``nn`` is a
    ``torch.nn.Sequential`` that starts with a ``torch.nn.Linear`` ``W_1 x + b_1``, the sum
    commutes with ``W_1``: the layer aggregates ``W_1 h`` when ``W_1`` narrows, adds ``b_1``
    after the sum, and runs the rest of ``nn`` on the result (the same maths, a narrower
    SpMM and exchange).  The built-in GIN's MLP has no batch normalisation (PyG's ``GIN``
    model adds one): its statistics would need a reduction over all ranks every layer.

    Args:
        nn (torch.nn.Module): ``h_Theta``, mapping ``[N, d_in]`` to ``[N, d_out]``.
        eps (float, optional): initial ``epsilon``. (default: ``0.``)
        train_eps (bool, optional): learn ``epsilon``. (default: ``False``)

    Shapes:
        - **input:** graph ``g`` over ``N`` vertices, ``h`` ``[N, d_in]``, optional ``key``
        - **output:** ``[N, d_out]``
    """

    def __init__(self, nn: torch.nn.Module, eps: float = 0.0, train_eps: bool = False):
        super().__init__()
        self.nn = nn
        self.initial_eps = eps
        if train_eps:
            self.eps = torch.nn.Parameter(torch.tensor([eps]))
        else:
            self.register_buffer("eps", torch.tensor([eps]))
        first = self.first_linear()
        self.project_first = first is not None and first.out_features < first.in_features

    def first_linear(self) -> torch.nn.Linear | None:
        """``nn``'s leading ``Linear`` (``W_1``), which the sum commutes with, if it has one."""
        if isinstance(self.nn, torch.nn.Sequential) and len(self.nn) and isinstance(
                self.nn[0], torch.nn.Linear):
            return self.nn[0]
        return None

    def reset_parameters(self) -> None:
        """``epsilon`` to its initial value and ``nn``'s parameters (its own
        ``reset_parameters``, else each of its layers')."""
        with torch.no_grad():
            self.eps.fill_(self.initial_eps)
        layers = [self.nn] if hasattr(self.nn, "reset_parameters") else self.nn.children()
        for layer in layers:
            if hasattr(layer, "reset_parameters"):
                layer.reset_parameters()

    def extra_repr(self) -> str:
        return f"eps={self.initial_eps}, train_eps={isinstance(self.eps, torch.nn.Parameter)}"

    def aggregate(self, g: Neighbourhood, z: torch.Tensor) -> torch.Tensor:
        """``(1 + eps) z + sum_{u in N(v)} z_u``."""
        return g.reduce(z, "sum") + (1 + self.eps) * z

    def forward(self, g: Neighbourhood, h: torch.Tensor, key: int | None = None
                ) -> torch.Tensor:
        first = self.first_linear()
        if first is None:
            g = g.enter(self, torch.empty(0, h.shape[-1], dtype=self.eps.dtype), key, h=h)
            return self.nn(self.aggregate(g, h))
        g = g.enter(self, first.weight, key, h=h)
        hidden = aggregate_and_project(self, first.weight, first.bias, g, h, None)
        for layer in list(self.nn)[1:]:
            hidden = layer(hidden)
        return hidden
