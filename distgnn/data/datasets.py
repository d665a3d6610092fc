"""Node-classification datasets from a spec: a generator, a bundled name, or files on disk.

:func:`load` accepts a *spec* (str or Path), tried in this order:

1. a generator spec ``"rmat:scale=18,edge_factor=16,features=128,classes=16,seed=0"`` or
   ``"sbm:nodes=100000,blocks=8,avg_degree=20,p_in=0.8,features=64,noise=1.0,seed=0"``
   (every key optional; see :data:`distgnn.data.generators.GENERATORS` for keys and defaults);
2. a bundled name such as ``"cora"`` (``distgnn/data/NAME.npz``);
3. a bare name ``NAME`` found as ``NAME.npz`` in a directory of the ``os.pathsep``-separated
   environment variable ``DISTGNN_DATA_PATH`` (first hit wins);
4. a path to a ``.npz`` file in the shared format (``indptr``, ``indices``, ``x``, ``y``,
   ``train_mask``, ``val_mask``, ``test_mask``, optionally ``train_masks``/``val_masks``/
   ``test_masks`` ``[S, N]`` of which ``split`` picks one), read without unpickling;
5. a directory in the OGB node-property layout (``raw/edge.csv.gz``,
   ``raw/node-feat.csv.gz``, ``raw/node-label.csv.gz``, optional ``raw/num-node-list.csv.gz``,
   ``split/<name>/{train,valid,test}.csv.gz``); ``nan`` labels mark unlabelled nodes;
6. any other file: an edge list (:func:`~distgnn.data.edge_lists.load_edge_list`), with
   optional ``features`` (``.npy`` ``[N, F]`` or text rows) and ``labels`` (``.npy`` or
   text, one int per line);
   vertex ids that are not all non-negative integers are names, mapped to ``0..N-1`` in
   sorted order (kept in :attr:`~distgnn.data.graph.NodeDataset.ids`), and then text feature and
   label files are keyed by them.  A ``.npy`` file is a binary edge file
   (:mod:`distgnn.data.binary_edges`), read whole into memory.

``split_file`` replaces the split of any of them
(:func:`~distgnn.data.side_files.read_split_file`).  A label ``-1`` marks an unlabelled
vertex, which is in no mask; the other labels must be the classes ``0..C-1``, each with a
vertex (:func:`~distgnn.data.side_files.check_classes`).  Text files may start with a UTF-8
byte-order mark and with a header line, which is skipped and noted
(:attr:`~distgnn.data.graph.NodeDataset.note`) when the lines after it are data and it is
not (:func:`~distgnn.data.text_files.find_table`).  Anything unreadable raises
:class:`~distgnn.data.graph.GraphError` with a one-line message naming the file.  All
randomness goes through ``np.random.default_rng(seed)``.
"""
from __future__ import annotations

import contextlib
import dataclasses
import os
import zipfile
from importlib import resources
from pathlib import Path
from typing import Iterator

from .edge_lists import load_edge_list
from .generators import GENERATORS, generate
from .graph import CSRGraph, GraphError, NodeDataset
from .npy_files import read_npz
from .ogb import load_ogb
from .side_files import MASK_KEYS, check_classes, select_split, split_file_masks
from .text_files import joined_notes, required

_NPZ_KEYS = ("indptr", "indices", "x", "y", "train_mask", "val_mask", "test_mask")


# ---- entry point ------------------------------------------------------------------------------
def load(spec: str | Path, *, features: str | Path | None = None,
         labels: str | Path | None = None, split: int = 0,
         symmetrize: bool = False, split_file: str | Path | None = None) -> NodeDataset:
    """Load or generate a dataset from ``spec`` (see the module docstring).

    ``features``/``labels`` apply to edge lists only and ``split > 0`` to ``.npz`` files with
    several splits.  ``symmetrize`` adds the reverse of every edge of a file-based graph
    that has none, with its weight on a weighted graph, and keeps each edge once
    (:meth:`~distgnn.data.graph.CSRGraph.symmetrize`; generated graphs are symmetric
    already); without it, an edge list's (or OGB directory's)
    :attr:`~distgnn.data.graph.NodeDataset.note` counts the edges that have no reverse.
    ``split_file`` replaces the split (:func:`~distgnn.data.side_files.read_split_file`).
    An error of a side file names the flag it is given by (``--labels FILE: ...``).
    """
    text = str(spec)
    with _named_by_flags(features=features, labels=labels, split_file=split_file):
        if text.partition(":")[0] in GENERATORS:
            _check_options("generator", text, split, features, labels)
            ds = generate(text)
            kind = "generator"
        else:
            with locate(text) as path:
                kind = "ogb" if path.is_dir() else "npz" if path.suffix == ".npz" else "edges"
                if kind != "ogb":
                    required(path)  # a FIFO or a device would block or never end
                _check_options(kind, text, split, features, labels)
                if kind == "ogb":
                    ds = load_ogb(path)
                elif kind == "npz":
                    ds = load_npz(path, split=split)
                else:
                    ds = load_edge_list(path, features=features, labels=labels)
        if symmetrize:
            ds.graph = ds.graph.symmetrize(ds.vertex_name)
        elif kind in ("edges", "ogb"):
            ds.note = joined_notes(ds.note, _reverse_note(ds.graph))
        if split_file is not None:
            masks, header = split_file_masks(Path(split_file), ds)
            ds = dataclasses.replace(ds, **dict(zip(MASK_KEYS, masks)),
                                     split_note=f"split: from {split_file}"
                                     + (f" ({header})" if header else ""))
    return ds


@contextlib.contextmanager
def _named_by_flags(**files: str | Path | None) -> Iterator[None]:
    """Name the flag a side file was given by (``features=FILE``: ``--features FILE``) in an
    error of that file, so that a short or bare file name reads as what it is."""
    flags = {str(Path(file)): "--" + key.replace("_", "-") for key, file in files.items()
             if file is not None}
    try:
        yield
    except GraphError as e:
        if e.source not in flags:
            raise
        raise GraphError(e.problem, e.source, flag=flags[e.source]) from None


def _reverse_note(graph: CSRGraph) -> str:
    """What :func:`load` says of a file's graph whose edges are not all reciprocated."""
    missing = graph.unreciprocated_edges()
    if not missing:
        return ""
    weights = "" if graph.edge_weight is None else ", each with the weight of the edge it reverses"
    return (f"{missing:,} of the {graph.num_edges:,} edges have no reverse edge (kept "
            "directed, as the file gives them); --symmetrize (symmetrize=True) adds the "
            f"reverse of every edge that has none{weights}")


def _check_options(kind: str, spec: str, split: int, features, labels) -> None:
    if split and kind != "npz":
        raise GraphError(f"--split {split} (split={split}) needs an .npz file holding several "
                         "splits", spec)
    if (features is not None or labels is not None) and kind != "edges":
        raise GraphError("features= and labels= apply to edge-list files only", spec)


@contextlib.contextmanager
def locate(spec: str) -> Iterator[Path]:
    """Yield the path a non-generator spec names; a bundled file may be a temporary copy."""
    bare = Path(spec).name == spec
    if bare:
        bundled = resources.files("distgnn") / "data" / f"{spec}.npz"
        if bundled.is_file():
            with resources.as_file(bundled) as path:
                yield path
            return
        for folder in filter(None, os.environ.get("DISTGNN_DATA_PATH", "").split(os.pathsep)):
            candidate = Path(folder) / f"{spec}.npz"
            if candidate.is_file():
                yield candidate
                return
    if not spec or not Path(spec).exists():
        raise GraphError("no such file, directory, bundled dataset or generator", spec)
    yield Path(spec)


# ---- .npz in the shared format ----------------------------------------------------------------
def load_npz(path: str | Path, split: int = 0) -> NodeDataset:
    """Dataset from an ``.npz`` in the documented format (``docs/data-formats.md``).

    ``split`` selects row ``split`` of ``train_masks``/``val_masks``/``test_masks`` when the
    file has them; otherwise only ``split=0`` (the single ``*_mask`` split) is valid.
    Object arrays are refused, never unpickled.
    """
    path = Path(path)
    if not zipfile.is_zipfile(path):
        raise GraphError("not an .npz (zip) archive", path)
    arrays = read_npz(path)
    missing = [k for k in _NPZ_KEYS if k not in arrays]
    if missing:
        raise GraphError(f"missing key(s) {', '.join(missing)}", path)
    masks, note = select_split(arrays, split, path)
    graph = CSRGraph(arrays["indptr"], arrays["indices"], edge_weight=arrays.get("edge_weight"),
                     source=path)
    # a member of another name is not read: said, so that a misspelt key is not lost unseen
    unread = sorted(set(arrays) - {*_NPZ_KEYS, *(f"{m}s" for m in MASK_KEYS), "edge_weight"})
    ds = NodeDataset(graph, arrays["x"], arrays["y"], *masks, name=path.stem, split_note=note,
                     note=f"members not read: {', '.join(unread)}" if unread else "")
    check_classes(ds.y, path)
    return ds


