"""Checkpoints of a training run on one rank or many: written atomically, verified on load.

Layout of ``--checkpoint-dir D``::

    D/epoch-000040/              a complete checkpoint after 40 epochs
        manifest.json            format, epoch, ranks, run, fingerprint, bytes + SHA-256
                                 per file
        state.pt                 model, optimizer, best weights, metrics so far (from rank 0:
                                 the replicas are identical)
        rank-00000.pt ...        each rank's RNG states and in-flight cd-r exchange state
    D/.partial-epoch-000045/     a checkpoint being written; never read, removed on failure
    D/.lock                      locked by the run that writes into D (in_use)

Every file holds torch tensors and plain Python values only and is read with
``torch.load(weights_only=True)``, which executes no pickled code.  A checkpoint appears
under its final name only after every rank's file and the manifest are on disk (written,
fsync'ed, renamed), so a job killed or a disk filling up mid-write leaves the previous
checkpoints as they were.  Free space is checked against the exact serialised sizes before
anything is written.  A resumed run is refused if its fingerprint (the data's content, the
options that change the computation, the parameter shapes, the exchange algorithm) differs
from the checkpoint's.  The rank count and the partitioning (the fingerprint's ``layout``)
may differ: the model and optimizer are the same on every rank, so a checkpoint of P ranks
resumes on P' ranks or in one process, every rank then taking rank 0's RNG states and no
exchange state (:func:`resume`'s ``same_layout``).

Every checkpoint also names its run: a random id drawn when the run starts afresh and kept
by every resume of it.  A run writes into a directory only while every checkpoint there is
its own (:func:`claim`), prunes only its own, and never replaces another run's: a new run
pointed at another run's directory would otherwise prune that run's checkpoints or its own,
and a later ``--resume`` there would continue whichever was newest.

The directory must be visible to every rank under the same path (a shared filesystem on a
cluster), since rank 0 assembles and verifies the manifest of all ranks' files.
"""
from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import io
import json
import os
import random
import re
import secrets
import shutil
import socket
import time
from pathlib import Path

import numpy as np
import torch

from ..comm import Communicator, all_or_none
from ..errors import DistGNNError, one_line
from ..exchange.config import ExchangeConfig
from ..options import flag_of
from ..storage import (
    OutputError,
    file_head,
    file_lock,
    free_space_problem,
    fsync_path,
    pid_alive,
    recorded_holder,
    write_atomic,
)
from .config import PARTS

FORMAT = "distgnn-checkpoint"
# 2: the fingerprint holds the options and the content of the data; 3: each rank's exchange
# state is tagged with its kind; 4: history records count epochs from 1 (older checkpoints
# are refused, naming their version); 5: the data's identity is its content whatever the
# partitioning, and the partitioning is the fingerprint's layout
VERSION = 5
NAME = re.compile(r"^epoch-(\d{6,})$")
# Slack over the serialised sizes: the manifest, directory entries, filesystem blocks.
SPACE_MARGIN = 1 << 20
MAX_EPOCH = 10**9  # epochs of a checkpoint name: six digits or more, never absurd
MAX_MANIFEST_BYTES = 1 << 26
# how many of another run's checkpoints a refusal names
NAMED = 2
# the file in a checkpoint directory whose lock the run writing into it holds (in_use)
LOCK = ".lock"
# how long a run refused the lock waits for its holder to record itself, before it takes
# the refusal for a filesystem that cannot lock files
HOLDER_WAIT_S = 0.2
# the options of the split-vertex exchange, which one process (no split vertices) ignores
EXCHANGE_FLAGS = frozenset("--" + f.name.replace("_", "-")
                           for f in dataclasses.fields(ExchangeConfig))
# every option's field by the key a fingerprint names it with, "--" and the field's name
# (what checkpoints have recorded since format 2: kept, so that they resume), which is not
# always its flag (--precompute-first-aggregation, --no-kernel-trial)
FINGERPRINT_FIELDS = {"--" + f.name.replace("_", "-"): f
                      for cls in PARTS.values() for f in dataclasses.fields(cls)}


class CheckpointError(DistGNNError):
    """A checkpoint that cannot be written, found, read or used for this run."""


class CheckpointMismatch(CheckpointError):
    """An intact checkpoint written by a run that this one cannot continue."""


def rank_file(rank: int) -> str:
    return f"rank-{rank:05d}.pt"


def checkpoint_name(epoch: int) -> str:
    return f"epoch-{epoch:06d}"


def checkpoint_path(directory: str | Path, epoch: int) -> Path:
    """Where the checkpoint after ``epoch`` epochs lives in ``directory``."""
    return Path(directory) / checkpoint_name(epoch)


def new_run() -> str:
    """The id of a run that starts afresh (see the module docstring)."""
    return secrets.token_hex(8)


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


def _gather_digests(comm: Communicator, data: bytes) -> list[tuple[int, str]]:
    """``(bytes, sha256)`` of every rank's file, in rank order (a sum-allreduce as gather)."""
    table = torch.zeros(comm.size, 33, dtype=torch.int64)
    table[comm.rank, :32] = torch.tensor(list(hashlib.sha256(data).digest()))
    table[comm.rank, 32] = len(data)
    comm.allreduce(table)
    return [(int(row[32]), bytes(row[:32].tolist()).hex()) for row in table]


def save(directory: str | Path, epoch: int, comm: Communicator, fingerprint: dict,
         shared: dict, local: dict, keep: int, run: str | None = None) -> Path:
    """Write the checkpoint after ``epoch`` epochs of run ``run``; returns its directory.

    Collective.  ``shared`` (rank 0's) is the state every replica has in common, ``local``
    this rank's own.  ``run`` is rank 0's (it alone writes the manifest; ``None``: a run
    resumed from a checkpoint written before runs had ids).  Of the checkpoints of ``run``,
    those beyond the newest ``keep`` are removed afterwards; another run's are never touched.
    """
    directory = Path(directory)
    final = checkpoint_path(directory, epoch)
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
            for stale in directory.glob(".partial-epoch-*"):  # left by a job killed mid-write
                shutil.rmtree(stale, ignore_errors=True)
            if final.exists() and not is_checkpoint(final):
                raise CheckpointError(f"{final} exists and is not a checkpoint written by "
                                      "distgnn-train; refusing to replace it")
            if final.exists() and run_of(final) != run:
                raise CheckpointError(f"{final} is a checkpoint of another run; refusing to "
                                      "replace it (give another --checkpoint-dir)")
            partial.mkdir()

    def write_files():
        try:
            write_atomic(partial / rank_file(comm.rank), local_bytes)
            if lead:
                write_atomic(partial / "state.pt", shared_bytes)
        except OutputError as e:  # write_atomic's line: the file, why, the room left
            raise CheckpointError(f"writing the checkpoint failed: {e}; the previous "
                                  "checkpoints are untouched") from None

    def publish():
        if not lead:
            return
        files = {rank_file(r): {"bytes": n, "sha256": h}
                 for r, (n, h) in enumerate(digests)}
        files["state.pt"] = {"bytes": len(shared_bytes),
                             "sha256": hashlib.sha256(shared_bytes).hexdigest()}
        manifest = {"format": FORMAT, "version": VERSION, "epoch": epoch, "ranks": comm.size,
                    **({} if run is None else {"run": run}), "fingerprint": fingerprint,
                    "files": files}
        try:
            write_atomic(partial / "manifest.json", json.dumps(manifest, indent=1).encode())
            fsync_path(partial)
            if final.exists():  # the same epoch written by an earlier attempt
                shutil.rmtree(final)
            os.replace(partial, final)
            fsync_path(directory)
        except (OSError, OutputError) as e:
            why = e.strerror or e if isinstance(e, OSError) else e
            raise CheckpointError(f"{final}: publishing the checkpoint failed ({why}); the "
                                  "previous checkpoints are untouched") from None
        for old in [p for p in checkpoints(directory) if run_of(p) == run][keep:]:
            shutil.rmtree(old, ignore_errors=True)

    try:
        all_or_none(comm, prepare)
        all_or_none(comm, write_files)
        digests = _gather_digests(comm, local_bytes)
        all_or_none(comm, publish)
    except BaseException:  # an error, or a stop (a second Ctrl-C) while it was written
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


def _manifest_of(path: Path) -> dict | None:
    """``path/manifest.json`` parsed, if it is a manifest of this format (any version)."""
    try:
        manifest = json.loads(file_head(path / "manifest.json", MAX_MANIFEST_BYTES))
    except (ValueError, RecursionError):
        return None
    return manifest if isinstance(manifest, dict) and manifest.get("format") == FORMAT else None


def is_checkpoint(path: Path) -> bool:
    """Whether ``path`` holds a ``manifest.json`` of this format (any version): a checkpoint
    this tool wrote, which pruning and re-writing may remove."""
    return _manifest_of(path) is not None


def run_of(path: Path) -> str | None | bool:
    """The run id of checkpoint ``path`` (``None``: written before runs had ids; ``False``:
    not a checkpoint)."""
    manifest = _manifest_of(path)
    return False if manifest is None else manifest.get("run")


def claim(directory: str | Path, comm: Communicator, run: str | None) -> None:
    """Refuse, on every rank, to checkpoint run ``run`` into ``directory`` while it holds
    checkpoints of another run (decided by rank 0, whose ``run`` counts; nothing is
    removed)."""
    directory = Path(directory)

    def check():
        if comm.rank != 0:
            return
        others = [p for p in checkpoints(directory) if run_of(p) not in (False, run)]
        if others:
            names = ", ".join(p.name for p in others[:NAMED]) + (", ..." if others[NAMED:]
                                                                  else "")
            raise CheckpointError(f"{directory} holds checkpoints of another run ({names}): "
                                  f"continue that run with --resume {directory}, or give "
                                  "another --checkpoint-dir (nothing was removed)")

    all_or_none(comm, check)


@contextlib.contextmanager
def in_use(directory: str | Path, comm: Communicator, log=print):
    """Hold ``directory`` for this run while the block runs (refused while another holds it).

    Collective: refused on every rank.  Two runs checkpointing into one directory at once
    would remove and half-write each other's checkpoints (they share the
    ``.partial-epoch-*`` folders).  Rank 0 holds the exclusive
    :func:`~distgnn.storage.file_lock` of ``DIR/.lock`` (the directory made when missing)
    for the run's life; a process that ends, or dies, releases it.  Where the lock is
    refused but the lock file names no holder, or one of this host that is gone, the
    filesystem cannot lock files: the run goes on after a warning."""
    directory = Path(directory)
    lock = directory / LOCK
    with contextlib.ExitStack() as held:
        def take():
            if comm.rank != 0:
                return
            directory.mkdir(parents=True, exist_ok=True)
            if held.enter_context(file_lock(lock, wait_s=0)):
                return
            holder = _lock_holder(lock)
            if holder is None:
                time.sleep(HOLDER_WAIT_S)  # a holder that has just taken it records itself
                holder = _lock_holder(lock)
            if holder is not None:
                raise CheckpointError(f"{directory} is in use by another run ({holder} holds "
                                      f"{lock}): wait for it to end, or give another "
                                      "--checkpoint-dir")
            log(f"warning: {lock} cannot be locked on this filesystem: a second run started "
                f"on {directory} meanwhile would not be refused")

        all_or_none(comm, take)
        yield


def _lock_holder(lock: Path) -> str | None:
    """Who holds ``lock``, as :func:`~distgnn.storage.file_lock`'s holder recorded it (``PID
    HOST``); ``None`` when none is recorded, or when that is a process of this host that is
    gone (it holds nothing)."""
    try:
        held = recorded_holder(lock.read_text(errors="replace"))
    except OSError:
        held = None
    if held is None:
        return None
    pid, host = held
    if host == socket.gethostname() and not pid_alive(pid):
        return None
    return f"process {pid} on {host}"


def _manifest_problem(manifest, path: Path) -> str | None:
    """Why ``manifest`` (parsed JSON) is not a manifest of this format for ``path``."""
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        return "not a distgnn checkpoint manifest"
    if manifest.get("version") != VERSION:
        return (f"checkpoint format version {manifest.get('version')!r}; this distgnn reads "
                f"version {VERSION}")
    epoch, ranks, files = manifest.get("epoch"), manifest.get("ranks"), manifest.get("files")
    if type(epoch) is not int or not 0 <= epoch <= MAX_EPOCH:
        return f"epoch must be an integer from 0 to {MAX_EPOCH}, got {epoch!r}"
    if path.name != checkpoint_name(epoch):
        return f"epoch {epoch} does not match the directory name {path.name}"
    if type(ranks) is not int or ranks < 1:
        return f"ranks must be an integer >= 1, got {ranks!r}"
    if not isinstance(manifest.get("fingerprint"), dict):
        return "fingerprint must be an object"
    if not isinstance(manifest.get("run", ""), str):
        return f"run must be a string, got {manifest['run']!r}"
    expected = {"state.pt", *(rank_file(r) for r in range(min(ranks, 1 << 20)))}
    if not isinstance(files, dict) or set(files) != expected:
        return f"files must list state.pt and rank-00000.pt .. {rank_file(ranks - 1)}"
    for name, entry in files.items():
        if not (isinstance(entry, dict) and type(entry.get("bytes")) is int
                and isinstance(entry.get("sha256"), str)):
            return f"the entry of {name} needs bytes and sha256"
    return None


def read_manifest(path: Path) -> dict:
    """The manifest of checkpoint ``path``, verified (or :class:`CheckpointError`).

    It is checked as strictly as a partition's meta.json (format, version, an epoch that is a
    small integer and matches the directory name, ranks, the exact file list) and for every
    file's size and SHA-256; the error names the first problem.
    """
    try:
        manifest = json.loads(file_head(path / "manifest.json", MAX_MANIFEST_BYTES))
    except FileNotFoundError:
        raise CheckpointError(f"{path}: no manifest.json (not a complete checkpoint)") from None
    except (OSError, ValueError, RecursionError) as e:
        raise CheckpointError(f"{path}/manifest.json: unreadable ({one_line(e)})") from None
    problem = _manifest_problem(manifest, path)
    if problem:
        raise CheckpointError(f"{path}/manifest.json: {problem}")
    for name, entry in manifest["files"].items():
        f = path / name
        try:
            size = f.stat().st_size
            if size != entry["bytes"] or not f.is_file():
                raise CheckpointError(f"{f}: {size} bytes, the manifest says {entry['bytes']} "
                                      "(corrupted or truncated)")
            with open(f, "rb") as handle:
                digest = hashlib.file_digest(handle, "sha256").hexdigest()
        except OSError as e:
            raise CheckpointError(f"{f}: unreadable ({e.strerror or e})") from None
        if digest != entry["sha256"]:
            raise CheckpointError(f"{f}: SHA-256 differs from the manifest (corrupted)")
    return manifest


# what every epoch record of a checkpoint's history holds (what reports and resumes read)
RECORD_KEYS = ("epoch", "loss", "epoch_s", "phases", "bytes_sent_max", "train_acc", "val_acc",
               "test_acc")


def state_problem(state, epoch: int) -> str | None:
    """Why ``state`` (a loaded state.pt) cannot continue a run after ``epoch`` epochs."""
    if not isinstance(state, dict) or not {"model", "optimizer", "history", "best",
                                           "since_best"} <= state.keys():
        return "state.pt lacks model, optimizer, history, best or since_best"
    history = state["history"]
    if not isinstance(history, list) or len(history) != epoch:
        return f"history must hold {epoch} epoch records"
    for i, record in enumerate(history):
        if not isinstance(record, dict) or not set(RECORD_KEYS) <= record.keys():
            return f"history record {i} lacks one of {', '.join(RECORD_KEYS)}"
        if record["epoch"] != i + 1:
            return f"history record {i} is for epoch {record['epoch']!r}"
    if not isinstance(state["best"], dict) or type(state["since_best"]) is not int:
        return "best must be a record and since_best an integer"
    return None


def _parameter_difference(theirs: dict, ours: dict) -> str:
    """The first parameter whose shape differs (or that only one side has)."""
    for name in sorted(set(theirs) | set(ours)):
        a, b = theirs.get(name), ours.get(name)
        if a != b:
            show = lambda s: "absent" if s is None else str(tuple(s))  # noqa: E731
            return f"parameter {name}: {show(a)} there, {show(b)} here"
    return "same parameters"


def as_given(key: str, value) -> tuple[str, object]:
    """A fingerprint's option ``key`` and ``value`` as a command line has them: the flag a
    user gives, and for a switch that turns an option off (``--no-kernel-trial``) whether
    it was given."""
    field = FINGERPRINT_FIELDS.get(key)
    if field is None:
        return key, value
    if field.metadata.get("action") == "store_false" and isinstance(value, bool):
        return flag_of(field), not value
    return flag_of(field), value


def check_fingerprint(path: Path, theirs: dict, ours: dict) -> None:
    """Refuse a checkpoint written by a run this one cannot continue.

    Names the first difference: exchange, an option (by its flag), data, parameter shapes.

    The rank count and layout may differ.  So may the exchange and its options when one side
    is one process (it has no split vertices: every algorithm computes cd-0's sums there)."""
    def refuse(label: str, detail: str):
        raise CheckpointMismatch(f"{path}: written for another {label} than this run's ({detail})")

    alone = 1 in (theirs.get("ranks"), ours.get("ranks"))
    if not alone and theirs.get("exchange") != ours.get("exchange"):
        refuse("split-vertex exchange", f"{theirs.get('exchange')} there, "
                                        f"{ours.get('exchange')} here")
    options = theirs.get("options")
    options = options if isinstance(options, dict) else {}
    ours_options = ours.get("options", {})
    for flag in [*ours_options, *(f for f in options if f not in ours_options)]:
        if alone and flag in EXCHANGE_FLAGS:
            continue
        if options.get(flag, "default") != ours_options.get(flag, "default"):
            given, there = as_given(flag, options.get(flag, "default"))
            here = as_given(flag, ours_options.get(flag, "default"))[1]
            refuse(given, f"{there} there, {here} here")
    if theirs.get("data") != ours.get("data"):
        refuse("data (graph, features, labels or split)",
               f"{theirs.get('data')} there, {ours.get('data')} here")
    a, b = theirs.get("parameters"), ours.get("parameters")
    if a != b:
        refuse("model shape", _parameter_difference(a, b) if isinstance(a, dict) else
               f"{a} there")


def _load_file(path: Path) -> dict:
    try:
        return torch.load(path, map_location="cpu", weights_only=True)
    except Exception as e:  # torch raises several types for truncated or foreign files
        first = one_line(e)
        if "Weights only load failed" in first:
            first = "it holds objects other than tensors and plain values; nothing was run"
        raise CheckpointError(f"{path}: not a readable distgnn checkpoint file ({first})"
                              ) from None


@dataclasses.dataclass
class Resumed:
    """The checkpoint a run resumes from: after ``epoch`` epochs, written by ``ranks`` ranks;
    ``shared`` (state.pt), ``local`` (this rank's file, or rank 0's when not
    ``same_layout``), ``run`` its run id (on rank 0 only, which writes manifests)."""

    epoch: int
    shared: dict
    local: dict
    run: str | None
    ranks: int
    same_layout: bool


def resume(directory: str | Path, comm: Communicator, fingerprint: dict,
           log=print, missing_ok: bool = False) -> Resumed | None:
    """The newest usable checkpoint in ``directory``.

    Collective.  When it was written on this run's layout (rank count and partitions), each
    rank reads its own rank file; else every rank reads rank 0's (the RNG states; its
    exchange state is not for these partitions).

    Rank 0 picks it: the newest whose manifest and files verify (a newer broken one is
    reported and skipped) and whose fingerprint matches ``fingerprint``.  A ``directory``
    that holds no checkpoint (or does not exist) is an error, or with ``missing_ok``
    ``None`` on every rank: decided once, by rank 0, so that every rank starts alike.
    """
    directory = Path(directory)
    chosen = torch.zeros(3, dtype=torch.int64)  # epoch, ranks, same layout
    picked = {}

    def pick():
        if comm.rank != 0:
            return
        found = checkpoints(directory)
        if not found and missing_ok:
            chosen[0] = -1
            return
        if not found:
            raise CheckpointError(f"{directory}: no checkpoint to resume from "
                                  "(expected epoch-NNNNNN directories written by "
                                  "--checkpoint-dir)")
        reasons = []
        for path in found:
            try:
                manifest = read_manifest(path)
                check_fingerprint(path, manifest["fingerprint"], fingerprint)
                state = _load_file(path / "state.pt")
                problem = state_problem(state, manifest["epoch"])
                if problem:
                    raise CheckpointError(f"{path}/state.pt: {problem}")
            except CheckpointMismatch:  # another run's: never fall back past it
                raise
            except CheckpointError as e:
                log(f"warning: skipping {e}")
                reasons.append(str(e))
                continue
            theirs = manifest["fingerprint"]
            same = (manifest["ranks"] == comm.size
                    and theirs.get("layout") == fingerprint.get("layout"))
            chosen[:] = torch.tensor([manifest["epoch"], manifest["ranks"], int(same)])
            picked["state"], picked["run"] = state, manifest.get("run")
            return
        raise CheckpointError(f"{directory}: none of its {len(found)} checkpoints can be "
                              f"resumed (newest: {reasons[0]})")

    all_or_none(comm, pick)
    comm.broadcast(chosen, root=0)
    if chosen[0] < 0:
        return None
    epoch, ranks, same = (int(v) for v in chosen)
    path = directory / checkpoint_name(epoch)
    shared, local = all_or_none(comm, lambda: (
        picked.get("state") or _load_file(path / "state.pt"),
        _load_file(path / rank_file(comm.rank if same else 0))))
    return Resumed(epoch, shared, local, picked.get("run"), ranks, bool(same))
