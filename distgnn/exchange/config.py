"""The exchange part of a run's configuration: how split vertices combine their partials
(``--algo``, cd-r's schedule, the wire), validated here, where the exchanges are."""
from __future__ import annotations

import dataclasses
import math
import numbers

from ..errors import DistGNNError
from ..options import changed_options, option
from .wire import PRECISIONS

ALGORITHMS = ("cd-0", "cd-r", "0c", "auto")
TOPOLOGIES = ("auto", "flat", "node")
DEFAULT_DELAY = 5  # cd-r's delay under --smoothing when no --delay is given
# the wire of cd-r's default schedule (distgnn.exchange.controller): the narrowest that kept
# cd-0's accuracy (int2 did not; docs/results/cdr-default.md)
DEFAULT_SCHEDULE_PRECISION = "int4"
# cd-r keeps buffers per bin: a delay beyond the epochs of any run is a typo.
MAX_DELAY = 100_000


@dataclasses.dataclass
class ExchangeConfig:
    """The split-vertex exchange of a run on partitions (one socket has none: its options
    away from their defaults are refused there, :meth:`check_single_socket`)."""

    algo: str = option("cd-0", "split-vertex exchange: cd-0 exact every layer (forward and "
                       "backward), cd-r delayed by r epochs and overlapped, 0c none; auto: "
                       "cd-0 for the first epochs, then cd-0 or cd-r's default schedule, "
                       "whichever the exchange's measured share of those epochs favours "
                       "(said on the console and in the metrics)", choices=ALGORITHMS)
    delay: int | None = option(
        None, f"r of cd-r: bins of split vertices, each refreshed every r epochs (default "
        f"{DEFAULT_DELAY} with --smoothing). Without --delay, --smoothing and --comm-budget, "
        f"cd-r runs its default schedule: each epoch either exact (every split row, on a "
        f"{DEFAULT_SCHEDULE_PRECISION} wire) or stale (the last exact epoch's remote partials "
        f"reused, nothing sent), as a controller decides from the training loss", type=int)
    smoothing: float = option(0.0, "cd-r staleness correction (PipeGCN): each arriving stale "
                              "partial or gradient m updates the kept one as s <- GAMMA*s + "
                              "(1-GAMMA)*m; 0 keeps the latest arrival", type=float,
                              metavar="GAMMA")
    comm_budget: float | None = option(
        None, "cd-r with an adaptive schedule instead of bins: each epoch send the partials "
        "that changed most since last sent, F x cd-0's bytes (positions included; F >= 1.1 "
        "sends everything, i.e. delay 1)", type=float, metavar="F")
    exchange_precision: str | None = option(
        None, "how training exchanges travel: fp32 (the run's own type), bf16, or "
        "int8/int4/int2 with a power-of-two scale per 32 values, each compressed form with "
        f"error feedback (cd-0 is then no longer exact); default {DEFAULT_SCHEDULE_PRECISION} "
        "under cd-r's default schedule, else fp32", choices=PRECISIONS)
    backward_exchange: bool = option(
        True, "exchange split-vertex gradients in the backward pass (exact); "
        "--no-backward-exchange reproduces DGL's inexact cd-0, for comparison", action=True)
    exchange_topology: str = option(
        "auto", "node: the exact sums over clones (cd-0's training exchanges, every "
        "algorithm's evaluation) add up within each node first, and one row per vertex and "
        "node crosses the network, one message per node pair (nodes: MPI's shared-memory "
        "split); flat: every clone's row goes to its root; auto: node when the job spans "
        "several nodes and some node holds several ranks, else flat", choices=TOPOLOGIES)

    def __post_init__(self):
        self.validate()

    def validate(self) -> None:
        """Refuse, with one line naming the flag, a choice or rate that cannot run and an
        option of another schedule."""
        for flag, choices in (("algo", ALGORITHMS), ("exchange-topology", TOPOLOGIES)):
            value = getattr(self, flag.replace("-", "_"))
            if value not in choices:
                raise DistGNNError(f"--{flag} must be one of {', '.join(choices)}, got "
                                   f"{value!r}")
        if self.algo == "cd-r":
            if not (self.delay is None or (isinstance(self.delay, numbers.Integral)
                                           and not isinstance(self.delay, bool)
                                           and 1 <= self.delay <= MAX_DELAY)):
                raise DistGNNError(f"--delay must be an integer from 1 to {MAX_DELAY} with "
                                   f"cd-r, got {self.delay!r}")
        elif self.delay:
            raise DistGNNError(f"--delay applies to cd-r only, not {self.algo}")
        if not (isinstance(self.smoothing, numbers.Real) and 0 <= self.smoothing < 1):
            raise DistGNNError(f"--smoothing must be in [0, 1), got {self.smoothing!r}")
        if self.smoothing and self.algo != "cd-r":
            raise DistGNNError(f"--smoothing applies to cd-r only, not {self.algo}")
        if self.comm_budget is not None:
            if not (isinstance(self.comm_budget, numbers.Real)
                    and math.isfinite(self.comm_budget) and self.comm_budget > 0):
                raise DistGNNError(f"--comm-budget must be a number > 0, got "
                                   f"{self.comm_budget!r}")
            if self.algo != "cd-r":
                raise DistGNNError(f"--comm-budget applies to cd-r only, not {self.algo}")
            if self.delay is not None or self.smoothing:
                raise DistGNNError("--comm-budget replaces cd-r's bins: it takes neither "
                                   "--delay nor --smoothing")
        if self.exchange_precision not in (None, *PRECISIONS):
            raise DistGNNError(f"--exchange-precision must be one of {', '.join(PRECISIONS)}, "
                               f"got {self.exchange_precision!r}")
        if self.exchange_precision not in (None, "fp32") and self.algo == "0c":
            raise DistGNNError("--exchange-precision applies to cd-0 and cd-r; 0c sends nothing")
        if self.exchange_topology == "node" and self.algo == "cd-0" and self.wire != "fp32":
            raise DistGNNError(f"--exchange-topology node sums in the run's own type; cd-0 on "
                               f"a {self.wire} wire keeps a residual per leaf and goes flat: "
                               "use --exchange-precision fp32 or --exchange-topology flat")

    def check_single_socket(self) -> None:
        """Refuse, for a run on one socket (no partitions, so no split vertices), every
        option away from its default: it would change nothing."""
        given = changed_options(self)
        if given:
            raise DistGNNError(f"{given[0]} applies to --partitions (split vertices exchange "
                               "partials); one socket has none to exchange")

    @property
    def default_schedule(self) -> bool:
        """cd-r without ``--delay``, ``--smoothing`` or ``--comm-budget``: the controlled
        schedule of :mod:`distgnn.exchange.controller` (also what ``auto`` may take)."""
        return (self.algo in ("cd-r", "auto") and self.delay is None and not self.smoothing
                and self.comm_budget is None)

    @property
    def may_delay(self) -> bool:
        """Whether training exchanges may be delayed (cd-r, or ``auto``, which may take it)."""
        return self.algo in ("cd-r", "auto")

    @property
    def wire(self) -> str:
        """The training exchanges' precision: ``--exchange-precision``, or by default
        ``DEFAULT_SCHEDULE_PRECISION`` under cd-r's default schedule and fp32 otherwise."""
        if self.exchange_precision is not None:
            return self.exchange_precision
        return DEFAULT_SCHEDULE_PRECISION if self.default_schedule else "fp32"

    @property
    def exchange_schedule(self) -> str:
        """The split-vertex exchange in words, as the run reports it: the algorithm, its
        schedule and its wire."""
        if self.algo == "auto":
            words = "auto: cd-0, then cd-0 or cd-r default schedule as measured"
        elif self.algo != "cd-r":
            words = self.algo
        elif self.comm_budget is not None:
            words = f"cd-r adaptive, budget {self.comm_budget:g}"
        elif self.default_schedule:
            words = "cd-r default schedule (each epoch exact or 1 epoch stale)"
        else:
            words = f"cd-r delay {self.delay_epochs}" + (
                f", smoothing {self.smoothing:g}" if self.smoothing else "")
        return words + (f", {self.wire} wire" if self.wire != "fp32" else "")

    @property
    def delay_epochs(self) -> int:
        """``r`` of cd-r; 0 for the exchanges that delay nothing.

        1 under the default schedule (and under ``auto``, which may take it) and under
        ``--comm-budget``, whose messages arrive the epoch after they are sent;
        ``DEFAULT_DELAY`` with ``--smoothing`` alone."""
        if not self.may_delay:
            return 0
        if self.comm_budget is not None or self.default_schedule:
            return 1
        return DEFAULT_DELAY if self.delay is None else self.delay
