"""The figures of the built-in models (GCN, GraphSAGE incl. max/min, GIN, GAT, GCNII):
exactness across partitions, and accuracy against PyTorch Geometric's same model.

    python experiments/model_figures.py exactness [--graph cora] [--parts 2,3,4]
    python experiments/model_figures.py accuracy [--graphs cora,citeseer,...] [--seeds 5]

``exactness``: per model, cd-0 on P ranks against single-socket training from the same
weights (float32, dropout on: the masks are keyed by global ids), the maximum relative loss
difference over the first ``--check-epochs`` and over all epochs; and the accuracy (test at
the best validation) of single socket, cd-0, 0c and cd-5.
``accuracy``: per graph, model and seed, this project's trainer and PyG's same model
(:mod:`bench.pyg`, the same initial weights, PyG's own dropout), test accuracy at the
best validation accuracy (ROC-AUC on binary tasks), mean +- std over seeds.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

from drpa_figures import DEFAULT_DATA, best_test, partition, train

from distgnn.storage import write_atomic

# model -> TrainConfig fields (the published set-ups where there is one: GAT's is Velickovic
# et al.'s Cora model, GCNII's PyG's gcn2_cora example at 8 layers)
MODELS = {
    "gcn": dict(model="gcn"),
    "sage": dict(model="sage"),
    "sage-max": dict(model="sage", aggregator="max"),
    "sage-min": dict(model="sage", aggregator="min"),
    "gin": dict(model="gin", hidden=64),
    "gat": dict(model="gat", hidden=64, heads=8, dropout=0.6, lr=0.005),
    "gcnii": dict(model="gcnii", layers=8, hidden=64, dropout=0.6),
}
# graph -> split count (graphs with several fixed splits use split = seed mod count)
ACCURACY_GRAPHS = {"cora": 1, "citeseer": 1, "tolokers": 10, "cora_ml": 1, "minesweeper": 10}
PUBLISHED = {("gat", "cora"): "83.0 (Velickovic et al.)",
             ("gat", "citeseer"): "72.5 (Velickovic et al.)",
             ("gat", "tolokers"): "83.70 ROC-AUC (Platonov et al.; their GAT set-up)"}
EXTREME = ("sage-max", "sage-min")  # no cd-r (exchanged exactly or not at all)


def path_of(name: str, data: Path) -> str:
    path = data / f"{name}.npz"
    if not path.is_file():
        sys.exit(f"model_figures: {path}: no such dataset; give the folder with --data DIR")
    return str(path)


def max_rel_diff(got: list[dict], ref: list[dict], epochs: int) -> float:
    return max(abs(g["loss"] - r["loss"]) / abs(r["loss"]) for g, r in zip(got[:epochs],
                                                                          ref[:epochs]))


def cli_flags(fields: dict) -> list[str]:
    """``distgnn-train`` flags of ``TrainConfig`` fields."""
    return [x for k, v in fields.items() for x in ("--" + k.replace("_", "-"), str(v))]


def exactness(a) -> list[dict]:
    spec = path_of(a.graph, a.data)
    rows = []
    for model in a.models:
        flags = [*cli_flags(MODELS[model]), "--epochs", str(a.epochs), "--seed", "0"]
        ref = train(["--dataset", spec, *flags], a.work / "single.json", threads=1)
        for parts in a.parts:
            directory = partition(spec, parts, a.work, a.graph)
            row = {"model": model, "graph": a.graph, "parts": parts,
                   "single_acc": best_test(ref)}
            for algo in ("cd-0", "0c", "cd-5"):
                if algo == "cd-5" and model in EXTREME:
                    continue
                algo_flags = ["--algo", "cd-r", "--delay", "5"] if algo == "cd-5" else [
                    "--algo", algo]
                got = train(["--partitions", str(directory), *algo_flags, *flags],
                            a.work / "dist.json", ranks=parts)
                row[f"{algo}_acc"] = best_test(got)
                if algo == "cd-0":
                    row["max_rel_loss_diff"] = max_rel_diff(got, ref, a.check_epochs)
                    row["max_rel_loss_diff_all"] = max_rel_diff(got, ref, a.epochs)
            rows.append(row)
            print(format_exactness(row), flush=True)
    return rows


def format_exactness(r: dict) -> str:
    accs = "  ".join(f"{k[:-4]} {100 * r[k]:.1f}" for k in ("single_acc", "cd-0_acc", "0c_acc",
                                                            "cd-5_acc") if k in r)
    return (f"{r['model']:9} P={r['parts']}  cd-0 max rel loss diff {r['max_rel_loss_diff']:.1e}"
            f" (all epochs {r['max_rel_loss_diff_all']:.1e})  accuracy: {accs}")


def pyg_best_test(data, cfg) -> float:
    """PyG's same model trained as ``cfg`` says: test accuracy (ROC-AUC on a binary task) at
    the best validation one, ties to the lower validation loss (as :func:`best_test`)."""
    import torch
    import torch.nn.functional as F

    from bench.epoch import pyg_run
    from distgnn.run.evaluation import roc_auc

    y = torch.from_numpy(data.y)
    masks = {m: torch.from_numpy(getattr(data, f"{m}_mask")) for m in ("val", "test")}
    evaluations = []

    @torch.no_grad()
    def evaluate(net, x, adj):
        net.eval()
        out = net(x, adj)
        score = {}
        for m, mask in masks.items():
            if data.num_classes == 2:
                score[m] = roc_auc((out[mask, 1] - out[mask, 0]).numpy(), y[mask].numpy() == 1)
            else:
                score[m] = float((out[mask].argmax(1) == y[mask]).float().mean())
        score["val_loss"] = float(F.cross_entropy(out[masks["val"]], y[masks["val"]]))
        evaluations.append(score)

    pyg_run(data, cfg, torch.device("cpu"), on_epoch=evaluate)
    return max(evaluations, key=lambda r: (r["val"], -r["val_loss"]))["test"]


def same_model_check(data, model: str, threads: int, epochs: int = 3) -> float:
    """Max relative loss difference of this project's and PyG's model over ``epochs`` epochs
    from the same weights with dropout 0 (``distgnn-bench epoch``'s check)."""
    import torch

    from bench.epoch import pyg_run
    from distgnn import TrainConfig, train

    cfg = TrainConfig(**dict(MODELS[model], dropout=0.0), epochs=epochs, threads=threads,
                      progress=False)
    ours = [r["loss"] for r in train(data, cfg, log=lambda s: None).history]
    theirs, _ = pyg_run(data, cfg, torch.device("cpu"))
    return max(abs(a - b) / abs(b) for a, b in zip(ours, theirs))


def accuracy(a) -> list[dict]:
    """This project's trainer and PyG's same model, per graph, model and seed."""
    from distgnn import TrainConfig, load, train

    rows = []
    for graph in a.graphs:
        for model in a.models:
            row = {"graph": graph, "model": model, "seeds": a.seeds, "ours": [], "pyg": [],
                   "same_model_check": same_model_check(load(path_of(graph, a.data)), model,
                                                        a.threads)}
            for seed in range(a.first_seed, a.first_seed + a.seeds):
                split = seed % ACCURACY_GRAPHS[graph]
                data = load(path_of(graph, a.data), split=split)
                cfg = TrainConfig(**MODELS[model], epochs=a.epochs, seed=seed, split=split,
                                  threads=a.threads, progress=False,
                                  roc_auc=data.num_classes == 2)
                row["ours"].append(best_test(train(data, cfg, log=lambda s: None).history))
                row["pyg"].append(pyg_best_test(data, cfg))
                print(f"  {graph} {model} seed {seed} (split {split}): ours "
                      f"{100 * row['ours'][-1]:.2f}, PyG {100 * row['pyg'][-1]:.2f}", flush=True)
            row["published"] = PUBLISHED.get((model, graph), "")
            rows.append(row)
            print(format_accuracy(row), flush=True)
    return rows


def mean_std(values: list[float]) -> str:
    spread = statistics.stdev(values) if len(values) > 1 else 0.0
    return f"{100 * statistics.mean(values):.2f} +- {100 * spread:.2f}"


def format_accuracy(r: dict) -> str:
    return (f"| {r['graph']} | {r['model']} | {mean_std(r['ours'])} | {mean_std(r['pyg'])} | "
            f"{r['same_model_check']:.1e} | {r['published']} |")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("figure", choices=("exactness", "accuracy"))
    p.add_argument("--work", type=Path, default=Path("runs/models"),
                   help="partition directories and metrics files go here")
    p.add_argument("--data", type=Path, default=DEFAULT_DATA,
                   help="folder of the shared datasets")
    p.add_argument("--graph", default="cora", help="exactness: the graph")
    p.add_argument("--graphs", default=",".join(ACCURACY_GRAPHS),
                   help="accuracy: comma-separated graphs, of " + ", ".join(ACCURACY_GRAPHS))
    p.add_argument("--seeds", type=int, default=5, help="accuracy: seeds per cell")
    p.add_argument("--first-seed", type=int, default=0, help="accuracy: the first seed")
    p.add_argument("--threads", type=int, default=1, help="accuracy: threads per run")
    p.add_argument("--parts", default="2,3,4",
                   help="exactness: comma-separated partition counts")
    p.add_argument("--models", default=None,
                   help="comma-separated models, of " + ", ".join(MODELS) + " (default: all "
                        "for exactness; gat,gin for accuracy)")
    p.add_argument("--epochs", type=int, default=200, help="training epochs")
    p.add_argument("--check-epochs", type=int, default=50,
                   help="exactness: epochs the loss difference is measured over")
    p.add_argument("--json", type=Path, help="write the rows here")
    a = p.parse_args()
    a.parts = [int(x) for x in a.parts.split(",")]
    a.models = (a.models or (",".join(MODELS) if a.figure == "exactness" else "gat,gin")
                ).split(",")
    unknown = sorted(set(a.models) - set(MODELS))
    if unknown:
        sys.exit(f"model_figures: unknown models {unknown}; choose from {', '.join(MODELS)}")
    a.work.mkdir(parents=True, exist_ok=True)
    a.graphs = a.graphs.split(",")
    rows = {"exactness": exactness, "accuracy": accuracy}[a.figure](a)
    if a.json:
        write_atomic(a.json, json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
