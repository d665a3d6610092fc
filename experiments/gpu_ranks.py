"""GPU ranks on a real GPU: a mixed GPU + CPU job balanced by measured rates, and ranks
that share one GPU.

    python experiments/gpu_ranks.py mixed [--scale 20] [--threads 8] [--epochs 8]
    python experiments/gpu_ranks.py shared-gpu

``mixed``:

1. **Rates.**  Single-socket epochs of the same model on whole R-MAT graphs of ``N``
   vertices and two edge factors (16 and 4), on the GPU and on ``--threads`` CPU cores:
   each device's ``t = u n + a E`` (a per-vertex term for the dense work, a per-edge term
   for the aggregation: :func:`~bench.rates.fitted_rates`; medians, first epoch
   left out).
2. **Weights.**  ``distgnn-partition --parts 2 --weights``: first from the per-edge rates
   alone (``1 / t``, as a per-edge model would), then refined with the vertex term: with
   ``nu_p`` the vertices per edge that cut gave rank ``p``, weights
   ``1 / (u_p nu_p + a_p)``.
3. **Prediction.**  The refined cut's epoch by :func:`~bench.scaling.predict` with
   a rate per rank (the slower rank's compute, the cd-0 exchange through host memory, the
   allreduce), against the GPU alone's ``u N + a E``: the model's advice is the faster.
4. **Jobs.**  ``mpirun -np 2`` cd-0 on the refined cut with rank 0 on the GPU and rank 1 on
   the CPU (``--rank-devices 0:cuda,1:cpu``), and the same partitions with both ranks on
   CPU cores: the loss curves must agree to ``1e-4`` relative (dropout 0); the mixed job's
   median epoch is compared with the prediction.

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

from bench.epoch import save_npz
from bench.machine import triad_bandwidth
from bench.rates import fitted_rates
from bench.scaling import predict
from bench.validate import train_records
from distgnn import TrainConfig, load
from distgnn.nn import build_model
from distgnn.nn.widths import exchange_widths
from distgnn.storage import write_atomic

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
# one host's exchange: a message's latency, and host memory copies at half the triad rate
HOST_ALPHA_S = 5e-6


def median_epoch(records: list[dict]) -> float:
    return statistics.median(r["epoch_s"] for r in records[1:])


def max_rel_diff(a: list[dict], b: list[dict]) -> float:
    return max(abs(x["loss"] - y["loss"]) / abs(y["loss"]) for x, y in zip(a, b))


def cut(spec: str, weights: list[float], out: Path) -> list[dict]:
    """Partitions of ``spec`` for 2 ranks with ``weights``; their per-rank counts."""
    subprocess.run([str(BIN / "distgnn-partition"), spec, "--parts", "2", "--weights",
                    ",".join(f"{w:.6g}" for w in weights), "--out", str(out), "--force",
                    "--no-progress", "--json", str(out) + ".json"], check=True,
                   stdout=subprocess.DEVNULL)
    return json.loads(Path(str(out) + ".json").read_text())["per_rank"]


def mixed(a) -> dict:
    common = ["--model", a.model, "--hidden", str(a.hidden), "--dropout", "0", "--epochs",
              str(a.epochs), "--eval-every", str(a.epochs), "--seed", "0"]
    specs, sizes = {}, {}
    for ef in (16, 4):  # generated once, then read by every run
        data = load(f"rmat:scale={a.scale},edge_factor={ef},features=128")
        specs[ef] = str(a.work / f"rmat{a.scale}-ef{ef}.npz")
        save_npz(data, Path(specs[ef]))
        sizes[ef] = data.graph.num_nodes, data.graph.num_edges
    epochs = {(dev, ef): median_epoch(train_records(
        ["--dataset", spec, "--device", dev, *common], a.work / f"{dev}{ef}.jsonl",
        threads=a.threads)) for dev in ("cuda", "cpu") for ef, spec in specs.items()}
    triad = triad_bandwidth() * 1e9
    rates = {dev: fitted_rates([(*sizes[ef], epochs[dev, ef]) for ef in specs], triad)
             for dev in ("cuda", "cpu")}
    for dev, r in rates.items():
        shown = ", ".join(f"{epochs[dev, ef] * 1e3:.1f} ms (edge factor {ef})" for ef in specs)
        print(f"{dev}: epochs {shown}; fitted {r.dense_per_vertex * 1e9:.1f} ns per vertex + "
              f"{r.aggregation_per_edge * 1e9:.2f} ns per edge", flush=True)
    n, e = sizes[16]
    per_edge = cut(specs[16], [1 / epochs["cuda", 16], 1 / epochs["cpu", 16]],
                   a.work / "mixed-edge-rates")
    nu = [r["vertices"] / max(r["edges"], 1) for r in per_edge]
    weights = [1 / (rates[dev].dense_per_vertex * nu[p] + rates[dev].aggregation_per_edge)
               for p, dev in enumerate(("cuda", "cpu"))]
    out = a.work / "mixed-vertex-rates"
    per_rank = cut(specs[16], weights, out)
    cfg = TrainConfig(model=a.model, hidden=a.hidden)
    params = sum(p.numel() for p in build_model(cfg.network, 128, 16).parameters())
    phases = predict(per_rank, [rates["cuda"], rates["cpu"]],
                     exchange_widths(128, a.hidden, 16, 2), params, HOST_ALPHA_S, triad / 2,
                     "cd-0")
    gpu_alone = rates["cuda"].dense_per_vertex * n + rates["cuda"].aggregation_per_edge * e
    advice = "mixed job" if phases["epoch"] < gpu_alone else "the GPU alone"
    print(f"cuts: per-edge weights put {per_edge[1]['edges']:,} edges and "
          f"{per_edge[1]['vertices']:,} vertices on the CPU rank; with the vertex term "
          f"{per_rank[1]['edges']:,} edges and {per_rank[1]['vertices']:,} vertices", flush=True)
    print(f"model: mixed job {phases['epoch'] * 1e3:.1f} ms per epoch, GPU alone "
          f"{gpu_alone * 1e3:.1f} ms: it advises {advice}", flush=True)
    job = ["--partitions", str(out), "--algo", "cd-0", *common]
    both_cpu = train_records([*job, "--device", "cpu"], a.work / "cc.jsonl", 2, a.threads)
    mix = train_records([*job, "--rank-devices", "0:cuda,1:cpu", "--comm", "mpi"],
                        a.work / "mix.jsonl", 2, a.threads)
    measured = median_epoch(mix)
    measured_phases = {k: statistics.median(r["phases"][k] for r in mix[1:])
                       for k in mix[1]["phases"]}
    row = {"scale": a.scale, "model": a.model, "hidden": a.hidden, "threads": a.threads,
           "epochs_s": {f"{d}_ef{ef}": t for (d, ef), t in epochs.items()},
           "rates": {d: vars(r) for d, r in rates.items()}, "per_edge_cut": per_edge,
           "cut": per_rank, "weights": weights, "predicted_phases": phases,
           "predicted_epoch_s": phases["epoch"], "gpu_alone_predicted_s": gpu_alone,
           "gpu_alone_measured_s": epochs["cuda", 16], "advice": advice,
           "max_rel_loss_diff": max_rel_diff(mix, both_cpu), "mixed_epoch_s": measured,
           "all_cpu_epoch_s": median_epoch(both_cpu),
           "prediction_error": (measured - phases["epoch"]) / phases["epoch"],
           "mixed_phases": measured_phases,
           "bytes_sent_max": statistics.median(r["bytes_sent_max"] for r in mix[1:])}
    print(f"mixed job vs all-CPU job, cd-0, {a.epochs} epochs: max relative loss difference "
          f"{row['max_rel_loss_diff']:.1e} ({'<=' if row['max_rel_loss_diff'] <= 1e-4 else '>'}"
          f" 1e-4)", flush=True)
    print(f"epoch: mixed {measured * 1e3:.1f} ms, predicted {phases['epoch'] * 1e3:.1f} ms "
          f"({100 * row['prediction_error']:+.1f} %); all-CPU 2 ranks "
          f"{row['all_cpu_epoch_s'] * 1e3:.1f} ms; GPU alone {epochs['cuda', 16] * 1e3:.1f} ms "
          f"(predicted {gpu_alone * 1e3:.1f})", flush=True)
    print("mixed job phases (max over ranks, ms): " + ", ".join(
        f"{k} {v * 1e3:.1f}" for k, v in measured_phases.items() if v) +
        f"; {row['bytes_sent_max'] / 1e6:.1f} MB sent by the busiest rank", flush=True)
    return row


def shared_gpu(a) -> dict:
    import launch

    row = {}
    probe = launch.plan(2, [sys.executable, "-c", NCCL_PROBE])
    proc = subprocess.run(probe.argv, env={**os.environ, **probe.env}, capture_output=True,
                          text=True, timeout=90)
    probe.remove_session()
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
    except RuntimeError as e:  # the trainer's one line, among what mpirun adds
        said = [line for line in str(e).splitlines() if "nccl communicator" in line]
        row["trainer_nccl"] = said[0] if said else str(e).strip().splitlines()[-1]
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
    p.add_argument("--epochs", type=int, default=8, help="mixed: epochs of every run")
    p.add_argument("--json", type=Path, help="write the results here")
    a = p.parse_args()
    a.work.mkdir(parents=True, exist_ok=True)
    row = {"mixed": mixed, "shared-gpu": shared_gpu}[a.figure](a)
    if a.json:
        write_atomic(a.json, json.dumps(row, indent=1))


if __name__ == "__main__":
    main()
