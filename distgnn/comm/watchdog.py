"""A watchdog on blocking collectives: a rank that waits too long aborts the whole job.

When a rank dies, the MPI launcher usually notices and takes the job down (Open MPI's
``mpirun`` within a second).  When it does not (a rank that hangs, a node that stops
answering, a launcher that waits), every other rank would block forever in its next
collective.  :class:`Watchdog` wraps a communicator and a daemon thread watches each
blocking call (and each ``wait()`` of a non-blocking one).  A wait past ``timeout``
seconds ends the job when a peer fell silent (given a
:class:`~distgnn.comm.heartbeat.Heartbeat`; without one, always): the thread prints which
rank waited in which operation and which peers (on which hosts) it stopped hearing from,
and calls the communicator's ``abort`` (``MPI_Abort`` ends every rank of the job), falling
back to ``os._exit`` if the abort itself does not return promptly.  While every peer still
beats, the wait is slowness (a loaded host, a long kernel), not death: it goes on, up to
``SLOW_WAIT_FACTOR`` times the longer of ``timeout`` and the slowest epoch so far
(:meth:`Watchdog.limit`), and rank 0 says so once.
"""
from __future__ import annotations

import copy
import os
import sys
import threading
import time
from contextlib import contextmanager

DEFAULT_TIMEOUT_S = 20.0
ABORT_STATUS = 3
# How long MPI_Abort may take before the process ends itself.
ABORT_GRACE_S = 5.0
# A wait on peers that all still beat may last this many times the longer of the timeout
# and the slowest epoch so far: a slow rank arrives within about an epoch, or a stall of a
# few timeouts (a long kernel, a compilation, swapping), a hung one never.
SLOW_WAIT_FACTOR = 10


class _WatchedHandle:
    def __init__(self, watchdog: "Watchdog", handle, op: str):
        self.watchdog, self.handle, self.op = watchdog, handle, op

    def wait(self) -> None:
        with self.watchdog.guard(self.op):
            self.handle.wait()


class Watchdog:
    """``comm`` with a deadline on every blocking call once armed (see the module docstring).

    Disarmed until :meth:`arm` (set-up steps and the first, JIT-compiling, epoch may
    legitimately keep peers waiting for long); ``timeout`` ``None`` or ``0`` never arms.
    """

    def __init__(self, comm, timeout: float | None = DEFAULT_TIMEOUT_S, prog: str = "distgnn",
                 heartbeat=None):
        self.comm, self.timeout, self.prog = comm, timeout or None, prog
        self.heartbeat = heartbeat
        self.name, self.rank, self.size, self.device = comm.name, comm.rank, comm.size, comm.device
        self.armed = False
        self.slowest_epoch = 0.0
        self._epochs = 0  # measured by arm()
        self._told = False  # rank 0 said that a wait on live peers passed the timeout
        self._lock = threading.Condition()
        self._waiting: tuple[str, float] | None = None  # (operation, when it began)
        self._thread: threading.Thread | None = None

    def arm(self, epoch_seconds: float = 0.0) -> None:
        """Watch the blocking calls from now on, and count an epoch's time.

        ``epoch_seconds``, an epoch just measured (its slowest rank's time), raises
        :meth:`limit` if it is the slowest so far.  The first epoch compiles kernels: its
        time stands for the epochs only until a second is measured, so that a hang is not
        given ten compilations' time."""
        self.slowest_epoch = (epoch_seconds if self._epochs == 1
                              else max(self.slowest_epoch, epoch_seconds))
        self._epochs += 1
        if self.timeout is None or self.armed:
            return
        self.armed = True
        self._thread = threading.Thread(target=self._watch, name="comm-watchdog", daemon=True)
        self._thread.start()

    def limit(self) -> float:
        """How long a wait may last while every peer still beats: ``SLOW_WAIT_FACTOR``
        times the longer of the timeout and the slowest epoch so far."""
        return SLOW_WAIT_FACTOR * max(self.timeout, self.slowest_epoch)

    @contextmanager
    def guard(self, op: str):
        if not self.armed:
            yield
            return
        with self._lock:
            self._waiting = (op, time.monotonic())
            self._lock.notify()
        try:
            yield
        finally:
            with self._lock:
                self._waiting = None

    def overdue(self, op: str, waited: float) -> str | None:
        """The error line that ends the job after a wait past the timeout, or ``None``.

        ``waited``: the seconds (at least the timeout) of the wait in ``op``.  ``None``
        while the wait may go on: every peer still beats and the wait is within
        :meth:`limit` (then rank 0 says so, once a run, so that a slow job is seen as one).
        """
        if self.heartbeat is None:
            return self._error(op, self.timeout, "one of them died or hangs")
        if self.heartbeat.silent():
            return self._error(op, self.timeout, self.heartbeat.describe_silent())
        limit = self.limit()
        if waited >= limit:
            return self._error(
                op, limit, "every other rank still answers heartbeats, so one of them hangs",
                f"the limit while they do: {SLOW_WAIT_FACTOR} times the longer of "
                f"--comm-timeout and the slowest epoch so far, {self.slowest_epoch:.3g} s")
        if self.rank == 0 and not self._told:
            self._told = True
            print(f"{self.prog}: warning: rank 0: {op} has waited {self.timeout:g} s "
                  "(--comm-timeout) for the other ranks, which all still send heartbeats: "
                  f"one is slow, not dead; waiting up to {limit:.0f} s ({SLOW_WAIT_FACTOR} "
                  "times the longer of --comm-timeout and the slowest epoch so far)",
                  file=sys.stderr, flush=True)
        return None

    def _error(self, op: str, seconds: float, why: str,
               limit: str = "--comm-timeout sets the limit") -> str:
        return (f"{self.prog}: error: rank {self.rank}: {op} waited more than {seconds:g} s "
                f"for the other ranks; {why}; aborting the job ({limit})")

    def _watch(self) -> None:
        with self._lock:
            while True:
                if self._waiting is None:
                    self._lock.wait()
                    continue
                op, began = self._waiting
                if self.heartbeat is not None:  # a stop of this rank (SIGSTOP) is no wait
                    began = max(began, self.heartbeat.stopped_at())
                waited = time.monotonic() - began
                if waited < self.timeout:
                    self._lock.wait(self.timeout - waited)
                    continue
                line = self.overdue(op, waited)
                if line is not None:
                    break
                # look again a heartbeat later: a peer that falls silent meanwhile ends it
                self._lock.wait(min(self.heartbeat.interval, self.limit() - waited))
        self._abort(line)

    def _abort(self, line: str) -> None:
        """Print ``line`` and end the whole job (this process even if the abort hangs)."""
        print(line, file=sys.stderr, flush=True)
        threading.Timer(ABORT_GRACE_S, os._exit, (ABORT_STATUS,)).start()
        self.comm.abort(ABORT_STATUS)
        os._exit(ABORT_STATUS)

    def alltoallv(self, send, send_counts, recv, recv_counts):
        with self.guard("alltoallv"):
            self.comm.alltoallv(send, send_counts, recv, recv_counts)

    def ialltoallv(self, send, send_counts, recv, recv_counts):
        return _WatchedHandle(self, self.comm.ialltoallv(send, send_counts, recv, recv_counts),
                              "wait on ialltoallv")

    def allreduce(self, tensor, op="sum"):
        with self.guard("allreduce"):
            self.comm.allreduce(tensor, op)

    def broadcast(self, tensor, root=0):
        with self.guard("broadcast"):
            self.comm.broadcast(tensor, root)

    def barrier(self):
        with self.guard("barrier"):
            self.comm.barrier()

    def node_ids(self):
        with self.guard("node_ids"):
            return self.comm.node_ids()

    def split(self, color):
        """The part of ``comm`` (see :meth:`Communicator.split`) under this watchdog: its
        calls keep the deadline this one's thread watches, which aborts the whole job."""
        with self.guard("split"):
            part = self.comm.split(color)
        if part is None:
            return None
        view = copy.copy(self)
        view.comm, view.rank, view.size = part, part.rank, part.size
        view.guard = self.guard  # this watchdog's deadline, not a copy of it
        return view

    def abort(self, code):
        self.comm.abort(code)
