"""Which ranks share a node: the numbering every communicator's ``node_ids`` returns, and the
host-name rule for transports that cannot ask MPI."""
from __future__ import annotations

import hashlib
import socket
from typing import Sequence

import torch


def numbered(keys: Sequence) -> list[int]:
    """``keys`` ``[P]`` (one per rank) as ``0, 1, ...`` in order of first appearance."""
    first: dict = {}
    return [first.setdefault(k, len(first)) for k in keys]


def nodes_by_host_name(comm) -> list[int]:
    """:meth:`Communicator.node_ids` from each rank's host name (for transports that
    cannot ask MPI): a 56-bit digest per rank, gathered by a sum-allreduce."""
    digest = hashlib.blake2b(socket.gethostname().encode(), digest_size=7).digest()
    names = torch.zeros(comm.size, dtype=torch.int64)
    names[comm.rank] = int.from_bytes(digest, "little")
    comm.allreduce(names)
    return numbered(names.tolist())
