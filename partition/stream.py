r"""Libra (or NE's hybrid) out of core: a graph streamed from a binary edge file.

The in-memory partitioner (:func:`~partition.assign.assign_edges`) holds the CSR, the stream
order and the partition of every entry: about 40 bytes per edge.  This one holds, besides
a bounded buffer of edges, only per-vertex and per-partition state (degrees, stream ranks,
the membership bitsets, loads, roots): about 60 bytes per vertex, so a graph of a billion
edges partitions in a few GiB.  It makes the choices of the in-memory Libra in its default
``degree`` order exactly (a directed graph, unweighted, equal capacities): the same
partition for every edge, the same roots, the same files.

Passes over the edge file ``[E, 2]`` (:mod:`distgnn.data.binary_edges`), each in chunks:

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
   its arrays written as :func:`~distgnn.data.partitions.write_partitions` writes them.

**The hybrid** (``method: ne``, after HEP, Mayer and Jacobsen 2021): neighbourhood expansion
(:mod:`partition.expand`) cuts better than the stream but holds its edges in memory.  Given
a memory budget, pass 2 keeps in memory the edges whose two ends have degree ``<= tau``,
``tau`` the largest degree whose edges the budget holds (counted by a pass over the file
first, :func:`~partition.expand.expansion_degree`), and buckets only the others; those edges are
grown into ``P`` partitions of equal size, and pass 3 streams the others through Libra
against that cut (:meth:`~partition.assign.GreedyStream.continue_cut`), no partition
taking more than ``ceil(E / P)``.  Low-degree vertices thus keep their neighbourhoods
together and the hubs, whose edges are streamed, are the ones replicated.

The bucket and spill files live in a hidden work folder beside the output,
``.NAME.stream-TOKEN`` (removed at the end, also on failure); they take the edge file's size
twice at most.  SIGTERM, SIGINT and SIGHUP stop the stream after removing it
(:class:`Stopped`).  A run that is killed outright (SIGKILL, a crash) cannot: its work
folder carries a marker (this process, host and TOKEN), so that the next run for the same
output can prove the folder was a work folder of a run that is gone, and remove it
(:func:`remove_stale_work`).
"""
from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import re
import secrets
import shutil
import signal
import socket
import threading
import time
from pathlib import Path
from typing import Callable

import numba
import numpy as np

from distgnn.data.binary_edges import edge_count, iter_edges
from distgnn.data.generators import random_split
from distgnn.data.graph import UNLABELLED, CSRGraph, GraphError
from distgnn.data.partition_writing import write_partitions
from distgnn.data.side_files import check_classes, read_split_file
from distgnn.signals import takes
from distgnn.storage import (
    file_head,
    format_bytes,
    free_space_problem,
    pid_alive,
    remove_leftovers,
    temp_path,
)
from partition.assign import GreedyStream, degree_order
from partition.expand import BYTES_PER_ITEM, BYTES_PER_VERTEX, expand_parts, expansion_degree
from partition.layout import Layout, layout_from_membership, leaf_tables, part_arrays
from partition.write import layout_meta, partition_bytes

BUCKET_EDGES = 1 << 24  # edges per bucket (about): what pass 3 holds and sorts at once
CHUNK_EDGES = 1 << 23  # edges read at once by passes 1 and 2
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)
# in a work folder: the process, host and token of the run that made it (JSON)
WORK_MARKER = "writer.json"
WORK_WRITER = "distgnn-partition stream"
TOKEN_BYTES = 8  # the folder's name ends in this many random bytes, in hex


class Stopped(BaseException):
    """SIGTERM, SIGINT or SIGHUP received while :func:`partition_edge_file` ran: ``signum``.

    A ``BaseException``, as ``KeyboardInterrupt`` is, so that no ``except Exception`` on the
    way stops it.  By the time it reaches the caller, the work folder and any partly written
    copy of the output are removed, and ``str()`` says so in one sentence."""

    def __init__(self, signum: int):
        super().__init__(signum)
        self.signum = signum
        self.work: Path | None = None  # the work folder it went through, and its size
        self.work_bytes = 0
        self.message = f"{signal.Signals(signum).name} received"
        self.explained = False

    def explain(self, out: Path, written: bool, writing: bool, doing: str) -> None:
        """Say what was removed, and whether ``out`` was ``written`` before the signal came
        (or, ``writing``, its copy was being written) while ``doing`` it; the first call
        says it (the innermost :func:`stop_on_signals`, which knows most)."""
        if self.explained:
            return
        self.explained = True
        name = signal.Signals(self.signum).name
        work = (f"its work folder {self.work} ({format_bytes(self.work_bytes)} of bucket and "
                f"partition files)" if self.work is not None else "")
        if written:
            self.message = (f"{name} received after {out} was written"
                            + (f"; removed {work}" if work else ""))
            return
        removed = " and ".join(filter(None, (
            work, f"any partly written copy of {out} beside it" if writing else "")))
        self.message = (f"{name} received: stopped {doing}"
                        + (f", removed {removed}" if removed else "")
                        + f"; nothing was written to {out}")

    def __str__(self) -> str:
        return self.message


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
                     log: Callable[[str], None] = print, progress=None,
                     expansion_bytes: int | None = None
                     ) -> tuple[Layout, "_Spill", np.ndarray, bool]:
    """Passes 1-3 of the module docstring for the edge file ``edges``, working in ``work``.

    The file holds ``num_nodes`` vertices; returns the layout, the partitions' spill files,
    the in-degrees and whether an edge repeats (a multigraph).  ``progress(n)`` is called
    with the edges done in each pass.  ``expansion_bytes`` makes it the hybrid of the module
    docstring: the edges between vertices of low degree, as many as that memory holds, are
    cut by neighbourhood expansion before the rest is streamed."""
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
    tau = -1 if expansion_bytes is None else _expansion_degree(edges, degree, expansion_bytes)
    dtype = np.int32 if num_nodes <= np.iinfo(np.int32).max else np.int64
    low = _LowEdges(degree, tau)
    spill = None  # one bucket and no expansion: pass 3 reads the edge file itself
    if buckets > 1 or tau >= 0:
        (work / "buckets").mkdir()
        spill = _Spill(work / "buckets", buckets, dtype)
        for src, dst in iter_edges(edges, CHUNK_EDGES):
            read = len(src)
            src, dst = low.keep(src, dst)
            spill.add(row_bucket[dst], src, dst, buckets)
            if progress:
                progress(read)
        spill.close()
        log(f"pass 2 ({'' if tau < 0 else 'edges by degree, '}buckets): "
            f"{time.perf_counter() - started:.1f} s")
    stream = GreedyStream("libra", degree, num_parts, seed)
    (work / "parts").mkdir()
    parts = _Spill(work / "parts", num_parts, dtype)
    multigraph = False
    if tau >= 0:
        started = time.perf_counter()
        src, dst = low.edges()
        multigraph = _repeats(src, dst, num_nodes)  # both copies of a repeat are here
        part = expand_parts(num_nodes, dst, src, 1, np.full(num_parts, -(-len(src) // num_parts),
                                                            np.int64), seed, progress)
        stream.continue_cut(src, dst, part, -(-total // num_parts))
        parts.add(part, src, dst, num_parts)
        log(f"expansion of the {len(src):,} edges between vertices of degree <= {tau:,}: "
            f"{time.perf_counter() - started:.1f} s")
        del low, src, dst, part
    started = time.perf_counter()
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


def _expansion_degree(edges, degree: np.ndarray, budget: int) -> int:
    """The degree up to which the hybrid expands for ``budget`` bytes, counting the edges by
    their ends' larger degree in a pass over ``edges`` (GraphError when the budget does not
    hold the expansion's per-vertex state)."""
    items = (budget - BYTES_PER_VERTEX * len(degree)) // BYTES_PER_ITEM
    if items < 0:
        raise GraphError(f"--memory {format_bytes(budget)} does not hold the expansion's "
                         f"state of {len(degree):,} vertices ({BYTES_PER_VERTEX} bytes each): "
                         f"give at least {format_bytes(BYTES_PER_VERTEX * len(degree))}")
    by_degree = np.zeros(int(degree.max(initial=0)) + 1, np.int64)
    for src, dst in iter_edges(edges, CHUNK_EDGES):
        _count_by_larger_degree(src, dst, degree, by_degree)
    return expansion_degree(by_degree, items)


@numba.njit(cache=True)
def _count_by_larger_degree(src, dst, degree, by_degree):
    for k in range(len(src)):
        by_degree[max(degree[src[k]], degree[dst[k]])] += 1


class _LowEdges:
    """The edges between vertices of degree ``<= tau``, gathered in memory as pass 2 reads
    them (none when ``tau < 0``); :meth:`keep` returns the others."""

    def __init__(self, degree: np.ndarray, tau: int):
        self.degree, self.tau = degree, tau
        self.src, self.dst = [], []

    def keep(self, src: np.ndarray, dst: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        if self.tau < 0:
            return src, dst
        low = (self.degree[src] <= self.tau) & (self.degree[dst] <= self.tau)
        self.src.append(src[low])
        self.dst.append(dst[low])
        return src[~low], dst[~low]

    def edges(self) -> tuple[np.ndarray, np.ndarray]:
        """All gathered, as two arrays (the pieces are freed)."""
        src, dst = np.concatenate(self.src), np.concatenate(self.dst)
        self.src, self.dst = [], []
        return src, dst


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
    """Yield ``(p, arrays)`` for :func:`~distgnn.data.partitions.write_partitions`: partition
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
    """A hidden folder ``.NAME.stream-TOKEN`` beside ``out`` for the bucket and spill files,
    with its marker (:data:`WORK_MARKER`), removed after.  A :class:`Stopped` passing
    through learns the folder and its size."""
    parent = out.absolute().parent
    parent.mkdir(parents=True, exist_ok=True)
    token = secrets.token_hex(TOKEN_BYTES)
    folder = parent / f".{out.name}.stream-{token}"
    folder.mkdir(mode=0o700)
    try:
        (folder / WORK_MARKER).write_text(json.dumps({
            "writer": WORK_WRITER, "pid": os.getpid(), "host": socket.gethostname(),
            "token": token}))
        yield folder
    except Stopped as stop:
        stop.work = folder
        stop.work_bytes = sum(f.stat().st_size for f in folder.rglob("*") if f.is_file())
        raise
    finally:
        _remove_work(folder)


def _remove_work(folder: Path) -> None:
    """Remove a work folder, its marker last: a removal cut short (SIGKILL) leaves a folder
    that the next run still recognises."""
    with contextlib.suppress(OSError):  # gone already: nothing to remove
        for entry in folder.iterdir():
            if entry.name != WORK_MARKER:
                shutil.rmtree(entry, ignore_errors=True)
    shutil.rmtree(folder, ignore_errors=True)


def _spill_files(entry: Path) -> bool:
    """Whether ``entry`` is a ``buckets`` or ``parts`` folder of :class:`_Spill` files only."""
    return (entry.name in ("buckets", "parts") and entry.is_dir() and not entry.is_symlink()
            and all(re.fullmatch(r"\d{5,}\.bin", f.name) and f.is_file()
                    and not f.is_symlink() for f in entry.iterdir()))


def _abandoned(folder: Path, token: str) -> bool:
    """Whether ``folder`` is provably the work folder of a run of this host that is gone: its
    marker names this tool, the folder's own ``token``, this host and a process that no
    longer runs, and it holds nothing but the marker and spill files."""
    marker = folder / WORK_MARKER
    try:
        if folder.is_symlink() or marker.is_symlink() or not marker.is_file():
            return False
        writer = json.loads(file_head(marker))
        if not (isinstance(writer, dict) and writer.get("writer") == WORK_WRITER
                and writer.get("token") == token and writer.get("host") == socket.gethostname()
                and type(writer.get("pid")) is int and not pid_alive(writer["pid"])):
            return False
        return all(e.name == WORK_MARKER or _spill_files(e) for e in folder.iterdir())
    except (OSError, ValueError, RecursionError):
        return False


def remove_stale_work(out: Path) -> list[Path]:
    """Remove the work folders beside ``out`` that killed runs for the same output left.

    Those runs were killed outright (SIGKILL, a crash, a power cut); only what it can prove
    such a run wrote is removed (:func:`_abandoned`): a folder made by hand, one of a run
    still running or of another host, and anything else are left alone.  Returns what was
    removed."""
    pattern = re.compile(rf"\.{re.escape(out.name)}\.stream-([0-9a-f]{{{2 * TOKEN_BYTES}}})")
    try:
        entries = list(out.absolute().parent.iterdir())
    except OSError:
        return []
    removed = []
    for entry in entries:
        m = pattern.fullmatch(entry.name)
        if m and _abandoned(entry, m.group(1)):
            _remove_work(entry)
            if not entry.exists():
                removed.append(entry)
    return removed


@contextlib.contextmanager
def _stopped_by_signals():
    """SIGTERM, SIGINT and SIGHUP raise :class:`Stopped` in the block: the first does.

    SIGHUP not where it is ignored (:func:`distgnn.signals.takes`).  Later ones are ignored,
    so that the clean-up the first started runs to its end (inside another such block, the
    outer one's handler stays).  Outside the main thread, where Python takes no signals,
    nothing changes."""
    if (threading.current_thread() is not threading.main_thread()
            or getattr(signal.getsignal(STOP_SIGNALS[0]), "raises_stopped", False)):
        yield
        return
    received = []

    def stop(signum, frame):
        if not received:
            received.append(signum)
            raise Stopped(signum)

    stop.raises_stopped = True
    previous = {s: signal.signal(s, stop) for s in filter(takes, STOP_SIGNALS)}
    try:
        yield
    finally:
        for s, handler in previous.items():
            signal.signal(s, signal.SIG_DFL if handler is None else handler)


@dataclasses.dataclass
class Writing:
    """Whether the block of :func:`stop_on_signals` has begun writing the output."""

    started: bool = False


@contextlib.contextmanager
def stop_on_signals(out: str | Path, doing: str):
    """SIGTERM, SIGINT and SIGHUP raise :class:`Stopped` in the block, which says what it left.

    The block does its work (``doing``) for the output ``out`` (the signals as
    :func:`_stopped_by_signals` takes them), and is given a :class:`Writing` to mark when
    it begins writing ``out``.  A directory replaced by then has the rest of the old one
    (``.NAME.old-PID``) removed; whatever the block wrote beside ``out`` its own writers
    remove as the exception passes."""
    out = Path(out)
    before = _identity(out)
    writing = Writing()
    with _stopped_by_signals():
        try:
            yield writing
        except Stopped as stop:
            written = _identity(out) != before
            if written:  # the rest of the directory it replaced, if the signal cut that short
                shutil.rmtree(temp_path(out, "old"), ignore_errors=True)
            stop.explain(out, written, writing.started, doing)
            raise


def vertex_data(features: str | Path, labels: str | Path, split_file: str | Path | None
                ) -> VertexData:
    """The features and labels ``.npy`` files memory-mapped, and the split: ``split_file``
    (an ``.npz`` of bool masks ``[N]``, :func:`~distgnn.data.side_files.read_split_file`) or a
    seeded random 60/20/20 of the labelled vertices, as an in-memory edge list gets."""
    x = _mapped(features, "features", 2)
    y = _mapped(labels, "labels", 1)
    if not np.issubdtype(x.dtype, np.floating) or not np.issubdtype(y.dtype, np.integer):
        raise GraphError(f"features must be floats and labels integers, got {x.dtype} and "
                         f"{y.dtype}", features)
    if len(y) != len(x):
        raise GraphError(f"{features} has {len(x):,} feature rows but {labels} has "
                         f"{len(y):,} labels: both hold one row per vertex")
    check_classes(y, labels)
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
    """What :func:`~distgnn.data.side_files.read_split_file` reads of a dataset, for one whose
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
                        log: Callable[[str], None] = print, progress=None,
                        source: dict | None = None, expansion_bytes: int | None = None
                        ) -> dict:
    """Libra (``degree`` order) of the edge file ``edges`` into ``out``, out of core.

    With ``expansion_bytes``, the hybrid (``method: ne``) that first expands the edges
    between vertices of low degree in that much memory (see the module docstring).

    The edges, with the vertices' ``data``, go into the partition directory ``out`` (see the
    module docstring); returns the meta written and ``seconds``, the time of the passes and
    of writing.

    What earlier runs for ``out`` left when they were killed (work folders,
    :func:`remove_stale_work`; temporary and old copies of ``out``,
    :func:`~distgnn.storage.remove_leftovers`) is removed first, each said through ``log``.
    SIGTERM, SIGINT or SIGHUP (in the main thread) stops it: the work folder and any partly
    written copy of ``out`` are removed, an ``out`` being replaced (``force``) is kept, and
    :class:`Stopped` says what was removed.  ``source``: what ``meta.json`` records of the
    input (``partition.cli.source_identity``).
    """
    out = Path(out)
    with stop_on_signals(out, "streaming") as writing:
        for path in remove_stale_work(out) + remove_leftovers(out):
            log(f"removed {path}: left by an earlier run that was killed")
        # the bucket and partition files (each edge twice at most, as in the edge file) and
        # the partitions' local indices and feature rows (more exactly checked before
        # writing them)
        need = 2 * Path(edges).stat().st_size + 4 * edge_count(edges) + 2 * data.x.nbytes
        problem = free_space_problem(out.absolute().parent, need)
        if problem:
            raise GraphError(f"streaming it {problem}", out)
        started = time.perf_counter()
        with work_folder(out) as work:
            layout, spill, in_degree, multigraph = stream_partition(
                edges, len(data.y), parts, work, seed, roots, log, progress, expansion_bytes)
            assigned = time.perf_counter()
            labelled = data.y[data.y != UNLABELLED]
            settings = {"method": "libra" if expansion_bytes is None else "ne", "seed": seed,
                        "order": "degree",
                        "roots": roots, "vertex_order": "given",
                        "vertex_order_requested": "given", "vertex_order_seconds": 0.0,
                        "streamed": True, **({"source": source} if source else {})}
            meta, counts = layout_meta(layout, settings, Path(edges).stem,
                                       int(in_degree.sum()), data.x.shape[1],
                                       int(labelled.max()) + 1 if len(labelled) else 0,
                                       multigraph)
            writing.started = True
            write_partitions(out, streamed_part_arrays(layout, spill, data, in_degree),
                             meta, force, None, partition_bytes(
                                 counts, data.x.shape[1], data.x.dtype.itemsize))
    meta["seconds"] = {"partitioning": assigned - started,
                       "writing": time.perf_counter() - assigned}
    return meta


def _identity(path: Path) -> tuple[int, int] | None:
    """What tells a directory renamed into place at ``path`` from the one that was there."""
    try:
        st = path.stat()
    except OSError:
        return None
    return st.st_dev, st.st_ino
