"""A run's configuration, in parts, each owned and validated by the package it configures.

Each part is a small dataclass, each of its fields declaring its ``distgnn-train`` flag and
help (:mod:`distgnn.options`); :class:`TrainConfig` puts them together.

==================  ======================================  ==============================
part                 what                                    where
==================  ======================================  ==============================
``network``          the model and its layers' options       :mod:`distgnn.nn.config`
``optimisation``     learning rate, epochs, seed, stopping   here
``data``             feature normalisation, split, order     :mod:`distgnn.data.config`
``exchange``         split vertices' exchange and its wire   :mod:`distgnn.exchange.config`
``communication``    communicator, waits, timeout            :mod:`distgnn.comm.config`
``execution``        device, kernels, threads, precision     :mod:`distgnn.placement`
``outputs``          metrics, evaluation, model, results     here
``checkpoints``      where, how often, resume                here
==================  ======================================  ==============================

``TrainConfig(hidden=64, algo="cd-r")`` (every flag's name, as before the parts) and
``TrainConfig(network=ModelConfig(...))`` both make one; every option reads and writes as
an attribute of either (``cfg.hidden``, ``cfg.network.hidden``).  Making one validates each
part and what spans parts; the output paths and the checkpoint directories are checked
against the filesystem at start-up, before any data is read (:meth:`TrainConfig.check_paths`).
"""
from __future__ import annotations

import dataclasses
import math
import numbers
from pathlib import Path

from ..comm.config import CommConfig
from ..data.config import DataConfig
from ..errors import DistGNNError
from ..exchange.config import ExchangeConfig
from ..nn.config import ModelConfig
from ..options import changed_options, option
from ..placement import ExecutionConfig
from ..storage import (
    check_distinct_outputs,
    check_output_dir,
    check_output_file,
    check_replaceable,
)
from .epoch_log import is_metrics_file
from .saved_model import check_model_output
from .vertex_outputs import check_outputs

NAN_POLICIES = ("stop", "skip")
FINAL_WEIGHTS = ("best", "last")


def _count(value, flag: str, low: int, high: int | None = None) -> None:
    if (not isinstance(value, numbers.Integral) or isinstance(value, bool) or value < low
            or (high is not None and value > high)):
        raise DistGNNError(f"--{flag} must be an integer >= {low}"
                           + (f" and <= {high}" if high else "") + f", got {value!r}")


@dataclasses.dataclass
class OptimisationConfig:
    """How the weights are learned, and when training stops."""

    lr: float = option(0.01, "Adam learning rate", type=float)
    weight_decay: float = option(5e-4, "Adam L2 weight decay", type=float)
    epochs: int = option(200, "total number of epochs (a resumed run counts the earlier ones)",
                         type=int)
    seed: int = option(0, "seed of weights and dropout: the same seed gives the same loss "
                       "curve", type=int)
    patience: int = option(0, "stop after this many evaluations without a better validation "
                           "accuracy (0: never stop early)", type=int)
    nan_policy: str = option("stop", "on a non-finite loss or gradient: stop (naming the "
                             "epoch and ranks, after checkpointing the last good state) or "
                             "skip the step", choices=NAN_POLICIES)

    def __post_init__(self):
        for flag, low, high in (("epochs", 1, None), ("patience", 0, None),
                                ("seed", 0, 2**63 - 1)):
            _count(getattr(self, flag), flag, low, high)
        for flag in ("lr", "weight_decay"):
            value = getattr(self, flag)
            if not (isinstance(value, numbers.Real) and math.isfinite(value) and value >= 0):
                raise DistGNNError(f"--{flag.replace('_', '-')} must be a finite number >= 0, "
                                   f"got {value!r}")
        if self.nan_policy not in NAN_POLICIES:
            raise DistGNNError(f"--nan-policy must be one of {', '.join(NAN_POLICIES)}, got "
                               f"{self.nan_policy!r}")


@dataclasses.dataclass
class OutputConfig:
    """What a run reports and writes: evaluations, the metrics file, progress, and at its end
    the model and the per-vertex results."""

    eval_every: int = option(1, "evaluate (train/val/test accuracy) every k epochs", type=int)
    roc_auc: bool = option(False, "also report each split's ROC-AUC at every evaluation "
                           "(binary tasks, e.g. tolokers, whose published figures are "
                           "ROC-AUC)", action="store_true")
    metrics_out: str | None = option(None, "write one JSON object per epoch (loss, "
                                     "accuracies, epoch_s, phases)", metavar="FILE")
    progress: bool = option(True, "a progress bar when stderr is a terminal (log lines "
                            "otherwise)", action=True)
    save_model: str | None = option(
        None, "the trained model: weights and the configuration that rebuilds them, one file "
        "torch.load(FILE, weights_only=True) reads as a dict, not a bare state_dict: "
        "distgnn.load_model(FILE) rebuilds the module, model.load_state_dict(torch.load(FILE, "
        "weights_only=True)[\"state_dict\"]) loads the weights into one's own, "
        "distgnn-predict applies it", metavar="FILE")
    final_weights: str = option("best", "which weights the model file, predictions and "
                                "embeddings come from: best (the evaluation of best "
                                "validation accuracy, whose test accuracy is reported) or "
                                "last (the last epoch's)", choices=FINAL_WEIGHTS)
    predictions_out: str | None = option(
        None, "one row per vertex in the dataset's own vertex ids: the predicted class and "
        "the class probabilities; FILE.csv (vertex,predicted_class,p_0,...) or FILE.npz "
        "(vertex, predicted_class, probabilities)", metavar="FILE")
    embeddings_out: str | None = option(
        None, "float32 [N, d]: the input of --embeddings-layer for every vertex, row i for "
        "the i-th vertex (the order of --predictions-out's rows)", metavar="FILE.npy")
    embeddings_layer: int = option(
        -1, "whose input --embeddings-out holds: layer K of the model's graph and linear "
        "layers in order, -1 the last (the representation the classifier reads)", type=int,
        metavar="K")

    def __post_init__(self):
        _count(self.eval_every, "eval-every", 1)
        if not isinstance(self.embeddings_layer, numbers.Integral) or isinstance(
                self.embeddings_layer, bool):
            raise DistGNNError(f"--embeddings-layer must be an integer, got "
                               f"{self.embeddings_layer!r}")
        if self.final_weights not in FINAL_WEIGHTS:
            raise DistGNNError(f"--final-weights must be one of {', '.join(FINAL_WEIGHTS)}, "
                               f"got {self.final_weights!r}")
        if self.final_weights != "best" and all(  # ("" is refused as empty, validate())
                path is None for path in (self.save_model, self.predictions_out,
                                          self.embeddings_out)):
            raise DistGNNError(f"--final-weights {self.final_weights} chooses the weights "
                               "--save-model, --predictions-out and --embeddings-out write "
                               "(the test accuracy reported is the best evaluation's "
                               "anyway); without one of them it would change nothing")
        if self.embeddings_layer != -1 and not self.embeddings_out:
            raise DistGNNError("--embeddings-layer chooses what --embeddings-out writes; "
                               "without --embeddings-out it would change nothing")


@dataclasses.dataclass
class CheckpointConfig:
    """Checkpoints: where, how often, how many, and what to resume from."""

    checkpoint_dir: str | None = option(
        None, "write checkpoints here (model, optimizer, RNG states and cd-r exchange state "
        "of every rank, metrics so far); also at the end, on SIGTERM/SIGUSR1 and before a "
        "non-finite step stops the run. Under MPI it must be one directory every rank sees",
        metavar="DIR")
    checkpoint_every: int = option(10, "epochs between checkpoints (0: only at the end and on "
                                   "a stop); with a checkpoint directory only", type=int,
                                   metavar="K")
    keep: int = option(2, "checkpoints to keep (older ones are removed after a new one is "
                       "complete); with a checkpoint directory only", type=int, metavar="N")
    resume: str | None = option(
        None, "continue from the newest intact checkpoint in DIR (refused if it comes from "
        "other data, another model shape or exchange algorithm; on another rank count or "
        "partitioning, or one process, the model and optimizer continue exactly and cd-r "
        "starts again with an exact epoch); --epochs stays the total; new checkpoints go to DIR too unless --checkpoint-dir says otherwise",
        metavar="DIR", exclusive="resume")
    resume_if_present: str | None = option(
        None, "as --resume DIR when DIR holds a checkpoint, else (no DIR, or none in it) a new "
        "run, checkpointing into DIR unless --checkpoint-dir says otherwise: one command line "
        "for the first start and every restart, as a requeued batch job needs (another run's "
        "checkpoint is refused as with --resume)", metavar="DIR", exclusive="resume")

    def __post_init__(self):
        _count(self.checkpoint_every, "checkpoint-every", 0)
        _count(self.keep, "keep", 1)
        if self.resume and self.resume_if_present:
            raise DistGNNError("--resume and --resume-if-present exclude each other (the "
                               "first needs a checkpoint, the second starts afresh without)")
        resumed = self.resume or self.resume_if_present
        if resumed and not self.checkpoint_dir:  # a resumed run goes on checkpointing
            self.checkpoint_dir = resumed
        given = changed_options(self, only=("checkpoint_every", "keep"))
        if given and self.checkpoint_dir is None:  # ("" is refused as empty, validate())
            raise DistGNNError(f"{given[0]} applies to checkpoints, and without "
                               "--checkpoint-dir (or --resume, --resume-if-present, which "
                               "checkpoint into their directory) the run writes none: give "
                               "one, or leave the flag out")


# name -> the part's class, in the order of --help's groups
PARTS = {"network": ModelConfig, "optimisation": OptimisationConfig, "data": DataConfig,
         "exchange": ExchangeConfig, "communication": CommConfig,
         "execution": ExecutionConfig, "outputs": OutputConfig,
         "checkpoints": CheckpointConfig}
# each option's name -> the part that holds it
OWNER = {f.name: part for part, cls in PARTS.items() for f in dataclasses.fields(cls)}
DEFAULTS = {f.name: f.default for cls in PARTS.values() for f in dataclasses.fields(cls)}
# what a run writes (each on a path of its own), and every option that names a path
OUTPUT_FLAGS = ("metrics-out", "checkpoint-dir", "save-model", "predictions-out",
                "embeddings-out")
PATH_FLAGS = OUTPUT_FLAGS + ("resume", "resume-if-present")


class TrainConfig:
    """Everything that defines a training run: the parts of the module docstring.

    ``TrainConfig(**options)`` takes any option by its name (``hidden=64``), and any part
    whole (``network=ModelConfig(...)``); an option unknown, or given both ways, is refused
    in one line.  Options read and write as attributes (``cfg.hidden``), so do the parts'
    derived values (``cfg.wire``, ``cfg.delay_epochs``)."""

    def __init__(self, **given):
        parts = {}
        for name, cls in PARTS.items():
            whole = given.pop(name, None)
            own = {f.name: given.pop(f.name) for f in dataclasses.fields(cls)
                   if f.name in given}
            if whole is not None and not isinstance(whole, cls):
                raise DistGNNError(f"TrainConfig {name}= takes a {cls.__name__}, got "
                                   f"{type(whole).__name__}")
            if whole is not None and own:
                raise DistGNNError(f"TrainConfig: {', '.join(own)} given beside {name}=: give "
                                   f"them in the {cls.__name__}")
            parts[name] = whole if whole is not None else cls(**own)
        if given:
            unknown = sorted(given)[0]
            raise DistGNNError(f"TrainConfig has no option {unknown!r} (its options: "
                               f"{', '.join(sorted(OWNER))})")
        object.__setattr__(self, "parts", parts)
        self.validate()

    def __getattr__(self, name: str):
        parts = self.__dict__.get("parts", {})
        if name in parts:
            return parts[name]
        for part in parts.values():
            if hasattr(part, name):
                return getattr(part, name)
        raise AttributeError(f"TrainConfig has no option {name!r}")

    def __setattr__(self, name: str, value) -> None:
        if name not in OWNER:
            raise AttributeError(f"TrainConfig has no option {name!r}")
        setattr(self.parts[OWNER[name]], name, value)

    def __eq__(self, other) -> bool:
        return isinstance(other, TrainConfig) and self.parts == other.parts

    def __repr__(self) -> str:
        return f"TrainConfig({', '.join(f'{k}={v!r}' for k, v in self.parts.items())})"

    def options(self) -> dict:
        """Every option by its name, with its value (what a saved model or a checkpoint's
        fingerprint records)."""
        return {name: getattr(self.parts[part], name) for name, part in OWNER.items()}

    def replace(self, **changes) -> TrainConfig:
        """A new configuration with ``changes`` (options by name) made."""
        return TrainConfig(**{**self.options(), **changes})

    def validate(self) -> None:
        """What no part can check alone (each checked its own when it was made)."""
        for flag in PATH_FLAGS:
            if getattr(self, flag.replace("-", "_")) == "":  # "" would read as not given
                raise DistGNNError(f"--{flag}: the value is empty; give one, or leave it out")
        if (self.may_delay and self.model == "sage"
                and self.aggregator in ("max", "min")):
            raise DistGNNError(f"the {self.aggregator} aggregator is exchanged exactly (cd-0) "
                               "or not at all (0c); cd-r (which auto may take) has no delayed "
                               "extreme: use --algo cd-0 or 0c")
        if self.recompute and self.may_delay:
            raise DistGNNError(f"--recompute runs each layer's exchange again in the backward "
                               f"pass, which would advance cd-r's schedule twice (--algo "
                               f"{self.algo}): use cd-0 or 0c")
        if self.recompute and self.exchange_precision not in (None, "fp32"):
            raise DistGNNError(f"--recompute runs each layer's exchange again in the backward "
                               f"pass, which would apply --exchange-precision "
                               f"{self.exchange_precision}'s error feedback twice: use fp32")
        check_distinct_outputs({f"--{flag}": getattr(self, flag.replace("-", "_"))
                                for flag in OUTPUT_FLAGS})

    def check_paths(self) -> None:
        """Refuse, with one line naming the flag, an output that cannot be written or would
        replace what this tool did not write, and a directory to resume from that is none:
        what a run checks at start-up, before any data is read."""
        # first the directory to resume from: it is the checkpoint directory too unless
        # --checkpoint-dir is given, and a file there is the flag the user wrote it with
        if self.resume and not Path(self.resume).is_dir():
            raise DistGNNError(f"--resume {self.resume}: not a directory of checkpoints (give "
                               "the directory the run checkpointed into, not a file in it)")
        if self.resume_if_present and Path(self.resume_if_present).exists() \
                and not Path(self.resume_if_present).is_dir():
            raise DistGNNError(f"--resume-if-present {self.resume_if_present}: exists and is "
                               "not a directory")
        if self.metrics_out:
            check_replaceable(check_output_file(self.metrics_out, "--metrics-out"),
                              is_metrics_file, "a metrics file written by distgnn-train")
        if self.checkpoint_dir:
            check_output_dir(self.checkpoint_dir, "--checkpoint-dir")
        check_model_output(self.save_model)
        check_outputs(self.predictions_out, self.embeddings_out)

    def check_single_socket(self) -> None:
        """Refuse, for a run on one socket (no partitions: no split vertices, no other rank,
        no partition files), every option that applies only on partitions, each part its
        own: it would change nothing."""
        for part in ("exchange", "communication", "data", "execution"):
            self.parts[part].check_single_socket()


def _document_options() -> None:
    """Give :class:`TrainConfig` the signature and the list of options its ``**given``
    hides from ``help()`` and editors: every option keyword-only with its default, then each
    part, generated from the parts' fields so that neither goes stale."""
    import inspect
    import textwrap

    keyword = inspect.Parameter.KEYWORD_ONLY
    options = [inspect.Parameter(name, keyword, default=default)
               for name, default in DEFAULTS.items()]
    parts = [inspect.Parameter(name, keyword, default=None) for name in PARTS]
    TrainConfig.__signature__ = inspect.Signature(options + parts)
    listing = "\n".join(
        textwrap.fill(f"{name} ({cls.__name__}): " + ", ".join(
            f"{f.name}={f.default!r}" for f in dataclasses.fields(cls)),
            width=88, initial_indent="    ", subsequent_indent="        ")
        for name, cls in PARTS.items())
    TrainConfig.__doc__ = (inspect.cleandoc(TrainConfig.__doc__)
                           + "\n\nThe options with their defaults, by part:\n\n" + listing)


_document_options()
