r"""``--algo auto``: measure the exchange, then keep cd-0 or take cd-r's default schedule.

The first ``WARMUP + MEASURED`` epochs run cd-0.  From the records of the ``MEASURED`` epochs
after the warm-up (which compiles and allocates), the exchange's share of the epoch is

.. math::
    s = \operatorname{median}_e \frac{t^{pre}_e + t^{wait}_e + t^{post}_e}{t_e}

(phase seconds and epoch seconds of the slowest rank, the same record on every rank).
cd-r's default schedule (:mod:`.controller`) runs at most ``1 - 1/EXACT_EVERY`` of its epochs
stale, sending nothing, so it can save about :math:`s (1 - 1/T)` of an epoch; the run takes
it when that is at least ``GAIN``, and keeps cd-0 otherwise.  One choice, made once, from
numbers that a checkpoint's history holds: a resumed run makes the same one
(:func:`choice` of the same records).
"""
from __future__ import annotations

import statistics

from .controller import EXACT_EVERY

__all__ = ["GAIN", "MEASURED", "WARMUP", "choice"]

WARMUP = 1  # epochs before the measured ones (the first compiles kernels, allocates)
MEASURED = 3
# the share of an epoch cd-r's default schedule must save to be taken: less is within the
# noise of an epoch on a shared host, and costs the stale epochs' accuracy for nothing
GAIN = 0.05
EXCHANGE_PHASES = ("exchange_pre", "exchange_wait", "exchange_post")


def choice(history: list[dict]) -> tuple[str, int, str] | None:
    """``(algo, epoch, reason)``: ``"cd-0"`` or ``"cd-r"`` from epoch ``epoch`` (0-based, the
    epoch after the measured ones) and the one line that says why; ``None`` while
    ``history`` (the run's epoch records, oldest first) holds too few epochs."""
    if len(history) < WARMUP + MEASURED:
        return None
    measured = history[WARMUP:WARMUP + MEASURED]
    share = statistics.median(sum(r["phases"][k] for k in EXCHANGE_PHASES) / r["epoch_s"]
                              for r in measured)
    saving = share * (1 - 1 / EXACT_EVERY)
    epochs = f"epochs {measured[0]['epoch']}-{measured[-1]['epoch']}"
    if saving >= GAIN:
        return "cd-r", WARMUP + MEASURED, (
            f"--algo auto: cd-r's default schedule from epoch {WARMUP + MEASURED + 1}: the "
            f"exact exchange took {share:.0%} of {epochs}, and the schedule skips it in up to "
            f"{1 - 1 / EXACT_EVERY:.0%} of epochs (about {saving:.0%} of an epoch saved; "
            f"{GAIN:.0%} needed)")
    return "cd-0", WARMUP + MEASURED, (
        f"--algo auto: cd-0: the exact exchange took {share:.0%} of {epochs}; cd-r's default "
        f"schedule would save about {saving:.1%} of an epoch ({GAIN:.0%} needed)")
