"""The bugs the hostile-input fuzz suite found, kept as explicit cases."""
import gzip
import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from distgnn.data.datasets import load
from distgnn.data.edge_lists import read_edge_list
from distgnn.data.graph import CSRGraph
from tests.helpers.datasets import make_ogb
from tests.helpers.fuzz import (
    SOURCE,
    giant_npy,
    npy_bytes,
    npz_bytes,
    npz_members,
    open_partitions,
    plant,
    run_case,
)


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



def test_a_partition_array_whose_header_does_not_parse_is_one_error(tmp_path):
    """A flipped byte that breaks the .npy header's dictionary reaches numpy's literal
    parser, which raises tokenize's TokenError (neither OSError nor ValueError)."""
    from distgnn.data.partitions import PartitionFormatError, _load_array

    path = tmp_path / "global_ids.npy"
    np.save(path, np.arange(10))
    data = bytearray(path.read_bytes())
    data[data.index(b"}")] = ord("(")
    path.write_bytes(bytes(data))
    with pytest.raises(PartitionFormatError, match="global_ids.npy: unreadable"):
        _load_array(path, mmap=True)
