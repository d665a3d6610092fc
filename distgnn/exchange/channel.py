"""What every split-vertex exchange shares: :class:`Channel` and the states' kind tag.

A :class:`Channel` is the messages of one direction between clones; :func:`tagged` and
:func:`expect_kind` write and check the kind tag of the exchanges' states.

An exchange moves rows of a layer's partial aggregates ``a`` ``[n, d]`` in two directions:
*up*, from the leaves to their roots (this rank's ``leaf_ids`` to the peers' roots), and
*down*, from the roots back to their leaves.  One direction (or the part of it that a cd-r bin
or the adaptive schedule sends) is a :class:`Channel`: gather the rows, encode them for the
wire, one ``alltoallv`` (blocking, or started and completed later), decode what arrived.  The
exact exchange (:mod:`.exact`) runs both directions within one call; the delayed ones
(:mod:`.delayed`, :mod:`.adaptive`) start them and fold in what arrived one or more epochs
later.
"""
from __future__ import annotations

import torch

from ..comm import Communicator, Handle
from ..errors import DistGNNError
from .wire import Wire


class Channel:
    """The messages of one direction: the staged rows, their wire form, what arrives.

    Args:
        wire (Wire): how the rows travel.
        counts (list[int]): ``[P]`` rows this rank sends to each rank.
        peer_counts (list[int]): ``[P]`` rows it receives from each rank.
        values (torch.Tensor): ``[sum(counts), d]`` stages what is sent, in the run's type.
        send (torch.Tensor): ``values`` encoded for the wire (``values`` itself when the rows
            travel unchanged).
        recv (torch.Tensor): ``[sum(peer_counts), d]`` receives, in the wire's type.
    """

    def __init__(self, wire: Wire, counts: list[int], peer_counts: list[int],
                 values: torch.Tensor, send: torch.Tensor, recv: torch.Tensor):
        self.wire, self.counts, self.peer_counts = wire, counts, peer_counts
        self.values, self.send, self.recv = values, send, recv

    @classmethod
    def allocate(cls, wire: Wire, counts: list[int], peer_counts: list[int], width: int,
                 dtype: torch.dtype, device) -> Channel:
        """A channel with buffers of its own, zeroed, ``width`` columns wide."""
        values = torch.zeros(sum(counts), width, dtype=dtype, device=device)
        return cls(wire, counts, peer_counts, values, wire.carrier(values),
                   wire.buffer(sum(peer_counts), width, device))

    def stage(self, a: torch.Tensor, rows: torch.Tensor) -> torch.Tensor:
        """``values <- a[rows]``; returns ``values`` (a sender may adjust them in place
        before :meth:`encode`)."""
        return torch.index_select(a, 0, rows, out=self.values)

    def encode(self, residual: torch.Tensor | None = None,
               residual_rows: torch.Tensor | None = None) -> None:
        """``send <- wire(values)``, with error feedback through ``residual[residual_rows]``
        (see :meth:`Wire.encode`)."""
        self.wire.encode(self.values, self.send, residual, residual_rows)

    def gather(self, a: torch.Tensor, rows: torch.Tensor, residual: torch.Tensor | None = None,
               residual_rows: torch.Tensor | None = None) -> None:
        """:meth:`stage` then :meth:`encode`."""
        self.stage(a, rows)
        self.encode(residual, residual_rows)

    def run(self, comm: Communicator) -> None:
        """Send ``send`` and receive into ``recv`` (blocking)."""
        comm.alltoallv(self.send, self.counts, self.recv, self.peer_counts)

    def start(self, comm: Communicator) -> Handle:
        """Start sending ``send`` and receiving into ``recv``; neither buffer may be touched
        before the handle's ``wait()``."""
        return comm.ialltoallv(self.send, self.counts, self.recv, self.peer_counts)

    def received(self) -> torch.Tensor:
        """What arrived, in the run's type."""
        return self.wire.decode(self.recv)

    @property
    def bytes(self) -> int:
        """Bytes one send puts on the wire from this rank."""
        return self.send.numel() * self.send.element_size()


def tagged(kind: str, width: int, dtype: torch.dtype, **state) -> dict:
    """The state of one layer's exchange: its ``kind``, the width and type of what it
    exchanges (what a restored exchange is built with), and ``state``."""
    return {"kind": kind, "width": width, "dtype": str(dtype).removeprefix("torch."), **state}


def expect_kind(state, kind: str, what: str) -> None:
    """Refuse, with one line, a ``state`` that is not of ``kind`` (``what`` names whose)."""
    got = state.get("kind") if isinstance(state, dict) else None
    if got != kind:
        raise DistGNNError(f"the checkpoint's {what} state is "
                           + (f"of kind {got!r}" if got is not None else "untagged")
                           + f"; this run's is of kind {kind!r}")
