"""Graph containers: a validated CSR adjacency and a node-classification dataset.

Convention used everywhere in distgnn: row ``v`` of the CSR lists the *sources* ``u`` of
the edges ``u -> v``, so aggregation into ``v`` reads row ``v`` and the in-degree of ``v``
is the length of its row.  ``indptr`` is int64 ``[N + 1]``; ``indices`` is int32 when every
id fits (half the bytes a memory-bound SpMM has to stream), else int64.
"""
from __future__ import annotations

import dataclasses
import math
import numbers
import os
from pathlib import Path
from typing import Any, Callable

import numpy as np
import scipy.sparse as sp

from ..errors import DistGNNError
from ..kernels.spmm import transpose_csr
from ..spill import npy_rows
from ..storage import format_bytes

INT32_MAX = np.iinfo(np.int32).max
# Edges are keyed as ``dst * N + src`` in one int64; beyond this N the keys overflow.
MAX_KEYED_NODES = math.isqrt(np.iinfo(np.int64).max)
# Keys looked up per step by ``unreciprocated_edges``: bounds its temporaries to 64 MiB.
_LOOKUP_BLOCK = 1 << 22
# The label of a vertex without one; it belongs to no mask.
UNLABELLED = -1


class GraphError(DistGNNError, ValueError):
    """Bad graph or dataset input.  The message names the source (file), after the flag
    that gave it (``flag``, e.g. ``--labels``) if any, and the problem."""

    def __init__(self, problem: str, source: str | Path | None = None, flag: str | None = None):
        self.problem = problem
        self.source = None if source is None else str(source)
        self.flag = flag
        where = " ".join(filter(None, (flag, self.source)))
        super().__init__(f"{where}: {problem}" if where else problem)


# What building a dataset allocates per vertex (indptr, degree counts, labels as float and int,
# masks, default feature), checked against free memory before a declared count is trusted.
NODE_BYTES = 64


def require_memory(nbytes: float, source: str | Path | None = None) -> None:
    """Raise :class:`GraphError` before allocating ``nbytes`` that cannot fit in memory.

    Loaders and generators call this with the size a file or spec *declares*, before they
    allocate it, so that a corrupt or hostile size ends in one line instead of a
    MemoryError, an out-of-memory kill or hours of swapping.  Available memory is
    ``MemAvailable`` of ``/proc/meminfo`` (what can be allocated without swapping), or the
    free pages where that file does not exist.  Requests under 64 MiB pass unchecked: the
    builders run often, and reading ``/proc/meminfo`` costs about 50 us.
    """
    if nbytes < 1 << 26:
        return
    try:
        with open("/proc/meminfo") as f:
            fields = dict(line.split(":", 1) for line in f)
        available = int(fields["MemAvailable"].split()[0]) * 1024
    except (OSError, KeyError, ValueError):
        available = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_AVPHYS_PAGES")
    if nbytes > available:
        raise GraphError(f"needs {format_bytes(nbytes)}, this machine has "
                         f"{format_bytes(available)} available", source)


def check_count(value, name: str, source: str | Path | None = None) -> int:
    """``value`` as a Python int, refused unless it is a non-negative integer (not a bool)."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Integral):
        raise GraphError(f"{name} must be an integer, got {value!r}", source)
    if value < 0:
        raise GraphError(f"{name} must be >= 0, got {value}", source)
    return int(value)


def index_dtype(num_nodes: int) -> type:
    """Narrowest index dtype (int32 or int64) able to hold ids ``0..num_nodes-1``."""
    return np.int32 if num_nodes - 1 <= INT32_MAX else np.int64


def csr_rows(indptr: np.ndarray, dtype=np.int64) -> np.ndarray:
    """``[E]``: the row (destination) of every CSR entry, in CSR order."""
    return np.repeat(np.arange(len(indptr) - 1, dtype=dtype), np.diff(indptr))


def _edge_sort_keys(dst: np.ndarray, src: np.ndarray, num_nodes: int,
                    source: str | Path | None = None) -> np.ndarray:
    """int64 keys ``dst * N + src``: sorting them sorts edges by row, then column."""
    if num_nodes > MAX_KEYED_NODES:
        raise GraphError(f"{num_nodes} vertices: more than the {MAX_KEYED_NODES} whose edge "
                         "keys fit in int64", source)
    return dst.astype(np.int64) * np.int64(max(num_nodes, 1)) + src.astype(np.int64)


def _check_edge_arrays(src, dst, num_nodes: int | None, source
                       ) -> tuple[np.ndarray, np.ndarray, int]:
    """Validate endpoint arrays; returns them as arrays and ``N`` (default: max id + 1).

    Also checks that the ``O(N + E)`` arrays the builders allocate fit in memory.
    """
    src, dst = np.asarray(src), np.asarray(dst)
    for name, a in (("src", src), ("dst", dst)):
        if a.dtype == np.bool_ or not np.issubdtype(a.dtype, np.integer):
            raise GraphError(f"{name} has dtype {a.dtype}, expected an integer type", source)
        if a.ndim != 1:
            raise GraphError(f"{name} must be 1-D", source)
    if src.shape != dst.shape:
        raise GraphError(f"src has {len(src)} entries but dst has {len(dst)}", source)
    hi = -1
    if len(src):
        lo = min(int(src.min()), int(dst.min()))
        if lo < 0:
            raise GraphError(f"negative vertex id {lo}", source)
        hi = max(int(src.max()), int(dst.max()))
    n = hi + 1 if num_nodes is None else check_count(num_nodes, "num_nodes", source)
    if hi >= n:
        raise GraphError(f"vertex id {hi} out of range for {n} vertices", source)
    # indptr and degree counts per vertex; keys, order and sort temporaries per edge
    require_memory(16 * (n + 1) + 32 * len(src), source)
    return src, dst, n


def _first_of_runs(sorted_keys: np.ndarray) -> np.ndarray:
    """bool mask of the first element of each run of equal values."""
    first = np.ones(len(sorted_keys), bool)
    np.not_equal(sorted_keys[1:], sorted_keys[:-1], out=first[1:])
    return first


class CSRGraph:
    """Directed graph as CSR over destinations.

    Args:
        indptr (np.ndarray): int64 ``[N + 1]``, non-decreasing, ``indptr[0] == 0``.
        indices (np.ndarray): int32/int64 ``[E]`` source ids in ``0..N-1``.
        num_nodes (int, optional): ``N``; defaults to ``len(indptr) - 1``.
        edge_weight (np.ndarray, optional): float32 ``[E]``, one scalar per stored entry.
        source (str, optional): where the graph came from, used in error messages.

    The constructor validates and raises :class:`GraphError` on bad input.  ``cache`` is a
    dict that kernels use to keep per-graph derived structures (transposes, cache blocks)
    across epochs; derived graphs start with an empty cache.
    """

    def __init__(self, indptr, indices, num_nodes: int | None = None, edge_weight=None,
                 source: str | Path | None = None):
        self.source = source
        indptr = self._as_int_array(indptr, "indptr")
        indices = self._as_int_array(indices, "indices")
        if indptr.ndim != 1 or len(indptr) < 1:
            raise GraphError("indptr must be a 1-D array of length N + 1", source)
        n = len(indptr) - 1 if num_nodes is None else check_count(num_nodes, "num_nodes", source)
        if n != len(indptr) - 1:
            raise GraphError(f"indptr has length {len(indptr)} but num_nodes is {n}", source)
        if indices.ndim != 1:
            raise GraphError("indices must be a 1-D array", source)
        if indptr[0] != 0:
            raise GraphError(f"indptr[0] must be 0, got {indptr[0]}", source)
        if indptr[-1] != len(indices):
            raise GraphError(f"indptr[-1] = {indptr[-1]} but there are {len(indices)} indices",
                             source)
        # not np.diff: on unsigned indptr a decrease wraps around to a large step
        if n and np.any(indptr[1:] < indptr[:-1]):
            raise GraphError("indptr is not monotone (non-decreasing)", source)
        if len(indices):
            lo, hi = int(indices.min()), int(indices.max())
            if lo < 0:
                raise GraphError(f"negative vertex id {lo} in indices", source)
            if hi >= n:
                raise GraphError(f"vertex id {hi} out of range for {n} vertices", source)
        self.indptr = indptr.astype(np.int64, copy=False)
        self.indices = indices.astype(index_dtype(n), copy=False)
        self.num_nodes = n
        if edge_weight is not None:
            edge_weight = np.asarray(edge_weight)
            if edge_weight.shape != (len(indices),):
                raise GraphError(f"edge_weight has shape {edge_weight.shape}, expected "
                                 f"({len(indices)},)", source)
            if not np.issubdtype(edge_weight.dtype, np.floating) and not np.issubdtype(
                    edge_weight.dtype, np.integer):
                raise GraphError(f"edge_weight has dtype {edge_weight.dtype}, expected a "
                                 "number type", source)
            with np.errstate(over="ignore"):  # too large for float32: inf, refused below
                edge_weight = edge_weight.astype(np.float32, copy=False)
            if not np.all(np.isfinite(edge_weight)):
                raise GraphError("edge_weight contains NaN or inf", source)
        self.edge_weight = edge_weight
        self.cache: dict[str, Any] = {}

    def _as_int_array(self, a, name: str) -> np.ndarray:
        a = np.asarray(a)
        if a.dtype == np.bool_ or not np.issubdtype(a.dtype, np.integer):
            raise GraphError(f"{name} has dtype {a.dtype}, expected an integer type", self.source)
        return a

    # ---- builders -------------------------------------------------------------------------
    @classmethod
    def from_edges(cls, src, dst, num_nodes: int | None = None, edge_weight=None,
                   source: str | Path | None = None) -> "CSRGraph":
        """Build from edge arrays ``src[i] -> dst[i]`` (kept in input order within a row)."""
        src, dst, n = _check_edge_arrays(src, dst, num_nodes, source)
        order = np.argsort(dst, kind="stable")
        counts = np.bincount(dst, minlength=n) if len(dst) else np.zeros(n, np.int64)
        indptr = np.zeros(n + 1, np.int64)
        np.cumsum(counts, out=indptr[1:])
        if edge_weight is not None and np.asarray(edge_weight).shape != src.shape:
            raise GraphError("edge_weight must have one entry per edge", source)
        weight = None if edge_weight is None else np.asarray(edge_weight)[order]
        return cls(indptr, src[order].astype(index_dtype(n)), n, weight, source)

    @classmethod
    def from_scipy(cls, matrix, source: str | Path | None = None) -> "CSRGraph":
        """Build from a square scipy sparse matrix; entry ``(v, u)`` is the edge ``u -> v``.

        Stored values become edge weights unless they are all 1.
        """
        if not sp.issparse(matrix):
            raise GraphError(f"expected a scipy sparse matrix, got {type(matrix).__name__}",
                             source)
        if matrix.ndim != 2 or matrix.shape[0] != matrix.shape[1]:
            raise GraphError(f"adjacency must be square, got shape {matrix.shape}", source)
        require_memory(8 * (matrix.shape[0] + 1) + 16 * matrix.nnz, source)  # as CSR
        m = sp.csr_matrix(matrix)
        m.sort_indices()
        weight = None if np.all(m.data == 1) else m.data
        return cls(m.indptr.astype(np.int64), m.indices, m.shape[0], weight, source)

    # ---- queries --------------------------------------------------------------------------
    @property
    def num_edges(self) -> int:
        return len(self.indices)

    def in_degrees(self) -> np.ndarray:
        """int64 ``[N]``: number of stored entries in each row."""
        return np.diff(self.indptr)

    def edges(self) -> tuple[np.ndarray, np.ndarray]:
        """``(src, dst)`` arrays in CSR order."""
        return self.indices, csr_rows(self.indptr, self.indices.dtype)

    def has_duplicate_edges(self) -> bool:
        """Whether some ``(src, dst)`` entry is stored twice.

        O(E) when every row's columns are sorted (what the loaders and generators build);
        otherwise one sort of the edge keys.
        """
        step = np.diff(self.indices)
        within_row = np.ones(len(step), bool)
        starts = self.indptr[1:-1]
        within_row[starts[(starts > 0) & (starts < self.num_edges)] - 1] = False
        step = step[within_row]
        if np.all(step >= 0):
            return bool(np.any(step == 0))
        src, dst = self.edges()
        keys = np.sort(_edge_sort_keys(dst, src, self.num_nodes, self.source))
        return bool(np.any(keys[1:] == keys[:-1]))

    def to_scipy(self) -> sp.csr_matrix:
        """``[N, N]`` csr_matrix with entry ``(v, u)`` for the edge ``u -> v`` (weights or 1)."""
        data = (np.ones(self.num_edges, np.float32) if self.edge_weight is None
                else self.edge_weight)
        return sp.csr_matrix((data, self.indices, self.indptr),
                             shape=(self.num_nodes, self.num_nodes))

    # ---- derived graphs -------------------------------------------------------------------
    def transpose(self) -> "CSRGraph":
        """The reversed graph (rows become sources); built once, then kept in ``cache``.

        A counting sort (:func:`~distgnn.kernels.spmm.transpose_csr`: no ``[E]`` int64
        temporaries).  Where it equals the graph (a symmetric graph whose rows list their
        sources in order, weights included) it is the graph itself: a backward aggregation
        then reads the same CSR (and its plans) and the copy is dropped.
        """
        if "transpose" not in self.cache:
            indptr, indices, weight = transpose_csr(self.indptr, self.indices,
                                                    self.num_nodes, self.edge_weight)
            same = (np.array_equal(indptr, self.indptr) and np.array_equal(indices, self.indices)
                    and (weight is None or np.array_equal(weight, self.edge_weight)))
            self.cache["transpose"] = self if same else CSRGraph(
                indptr, indices, self.num_nodes, weight, self.source)
        return self.cache["transpose"]

    def remove_self_loops(self) -> "CSRGraph":
        src, dst = self.edges()
        keep = src != dst
        weight = None if self.edge_weight is None else self.edge_weight[keep]
        return CSRGraph.from_edges(src[keep], dst[keep], self.num_nodes, weight, self.source)

    def unreciprocated_edges(self) -> int:
        """Number of stored edges ``u -> v`` with no stored ``v -> u``.

        Self-loops are their own reverse; each copy of a repeated edge counts.

        The keys ``dst * N + src`` are sorted already when every row's columns are (what the
        loaders build); the reverse keys ``src * N + dst`` are sorted once and looked up in
        them, in blocks that bound the temporaries: O(E log E), no loop over edges.
        """
        src, dst = self.edges()
        keys = _edge_sort_keys(dst, src, self.num_nodes, self.source)
        if np.any(keys[1:] < keys[:-1]):
            keys.sort()
        reverse = _edge_sort_keys(src, dst, self.num_nodes, self.source)
        reverse.sort()
        found = 0
        for start in range(0, len(reverse), _LOOKUP_BLOCK):
            block = reverse[start:start + _LOOKUP_BLOCK]
            at = np.minimum(np.searchsorted(keys, block), max(len(keys) - 1, 0))
            found += int(np.count_nonzero(keys[at] == block))
        return self.num_edges - found

    def symmetrize(self, name: Callable[[int], str] = str) -> "CSRGraph":
        """The graph with the reverse of every edge added where it is missing, each edge once.

        Weights are kept: a stored edge keeps its own, and the reverse added for ``u -> v``
        gets the weight of ``u -> v``, so a pair stored both ways keeps both its weights
        (:meth:`from_edges_symmetric`).  ``name`` gives a vertex as the user names it, for
        the error on a repeated edge of two weights.
        """
        src, dst = self.edges()
        return CSRGraph.from_edges_symmetric(src, dst, self.num_nodes, self.source,
                                             self.edge_weight, name)

    @classmethod
    def from_edges_symmetric(cls, src, dst, num_nodes: int,
                             source: str | Path | None = None, edge_weight=None,
                             name: Callable[[int], str] = str) -> "CSRGraph":
        """Undirected graph from int arrays ``[E]``: each pair in both directions, once.

        With ``edge_weight`` ``[E]``, an edge given keeps its weight and a reverse not given
        takes the weight of the edge it reverses.  An edge given more than once is kept once;
        given with two weights, it is refused (which one is meant cannot be known), in a line
        naming its vertices by ``name`` (default: their numbers).

        Unweighted: one in-place sort of int64 keys (``np.unique`` hashes first in numpy 2.x
        and is an order of magnitude slower on tens of millions of keys); weighted: one
        stable argsort, which puts each edge given before the reverses of the same key.
        """
        src, dst, num_nodes = _check_edge_arrays(src, dst, num_nodes, source)
        keys = np.concatenate([_edge_sort_keys(dst, src, num_nodes, source),
                               _edge_sort_keys(src, dst, num_nodes, source)])
        if edge_weight is None:
            keys.sort()
            return cls._from_sorted_keys(keys[_first_of_runs(keys)], num_nodes, None, source)
        if np.shape(edge_weight) != src.shape:
            raise GraphError("edge_weight must have one entry per edge", source)
        require_memory(24 * len(keys), source)  # the order, the sorted keys and weights
        order = np.argsort(keys, kind="stable")
        keys = keys[order]
        weight = np.concatenate([edge_weight, edge_weight])[order]
        first = _first_of_runs(keys)
        # within a run of one key the copies given come first: a repeat given is a
        # non-first element taken from the first half
        clash = np.flatnonzero(~first[1:] & (order[1:] < len(src)) & (weight[1:] != weight[:-1]))
        if len(clash):
            at = int(clash[0]) + 1
            v, u = divmod(int(keys[at]), max(num_nodes, 1))
            raise GraphError(f"edge {name(u)} -> {name(v)} is given more than once, with the "
                             f"weights {weight[at - 1]:g} and {weight[at]:g}, and --symmetrize "
                             "keeps each edge once: give it once, with the weight meant",
                             source)
        return cls._from_sorted_keys(keys[first], num_nodes, weight[first], source)

    @classmethod
    def _from_sorted_keys(cls, keys: np.ndarray, num_nodes: int, weight,
                          source) -> "CSRGraph":
        rows, cols = np.divmod(keys, np.int64(max(num_nodes, 1)))
        indptr = np.zeros(num_nodes + 1, np.int64)
        np.cumsum(np.bincount(rows, minlength=num_nodes), out=indptr[1:])
        return cls(indptr, cols.astype(index_dtype(num_nodes)), num_nodes, weight, source)

    def __repr__(self) -> str:
        return (f"CSRGraph(num_nodes={self.num_nodes}, num_edges={self.num_edges}, "
                f"weighted={self.edge_weight is not None})")


def nonfinite_problem(x: np.ndarray) -> str | None:
    """Why features ``x`` ``[N, F]`` cannot be trained on (NaN or inf), or ``None``.

    A memory-mapped ``.npy`` is read in blocks of rows with ``pread``
    (:func:`~distgnn.spill.npy_rows`), so that checking it never makes its pages resident in
    this process (a run under ``--memory-limit`` keeps its features on disk)."""
    rows = max(1, len(x) if not isinstance(x, np.memmap) else
               _CHECK_BLOCK_BYTES // max(x.itemsize * int(np.prod(x.shape[1:])), 1))
    for start in range(0, len(x), rows):
        block = npy_rows(x, start, min(len(x), start + rows))
        # a float64 sum of float32 values cannot overflow: it is finite iff every value is,
        # and it needs no [N, F] temporary (inf - inf is nan: no warning wanted)
        with np.errstate(invalid="ignore"):
            if np.isfinite(np.sum(block, dtype=np.float64)):
                continue
        bad = start + int(np.argwhere(~np.isfinite(block))[0, 0])
        return f"features contain NaN or inf (first at vertex {bad})"
    return None


_CHECK_BLOCK_BYTES = 64 << 20  # a memory-mapped matrix checked per 64 MiB of rows


def overlap_problem(masks: dict[str, np.ndarray]) -> str | None:
    """Why the train/val/test ``masks`` are not a split (two of them overlap), or ``None``."""
    names = list(masks)
    for i, a in enumerate(names):
        for b in names[i + 1:]:
            both = int(np.count_nonzero(np.asarray(masks[a]) & np.asarray(masks[b])))
            if both:
                return f"{a} and {b} overlap in {both} vertices"
    return None


@dataclasses.dataclass
class NodeDataset:
    """A graph with node features, labels and a train/val/test split.

    Args:
        graph (CSRGraph): adjacency, rows = destinations.
        x (np.ndarray): float32 ``[N, F]`` node features, all finite.
        y (np.ndarray): int64 ``[N]`` labels in ``0..num_classes-1``, or ``-1``
            (:data:`UNLABELLED`) for a vertex without a label, which is in no mask.
        train_mask, val_mask, test_mask (np.ndarray): bool ``[N]``, pairwise disjoint.
        num_classes (int): ``C``; defaults to ``max(y) + 1`` (at least 1).
        name (str): a label for logs and metrics.
        note (str): what a user should know of this data (a generator's random labels, edges
            without a reverse), printed with its summary and after its results.
        split_note (str): which split the masks are and how it was made, printed with the
            summary (``"split: the dataset's own masks"``).
        ids (np.ndarray, optional): ``[N]`` distinct int64 or str (numpy ``U``) ids: the
            user's name of each vertex ``0..N-1``; None when the names are ``0..N-1``.
    """

    graph: CSRGraph
    x: np.ndarray
    y: np.ndarray
    train_mask: np.ndarray
    val_mask: np.ndarray
    test_mask: np.ndarray
    num_classes: int = 0
    name: str = "graph"
    note: str = ""
    split_note: str = ""
    ids: np.ndarray | None = None

    def __post_init__(self):
        source = self.graph.source or self.name
        n = self.graph.num_nodes
        x = np.asarray(self.x)
        if x.ndim != 2:
            raise GraphError(f"features must be 2-D [N, F], got shape {x.shape}", source)
        if not np.issubdtype(x.dtype, np.floating) and not np.issubdtype(x.dtype, np.integer):
            raise GraphError(f"features have dtype {x.dtype}, expected a number type", source)
        if x.shape[0] != n:
            raise GraphError(f"features have {x.shape[0]} rows but the graph has {n} vertices",
                             source)
        with np.errstate(over="ignore"):  # too large for float32: inf, refused below
            x = x.astype(np.float32, copy=False)
        problem = nonfinite_problem(x)
        if problem:
            raise GraphError(problem, source)
        y = np.asarray(self.y)
        if y.dtype == np.bool_ or not np.issubdtype(y.dtype, np.integer):
            raise GraphError(f"labels have dtype {y.dtype}, expected an integer type", source)
        if y.shape != (n,):
            raise GraphError(f"labels have shape {y.shape} but the graph has {n} vertices",
                             source)
        y = y.astype(np.int64, copy=False)
        c = check_count(self.num_classes, "num_classes", source)
        c = c or (max(int(y.max()) + 1, 1) if n else 0)
        if n and (y.min() < UNLABELLED or y.max() >= c):
            raise GraphError(f"labels must lie in 0..{c - 1}, found {int(y.min())}.."
                             f"{int(y.max())} ({UNLABELLED} marks an unlabelled vertex)", source)
        masks = {}
        for name in ("train_mask", "val_mask", "test_mask"):
            m = np.asarray(getattr(self, name))
            if m.dtype != np.bool_:
                raise GraphError(f"{name} has dtype {m.dtype}, expected bool", source)
            if m.shape != (n,):
                raise GraphError(f"{name} has shape {m.shape} but the graph has {n} vertices",
                                 source)
            masks[name] = m
        problem = overlap_problem(masks) or self._unlabelled_problem(y, masks, c)
        if problem:
            raise GraphError(problem, source)
        if self.ids is not None:
            ids = np.asarray(self.ids)
            if ids.shape != (n,) or ids.dtype.kind not in "iU":
                raise GraphError(f"ids must be int64 or str [{n}], got {ids.dtype} "
                                 f"{ids.shape}", source)
            self.ids = ids.astype(np.int64) if ids.dtype.kind == "i" else ids
        self.x, self.y, self.num_classes = x, y, c
        self.train_mask, self.val_mask, self.test_mask = (
            masks["train_mask"], masks["val_mask"], masks["test_mask"])

    @property
    def num_nodes(self) -> int:
        return self.graph.num_nodes

    @property
    def num_features(self) -> int:
        return self.x.shape[1]

    def vertex_name(self, v: int) -> str:
        """Vertex ``v`` as the user names it: its id, else ``v``."""
        return str(v) if self.ids is None else repr(self.ids[v].item())

    def _unlabelled_problem(self, y: np.ndarray, masks: dict, c: int) -> str | None:
        """Why a mask holds a vertex labelled ``-1``, or ``None``."""
        for name, m in masks.items():
            bad = np.flatnonzero(m & (y == UNLABELLED))
            if len(bad):
                return (f"labels must lie in 0..{c - 1}: vertex {self.vertex_name(bad[0])} "
                        f"is in {name} but unlabelled ({UNLABELLED}), and an unlabelled vertex "
                        "belongs to no mask")
        return None

    def summary(self) -> str:
        """One line of sizes, then the split note, the vertex ids and the note, if any."""
        unlabelled = int(np.count_nonzero(self.y == UNLABELLED))
        lines = [f"{self.name}: {self.num_nodes:,} vertices, {self.graph.num_edges:,} edges, "
                 f"{self.num_features} features, {self.num_classes} classes"
                 + (f" ({unlabelled:,} vertices unlabelled)" if unlabelled else "")
                 + f", split {int(self.train_mask.sum())}/{int(self.val_mask.sum())}/"
                 f"{int(self.test_mask.sum())}"]
        if self.split_note:
            lines.append(self.split_note)
        if self.ids is not None:
            kind = "integers" if self.ids.dtype.kind == "i" else "strings"
            lines.append(f"vertex ids: {self.num_nodes:,} {kind}, numbered 0..{self.num_nodes - 1}"
                         " in sorted order")
        if self.note:
            lines.append(f"note: {self.note}")
        return "\n".join(lines)
