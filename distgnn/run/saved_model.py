"""A trained model as one file: its weights and the configuration that rebuilds it.

The file is ``torch.save`` of a dictionary of tensors, strings and numbers only, so that
``torch.load(path, weights_only=True)`` reads it without unpickling code:

- ``format`` ``"distgnn-model"``, ``version`` :data:`VERSION`;
- ``config``: the :class:`~distgnn.run.config.TrainConfig` fields that define the model and its
  input (model, layers, hidden, heads, feature normalisation, dtype, ...), as a dict;
- ``num_features``, ``num_classes``: the input width ``F`` and the number of classes ``C``;
- ``edge_weights``: whether the model read edge weights in training (its graph had them and
  its layers take them; absent in files written before it was recorded: unknown); a
  prediction that differs in this warns;
- ``model_class``: ``module.QualifiedName`` of the module (informative);
- ``custom``: whether a user's ``make_model`` built it (then :func:`distgnn.load_model`
  needs that factory again; the built-in models are rebuilt from ``config``);
- ``weights``: ``"best"`` (the evaluation of best validation accuracy) or ``"last"``, and
  ``epoch``: the epoch they are from (counted from 1, as on the console);
- ``state_dict``: the module's parameters and buffers.

Everything sits in the one file, so the weights never lose the configuration that reads
them.  Written atomically by rank 0 alone (every rank holds the same weights).
"""
from __future__ import annotations

import io
import os
import reprlib
from pathlib import Path

import torch

from ..errors import DistGNNError
from ..storage import check_output_file, check_replaceable, write_atomic

FORMAT = "distgnn-model"
VERSION = 1
# what says where a run reads and writes, not what the model is
PATH_FIELDS = frozenset({"metrics_out", "checkpoint_dir", "resume", "resume_if_present",
                         "save_model", "predictions_out", "embeddings_out"})


def read_model_file(path: str | Path) -> dict:
    """The dictionary of a model file, checked; :class:`DistGNNError` naming the path for
    anything else (and for a ``path`` that is no path)."""
    if not isinstance(path, (str, os.PathLike)):
        raise DistGNNError(f"the model file must be a path (a str or pathlib.Path), got "
                           f"{reprlib.repr(path)} ({type(path).__name__})")
    path = Path(path)
    try:
        saved = torch.load(path, map_location="cpu", weights_only=True)
    except FileNotFoundError:
        raise DistGNNError(f"{path}: no such model file") from None
    except Exception as e:  # noqa: BLE001 -- any unreadable file is the same error to a user
        raise DistGNNError(f"{path}: not a model file written by distgnn ({type(e).__name__})"
                           ) from None
    if not isinstance(saved, dict) or saved.get("format") != FORMAT:
        raise DistGNNError(f"{path}: not a model file written by distgnn")
    if saved.get("version") != VERSION:
        raise DistGNNError(f"{path}: model file version {saved.get('version')!r}; this "
                           f"version of distgnn reads version {VERSION}")
    return saved


def is_model_file(path: Path) -> bool:
    try:
        read_model_file(path)
    except DistGNNError:
        return False
    return True


def check_model_output(path: str | None, flag: str = "--save-model") -> None:
    """At start-up: ``path`` can be written and, if it exists, is a model file of ours."""
    if path:
        check_replaceable(check_output_file(path, flag), is_model_file,
                          "a model file written by distgnn")


def model_config(cfg) -> dict:
    """The fields of ``cfg`` (a :class:`~distgnn.run.config.TrainConfig`) that define a model
    and its input (no paths)."""
    return {name: value for name, value in cfg.options().items() if name not in PATH_FIELDS}


def save_model(path: str | Path, model: torch.nn.Module, state: dict, cfg,
               num_features: int, num_classes: int, *, weights: str, epoch: int,
               custom: bool, edge_weights: bool) -> Path:
    """Write ``state`` (a ``state_dict`` of ``model``) with what rebuilds the model (see the
    module docstring) atomically to ``path``."""
    buffer = io.BytesIO()
    torch.save({"format": FORMAT, "version": VERSION, "config": model_config(cfg),
                "num_features": int(num_features), "num_classes": int(num_classes),
                "edge_weights": bool(edge_weights),
                "model_class": f"{type(model).__module__}.{type(model).__qualname__}",
                "custom": bool(custom), "weights": weights, "epoch": int(epoch),
                "state_dict": {k: v.detach().cpu() for k, v in state.items()}}, buffer)
    return write_atomic(path, buffer.getvalue())
