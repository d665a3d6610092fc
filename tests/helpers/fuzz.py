"""The hostile-input fuzz harness: outcome counts per loader, the settings of every fuzz
test, the hostile values the strategies draw from, and :func:`run_case`, which sorts a
case's outcome into ``clean`` (a one-line error naming the input), ``accepted`` (a result
that passes its invariants) or a failure.

``tests/conftest.py`` sets :data:`SETTINGS` and :data:`SEED` from the command line before
the suite is collected, and prints the counts (:mod:`tests.helpers.fuzz_report`) at the end
of the session.
"""
import contextlib
import io
import json
import signal
import warnings
import zipfile
from pathlib import Path

import numpy as np
from hypothesis import HealthCheck, given, seed, settings
from hypothesis import strategies as st

import partition
from distgnn.data.datasets import load
from distgnn.data.graph import CSRGraph, NodeDataset
from distgnn.data.partitions import MASKS, PartitionFormatError, sha256
from distgnn.errors import DistGNNError
from tests.helpers import fuzz_report
from tests.helpers.datasets import Payload
from tests.helpers.fuzz_report import COUNTS, FAILURES, OUTCOMES, record  # noqa: F401
from tests.helpers.partitions import write_dir

# hypothesis settings of every fuzz test and the seed of a non-default run (None: the fixed
# derandomized sequence); replaced by configure()
SETTINGS = settings()
SEED: int | None = None


def configure(examples: int, seed: int | None) -> None:
    """Run ``examples`` cases per fuzz test; derandomized (the same cases every run, as CI
    needs) unless ``seed`` is given.  Cases write files and run loaders, so there is no
    per-example deadline (the suite's own per-case timeout catches hangs) and hypothesis
    is not asked to find them fast."""
    global SETTINGS, SEED
    SETTINGS = settings(max_examples=examples, deadline=None, derandomize=seed is None,
                        database=None, suppress_health_check=[HealthCheck.too_slow])
    SEED = seed
    fuzz_report.EXAMPLES, fuzz_report.SEED = examples, seed


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
# values of JSON fields (meta.json, checkpoint manifests)
HOSTILE_JSON = (-1, 0, 1, 2, 4, 10**12, 2**63, 2**64, "3", 3.5, None, True, [], {},
                float("nan"), float("inf"), "x" * 10)
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
    record(loader, outcome, f"{case}: {problem}" if problem else "")
    assert problem is None, f"{loader}: {case}: {problem}"


def fuzz(strategy, share: float = 1.0):
    """``@given(strategy)`` under the session's settings (``--fuzz-examples``, ``--fuzz-seed``),
    with ``share`` of the examples for a test whose cases are expensive."""
    def wrap(test):
        examples = max(1, round(SETTINGS.max_examples * share))
        test = settings(SETTINGS, max_examples=examples)(given(strategy)(test))
        return test if SEED is None else seed(SEED)(test)
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
    assert n == 0 or (y.min() >= -1 and y.max() < num_classes)  # -1: unlabelled
    masks = [np.asarray(m) for m in masks]
    for m in masks:
        assert m.dtype == np.bool_ and m.shape == (n,) and not np.any(m & (y == -1))
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
        # numpy refuses some casts with a RuntimeError (datetimes to a string too short
        # for their ISO form): the array stays as it was, as for the others
        with warnings.catch_warnings(), contextlib.suppress(ValueError, TypeError,
                                                             RuntimeError):
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
    return np.array([Payload(marker)], dtype=object)


# ---- partition directories --------------------------------------------------------------------
SOURCE = "builder-input"  # the source name of graphs built from arrays


def write_good_partitions(out: Path) -> Path:
    """A valid 3-partition directory of a small weighted SBM graph at ``out`` (the fixture
    ``good_partitions``; every case copies it)."""
    ds = load("sbm:nodes=60,blocks=3,features=4,avg_degree=4,seed=1")
    g = ds.graph
    weighted = CSRGraph(g.indptr, g.indices, g.num_nodes,
                        np.linspace(0.5, 2, g.num_edges, dtype=np.float32))
    ds = NodeDataset(weighted, ds.x, ds.y, ds.train_mask, ds.val_mask, ds.test_mask,
                     ds.num_classes, "sbm-weighted")
    write_dir(ds, out, 3)
    return out


def check_partition(part, meta: dict) -> None:
    """The invariants of a loaded partition (as for a dataset, on its local CSR)."""
    check_graph(part.graph)
    n = part.num_nodes
    assert np.asarray(part.global_ids).dtype == np.int64 and part.global_ids.shape == (n,)
    check_node_arrays(n, part.x, part.y, [getattr(part, m) for m in MASKS],
                      meta.get("num_classes", np.iinfo(np.int64).max))
    assert part.x.shape[1] == meta.get("num_features", part.x.shape[1])


def plant(d: Path, rel: str, data: bytes, fix: bool = True) -> None:
    """Write ``data`` to ``d / rel``; with ``fix``, also make meta.json agree with it."""
    (d / rel).write_bytes(data)
    if fix:
        meta = json.loads((d / "meta.json").read_text())
        meta["files"][rel] = {"bytes": len(data), "sha256": sha256(d / rel)}
        (d / "meta.json").write_text(json.dumps(meta))


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
