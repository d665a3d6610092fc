"""Delayed Remote Partial Aggregates (DistGNN, Md et al. SC'21, Section 5.3): cd-r.

cd-r is the exchange of split-vertex partials in bins, delayed by ``r`` epochs and
overlapped with compute.

- **cd-r** (delay ``r``): split vertex ``v`` is in bin ``v mod r`` (global id).  At epoch
  ``e``, bin ``b = e mod r``: leaves of bin ``b`` start sending their fresh partials
  (non-blocking); roots take the partials of bin ``b`` that were sent at ``e - r`` and keep
  them; each root clone then holds ``a^root_v(e) + sum_leaves a^q_v(stale)`` and replies,
  for bin ``b``, to each leaf with everything except that leaf's own partial; leaves take
  the replies sent at ``e - r`` and add them to their fresh partial.  So every clone
  aggregates its fresh local partial plus the latest remote complement it has, which is
  ``r`` (roots) or ``2r`` (leaves) epochs old when it is refreshed.  The backward pass runs
  the same schedule on the gradients with its own buffers.  Before the first arrivals the
  complement is zero.  Evaluation (no training) uses the exact cd-0 exchange.
- **smoothing** (PipeGCN's, Wan et al. ICLR 2022): each arrival ``m`` for an entry (a leaf
  partial at its root, a reply at its leaf, and the same for gradients) updates the kept value
  ``s <- gamma s + (1 - gamma) m`` instead of replacing it (the first arrival is kept as it
  is), so the stale complement is a moving average over refreshes: it damps the epoch-to-
  epoch noise (dropout masks, weight steps) that a single stale value carries.

:class:`StaleSum` is the schedule's skeleton, which the adaptive schedule of :mod:`.adaptive`
shares (it replaces the bins by the rows that moved most).  Every buffer is allocated once
per layer and pass, and reused every epoch.
"""
from __future__ import annotations

import dataclasses

import numpy as np
import torch

from ..comm import Communicator, Done, Handle
from ..errors import DistGNNError
from ..timing import PhaseTimer
from .channel import Channel, expect_kind, tagged
from .controller import Controller
from .index import SplitIndex
from .wire import Wire


class StaleSum:
    r"""The skeleton the delayed exchanges share: fold in, send, add the kept remote terms.

    One call on ``a`` ``[n, d]`` (a layer's fresh partials, or their gradients) folds in what
    arrived since the last call, starts sending the fresh leaf rows up and the roots'
    replies down, and adds the kept remote terms:

    .. math::
        a_v \mathrel{+}= \sum_{q} P_{v,q} \ \text{(root clone)}, \qquad
        a_v \mathrel{+}= C_v \ \text{(leaf clone)}

    where ``P`` ``[L, d]`` (``partials``) holds, per leaf entry ``(v, q)`` here, the last
    partial received from leaf ``q``, and ``C`` ``[l, d]`` (``complement``), per leaf here, the
    last reply received; a reply is the root's total less that leaf's kept partial.

    A subclass sets ``timer``, ``leaf_ids`` and ``root_ids`` (on the device), ``partials`` and
    ``complement``, and implements :meth:`receive`, :meth:`send_up` and :meth:`send_down`.
    """

    timer: PhaseTimer
    leaf_ids: torch.Tensor
    root_ids: torch.Tensor
    partials: torch.Tensor
    complement: torch.Tensor
    bytes_sent: int

    def __call__(self, a: torch.Tensor, epoch: int) -> None:
        """Add the stale remote terms to ``a`` in place; send what epoch ``epoch`` sends."""
        self.receive(epoch)
        with self.timer("exchange_pre"):
            self.bytes_sent += self.send_up(a, epoch)
        with self.timer("exchange_post"):
            a.index_add_(0, self.root_ids, self.partials)
        with self.timer("exchange_pre"):
            self.bytes_sent += self.send_down(a, epoch)
        with self.timer("exchange_post"):
            a.index_add_(0, self.leaf_ids, self.complement)

    def receive(self, epoch: int) -> None:
        """Complete what epoch ``epoch`` takes in, and fold it into ``partials`` and
        ``complement``."""
        raise NotImplementedError

    def send_up(self, a: torch.Tensor, epoch: int) -> int:
        """Start sending leaf rows of ``a`` to their roots; returns the bytes."""
        raise NotImplementedError

    def send_down(self, a: torch.Tensor, epoch: int) -> int:
        """Start sending replies (``a``'s root rows less the kept partials); returns the
        bytes."""
        raise NotImplementedError


def _select(mask: np.ndarray, counts: list[int]) -> tuple[torch.Tensor, list[int]]:
    """Positions where ``mask`` holds, and how many fall in each peer's block."""
    bounds = np.concatenate([[0], np.cumsum(counts)])
    positions = np.flatnonzero(mask)
    return (torch.from_numpy(positions.astype(np.int64)),
            np.diff(np.searchsorted(positions, bounds)).tolist())


@dataclasses.dataclass
class Bin:
    """One cd-r bin of one aggregation: its entries, its messages, its requests in flight.

    Its entries are split-vertex entries.  ``leaf_*``: this rank's leaves in the bin
    (``sel``: positions in the split index, ``ids``: local ids); ``root_*``: the leaf entries
    of roots here.  ``up`` carries leaf partials to the roots, ``down`` each root's reply
    back; ``own`` holds each entry's kept partial, subtracted from the reply to that leaf.
    ``*_pending``: the request in flight (its ``recv`` is what the bin's next visit folds
    in); ``*_seen``: an arrival has been folded in before, so smoothing applies.
    """

    leaf_sel: torch.Tensor
    leaf_ids: torch.Tensor
    root_sel: torch.Tensor
    root_ids: torch.Tensor
    up: Channel
    down: Channel
    own: torch.Tensor
    up_pending: Handle | None = None
    down_pending: Handle | None = None
    up_seen: bool = False
    down_seen: bool = False


class DelayedSum(StaleSum):
    """cd-r for one layer and pass: bins, kept partials and complement, requests in flight.

    A :class:`~distgnn.exchange.LayerExchange` of kind ``"delayed"``.

    Args:
        index (SplitIndex): this rank's split tables.
        comm (Communicator): the transport.
        timer (PhaseTimer): receives the exchange phases.
        delay (int): ``r`` (>= 1).
        smoothing (float): PipeGCN's ``gamma`` in ``[0, 1)`` (0: keep the latest arrival).
        exchange_precision (str): one of ``PRECISIONS`` (error feedback per leaf, up, and per
            leaf entry, down, on a compressed wire).
        width, dtype, device: of the ``a`` it exchanges.
        controller (Controller, optional): with delay 1 and no smoothing, the default
            schedule of :mod:`.controller`: the epochs it calls exact make a blocking round
            trip of this epoch's rows (:meth:`refresh`), the others send nothing and add the
            remote terms that the last exact epoch brought (:meth:`reuse`); with
            :attr:`every_epoch` set (a narrow layer: :func:`~.controller.mark_narrow`), every
            epoch is exact.
    """

    kind = "delayed"

    def __init__(self, *, index: SplitIndex, comm: Communicator, timer: PhaseTimer, delay: int,
                 smoothing: float, exchange_precision: str, width: int, dtype: torch.dtype,
                 device, controller: Controller | None = None):
        if controller is not None and (delay != 1 or smoothing):
            raise ValueError("a controlled cd-r exchange has delay 1 and no smoothing")
        self.controller = controller
        self.comm, self.timer, self.delay, self.smoothing = comm, timer, delay, smoothing
        self.width, self.dtype = width, dtype
        self.wire = wire = Wire(exchange_precision, dtype, width)

        def new(rows):
            return torch.zeros(rows, width, dtype=dtype, device=device)

        self.partials = new(len(index.root_ids))
        self.complement = new(len(index.leaf_ids))
        self.up_residual = new(len(index.leaf_ids)) if wire.compressed else None
        self.down_residual = new(len(index.root_ids)) if wire.compressed else None
        self.bins = []
        for b in range(delay):
            leaf_sel, leaf_counts = _select(index.leaf_global % delay == b, index.leaf_counts)
            root_sel, root_counts = _select(index.root_global % delay == b, index.root_counts)
            self.bins.append(Bin(
                leaf_sel.to(device), index.leaf_ids[leaf_sel].to(device),
                root_sel.to(device), index.root_ids[root_sel].to(device),
                up=Channel.allocate(wire, leaf_counts, root_counts, width, dtype, device),
                down=Channel.allocate(wire, root_counts, leaf_counts, width, dtype, device),
                own=new(len(root_sel))))
        self.leaf_ids = index.leaf_ids.to(device)
        self.root_ids = index.root_ids.to(device)
        self.bytes_sent = 0
        # the controlled schedule's last exact epoch, measured: (sum of squares of what its
        # fresh remote terms moved from those kept, of the split clones' sums); None before
        self.drift: tuple[torch.Tensor, torch.Tensor] | None = None
        # the controlled schedule's narrow layers are exact every epoch (set by the Exchange
        # that made this one, once it knows every layer's width: :mod:`.controller`)
        self.every_epoch = False
        if controller is not None:  # each split clone's row once, and where its entries go
            self.split_rows = torch.unique(torch.cat([self.root_ids, self.leaf_ids]))
            self.root_pos = torch.searchsorted(self.split_rows, self.root_ids)
            self.leaf_pos = torch.searchsorted(self.split_rows, self.leaf_ids)
            self.moved = new(len(self.split_rows))  # r' - r per split clone (refresh)

    def __call__(self, a: torch.Tensor, epoch: int) -> None:
        if self.controller is None:
            super().__call__(a, epoch)
        elif self.every_epoch or self.controller.exact(epoch):
            self.refresh(a, epoch)
        else:
            self.reuse(a)

    def reuse(self, a: torch.Tensor) -> None:
        """A stale epoch of the default schedule: every clone adds the remote terms the last
        exact epoch brought; nothing is sent (what it sent would arrive after the next exact
        epoch had replaced it)."""
        with self.timer("exchange_post"):
            a.index_add_(0, self.root_ids, self.partials)
            a.index_add_(0, self.leaf_ids, self.complement)

    def refresh(self, a: torch.Tensor, epoch: int) -> None:
        """An exact epoch of the one bin: every clone adds the fresh remote terms.

        It sends this epoch's leaf rows and waits for them, then the roots' replies and waits
        for them (nothing is in flight before or after).  It also sets :attr:`drift`, what a
        stale epoch now would have got wrong: per split clone ``v`` here, its remote terms
        moved by ``r'_v - r_v`` (``r``: the sum of the other clones' partials that the last
        exact epoch brought, which a stale epoch adds; ``r'``: this epoch's), and
        :attr:`drift` is ``(sum_v ||r'_v - r_v||^2, sum_v ||a_v||^2)`` over those clones,
        ``a_v`` their exact sums (the epoch record's ``stale_drift`` is the square root of the
        ratio over all ranks; the controller decides by it)."""
        b = self.bins[0]
        # an exact epoch came before: what it brought is kept (and would be reused, unless
        # this layer is exact every epoch)
        seen = b.up_seen and b.down_seen and not self.every_epoch
        moved = self.moved.zero_() if seen else None
        with self.timer("exchange_pre"):
            self.bytes_sent += self.send_up(a, epoch)
        self.wait(b)
        with self.timer("exchange_post"):
            fresh = b.up.received()
            if moved is not None:
                # fresh - kept per entry (kept is replaced by fresh just below)
                moved.index_add_(0, self.root_pos, self.partials.sub_(fresh), alpha=-1)
            self.fold(self.partials, b.root_sel, fresh, b.up_seen)
            b.up_seen, b.up_pending = True, None
            a.index_add_(0, self.root_ids, self.partials)
        with self.timer("exchange_pre"):
            self.bytes_sent += self.send_down(a, epoch)
        self.wait(b)
        with self.timer("exchange_post"):
            fresh = b.down.received()
            if moved is not None:
                # fresh - kept per entry (kept is replaced by fresh just below)
                moved.index_add_(0, self.leaf_pos, self.complement.sub_(fresh), alpha=-1)
            self.fold(self.complement, b.leaf_sel, fresh, b.down_seen)
            b.down_seen, b.down_pending = True, None
            a.index_add_(0, self.leaf_ids, self.complement)
            if moved is not None:
                self.drift = (moved.square().sum(),
                              a.index_select(0, self.split_rows).square().sum())

    def receive(self, epoch: int) -> None:
        b = self.bins[epoch % self.delay]
        self.wait(b)
        with self.timer("exchange_post"):
            if b.up_pending is not None:
                self.fold(self.partials, b.root_sel, b.up.received(), b.up_seen)
                b.up_seen = True
            if b.down_pending is not None:
                self.fold(self.complement, b.leaf_sel, b.down.received(), b.down_seen)
                b.down_seen = True

    def send_up(self, a: torch.Tensor, epoch: int) -> int:
        b = self.bins[epoch % self.delay]
        b.up.gather(a, b.leaf_ids, self.up_residual, b.leaf_sel)
        b.up_pending = b.up.start(self.comm)
        return b.up.bytes

    def send_down(self, a: torch.Tensor, epoch: int) -> int:
        b = self.bins[epoch % self.delay]
        torch.index_select(self.partials, 0, b.root_sel, out=b.own)
        b.down.stage(a, b.root_ids).sub_(b.own)
        b.down.encode(self.down_residual, b.root_sel)
        b.down_pending = b.down.start(self.comm)
        return b.down.bytes

    def fold(self, kept: torch.Tensor, rows: torch.Tensor, value: torch.Tensor,
             seen: bool) -> None:
        """Take an arrival ``value`` into ``kept[rows]``: replace, or smooth once one has
        arrived."""
        if self.smoothing and seen:
            value = torch.lerp(value, kept.index_select(0, rows), self.smoothing)
        kept.index_copy_(0, rows, value)

    def wait(self, b: Bin) -> None:
        with self.timer("exchange_wait"):
            for handle in (b.up_pending, b.down_pending):
                if handle is not None:
                    handle.wait()

    def finish(self) -> None:
        """Complete every request in flight (before the communicator goes away)."""
        for b in self.bins:
            self.wait(b)
            b.up_pending = b.down_pending = None

    def state_dict(self) -> dict:
        """Everything the schedule carries between epochs, requests in flight drained first.

        The drained requests' receive buffers hold what the next visit of each bin folds in,
        so a restored exchange proceeds exactly as the uninterrupted one would have.
        ``{"kind": "delayed", "width", "dtype", "partials", "complement", "residuals": [up,
        down] or None, "arrived": [{"up", "down": received or None, "seen": [up, down]}] per
        bin}``."""
        for b in self.bins:
            self.wait(b)
        residuals = (None if not self.wire.compressed
                     else [self.up_residual.clone(), self.down_residual.clone()])
        return tagged(self.kind, self.width, self.dtype, partials=self.partials.clone(),
                      complement=self.complement.clone(), residuals=residuals,
                      arrived=[{"up": b.up.recv.clone() if b.up_pending is not None else None,
                                "down": (b.down.recv.clone() if b.down_pending is not None
                                         else None),
                                "seen": [b.up_seen, b.down_seen]} for b in self.bins])

    def load_state_dict(self, state: dict) -> None:
        expect_kind(state, self.kind, "cd-r exchange")
        residuals = state["residuals"]
        shapes = [(self.partials, state["partials"]), (self.complement, state["complement"])]
        if residuals is not None:
            shapes += zip((self.up_residual, self.down_residual), residuals)
        if (len(state["arrived"]) != self.delay or any(a.shape != b.shape for a, b in shapes)
                or self.wire.compressed != (residuals is not None)):
            raise DistGNNError("the checkpoint's cd-r exchange state does not fit this "
                               "partition, delay and exchange precision")
        self.partials.copy_(state["partials"])
        self.complement.copy_(state["complement"])
        if residuals is not None:
            self.up_residual.copy_(residuals[0])
            self.down_residual.copy_(residuals[1])
        for b, arrived in zip(self.bins, state["arrived"]):
            b.up_pending = b.down_pending = None
            b.up_seen, b.down_seen = arrived["seen"]
            if arrived["up"] is not None:
                b.up.recv.copy_(arrived["up"])
                b.up_pending = Done()
            if arrived["down"] is not None:
                b.down.recv.copy_(arrived["down"])
                b.down_pending = Done()
