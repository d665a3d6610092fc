"""Epochs of PyTorch Geometric models trained through ``distgnn.pyg`` against the same models
written with ``distgnn.nn``, on 1 process and on P ranks.

    python experiments/pyg_epochs.py --scale 18 --ranks 4 --out runs/pyg-epochs.json

For each model (GCN; GraphSAGE with the gcn and the mean aggregator), hidden ``--hidden``,
2 layers, dropout 0.5: this project's built-in model (``nn``) and PyG's same model
(:class:`bench.pyg.PyGNet`, from the same initial weights) through
:func:`distgnn.pyg.distribute` (``pyg``), both on one ``distgnn.setup`` run and trained in
turn, epoch by epoch (forward, backward, gradient allreduce, Adam step), so that both meet
the same machine: one process on R-MAT 2^scale x 16 (128 features) with ``--threads``
threads, and ``distgnn-launch -n P --threads-per-rank T`` on its Libra partition, cd-0,
``THP_MEM_ALLOC_ENABLE=1`` (as ``distgnn-train`` sets it).  Reported for wall-clock seconds
and for CPU seconds (summed over ranks: the work done, which a busy machine's waits do not
change): the median epoch of each (the first, warm-up, left out) and the median of the
epoch pairs' ratios pyg / nn.
``distgnn-bench epoch --impls numba,pyg,pyg-dist`` gives one-process figures beside plain
PyG (in worker processes of their own, with the trainer's planned memory).
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

BIN = Path(sys.executable).parent
MODELS = ("gcn", "sage", "sage-mean")
IMPLS = ("nn", "pyg")


def rank_job(source: str, model: str, epochs: int, hidden: int, threads: int) -> None:
    """One job (under mpirun for a partition directory): both models on one ``distgnn.setup``
    run, from the same initial weights, trained epoch by epoch in turn (so both meet the
    same machine); rank 0 prints each one's epoch seconds."""
    import torch

    import distgnn
    from bench.epoch import config_of
    from bench.pyg import distributed_factory
    from distgnn.nn.config import build_model

    cfg = config_of(model, hidden, threads, epochs)
    run = distgnn.setup(source, cfg, log=lambda s: None)
    models = {}
    for impl in IMPLS:
        torch.manual_seed(cfg.seed)
        net = (build_model(cfg.network, run.num_features, run.num_classes) if impl == "nn"
               else distributed_factory(cfg)(run.num_features, run.num_classes))
        model = run.place(net)
        models[impl] = (model, torch.optim.Adam(model.parameters(), lr=cfg.lr))
    times = {impl: [] for impl in IMPLS}
    cpu = {impl: [] for impl in IMPLS}
    for epoch in range(epochs):
        for impl, (model, optimizer) in models.items():
            run.comm.barrier()
            start, start_cpu = time.perf_counter(), time.process_time()
            run.start_epoch(model, epoch)
            with run.autocast():
                loss = run.loss(model(run.g, run.x))
            optimizer.zero_grad()
            loss.backward()
            run.sync(model, loss)
            optimizer.step()
            used = torch.tensor([time.process_time() - start_cpu], dtype=torch.float64)
            run.comm.barrier()
            times[impl].append(time.perf_counter() - start)
            run.comm.allreduce(used)  # CPU seconds of all ranks: the work, whatever the waits
            cpu[impl].append(float(used[0]))
    run.close()
    if run.rank == 0:
        print(json.dumps({"wall": times, "cpu": cpu}))


def measure(source, ranks: int, model: str, a) -> dict[str, list[float]]:
    job = [str(Path(__file__).resolve()), "--rank-job", str(source), model,
           "--epochs", str(a.epochs), "--hidden", str(a.hidden)]
    if ranks == 1:
        cmd = [sys.executable, *job, "--threads", str(a.threads)]
    else:
        cmd = [str(BIN / "distgnn-launch"), "-n", str(ranks), "--threads-per-rank",
               str(a.threads_per_rank), "--", sys.executable, "-m", "mpi4py", *job,
               "--threads", str(a.threads_per_rank)]
    # huge pages for torch's allocator, as distgnn-train and distgnn-bench have them
    proc = subprocess.run(cmd, capture_output=True, text=True,
                          env={**os.environ, "THP_MEM_ALLOC_ENABLE": "1"})
    if proc.returncode:
        raise SystemExit(f"{' '.join(cmd)} failed:\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rank-job", nargs=2, metavar=("SOURCE", "MODEL"), help=argparse.SUPPRESS)
    p.add_argument("--scale", type=int, default=18, help="R-MAT scale (2^scale vertices)")
    p.add_argument("--ranks", type=int, default=4, help="ranks of the partitioned runs")
    p.add_argument("--threads", type=int, default=2, help="threads of the one-process runs")
    p.add_argument("--threads-per-rank", type=int, default=1, help="threads of each rank")
    p.add_argument("--hidden", type=int, default=256, help="hidden width")
    p.add_argument("--epochs", type=int, default=8, help="epochs per run (the first is warm-up)")
    p.add_argument("--models", default=",".join(MODELS), help="comma-separated: gcn, sage "
                   "(GraphSAGE-gcn), sage-mean")
    p.add_argument("--work", default="runs/pyg-epochs", help="where the partitions go")
    p.add_argument("--out", help="write the results here (JSON)")
    a = p.parse_args()
    if a.rank_job:
        rank_job(*a.rank_job, a.epochs, a.hidden, a.threads)
        return
    spec = f"rmat:scale={a.scale},edge_factor=16,features=128,seed=11"
    parts = Path(a.work) / f"rmat{a.scale}-p{a.ranks}"
    if not (parts / "meta.json").exists():
        subprocess.run([str(BIN / "distgnn-partition"), spec, "--parts", str(a.ranks),
                        "--out", str(parts), "--no-progress"], check=True,
                       stdout=subprocess.DEVNULL)
    rows = []
    print("| model | ranks | distgnn.nn epoch s | PyG through distgnn.pyg epoch s | ratio | "
          "distgnn.nn CPU s | PyG through distgnn.pyg CPU s | ratio |\n"
          "|---|---|---|---|---|---|---|---|", flush=True)
    for model in a.models.split(","):
        for ranks, source in ((1, spec), (a.ranks, parts)):
            times = measure(source, ranks, model, a)
            row = {"model": model, "ranks": ranks, "times": times}
            for kind in ("wall", "cpu"):
                warm = {impl: t[1:] for impl, t in times[kind].items()}  # 1st: warm-up
                row[kind] = {impl: statistics.median(t) for impl, t in warm.items()}
                row[f"{kind}_ratio"] = statistics.median(
                    p / n for n, p in zip(warm["nn"], warm["pyg"]))
            rows.append(row)
            print(f"| {model} | {ranks} | {row['wall']['nn']:.3f} | {row['wall']['pyg']:.3f} | "
                  f"{row['wall_ratio']:.2f} | {row['cpu']['nn']:.3f} | {row['cpu']['pyg']:.3f} "
                  f"| {row['cpu_ratio']:.2f} |", flush=True)
    if a.out:
        Path(a.out).parent.mkdir(parents=True, exist_ok=True)
        Path(a.out).write_text(json.dumps({"scale": a.scale, "ranks": a.ranks,
                                           "hidden": a.hidden, "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
