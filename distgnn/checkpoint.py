"""Checkpoints of a training run on one rank or many: written atomically, verified on load.

Layout of ``--checkpoint-dir D``::

    D/epoch-000040/              a complete checkpoint after 40 epochs
        manifest.json            format, epoch, ranks, fingerprint, bytes + SHA-256 per file
        state.pt                 model, optimizer, best weights, metrics so far (from rank 0:
                                 the replicas are identical)
        rank-00000.pt ...        each rank's RNG states and in-flight cd-r exchange state
    D/.partial-epoch-000045/     a checkpoint being written; never read, removed on failure

Every file holds torch tensors and plain Python values only and is read with
``torch.load(weights_only=True)``, which executes no pickled code.  A checkpoint appears
under its final name only after every rank's file and the manifest are on disk (written,
fsync'ed, renamed), so a job killed or a disk filling up mid-write leaves the previous
checkpoints as they were.  Free space is checked against the exact serialised sizes before
anything is written.  A resumed run is refused if its fingerprint (rank count, data,
parameter shapes, exchange algorithm) differs from the checkpoint's.

The directory must be visible to every rank under the same path (a shared filesystem on a
cluster), since rank 0 assembles and verifies the manifest of all ranks' files.
"""
from __future__ import annotations

import hashlib
import io
import json
import os
import random
import re
import shutil
from pathlib import Path

import numpy as np
import torch

from .comm import Communicator, all_or_none
from .errors import DistGNNError, one_line
from .storage import free_space_problem, fsync_dir

FORMAT = "distgnn-checkpoint"
VERSION = 1
NAME = re.compile(r"^epoch-(\d{6,})$")
# Slack over the serialised sizes: the manifest, directory entries, filesystem blocks.
SPACE_MARGIN = 1 << 20


class CheckpointError(DistGNNError):
    """A checkpoint that cannot be written, found, read or used for this run."""


def rank_file(rank: int) -> str:
    return f"rank-{rank:05d}.pt"


def checkpoint_name(epoch: int) -> str:
    return f"epoch-{epoch:06d}"


def rng_state() -> dict:
    """The RNG states a rank's run may draw from: torch (CPU), numpy's global, Python's."""
    name, keys, pos, has_gauss, gauss = np.random.get_state()
    return {"torch": torch.get_rng_state(), "numpy_keys": torch.from_numpy(keys.astype(np.int64)),
            "numpy": [name, int(pos), int(has_gauss), float(gauss)], "python": random.getstate()}


def set_rng_state(state: dict) -> None:
    torch.set_rng_state(state["torch"])
    name, pos, has_gauss, gauss = state["numpy"]
    np.random.set_state((name, state["numpy_keys"].numpy().astype(np.uint32), pos, has_gauss,
                         gauss))
    random.setstate(state["python"])


def _serialise(payload: dict) -> bytes:
    buffer = io.BytesIO()
    torch.save(payload, buffer)
    return buffer.getvalue()


def _write_file(path: Path, data: bytes) -> None:
    """``data`` to ``path`` via a temporary name, on disk (fsync) before the rename."""
    tmp = path.with_name(f".{path.name}.tmp")
    try:
        with open(tmp, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def _gather_digests(comm: Communicator, data: bytes) -> list[tuple[int, str]]:
    """``(bytes, sha256)`` of every rank's file, in rank order (a sum-allreduce as gather)."""
    table = torch.zeros(comm.size, 33, dtype=torch.int64)
    table[comm.rank, :32] = torch.tensor(list(hashlib.sha256(data).digest()))
    table[comm.rank, 32] = len(data)
    comm.allreduce(table)
    return [(int(row[32]), bytes(row[:32].tolist()).hex()) for row in table]


def save(directory: str | Path, epoch: int, comm: Communicator, fingerprint: dict,
         shared: dict, local: dict, keep: int) -> Path:
    """Write the checkpoint after ``epoch`` epochs (collective); returns its directory.

    ``shared`` (rank 0's) is the state every replica has in common, ``local`` this rank's
    own.  Older checkpoints beyond the newest ``keep`` are removed afterwards.
    """
    directory = Path(directory)
    final = directory / checkpoint_name(epoch)
    partial = directory / f".partial-{final.name}"
    lead = comm.rank == 0
    local_bytes = _serialise(local)
    shared_bytes = _serialise(shared) if lead else b""
    need = torch.tensor([float(len(local_bytes) + len(shared_bytes))], dtype=torch.float64)
    comm.allreduce(need)

    def prepare():
        problem = free_space_problem(directory, need.item() + SPACE_MARGIN)
        if problem:
            raise CheckpointError(f"{directory}: a checkpoint {problem}; the previous "
                                  "checkpoints are untouched")
        if lead:
            directory.mkdir(parents=True, exist_ok=True)
            shutil.rmtree(partial, ignore_errors=True)  # left by a job killed mid-write
            partial.mkdir()

    def write_files():
        try:
            _write_file(partial / rank_file(comm.rank), local_bytes)
            if lead:
                _write_file(partial / "state.pt", shared_bytes)
        except OSError as e:
            raise CheckpointError(f"{partial}: writing the checkpoint failed ({e.strerror or e}); "
                                  "the previous checkpoints are untouched") from None

    def publish():
        if not lead:
            return
        files = {rank_file(r): {"bytes": n, "sha256": h}
                 for r, (n, h) in enumerate(digests)}
        files["state.pt"] = {"bytes": len(shared_bytes),
                             "sha256": hashlib.sha256(shared_bytes).hexdigest()}
        manifest = {"format": FORMAT, "version": VERSION, "epoch": epoch, "ranks": comm.size,
                    "fingerprint": fingerprint, "files": files}
        try:
            _write_file(partial / "manifest.json", json.dumps(manifest, indent=1).encode())
            fsync_dir(partial)
            if final.exists():  # the same epoch written by an earlier attempt
                shutil.rmtree(final)
            os.replace(partial, final)
            fsync_dir(directory)
        except OSError as e:
            raise CheckpointError(f"{final}: publishing the checkpoint failed "
                                  f"({e.strerror or e}); the previous checkpoints are "
                                  "untouched") from None
        for old in checkpoints(directory)[keep:]:
            shutil.rmtree(old, ignore_errors=True)

    try:
        all_or_none(comm, prepare)
        all_or_none(comm, write_files)
        digests = _gather_digests(comm, local_bytes)
        all_or_none(comm, publish)
    except DistGNNError:
        if lead:
            shutil.rmtree(partial, ignore_errors=True)
        raise
    return final


def checkpoints(directory: str | Path) -> list[Path]:
    """The checkpoint directories in ``directory``, newest first."""
    directory = Path(directory)
    if not directory.is_dir():
        return []
    found = [(int(m.group(1)), p) for p in directory.iterdir()
             if (m := NAME.match(p.name)) and p.is_dir()]
    return [p for _, p in sorted(found, reverse=True)]


def read_manifest(path: Path) -> dict:
    """The manifest of checkpoint ``path``, checked for form and for every file's size and
    SHA-256 (raises :class:`CheckpointError` naming the first problem)."""
    try:
        manifest = json.loads((path / "manifest.json").read_bytes())
    except FileNotFoundError:
        raise CheckpointError(f"{path}: no manifest.json (not a complete checkpoint)") from None
    except (OSError, ValueError) as e:
        raise CheckpointError(f"{path}/manifest.json: unreadable ({e})") from None
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        raise CheckpointError(f"{path}/manifest.json: not a distgnn checkpoint manifest")
    if manifest.get("version") != VERSION:
        raise CheckpointError(f"{path}: checkpoint format version {manifest.get('version')!r}; "
                              f"this distgnn reads version {VERSION}")
    files = manifest.get("files")
    if not isinstance(files, dict) or not isinstance(manifest.get("epoch"), int):
        raise CheckpointError(f"{path}/manifest.json: missing 'files' or 'epoch'")
    for name, entry in files.items():
        f = path / name
        if Path(name).name != name:
            raise CheckpointError(f"{path}/manifest.json: bad file name {name!r}")
        try:
            data = f.read_bytes()
        except OSError as e:
            raise CheckpointError(f"{f}: unreadable ({e.strerror or e})") from None
        if len(data) != entry.get("bytes") or hashlib.sha256(data).hexdigest() != entry.get(
                "sha256"):
            raise CheckpointError(f"{f}: size or SHA-256 differs from the manifest "
                                  "(corrupted or truncated)")
    return manifest


def _parameter_difference(theirs: dict, ours: dict) -> str:
    """The first parameter whose shape differs (or that only one side has)."""
    for name in sorted(set(theirs) | set(ours)):
        a, b = theirs.get(name), ours.get(name)
        if a != b:
            show = lambda s: "absent" if s is None else str(tuple(s))  # noqa: E731
            return f"parameter {name}: {show(a)} there, {show(b)} here"
    return "same parameters"


def check_fingerprint(path: Path, theirs: dict, ours: dict) -> None:
    """Refuse a checkpoint written by a run this one cannot continue."""
    what = {"ranks": "rank count", "data": "data (graph or partitioning)",
            "parameters": "model shape", "exchange": "split-vertex exchange"}
    for key, label in what.items():
        a, b = theirs.get(key), ours.get(key)
        if a == b:
            continue
        if key == "parameters" and isinstance(a, dict) and isinstance(b, dict):
            detail = _parameter_difference(a, b)
        else:
            detail = f"{a} there, {b} here"
        raise CheckpointError(f"{path}: written for another {label} than this run's ({detail})")


def _load_file(path: Path) -> dict:
    try:
        return torch.load(path, map_location="cpu", weights_only=True)
    except Exception as e:  # torch raises several types for truncated or foreign files
        first = one_line(e)
        if "Weights only load failed" in first:
            first = "it holds objects other than tensors and plain values; nothing was run"
        raise CheckpointError(f"{path}: not a readable distgnn checkpoint file ({first})"
                              ) from None


def resume(directory: str | Path, comm: Communicator, fingerprint: dict,
           log=print) -> tuple[int, dict, dict]:
    """``(epoch, shared, local)`` of the newest usable checkpoint in ``directory`` (collective).

    Rank 0 picks it: the newest whose manifest and files verify (a newer broken one is
    reported and skipped) and whose fingerprint matches ``fingerprint``.
    """
    directory = Path(directory)
    chosen = torch.zeros(1, dtype=torch.int64)

    def pick():
        if comm.rank != 0:
            return
        found = checkpoints(directory)
        if not found:
            raise CheckpointError(f"{directory}: no checkpoint to resume from "
                                  "(expected epoch-NNNNNN directories written by "
                                  "--checkpoint-dir)")
        for path in found:
            try:
                manifest = read_manifest(path)
            except CheckpointError as e:
                log(f"warning: skipping {e}")
                continue
            check_fingerprint(path, manifest.get("fingerprint", {}), fingerprint)
            chosen[0] = manifest["epoch"]
            return
        raise CheckpointError(f"{directory}: none of its {len(found)} checkpoints is complete "
                              "and intact")

    all_or_none(comm, pick)
    comm.broadcast(chosen, root=0)
    path = directory / checkpoint_name(int(chosen[0]))
    shared, local = all_or_none(comm, lambda: (_load_file(path / "state.pt"),
                                               _load_file(path / rank_file(comm.rank))))
    return int(chosen[0]), shared, local
