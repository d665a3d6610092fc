"""Full-batch training on one socket: forward, loss, backward, step, metrics.

The loss is the cross-entropy over the training vertices; the reported test accuracy is
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


@dataclasses.dataclass
class TrainResult:
    history: list[dict]
    best: dict
    model: GNN


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


def build_model(cfg: TrainConfig, in_channels: int, num_classes: int) -> GNN:
    return GNN(cfg.model, in_channels, cfg.hidden, num_classes, cfg.layers, cfg.dropout,
               cfg.aggregator, cfg.residual, cfg.seed)


def phase_seconds(timer: PhaseTimer) -> dict[str, float]:
    """Split the loop's wall-clock phases into aggregation / dense / loss+backward / optimizer."""
    s = timer.seconds
    agg_f, agg_b = s["aggregation_forward"], s["aggregation_backward"]
    return {"aggregation": agg_f + agg_b, "dense": s["forward"] - agg_f,
            "loss_backward": s["backward"] - agg_b, "optimizer": s["optimizer"]}


@torch.no_grad()
def evaluate(model: GNN, nbr: Neighbourhood, x, y, masks: dict) -> dict:
    """Accuracy on each mask and the validation loss, with dropout off."""
    model.eval()
    logits = model(nbr, x)
    pred = logits.argmax(1)
    out = {f"{name}_acc": float((pred[m] == y[m]).float().mean()) if m.any() else None
           for name, m in masks.items()}
    val = masks["val"]
    out["val_loss"] = float(F.cross_entropy(logits[val], y[val])) if val.any() else None
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
    """Train ``cfg.model`` on ``data``; returns the per-epoch history and the best evaluation."""
    if cfg.epochs < 1 or cfg.eval_every < 1:
        raise DistGNNError("--epochs and --eval-every must be >= 1")
    if not data.train_mask.any():
        raise DistGNNError(f"{data.name}: no training vertices (train mask is empty)")
    configure_threads(cfg.threads)
    torch.manual_seed(cfg.seed)
    x = torch.from_numpy(normalize_features(data.x, cfg.feature_norm))
    y = torch.from_numpy(data.y)
    masks = {name: torch.from_numpy(getattr(data, f"{name}_mask"))
             for name in ("train", "val", "test")}
    timer = PhaseTimer()
    nbr = Neighbourhood(data.graph, get_backend(cfg.backend), timer=timer)
    model = build_model(cfg, data.num_features, data.num_classes)
    optimizer = torch.optim.Adam(model.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)
    start, history, best = 0, [], {}
    if cfg.resume:
        start, history, best = load_checkpoint(cfg.resume, model, optimizer)
    metrics = open(cfg.metrics_out, "a" if cfg.resume else "w") if cfg.metrics_out else None
    bar = progress_bar(cfg, start)
    since_best = 0
    try:
        for epoch in range(start, cfg.epochs):
            timer.reset()
            t0 = time.perf_counter()
            model.train()
            with timer("forward"):
                logits = model(nbr, x, step=epoch)
            with timer("backward"):
                loss = F.cross_entropy(logits[masks["train"]], y[masks["train"]])
                optimizer.zero_grad(set_to_none=True)
                loss.backward()
            with timer("optimizer"):
                optimizer.step()
            record = {"epoch": epoch, "loss": loss.item(), "train_acc": None, "val_acc": None,
                      "test_acc": None, "epoch_s": time.perf_counter() - t0,
                      "phases": phase_seconds(timer)}
            if (epoch + 1) % cfg.eval_every == 0 or epoch == cfg.epochs - 1:
                record.update(evaluate(model, nbr, x, y, masks))
                if better(record, best):
                    best, since_best = dict(record, state=copy.deepcopy(model.state_dict())), 0
                else:
                    since_best += 1
            history.append(record)
            if metrics:
                metrics.write(json.dumps(record) + "\n")
                metrics.flush()
            report_progress(bar, log, record, cfg.epochs)
            if cfg.patience and since_best >= cfg.patience:
                log(f"early stop at epoch {epoch}: no validation improvement in "
                    f"{cfg.patience} evaluations")
                break
    finally:
        if metrics:
            metrics.close()
        if bar is not None:
            bar.close()
    if cfg.checkpoint:
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
