"""The figures of the built-in models (GCN, GraphSAGE incl. max/min, GIN, GAT, GCNII):
exactness across partitions, and accuracy against PyTorch Geometric's same model.

    python experiments/model_figures.py exactness [--graph cora] [--parts 2,3,4]
    python experiments/model_figures.py accuracy [--graphs cora,citeseer,...] [--seeds 5]

``exactness``: per model, cd-0 on P ranks against single-socket training from the same
weights (float32, dropout on: the masks are keyed by global ids), the maximum relative loss
difference over the first ``--check-epochs`` and over all epochs; and the accuracy (test at
the best validation) of single socket, cd-0, 0c and cd-5.
``accuracy``: per graph, model and seed, this project's trainer and PyG's same model
(:mod:`distgnn.bench.pyg`, the same initial weights, PyG's own dropout), test accuracy at the
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

# model -> distgnn-train flags (the published set-ups where there is one: GAT's is
# Velickovic et al.'s Cora model, GCNII's PyG's gcn2_cora example at 8 layers)
MODELS = {
    "gcn": ["--model", "gcn"],
    "sage": ["--model", "sage"],
    "sage-max": ["--model", "sage", "--aggregator", "max"],
    "sage-min": ["--model", "sage", "--aggregator", "min"],
    "gin": ["--model", "gin", "--hidden", "64"],
    "gat": ["--model", "gat", "--hidden", "64", "--heads", "8", "--dropout", "0.6", "--lr",
            "0.005"],
    "gcnii": ["--model", "gcnii", "--layers", "8", "--hidden", "64", "--dropout", "0.6"],
}
EXTREME = ("sage-max", "sage-min")  # no cd-r (exchanged exactly or not at all)


def path_of(name: str, data: Path) -> str:
    path = data / f"{name}.npz"
    if not path.is_file():
        sys.exit(f"model_figures: {path}: no such dataset; give the folder with --data DIR")
    return str(path)


def max_rel_diff(got: list[dict], ref: list[dict], epochs: int) -> float:
    return max(abs(g["loss"] - r["loss"]) / abs(r["loss"]) for g, r in zip(got[:epochs],
                                                                          ref[:epochs]))


def exactness(a) -> list[dict]:
    spec = path_of(a.graph, a.data)
    rows = []
    for model in a.models:
        flags = [*MODELS[model], "--epochs", str(a.epochs), "--seed", "0"]
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


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("figure", choices=("exactness", "accuracy"))
    p.add_argument("--work", type=Path, default=Path("runs/models"),
                   help="partition directories and metrics files go here")
    p.add_argument("--data", type=Path, default=DEFAULT_DATA,
                   help="folder of the shared datasets")
    p.add_argument("--graph", default="cora", help="exactness: the graph")
    p.add_argument("--parts", default="2,3,4",
                   help="exactness: comma-separated partition counts")
    p.add_argument("--models", default=",".join(MODELS),
                   help="comma-separated models, of " + ", ".join(MODELS))
    p.add_argument("--epochs", type=int, default=200, help="training epochs")
    p.add_argument("--check-epochs", type=int, default=50,
                   help="exactness: epochs the loss difference is measured over")
    p.add_argument("--json", type=Path, help="write the rows here")
    a = p.parse_args()
    a.parts = [int(x) for x in a.parts.split(",")]
    a.models = a.models.split(",")
    unknown = sorted(set(a.models) - set(MODELS))
    if unknown:
        sys.exit(f"model_figures: unknown models {unknown}; choose from {', '.join(MODELS)}")
    a.work.mkdir(parents=True, exist_ok=True)
    rows = {"exactness": exactness}[a.figure](a)
    if a.json:
        write_atomic(a.json, json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
