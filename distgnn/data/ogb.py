"""Datasets in the Open Graph Benchmark's node-property layout, read from the files.

A directory holds ``raw/edge.csv.gz`` (``src,dst`` lines), ``raw/node-feat.csv.gz``
(``[N, F]``), ``raw/node-label.csv.gz`` (``nan`` for an unlabelled node), optionally
``raw/num-node-list.csv.gz`` (``N``), and ``split/<name>/{train,valid,test}.csv.gz`` (node
ids); no ``ogb`` package is needed."""
from __future__ import annotations

from pathlib import Path

import numpy as np

from .edge_lists import read_edges
from .generators import random_split, random_split_note
from .graph import (
    NODE_BYTES,
    UNLABELLED,
    CSRGraph,
    GraphError,
    NodeDataset,
    require_memory,
)
from .side_files import check_classes, check_finite, read_array
from .text_files import joined_notes, optional, reading, required


def load_ogb(root: str | Path) -> NodeDataset:
    """Dataset from a directory in the OGB node-property layout (edges kept directed).

    Labels are read as float so that ``nan`` marks unlabelled nodes: those get label ``-1``
    and no mask, and a split file that lists one is an error.  The split is the first subdirectory
    of ``split/`` in sorted order; without one, a seeded 60/20/20 split of the labelled nodes.
    """
    root = Path(root)
    raw = root / "raw"
    notes: list[str] = []
    feat_file = optional(raw / "node-feat.csv.gz")
    count_file = optional(raw / "num-node-list.csv.gz")
    x = read_array(feat_file, np.float32, 2, "feature row", notes) if feat_file else None
    if x is not None:
        check_finite(x, feat_file)
    if count_file:
        counts = read_array(count_file, np.int64, 1, "node counts", notes)
        if np.any(counts < 0):
            raise GraphError("negative node count", count_file)
        num_nodes = sum(counts.tolist())  # Python ints: an int64 sum could wrap around
        if x is not None and len(x) != num_nodes:
            raise GraphError(f"{len(x)} feature rows but {count_file.name} says {num_nodes} "
                             "nodes", feat_file)
        counted_by = f"{count_file.name} says {num_nodes}"
    elif x is not None:
        num_nodes = len(x)
        counted_by = f"{feat_file.name} has {num_nodes} rows"
    else:
        raise GraphError("needs raw/node-feat.csv.gz or raw/num-node-list.csv.gz", root)
    require_memory(NODE_BYTES * num_nodes, count_file or feat_file)
    if x is None:
        x = np.ones((num_nodes, 1), np.float32)
    edge_file = required(raw / "edge.csv.gz")
    with reading(edge_file):
        src, dst, weight, header = read_edges(edge_file, names=False)
    notes.append(header)
    if len(src) and max(src.max(), dst.max()) >= num_nodes:
        raise GraphError(f"vertex id {max(src.max(), dst.max())} out of range 0..{num_nodes - 1} "
                         f"({counted_by})", edge_file)
    graph = CSRGraph.from_edges(src, dst, num_nodes, weight, source=edge_file)

    label_file = required(raw / "node-label.csv.gz")
    y = read_array(label_file, np.float64, 1, "labels", notes)
    if len(y) != num_nodes:
        raise GraphError(f"{len(y)} labels for {num_nodes} nodes ({counted_by})", label_file)
    labelled = ~np.isnan(y)
    # below 2**53 every integer is exact in float64 and the cast to int64 cannot overflow
    known = y[labelled]
    if np.any((known < 0) | (known >= 2.0**53) | (known != np.round(known))):
        raise GraphError("labels must be non-negative integers or nan (integers below "
                         "2**53)", label_file)
    y = np.where(labelled, y, UNLABELLED).astype(np.int64)
    check_classes(y, label_file)

    splits = sorted(p for p in (root / "split").glob("*") if p.is_dir())
    if splits:
        masks = [_ogb_mask(splits[0] / f"{part}.csv.gz", labelled, notes)
                 for part in ("train", "valid", "test")]
        note = f"split: the dataset's own (split/{splits[0].name})"
    else:
        masks = random_split(num_nodes, np.random.default_rng(0), eligible=labelled)
        note = random_split_note(int(np.count_nonzero(labelled)), "labelled vertices", 0)
    return NodeDataset(graph, x, y, *masks, name=root.name, split_note=note,
                       note=joined_notes(*notes))


def _ogb_mask(path: Path, labelled: np.ndarray, notes: list[str]) -> np.ndarray:
    """bool ``[N]`` mask of the node ids listed in an OGB split file."""
    ids = read_array(required(path), np.int64, 1, "node ids", notes)
    if len(ids) and (ids.min() < 0 or ids.max() >= len(labelled)):
        raise GraphError(f"node id out of range 0..{len(labelled) - 1}", path)
    unlabelled = ids[~labelled[ids]]
    if len(unlabelled):
        raise GraphError(f"{len(unlabelled)} listed node(s) have no label (nan), first "
                         f"{int(unlabelled[0])}", path)
    mask = np.zeros(len(labelled), bool)
    mask[ids] = True
    return mask
