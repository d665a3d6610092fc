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
import json
import os
import sys
import time
from typing import Callable

import numpy as np
import torch
import torch.nn.functional as F

from .aggregate import Neighbourhood, PhaseTimer, get_backend
from .comm import Communicator, SelfCommunicator, all_or_none
from .errors import DistGNNError
from .graph import NodeDataset
from .models import GNN


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
    backend: str = "numba"
    threads: int | None = None
    metrics_out: str | None = None
    checkpoint: str | None = None
    resume: str | None = None
    progress: bool = True
    algo: str = "cd-0"
    delay: int | None = None
    comm: str = "mpi"
    comm_backend: str = "auto"
    verify: bool = True
    backward_exchange: bool = True
    precompute_first: bool = False


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
    neighbourhood the layers aggregate over (with the split-vertex exchange under MPI).
    """

    name: str
    x: torch.Tensor
    y: torch.Tensor
    masks: dict[str, torch.Tensor]
    nbr: Neighbourhood
    num_classes: int

    @property
    def num_features(self) -> int:
        return self.x.shape[1]


def configure_threads(threads: int | None) -> None:
    """Pin torch's and Numba's thread pools to ``threads`` (``None``: leave the defaults)."""
    if threads is None:
        return
    if threads < 1:
        raise DistGNNError(f"--threads must be >= 1, got {threads}")
    torch.set_num_threads(threads)
    import numba  # deferred: importing numba costs start-up time that torch-only runs skip

    numba.set_num_threads(min(threads, numba.config.NUMBA_NUM_THREADS))


def normalize_features(x: np.ndarray, how: str) -> np.ndarray:
    """``row``: divide each row by its L1 norm (Kipf & Welling's preprocessing); ``none``."""
    if how == "none":
        return x
    if how != "row":
        raise DistGNNError(f"unknown feature normalisation {how!r} (choose row or none)")
    norm = np.abs(x).sum(axis=1, keepdims=True)
    return x / np.where(norm == 0, 1, norm).astype(np.float32)


def node_tensors(x: np.ndarray, y: np.ndarray, masks: dict[str, np.ndarray], how: str):
    """Torch tensors of normalised features, labels and masks (copies: inputs may be mmaps)."""
    return (torch.from_numpy(np.array(normalize_features(np.asarray(x), how), np.float32)),
            torch.from_numpy(np.array(y, np.int64)),
            {name: torch.from_numpy(np.array(m, bool)) for name, m in masks.items()})


def dataset_shard(data: NodeDataset, cfg: TrainConfig, timer: PhaseTimer) -> Shard:
    """The whole graph of ``data`` as the single rank's shard."""
    x, y, masks = node_tensors(data.x, data.y, {name: getattr(data, f"{name}_mask")
                                                for name in ("train", "val", "test")},
                               cfg.feature_norm)
    nbr = Neighbourhood(data.graph, get_backend(cfg.backend), timer=timer)
    return Shard(data.name, x, y, masks, nbr, data.num_classes)


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

    One flat float32 buffer holds every gradient plus the loss, so a step costs a single
    allreduce; the same buffer carries the initial weights from rank 0.
    """

    def __init__(self, model: torch.nn.Module, comm: Communicator):
        params = [p for p in model.parameters() if p.requires_grad]
        self.comm = comm
        self.flat = torch.zeros(sum(p.numel() for p in params) + 1)
        # each parameter's flat slice of the buffer
        self.slots = list(zip(params, torch.split(self.flat[:-1],
                                                  [p.numel() for p in params])))

    @torch.no_grad()
    def broadcast_parameters(self) -> None:
        for p, slot in self.slots:
            slot.copy_(p.view(-1))
        self.comm.broadcast(self.flat, root=0)
        for p, slot in self.slots:  # copied: parameters must not alias the gradient buffer
            p.view(-1).copy_(slot)

    def allreduce_gradients(self, loss: torch.Tensor) -> float:
        """Sum gradients and losses over ranks; returns the global loss."""
        if self.comm.size == 1:
            return loss.item()
        for p, slot in self.slots:
            if p.grad is None:
                slot.zero_()
            else:
                slot.copy_(p.grad.view(-1))
        self.flat[-1] = loss.detach()
        self.comm.allreduce(self.flat)
        for p, slot in self.slots:
            if p.grad is None:
                p.grad = torch.empty_like(p)
            p.grad.view(-1).copy_(slot)
        return float(self.flat[-1])


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


def save_checkpoint(path: str, model, optimizer, epoch: int, history: list, best: dict) -> None:
    """Model + optimizer + progress as tensors and plain values, written atomically."""
    state = {"model": model.state_dict(), "optimizer": optimizer.state_dict(),
             "epoch": epoch, "history": history, "best": {k: v for k, v in best.items()
                                                          if k != "state"}}
    tmp = f"{path}.tmp-{os.getpid()}"
    torch.save(state, tmp)
    os.replace(tmp, path)


def load_checkpoint(path: str, model, optimizer) -> tuple[int, list, dict]:
    """Restore ``model`` and ``optimizer``; returns ``(next_epoch, history, best)``."""
    try:
        state = torch.load(path, weights_only=True)
    except FileNotFoundError:
        raise DistGNNError(f"{path}: no such checkpoint file") from None
    except Exception as e:  # torch raises several types for truncated or foreign files
        raise DistGNNError(f"{path}: not a readable distgnn checkpoint ({e})") from None
    try:
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
    except (KeyError, RuntimeError, ValueError) as e:
        first = str(e).strip().splitlines()[0]
        raise DistGNNError(f"{path}: checkpoint does not match this model ({first})") from None
    return state["epoch"] + 1, state["history"], state["best"]


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


def fit(shard: Shard, cfg: TrainConfig, comm: Communicator, timer: PhaseTimer,
        log: Callable[[str], None] = print) -> TrainResult:
    """Train ``cfg.model`` on ``shard``, one replica per rank of ``comm``.

    Returns the per-epoch history and the best evaluation (the same on every rank).
    Collective: every rank of ``comm`` must call it with the same ``cfg``.
    """
    lead = comm.rank == 0
    exchange = shard.nbr.exchange

    def prepare():
        if cfg.epochs < 1 or cfg.eval_every < 1:
            raise DistGNNError("--epochs and --eval-every must be >= 1")
        torch.manual_seed(cfg.seed)
        model = build_model(cfg, shard.num_features, shard.num_classes)
        optimizer = torch.optim.Adam(model.parameters(), lr=cfg.lr,
                                     weight_decay=cfg.weight_decay)
        resumed = load_checkpoint(cfg.resume, model, optimizer) if cfg.resume else (0, [], {})
        metrics = (open(cfg.metrics_out, "a" if cfg.resume else "w")
                   if cfg.metrics_out and lead else None)
        return model, optimizer, resumed, metrics

    model, optimizer, (start, history, best), metrics = all_or_none(comm, prepare)
    sync = ReplicaSync(model, comm)
    sync.broadcast_parameters()
    x, y, train_mask = shard.x, shard.y, shard.masks["train"]
    counts = torch.tensor([float(train_mask.sum())], dtype=torch.float64)
    comm.allreduce(counts)
    num_train = float(counts[0])
    if num_train == 0:
        raise DistGNNError(f"{shard.name}: no training vertices (train mask is empty)")
    bar = progress_bar(cfg, start) if lead else None
    since_best = 0
    try:
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
            with timer("optimizer"):
                optimizer.step()
            local = {"epoch_s": time.perf_counter() - t0, **phase_seconds(timer),
                     "bytes_sent": (exchange.total_bytes_sent - sent
                                    if exchange is not None else 0)}
            high, mean = rank_statistics(comm, local)
            record = {"epoch": epoch, "loss": loss_value, "train_acc": None, "val_acc": None,
                      "test_acc": None, "epoch_s": high["epoch_s"],
                      "phases": {k: high[k] for k in PHASES},
                      "phases_mean": {k: mean[k] for k in PHASES},
                      "bytes_sent_max": int(high["bytes_sent"]),
                      "bytes_sent_mean": mean["bytes_sent"]}
            if (epoch + 1) % cfg.eval_every == 0 or epoch == cfg.epochs - 1:
                record.update(evaluate(model, shard, comm))
                if better(record, best):
                    best, since_best = dict(record, state=copy.deepcopy(model.state_dict())), 0
                else:
                    since_best += 1
            history.append(record)
            if metrics:
                metrics.write(json.dumps(record) + "\n")
                metrics.flush()
            if lead:
                report_progress(bar, log, record, cfg.epochs)
            if cfg.patience and since_best >= cfg.patience:
                if lead:
                    log(f"early stop at epoch {epoch}: no validation improvement in "
                        f"{cfg.patience} evaluations")
                break
    finally:
        if exchange is not None:
            exchange.finish()
        if metrics:
            metrics.close()
        if bar is not None:
            bar.close()
    if cfg.checkpoint and lead:
        save_checkpoint(cfg.checkpoint, model, optimizer, history[-1]["epoch"], history, best)
    return TrainResult(history, best, model)


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
