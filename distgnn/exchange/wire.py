r"""How split-vertex partials travel: unchanged, as bf16, or as block-scaled integers, the
compressed forms with error feedback.

A compressed sender transmits ``q = Q(x + e)`` and keeps ``e <- x + e - q`` per entry (as
EC-Graph and AdaQP compensate quantisation), so what is lost to rounding is sent later
instead of never.  Under cd-0 this makes the exchange inexact; evaluation exchanges stay
exact.

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
  (:func:`row_bytes`).  Rounding is to nearest, so the wire is deterministic.
"""
from __future__ import annotations

import math

import torch

PRECISIONS = ("fp32", "bf16", "int8", "int4", "int2")
BLOCK = 32  # columns per integer scale (OCP microscaling's block)
EXPONENT_BIAS = 127  # stored exponent byte = k + 127; 0: the block is all zeros
INTEGER_BITS = {"int8": 8, "int4": 4, "int2": 2}


def row_bytes(precision: str, width: int, element_size: int = 4) -> int:
    """Bytes one row of ``width`` values takes on the wire in ``precision`` (``fp32``: the
    run's own type, ``element_size`` bytes per value)."""
    if precision == "fp32":
        return width * element_size
    if precision == "bf16":
        return 2 * width
    return math.ceil(width / BLOCK) + math.ceil(width * INTEGER_BITS[precision] / 8)


class Wire:
    """How partials of one width travel: unchanged (``fp32``: the run's own type, whatever
    it is), as bf16 bit patterns in int16 buffers, or as block-scaled integers in uint8
    buffers (see the module docstring); the compressed forms with error feedback.

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
        element = torch.empty(0, dtype=dtype).element_size()
        self.row_bytes = row_bytes(precision, width, element)  # bytes per row on the wire

    def columns(self, width: int) -> int:
        """Columns of the wire's type that one row of ``width`` values takes."""
        return row_bytes(self.precision, width) if self.bits else width

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
        blocks = math.ceil(self.width / BLOCK)
        exponents = received[:, :blocks].to(torch.int32)
        shifts = torch.arange(0, 8, self.bits, dtype=torch.uint8, device=received.device)
        packed = received[:, blocks:].unsqueeze(2) >> shifts
        codes = (packed & (2 ** self.bits - 1)).reshape(len(received), -1)[:, :self.width]
        q = codes.to(self.dtype) - 2 ** (self.bits - 1)
        scale = torch.ldexp(torch.ones(exponents.shape, dtype=self.dtype,
                                       device=received.device), exponents - EXPONENT_BIAS)
        scale = torch.where(exponents == 0, 0, scale)
        return q * scale.repeat_interleave(BLOCK, dim=1)[:, :self.width]

    def _quantize(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``(codes, sent)``: ``x`` ``[n, d]`` in the wire's type, and what the receiver
        decodes from it, in the run's type."""
        if self.bits is None:
            sent = x.to(torch.bfloat16)
            return sent.view(torch.int16), sent.to(self.dtype)
        n, d = x.shape
        blocks = math.ceil(d / BLOCK)
        qmax = 2 ** (self.bits - 1) - 1
        padded = torch.nn.functional.pad(x, (0, blocks * BLOCK - d)).view(n, blocks, BLOCK)
        amax = padded.abs().amax(2)
        # the least 2^k >= amax / qmax = m 2^e (frexp: m in [0.5, 1)): e, or e - 1 when m = 0.5
        mantissa, k = torch.frexp(amax / qmax)
        k = (k - (mantissa == 0.5).to(k.dtype)).clamp_(1 - EXPONENT_BIAS, EXPONENT_BIAS)
        nonzero = amax > 0
        scale = torch.ldexp(torch.ones_like(amax), k)
        q = torch.round(padded / scale.unsqueeze(2)).clamp_(-qmax, qmax)
        sent = (q * scale.unsqueeze(2)).view(n, blocks * BLOCK)[:, :d]
        per = 8 // self.bits
        codes = (q.view(n, blocks * BLOCK)[:, :d] + 2 ** (self.bits - 1)).to(torch.uint8)
        codes = torch.nn.functional.pad(codes, (0, -d % per)).view(n, -1, per)
        shifts = torch.arange(0, 8, self.bits, dtype=torch.uint8, device=x.device)
        packed = (codes << shifts).sum(2, dtype=torch.uint8)
        exponents = torch.where(nonzero, k + EXPONENT_BIAS, 0).to(torch.uint8)
        return torch.cat([exponents, packed], 1), sent
