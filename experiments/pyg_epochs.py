"""Epochs of PyTorch Geometric models trained through ``distgnn.pyg`` against the same models
written with ``distgnn.nn``, on P ranks (and, with ``--one-process``, one process).

    python experiments/pyg_epochs.py --scale 18 --ranks 4 --out runs/pyg-epochs.json

For each model (GCN; GraphSAGE with the gcn and the mean aggregator), hidden ``--hidden``,
2 layers, dropout 0.5: this project's built-in model (``nn``) and PyG's same model
(:class:`bench.pyg.PyGNet`, from the same initial weights) through
:func:`distgnn.pyg.distribute` (``pyg``), each trained ``--epochs`` epochs by
``distgnn.train`` under ``distgnn-launch -n P --threads-per-rank T`` on a Libra partition of
R-MAT 2^scale x 16 (128 features), cd-0, ``THP_MEM_ALLOC_ENABLE=1`` (as ``distgnn-train``
sets it); ``--rounds`` rounds run the two jobs in turn.  Reported: the median epoch of each
(first epochs, warm-up, left out) and the median over rounds of the round's ratio pyg / nn.
``distgnn-bench epoch --impls numba,pyg,pyg-dist`` gives the one-process figures beside
plain PyG.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

BIN = Path(sys.executable).parent
MODELS = ("gcn", "sage", "sage-mean")
IMPLS = ("nn", "pyg")


def rank_job(source: str, model: str, impl: str, epochs: int, hidden: int,
             threads: int) -> None:
    """One run of ``distgnn.train`` (under mpirun for a partition directory); rank 0 prints
    its epoch seconds."""
    import distgnn
    from bench.epoch import config_of
    from bench.pyg import distributed_factory

    cfg = config_of(model, hidden, threads, epochs)
    result = distgnn.train(source, cfg, distributed_factory(cfg) if impl == "pyg" else None,
                           log=lambda s: None)
    if not Path(source).is_dir() or _rank() == 0:
        print(json.dumps([r["epoch_s"] for r in result.history]))


def _rank() -> int:
    from mpi4py import MPI

    return MPI.COMM_WORLD.rank


def measure(source, ranks: int, model: str, impl: str, a) -> list[float]:
    job = [str(Path(__file__).resolve()), "--rank-job", str(source), model, impl,
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
    p.add_argument("--rank-job", nargs=3, metavar=("SOURCE", "MODEL", "IMPL"),
                   help=argparse.SUPPRESS)
    p.add_argument("--rounds", type=int, default=2, help="rounds of the two jobs in turn")
    p.add_argument("--one-process", action="store_true",
                   help="also time one process on the whole graph")
    p.add_argument("--scale", type=int, default=18, help="R-MAT scale (2^scale vertices)")
    p.add_argument("--ranks", type=int, default=4, help="ranks of the partitioned runs")
    p.add_argument("--threads", type=int, default=2, help="threads of the one-process runs")
    p.add_argument("--threads-per-rank", type=int, default=1, help="threads of each rank")
    p.add_argument("--hidden", type=int, default=256, help="hidden width")
    p.add_argument("--epochs", type=int, default=6, help="epochs per run (the first is warm-up)")
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
    print("| model | ranks | distgnn.nn epoch s | PyG through distgnn.pyg epoch s | ratio |\n"
          "|---|---|---|---|---|", flush=True)
    settings = [(1, spec), (a.ranks, parts)] if a.one_process else [(a.ranks, parts)]
    for model in a.models.split(","):
        for ranks, source in settings:
            times = {impl: [] for impl in IMPLS}
            ratios = []
            for _ in range(a.rounds):  # the jobs in turn, so that both meet the same machine
                got = {impl: measure(source, ranks, model, impl, a)[1:] for impl in IMPLS}
                for impl in IMPLS:
                    times[impl] += got[impl]
                ratios.append(statistics.median(got["pyg"]) / statistics.median(got["nn"]))
            median = {impl: statistics.median(t) for impl, t in times.items()}
            rows.append({"model": model, "ranks": ranks, "times": times, "median": median,
                         "round_ratios": ratios, "ratio": statistics.median(ratios)})
            print(f"| {model} | {ranks} | {median['nn']:.3f} | {median['pyg']:.3f} | "
                  f"{statistics.median(ratios):.2f} |", flush=True)
    if a.out:
        Path(a.out).parent.mkdir(parents=True, exist_ok=True)
        Path(a.out).write_text(json.dumps({"scale": a.scale, "ranks": a.ranks,
                                           "hidden": a.hidden, "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
