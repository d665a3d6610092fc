"""The on-disk partition format (version ``FORMAT_VERSION``): write atomically, load, verify.

A partition directory holds ``meta.json`` and one ``part-NNNNN/`` per partition, each a set
of ``.npy`` files (never pickled; loaded memory-mapped).  ``docs/partition-format.md``
documents every field.  Writing goes into a temporary sibling directory that is renamed
into place only when every file and ``meta.json`` (with a SHA-256 per file) are on disk,
so an interrupted run never leaves a directory that loads.
"""
from __future__ import annotations

import dataclasses
import datetime
import hashlib
import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Iterable

import numpy as np

from distgnn.errors import DistGNNError
from distgnn.graph import CSRGraph

from .layout import Layout, partition_arrays
from .stats import counts_from_layout, summarize

FORMAT_VERSION = 1
FORMAT_NAME = "distgnn-partitions"
PART_FILES = ("global_ids", "indptr", "indices", "x", "y", "train_mask", "val_mask",
              "test_mask", "in_degree", "root_rank", "root_local", "leaf_ptr",
              "leaf_root_local", "leaf_remote_local")
OPTIONAL_FILES = ("edge_weight",)


class PartitionFormatError(DistGNNError):
    """A partition directory that is missing, corrupt, of another version, or inconsistent."""


def part_dir(p: int) -> str:
    return f"part-{p:05d}"


def sha256(path: Path) -> str:
    with open(path, "rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


def write_partitions(out: str | Path, parts: Iterable[tuple[int, dict[str, np.ndarray]]],
                     meta: dict, force: bool = False, progress=None) -> Path:
    """Write ``parts`` (``(p, arrays)`` pairs) and ``meta`` as a partition directory ``out``.

    Refuses an existing ``out`` unless ``force``; on any failure the target is untouched
    and the temporary directory removed.  ``progress`` is called once per partition.
    """
    out = Path(out)
    if out.exists() and not force:
        raise PartitionFormatError(f"{out} exists; pass --force to replace it")
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.tmp-", dir=out.parent))
    try:
        files = {}
        for p, arrays in parts:
            (tmp / part_dir(p)).mkdir()
            for name, array in arrays.items():
                rel = f"{part_dir(p)}/{name}.npy"
                np.save(tmp / rel, np.ascontiguousarray(array), allow_pickle=False)
                files[rel] = {"bytes": (tmp / rel).stat().st_size, "sha256": sha256(tmp / rel)}
            if progress:
                progress(1)
        meta = {"format": FORMAT_NAME, "format_version": FORMAT_VERSION, **meta, "files": files}
        with open(tmp / "meta.json", "w") as f:
            json.dump(meta, f, indent=1)
            f.flush()
            os.fsync(f.fileno())
        if out.exists():
            old = out.parent / f".{out.name}.old-{os.getpid()}"
            out.rename(old)
            tmp.rename(out)
            shutil.rmtree(old)
        else:
            tmp.rename(out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return out


def write_dataset(out: str | Path, data, layout: Layout, settings: dict, force: bool = False,
                  progress=None) -> dict:
    """Write the partitions of ``data`` (a NodeDataset) under ``layout`` to ``out``.

    ``settings`` (method, seed, order, roots) go into ``meta.json`` beside the sizes and
    the headline statistics; returns the meta written (without the file list).
    """
    graph = data.graph
    clones = layout.clones()
    stats = summarize(counts_from_layout(layout), graph.num_nodes,
                      int(np.count_nonzero(clones > 1)))
    meta = {"dataset": data.name, **settings, "num_parts": layout.num_parts,
            "num_nodes": graph.num_nodes, "num_edges": graph.num_edges,
            "num_features": data.num_features, "num_classes": data.num_classes,
            "multigraph": graph.has_duplicate_edges(),
            "split_vertices": int(np.count_nonzero(clones > 1)),
            **{k: stats[k] for k in ("replication_factor", "split_fraction", "edge_balance",
                                     "root_balance")},
            "created": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")}
    write_partitions(out, partition_arrays(layout, graph.indptr, graph.indices, data), meta,
                     force, progress)
    return meta


def read_meta(directory: str | Path) -> dict:
    """``meta.json`` of a partition directory, checked for format name and version."""
    path = Path(directory) / "meta.json"
    try:
        with open(path) as f:
            meta = json.load(f)
    except FileNotFoundError:
        raise PartitionFormatError(f"{directory} is not a partition directory "
                                   "(no meta.json)") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise PartitionFormatError(f"{path}: unreadable: {e}") from None
    if not isinstance(meta, dict) or meta.get("format") != FORMAT_NAME:
        raise PartitionFormatError(f"{path}: not a {FORMAT_NAME} meta.json")
    if meta.get("format_version") != FORMAT_VERSION:
        raise PartitionFormatError(f"{path}: format version {meta.get('format_version')}, "
                                   f"this distgnn reads version {FORMAT_VERSION}")
    for key in ("num_parts", "num_nodes", "num_edges", "files"):
        if key not in meta:
            raise PartitionFormatError(f"{path}: missing field {key!r}")
    return meta


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


def _load_array(path: Path, mmap: bool) -> np.ndarray:
    try:
        return np.load(path, mmap_mode="r" if mmap else None, allow_pickle=False)
    except FileNotFoundError:
        raise PartitionFormatError(f"{path}: missing") from None
    except (OSError, ValueError, EOFError) as e:
        raise PartitionFormatError(f"{path}: unreadable: {e}") from None


def load(directory: str | Path, rank: int, mmap: bool = True) -> Partition:
    """Partition ``rank`` of ``directory`` (format and shapes checked; checksums are
    :func:`verify`'s job, because hashing every file on every start would cost minutes)."""
    directory = Path(directory)
    meta = read_meta(directory)
    if not 0 <= rank < meta["num_parts"]:
        raise PartitionFormatError(f"{directory}: rank {rank} out of range for "
                                   f"{meta['num_parts']} partitions")
    base = directory / part_dir(rank)
    arrays = {name: _load_array(base / f"{name}.npy", mmap) for name in PART_FILES}
    weight_path = base / "edge_weight.npy"
    weight = _load_array(weight_path, mmap) if weight_path.exists() else None
    n = len(arrays["global_ids"])
    for name in ("y", "train_mask", "val_mask", "test_mask", "in_degree", "root_rank",
                 "root_local"):
        if arrays[name].shape != (n,):
            raise PartitionFormatError(f"{base / name}.npy: shape {arrays[name].shape}, "
                                       f"expected ({n},)")
    if arrays["x"].ndim != 2 or len(arrays["x"]) != n:
        raise PartitionFormatError(f"{base}/x.npy: shape {arrays['x'].shape}, expected ({n}, F)")
    if arrays["leaf_ptr"].shape != (meta["num_parts"] + 1,):
        raise PartitionFormatError(f"{base}/leaf_ptr.npy: shape {arrays['leaf_ptr'].shape}, "
                                   f"expected ({meta['num_parts'] + 1},)")
    graph = CSRGraph(arrays.pop("indptr"), arrays.pop("indices"), n, weight, source=base)
    return Partition(rank=rank, num_parts=meta["num_parts"], graph=graph, meta=meta, **arrays)


def check_files(directory: str | Path, meta: dict, rank: int | None = None) -> list[str]:
    """Size and SHA-256 of every file ``meta.json`` lists (only partition ``rank``'s if given)."""
    directory = Path(directory)
    problems = []
    prefix = "" if rank is None else part_dir(rank) + "/"
    for rel, info in meta["files"].items():
        if not rel.startswith(prefix):
            continue
        path = directory / rel
        if not path.exists():
            problems.append(f"{path}: missing")
        elif path.stat().st_size != info["bytes"]:
            problems.append(f"{path}: {path.stat().st_size} bytes, meta.json says "
                            f"{info['bytes']} (truncated or replaced)")
        elif sha256(path) != info["sha256"]:
            problems.append(f"{path}: checksum mismatch (file corrupted)")
    return problems


def verify(directory: str | Path, edges: tuple[np.ndarray, np.ndarray] | None = None
           ) -> list[str]:
    """Every problem found in ``directory`` (empty list: valid).

    Checks format and version, each file's size and SHA-256, then consistency: every edge
    in exactly one partition (for a ``multigraph``, whose input repeats edges, only the
    total count and, with ``edges``, the multiset), every vertex in at least one with exactly one root, root
    pointers that point at the right vertex, and split tables that mirror each other.
    ``edges`` (global ``(src, dst)``) also checks the union against the input graph.
    """
    directory = Path(directory)
    meta = read_meta(directory)
    problems = check_files(directory, meta)
    if problems:
        return problems
    try:
        parts = [load(directory, p, mmap=True) for p in range(meta["num_parts"])]
    except DistGNNError as e:
        return [str(e)]
    return _consistency(parts, meta, edges)


def _consistency(parts: list[Partition], meta: dict, edges) -> list[str]:
    n, P = meta["num_nodes"], meta["num_parts"]
    problems = []
    keys, roots, seen = [], np.zeros(n, np.int64), np.zeros(n, np.int64)
    for part in parts:
        ids = np.asarray(part.global_ids)
        if len(ids) and (ids.min() < 0 or ids.max() >= n or np.any(np.diff(ids) <= 0)):
            problems.append(f"partition {part.rank}: global ids not increasing in 0..{n - 1}")
            continue
        seen[ids] += 1
        roots[ids[np.asarray(part.root_rank) == part.rank]] += 1
        src, dst = part.graph.edges()
        keys.append(ids[dst] * n + ids[src])
    if problems:
        return problems
    if np.any(seen == 0):
        problems.append(f"{np.count_nonzero(seen == 0)} vertices are in no partition")
    if np.any(roots != 1):
        problems.append(f"{np.count_nonzero(roots != 1)} vertices do not have exactly one root")
    all_keys = np.sort(np.concatenate(keys)) if keys else np.empty(0, np.int64)
    if len(all_keys) != meta["num_edges"]:
        problems.append(f"partitions hold {len(all_keys)} edges, meta.json says "
                        f"{meta['num_edges']}")
    if (not meta.get("multigraph", False) and len(all_keys) > 1
            and np.any(all_keys[1:] == all_keys[:-1])):
        problems.append("some edges are stored in more than one partition")
    if edges is not None:
        expected = np.sort(np.asarray(edges[1], np.int64) * n + np.asarray(edges[0]))
        if not np.array_equal(expected, all_keys):
            problems.append("the union of the partitions differs from the input edge set")
    problems += _check_split_tables(parts, P)
    return problems


def _check_split_tables(parts: list[Partition], P: int) -> list[str]:
    problems = []
    for q in parts:
        ids, root_rank = np.asarray(q.global_ids), np.asarray(q.root_rank)
        root_local = np.asarray(q.root_local)
        if np.any((root_rank < 0) | (root_rank >= P)):
            problems.append(f"partition {q.rank}: root_rank out of range")
            continue
        here = root_rank == q.rank
        if np.any(root_local[here] != np.flatnonzero(here)):
            problems.append(f"partition {q.rank}: a root does not point at itself")
        for p in parts:
            if p.rank == q.rank:
                continue
            leaves = np.flatnonzero(root_rank == p.rank)
            lo, hi = int(p.leaf_ptr[q.rank]), int(p.leaf_ptr[q.rank + 1])
            table_root = np.asarray(p.leaf_root_local[lo:hi])
            table_leaf = np.asarray(p.leaf_remote_local[lo:hi])
            if not (np.array_equal(table_leaf, leaves)
                    and np.array_equal(table_root, root_local[leaves])):
                problems.append(f"split tables of partitions {p.rank} and {q.rank} disagree")
                continue
            p_ids = np.asarray(p.global_ids)
            if len(leaves) and (root_local[leaves].max() >= len(p_ids) or not np.array_equal(
                    p_ids[root_local[leaves]], ids[leaves])):
                problems.append(f"partition {q.rank}: leaves point at the wrong vertex on "
                                f"partition {p.rank}")
    return problems
