"""Time to accuracy: full-batch GraphSAGE in distgnn against mini-batch GraphSAGE with PyG's
``NeighborLoader``, test metric against training seconds.

    python experiments/time_to_accuracy.py --dataset tolokers \\
        --dataset "sbm:nodes=1048576,noise=3" --minibatch-python /work/mbenv/bin/python \\
        --out runs/tta.json --chart docs/results/time-to-accuracy.png

The mini-batch side runs this file again under ``--minibatch-python``, an environment of its
own holding ``torch``, ``torch_geometric`` and ``torch_sparse`` (whose neighbour sampler
``NeighborLoader`` needs where ``pyg-lib`` is absent), not this project::

    python -m venv /work/mbenv
    /work/mbenv/bin/pip install torch==2.13.0 torch_geometric==2.8.1 numpy scipy setuptools wheel
    /work/mbenv/bin/pip wheel -w /tmp/wheels --no-deps --no-build-isolation torch-scatter==2.1.2
    /work/mbenv/bin/pip wheel -w /tmp/wheels --no-deps --no-build-isolation torch-sparse==0.6.18
    /work/mbenv/bin/pip install /tmp/wheels/torch_scatter-*.whl /tmp/wheels/torch_sparse-*.whl

Both sides train the same model on the same features, labels and split: GraphSAGE with the
mean aggregator (PyG's ``SAGEConv``, ``h'_v = W_r h_v + W_n mean_{u in N(v)} h_u + b``),
``--layers`` layers of width ``--hidden``, ReLU between, dropout 0.5 before each layer, Adam
(``--lr``, ``--minibatch-lr``, weight decay 5e-4), cross-entropy on the training vertices,
features as stored (``--feature-norm none``).  Full batch: ``distgnn.train``, one process, ``--threads``
threads, one step per epoch over the whole graph, evaluated every epoch.  Mini batch:
``NeighborLoader(num_neighbors=--fanout, batch_size=--batch-size, shuffle=True)`` over the
training vertices, one step per batch, one process with ``--threads`` threads and the
sampler in it (``num_workers=0``: the machine's cores are the model's), evaluated
``--evals-per-epoch`` times an epoch by one full-graph forward pass in eval mode (exact, no
sampling).  Seconds are training seconds: from the first step, evaluations and each side's
set-up (loading, partition, the loader's CSC) excluded and reported apart.  The test metric
is accuracy, or ROC-AUC for a two-class dataset (tolokers).

For each dataset: the *target* is 1 point under the better of the two sides' final test
metrics (each side's final = the test metric at its evaluation of best validation metric),
and each side's *time to target* the training seconds of its first evaluation at or above
it.  Prints a Markdown table, writes every curve as JSON to ``--out`` and, with ``--chart``,
a PNG of test metric against seconds.
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

WEIGHT_DECAY = 5e-4  # distgnn's default; the mini-batch side uses the same
DROPOUT = 0.5


def full_batch(data, a) -> dict:
    """distgnn's run: ``{"points": [(seconds, val, test)], "setup_s", "epoch_s"}``."""
    from distgnn import TrainConfig, train
    binary = data.num_classes == 2
    cfg = TrainConfig(model="sage", aggregator="mean", hidden=a.hidden, layers=a.layers,
                      dropout=DROPOUT, lr=a.lr, weight_decay=WEIGHT_DECAY, epochs=a.epochs,
                      threads=a.threads, seed=a.seed, feature_norm="none", roc_auc=binary,
                      progress=False)
    started = time.perf_counter()
    result = train(data, cfg, log=lambda line: print(f"  full batch: {line}", file=sys.stderr,
                                                      flush=True))
    wall = time.perf_counter() - started
    metric = "roc_auc" if binary else "acc"
    seconds, points = 0.0, []
    for record in result.history:
        seconds += record["epoch_s"]
        points.append((seconds, record[f"val_{metric}"], record[f"test_{metric}"]))
    evaluations = sum(r["eval_s_mean"] for r in result.history)
    return {"points": points, "setup_s": wall - seconds - evaluations,
            "epoch_s": float(np.median([r["epoch_s"] for r in result.history[1:]]))}


def export(data, path: Path) -> None:
    """The dataset as the mini-batch side reads it: CSR (rows = destinations), features,
    labels and the three masks."""
    np.savez(path, indptr=data.graph.indptr, indices=data.graph.indices, x=data.x, y=data.y,
             train_mask=data.train_mask, val_mask=data.val_mask, test_mask=data.test_mask,
             num_classes=data.num_classes)


def mini_batch(path: Path, a) -> dict:
    """PyG's run (in the mini-batch environment): the same keys as :func:`full_batch`, with
    ``epoch_s`` the seconds of a pass over all training vertices."""
    import torch
    import torch.nn.functional as F
    from scipy.stats import rankdata
    from torch_geometric.data import Data
    from torch_geometric.loader import NeighborLoader
    from torch_geometric.nn import SAGEConv
    from torch_sparse import SparseTensor

    torch.set_num_threads(a.threads)
    torch.manual_seed(a.seed)
    z = np.load(path)
    n, num_classes = len(z["indptr"]) - 1, int(z["num_classes"])
    dst = np.repeat(np.arange(n), np.diff(z["indptr"]))
    masks = {k: torch.from_numpy(z[f"{k}_mask"]) for k in ("train", "val", "test")}
    x, y = torch.from_numpy(z["x"]), torch.from_numpy(z["y"]).long()
    started = time.perf_counter()
    data = Data(x=x, y=y, edge_index=torch.from_numpy(np.stack([z["indices"], dst])).long(),
                num_nodes=n)
    loader = NeighborLoader(data, num_neighbors=[int(f) for f in a.fanout.split(",")],
                            batch_size=a.batch_size, input_nodes=masks["train"], shuffle=True)
    adj_t = SparseTensor(rowptr=torch.from_numpy(z["indptr"]).long(),
                         col=torch.from_numpy(z["indices"]).long(), sparse_sizes=(n, n))
    widths = [x.shape[1]] + [a.hidden] * (a.layers - 1) + [num_classes]
    convs = torch.nn.ModuleList(SAGEConv(i, o) for i, o in zip(widths, widths[1:]))

    def forward(h, edges):
        for i, conv in enumerate(convs):
            h = conv(F.dropout(h, DROPOUT, convs.training), edges)
            if i < len(convs) - 1:
                h = F.relu(h)
        return h

    optimizer = torch.optim.Adam(convs.parameters(), lr=a.minibatch_lr,
                                 weight_decay=WEIGHT_DECAY)
    setup = time.perf_counter() - started

    def evaluate():
        convs.eval()
        with torch.no_grad():
            logits = forward(x, adj_t)
        convs.train()
        if num_classes == 2:  # ROC-AUC of z_1 - z_0, as distgnn's evaluation
            score = (logits[:, 1] - logits[:, 0]).numpy()

            def metric(m):
                pos = y[m].numpy() == 1
                ranks = rankdata(score[m.numpy()])
                return float((ranks[pos].sum() - pos.sum() * (pos.sum() + 1) / 2)
                             / (pos.sum() * (~pos).sum()))
        else:
            predicted = logits.argmax(1)

            def metric(m):
                return float((predicted[m] == y[m]).float().mean())
        return metric(masks["val"]), metric(masks["test"])

    batches = len(loader)
    every = max(1, batches // a.evals_per_epoch)
    seconds, points, epoch_times = 0.0, [], []
    for _ in range(a.minibatch_epochs):
        epoch_start = seconds
        clock = time.perf_counter()
        for step, batch in enumerate(loader, 1):
            optimizer.zero_grad()
            out = forward(batch.x, batch.edge_index)[:batch.batch_size]
            F.cross_entropy(out, batch.y[:batch.batch_size]).backward()
            optimizer.step()
            if step % every == 0 or step == batches:
                seconds += time.perf_counter() - clock
                points.append((seconds, *evaluate()))
                print(f"  mini batch: {seconds:8.1f} s  val {points[-1][1]:.4f}  "
                      f"test {points[-1][2]:.4f}", file=sys.stderr, flush=True)
                clock = time.perf_counter()
        epoch_times.append(seconds - epoch_start)
    return {"points": points, "setup_s": setup, "epoch_s": float(np.median(epoch_times)),
            "batches_per_epoch": batches}


def summarise(runs: dict) -> dict:
    """Each side's final test metric, the target and each side's seconds to reach it."""
    finals = {side: max(run["points"], key=lambda p: p[1])[2] for side, run in runs.items()}
    target = max(finals.values()) - 0.01
    reach = {side: next((s for s, _, t in run["points"] if t >= target), None)
             for side, run in runs.items()}
    return {"final": finals, "target": target, "seconds_to_target": reach}


def run_both(spec: str, a) -> dict:
    """Both sides on one dataset: ``{"dataset", "metric", "vertices", "edges", "runs",
    "summary"}``."""
    from distgnn import load
    data = load(spec if ":" in spec else str(a.data / f"{spec}.npz"))
    print(f"{spec}: {data.num_nodes:,} vertices, {len(data.graph.indices):,} edges",
          file=sys.stderr, flush=True)
    full = full_batch(data, a)
    full["label"] = f"distgnn, {a.epochs} epochs, lr {a.lr}"
    forwarded = [f"--{k.replace('_', '-')}={getattr(a, k)}" for k in (
        "hidden", "layers", "minibatch_lr", "minibatch_epochs", "fanout", "batch_size",
        "evals_per_epoch", "threads", "seed")]
    with tempfile.TemporaryDirectory() as tmp:
        export(data, Path(tmp) / "data.npz")
        subprocess.run([str(a.minibatch_python), __file__, *forwarded, "--minibatch-side",
                        str(Path(tmp) / "data.npz"), str(Path(tmp) / "mb.json")], check=True)
        mini = json.loads((Path(tmp) / "mb.json").read_text())
    mini["label"] = (f"PyG NeighborLoader {a.fanout}, batch {a.batch_size}, "
                     f"{a.minibatch_epochs} passes, lr {a.minibatch_lr}")
    runs = {"full batch": full, "mini batch": mini}
    return {"dataset": spec, "metric": "ROC-AUC" if data.num_classes == 2 else "accuracy",
            "vertices": data.num_nodes, "edges": len(data.graph.indices), "runs": runs,
            "summary": summarise(runs)}


def chart(results: list[dict], path: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import NullFormatter, ScalarFormatter
    fig, axes = plt.subplots(1, len(results), figsize=(6 * len(results), 4.2), squeeze=False)
    for ax, r in zip(axes[0], results):
        for side, style in (("full batch", "-"), ("mini batch", "--")):
            s, _, t = zip(*r["runs"][side]["points"])
            ax.plot(s, [100 * v for v in t], style, label=f"{side} ({r['runs'][side]['label']})")
        ax.axhline(100 * r["summary"]["target"], color="grey", lw=0.8, ls=":",
                   label="target: 1 point under the better final")
        ax.set_xscale("log")
        ax.xaxis.set_major_formatter(ScalarFormatter())
        # labels at the decades only: the minor ticks' labels (2x10^2, 3x10^2, ...) overlap
        ax.xaxis.set_minor_formatter(NullFormatter())
        ax.set_xlabel("training seconds (evaluation excluded)")
        ax.set_ylabel(f"test {r['metric']} (%)")
        ax.set_title(r["dataset"])
        ax.legend(fontsize=8, loc="lower right")
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--data", type=Path, default=Path("../shared/datasets"),
                   help="folder of the datasets' .npz files")
    p.add_argument("--dataset", action="append",
                   help="a name (a file in --data) or a generator spec; repeat for several")
    p.add_argument("--minibatch-python", type=Path,
                   help="python of the environment holding torch_geometric and torch_sparse")
    p.add_argument("--hidden", type=int, default=256, help="hidden width")
    p.add_argument("--layers", type=int, default=2, help="GraphSAGE layers")
    p.add_argument("--lr", type=float, default=0.01, help="full-batch Adam learning rate")
    p.add_argument("--minibatch-lr", type=float, help="mini-batch Adam learning rate "
                   "(default: --lr)")
    p.add_argument("--epochs", type=int, default=200, help="full-batch epochs")
    p.add_argument("--minibatch-epochs", type=int, default=5,
                   help="mini-batch passes over the training vertices")
    p.add_argument("--fanout", default="15,10", help="neighbours sampled per layer")
    p.add_argument("--batch-size", type=int, default=1024, help="seed vertices per batch")
    p.add_argument("--evals-per-epoch", type=int, default=8,
                   help="mini-batch evaluations per pass")
    p.add_argument("--threads", type=int, default=2, help="threads of each side")
    p.add_argument("--seed", type=int, default=0, help="seed of both sides")
    p.add_argument("--out", type=Path, help="JSON file of every curve")
    p.add_argument("--chart", type=Path, help="PNG of test metric against seconds")
    p.add_argument("--replot", nargs="+", type=Path, metavar="JSON",
                   help="no runs: the table and chart of earlier --out files")
    p.add_argument("--minibatch-side", nargs=2, type=Path, metavar=("NPZ", "JSON"),
                   help=argparse.SUPPRESS)  # how this file runs itself in the other env
    a = p.parse_args()
    if a.minibatch_side:
        a.minibatch_side[1].write_text(json.dumps(mini_batch(a.minibatch_side[0], a)))
        return
    if a.replot:
        results = [r for path in a.replot for r in json.loads(path.read_text())]
    elif not a.dataset or not a.minibatch_python:
        p.error("--dataset and --minibatch-python are required (or --replot)")
    else:
        a.minibatch_lr = a.minibatch_lr or a.lr
        results = [run_both(spec, a) for spec in a.dataset]
    print("| dataset | side | set-up s | s per epoch | final test | target | s to target |")
    print("|---|---|---|---|---|---|---|")
    for r in results:
        for side, run in r["runs"].items():
            s = r["summary"]
            reach = s["seconds_to_target"][side]
            print(f"| {r['dataset']} | {side} | {run['setup_s']:.1f} | {run['epoch_s']:.2f} | "
                  f"{100 * s['final'][side]:.2f} | {100 * s['target']:.2f} | "
                  f"{'not reached' if reach is None else f'{reach:.1f}'} |")
    if a.out:
        a.out.parent.mkdir(parents=True, exist_ok=True)
        a.out.write_text(json.dumps(results, indent=1))
    if a.chart:
        chart(results, a.chart)


if __name__ == "__main__":
    main()
