"""The figures of distributed training (DRPA): exactness, accuracy and speed.

    python experiments/drpa_figures.py exactness [--epochs 50]
    python experiments/drpa_figures.py accuracy [--seeds 5]
    python experiments/drpa_figures.py speed [--scale 20]
    python experiments/drpa_figures.py drift [--graphs sbm,citeseer] [--parts 4] [--epochs 300]
    python experiments/drpa_figures.py staleness [--graphs sbm,citeseer] [--parts 4]
                                                 [--seeds 3] [--configs ...] [--smoothing G]
    python experiments/drpa_figures.py table --inputs A.json B.json  (staleness runs pooled)

Each partitions its graphs with ``distgnn-partition`` (libra, seed 0) into ``--work``,
runs ``distgnn-train`` under ``mpirun`` (composed by :mod:`launch`) and on one socket,
reads the per-epoch metrics files, and prints a table (and ``--json``).
"""
from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path

import numpy as np

from bench.scaling import exchange_bytes
from bench.validate import train_records
from distgnn import TrainConfig
from distgnn.exchange import EXACT_EVERY, SplitIndex
from distgnn.nn.widths import exchange_widths
from distgnn.run.epoch_log import longest_rise
from distgnn.storage import write_atomic
from partition import load as load_partition
from partition import read_meta

BIN = Path(sys.executable).parent
# the datasets directory beside this repository (docs/data-formats.md); --data names another
DEFAULT_DATA = Path(__file__).resolve().parents[1].parent / "shared" / "datasets"
DATA = DEFAULT_DATA


def dataset(name: str) -> str:
    """The path of the shared dataset ``name``; a missing one ends the run with one line."""
    path = DATA / f"{name}.npz"
    if not path.is_file():
        sys.exit(f"drpa_figures: {path}: no such dataset; give the folder of the shared "
                 "datasets with --data DIR")
    return str(path)


def partition(spec: str, parts: int, work: Path, tag: str) -> Path:
    out = work / f"{tag}-p{parts}"
    if not (out / "meta.json").exists():
        subprocess.run([str(BIN / "distgnn-partition"), spec, "--parts", str(parts), "--out",
                        str(out), "--force", "--no-progress"], check=True,
                       stdout=subprocess.DEVNULL)
    return out


def train(args: list[str], metrics: Path, ranks: int = 1, threads: int = 1) -> list[dict]:
    """Metrics records of distgnn-train (under mpirun when ``ranks`` > 1); exits on failure."""
    try:
        return train_records(args, metrics, ranks, threads)
    except RuntimeError as e:
        sys.exit(str(e))


def best_test(records: list[dict]) -> float:
    """Test accuracy at the best validation accuracy, or test ROC-AUC at the best validation
    ROC-AUC when the run reports it (``--roc-auc``)."""
    evaluated = [r for r in records if r["val_acc"] is not None]
    if "val_roc_auc" in evaluated[0]:
        return max(evaluated, key=lambda r: (r["val_roc_auc"], -r["val_loss"]))["test_roc_auc"]
    return max(evaluated, key=lambda r: (r["val_acc"], -r["val_loss"]))["test_acc"]


def exactness(a) -> list[dict]:
    rows = []
    for name in ("cora", "tolokers"):
        spec = dataset(name)
        common = ["--dropout", "0", "--epochs", str(a.epochs), "--seed", "0"]
        ref = train(["--dataset", spec, *common], a.work / "single.json", threads=2)
        n_test = _test_count(partition(spec, 2, a.work, name))
        for parts in (2, 3, 4):
            directory = partition(spec, parts, a.work, name)
            for backward in (True, False):
                if not backward and parts != 2 and not a.all_off:
                    continue
                flags = [] if backward else ["--no-backward-exchange"]
                got = train(["--partitions", str(directory), "--algo", "cd-0", *common, *flags],
                            a.work / "dist.json", ranks=parts)
                diff = max(abs(g["loss"] - r["loss"]) / abs(r["loss"]) for g, r in zip(got, ref))
                vertices = round(abs(got[-1]["test_acc"] - ref[-1]["test_acc"]) * n_test)
                rows.append({"dataset": name, "parts": parts, "backward_exchange": backward,
                             "max_rel_loss_diff": diff, "final_test_acc": got[-1]["test_acc"],
                             "single_socket_test_acc": ref[-1]["test_acc"],
                             "test_vertices_differing": vertices})
                print(f"{name:9} P={parts} backward exchange {'on ' if backward else 'off'}  "
                      f"max rel loss diff {diff:.2e}  final test acc {got[-1]['test_acc']:.4f} "
                      f"vs {ref[-1]['test_acc']:.4f} ({vertices} vertices)", flush=True)
    return rows


def drift(a) -> list[dict]:
    """cd-0 against single socket (dropout 0.5, seed 0) in float32 and in float64: the
    largest relative loss difference in the first 100 epochs and after them."""
    rows = []
    for name in a.graphs.split(","):
        spec, extra = STALENESS_GRAPHS.get(name, (None, []))
        spec = spec or dataset(name)
        for parts in map(int, a.parts.split(",")):
            directory = partition(spec, parts, a.work, name)
            for dtype in ("float32", "float64"):
                common = [*extra, "--epochs", str(a.epochs), "--dtype", dtype]
                ref = train(["--dataset", spec, *common], a.work / "single.json", threads=2)
                got = train(["--partitions", str(directory), *common], a.work / "dist.json",
                            ranks=parts)
                rel = [abs(g["loss"] - r["loss"]) / abs(r["loss"]) for g, r in zip(got, ref)]
                row = {"graph": name, "parts": parts, "dtype": dtype,
                       "max_rel_first_100": max(rel[:100]),
                       "max_rel_after_100": max(rel[100:], default=0.0),
                       "first_epoch_above_1e-6": next(
                           (i for i, v in enumerate(rel) if v > 1e-6), None)}
                rows.append(row)
                print(f"{name:9} P={parts} {dtype}: max relative loss difference "
                      f"{row['max_rel_first_100']:.2e} in epochs 0-99, "
                      f"{row['max_rel_after_100']:.2e} after; first above 1e-6 at epoch "
                      f"{row['first_epoch_above_1e-6']}", flush=True)
    return rows


def _test_count(directory: Path) -> int:
    meta = read_meta(directory)
    return sum(int(np.count_nonzero(load_partition(directory, p).test_mask))
               for p in range(meta["num_parts"]))


def accuracy(a) -> list[dict]:
    rows = []
    # the SBM's features are a one-hot block plus Gaussian noise: L1 row scaling would
    # shrink the signal with the noise, so they are used as they are
    specs = {"cora": (dataset("cora"), []), "citeseer": (dataset("citeseer"), []),
             "sbm": (a.sbm, ["--feature-norm", "none"])}
    algos = {"0c": ["--algo", "0c"], "cd-0": ["--algo", "cd-0"],
             "cd-5": ["--algo", "cd-r", "--delay", "5"]}
    for name, (spec, extra) in specs.items():
        seeds = range(a.seeds)
        single = [best_test(train(["--dataset", spec, *extra, "--seed", str(s)],
                                  a.work / "s.json", threads=2)) for s in seeds]
        row = {"dataset": name, "single_socket": statistics.mean(single)}
        print(f"{name:9} single socket {100 * row['single_socket']:.2f} %", flush=True)
        for parts in (2, 4):
            directory = partition(spec, parts, a.work, name)
            for algo, flags in algos.items():
                accs = [best_test(train(["--partitions", str(directory), *flags, *extra,
                                         "--seed", str(s)], a.work / "d.json", ranks=parts))
                        for s in seeds]
                row[f"{algo} P={parts}"] = statistics.mean(accs)
                print(f"{name:9} {algo:5} P={parts}  {100 * statistics.mean(accs):.2f} % "
                      f"(sd {100 * statistics.pstdev(accs):.2f})", flush=True)
        rows.append(row)
    return rows


# the staleness figure's columns: (distgnn-train flags, whether it runs on partitions)
STALENESS_CONFIGS = {
    "single": ([], False), "cd-0": (["--algo", "cd-0"], True), "0c": (["--algo", "0c"], True),
    "cd-5": (["--algo", "cd-r", "--delay", "5"], True),
    "cd-1": (["--algo", "cd-r", "--delay", "1"], True),
    # cd-r's default schedule (int4 wire), and its other wires
    "default": (["--algo", "cd-r"], True),
    **{f"default {w}": (["--algo", "cd-r", "--exchange-precision", w], True)
       for w in ("fp32", "int8", "int2")},
    **{f"cd-0 {w}": (["--algo", "cd-0", "--exchange-precision", w], True)
       for w in ("int8", "int4", "int2")},
    **{f"cd-1 {w}": (["--algo", "cd-r", "--delay", "1", "--exchange-precision", w], True)
       for w in ("int8", "int4")},
    "cd-5 int8 smooth": (["--algo", "cd-r", "--delay", "5", "--smoothing", "{g}",
                          "--exchange-precision", "int8"], True),
    "cd-5 smooth": (["--algo", "cd-r", "--delay", "5", "--smoothing", "{g}"], True),
    "adaptive": (["--algo", "cd-r", "--comm-budget", "{budget}"], True),
    "cd-0 bf16": (["--algo", "cd-0", "--exchange-precision", "bf16"], True),
    "cd-5 bf16 smooth": (["--algo", "cd-r", "--delay", "5", "--smoothing", "{g}",
                          "--exchange-precision", "bf16"], True),
    "cd-2 bf16 smooth": (["--algo", "cd-r", "--delay", "2", "--smoothing", "{g}",
                          "--exchange-precision", "bf16"], True),
    # "pre": the first layer's aggregation of the (then undropped) input made once, so cd-r
    # leaves only later layers stale; "cd-0 pre" is that model's exact reference
    "cd-0 pre": (["--algo", "cd-0", "--precompute-first-aggregation"], True),
    "cd-5 smooth pre": (["--algo", "cd-r", "--delay", "5", "--smoothing", "{g}",
                         "--precompute-first-aggregation"], True)}
# graphs of the staleness figure: spec (shared dataset name or generator) and extra flags
SOCIAL = "sbm:nodes=18660,blocks=2,avg_degree=92,features=4735,feature_density=0.01,p_in=0.6"
STALENESS_GRAPHS = {"sbm": ("sbm:nodes=60000,noise=3", ["--feature-norm", "none"]),
                    # shaped as a dense social graph: 18,660 vertices of mean degree 85,
                    # 4,735 sparse binary features, 2 classes, noisy labels; the number is
                    # the accuracy ceiling the label noise sets (social85: the weakest
                    # features, which single-socket GCN still learns in 200 epochs)
                    "social65": (f"{SOCIAL},noise=1,label_noise=0.7", []),
                    "social70": (f"{SOCIAL},noise=1,label_noise=0.6", []),
                    "social75": (f"{SOCIAL},noise=2,label_noise=0.5", []),
                    "social85": (f"{SOCIAL},noise=3,label_noise=0.3", []),
                    # binary: published figures are ROC-AUC
                    "tolokers": (None, ["--roc-auc"]), "minesweeper": (None, ["--roc-auc"])}


def staleness(a) -> list[dict]:
    """Accuracy, longest loss rise and bytes per epoch of each configuration of
    ``STALENESS_CONFIGS`` over seeds, per graph and partition count."""
    rows, single = [], {}  # single socket: once per graph and seed, whatever P
    for name in a.graphs.split(","):
        spec, extra = STALENESS_GRAPHS.get(name, (None, []))
        spec = spec or dataset(name)
        for parts in map(int, a.parts.split(",")):
            directory = partition(spec, parts, a.work, name)
            for label in a.configs.split(","):
                flags, distributed = STALENESS_CONFIGS[label]
                flags = [f.format(g=a.smoothing, budget=a.budget) for f in flags]
                target = (["--partitions", str(directory)] if distributed
                          else ["--dataset", spec])
                runs = []
                for seed in range(a.first_seed, a.first_seed + a.seeds):
                    if not distributed and (name, seed) in single:
                        runs.append(single[(name, seed)])
                        continue
                    records = train([*target, *flags, *extra, "--seed", str(seed),
                                     "--epochs", str(a.epochs)], a.work / "st.json",
                                    ranks=parts if distributed else 1,
                                    threads=1 if distributed else 2)
                    runs.append({"seed": seed, "test_acc": best_test(records),
                                 "longest_rise": longest_rise([r["loss"] for r in records]),
                                 "bytes_per_epoch": statistics.mean(
                                     r["bytes_sent_mean"] for r in records),
                                 **staleness_signals(records)})
                    if not distributed:
                        single[(name, seed)] = runs[-1]
                predicted = (predicted_config_bytes(directory, flags, a.epochs)
                             if distributed else 0.0)
                row = config_row(name, parts, label, runs, predicted,
                                 a.smoothing if "smooth" in label else 0.0,
                                 a.budget if label == "adaptive" else None)
                rows.append(row)
                accs = [r["test_acc"] for r in runs]
                signals = [r for r in runs if "drift_max" in r]
                if signals:
                    print("  drift of the remote terms (first layer / largest), forward; "
                          "backward: " + "; ".join(
                              f"seed {r['seed']} {r['drift_first']:.3f}/{r['drift_max']:.3f}; "
                              f"{r['drift_grad_first']:.3f}/{r['drift_grad_max']:.3f}"
                              for r in signals), flush=True)
                print(f"{name:9} P={parts} {label:17} {100 * row['test_acc_mean']:6.2f} "
                      f"+- {100 * row['test_acc_sd']:.2f} %  longest loss rise "
                      f"{row['longest_rise_max']:3d}  {row['bytes_per_epoch']:>13,.0f} B/epoch "
                      f"(predicted {predicted:,.0f})"
                      f"  seeds " + " ".join(f"{100 * v:.2f}" for v in accs), flush=True)
    return rows


def staleness_signals(records: list[dict]) -> dict:
    """The drift of the remote terms that a run under the default schedule measured on its
    exact epochs (``stale_drift``, forward; ``stale_drift_grad``, backward): the median over
    the run of the first layer's and of the largest layer's, and ``exact_from``, the first
    epoch that the drift limit made exact (when it did); ``{}`` for other schedules."""
    out = {}
    warned = [r["exchange_warning"]["epoch"] for r in records if "exchange_warning" in r]
    if warned:
        out["exact_from"] = warned[0] + 1
    for field, name in (("stale_drift", "drift"), ("stale_drift_grad", "drift_grad")):
        drifts = [r[field] for r in records if r.get(field)]
        if drifts:  # layer 0 exchanges nothing in training when its aggregation is once
            out[f"{name}_first"] = statistics.median([d.get("0", 0.0) for d in drifts])
            out[f"{name}_max"] = statistics.median(max(d.values()) for d in drifts)
    return out


def config_row(graph: str, parts: int, label: str, runs: list[dict], predicted: float,
               smoothing: float, budget: float | None) -> dict:
    """One configuration's row of the staleness figure from its ``runs`` (one per seed)."""
    accs = [r["test_acc"] for r in runs]
    return {"graph": graph, "parts": parts, "config": label, "smoothing": smoothing,
            "budget": budget, "test_acc_mean": statistics.mean(accs),
            "test_acc_sd": statistics.stdev(accs) if len(accs) > 1 else 0.0,
            "longest_rise_max": max(r["longest_rise"] for r in runs),
            "bytes_per_epoch": statistics.mean(r["bytes_per_epoch"] for r in runs),
            "bytes_per_epoch_predicted": predicted, "runs": runs}


def merged(a) -> list[dict]:
    """The staleness rows of the ``--inputs`` JSON files, the seeds of one graph, P and
    configuration pooled (a seed measured twice counts once)."""
    pooled: dict[tuple, dict] = {}
    for path in a.inputs:
        for row in json.loads(Path(path).read_text()):
            key = (row["graph"], row["parts"], row["config"])
            first = pooled.setdefault(key, {**row, "runs": {}})
            first["runs"].update({r["seed"]: r for r in row["runs"]})
    return [config_row(*key, sorted(row["runs"].values(), key=lambda r: r["seed"]),
                       row["bytes_per_epoch_predicted"], row["smoothing"], row["budget"])
            for key, row in pooled.items()]


def predicted_config_bytes(directory: Path, flags: list[str], epochs: int) -> float:
    """Predicted bytes per rank per epoch (mean over ranks and ``epochs``) of the default
    model (GCN, 2 layers, hidden 16) under the exchange ``flags`` select
    (:func:`exchange_bytes`); a precomputed first aggregation adds its one exact exchange."""
    def flag(name, default=None):
        return flags[flags.index(name) + 1] if name in flags else default

    meta = read_meta(directory)
    once = "--precompute-first-aggregation" in flags
    widths = exchange_widths(meta["num_features"], 16, meta["num_classes"], 2, once)
    budget = flag("--comm-budget")
    cfg = TrainConfig(algo=flag("--algo"), delay=None if flag("--delay") is None
                      else int(flag("--delay")), smoothing=float(flag("--smoothing", 0.0)),
                      comm_budget=None if budget is None else float(budget),
                      exchange_precision=flag("--exchange-precision"))
    total = 0.0
    for p in range(meta["num_parts"]):
        index = SplitIndex.from_partition(load_partition(directory, p))
        # the default schedule sends on its exact epochs only: at least one in EXACT_EVERY
        # (counted as exactly that, so its measured bytes are at least this)
        total += exchange_bytes(index.leaf_counts, index.root_counts, widths, cfg.algo,
                                cfg.delay_epochs, cfg.wire, cfg.comm_budget) / (
                                    EXACT_EVERY if cfg.default_schedule else 1)
        if once and flag("--algo") != "0c":
            total += exchange_bytes(index.leaf_counts, index.root_counts,
                                    [meta["num_features"]], "cd-0") / epochs
    return total / meta["num_parts"]


def staleness_table(rows: list[dict]) -> str:
    """Markdown: a row per graph and P, a column per configuration (mean +- sd over seeds,
    the gap to cd-0's mean, longest loss rise, bytes per epoch as a fraction of cd-0's, the
    epochs from which the default schedule's drift limit made every epoch exact)."""
    configs = list(dict.fromkeys(r["config"] for r in rows))
    lines = ["| graph | P | " + " | ".join(configs) + " |",
             "|---|---|" + "---|" * len(configs)]
    for graph, parts in dict.fromkeys((r["graph"], r["parts"]) for r in rows):
        cells = {r["config"]: r for r in rows if (r["graph"], r["parts"]) == (graph, parts)}
        cd0 = cells.get("cd-0", {}).get("bytes_per_epoch")
        cd0_acc = cells.get("cd-0", {}).get("test_acc_mean")

        def cell(r):
            share = (f", {r['bytes_per_epoch'] / cd0:.3f}x B" if cd0 and r["config"] != "single"
                     else "")
            gap = (f"{100 * (r['test_acc_mean'] - cd0_acc):+.2f}, "
                   if cd0_acc is not None and r["config"] != "cd-0" else "")
            exact = [str(run["exact_from"]) for run in r["runs"] if "exact_from" in run]
            late = f", all exact from {'/'.join(exact)}" if exact else ""
            return (f"{100 * r['test_acc_mean']:.2f} +- {100 * r['test_acc_sd']:.2f} "
                    f"({gap}rise {r['longest_rise_max']}{share}{late}, {len(r['runs'])} "
                    f"seed{'s' if len(r['runs']) > 1 else ''})")

        lines.append(f"| {graph} | {parts} | " + " | ".join(
            cell(cells[c]) if c in cells else "" for c in configs) + " |")
    return "\n".join(lines)


def predicted_bytes(directory: Path, widths: list[int]) -> list[int]:
    """cd-0 bytes each rank sends per epoch: ``4 * 2 * sum_l d_l * (leaves + leaf entries)``
    (forward and backward; see :mod:`partition.stats`)."""
    meta = read_meta(directory)
    out = []
    for p in range(meta["num_parts"]):
        part = load_partition(directory, p)
        leaves = int(np.count_nonzero(np.asarray(part.root_rank) != p))
        out.append(4 * 2 * sum(widths) * (leaves + len(part.leaf_root_local)))
    return out


def speed(a) -> list[dict]:
    spec = f"rmat:scale={a.scale},edge_factor=16,features=128"
    directory = partition(spec, 2, a.work, f"rmat{a.scale}")
    meta = read_meta(directory)
    # GCN 128 -> 16 -> C aggregates after projecting: at 16, then at min(16, C)
    widths = [a.hidden, min(a.hidden, meta["num_classes"])]
    common = ["--epochs", str(a.epochs), "--eval-every", str(a.epochs), "--hidden",
              str(a.hidden)]
    runs = {"single socket (1 rank x 2 threads)": (["--dataset", spec], 1, 2)}
    for algo, flags in {"0c": ["--algo", "0c"], "cd-0": ["--algo", "cd-0"],
                        "cd-5": ["--algo", "cd-r", "--delay", "5"]}.items():
        runs[f"{algo} (2 ranks x 1 thread)"] = (["--partitions", str(directory), *flags], 2, 1)
    predicted = predicted_bytes(directory, widths)
    rows = []
    for label, (flags, ranks, threads) in runs.items():
        records = train([*flags, *common], a.work / "speed.json", ranks, threads)[1:]
        med = lambda key: statistics.median(r[key] for r in records)  # noqa: E731
        phases = {k: statistics.median(r["phases"][k] for r in records)
                  for k in records[0]["phases"]}
        phases_mean = {k: statistics.median(r["phases_mean"][k] for r in records)
                       for k in records[0]["phases_mean"]}
        row = {"run": label, "epoch_s": med("epoch_s"), "phases_max": phases,
               "phases_mean": phases_mean, "bytes_sent_max": med("bytes_sent_max"),
               "bytes_sent_mean": med("bytes_sent_mean")}
        if ranks > 1 and "cd-" in label:
            delay = 5 if "cd-5" in label else 1
            row["predicted_bytes_max"] = max(predicted) / delay
            row["predicted_bytes_mean"] = float(np.mean(predicted)) / delay
        rows.append(row)
        print(f"{label:36} epoch {row['epoch_s'] * 1e3:8.1f} ms  " + "  ".join(
            f"{k} {v * 1e3:.1f}" for k, v in phases.items() if v > 5e-5), flush=True)
        if "predicted_bytes_max" in row:
            print(f"{'':36} bytes sent per rank per epoch: max {row['bytes_sent_max']:,.0f}, "
                  f"mean {row['bytes_sent_mean']:,.0f}; predicted max "
                  f"{row['predicted_bytes_max']:,.0f}, mean {row['predicted_bytes_mean']:,.0f}",
                  flush=True)
    return rows


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("figure", choices=("exactness", "accuracy", "speed", "drift", "staleness",
                                      "table"))
    p.add_argument("--work", type=Path, default=Path("runs/drpa"),
                   help="partition directories and metrics files go here")
    p.add_argument("--epochs", type=int, default=None,
                   help="exactness: 50 (default); speed: 6 (default); drift: 300 (default); "
                        "accuracy, staleness: 200 (default)")
    p.add_argument("--all-off", action="store_true",
                   help="exactness: run the backward-exchange-off check on every P, not P=2")
    p.add_argument("--seeds", type=int, default=5,
                   help="accuracy, staleness: seeds per configuration")
    p.add_argument("--first-seed", type=int, default=1,
                   help="staleness: the first seed (seed 0 is the one options were tuned on)")
    p.add_argument("--graphs", default="sbm,citeseer",
                   help="drift, staleness: comma-separated graphs: sbm or shared dataset names")
    p.add_argument("--parts", default="4",
                   help="drift, staleness: comma-separated partition counts")
    p.add_argument("--configs", default=",".join(STALENESS_CONFIGS),
                   help="staleness: comma-separated columns, of " + ", ".join(STALENESS_CONFIGS))
    p.add_argument("--smoothing", type=float, default=0.5,
                   help="staleness: gamma of the smoothed configurations")
    p.add_argument("--budget", type=float, default=0.2,
                   help="staleness: --comm-budget of the adaptive configuration")
    p.add_argument("--sbm", default="sbm:nodes=60000,noise=3",  # 1.1M edges
                   help="accuracy: the SBM graph (>= 10^6 edges)")
    p.add_argument("--scale", type=int, default=20, help="speed: R-MAT scale")
    p.add_argument("--hidden", type=int, default=16, help="speed: hidden width")
    p.add_argument("--data", type=Path, default=DEFAULT_DATA,
                   help="folder of the shared datasets (cora.npz, citeseer.npz, tolokers.npz)")
    p.add_argument("--json", type=Path, help="write the rows here")
    p.add_argument("--inputs", nargs="+", type=Path, default=[],
                   help="table: staleness --json files whose seeds to pool into one table")
    a = p.parse_args()
    global DATA
    DATA = a.data
    a.epochs = a.epochs or {"exactness": 50, "speed": 6, "drift": 300}.get(a.figure, 200)
    a.work.mkdir(parents=True, exist_ok=True)
    rows = {"exactness": exactness, "accuracy": accuracy, "speed": speed, "drift": drift,
            "staleness": staleness, "table": merged}[a.figure](a)
    if a.json:
        write_atomic(a.json, json.dumps(rows, indent=1))
    if a.figure in ("staleness", "table"):
        print(staleness_table(rows))


if __name__ == "__main__":
    main()
