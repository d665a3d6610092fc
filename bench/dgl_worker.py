"""The DGL side of ``distgnn-bench epoch``: this project's GraphSAGE-gcn and GCN in DGL.

A standalone script for DGL's own environment (it imports numpy, torch and dgl, nothing of
distgnn), as ``distgnn-bench epoch`` starts it (``-I``: without ``bench/`` on the path)::

    DGL_PYTHON -I bench/dgl_worker.py JOB

Same mathematics as :class:`distgnn.nn.models.GNN`, layer for layer (dropout before each
layer, ReLU between them, logits out), the same as :class:`bench.pyg.PyGNet`'s:

- GraphSAGE-gcn, ``h'_v = W (h_v + sum_{u in N(v)} h_u) / (d_v + 1) + b``, is DGL's
  ``SAGEConv(aggregator_type="gcn")`` on ``A`` (it adds ``h_v`` and divides by the in-degree
  plus one itself);
- GCN, ``D^-1/2 (A + I) D^-1/2 H W + b`` with ``d_v`` the in-degree plus one, is
  ``GraphConv(norm="both")`` on ``A + I`` (``dgl.add_self_loop``: one more edge ``v -> v``
  per vertex, beside any stored one, as ours).  ``GraphConv`` scales a source by its
  out-degree and a destination by its in-degree: equal to ours on a symmetric graph (every
  generated and bundled one), not on a directed one.

The graph is the ``.npz`` CSR (rows = destinations: DGL's ``csc`` of sources to
destinations); the model starts from the weights of ``weights``, an ``.npz`` of
``weight_{i}`` (``[out, in]``, torch ``Linear``'s layout) and ``bias_{i}`` per layer ``i``
and of ``features``, normalised as this project's trainer normalises them: DGL's
``SAGEConv.fc_neigh.weight`` takes ``weight_i`` as it is, ``GraphConv.weight`` (``[in,
out]``) its transpose.  Training: Adam (``lr``, ``weight_decay``), cross-entropy over the
training mask, ``warmup`` epochs and then ``epochs`` timed ones of forward, backward and
optimizer step.

``JOB`` is JSON: ``npz``, ``weights``, ``model`` (``sage`` or ``gcn``), ``epochs``, ``warmup``,
``dropout``, ``lr``, ``weight_decay``, ``threads`` (torch's and DGL's
thread pools, ``null``: their defaults) and ``seed``.  Printed, one JSON line: ``losses`` and
``times`` (seconds) of the timed epochs, ``rss_loaded_mib`` (resident set once the data is
loaded), ``peak_rss_mib`` (peak resident set) and ``versions``.
"""
from __future__ import annotations

import json
import sys
import time

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

MODELS = ("sage", "gcn")


def process_mib(field: str = "VmHWM") -> float:
    """``VmHWM`` (peak) or ``VmRSS`` (now) resident memory of this process in MiB."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) / 1024
    raise RuntimeError(f"no {field} in /proc/self/status")


def import_dgl():
    """The ``dgl`` module, or a one-line reason why it cannot be imported."""
    try:
        import dgl
    except (ImportError, OSError) as e:  # FileNotFoundError too
        graphbolt = "graphbolt" in str(e)
        raise SystemExit(
            f"dgl cannot be imported with torch {torch.__version__}: {e}"
            + (" (DGL's graphbolt has no build for this torch: see docs/benchmarks.md, 'DGL')"
               if graphbolt else "")) from None
    return dgl


class DGLNet(nn.Module):
    """``len(widths) - 1`` layers of DGL's ``model`` convolution, ``widths[i] -> widths[i+1]``,
    ``F.dropout`` before each and ReLU between them; logits out."""

    def __init__(self, model: str, widths: list[int], dropout: float):
        super().__init__()
        from dgl.nn import GraphConv, SAGEConv

        if model not in MODELS:
            raise NotImplementedError(f"DGL here: {', '.join(MODELS)}, not {model}")
        self.model, self.dropout = model, dropout
        self.convs = nn.ModuleList(
            SAGEConv(a, b, aggregator_type="gcn") if model == "sage"
            else GraphConv(a, b, norm="both")
            for a, b in zip(widths[:-1], widths[1:]))

    def forward(self, g, x: torch.Tensor) -> torch.Tensor:
        for i, conv in enumerate(self.convs):
            x = conv(g, F.dropout(x, self.dropout, self.training))
            if i < len(self.convs) - 1:
                x = F.relu(x)
        return x

    def load(self, weights) -> None:
        """Copy ``weight_{i}`` (``[out, in]``) and ``bias_{i}`` into layer ``i``; every
        parameter gets one."""
        pairs = []
        for i, conv in enumerate(self.convs):
            w = torch.from_numpy(np.asarray(weights[f"weight_{i}"]))
            b = torch.from_numpy(np.asarray(weights[f"bias_{i}"]))
            target = conv.fc_neigh.weight if self.model == "sage" else conv.weight
            pairs += [(target, w if self.model == "sage" else w.T), (conv.bias, b)]
        missed = {id(p) for p in self.parameters()} - {id(t) for t, _ in pairs}
        if missed or any(t.shape != s.shape for t, s in pairs):
            raise RuntimeError(f"DGL {self.model}: the weights are not of these layers")
        with torch.no_grad():
            for target, source in pairs:
                target.copy_(source)


def graph(dgl, indptr: np.ndarray, indices: np.ndarray, model: str):
    """The DGL graph of the CSR (rows = destinations); with a self-loop per vertex for GCN."""
    n = len(indptr) - 1
    g = dgl.graph(("csc", (torch.from_numpy(indptr.astype(np.int64)),
                           torch.from_numpy(indices.astype(np.int64)),
                           torch.zeros(0, dtype=torch.int64))), num_nodes=n)
    return dgl.add_self_loop(g) if model == "gcn" else g


def run(job: dict) -> dict:
    """``job``'s training (see the module's docstring): its losses, times and memory."""
    dgl = import_dgl()
    if job["threads"] is not None:
        torch.set_num_threads(job["threads"])
        dgl.utils.set_num_threads(job["threads"])
    with np.load(job["npz"]) as f:
        data = {k: f[k] for k in ("indptr", "indices", "y", "train_mask")}
    with np.load(job["weights"]) as f:
        weights = {k: f[k] for k in f.files}
    rss_loaded = process_mib("VmRSS")
    layers = sum(k.startswith("weight_") for k in weights)
    widths = [weights["weight_0"].shape[1]] + [weights[f"weight_{i}"].shape[0]
                                               for i in range(layers)]
    torch.manual_seed(job["seed"])
    net = DGLNet(job["model"], widths, job["dropout"])
    net.load(weights)
    g = graph(dgl, data["indptr"], data["indices"], job["model"])
    x = torch.from_numpy(weights.pop("features"))
    y = torch.from_numpy(data["y"].astype(np.int64))
    train_mask = torch.from_numpy(data["train_mask"].astype(bool))
    optimizer = torch.optim.Adam(net.parameters(), lr=job["lr"],
                                 weight_decay=job["weight_decay"])
    losses, times = [], []
    for _ in range(job["warmup"] + job["epochs"]):
        start = time.perf_counter()
        net.train()
        out = net(g, x)
        loss = F.cross_entropy(out[train_mask], y[train_mask])
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        times.append(time.perf_counter() - start)
        losses.append(loss.item())
    return {"losses": losses[job["warmup"]:], "times": times[job["warmup"]:],
            "rss_loaded_mib": rss_loaded, "peak_rss_mib": process_mib("VmHWM"),
            "versions": {"dgl": dgl.__version__, "torch": torch.__version__}}


if __name__ == "__main__":
    print(json.dumps(run(json.loads(sys.argv[1]))))
