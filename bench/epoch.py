"""``distgnn-bench epoch``: full-batch training epochs of this project against PyG and DGL.

For each dataset and model (GraphSAGE-gcn, GraphSAGE-mean, GCN, GIN, GAT, GCNII) at the
same sizes and thread count, against PyG's same model (:mod:`bench.pyg` says which PyG
layers are equivalent to ours) and, for GraphSAGE-gcn and GCN, DGL's (:mod:`bench.dgl_worker`
says which DGL layers):

1. **Same model check.**  From the same initial weights with dropout 0, this project
   (the first of its backends in ``--impls``, on its device) and PyG (on ``--device``), and
   DGL where ``--impls`` has it, train ``CHECK_EPOCHS`` epochs; each peer's losses must
   agree with ours to ``CHECK_RTOL`` relative, else the timing compares different things
   and is flagged.
2. **Timing.**  Each implementation (``numba``, ``torch``, ``triton``: this project's
   trainer with that backend; ``pyg``; ``pyg-dist``: PyG's model through
   :func:`distgnn.pyg.distribute` in this project's trainer, as a PyG user would train it
   on partitions, here on the whole graph; ``dgl``: DGL on the CPU cores) trains in a worker
   process of its own, so that its peak resident memory is its own; ``--rounds`` rounds run
   the workers in turn (interleaved), each a warm-up epoch and then ``--epochs`` timed
   epochs of forward, backward and optimizer step.  Reported: median and range of the
   epoch time, speed-up against PyG (and against DGL), peak resident set.  With ``--device
   cuda`` the ``torch``, ``triton`` and ``pyg`` workers compute on the GPU (``numba`` and
   ``dgl`` stay on the CPU cores, as the CPU peers), epochs are timed up to a device
   synchronisation, and their peak GPU memory (``torch.cuda.max_memory_allocated``) is
   reported too.

``--order`` relabels each dataset once, before any worker starts, in a locality order of
:mod:`distgnn.data.ordering` (its cost is reported once per dataset): every implementation, PyG
included, then trains on the same reordered graph, so a speed-up is not the order's alone.

``--aggregation-precision bf16`` has this project's timed side gather bf16 rows in sum/mean
aggregations (PyG stays fp32); the same-model check runs in fp32, since it checks the model,
not the rounding (whose effect on accuracy is measured by training, not here).

``--layers`` sets the depth of both sides (GCNII: its ``GCN2Conv`` layers, between the input
and output projections), ``--heads`` GAT's heads; ``--recompute`` has this project's side
keep only each layer's input for the backward pass (activation checkpointing; PyG runs
without), which with GCNII at growing depth shows peak memory against depth.

Workers are ``python -m bench.epoch JSON`` with the dataset in a temporary ``.npz``.  DGL
runs in an environment of its own (PyPI's DGL is built for older torch releases than this
project's): its worker is ``DGL_PYTHON bench/dgl_worker.py JSON`` (``--dgl-python``, default
``$DISTGNN_DGL_PYTHON``), with the same ``.npz`` and a second one holding this project's
initial weights.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Callable

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from bench import pyg
from bench.machine import machine_info
from bench.output import finish, output_arguments
from distgnn.data.datasets import load
from distgnn.data.graph import NodeDataset
from distgnn.data.ordering import CHOICES as ORDER_CHOICES
from distgnn.data.ordering import reorder_dataset
from distgnn.errors import DistGNNError
from distgnn.nn.backends import BACKENDS
from distgnn.placement import AGGREGATION_PRECISIONS, PRECISIONS, synchronize
from distgnn.program import comma_list
from distgnn.run.memory import process_mib

__all__ = ["config_of", "pyg_run", "save_npz"]

IMPLS = ("numba", "torch", "triton", "pyg", "pyg-bf16", "pyg-dist", "dgl")
# pyg-bf16: PyG under torch.autocast to bf16; pyg-dist: PyG's model in this project's trainer
PYG_IMPLS = ("pyg", "pyg-bf16", "pyg-dist")
DGL_MODELS = ("sage", "gcn")  # the models bench/dgl_worker.py builds in DGL
DGL_WORKER = Path(__file__).with_name("dgl_worker.py")
DGL_PYTHON_ENV = "DISTGNN_DGL_PYTHON"
DGL_SETUP = ("python3 -m venv ../dglenv, then into it torch==2.13.0 (CPU build), dgl==2.1.0 and "
             "the pins and graphbolt step of docs/benchmarks.md, 'DGL as a peer of epoch'")
# what runs without --impls: triton only where there is a GPU (it runs CUDA tensors)
DEFAULT_IMPLS = {"cpu": ("numba", "torch", "pyg"), "cuda": ("numba", "torch", "triton", "pyg")}
MODELS = ("sage", "sage-mean", "gcn", "gin", "gat", "gcnii")
DEFAULT_MODELS = ("sage", "gcn")
CHECK_EPOCHS, CHECK_RTOL = 3, 1e-4


HELP = "training epochs of this project vs PyTorch Geometric (and DGL)"
DESCRIPTION = ("Full-batch training epochs (forward, backward, optimizer) of GraphSAGE-gcn, "
               "GCN, GIN, GAT and GCNII: this project's trainer with the numba and torch "
               "backends against PyTorch Geometric (and GraphSAGE-gcn and GCN against DGL, "
               "in DGL's own environment), same model (checked), same threads, interleaved "
               "worker processes, peak memory of each.")
DEFAULT_DATASET = "rmat:scale=18,edge_factor=16,features=128"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--dataset", action="append",
                   help=f"dataset or generator spec; repeat for several (default: "
                        f"{DEFAULT_DATASET})")
    p.add_argument("--models", default=list(DEFAULT_MODELS), type=comma_list(str, MODELS),
                   help="comma-separated models: sage (GraphSAGE-gcn), sage-mean (GraphSAGE "
                        "with the mean aggregator), gcn, gin, gat, gcnii (default: sage,gcn)")
    p.add_argument("--impls", type=comma_list(str, IMPLS),
                   help="comma-separated implementations: numba, torch, triton (this "
                        "project's backends; triton on --device cuda only), pyg (PyTorch "
                        "Geometric), pyg-bf16 (PyG under torch.autocast to bf16), pyg-dist "
                        "(PyG's model made to train on partitions by distgnn.pyg.distribute, "
                        "in this project's trainer, one process), dgl (DGL, sage and gcn, on the "
                        "CPU cores, in DGL's environment: --dgl-python) (default: "
                        "numba,torch,pyg; on cuda also triton)")
    p.add_argument("--dgl-python", metavar="PATH",
                   help=f"the Python of DGL's environment, which runs --impls dgl (default: "
                        f"${DGL_PYTHON_ENV})")
    p.add_argument("--hidden", type=int, default=256, help="hidden width")
    p.add_argument("--layers", type=int, default=2,
                   help="number of layers (gcnii: of GCN2Conv layers, between its input and "
                        "output projections)")
    p.add_argument("--heads", type=int, default=8,
                   help="attention heads of GAT's hidden layers (a divisor of --hidden)")
    p.add_argument("--recompute", action="store_true",
                   help="this project's side recomputes each layer in the backward pass "
                        "instead of keeping its activations (activation checkpointing); "
                        "PyG runs as it is")
    p.add_argument("--order", choices=ORDER_CHOICES, default="given",
                   help="relabel each dataset once in this locality order before timing "
                        "(every implementation, PyG included, trains on the reordered graph): "
                        "degree, rcm, auto (timed trial) or given (default: as loaded)")
    p.add_argument("--aggregation-precision", choices=AGGREGATION_PRECISIONS,
                   help="this project's sum/mean aggregations gather fp32 rows or bf16 ones "
                        "(accumulating in fp32); PyG runs in fp32 either way (default: bf16 "
                        "under --precision bf16-mixed, else fp32)")
    p.add_argument("--precision", choices=PRECISIONS, default="fp32",
                   help="this project's side: fp32, or bf16-mixed (bf16 matrix products and "
                        "rows, fp32 weights: distgnn-train --precision); PyG runs in fp32 "
                        "(impl pyg) or under torch.autocast to bf16 (impl pyg-bf16)")
    p.add_argument("--dropout", type=float, default=0.5, help="dropout of the timed epochs")
    p.add_argument("--epochs", type=int, default=3,
                   help="timed epochs per worker run (after one warm-up epoch)")
    p.add_argument("--rounds", type=int, default=2,
                   help="interleaved rounds: each runs every implementation once")
    p.add_argument("--threads", type=int, default=os.cpu_count(), help="threads of every side")
    p.add_argument("--device", choices=("cpu", "cuda"), default="cpu",
                   help="where the torch and pyg implementations compute (numba always runs "
                        "on the CPU cores); cuda adds each one's peak GPU memory")
    output_arguments(p, "epoch.png")

def save_npz(data: NodeDataset, path: Path) -> None:
    """``data`` in the shared ``.npz`` format (uncompressed: workers load it fast)."""
    np.savez(path, indptr=data.graph.indptr, indices=data.graph.indices, x=data.x, y=data.y,
             train_mask=data.train_mask, val_mask=data.val_mask, test_mask=data.test_mask)


def impl_device(impl: str, device: str) -> str:
    """Where ``impl`` computes when the benchmark runs on ``device`` (numba and dgl: always
    the CPU)."""
    return "cpu" if impl in ("numba", "dgl") else device


def config_of(model: str, hidden: int, threads: int | None, epochs: int, dropout: float = 0.5):
    """The configuration of ``model`` (one of :data:`MODELS`) as the benchmark trains it on
    the numba backend: 2 layers, ``hidden`` wide, evaluated once at the end."""
    return _config({"model": model, "hidden": hidden, "layers": 2, "heads": 8,
                    "recompute": False, "seed": 0, "impl": "numba", "device": "cpu",
                    "aggregation_precision": "fp32", "precision": "fp32", "threads": threads},
                   dropout, epochs)


def _config(job: dict, dropout: float, epochs: int):
    from distgnn.run.config import TrainConfig

    model, aggregator = (("sage", "mean") if job["model"] == "sage-mean"
                         else (job["model"], "gcn"))
    return TrainConfig(model=model, aggregator=aggregator, hidden=job["hidden"],
                       layers=job["layers"],
                       **({"heads": job["heads"]} if job["model"] == "gat" else {}),
                       recompute=job["recompute"], dropout=dropout,
                       epochs=epochs, eval_every=epochs, seed=job["seed"],
                       backend=job["impl"] if job["impl"] in BACKENDS else "numba",
                       device=impl_device(job["impl"], job["device"]),
                       aggregation_precision=job["aggregation_precision"],
                       precision=job["precision"], threads=job["threads"], progress=False)


def train_ours(data: NodeDataset, job: dict, dropout: float, epochs: int) -> tuple[list, list]:
    """Losses and epoch seconds of this project's trainer."""
    from distgnn.run.training import train

    result = train(data, _config(job, dropout, epochs), log=lambda s: None)
    return ([r["loss"] for r in result.history], [r["epoch_s"] for r in result.history])


def train_pyg_distributed(data: NodeDataset, job: dict, dropout: float, epochs: int
                          ) -> tuple[list, list]:
    """Losses and epoch seconds of PyG's model (:class:`bench.pyg.PyGNet`, from this
    project's initial weights) made to train on partitions by :func:`distgnn.pyg.distribute`,
    in this project's trainer on the whole graph (the numba backend)."""
    from distgnn.run.training import train

    cfg = _config(dict(job, impl="numba"), dropout, epochs)
    result = train(data, cfg, make_model=pyg.distributed_factory(cfg), log=lambda s: None)
    return ([r["loss"] for r in result.history], [r["epoch_s"] for r in result.history])


def train_pyg(data: NodeDataset, job: dict, dropout: float, epochs: int) -> tuple[list, list]:
    """Losses and epoch seconds of the same model in PyG, from the same initial weights
    (under autocast to bf16 for ``pyg-bf16``)."""
    return pyg_run(data, _config(job, dropout, epochs), torch.device(job["device"]),
                   autocast=job["impl"] == "pyg-bf16")


def pyg_run(data: NodeDataset, cfg, device: torch.device,
            on_epoch: Callable[[nn.Module, torch.Tensor, object], None] | None = None,
            autocast: bool = False) -> tuple[list, list]:
    """Losses and epoch seconds of ``cfg``'s model trained in PyG.

    ``cfg`` is a :class:`~distgnn.run.config.TrainConfig`; its model is built in PyG from this
    project's initial weights for ``cfg.seed`` and trained for ``cfg.epochs`` with ``cfg.lr``
    and ``cfg.weight_decay`` on ``device``; with ``autocast``, its forward pass and loss under
    ``torch.autocast`` to bf16 (float32 weights and optimizer), the features and the
    adjacency's values in bf16 too: torch's sparse product takes no mix of float32 and bf16,
    and a layer's input after the first is a product's bf16 output.  After each timed epoch,
    ``on_epoch(net, x, adj)`` (untimed) may evaluate it."""
    from distgnn.nn.config import build_model
    from distgnn.run.shard import normalize_features
    from distgnn.run.training import configure_threads

    configure_threads(cfg.threads)
    torch.manual_seed(cfg.seed)
    ours = build_model(cfg.network, data.num_features, data.num_classes, cfg.recompute)
    net = pyg.PyGNet(pyg.model_name(cfg), data.num_features, cfg.hidden, data.num_classes,
                     cfg.layers, cfg.dropout, heads=cfg.heads, alpha=cfg.alpha, theta=cfg.theta)
    pyg.copy_weights(ours, net)
    net.to(device)
    low = torch.bfloat16 if autocast else torch.float32
    x = torch.from_numpy(normalize_features(data.x, cfg.feature_norm)).to(device, low)
    y = torch.from_numpy(data.y).to(device)
    train_mask = torch.from_numpy(data.train_mask).to(device)
    adj_t = pyg.adjacency(data.graph, pyg.model_name(cfg), device, low)
    optimizer = torch.optim.Adam(net.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)
    losses, times = [], []
    for _ in range(cfg.epochs):
        start = time.perf_counter()
        net.train()
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=autocast):
            out = net(x, adj_t)
            loss = F.cross_entropy(out[train_mask].float(), y[train_mask])
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        synchronize(device)
        times.append(time.perf_counter() - start)
        losses.append(loss.item())
        if on_epoch is not None:
            on_epoch(net, x, adj_t)
    return losses, times


def worker(job: dict) -> dict:
    """One worker's measurement (``job["impl"] == "check"``: the same-model check)."""
    data = load(job["npz"])
    if job["impl"] == "check":
        # the models' equality is checked in fp32, whatever the timed runs' precision
        fp32 = dict(job, aggregation_precision="fp32", precision="fp32")
        ours, _ = train_ours(data, dict(fp32, impl=job["check"]), 0.0, CHECK_EPOCHS)
        if not job.get("pyg", True):
            return {"ours": ours}
        theirs, _ = train_pyg(data, dict(fp32, impl="pyg"), 0.0, CHECK_EPOCHS)
        return {"ours": ours, "pyg": theirs}
    rss_loaded = process_mib("VmRSS")
    trainer = {"pyg": train_pyg, "pyg-bf16": train_pyg,
               "pyg-dist": train_pyg_distributed}.get(job["impl"], train_ours)
    _, times = trainer(data, job, job["dropout"], job["epochs"] + 1)
    out = {"times": times[1:], "rss_loaded_mib": rss_loaded, "peak_rss_mib": process_mib("VmHWM")}
    if impl_device(job["impl"], job["device"]) == "cuda":
        out["peak_gpu_mib"] = torch.cuda.max_memory_allocated() / 2**20
    return out


def run_worker(job: dict, command: list[str] | None = None) -> dict:
    """The result of the worker ``command`` (default: this module's) runs for ``job``.

    ``{"out_of_memory": True}`` where its device ran out of memory, ``{"unsupported": why}``
    where torch has no kernel for what it computes (such as a sparse product in bf16):
    results too, one implementation runs where another does not."""
    command = command or [sys.executable, "-m", "bench.epoch"]
    proc = subprocess.run([*command, json.dumps(job)], capture_output=True, text=True)
    if proc.returncode and "OutOfMemoryError" in proc.stderr:
        return {"out_of_memory": True}
    if proc.returncode and "NotImplementedError" in proc.stderr:
        why = [line for line in proc.stderr.splitlines() if "NotImplementedError" in line]
        return {"unsupported": why[-1].split("NotImplementedError:", 1)[-1].strip()}
    if proc.returncode:
        raise RuntimeError(f"{job['impl']} worker failed:\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def dgl_python(args) -> str:
    """The Python of DGL's environment: ``--dgl-python``, else ``$DISTGNN_DGL_PYTHON``;
    a :class:`DistGNNError` saying how to make one where neither names an interpreter."""
    path = args.dgl_python or os.environ.get(DGL_PYTHON_ENV)
    if not path:
        raise DistGNNError(f"--impls dgl runs in DGL's own Python environment: give its "
                           f"interpreter by --dgl-python PATH or ${DGL_PYTHON_ENV} (to create "
                           f"one: {DGL_SETUP})")
    if not (os.path.isfile(path) and os.access(path, os.X_OK)):
        raise DistGNNError(f"--dgl-python {path}: no such interpreter (to create DGL's "
                           f"environment: {DGL_SETUP})")
    return path


def save_initial_weights(data: NodeDataset, job: dict, path: Path) -> None:
    """What :mod:`bench.dgl_worker` starts from: initial weights and normalised features.

    The weights are this project's for ``job``'s model (GraphSAGE-gcn or GCN) on ``data``.

    ``weight_{i}`` (``[out, in]``) and ``bias_{i}`` of layer ``i``, and ``features``: the
    features as this project's trainer normalises them (the worker cannot import it)."""
    from distgnn.nn.config import build_model
    from distgnn.run.shard import normalize_features

    cfg = _config(dict(job, impl="numba"), 0.0, 1)
    torch.manual_seed(cfg.seed)
    ours = build_model(cfg.network, data.num_features, data.num_classes, cfg.recompute)
    arrays = {}
    for i, conv in enumerate(ours.convs):
        lin = conv.lin_neigh if job["model"] == "sage" else conv.lin
        arrays[f"weight_{i}"], arrays[f"bias_{i}"] = lin.weight, conv.bias
    if {id(p) for p in ours.parameters()} != {id(a) for a in arrays.values()}:
        raise RuntimeError(f"{job['model']}: not the layers bench/dgl_worker.py builds")
    np.savez(path, features=normalize_features(data.x, cfg.feature_norm),
             **{k: a.detach().numpy() for k, a in arrays.items()})


def dgl_job(job: dict, weights: Path, dropout: float, epochs: int, warmup: int) -> dict:
    """:mod:`bench.dgl_worker`'s job: ``job``'s model from the initial weights in ``weights``,
    ``warmup`` untimed epochs and ``epochs`` timed ones, this project's optimizer."""
    cfg = _config(dict(job, impl="numba"), dropout, epochs)
    return {"npz": job["npz"], "weights": str(weights), "model": job["model"],
            "epochs": epochs, "warmup": warmup, "dropout": dropout, "lr": cfg.lr,
            "weight_decay": cfg.weight_decay, "threads": job["threads"], "seed": job["seed"]}


def same_model_check(ours: list, theirs: list, ours_impl: str, peer: str) -> dict:
    """The largest relative difference between our losses and a peer's (relative to the
    peer's), printed."""
    diff = max(abs(a - b) / abs(b) for a, b in zip(ours, theirs))
    print(f"  same-model check ({ours_impl} against {peer}, {CHECK_EPOCHS} epochs, dropout 0, "
          "same initial weights): "
          f"max relative loss difference {diff:.1e} "
          f"{'<=' if diff <= CHECK_RTOL else 'EXCEEDS'} {CHECK_RTOL:g}", flush=True)
    return {"max_rel_loss_diff": diff, "ok": diff <= CHECK_RTOL, "ours": ours_impl}


def make_job(model: str, args, **more) -> dict:
    """A worker's job for ``model`` under the command's arguments (and ``more``)."""
    return {"model": model, "hidden": args.hidden, "layers": args.layers, "heads": args.heads,
            "recompute": args.recompute, "threads": args.threads, "seed": 0,
            "epochs": args.epochs, "dropout": args.dropout, "device": args.device,
            "aggregation_precision": args.aggregation_precision, "precision": args.precision,
            **more}


def measure(npz: Path, name: str, model: str, impls: list[str], args,
            data: NodeDataset | None = None) -> dict:
    """The row of ``model`` on the dataset in ``npz`` (``data``: the same, loaded; needed
    for ``dgl``, whose initial weights are written beside ``npz``)."""
    job = make_job(model, args, npz=str(npz))
    dgl = "dgl" in impls and model in DGL_MODELS
    if dgl:
        weights = npz.with_name(f"dgl-{model}-weights.npz")
        save_initial_weights(data if data is not None else load(str(npz)), job, weights)
        command = [dgl_python(args), "-I", str(DGL_WORKER)]
    row = {"dataset": name, "model": model, "hidden": args.hidden, "layers": args.layers,
           **({"heads": args.heads} if model == "gat" else {}),
           "recompute": args.recompute, "aggregation_precision": args.aggregation_precision,
           "precision": args.precision, "threads": args.threads, "epochs": args.epochs,
           "rounds": args.rounds, "device": args.device}
    ours = next((impl for impl in impls if impl in BACKENDS), "numba")
    pyg_check = bool(set(impls) & set(PYG_IMPLS))
    check = (run_worker(dict(job, impl="check", check=ours, pyg=pyg_check))
             if pyg_check or dgl else None)
    if check is not None and check.get("out_of_memory"):
        for key, wanted in (("same_model_check", pyg_check), ("same_model_check_dgl", dgl)):
            if wanted:
                row[key] = {"out_of_memory": True}
        print("  same-model check: out of memory", flush=True)
    elif check is not None:
        if pyg_check:
            row["same_model_check"] = same_model_check(check["ours"], check["pyg"], ours, "PyG")
            row["same_model_check"]["losses"] = check
        if dgl:
            theirs = run_worker(dgl_job(job, weights, 0.0, CHECK_EPOCHS, 0), command)
            if "losses" in theirs:
                row["same_model_check_dgl"] = same_model_check(check["ours"], theirs["losses"],
                                                               ours, "DGL")
                row["same_model_check_dgl"]["losses"] = {"ours": check["ours"],
                                                         "dgl": theirs["losses"]}
            else:
                row["same_model_check_dgl"] = theirs
                print(f"  same-model check against DGL: {theirs}", flush=True)
    runs = {impl: [] for impl in impls}
    for _ in range(args.rounds):
        for impl in impls:
            if impl == "dgl" and not dgl:
                runs[impl].append({"unsupported": f"DGL here: {', '.join(DGL_MODELS)}"})
            elif impl == "dgl":
                runs[impl].append(run_worker(dgl_job(job, weights, args.dropout, args.epochs, 1),
                                             command))
            else:
                runs[impl].append(run_worker(dict(job, impl=impl)))
    row["impls"] = {}
    for impl, results in runs.items():
        failed = next((r for r in results if r.get("out_of_memory") or r.get("unsupported")),
                      None)
        if failed:
            row["impls"][impl] = {"device": impl_device(impl, args.device), **failed}
            continue
        times = [t for r in results for t in r["times"]]
        row["impls"][impl] = {"device": impl_device(impl, args.device),
                              "epoch_s_median": statistics.median(times),
                              "epoch_s_min": min(times), "epoch_s_max": max(times),
                              "times": times,
                              "peak_rss_mib": max(r["peak_rss_mib"] for r in results),
                              "rss_loaded_mib": max(r["rss_loaded_mib"] for r in results)}
        if "peak_gpu_mib" in results[0]:
            row["impls"][impl]["peak_gpu_mib"] = max(r["peak_gpu_mib"] for r in results)
        if "versions" in results[0]:
            row["impls"][impl]["versions"] = results[0]["versions"]
    for peer, key, _ in PEERS:
        if peer in impls and "epoch_s_median" in row["impls"][peer]:
            ref = row["impls"][peer]["epoch_s_median"]
            for r in row["impls"].values():
                if "epoch_s_median" in r:
                    r[key] = ref / r["epoch_s_median"]
    return row


PEERS = (("pyg", "speedup_vs_pyg", "PyG"), ("pyg-bf16", "speedup_vs_pyg_bf16", "PyG bf16"),
         ("dgl", "speedup_vs_dgl", "DGL"))  # (impl, the speed-up against it, its name)


def format_row(row: dict) -> str:
    """The table of ``row``: each implementation's epoch time, range, speed-ups against PyG
    (and PyG bf16, DGL, where the row has them) and peak memory."""
    peers = [p for p in PEERS if p[0] == "pyg" or p[0] in row["impls"]]
    versus = "vs " + ", ".join(name for _, _, name in peers)
    width = 7 + 14 * (len(peers) - 1)
    lines = [f"  {'impl':>8} {'device':>6} {'epoch s (median)':>17} {'range':>17} "
             f"{versus:>{width}} {'peak RSS MiB':>13} {'peak GPU MiB':>13}"]
    for impl, r in row["impls"].items():
        if r.get("out_of_memory"):
            lines.append(f"  {impl:>8} {r['device']:>6} {'out of memory':>17}")
            continue
        if r.get("unsupported"):
            lines.append(f"  {impl:>8} {r['device']:>6} not supported: {r['unsupported']}")
            continue
        speed = " ".join(f"{r[key]:.2f}x" if key in r else "-" for _, key, _ in peers)
        gpu = f"{r['peak_gpu_mib']:,.0f}" if "peak_gpu_mib" in r else "-"
        lines.append(f"  {impl:>8} {r['device']:>6} {r['epoch_s_median']:>17.3f} "
                     f"{r['epoch_s_min']:>8.3f}-{r['epoch_s_max']:<8.3f} "
                     f"{speed:>{width}} "
                     f"{r['peak_rss_mib']:>13,.0f} {gpu:>13}")
    return "\n".join(lines)


def main(args) -> int:
    args.dataset = args.dataset or [DEFAULT_DATASET]
    for model in args.models:  # refuse a model the sizes cannot make before any work
        _config(make_job(model, args, impl="numba"), args.dropout, args.epochs)
    impls = list(args.impls or DEFAULT_IMPLS[args.device])
    if "triton" in impls and args.device != "cuda":
        raise DistGNNError("--impls triton runs on a GPU: add --device cuda")
    if set(impls) & set(PYG_IMPLS) and not pyg.available():
        print("PyTorch Geometric is not installed (pip install '.[bench]'): benchmarking "
              "without it", flush=True)
        impls = [impl for impl in impls if impl not in PYG_IMPLS]
    if "dgl" in impls:
        dgl_python(args)  # refused before any work where there is none
    info = machine_info(args.threads)
    print(f"{info['cpu']}; {args.threads} threads; triad {info['triad_gb_s']} GB/s; "
          f"THP_MEM_ALLOC_ENABLE={info['thp_mem_alloc_enable']}", flush=True)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for spec in args.dataset:
            data = load(spec)
            started = time.perf_counter()
            data, _, order = reorder_dataset(data, args.order, args.hidden)
            order_s = time.perf_counter() - started
            if args.order != "given":
                print(f"{data.name}: vertex order {order} ({args.order}), relabelled in "
                      f"{order_s:.2f} s", flush=True)
            npz = Path(tmp) / "data.npz"
            save_npz(data, npz)
            for model in args.models:
                print(f"{data.name} ({data.graph.num_nodes:,} vertices, "
                      f"{data.graph.num_edges:,} edges, {data.num_features} features): "
                      f"{model}, {args.layers} layers, hidden {args.hidden}"
                      f"{f', {args.heads} heads' if model == 'gat' else ''}"
                      f"{', recompute' if args.recompute else ''}", flush=True)
                row = measure(npz, data.name, model, sorted(impls, key=IMPLS.index), args,
                              data)
                row.update(order=order, order_requested=args.order, order_s=order_s)
                print(format_row(row), flush=True)
                rows.append(row)
    finish({"benchmark": "epoch", "machine": info, "results": rows}, args)
    return 0


if __name__ == "__main__":
    print(json.dumps(worker(json.loads(sys.argv[1]))))
