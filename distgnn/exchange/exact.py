r"""The exact exchanges, complete within one call: cd-0's sum and max/min over clones.

cd-0 sums over clones; the element-wise max/min over clones routes its gradient to the
clone that attained it.

Rank ``p`` holds a *partial* aggregate of each of its vertices over its own in-edges,
``a^p_v = sum_{u in N_p(v)} x_u``; the full aggregate is ``a_v = sum_{p in R(v)} a^p_v``.
Both exchanges are one round trip (:class:`RoundTrip`): every leaf sends its row to its root,
the root combines, and replies to every leaf.

- **cd-0** (:class:`ExactSum`): the root sums, and every clone ends with
  ``a^p_v <- sum_{q in R(v)} a^q_v``.  This map is symmetric, so the backward pass applies the
  same exchange to the gradients (the clone gradients are partial sums of the vertex's
  gradient).  On a bf16 wire (:mod:`.wire`) each direction keeps its error-feedback
  residuals, per layer and pass.
- **max/min** (:class:`Extreme`): the root takes the element-wise extreme; the gradient goes
  to the one clone whose partial attained it, always exact (the run's type on the wire).
"""
from __future__ import annotations

from collections.abc import Callable

import torch

from ..comm import Communicator
from ..errors import DistGNNError
from ..timing import PhaseTimer
from .channel import Channel, expect_kind, tagged
from .index import SplitIndex
from .wire import Wire


class RoundTrip:
    """The one blocking round trip over the whole split index of a rank's exact exchanges.

    Every exact exchange of a rank makes it: gather the leaf rows of ``a`` ``[n, d]``, send
    them up, combine at the roots, send the roots' replies down, scatter them into the
    leaves.

    Its buffers (a leaf-side and a root-side one, in the run's type and the wire's; the up
    message's receive buffer is the down message's send buffer, and the other way round)
    are allocated for each round trip and freed after it.  Kept for the run they would hold
    a row per split entry at the widest exchanged width beside every other peak of the
    epoch; made per trip they are alive only while it runs, and an epoch's planned arena
    (:mod:`distgnn.run.arena`) serves them from its slab with no page faults, in space that
    the activations of other moments take.
    """

    def __init__(self, index: SplitIndex, comm: Communicator, timer: PhaseTimer):
        self.index, self.comm, self.timer = index, comm, timer
        self.on_device: dict[torch.device, tuple[torch.Tensor, torch.Tensor]] = {}

    def ids(self, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
        """``(leaf_ids, root_ids)`` of the index, on ``device``."""
        if device not in self.on_device:
            self.on_device[device] = (self.index.leaf_ids.to(device),
                                      self.index.root_ids.to(device))
        return self.on_device[device]

    def _channels(self, a: torch.Tensor, wire: Wire) -> tuple[Channel, Channel]:
        ix = self.index
        leaf, root = (torch.empty(len(ids), a.shape[1], dtype=a.dtype, device=a.device)
                      for ids in (ix.leaf_ids, ix.root_ids))
        leaf_wire, root_wire = wire.carrier(leaf), wire.carrier(root)
        return (Channel(wire, ix.leaf_counts, ix.root_counts, leaf, leaf_wire, root_wire),
                Channel(wire, ix.root_counts, ix.leaf_counts, root, root_wire, leaf_wire))

    def run(self, a: torch.Tensor, wire: Wire,
            combine: Callable[[torch.Tensor, torch.Tensor], None],
            scatter: Callable[[torch.Tensor], None],
            residuals: tuple[torch.Tensor | None, torch.Tensor | None] = (None, None)) -> int:
        """One round trip on ``a``; returns the bytes this rank sent.

        ``combine(received, reply)`` gets the leaf rows that arrived at the roots here
        ``[L, d]`` and fills ``reply`` ``[L, d]`` (what goes back to each leaf entry);
        ``scatter(received)`` gets the replies that arrived at the leaves here ``[l, d]``.
        ``residuals``: the up and down error-feedback residuals of a compressed ``wire``.
        """
        up, down = self._channels(a, wire)
        leaf_ids, _ = self.ids(a.device)
        with self.timer("exchange_pre"):
            up.gather(a, leaf_ids, residuals[0])
        with self.timer("exchange_wait"):
            up.run(self.comm)
        with self.timer("exchange_post"):
            combine(up.received(), down.values)
            down.encode(residuals[1])
        with self.timer("exchange_wait"):
            down.run(self.comm)
        with self.timer("exchange_post"):
            scatter(down.received())
        return up.bytes + down.bytes


def _sum_at_roots(a: torch.Tensor, root_ids: torch.Tensor, received: torch.Tensor,
                  reply: torch.Tensor) -> None:
    """The root's part of the sum: add the leaf rows, reply with the total."""
    a.index_add_(0, root_ids, received)
    torch.index_select(a, 0, root_ids, out=reply)


class ExactSum:
    """cd-0 for one layer and pass: ``a`` ``[n, d]`` becomes the sum over clones in place.

    A :class:`~distgnn.exchange.LayerExchange` of kind ``"exact"``: the sum is made on every
    call.

    Args:
        trip (RoundTrip): the rank's round trip.
        exchange_precision (str): ``"fp32"`` (exact, stateless) or ``"bf16"`` (error
            feedback: a residual per leaf and per leaf entry).
        width, dtype, device: of the ``a`` it exchanges.
    """

    kind = "exact"

    def __init__(self, *, trip: RoundTrip, exchange_precision: str, width: int,
                 dtype: torch.dtype, device):
        self.trip, self.width, self.dtype = trip, width, dtype
        self.wire = Wire(exchange_precision, dtype, width)
        ix = trip.index
        self.residuals = ((torch.zeros(len(ix.leaf_ids), width, dtype=dtype, device=device),
                           torch.zeros(len(ix.root_ids), width, dtype=dtype, device=device))
                          if self.wire.compressed else (None, None))
        self.bytes_sent = 0

    def __call__(self, a: torch.Tensor, epoch: int) -> None:
        """``a^p_v <- sum_{q in R(v)} a^q_v`` in place (``epoch`` plays no part)."""
        leaf_ids, root_ids = self.trip.ids(a.device)

        def combine(received, reply):
            _sum_at_roots(a, root_ids, received, reply)

        def scatter(received):
            a.index_copy_(0, leaf_ids, received)

        self.bytes_sent += self.trip.run(a, self.wire, combine, scatter, self.residuals)

    def finish(self) -> None:
        """Nothing is ever in flight."""

    def state_dict(self) -> dict:
        """``{"kind": "exact", "width", "dtype", "residuals": [up, down] or None}``."""
        residuals = (None if not self.wire.compressed
                     else [r.clone() for r in self.residuals])
        return tagged(self.kind, self.width, self.dtype, residuals=residuals)

    def load_state_dict(self, state: dict) -> None:
        expect_kind(state, self.kind, "exact exchange")
        saved = state["residuals"]
        if self.wire.compressed != (saved is not None) or (saved is not None and any(
                r.shape != s.shape for r, s in zip(self.residuals, saved))):
            raise DistGNNError("the checkpoint's cd-0 exchange state does not fit this "
                               "partition and exchange precision")
        if saved is not None:
            for r, s in zip(self.residuals, saved):
                r.copy_(s)


class Extreme:
    r"""The element-wise ``max`` (or ``min``) over clones of partial extremes ``y``.

    ``y`` is ``[n, d]``; the extreme is exact in every epoch (the run's type on the wire):

    .. math::
        y_v \leftarrow \max_{p \in R(v)} y^p_v, \qquad
        \frac{\partial L}{\partial y^p_v} = [p = w_v] \sum_{q \in R(v)}
            \frac{\partial L}{\partial y^q_v}

    where ``w_v`` is the clone that attained the extreme (the root on a tie, then the leaf
    listed first), so the gradient reaches exactly one in-edge, as on one socket.  ``empty``
    ``[n]`` marks rows without local in-edges: they take no part, and rows without in-edges
    on any clone stay 0.
    """

    def __init__(self, trip: RoundTrip):
        self.trip = trip
        self.bytes_sent = 0

    def apply(self, y: torch.Tensor, reduce: str, empty: torch.Tensor) -> torch.Tensor:
        """``y`` ``[n, d]`` becomes the extreme over clones, in place and differentiable."""
        return _ExtremeOverClones.apply(y, self, reduce, empty)

    def forward(self, a: torch.Tensor, reduce: str, empty: torch.Tensor):
        """The forward on ``a`` in place; returns ``(kept, won)``: bool ``[n, d]`` where this
        rank's own partial attained the extreme, and bool ``[L, d]`` where the leaf entry
        (root side) did."""
        fill = -torch.inf if reduce == "max" else torch.inf
        a.masked_fill_(empty.unsqueeze(1), fill)
        leaf_ids, root_ids = self.trip.ids(a.device)
        kept = won = None

        def combine(received, reply):
            nonlocal kept, won
            before = a.clone()
            rows = root_ids.unsqueeze(1).expand_as(received)
            a.scatter_reduce_(0, rows, received, "amax" if reduce == "max" else "amin")
            kept = a == before
            best = a.index_select(0, root_ids)
            # a leaf entry wins where it attains the extreme, the root does not, and no leaf
            # entry listed before it does (ties go to one clone, as on one socket to one edge)
            entry = torch.arange(len(received), device=a.device).unsqueeze(1).expand_as(received)
            candidate = (received == best) & ~kept.index_select(0, root_ids)
            first = torch.full(a.shape, len(received), dtype=torch.int64, device=a.device)
            first.scatter_reduce_(0, rows, torch.where(candidate, entry, len(received)), "amin")
            won = candidate & (first.index_select(0, root_ids) == entry)
            reply.copy_(best)

        def scatter(received):
            a.index_copy_(0, leaf_ids, received)
            a.masked_fill_(a == fill, 0.0)

        self.bytes_sent += self.trip.run(a, Wire("fp32", a.dtype), combine, scatter)
        return kept, won

    def backward(self, grad: torch.Tensor, kept: torch.Tensor, won: torch.Tensor) -> None:
        """The backward on ``grad`` in place: each vertex's gradient summed over clones, then
        kept only by the clone that attained the extreme."""
        leaf_ids, root_ids = self.trip.ids(grad.device)

        def combine(received, reply):
            _sum_at_roots(grad, root_ids, received, reply)
            reply.mul_(won)

        def scatter(received):
            grad.mul_(kept)
            grad.index_copy_(0, leaf_ids, received)

        self.bytes_sent += self.trip.run(grad, Wire("fp32", grad.dtype), combine, scatter)


class _ExtremeOverClones(torch.autograd.Function):
    """``y <-`` :class:`Extreme`'s forward in place; the gradient through its backward."""

    @staticmethod
    def forward(ctx, y, extreme, reduce, empty):
        ctx.extreme = extreme
        ctx.winners = extreme.forward(y, reduce, empty)
        ctx.mark_dirty(y)
        return y

    @staticmethod
    def backward(ctx, grad):
        grad = grad.clone()  # grad may be shared with other consumers: never edit it in place
        ctx.extreme.backward(grad, *ctx.winners)
        return grad, None, None, None
