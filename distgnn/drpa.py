"""Delayed Remote Partial Aggregates (DistGNN, Md et al. SC'21, Section 5.3): the exchange of
split-vertex partial aggregates between ranks.

Under a vertex-cut, vertex ``v`` has clones on the ranks ``R(v)``; rank ``p`` computes a
*partial* aggregate over its own edges, ``a^p_v = sum_{u in N_p(v)} x_u``, and the full
aggregate is ``a_v = sum_{p in R(v)} a^p_v``.  One clone is the root, the others leaves.

- **cd-0** (exact): leaves send ``a^q_v`` to the root, the root sums, and sends ``a_v``
  back, every layer:  ``a^p_v <- sum_{q in R(v)} a^q_v`` on every clone.  This map ``M`` is
  symmetric, so the backward pass applies the same reduce-broadcast to the gradients
  (the clone gradients are partial sums of the vertex's gradient).
- **cd-r** (delay ``r``): split vertex ``v`` is in bin ``v mod r`` (global id).  At epoch
  ``e``, bin ``b = e mod r``: leaves of bin ``b`` start sending their fresh partials
  (non-blocking); roots take the partials of bin ``b`` that were sent at ``e - r`` and keep
  them; each root clone then holds ``a^root_v(e) + sum_leaves a^q_v(stale)`` and replies,
  for bin ``b``, to each leaf with everything except that leaf's own partial; leaves take
  the replies sent at ``e - r`` and add them to their fresh partial.  So every clone
  aggregates its fresh local partial plus the latest remote complement it has, which is
  ``r`` (roots) or ``2r`` (leaves) epochs old when it is refreshed.  The backward pass runs
  the same schedule on the gradients with its own buffers.  Before the first arrivals the
  complement is zero.  Evaluation (no training) uses the exact cd-0 exchange.
- **0c**: no exchange; each rank normalises by its local degrees.

Two options change what a cd-r clone does with what arrives and what travels:

- **smoothing** (PipeGCN's, Wan et al. ICLR 2022): each arrival ``m`` for an entry (a leaf
  partial at its root, a reply at its leaf, and the same for gradients) updates the kept value
  ``s <- gamma s + (1 - gamma) m`` instead of replacing it (the first arrival is kept as it
  is), so the stale complement is a moving average over refreshes: it damps the epoch-to-
  epoch noise (dropout masks, weight steps) that a single stale value carries.
- **bf16 on the wire** with error feedback (as in EC-Graph and AdaQP's compensation): a
  sender transmits ``q = bf16(x + e)`` and keeps ``e <- x + e - q`` per entry, so what is
  lost to rounding is sent later instead of never.  Under cd-0 this makes the exchange
  inexact (by about ``2^-8`` relative per value); evaluation exchanges stay exact.

A third replaces cd-r's bins: the **adaptive schedule** of :mod:`distgnn.adaptive` sends,
within a byte budget, the partials that changed most since last sent.

Message order on the wire follows :mod:`partition.layout`'s split tables, so no ids are
sent (except by the adaptive schedule, which sends positions).  Every buffer is allocated
once per width and reused every layer and epoch.
"""
from __future__ import annotations

import dataclasses

import numpy as np
import torch

from partition.format import row_digests

from .adaptive import AdaptiveExchange
from .comm import Communicator, Done, Handle, all_or_none
from .errors import DistGNNError
from .timing import PhaseTimer
from .wire import Wire

ALGORITHMS = ("cd-0", "cd-r", "0c")


@dataclasses.dataclass
class SplitIndex:
    """One rank's side of the split-vertex tree, grouped by peer rank.

    Attributes:
        leaf_ids: int64 ``[l]`` local ids of this rank's leaves, grouped by root rank,
            increasing within a group (the order the root lists them in).
        leaf_counts: ``[P]`` leaves whose root is on each rank.
        root_ids: int64 ``[L]`` local ids of the roots here, once per leaf elsewhere,
            grouped by the leaf's rank (the partition's ``leaf_root_local``).
        root_counts: ``[P]`` leaf entries per peer rank.
        leaf_global, root_global: int64 global ids of the same entries (they pick bins).
    """

    leaf_ids: torch.Tensor
    leaf_counts: list[int]
    root_ids: torch.Tensor
    root_counts: list[int]
    leaf_global: np.ndarray
    root_global: np.ndarray

    @classmethod
    def from_partition(cls, part) -> "SplitIndex":
        root_rank = np.asarray(part.root_rank)
        leaves = np.flatnonzero(root_rank != part.rank)
        leaves = leaves[np.argsort(root_rank[leaves], kind="stable")]
        leaf_counts = np.bincount(root_rank[leaves], minlength=part.num_parts)
        root_ids = np.asarray(part.leaf_root_local, dtype=np.int64)
        ids = np.asarray(part.global_ids)
        return cls(torch.from_numpy(leaves.astype(np.int64)), leaf_counts.tolist(),
                   torch.from_numpy(root_ids.copy()), np.diff(part.leaf_ptr).tolist(),
                   ids[leaves], ids[root_ids])

    def check(self, comm: Communicator, part) -> None:
        """Check, with the peers, that the split tables of partition ``part`` (this rank's)
        describe the same vertices as theirs, before any exchange relies on them
        (collective; raises :class:`~distgnn.comm.RankFailed` on every rank).

        1. Each peer sends as many leaf partials as this rank's table expects (else an
           exchange would overrun its buffers).
        2. Each leaf sends its root its global id, global in-degree, local in-degree and
           the digest of its feature row and label (:func:`partition.format.row_digests`):
           the root checks that the entry is that vertex (so every cd-r bin matches too),
           that both store the same global in-degree, features and label, and that the
           local in-degrees of all clones add up to it; a vertex without clones must hold
           all its in-edges.
        """
        sent = torch.tensor(self.leaf_counts, dtype=torch.int64).unsqueeze(1)
        told = torch.empty_like(sent)
        ones = [1] * comm.size

        def counts_agree():
            told_counts = told.squeeze(1).tolist()
            bad = [q for q in range(comm.size) if told_counts[q] != self.root_counts[q]]
            if bad:
                q = bad[0]
                raise DistGNNError(f"rank {q} sends {told_counts[q]} split-vertex partials but "
                                   f"this partition expects {self.root_counts[q]} (partitions "
                                   "from different runs?)")

        comm.alltoallv(sent, ones, told, ones)
        all_or_none(comm, counts_agree)
        in_degree = np.asarray(part.in_degree, dtype=np.int64)
        local_degree = np.diff(np.asarray(part.graph.indptr)).astype(np.int64)
        leaves = self.leaf_ids.numpy()
        up = torch.from_numpy(np.stack([self.leaf_global, in_degree[leaves],
                                        local_degree[leaves],
                                        row_digests(part.x, part.y, leaves).view(np.int64)],
                                       axis=1))
        got = torch.empty(len(self.root_ids), 4, dtype=torch.int64)
        comm.alltoallv(up, self.leaf_counts, got, self.root_counts)

        def tables_agree():
            g = got.numpy()
            roots = self.root_ids.numpy()
            wrong = np.flatnonzero(g[:, 0] != self.root_global)
            if len(wrong):
                raise DistGNNError(f"split-vertex table entry {wrong[0]} is vertex "
                                   f"{self.root_global[wrong[0]]} here but {g[wrong[0], 0]} on "
                                   "its leaf's rank (partitions from different runs?)")
            wrong = np.flatnonzero(g[:, 1] != in_degree[roots])
            if len(wrong):
                v = self.root_global[wrong[0]]
                raise DistGNNError(f"vertex {v} has global in-degree {in_degree[roots[wrong[0]]]}"
                                   f" here but {g[wrong[0], 1]} on a leaf's rank")
            wrong = np.flatnonzero(g[:, 3] != row_digests(part.x, part.y, roots).view(np.int64))
            if len(wrong):
                raise DistGNNError(f"vertex {self.root_global[wrong[0]]} has other features or "
                                   "another label on a leaf's rank than at its root here")
            total = local_degree.copy()
            np.add.at(total, roots, g[:, 2])
            is_root = np.asarray(part.root_rank) == part.rank
            wrong = np.flatnonzero(is_root & (total != in_degree))
            if len(wrong):
                v = int(np.asarray(part.global_ids)[wrong[0]])
                raise DistGNNError(f"vertex {v}: its clones hold {total[wrong[0]]} in-edges but "
                                   f"in_degree says {in_degree[wrong[0]]}")

        all_or_none(comm, tables_agree)


def _select(mask: np.ndarray, counts: list[int]) -> tuple[torch.Tensor, list[int]]:
    """Positions where ``mask`` holds, and how many fall in each peer's block."""
    bounds = np.concatenate([[0], np.cumsum(counts)])
    positions = np.flatnonzero(mask)
    return (torch.from_numpy(positions.astype(np.int64)),
            np.diff(np.searchsorted(positions, bounds)).tolist())


@dataclasses.dataclass
class Bin:
    """One cd-r bin of one aggregation: which split-vertex entries it holds, its message
    buffers (allocated once) and its requests in flight.  ``*_values`` hold a message before
    the wire encodes it (``*_send``, ``*_recv`` are in the wire's type).

    ``leaf_*``: this rank's leaves in the bin (``sel``: positions in the split index,
    ``ids``: local ids, ``counts``: per root rank); ``root_*``: the leaf entries of roots
    here.  ``up`` carries leaf partials to the roots, ``down`` each root's reply (the sum
    over the other clones) back; ``own`` holds each entry's kept partial, subtracted from
    the reply to that leaf.
    """

    leaf_sel: torch.Tensor
    leaf_ids: torch.Tensor
    leaf_counts: list[int]
    root_sel: torch.Tensor
    root_ids: torch.Tensor
    root_counts: list[int]
    up_send: torch.Tensor
    up_recv: torch.Tensor
    down_send: torch.Tensor
    down_recv: torch.Tensor
    own: torch.Tensor
    up_values: torch.Tensor
    down_values: torch.Tensor
    up: Handle | None = None
    down: Handle | None = None
    up_seen: bool = False  # an up (down) message has been folded in before: smoothing applies
    down_seen: bool = False


class DelayedExchange:
    """cd-r state of one aggregation (one layer, one pass): bins, stale partials, requests.

    ``smoothing`` is PipeGCN's ``gamma`` (0: keep the latest arrival); ``wire`` says how
    partials travel (see the module docstring)."""

    def __init__(self, index: SplitIndex, delay: int, width: int, comm: Communicator,
                 timer: PhaseTimer, dtype, device, smoothing: float = 0.0,
                 wire: Wire | None = None):
        self.index, self.delay, self.comm, self.timer = index, delay, comm, timer
        self.smoothing = smoothing
        self.wire = wire if wire is not None else Wire("fp32", dtype)
        new = lambda rows: torch.zeros(rows, width, dtype=dtype, device=device)  # noqa: E731
        sent = lambda rows: self.wire.buffer(rows, width, device)  # noqa: E731
        self.partials = new(len(index.root_ids))  # last partial received per leaf entry
        self.complement = new(len(index.leaf_ids))  # last reply received per leaf
        # error feedback: what the wire lost, per leaf (up) and per leaf entry (down)
        self.up_residual = new(len(index.leaf_ids)) if self.wire.compressed else None
        self.down_residual = new(len(index.root_ids)) if self.wire.compressed else None
        self.bins = []
        for b in range(delay):
            leaf_sel, leaf_counts = _select(index.leaf_global % delay == b, index.leaf_counts)
            root_sel, root_counts = _select(index.root_global % delay == b, index.root_counts)
            up_values, down_values = new(len(leaf_sel)), new(len(root_sel))
            self.bins.append(Bin(
                leaf_sel.to(device), index.leaf_ids[leaf_sel].to(device), leaf_counts,
                root_sel.to(device), index.root_ids[root_sel].to(device), root_counts,
                up_send=self.wire.carrier(up_values), up_recv=sent(len(root_sel)),
                down_send=self.wire.carrier(down_values), down_recv=sent(len(leaf_sel)),
                own=new(len(root_sel)), up_values=up_values, down_values=down_values))
        self.leaf_ids = index.leaf_ids.to(device)
        self.root_ids = index.root_ids.to(device)
        self.bytes_sent = 0

    def __call__(self, a: torch.Tensor, epoch: int) -> None:
        """Add the stale remote complement to ``a`` ``[n, d]`` in place; refresh bin
        ``epoch mod r``."""
        b = self.bins[epoch % self.delay]
        self.wait(b)
        with self.timer("exchange_post"):
            if b.up is not None:
                self.fold(self.partials, b.root_sel, b.up_recv, b.up_seen)
                b.up_seen = True
            if b.down is not None:
                self.fold(self.complement, b.leaf_sel, b.down_recv, b.down_seen)
                b.down_seen = True
        with self.timer("exchange_pre"):
            torch.index_select(a, 0, b.leaf_ids, out=b.up_values)
            self.wire.encode(b.up_values, b.up_send, self.up_residual, b.leaf_sel)
            b.up = self.comm.ialltoallv(b.up_send, b.leaf_counts, b.up_recv, b.root_counts)
        with self.timer("exchange_post"):
            a.index_add_(0, self.root_ids, self.partials)
        with self.timer("exchange_pre"):
            torch.index_select(a, 0, b.root_ids, out=b.down_values)
            torch.index_select(self.partials, 0, b.root_sel, out=b.own)
            b.down_values -= b.own
            self.wire.encode(b.down_values, b.down_send, self.down_residual, b.root_sel)
            b.down = self.comm.ialltoallv(b.down_send, b.root_counts, b.down_recv,
                                          b.leaf_counts)
        with self.timer("exchange_post"):
            a.index_add_(0, self.leaf_ids, self.complement)
        self.bytes_sent += (b.up_send.numel() + b.down_send.numel()) * b.up_send.element_size()

    def fold(self, kept: torch.Tensor, rows: torch.Tensor, received: torch.Tensor,
             seen: bool) -> None:
        """Take an arrival into ``kept[rows]``: replace, or smooth once one has arrived."""
        value = self.wire.decode(received)
        if self.smoothing and seen:
            value = torch.lerp(value, kept.index_select(0, rows), self.smoothing)
        kept.index_copy_(0, rows, value)

    def wait(self, b: Bin) -> None:
        with self.timer("exchange_wait"):
            for handle in (b.up, b.down):
                if handle is not None:
                    handle.wait()

    def finish(self) -> None:
        """Complete every request in flight (before the communicator goes away)."""
        for b in self.bins:
            self.wait(b)
            b.up = b.down = None

    def state_dict(self) -> dict:
        """Everything the schedule carries between epochs, after draining the requests in
        flight: their receive buffers hold what the next visit of each bin folds in, so a
        restored exchange proceeds exactly as the uninterrupted one would have."""
        for b in self.bins:
            self.wait(b)
        state = {"width": self.partials.shape[1], "partials": self.partials.clone(),
                 "complement": self.complement.clone(),
                 "arrived": [{"up": b.up_recv.clone() if b.up is not None else None,
                              "down": b.down_recv.clone() if b.down is not None else None,
                              "seen": [b.up_seen, b.down_seen]}
                             for b in self.bins]}
        if self.wire.compressed:
            state["residuals"] = [self.up_residual.clone(), self.down_residual.clone()]
        return state

    def load_state_dict(self, state: dict) -> None:
        shapes = [(self.partials, state["partials"]), (self.complement, state["complement"])]
        if self.wire.compressed:
            shapes += zip((self.up_residual, self.down_residual), state.get("residuals", ()))
        if (len(state["arrived"]) != self.delay or any(a.shape != b.shape for a, b in shapes)
                or self.wire.compressed != ("residuals" in state)):
            raise DistGNNError("the checkpoint's cd-r exchange state does not fit this "
                               "partition, delay and exchange precision")
        self.partials.copy_(state["partials"])
        self.complement.copy_(state["complement"])
        if self.wire.compressed:
            self.up_residual.copy_(state["residuals"][0])
            self.down_residual.copy_(state["residuals"][1])
        for b, arrived in zip(self.bins, state["arrived"]):
            b.up = b.down = None
            # absent from checkpoints written before smoothing existed (which had none)
            b.up_seen, b.down_seen = arrived.get("seen", [False, False])
            if arrived["up"] is not None:
                b.up_recv.copy_(arrived["up"])
                b.up = Done()
            if arrived["down"] is not None:
                b.down_recv.copy_(arrived["down"])
                b.down = Done()


def _keep(grad: torch.Tensor) -> None:
    """No gradient exchange (see ``DRPA(backward=False)``)."""


class _Exchange(torch.autograd.Function):
    """``y <- forward_op(y)`` in place; the gradient goes through ``backward_op``."""

    @staticmethod
    def forward(ctx, y, forward_op, backward_op):
        ctx.backward_op = backward_op
        ctx.mark_dirty(y)
        forward_op(y)
        return y

    @staticmethod
    def backward(ctx, grad):
        grad = grad.clone()  # grad may be shared with other consumers: never edit it in place
        ctx.backward_op(grad)
        return grad, None, None


class _ExtremeExchange(torch.autograd.Function):
    """``y <-`` the element-wise max (or min) over clones, in place; the gradient of each
    element goes to the one clone whose partial attained it (see :meth:`DRPA.extreme`)."""

    @staticmethod
    def forward(ctx, y, drpa, reduce, empty):
        ctx.drpa = drpa
        ctx.winners = drpa.extreme_broadcast(y, reduce, empty)
        ctx.mark_dirty(y)
        return y

    @staticmethod
    def backward(ctx, grad):
        grad = grad.clone()
        ctx.drpa.route_to_winners(grad, *ctx.winners)
        return grad, None, None, None


class DRPA:
    """The split-vertex exchange of one rank for every layer of a model.

    Args:
        index (SplitIndex): this rank's split tables.
        comm (Communicator): the transport.
        algo (str): ``"cd-0"`` or ``"cd-r"`` (0c has no exchange, hence no DRPA), as
            :class:`~distgnn.config.TrainConfig` validated it.
        delay (int): ``r`` for cd-r (>= 1).
        timer (PhaseTimer): receives ``exchange_pre`` (gathers, sends started),
            ``exchange_wait`` (blocked in the transport) and ``exchange_post`` seconds.
        backward (bool): exchange gradients in the backward pass.  ``False`` reproduces
            DGL's cd-0, whose split-vertex gradients miss the other clones' parts; it
            exists to show that difference, not for training.
        smoothing (float): cd-r's PipeGCN smoothing ``gamma`` in ``[0, 1)`` (0: none).
        budget (float, optional): cd-r with the adaptive schedule of
            :mod:`distgnn.adaptive` at this fraction of cd-0's bytes, instead of bins.
        precision (str): ``"fp32"`` (the run's own type) or ``"bf16"`` with error feedback,
            for the training exchanges of cd-0 and cd-r.

    Called as ``drpa(y, layer, step, training)`` on a layer's partial aggregates ``y``
    ``[n, d]``; returns ``y`` updated in place (and differentiable).
    """

    def __init__(self, index: SplitIndex, comm: Communicator, algo: str = "cd-0",
                 delay: int = 0, timer: PhaseTimer | None = None, backward: bool = True,
                 smoothing: float = 0.0, precision: str = "fp32", budget: float | None = None):
        self.index, self.comm, self.algo, self.delay = index, comm, algo, delay
        self.backward, self.smoothing, self.precision = backward, smoothing, precision
        self.budget = budget
        # cd-0 error feedback per (layer, direction): what the wire lost per leaf / entry
        self.residuals: dict[tuple, tuple[torch.Tensor, torch.Tensor]] = {}
        self.timer = timer if timer is not None else PhaseTimer()
        self.buffers: dict[tuple, tuple[torch.Tensor, torch.Tensor]] = {}
        self.leaf_ids, self.root_ids = index.leaf_ids, index.root_ids
        self.delayed: dict[tuple, DelayedExchange] = {}
        self.bytes_sent = 0  # by the synchronous exchange; see total_bytes_sent

    @property
    def total_bytes_sent(self) -> int:
        return self.bytes_sent + sum(d.bytes_sent for d in self.delayed.values())

    def __call__(self, y: torch.Tensor, layer: int, step: int, training: bool) -> torch.Tensor:
        if self.comm.size == 1:
            return y
        if self.algo == "cd-r" and training:
            forward = lambda a: self._delayed(layer, "forward", a)(a, step)  # noqa: E731
            backward = lambda g: self._delayed(layer, "backward", g)(g, step)  # noqa: E731
        elif training and self.precision != "fp32":
            forward = lambda a: self.reduce_broadcast(a, (layer, "forward"))  # noqa: E731
            backward = lambda g: self.reduce_broadcast(g, (layer, "backward"))  # noqa: E731
        else:
            forward = backward = self.reduce_broadcast
        return _Exchange.apply(y, forward, backward if self.backward else _keep)

    def exact(self, y: torch.Tensor) -> torch.Tensor:
        """cd-0's sum over clones, forward and backward, whatever the algorithm (what must
        be exact in every epoch, as attention's softmax normaliser)."""
        if self.comm.size == 1:
            return y
        return _Exchange.apply(y, self.reduce_broadcast, self.reduce_broadcast)

    def extreme(self, y: torch.Tensor, reduce: str, empty: torch.Tensor) -> torch.Tensor:
        r"""The element-wise ``max`` (or ``min``) over clones of partial extremes ``y``
        ``[n, d]``, exact in every epoch (cd-0, fp32 or the run's type on the wire):

        .. math::
            y_v \leftarrow \max_{p \in R(v)} y^p_v, \qquad
            \frac{\partial L}{\partial y^p_v} = [p = w_v] \sum_{q \in R(v)}
                \frac{\partial L}{\partial y^q_v}

        where ``w_v`` is the clone that attained the extreme (the root on a tie, then the
        leaf listed first), so the gradient reaches exactly one in-edge, as on one socket.
        ``empty`` ``[n]`` marks rows without local in-edges: they take no part, and rows
        without in-edges on any clone stay 0."""
        if self.comm.size == 1:
            return y
        return _ExtremeExchange.apply(y, self, reduce, empty)

    def extreme_broadcast(self, a: torch.Tensor, reduce: str, empty: torch.Tensor):
        """:meth:`extreme`'s forward on ``a`` in place; returns ``(kept, won)``: bool
        ``[n, d]`` where this rank's own partial attained the extreme, and bool ``[L, d]``
        where the leaf entry (root side) did."""
        fill = -torch.inf if reduce == "max" else torch.inf
        a.masked_fill_(empty.unsqueeze(1), fill)
        leaf_buf, root_buf, _, _ = self._buffers(a, Wire("fp32", a.dtype))
        ix = self.index
        with self.timer("exchange_pre"):
            torch.index_select(a, 0, self.leaf_ids, out=leaf_buf)
        with self.timer("exchange_wait"):
            self.comm.alltoallv(leaf_buf, ix.leaf_counts, root_buf, ix.root_counts)
        with self.timer("exchange_post"):
            before = a.clone()
            rows = self.root_ids.unsqueeze(1).expand_as(root_buf)
            a.scatter_reduce_(0, rows, root_buf, "amax" if reduce == "max" else "amin")
            kept = a == before
            best = a.index_select(0, self.root_ids)
            # a leaf entry wins where it attains the extreme, the root does not, and no leaf
            # entry listed before it does (ties go to one clone, as on one socket to one edge)
            entry = torch.arange(len(root_buf), device=a.device).unsqueeze(1).expand_as(root_buf)
            candidate = (root_buf == best) & ~kept.index_select(0, self.root_ids)
            first = torch.full(a.shape, len(root_buf), dtype=torch.int64, device=a.device)
            first.scatter_reduce_(0, rows, torch.where(candidate, entry, len(root_buf)), "amin")
            won = candidate & (first.index_select(0, self.root_ids) == entry)
            root_buf.copy_(best)
        with self.timer("exchange_wait"):
            self.comm.alltoallv(root_buf, ix.root_counts, leaf_buf, ix.leaf_counts)
        with self.timer("exchange_post"):
            a.index_copy_(0, self.leaf_ids, leaf_buf)
            a.masked_fill_(a == fill, 0.0)
        self.bytes_sent += (leaf_buf.numel() + root_buf.numel()) * leaf_buf.element_size()
        return kept, won

    def route_to_winners(self, grad: torch.Tensor, kept: torch.Tensor,
                         won: torch.Tensor) -> None:
        """:meth:`extreme`'s backward on ``grad`` in place: each vertex's gradient summed
        over clones, then kept only by the clone that attained the extreme."""
        leaf_buf, root_buf, _, _ = self._buffers(grad, Wire("fp32", grad.dtype))
        ix = self.index
        torch.index_select(grad, 0, self.leaf_ids, out=leaf_buf)
        with self.timer("exchange_wait"):
            self.comm.alltoallv(leaf_buf, ix.leaf_counts, root_buf, ix.root_counts)
        grad.index_add_(0, self.root_ids, root_buf)
        torch.index_select(grad, 0, self.root_ids, out=root_buf)
        root_buf.mul_(won)
        with self.timer("exchange_wait"):
            self.comm.alltoallv(root_buf, ix.root_counts, leaf_buf, ix.leaf_counts)
        grad.mul_(kept)
        grad.index_copy_(0, self.leaf_ids, leaf_buf)
        self.bytes_sent += (leaf_buf.numel() + root_buf.numel()) * leaf_buf.element_size()

    def _delayed(self, layer: int, direction: str, a: torch.Tensor):
        """The cd-r state of ``(layer, direction)`` (a :class:`DelayedExchange`, or an
        :class:`~distgnn.adaptive.AdaptiveExchange` under a budget), made on first use."""
        key = (layer, direction)
        if key not in self.delayed:
            wire = Wire(self.precision, a.dtype)
            self.delayed[key] = (
                AdaptiveExchange(self.index, self.budget, a.shape[1], self.comm, self.timer,
                                 a.dtype, a.device, wire) if self.budget is not None else
                DelayedExchange(self.index, self.delay, a.shape[1], self.comm, self.timer,
                                a.dtype, a.device, self.smoothing, wire))
        return self.delayed[key]

    def _buffers(self, a: torch.Tensor, wire: Wire) -> tuple[torch.Tensor, ...]:
        """The leaf-side and root-side buffers for ``a``'s width, in the run's type and the
        wire's, allocated on first use."""
        key = (a.shape[1], a.dtype, a.device, wire.type)
        if key not in self.buffers:
            self.leaf_ids, self.root_ids = self.leaf_ids.to(a.device), self.root_ids.to(a.device)
            rows = (len(self.leaf_ids), len(self.root_ids))
            staged = [torch.empty(n, a.shape[1], dtype=a.dtype, device=a.device) for n in rows]
            self.buffers[key] = (*staged, *map(wire.carrier, staged))
        return self.buffers[key]

    def reduce_broadcast(self, a: torch.Tensor, feedback: tuple | None = None) -> None:
        """cd-0 on ``a`` ``[n, d]`` in place: every clone ends with the sum over all clones.
        ``feedback``: the ``(layer, direction)`` whose error-feedback residuals a compressed
        wire uses (``None``: exact, uncompressed)."""
        wire = Wire(self.precision if feedback else "fp32", a.dtype)
        leaf_buf, root_buf, leaf_wire, root_wire = self._buffers(a, wire)
        if wire.compressed and feedback not in self.residuals:
            self.residuals[feedback] = (torch.zeros_like(leaf_buf), torch.zeros_like(root_buf))
        leaf_residual, root_residual = self.residuals.get(feedback, (None, None))
        ix = self.index
        with self.timer("exchange_pre"):
            torch.index_select(a, 0, self.leaf_ids, out=leaf_buf)
            wire.encode(leaf_buf, leaf_wire, leaf_residual)
        with self.timer("exchange_wait"):
            self.comm.alltoallv(leaf_wire, ix.leaf_counts, root_wire, ix.root_counts)
        with self.timer("exchange_post"):
            a.index_add_(0, self.root_ids, wire.decode(root_wire))
            torch.index_select(a, 0, self.root_ids, out=root_buf)
            wire.encode(root_buf, root_wire, root_residual)
        with self.timer("exchange_wait"):
            self.comm.alltoallv(root_wire, ix.root_counts, leaf_wire, ix.leaf_counts)
        with self.timer("exchange_post"):
            a.index_copy_(0, self.leaf_ids, wire.decode(leaf_wire))
        self.bytes_sent += (leaf_wire.numel() + root_wire.numel()) * leaf_wire.element_size()

    def finish(self) -> None:
        """Complete the cd-r requests still in flight."""
        for d in self.delayed.values():
            d.finish()

    def state_dict(self) -> dict:
        """The state of every (layer, pass), keyed ``"layer/direction"``: cd-r's schedule,
        or cd-0's error-feedback residuals on a bf16 wire (exact fp32 cd-0: none)."""
        state = {f"{layer}/{direction}": d.state_dict()
                 for (layer, direction), d in self.delayed.items()}
        state.update({f"{layer}/{direction}": {"residuals": [r.clone() for r in pair]}
                      for (layer, direction), pair in self.residuals.items()})
        return state

    def load_state_dict(self, state: dict, device: torch.device | str = "cpu") -> None:
        for key, value in state.items():
            layer, direction = key.split("/")
            if self.algo == "cd-r" and "width" in value:
                kept = value["adaptive"][0]["sent"] if "adaptive" in value else value["partials"]
                like = torch.empty(0, value["width"], dtype=kept.dtype, device=device)
                self._delayed(int(layer), direction, like).load_state_dict(value)
            elif self.algo == "cd-0" and self.precision != "fp32" and "width" not in value:
                self.residuals[(int(layer), direction)] = tuple(r.to(device)
                                                                for r in value["residuals"])
            else:
                raise DistGNNError("the checkpoint's exchange state does not fit this "
                                   f"exchange ({self.algo}, {self.precision} on the wire)")
