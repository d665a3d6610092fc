"""The mpi4py communicator: MPI collectives straight on the numpy view of CPU tensors.

mpi4py's buffer interface passes numpy memory to MPI without a copy, and on this class of
machine it beats torch.distributed's gloo by 1.2-5x for the split-vertex exchanges.

Open MPI (and MPICH without its asynchronous-progress option) moves the data of a
non-blocking collective only while some thread of the rank is inside an MPI call; across
hosts a TCP transfer stalls as soon as the socket buffers fill, so cd-r's exchanges would
wait for the next blocking collective instead of overlapping the compute.  A progress thread
(:class:`_Progress`) tests the requests in flight every :data:`PROGRESS_INTERVAL_S` while
the main thread computes (the Numba kernels and torch release the GIL).

A blocking collective (``alltoallv``, ``allreduce``, ``broadcast``, ``barrier``) waits in one
of two ways (``wait``, ``--comm-wait``).  ``poll``: inside MPI, which polls its transports
until the operation completes (the lowest latency; the rank keeps its core busy while it
waits).  ``sleep``: the non-blocking form, tested and, once it has not completed within
:data:`SPIN_S`, tested again after sleeps that double from :data:`SLEEP_FIRST_S` to
:data:`SLEEP_MAX_S`; a waiting rank then leaves its core to the ranks still computing,
which is what counts where a host runs more ranks (times threads) than it has cores.
"""
from __future__ import annotations

import atexit
import threading
import time

import numpy as np
import torch

from ..errors import DistGNNError
from .nodes import numbered


def _mpi():
    try:
        from mpi4py import MPI
    except ImportError as e:  # mpi4py present but no MPI library it can load
        raise DistGNNError(f"the mpi communicator needs a working mpi4py ({e})") from None
    return MPI


# How a blocking call of the sleep mode waits: tests for SPIN_S, then sleeps between tests,
# doubling from SLEEP_FIRST_S to SLEEP_MAX_S (at 1 Gbit/s a 0.2 ms gap is 25 KB, well
# within the kernel's TCP buffers, so a transfer in progress does not stall)
SPIN_S = 50e-6
SLEEP_FIRST_S = 20e-6
SLEEP_MAX_S = 200e-6
# How often the progress thread enters MPI while requests are in flight: at 10 Gbit/s a
# 0.5 ms gap is 625 KB, about what the kernel's TCP buffers hold, so the link stays busy.
PROGRESS_INTERVAL_S = 0.5e-3


class _Progress:
    """A daemon thread that completes this process's non-blocking requests.

    It is the only caller of ``Test`` on them (MPI forbids completing one request from two
    threads) and sets each request's ``done`` event (with ``error`` set if MPI raised); it
    sleeps while nothing is in flight.  Needs ``MPI_THREAD_MULTIPLE``: the main thread keeps
    making blocking calls meanwhile.
    """

    def __init__(self):
        self._cond = threading.Condition()
        self._pending: list[_Request] = []
        self._thread: threading.Thread | None = None
        self._stopping = False

    def submit(self, request: _Request) -> None:
        with self._cond:
            self._pending.append(request)
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="mpi-progress",
                                                daemon=True)
                self._thread.start()
                # mpi4py finalizes MPI after Python's atexit handlers: no Test may run then
                atexit.register(self.stop)
            self._cond.notify()

    def stop(self) -> None:
        with self._cond:
            self._stopping = True
            self._cond.notify()
        if self._thread is not None:
            self._thread.join(timeout=1.0)

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._pending and not self._stopping:
                    self._cond.wait()
                if self._stopping:
                    return
                work = list(self._pending)
            finished = []
            for item in work:
                try:
                    if item.request.Test():
                        finished.append(item)
                except Exception as e:  # noqa: BLE001 - handed to the waiting thread
                    item.error = e
                    finished.append(item)
            with self._cond:
                for item in finished:
                    self._pending.remove(item)
            for item in finished:
                item.done.set()
            if len(finished) < len(work):
                time.sleep(PROGRESS_INTERVAL_S)


_progress = _Progress()


class _Request:
    def __init__(self, request, keep, progressed: bool):
        self.request = request
        self.keep = keep  # the numpy views must outlive the operation
        self.error: Exception | None = None
        self.done = threading.Event() if progressed else None
        if progressed:
            _progress.submit(self)

    def wait(self) -> None:
        if self.done is None:
            self.request.Wait()
            return
        self.done.wait()
        if self.error is not None:
            raise self.error


def sleep_until_done(request) -> None:
    """Complete ``request`` (an mpi4py request) as the module docstring's sleep mode waits."""
    start = time.perf_counter()
    pause = SLEEP_FIRST_S
    while not request.Test():
        if time.perf_counter() - start > SPIN_S:
            time.sleep(pause)
            pause = min(2 * pause, SLEEP_MAX_S)


def boot_id() -> str:
    """What names this host's kernel: ranks that share it share its cores (the nodes of an
    emulated cluster, whose network namespaces run on one host, included)."""
    try:
        with open("/proc/sys/kernel/random/boot_id") as f:
            return f.read().strip()
    except OSError:  # not Linux: the host name
        import socket

        return socket.gethostname()


class MPICommunicator:
    """Collectives of ``MPI.COMM_WORLD`` (or ``comm``) on CPU tensors; blocking calls wait as
    ``wait`` says (``"poll"`` or ``"sleep"``, see the module docstring)."""

    name = "mpi"
    device = torch.device("cpu")

    def __init__(self, comm=None, wait: str = "poll"):
        if wait not in ("poll", "sleep"):
            raise DistGNNError(f"the mpi communicator waits by poll or sleep, not {wait!r}")
        self.MPI = _mpi()
        self.wait = wait
        self.comm = comm if comm is not None else self.MPI.COMM_WORLD
        self.rank = self.comm.Get_rank()
        self.size = self.comm.Get_size()
        self._ops = {"sum": self.MPI.SUM, "max": self.MPI.MAX, "min": self.MPI.MIN}
        # without MPI_THREAD_MULTIPLE a second thread may not call MPI: requests then
        # progress only in the main thread's calls, as before
        self.progress_thread = self.MPI.Query_thread() == self.MPI.THREAD_MULTIPLE

    def _spec(self, tensor: torch.Tensor, counts):
        if tensor.device.type != "cpu":
            raise DistGNNError("the mpi communicator works on CPU tensors (get_communicator "
                               "stages device tensors through host memory)")
        array = tensor.detach().numpy()
        row = int(np.prod(array.shape[1:], dtype=np.int64))
        counts = np.asarray(counts, dtype=np.int64) * row
        displs = np.zeros_like(counts)
        np.cumsum(counts[:-1], out=displs[1:])
        return [array, (counts, displs), self.MPI._typedict[array.dtype.char]]

    def _blocking(self, blocking, started, *args, **kwargs) -> None:
        """``blocking(*args, **kwargs)``, or in the sleep mode its non-blocking form
        ``started`` completed by :func:`sleep_until_done`."""
        if self.wait == "sleep":
            sleep_until_done(started(*args, **kwargs))
        else:
            blocking(*args, **kwargs)

    def alltoallv(self, send, send_counts, recv, recv_counts):
        self._blocking(self.comm.Alltoallv, self.comm.Ialltoallv,
                       self._spec(send, send_counts), self._spec(recv, recv_counts))

    def ialltoallv(self, send, send_counts, recv, recv_counts):
        s, r = self._spec(send, send_counts), self._spec(recv, recv_counts)
        return _Request(self.comm.Ialltoallv(s, r), (s, r), self.progress_thread)

    def allreduce(self, tensor, op="sum"):
        self._blocking(self.comm.Allreduce, self.comm.Iallreduce, self.MPI.IN_PLACE,
                       tensor.detach().numpy(), op=self._ops[op])

    def broadcast(self, tensor, root=0):
        self._blocking(self.comm.Bcast, self.comm.Ibcast, tensor.detach().numpy(), root=root)

    def barrier(self):
        self._blocking(self.comm.Barrier, self.comm.Ibarrier)

    def abort(self, code):
        self.comm.Abort(code)

    def node_ids(self):
        # MPI's shared-memory split groups the ranks that can share memory: one node
        node = self.comm.Split_type(self.MPI.COMM_TYPE_SHARED)
        try:
            first = node.bcast(self.rank, root=0)
        finally:
            node.Free()
        return numbered(self.comm.allgather(first))

    def split(self, color):
        part = self.comm.Split(self.MPI.UNDEFINED if color is None else color, self.rank)
        return None if part == self.MPI.COMM_NULL else MPICommunicator(part, self.wait)

    def host_ranks(self) -> int:
        """How many ranks of the job run on this rank's host (its kernel; collective)."""
        mine = boot_id()
        return sum(other == mine for other in self.comm.allgather(mine))
