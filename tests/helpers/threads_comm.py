"""An in-process communicator of P ranks: one thread per rank, the collectives of
:class:`distgnn.comm.Communicator` through a shared mailbox, so multi-rank code (the
split-vertex exchange, its start-up checks) runs in tests in seconds, without mpirun.

    results = run_ranks(3, lambda comm: work(comm))   # [work's result on rank 0, 1, 2]

Collectives match in the order each rank calls them, as MPI's do on one communicator:
the ``k``-th collective call of every rank is one operation.  A rank posts its part
(copies of what it sends) and collects the others' parts when it completes the operation:
at once for the blocking calls, at ``wait()`` for ``ialltoallv``, whose receive buffer is
written only then (MPI may write it any time before ``wait`` returns, so code that reads
it earlier is wrong under both).  Reductions add in rank order, so every rank gets the same
bits.  A rank that fails (or calls ``abort``) makes every other rank's pending or later
collective raise instead of waiting for it.
"""
from __future__ import annotations

import threading
from collections.abc import Callable, Sequence

import torch

from distgnn.errors import DistGNNError

TIMEOUT_S = 60  # a test that waits this long for a peer is deadlocked


class Aborted(RuntimeError):
    """Another rank of the job failed or aborted."""


class World:
    """What the ranks share: the posted parts of every operation, by sequence number.  The
    worlds of the communicators split from it are its children: a failure in any of them
    fails them all."""

    def __init__(self, size: int, nodes: Sequence[int] | None = None,
                 parent: World | None = None):
        self.size, self.parent = size, parent
        self.nodes = list(nodes) if nodes is not None else [0] * size  # node of each rank
        self.cond = threading.Condition()
        self.parts: dict[int, list] = {}  # operation -> part of each rank
        self.collected: dict[int, int] = {}  # operation -> ranks that collected it
        self.failure: str | None = None
        self.children: dict[tuple, World] = {}

    def child(self, key: tuple, nodes: Sequence[int]) -> World:
        """The world of the part ``key`` (the split and a color), made by its first rank."""
        with self.cond:
            if key not in self.children:
                self.children[key] = World(len(nodes), nodes, self)
                self.children[key].failure = self.failure
            return self.children[key]

    def post(self, op: int, rank: int, part) -> None:
        with self.cond:
            self.parts.setdefault(op, [None] * self.size)[rank] = (part,)
            self.cond.notify_all()

    def collect(self, op: int) -> list:
        """Every rank's part of operation ``op`` (waits for the missing ones)."""
        with self.cond:
            done = self.cond.wait_for(
                lambda: self.failure is not None or None not in self.parts[op], TIMEOUT_S)
            if self.failure is not None:
                raise Aborted(self.failure)
            if not done:
                raise TimeoutError(f"collective {op}: no part from ranks "
                                   f"{[r for r, p in enumerate(self.parts[op]) if p is None]}")
            parts = [p[0] for p in self.parts[op]]
            self.collected[op] = self.collected.get(op, 0) + 1
            if self.collected[op] == self.size:  # the last reader frees the operation
                del self.parts[op], self.collected[op]
            return parts

    def fail(self, why: str) -> None:
        if self.parent is not None:
            self.parent.fail(why)
            return
        self._fail(why)

    def _fail(self, why: str) -> None:
        with self.cond:
            if self.failure is None:
                self.failure = why
            self.cond.notify_all()
            children = list(self.children.values())
        for child in children:
            child._fail(why)


class ThreadsHandle:
    """An ``ialltoallv`` in flight: ``wait()`` fills the receive buffer."""

    def __init__(self, complete: Callable[[], None]):
        self.complete = complete

    def wait(self) -> None:
        if self.complete is not None:
            self.complete()
            self.complete = None


class ThreadsCommunicator:
    """Rank ``rank`` of ``world`` (see the module docstring); CPU tensors."""

    name = "threads"
    device = torch.device("cpu")

    def __init__(self, world: World, rank: int):
        self.world, self.rank, self.size = world, rank, world.size
        self.calls = 0

    def _post(self, part) -> int:
        op, self.calls = self.calls, self.calls + 1
        self.world.post(op, self.rank, part)
        return op

    def ialltoallv(self, send: torch.Tensor, send_counts: Sequence[int], recv: torch.Tensor,
                   recv_counts: Sequence[int]) -> ThreadsHandle:
        for buffer, counts in ((send, send_counts), (recv, recv_counts)):
            if len(counts) != self.size or sum(counts) != len(buffer):
                raise DistGNNError(f"rank {self.rank}: counts {list(counts)} do not describe "
                                   f"{len(buffer)} rows for {self.size} ranks")
        op = self._post(list(torch.split(send.clone(), list(send_counts))))
        recv_counts = list(recv_counts)

        def complete():
            start = 0
            for q, part in enumerate(self.world.collect(op)):
                block = part[self.rank]
                if len(block) != recv_counts[q]:
                    raise DistGNNError(f"rank {q} sends rank {self.rank} {len(block)} rows but "
                                       f"it expects {recv_counts[q]}")
                recv[start:start + len(block)].copy_(block)
                start += len(block)

        return ThreadsHandle(complete)

    def alltoallv(self, send, send_counts, recv, recv_counts) -> None:
        self.ialltoallv(send, send_counts, recv, recv_counts).wait()

    def allreduce(self, tensor: torch.Tensor, op: str = "sum") -> None:
        combine = {"sum": torch.add, "max": torch.maximum, "min": torch.minimum}[op]
        parts = self.world.collect(self._post(tensor.clone()))
        result = parts[0]
        for part in parts[1:]:
            result = combine(result, part)
        tensor.copy_(result)

    def broadcast(self, tensor: torch.Tensor, root: int = 0) -> None:
        parts = self.world.collect(self._post(tensor.clone() if self.rank == root else None))
        tensor.copy_(parts[root])

    def barrier(self) -> None:
        self.world.collect(self._post(None))

    def node_ids(self) -> list[int]:
        self.barrier()  # collective, as MPI's
        return list(self.world.nodes)

    def split(self, color: int | None) -> ThreadsCommunicator | None:
        op = self._post(color)
        colors = self.world.collect(op)
        if color is None:
            return None
        members = [r for r, c in enumerate(colors) if c == color]
        part = self.world.child((op, color), [self.world.nodes[r] for r in members])
        return ThreadsCommunicator(part, members.index(self.rank))

    def abort(self, code: int) -> None:
        self.world.fail(f"rank {self.rank} aborted with status {code}")
        raise Aborted(f"rank {self.rank} aborted with status {code}")


def run_ranks(size: int, work: Callable[[ThreadsCommunicator], object],
              nodes: Sequence[int] | None = None) -> list:
    """``work(comm)`` on ``size`` ranks at once, one thread each; their results by rank.
    ``nodes``: the node of each rank, as ``comm.node_ids()`` tells it (all on node 0 by
    default).  The first rank's exception (by rank) is raised after every thread has
    ended."""
    world = World(size, nodes)
    results: list = [None] * size
    errors: list[BaseException | None] = [None] * size

    def rank_main(rank: int) -> None:
        try:
            results[rank] = work(ThreadsCommunicator(world, rank))
        except BaseException as e:  # noqa: BLE001 -- handed to the caller below
            errors[rank] = e
            world.fail(f"rank {rank} failed: {type(e).__name__}: {e}")

    threads = [threading.Thread(target=rank_main, args=(r,), name=f"rank-{r}")
               for r in range(size)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    # the rank that failed first is the one not failing with Aborted
    first = [e for e in errors if e is not None and not isinstance(e, Aborted)] or \
        [e for e in errors if e is not None]
    if first:
        raise first[0]
    return results
