"""Wall-clock seconds per named phase of an epoch (aggregation, exchange, dense, ...)."""
from __future__ import annotations

import time
from collections import defaultdict
from contextlib import contextmanager

__all__ = ["PhaseTimer"]


class PhaseTimer:
    """Accumulates wall-clock seconds per named phase (``timer.seconds[name]``)."""

    def __init__(self):
        self.seconds: dict[str, float] = defaultdict(float)

    @contextmanager
    def __call__(self, name: str):
        start = time.perf_counter()
        try:
            yield
        finally:
            self.seconds[name] += time.perf_counter() - start

    def reset(self) -> None:
        self.seconds.clear()
