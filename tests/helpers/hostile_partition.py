"""Hostile cases of the partition format and ``distgnn-partition``: forged partitions that
look consistent (9), tracebacks on bad input (15) and figures that cannot be (17)."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from tests.helpers.hostile import (
    Case,
    Outcome,
    Runner,
    both,
    data,
    edit_array,
    forged,
    partition,
    tool,
    write_npz,
)


def set_meta(directory: Path, reseal: bool = False, **fields) -> None:
    """Change fields of ``meta.json``; with ``reseal``, also its ``fields_sha256`` (what a
    careful forger does; a directory without one gets none)."""
    meta = json.loads((directory / "meta.json").read_text())
    meta.update(fields)
    if reseal and "fields_sha256" in meta:
        from partition.format import fields_sha256

        meta["fields_sha256"] = fields_sha256(meta)
    (directory / "meta.json").write_text(json.dumps(meta))


def reseal_fields(directory: Path) -> None:
    """Recompute ``fields_sha256`` of ``meta.json`` after an edit of its fields."""
    set_meta(directory, reseal=True)


def leaf(directory: Path) -> int:
    """A local id, on partition 1, of a leaf (a split vertex whose root is elsewhere)."""
    return int(np.flatnonzero(np.load(directory / "part-00001" / "root_rank.npy") != 1)[0])


def root(directory: Path) -> int:
    """A local id, on partition 1, of a root."""
    return int(np.flatnonzero(np.load(directory / "part-00001" / "root_rank.npy") == 1)[0])


def at(index: int, value):
    """An array change: ``a[index] = value`` on a copy."""
    def change(a):
        a = a.copy()
        a[index] = value
        return a
    return change


def train_mask_at_leaf(directory):
    edit_array(directory, "part-00001/train_mask.npy", at(leaf(directory), True))


def leaf_features_changed(directory):
    v = leaf(directory)
    edit_array(directory, "part-00001/x.npy", at(v, np.load(directory / "part-00001/x.npy")[v]
                                                  + 0.5))


def root_points_elsewhere(directory):
    r = root(directory)
    edit_array(directory, "part-00001/root_local.npy", at(r, r + 1))


def more_classes(directory):
    set_meta(directory, num_classes=json.loads((directory / "meta.json").read_text())
             ["num_classes"] + 1)


def verify_case(name: str, forge, says: str, *extra, dataset: bool = False):
    """``distgnn-partition verify`` (with ``--dataset`` the input) of a forged 2-partition
    directory (``extra``: partitioner flags); it must exit 1 naming the problem."""
    def setup(tmp, run):
        write_npz(tmp / "d.npz", n=200)
        partition(run, tmp / "d.npz", 2, tmp / "p", *extra)
        forge(tmp / "p")

    argv = ("verify", "{tmp}/p") + (("--dataset", "{tmp}/d.npz") if dataset else ())
    return Case(9, name, tool("partition", *argv), setup, status=1, says=says)


CASES: list[Case] = []
add = CASES.append

# 9. forged partitions that look consistent: training checks each partition as it loads it
add(forged("a train mask set at a leaf", train_mask_at_leaf, "train_mask"))
add(forged("a leaf's features differ from its root's", leaf_features_changed,
           "other features"))
add(forged("a root that points at another vertex", root_points_elsewhere, "root_local"))
add(forged("num_classes raised by one in meta.json", more_classes, "fields_sha256"))
add(verify_case("verify: num_classes raised by one", more_classes, "fields_sha256"))
add(verify_case("verify --dataset: num_classes raised by one, resealed",
                lambda d: (more_classes(d), reseal_fields(d)), "num_classes", dataset=True))
add(verify_case("verify: an unknown vertex_order", lambda d: set_meta(
    d, reseal=True, vertex_order="spiral"), "vertex_order"))
add(verify_case("verify: 'given' on a reordered directory", lambda d: set_meta(
    d, reseal=True, vertex_order="given", vertex_order_requested="given"), "not increasing",
    "--order-vertices", "degree"))
add(verify_case("verify: a negative weight", lambda d: set_meta(
    d, reseal=True, weights=[-1.0, 1.0]), "weights", "--weights", "1,1"))
add(verify_case("verify: a weight of zero", lambda d: set_meta(
    d, reseal=True, weights=[0.0, 1.0]), "weights", "--weights", "1,1"))
add(verify_case("verify: split_vertices forged", lambda d: set_meta(
    d, reseal=True, split_vertices=0), "split vertices"))

# 15. no traceback, no crash: one line naming the flag
TINY = data("tiny.npz", n=6)  # 6 vertices: at most 6 partitions hold one
add(Case(15, "--seed 2^64", tool("partition", "{tmp}/d.npz", "--parts", 2, "--out", "{tmp}/p",
                                 "--seed", 2**64), data(), says="--seed"))
add(Case(15, "--seed -1", tool("partition", "{tmp}/d.npz", "--parts", 2, "--out", "{tmp}/p",
                               "--seed", -1), data(), says="--seed"))


def api_seed(tmp, run: Runner) -> Outcome:
    return run.python(
        "import sys\n"
        "from distgnn.datasets import load\n"
        "from partition import PartitionError, vertex_cut\n"
        f"g = load({str(tmp / 'd.npz')!r}).graph\n"
        "try:\n"
        "    vertex_cut(g, 2, seed=2**64)\n"
        "except PartitionError as e:\n"
        "    print(e, file=sys.stderr)\n"
        "    sys.exit(2)\n")


add(Case(15, "vertex_cut(seed=2^64) from Python", api_seed, data(), says="--seed"))
add(Case(15, "more partitions than the graph fills",
         tool("partition", "{tmp}/tiny.npz", "--parts", 8, "--out", "{tmp}/p"), TINY,
         says="no vertices"))
add(Case(15, "more partitions than the graph fills, rcm order",
         tool("partition", "{tmp}/tiny.npz", "--parts", 8, "--out", "{tmp}/p",
              "--order-vertices", "rcm"), TINY, says="no vertices"))
add(Case(15, "a weight that leaves a partition empty",
         tool("partition", "{tmp}/d.npz", "--parts", 2, "--out", "{tmp}/p", "--method",
              "random", "--weights", "1,1e-9"), data(), says="--weights"))


# 17. figures printed that cannot be
def fair_shares(tmp, outcome):
    assert "inf" not in outcome.stdout and "Warning" not in outcome.stderr, outcome.stderr
    rows = [line.split() for line in outcome.stdout.splitlines() if line[:7].strip().isdigit()]
    assert len(rows) == 2 and all(row[-6] == "50.00" for row in rows), outcome.stdout
    meta = json.loads((tmp / "p" / "meta.json").read_text())
    assert meta["requested_shares"] == [0.5, 0.5], meta["requested_shares"]


def memory_not_zero(tmp, outcome):
    assert "predicted memory max 0 MiB" not in outcome.stdout, outcome.stdout


def split_counted(tmp, outcome):
    assert "split vertices 0.0 %" not in outcome.stdout, outcome.stdout


PARTITIONED = both(data(), lambda tmp, run: partition(run, tmp / "d.npz", 2, tmp / "p"))
add(Case(17, "--weights 1e308,1e308", tool("partition", "{tmp}/d.npz", "--parts", 2, "--out",
                                           "{tmp}/p", "--weights", "1e308,1e308"), data(),
         status=0, check=fair_shares))
add(Case(17, "a small graph's predicted memory", tool("partition", "{tmp}/d.npz", "--parts", 2,
                                                     "--out", "{tmp}/p"), data(), status=0,
         check=memory_not_zero))
add(Case(17, "--weights 1,1e-300", tool("partition", "{tmp}/d.npz", "--parts", 2, "--out",
                                        "{tmp}/p", "--weights", "1,1e-300"), data(),
         says="--weights"))
for flag, value in (("--width", -5), ("--width", 0), ("--hidden", 0), ("--layers", 0)):
    add(Case(17, f"inspect {flag} {value}", tool("partition", "inspect", "{tmp}/p", flag,
                                                 value), PARTITIONED, says=flag))
add(Case(17, "partition --hidden -1", tool("partition", "{tmp}/d.npz", "--parts", 2, "--out",
                                           "{tmp}/p", "--hidden", -1), data(), says="--hidden"))
add(Case(17, "inspect: split_vertices forged in meta.json",
         tool("partition", "inspect", "{tmp}/p"),
         both(PARTITIONED, lambda tmp, run: set_meta(tmp / "p", reseal=True, split_vertices=0)),
         status=0, check=split_counted))
