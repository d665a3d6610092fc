r"""Full-batch training: forward, loss, backward, gradient allreduce, step, metrics.

One loop serves both modes.  Single-socket mode trains on the whole graph with a
one-rank communicator; under MPI each rank trains a replica of the model on one partition
(:mod:`distgnn.distributed` builds its :class:`Shard`), and the loop adds what makes the
replicas one model: identical initial weights (broadcast from rank 0), the loss

.. math::
    \mathcal{L} = \frac{1}{|V_{train}|} \sum_{p} \sum_{v \in V^p_{train}}
        \operatorname{CE}(\mathbf{z}_v, y_v)

counted at root clones only (``V^p_train``) and divided by the global count, and the
gradients summed over ranks before every optimizer step.  The reported test accuracy is
the one at the evaluation with the best validation accuracy (ties: lower validation loss).
"""
from __future__ import annotations

import copy
import dataclasses
import hashlib
import json
import math
import signal
import sys
import time
from pathlib import Path
from typing import Callable

import numpy as np
import torch
import torch.nn.functional as F

from .aggregate import Neighbourhood, PhaseTimer, get_backend
from . import checkpoint, memory
from .comm import COMMUNICATORS, Communicator, RankFailed, SelfCommunicator, all_or_none
from .comm.watchdog import DEFAULT_TIMEOUT_S, Watchdog
from .drpa import ALGORITHMS
from .errors import DistGNNError, one_line
from .graph import NodeDataset
from .models import GNN, SAGE_AGGREGATORS
from .placement import BACKEND_CHOICES, DEVICES, parse_per_rank, placement, synchronize
from .signals import StopRequests
from .storage import (AtomicStream, check_output_dir, check_output_file, check_replaceable,
                      file_head)

NAN_POLICIES = ("stop", "skip")
MODELS = ("gcn", "sage")
FEATURE_NORMS = ("row", "none")
DEFAULT_DELAY = 5
# More threads than this is a typo, not a machine: torch would try to start them all.
MAX_THREADS = 4096
# The deepest published GNNs have about a thousand layers (RevGNN); more is a typo.
MAX_LAYERS = 10_000
# cd-r keeps buffers per bin: a delay beyond the epochs of any run is a typo.
MAX_DELAY = 100_000


@dataclasses.dataclass
class TrainConfig:
    """Everything that defines a training run (the CLI flags of ``distgnn-train``)."""

    model: str = "gcn"
    aggregator: str = "gcn"
    layers: int = 2
    hidden: int = 16
    dropout: float = 0.5
    residual: bool = False
    lr: float = 0.01
    weight_decay: float = 5e-4
    epochs: int = 200
    seed: int = 0
    eval_every: int = 1
    patience: int = 0
    feature_norm: str = "row"
    backend: str = "auto"
    device: str = "auto"
    rank_devices: str | None = None
    rank_backends: str | None = None
    threads: int | None = None
    metrics_out: str | None = None
    checkpoint_dir: str | None = None
    checkpoint_every: int = 10
    keep: int = 2
    resume: str | None = None
    nan_policy: str = "stop"
    comm_timeout: float = DEFAULT_TIMEOUT_S
    progress: bool = True
    algo: str = "cd-0"
    delay: int | None = None
    comm: str = "auto"
    verify: bool = True
    backward_exchange: bool = True
    precompute_first: bool = False
    split: int = 0

    def __post_init__(self):
        if self.resume and not self.checkpoint_dir:  # a resumed run goes on checkpointing
            self.checkpoint_dir = self.resume
        self.validate()

    def validate(self) -> None:
        """Refuse, with one line naming the flag, any value that cannot make a run: every
        size, rate and choice, and every output path (checked now, not after the work)."""
        def need(ok, flag: str, what: str, value) -> None:
            if not ok:
                raise DistGNNError(f"--{flag} must be {what}, got {value!r}")

        def integer(value) -> bool:
            return isinstance(value, int) and not isinstance(value, bool)

        for flag, low, high in (("layers", 1, MAX_LAYERS), ("hidden", 1, None),
                                ("epochs", 1, None), ("eval-every", 1, None), ("patience", 0, None),
                                ("checkpoint-every", 0, None), ("keep", 1, None),
                                ("seed", 0, 2**63 - 1), ("split", 0, None)):
            value = getattr(self, flag.replace("-", "_"))
            need(integer(value) and value >= low and (high is None or value <= high), flag,
                 f"an integer >= {low}" + (f" and <= {high}" if high else ""), value)
        if self.threads is not None:
            need(integer(self.threads) and 1 <= self.threads <= MAX_THREADS, "threads",
                 f"an integer from 1 to {MAX_THREADS}", self.threads)
        need(math.isfinite(self.lr) and self.lr >= 0, "lr", "a finite number >= 0", self.lr)
        need(math.isfinite(self.weight_decay) and self.weight_decay >= 0, "weight-decay",
             "a finite number >= 0", self.weight_decay)
        need(0 <= self.dropout < 1, "dropout", "in [0, 1)", self.dropout)
        need(math.isfinite(self.comm_timeout) and self.comm_timeout >= 0, "comm-timeout",
             "a finite number of seconds >= 0", self.comm_timeout)
        for flag, choices in (("model", MODELS), ("aggregator", SAGE_AGGREGATORS),
                              ("feature-norm", FEATURE_NORMS), ("nan-policy", NAN_POLICIES),
                              ("backend", BACKEND_CHOICES), ("device", DEVICES),
                              ("algo", ALGORITHMS), ("comm", COMMUNICATORS)):
            value = getattr(self, flag.replace("-", "_"))
            need(value in choices, flag, "one of " + ", ".join(choices), value)
        if self.algo == "cd-r":
            need(self.delay is None or (integer(self.delay) and 1 <= self.delay <= MAX_DELAY),
                 "delay", f"an integer from 1 to {MAX_DELAY} with cd-r", self.delay)
        elif self.delay:
            raise DistGNNError(f"--delay applies to cd-r only, not {self.algo}")
        parse_per_rank(self.rank_devices, "--rank-devices", DEVICES)
        parse_per_rank(self.rank_backends, "--rank-backends", BACKEND_CHOICES)
        if self.metrics_out:
            check_replaceable(check_output_file(self.metrics_out, "--metrics-out"),
                              is_metrics_file, "a metrics file written by distgnn-train")
        if self.checkpoint_dir:
            check_output_dir(self.checkpoint_dir, "--checkpoint-dir")
        if self.resume and not Path(self.resume).is_dir():
            raise DistGNNError(f"--resume {self.resume}: not a directory of checkpoints")

    @property
    def delay_epochs(self) -> int:
        """``r`` of cd-r (``DEFAULT_DELAY`` when not given); 0 for the other exchanges."""
        if self.algo != "cd-r":
            return 0
        return DEFAULT_DELAY if self.delay is None else self.delay


@dataclasses.dataclass
class TrainResult:
    history: list[dict]
    best: dict
    model: GNN


@dataclasses.dataclass
class Shard:
    """What one rank trains on: the whole graph in single-socket mode, else its partition.

    ``x`` ``[n, F]`` float32, ``y`` ``[n]`` int64, ``masks`` bool ``[n]`` per split name
    (under MPI true at root clones only, so each vertex counts once), ``nbr`` the
    neighbourhood the layers aggregate over (with the split-vertex exchange under MPI),
    ``origin`` what the data is (a checkpoint of other data is refused).
    """

    name: str
    x: torch.Tensor
    y: torch.Tensor
    masks: dict[str, torch.Tensor]
    nbr: Neighbourhood
    num_classes: int
    origin: str

    @property
    def num_features(self) -> int:
        return self.x.shape[1]


def configure_threads(threads: int | None) -> None:
    """Pin torch's and Numba's thread pools to ``threads`` (``None``: leave the defaults)."""
    if threads is None:
        return
    torch.set_num_threads(threads)
    import numba  # deferred: importing numba costs start-up time that torch-only runs skip

    numba.set_num_threads(min(threads, numba.config.NUMBA_NUM_THREADS))


# rows normalised per block: bounds the float64 temporaries to 2 x 64 MiB
_NORM_BLOCK_ELEMENTS = 1 << 23


def normalize_features(x: np.ndarray, how: str) -> np.ndarray:
    """``row``: divide each row by its L1 norm (Kipf & Welling's preprocessing); ``none``.

    float32 ``[N, F]`` in and out.  The norms and quotients are computed in float64 (in row
    blocks): a float32 sum of large finite values would overflow to inf and zero the row.
    """
    if how == "none":
        return x
    out = np.empty(x.shape, np.float32)
    rows = max(1, _NORM_BLOCK_ELEMENTS // max(x.shape[1], 1))
    for start in range(0, len(x), rows):
        block = np.asarray(x[start:start + rows], dtype=np.float64)
        norm = np.abs(block).sum(axis=1, keepdims=True)
        np.divide(block, np.where(norm == 0, 1.0, norm), out=block)
        out[start:start + rows] = block
    return out


def node_tensors(x: np.ndarray, y: np.ndarray, masks: dict[str, np.ndarray], how: str,
                 device: torch.device | str = "cpu"):
    """Torch tensors of normalised features, labels and masks on ``device`` (copies: the
    inputs may be read-only memory maps)."""
    x = np.asarray(x)
    normalised = normalize_features(x, how)
    return (torch.from_numpy(np.array(normalised, np.float32, copy=normalised is x)).to(device),
            torch.from_numpy(np.array(y, np.int64)).to(device),
            {name: torch.from_numpy(np.array(m, bool)).to(device) for name, m in masks.items()})


def content_digest(arrays) -> str:
    """SHA-256 over the bytes of ``arrays`` (numpy arrays or CPU tensors; ``None`` skipped),
    each prefixed by its dtype and shape: the identity of the data a run trains on."""
    h = hashlib.sha256()
    for a in arrays:
        if a is None:
            continue
        a = np.ascontiguousarray(a.numpy() if isinstance(a, torch.Tensor) else a)
        h.update(f"{a.dtype.str}{a.shape}".encode())
        h.update(memoryview(a).cast("B"))
    return h.hexdigest()


def dataset_shard(data: NodeDataset, cfg: TrainConfig, timer: PhaseTimer) -> Shard:
    """The whole graph of ``data`` as the single rank's shard, on its device."""
    device, backend = placement(0, cfg.device, cfg.backend, cfg.rank_devices, cfg.rank_backends)
    memory.require(cfg, data.num_nodes, data.graph.num_edges, data.num_features,
                   data.num_classes, device, data.name)
    masks = {name: getattr(data, f"{name}_mask") for name in ("train", "val", "test")}
    x, y, masks = node_tensors(data.x, data.y, masks, cfg.feature_norm)
    origin = (f"dataset {data.name}: {data.num_nodes} nodes, {data.graph.num_edges} edges, "
              f"{data.num_features} features, {data.num_classes} classes")
    if cfg.checkpoint_dir or cfg.resume:  # what was trained on, as trained on (once)
        g = data.graph
        origin += ", content sha256 " + content_digest(
            [g.indptr, g.indices, g.edge_weight, x, y, *masks.values()])[:16]
    nbr = Neighbourhood(data.graph, get_backend(backend), timer=timer, device=device)
    x, y = x.to(device), y.to(device)
    masks = {name: m.to(device) for name, m in masks.items()}
    return Shard(data.name, x, y, masks, nbr, data.num_classes, origin)


def build_model(cfg: TrainConfig, in_channels: int, num_classes: int) -> GNN:
    try:
        return GNN(cfg.model, in_channels, cfg.hidden, num_classes, cfg.layers, cfg.dropout,
                   cfg.aggregator, cfg.residual, cfg.seed, cfg.precompute_first)
    except ValueError as e:
        raise DistGNNError(str(e)) from None


PHASES = ("aggregation", "exchange_pre", "exchange_wait", "exchange_post", "dense",
          "allreduce", "optimizer")


def phase_seconds(timer: PhaseTimer) -> dict[str, float]:
    """The epoch's wall-clock phases: local aggregation (kernels), the three exchange phases,
    dense work (everything else in forward and backward), gradient allreduce, optimizer."""
    s = timer.seconds
    phases = {"aggregation": s["aggregation_forward"] + s["aggregation_backward"],
              **{k: s[k] for k in ("exchange_pre", "exchange_wait", "exchange_post")}}
    phases["dense"] = s["forward"] + s["backward"] - sum(phases.values())
    phases.update(allreduce=s["allreduce"], optimizer=s["optimizer"])
    return phases


class ReplicaSync:
    """Keeps the model replicas of all ranks identical.

    One flat float32 buffer holds every gradient, the loss and one non-finite flag per
    rank, so a step costs a single allreduce; the same buffer carries the initial weights
    from rank 0.
    """

    def __init__(self, model: torch.nn.Module, comm: Communicator):
        params = [p for p in model.parameters() if p.requires_grad]
        self.comm = comm
        self.size = sum(p.numel() for p in params)
        # where the transport wants it; with one rank, beside the gradients (no transfers)
        device = comm.device if comm.size > 1 else params[0].device
        self.flat = torch.zeros(self.size + 1 + comm.size, device=device)
        # each parameter's flat slice of the buffer
        self.slots = list(zip(params, torch.split(self.flat[:self.size],
                                                  [p.numel() for p in params])))
        self.flags = self.flat[self.size + 1:]
        self.nonfinite_ranks: list[int] = []

    @torch.no_grad()
    def broadcast_parameters(self) -> None:
        for p, slot in self.slots:
            slot.copy_(p.view(-1))
        self.comm.broadcast(self.flat, root=0)
        for p, slot in self.slots:  # copied: parameters must not alias the gradient buffer
            p.view(-1).copy_(slot)

    def allreduce_gradients(self, loss: torch.Tensor) -> float:
        """Sum gradients and losses over ranks; returns the global loss and sets
        ``nonfinite_ranks`` to the ranks whose loss or gradients were not all finite."""
        for p, slot in self.slots:
            if p.grad is None:
                slot.zero_()
            else:
                slot.copy_(p.grad.view(-1))
        self.flat[self.size] = loss.detach()
        self.flags.zero_()
        self.flags[self.comm.rank] = float(not torch.isfinite(self.flat[:self.size + 1]).all())
        if self.comm.size > 1:
            self.comm.allreduce(self.flat)
            for p, slot in self.slots:
                if p.grad is None:
                    p.grad = torch.empty_like(p)
                p.grad.view(-1).copy_(slot)
        self.nonfinite_ranks = self.flags.nonzero().flatten().tolist()
        return float(self.flat[self.size])


def rank_statistics(comm: Communicator, values: dict[str, float]) -> tuple[dict, dict]:
    """``(max, mean)`` over ranks of each value."""
    t = torch.tensor(list(values.values()), dtype=torch.float64)
    high = t.clone()
    comm.allreduce(high, "max")
    comm.allreduce(t, "sum")
    return (dict(zip(values, high.tolist())),
            dict(zip(values, (t / comm.size).tolist())))


@torch.no_grad()
def evaluate(model: GNN, shard: Shard, comm: Communicator) -> dict:
    """Accuracy on each mask and the validation loss over all ranks, with dropout off."""
    model.eval()
    logits = model(shard.nbr, shard.x)
    pred = logits.argmax(1)
    names = list(shard.masks)
    counts = []
    for name in names:
        m = shard.masks[name]
        counts += [float((pred[m] == shard.y[m]).sum()), float(m.sum())]
    val = shard.masks["val"]
    counts.append(float(F.cross_entropy(logits[val], shard.y[val], reduction="sum"))
                  if val.any() else 0.0)
    t = torch.tensor(counts, dtype=torch.float64)
    comm.allreduce(t)
    out = {f"{name}_acc": float(t[2 * i] / t[2 * i + 1]) if t[2 * i + 1] else None
           for i, name in enumerate(names)}
    n_val = float(t[2 * names.index("val") + 1])
    out["val_loss"] = float(t[-1]) / n_val if n_val else None
    return out


def better(record: dict, best: dict) -> bool:
    if record.get("val_acc") is None:
        return False
    key = (record["val_acc"], -(record["val_loss"] or 0.0))
    return not best or key > (best["val_acc"], -(best["val_loss"] or 0.0))


def train(data: NodeDataset, cfg: TrainConfig, log: Callable[[str], None] = print
          ) -> TrainResult:
    """Train ``cfg.model`` on the whole of ``data`` in this process (single-socket mode)."""
    configure_threads(cfg.threads)
    timer = PhaseTimer()
    return fit(dataset_shard(data, cfg, timer), cfg, SelfCommunicator(), timer, log)


class NonFiniteLoss(RankFailed):
    """The loss or a gradient was NaN or infinite (every rank raises it together)."""


class Stopped(RankFailed):
    """A stop signal ended the run after the epoch in progress (raised on every rank)."""

    def __init__(self, message: str, signum: int):
        super().__init__(message)
        self.exit_status = 128 + signum


# the flags that change what a run computes: a checkpoint continues only a run with the same
FINGERPRINT_OPTIONS = ("model", "aggregator", "layers", "hidden", "dropout", "residual", "lr",
                       "weight_decay", "seed", "feature_norm", "split", "precompute_first",
                       "backward_exchange")


def fingerprint(cfg: TrainConfig, model: GNN, shard: Shard, comm: Communicator) -> dict:
    """What a checkpoint must share with the run that resumes it: rank count, exchange,
    every option of ``FINGERPRINT_OPTIONS``, the data (its content) and the parameters."""
    exchange = shard.nbr.exchange
    return {"ranks": comm.size,
            "exchange": "none" if exchange is None else
                        exchange.algo + (f" delay {exchange.delay}" if exchange.algo == "cd-r"
                                         else ""),
            "options": {"--" + k.replace("_", "-"): getattr(cfg, k)
                        for k in FINGERPRINT_OPTIONS},
            "data": shard.origin,
            "parameters": {k: list(v.shape) for k, v in model.state_dict().items()}}


def fit(shard: Shard, cfg: TrainConfig, comm: Communicator, timer: PhaseTimer,
        log: Callable[[str], None] = print, watchdog: Watchdog | None = None) -> TrainResult:
    """Train ``cfg.model`` on ``shard``, one replica per rank of ``comm``.

    Returns the per-epoch history and the best evaluation (the same on every rank).
    Checkpoints go to ``cfg.checkpoint_dir`` every ``cfg.checkpoint_every`` epochs, at the
    end, on a stop signal (then :class:`Stopped` is raised) and before a non-finite step
    stops the run (:class:`NonFiniteLoss`).  ``watchdog`` is armed after the first epoch.
    Collective: every rank of ``comm`` must call it with the same ``cfg``.
    """
    lead = comm.rank == 0
    exchange = shard.nbr.exchange

    def prepare():
        torch.manual_seed(cfg.seed)
        model = build_model(cfg, shard.num_features, shard.num_classes).to(shard.x.device)
        return model, torch.optim.Adam(model.parameters(), lr=cfg.lr,
                                       weight_decay=cfg.weight_decay)

    model, optimizer = all_or_none(comm, prepare)
    sync = ReplicaSync(model, comm)
    sync.broadcast_parameters()
    stamp = fingerprint(cfg, model, shard, comm)
    start, history, best, since_best = 0, [], {}, 0
    if cfg.resume:
        start, shared, local = checkpoint.resume(cfg.resume, comm, stamp, log)
        history, best, since_best = all_or_none(comm, lambda: restore(
            f"{cfg.resume}/{checkpoint.checkpoint_name(start)}", shared, local, model,
            optimizer, exchange, shard.x.device))
        if lead:
            log(f"resumed from {cfg.resume} after epoch {start}")
    last_saved = start if cfg.resume else None

    def save(done: int) -> str:
        nonlocal last_saved
        path = checkpoint.save(
            cfg.checkpoint_dir, done, comm, stamp,
            {"model": model.state_dict(), "optimizer": optimizer.state_dict(),
             "history": history, "best": best, "since_best": since_best},
            {"rng": checkpoint.rng_state(),
             "exchange": exchange.state_dict() if exchange is not None else {}}, cfg.keep)
        last_saved = done
        return str(path)

    x, y, train_mask = shard.x, shard.y, shard.masks["train"]
    counts = torch.tensor([float(train_mask.sum())], dtype=torch.float64)
    comm.allreduce(counts)
    num_train = float(counts[0])
    if num_train == 0:
        raise DistGNNError(f"{shard.name}: no training vertices (train mask is empty)")
    # opened only now that the run starts; it replaces the file only when the run ends
    metrics = all_or_none(comm, lambda: open_metrics(cfg.metrics_out, history) if lead else None)
    bar = progress_bar(cfg, start) if lead else None
    ended = False  # the run ended in order (all epochs, early stop, stop signal, NaN stop)
    try:
        with StopRequests(watch_launcher=comm.size > 1) as stop:
            for epoch in range(start, cfg.epochs):
                timer.reset()
                sent = exchange.total_bytes_sent if exchange is not None else 0
                t0 = time.perf_counter()
                model.train()
                with timer("forward"):
                    logits = model(shard.nbr, x, step=epoch)
                with timer("backward"):
                    loss = F.cross_entropy(logits[train_mask], y[train_mask],
                                           reduction="sum") / num_train
                    optimizer.zero_grad(set_to_none=True)
                    loss.backward()
                with timer("allreduce"):
                    loss_value = sync.allreduce_gradients(loss)
                bad = sync.nonfinite_ranks
                if bad and cfg.nan_policy == "stop":
                    where = (f"non-finite loss or gradients in epoch {epoch + 1} on rank "
                             + ", ".join(map(str, bad)))
                    if cfg.checkpoint_dir:  # the weights before this step: the last good state
                        path = (save(epoch) if last_saved != epoch else
                                f"{cfg.checkpoint_dir}/{checkpoint.checkpoint_name(epoch)}")
                        where += f"; the state after epoch {epoch} is in {path}"
                    raise NonFiniteLoss(where + " (--nan-policy skip skips such steps)")
                if bad:
                    if lead:
                        log(f"warning: epoch {epoch + 1}: non-finite loss or gradients on rank "
                            f"{', '.join(map(str, bad))}; step skipped")
                else:
                    with timer("optimizer"):
                        optimizer.step()
                synchronize(x.device)
                local = {"epoch_s": time.perf_counter() - t0, **phase_seconds(timer),
                         "bytes_sent": (exchange.total_bytes_sent - sent
                                        if exchange is not None else 0),
                         "stop": float(stop.request())}
                high, mean = rank_statistics(comm, local)
                record = {"epoch": epoch, "loss": loss_value, "train_acc": None,
                          "val_acc": None, "test_acc": None, "epoch_s": high["epoch_s"],
                          "phases": {k: high[k] for k in PHASES},
                          "phases_mean": {k: mean[k] for k in PHASES},
                          "bytes_sent_max": int(high["bytes_sent"]),
                          "bytes_sent_mean": mean["bytes_sent"]}
                if bad:
                    record["skipped_step"] = True
                if (epoch + 1) % cfg.eval_every == 0 or epoch == cfg.epochs - 1:
                    record.update(evaluate(model, shard, comm))
                    if better(record, best):
                        best = dict(record, state=copy.deepcopy(model.state_dict()))
                        since_best = 0
                    else:
                        since_best += 1
                history.append(record)
                if metrics:
                    metrics.write(json.dumps(record) + "\n")
                if lead:
                    report_progress(bar, log, record, cfg.epochs)
                if watchdog is not None:
                    watchdog.arm()
                done, signum = epoch + 1, int(high["stop"])
                early = bool(cfg.patience and since_best >= cfg.patience)
                if cfg.checkpoint_dir and (signum or early or done == cfg.epochs or (
                        cfg.checkpoint_every and done % cfg.checkpoint_every == 0)):
                    path = save(done)
                if signum:
                    then = (f"checkpoint {path}; continue with --resume {cfg.checkpoint_dir}"
                            if cfg.checkpoint_dir else "no --checkpoint-dir, nothing saved")
                    why = ("the launcher (mpirun) is gone" if signum == signal.SIGHUP
                           else f"{signal.Signals(signum).name} received")
                    raise Stopped(f"{why}: stopped after epoch {done}; {then}", signum)
                if early:
                    if lead:
                        log(f"early stop at epoch {epoch}: no validation improvement in "
                            f"{cfg.patience} evaluations")
                    break
        ended = True
    except (Stopped, NonFiniteLoss):
        ended = True
        raise
    finally:
        if exchange is not None:
            exchange.finish()
        if metrics:
            metrics.commit() if ended else metrics.discard()
        if bar is not None:
            bar.close()
    return TrainResult(history, best, model)


def restore(path: str, shared: dict, local: dict, model: GNN, optimizer, exchange,
            device: torch.device) -> tuple[list, dict, int]:
    """Load a checkpoint's state into this rank (computing on ``device``); returns
    ``(history, best, since_best)``."""
    try:
        model.load_state_dict(shared["model"])
        optimizer.load_state_dict(shared["optimizer"])
        checkpoint.set_rng_state(local["rng"])
        if exchange is not None:
            exchange.load_state_dict(local["exchange"], device)
        return shared["history"], shared["best"], shared["since_best"]
    except (KeyError, RuntimeError, ValueError, TypeError, DistGNNError) as e:
        raise checkpoint.CheckpointError(f"{path}: checkpoint does not fit this run "
                                         f"({one_line(e)})") from None


def is_metrics_file(path: Path) -> bool:
    """An empty file, or JSON lines whose first record has an ``epoch`` and a ``loss``
    (what :func:`open_metrics` writes)."""
    first = file_head(path, 1 << 16).split(b"\n", 1)[0].strip()
    if not first:
        return path.stat().st_size == 0
    try:
        record = json.loads(first)
    except ValueError:
        return False
    return isinstance(record, dict) and {"epoch", "loss"} <= record.keys()


def open_metrics(path: str | None, history: list[dict]) -> AtomicStream | None:
    """The metrics file as a stream beside ``path`` that replaces it when the run ends
    (:class:`~distgnn.storage.AtomicStream`), holding first the epochs a resumed run
    already has (so that it never holds epochs the run went on to repeat after a crash)."""
    if path is None:
        return None
    f = AtomicStream(path)
    for record in history:
        f.write(json.dumps(record) + "\n")
    return f


def progress_bar(cfg: TrainConfig, start: int):
    """A tqdm bar on an interactive terminal, else ``None`` (plain log lines instead)."""
    if not (cfg.progress and sys.stderr.isatty()):
        return None
    from tqdm import tqdm

    return tqdm(total=cfg.epochs, initial=start, unit="epoch", dynamic_ncols=True)


def report_progress(bar, log, record: dict, epochs: int) -> None:
    fmt = {k: f"{record[k]:.4f}" for k in ("train_acc", "val_acc", "test_acc")
           if record.get(k) is not None}
    if bar is not None:
        bar.set_postfix(loss=f"{record['loss']:.4f}", **fmt)
        bar.update(1)
    elif fmt:
        accs = " ".join(f"{k.removesuffix('_acc')} {v}" for k, v in fmt.items())
        log(f"epoch {record['epoch'] + 1:>4}/{epochs}  loss {record['loss']:.4f}  {accs}  "
            f"({record['epoch_s'] * 1e3:.1f} ms)")
