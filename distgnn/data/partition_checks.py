"""The checks of a partition directory across its partitions (``distgnn-partition --verify``).

A partition alone is checked on every load (:func:`distgnn.data.partitions.load`); these
checks need them all: every file's size and SHA-256 against ``meta.json``, each global
vertex owned by exactly one root, the clones and the edges adding up to the graph (and to
its edge list, when given), and the split tables agreeing."""
from __future__ import annotations

from pathlib import Path

import numpy as np

from ..errors import DistGNNError
from .partitions import (
    VERTEX_IDS,
    Partition,
    load,
    part_dir,
    read_meta,
    read_vertex_ids,
    sha256,
)


def check_files(directory: str | Path, meta: dict, rank: int | None = None) -> list[str]:
    """Size and SHA-256 of every file ``meta.json`` lists (only partition ``rank``'s if given)."""
    directory = Path(directory)
    problems = []
    prefix = "" if rank is None else part_dir(rank) + "/"
    for rel, info in meta["files"].items():
        if not rel.startswith(prefix):
            continue
        path = directory / rel
        try:
            if not path.exists():
                problems.append(f"{path}: missing")
            elif path.stat().st_size != info["bytes"]:
                problems.append(f"{path}: {path.stat().st_size} bytes, meta.json says "
                                f"{info['bytes']} (truncated or replaced)")
            elif sha256(path) != info["sha256"]:
                problems.append(f"{path}: checksum mismatch (file corrupted)")
        except OSError as e:
            problems.append(f"{path}: unreadable: {e.strerror or e}")
    return problems


def verify(directory: str | Path, edges: tuple[np.ndarray, np.ndarray] | None = None,
           sizes: dict[str, int] | None = None) -> list[str]:
    """Every problem found in ``directory`` (empty list: valid).

    Checks format and version, ``meta.json`` (:func:`read_meta`), each file's size and
    SHA-256, each partition as :func:`load` does, ``vertex_ids.npy`` when present (dtype,
    length, no id twice), then consistency: every edge in exactly
    one partition (for a ``multigraph``, whose input repeats edges, only the total count
    and, with ``edges``, the multiset), every vertex in at least one with exactly one root,
    ``split_vertices``, global in-degrees that the stored edges give, root pointers that
    point at the right vertex, leaves whose features and labels are their root's, and split
    tables that mirror each other.  ``edges`` (global ``(src, dst)``) also checks the union
    against the input graph, ``sizes`` (``num_nodes``, ``num_edges``, ``num_features``,
    ``num_classes`` of the input) the fields of ``meta.json``.  Problems of consistency are
    prefixed with ``directory``.
    """
    directory = Path(directory)
    meta = read_meta(directory)
    problems = check_files(directory, meta)
    if problems:
        return problems
    try:
        parts = [load(directory, p, mmap=True) for p in range(meta["num_parts"])]
        ids = read_vertex_ids(directory)
    except DistGNNError as e:
        return [str(e)]
    if ids is not None and len(np.unique(ids)) != len(ids):
        return [f"{directory / VERTEX_IDS}: repeats a vertex id"]
    problems = [f"meta.json says {key} {meta.get(key)}, the dataset has {value}"
                for key, value in (sizes or {}).items() if meta.get(key) != value]
    return [f"{directory}: {problem}"
            for problem in problems + _consistency(parts, meta, edges)]


def _consistency(parts: list[Partition], meta: dict, edges) -> list[str]:
    n = meta["num_nodes"]
    problems = []
    clones = sum(part.num_nodes for part in parts)
    if n > clones:  # before allocating [n] arrays for a count that may be a lie
        return [f"meta.json says {n} vertices but the partitions hold {clones} clones, so "
                "some vertices are in no partition"]
    keys, roots, seen = [], np.zeros(n, np.int64), np.zeros(n, np.int64)
    in_degree = np.zeros(n, np.int64)
    for part in parts:  # load() checked that global ids are distinct, within 0..n-1
        ids = np.asarray(part.global_ids)
        seen[ids] += 1
        roots[ids[np.asarray(part.root_rank) == part.rank]] += 1
        src, dst = part.graph.edges()
        in_degree += np.bincount(ids[dst], minlength=n)
        keys.append(ids[dst] * n + ids[src])
    for part in parts:
        if not np.array_equal(part.in_degree, in_degree[part.global_ids]):
            problems.append(f"partition {part.rank}: in_degree differs from the in-degrees "
                            "of the edges the partitions hold")
    if np.any(seen == 0):
        problems.append(f"{np.count_nonzero(seen == 0)} vertices are in no partition")
    if np.any(roots != 1):
        problems.append(f"{np.count_nonzero(roots != 1)} vertices do not have exactly one root")
    split = sum(part.split_roots for part in parts)
    if meta.get("split_vertices", split) != split:
        problems.append(f"meta.json says {meta['split_vertices']} split vertices, the "
                        f"partitions have {split}")
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
    problems += _check_split_tables(parts)
    return problems


def _check_split_tables(parts: list[Partition]) -> list[str]:
    problems = []
    for q in parts:  # load() checked each partition's own tables
        ids, root_rank = np.asarray(q.global_ids), np.asarray(q.root_rank)
        root_local = np.asarray(q.root_local)
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
            p_ids, at = np.asarray(p.global_ids), root_local[leaves]
            if len(leaves) and (at.max() >= len(p_ids)
                                or not np.array_equal(p_ids[at], ids[leaves])):
                problems.append(f"partition {q.rank}: leaves point at the wrong vertex on "
                                f"partition {p.rank}")
            elif not (np.array_equal(np.asarray(q.x)[leaves], np.asarray(p.x)[at])
                      and np.array_equal(np.asarray(q.y)[leaves], np.asarray(p.y)[at])):
                problems.append(f"partition {q.rank}: features or labels of leaves differ "
                                f"from their roots' on partition {p.rank}")
    return problems
