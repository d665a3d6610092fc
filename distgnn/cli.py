"""Command-line entry points ``distgnn-train`` and ``distgnn-bench``.

User errors (bad files, bad flags, mismatched checkpoints) end with one line on stderr,
``PROG: error: ...``, and exit status 2; no traceback.
"""
from __future__ import annotations

import argparse
import dataclasses
import os
import statistics

from .cli_common import OneLineParser, fail, interruptible, run_guarded


def train_parser() -> argparse.ArgumentParser:
    from .comm import COMMUNICATORS
    from .drpa import ALGORITHMS
    from .models import SAGE_AGGREGATORS
    from .placement import BACKEND_CHOICES, DEVICES
    from .config import DEFAULT_DELAY, NAN_POLICIES, TrainConfig

    d = TrainConfig()
    p = OneLineParser(
        prog="distgnn-train",
        description="Full-batch GNN training for node classification: on one socket "
                    "(--dataset), or under MPI with one rank per partition "
                    "(mpirun -np P distgnn-train --partitions DIR). With neither, trains "
                    "GCN on the bundled Cora graph.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    g = p.add_argument_group("data")
    g.add_argument("--dataset",
                   help="bundled name (cora, the default), NAME.npz on $DISTGNN_DATA_PATH, "
                        "path to an .npz, an OGB node-property directory, an edge-list file, "
                        "or a generator spec such as rmat:scale=18,edge_factor=16")
    g.add_argument("--split", type=int, default=0,
                   help="which fixed split to use when the dataset ships several")
    g.add_argument("--features", help="features file (.npy or text) for an edge-list dataset")
    g.add_argument("--labels", help="labels file (.npy or text) for an edge-list dataset")
    g.add_argument("--partitions", metavar="DIR",
                   help="train under MPI on a directory written by distgnn-partition, one "
                        "rank per partition (instead of --dataset)")
    g.add_argument("--no-verify", action="store_true",
                   help="with --partitions: skip the size and SHA-256 check of each rank's "
                        "files at start-up")
    g.add_argument("--feature-norm", choices=("row", "none"), default=d.feature_norm,
                   help="row: divide each feature row by its L1 norm (Kipf & Welling)")
    g = p.add_argument_group("model")
    g.add_argument("--model", choices=("gcn", "sage"), default=d.model,
                   help="GCN (Kipf & Welling) or GraphSAGE")
    g.add_argument("--aggregator", choices=SAGE_AGGREGATORS, default=d.aggregator,
                   help="GraphSAGE aggregator; gcn = (sum of neighbours + self) / (degree + 1)")
    g.add_argument("--layers", type=int, default=d.layers, help="number of GNN layers")
    g.add_argument("--hidden", type=int, default=d.hidden, help="hidden width")
    g.add_argument("--dropout", type=float, default=d.dropout,
                   help="dropout probability before each layer")
    g.add_argument("--residual", action="store_true",
                   help="skip connections on hidden-to-hidden layers")
    g.add_argument("--precompute-first-aggregation", dest="precompute_first",
                   action="store_true",
                   help="no dropout on the input features, and the first layer's aggregation "
                        "of them computed once (SGC/MG-GCN); needs features <= hidden")
    g = p.add_argument_group("optimisation")
    g.add_argument("--lr", type=float, default=d.lr, help="Adam learning rate")
    g.add_argument("--weight-decay", type=float, default=d.weight_decay,
                   help="Adam L2 weight decay")
    g.add_argument("--epochs", type=int, default=d.epochs,
                   help="total number of epochs (a resumed run counts the earlier ones)")
    g.add_argument("--seed", type=int, default=d.seed,
                   help="seed of weights and dropout: the same seed gives the same loss curve")
    g.add_argument("--eval-every", type=int, default=d.eval_every,
                   help="evaluate (train/val/test accuracy) every k epochs")
    g.add_argument("--patience", type=int, default=d.patience,
                   help="stop after this many evaluations without a better validation "
                        "accuracy (0: never stop early)")
    g = p.add_argument_group("distributed (with --partitions)")
    g.add_argument("--algo", choices=ALGORITHMS, default=d.algo,
                   help="split-vertex exchange: cd-0 exact every layer (forward and "
                        "backward), cd-r delayed by r epochs and overlapped, 0c none")
    g.add_argument("--delay", type=int, default=d.delay,
                   help=f"r of cd-r: epochs a partial aggregate travels each way "
                        f"(default {DEFAULT_DELAY} with cd-r)")
    g.add_argument("--comm", choices=COMMUNICATORS, default=d.comm,
                   help="communicator: mpi (mpi4py on host buffers; GPU tensors are staged "
                        "through pinned memory), gloo, nccl (every rank on a GPU) or ccl "
                        "(needs oneccl_bindings_for_pytorch) over torch.distributed; auto: "
                        "nccl when every rank is on a GPU, else mpi")
    g.add_argument("--no-backward-exchange", dest="backward_exchange", action="store_false",
                   default=argparse.SUPPRESS,
                   help="do not exchange split-vertex gradients in the backward pass: "
                        "reproduces DGL's inexact cd-0, for comparison only")
    g = p.add_argument_group("execution and output")
    g.add_argument("--backend", choices=BACKEND_CHOICES, default=d.backend,
                   help="aggregation kernels: numba (cache-blocked CPU kernels), torch "
                        "(torch.sparse, any device) or auto (torch on a GPU, else numba)")
    g.add_argument("--device", choices=DEVICES, default=d.device,
                   help="where each rank computes: cpu, cuda (the local rank's GPU) or auto "
                        "(cuda when the rank sees a GPU)")
    g.add_argument("--rank-devices", metavar="R:DEV,...",
                   help="per-rank --device for the ranks named, e.g. 0:cpu,1:cuda (a job "
                        "may mix CPU and GPU ranks)")
    g.add_argument("--rank-backends", metavar="R:BACKEND,...",
                   help="per-rank --backend for the ranks named, e.g. 1:torch,3:torch")
    g.add_argument("--threads", type=int, default=d.threads,
                   help="torch and Numba threads (None: the libraries' own defaults on one "
                        "socket; under MPI, this node's cores divided by its ranks)")
    g.add_argument("--metrics-out", metavar="FILE",
                   help="write one JSON object per epoch (loss, accuracies, epoch_s, phases)")
    g.add_argument("--no-progress", action="store_true",
                   help="no progress bar, even on a terminal")
    g = p.add_argument_group("checkpoints and failures")
    g.add_argument("--checkpoint-dir", metavar="DIR",
                   help="write checkpoints here (model, optimizer, RNG states and cd-r "
                        "exchange state of every rank, metrics so far); also at the end, on "
                        "SIGTERM/SIGUSR1 and before a non-finite step stops the run. Under "
                        "MPI it must be one directory every rank sees")
    g.add_argument("--checkpoint-every", type=int, default=d.checkpoint_every, metavar="K",
                   help="epochs between checkpoints (0: only at the end and on a stop)")
    g.add_argument("--keep", type=int, default=d.keep, metavar="N",
                   help="checkpoints to keep (older ones are removed after a new one is "
                        "complete)")
    g.add_argument("--resume", metavar="DIR",
                   help="continue from the newest intact checkpoint in DIR (refused if it "
                        "comes from other data, another model shape, another rank count or "
                        "exchange); --epochs stays the total; new checkpoints go to DIR "
                        "too unless --checkpoint-dir says otherwise")
    g.add_argument("--nan-policy", choices=NAN_POLICIES, default=d.nan_policy,
                   help="on a non-finite loss or gradient: stop (naming the epoch and "
                        "ranks, after checkpointing the last good state) or skip the step")
    g.add_argument("--comm-timeout", type=float, default=d.comm_timeout, metavar="S",
                   help="with --partitions: abort the job when a rank waits longer than S "
                        "seconds in one collective (a peer died or hangs); armed after the "
                        "first epoch; 0 disables")
    return p


@interruptible("distgnn-train")
def train_main(argv: list[str] | None = None) -> int:
    args = train_parser().parse_args(argv)
    from .datasets import load
    from .config import TrainConfig
    from .distributed import train_partitions
    from .train import train

    if args.partitions and args.dataset:
        return fail("distgnn-train", "give --dataset or --partitions, not both")

    def config():
        return TrainConfig(**{f.name: getattr(args, f.name)
                              for f in dataclasses.fields(TrainConfig) if hasattr(args, f.name)},
                           progress=not args.no_progress, verify=not args.no_verify)

    if args.partitions:  # every rank checks the flags; rank 0 reports once
        return run_guarded("distgnn-train",
                           lambda: train_partitions(args.partitions, config, report))
    cfg = run_guarded("distgnn-train", config)
    if isinstance(cfg, int):
        return cfg
    args.dataset = args.dataset or "cora"

    def run():
        data = load(args.dataset, features=args.features, labels=args.labels, split=cfg.split)
        print(data.summary(), flush=True)
        return train(data, cfg)

    result = run_guarded("distgnn-train", run)
    if isinstance(result, int):
        return result
    report(result)
    return 0


def report(result) -> None:
    """The run's summary lines: median epoch and phases, best test accuracy."""
    times = [r["epoch_s"] for r in result.history]
    phases = {k: statistics.median(r["phases"][k] for r in result.history)
              for k in result.history[0]["phases"]}
    print(f"median epoch {statistics.median(times) * 1e3:.1f} ms  ("
          + ", ".join(f"{k} {v * 1e3:.1f}" for k, v in phases.items() if v) + " ms)")
    sent = statistics.median(r["bytes_sent_max"] for r in result.history)
    if sent:
        print(f"split-vertex exchange: {sent / 1e6:.2f} MB sent per epoch by the busiest rank")
    best = result.best
    if best.get("test_acc") is not None:
        print(f"test accuracy {best['test_acc'] * 100:.2f} % at epoch {best['epoch'] + 1} "
              f"(best validation accuracy {best['val_acc'] * 100:.2f} %)")


def output_arguments(parser: argparse.ArgumentParser, charts: str) -> None:
    """``--json`` and ``--plot``, which every benchmark takes."""
    parser.add_argument("--json", metavar="FILE",
                        help="write the results and machine information here")
    parser.add_argument("--plot", metavar="DIR", help=f"write {charts} here (needs matplotlib)")


def bench_parser() -> argparse.ArgumentParser:
    p = OneLineParser(prog="distgnn-bench",
                      description="Benchmarks that print tables and write JSON.")
    sub = p.add_subparsers(dest="command", required=True, parser_class=OneLineParser)
    s = sub.add_parser("spmm", formatter_class=argparse.ArgumentDefaultsHelpFormatter,
                       help="aggregation kernels vs torch.sparse.mm and scipy",
                       description="Forward and backward SpMM of the Numba kernels, "
                                   "torch.sparse.mm and scipy on one graph, interleaved, "
                                   "with the STREAM triad of this machine.")
    s.add_argument("--dataset", default="rmat:scale=20,edge_factor=16,features=1",
                   help="any --dataset of distgnn-train (only the graph is used)")
    s.add_argument("--widths", default="16,64,128,256",
                   type=lambda t: [int(w) for w in t.split(",")],
                   help="comma-separated feature widths d")
    s.add_argument("--reps", type=int, default=5, help="timed repetitions (median reported)")
    s.add_argument("--threads", type=int, default=os.cpu_count(),
                   help="threads for Numba and torch (scipy runs on one)")
    s.add_argument("--sweep", action="store_true",
                   help="also time every hub-block size against the autotuned one")
    s.add_argument("--no-scipy", action="store_true", help="skip the scipy column")
    s.add_argument("--device", choices=("cpu", "cuda"), default="cpu",
                   help="cpu: the Numba kernels vs torch.sparse and scipy; cuda: the torch "
                        "backend on the GPU vs PyTorch Geometric's message passing and spmm")
    output_arguments(s, "spmm.png")
    from .bench.epoch import IMPLS as EPOCH_IMPLS
    from .bench.epoch import MODELS as EPOCH_MODELS

    s = sub.add_parser("epoch", formatter_class=argparse.ArgumentDefaultsHelpFormatter,
                       help="training epochs of this project vs PyTorch Geometric",
                       description="Full-batch training epochs (forward, backward, optimizer) "
                                   "of GraphSAGE-gcn and GCN: this project's trainer with the "
                                   "numba and torch backends against PyTorch Geometric, same "
                                   "model (checked), same threads, interleaved worker "
                                   "processes, peak memory of each.")
    s.add_argument("--dataset", action="append",
                   help="dataset or generator spec; repeat for several "
                        "(default: rmat:scale=18,edge_factor=16,features=128)")
    s.add_argument("--models", default=",".join(EPOCH_MODELS), type=lambda t: t.split(","),
                   help="comma-separated models (sage = GraphSAGE-gcn, gcn)")
    s.add_argument("--impls", default=",".join(EPOCH_IMPLS), type=lambda t: t.split(","),
                   help="comma-separated implementations: numba, torch (this project's "
                        "backends), pyg (PyTorch Geometric)")
    s.add_argument("--hidden", type=int, default=256, help="hidden width")
    s.add_argument("--layers", type=int, default=2, help="number of layers")
    s.add_argument("--dropout", type=float, default=0.5, help="dropout of the timed epochs")
    s.add_argument("--epochs", type=int, default=3,
                   help="timed epochs per worker run (after one warm-up epoch)")
    s.add_argument("--rounds", type=int, default=2,
                   help="interleaved rounds: each runs every implementation once")
    s.add_argument("--threads", type=int, default=os.cpu_count(), help="threads of every side")
    s.add_argument("--device", choices=("cpu", "cuda"), default="cpu",
                   help="where the torch and pyg implementations compute (numba always runs "
                        "on the CPU cores); cuda adds each one's peak GPU memory")
    output_arguments(s, "epoch.png")
    from .comm import COMMUNICATORS

    s = sub.add_parser("comm", formatter_class=argparse.ArgumentDefaultsHelpFormatter,
                       help="alltoallv and allreduce of each communicator (under mpirun)",
                       description="Latency and bandwidth of alltoallv (one block per peer, "
                                   "as DRPA sends) and allreduce (as the gradient sum) for "
                                   "each communicator; run it under distgnn-launch -n P.")
    s.add_argument("--comms", default="mpi,gloo", type=lambda t: t.split(","),
                   help=f"comma-separated communicators ({', '.join(COMMUNICATORS[1:])})")
    s.add_argument("--min-bytes", type=int, default=1024, help="smallest message per peer")
    s.add_argument("--max-bytes", type=int, default=16 << 20,
                   help="largest message per peer (sizes grow by 4x)")
    s.add_argument("--reps", type=int, default=10, help="timed repetitions (median)")
    s.add_argument("--partitions", metavar="DIR",
                   help="also time the cd-0 exchange of this partition directory (P ranks)")
    s.add_argument("--width", type=int, default=16,
                   help="feature width of the --partitions exchange")
    s.add_argument("--threads", type=int, default=1, help="threads per rank")
    output_arguments(s, "comm.png")
    from .bench.predict import NETWORKS

    s = sub.add_parser("predict", formatter_class=argparse.ArgumentDefaultsHelpFormatter,
                       help="scaling model: epoch time of 0c, cd-0, cd-r at P ranks",
                       description="Predict per-epoch time and phases of 0c, cd-0 and cd-r "
                                   "at each P from partition statistics, rates measured here "
                                   "and a network model; --validate P... checks it against "
                                   "runs on this machine.")
    s.add_argument("--dataset", default="rmat:scale=18,edge_factor=16,features=128",
                   help="dataset or generator spec")
    s.add_argument("--parts", default="1,2,4,8,16,32,64,128",
                   type=lambda t: [int(w) for w in t.split(",")],
                   help="comma-separated P to partition the graph into (libra)")
    s.add_argument("--stats", nargs="+", metavar="FILE",
                   help="use these distgnn-partition --json statistics instead of partitioning")
    s.add_argument("--model", choices=("gcn", "sage"), default="sage", help="model")
    s.add_argument("--hidden", type=int, default=256, help="hidden width")
    s.add_argument("--layers", type=int, default=2, help="layers")
    s.add_argument("--threads", type=int, default=1,
                   help="threads per rank (the rates are measured with this many)")
    s.add_argument("--delay", type=int, default=5, help="r of cd-r")
    s.add_argument("--network", default="100gbe",
                   help=f"a preset ({', '.join(NETWORKS)}) or a distgnn-bench comm --json file")
    s.add_argument("--latency", type=float, help="override the network latency (seconds)")
    s.add_argument("--bandwidth", type=float, help="override the bandwidth (GB/s per rank)")
    s.add_argument("--cores", type=int,
                   help="cores of the one node all ranks share (slows oversubscribed P); "
                        "leave out for a cluster with cores per rank")
    s.add_argument("--validate", type=lambda t: [int(w) for w in t.split(",")],
                   help="comma-separated P to measure here and compare (e.g. 1,2,4)")
    output_arguments(s, "scaling.png and forward_aggregation.png")
    s = sub.add_parser("report", help="one Markdown page with charts from JSON results",
                       description="Gather the --json files of distgnn-bench subcommands into "
                                   "one Markdown page, with the charts drawn beside it.")
    s.add_argument("results", nargs="+", metavar="RESULT", help="JSON files to include")
    s.add_argument("--out", default="report.md", help="the Markdown file to write")
    from partition.assign import ORDERS

    from .bench.partition import METHODS as PARTITION_METHODS
    s = sub.add_parser("partition", formatter_class=argparse.ArgumentDefaultsHelpFormatter,
                       help="replication factor, balance and time of the partitioners",
                       description="Libra, random, DBH and (with pymetis) METIS-derived "
                                   "vertex-cuts of each dataset for each P, timed in one run.")
    s.add_argument("--dataset", action="append",
                   help="dataset or generator spec; repeat for several "
                        "(default: rmat:scale=16,edge_factor=16,features=1)")
    s.add_argument("--parts", default="2,4,8,16",
                   type=lambda t: [int(w) for w in t.split(",")],
                   help="comma-separated partition counts P")
    s.add_argument("--methods", default=",".join(PARTITION_METHODS),
                   type=lambda t: t.split(","), help="comma-separated methods")
    s.add_argument("--order", choices=ORDERS, default="random", help="Libra stream order")
    s.add_argument("--seed", type=int, default=0, help="partitioning seed")
    s.add_argument("--threads", type=int, default=os.cpu_count(), help="Numba threads")
    output_arguments(s, "partition.png")
    s = sub.add_parser("resume", formatter_class=argparse.ArgumentDefaultsHelpFormatter,
                       help="kill a rank mid-run, resume, compare with the uninterrupted run",
                       description="Failure drills on real mpirun jobs: for each P and "
                                   "algorithm, SIGKILL rank 1 after a checkpoint, time the "
                                   "job's exit, resume, and compare loss curve and final "
                                   "weights with an uninterrupted run.")
    s.add_argument("--dataset", default="cora", help="dataset or generator spec")
    s.add_argument("--ranks", default="2,4", type=lambda t: [int(w) for w in t.split(",")],
                   help="comma-separated P (more than the cores run oversubscribed)")
    s.add_argument("--algos", default="cd-0,cd-5", type=lambda t: t.split(","),
                   help="comma-separated exchanges: 0c, cd-0, cd-R (cd-r with delay R)")
    s.add_argument("--epochs", type=int, default=100, help="epochs of every run")
    s.add_argument("--checkpoint-every", type=int, default=10, help="epochs between checkpoints")
    s.add_argument("--kill-after", type=int, default=20,
                   help="kill rank 1 once the checkpoint after this many epochs exists")
    s.add_argument("--seed", type=int, default=0, help="training seed")
    s.add_argument("--hang", action="store_true",
                   help="also SIGSTOP rank 1 (a hang) and time the --comm-timeout watchdog")
    s.add_argument("--comm-timeout", type=float,
                   help="--comm-timeout of the --hang job (None: distgnn-train's default)")
    s.add_argument("--json", metavar="FILE", help="write the results here")
    return p


@interruptible("distgnn-bench")
def bench_main(argv: list[str] | None = None) -> int:
    args = bench_parser().parse_args(argv)
    from .bench import comm, epoch, partition, predict, report, resume, spmm
    from .bench.output import check_outputs

    if args.command == "epoch":
        args.dataset = args.dataset or ["rmat:scale=18,edge_factor=16,features=128"]
        unknown = (set(args.impls) - set(epoch.IMPLS)) | (set(args.models) - set(epoch.MODELS))
        if unknown:
            return fail("distgnn-bench", f"unknown model or implementation "
                                         f"{', '.join(sorted(unknown))}")
    if args.command == "partition":
        args.dataset = args.dataset or ["rmat:scale=16,edge_factor=16,features=1"]
        unknown = set(args.methods) - set(partition.METHODS)
        if unknown:
            return fail("distgnn-bench", f"unknown method(s) {', '.join(sorted(unknown))}; "
                                         f"choose from {', '.join(partition.METHODS)}")
    command = {"spmm": spmm.main, "partition": partition.main, "epoch": epoch.main,
               "comm": comm.main, "predict": predict.main, "report": report.main,
               "resume": resume.main}[args.command]

    def run():
        check_outputs(args)  # before the work, not after it
        return command(args)

    return run_guarded("distgnn-bench", run)
