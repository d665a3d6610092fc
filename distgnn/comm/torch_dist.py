"""The torch.distributed communicator: gloo on CPU, nccl for GPU ranks, ccl with oneCCL.

The process group is initialised from the MPI job it runs in: rank and size come from
MPI, and rank 0 picks a free TCP port for the rendezvous and broadcasts it, so no
``MASTER_ADDR``/``MASTER_PORT`` set-up is needed under mpirun.
"""
from __future__ import annotations

import atexit
import copy
import importlib.util
import socket

import torch
import torch.distributed as dist

from ..errors import DistGNNError
from ..placement import gpu_identity
from .nodes import nodes_by_host_name

# torch.distributed calls these "backends"; here they are transports, beside the
# aggregation backends of distgnn.nn.backends
TRANSPORTS = ("gloo", "nccl", "ccl")
CCL_MISSING = ("the ccl communicator needs Intel's oneCCL bindings for PyTorch "
               "(oneccl_bindings_for_pytorch, not on PyPI: install the oneccl_bind_pt wheel "
               "matching this torch from Intel's package index)")


def ccl_available() -> bool:
    return importlib.util.find_spec("oneccl_bindings_for_pytorch") is not None


def _rendezvous(transport: str) -> None:
    from mpi4py import MPI

    comm = MPI.COMM_WORLD
    address = None
    if comm.rank == 0:
        with socket.socket() as s:
            s.bind(("", 0))
            address = f"tcp://{socket.gethostname()}:{s.getsockname()[1]}"
    address = comm.bcast(address, root=0)
    dist.init_process_group(transport, init_method=address, rank=comm.rank, world_size=comm.size)


def _one_gpu_per_rank(device: torch.device) -> None:
    """Refuse a job in which two ranks would drive one GPU through nccl (which it rejects
    with an internal error at the first collective)."""
    from mpi4py import MPI

    gpus = MPI.COMM_WORLD.allgather(gpu_identity(device))
    shared = [r for r, g in enumerate(gpus) if gpus.count(g) > 1]
    if shared:
        raise DistGNNError(f"the nccl communicator needs a GPU of its own for every rank, "
                           f"but ranks {', '.join(map(str, shared))} share one; use --comm mpi "
                           "or gloo (GPU tensors are staged through host memory), or give "
                           "each rank its own GPU (distgnn-launch --gpus-per-node)")


class _Work:
    def __init__(self, work):
        self.work = work

    def wait(self) -> None:
        self.work.wait()


class TorchCommunicator:
    """Collectives of the default torch.distributed process group, or of a part of it.

    ``group`` is that part, made by :meth:`split` (``None``: the default group).

    ``transport``: ``gloo`` (CPU tensors), ``nccl`` (tensors on ``device``, a GPU), ``ccl``
    (CPU tensors; needs ``oneccl_bindings_for_pytorch``).
    """

    def __init__(self, transport: str = "gloo", device: torch.device | str = "cpu"):
        if transport not in TRANSPORTS:
            raise DistGNNError(f"unknown torch.distributed transport {transport!r}; choose "
                               f"from {', '.join(TRANSPORTS)}")
        device = torch.device(device)
        if transport == "nccl" and device.type != "cuda":
            raise DistGNNError("the nccl communicator needs every rank on a GPU "
                               f"(--device cuda); this rank computes on {device}")
        if transport == "ccl":
            if not ccl_available():
                raise DistGNNError(CCL_MISSING)
            importlib.import_module("oneccl_bindings_for_pytorch")  # registers "ccl"
        if transport == "nccl":
            _one_gpu_per_rank(device)
            torch.cuda.set_device(device)
        if not dist.is_initialized():
            _rendezvous(transport)
            # gloo's threads can abort the interpreter at exit unless the group is torn down
            atexit.register(dist.destroy_process_group)
        self.name = transport
        self.device = device if transport == "nccl" else torch.device("cpu")
        self.rank = dist.get_rank()
        self.size = dist.get_world_size()
        self.group = None  # the default group
        self._ops = {"sum": dist.ReduceOp.SUM, "max": dist.ReduceOp.MAX,
                     "min": dist.ReduceOp.MIN}

    def ialltoallv(self, send, send_counts, recv, recv_counts):
        return _Work(dist.all_to_all_single(recv, send, [int(c) for c in recv_counts],
                                            [int(c) for c in send_counts], group=self.group,
                                            async_op=True))

    def alltoallv(self, send, send_counts, recv, recv_counts):
        self.ialltoallv(send, send_counts, recv, recv_counts).wait()

    def allreduce(self, tensor, op="sum"):
        dist.all_reduce(tensor, op=self._ops[op], group=self.group)

    def broadcast(self, tensor, root=0):
        dist.broadcast(tensor, group=self.group, group_src=root)

    def barrier(self):
        dist.barrier(group=self.group)

    def abort(self, code):
        from mpi4py import MPI

        MPI.COMM_WORLD.Abort(code)

    def node_ids(self):
        return nodes_by_host_name(self)

    def split(self, color):
        # torch.distributed makes a group only with every rank of the parent calling
        # new_group for it, in one order: every rank makes every color's group
        colors = torch.zeros(self.size, dtype=torch.int64, device=self.device)
        colors[self.rank] = -1 if color is None else color + 1  # the sum gathers each rank's
        self.allreduce(colors)
        colors, mine = colors.tolist(), None
        for c in sorted(set(colors) - {-1}):
            ranks = [r for r, k in enumerate(colors) if k == c]
            group = dist.new_group([self._global(r) for r in ranks])
            if self.rank in ranks:
                mine = copy.copy(self)
                mine.group, mine.rank, mine.size = group, ranks.index(self.rank), len(ranks)
        return mine

    def _global(self, rank: int) -> int:
        """The default group's rank of this group's ``rank``."""
        return rank if self.group is None else dist.get_global_rank(self.group, rank)
