"""One rank's split-vertex tables, grouped by peer rank, and their check against the peers'.

The tables say which of its vertices are leaves of a root elsewhere, and which are roots of
leaves elsewhere.

Under a vertex-cut, vertex ``v`` has clones on the ranks ``R(v)``; one clone is the root, the
others leaves.  Message order on the wire follows :mod:`partition.layout`'s split tables (a
leaf lists its entries as its root lists them), so no ids are sent (except by the adaptive
schedule, which sends positions).
"""
from __future__ import annotations

import dataclasses

import numpy as np
import torch

from ..comm import Communicator, all_or_none
from ..data.partitions import row_digests
from ..errors import DistGNNError


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
    def from_partition(cls, part) -> SplitIndex:
        """The tables of ``part`` (a :class:`distgnn.data.partitions.Partition`, this rank's)."""
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
        """Check, with the peers, that this rank's split tables describe the same vertices.

        The tables of partition ``part`` (this rank's) must describe the same vertices as the
        peers' before any exchange relies on them (collective; raises
        :class:`~distgnn.comm.RankFailed` on every rank).

        1. Each peer sends as many leaf partials as this rank's table expects (else an
           exchange would overrun its buffers).
        2. Each leaf sends its root its global id, global in-degree, local in-degree and
           the digest of its feature row and label (:func:`distgnn.data.partitions.row_digests`):
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
