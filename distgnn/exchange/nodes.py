r"""cd-0's sum over clones in two levels, for jobs with several ranks on a node.

The clones on one node add up within the node first, and one row per vertex and node
crosses the network.

Let ``N(p)`` be the node of rank ``p`` (:meth:`~distgnn.comm.Communicator.node_ids`: MPI's
shared-memory split) and ``l(n)`` the *leader* of node ``n``, its lowest rank.  For a split
vertex ``v`` with clones on the ranks ``R(v)`` and its root on rank ``r(v)``:

1. *node up*: every clone ``p`` sends its partial ``a^p_v`` to its leader, which adds them,
   ``s^n_v = sum_{p in R(v), N(p) = n} a^p_v``;
2. *across up*: every leader ``l(n)`` with ``n != N(r(v))`` sends ``s^n_v`` to the leader of
   the root's node, which adds them, ``a_v = sum_n s^n_v``;
3. *across down*: that leader replies ``a_v`` to each of them;
4. *node down*: every leader sends ``a_v`` to each clone of ``v`` on its node.

Per vertex and direction, ``|{N(p) : p in R(v)}| - 1`` rows cross the network, against the
flat exchange's ``|{p in R(v) : N(p) != N(r(v))}|`` (one per leaf off the root's node), and
each leader sends one message to each other leader.  Steps 1 and 4 are ``alltoallv``\ s of
the node's own communicator (its ranks, split from the job's by node: MPI moves them
through shared memory), steps 2 and 3 of the leaders' communicator, one rank per node; the
other ranks of a node take no part in them.
"""
from __future__ import annotations

import numpy as np
import torch

from ..comm import Communicator, all_or_none
from ..errors import DistGNNError
from ..timing import PhaseTimer
from .channel import expect_kind, tagged
from .index import SplitIndex


def _counts_from_peers(comm: Communicator, counts: list[int]) -> list[int]:
    """``[P]`` rows each rank will send this one, given ``counts`` ``[P]`` it sends each."""
    sent = torch.tensor(counts, dtype=torch.int64).unsqueeze(1)
    told = torch.empty_like(sent)
    ones = [1] * comm.size
    comm.alltoallv(sent, ones, told, ones)
    return told.squeeze(1).tolist()


def _send_ids(comm: Communicator, ids: np.ndarray, counts: list[int],
              peer_counts: list[int]) -> np.ndarray:
    """An alltoallv of int64 rows ``ids`` ``[sum(counts), k]``; returns what arrived."""
    got = torch.empty(sum(peer_counts), *ids.shape[1:], dtype=torch.int64)
    comm.alltoallv(torch.from_numpy(np.ascontiguousarray(ids, dtype=np.int64)), counts, got,
                   peer_counts)
    return got.numpy()


class NodeTree:
    """One rank's tables of the two-level sum, and the sum itself (:meth:`run`).

    Built collectively from the split tables: each rank tells its leader the global id and
    root rank of each of its clones; each leader tells the leader of each root's node which
    vertices it will send.

    Attributes:
        nodes: ``[P]`` the node of each rank.
        node_comm: the communicator of this node's ``K`` ranks (steps 1 and 4).
        leader_comm: the communicator of the ``N`` leaders (steps 2 and 3); ``None`` on
            every other rank.
        clone_ids: int64 ``[c]`` this rank's split vertices (local ids: its leaves, then its
            roots), in the order it sends them to its leader.
        to_leader: ``[K]`` rows sent in step 1 (``c`` to the leader, 0 to every other rank
            of the node).
        entry_counts: ``[K]`` rows the leader receives from each rank of its node in step 1.
        entry_rows: int64 ``[E]`` the node row of each of those entries (leader only).
        rows: node rows: the split vertices with a clone on this node (leader only).
        out_rows, out_counts: node rows sent across in step 2, grouped by the leader of
            their root's node (``[N]`` counts, by node).
        in_rows, in_counts: node rows whose partials arrive across in step 2, grouped by
            sending leader.
        across_bytes: bytes this rank has sent to other nodes (steps 2 and 3).
    """

    def __init__(self, index: SplitIndex, comm: Communicator, nodes: list[int],
                 timer: PhaseTimer):
        self.nodes, self.timer = nodes, timer
        size, me = comm.size, comm.rank
        leaders = {}
        for rank, node in enumerate(nodes):
            leaders.setdefault(node, rank)
        self.leader = leaders[nodes[me]]
        roots, first = np.unique(index.root_ids.numpy(), return_index=True)
        clone_ids = np.concatenate([index.leaf_ids.numpy(), roots])
        tell = np.stack([np.concatenate([index.leaf_global, index.root_global[first]]),
                         np.concatenate([np.repeat(np.arange(size), index.leaf_counts),
                                         np.full(len(roots), me)])], axis=1)
        self.clone_ids = torch.from_numpy(clone_ids)
        self.to_leader = [0] * size
        self.to_leader[self.leader] = len(clone_ids)
        self.entry_counts = _counts_from_peers(comm, self.to_leader)
        entries = _send_ids(comm, tell, self.to_leader, self.entry_counts)
        gids, entry_rows = np.unique(entries[:, 0], return_inverse=True)
        root_rank = np.zeros(len(gids), dtype=np.int64)
        root_rank[entry_rows] = entries[:, 1]
        # the leader of each row's root node; rows rooted here stay
        dest = np.array([leaders[n] for n in nodes], dtype=np.int64)[root_rank]
        out_rows = np.flatnonzero(dest != me)
        out_rows = out_rows[np.argsort(dest[out_rows], kind="stable")]
        self.out_counts = np.bincount(dest[out_rows], minlength=size).tolist()
        self.in_counts = _counts_from_peers(comm, self.out_counts)
        arrived = _send_ids(comm, gids[out_rows], self.out_counts, self.in_counts)
        in_rows = np.searchsorted(gids, arrived)

        def check():
            found = in_rows < len(gids)
            found[found] = gids[in_rows[found]] == arrived[found]
            wrong = np.flatnonzero(~found)
            if len(wrong):
                raise DistGNNError(f"vertex {arrived[wrong[0]]} arrives from another node for "
                                   "its root here, but no rank of this node holds it "
                                   "(partitions from different runs?)")

        all_or_none(comm, check)
        self.rows = len(gids)
        self.entry_rows, self.out_rows, self.in_rows = (
            torch.from_numpy(r.astype(np.int64)) for r in (entry_rows, out_rows, in_rows))
        # the tables above count rows per rank of the job, nonzero only for ranks of this
        # node (steps 1, 4) and for leaders (2, 3): per rank of the communicators that move
        # them, each ranked in the job's order
        self.node_comm = comm.split(nodes[me])
        self.leader_comm = comm.split(0 if me == self.leader else None)
        members = [r for r in range(size) if nodes[r] == nodes[me]]
        self.to_leader, self.entry_counts = (
            [counts[r] for r in members] for counts in (self.to_leader, self.entry_counts))
        heads = sorted(leaders.values())
        self.out_counts, self.in_counts = (
            [counts[r] for r in heads] for counts in (self.out_counts, self.in_counts))
        self.on_device: dict[torch.device, list[torch.Tensor]] = {}
        self.across_bytes = 0

    def _ids(self, device: torch.device) -> list[torch.Tensor]:
        if device not in self.on_device:
            self.on_device[device] = [t.to(device) for t in (
                self.clone_ids, self.entry_rows, self.out_rows, self.in_rows)]
        return self.on_device[device]

    def _buffers(self, a: torch.Tensor) -> list[torch.Tensor]:
        """``[clones [c, d], entries [E, d], node sums [rows, d], out [O, d], in [I, d]]``,
        made for each exchange and freed after it, as the flat round trip's
        (:class:`~distgnn.exchange.exact.RoundTrip`): alive only while it runs."""
        return [torch.empty(n, a.shape[1], dtype=a.dtype, device=a.device)
                for n in (len(self.clone_ids), len(self.entry_rows), self.rows,
                          len(self.out_rows), len(self.in_rows))]

    def run(self, a: torch.Tensor) -> int:
        """``a^p_v <- sum_{q in R(v)} a^q_v`` in place for ``a`` ``[n, d]``, in the four
        steps of the module docstring; returns the bytes this rank sent."""
        clones, entries, sums, out, into = self._buffers(a)
        clone_ids, entry_rows, out_rows, in_rows = self._ids(a.device)
        node, across, row = self.node_comm, self.leader_comm, a.shape[1] * a.element_size()
        with self.timer("exchange_pre"):
            torch.index_select(a, 0, clone_ids, out=clones)
        with self.timer("exchange_wait"):
            node.alltoallv(clones, self.to_leader, entries, self.entry_counts)
        with self.timer("exchange_post"):
            sums.zero_().index_add_(0, entry_rows, entries)
        if across is not None:
            with self.timer("exchange_post"):
                torch.index_select(sums, 0, out_rows, out=out)
            with self.timer("exchange_wait"):
                across.alltoallv(out, self.out_counts, into, self.in_counts)
            with self.timer("exchange_post"):
                sums.index_add_(0, in_rows, into)
                torch.index_select(sums, 0, in_rows, out=into)
            with self.timer("exchange_wait"):
                across.alltoallv(into, self.in_counts, out, self.out_counts)
            with self.timer("exchange_post"):
                sums.index_copy_(0, out_rows, out)
        with self.timer("exchange_post"):
            torch.index_select(sums, 0, entry_rows, out=entries)
        with self.timer("exchange_wait"):
            node.alltoallv(entries, self.entry_counts, clones, self.to_leader)
        with self.timer("exchange_post"):
            a.index_copy_(0, clone_ids, clones)
        across = (len(self.out_rows) + len(self.in_rows)) * row
        self.across_bytes += across
        return across + (len(self.clone_ids) + len(self.entry_rows)) * row


class NodeSum:
    """cd-0 for one layer and pass through a :class:`NodeTree`.

    A :class:`~distgnn.exchange.LayerExchange` of kind ``"exact"``, stateless, its state that
    of :class:`~.exact.ExactSum` in the run's type, so a checkpoint resumes under either.

    Args:
        tree (NodeTree): the rank's two-level tables.
        width, dtype, device: of the ``a`` it exchanges.
    """

    kind = "exact"

    def __init__(self, *, tree: NodeTree, width: int, dtype: torch.dtype, device):
        self.tree, self.width, self.dtype = tree, width, dtype
        self.bytes_sent = 0

    def __call__(self, a: torch.Tensor, epoch: int) -> None:
        """``a^p_v <- sum_{q in R(v)} a^q_v`` in place (``epoch`` plays no part)."""
        self.bytes_sent += self.tree.run(a)

    def finish(self) -> None:
        """Nothing is ever in flight."""

    def state_dict(self) -> dict:
        """``{"kind": "exact", "width", "dtype", "residuals": None}``."""
        return tagged(self.kind, self.width, self.dtype, residuals=None)

    def load_state_dict(self, state: dict) -> None:
        expect_kind(state, self.kind, "exact exchange")
        if state["residuals"] is not None:
            raise DistGNNError("the checkpoint's cd-0 exchange kept error-feedback residuals "
                               "of a compressed wire; the node-aware exchange sends the "
                               "run's own type: resume with --exchange-topology flat")
