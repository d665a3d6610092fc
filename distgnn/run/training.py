r"""Full-batch training: forward, loss, backward, gradient allreduce, step, metrics.

One loop serves both modes.  Single-socket mode trains on the whole graph with a
one-rank communicator; under MPI each rank trains a replica of the model on one partition
(:mod:`distgnn.run.shard` builds it), and the loop adds what makes the replicas one model
(:mod:`distgnn.run.replicas`): identical initial weights (broadcast from rank 0), the loss

.. math::
    \mathcal{L} = \frac{1}{|V_{train}|} \sum_{p} \sum_{v \in V^p_{train}}
        \operatorname{CE}(\mathbf{z}_v, y_v)

counted at root clones only (``V^p_train``) and divided by the global count, and the
gradients summed over ranks before every optimizer step.  What each epoch records is
:mod:`distgnn.run.epoch_log`'s; when to checkpoint and stop is :mod:`distgnn.run.checkpointing`'s.
The reported test accuracy is the one at the evaluation with the best validation accuracy.
"""
from __future__ import annotations

import contextlib
import copy
import dataclasses
import inspect
import reprlib
import time
from typing import Callable

import torch

from ..comm import Communicator, RankFailed, SelfCommunicator, all_or_none
from ..comm.watchdog import Watchdog
from ..data.graph import NodeDataset
from ..errors import DistGNNError
from ..nn.config import build_model, check_residual
from ..nn.loss import masked_cross_entropy
from ..nn.prepare import prepare, unused_weights
from ..nn.streamed import STREAMABLE, streaming_problem
from ..placement import synchronize
from ..signals import StopRequests
from ..storage import format_bytes
from ..timing import PhaseTimer
from . import arena as memory_arena
from . import streaming
from .checkpointing import Checkpointer, NonFiniteLoss, Stopped
from .config import TrainConfig
from .epoch_log import EpochLog, EpochStats, epoch_record, phase_seconds
from .evaluation import (
    check_logits,
    embedding_layer,
    forward_eval,
    gathered_roc_auc,
    mask_scores,
    write_vertex_outputs,
)
from .memory import keep_freed_blocks, minor_faults
from .optimizer import Adam
from .replicas import ReplicaSync
from .saved_model import save_model
from .shard import Shard, dataset_shard, in_precision

__all__ = ["ModelFactory", "TrainResult", "checked_factory", "checked_model",
           "configure_threads", "fit", "model_and_optimizer", "train"]


@dataclasses.dataclass
class TrainResult:
    """What a run returns, the same on every rank.

    ``history``, one record per epoch (loss, times, bytes and, at evaluations, ``{mask}_acc``
    and ``val_loss``); ``best``, the evaluation with the best validation accuracy; ``model``,
    the trained model (this rank's replica: every rank holds the same weights, those of the
    last epoch); ``summary``, the metrics file's summary record
    (:mod:`distgnn.run.epoch_log`), with the paths written.  Epochs are counted from 1
    (``history[0]["epoch"] == 1``).
    """

    history: list[dict]
    best: dict
    model: torch.nn.Module
    summary: dict = dataclasses.field(default_factory=dict)


def configure_threads(threads: int | None) -> None:
    """Pin torch's and Numba's thread pools to ``threads`` (``None``: leave the defaults)."""
    if threads is None:
        return
    torch.set_num_threads(threads)
    import numba  # deferred: importing numba costs start-up time that torch-only runs skip

    numba.set_num_threads(min(threads, numba.config.NUMBA_NUM_THREADS))


ModelFactory = Callable[[int, int], torch.nn.Module]


def model_and_optimizer(cfg: TrainConfig, shard: Shard, make_model: ModelFactory | None = None):
    """The model, ready for the shard's graph, and its Adam optimizer.

    The model is seeded (every rank builds the same), on the shard's device, in its floating
    type, made ready for the shard's graph (:func:`distgnn.nn.prepare.prepare`).
    ``make_model(in_channels, num_classes)`` builds a user's model (called as
    ``model(g, x)``, returning logits ``[N, C]``); ``None``: ``cfg.model``.
    """
    model = place_model(cfg, shard, make_model)
    return model, Adam(model.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)


def place_model(cfg: TrainConfig, shard: Shard, make_model: ModelFactory | None = None
                ) -> torch.nn.Module:
    """The model alone (see :func:`model_and_optimizer`)."""
    torch.manual_seed(cfg.seed)
    if make_model is None:
        check_residual(cfg.network, shard.num_features)
        model = build_model(cfg.network, shard.num_features, shard.num_classes, cfg.recompute)
    else:
        model = checked_model(make_model(shard.num_features, shard.num_classes))
    model = model.to(shard.x.device, shard.dtype)
    prepare(model, shard.nbr, cfg.bf16_aggregation)
    return model


def checked_factory(make_model) -> ModelFactory | None:
    """``make_model`` as given to :func:`distgnn.train` or :func:`distgnn.predict`, if it
    is none or a function: else one line, before any data is read (a module given in its
    place would be called as ``module(in_channels, num_classes)``)."""
    if isinstance(make_model, torch.nn.Module):
        raise DistGNNError(f"make_model is a {type(make_model).__name__} module; give the "
                           "function that builds it, make_model(in_channels, num_classes) "
                           "(e.g. make_model=lambda f, c: MyModel(f, 64, c))")
    if make_model is not None and not callable(make_model):
        raise DistGNNError(f"make_model must be a function make_model(in_channels, "
                           f"num_classes) that returns a torch.nn.Module, got "
                           f"{reprlib.repr(make_model)} ({type(make_model).__name__})")
    return make_model


def checked_model(model, who: str = "make_model") -> torch.nn.Module:
    """``model``, what the model factory ``who`` returned, if distgnn can call it.

    That is, as ``model(g, x)``; else one line naming ``who``: not a ``torch.nn.Module``
    (``None``, a number), or a PyTorch Geometric model as it is, whose ``forward`` takes
    ``edge_index`` (:func:`distgnn.pyg.distribute` makes one callable as ``model(g, x)``)."""
    if not isinstance(model, torch.nn.Module):
        raise DistGNNError(f"{who} returned {reprlib.repr(model)} ({type(model).__name__}), "
                           "not a torch.nn.Module")
    try:
        takes = inspect.signature(model.forward).parameters
    except (TypeError, ValueError):  # a forward without a signature: its call will tell
        takes = {}
    if "edge_index" in takes:
        raise DistGNNError(f"{who} returned a {type(model).__name__} whose forward takes "
                           "edge_index, as a PyTorch Geometric model does; distgnn calls "
                           "model(g, x): return distgnn.pyg.distribute(model)")
    return model


def reads_edge_weights(model: torch.nn.Module, shard: Shard) -> bool:
    """Whether ``model`` reads edge weights on ``shard``'s graph: the graph has them and a
    layer takes them (GAT's attention does not, :func:`distgnn.nn.prepare.unused_weights`)."""
    return shard.weighted and unused_weights(model, shard.nbr) is None


def training_vertices(shard: Shard, comm: Communicator) -> float:
    """The global number of training vertices (refused when there are none)."""
    counts = torch.tensor([float(shard.masks["train"].sum())], dtype=torch.float64)
    comm.allreduce(counts)
    if counts[0] == 0:  # every rank sees the sum: all raise this together
        raise RankFailed(f"{shard.name}: no training vertices (train mask is empty)"
                         if comm.size == 1 else "no training vertices in any partition")
    return float(counts[0])


def step(model: torch.nn.Module, optimizer, shard: Shard, sync: ReplicaSync, num_train: float,
         epoch: int, timer: PhaseTimer) -> tuple[float, list[int]]:
    """Forward, loss, backward and the gradient allreduce of one epoch; returns the global
    loss and the ranks whose loss or gradients were not finite."""
    model.train()
    shard.nbr.set_epoch(epoch)
    streamed_backward = None
    with timer("forward"), in_precision(shard):
        if shard.spilled is None:
            logits = model(shard.nbr, shard.x)
        else:  # through disk (--memory-limit): the logits, and what takes their gradient
            logits, streamed_backward = streaming.forward(model, shard)
            logits.requires_grad_(True)
    check_logits(logits, shard)
    logits = logits.to(shard.dtype)  # bf16 under autocast: the loss sums in float32
    with timer("backward"):
        train = shard.masks["train"]
        loss = masked_cross_entropy(logits, shard.y, train, num_train)
        if streamed_backward is None:
            del logits  # the loss kept its gradient: [N, C] fewer through the backward pass
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        if streamed_backward is not None:
            streamed_backward(logits.grad)
    with timer("allreduce"):
        value = sync.allreduce_gradients(loss)
    return value, sync.nonfinite_ranks


def epoch_arena(cfg: TrainConfig, shard: Shard, comm: Communicator,
                log: Callable[[str], None]) -> memory_arena.Arena | None:
    """The planned memory arena (:mod:`distgnn.run.arena`) of a CPU rank, or ``None``.

    For a rank with ``cfg.memory_arena``; ``None`` elsewhere (a streamed shard too: its
    slab, planned at the first epoch's peak, would sit beside the I/O threads' buffers,
    over the memory limit), or where it cannot be built (said once)."""
    if not cfg.memory_arena or shard.x.device.type != "cpu" or shard.spilled is not None:
        return None
    try:
        return memory_arena.install()
    except RuntimeError as e:
        if comm.rank == 0:
            log(f"memory arena off: {e}")
        return None


def in_arena(arena: memory_arena.Arena | None, kind: str):
    """``arena``'s epoch of ``kind`` for the block; nothing without an arena."""
    return arena.epoch(kind) if arena else contextlib.nullcontext()


@torch.no_grad()
def evaluate(model: torch.nn.Module, shard: Shard, comm: Communicator,
             with_roc_auc: bool = False) -> dict:
    """Accuracy on each mask and the validation loss over all ranks, with dropout off.

    The scores are :func:`~distgnn.run.evaluation.mask_scores`'s, with
    ``eval_bytes_sent_mean``: the split-vertex bytes a rank sent for it, and ``eval_s_mean``:
    a rank's seconds for its forward pass and scores (means over ranks); with
    ``with_roc_auc`` (binary tasks), also each mask's ROC-AUC.
    """
    exchange = shard.nbr.exchange
    sent = exchange.total_bytes_sent
    started = time.perf_counter()
    logits, _ = forward_eval(model, shard)
    out = mask_scores(logits, shard, comm, {
        "eval_bytes_sent": float(exchange.total_bytes_sent - sent),
        "eval_s": time.perf_counter() - started})
    if with_roc_auc:
        out.update(gathered_roc_auc(logits, shard, comm))
    return out


def final_weights(cfg: TrainConfig, model: torch.nn.Module, run: EpochLog) -> tuple[dict, int]:
    """``(state_dict, epoch)`` of the weights a run's results come from: ``cfg.final_weights``
    ``best`` (the evaluation of best validation accuracy; the last epoch's when the run
    never evaluated a validation set) or ``last``."""
    if cfg.final_weights == "best" and "state" in run.best:
        return run.best["state"], run.best["epoch"]
    return model.state_dict(), run.history[-1]["epoch"]


def write_results(cfg: TrainConfig, model: torch.nn.Module, shard: Shard, comm: Communicator,
                  run: EpochLog, custom: bool) -> dict:
    """The model file, predictions and embeddings a run was asked for, from
    :func:`final_weights`; returns ``{what: path}`` of those written.  Collective."""
    state, epoch = final_weights(cfg, model, run)
    saved = {}
    if cfg.save_model:
        all_or_none(comm, lambda: comm.rank != 0 or save_model(
            cfg.save_model, model, state, cfg, shard.num_features, shard.num_classes,
            weights=cfg.final_weights, epoch=epoch, custom=custom,
            edge_weights=reads_edge_weights(model, shard)))
        saved["model"] = cfg.save_model
    if cfg.predictions_out or cfg.embeddings_out:
        swap = state is run.best.get("state")  # else the model holds the weights already
        current = copy.deepcopy(model.state_dict()) if swap else None
        if swap:
            model.load_state_dict(state)
        logits, embeddings = forward_eval(
            model, shard, cfg.embeddings_layer if cfg.embeddings_out else None)
        if swap:
            model.load_state_dict(current)
        write_vertex_outputs(shard, comm, logits, embeddings, cfg.predictions_out,
                             cfg.embeddings_out)
        saved.update({k: v for k, v in (("predictions", cfg.predictions_out),
                                        ("embeddings", cfg.embeddings_out)) if v})
    return saved


def fit(shard: Shard, cfg: TrainConfig, comm: Communicator, timer: PhaseTimer,
        log: Callable[[str], None] = print, watchdog: Watchdog | None = None,
        make_model: ModelFactory | None = None) -> TrainResult:
    """Train ``cfg.model`` or ``make_model``'s on ``shard``, one replica per rank.

    Each rank of ``comm`` trains one replica; for ``make_model``, see
    :func:`model_and_optimizer`.  Returns the per-epoch history and the best evaluation (the
    same on every rank).  Checkpoints and stops as
    :class:`~distgnn.run.checkpointing.Checkpointer` decides; ``watchdog`` is armed after the
    first epoch.  Collective: every rank must call it with the same ``cfg``.  A streamed
    shard's spill files are removed when it returns or raises.
    """
    try:
        return _train_replicas(shard, cfg, comm, timer, log, watchdog, make_model)
    finally:
        shard.close()


def _train_replicas(shard: Shard, cfg: TrainConfig, comm: Communicator, timer: PhaseTimer,
                    log: Callable[[str], None], watchdog: Watchdog | None,
                    make_model: ModelFactory | None) -> TrainResult:
    """:func:`fit`'s work."""
    def start():  # the same data on every rank: the same message, one line
        if shard.num_classes < 2:
            raise DistGNNError(f"the data has {shard.num_classes} class; node "
                               "classification needs at least two")
        if cfg.roc_auc and shard.num_classes != 2:
            raise DistGNNError(f"--roc-auc needs a binary task; the data has "
                               f"{shard.num_classes} classes")
        model, optimizer = model_and_optimizer(cfg, shard, make_model)
        problem = streaming_problem(model) if shard.spilled is not None else None
        if problem is not None:  # a model of one's own: the plan could not see it
            raise DistGNNError(f"{shard.name}: the run does not fit under --memory-limit, "
                               f"and its training state streams through disk for "
                               f"{STREAMABLE} only, not {problem}")
        if cfg.embeddings_out:  # what the run writes at its end, refused before it trains
            embedding_layer(model, cfg.embeddings_layer)
        return model, optimizer

    model, optimizer = all_or_none(comm, start)
    sync = ReplicaSync(model, comm)
    sync.broadcast_parameters()
    checkpoints = Checkpointer(cfg, comm, model, optimizer, shard, log)
    resumed = checkpoints.resume()
    with checkpoints.in_use():  # refused while another run writes there
        run = EpochLog(cfg.epochs, *resumed, lead=comm.rank == 0, metrics_out=cfg.metrics_out,
                       progress=cfg.progress, patience=cfg.patience, log=log)
        num_train = training_vertices(shard, comm)
        exchange, ended = shard.nbr.exchange, False
        arena = epoch_arena(cfg, shard, comm, log)
        all_or_none(comm, run.open)
        try:
            with StopRequests(watch_launcher=comm.size > 1) as stop:
                for epoch in range(run.start, cfg.epochs):
                    timer.reset()
                    started, faults = time.perf_counter(), minor_faults()
                    sent, exact = exchange.total_bytes_sent, exchange.exact_bytes
                    spilled = streaming.io_counters(shard)
                    with in_arena(arena, "train"):
                        loss, bad = step(model, optimizer, shard, sync, num_train, epoch, timer)
                        if checkpoints.step_allowed(bad, epoch, run):
                            with timer("optimizer"):
                                optimizer.step()
                    if arena and epoch == run.start:
                        keep_freed_blocks()  # what malloc still serves, reused from now on
                        planned = arena.stats()
                        if comm.rank == 0:
                            log(f"memory arena: {format_bytes(planned.slab_bytes)} planned for "
                                f"{planned.planned} of the epoch's {planned.blocks} large blocks")
                    synchronize(shard.x.device)
                    record, signum = epoch_record(comm, EpochStats(
                        epoch=epoch, loss=loss, seconds=time.perf_counter() - started,
                        phases=phase_seconds(timer), bytes_sent=exchange.total_bytes_sent - sent,
                        exact_bytes=exchange.exact_bytes - exact,
                        exact_exchange=exchange.exact_epoch(epoch), drift=exchange.drift(),
                        allreduce_bytes=sync.step_bytes, stop=stop.request(), skipped=bad,
                        page_faults=minor_faults() - faults,
                        spill=streaming.io_since(shard, spilled)))
                    warning = exchange.observe(epoch, loss, record.get("stale_drift"))
                    if warning is not None:  # the stale epochs were costing accuracy
                        record["exchange_warning"] = warning
                        if comm.rank == 0:
                            log(f"warning: {warning['reason']}")
                    chose = exchange.decide([*run.history, record])  # --algo auto, once
                    if chose is not None:
                        record["exchange_choice"] = {"algo": exchange.chosen,
                                                     **exchange.choice_made}
                        if arena and exchange.chosen != "cd-0":  # other blocks: plan them anew
                            arena.release()
                        if comm.rank == 0:
                            log(chose)
                    if (epoch + 1) % cfg.eval_every == 0 or epoch == cfg.epochs - 1:
                        with in_arena(arena, "eval"):
                            record.update(evaluate(model, shard, comm, cfg.roc_auc))
                    run.add(record, model)
                    if watchdog is not None:  # its limit on slow ranks follows the epochs
                        watchdog.arm(record["epoch_s"])
                    checkpoints.after_epoch(epoch + 1, signum, run)
                    if run.stalled:
                        if comm.rank == 0:
                            log(f"early stop at epoch {epoch + 1}: no validation improvement in "
                                f"{cfg.patience} evaluations")
                        break
            run.summarize(cfg.final_weights,
                          write_results(cfg, model, shard, comm, run, make_model is not None),
                          exchange.describe(cfg.exchange_schedule)
                          if exchange.combines_clones else None)
            ended = True
        except (Stopped, NonFiniteLoss):
            ended = True
            raise
        finally:
            exchange.finish()
            run.close(ended)
            if arena:  # the slab is this run's: the process may go on to other work
                arena.release()
        return TrainResult(run.history, run.best, model, run.summary)


def train(data: NodeDataset, cfg: TrainConfig, log: Callable[[str], None] = print,
          make_model: ModelFactory | None = None) -> TrainResult:
    """Train ``cfg.model`` (or ``make_model``'s) on the whole of ``data`` in this process
    (single-socket mode)."""
    cfg.check_single_socket()
    cfg.check_paths()
    configure_threads(cfg.threads)
    timer = PhaseTimer()
    return fit(dataset_shard(data, cfg, timer, log), cfg, SelfCommunicator(), timer, log,
               make_model=make_model)
