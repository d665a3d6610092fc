"""Writing a partition directory atomically: all of it on disk, or nothing changed.

The free space is checked first; the files go into a temporary sibling directory that is
renamed into place only when every file and ``meta.json`` (with a SHA-256 per file, and
one of its own other fields) are on disk, so an interrupted run or a full disk never
leaves a directory that loads, and a directory being replaced stays until its replacement
is complete.  The format is :mod:`distgnn.data.partitions`'s."""
from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Iterable

import numpy as np

from ..storage import (
    check_output_dir,
    check_replaceable,
    free_space_problem,
    made_folders,
    remove_leftovers,
    temp_path,
    user_mode,
)
from .partitions import (
    FORMAT_NAME,
    FORMAT_VERSION,
    VERTEX_IDS,
    PartitionFormatError,
    fields_sha256,
    is_partition_directory,
    part_dir,
    sha256,
)

# Bytes a file costs beyond its array: the .npy header, rounding up to a filesystem block,
# its entry in meta.json.
FILE_OVERHEAD = 128 + 4096 + 160


def write_partitions(out: str | Path, parts: Iterable[tuple[int, dict[str, np.ndarray]]],
                     meta: dict, force: bool = False, progress=None,
                     expected_bytes: int = 0, vertex_ids: np.ndarray | None = None) -> Path:
    """Write ``parts`` and ``meta`` as the partition directory ``out``; returns ``out``.

    ``parts`` are ``(p, arrays)`` pairs; ``vertex_ids`` (``[N]``, global-id order) is written
    as ``vertex_ids.npy`` when given.

    Refuses an existing ``out`` unless ``force``, and a write of ``expected_bytes`` (see
    :func:`partition_bytes`) that the filesystem has no room for, before creating anything.
    On any failure (a full disk included) the target is untouched and the temporary
    directory removed; an ``OSError`` becomes a one-line :class:`PartitionFormatError`.
    ``progress`` is called once per partition.
    """
    out = check_target(out, force)
    _check_free_space(out, expected_bytes)
    try:
        with made_folders(out.parent):
            return _write(out, parts, meta, progress, vertex_ids)
    except OSError as e:  # the parent folders could not be made
        raise PartitionFormatError(f"{out}: cannot create a temporary directory beside it: "
                                   f"{e.strerror or e}") from None


def _write(out: Path, parts, meta: dict, progress, vertex_ids) -> Path:
    """:func:`write_partitions` once ``out``'s folder exists."""
    try:
        remove_leftovers(out)
        tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.tmp-{os.getpid()}-", dir=out.parent))
        tmp.chmod(user_mode(directory=True))  # mkdtemp makes it 0700
    except OSError as e:
        raise PartitionFormatError(f"{out}: cannot create a temporary directory beside it: "
                                   f"{e.strerror or e}") from None
    step = "writing the partitions"
    files = {}

    def save(rel: str, array: np.ndarray) -> None:
        nonlocal step
        step = f"writing {rel}"
        with open(tmp / rel, "wb") as f:
            np.save(f, np.ascontiguousarray(array), allow_pickle=False)
            _flush(f)
        files[rel] = {"bytes": (tmp / rel).stat().st_size, "sha256": sha256(tmp / rel)}

    try:
        if vertex_ids is not None:
            save(VERTEX_IDS, vertex_ids)
        for p, arrays in parts:
            (tmp / part_dir(p)).mkdir()
            for name, array in arrays.items():
                save(f"{part_dir(p)}/{name}.npy", array)
            if progress:
                progress(1)
        # through JSON first, so that the digest is of the values a reader gets back
        meta = json.loads(json.dumps({"format": FORMAT_NAME, "format_version": FORMAT_VERSION,
                                      **meta, "files": files}))
        meta["fields_sha256"] = fields_sha256(meta)
        step = "writing meta.json"
        with open(tmp / "meta.json", "wb") as f:
            f.write(json.dumps(meta, indent=1).encode())
            _flush(f)
        step = "renaming it into place"
        _move_into_place(tmp, out)
    except OSError as e:
        shutil.rmtree(tmp, ignore_errors=True)
        raise PartitionFormatError(f"{out}: {step} failed: {e.strerror or e}; nothing was "
                                   "changed") from None
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return out


def check_target(out: str | Path, force: bool) -> Path:
    """``out`` as the target of a partition write: new, or (with ``force``) a partition
    directory this tool wrote; anything else is refused before any work is done."""
    out = Path(out)
    if (out.exists() or out.is_symlink()) and not force:
        raise PartitionFormatError(f"{out} exists; pass --force to replace it")
    check_replaceable(out, is_partition_directory, "a partition directory written by "
                      "distgnn-partition (a distgnn meta.json and part-NNNNN folders only)")
    check_output_dir(out.absolute().parent, "--out")
    return out


def _flush(f) -> None:
    """Push the binary file ``f`` to the disk now and check that all of it got there, so
    that a full disk fails the write here, before the rename that would replace a previous
    directory.  (``np.save`` writes through C stdio and does not report a short write.)"""
    expected = f.tell()
    f.flush()
    os.fsync(f.fileno())
    written = os.fstat(f.fileno()).st_size
    if written != expected:
        raise OSError(f"only {written} of {expected} bytes reached the disk (disk full, or "
                      "over a file size limit)")


def _move_into_place(tmp: Path, out: Path) -> None:
    """Rename the complete ``tmp`` to ``out``; a previous ``out`` is removed only after.

    Interrupted (a signal raising) before the new ``out`` is in place, the previous one is
    put back; after, the rest of the previous one is ``.NAME.old-PID``
    (:func:`~distgnn.storage.temp_path`) beside it."""
    if not out.exists():
        tmp.rename(out)
        return
    old = temp_path(out, "old")
    try:
        out.rename(old)
        tmp.rename(out)
    except BaseException:
        # both renames inside the try: an interrupt right after the first must undo it too
        if old.exists() and not out.exists():
            old.rename(out)
        raise
    shutil.rmtree(old, ignore_errors=True)


def _check_free_space(out: Path, nbytes: int) -> None:
    """Refuse a write of ``nbytes`` to ``out`` that its filesystem has no room for."""
    problem = free_space_problem(out.parent, nbytes)
    if problem:
        raise PartitionFormatError(f"{out}: {problem}")
