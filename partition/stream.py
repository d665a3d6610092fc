r"""Libra out of core: a graph streamed from a binary edge file, with per-vertex state only.

The in-memory partitioner (:func:`~partition.assign.assign_edges`) holds the CSR, the stream
order and the partition of every entry: about 40 bytes per edge.  This one holds, besides
a bounded buffer of edges, only per-vertex and per-partition state (degrees, stream ranks,
the membership bitsets, loads, roots): about 60 bytes per vertex, so a graph of a billion
edges partitions in a few GiB.  It makes the choices of the in-memory Libra in its default
``degree`` order exactly (a directed graph, unweighted, equal capacities): the same
partition for every edge, the same roots, the same files.

Passes over the edge file ``[E, 2]`` (:mod:`distgnn.edge_file`), each in chunks:

1. **Degrees**: in-degree and degree (in + out) of every vertex.
2. **Buckets**: the stream visits the rows (destinations) in increasing degree, seeded at
   random among equal degrees, each row's edges in file order.  A row's rank in that order
   is known from the degrees; each edge is appended to the bucket file of its row's rank
   range (``B`` ranges of about equal edge counts), so a bucket holds whole rows.
3. **Assignment**: each bucket, read back and sorted by rank (stable: file order within a
   row), is streamed through :class:`~partition.assign.GreedyStream`; every edge is
   appended to the spill file of its partition as it is assigned.
4. **Layout and files**: roots, vertex lists and split tables from the bitsets
   (:func:`~partition.layout.layout_from_membership`); then each partition's local CSR
   from its spill file, its rows of the features and labels (memory-mapped ``.npy``), and
   its arrays written as :func:`~partition.format.write_partitions` writes them.

The bucket and spill files live in a temporary folder beside the output (removed at the
end, also on failure); they take the edge file's size twice at most.
"""
from __future__ import annotations

import contextlib
import dataclasses
import shutil
import tempfile
import time
from pathlib import Path
from typing import Callable

import numba
import numpy as np

from distgnn.datasets import read_split_file
from distgnn.edge_file import edge_count, iter_edges
from distgnn.generators import random_split
from distgnn.graph import UNLABELLED, CSRGraph, GraphError
from distgnn.storage import free_space_problem

from .assign import GreedyStream, degree_order
from .format import layout_meta, partition_bytes, write_partitions
from .layout import Layout, layout_from_membership, leaf_tables, part_arrays

BUCKET_EDGES = 1 << 24  # edges per bucket (about): what pass 3 holds and sorts at once
CHUNK_EDGES = 1 << 23  # edges read at once by passes 1 and 2


@dataclasses.dataclass
class VertexData:
    """What every vertex carries into its partitions: ``x`` ``[N, F]``, ``y`` ``[N]`` and
    the three bool masks ``[N]`` (arrays or read-only memory maps)."""

    x: np.ndarray
    y: np.ndarray
    train_mask: np.ndarray
    val_mask: np.ndarray
    test_mask: np.ndarray


@numba.njit(cache=True)
def _count_degrees(src, dst, degree, in_degree):
    for k in range(len(src)):
        degree[src[k]] += 1
        degree[dst[k]] += 1
        in_degree[dst[k]] += 1


def stream_ranks(degree: np.ndarray, seed: int) -> np.ndarray:
    """int64 ``[N]``: each row's position in the stream, rows in increasing degree, ties in
    a seeded random order (:func:`~partition.assign.degree_order`, as
    :func:`~partition.assign.stream_order` visits them)."""
    visit = degree_order(degree, np.random.default_rng(seed))
    rank = np.empty(len(degree), np.int64)
    rank[visit] = np.arange(len(degree))
    return rank


class _Spill:
    """Append-only ``(src, dst)`` files, one per key, in a folder."""

    def __init__(self, folder: Path, count: int, dtype):
        self.paths = [folder / f"{k:05d}.bin" for k in range(count)]
        self.files = [open(p, "wb") for p in self.paths]
        self.dtype = np.dtype(dtype)
        self.counts = np.zeros(count, np.int64)

    def add(self, key: np.ndarray, src: np.ndarray, dst: np.ndarray, keys: int) -> None:
        """Append each edge ``k`` to file ``key[k]`` (order kept within a file)."""
        order = np.argsort(key, kind="stable")
        bounds = np.searchsorted(key[order], np.arange(keys + 1))
        pairs = np.empty((len(key), 2), self.dtype)
        pairs[:, 0], pairs[:, 1] = src[order], dst[order]
        for k in np.flatnonzero(np.diff(bounds)):
            pairs[bounds[k]:bounds[k + 1]].tofile(self.files[k])
            self.counts[k] += bounds[k + 1] - bounds[k]

    def close(self) -> None:
        for f in self.files:
            f.close()

    def read(self, k: int) -> tuple[np.ndarray, np.ndarray]:
        pairs = np.fromfile(self.paths[k], self.dtype).reshape(-1, 2)
        self.paths[k].unlink()
        return pairs[:, 0], pairs[:, 1]


def _bucket_of_rank(in_degree: np.ndarray, rank: np.ndarray, buckets: int) -> np.ndarray:
    """int32 ``[N]``: the bucket of each row, ranges of ranks of about equal edge counts."""
    by_rank = np.empty_like(in_degree)
    by_rank[rank] = in_degree
    ends = np.cumsum(by_rank)
    bucket_by_rank = np.minimum(ends * buckets // max(int(ends[-1]), 1), buckets - 1)
    return bucket_by_rank.astype(np.int32)[rank]


def stream_partition(edges: str | Path, num_nodes: int, num_parts: int, work: Path,
                     seed: int = 0, roots: str = "balanced",
                     log: Callable[[str], None] = print, progress=None
                     ) -> tuple[Layout, "_Spill", np.ndarray, bool]:
    """Passes 1-3 of the module docstring for the edge file ``edges`` (``num_nodes``
    vertices) into ``work``; returns the layout, the partitions' spill files, the
    in-degrees and whether an edge repeats (a multigraph).  ``progress(n)`` is called with
    the edges done in each pass."""
    total = edge_count(edges)
    degree = np.zeros(num_nodes, np.int64)
    in_degree = np.zeros(num_nodes, np.int64)
    started = time.perf_counter()
    for src, dst in iter_edges(edges, CHUNK_EDGES):
        if len(src) and max(int(src.max()), int(dst.max())) >= num_nodes:
            raise GraphError(f"vertex id {max(int(src.max()), int(dst.max()))} out of range "
                             f"for the {num_nodes:,} vertices of the features", edges)
        _count_degrees(src, dst, degree, in_degree)
        if progress:
            progress(len(src))
    rank = stream_ranks(degree, seed)
    buckets = max(1, -(-total // BUCKET_EDGES))
    row_bucket = _bucket_of_rank(in_degree, rank, buckets)
    log(f"pass 1 (degrees): {time.perf_counter() - started:.1f} s")
    started = time.perf_counter()
    dtype = np.int32 if num_nodes <= np.iinfo(np.int32).max else np.int64
    spill = None  # one bucket: pass 3 reads the edge file itself
    if buckets > 1:
        (work / "buckets").mkdir()
        spill = _Spill(work / "buckets", buckets, dtype)
        for src, dst in iter_edges(edges, CHUNK_EDGES):
            spill.add(row_bucket[dst], src, dst, buckets)
            if progress:
                progress(len(src))
        spill.close()
        log(f"pass 2 (buckets): {time.perf_counter() - started:.1f} s")
    started = time.perf_counter()
    stream = GreedyStream("libra", degree, num_parts, seed)
    (work / "parts").mkdir()
    parts = _Spill(work / "parts", num_parts, dtype)
    multigraph = False
    for b in range(buckets):
        src, dst = spill.read(b) if spill is not None else _whole(edges)
        order = np.argsort(rank[dst], kind="stable")
        src, dst = src[order], dst[order]
        multigraph = multigraph or _repeats(src, dst, num_nodes)
        parts.add(stream.assign(src, dst), src, dst, num_parts)
        if progress:
            progress(len(src))
    parts.close()
    log(f"pass 3 (assignment): {time.perf_counter() - started:.1f} s")
    layout = layout_from_membership(stream.member, stream.load, roots, seed)
    return layout, parts, in_degree, multigraph


def _whole(edges) -> tuple[np.ndarray, np.ndarray]:
    pieces = list(iter_edges(edges, CHUNK_EDGES))
    return (np.concatenate([p[0] for p in pieces]), np.concatenate([p[1] for p in pieces]))


def _repeats(src: np.ndarray, dst: np.ndarray, num_nodes: int) -> bool:
    """Whether an edge occurs twice among these (whole rows: a repeat is within them)."""
    keys = dst.astype(np.int64) * num_nodes + src
    keys.sort()
    return bool(len(keys) > 1 and np.any(keys[1:] == keys[:-1]))


def streamed_part_arrays(layout: Layout, parts: _Spill, data: VertexData,
                         in_degree: np.ndarray):
    """Yield ``(p, arrays)`` for :func:`~partition.format.write_partitions`: partition
    ``p``'s local CSR (rows in increasing global id, each row's sources in file order, as
    the in-memory path builds it) from its spill file, and its vertices' rows."""
    tables = leaf_tables(layout)
    local = np.empty(layout.num_nodes, np.int64)
    for p in range(layout.num_parts):
        ids = layout.vertices(p)
        local[ids] = np.arange(len(ids))
        src, dst = parts.read(p)
        rows = local[dst]
        order = np.argsort(rows, kind="stable")
        indptr = np.zeros(len(ids) + 1, np.int64)
        np.cumsum(np.bincount(rows, minlength=len(ids)), out=indptr[1:])
        graph = CSRGraph(indptr, local[src[order]], len(ids))
        del src, dst, rows, order
        yield p, part_arrays(layout, p, graph, data, in_degree, tables[p])


@contextlib.contextmanager
def work_folder(out: Path):
    """A temporary folder beside ``out`` for the bucket and spill files, removed after."""
    out.absolute().parent.mkdir(parents=True, exist_ok=True)
    folder = Path(tempfile.mkdtemp(prefix=f".{out.name}.stream-", dir=out.absolute().parent))
    try:
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def vertex_data(features: str | Path, labels: str | Path, split_file: str | Path | None
                ) -> VertexData:
    """The features and labels ``.npy`` files memory-mapped, and the split: ``split_file``
    (an ``.npz`` of bool masks ``[N]``, :func:`~distgnn.datasets.read_split_file`) or a
    seeded random 60/20/20 of the labelled vertices, as an in-memory edge list gets."""
    x = _mapped(features, "features", 2)
    y = _mapped(labels, "labels", 1)
    if not np.issubdtype(x.dtype, np.floating) or not np.issubdtype(y.dtype, np.integer):
        raise GraphError(f"features must be floats and labels integers, got {x.dtype} and "
                         f"{y.dtype}", features)
    if len(y) != len(x):
        raise GraphError(f"{len(x):,} feature rows but {len(y):,} labels", labels)
    labelled = y != UNLABELLED
    if split_file is not None:
        if Path(split_file).suffix != ".npz":
            raise GraphError("a streamed graph takes an .npz split file (bool train_mask, "
                             "val_mask, test_mask [N])", split_file)
        masks = read_split_file(split_file, _SplitView(y))
    else:
        masks = random_split(len(y), np.random.default_rng(0), eligible=labelled)
    return VertexData(x, y, *masks)


@dataclasses.dataclass
class _SplitView:
    """What :func:`~distgnn.datasets.read_split_file` reads of a dataset, for one whose
    graph is not in memory."""

    y: np.ndarray
    ids = None

    @property
    def num_nodes(self) -> int:
        return len(self.y)

    def vertex_name(self, v: int) -> str:
        return str(v)


def _mapped(path: str | Path, what: str, ndim: int) -> np.ndarray:
    if path is None or Path(path).suffix != ".npy":
        raise GraphError(f"a streamed graph needs its {what} as an .npy file "
                         f"(--{what} FILE.npy)", path)
    try:
        array = np.load(path, mmap_mode="r", allow_pickle=False)
    except (OSError, ValueError) as e:
        raise GraphError(f"cannot read {what}: {e}", path) from None
    if array.ndim != ndim:
        raise GraphError(f"{what} must have {ndim} dimension(s), got shape {array.shape}", path)
    return array


def partition_edge_file(edges: str | Path, data: VertexData, out: str | Path, parts: int, *,
                        seed: int = 0, roots: str = "balanced", force: bool = False,
                        log: Callable[[str], None] = print, progress=None) -> dict:
    """Libra (``degree`` order) of the edge file ``edges`` with the vertices' ``data`` into
    the partition directory ``out``, out of core (see the module docstring); returns the
    meta written and ``seconds``, the time of the passes and of writing."""
    out = Path(out)
    # the bucket and partition files (each edge twice at most, as in the edge file) and the
    # partitions' local indices and feature rows (more exactly checked before writing them)
    need = 2 * Path(edges).stat().st_size + 4 * edge_count(edges) + 2 * data.x.nbytes
    problem = free_space_problem(out.absolute().parent, need)
    if problem:
        raise GraphError(f"streaming it {problem}", out)
    started = time.perf_counter()
    with work_folder(out) as work:
        layout, spill, in_degree, multigraph = stream_partition(
            edges, len(data.y), parts, work, seed, roots, log, progress)
        assigned = time.perf_counter()
        labelled = data.y[data.y != UNLABELLED]
        settings = {"method": "libra", "seed": seed, "order": "degree", "roots": roots,
                    "vertex_order": "given", "vertex_order_requested": "given",
                    "vertex_order_seconds": 0.0, "streamed": True}
        meta, counts = layout_meta(layout, settings, Path(edges).stem, int(in_degree.sum()),
                                   data.x.shape[1],
                                   int(labelled.max()) + 1 if len(labelled) else 0,
                                   multigraph)
        write_partitions(out, streamed_part_arrays(layout, spill, data, in_degree), meta,
                         force, None, partition_bytes(counts, data.x.shape[1],
                                                      data.x.dtype.itemsize))
    meta["seconds"] = {"partitioning": assigned - started,
                       "writing": time.perf_counter() - assigned}
    return meta
