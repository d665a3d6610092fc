r"""cd-r with an adaptive schedule: the partials that changed most, within a byte budget.

Each epoch every rank sends, within a byte budget, the split-vertex partials that changed
most since they were last sent (in the spirit of SANCUS's staleness-aware skipping),
instead of a fixed bin of vertices.

Per peer block of ``n`` entries (the leaves a rank holds for one root rank, or the leaf
entries a root holds for one leaf rank) a rank sends the ``k`` rows with the largest

.. math::
    \lVert \mathbf{x}_i - \mathbf{s}_i \rVert_2^2, \qquad
    k = \min\Big(n, \max\big(1, \big\lfloor F\, n\, \tfrac{u}{u + 4} \big\rfloor\big)\Big)

where ``x_i`` is what entry ``i`` would send now (a leaf's fresh partial; a root's reply,
its aggregate less that leaf's kept partial), ``s_i`` what its receiver holds for it (the
last value sent, as the wire delivered it, so bf16 rounding is sent later like error
feedback), ``F`` the budget (``--comm-budget``: a fraction of cd-0's bytes), ``u`` the bytes
of one row on the wire and 4 those of its int32 position.  ``F >= 1 + 4 / u`` sends every
row, which is cd-r with delay 1.  Both ends compute ``k`` from ``n``, so message sizes need
no extra exchange.  Rows are ranked by a stable sort (ties: lower position first), so a run
is deterministic.  What is sent at epoch ``e`` is folded in at ``e + 1``: a root aggregates
its fresh partial plus the kept leaf partials, a leaf its fresh partial plus its kept
reply (:class:`~.delayed.StaleSum`'s skeleton).  The backward pass runs the same schedule on
the gradients with its own state.
"""
from __future__ import annotations

import numpy as np
import torch

from ..comm import Communicator, Done, Handle
from ..errors import DistGNNError
from ..timing import PhaseTimer
from .channel import Channel, expect_kind, tagged
from .delayed import StaleSum
from .index import SplitIndex
from .wire import Wire

POSITION_BYTES = 4


def budgeted_rows(n: int, budget: float, row_bytes: int) -> int:
    """``k`` of the module docstring: rows sent per epoch out of a block of ``n``."""
    if n == 0:
        return 0
    # the share first, capped at all: a huge budget must not overflow the row count
    share = min(1.0, budget * row_bytes / (row_bytes + POSITION_BYTES))
    return min(n, max(1, int(share * n)))


class Side:
    """One direction of the adaptive exchange (leaves to roots, or roots to leaves).

    ``counts``: entries per peer at this end; ``peer_counts``: entries per peer at the
    receiving end (the other direction's ``counts``).  ``sent`` ``[n, d]`` holds what each
    receiver holds for each entry here; ``kept`` ``[m, d]`` what this rank received.  Per
    peer block, ``rows`` carries the ``k`` chosen rows and ``positions`` (int32 ``[k]``) their
    positions in the block.
    """

    def __init__(self, counts: list[int], peer_counts: list[int], budget: float, width: int,
                 dtype: torch.dtype, device, wire: Wire):
        row_bytes = wire.row_bytes
        send_k = [budgeted_rows(n, budget, row_bytes) for n in counts]
        recv_k = [budgeted_rows(n, budget, row_bytes) for n in peer_counts]
        self.starts = np.concatenate([[0], np.cumsum(counts)])[:-1].tolist()
        # where each sent row's block begins in ``sent``
        self.send_base = torch.from_numpy(np.repeat(self.starts, send_k).astype(np.int64)
                                          ).to(device)
        recv_starts = np.concatenate([[0], np.cumsum(peer_counts)])[:-1]
        # where each received row's block begins in ``kept``
        self.recv_base = torch.from_numpy(np.repeat(recv_starts, recv_k).astype(np.int64)
                                          ).to(device)
        self.counts, self.send_k, self.wire = counts, send_k, wire

        def zeros(*shape, dtype=dtype):
            return torch.zeros(*shape, dtype=dtype, device=device)

        self.sent = zeros(sum(counts), width)
        self.kept = zeros(sum(peer_counts), width)
        self.change = zeros(sum(counts), width)  # scratch of :meth:`send`
        self.rows = Channel.allocate(wire, send_k, recv_k, width, dtype, device)
        send_pos = zeros(sum(send_k), dtype=torch.int32)
        self.positions = Channel(Wire("fp32", torch.int32), send_k, recv_k, send_pos, send_pos,
                                 zeros(sum(recv_k), dtype=torch.int32))
        self.handles: list[Handle] = []

    def wait(self, timer: PhaseTimer) -> None:
        with timer("exchange_wait"):
            for h in self.handles:
                h.wait()

    def fold(self) -> None:
        """Take what arrived into ``kept``."""
        if self.handles:
            rows = self.recv_base + self.positions.recv.to(torch.int64)
            self.kept.index_copy_(0, rows, self.rows.received())
            self.handles = []

    def send(self, current: torch.Tensor, comm: Communicator) -> int:
        """Send, per peer block, the rows of ``current`` ``[n, d]`` that moved most since
        last sent; returns the bytes sent."""
        change = torch.sub(current, self.sent, out=self.change).square_().sum(1)
        chosen = []
        for start, n, k in zip(self.starts, self.counts, self.send_k):
            order = torch.sort(change[start:start + n], descending=True, stable=True).indices
            chosen.append(order[:k])
        positions = torch.cat(chosen)
        self.positions.values.copy_(positions)
        rows = positions + self.send_base
        self.rows.gather(current, rows)
        self.sent.index_copy_(0, rows, self.wire.decode(self.rows.send))
        self.handles = [self.rows.start(comm), self.positions.start(comm)]
        return self.rows.bytes + self.positions.bytes

    def state_dict(self) -> dict:
        return {"sent": self.sent.clone(), "kept": self.kept.clone(),
                "received": self.rows.recv.clone(),
                "received_positions": self.positions.recv.clone(),
                "in_flight": bool(self.handles)}

    def load_state_dict(self, state: dict) -> None:
        mine = {"sent": self.sent, "kept": self.kept, "received": self.rows.recv,
                "received_positions": self.positions.recv}
        if any(t.shape != state[name].shape for name, t in mine.items()):
            raise DistGNNError("the checkpoint's adaptive exchange state does not fit this "
                               "partition, budget and exchange precision")
        for name, t in mine.items():
            t.copy_(state[name])
        self.handles = [Done()] if state["in_flight"] else []


class AdaptiveSum(StaleSum):
    """Adaptive cd-r for one layer and pass: the two sides.

    A :class:`~distgnn.exchange.LayerExchange` of kind ``"adaptive"``.

    Args:
        index (SplitIndex): this rank's split tables.
        comm (Communicator): the transport.
        timer (PhaseTimer): receives the exchange phases.
        comm_budget (float): ``F`` of the module docstring.
        exchange_precision (str): ``"fp32"`` or ``"bf16"`` (no residuals: ``sent`` holds
            what the wire delivered, so the rounding is sent later anyway).
        width, dtype, device: of the ``a`` it exchanges.
    """

    kind = "adaptive"

    def __init__(self, *, index: SplitIndex, comm: Communicator, timer: PhaseTimer,
                 comm_budget: float, exchange_precision: str, width: int, dtype: torch.dtype,
                 device):
        self.comm, self.timer, self.width, self.dtype = comm, timer, width, dtype
        wire = Wire(exchange_precision, dtype, width)
        self.leaf_ids = index.leaf_ids.to(device)
        self.root_ids = index.root_ids.to(device)
        self.up = Side(index.leaf_counts, index.root_counts, comm_budget, width, dtype, device,
                       wire)
        self.down = Side(index.root_counts, index.leaf_counts, comm_budget, width, dtype,
                         device, wire)
        self.partials, self.complement = self.up.kept, self.down.kept
        # what the up side sends (leaf partials) and the down side (replies), staged here
        self.leaf_values = torch.zeros(len(self.leaf_ids), width, dtype=dtype, device=device)
        self.replies = torch.zeros(len(self.root_ids), width, dtype=dtype, device=device)
        self.bytes_sent = 0

    def receive(self, epoch: int) -> None:
        for side in (self.up, self.down):
            side.wait(self.timer)
        with self.timer("exchange_post"):
            self.up.fold()
            self.down.fold()

    def send_up(self, a: torch.Tensor, epoch: int) -> int:
        torch.index_select(a, 0, self.leaf_ids, out=self.leaf_values)
        return self.up.send(self.leaf_values, self.comm)

    def send_down(self, a: torch.Tensor, epoch: int) -> int:
        torch.index_select(a, 0, self.root_ids, out=self.replies).sub_(self.partials)
        return self.down.send(self.replies, self.comm)

    def finish(self) -> None:
        """Complete the requests in flight (what arrived is folded in at the next call)."""
        for side in (self.up, self.down):
            side.wait(self.timer)

    def state_dict(self) -> dict:
        """``{"kind": "adaptive", "width", "dtype", "up", "down"}``: each side's ``sent``,
        ``kept``, what arrived and its positions, and whether it is still to be folded in
        (after completing the requests in flight)."""
        self.finish()
        return tagged(self.kind, self.width, self.dtype, up=self.up.state_dict(),
                      down=self.down.state_dict())

    def load_state_dict(self, state: dict) -> None:
        expect_kind(state, self.kind, "adaptive exchange")
        self.up.load_state_dict(state["up"])
        self.down.load_state_dict(state["down"])
