"""Write the training loop yourself (optimizer, loss, schedule), on one socket or under MPI.

    python examples/own_loop.py cora
    distgnn-partition cora --parts 2 --out /tmp/cora-p2
    distgnn-launch -n 2 -- python -m mpi4py examples/own_loop.py /tmp/cora-p2

``distgnn.setup`` gives this rank's graph ``run.g``, features ``run.x``, labels and masks
(the whole graph in one process; one partition per rank under ``mpirun``), ``run.loss``
normalises the loss over all ranks and ``run.sync`` sums the gradients over them, so the
loop below is the same in both cases and, with the exact exchange (the default, cd-0),
prints the same losses (to rounding).  ``python -m mpi4py`` ends the whole job if one rank
raises.
"""
import argparse

import torch
import torch.nn.functional as F

import distgnn
from distgnn.nn import GCNConv, KeyedDropout


class Net(torch.nn.Module):
    def __init__(self, in_channels: int, num_classes: int, hidden: int = 16, p: float = 0.5):
        super().__init__()
        self.drop1, self.drop2 = KeyedDropout(p), KeyedDropout(p)
        self.conv1 = GCNConv(in_channels, hidden)
        self.conv2 = GCNConv(hidden, num_classes)

    def forward(self, g, x):
        h = F.relu(self.conv1(g, self.drop1(g, x)))
        return self.conv2(g, self.drop2(g, h))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("source", help="a dataset (name or path) or a partition directory")
    p.add_argument("--epochs", type=int, default=50, help="training epochs")
    p.add_argument("--log-every", type=int, default=10, help="print every this many epochs")
    args = p.parse_args()

    with distgnn.setup(args.source, distgnn.TrainConfig(seed=0), log=lambda line: None) as run:
        model = run.place(Net(run.num_features, run.num_classes))
        optimizer = torch.optim.AdamW(model.parameters(), lr=0.01, weight_decay=5e-4)
        schedule = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, args.epochs)
        for epoch in range(args.epochs):
            run.start_epoch(model, epoch)
            loss = run.loss(model(run.g, run.x), "train")
            optimizer.zero_grad()
            loss.backward()
            value = run.sync(model, loss)
            optimizer.step()
            schedule.step()
            if (epoch + 1) % args.log_every == 0 or epoch == args.epochs - 1:
                run.start_epoch(model, epoch, training=False)
                with torch.no_grad():
                    logits = model(run.g, run.x)
                val = run.accuracy(logits, "val")
                if run.rank == 0:
                    print(f"epoch {epoch + 1:3d}  loss {value:.6f}  val {val:.4f}", flush=True)


if __name__ == "__main__":
    main()
