"""Train a model defined in this file, built from distgnn's layers, on one socket or under MPI.

The same code trains on a whole graph in one process and on a partitioned graph, one rank
per partition:

    python examples/own_model.py --dataset cora --save-model /tmp/own.pt
    distgnn-partition cora --parts 2 --out /tmp/cora-p2
    distgnn-launch -n 2 -- python examples/own_model.py --partitions /tmp/cora-p2

A model saved from it is applied again by naming the function that builds it:

    distgnn-predict /tmp/own.pt --dataset cora --model-factory examples/own_model.py:make_model

The model is an ordinary ``torch.nn.Module`` whose ``forward(g, x)`` calls each layer as
``conv(g, h)``: ``g`` is the whole graph in one process and this rank's partition under
``mpirun``, where the layers exchange what the split vertices need inside.  Dropout is
:class:`distgnn.nn.KeyedDropout`, whose masks every rank draws alike, so under
``--algo cd-0`` both runs give the same losses.

Bad flags and data end as in ``distgnn-train``: one line on stderr and exit status 2.
"""
import functools
import sys

import torch
import torch.nn.functional as F
from torch import nn

import distgnn
from distgnn.cli.train import report
from distgnn.nn import MLP, GATConv, GINConv, KeyedDropout
from distgnn.program import OneLineParser, interruptible, run_guarded
from distgnn.run.distributed import run_rank


class AttentionThenGIN(nn.Module):
    """A GAT layer, a GIN layer, and a linear read-out of both (jumping knowledge):

    ``h1 = ELU(GAT(x))``, ``h2 = ReLU(GIN(h1))``, ``logits = W [h1 || h2] + b``.
    """

    def __init__(self, in_channels: int, num_classes: int, hidden: int = 64, heads: int = 8,
                 dropout: float = 0.5):
        super().__init__()
        self.drop_x, self.drop_h1, self.drop_both = (KeyedDropout(dropout) for _ in range(3))
        self.attention = GATConv(in_channels, hidden // heads, heads, dropout=dropout)
        self.gin = GINConv(MLP(hidden, hidden, hidden), train_eps=True)
        self.readout = nn.Linear(2 * hidden, num_classes)

    def forward(self, g, x: torch.Tensor) -> torch.Tensor:
        h1 = F.elu(self.attention(g, self.drop_x(g, x)))
        h2 = F.relu(self.gin(g, self.drop_h1(g, h1)))
        return self.readout(self.drop_both(g, torch.cat([h1, h2], dim=1)))


def make_model(in_channels: int, num_classes: int, dropout: float = 0.5) -> nn.Module:
    """The model for ``in_channels`` features and ``num_classes`` classes: what
    ``distgnn.train`` builds it with, and ``distgnn-predict --model-factory`` names."""
    return AttentionThenGIN(in_channels, num_classes, dropout=dropout)


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
    p.add_argument("--save-model", help="write the trained model here")
    args = p.parse_args(argv)

    def config() -> distgnn.TrainConfig:  # made on every rank under MPI, before any data is read
        return distgnn.TrainConfig(epochs=args.epochs, lr=0.005, dropout=args.dropout,
                                   metrics_out=args.metrics_out, save_model=args.save_model,
                                   progress=False)

    def one_rank() -> int:
        result = distgnn.train(args.partitions or args.dataset, config,
                               functools.partial(make_model, dropout=args.dropout))
        if world is None or world.rank == 0:
            report(result)
        return 0

    if args.partitions:  # every rank checks the flags and the files; rank 0 reports once
        from distgnn.comm.mpi import MPICommunicator

        world = MPICommunicator()
        return run_guarded(PROG, lambda: run_rank(PROG, one_rank, world))
    world = None
    return run_guarded(PROG, one_rank)


if __name__ == "__main__":
    sys.exit(main())
