"""A watchdog on blocking collectives: a rank that waits too long aborts the whole job.

When a rank dies, the MPI launcher usually notices and takes the job down (Open MPI's
``mpirun`` within a second).  When it does not (a rank that hangs, a node that stops
answering, a launcher that waits), every other rank would block forever in its next
collective.  :class:`Watchdog` wraps a communicator: each blocking call (and each
``wait()`` of a non-blocking one) sets a deadline ``timeout`` seconds ahead, and a daemon
thread that finds a deadline passed prints which rank waited in which operation, and, given
a :class:`~distgnn.comm.heartbeat.Heartbeat`, which peers (on which hosts) it stopped
hearing from, and calls the communicator's ``abort`` (``MPI_Abort`` ends every rank of
the job), falling back to ``os._exit`` if the abort itself does not return promptly.
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


class _WatchedHandle:
    def __init__(self, watchdog: "Watchdog", handle, op: str):
        self.watchdog, self.handle, self.op = watchdog, handle, op

    def wait(self) -> None:
        with self.watchdog.guard(self.op):
            self.handle.wait()


class Watchdog:
    """``comm`` with a deadline of ``timeout`` seconds on every blocking call once armed.

    Disarmed until :meth:`arm` (set-up steps and the first, JIT-compiling, epoch may
    legitimately keep peers waiting for long); ``timeout`` ``None`` or ``0`` never arms.
    """

    def __init__(self, comm, timeout: float | None = DEFAULT_TIMEOUT_S, prog: str = "distgnn",
                 heartbeat=None):
        self.comm, self.timeout, self.prog = comm, timeout or None, prog
        self.heartbeat = heartbeat
        self.name, self.rank, self.size, self.device = comm.name, comm.rank, comm.size, comm.device
        self.armed = False
        self._lock = threading.Condition()
        self._waiting: tuple[str, float] | None = None  # (operation, deadline)
        self._thread: threading.Thread | None = None

    def arm(self) -> None:
        if self.timeout is None or self.armed:
            return
        self.armed = True
        self._thread = threading.Thread(target=self._watch, name="comm-watchdog", daemon=True)
        self._thread.start()

    @contextmanager
    def guard(self, op: str):
        if not self.armed:
            yield
            return
        with self._lock:
            self._waiting = (op, time.monotonic() + self.timeout)
            self._lock.notify()
        try:
            yield
        finally:
            with self._lock:
                self._waiting = None

    def _watch(self) -> None:
        with self._lock:
            while True:
                if self._waiting is None:
                    self._lock.wait()
                    continue
                op, deadline = self._waiting
                left = deadline - time.monotonic()
                if left > 0:
                    self._lock.wait(left)
                    continue
                break
        why = ("one of them died or hangs" if self.heartbeat is None
               else self.heartbeat.describe_silent())
        print(f"{self.prog}: error: rank {self.rank}: {op} waited more than {self.timeout:g} s "
              f"for the other ranks; {why}; aborting the job (--comm-timeout sets the limit)",
              file=sys.stderr, flush=True)
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
