"""The data part of a run's configuration: how the features are normalised, which split,
the vertex order and whether partitions are verified, validated here, where the data is."""
from __future__ import annotations

import dataclasses
import numbers

from ..errors import DistGNNError
from ..options import changed_options, option
from .ordering import CHOICES as ORDER_CHOICES

FEATURE_NORMS = ("row", "none")


@dataclasses.dataclass
class DataConfig:
    """What a run does with its data as it loads it."""

    feature_norm: str = option("row", "row: divide each feature row by its L1 norm (Kipf & "
                               "Welling's preprocessing, made for non-negative counts); none: "
                               "the features as they are", choices=FEATURE_NORMS)
    split: int = option(0, "which fixed split to use when the dataset ships several",
                        type=int)
    reorder: str = option(
        "given", "with --dataset: relabel the vertices once on load in a locality order for "
        "cache reuse in aggregation: degree (most-read feature rows first), rcm (reverse "
        "Cuthill-McKee), auto (the default of a bare --reorder: timed trial when the features "
        "outgrow the last-level cache) or given (no relabelling, the default). Metrics, "
        "ROC-AUC, dropout masks and checkpoints stay in the dataset's own ids. Partitions are "
        "ordered by distgnn-partition --order-vertices", nargs="?", const="auto",
        metavar="ORDER", choices=ORDER_CHOICES)
    verify: bool = option(True, "with --partitions: check the size and SHA-256 of each "
                          "rank's files at start-up", action=True)

    def __post_init__(self):
        for flag, choices in (("feature-norm", FEATURE_NORMS), ("reorder", ORDER_CHOICES)):
            value = getattr(self, flag.replace("-", "_"))
            if value not in choices:
                raise DistGNNError(f"--{flag} must be one of {', '.join(choices)}, got "
                                   f"{value!r}")
        if (not isinstance(self.split, numbers.Integral) or isinstance(self.split, bool)
                or self.split < 0):
            raise DistGNNError(f"--split must be an integer >= 0, got {self.split!r}")

    def check_single_socket(self) -> None:
        """Refuse, for a run on one socket, ``--no-verify``: it skips the checks of partition
        files, and a dataset has none (it would change nothing)."""
        given = changed_options(self, only=("verify",))
        if given:
            raise DistGNNError(f"{given[0]} applies to --partitions (the checksums of each "
                               "rank's files); a dataset has none to verify")
