"""The PyTorch Geometric script of ``pyg_plain.py``, trained by distgnn in one process or on
partitions under MPI, the model unchanged.

    python examples/pyg_distributed.py
    distgnn-partition cora --parts 2 --out /tmp/cora-p2
    distgnn-launch -n 2 -- python -m mpi4py examples/pyg_distributed.py --partitions /tmp/cora-p2

``distgnn.pyg.distribute`` makes the model train on this rank's partition: its layers'
aggregations, degree normalisations and dropout act over the whole graph, so one process
and two ranks print the same losses (to rounding), and the saved weights are a plain
``state_dict`` of ``GCN`` (``pyg_plain.py`` loads them).  ``diff examples/pyg_plain.py
examples/pyg_distributed.py`` shows the lines that change.
"""
import argparse
from importlib.resources import files

import numpy as np
import torch
import torch.nn.functional as F
from torch_geometric.data import Data
from torch_geometric.nn import GCNConv

import distgnn
import distgnn.pyg


class GCN(torch.nn.Module):
    def __init__(self, in_channels, hidden_channels, out_channels):
        super().__init__()
        self.conv1 = GCNConv(in_channels, hidden_channels)
        self.conv2 = GCNConv(hidden_channels, out_channels)

    def forward(self, x, edge_index):
        x = F.dropout(x, p=0.5, training=self.training)
        x = self.conv1(x, edge_index).relu()
        x = F.dropout(x, p=0.5, training=self.training)
        return self.conv2(x, edge_index)


def cora() -> Data:
    """Cora (Planetoid's split): the copy bundled with distgnn (Planetoid downloads it)."""
    z = np.load(files("distgnn.data") / "cora.npz")
    dst = np.repeat(np.arange(len(z["indptr"]) - 1), np.diff(z["indptr"]))
    masks = {f"{name}_mask": torch.from_numpy(z[f"{name}_mask"]) for name in ("train", "val", "test")}
    return Data(x=torch.from_numpy(z["x"]).float(), y=torch.from_numpy(z["y"]).long(),
                edge_index=torch.from_numpy(np.stack([z["indices"], dst])).long(), **masks)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--epochs", type=int, default=200, help="training epochs")
    p.add_argument("--save-model", help="write the trained weights (a state_dict) here")
    p.add_argument("--partitions", help="train on these partitions, one rank each (mpirun)")
    args = p.parse_args()

    torch.manual_seed(0)
    data = args.partitions or distgnn.from_pyg(cora())
    run = distgnn.setup(data, distgnn.TrainConfig(seed=0), log=lambda line: None)
    model = run.place(distgnn.pyg.distribute(GCN(run.num_features, 16, run.num_classes)))
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01, weight_decay=5e-4)
    for epoch in range(args.epochs):
        run.start_epoch(model, epoch)
        optimizer.zero_grad()
        out = model(run.g, run.x)
        loss = run.loss(out)
        loss.backward()
        loss = run.sync(model, loss)
        optimizer.step()
        if run.rank == 0:
            print(f"epoch {epoch + 1:3d}  loss {loss:.6f}", flush=True)
    run.start_epoch(model, args.epochs, training=False)
    acc = run.accuracy(model(run.g, run.x), "test")
    if run.rank == 0:
        print(f"test accuracy {acc:.4f}")
    if args.save_model and run.rank == 0:
        torch.save(model.state_dict(), args.save_model)


if __name__ == "__main__":
    main()
