"""The per-vertex files beside a graph: features, labels and splits, and their checks.

Features are float32 ``[N, F]`` and labels int64 ``[N]``, from ``.npy`` (by position) or
text, by position or keyed by the user's vertex names (:func:`read_keyed`).  A label is
``-1`` (unlabelled) or a class of ``0..C-1``, each class with a vertex
(:func:`check_classes`); features are finite (:func:`check_finite`).  A split file gives
the bool ``[N]`` train, val and test masks (:func:`read_split_file`)."""
from __future__ import annotations

from pathlib import Path

import numpy as np

from ..errors import one_line
from .graph import UNLABELLED, GraphError, NodeDataset, nonfinite_problem
from .npy_files import read_npy, read_npz
from .text_files import (
    Table,
    data_lines,
    find_table,
    is_integer,
    is_number,
    optional,
    reading,
    required,
)

MASKS = ("train", "val", "test")


MASK_KEYS = tuple(f"{m}_mask" for m in MASKS)


def select_split(arrays: dict, split: int, source) -> tuple[tuple[np.ndarray, ...], str]:
    """The three ``[N]`` masks of split ``split`` and its split note, from ``arrays`` holding
    ``train_mask``/``val_mask``/``test_mask`` ``[N]`` or ``train_masks``/``val_masks``/
    ``test_masks`` ``[S, N]``; errors name ``source``."""
    stacked = [f"{m}_masks" for m in MASKS]
    present = [k for k in stacked if k in arrays]
    if not present:
        if split != 0:
            raise GraphError(f"split {split} requested but the dataset holds a single split",
                             source)
        return tuple(arrays[k] for k in MASK_KEYS), "split: the dataset's own masks"
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


# ---- side files ---------------------------------------------------------------------------------
def read_keyed(path: Path, what: str, notes: list[str]) -> tuple[np.ndarray, np.ndarray]:
    """The keys (str ``[K]``, stripped) and values of a text file of ``vertex value...``
    lines: ``what`` ``"feature row"``, float32 ``[K, F]``; ``"label"``, int64 ``[K]``.  A
    skipped header is noted in ``notes``; a file without such a line is refused."""
    optional(path)
    labels = what == "label"
    value = is_integer if labels else is_number
    dtype = np.int64 if labels else np.float32
    with reading(path):
        table = find_table(path, lambda fields: (len(fields) == 2 if labels else len(fields) > 1)
                       and all(map(value, fields[1:])))
    wanted = "'vertex label'" if labels else "'vertex feature...'"
    if table is None:  # else every vertex would be unlabelled, or featureless, unsaid
        raise GraphError(f"holds no {wanted} line (the edge list's ids are names, so this "
                         "file is keyed by them)", path)
    width = len(table.first.fields)
    if width < 2 or (labels and width != 2):
        raise GraphError(f"line {table.first.number}: expected {wanted} (the edge list's ids "
                         f"are names, so this file is keyed by them), found {width} fields",
                         path)
    try:
        with reading(path):
            keys = np.char.strip(table.read(str, usecols=0, ndmin=1))
            # every column read, the key's as 0, so that a line of another width is
            # refused; the keys, which may be strings, come from the pass above
            values = table.read(dtype, ndmin=2, converters={0: lambda _: 0})[:, 1:]
    except ValueError as e:
        raise _values_error(table, what, np.dtype(dtype), one_line(e), key=True) from None
    notes.append(table.note())
    return keys, values[:, 0] if labels else values


def read_array(path: Path, dtype: type, ndim: int, what: str, notes: list[str]
                ) -> np.ndarray:
    """``dtype`` array with ``ndim`` dims from ``.npy`` (no pickle) or delimited text (.gz
    ok), whose rows are ``what`` (``"label"``, ``"feature row"``, ...: named in errors); a
    skipped header of a text file is noted in ``notes``."""
    optional(path)  # a directory, FIFO or device is refused before it is read
    integer = np.issubdtype(dtype, np.integer)
    value = is_integer if integer else is_number
    try:
        with reading(path):
            if path.suffix == ".npy":
                array = read_npy(path)
            elif (table := find_table(path, lambda fields: (ndim == 2 or len(fields) == 1)
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


def _values_error(table: Table, what: str, dtype: np.dtype, fallback: str,
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
            if what == "label" and not is_integer(field) and (integer or not is_number(field)):
                return _label_problem(field, table, int(key))
            if not (is_integer if integer else is_number)(field):
                return f"{what} value {field!r} is not {'an integer' if integer else 'a number'}"
        return None

    return table.first_bad_line(problem) or GraphError(f"cannot read: {fallback}", table.path)


def _label_problem(label: str, table: Table, column: int) -> str:
    """What is wrong with ``label`` (not an integer), in column ``column`` of ``table``,
    and how to fix it."""
    if is_number(label):
        return (f"label {label!r} is not an integer: classes are numbered 0..C-1 (-1 marks "
                "an unlabelled vertex)")
    names: list[str] = []
    for line in data_lines(table.path, table):
        name = line.fields[column] if len(line.fields) > column else ""
        if name and not is_number(name) and name not in names:
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


def check_finite(x: np.ndarray, source: Path, names: np.ndarray | None = None) -> None:
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
    lookup = as_ids(keys, ids is None or ids.dtype.kind == "i", source)
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
    listed_once(at, num_nodes, ids, source)
    return at


def as_ids(keys: np.ndarray, integer: bool, source: str | Path) -> np.ndarray:
    """``keys`` (str) as int64 when the dataset's ids are ``integer``, else as they are."""
    if not integer:
        return keys
    try:
        return keys.astype(np.int64)
    except (ValueError, OverflowError):
        bad = next(k for k in keys.tolist() if not _is_int64(k))
        raise GraphError(f"vertex {bad!r} is not an integer of int64's range, as the "
                         "dataset's ids are", source) from None


def listed_once(at: np.ndarray, num_nodes: int, ids: np.ndarray | None,
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
    and an unlabelled one (``-1``) in a mask, are errors naming the first; so is a file that
    puts no vertex in any mask (an empty file).
    """
    return split_file_masks(Path(path), data)[0]


def split_file_masks(path: Path, data: NodeDataset) -> tuple[tuple[np.ndarray, ...], str]:
    """:func:`read_split_file`'s masks, and the note of a skipped header (``""``: none)."""
    n = data.num_nodes
    header = ""
    if path.suffix == ".npz":
        required(path)
        arrays = read_npz(path)
        missing = [k for k in MASK_KEYS if k not in arrays]
        if missing:
            raise GraphError(f"missing key(s) {', '.join(missing)}", path)
        masks = tuple(arrays[k] for k in MASK_KEYS)
        for key, m in zip(MASK_KEYS, masks):
            if m.dtype != np.bool_ or m.shape != (n,):
                raise GraphError(f"{key} is {m.dtype} {m.shape}, expected bool ({n},)", path)
    else:
        masks, header = _read_split_text(path, data)
    if not any(m.any() for m in masks):  # an empty file, or masks all false
        raise GraphError("puts no vertex in train, val or test: a split file gives 'vertex "
                         "split' lines (split: train, val or test), or bool train_mask, "
                         "val_mask, test_mask [N] in an .npz", path)
    for key, m in zip(MASK_KEYS, masks):
        bad = np.flatnonzero(m & (data.y == UNLABELLED))
        if len(bad):
            raise GraphError(f"puts the unlabelled vertex {data.vertex_name(bad[0])} in "
                             f"{key.removesuffix('_mask')}", path)
    return masks, header


def _read_split_text(path: Path, data: NodeDataset) -> tuple[tuple[np.ndarray, ...], str]:
    required(path)
    with reading(path):
        table = find_table(path, lambda fields: len(fields) == 2 and fields[1] in MASKS)
        if table is not None and len(table.first.fields) != 2:
            raise GraphError(f"line {table.first.number}: expected 'vertex split', found "
                             f"{len(table.first.fields)} fields", path)
        try:
            rows = (np.zeros((0, 2), str) if table is None
                    else np.char.strip(table.read(str, ndmin=2)))
        except ValueError as e:
            raise GraphError(f"cannot read: {one_line(e)}", path) from None
    at = vertex_positions(rows[:, 0], data.ids, data.num_nodes, path)
    known = np.isin(rows[:, 1], MASKS)
    if not np.all(known):
        row = int(np.argmin(known))
        raise GraphError(f"split {rows[row, 1].item()!r} of vertex {rows[row, 0].item()!r} "
                         f"is not one of {', '.join(MASKS)}", path)
    masks = tuple(np.zeros(data.num_nodes, bool) for _ in MASKS)
    for m, name in zip(masks, MASKS):
        m[at[rows[:, 1] == name]] = True
    return masks, "" if table is None else table.note()
