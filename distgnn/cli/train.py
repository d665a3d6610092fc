"""Command-line entry points ``distgnn-train`` and ``distgnn-bench``.

User errors (bad files, bad flags, mismatched checkpoints) end with one line on stderr,
``PROG: error: ...``, and exit status 2; no traceback.
"""
from __future__ import annotations

import argparse
import dataclasses
import statistics

from ..program import (
    DefaultsHelpFormatter,
    OneLineParser,
    check_outputs_spare_inputs,
    dataset_file_flags,
    interruptible,
    load_dataset,
    peak_memory_line,
    refuse_dataset_flags,
    run_guarded,
    say,
    use_huge_pages,
    vertex_output_flags,
)

# Heavy modules (torch, numba) are imported inside the functions: an entry point must stay
# light to import, so that Ctrl-C during start-up meets its handler (distgnn.program.interruptible).


def _data_flags(p: argparse.ArgumentParser, d) -> None:
    from ..data.ordering import CHOICES as ORDER_CHOICES

    g = p.add_argument_group("data")
    g.add_argument("--dataset",
                   help="bundled name (cora, the default), NAME.npz on $DISTGNN_DATA_PATH, "
                        "path to an .npz, an OGB node-property directory, an edge-list file, "
                        "or a generator spec such as rmat:scale=18,edge_factor=16")
    g.add_argument("--split", type=int, default=0,
                   help="which fixed split to use when the dataset ships several")
    dataset_file_flags(g)
    g.add_argument("--partitions", metavar="DIR",
                   help="train under MPI on a directory written by distgnn-partition, one "
                        "rank per partition (instead of --dataset)")
    g.add_argument("--verify", action=argparse.BooleanOptionalAction, default=d.verify,
                   help="with --partitions: check the size and SHA-256 of each rank's files "
                        "at start-up")
    g.add_argument("--reorder", nargs="?", const="auto", default=d.reorder, metavar="ORDER",
                   choices=ORDER_CHOICES,
                   help="with --dataset: relabel the vertices once on load in a locality order "
                        "for cache reuse in aggregation: degree (most-read feature rows "
                        "first), rcm (reverse Cuthill-McKee), auto (the default of a bare "
                        "--reorder: timed trial when the features outgrow the last-level "
                        "cache) or given (no relabelling, the default). Metrics, ROC-AUC, "
                        "dropout masks and checkpoints stay in the dataset's own ids. "
                        "Partitions are ordered by distgnn-partition --order-vertices")
    g.add_argument("--feature-norm", choices=("row", "none"), default=d.feature_norm,
                   help="row: divide each feature row by its L1 norm (Kipf & Welling)")


def _model_flags(p: argparse.ArgumentParser, d) -> None:
    from ..nn.backends import AGGREGATION_PRECISIONS
    from ..nn.models import MODELS
    from ..nn.sage_conv import SAGE_AGGREGATORS
    from ..run.config import DEFAULT_HIDDEN, DTYPES, GAT_CHANNELS_PER_HEAD

    g = p.add_argument_group("model")
    g.add_argument("--model", choices=MODELS, default=d.model,
                   help="gcn: GCN (Kipf & Welling); sage: GraphSAGE; gin: GIN (Xu et al.); "
                        "gat: GAT (Velickovic et al.), --heads heads on hidden layers, one on "
                        "the last, ELU between; gcnii: deep residual GCNII (Chen et al.), "
                        "--layers propagation layers between two linear layers")
    g.add_argument("--aggregator", choices=SAGE_AGGREGATORS, default=d.aggregator,
                   help="GraphSAGE aggregator; gcn = (sum of neighbours + self) / (degree + 1); "
                        "max/min are exchanged exactly under cd-0 (not with cd-r)")
    g.add_argument("--layers", type=int, default=d.layers, help="number of GNN layers")
    g.add_argument("--heads", type=int, default=d.heads,
                   help="GAT: attention heads of each hidden layer (--hidden is their "
                        "concatenated width, so a multiple of this)")
    g.add_argument("--train-eps", action="store_true",
                   help="GIN: learn epsilon (else fixed at 0)")
    g.add_argument("--alpha", type=float, default=d.alpha,
                   help="GCNII: weight of the initial residual")
    g.add_argument("--theta", type=float, default=d.theta,
                   help="GCNII: identity-mapping strength (beta_l = log(theta / l + 1))")
    g.add_argument("--recompute", action="store_true",
                   help="keep only each layer's input for the backward pass and run the layer "
                        "again there (activation checkpointing): activation memory of one "
                        "tensor per layer for about a third more compute; cd-0 and 0c only")
    g.add_argument("--hidden", type=int,
                   help=f"hidden width (default: {DEFAULT_HIDDEN}; GAT: "
                        f"{GAT_CHANNELS_PER_HEAD} per head, {GAT_CHANNELS_PER_HEAD * 8} with "
                        "8 heads)")
    g.add_argument("--dropout", type=float, default=d.dropout,
                   help="dropout probability before each layer")
    g.add_argument("--residual", action="store_true",
                   help="skip connections on hidden-to-hidden layers")
    g.add_argument("--precompute-first-aggregation", dest="precompute_first",
                   action="store_true",
                   help="no dropout on the input features, and the first layer's aggregation "
                        "of them computed (and exchanged) once (SGC/MG-GCN): cd-r then leaves "
                        "only later layers stale; not with the max aggregator")
    g.add_argument("--dtype", choices=DTYPES, default=d.dtype,
                   help="floating-point type of features, weights, activations and the "
                        "exchanged partials; float64 is for checking results against a "
                        "reference (about 2x the memory and time)")
    g.add_argument("--aggregation-precision", choices=AGGREGATION_PRECISIONS,
                   default=d.aggregation_precision,
                   help="what sum/mean aggregations gather, forward and backward: fp32, or "
                        "bf16 (features and gradients rounded to bf16, accumulated in fp32: "
                        "half the bytes the Numba kernels move; max/min stay fp32; the "
                        "activations kept for the backward pass are stored in bf16 too)")
    g.add_argument("--no-kernel-trial", dest="kernel_trial", action="store_false",
                   help="take the Numba SpMM's untimed plan (no hub blocking) instead of "
                        "timing a few block sizes per feature width on graphs of 2M edges "
                        "or more: the trial costs about 20 SpMMs per width (20-40 s on 31M "
                        "edges) and gains 10-20 %% per SpMM, worth it over many epochs, not "
                        "for a run of a few")


def _optimisation_flags(p: argparse.ArgumentParser, d) -> None:
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
    g.add_argument("--roc-auc", action="store_true",
                   help="also report each split's ROC-AUC at every evaluation (binary tasks, "
                        "e.g. tolokers, whose published figures are ROC-AUC)")
    g.add_argument("--patience", type=int, default=d.patience,
                   help="stop after this many evaluations without a better validation "
                        "accuracy (0: never stop early)")


def _distributed_flags(p: argparse.ArgumentParser, d) -> None:
    from ..comm import COMMUNICATORS, WAITS
    from ..exchange import ALGORITHMS, PRECISIONS, TOPOLOGIES
    from ..run.config import DEFAULT_DELAY, DEFAULT_SCHEDULE_PRECISION

    g = p.add_argument_group("distributed (with --partitions)")
    g.add_argument("--algo", choices=ALGORITHMS, default=d.algo,
                   help="split-vertex exchange: cd-0 exact every layer (forward and "
                        "backward), cd-r delayed by r epochs and overlapped, 0c none")
    g.add_argument("--delay", type=int, default=d.delay,
                   help=f"r of cd-r: bins of split vertices, each refreshed every r epochs "
                        f"(default {DEFAULT_DELAY} with --smoothing). Without --delay, "
                        f"--smoothing and --comm-budget, cd-r runs its default schedule: "
                        f"each epoch either exact (every split row, on a "
                        f"{DEFAULT_SCHEDULE_PRECISION} wire) or stale (the last exact epoch's "
                        f"remote partials reused, nothing sent), as a controller decides from "
                        f"the training loss")
    g.add_argument("--smoothing", type=float, default=d.smoothing, metavar="GAMMA",
                   help="cd-r staleness correction (PipeGCN): each arriving stale partial or "
                        "gradient m updates the kept one as s <- GAMMA*s + (1-GAMMA)*m; "
                        "0 keeps the latest arrival")
    g.add_argument("--comm-budget", type=float, default=d.comm_budget, metavar="F",
                   help="cd-r with an adaptive schedule instead of bins: each epoch send the "
                        "partials that changed most since last sent, F x cd-0's bytes "
                        "(positions included; F >= 1.1 sends everything, i.e. delay 1)")
    g.add_argument("--exchange-precision", choices=PRECISIONS, default=d.exchange_precision,
                   help="how training exchanges travel: fp32 (the run's own type), bf16, or "
                        "int8/int4/int2 with a power-of-two scale per 32 values, each "
                        "compressed form with error feedback (cd-0 is then no longer exact); "
                        f"default {DEFAULT_SCHEDULE_PRECISION} under cd-r's default schedule, "
                        "else fp32")
    g.add_argument("--comm", choices=COMMUNICATORS, default=d.comm,
                   help="communicator: mpi (mpi4py on host buffers; GPU tensors are staged "
                        "through pinned memory), gloo, nccl (every rank on a GPU) or ccl "
                        "(needs oneccl_bindings_for_pytorch) over torch.distributed; auto: "
                        "nccl when every rank is on a GPU, else mpi")
    g.add_argument("--comm-wait", choices=WAITS, default=d.comm_wait,
                   help="how a rank of the mpi communicator waits in a blocking collective: "
                        "poll (inside MPI, which keeps its core busy; the lowest latency) or "
                        "sleep (tests the request and sleeps between tests, 20 to 200 us, "
                        "leaving its core to ranks still computing); auto (default): sleep "
                        "when this host's ranks times threads outnumber its cores (an "
                        "oversubscribed node, or an emulated cluster's nodes sharing one "
                        "host), else poll")
    g.add_argument("--exchange-topology", choices=TOPOLOGIES, default=d.exchange_topology,
                   help="node: the exact sums over clones (cd-0's training exchanges, every "
                        "algorithm's evaluation) add up within each node first, and one row "
                        "per vertex and node crosses the network, one message per node pair "
                        "(nodes: MPI's shared-memory split); flat: every clone's row goes to "
                        "its root; auto: node when the job spans several nodes and some node "
                        "holds several ranks, else flat")
    g.add_argument("--backward-exchange", action=argparse.BooleanOptionalAction,
                   default=d.backward_exchange,
                   help="exchange split-vertex gradients in the backward pass (exact); "
                        "--no-backward-exchange reproduces DGL's inexact cd-0, for comparison")


def _execution_and_output_flags(p: argparse.ArgumentParser, d) -> None:
    from ..placement import BACKEND_CHOICES, DEVICES

    g = p.add_argument_group("execution and output")
    g.add_argument("--backend", choices=BACKEND_CHOICES, default=d.backend,
                   help="aggregation kernels: numba (cache-blocked CPU kernels), torch "
                        "(torch.sparse, any device), triton (deterministic GPU kernels) or "
                        "auto (triton on a GPU, torch there without Triton; else numba)")
    g.add_argument("--device", choices=DEVICES, default=d.device,
                   help="where each rank computes: cpu, cuda (the local rank's GPU) or auto "
                        "(cuda when the rank sees a GPU)")
    g.add_argument("--rank-devices", metavar="R:DEV,...",
                   help="per-rank --device for the ranks named, e.g. 0:cpu,1:cuda (a job "
                        "may mix CPU and GPU ranks)")
    g.add_argument("--rank-backends", metavar="R:BACKEND,...",
                   help="per-rank --backend for the ranks named, e.g. 1:triton,3:triton")
    g.add_argument("--threads", type=int, default=d.threads,
                   help="torch and Numba threads (None: the libraries' own defaults on one "
                        "socket; under MPI, this node's cores divided by its ranks)")
    g.add_argument("--metrics-out", metavar="FILE",
                   help="write one JSON object per epoch (loss, accuracies, epoch_s, phases)")
    g.add_argument("--progress", action=argparse.BooleanOptionalAction, default=d.progress,
                   help="a progress bar when stderr is a terminal (log lines otherwise)")


def _results_flags(p: argparse.ArgumentParser, d) -> None:
    from ..run.config import FINAL_WEIGHTS

    g = p.add_argument_group(
        "results (written when the run ends; under MPI into a directory every rank sees, "
        "each vertex once, by the rank of its root clone)")
    g.add_argument("--save-model", metavar="FILE",
                   help="the trained model: weights and the configuration that rebuilds "
                        "them, one file torch.load(FILE, weights_only=True) reads; "
                        "distgnn.load_model(FILE) rebuilds the module, distgnn-predict "
                        "applies it")
    g.add_argument("--final-weights", choices=FINAL_WEIGHTS, default=d.final_weights,
                   help="which weights the model file, predictions and embeddings come "
                        "from: best (the evaluation of best validation accuracy, whose test "
                        "accuracy is reported) or last (the last epoch's)")
    vertex_output_flags(g, d.embeddings_layer)


def _checkpoints_and_failures_flags(p: argparse.ArgumentParser, d) -> None:
    from ..run.config import NAN_POLICIES

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
    resume = g.add_mutually_exclusive_group()
    resume.add_argument("--resume", metavar="DIR",
                        help="continue from the newest intact checkpoint in DIR (refused if "
                             "it comes from other data, another model shape, another rank "
                             "count or exchange); --epochs stays the total; new checkpoints "
                             "go to DIR too unless --checkpoint-dir says otherwise")
    resume.add_argument("--resume-if-present", metavar="DIR",
                        help="as --resume DIR when DIR holds a checkpoint, else (no DIR, or "
                             "none in it) a new run, checkpointing into DIR unless "
                             "--checkpoint-dir says otherwise: one command line for the first "
                             "start and every restart, as a requeued batch job needs "
                             "(another run's checkpoint is refused as with --resume)")
    g.add_argument("--nan-policy", choices=NAN_POLICIES, default=d.nan_policy,
                   help="on a non-finite loss or gradient: stop (naming the epoch and "
                        "ranks, after checkpointing the last good state) or skip the step")
    g.add_argument("--comm-timeout", type=float, default=d.comm_timeout, metavar="S",
                   help="with --partitions: abort the job when a rank waits longer than S "
                        "seconds in one collective (a peer died or hangs); armed after the "
                        "first epoch; 0 disables")


def train_parser() -> argparse.ArgumentParser:
    """``distgnn-train``'s flags, in groups; defaults are :class:`TrainConfig`'s."""
    from ..run.config import TrainConfig

    d = TrainConfig()
    p = OneLineParser(
        prog="distgnn-train",
        description="Full-batch GNN training for node classification: on one socket "
                    "(--dataset), or under MPI with one rank per partition "
                    "(distgnn-launch -n P -- distgnn-train --partitions DIR: the launcher "
                    "finds the MPI and sets what it needs). With neither, trains GCN on the "
                    "bundled Cora graph.",
        formatter_class=DefaultsHelpFormatter)
    _data_flags(p, d)
    _model_flags(p, d)
    _optimisation_flags(p, d)
    _distributed_flags(p, d)
    _execution_and_output_flags(p, d)
    _results_flags(p, d)
    _checkpoints_and_failures_flags(p, d)
    return p


@interruptible("distgnn-train")
def train_main(argv: list[str] | None = None) -> int:
    use_huge_pages()
    args = train_parser().parse_args(argv)
    from ..errors import DistGNNError
    from ..run.config import OUTPUT_FLAGS, TrainConfig
    from ..run.distributed import run_rank, train_partitions
    from ..run.training import train

    def config():
        if args.partitions:  # what partitions hold already, or what applies to one socket
            if args.reorder != "given":
                raise DistGNNError("--reorder applies to --dataset; partitions keep the order "
                                   "distgnn-partition --order-vertices gave them")
            refuse_dataset_flags(args, "split")
        check_outputs_spare_inputs(args, {f"--{flag}": getattr(args, flag.replace("-", "_"))
                                          for flag in OUTPUT_FLAGS})
        return TrainConfig(**{f.name: getattr(args, f.name)
                              for f in dataclasses.fields(TrainConfig) if hasattr(args, f.name)})

    if args.partitions:  # every rank checks the flags; rank 0 reports once
        from ..comm.mpi import MPICommunicator

        world = MPICommunicator()

        def one_rank():
            result = train_partitions(args.partitions, config, log=say, prog="distgnn-train")
            if world.rank == 0:
                report(result)
            return 0

        return run_guarded("distgnn-train", lambda: run_rank("distgnn-train", one_rank, world))
    cfg = run_guarded("distgnn-train", config)
    if isinstance(cfg, int):
        return cfg

    def run():
        data = load_dataset(args, split=cfg.split)
        print(data.summary(), flush=True)
        result = train(data, cfg)
        report(result)
        if data.note:
            print(f"note: {data.note}")
        return 0

    return run_guarded("distgnn-train", run)


def report(result) -> None:
    """The run's summary lines: median epoch and phases, best test accuracy."""
    times = [r["epoch_s"] for r in result.history]
    phases = {k: statistics.median(r["phases"][k] for r in result.history)
              for k in result.history[0]["phases"]}
    print(f"median epoch {statistics.median(times) * 1e3:.1f} ms  ("
          + ", ".join(f"{k} {v * 1e3:.1f}" for k, v in phases.items() if v) + " ms)")
    sent = statistics.median(r["bytes_sent_max"] for r in result.history)
    exchange = result.summary.get("exchange")
    if exchange is not None:
        line = (f"split-vertex exchange ({exchange['schedule']}): {sent / 1e6:.2f} MB sent per "
                f"epoch by the busiest rank")
        if exchange["bytes_vs_cd0"] is not None:
            line += f", {exchange['bytes_vs_cd0']:.3f}x cd-0's bytes"
        if "stale_epochs" in exchange:
            line += (f"; {exchange['stale_epochs']} epochs 1 epoch stale, "
                     f"{exchange['exact_epochs']} exact")
        print(line)
    print(f"training loss: longest rise {result.summary['longest_loss_rise']} epochs in a row")
    last = result.history[-1]
    print(peak_memory_line(last["peak_rss_mib_max"], last["peak_rss_mib_mean"]))
    best = result.best
    if best.get("test_acc") is not None:
        print(f"test accuracy {best['test_acc'] * 100:.2f} % at epoch {best['epoch']} "
              f"(best validation accuracy {best['val_acc'] * 100:.2f} %)")
    for what, path in result.summary.get("saved", {}).items():
        print(f"{what} written to {path} ({result.summary['weights']} weights)")


