"""A plain PyTorch Geometric script: a two-layer GCN trained on Cora in one process.

    python examples/pyg_plain.py

``examples/pyg_distributed.py`` is this script trained by distgnn, in one process or on
partitions under MPI: ``diff examples/pyg_plain.py examples/pyg_distributed.py`` shows the
lines that change.
"""
import argparse
from importlib.resources import files

import numpy as np
import torch
import torch.nn.functional as F
from torch_geometric.data import Data
from torch_geometric.nn import GCNConv


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
    args = p.parse_args()

    torch.manual_seed(0)
    data = cora()
    data.x = data.x / data.x.sum(1, keepdim=True).clamp(min=1)  # NormalizeFeatures
    model = GCN(data.num_features, 16, int(data.y.max()) + 1)
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01, weight_decay=5e-4)
    for epoch in range(args.epochs):
        model.train()
        optimizer.zero_grad()
        out = model(data.x, data.edge_index)
        loss = F.cross_entropy(out[data.train_mask], data.y[data.train_mask])
        loss.backward()
        optimizer.step()
        print(f"epoch {epoch + 1:3d}  loss {loss.item():.6f}", flush=True)
    model.eval()
    pred = model(data.x, data.edge_index).argmax(1)
    acc = float((pred[data.test_mask] == data.y[data.test_mask]).float().mean())
    print(f"test accuracy {acc:.4f}")
    if args.save_model:
        torch.save(model.state_dict(), args.save_model)


if __name__ == "__main__":
    main()
