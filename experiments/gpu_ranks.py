"""GPU ranks on a real GPU: a mixed GPU + CPU job balanced by measured rates, and ranks
that share one GPU.

    python experiments/gpu_ranks.py mixed [--scale 20] [--threads 8] [--epochs 20]
    python experiments/gpu_ranks.py shared-gpu

``mixed``:

1. **Rates.**  Single-socket epochs of the same model on the whole graph, on the GPU
   (torch backend) and on ``--threads`` CPU cores (Numba): per-edge rate
   ``r = E / t_epoch`` (median, first epoch left out) of each.
2. **Weights.**  ``distgnn-partition --parts 2 --weights r_gpu,r_cpu``: rank 0 (the GPU)
   is asked for ``r_gpu / (r_gpu + r_cpu)`` of the edges.
3. **Jobs.**  ``mpirun -np 2`` cd-0 with rank 0 on the GPU and rank 1 on the CPU
   (``--rank-devices 0:cuda,1:cpu``), and the same partitions with both ranks on CPU
   cores.  The loss curves must agree to ``1e-4`` relative (dropout 0).
4. **Prediction.**  The weights predict an epoch of ``max_p E_p / r_p`` (the slower rank's
   share of edges at its measured rate), against which the mixed job's median epoch is
   compared; its exchange phases are printed beside it.

``shared-gpu``: two ranks on the one GPU: raw ``torch.distributed`` nccl (what NCCL itself
says), the trainer with ``--comm nccl`` (refused with one line), and with ``--comm mpi``
(staged through host memory), whose loss curve is compared with an all-CPU run.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

from distgnn.bench.validate import train_records
from distgnn.storage import write_atomic
from partition.format import load as load_partition

BIN = Path(sys.executable).parent
NCCL_PROBE = """
import os, torch, torch.distributed as dist
from mpi4py import MPI
c = MPI.COMM_WORLD
port = c.bcast(29511 if c.rank == 0 else None)
dist.init_process_group("nccl", init_method=f"tcp://127.0.0.1:{port}", rank=c.rank,
                        world_size=c.size)
torch.cuda.set_device(0)
t = torch.ones(4, device="cuda")
dist.all_reduce(t)
torch.cuda.synchronize()
print("rank", c.rank, "allreduce over nccl on one shared GPU gave", t.tolist(), flush=True)
dist.destroy_process_group()
"""


def median_epoch(records: list[dict]) -> float:
    return statistics.median(r["epoch_s"] for r in records[1:])


def max_rel_diff(a: list[dict], b: list[dict]) -> float:
    return max(abs(x["loss"] - y["loss"]) / abs(y["loss"]) for x, y in zip(a, b))


def mixed(a) -> dict:
    spec = f"rmat:scale={a.scale},edge_factor=16,features=128"
    common = ["--model", a.model, "--hidden", str(a.hidden), "--dropout", "0", "--epochs",
              str(a.epochs), "--eval-every", str(a.epochs), "--seed", "0"]
    gpu = train_records(["--dataset", spec, "--device", "cuda", *common], a.work / "g.jsonl",
                        threads=a.threads)
    cpu = train_records(["--dataset", spec, "--device", "cpu", *common], a.work / "c.jsonl",
                        threads=a.threads)
    t_gpu, t_cpu = median_epoch(gpu), median_epoch(cpu)
    out = a.work / "mixed-p2"
    subprocess.run([str(BIN / "distgnn-partition"), spec, "--parts", "2", "--weights",
                    f"{1 / t_gpu:.6g},{1 / t_cpu:.6g}", "--out", str(out), "--force",
                    "--no-progress"], check=True, stdout=subprocess.DEVNULL)
    edges = [load_partition(out, p).graph.num_edges for p in range(2)]
    total = sum(edges)
    r_gpu, r_cpu = total / t_gpu, total / t_cpu
    print(f"single socket, whole graph ({total:,} edges): GPU {t_gpu * 1e3:.1f} ms per epoch "
          f"({r_gpu / 1e6:.0f} M edges/s); {a.threads} CPU threads {t_cpu * 1e3:.1f} ms "
          f"({r_cpu / 1e6:.1f} M edges/s); GPU/CPU {t_cpu / t_gpu:.1f}x", flush=True)
    print(f"weighted partitions: rank 0 (GPU) {edges[0]:,} edges "
          f"({100 * edges[0] / total:.1f} %), rank 1 (CPU) {edges[1]:,}", flush=True)
    job = ["--partitions", str(out), "--algo", "cd-0", *common]
    both_cpu = train_records([*job, "--device", "cpu"], a.work / "cc.jsonl", 2, a.threads)
    mix = train_records([*job, "--rank-devices", "0:cuda,1:cpu", "--comm", "mpi"],
                        a.work / "mix.jsonl", 2, a.threads)
    predicted = max(edges[0] / r_gpu, edges[1] / r_cpu)
    measured = median_epoch(mix)
    phases = {k: statistics.median(r["phases"][k] for r in mix[1:]) for k in mix[1]["phases"]}
    row = {"scale": a.scale, "model": a.model, "hidden": a.hidden, "threads": a.threads,
           "gpu_epoch_s": t_gpu, "cpu_epoch_s": t_cpu, "edges": edges,
           "max_rel_loss_diff": max_rel_diff(mix, both_cpu), "mixed_epoch_s": measured,
           "all_cpu_epoch_s": median_epoch(both_cpu), "predicted_epoch_s": predicted,
           "prediction_error": (measured - predicted) / predicted, "mixed_phases": phases,
           "bytes_sent_max": statistics.median(r["bytes_sent_max"] for r in mix[1:])}
    print(f"mixed job vs all-CPU job, cd-0, {a.epochs} epochs: max relative loss difference "
          f"{row['max_rel_loss_diff']:.1e} ({'<=' if row['max_rel_loss_diff'] <= 1e-4 else '>'}"
          f" 1e-4)", flush=True)
    print(f"epoch: mixed {measured * 1e3:.1f} ms, predicted by the weights "
          f"{predicted * 1e3:.1f} ms ({100 * row['prediction_error']:+.1f} %); all-CPU 2 ranks "
          f"{row['all_cpu_epoch_s'] * 1e3:.1f} ms; GPU alone {t_gpu * 1e3:.1f} ms", flush=True)
    print("mixed job phases (max over ranks, ms): " + ", ".join(
        f"{k} {v * 1e3:.1f}" for k, v in phases.items() if v) +
        f"; {row['bytes_sent_max'] / 1e6:.1f} MB sent by the busiest rank", flush=True)
    return row


def shared_gpu(a) -> dict:
    import launch

    row = {}
    probe = launch.plan(2, [sys.executable, "-c", NCCL_PROBE])
    proc = subprocess.run(probe.argv, env={**os.environ, **probe.env}, capture_output=True,
                          text=True, timeout=300)
    tail = (proc.stdout + proc.stderr).strip().splitlines()[-6:]
    row["raw_nccl"] = {"returncode": proc.returncode, "tail": tail}
    print(f"raw nccl, 2 ranks on one GPU: exit {proc.returncode}", *tail, sep="\n  ",
          flush=True)
    directory = a.work / "cora-p2"
    subprocess.run([str(BIN / "distgnn-partition"), "cora", "--parts", "2", "--out",
                    str(directory), "--force", "--no-progress"], check=True,
                   stdout=subprocess.DEVNULL)
    common = ["--partitions", str(directory), "--dropout", "0", "--epochs", "30", "--seed", "0"]
    try:
        train_records([*common, "--device", "cuda", "--comm", "nccl"], a.work / "n.jsonl", 2)
        row["trainer_nccl"] = "ran"
    except RuntimeError as e:
        row["trainer_nccl"] = str(e).strip().splitlines()[-1]
    print(f"distgnn-train --device cuda --comm nccl, 2 ranks on one GPU: {row['trainer_nccl']}",
          flush=True)
    cpu = train_records([*common, "--device", "cpu"], a.work / "c.jsonl", 2)
    for comm in ("mpi", "auto"):
        shared = train_records([*common, "--device", "cuda", "--comm", comm],
                               a.work / "s.jsonl", 2)
        row[f"{comm}_max_rel_loss_diff"] = max_rel_diff(shared, cpu)
        print(f"distgnn-train --device cuda --comm {comm}, 2 ranks on one GPU: max relative "
              f"loss difference to the all-CPU job {row[f'{comm}_max_rel_loss_diff']:.1e}",
              flush=True)
    return row


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("figure", choices=("mixed", "shared-gpu"))
    p.add_argument("--work", type=Path, default=Path("runs/gpu"),
                   help="partition directories and metrics files go here")
    p.add_argument("--scale", type=int, default=20, help="mixed: R-MAT scale (edge factor 16)")
    p.add_argument("--model", choices=("gcn", "sage"), default="sage", help="mixed: model")
    p.add_argument("--hidden", type=int, default=256, help="mixed: hidden width")
    p.add_argument("--threads", type=int, default=max(1, (os.cpu_count() or 2) // 2),
                   help="mixed: threads of each rank (and of the single-socket rate runs)")
    p.add_argument("--epochs", type=int, default=20, help="mixed: epochs of every run")
    p.add_argument("--json", type=Path, help="write the results here")
    a = p.parse_args()
    a.work.mkdir(parents=True, exist_ok=True)
    row = {"mixed": mixed, "shared-gpu": shared_gpu}[a.figure](a)
    if a.json:
        write_atomic(a.json, json.dumps(row, indent=1))


if __name__ == "__main__":
    main()
