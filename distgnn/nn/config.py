"""The model part of a run's configuration: which network, how wide and deep (the flags of
``distgnn-train``'s "model" group), validated here, where the models are."""
from __future__ import annotations

import dataclasses
import math
import numbers

from torch import nn

from ..errors import DistGNNError
from ..options import option
from .models import GCNII, GNN, MODELS
from .sage_conv import LINEAR_AGGREGATORS, SAGE_AGGREGATORS
from .widths import layer_widths

DEFAULT_HIDDEN = 16
# GAT's hidden layers: 8 channels per head, as Velickovic et al.'s and PyG's Cora model
GAT_CHANNELS_PER_HEAD = 8
# The deepest published GNNs have about a thousand layers (RevGNN); more is a typo.
MAX_LAYERS = 10_000


def integer(value) -> bool:
    """An int that is not a bool (``True`` is an int to Python, not to a user)."""
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def need(ok: bool, flag: str, what: str, value) -> None:
    """One line naming ``--flag`` when ``ok`` is false."""
    if not ok:
        raise DistGNNError(f"--{flag} must be {what}, got {value!r}")


@dataclasses.dataclass
class ModelConfig:
    """The network: ``model`` and the options of its layers (a few apply to one kind of
    model only, and are refused for the others away from their defaults)."""

    model: str = option("gcn", "gcn: GCN (Kipf & Welling); sage: GraphSAGE; gin: GIN (Xu et "
                        "al.); gat: GAT (Velickovic et al.), --heads heads on hidden layers, "
                        "one on the last, ELU between; gcnii: deep residual GCNII (Chen et "
                        "al.), --layers propagation layers between two linear layers",
                        choices=MODELS)
    aggregator: str = option("gcn", "GraphSAGE aggregator; gcn = (sum of neighbours + self) / "
                             "(degree + 1); max/min are exchanged exactly under cd-0 (not "
                             "with cd-r)", choices=SAGE_AGGREGATORS)
    layers: int = option(2, "number of GNN layers", type=int)
    hidden: int | None = option(
        None, f"hidden width (default: {DEFAULT_HIDDEN}; GAT: {GAT_CHANNELS_PER_HEAD} per "
        f"head, {GAT_CHANNELS_PER_HEAD * 8} with 8 heads)", type=int)
    dropout: float = option(0.5, "dropout probability before each layer", type=float)
    residual: bool = option(False, "skip connections around the layers whose input and "
                            "output widths are equal: the hidden-to-hidden layers (--layers "
                            "3 or more), and the first where the features' width is "
                            "--hidden", action="store_true")
    heads: int = option(8, "GAT: attention heads of each hidden layer (--hidden is their "
                        "concatenated width, so a multiple of this)", type=int)
    train_eps: bool = option(False, "GIN: learn epsilon (else fixed at 0)",
                             action="store_true")
    alpha: float = option(0.1, "GCNII: weight of the initial residual", type=float)
    theta: float = option(0.5, "GCNII: identity-mapping strength (beta_l = log(theta / l + "
                          "1))", type=float)
    precompute_first: bool = option(
        False, "no dropout on the input features, and the first layer's aggregation of them "
        "computed (and exchanged) once (SGC/MG-GCN): cd-r then leaves only later layers "
        "stale; not with the max aggregator", flag="--precompute-first-aggregation",
        action="store_true")

    def __post_init__(self):
        if self.hidden is None:
            self.hidden = hidden_default(self.model, self.heads)
        self.validate()

    def validate(self) -> None:
        """Refuse, with one line naming the flag, a size, rate or choice that cannot make a
        model, and a flag of another kind of model."""
        for flag, low, high in (("layers", 1, MAX_LAYERS), ("hidden", 1, None),
                                ("heads", 1, None)):
            value = getattr(self, flag)
            need(integer(value) and value >= low and (high is None or value <= high), flag,
                 f"an integer >= {low}" + (f" and <= {high}" if high else ""), value)
        need(isinstance(self.dropout, numbers.Real) and 0 <= self.dropout < 1, "dropout",
             "in [0, 1)", self.dropout)
        need(isinstance(self.alpha, numbers.Real) and 0 <= self.alpha <= 1, "alpha",
             "in [0, 1]", self.alpha)
        need(isinstance(self.theta, numbers.Real) and math.isfinite(self.theta)
             and self.theta > 0, "theta", "a finite number > 0", self.theta)
        for flag, choices in (("model", MODELS), ("aggregator", SAGE_AGGREGATORS)):
            need(getattr(self, flag) in choices, flag, "one of " + ", ".join(choices),
                 getattr(self, flag))
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
        if self.model == "gat" and self.layers > 1 and self.hidden % self.heads:
            raise DistGNNError(f"--hidden {self.hidden} must be a multiple of --heads "
                               f"{self.heads} (GAT concatenates its heads)")


DEFAULTS = {f.name: f.default for f in dataclasses.fields(ModelConfig)}
# the flags one model kind alone reads (their models): elsewhere a value is refused
MODEL_FLAGS = {"aggregator": ("sage",), "heads": ("gat",), "train-eps": ("gin",),
               "alpha": ("gcnii",), "theta": ("gcnii",),
               "residual": ("gcn", "sage", "gin", "gat")}


def hidden_default(model: str, heads: int) -> int:
    """The hidden width when none is given: 16, or 8 channels per head for GAT."""
    if model == "gat" and integer(heads) and heads >= 1:
        return GAT_CHANNELS_PER_HEAD * heads
    return DEFAULT_HIDDEN


def check_residual(network: ModelConfig, in_channels: int) -> None:
    """Refuse ``--residual`` where a built-in model of ``in_channels`` features skips nothing.

    :class:`~distgnn.nn.models.GNN` adds a skip connection around each layer but the last
    whose input and output widths are equal: none with one layer, nor with two unless the
    features' width is ``--hidden``.  Checked where a run builds its model, not when a saved
    model is rebuilt (a file trained so is read as it was)."""
    if not network.residual:
        return
    widths = layer_widths(in_channels, network.hidden, 0, network.layers)
    if any(a == b for a, b in zip(widths[:-2], widths[1:-1])):
        return
    first = ("" if network.layers == 1 else f", and the first takes {in_channels} "
             f"features to --hidden {network.hidden}")
    raise DistGNNError(f"--residual would change nothing with --layers {network.layers}: it "
                       "skips around the layers but the last whose widths in and out are "
                       f"equal{first}; give --layers 3 or more, or leave it out")


def build_model(network: ModelConfig, in_channels: int, num_classes: int,
                recompute: bool = False) -> nn.Module:
    """The model ``network`` describes for ``in_channels`` features and ``num_classes``
    classes; ``recompute``: activation checkpointing per layer."""
    try:
        if network.model == "gcnii":
            return GCNII(in_channels, network.hidden, num_classes, network.layers,
                         network.dropout, network.alpha, network.theta, recompute)
        return GNN(network.model, in_channels, network.hidden, num_classes, network.layers,
                   network.dropout, network.aggregator, network.residual,
                   network.precompute_first, network.heads, network.train_eps, recompute)
    except ValueError as e:
        raise DistGNNError(str(e)) from None
