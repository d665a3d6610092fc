r"""Per-vertex predictions and embeddings, written once per vertex by all ranks at once.

The rows are in the user's vertex ids.

A partitioned run holds each vertex on several ranks (its root clone and leaf clones); the
root clone's rank writes the vertex's row, so every vertex appears exactly once.  No rank
ever holds the rows of the whole graph in memory:

1. rank 0 creates, beside the target, a hidden staging folder ``.NAME.tmp-PID-rows`` of
   ``.npy`` files of the full shape ``[N, ...]`` (memory-mapped, not filled in memory);
2. every rank writes its root clones' rows at their global positions into those files,
   memory-mapped (the target's directory must be one every rank sees, as
   ``--checkpoint-dir``'s);
3. the ranks count the rows written: every vertex exactly once, or the write is refused;
4. rank 0 turns the staged files into the target, streaming them in blocks of
   :data:`BLOCK_ROWS` rows: an ``.npy`` is renamed into place, an ``.npz`` and a ``.csv``
   are written beside the target and renamed over it (:mod:`distgnn.storage`'s rules), then
   the staging folder is removed.  A run killed at any point leaves the target as it was;
   its hidden leftovers are removed by the next writer of the same target.

Formats (``--predictions-out``, by extension): ``.csv`` with a header
``vertex,predicted_class,p_0,...,p_{C-1}``, one row per vertex in global order; ``.npz``
with ``vertex`` ``[N]`` (the user's ids), ``predicted_class`` int64 ``[N]`` and
``probabilities`` float32 ``[N, C]`` (softmax of the logits).  ``--embeddings-out``: a
float32 ``.npy`` ``[N, d]`` whose row ``i`` is the vertex of global id ``i`` (the user's id
``vertex[i]`` of the predictions, or the ``i``-th vertex of the dataset).
"""
from __future__ import annotations

import csv
import os
import shutil
import zipfile
from pathlib import Path
from typing import Callable

import numpy as np
import torch

from ..comm import Communicator, all_or_none
from ..errors import DistGNNError
from ..storage import (
    check_output_file,
    check_replaceable,
    file_head,
    fsync_path,
    remove_leftovers,
    temp_path,
    write_failed,
)

PREDICTION_SUFFIXES = (".csv", ".npz")
EMBEDDING_SUFFIXES = (".npy",)
CSV_HEAD = "vertex,predicted_class"
NPZ_MEMBERS = frozenset({"vertex.npy", "predicted_class.npy", "probabilities.npy"})
BLOCK_ROWS = 1 << 16  # rows converted at a time: bounds rank 0's memory whatever N is


def is_predictions_file(path: Path) -> bool:
    """A predictions file this module wrote (its CSV header, or its ``.npz`` members)."""
    if path.suffix == ".csv":
        return file_head(path, 64).startswith(CSV_HEAD.encode())
    try:
        with zipfile.ZipFile(path) as z:
            return set(z.namelist()) == NPZ_MEMBERS
    except (zipfile.BadZipFile, OSError):
        return False


def _never(path: Path) -> bool:
    return False


def check_outputs(predictions: str | None, embeddings: str | None) -> None:
    """At start-up: the paths can be written, have a known extension, and replace nothing
    but an earlier predictions file (an existing embeddings ``.npy`` is not recognisable
    as ours -- a features file is one too -- and is never replaced)."""
    for path, flag, suffixes, recognise, what in (
            (predictions, "--predictions-out", PREDICTION_SUFFIXES, is_predictions_file,
             "a predictions file written by distgnn"),
            (embeddings, "--embeddings-out", EMBEDDING_SUFFIXES, _never,
             "to be replaced (embeddings are never written over an existing file)")):
        if path is None:
            continue
        if Path(path).suffix not in suffixes:
            raise DistGNNError(f"{flag} {path}: the name must end in "
                               f"{' or '.join(suffixes)} (the format)")
        check_replaceable(check_output_file(path, flag), recognise, what)


def write_rows(comm: Communicator, target: str | Path, rows: dict[str, np.ndarray],
               positions: np.ndarray, num_vertices: int,
               user_ids: Callable[[], np.ndarray | None]) -> None:
    """Write this rank's ``rows`` as its part of the file ``target``.

    ``rows`` is ``{name: [n_p, ...]}``, one row per vertex this rank is the root clone of, at
    global ids ``positions`` ``[n_p]`` (see the module docstring).  ``rows`` names
    ``probabilities`` (then a predictions file) or ``embeddings``; ``user_ids()`` (rank 0
    only) gives the user's ids ``[N]`` in global order (``None``: ``0..N-1``).  Collective:
    every rank calls it with the same target and names; a failure on any rank raises on all.
    """
    target = Path(target)
    names = sorted(rows)
    shapes = {name: (num_vertices, *rows[name].shape[1:]) for name in names}
    dtypes = {name: rows[name].dtype for name in names}
    pid = torch.tensor([float(os.getpid())], dtype=torch.float64)
    comm.broadcast(pid)  # the staging folder is named by rank 0's process
    # temp_path's name with rank 0's process: remove_leftovers knows it once that is gone
    staging = target.parent / f".{target.name}.tmp-{int(pid[0])}-rows"

    existed = target.exists()

    def failing_as_one_line(step):
        def run():
            try:
                return step()
            except OSError as e:  # a full disk, a quota: the file, and that it was kept
                raise write_failed(target, e, existed) from None
        return run

    @failing_as_one_line
    def create():
        if comm.rank == 0:
            remove_leftovers(target)
            staging.mkdir()
            for name in names:
                path = staging / f"{name}.npy"
                np.lib.format.open_memmap(path, "w+", dtypes[name], shapes[name]).flush()
                claim(path)

    @failing_as_one_line
    def fill():
        for name in names:
            out = np.lib.format.open_memmap(staging / f"{name}.npy", "r+")
            if out.shape != shapes[name] or out.dtype != dtypes[name]:
                raise DistGNNError(f"{target}: ranks disagree on the shape of {name}")
            out[positions] = rows[name]
            out.flush()
            del out
        return len(positions)

    try:
        all_or_none(comm, create)
        written = torch.tensor([float(all_or_none(comm, fill))], dtype=torch.float64)
        comm.allreduce(written)
        if int(written[0]) != num_vertices:
            raise DistGNNError(f"{target}: the ranks' root clones hold {int(written[0])} of "
                               f"{num_vertices} vertices; the partitions are inconsistent "
                               "(distgnn-partition verify DIR)")
        all_or_none(comm, failing_as_one_line(
            lambda: comm.rank != 0 or _finish(staging, target, user_ids)))
    finally:
        if comm.rank == 0:
            shutil.rmtree(staging, ignore_errors=True)


def claim(path: Path) -> None:
    """Give the file ``path`` all of its blocks now, so that a full disk fails here with
    ``ENOSPC`` rather than later as a fault: a store through a memory map into a block the
    disk cannot give kills the process (SIGBUS)."""
    with open(path, "r+b") as f:
        os.posix_fallocate(f.fileno(), 0, path.stat().st_size)


def _finish(staging: Path, target: Path, user_ids: Callable[[], np.ndarray | None]) -> bool:
    """Rank 0: the staged ``.npy`` files as ``target`` in its format."""
    if target.suffix == ".npy":
        os.replace(staging / "embeddings.npy", target)
        fsync_path(target.absolute().parent)
        return True
    probabilities = np.load(staging / "probabilities.npy", mmap_mode="r")
    ids = user_ids()
    if ids is None:
        ids = np.arange(len(probabilities), dtype=np.int64)
    tmp = temp_path(target)
    try:
        if target.suffix == ".csv":
            _write_csv(tmp, ids, probabilities)
        else:
            _write_npz(tmp, ids, probabilities)
        os.replace(tmp, target)
        fsync_path(target.absolute().parent)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return True


def _blocks(n: int):
    for start in range(0, n, BLOCK_ROWS):
        yield slice(start, min(n, start + BLOCK_ROWS))


def _write_csv(path: Path, ids: np.ndarray, probabilities: np.ndarray) -> None:
    classes = probabilities.shape[1]
    with open(path, "w", encoding="utf-8", newline="") as f:
        out = csv.writer(f, lineterminator="\n")  # quotes an id holding a comma or quote
        out.writerow([*CSV_HEAD.split(","), *(f"p_{c}" for c in range(classes))])
        for block in _blocks(len(ids)):
            p = np.asarray(probabilities[block])
            out.writerows(zip(np.asarray(ids[block]).tolist(), p.argmax(1).tolist(),
                              *np.char.mod("%.6g", p).T))
        f.flush()
        os.fsync(f.fileno())


def _write_npz(path: Path, ids: np.ndarray, probabilities: np.ndarray) -> None:
    staged = Path(str(path) + "-class.npy")
    predicted = np.lib.format.open_memmap(staged, "w+", np.int64, (len(probabilities),))
    try:
        claim(staged)
        for block in _blocks(len(probabilities)):
            predicted[block] = np.asarray(probabilities[block]).argmax(1)
        predicted.flush()
        with zipfile.ZipFile(path, "w", zipfile.ZIP_STORED, allowZip64=True) as z:
            for name, array in (("vertex", ids), ("predicted_class", predicted),
                                ("probabilities", probabilities)):
                with z.open(f"{name}.npy", "w", force_zip64=True) as member:
                    np.lib.format.write_array(member, np.asanyarray(array),
                                              allow_pickle=False)
        with open(path, "rb+") as f:
            os.fsync(f.fileno())
    finally:
        del predicted
        staged.unlink(missing_ok=True)

