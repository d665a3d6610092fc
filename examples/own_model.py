"""Train a model defined in this file, built from distgnn's layers, on one socket or under MPI.

The same code trains on a whole graph in one process and on a partitioned graph, one rank
per partition:

    python examples/own_model.py --dataset cora
    distgnn-partition cora --parts 2 --out /tmp/cora-p2
    distgnn-launch -n 2 -- python examples/own_model.py --partitions /tmp/cora-p2

The model is an ordinary ``torch.nn.Module`` whose ``forward(nbr, x, step)`` calls each
layer with ``nbr.at(i, step, self.training)``: ``nbr`` is the whole graph in one process
and this rank's partition under ``mpirun``, where the layers exchange what the split
vertices need inside.  Dropout between layers is :func:`distgnn.nn.keyed_dropout`, whose
masks every rank draws alike, so under ``--algo cd-0`` both runs give the same losses.

Bad flags and data end as in ``distgnn-train``: one line on stderr and exit status 2.
"""
import functools
import sys

import torch
import torch.nn.functional as F
from torch import nn

from distgnn.cli import report
from distgnn.cli_common import OneLineParser, interruptible, run_guarded
from distgnn.config import TrainConfig
from distgnn.datasets import load
from distgnn.distributed import train_partitions
from distgnn.nn import GATConv, GINConv, keyed_dropout
from distgnn.train import train


class AttentionThenGIN(nn.Module):
    """A GAT layer, a GIN layer, and a linear read-out of both (jumping knowledge):

    ``h1 = ELU(GAT(x))``, ``h2 = ReLU(GIN(h1))``, ``logits = W [h1 || h2] + b``.
    """

    def __init__(self, in_channels: int, num_classes: int, hidden: int = 64, heads: int = 8,
                 dropout: float = 0.5, seed: int = 0):
        super().__init__()
        self.attention = GATConv(in_channels, hidden // heads, heads, dropout=dropout,
                                 seed=seed)
        self.gin = GINConv(hidden, hidden, train_eps=True)
        self.readout = nn.Linear(2 * hidden, num_classes)
        self.dropout, self.seed = dropout, seed

    def forward(self, nbr, x: torch.Tensor, step: int = 0) -> torch.Tensor:
        def drop(h, layer):
            return keyed_dropout(h, nbr, self.dropout, self.training, self.seed, step, layer)

        h1 = F.elu(self.attention(nbr.at(0, step, self.training), drop(x, 0), step))
        h2 = F.relu(self.gin(nbr.at(1, step, self.training), drop(h1, 1)))
        return self.readout(drop(torch.cat([h1, h2], dim=1), 2))


PROG = "own_model.py"


@interruptible(PROG)
def main(argv=None) -> int:
    p = OneLineParser(prog=PROG, description=__doc__.splitlines()[0])
    source = p.add_mutually_exclusive_group(required=True)
    source.add_argument("--dataset", help="train on this dataset in one process")
    source.add_argument("--partitions", help="train on these partitions (one rank each)")
    p.add_argument("--epochs", type=int, default=100, help="training epochs")
    p.add_argument("--dropout", type=float, default=0.5, help="dropout probability")
    p.add_argument("--metrics-out", help="write one JSON line per epoch here")
    args = p.parse_args(argv)

    @functools.cache  # checked once (on every rank under MPI), before any data is read
    def config() -> TrainConfig:
        return TrainConfig(epochs=args.epochs, lr=0.005, dropout=args.dropout,
                           metrics_out=args.metrics_out, progress=False)

    def make_model(in_channels: int, num_classes: int) -> nn.Module:
        cfg = config()
        return AttentionThenGIN(in_channels, num_classes, dropout=cfg.dropout, seed=cfg.seed)

    def one_process() -> int:
        cfg = config()
        report(train(load(args.dataset), cfg, make_model=make_model))
        return 0

    if args.partitions:  # every rank checks the flags and the files; rank 0 reports once
        return train_partitions(args.partitions, config, report, make_model, PROG)
    return run_guarded(PROG, one_process)


if __name__ == "__main__":
    sys.exit(main())
