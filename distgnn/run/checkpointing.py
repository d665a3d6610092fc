"""When a run checkpoints, resumes and stops: the policy over the on-disk checkpoints.

The on-disk format is :mod:`distgnn.run.checkpoint_files`'s.

A :class:`Checkpointer` fingerprints the run (what a checkpoint must share with the run that
resumes it), restores a resumed run's state, writes a checkpoint every
``--checkpoint-every`` epochs, at the end, at an early stop and on a stop request, and
decides what a non-finite step does: stop every rank (after checkpointing the last good
state) or skip the step (``--nan-policy skip``).
"""
from __future__ import annotations

import contextlib
import signal
from typing import Callable

import torch

from ..comm import Communicator, RankFailed, all_or_none
from ..errors import DistGNNError, one_line
from ..signals import LAUNCHER_GONE, request_signal, stopped_line
from . import checkpoint_files as checkpoint
from .config import DEFAULTS, TrainConfig
from .shard import Shard

# the options that do not change what a run computes (where and how fast it runs, in what order
# a sum adds its terms, how long, what it evaluates and writes): a checkpoint may be resumed
# with others.  Every other field of TrainConfig changes the computation and is in the
# fingerprint.
RUN_ONLY = frozenset({"epochs", "eval_every", "roc_auc", "patience", "backend", "device",
                      "rank_devices", "rank_backends", "threads", "metrics_out",
                      "checkpoint_dir", "checkpoint_every", "keep", "resume",
                      "resume_if_present", "nan_policy", "comm_timeout", "progress", "comm",
                      "comm_wait", "verify", "recompute", "reorder",
                      "save_model", "final_weights", "predictions_out", "embeddings_out",
                      "embeddings_layer", "exchange_topology"})
# fingerprinted at every value since checkpoint format 2; the others only away from their
# default, so checkpoints written before they were fingerprinted (at the default) resume
ALWAYS = ("model", "aggregator", "layers", "hidden", "dropout", "residual", "lr",
          "weight_decay", "seed", "feature_norm", "split", "precompute_first",
          "backward_exchange")


def fingerprinted(cfg: TrainConfig) -> dict:
    """``{--flag: value}`` of every option that changes what ``cfg`` computes (the exchange
    precision as the run resolves it, given or not)."""
    options = {"--" + name.replace("_", "-"): value for name, value in cfg.options().items()
               if name not in RUN_ONLY and (name in ALWAYS or value != DEFAULTS[name])}
    options.pop("--exchange-precision", None)
    if cfg.wire != "fp32":
        options["--exchange-precision"] = cfg.wire
    if options.get("--aggregation-precision") == "fp32":  # given, as it was the default once
        del options["--aggregation-precision"]
    return options


class NonFiniteLoss(RankFailed):
    """The loss or a gradient was NaN or infinite (every rank raises it together)."""


class Stopped(RankFailed):
    """A stop request ended the run after the epoch in progress (raised on every rank)."""

    def __init__(self, message: str, signum: int):
        super().__init__(message)
        self.exit_status = 128 + signum


def fingerprint(cfg: TrainConfig, model: torch.nn.Module, shard: Shard,
                comm: Communicator) -> dict:
    """What a checkpoint must share with the run that resumes it: the exchange, every option
    that changes the computation (:func:`fingerprinted`), the data (its content) and the
    parameters; and what it may differ in: the rank count and layout (the partitions)."""
    return {"ranks": comm.size,
            "layout": shard.layout,
            "exchange": shard.nbr.exchange.fingerprint,
            "options": fingerprinted(cfg),
            "data": shard.origin,
            "parameters": {k: list(v.shape) for k, v in model.state_dict().items()}}


class Checkpointer:
    """The checkpoints of one run of ``model`` and ``optimizer`` on ``shard`` (collective:
    every rank makes one with the same ``cfg``)."""

    def __init__(self, cfg: TrainConfig, comm: Communicator, model: torch.nn.Module,
                 optimizer: torch.optim.Optimizer, shard: Shard,
                 log: Callable[[str], None] = print):
        self.cfg, self.comm, self.model, self.optimizer, self.log = cfg, comm, model, optimizer, log
        self.exchange = shard.nbr.exchange
        self.device = shard.x.device
        self.stamp = fingerprint(cfg, model, shard, comm)
        # the run's id in the manifests (rank 0's counts: it writes them); a resume takes
        # the checkpoint's
        self.run: str | None = checkpoint.new_run()
        self.last_saved: int | None = None

    @contextlib.contextmanager
    def in_use(self):
        """The checkpoint directory, held for this run while the block runs.

        Refused while another run holds it (:func:`distgnn.run.checkpoint_files.in_use`);
        nothing to hold without one.  Taken after :meth:`resume`'s refusals, which only
        read the directory, so that a refused run leaves it as it was; claimed again once
        held, for a run that checkpointed there in between."""
        directory = self.cfg.checkpoint_dir
        if not directory:
            yield
            return
        with checkpoint.in_use(directory, self.comm, self.log):
            checkpoint.claim(directory, self.comm, self.run)
            yield

    def resume(self) -> tuple[int, list, dict, int]:
        """``(start, history, best, since_best)`` of a new or resumed run.

        Zeros for a new run (also under ``--resume-if-present`` with no checkpoint to
        resume), else the newest usable checkpoint's, with the model, optimizer, RNG and
        exchange state restored.  Then the checkpoint directory is claimed: refused while it
        holds another run's checkpoints (:func:`distgnn.run.checkpoint_files.claim`), which a
        new run would prune, or its own.
        """
        start, history, best, since_best = self._resumed()
        if self.cfg.checkpoint_dir:
            checkpoint.claim(self.cfg.checkpoint_dir, self.comm, self.run)
        return start, history, best, since_best

    def _resumed(self) -> tuple[int, list, dict, int]:
        directory = self.cfg.resume or self.cfg.resume_if_present
        if not directory:
            return 0, [], {}, 0
        found = checkpoint.resume(directory, self.comm, self.stamp, self.log,
                                  missing_ok=not self.cfg.resume)
        if found is None:
            if self.comm.rank == 0:
                self.log(f"no checkpoint in {directory}: starting a new run")
            return 0, [], {}, 0
        self.run, start = found.run, found.epoch
        if self.cfg.resume:  # asked for: a resume that trains nothing is refused
            all_or_none(self.comm, lambda: self.check_epochs(directory, start))
        elif start >= self.cfg.epochs and self.comm.rank == 0:  # a job requeued once done
            self.log(f"{directory}: its newest checkpoint is after epoch {start}, and --epochs "
                     f"{self.cfg.epochs} leaves nothing to train: the run ends with it")
        path = f"{directory}/{checkpoint.checkpoint_name(start)}"
        history, best, since_best = all_or_none(self.comm, lambda: self.restore(path, found))
        if self.comm.rank == 0:
            self.log(f"resumed from {directory} after epoch {start}" + (
                "" if found.same_layout else f": {self.moved(found.ranks)}"))
        self.last_saved = start
        return start, history, best, since_best

    def check_epochs(self, directory: str, done: int) -> None:
        """Refuse to resume a checkpoint after ``done`` epochs that ``--epochs`` (the total,
        the earlier epochs counted) leaves nothing to train after: the run would end at once
        and give the checkpoint's model as its result."""
        if done >= self.cfg.epochs:
            raise DistGNNError(f"{directory}: its newest checkpoint is after epoch {done}, and "
                               f"--epochs {self.cfg.epochs} counts the earlier epochs: nothing "
                               f"is left to train; give --epochs above {done} to go on")

    def moved(self, ranks: int) -> str:
        """What a resume on another layout says: ``checkpoint of 8 ranks resumed on 4``."""
        def count(p: int) -> str:
            return "one process" if p == 1 else f"{p} ranks"
        here = count(self.comm.size) + (" (other partitions)" if ranks == self.comm.size
                                        else "")
        restart = (f"; the {self.exchange.fingerprint.split()[0]} exchange starts again with "
                   "an exact epoch" if self.exchange.keeps_state else "")
        return f"checkpoint of {count(ranks)} resumed on {here}{restart}"

    def restore(self, path: str, found: checkpoint.Resumed) -> tuple[list, dict, int]:
        """Load ``found`` into the model, optimizer, RNG and exchange.

        Returns the history, best evaluation and epochs since it.  On another layout the exchange keeps nothing of
        the checkpoint's and its next epoch is exact
        (:meth:`distgnn.exchange.Exchange.restart`)."""
        shared, local = found.shared, found.local
        try:
            self.model.load_state_dict(shared["model"])
            self.optimizer.load_state_dict(shared["optimizer"])
            checkpoint.set_rng_state(local["rng"])
            self.exchange.decide(shared["history"])  # --algo auto: its choice, made again
            if found.same_layout:
                self.exchange.load_state_dict(local["exchange"], self.device)
            else:
                self.exchange.restart(found.epoch, shared["history"])
            return shared["history"], shared["best"], shared["since_best"]
        except (KeyError, RuntimeError, ValueError, TypeError, DistGNNError) as e:
            raise checkpoint.CheckpointError(f"{path}: checkpoint does not fit this run "
                                             f"({one_line(e)})") from None

    def save(self, done: int, history: list, best: dict, since_best: int) -> str:
        """The checkpoint after ``done`` epochs (once per epoch); returns its path."""
        path = checkpoint.checkpoint_path(self.cfg.checkpoint_dir, done)
        if self.last_saved != done:
            path = checkpoint.save(
                self.cfg.checkpoint_dir, done, self.comm, self.stamp,
                {"model": self.model.state_dict(), "optimizer": self.optimizer.state_dict(),
                 "history": history, "best": best, "since_best": since_best},
                {"rng": checkpoint.rng_state(),
                 "exchange": self.exchange.state_dict()},
                self.cfg.keep, self.run)
            self.last_saved = done
        return str(path)

    def step_allowed(self, bad_ranks: list[int], epoch: int, run) -> bool:
        """Whether the optimizer may step after a step whose loss or gradients were not
        finite on ``bad_ranks``: raise :class:`NonFiniteLoss` (after checkpointing the
        weights before this step) under ``--nan-policy stop``, else warn and skip."""
        if not bad_ranks:
            return True
        ranks = ", ".join(map(str, bad_ranks))
        if self.cfg.nan_policy == "stop":
            where = f"non-finite loss or gradients in epoch {epoch + 1} on rank {ranks}"
            if self.cfg.checkpoint_dir:  # the weights before this step: the last good state
                path = self.save(epoch, run.history, run.best, run.since_best)
                where += f"; the state after epoch {epoch} is in {path}"
            raise NonFiniteLoss(where + " (--nan-policy skip skips such steps)")
        if self.comm.rank == 0:
            self.log(f"warning: epoch {epoch + 1}: non-finite loss or gradients on rank "
                     f"{ranks}; step skipped")
        return False

    def after_epoch(self, done: int, signum: int, run) -> None:
        """Checkpoint when due (every ``--checkpoint-every``, the last epoch, an early stop,
        a stop request); raise :class:`Stopped` on a stop request."""
        cfg = self.cfg
        path = None
        if cfg.checkpoint_dir and (signum or run.stalled or done == cfg.epochs or (
                cfg.checkpoint_every and done % cfg.checkpoint_every == 0)):
            path = self.save(done, run.history, run.best, run.since_best)
        if signum:
            why = ("the launcher (mpirun) is gone" if signum == LAUNCHER_GONE
                   else f"{signal.Signals(signum).name} received")
            raise Stopped(stopped_line(why, done, path, cfg.checkpoint_dir),
                          request_signal(signum))
