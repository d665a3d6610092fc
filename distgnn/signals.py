"""Stop requests by signal: finish the epoch, write a checkpoint, exit.

SLURM sends SIGTERM to every task when a job reaches its time limit (``sbatch
--signal=TERM@S`` moves that S seconds earlier); Open MPI's ``mpirun`` forwards SIGUSR1
and SIGUSR2 to its ranks but answers SIGTERM by killing them, so ``distgnn-launch`` turns
a SIGTERM it receives into SIGUSR1 for the ranks.  A handler can only note the request:
the ranks agree on it at the end of the epoch (any rank's request stops all of them), when
the state is consistent enough to checkpoint.
"""
from __future__ import annotations

import signal
import threading

STOP_SIGNALS = (signal.SIGTERM, signal.SIGUSR1)


class StopRequests:
    """Context manager that records the stop signals received while it is active."""

    def __init__(self):
        self.received: int | None = None
        self._previous: dict = {}

    def _note(self, signum, frame) -> None:
        self.received = signum

    def __enter__(self) -> "StopRequests":
        if threading.current_thread() is threading.main_thread():  # Python's rule for handlers
            for s in STOP_SIGNALS:
                self._previous[s] = signal.signal(s, self._note)
        return self

    def __exit__(self, *exc) -> None:
        for s, handler in self._previous.items():
            signal.signal(s, handler)
        self._previous.clear()
