"""Keeping the model replicas of all ranks one model: identical initial weights, summed
gradients and losses, and statistics over ranks."""
from __future__ import annotations

import torch

from ..comm import Communicator


class ReplicaSync:
    """Keeps the model replicas of all ranks identical.

    One flat buffer (of the parameters' type) holds every gradient, the loss and one
    non-finite flag per rank, so a step costs a single allreduce; the same buffer carries
    the initial weights from rank 0.
    """

    def __init__(self, model: torch.nn.Module, comm: Communicator):
        params = [p for p in model.parameters() if p.requires_grad]
        self.comm = comm
        self.size = sum(p.numel() for p in params)
        # where the transport wants it; with one rank, beside the gradients (no transfers)
        device = comm.device if comm.size > 1 else params[0].device
        self.flat = torch.zeros(self.size + 1 + comm.size, dtype=params[0].dtype, device=device)
        # each parameter's flat slice of the buffer
        self.slots = list(zip(params, torch.split(self.flat[:self.size],
                                                  [p.numel() for p in params])))
        self.flags = self.flat[self.size + 1:]
        self.nonfinite_ranks: list[int] = []

    @property
    def step_bytes(self) -> int:
        """Bytes each rank hands to the allreduce of one step (0 on one rank: none)."""
        return self.flat.numel() * self.flat.element_size() if self.comm.size > 1 else 0

    @torch.no_grad()
    def broadcast_parameters(self) -> None:
        for p, slot in self.slots:
            slot.copy_(p.view(-1))
        self.comm.broadcast(self.flat, root=0)
        for p, slot in self.slots:  # copied: parameters must not alias the gradient buffer
            p.view(-1).copy_(slot)

    def allreduce_gradients(self, loss: torch.Tensor) -> float:
        """Sum gradients and losses over ranks; returns the global loss and sets
        ``nonfinite_ranks`` to the ranks whose loss or gradients were not all finite."""
        for p, slot in self.slots:
            if p.grad is None:
                slot.zero_()
            else:
                slot.copy_(p.grad.view(-1))
        self.flat[self.size] = loss.detach()
        self.flags.zero_()
        self.flags[self.comm.rank] = float(not torch.isfinite(self.flat[:self.size + 1]).all())
        if self.comm.size > 1:
            self.comm.allreduce(self.flat)
            for p, slot in self.slots:
                if p.grad is None:
                    p.grad = torch.empty_like(p)
                p.grad.view(-1).copy_(slot)
        self.nonfinite_ranks = self.flags.nonzero().flatten().tolist()
        return float(self.flat[self.size])


def rank_statistics(comm: Communicator, values: dict[str, float]
                    ) -> tuple[dict, dict, dict]:
    """``(max, mean, argmax)`` over ranks of each value: one allreduce gathers every rank's
    row (``[P, k]`` float64; ``argmax`` is the lowest rank holding the maximum)."""
    table = torch.zeros(comm.size, len(values), dtype=torch.float64)
    table[comm.rank] = torch.tensor(list(values.values()), dtype=torch.float64)
    comm.allreduce(table)
    high, where = table.max(0)
    return (dict(zip(values, high.tolist())), dict(zip(values, table.mean(0).tolist())),
            dict(zip(values, where.tolist())))
