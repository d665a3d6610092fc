r"""How split-vertex partials travel: unchanged, as bf16, or as block-scaled integers.

The compressed forms carry error feedback.  A compressed sender transmits ``q = Q(x + e)``
and keeps ``e <- x + e - q`` per entry (as EC-Graph and AdaQP compensate quantisation), so
what is lost to rounding is sent later instead of never.  Under cd-0 this makes the
exchange inexact; evaluation exchanges stay exact.

- **bf16**: ``Q`` rounds to bf16 (about ``2^-8`` relative); the bit patterns go in int16
  buffers because MPI has no bf16 type.
- **int8, int4, int2** (``b`` bits): each row is cut into blocks of ``BLOCK`` = 32 columns
  (the last one shorter) and every block ``B`` gets a power-of-two scale, as OCP's
  microscaling formats (MX) share one 8-bit exponent per 32 values:

  .. math::
      s_B = 2^{k_B}, \quad k_B = \Big\lceil \log_2 \frac{\max_{j \in B} |x_j|}{q_{\max}}
      \Big\rceil, \qquad Q(x_j) = s_B \,
      \operatorname{clamp}\big(\operatorname{round}(x_j / s_B), -q_{\max}, q_{\max}\big)

  with ``q_max = 2^(b-1) - 1`` (127, 7, 1: int2 is ternary).  A row of ``d`` columns
  travels as ``ceil(d / 32)`` exponent bytes (``k + 127``; 0 marks an all-zero block)
  followed by the codes ``round(x / s) + 2^(b-1)``, packed ``8 / b`` to a byte, lowest bits
  first: ``ceil(d / 32) + ceil(d b / 8)`` bytes against fp32's ``4 d``
  (:func:`row_bytes`).  Rounding is to nearest, so the wire is deterministic; the Numba
  kernels of :mod:`distgnn.kernels.quantize` pack and unpack the rows on the host.
"""
from __future__ import annotations

import torch

from ..kernels import quantize

PRECISIONS = ("fp32", "bf16", "int8", "int4", "int2")
INTEGER_BITS = {"int8": 8, "int4": 4, "int2": 2}


def row_bytes(precision: str, width: int, element_size: int = 4) -> int:
    """Bytes one row of ``width`` values takes on the wire in ``precision`` (``fp32``: the
    run's own type, ``element_size`` bytes per value)."""
    if precision == "fp32":
        return width * element_size
    if precision == "bf16":
        return 2 * width
    return quantize.columns(width, INTEGER_BITS[precision])


class Wire:
    """How partials of one width travel: unchanged, as bf16, or as block-scaled integers.

    They travel unchanged (``fp32``: the run's own type, whatever it is), as bf16 bit
    patterns in int16 buffers, or as block-scaled integers in uint8 buffers (see the module
    docstring); the compressed forms with error feedback.

    Args:
        precision (str): one of ``PRECISIONS``.
        dtype (torch.dtype): the run's type (what is encoded and decoded); ``fp32`` sends
            any type unchanged, the adaptive schedule's int32 positions too.
        width (int): columns of the rows it carries (needed by the integer forms, whose
            rows are packed).
    """

    def __init__(self, precision: str, dtype: torch.dtype, width: int = 0):
        self.precision, self.dtype, self.width = precision, dtype, width
        self.compressed = precision != "fp32"
        self.bits = INTEGER_BITS.get(precision)
        self.type = (dtype if not self.compressed else torch.int16 if precision == "bf16"
                     else torch.uint8)
        like = torch.empty(0, dtype=dtype)
        self.host_dtype = like.numpy().dtype if self.bits else None  # integers decode into it
        element = like.element_size()
        self.row_bytes = row_bytes(precision, width, element)  # bytes per row on the wire

    def columns(self, width: int) -> int:
        """Columns of the wire's type that one row of ``width`` values takes."""
        return quantize.columns(width, self.bits) if self.bits else width

    def buffer(self, rows: int, width: int, device) -> torch.Tensor:
        """A zeroed buffer of the wire's type for ``rows`` rows of ``width`` values (what a
        receiver gets)."""
        return torch.zeros(rows, self.columns(width), dtype=self.type, device=device)

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
            out.copy_(self._quantize(values)[0])
            return
        carried = residual if rows is None else residual.index_select(0, rows)
        carried += values
        codes, sent = self._quantize(carried)
        out.copy_(codes)
        carried -= sent
        if rows is None:
            residual.copy_(carried)
        else:
            residual.index_copy_(0, rows, carried)

    def decode(self, received: torch.Tensor) -> torch.Tensor:
        """What ``received`` (the wire's type) stands for, in the run's type (``received``
        itself when it travelled unchanged)."""
        if not self.compressed:
            return received
        if self.bits is None:
            return received.view(torch.bfloat16).to(self.dtype)
        values = quantize.dequantize(received.cpu().numpy(), self.bits, self.width,
                                     self.host_dtype)
        return torch.from_numpy(values).to(received.device)

    def _quantize(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``(codes, sent)``: ``x`` ``[n, d]`` in the wire's type, and what the receiver
        decodes from it, in the run's type (the integer forms are packed on the host)."""
        if self.bits is None:
            sent = x.to(torch.bfloat16)
            return sent.view(torch.int16), sent.to(self.dtype)
        codes, sent = quantize.quantize(x.detach().cpu().contiguous().numpy(), self.bits)
        return (torch.from_numpy(codes).to(x.device), torch.from_numpy(sent).to(x.device))
