"""Source blocking and thread balance for the SpMM kernels (DistGNN Sec. 4, Alg. 2).

A plan splits the edges of a CSR by *source* into blocks processed one after another:
block 0 holds the edges from the ``hub_block`` sources of highest out-degree, the last
block the rest.  On power-law graphs a small hub block covers a large share of the edges
(R-MAT 2^20: the top 0.4 % of sources carry a third of them), and while the kernel sweeps
it, the hubs' feature rows stay in L2 however far apart their readers are.  Blocking by
id range instead (the original Alg. 2) gives each block a random mix of hubs and leaves,
and an L2-sized id block makes every block touch most output rows.  Each block's rows are
cut into chunks of equal non-zeros, so threads get equal work on skewed degrees.
"""
from __future__ import annotations

import dataclasses
import functools
import glob
import os

import numpy as np

CHUNKS = 256  # per block; many more than threads, so static scheduling still balances


@dataclasses.dataclass
class Block:
    """One block: a CSR over all destination rows, holding only that block's sources."""

    indptr: np.ndarray
    indices: np.ndarray
    weight: np.ndarray  # float32 [E_block], or empty when unweighted
    chunks: np.ndarray  # int64 row boundaries of the thread chunks


@dataclasses.dataclass
class SpMMPlan:
    """How one graph's SpMM runs: its source blocks and the row chunks of the whole CSR."""

    blocks: list[Block]
    chunks_full: np.ndarray
    hub_block: int
    # the source scale q [N_src] folded into the blocks' weights (w_e q_u), or None
    source_scale: np.ndarray | None = None


@functools.cache
def cache_sizes() -> dict[str, int]:
    """Data/unified cache sizes in bytes by level name (``L1``, ``L2``, ``L3``) of CPU 0."""
    sizes = {}
    for index in sorted(glob.glob("/sys/devices/system/cpu/cpu0/cache/index*")):
        try:
            kind = open(os.path.join(index, "type")).read().strip()
            level = open(os.path.join(index, "level")).read().strip()
            text = open(os.path.join(index, "size")).read().strip()
        except OSError:
            continue
        if kind == "Instruction":
            continue
        scale = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(text[-1:], 1)
        sizes[f"L{level}"] = int(text.rstrip("KMG")) * scale
    return sizes


def last_level_cache() -> int:
    """Bytes of the largest data cache of CPU 0 (0 when the system does not say)."""
    return max(cache_sizes().values(), default=0)


def balanced_chunks(indptr: np.ndarray, num_chunks: int = CHUNKS) -> np.ndarray:
    """int64 row boundaries ``[0, ..., N]`` splitting the rows into runs of ~equal non-zeros.

    A row heavier than a chunk's share becomes a chunk of its own.
    """
    n = len(indptr) - 1
    if n == 0:
        return np.zeros(1, np.int64)
    targets = np.linspace(0, indptr[-1], num_chunks + 1)
    bounds = np.searchsorted(indptr, targets, side="left")
    bounds[0], bounds[-1] = 0, n
    return np.unique(np.clip(bounds, 0, n)).astype(np.int64)


def _sub_csr(rows: np.ndarray, indices: np.ndarray, weight, keep: np.ndarray,
             num_rows: int) -> Block:
    counts = np.bincount(rows[keep], minlength=num_rows)
    indptr = np.zeros(num_rows + 1, np.int64)
    np.cumsum(counts, out=indptr[1:])
    w = np.empty(0, np.float32) if weight is None else weight[keep]
    return Block(indptr, indices[keep], w, balanced_chunks(indptr))


def plan_spmm(indptr: np.ndarray, indices: np.ndarray, edge_weight=None,
              hub_block: int = 0, num_sources: int | None = None,
              source_scale: np.ndarray | None = None) -> SpMMPlan:
    """Plan for CSR ``(indptr, indices)``, its sources blocked and its scale folded.

    ``hub_block`` = number of top out-degree sources in the first block (0: one unblocked
    pass over the original arrays, no copies).  ``source_scale`` ``q`` ``[N_src]``: folded
    into the edge weights, ``w_e q_u`` (``q_u`` where unweighted; the float32 product the
    kernel would form), 4 bytes per edge, so that an SpMM with this plan reads ``q`` in edge
    order with the edges instead of gathering ``q_u`` per edge, a random read of a line for
    4 bytes that took 0.04-0.22 s of a 0.2-1.0 s SpMM on R-MAT 2^20
    (:func:`~distgnn.kernels.spmm.spmm` takes the same ``q`` with the plan; its self-loop
    still reads ``q_v``)."""
    n_dst = len(indptr) - 1
    weight = None if edge_weight is None else np.ascontiguousarray(edge_weight, np.float32)
    if source_scale is not None:
        source_scale = np.array(source_scale, np.float32).reshape(-1)  # a copy: the plan's
        folded = source_scale[indices]
        weight = folded if weight is None else np.multiply(weight, folded, out=folded)
    full = balanced_chunks(indptr)
    if n_dst == 0:
        return SpMMPlan([], full, 0, source_scale)
    n_src = int(indices.max()) + 1 if num_sources is None and len(indices) else (num_sources or 0)
    if hub_block <= 0 or hub_block >= n_src:
        w = np.empty(0, np.float32) if weight is None else weight
        return SpMMPlan([Block(indptr, indices, w, full)], full, 0, source_scale)
    out_degree = np.bincount(indices, minlength=n_src)
    hubs = np.zeros(n_src, bool)
    hubs[np.argpartition(-out_degree, hub_block - 1)[:hub_block]] = True
    is_hub_edge = hubs[indices]
    rows = np.repeat(np.arange(len(indptr) - 1), np.diff(indptr))  # each entry's row
    blocks = [_sub_csr(rows, indices, weight, is_hub_edge, n_dst),
              _sub_csr(rows, indices, weight, ~is_hub_edge, n_dst)]
    return SpMMPlan(blocks, full, hub_block, source_scale)
