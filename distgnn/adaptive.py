r"""cd-r with an adaptive schedule: each epoch every rank sends, within a byte budget, the
split-vertex partials that changed most since they were last sent (in the spirit of
SANCUS's staleness-aware skipping), instead of a fixed bin of vertices.

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
reply.  The backward pass runs the same schedule on the gradients with its own state.
"""
from __future__ import annotations

import numpy as np
import torch

from .comm import Communicator, Done, Handle
from .errors import DistGNNError
from .timing import PhaseTimer
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

    ``ids``: local ids of the sending entries, ``counts``: entries per peer; ``peer_counts``:
    entries per peer on the receiving end (the other direction's ``counts``).  ``sent``
    ``[n, d]`` holds what each receiver holds for each entry; ``kept`` ``[m, d]`` what this
    rank received.
    """

    def __init__(self, counts, peer_counts, budget, width, dtype, device, wire: Wire):
        row_bytes = width * wire.element_size
        self.send_k = [budgeted_rows(n, budget, row_bytes) for n in counts]
        self.recv_k = [budgeted_rows(n, budget, row_bytes) for n in peer_counts]
        self.starts = np.concatenate([[0], np.cumsum(counts)])[:-1].tolist()
        # where each sent row's block begins in ``sent``
        self.send_base = torch.from_numpy(np.repeat(self.starts, self.send_k).astype(np.int64)
                                          ).to(device)
        recv_starts = np.concatenate([[0], np.cumsum(peer_counts)])[:-1]
        # where each received row's block begins in ``kept``
        self.recv_base = torch.from_numpy(np.repeat(recv_starts, self.recv_k).astype(np.int64)
                                          ).to(device)
        self.counts, self.wire = counts, wire
        zeros = lambda *shape, dtype=dtype: torch.zeros(*shape, dtype=dtype, device=device)  # noqa: E731
        self.sent = zeros(sum(counts), width)
        self.kept = zeros(sum(peer_counts), width)
        self.change = zeros(sum(counts), width)  # scratch of :meth:`send`
        self.values = zeros(sum(self.send_k), width)
        self.send_buf = wire.carrier(self.values)
        self.recv_buf = wire.buffer(sum(self.recv_k), width, device)
        self.send_pos = zeros(sum(self.send_k), dtype=torch.int32)
        self.recv_pos = zeros(sum(self.recv_k), dtype=torch.int32)
        self.handles: list[Handle] = []

    def wait(self, timer: PhaseTimer) -> None:
        with timer("exchange_wait"):
            for h in self.handles:
                h.wait()

    def fold(self) -> None:
        """Take what arrived into ``kept``."""
        if self.handles:
            rows = self.recv_base + self.recv_pos.to(torch.int64)
            self.kept.index_copy_(0, rows, self.wire.decode(self.recv_buf))
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
        self.send_pos.copy_(positions)
        rows = positions + self.send_base
        torch.index_select(current, 0, rows, out=self.values)
        self.wire.encode(self.values, self.send_buf, None)
        self.sent.index_copy_(0, rows, self.wire.decode(self.send_buf))
        self.handles = [comm.ialltoallv(self.send_buf, self.send_k, self.recv_buf, self.recv_k),
                        comm.ialltoallv(self.send_pos, self.send_k, self.recv_pos, self.recv_k)]
        return (self.send_buf.numel() * self.send_buf.element_size()
                + self.send_pos.numel() * POSITION_BYTES)

    STATE = ("sent", "kept", "recv_buf", "recv_pos")

    def state_dict(self) -> dict:
        state = {name: getattr(self, name).clone() for name in self.STATE}
        state["in_flight"] = bool(self.handles)
        return state

    def load_state_dict(self, state: dict) -> None:
        for name in self.STATE:
            if getattr(self, name).shape != state[name].shape:
                raise DistGNNError("the checkpoint's adaptive exchange state does not fit this "
                                   "partition, budget and exchange precision")
        for name in self.STATE:
            getattr(self, name).copy_(state[name])
        self.handles = [Done()] if state["in_flight"] else []


class AdaptiveExchange:
    """Adaptive cd-r state of one aggregation (one layer, one pass): the two sides.

    Same calling convention as :class:`distgnn.drpa.DelayedExchange`; ``index`` is the
    rank's :class:`distgnn.drpa.SplitIndex`, ``budget`` ``F`` of the module docstring.
    """

    def __init__(self, index, budget: float, width: int, comm: Communicator,
                 timer: PhaseTimer, dtype, device, wire: Wire):
        self.comm, self.timer = comm, timer
        self.leaf_ids = index.leaf_ids.to(device)
        self.root_ids = index.root_ids.to(device)
        self.up = Side(index.leaf_counts, index.root_counts, budget, width, dtype, device, wire)
        self.down = Side(index.root_counts, index.leaf_counts, budget, width, dtype, device,
                         wire)
        # what the up side sends (leaf partials) and the down side (replies), staged here
        self.leaf_values = torch.zeros(len(self.leaf_ids), width, dtype=dtype, device=device)
        self.replies = torch.zeros(len(self.root_ids), width, dtype=dtype, device=device)
        self.bytes_sent = 0

    def __call__(self, a: torch.Tensor, epoch: int) -> None:
        """Add the kept remote terms to ``a`` ``[n, d]`` in place; send what moved most."""
        for side in (self.up, self.down):
            side.wait(self.timer)
        with self.timer("exchange_post"):
            self.up.fold()
            self.down.fold()
        with self.timer("exchange_pre"):
            torch.index_select(a, 0, self.leaf_ids, out=self.leaf_values)
            self.bytes_sent += self.up.send(self.leaf_values, self.comm)
        with self.timer("exchange_post"):
            a.index_add_(0, self.root_ids, self.up.kept)
        with self.timer("exchange_pre"):
            torch.index_select(a, 0, self.root_ids, out=self.replies).sub_(self.up.kept)
            self.bytes_sent += self.down.send(self.replies, self.comm)
        with self.timer("exchange_post"):
            a.index_add_(0, self.leaf_ids, self.down.kept)

    def finish(self) -> None:
        for side in (self.up, self.down):
            side.wait(self.timer)

    def state_dict(self) -> dict:
        self.finish()
        return {"width": self.up.sent.shape[1],
                "adaptive": [self.up.state_dict(), self.down.state_dict()]}

    def load_state_dict(self, state: dict) -> None:
        if "adaptive" not in state:
            raise DistGNNError("the checkpoint's exchange state is not an adaptive cd-r one")
        self.up.load_state_dict(state["adaptive"][0])
        self.down.load_state_dict(state["adaptive"][1])
