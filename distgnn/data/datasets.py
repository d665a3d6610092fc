"""Node-classification datasets: loaders for files on disk and synthetic generators.

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
6. any other file: an edge list (see :func:`load_edge_list`), with optional ``features``
   (``.npy`` ``[N, F]`` or text rows) and ``labels`` (``.npy`` or text, one int per line);
   vertex ids that are not all non-negative integers are names, mapped to ``0..N-1`` in
   sorted order (kept in :attr:`~distgnn.data.graph.NodeDataset.ids`), and then text feature and
   label files are keyed by them.  A ``.npy`` file is a binary edge file
   (:mod:`distgnn.data.binary_edges`), read whole into memory.

``split_file`` replaces the split of any of them (:func:`read_split_file`).  A label ``-1``
marks an unlabelled vertex, which is in no mask; the other labels must be the classes
``0..C-1``, each with a vertex (:func:`check_classes`).  Text files may start with a UTF-8
byte-order mark and with a header line, which is skipped and noted
(:attr:`~distgnn.data.graph.NodeDataset.note`) when the lines after it are data and it is not
(:func:`_table`).  Anything unreadable raises :class:`~distgnn.data.graph.GraphError` with a
one-line message naming the file.  All randomness goes through ``np.random.default_rng(seed)``.
"""
from __future__ import annotations

import contextlib
import dataclasses
import gzip
import math
import os
import re
import warnings
import zipfile
import zlib
from importlib import resources
from pathlib import Path
from typing import Callable, Iterator

import numpy as np

from ..errors import one_line
from .binary_edges import edge_file_header, iter_edges
from .generators import GENERATORS, generate, random_split, random_split_note
from .graph import (
    NODE_BYTES,
    UNLABELLED,
    CSRGraph,
    GraphError,
    NodeDataset,
    nonfinite_problem,
    require_memory,
)

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
    directory's) :attr:`~distgnn.data.graph.NodeDataset.note` counts the edges that have no
    reverse.  ``split_file`` replaces the split (:func:`read_split_file`).
    """
    text = str(spec)
    if text.partition(":")[0] in GENERATORS:
        _check_options("generator", text, split, features, labels)
        ds = generate(text)
        kind = "generator"
    else:
        with locate(text) as path:
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
        ds.note = _joined(ds.note, _reverse_note(ds.graph))
    if split_file is not None:
        masks, header = _split_file(Path(split_file), ds)
        ds = dataclasses.replace(ds, **dict(zip(_MASK_KEYS, masks)),
                                 split_note=f"split: from {split_file}"
                                 + (f" ({header})" if header else ""))
    return ds


def _joined(*notes: str) -> str:
    """The non-empty ``notes`` as one line."""
    return "; ".join(filter(None, notes))


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
    arrays = _read_npz(path)
    missing = [k for k in _NPZ_KEYS if k not in arrays]
    if missing:
        raise GraphError(f"missing key(s) {', '.join(missing)}", path)
    masks, note = select_split(arrays, split, path)
    graph = CSRGraph(arrays["indptr"], arrays["indices"], source=path)
    ds = NodeDataset(graph, arrays["x"], arrays["y"], *masks, name=path.stem, split_note=note)
    check_classes(ds.y, path)
    return ds


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
    notes: list[str] = []
    feat_file = _optional(raw / "node-feat.csv.gz")
    count_file = _optional(raw / "num-node-list.csv.gz")
    x = _read_array(feat_file, np.float32, 2, "feature row", notes) if feat_file else None
    if x is not None:
        _check_finite(x, feat_file)
    if count_file:
        counts = _read_array(count_file, np.int64, 1, "node counts", notes)
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
    edge_file = _required(raw / "edge.csv.gz")
    with _reading(edge_file):
        src, dst, weight, header = _read_edges(edge_file, names=False)
    notes.append(header)
    if len(src) and max(src.max(), dst.max()) >= num_nodes:
        raise GraphError(f"vertex id {max(src.max(), dst.max())} out of range 0..{num_nodes - 1} "
                         f"({counted_by})", edge_file)
    graph = CSRGraph.from_edges(src, dst, num_nodes, weight, source=edge_file)

    label_file = _required(raw / "node-label.csv.gz")
    y = _read_array(label_file, np.float64, 1, "labels", notes)
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
                       note=_joined(*notes))


def _ogb_mask(path: Path, labelled: np.ndarray, notes: list[str]) -> np.ndarray:
    """bool ``[N]`` mask of the node ids listed in an OGB split file."""
    ids = _read_array(_required(path), np.int64, 1, "node ids", notes)
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
    position (:func:`_vertex_count`).  Otherwise (a negative or non-integer id) the ids are
    names, and a text side file is keyed by them (:func:`_by_name`): the vertices are the
    distinct ids of the edge list and of the keyed files, so a keyed file can add a vertex
    without edges.  A ``.npy`` file is a binary edge file (:func:`read_edge_file`): vertex
    numbers, no weights.  Labels must be classes ``0..C-1`` or ``-1`` (:func:`check_classes`).

    Without features every node gets the single feature 1.0; without labels every node gets
    label 0, ``num_classes = 1`` and empty masks; with labels, a seeded 60/20/20 split of the
    labelled ones (label ``-1``: unlabelled).  A skipped header line of any of the files,
    and ids read as names although some are integers, are said in the dataset's ``note``.
    """
    path = Path(path)
    features = None if features is None else Path(features)
    labels = None if labels is None else Path(labels)
    notes: list[str] = []
    if path.suffix == ".npy":
        (src, dst), weight = read_edge_file(path), None
    else:
        with _reading(path):
            src, dst, weight, header = _read_edges(path, names=True)
        notes.append(header)
    if src.dtype.kind == "i" and (not len(src) or min(src.min(), dst.min()) >= 0):
        ids = None
        x = None if features is None else _read_array(features, np.float32, 2, "feature row",
                                                       notes)
        y = None if labels is None else _read_array(labels, np.int64, 1, "label", notes)
        num_nodes = _vertex_count(path, src, dst, (features, x, "feature row"),
                                  (labels, y, "label"))
        if x is not None:
            _check_finite(x, features)
    else:
        src, dst, ids, x, y = _by_name(path, src, dst, features, labels, notes)
        num_nodes = len(ids)
    require_memory(NODE_BYTES * num_nodes, path)
    if y is not None:
        check_classes(y, labels, ids)
    graph = CSRGraph.from_edges(src, dst, num_nodes, weight, source=path)
    note = _joined(*notes)
    if x is None:
        x = np.ones((num_nodes, 1), np.float32)
    if y is None:
        empty = np.zeros(num_nodes, bool)
        return NodeDataset(graph, x, np.zeros(num_nodes, np.int64), empty, empty.copy(),
                           empty.copy(), num_classes=1, name=path.stem, ids=ids, note=note,
                           split_note="split: none (no labels: every vertex has label 0)")
    labelled = y != UNLABELLED
    masks = random_split(num_nodes, np.random.default_rng(0), eligible=labelled)
    return NodeDataset(graph, x, y, *masks, name=path.stem, ids=ids, note=note,
                       split_note=random_split_note(int(np.count_nonzero(labelled)),
                                                    "labelled vertices", 0))


def _vertex_count(path: Path, src: np.ndarray, dst: np.ndarray,
                  *sides: tuple[Path | None, np.ndarray | None, str]) -> int:
    """``N`` of the edge list ``path`` whose ids are the vertex numbers.

    ``N`` is the length of the side files by position (each ``(file, its array or None,
    what one row is)``), else the largest id + 1.

    A side file is wrong, and named, when it is shorter than the largest id + 1, or when it
    disagrees with the other side file and that one has exactly the largest id + 1 rows;
    when both lengths differ from it, the error names both.
    """
    top = int(max(src.max(), dst.max())) + 1 if len(src) else 0
    given = [(file, len(array), what) for file, array, what in sides if array is not None]
    ids_said = (f"{path.name}'s largest vertex id is {top - 1}" if top
                else f"{path.name} has no edges")
    for file, count, what in given:
        if count < top:
            raise GraphError(f"{count} {what}s, but {ids_said}: one {what} per vertex 0..N-1 "
                             f"(N at least {top})", file)
    if len(given) == 2 and given[0][1] != given[1][1]:
        # the file that agrees with the edge list is taken to be right
        wrong, right = given[::-1] if given[0][1] == top else given
        both = "" if right[1] == top else ", so one of the two files is wrong"
        raise GraphError(f"{wrong[1]} {wrong[2]}s, but {right[0].name} has {right[1]} "
                         f"{right[2]}s and {ids_said}: both have one row per vertex 0..N-1"
                         f"{both}", wrong[0])
    return given[0][1] if given else top


def _by_name(path: Path, src: np.ndarray, dst: np.ndarray, features: Path | None,
             labels: Path | None, notes: list[str]) -> tuple[np.ndarray, ...]:
    """``(src, dst, ids, x, y)`` of an edge list whose ids are names, and of its side files.

    The edges are ``src -> dst`` ``[E]``.  The vertices are the distinct ids of the edge
    list and of the keyed (text) side files; vertex ``v`` is the ``v``-th of them in sorted
    order (numeric when the edge list's ids are integers, else by code point): ``ids``
    ``[N]``, and ``src``/``dst`` become int64 vertices.  A keyed features file has a line
    for every vertex; a vertex without a label line is unlabelled (``-1``).  An ``.npy``
    side file has ``N`` rows in vertex order.
    ``x`` float32 ``[N, F]`` and ``y`` int64 ``[N]`` are None without their file.
    """
    integer = src.dtype.kind == "i"
    keyed = {}
    for what, file in (("feature row", features), ("label", labels)):
        if file is not None and file.suffix != ".npy":
            keys, values = _read_keyed(file, what, notes)
            keyed[what] = (file, _as_ids(keys, integer, file), values)
    listed = [keys for _, keys, _ in keyed.values()]
    ids, inverse = np.unique(np.concatenate([src, dst, *listed]), return_inverse=True)
    n, ends = len(ids), len(src)
    parts = np.split(inverse, np.cumsum([ends, ends, *map(len, listed)])[:-1])
    src, dst = parts[0], parts[1]
    has_edge = np.zeros(n, bool)
    has_edge[src] = has_edge[dst] = True
    for (file, keys, _), at in zip(keyed.values(), parts[2:]):
        # a file whose ids all miss the edge list names other vertices (quotes, case, ...)
        added = np.flatnonzero(~has_edge[at])
        if ends and len(added) == len(at) > 0:
            raise GraphError(f"none of its {len(at):,} ids is an id of {path.name} (its first "
                             f"{keys[0].item()!r}, the edge list's {ids[src[0]].item()!r}): a "
                             "keyed file names the edge list's vertices, and may add some",
                             file)
        if len(added):
            notes.append(f"{file.name} adds {len(added):,} "
                         f"{'vertex' if len(added) == 1 else 'vertices'} without edges "
                         f"(first {ids[at[added[0]]].item()!r})")
    if not integer:
        numeric = np.char.isdigit(np.char.lstrip(ids, "+-"))
        if numeric.any() and not numeric.all():
            notes.append(f"the vertex ids are names, sorted as text ('10' before '9'), "
                         f"because {ids[~numeric][0].item()!r} is not an integer")
    files = [path.name, *(f.name for f, _, _ in keyed.values())]
    counted = f"the {n:,} distinct ids of " + (", ".join(files[:-1]) + " and " + files[-1]
                                               if len(files) > 1 else files[0])
    out = {}
    for what, file, dtype, ndim in (("feature row", features, np.float32, 2),
                                    ("label", labels, np.int64, 1)):
        if file is None:
            out[what] = None
        elif what in keyed:
            _, _, values = keyed[what]
            at = parts[2 + list(keyed).index(what)]
            _listed_once(at, n, ids, file)
            if ndim == 1:
                out[what] = np.full(n, UNLABELLED, np.int64)
            else:
                _check_finite(values, file, ids[at])
                seen = np.zeros(n, bool)
                seen[at] = True
                if not seen.all():
                    raise GraphError(f"no features for vertex {ids[np.argmin(seen)].item()!r} "
                                     f"(a keyed features file has a line for each of "
                                     f"{counted})", file)
                out[what] = np.empty((n, values.shape[1]), np.float32)
            out[what][at] = values
        else:
            array = _read_array(file, dtype, ndim, what, notes)
            if len(array) != n:
                raise GraphError(f"{len(array)} {what}s for {counted}: an .npy side file has "
                                 "one row per vertex, in sorted id order", file)
            if ndim == 2:
                _check_finite(array, file, ids)
            out[what] = array
    return src, dst, ids, out["feature row"], out["label"]


def read_edge_file(path: str | Path) -> tuple[np.ndarray, np.ndarray]:
    """src and dst ``[E]`` (the file's int32 or int64) of the binary edge file ``path``,
    read in chunks into arrays allocated once (file order kept); a malformed file or a
    negative id is a one-line :class:`~distgnn.data.graph.GraphError`."""
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
    ``#`` starts a comment; blank lines are skipped; ``.gz`` files are decompressed; a
    header line is skipped (:func:`_table`).  ``weight`` is None for two-column files.  Ids
    must be non-negative integers (vertex numbers; :func:`load_edge_list` takes names).
    """
    path = Path(path)
    with _reading(path):
        return _read_edges(path, names=False)[:3]


def _read_edges(path: Path, names: bool
                ) -> tuple[np.ndarray, np.ndarray, np.ndarray | None, str]:
    """The edges of the text edge list ``path``: ``(src, dst, weight, header)``.

    int64 ``[E]`` src and dst (with ``names``, str where some id is not an integer), float32
    ``[E]`` weights (None: two columns) and the note of a skipped header (``""``: none).
    Without ``names`` a negative id is an error.

    Integer ids take numpy's C reader, names its slower string reader; only a malformed file
    is re-scanned line by line, to report its first bad line.
    """
    table = _table(path, _numbered_edge, _named_edge)
    if table is None:
        return np.zeros(0, np.int64), np.zeros(0, np.int64), None, ""
    ncols = len(table.first.fields)
    if ncols not in (2, 3):
        raise GraphError(f"line {table.first.number}: expected 'src dst [weight]', found "
                         f"{ncols} fields", path)
    columns = [("src", np.int64), ("dst", np.int64), ("weight", np.float32)][:ncols]
    try:
        edges = table.read(columns, ndmin=1)
    except ValueError as e:  # includes UnicodeDecodeError
        if not names:
            raise _edge_list_error(table, ncols, one_line(e), names) from None
        src, dst, weight = _read_named_edges(table, ncols)
    else:
        src, dst = edges["src"], edges["dst"]
        weight = edges["weight"] if ncols == 3 else None
        if not names and len(src) and min(src.min(), dst.min()) < 0:
            raise _edge_list_error(table, ncols, "negative vertex id", names)
    return src, dst, weight, table.note()


def _read_named_edges(table: _Table, ncols: int
                      ) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """str ``[E]`` src and dst (stripped) and float32 weights, by numpy's string reader; a
    first line that looks like column names is refused (it could be an edge)."""
    try:
        strings = table.read(str, ndmin=2)
        if strings.shape[1] != ncols:
            raise ValueError(f"{strings.shape[1]} columns")
        ends = np.char.strip(strings[:, :2])
        weight = strings[:, 2].astype(np.float32) if ncols == 3 else None
    except ValueError as e:
        raise _edge_list_error(table, ncols, one_line(e), names=True) from None
    if np.any(ends == ""):
        raise _edge_list_error(table, ncols, "empty vertex id", names=True)
    words = table.first.fields[:2]
    if table.header is None and all(map(_column_name, words)) and all(
            np.count_nonzero(ends == w) == words.count(w) for w in words):
        raise GraphError(f"line {table.first.number}: {table.first.text!r} looks like a header "
                         "of column names, but the ids are names, so it could be an edge: "
                         "start it with # (or remove it) if it is a header", table.path)
    return ends[:, 0], ends[:, 1], weight


def _edge_list_error(table: _Table, ncols: int, fallback: str, names: bool) -> GraphError:
    """GraphError for the first malformed line, found by a slow line-by-line re-scan.

    ``fallback`` is the problem to report if the re-scan finds no bad line; with ``names``
    any non-empty id is valid, else only a non-negative integer.
    """
    def problem(fields: list[str]) -> str | None:
        if len(fields) != ncols:
            return f"expected {ncols} fields like the first data line, found {len(fields)}"
        for field in fields[:2]:
            if not field:
                return "empty vertex id"
            if names:
                continue
            if not _is_integer(field):
                return f"vertex id {field!r} is not an integer"
            if int(field) < 0:
                return f"negative vertex id {int(field)}"
        if ncols == 3 and not _is_number(fields[2]):
            return f"weight {fields[2]!r} is not a number"
        return None

    return table.first_bad_line(problem) or GraphError(f"malformed edge list: {fallback}",
                                                       table.path)


def _named_edge(fields: list[str]) -> bool:
    """Whether ``fields`` are an edge between names: two ids, then maybe a number."""
    return (len(fields) in (2, 3) and all(fields[:2])
            and (len(fields) == 2 or _is_number(fields[2])))


def _numbered_edge(fields: list[str]) -> bool:
    """Whether ``fields`` are an edge between integer ids, then maybe a number."""
    return _named_edge(fields) and all(map(_is_integer, fields[:2]))


# What the column names of an edge list's header are, lower-cased and reduced to letters
# ("Source", "node_1", "FromNodeId" without its "id"): with names for ids, only such words
# tell a header from an edge.
_COLUMN_NAMES = frozenset({
    "src", "dst", "dest", "source", "target", "destination", "from", "to", "fromnode",
    "tonode", "node", "vertex", "u", "v", "head", "tail", "start", "end", "sender",
    "receiver", "origin", "id", "user", "item", "in", "out"})


def _column_name(word: str) -> bool:
    letters = re.sub("[^a-z]", "", word.lower())
    return letters in _COLUMN_NAMES or letters.removesuffix("id") in _COLUMN_NAMES


# ---- side files ---------------------------------------------------------------------------------
def _read_keyed(path: Path, what: str, notes: list[str]) -> tuple[np.ndarray, np.ndarray]:
    """The keys (str ``[K]``, stripped) and values of a text file of ``vertex value...``
    lines: ``what`` ``"feature row"``, float32 ``[K, F]``; ``"label"``, int64 ``[K]``.  A
    skipped header is noted in ``notes``."""
    _optional(path)
    labels = what == "label"
    value = _is_integer if labels else _is_number
    dtype = np.int64 if labels else np.float32
    with _reading(path):
        table = _table(path, lambda fields: (len(fields) == 2 if labels else len(fields) > 1)
                       and all(map(value, fields[1:])))
    if table is None:
        return np.zeros(0, str), np.zeros((0,) if labels else (0, 1), dtype)
    width = len(table.first.fields)
    if width < 2 or (labels and width != 2):
        wanted = "'vertex label'" if labels else "'vertex feature...'"
        raise GraphError(f"line {table.first.number}: expected {wanted} (the edge list's ids "
                         f"are names, so this file is keyed by them), found {width} fields",
                         path)
    try:
        with _reading(path):
            keys = np.char.strip(table.read(str, usecols=0, ndmin=1))
            # every column read, the key's as 0, so that a line of another width is
            # refused; the keys, which may be strings, come from the pass above
            values = table.read(dtype, ndmin=2, converters={0: lambda _: 0})[:, 1:]
    except ValueError as e:
        raise _values_error(table, what, np.dtype(dtype), one_line(e), key=True) from None
    notes.append(table.note())
    return keys, values[:, 0] if labels else values


def _read_array(path: Path, dtype: type, ndim: int, what: str, notes: list[str]
                ) -> np.ndarray:
    """``dtype`` array with ``ndim`` dims from ``.npy`` (no pickle) or delimited text (.gz
    ok), whose rows are ``what`` (``"label"``, ``"feature row"``, ...: named in errors); a
    skipped header of a text file is noted in ``notes``."""
    _optional(path)  # a directory, FIFO or device is refused before it is read
    integer = np.issubdtype(dtype, np.integer)
    value = _is_integer if integer else _is_number
    try:
        with _reading(path):
            if path.suffix == ".npy":
                array = _read_npy(path)
            elif (table := _table(path, lambda fields: (ndim == 2 or len(fields) == 1)
                                  and all(map(value, fields)))) is None:  # only comments
                array = np.zeros((0,) * ndim, dtype)
            else:
                if ndim == 1 and len(table.first.fields) != 1:
                    raise GraphError(f"line {table.first.number}: expected one {what} per "
                                     f"line, found {len(table.first.fields)} fields", path)
                try:
                    array = table.read(dtype, ndmin=ndim)
                except ValueError as e:
                    raise _values_error(table, what, np.dtype(dtype), one_line(e)) from None
                notes.append(table.note())
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


def _values_error(table: _Table, what: str, dtype: np.dtype, fallback: str,
                  key: bool = False) -> GraphError:
    """GraphError for the first line of ``table`` (rows of ``what``, after a key column
    with ``key``) of another width than the first or with a value that is not a ``dtype``
    number, found by a re-scan; ``fallback`` is the problem when none is found."""
    width = len(table.first.fields)
    integer = np.issubdtype(dtype, np.integer)

    def problem(fields: list[str]) -> str | None:
        if len(fields) != width:
            return f"expected {width} fields like the first data line, found {len(fields)}"
        for field in fields[1:] if key else fields:
            if what == "label" and not _is_integer(field) and (integer or not _is_number(field)):
                return _label_problem(field, table, int(key))
            if not (_is_integer if integer else _is_number)(field):
                return f"{what} value {field!r} is not {'an integer' if integer else 'a number'}"
        return None

    return table.first_bad_line(problem) or GraphError(f"cannot read: {fallback}", table.path)


def _label_problem(label: str, table: _Table, column: int) -> str:
    """What is wrong with ``label`` (not an integer), in column ``column`` of ``table``,
    and how to fix it."""
    if _is_number(label):
        return (f"label {label!r} is not an integer: classes are numbered 0..C-1 (-1 marks "
                "an unlabelled vertex)")
    names: list[str] = []
    for line in _data_lines(table.path, table):
        name = line.fields[column] if len(line.fields) > column else ""
        if name and not _is_number(name) and name not in names:
            names.append(name)
            if len(names) == 3:
                break
    example = ", ".join(f"{name} = {i}" for i, name in enumerate(sorted(names)))
    more = ", ..." if len(names) == 3 else ""
    return (f"label {label!r} is a name: classes are numbered 0..C-1, so replace each class "
            f"name by its number ({example}{more}); -1 marks an unlabelled vertex")


def check_classes(y: np.ndarray, source: str | Path | None,
                  ids: np.ndarray | None = None) -> None:
    """Refuse labels ``y`` that are not ``-1`` or classes ``0..C-1``, each with a vertex.

    Each label of ``y`` (integer ``[N]``) must be ``-1`` (:data:`UNLABELLED`) or a class of
    ``0..C-1``, and every class must have a vertex: the number of classes is the largest
    label + 1, so labels ``1..4`` would make an empty class 0.  The one-line error names
    ``source`` and says how to renumber; ``ids`` are the vertices' names (None: ``0..N-1``).
    """
    below = y < UNLABELLED
    if np.any(below):
        v = int(np.argmax(below))
        name = v if ids is None else ids[v].item()
        raise GraphError(f"label {int(y[v])} of vertex {name!r}: classes are numbered 0..C-1 "
                         f"and {UNLABELLED} marks an unlabelled vertex", source)
    used = np.unique(y[y != UNLABELLED])  # a sort, not a bincount: a label may be huge
    if not len(used) or len(used) == used[-1] + 1:
        return
    lo, hi = int(used[0]), int(used[-1])
    if hi - lo + 1 == len(used):
        empty = "class 0 has" if lo == 1 else f"classes 0..{lo - 1} have"
        raise GraphError(f"labels are {lo}..{hi}: classes must be numbered 0..C-1 (subtract "
                         f"{lo}); {empty} no vertex", source)
    bounds = np.concatenate([[-1], used])
    gaps = np.flatnonzero(np.diff(bounds) > 1)
    shown = [", ".join(map(str, range(bounds[g] + 1, bounds[g + 1])))
             if bounds[g + 1] - bounds[g] <= 3 else f"{bounds[g] + 1}..{bounds[g + 1] - 1}"
             for g in gaps[:3]]
    more = ", ..." if len(gaps) > 3 else ""
    empty = ("class {} has" if hi + 1 - len(used) == 1 else "classes {} have").format(
        ", ".join(shown) + more)
    raise GraphError(f"labels are {lo}..{hi}, but {empty} no vertex: classes must be numbered "
                     f"0..C-1 without gaps (renumber the {len(used)} labels in use as "
                     f"0..{len(used) - 1})", source)


def _check_finite(x: np.ndarray, source: Path, names: np.ndarray | None = None) -> None:
    """Refuse features ``x`` ``[K, F]`` holding NaN or inf, naming ``source`` and the
    first row's vertex (``names[row]``; None: the row number)."""
    if nonfinite_problem(x) is None:
        return
    row = int(np.argwhere(~np.isfinite(x))[0, 0])
    name = row if names is None else repr(names[row].item())
    raise GraphError(f"features contain NaN or inf (first at vertex {name})", source)


def vertex_positions(keys: np.ndarray, ids: np.ndarray | None, num_nodes: int,
                     source: str | Path) -> np.ndarray:
    """int64 ``[K]``: the vertex ``0..N-1`` of each of ``keys`` (str ``[K]``, stripped),
    the user's names of vertices: numbers when ``ids`` is None, else entries of the sorted
    ``ids``.  An unknown or repeated name is an error naming the first."""
    lookup = _as_ids(keys, ids is None or ids.dtype.kind == "i", source)
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
    _listed_once(at, num_nodes, ids, source)
    return at


def _as_ids(keys: np.ndarray, integer: bool, source: str | Path) -> np.ndarray:
    """``keys`` (str) as int64 when the dataset's ids are ``integer``, else as they are."""
    if not integer:
        return keys
    try:
        return keys.astype(np.int64)
    except (ValueError, OverflowError):
        bad = next(k for k in keys.tolist() if not _is_int64(k))
        raise GraphError(f"vertex {bad!r} is not an integer of int64's range, as the "
                         "dataset's ids are", source) from None


def _listed_once(at: np.ndarray, num_nodes: int, ids: np.ndarray | None,
                 source: str | Path) -> None:
    """Refuse vertices ``at`` (int64 ``[K]``) naming one twice, in one line naming it."""
    repeated = np.bincount(at, minlength=num_nodes) > 1
    if np.any(repeated):
        v = int(np.argmax(repeated))
        name = v if ids is None else ids[v].item()
        raise GraphError(f"vertex {name!r} is listed more than once", source)


def _is_int64(text: str) -> bool:
    try:
        return -2**63 <= int(text) < 2**63
    except ValueError:
        return False


# ---- split files --------------------------------------------------------------------------------
def read_split_file(path: str | Path, data: NodeDataset) -> tuple[np.ndarray, ...]:
    """The bool ``[N]`` train, val and test masks of ``data`` that a split file gives.

    Text: ``vertex split`` lines (``split`` one of ``train``, ``val``, ``test``; ``vertex``
    in the user's ids, :attr:`~distgnn.data.graph.NodeDataset.ids`, else ``0..N-1``; a vertex
    not listed is in no mask; a header line skipped).  ``.npz``: bool ``train_mask``,
    ``val_mask``, ``test_mask`` ``[N]`` in vertex order.  An unknown or repeated vertex,
    and an unlabelled one (``-1``) in a mask, are errors naming the first.
    """
    return _split_file(Path(path), data)[0]


def _split_file(path: Path, data: NodeDataset) -> tuple[tuple[np.ndarray, ...], str]:
    """:func:`read_split_file`'s masks, and the note of a skipped header (``""``: none)."""
    n = data.num_nodes
    header = ""
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
        masks, header = _read_split_text(path, data)
    for key, m in zip(_MASK_KEYS, masks):
        bad = np.flatnonzero(m & (data.y == UNLABELLED))
        if len(bad):
            raise GraphError(f"puts the unlabelled vertex {data.vertex_name(bad[0])} in "
                             f"{key.removesuffix('_mask')}", path)
    return masks, header


def _read_split_text(path: Path, data: NodeDataset) -> tuple[tuple[np.ndarray, ...], str]:
    _required(path)
    with _reading(path):
        table = _table(path, lambda fields: len(fields) == 2 and fields[1] in _MASKS)
        if table is not None and len(table.first.fields) != 2:
            raise GraphError(f"line {table.first.number}: expected 'vertex split', found "
                             f"{len(table.first.fields)} fields", path)
        try:
            rows = (np.zeros((0, 2), str) if table is None
                    else np.char.strip(table.read(str, ndmin=2)))
        except ValueError as e:
            raise GraphError(f"cannot read: {one_line(e)}", path) from None
    at = vertex_positions(rows[:, 0], data.ids, data.num_nodes, path)
    known = np.isin(rows[:, 1], _MASKS)
    if not np.all(known):
        row = int(np.argmin(known))
        raise GraphError(f"split {rows[row, 1].item()!r} of vertex {rows[row, 0].item()!r} "
                         f"is not one of {', '.join(_MASKS)}", path)
    masks = tuple(np.zeros(data.num_nodes, bool) for _ in _MASKS)
    for m, name in zip(masks, _MASKS):
        m[at[rows[:, 1] == name]] = True
    return masks, "" if table is None else table.note()


# ---- text files ---------------------------------------------------------------------------------
_INTEGER = re.compile(r"[+-]?[0-9]+")


def _is_integer(text: str) -> bool:
    return _INTEGER.fullmatch(text) is not None


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


@dataclasses.dataclass(frozen=True)
class _Line:
    """A data line: its number (from 1), its text without the comment, its fields
    (stripped) and the delimiter that split them (None: whitespace)."""

    number: int
    text: str
    fields: list[str]
    delimiter: str | None


@dataclasses.dataclass(frozen=True)
class _Table:
    """Where the data of the text file ``path`` starts: ``first``, its first data line,
    whose delimiter splits every line, after the ``skip`` lines numpy's reader passes over,
    which end with ``header`` when the first line that is not a comment is a header."""

    path: Path
    first: _Line
    skip: int = 0
    header: _Line | None = None

    def note(self) -> str:
        """What a user is told of the skipped header (``""``: none)."""
        if self.header is None:
            return ""
        text = self.header.text if len(self.header.text) <= 40 else self.header.text[:40] + "..."
        return f"{self.path.name}: line {self.header.number} ({text!r}) is a header, skipped"

    def read(self, dtype, **options) -> np.ndarray:
        """The data lines parsed by numpy's reader into ``dtype`` (``options``: ``loadtxt``'s);
        a byte-order mark is dropped."""
        with warnings.catch_warnings():
            # numpy reads in chunks and warns that a comment line is not counted
            warnings.simplefilter("ignore", UserWarning)
            return np.loadtxt(self.path, dtype=dtype, delimiter=self.first.delimiter,
                              comments="#", skiprows=self.skip, encoding="utf-8-sig",
                              **options)

    def first_bad_line(self, problem: Callable[[list[str]], str | None]) -> GraphError | None:
        """A GraphError for the first data line whose fields ``problem`` finds fault with
        (its words, after the line number), or None; a slow line-by-line re-scan."""
        for line in _data_lines(self.path, self):
            found = problem(line.fields)
            if found:
                return GraphError(f"line {line.number}: {found}", self.path)
        return None


def _table(path: Path, *tests: Callable[[list[str]], bool]) -> _Table | None:
    """The :class:`_Table` of ``path`` (None: no data line).

    ``tests`` take a line's fields and accept data lines; the first line that is not a
    comment is a header, skipped, when one of them rejects it and accepts the next line
    (``src dst`` above ``0 1``).  Each line is split at commas if it has one, else at
    whitespace, until the first data line fixes the delimiter.
    """
    with contextlib.closing(_data_lines(path)) as lines:
        first = next(lines, None)
        second = next(lines, None)
    if first is None:
        return None
    if second is not None and any(not test(first.fields) and test(second.fields)
                                  for test in tests):
        return _Table(path, second, first.number, first)
    return _Table(path, first)


def _data_lines(path: Path, table: _Table | None = None) -> Iterator[_Line]:
    """The non-blank, non-comment lines of ``path``, each a :class:`_Line`.

    The file is read as UTF-8 (``.gz``: decompressed), without a byte-order mark at the start
    of the file: from the start, each line split at a comma if it has one, else at
    whitespace; or, with ``table``, from its first data line, split at its delimiter."""
    skip = 0 if table is None else table.skip
    with _open_binary(path) as lines:
        for number, raw in enumerate(lines, 1):
            if number <= skip:
                continue
            try:
                line = raw.decode("utf-8-sig" if number == 1 else "utf-8")
            except UnicodeDecodeError:
                raise GraphError(f"line {number}: not UTF-8 text", path) from None
            body = line.partition("#")[0]
            if not body.strip():
                continue
            delimiter = (("," if "," in body else None) if table is None
                         else table.first.delimiter)
            yield _Line(number, body.strip(), [f.strip() for f in body.split(delimiter)],
                        delimiter)


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
