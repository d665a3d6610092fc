"""What a run records of each epoch, and what it keeps and shows of the records.

This module owns the record itself, the history, the best evaluation and the patience count,
the metrics file, and the progress shown.

One record per epoch: ``epoch`` (counted from 1, as on the console and in checkpoint names:
the record after the first epoch has ``epoch`` 1), ``loss``, the accuracies (``None``
between evaluations), ``epoch_s`` and ``phases`` (max over ranks), ``phases_mean``,
``phases_max_rank`` (the rank that took longest in each phase: where a slow node or link
shows), ``bytes_sent_max`` and ``bytes_sent_mean`` (split-vertex exchange of the training
step), ``bytes_cd0_mean`` (what cd-0 in the run's type would have sent for it),
``exact_exchange`` (under cd-r's default schedule: whether the controller ran the epoch
exact; on its exact epochs after the first, ``stale_drift`` and ``stale_drift_grad``,
per layer key: how far the remote terms moved since the last exact epoch, relative to the
split clones' sums, :meth:`~distgnn.exchange.delayed.DelayedSum.refresh`; on the one epoch
after which the drift made every later epoch exact, ``exchange_warning``:
:meth:`~distgnn.exchange.Exchange.observe`'s finding), an evaluated epoch adds
``eval_bytes_sent_mean``, the evaluation's, and ``eval_s_mean``, its seconds: the forward
pass without autograd that inference runs),
``peak_rss_mib_max`` and ``peak_rss_mib_mean`` (each rank's peak resident memory since it
started, ``VmHWM``, in MiB: what the node's memory must hold), ``allreduce_bytes`` (the
gradient allreduce's buffer, the same on every rank; what crosses the wire for it depends on
MPI's algorithm: once per step with 2 ranks), and ``skipped_step`` for a step skipped by
``--nan-policy skip``. The metrics file holds the records as JSON lines; it is written
beside its path while the run goes on and replaces it only when the run ends in order
(:class:`~distgnn.storage.AtomicStream`). The best evaluation is the one with the highest
validation accuracy (ties: lower validation loss). A run that ends in order appends one
summary record, ``{"summary": true, "epochs", "resumed_after", "best_epoch", "train_acc",
"val_acc", "test_acc", "longest_loss_rise", "weights", "saved"}``: the epochs run, the
epochs of the checkpoint the run resumed from (0 for a new run: its own epochs follow), the best
evaluation's epoch and accuracies, the most consecutive epochs whose training loss went up,
which weights the results come from and ``{what: path}`` of the model, predictions and
embeddings written; with split vertices also ``"exchange"``: :func:`exchange_summary`.
"""
from __future__ import annotations

import copy
import dataclasses
import json
import math
import sys
from pathlib import Path
from typing import Callable

import torch

from ..comm import Communicator
from ..storage import AtomicStream, file_head
from ..timing import PhaseTimer
from .memory import process_mib
from .replicas import rank_statistics

__all__ = ["EpochLog", "EpochStats", "longest_rise", "read_metrics"]

PHASES = ("aggregation", "exchange_pre", "exchange_wait", "exchange_post", "io_wait", "dense",
          "allreduce", "optimizer")


def phase_seconds(timer: PhaseTimer) -> dict[str, float]:
    """The epoch's wall-clock phases: local aggregation (kernels), the three exchange phases,
    waits for spill files (``io_wait``, a streamed run's), dense work (everything else in
    forward and backward), gradient allreduce, optimizer."""
    s = timer.seconds
    phases = {"aggregation": s["aggregation_forward"] + s["aggregation_backward"],
              **{k: s[k] for k in ("exchange_pre", "exchange_wait", "exchange_post",
                                   "io_wait")}}
    phases["dense"] = s["forward"] + s["backward"] - sum(phases.values())
    phases.update(allreduce=s["allreduce"], optimizer=s["optimizer"])
    return phases


@dataclasses.dataclass
class EpochStats:
    """What one rank measured of one training epoch.

    :func:`epoch_record` combines the ranks'.  ``seconds`` and ``phases``
    (:func:`phase_seconds`) are wall-clock; ``bytes_sent``: this rank's split-vertex bytes of
    the training step, ``exact_bytes``: what cd-0 in the run's type would have sent for them;
    ``exact_exchange``: whether cd-r's controller ran the epoch exact (``None``: no
    controller); ``allreduce_bytes``: the gradient allreduce's buffer; ``stop``: this rank's
    stop request (a signal number, 0 for none); ``skipped``: the step was skipped
    (``--nan-policy skip``); ``page_faults``: the process's minor page faults during the
    epoch (:func:`~distgnn.run.memory.minor_faults`); ``spill``: a streamed rank's bytes
    read and written on disk in the epoch and the most its spill files held so far
    (``{"read", "written", "disk"}``; ``None`` in memory); ``drift``: under cd-r's default
    schedule, an exact epoch's ``(moved, total)`` sums of squares per layer, forward and
    backward (:meth:`~distgnn.exchange.Exchange.drift`).
    """

    epoch: int
    loss: float
    seconds: float
    phases: dict[str, float]
    bytes_sent: int = 0
    exact_bytes: int = 0
    exact_exchange: bool | None = None
    allreduce_bytes: int = 0
    stop: int = 0
    skipped: bool = False
    page_faults: int = 0
    spill: dict[str, int] | None = None
    drift: dict[str, dict[str, tuple[float, float]]] = dataclasses.field(default_factory=dict)


def epoch_record(comm: Communicator, stats: EpochStats) -> tuple[dict, int]:
    """The epoch's record (collective: times and bytes over ranks) and the stop request of
    any rank (a signal number, 0 for none)."""
    local = {"epoch_s": stats.seconds, **stats.phases, "bytes_sent": stats.bytes_sent,
             "exact_bytes": stats.exact_bytes, "peak_rss_mib": process_mib(),
             "stop": float(stats.stop), "page_faults": float(stats.page_faults),
             **{f"spill_{k}": float(v) for k, v in (stats.spill or {}).items()},
             **{f"{field}_{i}/{k}": v for field, per in stats.drift.items()
                for k, pair in per.items() for i, v in enumerate(pair)}}
    high, mean, where = rank_statistics(comm, local)  # every rank streams, or none does
    record = {"epoch": stats.epoch + 1, "loss": stats.loss, "train_acc": None,
              "val_acc": None, "test_acc": None, "epoch_s": high["epoch_s"],
              "phases": {k: high[k] for k in PHASES},
              "phases_mean": {k: mean[k] for k in PHASES},
              "phases_max_rank": {k: where[k] for k in PHASES},
              "bytes_sent_max": int(high["bytes_sent"]), "bytes_sent_mean": mean["bytes_sent"],
              "bytes_cd0_mean": mean["exact_bytes"],
              "allreduce_bytes": stats.allreduce_bytes,
              "peak_rss_mib_max": high["peak_rss_mib"],
              "peak_rss_mib_mean": mean["peak_rss_mib"],
              "page_faults_max": int(high["page_faults"]),
              "page_faults_mean": mean["page_faults"]}
    if stats.spill is not None:
        record.update({f"spill_{k}_bytes_max": int(high[f"spill_{k}"]) for k in stats.spill})
        record.update({f"spill_{k}_bytes_mean": mean[f"spill_{k}"] for k in stats.spill})
    if stats.exact_exchange is not None:
        record["exact_exchange"] = stats.exact_exchange
    for field, per in stats.drift.items():  # sums over ranks: their means' ratio
        record[field] = {k: math.sqrt(mean[f"{field}_0/{k}"] / mean[f"{field}_1/{k}"])
                         if mean[f"{field}_1/{k}"] else 0.0 for k in per}
    if stats.skipped:
        record["skipped_step"] = True
    return record, int(high["stop"])


def longest_rise(losses: list[float]) -> int:
    """The most consecutive epochs whose training loss exceeds the epoch's before."""
    longest = run = 0
    for before, after in zip(losses, losses[1:]):
        run = run + 1 if after > before else 0
        longest = max(longest, run)
    return longest


def exchange_summary(history: list[dict], schedule: str) -> dict:
    """What the split-vertex exchange cost over ``history``.

    ``bytes_vs_cd0`` (bytes sent over what cd-0 in the run's type would have sent, means over
    ranks, ``None`` without split vertices), ``schedule`` (as given) and, under cd-r's
    controller, ``exact_epochs`` and ``stale_epochs``, and ``warning``: the line of the
    record that found the stale epochs costing accuracy (``exchange_warning``), if one did.
    """
    sent = sum(r.get("bytes_sent_mean", 0.0) for r in history)
    exact = sum(r.get("bytes_cd0_mean", 0.0) for r in history)
    out = {"schedule": schedule, "bytes_vs_cd0": sent / exact if exact else None}
    decided = [r["exact_exchange"] for r in history if "exact_exchange" in r]
    if decided:
        out.update(exact_epochs=sum(decided), stale_epochs=len(decided) - sum(decided))
    warned = [r["exchange_warning"]["reason"] for r in history if "exchange_warning" in r]
    if warned:
        out["warning"] = warned[0]
    return out


def better(record: dict, best: dict) -> bool:
    if record.get("val_acc") is None:
        return False
    key = (record["val_acc"], -(record["val_loss"] or 0.0))
    return not best or key > (best["val_acc"], -(best["val_loss"] or 0.0))


def read_metrics(path: str | Path) -> tuple[list[dict], dict]:
    """``(epoch records, summary record or {})`` of a metrics file."""
    records = [json.loads(line) for line in Path(path).read_text().splitlines() if line]
    if records and records[-1].get("summary"):
        return records[:-1], records[-1]
    return records, {}


def is_metrics_file(path: Path) -> bool:
    """An empty file, or JSON lines whose first record has an ``epoch`` and a ``loss``
    (what :class:`EpochLog` writes)."""
    first = file_head(path, 1 << 16).split(b"\n", 1)[0].strip()
    if not first:
        return path.stat().st_size == 0
    try:
        record = json.loads(first)
    except ValueError:
        return False
    return isinstance(record, dict) and {"epoch", "loss"} <= record.keys()


class EpochLog:
    """History, best evaluation, patience, metrics file and progress of one run.

    Args:
        epochs (int): the run's total epochs; ``start`` (int): epochs already done (resumed).
        history, best, since_best: what a resumed run already has.
        lead (bool): this rank writes the metrics file and shows progress (rank 0).
        metrics_out (str, optional): the metrics file; ``progress`` (bool): a bar on a
            terminal; ``patience`` (int): evaluations without improvement before an early
            stop (0: never); ``log``: where lines go.
    """

    def __init__(self, epochs: int, start: int = 0, history=None, best=None, since_best=0,
                 lead: bool = True, metrics_out: str | None = None, progress: bool = True,
                 patience: int = 0, log: Callable[[str], None] = print):
        self.epochs, self.start, self.lead, self.patience, self.log = (
            epochs, start, lead, patience, log)
        self.history, self.best, self.since_best = history or [], best or {}, since_best
        self.metrics_out, self.progress = metrics_out, progress
        self.metrics: AtomicStream | None = None
        self.summary: dict = {}
        self.bar = None

    def open(self) -> None:
        """Start the metrics stream (holding the epochs a resumed run already has, so that
        it never holds epochs the run went on to repeat after a crash) and the progress."""
        if not self.lead:
            return
        if self.metrics_out:
            self.metrics = AtomicStream(self.metrics_out)
            for record in self.history:
                self.metrics.write(json.dumps(record) + "\n")
        if self.progress and sys.stderr.isatty():  # else plain log lines
            from tqdm import tqdm

            self.bar = tqdm(total=self.epochs, initial=self.start, unit="epoch",
                            dynamic_ncols=True)

    def add(self, record: dict, model: torch.nn.Module) -> None:
        """Keep ``record`` (and ``model``'s weights if it is the best evaluation so far)."""
        if "val_loss" in record:  # an evaluation (evaluate() always gives val_loss)
            if better(record, self.best):
                self.best = dict(record, state=copy.deepcopy(model.state_dict()))
                self.since_best = 0
            else:
                self.since_best += 1
        self.history.append(record)
        if self.metrics:
            self.metrics.write(json.dumps(record) + "\n")
        if self.lead:
            self.show(record)

    def show(self, record: dict) -> None:
        fmt = {k: f"{record[k]:.4f}" for k in ("train_acc", "val_acc", "test_acc")
               if record.get(k) is not None}
        if self.bar is not None:
            self.bar.set_postfix(loss=f"{record['loss']:.4f}", **fmt)
            self.bar.update(1)
        elif fmt:
            accs = " ".join(f"{k.removesuffix('_acc')} {v}" for k, v in fmt.items())
            self.log(f"epoch {record['epoch']:>4}/{self.epochs}  loss {record['loss']:.4f}"
                     f"  {accs}  ({record['epoch_s'] * 1e3:.1f} ms)")

    def summarize(self, weights: str, saved: dict, schedule: str | None = None) -> dict:
        """The summary record (see the module docstring), kept as :attr:`summary` and
        appended to the metrics file (``schedule``: the split-vertex exchange's, ``None``
        without one)."""
        best = self.best
        self.summary = {"summary": True, "epochs": self.history[-1]["epoch"],
                        "resumed_after": self.start, "best_epoch": best.get("epoch"),
                        **{k: best.get(k) for k in ("train_acc", "val_acc", "test_acc")},
                        "longest_loss_rise": longest_rise([r["loss"] for r in self.history]),
                        "weights": weights, "saved": saved}
        if schedule is not None:
            self.summary["exchange"] = exchange_summary(self.history, schedule)
        if self.metrics:
            self.metrics.write(json.dumps(self.summary) + "\n")
        return self.summary

    @property
    def stalled(self) -> bool:
        """No better evaluation in ``patience`` evaluations (never with patience 0)."""
        return bool(self.patience and self.since_best >= self.patience)

    def close(self, ended: bool) -> None:
        """Publish the metrics file when the run ended in order, else discard it."""
        if self.metrics:
            self.metrics.commit() if ended else self.metrics.discard()
        if self.bar is not None:
            self.bar.close()
