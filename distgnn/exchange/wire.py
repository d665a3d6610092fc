"""How split-vertex partials travel: unchanged, or as bf16 with error feedback.

A compressed sender transmits ``q = bf16(x + e)`` and keeps ``e <- x + e - q`` per entry
(as EC-Graph and AdaQP compensate quantisation), so what is lost to rounding is sent later
instead of never; bf16 goes in int16 buffers because MPI has no bf16 type.  Under cd-0 this
makes the exchange inexact (by about ``2^-8`` relative per value); evaluation exchanges stay
exact.
"""
from __future__ import annotations

import torch

PRECISIONS = ("fp32", "bf16")


class Wire:
    """How partials travel: unchanged (``fp32``: the run's own type, whatever it is), or as
    bf16 bit patterns in int16 buffers (MPI has no bf16 type) with error feedback.

    Args:
        precision (str): ``"fp32"`` or ``"bf16"``.
        dtype (torch.dtype): the run's type (what is encoded and decoded); ``fp32`` sends
            any type unchanged, the adaptive schedule's int32 positions too.
    """

    def __init__(self, precision: str, dtype: torch.dtype):
        self.compressed = precision == "bf16"
        self.dtype = dtype
        self.type = torch.int16 if self.compressed else dtype
        self.element_size = torch.empty(0, dtype=self.type).element_size()  # bytes per entry

    def buffer(self, rows: int, width: int, device) -> torch.Tensor:
        """A zeroed ``[rows, width]`` buffer of the wire's type (what a receiver gets)."""
        return torch.zeros(rows, width, dtype=self.type, device=device)

    def carrier(self, values: torch.Tensor) -> torch.Tensor:
        """The send buffer for messages staged in ``values``: ``values`` itself when they
        travel unchanged."""
        return self.buffer(*values.shape, values.device) if self.compressed else values

    def encode(self, values: torch.Tensor, out: torch.Tensor, residual: torch.Tensor | None,
               rows: torch.Tensor | None = None) -> None:
        """``out <- wire(values + residual[rows])`` and ``residual[rows] <-`` what the wire
        lost (``rows``: which residual rows ``values`` are, ``None``: all; no ``residual``:
        plain rounding, for senders that track what was received themselves)."""
        if not self.compressed:
            if out is not values:
                out.copy_(values)
            return
        if residual is None:
            out.copy_(values.to(torch.bfloat16).view(torch.int16))
            return
        carried = residual if rows is None else residual.index_select(0, rows)
        carried += values
        sent = carried.to(torch.bfloat16)
        out.copy_(sent.view(torch.int16))
        carried -= sent.to(self.dtype)
        if rows is None:
            residual.copy_(carried)
        else:
            residual.index_copy_(0, rows, carried)

    def decode(self, received: torch.Tensor) -> torch.Tensor:
        """What ``received`` (the wire's type) stands for, in the run's type (``received``
        itself when it travelled unchanged)."""
        return received.view(torch.bfloat16).to(self.dtype) if self.compressed else received
