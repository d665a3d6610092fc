"""The on-disk partition format (version ``FORMAT_VERSION``): its names, and loading one partition.

A partition directory holds ``meta.json``, one ``part-NNNNN/`` per partition, each a set
of ``.npy`` files (never pickled; loaded memory-mapped), and optionally ``vertex_ids.npy``,
the user's id of each global vertex.  ``docs/partition-format.md`` documents every field.
It is written by :mod:`distgnn.data.partition_writing` (atomically) and checked across
partitions by :mod:`distgnn.data.partition_checks`.

Every check that needs one partition alone runs on every :func:`load` (so at the start of
training too); the checks across partitions are
:func:`~distgnn.data.partition_checks.verify`'s.
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
import re
import threading
import tokenize
from pathlib import Path

import numpy as np

from ..errors import DistGNNError
from ..spill import release_pages
from ..storage import (
    file_head,
)
from .graph import (
    UNLABELLED,
    CSRGraph,
    nonfinite_problem,
    overlap_problem,
    require_memory,
)
from .ordering import CHOICES, ORDERS

FORMAT_VERSION = 3
# version 1: local ids always in increasing global id; 2: no checksum of meta.json's fields
READABLE_VERSIONS = (1, 2, 3)
FORMAT_NAME = "distgnn-partitions"
PART_FILES = ("global_ids", "indptr", "indices", "x", "y", "train_mask", "val_mask",
              "test_mask", "in_degree", "root_rank", "root_local", "leaf_ptr",
              "leaf_root_local", "leaf_remote_local")
OPTIONAL_FILES = ("edge_weight",)
# Optional files of the directory itself, beside the partitions: the user's id of each
# global vertex, int64 or str [num_nodes] (absent: the ids are 0..num_nodes-1).
VERTEX_IDS = "vertex_ids.npy"
# dtypes a reader accepts for each file (docs/partition-format.md)
DTYPES = {name: (np.dtype(np.int64),) for name in PART_FILES}
DTYPES.update(indices=(np.dtype(np.int32), np.dtype(np.int64)), x=(np.dtype(np.float32),),
              root_rank=(np.dtype(np.int32),), edge_weight=(np.dtype(np.float32),),
              **{f"{m}_mask": (np.dtype(np.bool_),) for m in ("train", "val", "test")})
MASKS = ("train_mask", "val_mask", "test_mask")
# meta.json fields with a fixed set of values (null allowed: older writers recorded it)
# the choices of the partitioner that meta.json records (partition.assign and
# partition.layout take theirs from here)
METHODS = ("libra", "hdrf", "random", "dbh", "ne")
EDGE_ORDERS = ("degree", "random", "given")  # the order edges are streamed in
ROOTS = ("balanced", "random")
CHOICE_FIELDS = {"method": METHODS, "order": EDGE_ORDERS, "roots": ROOTS,
                 "vertex_order_requested": CHOICES}


class PartitionFormatError(DistGNNError):
    """A partition directory that is missing, corrupt, of another version, or inconsistent."""


def part_dir(p: int) -> str:
    return f"part-{p:05d}"


def sha256(path: Path) -> str:
    with open(path, "rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


def is_partition_source(source) -> bool:
    """Whether ``source`` (a path; or a dataset, never) names a partition directory (one
    with a ``meta.json``): what ``distgnn.train``, ``setup`` and ``predict`` run under MPI,
    one rank per partition, rather than in this process."""
    return isinstance(source, (str, Path)) and (Path(source) / "meta.json").is_file()


def is_partition_directory(path: Path) -> bool:
    """Whether ``path`` is a directory this tool wrote: a ``meta.json`` of this format (any
    version) beside ``part-NNNNN`` folders and an optional ``vertex_ids.npy``, nothing else,
    so that ``--force`` never removes a file of the user's."""
    if not path.is_dir() or path.is_symlink():
        return False
    try:
        meta = json.loads(file_head(path / "meta.json", 1 << 26))
    except ValueError:
        return False
    if not isinstance(meta, dict) or meta.get("format") != FORMAT_NAME:
        return False
    return all(e.name in ("meta.json", VERTEX_IDS)
               or (re.fullmatch(r"part-\d{5,}", e.name) and e.is_dir() and not e.is_symlink())
               for e in path.iterdir())


def fields_sha256(meta: dict) -> str:
    """SHA-256 of the fields of ``meta`` other than ``files`` and ``fields_sha256``.

    Each file has a SHA-256 of its own.  The fields are hashed as compact JSON with sorted
    keys: what version 3 records in ``fields_sha256``, so that an edited ``num_classes``
    (which no array can disprove: a class may have no vertex) does not build another
    model."""
    fields = {k: v for k, v in meta.items() if k not in ("files", "fields_sha256")}
    return hashlib.sha256(json.dumps(fields, sort_keys=True, separators=(",", ":"))
                          .encode()).hexdigest()


def unchecked_fields_note(meta: dict) -> str | None:
    """What a directory of an older version does not prove (None for the current one)."""
    if meta["format_version"] >= 3:
        return None
    return (f"format version {meta['format_version']}: the fields of meta.json (num_classes "
            "among them) have no checksum; partition again for one")


def read_meta(directory: str | Path) -> dict:
    """``meta.json`` of a partition directory, checked for format name and version, field
    types and values (weights, orders and other choices included), a file list naming every
    array of every partition (and nothing else), and in version 3 ``fields_sha256``."""
    path = Path(directory) / "meta.json"
    if path.exists() and not path.is_file():  # a FIFO would block the open
        raise PartitionFormatError(f"{path}: not a regular file")
    try:
        with open(path, encoding="utf-8") as f:
            meta = json.load(f)
    except FileNotFoundError:
        raise PartitionFormatError(f"{directory} is not a partition directory "
                                   "(no meta.json)") from None
    # ValueError: not JSON, not UTF-8, an integer of too many digits; RecursionError: nesting
    except (OSError, ValueError, RecursionError) as e:
        reason = e.strerror if isinstance(e, OSError) and e.strerror else e
        raise PartitionFormatError(f"{path}: unreadable: {reason}") from None
    if not isinstance(meta, dict) or meta.get("format") != FORMAT_NAME:
        raise PartitionFormatError(f"{path}: not a {FORMAT_NAME} meta.json")
    if meta.get("format_version") not in READABLE_VERSIONS:
        raise PartitionFormatError(f"{path}: format version {meta.get('format_version')!r}, "
                                   "this distgnn reads versions "
                                   f"{', '.join(map(str, READABLE_VERSIONS))}")
    for key in ("num_parts", "num_nodes", "num_edges", "files"):
        if key not in meta:
            raise PartitionFormatError(f"{path}: missing field {key!r}")
    for key, low in (("num_parts", 1), ("num_nodes", 0), ("num_edges", 0),
                     ("num_features", 0), ("num_classes", 0), ("split_vertices", 0)):
        value = meta.get(key, low)
        if type(value) is not int or value < low:  # not isinstance: True is an int too
            raise PartitionFormatError(f"{path}: {key} must be an integer >= {low}, "
                                       f"got {value!r}")
    if not isinstance(meta.get("multigraph", False), bool):
        raise PartitionFormatError(f"{path}: multigraph must be true or false")
    if meta.get("split_vertices", 0) > meta["num_nodes"]:
        raise PartitionFormatError(f"{path}: split_vertices {meta['split_vertices']} is more "
                                   f"than num_nodes {meta['num_nodes']}")
    _check_choices(meta, path)
    _check_weights(meta, path)
    _check_file_list(meta["files"], meta["num_parts"], path)
    if meta["format_version"] >= 3 and meta.get("fields_sha256") != fields_sha256(meta):
        raise PartitionFormatError(f"{path}: " + ("missing field 'fields_sha256'"
                                                  if "fields_sha256" not in meta else
                                                  "fields changed after writing (their "
                                                  "SHA-256 is not fields_sha256)"))
    return meta


def _check_choices(meta: dict, path: Path) -> None:
    """``vertex_order`` one of :data:`distgnn.data.ordering.ORDERS` (``given`` in version 1, which
    predates it) and the requested one consistent with it; the other choices known."""
    order = meta.get("vertex_order", "given")
    if order not in (ORDERS if meta["format_version"] > 1 else ("given",)):
        raise PartitionFormatError(f"{path}: vertex_order {order!r} is not one of "
                                   f"{', '.join(ORDERS)}" + (" (format version 1 has only "
                                   "'given')" if meta["format_version"] == 1 else ""))
    for key, choices in CHOICE_FIELDS.items():
        if meta.get(key) is not None and meta[key] not in choices:
            raise PartitionFormatError(f"{path}: {key} {meta[key]!r} is not one of "
                                       f"{', '.join(choices)}")
    if meta.get("vertex_order_requested", "auto") not in ("auto", order):
        raise PartitionFormatError(f"{path}: vertex_order {order!r} but "
                                   f"vertex_order_requested {meta['vertex_order_requested']!r}")


def _check_weights(meta: dict, path: Path) -> None:
    """``weights``, when recorded, as ``--weights`` takes them for ``num_edges`` edges."""
    if meta.get("weights") is not None:
        try:
            check_weights(meta["weights"], meta["num_parts"], meta["num_edges"])
        except DistGNNError as e:
            raise PartitionFormatError(f"{path}: {str(e).lstrip('-')}") from None


def _check_file_list(files, num_parts: int, path: Path) -> None:
    """``files`` must map every ``part-NNNNN/NAME.npy`` of ``num_parts`` partitions (and
    only those, and ``vertex_ids.npy``: no other path is ever opened) to its ``bytes`` and
    ``sha256``."""
    if not isinstance(files, dict):
        raise PartitionFormatError(f"{path}: files must be an object")
    if len(files) < num_parts * len(PART_FILES):
        raise PartitionFormatError(f"{path}: lists {len(files)} files, fewer than the "
                                   f"{num_parts * len(PART_FILES)} of {num_parts} partitions")
    names = {f"{name}.npy" for name in PART_FILES + OPTIONAL_FILES}
    for rel, info in files.items():
        folder, _, name = rel.partition("/")
        number = folder.removeprefix("part-")
        if rel != VERTEX_IDS and not (
                name in names and number.isascii() and number.isdigit() and len(number) < 20
                and part_dir(int(number)) == folder and int(number) < num_parts):
            raise PartitionFormatError(f"{path}: lists {rel!r}, not a file of this format")
        if not (isinstance(info, dict) and type(info.get("bytes")) is int
                and isinstance(info.get("sha256"), str)):
            raise PartitionFormatError(f"{path}: the entry of {rel} needs bytes and sha256")
    for p in range(num_parts):
        for name in PART_FILES:
            if f"{part_dir(p)}/{name}.npy" not in files:
                raise PartitionFormatError(f"{path}: does not list {part_dir(p)}/{name}.npy")


@dataclasses.dataclass
class Partition:
    """One rank's share of a partitioned graph (arrays memory-mapped from disk).

    ``graph`` is the local CSR (rows = destinations, local ids); ``x`` ``[n, F]``, ``y``
    ``[n]``, masks ``[n]`` (true at root clones only), ``in_degree`` ``[n]`` global
    in-degrees; ``root_rank``/``root_local`` and the ``leaf_*`` tables as in
    :mod:`partition.layout`.
    """

    rank: int
    num_parts: int
    graph: CSRGraph
    global_ids: np.ndarray
    x: np.ndarray
    y: np.ndarray
    train_mask: np.ndarray
    val_mask: np.ndarray
    test_mask: np.ndarray
    in_degree: np.ndarray
    root_rank: np.ndarray
    root_local: np.ndarray
    leaf_ptr: np.ndarray
    leaf_root_local: np.ndarray
    leaf_remote_local: np.ndarray
    meta: dict

    @property
    def num_nodes(self) -> int:
        return len(self.global_ids)

    @property
    def split_roots(self) -> int:
        """Roots here with a leaf elsewhere: summed over the partitions, the split vertices."""
        return len(np.unique(np.asarray(self.leaf_root_local)))


# np.load parses a header with ast.literal_eval, whose tree construction CPython 3.11 does not
# guard across threads: two at once can fail with a spurious "SystemError: AST constructor
# recursion depth mismatch" (python/cpython#106905). Ranks on threads of one process load
# their partitions at the same moment, so the parse is taken one at a time.
_HEADER_PARSE = threading.Lock()


def _load_array(path: Path, mmap: bool) -> np.ndarray:
    """The array of ``path``, memory-mapped or (``mmap=False``) read into memory.

    Mapping first checks the header's shape against the file's length without allocating
    anything; a copy is then made only if it fits in memory.
    """
    if path.exists() and not path.is_file():  # a FIFO would block the open
        raise PartitionFormatError(f"{path}: not a regular file")
    try:
        # numpy refuses a header whose shape overflows as "too big"; its warning is noise
        with np.errstate(over="ignore"), _HEADER_PARSE:
            array = np.load(path, mmap_mode="r", allow_pickle=False)
    except FileNotFoundError:
        raise PartitionFormatError(f"{path}: missing") from None
    except (OSError, ValueError, EOFError, SyntaxError, tokenize.TokenError) as e:
        # a damaged header reaches numpy's literal parser, which raises the last two
        reason = e.strerror if isinstance(e, OSError) and e.strerror else e
        raise PartitionFormatError(f"{path}: unreadable: {reason}") from None
    if not isinstance(array, np.ndarray):  # a zip archive: np.load returns an NpzFile
        array.close()
        raise PartitionFormatError(f"{path}: not a .npy array file")
    if mmap:
        return array
    require_memory(array.nbytes, path)
    return np.array(array)


def _check_arrays(arrays: dict[str, np.ndarray], base: Path, meta: dict, rank: int) -> None:
    """Check what partition ``rank``'s arrays must satisfy, each alone, before any use.

    Checked before anything indexes with them: dtypes, shapes, at least one vertex, ids
    and table entries in range, ids in the order ``vertex_order`` names (see
    :func:`_check_degree_order` for ``degree``), finite features, labels in range, disjoint
    masks set at roots only, roots that point at themselves, leaf tables that name roots
    held here and no entries for this partition itself.  Each check is O(size of the
    partition).  (Whether the partitions agree with each other is
    :func:`~distgnn.data.partition_checks.verify`'s job.)"""
    def refuse(name: str, problem: str):
        raise PartitionFormatError(f"{base / name}.npy: {problem}")

    for name, array in arrays.items():
        if array.dtype not in DTYPES[name]:
            refuse(name, f"dtype {array.dtype}, expected {' or '.join(map(str, DTYPES[name]))}")
    for name in ("global_ids", "y", "in_degree", "root_rank", "root_local", "leaf_ptr",
                 "leaf_root_local", "leaf_remote_local") + MASKS:
        if arrays[name].ndim != 1:
            refuse(name, f"shape {arrays[name].shape}, expected 1-D")
    P, n = meta["num_parts"], len(arrays["global_ids"])
    if n == 0:  # a rank without vertices cannot build its model's tensors
        refuse("global_ids", "no vertices (every partition holds at least one)")
    lengths = {"leaf_ptr": P + 1, "leaf_remote_local": len(arrays["leaf_root_local"]),
               **{name: n for name in ("y", "in_degree", "root_rank", "root_local") + MASKS}}
    for name, length in lengths.items():
        if len(arrays[name]) != length:
            refuse(name, f"length {len(arrays[name])}, expected {length}")
    x = arrays["x"]
    if x.ndim != 2 or len(x) != n or x.shape[1] != meta.get("num_features", x.shape[1]):
        refuse("x", f"shape {x.shape}, expected ({n}, {meta.get('num_features', 'F')})")
    # exclusive upper bounds of everything used as an index (None: checked by verify)
    bounds = {"global_ids": meta["num_nodes"], "root_rank": P, "root_local": None,
              "in_degree": None, "leaf_root_local": n, "leaf_remote_local": None,
              "y": meta.get("num_classes")}
    for name, bound in bounds.items():
        a = arrays[name]
        low = UNLABELLED if name == "y" else 0
        if len(a) and a.min() < low:
            refuse(name, f"value {a.min()} below {low}")
        if len(a) and bound is not None and a.max() >= bound:
            refuse(name, f"value {a.max()} out of range 0..{bound - 1}")
    ids, ptr = arrays["global_ids"], arrays["leaf_ptr"]
    if meta.get("vertex_order", "given") == "given":  # increasing: distinct too
        if np.any(ids[1:] == ids[:-1]):
            refuse("global_ids", "repeats a vertex")
        if np.any(ids[1:] < ids[:-1]):
            refuse("global_ids", "not increasing, as vertex_order 'given' (and format "
                                 "version 1) requires")
    elif np.any(np.diff(np.sort(ids)) == 0):
        refuse("global_ids", "repeats a vertex")
    if ptr[0] != 0 or np.any(ptr[1:] < ptr[:-1]) or ptr[-1] != len(arrays["leaf_root_local"]):
        refuse("leaf_ptr", f"not an offset table from 0 to {len(arrays['leaf_root_local'])}")
    if ptr[rank] != ptr[rank + 1]:
        refuse("leaf_ptr", f"lists leaf entries for partition {rank} itself")
    is_root = np.asarray(arrays["root_rank"]) == rank
    if not np.all(is_root[arrays["leaf_root_local"]]):
        refuse("leaf_root_local", "names a vertex whose root is not here")
    if np.any(np.asarray(arrays["root_local"])[is_root] != np.flatnonzero(is_root)):
        refuse("root_local", "a root does not point at itself")
    unlabelled = np.asarray(arrays["y"]) == UNLABELLED
    for name in MASKS:  # each vertex counts once: at its root
        if np.any(arrays[name] & ~is_root):
            refuse(name, "set at a leaf clone (masks are true at root clones only)")
        if np.any(arrays[name] & unlabelled):
            refuse(name, f"set at an unlabelled vertex (label {UNLABELLED})")
    problem = nonfinite_problem(x)
    if problem:
        refuse("x", problem)
    problem = overlap_problem({name: arrays[name] for name in MASKS})
    if problem:
        raise PartitionFormatError(f"{base}: {problem}")


def read_vertex_ids(directory: str | Path) -> np.ndarray | None:
    """The user's id of each global vertex (None: the directory has none, ids ``0..N-1``).

    ``[num_nodes]`` int64 or str in global-id order, memory-mapped, read-only.  Dtype and
    length are checked; the checksum is :func:`~distgnn.data.partition_checks.verify`'s."""
    directory = Path(directory)
    meta = read_meta(directory)
    if VERTEX_IDS not in meta["files"]:
        return None
    path = directory / VERTEX_IDS
    ids = _load_array(path, mmap=True)
    if ids.dtype.kind not in "iU" or (ids.dtype.kind == "i" and ids.dtype != np.int64):
        raise PartitionFormatError(f"{path}: dtype {ids.dtype}, expected int64 or str")
    if ids.shape != (meta["num_nodes"],):
        raise PartitionFormatError(f"{path}: shape {ids.shape}, expected "
                                   f"({meta['num_nodes']},)")
    return ids


def _check_degree_order(graph: CSRGraph, ids: np.ndarray, base: Path) -> None:
    """Local ids in vertex_order ``degree``: decreasing local out-degree, ties in increasing
    global id (:func:`distgnn.data.ordering.vertex_order` on the partition's local graph)."""
    degree = np.bincount(np.asarray(graph.indices), minlength=graph.num_nodes)
    if np.any((degree[1:] > degree[:-1]) | ((degree[1:] == degree[:-1]) & (ids[1:] < ids[:-1]))):
        raise PartitionFormatError(f"{base}: local ids are not in vertex_order 'degree' "
                                   "(decreasing out-degree, ties by global id)")


def load(directory: str | Path, rank: int, mmap: bool = True) -> Partition:
    """Partition ``rank`` of ``directory``, with every check of one partition alone.

    The checks are :func:`_check_arrays`'s (format and ``meta.json`` by :func:`read_meta`);
    the checksums of the files and consistency across partitions are
    :func:`~distgnn.data.partition_checks.verify`'s job, because hashing every file on
    every start would cost minutes."""
    directory = Path(directory)
    meta = read_meta(directory)
    if not 0 <= rank < meta["num_parts"]:
        raise PartitionFormatError(f"{directory}: rank {rank} out of range for "
                                   f"{meta['num_parts']} partitions")
    base = directory / part_dir(rank)
    names = [name for name in PART_FILES + OPTIONAL_FILES
             if f"{part_dir(rank)}/{name}.npy" in meta["files"]]
    arrays = {name: _load_array(base / f"{name}.npy", mmap) for name in names}
    _check_arrays(arrays, base, meta, rank)
    weight = arrays.pop("edge_weight", None)
    n = len(arrays["global_ids"])
    graph = CSRGraph(arrays.pop("indptr"), arrays.pop("indices"), n, weight, source=base)
    if meta.get("vertex_order") == "degree":
        _check_degree_order(graph, np.asarray(arrays["global_ids"]), base)
    return Partition(rank=rank, num_parts=meta["num_parts"], graph=graph, meta=meta, **arrays)


def row_digests(x: np.ndarray, y: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """uint64 ``[len(rows)]``: a digest of the features and label of each row of ``rows``.

    For each ``r`` of ``rows``, ``sum_j c_j b(x[r, j]) + c_F y[r]`` mod 2^64, with ``b`` the
    bits of a float32 (``-0`` read as ``0``: values are compared) and ``c_j`` fixed odd
    constants.  Two rows that differ in one value always differ here (``c_j d`` is not 0
    mod 2^64 for ``0 < |d| < 2^64``); more differences collide only by an unlikely
    cancellation (a check against damage, not a cryptographic digest).  ``x`` ``[n, F]``
    float32 and ``y`` ``[n]`` int64, read in row blocks of bounded size (of a memory-mapped
    ``x``, the pages of each dropped from the resident memory once read)."""
    F = x.shape[1]
    c = (np.arange(1, F + 2, dtype=np.uint64) * np.uint64(0x9E3779B97F4A7C15)) | np.uint64(1)
    out = np.empty(len(rows), np.uint64)
    step = max(1, (1 << 20) // max(F, 1))
    for start in range(0, len(rows), step):
        sel = rows[start:start + step]
        bits = (np.asarray(x[sel], np.float32) + np.float32(0)).view(np.uint32)
        out[start:start + step] = ((bits.astype(np.uint64) * c[:F]).sum(axis=1, dtype=np.uint64)
                                   + np.asarray(y[sel]).astype(np.uint64) * c[F])
        release_pages(x)  # a mapped file's rows read: not kept resident
    return out


class PartitionError(DistGNNError, ValueError):
    """Arguments that no partitioning can satisfy (P < 1, more parts than edges, ...)."""


def check_weights(weights, num_parts: int, num_edges: int | None = None) -> np.ndarray:
    """float64 ``[P]`` copy of ``weights`` (relative capacity of each partition), checked.

    Weights that break these rules raise ``PartitionError`` with a one-line message: one
    weight per partition, each finite and > 0, and, given ``num_edges``, none so small
    beside the others that its share is less than one edge (the partition would be empty;
    its share error and balance would be near infinite)."""
    try:
        w = np.array(weights, dtype=np.float64)
    except (TypeError, ValueError):
        raise PartitionError(f"--weights must be numbers, got {weights!r}") from None
    if w.ndim != 1:
        raise PartitionError(f"--weights must be a list of numbers, got shape {w.shape}")
    if len(w) != num_parts:
        raise PartitionError(f"--weights needs one weight per partition: got {len(w)} "
                             f"for {num_parts} partitions")
    bad = np.flatnonzero(~(np.isfinite(w) & (w > 0)))
    if len(bad):
        raise PartitionError(f"--weights must be finite and > 0, got {float(w[bad[0]]):g} for "
                             f"partition {bad[0]}")
    if num_edges is not None:
        shares = requested_shares(w)
        small = np.flatnonzero(shares * max(num_edges, 1) < 1)
        if len(small):
            p = small[0]
            raise PartitionError(f"--weights give partition {p} a share of {shares[p]:.3g} of "
                                 f"the {num_edges:,} edges, less than one edge (it would be "
                                 "empty)")
    return w


def requested_shares(weights) -> np.ndarray:
    """The edge share each partition is asked for: ``weights / sum(weights)``, computed as
    ``(w / max w) / sum(w / max w)`` so that weights near the float64 maximum do not make
    the sum overflow."""
    w = np.asarray(weights, np.float64)
    w = w / w.max()
    return w / w.sum()
