"""The configuration of a training run and its one validation.

:class:`TrainConfig` holds every flag of ``distgnn-train``; constructing one validates it
(:meth:`TrainConfig.validate`): every size, rate, choice and output path, with one line
naming the flag, before any data is read.
"""
from __future__ import annotations

import dataclasses
import math
from pathlib import Path

from ..comm import COMMUNICATORS, WAITS
from ..comm.watchdog import DEFAULT_TIMEOUT_S
from ..data.ordering import CHOICES as ORDER_CHOICES
from ..errors import DistGNNError
from ..exchange import ALGORITHMS, PRECISIONS, TOPOLOGIES
from ..nn.backends import AGGREGATION_PRECISIONS
from ..nn.models import MODELS
from ..nn.sage_conv import LINEAR_AGGREGATORS, SAGE_AGGREGATORS
from ..placement import BACKEND_CHOICES, DEVICES, parse_per_rank
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
FEATURE_NORMS = ("row", "none")
DTYPES = ("float32", "float64")
DEFAULT_DELAY = 5  # cd-r's delay under --smoothing when no --delay is given
# the wire of cd-r's default schedule (distgnn.exchange.controller): the narrowest that kept
# cd-0's accuracy (int2 did not; docs/results/cdr-default.md)
DEFAULT_SCHEDULE_PRECISION = "int4"
DEFAULT_HIDDEN = 16
# GAT's hidden layers: 8 channels per head, as Velickovic et al.'s and PyG's Cora model
GAT_CHANNELS_PER_HEAD = 8
# More threads than this is a typo, not a machine: torch would try to start them all.
MAX_THREADS = 4096
# The deepest published GNNs have about a thousand layers (RevGNN); more is a typo.
MAX_LAYERS = 10_000
# cd-r keeps buffers per bin: a delay beyond the epochs of any run is a typo.
MAX_DELAY = 100_000
# A year: longer than any job; beyond it the watchdog's deadline leaves the clock's range.
MAX_COMM_TIMEOUT_S = 365 * 24 * 3600


@dataclasses.dataclass
class TrainConfig:
    """Everything that defines a training run (the CLI flags of ``distgnn-train``)."""

    model: str = "gcn"
    aggregator: str = "gcn"
    layers: int = 2
    hidden: int | None = None  # None: hidden_default(model, heads)
    dropout: float = 0.5
    residual: bool = False
    heads: int = 8
    train_eps: bool = False
    alpha: float = 0.1
    theta: float = 0.5
    recompute: bool = False
    lr: float = 0.01
    weight_decay: float = 5e-4
    epochs: int = 200
    seed: int = 0
    eval_every: int = 1
    roc_auc: bool = False
    patience: int = 0
    feature_norm: str = "row"
    dtype: str = "float32"
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
    resume_if_present: str | None = None
    nan_policy: str = "stop"
    comm_timeout: float = DEFAULT_TIMEOUT_S
    progress: bool = True
    algo: str = "cd-0"
    delay: int | None = None
    comm: str = "auto"
    comm_wait: str = "auto"
    verify: bool = True
    backward_exchange: bool = True
    exchange_topology: str = "auto"
    smoothing: float = 0.0
    comm_budget: float | None = None
    exchange_precision: str | None = None  # None: DEFAULT_SCHEDULE_PRECISION or fp32
    aggregation_precision: str = "fp32"
    kernel_trial: bool = True
    precompute_first: bool = False
    split: int = 0
    reorder: str = "given"
    save_model: str | None = None
    final_weights: str = "best"
    predictions_out: str | None = None
    embeddings_out: str | None = None
    embeddings_layer: int = -1

    def __post_init__(self):
        if self.hidden is None:
            self.hidden = hidden_default(self.model, self.heads)
        resumed = self.resume or self.resume_if_present
        if resumed and not self.checkpoint_dir:  # a resumed run goes on checkpointing
            self.checkpoint_dir = resumed
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
                                ("seed", 0, 2**63 - 1), ("split", 0, None),
                                ("heads", 1, None)):
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
        need(isinstance(self.alpha, (int, float)) and 0 <= self.alpha <= 1, "alpha",
             "in [0, 1]", self.alpha)
        need(isinstance(self.theta, (int, float)) and math.isfinite(self.theta)
             and self.theta > 0, "theta", "a finite number > 0", self.theta)
        need(0 <= self.comm_timeout <= MAX_COMM_TIMEOUT_S, "comm-timeout",
             f"a number of seconds from 0 to {MAX_COMM_TIMEOUT_S} (0: none)", self.comm_timeout)
        for flag, choices in (("model", MODELS), ("aggregator", SAGE_AGGREGATORS),
                              ("feature-norm", FEATURE_NORMS), ("dtype", DTYPES),
                              ("nan-policy", NAN_POLICIES),
                              ("backend", BACKEND_CHOICES), ("device", DEVICES),
                              ("algo", ALGORITHMS), ("comm", COMMUNICATORS),
                              ("comm-wait", WAITS),
                              ("exchange-topology", TOPOLOGIES),
                              ("reorder", ORDER_CHOICES),
                              ("final-weights", FINAL_WEIGHTS)):
            value = getattr(self, flag.replace("-", "_"))
            need(value in choices, flag, "one of " + ", ".join(choices), value)
        self.check_model_flags()
        if self.comm_wait == "sleep" and self.comm not in ("auto", "mpi"):
            raise DistGNNError(f"--comm-wait sleep applies to the mpi communicator; {self.comm} "
                               "waits in torch.distributed's own way")
        if self.model == "gat" and self.layers > 1 and self.hidden % self.heads:
            raise DistGNNError(f"--hidden {self.hidden} must be a multiple of --heads "
                               f"{self.heads} (GAT concatenates its heads)")
        if self.algo == "cd-r" and self.model == "sage" and self.aggregator in ("max", "min"):
            raise DistGNNError(f"the {self.aggregator} aggregator is exchanged exactly (cd-0) "
                               "or not at all (0c); cd-r has no delayed extreme: use --algo "
                               "cd-0 or 0c")
        if self.recompute and self.algo == "cd-r":
            raise DistGNNError("--recompute runs each layer's exchange again in the backward "
                               "pass, which would advance cd-r's schedule twice: use cd-0 or 0c")
        if self.recompute and self.exchange_precision not in (None, "fp32"):
            raise DistGNNError(f"--recompute runs each layer's exchange again in the backward "
                               f"pass, which would apply --exchange-precision "
                               f"{self.exchange_precision}'s error feedback twice: use fp32")
        if self.algo == "cd-r":
            need(self.delay is None or (integer(self.delay) and 1 <= self.delay <= MAX_DELAY),
                 "delay", f"an integer from 1 to {MAX_DELAY} with cd-r", self.delay)
        elif self.delay:
            raise DistGNNError(f"--delay applies to cd-r only, not {self.algo}")
        need(isinstance(self.smoothing, (int, float)) and 0 <= self.smoothing < 1, "smoothing",
             "in [0, 1)", self.smoothing)
        if self.smoothing and self.algo != "cd-r":
            raise DistGNNError(f"--smoothing applies to cd-r only, not {self.algo}")
        if self.comm_budget is not None:
            need(isinstance(self.comm_budget, (int, float)) and math.isfinite(self.comm_budget)
                 and self.comm_budget > 0, "comm-budget", "a number > 0", self.comm_budget)
            if self.algo != "cd-r":
                raise DistGNNError(f"--comm-budget applies to cd-r only, not {self.algo}")
            if self.delay is not None or self.smoothing:
                raise DistGNNError("--comm-budget replaces cd-r's bins: it takes neither "
                                   "--delay nor --smoothing")
        need(self.exchange_precision in (None, *PRECISIONS), "exchange-precision",
             "one of " + ", ".join(PRECISIONS), self.exchange_precision)
        if self.exchange_precision not in (None, "fp32") and self.algo == "0c":
            raise DistGNNError("--exchange-precision applies to cd-0 and cd-r; 0c sends nothing")
        if self.exchange_topology == "node" and self.algo == "cd-0" and self.wire != "fp32":
            raise DistGNNError(f"--exchange-topology node sums in the run's own type; cd-0 on "
                               f"a {self.wire} wire keeps a residual per leaf and goes flat: "
                               "use --exchange-precision fp32 or --exchange-topology flat")
        need(self.aggregation_precision in AGGREGATION_PRECISIONS, "aggregation-precision",
             "one of " + ", ".join(AGGREGATION_PRECISIONS), self.aggregation_precision)
        if self.aggregation_precision == "bf16" and self.dtype == "float64":
            raise DistGNNError("--aggregation-precision bf16 rounds float32 operands; --dtype "
                               "float64 is for exact checks: use fp32 with it")
        for flag in PATH_FLAGS + ("rank-devices", "rank-backends"):
            if getattr(self, flag.replace("-", "_")) == "":  # "" would read as not given
                raise DistGNNError(f"--{flag}: the value is empty; give one, or leave it out")
        parse_per_rank(self.rank_devices, "--rank-devices", DEVICES)
        parse_per_rank(self.rank_backends, "--rank-backends", BACKEND_CHOICES)
        check_distinct_outputs({f"--{flag}": getattr(self, flag.replace("-", "_"))
                                for flag in OUTPUT_FLAGS})
        if self.metrics_out:
            check_replaceable(check_output_file(self.metrics_out, "--metrics-out"),
                              is_metrics_file, "a metrics file written by distgnn-train")
        if self.checkpoint_dir:
            check_output_dir(self.checkpoint_dir, "--checkpoint-dir")
        need(integer(self.embeddings_layer), "embeddings-layer", "an integer",
             self.embeddings_layer)
        if self.embeddings_layer != DEFAULTS["embeddings_layer"] and not self.embeddings_out:
            raise DistGNNError("--embeddings-layer chooses what --embeddings-out writes; "
                               "without --embeddings-out it would change nothing")
        check_model_output(self.save_model)
        check_outputs(self.predictions_out, self.embeddings_out)
        if self.resume and self.resume_if_present:
            raise DistGNNError("--resume and --resume-if-present exclude each other (the "
                               "first needs a checkpoint, the second starts afresh without)")
        if self.resume and not Path(self.resume).is_dir():
            raise DistGNNError(f"--resume {self.resume}: not a directory of checkpoints")
        if self.resume_if_present and Path(self.resume_if_present).exists() \
                and not Path(self.resume_if_present).is_dir():
            raise DistGNNError(f"--resume-if-present {self.resume_if_present}: exists and is "
                               "not a directory")

    def check_model_flags(self) -> None:
        """Refuse a flag away from its default that ``--model`` does not read (it would
        change nothing), and ``--precompute-first-aggregation`` on a model whose first
        aggregation is not linear in the features."""
        for flag, models in MODEL_FLAGS.items():
            field = flag.replace("-", "_")
            if self.model not in models and getattr(self, field) != DEFAULTS[field]:
                raise DistGNNError(f"--{flag} applies to --model {' or '.join(models)}, not "
                                   f"{self.model}")
        if self.precompute_first and not (
                self.model == "gcn" or (self.model == "sage"
                                        and self.aggregator in LINEAR_AGGREGATORS)):
            raise DistGNNError("--precompute-first-aggregation needs --model gcn, or sage with "
                               f"--aggregator {' or '.join(LINEAR_AGGREGATORS)}")

    def check_single_socket(self) -> None:
        """Refuse, for a run on one socket (no partitions, so no split vertices), every
        exchange option away from its default: it would change nothing."""
        for flag in EXCHANGE_FLAGS:
            field = flag.replace("-", "_")
            if getattr(self, field) != DEFAULTS[field]:
                value = getattr(self, field)
                shown = f"--{flag} {value}" if not isinstance(value, bool) else (
                    f"--{flag}" if value else f"--no-{flag}")
                raise DistGNNError(f"{shown} applies to --partitions (split vertices "
                                   "exchange partials); one socket has none to exchange")

    @property
    def default_schedule(self) -> bool:
        """cd-r without ``--delay``, ``--smoothing`` or ``--comm-budget``: the controlled
        schedule of :mod:`distgnn.exchange.controller`."""
        return (self.algo == "cd-r" and self.delay is None and not self.smoothing
                and self.comm_budget is None)

    @property
    def wire(self) -> str:
        """The training exchanges' precision: ``--exchange-precision``, or by default
        ``DEFAULT_SCHEDULE_PRECISION`` under cd-r's default schedule and fp32 otherwise."""
        if self.exchange_precision is not None:
            return self.exchange_precision
        return DEFAULT_SCHEDULE_PRECISION if self.default_schedule else "fp32"

    @property
    def exchange_schedule(self) -> str:
        """The split-vertex exchange in words, as the run reports it: the algorithm, its
        schedule and its wire."""
        if self.algo != "cd-r":
            words = self.algo
        elif self.comm_budget is not None:
            words = f"cd-r adaptive, budget {self.comm_budget:g}"
        elif self.default_schedule:
            words = "cd-r default schedule (each epoch exact or 1 epoch stale)"
        else:
            words = f"cd-r delay {self.delay_epochs}" + (
                f", smoothing {self.smoothing:g}" if self.smoothing else "")
        return words + (f", {self.wire} wire" if self.wire != "fp32" else "")

    @property
    def delay_epochs(self) -> int:
        """``r`` of cd-r (1 under the default schedule and under ``--comm-budget``, whose
        messages arrive the epoch after they are sent; ``DEFAULT_DELAY`` with
        ``--smoothing`` alone); 0 for the other exchanges."""
        if self.algo != "cd-r":
            return 0
        if self.comm_budget is not None or self.default_schedule:
            return 1
        return DEFAULT_DELAY if self.delay is None else self.delay


DEFAULTS = {f.name: f.default for f in dataclasses.fields(TrainConfig)}
# the flags one model kind alone reads (their models): elsewhere a value is refused
MODEL_FLAGS = {"aggregator": ("sage",), "heads": ("gat",), "train-eps": ("gin",),
               "alpha": ("gcnii",), "theta": ("gcnii",),
               "residual": ("gcn", "sage", "gin", "gat")}
# the flags of the split-vertex exchange: meaningful with --partitions only
EXCHANGE_FLAGS = ("algo", "delay", "smoothing", "comm-budget", "exchange-precision",
                  "backward-exchange", "exchange-topology")
# what a run writes (each on a path of its own), and every flag that names a path
OUTPUT_FLAGS = ("metrics-out", "checkpoint-dir", "save-model", "predictions-out",
                "embeddings-out")
PATH_FLAGS = OUTPUT_FLAGS + ("resume", "resume-if-present")


def hidden_default(model: str, heads: int) -> int:
    """The hidden width when none is given: 16, or 8 channels per head for GAT."""
    if model == "gat" and isinstance(heads, int) and heads >= 1:
        return GAT_CHANNELS_PER_HEAD * heads
    return DEFAULT_HIDDEN
