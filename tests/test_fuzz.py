"""Hostile input for every loader (issue 7): hypothesis draws damaged, mistyped, oversized and
malicious inputs for the graph builders, the ``.npz``, edge-list and OGB loaders, the
partition format and the generator specs.

Every case goes through :func:`run_case`, which sorts its outcome into

- ``clean``: a :class:`~distgnn.errors.DistGNNError` whose message is one non-empty line
  naming the input (its file, directory or source);
- ``accepted``: a result that passes the structural invariants and, where a plain reference
  can read the input, holds exactly what the input says;
- ``failures``: anything else: another exception, an invalid result, a hang past
  :data:`CASE_TIMEOUT` seconds, or a pickle whose code ran.

Each test fails on a failure and prints the input.  The outcomes are counted per loader in
``tests/fuzz_report.py`` for the table at the end of the session; ``--fuzz-examples N`` sets
the cases per test and ``--fuzz-report FILE`` writes the counts as JSON (``conftest.py``).
Strategies only describe a case; the tests write its files into a fresh temporary directory.
"""
import collections
import contextlib
import gzip
import io
import json
import os
import re
import shutil
import signal
import tempfile
import warnings
import zipfile
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp
from hypothesis import given, seed, settings
from hypothesis import strategies as st

import fuzz_report
import partition
from distgnn.datasets import load, read_edge_list
from distgnn.errors import DistGNNError
from distgnn.graph import CSRGraph, NodeDataset
from partition.format import MASKS, OPTIONAL_FILES, PART_FILES, PartitionFormatError, sha256
from test_datasets import _Payload, make_ogb, tiny_arrays
from test_partition import write_dir

CASE_TIMEOUT = 20  # seconds; a case still running then is a hang

# dtypes of the same kind as a valid array (the loader may accept them), then of others
SAME_KIND = {"b": ("int8", "uint8"), "i": ("int8", "uint8", "int16", "int32", "uint32",
                                          "int64", "uint64", ">i8"),
             "f": ("float16", "float32", "float64", ">f4")}
HOSTILE_DTYPES = ("int32", "uint64", "float32", "float64", "complex64", "bool", "U3",
                  "datetime64[s]", "object")
HOSTILE_INTS = (-1, -(2**31), 2**31, 2**32 + 1, 2**53 + 1, 10**12, 2**63 - 1)
HOSTILE_FLOATS = (float("nan"), float("inf"), float("-inf"), 1.5, 1e300, -0.0)
# counts where a non-negative integer is expected
HOSTILE_COUNTS = (-1, 10**12, 2**62, 2**63, 2**64, 1.5, float("nan"), "3", True, None,
                  np.uint64(2**63))
# text fields: numbers numpy must not read as ids, ids too big or negative, unicode digits
HOSTILE_TOKENS = ("-1", "1.5", "1e3", "nan", "inf", "99999999999999999999",
                  "9223372036854775807", "1000000000000", "0x10", "abc", "\uff11", "+3", "-0",
                  "1_0", "", "3")
# shapes a .npy header may declare over 64 bytes of data
GIANT_SHAPES = ((10**12,), (2**40, 2**40), (2**62,), (-5,), (4, 2**61))
HOSTILE_BYTES = (b"\xff", b"\xc3\x28", b"\xe9", b"\x00", b"\xef\xbb\xbf", b"\r", b"\x80abc",
                 b"\xed\xa0\x80")


# ---- the harness ---------------------------------------------------------------------------------
class CaseTimeout(BaseException):
    """Raised inside a case that runs too long (not an Exception: no loader may swallow it)."""


@contextlib.contextmanager
def time_limit(seconds: float):
    def expire(signum, frame):
        raise CaseTimeout

    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def message_problem(message: str, names) -> str | None:
    """Why ``message`` is not a clean error: empty, several lines, or naming none of ``names``."""
    if not message.strip():
        return "empty error message"
    if "\n" in message or "\r" in message:
        return f"error message of several lines: {message!r}"
    if names and not any(str(name) in message for name in names):
        return f"error message names none of {[str(n) for n in names]}: {message!r}"
    return None


def run_case(loader: str, case: str, call, check=None, names=(), marker: Path | None = None):
    """Run ``call()``, sort its outcome (see the module docstring), count it, fail on a failure.

    ``case`` describes the input; ``check(result)`` asserts what an accepted result must
    satisfy; an error message must contain one of ``names`` (the input's paths or name);
    ``marker`` is a file that a pickle payload in the input would create if it ran.
    """
    outcome, problem = "clean", None
    try:
        with time_limit(CASE_TIMEOUT):
            result = call()
    except DistGNNError as e:
        problem = message_problem(str(e), names)
    except CaseTimeout:
        problem = f"no answer within {CASE_TIMEOUT} s (a hang)"
    except Exception as e:  # any other exception, an assertion of the call included
        problem = f"{type(e).__name__}: {e}"
    else:
        outcome = "accepted"
        try:
            if check is not None:
                check(result)
        except AssertionError as e:
            problem = f"accepted an invalid result: {e}"
    if marker is not None and marker.exists():
        problem = "a pickled object inside the input was executed"
    if problem:
        outcome = "failures"
    fuzz_report.record(loader, outcome, f"{case}: {problem}" if problem else "")
    assert problem is None, f"{loader}: {case}: {problem}"


def fuzz(strategy, share: float = 1.0):
    """``@given(strategy)`` under the session's settings (``--fuzz-examples``, ``--fuzz-seed``),
    with ``share`` of the examples for a test whose cases are expensive."""
    def wrap(test):
        examples = max(1, round(fuzz_report.SETTINGS.max_examples * share))
        test = settings(fuzz_report.SETTINGS, max_examples=examples)(given(strategy)(test))
        return test if fuzz_report.SEED is None else seed(fuzz_report.SEED)(test)
    return wrap


# ---- invariants of an accepted result -----------------------------------------------------------
def check_graph(g: CSRGraph) -> None:
    """indptr int64 ``[N+1]`` from 0, non-decreasing, ending at nnz; integer indices in [0, N)."""
    assert isinstance(g, CSRGraph)
    indptr, indices, n = np.asarray(g.indptr), np.asarray(g.indices), g.num_nodes
    assert indptr.dtype == np.int64 and indptr.shape == (n + 1,)
    assert indptr[0] == 0 and indptr[-1] == len(indices) and np.all(indptr[1:] >= indptr[:-1])
    assert indices.dtype in (np.int32, np.int64) and indices.ndim == 1
    assert len(indices) == 0 or (indices.min() >= 0 and indices.max() < n)
    if g.edge_weight is not None:
        w = np.asarray(g.edge_weight)
        assert w.dtype == np.float32 and w.shape == indices.shape and np.all(np.isfinite(w))


def check_node_arrays(n, x, y, masks, num_classes) -> None:
    """Finite float32 features ``[n, F]``, int64 labels in range, disjoint bool masks ``[n]``."""
    x, y = np.asarray(x), np.asarray(y)
    assert x.dtype == np.float32 and x.ndim == 2 and len(x) == n and np.all(np.isfinite(x))
    assert y.dtype == np.int64 and y.shape == (n,)
    assert n == 0 or (y.min() >= 0 and y.max() < num_classes)
    masks = [np.asarray(m) for m in masks]
    for m in masks:
        assert m.dtype == np.bool_ and m.shape == (n,)
    assert not np.any((masks[0] & masks[1]) | (masks[0] & masks[2]) | (masks[1] & masks[2]))


def check_dataset(ds: NodeDataset) -> None:
    assert isinstance(ds, NodeDataset)
    check_graph(ds.graph)
    check_node_arrays(ds.num_nodes, ds.x, ds.y, (ds.train_mask, ds.val_mask, ds.test_mask),
                      ds.num_classes)


def edge_pairs(g: CSRGraph) -> list[tuple[int, int]]:
    src, dst = g.edges()
    return sorted(zip(src.tolist(), dst.tolist()))


# ---- strategies shared by the loaders -----------------------------------------------------------
@st.composite
def hostile_array(draw, base):
    """``(array, how)``: the valid ``base`` as is, in another dtype, changed (a hostile value,
    a wrong value of its own type, two values swapped, another shape), or both."""
    a, hows = np.array(base), []
    if draw(st.booleans()):
        dtype = draw(st.sampled_from(SAME_KIND.get(a.dtype.kind, ()) + HOSTILE_DTYPES))
        with warnings.catch_warnings(), contextlib.suppress(ValueError, TypeError):
            warnings.simplefilter("ignore")  # overflows, lost imaginary parts: intended
            a = a.astype(dtype)
        hows.append(f"dtype {a.dtype}")
    if draw(st.booleans()):
        a, how = draw(array_change(a))
        hows.append(how)
    return a, ", ".join(hows) or "as is"


@st.composite
def array_change(draw, a):
    how = draw(st.sampled_from(("int", "float", "plus one", "swap", "shorter", "longer",
                                "extra axis", "0-D", "empty")))
    a = a.copy()
    positions = st.integers(0, max(a.size - 1, 0))
    if how in ("int", "float") and a.size and a.dtype.kind in "biuf":
        value = draw(st.sampled_from(HOSTILE_INTS if how == "int" else HOSTILE_FLOATS))
        a = a.astype(np.float64 if how == "float" or a.dtype.kind == "f" else np.int64)
        pos = draw(positions)
        a.reshape(-1)[pos] = value
        how = f"{value!r} at {pos}"
    elif how == "plus one" and a.size and a.dtype.kind in "biuf":
        pos = draw(positions)
        flat = a.reshape(-1)
        flat[pos] = not flat[pos] if a.dtype == np.bool_ else flat[pos] + 1
        how += f" at {pos}"
    elif how == "swap" and a.size:
        i, j = draw(positions), draw(positions)
        flat = a.reshape(-1)
        flat[i], flat[j] = flat[j], flat[i]
        how += f" {i} {j}"
    elif how == "shorter" and a.ndim:
        a = a[:-1]
    elif how == "longer" and a.ndim and a.size:
        a = np.concatenate([a, a[:1]])
    elif how == "extra axis":
        a = a[..., None]
    elif how == "0-D":
        a = a.reshape(-1)[:1].reshape(()) if a.size else np.zeros((), a.dtype)
    elif how == "empty" and a.ndim:
        a = a[:0]
    return a, how


def npy_bytes(array: np.ndarray) -> bytes:
    """``array`` as ``.npy`` bytes; object arrays are pickled (the hostile case)."""
    f = io.BytesIO()
    np.lib.format.write_array(f, array, allow_pickle=True)
    return f.getvalue()


def npz_members(members: dict[str, bytes], compressed: bool = False) -> bytes:
    """A zip archive (an ``.npz`` when the members are ``.npy``) of ``members``."""
    buffer = io.BytesIO()
    method = zipfile.ZIP_DEFLATED if compressed else zipfile.ZIP_STORED
    with zipfile.ZipFile(buffer, "w", method) as archive:
        for name, data in members.items():
            archive.writestr(name, data)
    return buffer.getvalue()


def npz_bytes(**arrays) -> bytes:
    """``np.savez`` of ``arrays``, in memory."""
    buffer = io.BytesIO()
    np.savez(buffer, **arrays)
    return buffer.getvalue()


def giant_npy(shape, descr: str) -> bytes:
    """A ``.npy`` whose header declares ``shape`` but that holds 64 bytes of data."""
    f = io.BytesIO()
    np.lib.format.write_array_header_1_0(f, {"descr": descr, "fortran_order": False,
                                             "shape": shape})
    return f.getvalue() + bytes(64)


@st.composite
def damaged_bytes(draw, data: bytes):
    """``(data, how)`` with no damage, a cut, flipped or inserted bytes, or nothing left."""
    how = draw(st.sampled_from(("intact", "truncate", "flip", "insert", "empty")))
    if how == "truncate" and data:
        data = data[:draw(st.integers(0, len(data) - 1))]
    elif how == "flip" and data:
        data = bytearray(data)
        for _ in range(draw(st.integers(1, 4))):
            data[draw(st.integers(0, len(data) - 1))] ^= draw(st.integers(1, 255))
        data = bytes(data)
    elif how == "insert":
        pos = draw(st.integers(0, len(data)))
        data = data[:pos] + draw(st.sampled_from(HOSTILE_BYTES)) + data[pos:]
    elif how == "empty":
        data = b""
    return data, how


def marker_payload(marker: Path) -> np.ndarray:
    """An object array whose unpickling creates ``marker`` (the proof that code ran)."""
    return np.array([_Payload(marker)], dtype=object)


# ---- 1. graph builders --------------------------------------------------------------------------
SOURCE = "builder-input"


@st.composite
def edge_arrays(draw, max_nodes=12, max_edges=30):
    """``(n, src, dst)``: a valid random edge list on ``n`` vertices (int64 ``[E]``)."""
    n = draw(st.integers(0, max_nodes))
    e = draw(st.integers(0, max_edges)) if n else 0
    ids = st.lists(st.integers(0, max(n - 1, 0)), min_size=e, max_size=e)
    return n, np.array(draw(ids), np.int64), np.array(draw(ids), np.int64)


def check_csr_input(indptr, indices, count):
    """An accepted CSRGraph holds exactly the given arrays (values compared as Python ints)."""
    def check(g):
        check_graph(g)
        assert g.indptr.tolist() == np.asarray(indptr).tolist()
        assert g.indices.tolist() == np.asarray(indices).tolist()
        assert count is None or g.num_nodes == count
    return check


def check_edges_input(src, dst, count, symmetric, weight=None):
    """An accepted graph holds exactly the given edges (both ways, once, if ``symmetric``)."""
    def check(g):
        check_graph(g)
        pairs = list(zip(src.tolist(), dst.tolist()))
        if symmetric:
            pairs = sorted(set(pairs) | {(d, s) for s, d in pairs})
        n = count if count is not None else max((max(p) for p in pairs), default=-1) + 1
        assert g.num_nodes == n
        if weight is None or symmetric:
            assert edge_pairs(g) == sorted(pairs)
        else:
            want = sorted((s, d, float(w)) for (s, d), w in
                          zip(pairs, np.asarray(weight).astype(np.float32).tolist()))
            gs, gd = g.edges()
            assert sorted(zip(gs.tolist(), gd.tolist(), g.edge_weight.tolist())) == want
    return check


def check_scipy_input(rows, cols):
    """An accepted graph holds an edge ``col -> row`` for each stored entry."""
    def check(g):
        check_graph(g)
        assert set(edge_pairs(g)) == set(zip(cols.tolist(), rows.tolist()))
    return check


def check_dataset_input(x, y, masks):
    """An accepted NodeDataset holds the given arrays after the documented casts."""
    def check(ds):
        check_dataset(ds)
        assert np.array_equal(ds.x, np.asarray(x).astype(np.float32))
        assert ds.y.tolist() == np.asarray(y).tolist()
        for got, want in zip((ds.train_mask, ds.val_mask, ds.test_mask), masks):
            assert np.array_equal(got, want)
    return check


@st.composite
def builder_cases(draw):
    """``(description, call, check)`` for one of CSRGraph, from_edges, from_edges_symmetric,
    from_scipy and NodeDataset."""
    n, src, dst = draw(edge_arrays())
    count = draw(st.sampled_from((None, n, n + 1, max(n - 1, 0)) + HOSTILE_COUNTS))
    which = draw(st.sampled_from(("CSRGraph", "from_edges", "from_edges_symmetric",
                                  "from_scipy", "NodeDataset")))
    if which == "CSRGraph":  # one of indptr, indices and num_nodes hostile
        g = CSRGraph.from_edges(src, dst, n)
        (indptr, how_p), (indices, how_i) = (g.indptr, "valid"), (g.indices, "valid")
        target = draw(st.sampled_from(("indptr", "indices", "num_nodes")))
        count = draw(st.sampled_from((None, n)))
        if target == "indptr":
            indptr, how_p = draw(hostile_array(g.indptr))
        elif target == "indices":
            indices, how_i = draw(hostile_array(g.indices))
        else:
            count = draw(st.sampled_from(HOSTILE_COUNTS + (n + 1,)))
        return (f"CSRGraph({indptr!r} ({how_p}), {indices!r} ({how_i}), num_nodes={count!r})",
                lambda: CSRGraph(indptr, indices, count, source=SOURCE),
                check_csr_input(indptr, indices, count))
    if which in ("from_edges", "from_edges_symmetric"):
        (s, how_s), (d, how_d) = draw(hostile_array(src)), draw(hostile_array(dst))
        case = f"{which}({s!r} ({how_s}), {d!r} ({how_d}), num_nodes={count!r}"
        if which == "from_edges_symmetric":
            return (case + ")", lambda: CSRGraph.from_edges_symmetric(s, d, count, SOURCE),
                    check_edges_input(s, d, count, True))
        weight = None
        if draw(st.booleans()):
            weight, how_w = draw(hostile_array(np.linspace(0.5, 2, len(src))))
            case += f", edge_weight={weight!r} ({how_w})"
        return (case + ")", lambda: CSRGraph.from_edges(s, d, count, weight, SOURCE),
                check_edges_input(s, d, count, False, weight))
    if which == "from_scipy":
        return draw(scipy_case(n, src, dst))
    return draw(dataset_case(n, src, dst))


@st.composite
def scipy_case(draw, n, src, dst):
    """from_scipy of the edges in a sparse format, shape and dtype, or of no sparse matrix."""
    form = draw(st.sampled_from(("coo", "csr", "csc", "lil", "dok", "dense", "list", "none")))
    if form == "dense":
        matrix = np.ones((n, n))
    elif form in ("list", "none"):
        matrix = [[1]] if form == "list" else None
    else:
        shape = draw(st.sampled_from(((n, n), (n, n + 1), (n + 1, n), (10**12, 10**12))))
        dtype = draw(st.sampled_from(("float32", "float64", "int64", "bool", "complex64")))
        data = np.ones(len(src), dtype)
        if len(src) and draw(st.booleans()):
            data[draw(st.integers(0, len(src) - 1))] = draw(st.sampled_from((0, 2) + (
                (float("nan"), float("inf")) if data.dtype.kind in "fc" else ())))
        matrix = sp.coo_matrix((data, (dst, src)), shape=shape)
        if shape[0] < 10**6:  # only coo holds a huge shape without allocating it
            matrix = matrix.asformat(form)
        return (f"from_scipy({form} {shape} {dtype}, rows={dst!r}, cols={src!r}, "
                f"data={data!r})", lambda: CSRGraph.from_scipy(matrix, SOURCE),
                check_scipy_input(dst, src))
    return (f"from_scipy({matrix!r})", lambda: CSRGraph.from_scipy(matrix, SOURCE),
            check_scipy_input(dst, src))


@st.composite
def dataset_case(draw, n, src, dst):
    """NodeDataset on a valid graph with hostile features, labels, masks, num_classes."""
    graph = CSRGraph.from_edges(src, dst, n, source=SOURCE)
    ids = np.arange(n)
    x, how_x = draw(hostile_array(np.arange(3 * n, dtype=np.float32).reshape(n, 3)))
    y, how_y = draw(hostile_array(ids % 3))
    masks, hows = [], []
    for k in range(3):
        m, how = draw(hostile_array(ids % 3 == k))
        masks.append(m)
        hows.append(how)
    classes = draw(st.sampled_from((0, 3, 2, 10**12) + HOSTILE_COUNTS))
    return (f"NodeDataset(n={n}, x={x!r} ({how_x}), y={y!r} ({how_y}), masks={masks!r} "
            f"({hows}), num_classes={classes!r})",
            lambda: NodeDataset(graph, x, y, *masks, num_classes=classes),
            check_dataset_input(x, y, masks))


@fuzz(builder_cases())
def test_graph_builders(case):
    description, call, check = case
    run_case("graph builders", description, call, check, names=[SOURCE])


# ---- 2. .npz files ------------------------------------------------------------------------------
NPZ_KEYS = tuple(tiny_arrays())


@st.composite
def npz_cases(draw):
    """A plan: ``members`` (name -> .npy bytes or a giant header or a pickle), the arrays an
    accepted load must return, the container and its damage, and ``split``."""
    arrays = dict(tiny_arrays())
    notes = []
    for _ in range(draw(st.integers(0, 2))):
        key = draw(st.sampled_from(NPZ_KEYS))
        arrays[key], how = draw(hostile_array(arrays[key]))
        notes.append(f"{key}: {how} -> {arrays[key]!r}")
    if draw(st.booleans()):  # several splits, [S, N] each
        for m in ("train", "val", "test"):
            arrays[f"{m}_masks"] = np.stack([arrays[f"{m}_mask"], arrays[f"{m}_mask"]])
        key = draw(st.sampled_from(("train_masks", "val_masks", "test_masks")))
        arrays[key], how = draw(hostile_array(arrays[key]))
        notes.append(f"{key}: {how}")
    if draw(st.booleans()):
        key = draw(st.sampled_from(NPZ_KEYS))
        del arrays[key]
        notes.append(f"no {key}")
    members = {f"{k}.npy": ("array", v) for k, v in arrays.items()}
    special = draw(st.sampled_from((None, "pickle", "giant", "readme")))
    if special == "pickle":
        key = draw(st.sampled_from(NPZ_KEYS + ("extra",)))
        members[f"{key}.npy"] = ("pickle", None)
        notes.append(f"{key}: pickled object")
    elif special == "giant":
        key = draw(st.sampled_from(NPZ_KEYS))
        shape = draw(st.sampled_from(GIANT_SHAPES))
        members[f"{key}.npy"] = ("giant", giant_npy(shape, draw(st.sampled_from(("<f4", "<i8")))))
        notes.append(f"{key}: header declares shape {shape}")
    elif special == "readme":
        members["README.txt"] = ("raw", b"not an array")
    compressed = draw(st.booleans())
    damage = draw(st.sampled_from(("intact", "truncate", "flip", "empty", "garbage",
                                   "directory")))
    cut = draw(st.floats(0, 1))
    flips = draw(st.lists(st.tuples(st.floats(0, 1), st.integers(1, 255)), min_size=1,
                          max_size=4))
    split = draw(st.sampled_from((0, 0, 1, 2, -1)))
    return dict(arrays=arrays, members=members, compressed=compressed, damage=damage,
                cut=cut, flips=flips, split=split, notes=notes)


def write_npz_plan(path: Path, plan: dict, marker: Path) -> None:
    """Write the archive ``plan`` describes to ``path`` (``marker``: for a pickled payload)."""
    if plan["damage"] == "directory":
        path.mkdir()
        return
    content = {"array": npy_bytes, "giant": bytes, "raw": bytes,
               "pickle": lambda _: npy_bytes(marker_payload(marker))}
    data = npz_members({name: content[kind](value)
                        for name, (kind, value) in plan["members"].items()}, plan["compressed"])
    if plan["damage"] == "truncate":
        data = data[:int(plan["cut"] * (len(data) - 1))]
    elif plan["damage"] == "flip":
        data = bytearray(data)
        for where, mask in plan["flips"]:
            data[int(where * (len(data) - 1))] ^= mask
        data = bytes(data)
    elif plan["damage"] == "empty":
        data = b""
    elif plan["damage"] == "garbage":
        data = np.random.default_rng(int(plan["cut"] * 1000)).bytes(256)
    path.write_bytes(data)


def check_npz_result(arrays: dict, split: int):
    """An accepted load holds exactly ``arrays`` (after the documented casts)."""
    def check(ds):
        check_dataset(ds)
        assert ds.graph.indptr.tolist() == np.asarray(arrays["indptr"]).tolist()
        assert ds.graph.indices.tolist() == np.asarray(arrays["indices"]).tolist()
        assert np.array_equal(ds.x, np.asarray(arrays["x"]).astype(np.float32))
        assert ds.y.tolist() == np.asarray(arrays["y"]).tolist()
        for m, got in zip(("train", "val", "test"), (ds.train_mask, ds.val_mask, ds.test_mask)):
            want = arrays[f"{m}_masks"][split] if f"{m}_masks" in arrays else arrays[f"{m}_mask"]
            assert np.array_equal(got, want)
    return check


@fuzz(npz_cases())
def test_npz(plan):
    with tempfile.TemporaryDirectory() as tmp:
        path, marker = Path(tmp) / "data.npz", Path(tmp) / "pickle-ran"
        write_npz_plan(path, plan, marker)
        run_case("npz", f"{plan['notes']}, {'deflated' if plan['compressed'] else 'stored'}, "
                        f"{plan['damage']}, split {plan['split']}",
                 lambda: load(path, split=plan["split"]),
                 check_npz_result(plan["arrays"], plan["split"]), names=[path], marker=marker)


# ---- 3. edge lists ------------------------------------------------------------------------------
FLOAT = re.compile(r"[+-]?([0-9]+\.?[0-9]*|\.[0-9]+)([eE][+-]?[0-9]+)?")


def reference_edges(data: bytes) -> list[tuple[int, int]] | None:
    """The ``(src, dst)`` pairs of a strictly well-formed edge list (printable ASCII, one
    delimiter, 2 or 3 fields on every line, decimal ids, decimal weights), else None."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return None
    pairs, ncols, delimiter = [], None, None
    for line in io.StringIO(text, newline=None).read().split("\n"):
        body = line.partition("#")[0]
        if any(not (c.isascii() and (c.isprintable() or c == "\t")) for c in body):
            return None
        if not body.strip(" \t"):
            continue
        if ncols is None:
            delimiter = "," if "," in body else None
        fields = [f.strip(" \t") for f in (body.split(",") if delimiter else body.split())]
        ncols = ncols or len(fields)
        if ncols not in (2, 3) or len(fields) != ncols:
            return None
        if not all(re.fullmatch(r"[+-]?[0-9]+", f) for f in fields[:2]):
            return None
        if ncols == 3 and not FLOAT.fullmatch(fields[2]):
            return None
        s, d = int(fields[0]), int(fields[1])
        if min(s, d) < 0 or max(s, d) >= 2**63:
            return None
        pairs.append((s, d))
    return pairs


@st.composite
def edge_list_cases(draw):
    """A plan: the edge-list bytes (gzip or not, maybe cut), and optional features/labels files."""
    n, src, dst = draw(edge_arrays(max_nodes=10, max_edges=16))
    weighted = draw(st.booleans())
    rows = [[str(s), str(d)] + ([draw(st.sampled_from(("0.5", "1", "2e-3", "nan", "-inf")))]
                                if weighted else []) for s, d in zip(src, dst)]
    notes = []
    for _ in range(draw(st.integers(0, 3))):
        how = draw(st.sampled_from(("token", "drop field", "extra field", "comment", "blank",
                                    "header")))
        at = draw(st.integers(0, len(rows)))
        if how == "token" and rows and at < len(rows):
            field = draw(st.integers(0, len(rows[at]) - 1))
            rows[at][field] = draw(st.sampled_from(HOSTILE_TOKENS))
        elif how == "drop field" and at < len(rows):
            rows[at] = rows[at][:-1]
        elif how == "extra field" and at < len(rows):
            rows[at] = rows[at] + ["7"]
        elif how in ("comment", "blank", "header"):
            rows.insert(at, [{"comment": "# a comment", "blank": "",
                              "header": "src dst # columns"}[how]])
        notes.append(how)
    delimiter = draw(st.sampled_from((" ", "\t", ",", ", ", "  ")))
    text = "\n".join(delimiter.join(r) for r in rows) + draw(st.sampled_from(("\n", "", "\r\n")))
    data, damage = draw(damaged_bytes(text.encode()))
    notes.append(damage)
    gz = draw(st.sampled_from((None, "gzip", "gzip cut", "gzip name only", "directory")))
    side = {}
    for name, base in (("features", np.ones((n, 2), np.float32)), ("labels", np.arange(n) % 3)):
        form = draw(st.sampled_from((None,) * 6 + ("npy", "text", "giant", "pickle",
                                                    "directory")))
        if form:
            array, how = draw(hostile_array(base))
            if form == "giant":
                array = draw(st.sampled_from(GIANT_SHAPES))
            side[name] = (form, array)
            notes.append(f"{name}: {form}, {how if form in ('npy', 'text') else array}")
    return dict(data=data, gz=gz, side=side, notes=notes, cut=draw(st.floats(0, 1)))


def write_side_file(path: Path, form: str, array, marker: Path) -> Path:
    """A features or labels file: ``.npy`` (maybe a giant header or a pickle), text, or a
    directory in its place."""
    if form == "text":
        path = path.with_suffix(".txt")
        path.write_text("".join(" ".join(map(str, np.ravel(row))) + "\n"
                                for row in np.atleast_1d(array)))
        return path
    path = path.with_suffix(".npy")
    if form == "npy":
        path.write_bytes(npy_bytes(array))
    elif form == "giant":
        path.write_bytes(giant_npy(array, "<f4"))
    elif form == "pickle":
        path.write_bytes(npy_bytes(marker_payload(marker)))
    else:
        path.mkdir()
    return path


@fuzz(edge_list_cases())
def test_edge_list(plan):
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        data, gz = plan["data"], plan["gz"]
        path, marker = tmp / ("edges.txt.gz" if gz else "edges.txt"), tmp / "pickle-ran"
        if gz in ("gzip", "gzip cut"):
            packed = gzip.compress(data)
            path.write_bytes(packed if gz == "gzip" else packed[:int(plan["cut"] * len(packed))])
        elif gz == "directory":
            path.mkdir()
        else:  # None, or "gzip name only": plain text under a .gz name
            path.write_bytes(data)
        side = {name: write_side_file(tmp / name, form, array, marker)
                for name, (form, array) in plan["side"].items()}
        reference = reference_edges(data) if gz in (None, "gzip") else None

        def check(ds):
            check_dataset(ds)
            if reference is not None:
                assert edge_pairs(ds.graph) == sorted(reference)

        run_case("edge list", f"{data!r} ({gz}), {plan['notes']}",
                 lambda: load(path, features=side.get("features"), labels=side.get("labels")),
                 check, names=[path, *side.values()], marker=marker)


# ---- 4. OGB node-property directories -----------------------------------------------------------
OGB_FILES = ("raw/edge.csv.gz", "raw/node-feat.csv.gz", "raw/node-label.csv.gz",
             "raw/num-node-list.csv.gz", "split/a_time/train.csv.gz",
             "split/a_time/valid.csv.gz", "split/b_other/test.csv.gz")
HOSTILE_NODE_COUNTS = (["1000000000000"], ["-1"], ["9223372036854775807", "9223372036854775807"],
                       ["6.5"], ["abc"], ["3", "3"], [], ["7"], ["5"])


@st.composite
def ogb_cases(draw):
    """A plan: labels of the 6-node toy directory, then one hostile change to one file."""
    labels = ["0", "1", "2", "1", "0", "nan"]
    if draw(st.booleans()):
        labels[draw(st.integers(0, 5))] = draw(st.sampled_from(HOSTILE_TOKENS + ("1e300",)))
    target = draw(st.sampled_from(OGB_FILES))
    action = draw(st.sampled_from(("rows", "bytes", "plain text", "gzip cut", "delete",
                                   "directory", "node count")))
    return dict(labels=labels, count_file=draw(st.booleans()), features=draw(st.booleans()),
                target=target, action=action,
                line=draw(st.integers(0, 10)), field=draw(st.integers(0, 2)),
                token=draw(st.sampled_from(HOSTILE_TOKENS)),
                counts=draw(st.sampled_from(HOSTILE_NODE_COUNTS)),
                bad=draw(st.sampled_from(HOSTILE_BYTES)), cut=draw(st.floats(0, 1)))


def apply_ogb_plan(root: Path, plan: dict) -> None:
    path = root / plan["target"]
    action = plan["action"]
    text = gzip.decompress(path.read_bytes()) if path.exists() else b""
    if action == "node count":  # without features, the count alone sizes the graph
        path = root / "raw/num-node-list.csv.gz"
        path.write_bytes(gzip.compress("".join(f"{c}\n" for c in plan["counts"]).encode()))
        if not plan["features"]:
            (root / "raw/node-feat.csv.gz").unlink()
    elif action == "rows":
        lines = text.decode().splitlines() or [""]
        row = lines[plan["line"] % len(lines)].split(",")
        row[plan["field"] % len(row)] = plan["token"]
        lines[plan["line"] % len(lines)] = ",".join(row)
        path.write_bytes(gzip.compress(("\n".join(lines) + "\n").encode()))
    elif action == "bytes":
        pos = int(plan["cut"] * len(text))
        path.write_bytes(gzip.compress(text[:pos] + plan["bad"] + text[pos:]))
    elif action == "plain text":
        path.write_bytes(text)
    elif action == "gzip cut":
        packed = gzip.compress(text)
        path.write_bytes(packed[:int(plan["cut"] * len(packed))])
    elif action == "delete":
        path.unlink(missing_ok=True)
    elif action == "directory":
        path.unlink(missing_ok=True)
        path.mkdir(parents=True)


@fuzz(ogb_cases())
def test_ogb(plan):
    with tempfile.TemporaryDirectory() as tmp:
        root = make_ogb(Path(tmp) / "ogbn-toy", plan["labels"],
                        num_nodes_file=plan["count_file"])
        apply_ogb_plan(root, plan)
        run_case("ogb", str(plan), lambda: load(root), check_dataset, names=[root])


# ---- 5. partition directories -------------------------------------------------------------------
@pytest.fixture(scope="module")
def good_partitions(tmp_path_factory):
    """A valid 3-partition directory of a small weighted SBM graph (copied by every case)."""
    ds = load("sbm:nodes=60,blocks=3,features=4,avg_degree=4,seed=1")
    g = ds.graph
    weighted = CSRGraph(g.indptr, g.indices, g.num_nodes,
                        np.linspace(0.5, 2, g.num_edges, dtype=np.float32))
    ds = NodeDataset(weighted, ds.x, ds.y, ds.train_mask, ds.val_mask, ds.test_mask,
                     ds.num_classes, "sbm-weighted")
    out = tmp_path_factory.mktemp("fuzz") / "parts"
    write_dir(ds, out, 3)
    return out


META_KEYS = ("format", "format_version", "num_parts", "num_nodes", "num_edges",
             "num_features", "num_classes", "multigraph", "files")
HOSTILE_JSON = (-1, 0, 1, 2, 4, 10**12, 2**63, 2**64, "3", 3.5, None, True, [], {},
                float("nan"), float("inf"), "x" * 10)
HOSTILE_PATHS = ("../../outside.npy", "/etc/passwd", "part-00000/../meta.json", "part-1/x.npy",
                 "part-00007/x.npy", "part-00000/evil.npy", "part-00000/x.npy/")
PART_NAMES = PART_FILES + OPTIONAL_FILES


@st.composite
def partition_cases(draw):
    """A plan: one hostile change to ``meta.json``, to one array file, or to a partition."""
    target = draw(st.sampled_from(("meta field", "meta files", "meta bytes", "array",
                                   "array lie", "array lie", "partition")))
    plan = dict(target=target, rank=draw(st.integers(0, 2)),
                name=draw(st.sampled_from(PART_NAMES)))
    if target == "meta field":
        plan.update(key=draw(st.sampled_from(META_KEYS)),
                    value=draw(st.sampled_from(HOSTILE_JSON + ("delete",))))
    elif target == "meta files":
        plan.update(how=draw(st.sampled_from(("path", "entry", "drop"))),
                    path=draw(st.sampled_from(HOSTILE_PATHS)),
                    value=draw(st.sampled_from(HOSTILE_JSON)))
    elif target == "meta bytes":
        plan.update(how=draw(st.sampled_from(("damage", "deep", "digits", "directory",
                                              "fifo", "delete"))),
                    cut=draw(st.floats(0, 1)), bad=draw(st.sampled_from(HOSTILE_BYTES)))
    elif target == "array":
        plan.update(how=draw(st.sampled_from(("truncate", "flip", "garbage", "empty",
                                              "directory", "fifo", "delete", "npz",
                                              "pickle", "giant"))),
                    cut=draw(st.floats(0, 1)), fix=draw(st.booleans()),
                    shape=draw(st.sampled_from(GIANT_SHAPES)))
    elif target == "array lie":  # a wrong array whose size and checksum meta.json agrees with
        plan.update(variant=draw(st.integers(0, 2**32 - 1)))
    else:
        plan.update(how=draw(st.sampled_from(("delete", "swap", "extra"))))
    return plan


def make_special(path: Path, kind: str) -> None:
    """A directory, or a FIFO (whose open blocks without a writer), where a file belongs."""
    if kind == "directory":
        path.mkdir()
    else:
        os.mkfifo(path)


def plant(d: Path, rel: str, data: bytes, fix: bool = True) -> None:
    """Write ``data`` to ``d / rel``; with ``fix``, also make meta.json agree with it."""
    (d / rel).write_bytes(data)
    if fix:
        meta = json.loads((d / "meta.json").read_text())
        meta["files"][rel] = {"bytes": len(data), "sha256": sha256(d / rel)}
        (d / "meta.json").write_text(json.dumps(meta))


def apply_partition_plan(d: Path, plan: dict, marker: Path, draw_array) -> str:
    """Damage ``d`` as ``plan`` says; returns a description of what was done."""
    meta_path = d / "meta.json"
    meta = json.loads(meta_path.read_text())
    target, rel = plan["target"], f"part-{plan['rank']:05d}/{plan['name']}.npy"
    if target == "meta field":
        if plan["value"] == "delete":
            meta.pop(plan["key"], None)
        else:
            meta[plan["key"]] = plan["value"]
        meta_path.write_text(json.dumps(meta))
        return f"meta.json {plan['key']} = {plan['value']!r}"
    if target == "meta files":
        if plan["how"] == "path":
            meta["files"][plan["path"]] = meta["files"].pop(rel, {"bytes": 0, "sha256": ""})
        elif plan["how"] == "entry":
            meta["files"][rel] = plan["value"]
        else:
            meta["files"].pop(rel, None)
        meta_path.write_text(json.dumps(meta))
        return f"meta.json files: {plan['how']} {rel} {plan['path']!r} {plan['value']!r}"
    if target == "meta bytes":
        how, data = plan["how"], meta_path.read_bytes()
        if how == "damage":
            pos = int(plan["cut"] * len(data))
            meta_path.write_bytes(data[:pos] + plan["bad"] + data[pos + 1:])
        elif how == "deep":
            meta_path.write_text("[" * 100_000 + "]" * 100_000)
        elif how == "digits":  # num_nodes with 5000 more digits: past int()'s limit
            meta_path.write_text(json.dumps(meta).replace('"num_nodes": ',
                                                          '"num_nodes": 1' + "0" * 5000, 1))
        elif how in ("directory", "fifo"):
            meta_path.unlink()
            make_special(meta_path, how)
        else:
            meta_path.unlink()
        return f"meta.json bytes: {how} at {plan['cut']:.3f} with {plan['bad']!r}"
    path = d / rel
    if target == "array":
        how = plan["how"]
        data = path.read_bytes() if path.is_file() else b""
        if how == "truncate":
            plant(d, rel, data[:int(plan["cut"] * len(data))], plan["fix"])
        elif how == "flip":
            flipped = bytearray(data or b"\0")
            flipped[int(plan["cut"] * (len(flipped) - 1))] ^= 0x5A
            plant(d, rel, bytes(flipped), plan["fix"])
        elif how == "garbage":
            plant(d, rel, np.random.default_rng(7).bytes(200), plan["fix"])
        elif how == "empty":
            plant(d, rel, b"", plan["fix"])
        elif how in ("directory", "fifo"):
            path.unlink(missing_ok=True)
            make_special(path, how)
        elif how == "delete":
            path.unlink(missing_ok=True)
        elif how == "npz":
            plant(d, rel, npz_bytes(x=np.ones(3)), plan["fix"])
        elif how == "pickle":
            plant(d, rel, npy_bytes(marker_payload(marker)), plan["fix"])
        else:
            plant(d, rel, giant_npy(plan["shape"], "<i8"), plan["fix"])
        return f"{rel}: {how} at {plan['cut']:.3f}, checksum {'fixed' if plan['fix'] else 'kept'}"
    if target == "array lie":
        if not path.is_file():
            return f"{rel}: absent, left so"
        array, how = draw_array(np.load(path, allow_pickle=False))
        plant(d, rel, npy_bytes(array))
        return f"{rel}: {how} -> {array!r}, checksum fixed"
    part = d / f"part-{plan['rank']:05d}"
    if plan["how"] == "delete":
        shutil.rmtree(part)
    elif plan["how"] == "swap":
        other = d / f"part-{(plan['rank'] + 1) % 3:05d}"
        part.rename(d / "swap")
        other.rename(part)
        (d / "swap").rename(other)
    else:
        shutil.copytree(part, d / "part-00003")
    return f"{part.name}: {plan['how']}"


def check_partition(part, meta: dict) -> None:
    """The invariants of a loaded partition (as for a dataset, on its local CSR)."""
    check_graph(part.graph)
    n = part.num_nodes
    assert np.asarray(part.global_ids).dtype == np.int64 and part.global_ids.shape == (n,)
    check_node_arrays(n, part.x, part.y, [getattr(part, m) for m in MASKS],
                      meta.get("num_classes", np.iinfo(np.int64).max))
    assert part.x.shape[1] == meta.get("num_features", part.x.shape[1])


def check_partition_set(result) -> None:
    """The invariants of ``docs/partition-format.md``, restated plainly for ``(meta, parts)``:
    every vertex held and rooted once, every edge once, clones agreeing on features, labels
    and global in-degree, masks only at roots, root pointers and leaf tables right."""
    meta, parts = result
    n = meta["num_nodes"]
    assert len(parts) == meta["num_parts"]
    held, roots, in_degree, edges = set(), collections.Counter(), collections.Counter(), []
    for p, part in enumerate(parts):
        ids = part.global_ids.tolist()
        src, dst = part.graph.edges()
        edges += [(ids[s], ids[d]) for s, d in zip(src.tolist(), dst.tolist())]
        in_degree.update(ids[d] for d in dst.tolist())
        held.update(ids)
        roots.update(ids[i] for i in np.flatnonzero(part.root_rank == p))
    assert held == set(range(n)) and all(roots[v] == 1 for v in range(n))
    assert len(edges) == meta["num_edges"]
    assert meta.get("multigraph") or len(set(edges)) == len(edges)
    for p, part in enumerate(parts):
        for i, v in enumerate(part.global_ids.tolist()):
            assert part.in_degree[i] == in_degree[v]
            root, j = parts[part.root_rank[i]], part.root_local[i]
            assert root.global_ids[j] == v
            assert np.array_equal(part.x[i], root.x[j]) and part.y[i] == root.y[j]
            if root is not part:
                assert not any(getattr(part, m)[i] for m in MASKS)
        assert part.leaf_ptr[p] == part.leaf_ptr[p + 1]
        for q, peer in enumerate(parts):
            leaves = np.flatnonzero(peer.root_rank == p) if q != p else []
            entries = slice(part.leaf_ptr[q], part.leaf_ptr[q + 1])
            assert part.leaf_remote_local[entries].tolist() == list(leaves)
            assert part.leaf_root_local[entries].tolist() == peer.root_local[leaves].tolist()


def open_partitions(d: Path) -> tuple[dict, list]:
    """verify ``d`` (which loads every partition memory-mapped), then load every partition
    into memory.

    Each loaded partition must pass :func:`check_partition` even when ``verify`` finds
    problems (``load`` does not hash).  The first problem found is raised as a
    PartitionFormatError after every load was tried; without one, returns meta.json and
    the partitions.
    """
    problems = partition.verify(d)
    meta = partition.read_meta(d)
    parts = []
    for rank in range(meta["num_parts"]):
        try:
            parts.append(partition.load(d, rank, mmap=False))
        except DistGNNError as e:
            problems.append(str(e))
            continue
        check_partition(parts[-1], meta)
    for problem in problems:
        assert message_problem(problem, [d]) is None, message_problem(problem, [d])
    if problems:
        raise PartitionFormatError(problems[0])
    return meta, parts


@fuzz(st.tuples(partition_cases(), st.data()))
def test_partition(good_partitions, case):
    plan, data = case
    with tempfile.TemporaryDirectory() as tmp:
        d, marker = Path(tmp) / "parts", Path(tmp) / "pickle-ran"
        shutil.copytree(good_partitions, d)
        what = apply_partition_plan(d, plan, marker, lambda a: data.draw(hostile_array(a)))
        run_case("partition", what, lambda: open_partitions(d), check_partition_set,
                 names=[d], marker=marker)


# ---- 6. generator specs -------------------------------------------------------------------------
# sizes that fit no machine's memory (not merely a large one: accepting those is right),
# values that are not integers or not finite, malformed text
HOSTILE_SPEC_VALUES = ("-1", "0", "31", "60", "1000000000000", "9223372036854775808",
                       "1e300", "nan", "inf", "-inf", "1e3", "", "abc", "1.5", "1_0",
                       "9" * 5000)
SPEC_VALUES = {  # small valid values, so that an accepted spec generates in milliseconds
    "rmat": {"scale": st.integers(1, 8), "edge_factor": st.integers(1, 8),
             "features": st.integers(1, 16), "classes": st.integers(1, 10),
             "a": st.floats(0, 0.6), "b": st.floats(0, 0.2), "c": st.floats(0, 0.2),
             "seed": st.integers(0, 2**64)},
    "sbm": {"nodes": st.integers(1, 300), "blocks": st.integers(1, 8),
            "avg_degree": st.floats(0.1, 20), "p_in": st.floats(0, 1),
            "degree_exponent": st.floats(1.5, 4), "features": st.integers(8, 16),
            "noise": st.floats(0, 2), "seed": st.integers(0, 2**64)},
}


@st.composite
def generator_specs(draw):
    kind = draw(st.sampled_from(tuple(SPEC_VALUES)))
    items = []
    for key, valid in SPEC_VALUES[kind].items():
        choice = draw(st.sampled_from(("default", "valid", "valid", "hostile")))
        if choice == "valid":
            items.append(f"{key}={draw(valid)}")
        elif choice == "hostile":
            items.append(f"{key}={draw(st.sampled_from(HOSTILE_SPEC_VALUES))}")
    if draw(st.booleans()):
        items.insert(draw(st.integers(0, len(items))),
                     draw(st.sampled_from(("bogus=1", "scale", "=3", "", " ", "nodes=1=2"))))
    return f"{kind}:{','.join(items)}"


@fuzz(generator_specs())
def test_generator_spec(spec):
    run_case("generator spec", spec[:200], lambda: load(spec), check_dataset,
             names=[spec.partition(":")[0]])


# ---- 7. the bugs this suite found, kept as explicit cases ---------------------------------------
def write(path: Path, data: bytes) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return path


def file_with(tmp: Path, name: str, data: bytes):
    """``load`` of a file ``name`` holding ``data``."""
    path = write(tmp / name, data)
    return lambda: load(path), [path]


def edges_with(tmp: Path, text: str, **side: bytes):
    """``load`` of the edge list ``text`` with side files named ``features``/``labels``."""
    path = write(tmp / "edges.txt", text.encode())
    files = {name: write(tmp / f"{name}.npy", data) for name, data in side.items()}
    return lambda: load(path, **files), [path, *files.values()]


def ogb_with(tmp: Path, change):
    root = make_ogb(tmp / "ogbn-toy", ["0", "1", "2", "1", "0", "nan"], num_nodes_file=True)
    change(root)
    return lambda: load(root), [root]


def partitions_with(tmp: Path, good: Path, change):
    d = tmp / "parts"
    shutil.copytree(good, d)
    change(d)
    return lambda: open_partitions(d), [d]


def set_meta(d: Path, **fields) -> None:
    meta = json.loads((d / "meta.json").read_text())
    meta.update(fields)
    (d / "meta.json").write_text(json.dumps(meta))


def lie(d: Path, rel: str, change) -> None:
    """Rewrite one array through ``change`` and make meta.json agree (a consistent lie)."""
    plant(d, rel, npy_bytes(change(np.load(d / rel, allow_pickle=False).copy())))


def shifted(a: np.ndarray) -> np.ndarray:
    a[0] += 1
    return a


def without_features(root: Path) -> None:
    (root / "raw/node-feat.csv.gz").unlink()
    (root / "raw/num-node-list.csv.gz").write_bytes(gzip.compress(b"1000000000000\n"))


def node_feat_directory(root: Path) -> None:
    (root / "raw/node-feat.csv.gz").unlink()
    (root / "raw/node-feat.csv.gz").mkdir()


# loader -> [(what the loader did before, (tmp_path, good partitions) -> (call, names))];
# each must now be refused cleanly
REGRESSIONS = {
    "graph builders": [
        ("unsigned indptr that decreases passed as monotone",
         lambda tmp, good: (lambda: CSRGraph(np.array([0, 2, 1, 3], np.uint64),
                                             np.array([0, 1, 0]), source=SOURCE), [SOURCE])),
        ("num_nodes 10**12: MemoryError",
         lambda tmp, good: (lambda: CSRGraph.from_edges([0], [1], 10**12, source=SOURCE),
                            [SOURCE])),
        ("num_nodes nan: ValueError",
         lambda tmp, good: (lambda: CSRGraph.from_edges([0], [1], float("nan"), source=SOURCE),
                            [SOURCE])),
        ("from_scipy of None: ValueError",
         lambda tmp, good: (lambda: CSRGraph.from_scipy(None, SOURCE), [SOURCE])),
    ],
    "npz": [
        ("member header declaring 10**12 floats: MemoryError",
         lambda tmp, good: file_with(tmp, "giant.npz", npz_members(
             {"x.npy": giant_npy((10**12,), "<f4")}))),
    ],
    "edge list": [
        ("a directory: IsADirectoryError",
         lambda tmp, good: (lambda: read_edge_list(tmp), [tmp])),
        ("a cut gzip stream: EOFError",
         lambda tmp, good: file_with(tmp, "e.txt.gz", gzip.compress(b"0 1\n" * 99)[:-12])),
        ("plain text named .gz: BadGzipFile",
         lambda tmp, good: file_with(tmp, "e.txt.gz", b"0 1\n")),
        ("a character device: an endless read",
         lambda tmp, good: (lambda: load("/dev/zero"), ["/dev/zero"])),
        ("features from a character device: an endless read",
         lambda tmp, good: (lambda: load(write(tmp / "e.txt", b"0 1\n"),
                                         features="/dev/zero"), ["/dev/zero"])),
        ("vertex id 10**12: MemoryError",
         lambda tmp, good: edges_with(tmp, "0 1000000000000\n")),
        ("labels in a bool .npy, read as 0/1",
         lambda tmp, good: edges_with(tmp, "0 1\n", labels=npy_bytes(np.array([True, False])))),
        ("features .npy declaring 10**12 floats: MemoryError",
         lambda tmp, good: edges_with(tmp, "0 1\n", features=giant_npy((10**12, 2), "<f4"))),
    ],
    "ogb": [
        ("num-node-list of 10**12 without features: MemoryError",
         lambda tmp, good: ogb_with(tmp, without_features)),
        ("node-feat.csv.gz a directory: silently no features",
         lambda tmp, good: ogb_with(tmp, node_feat_directory)),
    ],
    "partition": [
        ("num_parts \"3\": TypeError",
         lambda tmp, good: partitions_with(tmp, good, lambda d: set_meta(d, num_parts="3"))),
        ("num_nodes 10**12: MemoryError in verify",
         lambda tmp, good: partitions_with(tmp, good, lambda d: set_meta(d, num_nodes=10**12))),
        ("meta.json nested 100000 deep: RecursionError",
         lambda tmp, good: partitions_with(tmp, good, lambda d: (d / "meta.json").write_text(
             "[" * 100_000 + "]" * 100_000))),
        ("x.npy as float64: accepted",
         lambda tmp, good: partitions_with(tmp, good, lambda d: lie(
             d, "part-00000/x.npy", lambda a: a.astype(np.float64)))),
        ("num_features that x.npy does not have: accepted",
         lambda tmp, good: partitions_with(tmp, good, lambda d: set_meta(d, num_features=9))),
        ("in_degree that the edges do not give: accepted",
         lambda tmp, good: partitions_with(tmp, good, lambda d: lie(
             d, "part-00001/in_degree.npy", shifted))),
        ("an .npz archive as an array file: AttributeError",
         lambda tmp, good: partitions_with(tmp, good, lambda d: plant(
             d, "part-00000/y.npy", npz_bytes(y=np.zeros(3))))),
    ],
    "generator spec": [
        ("seed=-1: ValueError", lambda tmp, good: (lambda: load("rmat:scale=4,seed=-1"),
                                                   ["rmat"])),
        ("avg_degree=1e300: ValueError",
         lambda tmp, good: (lambda: load("sbm:nodes=10,avg_degree=1e300"), ["sbm"])),
        ("scale=31: MemoryError",
         lambda tmp, good: (lambda: load("rmat:scale=31"), ["rmat"])),
    ],
}


def refused(result) -> None:
    raise AssertionError(f"accepted {result!r}")


@pytest.mark.parametrize("loader, what, make", [
    (loader, what, make) for loader, cases in REGRESSIONS.items() for what, make in cases],
    ids=lambda value: value if isinstance(value, str) else "")
def test_regressions(good_partitions, tmp_path, loader, what, make):
    call, names = make(tmp_path, good_partitions)
    run_case(loader, what, call, refused, names=names)
