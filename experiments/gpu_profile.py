"""Where a GPU training epoch spends its time and memory, this project's against PyG's, and
whether it repeats bit for bit.

    python experiments/gpu_profile.py profile --dataset rmat:scale=20,edge_factor=16 \\
        --models sage,gcn,gat --impls triton,torch,pyg [--json FILE]
    python experiments/gpu_profile.py repeat --dataset rmat:scale=20,edge_factor=16

``profile``: for each model and implementation (this project's trainer step with the
``triton`` or ``torch`` backend, or PyG's same model, :mod:`bench.pyg`), after a
warm-up epoch, one epoch under ``torch.profiler`` (the CUDA kernels that took most of its
time, summed by name) and the peak of ``torch.cuda.max_memory_allocated`` within each phase
(forward, backward, optimizer step) above what was allocated before the epoch.

``repeat``: the aggregation ``A x`` and its backward ``A^T g`` (hidden width 128) three
times on the same input through each backend (cuSPARSE for ``torch``, the Triton kernels
for ``triton``): whether the results are bitwise equal (a sum whose order depends on atomics
or on the library's choice of algorithm is not).

``resume``: for each backend and model, ``distgnn-train`` on the GPU for ``2 K`` epochs
twice, and for ``K`` epochs with a checkpoint then resumed to ``2 K``: whether the three
loss curves are bitwise equal.
"""
from __future__ import annotations

import argparse
import itertools
import json
import time
from collections import defaultdict
from pathlib import Path

import torch
import torch.nn.functional as F

from bench import pyg
from distgnn import TrainConfig, load
from distgnn.nn import build_model
from distgnn.nn.backends import get_backend
from distgnn.run.shard import dataset_shard, normalize_features
from distgnn.run.training import model_and_optimizer
from distgnn.storage import write_atomic
from distgnn.timing import PhaseTimer

PHASES = ("forward", "backward", "step")


def step_phases(forward, y: torch.Tensor, train: torch.Tensor, optimizer):
    """``phase(name)`` running one training step's ``forward`` (returning the logits),
    ``backward`` (the loss over ``train``) and optimizer ``step``."""
    def phase(name):
        if name == "forward":
            return forward()
        if name == "backward":
            loss = F.cross_entropy(phase.out[train], y[train])
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            return None
        optimizer.step()
        return None

    return phase


def ours(data, cfg: TrainConfig):
    """This project's training step in three phases."""
    shard = dataset_shard(data, cfg, PhaseTimer(), log=lambda s: None)
    model, optimizer = model_and_optimizer(cfg, shard)
    epochs = itertools.count()

    def forward():
        model.train()
        shard.nbr.set_epoch(next(epochs))
        return model(shard.nbr, shard.x)

    return step_phases(forward, shard.y, shard.masks["train"], optimizer)


def theirs(data, cfg: TrainConfig):
    """PyG's same model (from ours' initial weights): its training step's phases."""
    device = torch.device("cuda")
    torch.manual_seed(cfg.seed)
    net = pyg.PyGNet(cfg.model, data.num_features, cfg.hidden, data.num_classes, cfg.layers,
                     cfg.dropout, heads=cfg.heads)
    pyg.copy_weights(build_model(cfg.network, data.num_features, data.num_classes), net)
    net.to(device)
    x = torch.from_numpy(normalize_features(data.x, cfg.feature_norm)).to(device)
    adj_t = pyg.adjacency(data.graph, cfg.model, device)

    def forward():
        net.train()
        return net(x, adj_t)

    return step_phases(forward, torch.from_numpy(data.y).to(device),
                       torch.from_numpy(data.train_mask).to(device),
                       torch.optim.Adam(net.parameters(), lr=cfg.lr))


def epoch(phase) -> dict:
    """One step; per phase its seconds and peak allocation above the step's start (MiB)."""
    torch.cuda.synchronize()
    base = torch.cuda.memory_allocated()
    out = {}
    for name in PHASES:
        torch.cuda.reset_peak_memory_stats()
        started = time.perf_counter()
        result = phase(name)
        if name == "forward":
            phase.out = result
        torch.cuda.synchronize()
        out[name] = {"s": time.perf_counter() - started,
                     "peak_mib": (torch.cuda.max_memory_allocated() - base) / 2**20}
    phase.out = None
    return out


def profile(a) -> list[dict]:
    data = load(a.dataset)
    rows = []
    for model in a.models:
        for impl in a.impls:
            cfg = TrainConfig(model=model, hidden=a.hidden, heads=a.heads, dropout=a.dropout,
                              device="cuda", backend="triton" if impl == "pyg" else impl,
                              epochs=1, progress=False)
            torch.cuda.empty_cache()
            torch.cuda.reset_peak_memory_stats()
            phase = (theirs if impl == "pyg" else ours)(data, cfg)
            resident = torch.cuda.memory_allocated() / 2**20
            epoch(phase)  # warm-up: kernels compile, caches fill
            phases = epoch(phase)
            with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as p:
                epoch(phase)
            kernels = defaultdict(float)
            for e in p.key_averages():
                if e.device_type == torch.autograd.DeviceType.CUDA:
                    kernels[e.key[:90]] += e.self_device_time_total / 1e3
            top = sorted(kernels.items(), key=lambda kv: -kv[1])[:a.top]
            row = {"model": model, "impl": impl, "resident_mib": resident, "phases": phases,
                   "epoch_s": sum(v["s"] for v in phases.values()),
                   "kernel_ms_total": sum(kernels.values()), "top_kernels_ms": top}
            rows.append(row)
            print(f"{model} {impl}: epoch {row['epoch_s'] * 1e3:.1f} ms (kernels "
                  f"{row['kernel_ms_total']:.1f} ms); resident {resident:,.0f} MiB; peak above "
                  "it: " + ", ".join(f"{k} {v['peak_mib']:,.0f} MiB ({v['s'] * 1e3:.1f} ms)"
                                      for k, v in phases.items()), flush=True)
            for name, ms in top:
                print(f"    {ms:8.2f} ms  {name}", flush=True)
            del phase
    return rows


def repeat(a) -> dict:
    data = load(a.dataset)
    graph = data.graph
    x = torch.randn(graph.num_nodes, 128, device="cuda",
                    generator=torch.Generator("cuda").manual_seed(0))
    out = {}
    for name in ("torch", "triton"):
        backend = get_backend(name)
        ys = [backend.spmm(graph, x, "sum")[0] for _ in range(3)]
        gs = [backend.spmm_backward(graph, x, "sum", None) for _ in range(3)]
        out[name] = {"forward_bitwise_equal": all(torch.equal(ys[0], y) for y in ys[1:]),
                     "backward_bitwise_equal": all(torch.equal(gs[0], g) for g in gs[1:]),
                     "forward_max_abs_diff": max(float((ys[0] - y).abs().max()) for y in ys[1:]),
                     "backward_max_abs_diff": max(float((gs[0] - g).abs().max())
                                                  for g in gs[1:])}
        print(f"{name}: A x three times bitwise equal: {out[name]['forward_bitwise_equal']} "
              f"(max difference {out[name]['forward_max_abs_diff']:.2e}); A^T g: "
              f"{out[name]['backward_bitwise_equal']} "
              f"({out[name]['backward_max_abs_diff']:.2e})", flush=True)
    ref = get_backend("torch").spmm(graph, x, "sum")[0]
    out["triton_vs_torch_max_rel"] = float((get_backend("triton").spmm(graph, x, "sum")[0]
                                            - ref).abs().max() / ref.abs().max())
    print(f"triton against cuSPARSE: max difference {out['triton_vs_torch_max_rel']:.2e} of "
          "the largest value", flush=True)
    return out


def resume(a) -> dict:
    from bench.validate import train_records

    out, k = {}, a.epochs
    for backend in a.impls:
        for model in a.models:
            work = a.work / f"resume-{backend}-{model}"
            work.mkdir(parents=True, exist_ok=True)
            common = ["--dataset", a.dataset, "--device", a.device, "--backend", backend,
                      "--model", model, "--hidden", str(a.hidden), "--seed", "1",
                      "--eval-every", str(2 * k)]
            runs = [train_records([*common, "--epochs", str(2 * k)], work / f"{i}.jsonl")
                    for i in range(2)]
            train_records([*common, "--epochs", str(k), "--checkpoint-dir", str(work / "ck"),
                           "--checkpoint-every", str(k)], work / "first.jsonl")
            runs.append(train_records([*common, "--epochs", str(2 * k), "--resume",
                                       str(work / "ck")], work / "resumed.jsonl"))
            losses = [[r["loss"] for r in run] for run in runs]
            diff = lambda x, y: max(abs(p - q) / abs(q) for p, q in zip(x, y))  # noqa: E731
            row = {"repeat_bitwise": losses[0] == losses[1],
                   "resume_bitwise": losses[0] == losses[2],
                   "repeat_max_rel": diff(losses[0], losses[1]),
                   "resume_max_rel": diff(losses[0], losses[2])}
            out[f"{backend} {model}"] = row
            print(f"{backend} {model}: two runs bitwise equal {row['repeat_bitwise']} (max "
                  f"relative {row['repeat_max_rel']:.1e}); resumed after {k} of {2 * k} epochs "
                  f"bitwise equal {row['resume_bitwise']} ({row['resume_max_rel']:.1e})",
                  flush=True)
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("what", choices=("profile", "repeat", "resume"))
    p.add_argument("--dataset", default="rmat:scale=20,edge_factor=16,features=128")
    p.add_argument("--models", default="sage,gcn,gat", type=lambda s: s.split(","),
                   help="comma-separated models (profile)")
    p.add_argument("--impls", default="triton,torch,pyg", type=lambda s: s.split(","),
                   help="comma-separated: triton, torch (this project's backends), pyg")
    p.add_argument("--hidden", type=int, default=256, help="hidden width")
    p.add_argument("--heads", type=int, default=8, help="GAT's heads")
    p.add_argument("--dropout", type=float, default=0.5, help="dropout")
    p.add_argument("--top", type=int, default=8, help="kernels listed per run (profile)")
    p.add_argument("--device", default="cuda", help="resume: where the runs compute")
    p.add_argument("--epochs", type=int, default=6,
                   help="resume: K, the epochs before the checkpoint (2 K in all)")
    p.add_argument("--work", type=Path, default=Path("runs/gpu"),
                   help="resume: checkpoints and metrics files go here")
    p.add_argument("--json", type=Path, help="write the results here")
    a = p.parse_args()
    result = {"profile": profile, "repeat": repeat, "resume": resume}[a.what](a)
    if a.json:
        write_atomic(a.json, json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
