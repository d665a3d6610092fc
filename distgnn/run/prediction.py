r"""A saved model applied to a graph, with its predictions and embeddings written.

:func:`load_model` rebuilds it; :func:`predict` runs it on a dataset (one process) or on a
partition directory (under ``mpirun``, one rank per partition) and writes its predictions and
embeddings.

The graph may be the one trained on or another with the same feature width (new vertices
and edges: inductive inference, for the models whose weights do not depend on the graph --
all of the built-in ones).  Features are normalised as in training (the model file's
``feature_norm``); on partitions every exchange is exact (cd-0), whatever the training
run's algorithm was, so the results equal the whole graph's in one process.  Inference keeps
no activations for a backward pass (:mod:`distgnn.run.evaluation`).
"""
from __future__ import annotations

import dataclasses
import sys
import time
from pathlib import Path
from typing import Callable

import numpy as np
import torch

from ..comm import Communicator, SelfCommunicator, all_or_none
from ..data.datasets import load
from ..data.graph import NodeDataset
from ..data.partitions import is_partition_source
from ..errors import DistGNNError
from ..nn.config import build_model
from ..nn.prepare import prepare
from ..storage import check_distinct_outputs
from ..timing import PhaseTimer
from .config import OWNER, TrainConfig
from .distributed import open_partitions
from .evaluation import (
    check_logits,
    embedding_layer,
    forward_eval,
    mask_scores,
    write_vertex_outputs,
)
from .memory import process_mib
from .replicas import rank_statistics
from .saved_model import read_model_file
from .shard import MODEL_ROW_NORM_WARNING, Shard, dataset_shard
from .training import (
    ModelFactory,
    checked_factory,
    checked_model,
    configure_threads,
    reads_edge_weights,
)

# a training run's choices that inference does not make its own: it exchanges exactly, in
# fp32, once per layer, runs where this process is told to, and times no SpMM plans (one
# forward pass never wins back the trial)
INFERENCE = {"kernel_trial": False, "algo": "cd-0", "delay": None, "smoothing": 0.0,
             "comm_budget": None, "exchange_precision": "fp32", "recompute": False,
             "device": "auto", "backend": "auto", "rank_devices": None, "rank_backends": None,
             "threads": None, "precompute_first": False}


def saved_config(saved: dict, **overrides) -> TrainConfig:
    """The :class:`TrainConfig` a model file (:func:`~distgnn.run.saved_model.read_model_file`'s
    dict) was trained with, with ``overrides``."""
    # what the training run wrote and checkpointed is its own (the paths are not in the
    # file, and what chose among them, e.g. --final-weights, would apply to nothing here)
    fields = {k: v for k, v in saved["config"].items()
              if k in OWNER and OWNER[k] not in ("outputs", "checkpoints")}
    if fields.get("precision") == "bf16-mixed" and fields.get("aggregation_precision") == "fp32":
        # a file written when fp32 was the default, which bf16-mixed overrode: as trained
        fields["aggregation_precision"] = None
    try:
        return TrainConfig(**{**fields, **overrides})
    except TypeError as e:
        raise DistGNNError(f"model file configuration: {e}") from None


def _build(path: str | Path, saved: dict, cfg: TrainConfig,
           make_model: ModelFactory | None) -> torch.nn.Module:
    if saved.get("custom") and make_model is None:
        raise DistGNNError(f"{path} holds a model built by make_model "
                           f"({saved.get('model_class')}): pass that factory as make_model "
                           "(distgnn-predict --model-factory MODULE:FUNCTION)")
    f, c = int(saved["num_features"]), int(saved["num_classes"])
    torch.manual_seed(cfg.seed)  # buffers a factory draws; the weights are overwritten
    model = (checked_model(make_model(f, c)) if make_model is not None
             else build_model(cfg.network, f, c, cfg.recompute))
    model = model.to(getattr(torch, cfg.dtype))
    try:
        model.load_state_dict(saved["state_dict"])
    except RuntimeError as e:
        lines = [line.strip() for line in str(e).strip().splitlines() if line.strip()]
        raise DistGNNError(f"{path}: the weights do not fit the model: "
                           f"{lines[1] if len(lines) > 1 else lines[0]}") from None
    for name, value in model.state_dict().items():
        if value.is_floating_point() and not bool(torch.isfinite(value).all()):
            raise DistGNNError(f"{path}: {name} holds values that are not finite (NaN or "
                               "inf): every prediction would be NaN; save the model of an "
                               "earlier epoch (--final-weights best, or a checkpoint)")
    return model.eval()


def load_model(path: str | Path, make_model: ModelFactory | None = None) -> torch.nn.Module:
    """The module saved at ``path`` (by ``distgnn-train --save-model``), with its weights.

    It comes in evaluation mode on the CPU.  A built-in model is rebuilt from the file's
    configuration; a user's model needs its factory again:
    ``make_model(in_channels, num_classes)``, as given to :func:`distgnn.train`.  Call it as
    ``model(g, x)`` with features normalised as the file's ``config["feature_norm"]`` says,
    or let :func:`predict` do both.  (The file is a dict of the weights and what rebuilds
    them, :mod:`distgnn.run.saved_model`: a module built by hand takes
    ``torch.load(path, weights_only=True)["state_dict"]``, not the whole file.)
    """
    make_model = checked_factory(make_model)
    saved = read_model_file(path)
    return _build(path, saved, saved_config(saved, **INFERENCE), make_model)


@dataclasses.dataclass
class Prediction:
    """What :func:`predict` returns on every rank.

    The per-vertex results, as arrays, of the vertices this rank holds the root clone of (in
    one process every vertex; under MPI each vertex on exactly one rank), in global order:
    ``vertex`` ``[n]`` (the dataset's own ids: the edge list's names or numbers),
    ``probabilities`` float32 ``[n, C]`` (softmax of the logits), ``predicted_class``
    int64 ``[n]`` and ``embeddings`` float32 ``[n, d]`` (the input of the chosen layer;
    ``None`` unless asked for).

    And: ``scores``, ``{mask}_acc`` and ``val_loss`` over all ranks (``None`` where a mask
    is empty: unlabelled data); ``seconds``, the inference's wall-clock time (forward pass
    and scores, the slowest rank); ``written``, ``{what: path}``; ``peak_rss_mib_max`` and
    ``peak_rss_mib_mean``, the ranks' peak resident memory since they started (``VmHWM``,
    MiB: loading the data included), max and mean over ranks, taken after the forward
    pass."""

    vertex: np.ndarray
    probabilities: np.ndarray
    predicted_class: np.ndarray
    embeddings: np.ndarray | None
    scores: dict
    seconds: float
    written: dict
    peak_rss_mib_max: float
    peak_rss_mib_mean: float


def predict(model_file: str | Path,
            source: str | Path | NodeDataset | Callable[[], NodeDataset], *,
            predictions_out: str | None = None, embeddings_out: str | None = None,
            embeddings_layer: int = -1, with_embeddings: bool = False,
            make_model: ModelFactory | None = None, threads: int | None = None,
            memory_limit: float | None = None, spill_dir: str | None = None,
            log: Callable[[str], None] = print) -> Prediction:
    """Apply the model saved in ``model_file`` to ``source``; returns a :class:`Prediction`.

    ``source`` is a dataset (or a function that loads one, called once the model is
    built: what refuses the model is said before the data is read), or a partition
    directory: then collective, one rank per partition under ``mpirun``.  Writes the
    predictions and embeddings asked for (formats: :mod:`distgnn.run.vertex_outputs`), and
    returns them as arrays, with the accuracies where the data has labels
    (:class:`Prediction`; the module docstring).  ``with_embeddings``:
    return the input of layer ``embeddings_layer`` too (it is computed anyway for
    ``embeddings_out``).  ``memory_limit`` and ``spill_dir``: ``distgnn-train``'s, for this
    inference (not the training run's): a rank whose plan exceeds the limit computes the
    layers in panels and row chunks through disk (:mod:`distgnn.run.streaming`).
    """

    check_distinct_outputs({"--predictions-out": predictions_out,
                            "--embeddings-out": embeddings_out}, {"the model file": model_file})
    make_model = checked_factory(make_model)
    saved = read_model_file(model_file)
    layer = embeddings_layer if embeddings_out or with_embeddings else None
    # a layer chosen for the returned embeddings alone is no output's (the configuration
    # refuses --embeddings-layer without --embeddings-out, where it would change nothing)
    outputs = {"predictions_out": predictions_out, "embeddings_out": embeddings_out,
               "embeddings_layer": -1 if layer is not None and not embeddings_out
               else embeddings_layer}
    built = []

    def config() -> TrainConfig:
        # the model too, from its file alone: what refuses it (the factory, the weights,
        # --embeddings-layer) is said before any data is read, on every rank alike
        cfg = saved_config(saved, **{**INFERENCE, "threads": threads, **outputs,
                                     "memory_limit": memory_limit, "spill_dir": spill_dir})
        cfg.check_paths()
        built.append(_build(model_file, saved, cfg, make_model))
        if layer is not None:
            embedding_layer(built[-1], layer)
        return cfg

    if is_partition_source(source):
        rank = open_partitions(str(source), config, log, "distgnn-predict",
                               row_norm_warning=MODEL_ROW_NORM_WARNING)
        shard, comm, cfg = rank.shard, rank.comm, rank.cfg
    else:
        cfg = config()
        configure_threads(cfg.threads)
        data = (source if isinstance(source, NodeDataset) else source() if callable(source)
                else load(source))
        shard = dataset_shard(data, cfg, PhaseTimer(), log,
                              row_norm_warning=MODEL_ROW_NORM_WARNING)
        comm = SelfCommunicator()
    return _apply(model_file, saved, built[-1], cfg, shard, comm, layer)


def mismatch_warnings(path, saved: dict, shard: Shard, scored: bool, weighted: bool
                      ) -> list[str]:
    """Warnings of what ``shard`` differs in from the training of the model file ``path``.

    Each can make the predictions or the accuracies wrong without an error (``saved``: the
    file's dictionary).  The classes are compared where accuracies were ``scored`` (a
    split holds labelled vertices: unlabelled data names no classes); whether the model
    reads edge weights here (``weighted``: the graph has them and its layers read them,
    :func:`~distgnn.run.training.reads_edge_weights`) with whether it read them in training, where the file says
    so (files written before it did: not at all)."""
    warnings = []
    trained, here = int(saved["num_classes"]), shard.num_classes
    if scored and here > trained:
        warnings.append(f"{path} predicts {trained} classes but the data's labels name "
                        f"{here}: the vertices of the classes it cannot predict count as "
                        "wrong in the accuracies")
    elif scored and here < trained:
        warnings.append(f"{path} predicts {trained} classes but the data's labels name "
                        f"{here}: the accuracies mean something only if label k is the "
                        "model's class k (labels of another task are compared as if they "
                        "were)")
    trained = saved.get("edge_weights")
    if trained is not None and bool(trained) != weighted:
        warnings.append(
            f"{path} was trained on a graph with edge weights, and this graph has none: "
            "every edge counts as weight 1, which the model never saw" if trained else
            f"{path} was trained on a graph without edge weights, and this graph has them: "
            "its aggregations now weigh each edge, which the model never saw")
    return warnings


def _apply(path, saved: dict, model: torch.nn.Module, cfg: TrainConfig, shard: Shard,
           comm: Communicator, layer: int | None) -> Prediction:
    def ready():
        if shard.num_features != int(saved["num_features"]):
            raise DistGNNError(f"{path} takes {saved['num_features']} features; the data "
                               f"has {shard.num_features}")
        placed = model.to(shard.x.device)
        prepare(placed, shard.nbr)
        return placed

    try:
        placed = all_or_none(comm, ready)
        started = time.perf_counter()
        logits, embeddings = forward_eval(placed, shard, layer)
    finally:
        shard.close()  # a streamed shard's spill files: the logits are all it still needs
    check_logits(logits, shard, int(saved["num_classes"]))
    missing = shard.num_classes - logits.shape[1]  # classes the model cannot predict
    scores = mask_scores(torch.nn.functional.pad(logits, (0, missing), value=-torch.inf)
                         if missing > 0 else logits, shard, comm)
    if comm.rank == 0:  # the same on every rank: the labels and weights are the whole graph's
        scored = any(v is not None for k, v in scores.items() if k.endswith("_acc"))
        for line in mismatch_warnings(path, saved, shard, scored,
                                      reads_edge_weights(placed, shard)):
            print(f"warning: {line}", file=sys.stderr, flush=True)
    high, mean, _ = rank_statistics(comm, {"seconds": time.perf_counter() - started,
                                           "peak_rss_mib": process_mib()})
    write_vertex_outputs(shard, comm, logits, embeddings, cfg.predictions_out,
                         cfg.embeddings_out)
    shard.nbr.exchange.finish()
    written = {k: v for k, v in (("predictions", cfg.predictions_out),
                                 ("embeddings", cfg.embeddings_out)) if v}
    vertex, probabilities, embeddings = owned_rows(shard, logits, embeddings)
    return Prediction(vertex, probabilities, probabilities.argmax(1), embeddings, scores,
                      high["seconds"], written, high["peak_rss_mib"], mean["peak_rss_mib"])


def owned_rows(shard: Shard, logits: torch.Tensor, embeddings: torch.Tensor | None
               ) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """``(vertex [n], probabilities [n, C], embeddings [n, d] or None)`` of the vertices
    whose root clone this rank holds, in global order (see :class:`Prediction`)."""
    positions = shard.nbr.global_ids[shard.owned]
    order = np.argsort(positions, kind="stable")
    rows = np.flatnonzero(shard.owned)[order]
    ids = shard.user_ids()
    vertex = positions[order] if ids is None else np.asarray(ids)[positions[order]]
    probabilities = torch.softmax(logits.float(), 1).cpu().numpy()[rows]
    return (vertex, probabilities,
            None if embeddings is None else embeddings.float().cpu().numpy()[rows])
