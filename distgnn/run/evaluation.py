r"""Inference: a model's logits and embeddings, its scores, and its per-vertex results.

The logits (and a layer's input, the embeddings) are a shard's, the accuracies (and a binary
task's ROC-AUC) are over all ranks, and the per-vertex results are written once per vertex.

Inference runs the model in evaluation mode under ``torch.no_grad``: dropout is off, no
activation is kept for a backward pass, and on partitions every exchange is exact (cd-0's
evaluation view, whatever the run's algorithm), so that the logits of a vertex are the
whole graph's.

The *layers* of a model, for embeddings, are its graph layers
(:class:`~distgnn.nn.graph_layer.GraphLayer`, or PyTorch Geometric's ``MessagePassing``) and its
``torch.nn.Linear`` modules that are
not inside a graph layer, in the order ``model.modules()`` lists them (their order of construction).
The embedding of layer ``k`` is the input it receives, ``[N, d_k]``; the default, ``-1``,
is the last layer's: the representation the classifier reads.
"""
from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F

from ..comm import Communicator
from ..errors import DistGNNError
from ..nn.graph_layer import GraphLayer
from . import streaming
from .shard import Shard, in_precision
from .vertex_outputs import write_rows

__all__ = ["check_logits", "embedding_layer", "roc_auc"]


def embedding_layers(model: torch.nn.Module) -> list[torch.nn.Module]:
    """The layers of ``model`` whose inputs are embeddings (see the module docstring)."""
    def graph_layer(m):  # distgnn's, or PyTorch Geometric's MessagePassing
        return isinstance(m, GraphLayer) or callable(getattr(type(m), "propagate", None))

    inside = {id(sub) for m in model.modules() if graph_layer(m)
              for sub in m.modules() if sub is not m}
    return [m for m in model.modules()
            if (graph_layer(m) or isinstance(m, torch.nn.Linear)) and id(m) not in inside]


def embedding_layer(model: torch.nn.Module, layer: int) -> torch.nn.Module:
    """Layer ``layer`` of ``model`` (:func:`embedding_layers`), whose input
    ``--embeddings-layer`` chooses; one line naming the flag and the model's layers when it
    has no such layer.  Checked once the model is built, before it trains or runs."""
    layers = embedding_layers(model)
    if not -len(layers) <= layer < len(layers):
        raise DistGNNError(f"--embeddings-layer {layer}: the model has {len(layers)} "
                           f"layers (0..{len(layers) - 1}, or -1 for the last)")
    return layers[layer]


def check_logits(logits, shard: Shard, classes: int | None = None) -> None:
    """Refuse a model output that is not this shard's logits, naming what is wrong.

    The logits are ``[n, C]``: this shard's ``n`` vertices and ``classes`` classes (default:
    the data's).  A user's ``make_model`` of the wrong width, or a tuple, is refused in one
    line before it meets the loss.
    """
    want = (shard.x.shape[0], shard.num_classes if classes is None else classes)
    if not isinstance(logits, torch.Tensor):
        raise DistGNNError(f"the model returned a {type(logits).__name__}; it must return the "
                           f"logits, one tensor [{want[0]}, {want[1]}] (vertices, classes)")
    if tuple(logits.shape) != want:
        raise DistGNNError(f"the model returned logits of shape "
                           f"[{', '.join(map(str, logits.shape))}], expected [{want[0]}, "
                           f"{want[1]}]: a row per vertex and a column per class (make_model "
                           f"gets the number of classes, {want[1]}, as its second argument)")
    if not logits.is_floating_point():  # no gradient flows through integers
        raise DistGNNError(f"the model returned logits of type {logits.dtype}: they must be "
                           "floating point scores, through which the loss has a gradient "
                           "(return the last layer's output before any rounding or argmax)")


@torch.no_grad()
def forward_eval(model: torch.nn.Module, shard: Shard, layer: int | None = None
                 ) -> tuple[torch.Tensor, torch.Tensor | None]:
    """``(logits [n, C], embeddings [n, d] or None)`` of ``model`` on this rank's shard in
    evaluation mode; ``layer``: whose input to return as the embeddings (``None``: none).
    Collective on partitions (the exchange)."""
    model.eval()
    shard.nbr.set_epoch(shard.nbr.epoch, training=False)
    if shard.spilled is not None:  # through disk (--memory-limit)
        if layer is not None:
            embedding_layer(model, layer)  # refused here as in memory
            layer %= len(embedding_layers(model))
        return streaming.outputs(model, shard, layer)
    captured = []
    handle = None
    if layer is not None:
        chosen = embedding_layer(model, layer)
        graph_layer = isinstance(chosen, GraphLayer)
        handle = chosen.register_forward_pre_hook(
            lambda module, args: captured.append(args[1 if graph_layer else 0]))
    try:
        with in_precision(shard):
            logits = model(shard.nbr, shard.x)
        if isinstance(logits, torch.Tensor):  # anything else is refused by check_logits
            logits = logits.to(shard.dtype)
    finally:
        if handle is not None:
            handle.remove()
    return logits, captured[-1] if captured else None


def mask_scores(logits: torch.Tensor, shard: Shard, comm: Communicator,
                means: dict[str, float] | None = None) -> dict:
    """``{mask}_acc`` of each mask and ``val_loss`` over all ranks.

    ``None`` where a mask is empty.  For each ``name: value`` of ``means`` (this rank's
    figures of the same evaluation, such as its bytes sent), also ``{name}_mean``, the mean
    over ranks, in the same allreduce.  Collective.
    """
    pred = logits.argmax(1)
    names = list(shard.masks)
    means = means or {}
    counts = []
    for name in names:
        m = shard.masks[name]
        counts += [float((pred[m] == shard.y[m]).sum()), float(m.sum())]
    val = shard.masks["val"]
    counts.append(float(F.cross_entropy(logits[val], shard.y[val], reduction="sum"))
                  if val.any() else 0.0)
    t = torch.tensor(counts + list(means.values()), dtype=torch.float64)
    comm.allreduce(t)
    out = {f"{name}_acc": float(t[2 * i] / t[2 * i + 1]) if t[2 * i + 1] else None
           for i, name in enumerate(names)}
    n_val = float(t[2 * names.index("val") + 1])
    out["val_loss"] = float(t[len(counts) - 1]) / n_val if n_val else None
    out.update({f"{name}_mean": float(v) / comm.size
                for name, v in zip(means, t[len(counts):].tolist())})
    return out


def write_vertex_outputs(shard: Shard, comm: Communicator, logits: torch.Tensor,
                         embeddings: torch.Tensor | None, predictions_out: str | None,
                         embeddings_out: str | None) -> None:
    """Softmax probabilities (and predicted classes) to ``predictions_out`` and
    ``embeddings`` (float32) to ``embeddings_out``, each vertex once, from its root clone's
    rank (:func:`distgnn.run.vertex_outputs.write_rows`); collective."""
    owned = shard.owned
    positions = shard.nbr.global_ids[owned]
    if predictions_out:
        probabilities = torch.softmax(logits.float(), 1).cpu().numpy()[owned]
        write_rows(comm, predictions_out, {"probabilities": probabilities}, positions,
                   shard.num_vertices, shard.user_ids)
    if embeddings_out:
        rows = np.ascontiguousarray(embeddings.float().cpu().numpy()[owned])
        write_rows(comm, embeddings_out, {"embeddings": rows}, positions, shard.num_vertices,
                   shard.user_ids)


def roc_auc(scores: np.ndarray, positive: np.ndarray) -> float | None:
    r"""Area under the ROC curve of ``scores`` ``[n]`` for bool labels ``positive`` ``[n]``.

    Computed by the rank-sum statistic with tied scores at their mean rank:
    :math:`(\sum_{i \in pos} \mathrm{rank}_i - n_+ (n_+ + 1) / 2) / (n_+ n_-)`;
    ``None`` when one class is absent.
    """
    n_pos = int(positive.sum())
    n_neg = len(positive) - n_pos
    if n_pos == 0 or n_neg == 0:
        return None
    # mean ranks: the distinct scores in order hold ranks end - count + 1 .. end
    _, which, count = np.unique(scores, return_inverse=True, return_counts=True)
    end = np.cumsum(count)
    ranks = (end - (count - 1) / 2)[which]
    return float((ranks[positive].sum() - n_pos * (n_pos + 1) / 2) / (n_pos * n_neg))


def gathered_roc_auc(logits: torch.Tensor, shard: Shard, comm: Communicator) -> dict:
    """``{mask}_roc_auc`` of a binary task over all ranks: every rank writes its root
    clones' score ``z_1 - z_0``, label and mask membership at their global ids into one
    ``[N, 2 + masks]`` table, summed over ranks (each vertex is a root on one rank)."""
    # a copy: a partition's ids are a read-only map of its file, which torch warns about
    ids = torch.tensor(shard.nbr.global_ids)
    device = comm.device if comm.size > 1 else "cpu"  # where the transport wants it
    size = torch.tensor([float(ids.max()) + 1 if len(ids) else 0.0], dtype=torch.float64,
                        device=device)
    comm.allreduce(size, op="max")
    names = list(shard.masks)
    table = torch.zeros(int(size[0]), 2 + len(names), dtype=torch.float64)
    roots = torch.zeros(len(ids), dtype=torch.bool)
    for m in shard.masks.values():
        roots |= m.cpu()
    at = ids[roots]
    table[at, 0] = (logits[:, 1] - logits[:, 0]).double().cpu()[roots]
    table[at, 1] = shard.y.double().cpu()[roots]
    for i, name in enumerate(names):
        table[at, 2 + i] = shard.masks[name].double().cpu()[roots]
    table = table.to(device)
    comm.allreduce(table)
    t = table.cpu().numpy()
    return {f"{name}_roc_auc": roc_auc(t[t[:, 2 + i] > 0, 0], t[t[:, 2 + i] > 0, 1] == 1)
            for i, name in enumerate(names)}
