"""Hostile partition directories: damaged, forged and special files of the on-disk format
(the harness and the table: ``tests/helpers/fuzz.py``)."""
import collections
import json
import os
import shutil
import tempfile
from pathlib import Path

import numpy as np
from hypothesis import strategies as st

from distgnn.data.partitions import MASKS, OPTIONAL_FILES, PART_FILES
from tests.helpers.fuzz import (
    GIANT_SHAPES,
    HOSTILE_BYTES,
    HOSTILE_JSON,
    fuzz,
    giant_npy,
    hostile_array,
    marker_payload,
    npy_bytes,
    npz_bytes,
    open_partitions,
    plant,
    run_case,
)

# ---- 5. partition directories -------------------------------------------------------------------
META_KEYS = ("format", "format_version", "num_parts", "num_nodes", "num_edges",
             "num_features", "num_classes", "multigraph", "files")
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


@fuzz(st.tuples(partition_cases(), st.data()))
def test_partition(good_partitions, case):
    plan, data = case
    with tempfile.TemporaryDirectory() as tmp:
        d, marker = Path(tmp) / "parts", Path(tmp) / "pickle-ran"
        shutil.copytree(good_partitions, d)
        what = apply_partition_plan(d, plan, marker, lambda a: data.draw(hostile_array(a)))
        run_case("partition", what, lambda: open_partitions(d), check_partition_set,
                 names=[d], marker=marker)


