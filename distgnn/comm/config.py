"""The communication part of a run's configuration: which communicator, how its ranks wait,
and how long a collective may take, validated here, where the communicators are."""
from __future__ import annotations

import dataclasses
import numbers

from ..errors import DistGNNError
from ..options import changed_options, option
from .watchdog import DEFAULT_TIMEOUT_S, SLOW_WAIT_FACTOR

COMMUNICATORS = ("auto", "mpi", "gloo", "nccl", "ccl")
# how the mpi communicator's blocking calls wait (comm/mpi.py); auto: resolve_wait
WAITS = ("auto", "poll", "sleep")
# A year: longer than any job; beyond it the watchdog's deadline leaves the clock's range.
MAX_COMM_TIMEOUT_S = 365 * 24 * 3600


@dataclasses.dataclass
class CommConfig:
    """The communicator of a run on partitions (one socket has none: its options away from
    their defaults are refused there, :meth:`check_single_socket`)."""

    comm: str = option("auto", "communicator: mpi (mpi4py on host buffers; GPU tensors are "
                       "staged through pinned memory), gloo, nccl (every rank on a GPU) or ccl "
                       "(needs oneccl_bindings_for_pytorch) over torch.distributed; auto: nccl "
                       "when every rank is on a GPU, else mpi", choices=COMMUNICATORS)
    comm_wait: str = option(
        "auto", "how a rank of the mpi communicator waits in a blocking collective: poll "
        "(inside MPI, which keeps its core busy; the lowest latency) or sleep (tests the "
        "request and sleeps between tests, 20 to 200 us, leaving its core to ranks still "
        "computing); auto (default): sleep when this host's ranks times threads outnumber its "
        "cores (an oversubscribed node, or an emulated cluster's nodes sharing one host), "
        "else poll", choices=WAITS)
    comm_timeout: float = option(
        DEFAULT_TIMEOUT_S, "with --partitions: abort the job when a rank waits longer than S "
        "seconds in one collective for a peer that stopped sending heartbeats (it died, is "
        "stopped, or its node cannot be reached); while every peer still sends them (a slow "
        f"rank, e.g. on a loaded host), the wait goes on up to {SLOW_WAIT_FACTOR} times the "
        "longer of S and the slowest epoch so far; armed after the first epoch; 0 disables",
        type=float, metavar="S")

    def __post_init__(self):
        for flag, choices in (("comm", COMMUNICATORS), ("comm-wait", WAITS)):
            value = getattr(self, flag.replace("-", "_"))
            if value not in choices:
                raise DistGNNError(f"--{flag} must be one of {', '.join(choices)}, got "
                                   f"{value!r}")
        if not (isinstance(self.comm_timeout, numbers.Real)
                and 0 <= self.comm_timeout <= MAX_COMM_TIMEOUT_S):
            raise DistGNNError(f"--comm-timeout must be a number of seconds from 0 to "
                               f"{MAX_COMM_TIMEOUT_S} (0: none), got {self.comm_timeout!r}")
        if self.comm_wait == "sleep" and self.comm not in ("auto", "mpi"):
            raise DistGNNError(f"--comm-wait sleep applies to the mpi communicator; {self.comm} "
                               "waits in torch.distributed's own way")

    def check_single_socket(self) -> None:
        """Refuse, for a run on one socket (one process, no peer to talk to or wait for),
        every option away from its default: it would change nothing."""
        given = changed_options(self)
        if given:
            raise DistGNNError(f"{given[0]} applies to --partitions (the communicator between "
                               "ranks); one socket has no other rank to communicate with")
