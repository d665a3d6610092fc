"""Communicators: the collective operations a rank needs, behind one small interface.

Every buffer is a ``torch.Tensor`` whose first dimension is the unit of the counts (a
row of ``d`` values); CPU tensors are shared with numpy without copying, so the mpi4py
implementation works on the same memory, and a GPU rank can pass ``cuda`` tensors to the
torch.distributed implementation (nccl).  ``alltoallv`` sends rows
``send[sum(send_counts[:q]) : sum(send_counts[:q+1])]`` to rank ``q`` and receives rank
``q``'s rows into the matching block of ``recv``; both buffers are preallocated by the
caller and reused.  The split-vertex exchange talks only to this interface.
"""
from __future__ import annotations

import os
from typing import Callable, Protocol, Sequence, TypeVar

import torch

from ..errors import DistGNNError
from ..placement import gpu_identity
from .config import COMMUNICATORS, WAITS

__all__ = ["COMMUNICATORS", "WAITS", "Communicator", "Handle", "RankFailed", "SelfCommunicator",
           "all_or_none", "gather_messages", "get_communicator", "resolve_wait"]

T = TypeVar("T")


class Handle(Protocol):
    """An operation in flight; ``wait()`` blocks until its receive buffer is filled."""

    def wait(self) -> None: ...


class Communicator(Protocol):
    """What the exchange and the trainer need from a transport (see the module docstring).

    ``device`` is where the transport's buffers live (``cpu`` for MPI and gloo, the
    rank's GPU for nccl); :class:`~distgnn.comm.staging.Staged` copies other tensors.
    """

    name: str
    rank: int
    size: int
    device: torch.device

    def alltoallv(self, send: torch.Tensor, send_counts: Sequence[int], recv: torch.Tensor,
                  recv_counts: Sequence[int]) -> None: ...

    def ialltoallv(self, send: torch.Tensor, send_counts: Sequence[int], recv: torch.Tensor,
                   recv_counts: Sequence[int]) -> Handle: ...

    def allreduce(self, tensor: torch.Tensor, op: str = "sum") -> None: ...

    def broadcast(self, tensor: torch.Tensor, root: int = 0) -> None: ...

    def barrier(self) -> None: ...

    def abort(self, code: int) -> None: ...

    def node_ids(self) -> list[int]:
        """``[P]`` the node of every rank, numbered ``0, 1, ...`` in the order of each
        node's first rank: ranks with one id share a host's memory (collective)."""

    def split(self, color: int | None) -> "Communicator | None":
        """The ranks that pass one ``color`` (an int >= 0) as a communicator of their own,
        ranked in this one's order; ``None`` to a rank that passes ``None`` (MPI's
        ``Comm_split``; collective)."""


class Done:
    """The handle of an operation that completed when it was started."""

    def wait(self) -> None:
        pass


class SelfCommunicator:
    """The communicator of a job with one rank: alltoallv is a copy, reductions are no-ops."""

    name = "self"
    rank = 0
    size = 1
    device = torch.device("cpu")

    def alltoallv(self, send, send_counts, recv, recv_counts):
        if list(send_counts) != list(recv_counts):
            raise DistGNNError(f"alltoallv on one rank: sends {list(send_counts)} rows but "
                               f"expects {list(recv_counts)}")
        recv.copy_(send)

    def ialltoallv(self, send, send_counts, recv, recv_counts):
        self.alltoallv(send, send_counts, recv, recv_counts)
        return Done()

    def allreduce(self, tensor, op="sum"):
        pass

    def broadcast(self, tensor, root=0):
        pass

    def barrier(self):
        pass

    def abort(self, code):
        os._exit(code)

    def node_ids(self):
        return [0]

    def split(self, color):
        return self if color is not None else None


class RankFailed(DistGNNError):
    """A step failed on some rank; every rank of the job raises this together, with the same
    message (so rank 0 alone reports it)."""


# bytes of each rank's message that all_or_none gathers (a longer one is cut)
MESSAGE_BYTES = 1024


def rank_ranges(ranks: list[int]) -> str:
    """``[0, 1, 2, 5]`` as ``"ranks 0-2, 5"`` (``"rank 3"`` for one)."""
    spans, start = [], None
    for i, r in enumerate(ranks):
        if start is None:
            start = r
        if i + 1 == len(ranks) or ranks[i + 1] != r + 1:
            spans.append(str(start) if start == r else f"{start}-{r}")
            start = None
    return ("rank " if len(ranks) == 1 else "ranks ") + ", ".join(spans)


def gather_messages(comm: Communicator, message: str | None) -> dict[str, list[int]]:
    """Every rank's ``message`` (``None``: none), as ``{message: [ranks]}`` on every rank
    (collective; a sum-allreduce of one row per rank serves as the gather)."""
    table = torch.zeros(comm.size, MESSAGE_BYTES + 1, dtype=torch.int32)
    if message is not None:
        data = message.encode()[:MESSAGE_BYTES]
        table[comm.rank, 0] = 1
        table[comm.rank, 1:1 + len(data)] = torch.tensor(list(data), dtype=torch.int32)
    comm.allreduce(table)
    out: dict[str, list[int]] = {}
    for r in range(comm.size):
        if table[r, 0]:
            text = bytes(table[r, 1:].tolist()).rstrip(b"\0").decode(errors="replace")
            out.setdefault(text, []).append(r)
    return out


def all_or_none(comm: Communicator, step: Callable[[], T]) -> T:
    """Run the local ``step`` on every rank; raise :class:`RankFailed` on all if any fails.

    If ``step`` raises a user error on any rank, every rank raises :class:`RankFailed` (so no
    rank waits forever in a later collective).

    The error names every distinct message once, with the ranks that raised it (one line
    each), and is the same on every rank (so rank 0 alone reports it); it is raised alone,
    not chained to the local error, which it says in full.
    """
    try:
        result, error = step(), None
    except (DistGNNError, OSError) as e:
        result, error = None, e
    failed = torch.zeros(comm.size)
    failed[comm.rank] = error is not None
    comm.allreduce(failed)
    if failed.any():
        messages = gather_messages(comm, None if error is None else str(error))
        raise RankFailed("\n".join(text if comm.size == 1 else f"{rank_ranges(ranks)}: {text}"
                                    for text, ranks in messages.items())) from None
    return result


def resolve_wait(choice: str, threads: int, host_ranks: int, cores: int | None = None
                 ) -> str:
    """``poll`` or ``sleep``: how a rank waits under ``--comm-wait choice``.

    ``auto`` sleeps when the ``host_ranks`` ranks of this host, ``threads`` threads each,
    outnumber its ``cores`` (default: ``os.cpu_count()``), so that a waiting rank leaves its
    core to one that computes.
    """
    if choice != "auto":
        return choice
    return "sleep" if host_ranks * threads > (cores or os.cpu_count() or 1) else "poll"


def get_communicator(name: str, device: torch.device | str = "cpu", wait: str = "poll"
                     ) -> Communicator:
    """The communicator ``name`` for a rank computing on ``device``.

    It comes behind :class:`~distgnn.comm.staging.Staged`, so tensors on another device are
    copied.

    ``mpi``: mpi4py on host buffers, its blocking calls waiting as ``wait`` says (``poll``
    or ``sleep``, :mod:`distgnn.comm.mpi`); ``gloo``, ``nccl``, ``ccl``: torch.distributed
    with that backend (which waits in its own way, whatever ``wait``); ``auto``:
    nccl when every rank of the job computes on a GPU of its own, else mpi (nccl refuses
    two ranks on one GPU).
    """
    from .staging import Staged

    device = torch.device(device)
    if name not in COMMUNICATORS:
        raise DistGNNError(f"unknown communicator {name!r}; choose from "
                           f"{', '.join(COMMUNICATORS)}")
    if name == "auto":
        from .mpi import _mpi

        gpus = _mpi().COMM_WORLD.allgather(gpu_identity(device))
        name = "nccl" if None not in gpus and len(set(gpus)) == len(gpus) else "mpi"
    if name == "mpi":
        from .mpi import MPICommunicator

        return Staged(MPICommunicator(wait=wait))
    from .torch_dist import TorchCommunicator

    return Staged(TorchCommunicator(name, device))
