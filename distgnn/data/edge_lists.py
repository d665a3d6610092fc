"""Edge-list files: ``src dst [weight]`` lines, ids as numbers or names, and their side files.

A text file's ids that are all non-negative integers are the vertex numbers; otherwise
they are names, mapped to ``0..N-1`` in sorted order, and text side files are keyed by
them.  A ``.npy`` file is a binary edge file (:mod:`distgnn.data.binary_edges`)."""
from __future__ import annotations

import re
from pathlib import Path

import numpy as np

from ..errors import one_line
from .binary_edges import edge_file_header, iter_edges
from .generators import random_split, random_split_note
from .graph import (
    NODE_BYTES,
    UNLABELLED,
    CSRGraph,
    GraphError,
    NodeDataset,
    require_memory,
)
from .side_files import (
    as_ids,
    check_classes,
    check_finite,
    listed_once,
    read_array,
    read_keyed,
)
from .text_files import Table, find_table, is_integer, is_number, joined_notes, reading

_EDGE_FILE_CHUNK = 1 << 22  # edges per read of a binary edge file: bounds the temporaries


def load_edge_list(path: str | Path, features: str | Path | None = None,
                   labels: str | Path | None = None) -> NodeDataset:
    """Dataset from an edge-list file (edges kept directed, weights kept).

    Ids that are all non-negative integers are the vertex numbers: ``N`` is the number of feature
    rows, else of labels, else the largest id + 1, and the side files are by position
    (:func:`_vertex_count`). Otherwise (a negative or non-integer id) the ids are names, and a text
    side file is keyed by them (:func:`_by_name`): the vertices are the distinct ids of the edge
    list and of the keyed files, so a keyed file can add a vertex without edges. A ``.npy`` file is
    a binary edge file (:func:`read_edge_file`): vertex numbers, no weights. Labels must be classes
    ``0..C-1`` or ``-1`` (:func:`~distgnn.data.side_files.check_classes`).

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
        with reading(path):
            src, dst, weight, header = read_edges(path, names=True)
        notes.append(header)
    if src.dtype.kind == "i" and (not len(src) or min(src.min(), dst.min()) >= 0):
        ids = None
        x = None if features is None else read_array(features, np.float32, 2, "feature row",
                                                       notes)
        y = None if labels is None else read_array(labels, np.int64, 1, "label", notes)
        num_nodes = _vertex_count(path, src, dst, (features, x, "feature row"),
                                  (labels, y, "label"))
        if x is not None:
            check_finite(x, features)
    else:
        src, dst, ids, x, y = _by_name(path, src, dst, features, labels, notes)
        num_nodes = len(ids)
    require_memory(NODE_BYTES * num_nodes, path)
    if y is not None:
        check_classes(y, labels, ids)
    graph = CSRGraph.from_edges(src, dst, num_nodes, weight, source=path)
    note = joined_notes(*notes)
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
            keys, values = read_keyed(file, what, notes)
            keyed[what] = (file, as_ids(keys, integer, file), values)
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
            listed_once(at, n, ids, file)
            if ndim == 1:
                out[what] = np.full(n, UNLABELLED, np.int64)
            else:
                check_finite(values, file, ids[at])
                seen = np.zeros(n, bool)
                seen[at] = True
                if not seen.all():
                    raise GraphError(f"no features for vertex {ids[np.argmin(seen)].item()!r} "
                                     f"(a keyed features file has a line for each of "
                                     f"{counted})", file)
                out[what] = np.empty((n, values.shape[1]), np.float32)
            out[what][at] = values
        else:
            array = read_array(file, dtype, ndim, what, notes)
            if len(array) != n:
                raise GraphError(f"{len(array)} {what}s for {counted}: an .npy side file has "
                                 "one row per vertex, in sorted id order", file)
            if ndim == 2:
                check_finite(array, file, ids)
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
    with reading(Path(path)):
        for s, d in iter_edges(path, _EDGE_FILE_CHUNK):
            src[at:at + len(s)], dst[at:at + len(d)] = s, d
            at += len(s)
    return src, dst


def read_edge_list(path: str | Path) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """Parse ``src dst [weight]`` lines into int64 ``[E]`` src, dst and float32 ``[E]`` weight.

    Fields are separated by commas if the first data line has one, else by whitespace; ``#`` starts
    a comment; blank lines are skipped; ``.gz`` files are decompressed; a header line is skipped
    (:func:`~distgnn.data.text_files.find_table`). ``weight`` is None for two-column files. Ids must
    be non-negative integers (vertex numbers; :func:`load_edge_list` takes names).
    """
    path = Path(path)
    with reading(path):
        return read_edges(path, names=False)[:3]


def read_edges(path: Path, names: bool
                ) -> tuple[np.ndarray, np.ndarray, np.ndarray | None, str]:
    """The edges of the text edge list ``path``: ``(src, dst, weight, header)``.

    int64 ``[E]`` src and dst (with ``names``, str where some id is not an integer), float32
    ``[E]`` weights (None: two columns) and the note of a skipped header (``""``: none).
    Without ``names`` a negative id is an error.

    Integer ids take numpy's C reader, names its slower string reader; only a malformed file
    is re-scanned line by line, to report its first bad line.
    """
    table = find_table(path, _numbered_edge, _named_edge)
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


def _read_named_edges(table: Table, ncols: int
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


def _edge_list_error(table: Table, ncols: int, fallback: str, names: bool) -> GraphError:
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
            if not is_integer(field):
                return f"vertex id {field!r} is not an integer"
            if int(field) < 0:
                return f"negative vertex id {int(field)}"
        if ncols == 3 and not is_number(fields[2]):
            return f"weight {fields[2]!r} is not a number"
        return None

    return table.first_bad_line(problem) or GraphError(f"malformed edge list: {fallback}",
                                                       table.path)


def _named_edge(fields: list[str]) -> bool:
    """Whether ``fields`` are an edge between names: two ids, then maybe a number."""
    return (len(fields) in (2, 3) and all(fields[:2])
            and (len(fields) == 2 or is_number(fields[2])))


def _numbered_edge(fields: list[str]) -> bool:
    """Whether ``fields`` are an edge between integer ids, then maybe a number."""
    return _named_edge(fields) and all(map(is_integer, fields[:2]))


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
