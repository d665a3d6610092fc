r"""``--algo auto``: measure the exchange, then keep cd-0 or take cd-r's default schedule.

The first ``WARMUP + MEASURED`` epochs run cd-0.  From the records of the ``MEASURED`` epochs
after the warm-up (which compiles and allocates), the exchange's share of the epoch is

.. math::
    s = \operatorname{median}_e \frac{t^{pre}_e + t^{wait}_e + t^{post}_e}{t_e}

(phase seconds and epoch seconds of the slowest rank, the same record on every rank).  cd-r's
default schedule (:mod:`.controller`) runs at least one epoch in ``T = EXACT_EVERY`` exact, on
its wire (int4 by default: a fraction :math:`\rho` of cd-0's bytes, and :math:`c` seconds to
encode and decode an exact epoch's rows, measured once on this rank's rows,
:func:`wire_seconds`, slowest rank), and the others stale, sending nothing.  Taking the whole
exchange as transfer (which favours cd-r where part of it is waiting for slower ranks), an
epoch of the schedule saves on average, as a share of cd-0's epoch :math:`t`,

.. math::
    g = s \left(1 - \frac{\rho}{T}\right) - \frac{c}{T t}

and the run takes it when :math:`g \ge` ``GAIN``, keeping cd-0 otherwise.  One choice, made
once; its numbers are in the record of the epoch that made it, which a checkpoint's history
holds, so a resumed run goes on with the same choice.
"""
from __future__ import annotations

import statistics
import time

import torch

from .controller import EXACT_EVERY
from .wire import Wire, row_bytes

__all__ = ["GAIN", "MEASURED", "WARMUP", "choice", "wire_seconds"]

WARMUP = 1  # epochs before the measured ones (the first compiles kernels, allocates)
MEASURED = 3
# the share of an epoch cd-r's default schedule must save to be taken: less is within the
# noise of an epoch on a shared host, and costs the stale epochs' accuracy for nothing
GAIN = 0.05
EXCHANGE_PHASES = ("exchange_pre", "exchange_wait", "exchange_post")


def wire_seconds(precision: str, layers: list[tuple[int, torch.dtype]], rows: int
                 ) -> tuple[float, float]:
    """``(c, rho)``: an exact epoch's seconds on wire ``precision``, and its bytes over fp32's.

    ``c`` is the time to encode and decode ``rows`` rows of each of ``layers`` (``(width,
    dtype)`` of every training exchange, each pass).

    An exact epoch encodes every row it sends and decodes every row it receives: per layer
    and pass the leaves and the leaf entries (``rows``) once each.  Timed on random rows,
    the second of two calls (the first may compile)."""
    if precision == "fp32" or not layers or not rows:
        return 0.0, 1.0
    seconds = 0.0
    for width, dtype in layers:
        wire = Wire(precision, dtype, width)
        values = torch.randn(rows, width, dtype=dtype)
        out, residual = wire.buffer(rows, width, "cpu"), torch.zeros_like(values)
        for _ in range(2):
            started = time.perf_counter()
            wire.encode(values, out, residual)
            wire.decode(out)
            took = time.perf_counter() - started
        seconds += took
    ratio = (sum(row_bytes(precision, w, torch.empty(0, dtype=d).element_size())
                 for w, d in layers)
             / sum(row_bytes("fp32", w, torch.empty(0, dtype=d).element_size())
                   for w, d in layers))
    return seconds, ratio


def choice(history: list[dict], wire_s: float = 0.0, ratio: float = 1.0
           ) -> tuple[str, int, dict] | None:
    """``(algo, epoch, made)``: the exchange from epoch ``epoch`` on, and what it rests on.

    ``algo`` is ``"cd-0"`` or ``"cd-r"``, ``epoch`` 0-based (the epoch after the measured
    ones), ``made`` the numbers and ``reason``, the one line that says why; ``None`` while
    ``history`` (the run's epoch records, oldest first) holds too few epochs.  ``wire_s`` and
    ``ratio``: :func:`wire_seconds` of the schedule's wire."""
    if len(history) < WARMUP + MEASURED:
        return None
    measured = history[WARMUP:WARMUP + MEASURED]
    share = statistics.median(sum(r["phases"][k] for k in EXCHANGE_PHASES) / r["epoch_s"]
                              for r in measured)
    epoch_s = statistics.median(r["epoch_s"] for r in measured)
    gain = share * (1 - ratio / EXACT_EVERY) - wire_s / (EXACT_EVERY * epoch_s)
    made = {"exchange_share": share, "epoch_s": epoch_s, "wire_s": wire_s,
            "wire_ratio": ratio, "gain": gain}
    # what the choice rests on, as measured: the exchange's share, and the schedule's wire
    basis = (f"the exact exchange took {_percent(share)} of epochs {measured[0]['epoch']}-"
             f"{measured[-1]['epoch']}; cd-r's default schedule skips it in up to "
             f"{_percent(1 - 1 / EXACT_EVERY)} of epochs" + (
                 f" and its wire sends {ratio:.2f}x cd-0's bytes for {wire_s * 1e3:.0f} ms "
                 "of encoding and decoding per exact epoch" if wire_s else ""))
    if gain >= GAIN:
        return "cd-r", WARMUP + MEASURED, {**made, "reason": (
            f"--algo auto: cd-r saves about {_percent(gain)} of an epoch here: switching to "
            f"cd-r's default schedule from epoch {WARMUP + MEASURED + 1} ({basis})")}
    verdict = ("cd-r would be no faster here" if round(gain * 100) == 0
               else f"cd-r would save only {_percent(gain)} of an epoch here, less than the "
                    f"{_percent(GAIN)} that pays for its stale epochs" if gain > 0
               else f"cd-r would be {_percent(-gain)} slower here")
    return "cd-0", WARMUP + MEASURED, {**made, "reason": (
        f"--algo auto: {verdict}: keeping cd-0 ({basis})")}


def _percent(share: float) -> str:
    """``share`` as a user reads it: ``0.184`` as ``18 %``."""
    return f"{share * 100:.0f} %"
