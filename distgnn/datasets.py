"""Node-classification datasets: loaders for files on disk and synthetic generators.

:func:`load` accepts a *spec* (str or Path), tried in this order:

1. a generator spec ``"rmat:scale=18,edge_factor=16,features=128,classes=16,seed=0"`` or
   ``"sbm:nodes=100000,blocks=8,avg_degree=20,p_in=0.8,features=64,noise=1.0,seed=0"``
   (every key optional; see :data:`distgnn.generators.GENERATORS` for keys and defaults);
2. a bundled name such as ``"cora"`` (``distgnn/data/NAME.npz``);
3. a bare name ``NAME`` found as ``NAME.npz`` in a directory of the ``os.pathsep``-separated
   environment variable ``DISTGNN_DATA_PATH`` (first hit wins);
4. a path to a ``.npz`` file in the shared format (``indptr``, ``indices``, ``x``, ``y``,
   ``train_mask``, ``val_mask``, ``test_mask``, optionally ``train_masks``/``val_masks``/
   ``test_masks`` ``[S, N]`` of which ``split`` picks one), read without unpickling;
5. a directory in the OGB node-property layout (``raw/edge.csv.gz``,
   ``raw/node-feat.csv.gz``, ``raw/node-label.csv.gz``, optional ``raw/num-node-list.csv.gz``,
   ``split/<name>/{train,valid,test}.csv.gz``); ``nan`` labels mark unlabelled nodes;
6. any other file: an edge list (see :func:`load_edge_list`), with optional ``features``
   (``.npy`` ``[N, F]`` or text rows) and ``labels`` (``.npy`` or text, one int per line);
   vertex ids that are not all non-negative integers are names, mapped to ``0..N-1`` in
   sorted order (kept in :attr:`~distgnn.graph.NodeDataset.ids`), and then text feature and
   label files are keyed by them.  A ``.npy`` file is a binary edge file
   (:mod:`distgnn.edge_file`), read whole into memory.

``split_file`` replaces the split of any of them (:func:`read_split_file`).  A label ``-1``
marks an unlabelled vertex, which is in no mask.  Anything unreadable raises :class:`~distgnn.graph.GraphError` with a one-line message naming
the file.  All randomness goes through ``np.random.default_rng(seed)``.
"""
from __future__ import annotations

import contextlib
import dataclasses
import gzip
import math
import os
import warnings
import zipfile
import zlib
from importlib import resources
from pathlib import Path
from typing import Iterator

import numpy as np

from .edge_file import edge_file_header, iter_edges
from .errors import one_line
from .generators import GENERATORS, generate, random_split, random_split_note
from .graph import NODE_BYTES, UNLABELLED, CSRGraph, GraphError, NodeDataset, require_memory

_NPZ_KEYS = ("indptr", "indices", "x", "y", "train_mask", "val_mask", "test_mask")
_MASKS = ("train", "val", "test")
_MASK_KEYS = tuple(f"{m}_mask" for m in _MASKS)
# Errors of reading a file that is missing, a directory, unreadable, a damaged gzip stream.
_READ_ERRORS = (OSError, EOFError, zlib.error)
_EDGE_FILE_CHUNK = 1 << 22  # edges per read of a binary edge file: bounds the temporaries


# ---- entry point ------------------------------------------------------------------------------
def load(spec: str | Path, *, features: str | Path | None = None,
         labels: str | Path | None = None, split: int = 0,
         symmetrize: bool = False, split_file: str | Path | None = None) -> NodeDataset:
    """Load or generate a dataset from ``spec`` (see the module docstring).

    ``features``/``labels`` apply to edge lists only and ``split > 0`` to ``.npz`` files with
    several splits.  ``symmetrize`` adds the reverse of every edge of a file-based graph
    (generated graphs are symmetric already); without it, an edge list's (or OGB
    directory's) :attr:`~distgnn.graph.NodeDataset.note` counts the edges that have no
    reverse.  ``split_file`` replaces the split (:func:`read_split_file`).
    """
    text = str(spec)
    if text.partition(":")[0] in GENERATORS:
        _check_options("generator", text, split, features, labels)
        ds = generate(text)
        kind = "generator"
    else:
        with _locate(text) as path:
            kind = "ogb" if path.is_dir() else "npz" if path.suffix == ".npz" else "edges"
            if kind != "ogb":
                _required(path)  # a FIFO or a device would block or never end
            _check_options(kind, text, split, features, labels)
            if kind == "ogb":
                ds = load_ogb(path)
            elif kind == "npz":
                ds = load_npz(path, split=split)
            else:
                ds = load_edge_list(path, features=features, labels=labels)
    if symmetrize:
        ds.graph = ds.graph.symmetrize()
    elif kind in ("edges", "ogb"):
        ds.note = _reverse_note(ds.graph)
    if split_file is not None:
        masks = read_split_file(split_file, ds)
        ds = dataclasses.replace(ds, **dict(zip(_MASK_KEYS, masks)),
                                 split_note=f"split: from {split_file}")
    return ds


def _reverse_note(graph: CSRGraph) -> str:
    """What :func:`load` says of a file's graph whose edges are not all reciprocated."""
    missing = graph.unreciprocated_edges()
    if not missing:
        return ""
    return (f"{missing:,} of the {graph.num_edges:,} edges have no reverse edge (kept "
            "directed, as the file gives them); --symmetrize (symmetrize=True) adds the "
            "reverse of every edge")


def _check_options(kind: str, spec: str, split: int, features, labels) -> None:
    if split and kind != "npz":
        raise GraphError(f"split={split} needs an .npz file holding several splits", spec)
    if (features is not None or labels is not None) and kind != "edges":
        raise GraphError("features= and labels= apply to edge-list files only", spec)


@contextlib.contextmanager
def _locate(spec: str) -> Iterator[Path]:
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
    arrays = _read_npz(path)
    missing = [k for k in _NPZ_KEYS if k not in arrays]
    if missing:
        raise GraphError(f"missing key(s) {', '.join(missing)}", path)
    masks, note = select_split(arrays, split, path)
    graph = CSRGraph(arrays["indptr"], arrays["indices"], source=path)
    return NodeDataset(graph, arrays["x"], arrays["y"], *masks, name=path.stem,
                       split_note=note)


def _read_npz(path: Path) -> dict[str, np.ndarray]:
    """Every ``NAME.npy`` member of the archive ``path``, by ``NAME``.

    All headers are read first, so a member holding Python objects is refused before any
    unpickling and the members' total size is checked against free memory before any is
    allocated.
    """
    try:
        with zipfile.ZipFile(path) as archive:
            names = [name for name in archive.namelist() if name.endswith(".npy")]
            nbytes = 0
            for name in names:
                with archive.open(name) as f:
                    nbytes += _npy_nbytes(f, path, name)
            require_memory(nbytes, path)
            arrays = {}
            for name in names:
                with archive.open(name) as f:
                    arrays[name[:-4]] = np.lib.format.read_array(f, allow_pickle=False)
            return arrays
    except GraphError:
        raise
    # RuntimeError: an encrypted member; NotImplementedError: an unknown compression method
    except (*_READ_ERRORS, ValueError, zipfile.BadZipFile, RuntimeError,
            NotImplementedError) as e:
        raise GraphError(f"unreadable .npz archive: {one_line(e)}", path) from None


def _npy_nbytes(f, path: Path, member: str | None = None) -> int:
    """Bytes of the array whose ``.npy`` header starts ``f``, read from ``path`` (its
    archive member ``member``); refuses object dtypes and negative dimensions."""
    where = f"member {member}: " if member else ""
    version = np.lib.format.read_magic(f)
    if version == (1, 0):
        shape, _, dtype = np.lib.format.read_array_header_1_0(f)
    elif version == (2, 0):
        shape, _, dtype = np.lib.format.read_array_header_2_0(f)
    else:
        raise GraphError(f"{where}.npy format version {version[0]}.{version[1]} is not "
                         "supported", path)
    if dtype.hasobject:
        raise GraphError(f"{where}holds Python objects (dtype {dtype}); refused because "
                         "loading it would unpickle them (allow_pickle=False)", path)
    if any(d < 0 for d in shape):
        raise GraphError(f"{where}negative dimension in shape {shape}", path)
    return math.prod(shape) * dtype.itemsize


def _read_npy(path: Path) -> np.ndarray:
    """The array of the ``.npy`` file ``path``, header checked first (see :func:`_npy_nbytes`)."""
    with open(path, "rb") as f:
        require_memory(_npy_nbytes(f, path), path)
        f.seek(0)
        return np.lib.format.read_array(f, allow_pickle=False)


def select_split(arrays: dict, split: int, source) -> tuple[tuple[np.ndarray, ...], str]:
    """The three ``[N]`` masks of split ``split`` and its split note, from ``arrays`` holding
    ``train_mask``/``val_mask``/``test_mask`` ``[N]`` or ``train_masks``/``val_masks``/
    ``test_masks`` ``[S, N]``; errors name ``source``."""
    stacked = [f"{m}_masks" for m in _MASKS]
    present = [k for k in stacked if k in arrays]
    if not present:
        if split != 0:
            raise GraphError(f"split {split} requested but the dataset holds a single split",
                             source)
        return tuple(arrays[k] for k in _MASK_KEYS), "split: the dataset's own masks"
    if len(present) != 3:
        raise GraphError(f"has {', '.join(present)} but not all of {', '.join(stacked)}", source)
    shapes = {arrays[k].shape for k in stacked}
    if len(shapes) != 1 or len(next(iter(shapes))) != 2:
        raise GraphError(f"{', '.join(stacked)} must all be [S, N], got shapes "
                         f"{[arrays[k].shape for k in stacked]}", source)
    count = arrays["train_masks"].shape[0]
    if not 0 <= split < count:
        raise GraphError(f"split {split} out of range: the dataset holds {count} splits "
                         f"(0..{count - 1})", source)
    return (tuple(arrays[k][split] for k in stacked),
            f"split: the dataset's own masks, split {split} of {count} (0..{count - 1})")


# ---- OGB node-property layout -------------------------------------------------------------------
def load_ogb(root: str | Path) -> NodeDataset:
    """Dataset from a directory in the OGB node-property layout (edges kept directed).

    Labels are read as float so that ``nan`` marks unlabelled nodes: those get label ``-1``
    and no mask, and a split file that lists one is an error.  The split is the first subdirectory
    of ``split/`` in sorted order; without one, a seeded 60/20/20 split of the labelled nodes.
    """
    root = Path(root)
    raw = root / "raw"
    feat_file = _optional(raw / "node-feat.csv.gz")
    count_file = _optional(raw / "num-node-list.csv.gz")
    x = _read_array(feat_file, np.float32, 2) if feat_file else None
    if count_file:
        counts = _read_array(count_file, np.int64, 1)
        if np.any(counts < 0):
            raise GraphError("negative node count", count_file)
        num_nodes = sum(counts.tolist())  # Python ints: an int64 sum could wrap around
        if x is not None and len(x) != num_nodes:
            raise GraphError(f"{len(x)} feature rows but {count_file.name} says {num_nodes} "
                             "nodes", feat_file)
    elif x is not None:
        num_nodes = len(x)
    else:
        raise GraphError("needs raw/node-feat.csv.gz or raw/num-node-list.csv.gz", root)
    require_memory(NODE_BYTES * num_nodes, count_file or feat_file)
    if x is None:
        x = np.ones((num_nodes, 1), np.float32)
    src, dst, weight = read_edge_list(_required(raw / "edge.csv.gz"))
    graph = CSRGraph.from_edges(src, dst, num_nodes, weight, source=raw / "edge.csv.gz")

    label_file = _required(raw / "node-label.csv.gz")
    y = _read_array(label_file, np.float64, 1)
    _check_length(y, num_nodes, label_file)
    labelled = ~np.isnan(y)
    # below 2**53 every integer is exact in float64 and the cast to int64 cannot overflow
    known = y[labelled]
    if np.any((known < 0) | (known >= 2.0**53) | (known != np.round(known))):
        raise GraphError("labels must be non-negative integers or nan (integers below "
                         "2**53)", label_file)
    y = np.where(labelled, y, UNLABELLED).astype(np.int64)

    splits = sorted(p for p in (root / "split").glob("*") if p.is_dir())
    if splits:
        masks = [_ogb_mask(splits[0] / f"{part}.csv.gz", labelled)
                 for part in ("train", "valid", "test")]
        note = f"split: the dataset's own (split/{splits[0].name})"
    else:
        masks = random_split(num_nodes, np.random.default_rng(0), eligible=labelled)
        note = random_split_note(int(np.count_nonzero(labelled)), "labelled vertices", 0)
    return NodeDataset(graph, x, y, *masks, name=root.name, split_note=note)


def _ogb_mask(path: Path, labelled: np.ndarray) -> np.ndarray:
    """bool ``[N]`` mask of the node ids listed in an OGB split file."""
    ids = _read_array(_required(path), np.int64, 1)
    if len(ids) and (ids.min() < 0 or ids.max() >= len(labelled)):
        raise GraphError(f"node id out of range 0..{len(labelled) - 1}", path)
    unlabelled = ids[~labelled[ids]]
    if len(unlabelled):
        raise GraphError(f"{len(unlabelled)} listed node(s) have no label (nan), first "
                         f"{int(unlabelled[0])}", path)
    mask = np.zeros(len(labelled), bool)
    mask[ids] = True
    return mask


# ---- edge lists ---------------------------------------------------------------------------------
def load_edge_list(path: str | Path, features: str | Path | None = None,
                   labels: str | Path | None = None) -> NodeDataset:
    """Dataset from an edge-list file (edges kept directed, weights kept).

    Ids that are all non-negative integers are the vertex numbers: ``N`` is the number of
    feature rows, else of labels, else the largest id + 1, and the side files are by
    position.  Otherwise (a negative or non-integer id) the ids are names: vertex ``v`` is
    the ``v``-th distinct id in sorted order (numeric for integers, by code point for
    strings), ``N`` their count, ``ids`` the ``[N]`` names; an ``.npy`` side file is then in
    that order and a text one keyed (:func:`_read_keyed`).  A ``.npy`` file is a binary
    edge file (:func:`read_edge_file`): vertex numbers, no weights.

    Without features every node gets the single feature 1.0; without labels every node gets
    label 0, ``num_classes = 1`` and empty masks; with labels, a seeded 60/20/20 split of the
    labelled ones (label ``-1``: unlabelled).
    """
    path = Path(path)
    if path.suffix == ".npy":
        (src, dst), weight, ids = read_edge_file(path), None, None
    else:
        src, dst, weight, ids = read_named_edge_list(path)
    x = None if features is None else _read_side_file(Path(features), ids, np.float32, 2)
    y = None if labels is None else _read_side_file(Path(labels), ids, np.int64, 1)
    if ids is not None:
        num_nodes = len(ids)
    elif x is not None:
        num_nodes = len(x)
    elif y is not None:
        num_nodes = len(y)
    else:
        num_nodes = int(max(src.max(), dst.max())) + 1 if len(src) else 0
    require_memory(NODE_BYTES * num_nodes, path)
    if x is not None:
        _check_length(x, num_nodes, features, "feature rows")
    if y is not None:
        _check_length(y, num_nodes, labels, "labels")
    graph = CSRGraph.from_edges(src, dst, num_nodes, weight, source=path)
    if x is None:
        x = np.ones((num_nodes, 1), np.float32)
    if y is None:
        empty = np.zeros(num_nodes, bool)
        return NodeDataset(graph, x, np.zeros(num_nodes, np.int64), empty, empty.copy(),
                           empty.copy(), num_classes=1, name=path.stem, ids=ids,
                           split_note="split: none (no labels: every vertex has label 0)")
    labelled = y != UNLABELLED
    masks = random_split(num_nodes, np.random.default_rng(0), eligible=labelled)
    return NodeDataset(graph, x, y, *masks, name=path.stem, ids=ids,
                       split_note=random_split_note(int(np.count_nonzero(labelled)),
                                                    "labelled vertices", 0))


def read_edge_file(path: str | Path) -> tuple[np.ndarray, np.ndarray]:
    """src and dst ``[E]`` (the file's int32 or int64) of the binary edge file ``path``,
    read in chunks into arrays allocated once (file order kept); a malformed file or a
    negative id is a one-line :class:`~distgnn.graph.GraphError`."""
    total, dtype, _ = edge_file_header(path)
    require_memory(2 * total * dtype.itemsize, path)
    src, dst = np.empty(total, dtype), np.empty(total, dtype)
    at = 0
    with _reading(Path(path)):
        for s, d in iter_edges(path, _EDGE_FILE_CHUNK):
            src[at:at + len(s)], dst[at:at + len(d)] = s, d
            at += len(s)
    return src, dst


def read_edge_list(path: str | Path) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """Parse ``src dst [weight]`` lines into int64 ``[E]`` src, dst and float32 ``[E]`` weight.

    Fields are separated by commas if the first data line has one, else by whitespace;
    ``#`` starts a comment; blank lines are skipped; ``.gz`` files are decompressed.
    ``weight`` is None for two-column files.  Ids must be non-negative integers (vertex
    numbers; :func:`read_named_edge_list` takes any).  Parsing is numpy's C reader; only a
    malformed file is re-scanned line by line, to report the first bad line number.
    """
    path = Path(path)
    with _reading(path):
        return _parse_edge_list(path, names=False)


def read_named_edge_list(path: str | Path
                         ) -> tuple[np.ndarray, np.ndarray, np.ndarray | None, np.ndarray | None]:
    """``(src, dst, weight, ids)``: :func:`read_edge_list` of a file whose ids may be names.

    ``ids`` is None when every id is a non-negative integer (``src``/``dst`` are those
    numbers); else it is the sorted distinct ids (int64 when all are integers of int64's
    range, else str) and ``src``/``dst`` int64 ``[E]`` are positions in it.  Integer files
    take numpy's C reader; only names take the slower string reader.
    """
    path = Path(path)
    with _reading(path):
        src, dst, weight = _parse_edge_list(path, names=True)
    if src.dtype.kind == "i" and (not len(src) or min(src.min(), dst.min()) >= 0):
        return src, dst, weight, None
    ids, inverse = np.unique(np.concatenate([src, dst]), return_inverse=True)
    return inverse[:len(src)], inverse[len(src):], weight, ids


def _parse_edge_list(path: Path, names: bool
                     ) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """int64 (or, with ``names``, str where some id is not an integer) src and dst, and the
    weights; without ``names`` a negative id is an error."""
    first = _first_data_line(path)
    if first is None:
        return np.zeros(0, np.int64), np.zeros(0, np.int64), None
    lineno, fields, delimiter = first
    ncols = len(fields)
    if ncols not in (2, 3):
        raise GraphError(f"line {lineno}: expected 'src dst [weight]', found {ncols} "
                         "fields", path)
    columns = [("src", np.int64), ("dst", np.int64), ("weight", np.float32)][:ncols]
    try:
        table = np.loadtxt(path, dtype=columns, delimiter=delimiter, comments="#", ndmin=1,
                           encoding="utf-8")
    except ValueError as e:  # includes UnicodeDecodeError
        if names:
            return _parse_named_edges(path, delimiter, ncols)
        raise _edge_list_error(path, delimiter, ncols, one_line(e), names) from None
    src, dst = table["src"], table["dst"]
    if not names and len(src) and min(src.min(), dst.min()) < 0:
        raise _edge_list_error(path, delimiter, ncols, "negative vertex id", names)
    return src, dst, table["weight"] if ncols == 3 else None


def _parse_named_edges(path: Path, delimiter: str | None, ncols: int
                       ) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """str ``[E]`` src and dst (stripped) and float32 weights, by numpy's string reader."""
    try:
        table = _load_strings(path, delimiter)
        if table.shape[1] != ncols:
            raise ValueError(f"{table.shape[1]} columns")
        ends = np.char.strip(table[:, :2])
        weight = table[:, 2].astype(np.float32) if ncols == 3 else None
    except ValueError as e:
        raise _edge_list_error(path, delimiter, ncols, one_line(e), names=True) from None
    if np.any(ends == ""):
        raise _edge_list_error(path, delimiter, ncols, "empty vertex id", names=True)
    return ends[:, 0], ends[:, 1], weight


def _load_strings(path: Path, delimiter: str | None, **options) -> np.ndarray:
    """The data lines of ``path`` as a str table ``[rows, columns]`` (numpy's reader)."""
    with warnings.catch_warnings():
        # numpy reads strings in chunks and warns that a comment line is not counted
        warnings.simplefilter("ignore", UserWarning)
        return np.loadtxt(path, dtype=str, delimiter=delimiter, comments="#", ndmin=2,
                          encoding="utf-8", **options)


def _edge_list_error(path: Path, delimiter: str | None, ncols: int, fallback: str,
                     names: bool) -> GraphError:
    """GraphError for the first malformed line, found by a slow line-by-line re-scan.

    ``fallback`` is the problem to report if the re-scan finds no bad line; with ``names``
    any non-empty id is valid, else only a non-negative integer.
    """
    with _open_binary(path) as lines:
        for lineno, raw in enumerate(lines, 1):
            try:
                fields = _split_fields(raw.decode("utf-8"), delimiter)
            except UnicodeDecodeError:
                return GraphError(f"line {lineno}: not UTF-8 text", path)
            if not fields:
                continue
            if len(fields) != ncols:
                return GraphError(f"line {lineno}: expected {ncols} fields like the first "
                                  f"data line, found {len(fields)}", path)
            for field in fields[:2]:
                if names:
                    if not field:
                        return GraphError(f"line {lineno}: empty vertex id", path)
                    continue
                try:
                    vertex = int(field)
                except ValueError:
                    return GraphError(f"line {lineno}: vertex id {field!r} is not an integer",
                                      path)
                if vertex < 0:
                    return GraphError(f"line {lineno}: negative vertex id {vertex}", path)
            if ncols == 3:
                try:
                    float(fields[2])
                except ValueError:
                    return GraphError(f"line {lineno}: weight {fields[2]!r} is not a number",
                                      path)
    return GraphError(f"malformed edge list: {fallback}", path)


def _read_side_file(path: Path, ids: np.ndarray | None, dtype: type, ndim: int) -> np.ndarray:
    """Features (``ndim`` 2) or labels (``ndim`` 1) of an edge list: by position, unless the
    edge list's ids are names (``ids``) and the file is text, which is then keyed."""
    if ids is None or path.suffix == ".npy":
        return _read_array(path, dtype, ndim)
    return _read_keyed(path, ids, dtype, ndim)


def _read_keyed(path: Path, ids: np.ndarray, dtype: type, ndim: int) -> np.ndarray:
    """A text file of ``vertex value...`` lines, in vertex order: features (``ndim`` 2)
    float32 ``[N, F]``, one line per vertex; labels (``ndim`` 1) int64 ``[N]``, ``-1``
    where a vertex has no line.  ``ids`` are the sorted names; an unknown or repeated
    vertex is an error naming it."""
    _optional(path)
    with _reading(path):
        first = _first_data_line(path)
    width = 0 if first is None else len(first[1]) - 1
    wanted = "'vertex label'" if ndim == 1 else "'vertex feature...'"
    if first is not None and (width < 1 or (ndim == 1 and width != 1)):
        raise GraphError(f"line {first[0]}: expected {wanted} (the edge list's ids are names, "
                         f"so this file is keyed by them), found {width + 1} fields", path)
    if first is None:
        keys, values = np.zeros(0, str), np.zeros((0, max(width, 1)), dtype)
    else:
        try:
            with _reading(path):
                keys = np.char.strip(_load_strings(path, first[2], usecols=0)[:, 0])
                # every column read, the key's as 0, so that a line of another width is
                # refused; the keys, which may be strings, come from the pass above
                values = np.loadtxt(path, dtype=dtype, delimiter=first[2], comments="#",
                                    ndmin=2, encoding="utf-8",
                                    converters={0: lambda _: 0})[:, 1:]
        except ValueError as e:
            raise GraphError(f"cannot read: {one_line(e)}", path) from None
    at = vertex_positions(keys, ids, len(ids), path)
    if ndim == 1:
        out = np.full(len(ids), UNLABELLED, np.int64)
        out[at] = values[:, 0]
        return out
    if len(at) != len(ids):
        seen = np.zeros(len(ids), bool)
        seen[at] = True
        missing = ids[np.argmin(seen)].item()
        raise GraphError(f"no features for vertex {missing!r} (a keyed features file has a "
                         "line for every vertex of the edge list)", path)
    out = np.empty((len(ids), values.shape[1]), np.float32)
    out[at] = values
    return out


def vertex_positions(keys: np.ndarray, ids: np.ndarray | None, num_nodes: int,
                     source: str | Path) -> np.ndarray:
    """int64 ``[K]``: the vertex ``0..N-1`` of each of ``keys`` (str ``[K]``, stripped),
    the user's names of vertices: numbers when ``ids`` is None, else entries of the sorted
    ``ids``.  An unknown or repeated name is an error naming the first."""
    integer = ids is None or ids.dtype.kind == "i"
    try:
        lookup = keys.astype(np.int64) if integer else keys
    except (ValueError, OverflowError):
        bad = next(k for k in keys.tolist() if not _is_int64(k))
        raise GraphError(f"vertex {bad!r} is not an integer of int64's range", source) from None
    if ids is None:
        at = lookup
        unknown = (at < 0) | (at >= num_nodes)
    else:
        at = np.searchsorted(ids, lookup)
        unknown = at >= num_nodes
        unknown[~unknown] = ids[at[~unknown]] != lookup[~unknown]
    if np.any(unknown):
        bad = keys[np.argmax(unknown)].item()
        raise GraphError(f"unknown vertex {bad!r}: not one of the {num_nodes:,} vertex ids of "
                         "the dataset", source)
    at = at.astype(np.int64, copy=False)
    repeated = np.bincount(at, minlength=num_nodes) > 1
    if np.any(repeated):
        v = int(np.argmax(repeated))
        name = v if ids is None else ids[v].item()
        raise GraphError(f"vertex {name!r} is listed more than once", source)
    return at


def _is_int64(text: str) -> bool:
    try:
        return -2**63 <= int(text) < 2**63
    except ValueError:
        return False


# ---- split files --------------------------------------------------------------------------------
def read_split_file(path: str | Path, data: NodeDataset) -> tuple[np.ndarray, ...]:
    """The bool ``[N]`` train, val and test masks of ``data`` that a split file gives.

    Text: ``vertex split`` lines (``split`` one of ``train``, ``val``, ``test``; ``vertex``
    in the user's ids, :attr:`~distgnn.graph.NodeDataset.ids`, else ``0..N-1``; a vertex
    not listed is in no mask).  ``.npz``: bool ``train_mask``, ``val_mask``, ``test_mask``
    ``[N]`` in vertex order.  An unknown or repeated vertex, and an unlabelled one (``-1``)
    in a mask, are errors naming the first.
    """
    path = Path(path)
    n = data.num_nodes
    if path.suffix == ".npz":
        _required(path)
        arrays = _read_npz(path)
        missing = [k for k in _MASK_KEYS if k not in arrays]
        if missing:
            raise GraphError(f"missing key(s) {', '.join(missing)}", path)
        masks = tuple(arrays[k] for k in _MASK_KEYS)
        for key, m in zip(_MASK_KEYS, masks):
            if m.dtype != np.bool_ or m.shape != (n,):
                raise GraphError(f"{key} is {m.dtype} {m.shape}, expected bool ({n},)", path)
    else:
        masks = _read_split_text(path, data)
    for key, m in zip(_MASK_KEYS, masks):
        bad = np.flatnonzero(m & (data.y == UNLABELLED))
        if len(bad):
            raise GraphError(f"puts the unlabelled vertex {data.vertex_name(bad[0])} in "
                             f"{key.removesuffix('_mask')}", path)
    return masks


def _read_split_text(path: Path, data: NodeDataset) -> tuple[np.ndarray, ...]:
    _required(path)
    with _reading(path):
        first = _first_data_line(path)
        if first is not None and len(first[1]) != 2:
            raise GraphError(f"line {first[0]}: expected 'vertex split', found "
                             f"{len(first[1])} fields", path)
        try:
            table = (np.zeros((0, 2), str) if first is None
                     else np.char.strip(_load_strings(path, first[2])))
        except ValueError as e:
            raise GraphError(f"cannot read: {one_line(e)}", path) from None
    at = vertex_positions(table[:, 0], data.ids, data.num_nodes, path)
    known = np.isin(table[:, 1], _MASKS)
    if not np.all(known):
        row = int(np.argmin(known))
        raise GraphError(f"split {table[row, 1].item()!r} of vertex {table[row, 0].item()!r} "
                         "is not one of "
                         f"{', '.join(_MASKS)}", path)
    masks = tuple(np.zeros(data.num_nodes, bool) for _ in _MASKS)
    for m, name in zip(masks, _MASKS):
        m[at[table[:, 1] == name]] = True
    return masks


def _first_data_line(path: Path) -> tuple[int, list[str], str | None] | None:
    """``(line number, fields, delimiter)`` of the first non-blank, non-comment line."""
    with _open_binary(path) as lines:
        for lineno, raw in enumerate(lines, 1):
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError:
                raise GraphError(f"line {lineno}: not UTF-8 text", path) from None
            delimiter = "," if "," in line.partition("#")[0] else None
            fields = _split_fields(line, delimiter)
            if fields:
                return lineno, fields, delimiter
    return None


def _split_fields(line: str, delimiter: str | None) -> list[str]:
    body = line.partition("#")[0]
    if not body.strip():
        return []
    return [f.strip() for f in body.split(delimiter)]


def _open_binary(path: Path):
    return gzip.open(path, "rb") if path.suffix == ".gz" else open(path, "rb")


@contextlib.contextmanager
def _reading(path: Path) -> Iterator[None]:
    """Turn an error of reading ``path`` (see ``_READ_ERRORS``) into a GraphError naming it."""
    try:
        yield
    except _READ_ERRORS as e:
        raise GraphError(f"cannot read: {one_line(e)}", path) from None


# ---- small file helpers ------------------------------------------------------------------------
def _read_array(path: Path, dtype: type, ndim: int) -> np.ndarray:
    """``dtype`` array with ``ndim`` dims from ``.npy`` (no pickle) or delimited text (.gz ok)."""
    _optional(path)  # a directory, FIFO or device is refused before it is read
    try:
        with _reading(path):
            if path.suffix == ".npy":
                array = _read_npy(path)
            elif (first := _first_data_line(path)) is None:  # nothing but comments
                array = np.zeros((0,) * ndim, dtype)
            else:
                array = np.loadtxt(path, dtype=dtype, delimiter=first[2], comments="#",
                                   ndmin=ndim, encoding="utf-8")
    except GraphError:
        raise
    except ValueError as e:
        raise GraphError(f"cannot read: {one_line(e)}", path) from None
    # same_kind casts bool to int; a bool file where numbers are expected is a wrong file
    if array.dtype == np.bool_ or not np.can_cast(array.dtype, dtype, "same_kind"):
        raise GraphError(f"has dtype {array.dtype}, expected {np.dtype(dtype).name}", path)
    array = array.astype(dtype, copy=False)
    if array.ndim != ndim:
        raise GraphError(f"expected a {ndim}-D array, got shape {array.shape}", path)
    return array


def _required(path: Path) -> Path:
    if not path.exists():
        raise GraphError("missing file", path)
    return _optional(path)


def _optional(path: Path) -> Path | None:
    """``path`` if it is a file, None if it does not exist; anything else is an error."""
    if not path.exists():
        return None
    if not path.is_file():
        raise GraphError("not a regular file", path)
    return path


def _check_length(array: np.ndarray, num_nodes: int, path, what: str = "labels") -> None:
    if len(array) != num_nodes:
        raise GraphError(f"{len(array)} {what} for {num_nodes} nodes", path)
