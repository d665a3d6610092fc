"""Staging of tensors that live elsewhere than the communicator's buffers.

A GPU rank's exchange buffers live on its GPU; a host transport (MPI, gloo, ccl) needs them in
host memory, and nccl needs the trainer's CPU statistics on the GPU.  :class:`Staged`
wraps a communicator and copies every tensor that is not on ``comm.device`` into a
staging buffer there (page-locked host memory when staging to the host from CUDA, so
the copies are DMA transfers), runs the operation, and copies results back.  Buffers are
kept, so the per-epoch exchanges allocate nothing: per shape and dtype for blocking
operations, and per source tensor for non-blocking ones (several cd-r exchanges of equal
shape are in flight at once; the exchange's buffers are long-lived).  Tensors already on
``comm.device`` pass through untouched.
"""
from __future__ import annotations

import torch


class _StagedHandle:
    def __init__(self, handle, staged: torch.Tensor, target: torch.Tensor):
        self.handle, self.staged, self.target = handle, staged, target

    def wait(self) -> None:
        self.handle.wait()
        if self.staged is not self.target:
            self.target.copy_(self.staged)


class Staged:
    """``comm`` taking tensors on any device (see the module docstring)."""

    def __init__(self, comm):
        self.comm = comm
        self.name, self.rank, self.size, self.device = comm.name, comm.rank, comm.size, comm.device
        self._buffers: dict[tuple, torch.Tensor] = {}

    def _stage(self, tensor: torch.Tensor, role: str, copy: bool,
               per_tensor: bool = False) -> torch.Tensor:
        if tensor.device == self.device:
            return tensor
        key = (role, tuple(tensor.shape), tensor.dtype,
               tensor.data_ptr() if per_tensor else None)
        buf = self._buffers.get(key)
        if buf is None:
            pin = self.device.type == "cpu" and tensor.device.type == "cuda"
            buf = torch.empty(tensor.shape, dtype=tensor.dtype, device=self.device,
                              pin_memory=pin)
            self._buffers[key] = buf
        if copy:
            buf.copy_(tensor)
        return buf

    def alltoallv(self, send, send_counts, recv, recv_counts):
        # the blocking call itself, not ialltoallv and a wait: that would go through the
        # progress thread of comm/mpi.py, a sleep of up to its interval per call
        s = self._stage(send, "send", copy=True)
        r = self._stage(recv, "recv", copy=False)
        self.comm.alltoallv(s, send_counts, r, recv_counts)
        if r is not recv:
            recv.copy_(r)

    def ialltoallv(self, send, send_counts, recv, recv_counts):
        s = self._stage(send, "send", copy=True, per_tensor=True)
        r = self._stage(recv, "recv", copy=False, per_tensor=True)
        return _StagedHandle(self.comm.ialltoallv(s, send_counts, r, recv_counts), r, recv)

    def allreduce(self, tensor, op="sum"):
        t = self._stage(tensor, "reduce", copy=True)
        self.comm.allreduce(t, op)
        if t is not tensor:
            tensor.copy_(t)

    def broadcast(self, tensor, root=0):
        t = self._stage(tensor, "broadcast", copy=True)
        self.comm.broadcast(t, root)
        if t is not tensor:
            tensor.copy_(t)

    def barrier(self):
        self.comm.barrier()

    def abort(self, code):
        self.comm.abort(code)

    def node_ids(self):
        return self.comm.node_ids()

    def split(self, color):
        part = self.comm.split(color)
        return None if part is None else Staged(part)
