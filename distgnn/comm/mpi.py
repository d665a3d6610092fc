"""The mpi4py communicator: MPI collectives straight on the numpy view of CPU tensors.

mpi4py's buffer interface passes numpy memory to MPI without a copy, and on this class of
machine it beats torch.distributed's gloo by 1.2-5x for the DRPA exchanges.
"""
from __future__ import annotations

import numpy as np
import torch

from ..errors import DistGNNError


def _mpi():
    try:
        from mpi4py import MPI
    except ImportError as e:  # mpi4py present but no MPI library it can load
        raise DistGNNError(f"the mpi communicator needs a working mpi4py ({e})") from None
    return MPI


class _Request:
    def __init__(self, request, keep):
        self.request = request
        self.keep = keep  # the numpy views must outlive the operation

    def wait(self) -> None:
        self.request.Wait()


class MPICommunicator:
    """Collectives of ``MPI.COMM_WORLD`` (or ``comm``) on CPU tensors."""

    name = "mpi"
    device = torch.device("cpu")

    def __init__(self, comm=None):
        self.MPI = _mpi()
        self.comm = comm if comm is not None else self.MPI.COMM_WORLD
        self.rank = self.comm.Get_rank()
        self.size = self.comm.Get_size()
        self._ops = {"sum": self.MPI.SUM, "max": self.MPI.MAX, "min": self.MPI.MIN}

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

    def alltoallv(self, send, send_counts, recv, recv_counts):
        self.comm.Alltoallv(self._spec(send, send_counts), self._spec(recv, recv_counts))

    def ialltoallv(self, send, send_counts, recv, recv_counts):
        s, r = self._spec(send, send_counts), self._spec(recv, recv_counts)
        return _Request(self.comm.Ialltoallv(s, r), (s, r))

    def allreduce(self, tensor, op="sum"):
        self.comm.Allreduce(self.MPI.IN_PLACE, tensor.detach().numpy(), op=self._ops[op])

    def broadcast(self, tensor, root=0):
        self.comm.Bcast(tensor.detach().numpy(), root=root)

    def barrier(self):
        self.comm.Barrier()

    def abort(self, code):
        self.comm.Abort(code)
