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
6. any other file: an edge list (see :func:`read_edge_list`), with optional ``features``
   (``.npy`` ``[N, F]`` or text rows) and ``labels`` (``.npy`` or text, one int per line).

Anything unreadable raises :class:`~distgnn.graph.GraphError` with a one-line message naming
the file.  All randomness goes through ``np.random.default_rng(seed)``.
"""
from __future__ import annotations

import contextlib
import gzip
import math
import os
import zipfile
import zlib
from importlib import resources
from pathlib import Path
from typing import Iterator

import numpy as np

from .errors import one_line
from .generators import GENERATORS, generate, random_split
from .graph import NODE_BYTES, CSRGraph, GraphError, NodeDataset, require_memory

_NPZ_KEYS = ("indptr", "indices", "x", "y", "train_mask", "val_mask", "test_mask")
_MASKS = ("train", "val", "test")
# Errors of reading a file that is missing, a directory, unreadable, a damaged gzip stream.
_READ_ERRORS = (OSError, EOFError, zlib.error)


# ---- entry point ------------------------------------------------------------------------------
def load(spec: str | Path, *, features: str | Path | None = None,
         labels: str | Path | None = None, split: int = 0,
         symmetrize: bool = False) -> NodeDataset:
    """Load or generate a dataset from ``spec`` (see the module docstring).

    ``features``/``labels`` apply to edge lists only and ``split > 0`` to ``.npz`` files with
    several splits.  ``symmetrize`` adds the reverse of every edge of a file-based graph
    (generated graphs are symmetric already).
    """
    text = str(spec)
    if text.partition(":")[0] in GENERATORS:
        _check_options("generator", text, split, features, labels)
        return generate(text)
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
    return ds


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
    masks = _select_split(arrays, split, path)
    graph = CSRGraph(arrays["indptr"], arrays["indices"], source=path)
    return NodeDataset(graph, arrays["x"], arrays["y"], *masks, name=path.stem)


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


def _select_split(arrays: dict, split: int, path: Path) -> tuple[np.ndarray, ...]:
    """The three bool ``[N]`` masks of split ``split``."""
    stacked = [f"{m}_masks" for m in _MASKS]
    present = [k for k in stacked if k in arrays]
    if not present:
        if split != 0:
            raise GraphError(f"split {split} requested but the file holds a single split", path)
        return tuple(arrays[f"{m}_mask"] for m in _MASKS)
    if len(present) != 3:
        raise GraphError(f"has {', '.join(present)} but not all of {', '.join(stacked)}", path)
    shapes = {arrays[k].shape for k in stacked}
    if len(shapes) != 1 or len(next(iter(shapes))) != 2:
        raise GraphError(f"{', '.join(stacked)} must all be [S, N], got shapes "
                         f"{[arrays[k].shape for k in stacked]}", path)
    count = arrays["train_masks"].shape[0]
    if not 0 <= split < count:
        raise GraphError(f"split {split} out of range: the file holds {count} splits "
                         f"(0..{count - 1})", path)
    return tuple(arrays[k][split] for k in stacked)


# ---- OGB node-property layout -------------------------------------------------------------------
def load_ogb(root: str | Path) -> NodeDataset:
    """Dataset from a directory in the OGB node-property layout (edges kept directed).

    Labels are read as float so that ``nan`` marks unlabelled nodes: those get label 0 and no
    mask, and a split file that lists one is an error.  The split is the first subdirectory
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
    y = np.where(labelled, y, 0).astype(np.int64)

    splits = sorted(p for p in (root / "split").glob("*") if p.is_dir())
    if splits:
        masks = [_ogb_mask(splits[0] / f"{part}.csv.gz", labelled)
                 for part in ("train", "valid", "test")]
    else:
        masks = random_split(num_nodes, np.random.default_rng(0), eligible=labelled)
    return NodeDataset(graph, x, y, *masks, name=root.name)


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

    ``N`` is the number of feature rows, else of labels, else the largest id + 1.  Without
    features every node gets the single feature 1.0; without labels every node gets label 0,
    ``num_classes = 1`` and empty masks; with labels, a seeded 60/20/20 split.
    """
    path = Path(path)
    src, dst, weight = read_edge_list(path)
    x = None if features is None else _read_array(Path(features), np.float32, 2)
    y = None if labels is None else _read_array(Path(labels), np.int64, 1)
    if x is not None:
        num_nodes = len(x)
    elif y is not None:
        num_nodes = len(y)
    else:
        num_nodes = int(max(src.max(), dst.max())) + 1 if len(src) else 0
    require_memory(NODE_BYTES * num_nodes, path)
    if y is not None:
        _check_length(y, num_nodes, labels)
    graph = CSRGraph.from_edges(src, dst, num_nodes, weight, source=path)
    if x is None:
        x = np.ones((num_nodes, 1), np.float32)
    if y is None:
        empty = np.zeros(num_nodes, bool)
        return NodeDataset(graph, x, np.zeros(num_nodes, np.int64), empty, empty.copy(),
                           empty.copy(), num_classes=1, name=path.stem)
    masks = random_split(num_nodes, np.random.default_rng(0))
    return NodeDataset(graph, x, y, *masks, name=path.stem)


def read_edge_list(path: str | Path) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """Parse ``src dst [weight]`` lines into int64 ``[E]`` src, dst and float32 ``[E]`` weight.

    Fields are separated by commas if the first data line has one, else by whitespace;
    ``#`` starts a comment; blank lines are skipped; ``.gz`` files are decompressed.
    ``weight`` is None for two-column files.  Parsing is numpy's C reader; only a malformed
    file is re-scanned line by line, to report the first bad line number.
    """
    path = Path(path)
    with _reading(path):
        return _parse_edge_list(path)


def _parse_edge_list(path: Path) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    first = _first_data_line(path)
    if first is None:
        return np.zeros(0, np.int64), np.zeros(0, np.int64), None
    lineno, fields, delimiter = first
    if len(fields) not in (2, 3):
        raise GraphError(f"line {lineno}: expected 'src dst [weight]', found {len(fields)} "
                         "fields", path)
    columns = [("src", np.int64), ("dst", np.int64), ("weight", np.float32)][:len(fields)]
    try:
        table = np.loadtxt(path, dtype=columns, delimiter=delimiter, comments="#", ndmin=1,
                           encoding="utf-8")
    except ValueError as e:  # includes UnicodeDecodeError
        raise _edge_list_error(path, delimiter, len(fields), one_line(e)) from None
    src, dst = table["src"], table["dst"]
    if len(src) and min(src.min(), dst.min()) < 0:
        raise _edge_list_error(path, delimiter, len(fields), "negative vertex id")
    return src, dst, table["weight"] if len(fields) == 3 else None


def _edge_list_error(path: Path, delimiter: str | None, ncols: int,
                     fallback: str) -> GraphError:
    """GraphError for the first malformed line, found by a slow line-by-line re-scan.

    ``fallback`` is the problem to report if the re-scan finds no bad line.
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


def _check_length(labels: np.ndarray, num_nodes: int, path) -> None:
    if len(labels) != num_nodes:
        raise GraphError(f"{len(labels)} labels for {num_nodes} nodes", path)
