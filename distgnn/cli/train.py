"""``distgnn-train``: parse, train, report.

User errors (bad files, bad flags, mismatched checkpoints) end with one line on stderr,
``PROG: error: ...``, and exit status 2; no traceback.
"""
from __future__ import annotations

import argparse
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
)

# Heavy modules (torch, numba) are imported inside the functions: an entry point must stay
# light to import, so that Ctrl-C during start-up meets its handler (distgnn.program.interruptible).


# --help's groups: a title and the parts of the configuration whose options it shows
GROUPS = (("model", ("network",)), ("optimisation", ("optimisation",)),
          ("distributed (with --partitions)", ("exchange", "communication")),
          ("execution", ("execution",)),
          ("evaluation and results (written when the run ends; under MPI into a directory "
           "every rank sees, each vertex once, by the rank of its root clone)", ("outputs",)),
          ("checkpoints", ("checkpoints",)))


def train_parser() -> argparse.ArgumentParser:
    """``distgnn-train``'s flags: the data to read, then every option of
    :class:`~distgnn.run.config.TrainConfig`, part by part (their flags, defaults and help
    are declared with the options)."""
    from ..options import add_options
    from ..run.config import PARTS

    p = OneLineParser(
        prog="distgnn-train",
        description="Full-batch GNN training for node classification: on one socket "
                    "(--dataset), or under MPI with one rank per partition "
                    "(distgnn-launch -n P -- distgnn-train --partitions DIR: the launcher "
                    "finds the MPI and sets what it needs). With neither, trains GCN on the "
                    "bundled Cora graph.",
        formatter_class=DefaultsHelpFormatter)
    g = p.add_argument_group("data")
    g.add_argument("--dataset",
                   help="bundled name (cora, the default), NAME.npz on $DISTGNN_DATA_PATH, "
                        "path to an .npz, an OGB node-property directory, an edge-list file, "
                        "or a generator spec such as rmat:scale=18,edge_factor=16")
    dataset_file_flags(g)
    g.add_argument("--partitions", metavar="DIR",
                   help="train under MPI on a directory written by distgnn-partition, one "
                        "rank per partition (instead of --dataset)")
    add_options(g, PARTS["data"])
    for title, parts in GROUPS:
        g = p.add_argument_group(title)
        for part in parts:
            add_options(g, PARTS[part])
    return p


@interruptible("distgnn-train")
def train_main(argv: list[str] | None = None) -> int:
    use_huge_pages()
    args = train_parser().parse_args(argv)
    from ..errors import DistGNNError
    from ..run.config import OUTPUT_FLAGS, OWNER, TrainConfig
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
        cfg = TrainConfig(**{name: getattr(args, name) for name in OWNER})
        if not args.partitions:  # before the data is read
            cfg.check_single_socket()
        cfg.check_paths()
        return cfg

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
    """The run's summary lines: median epoch and phases, best test accuracy.

    Times and bytes are the median of this run's epochs: a resumed run's history holds the
    earlier run's too, which may have run on another rank count."""
    resumed = result.summary.get("resumed_after", 0)
    own = result.history[resumed:]
    if own:  # none: a requeued job whose checkpoint was its last epoch
        _report_epochs(own, resumed, result.summary.get("exchange"))
    print(f"training loss: longest rise {result.summary['longest_loss_rise']} epochs in a row")
    last = result.history[-1]
    print(peak_memory_line(last["peak_rss_mib_max"], last["peak_rss_mib_mean"]))
    best = result.best
    if best.get("test_acc") is not None:
        print(f"test accuracy {best['test_acc'] * 100:.2f} % at epoch {best['epoch']} "
              f"(best validation accuracy {best['val_acc'] * 100:.2f} %)")
    for what, path in result.summary.get("saved", {}).items():
        print(f"{what} written to {path} ({result.summary['weights']} weights)")


def _report_epochs(own: list[dict], resumed: int, exchange: dict | None) -> None:
    """The median epoch and phases of this run's epochs ``own``, and the exchange's bytes."""
    phases = {k: statistics.median(r["phases"][k] for r in own) for k in own[0]["phases"]}
    which = (f"this run's {len(own)} epochs (resumed after epoch {resumed})" if resumed
             else f"{len(own)} epochs")
    print(f"median epoch {statistics.median(r['epoch_s'] for r in own) * 1e3:.1f} ms over "
          f"{which}  (" + ", ".join(f"{k} {v * 1e3:.1f}" for k, v in phases.items() if v)
          + " ms)")
    if exchange is not None:
        sent = statistics.median(r["bytes_sent_max"] for r in own)
        line = (f"split-vertex exchange ({exchange['schedule']}): {sent / 1e6:.2f} MB sent per "
                f"epoch by the busiest rank")
        if exchange["bytes_vs_cd0"] is not None:
            line += f", {exchange['bytes_vs_cd0']:.3f}x cd-0's bytes"
        if "stale_epochs" in exchange:
            line += (f"; {exchange['stale_epochs']} epochs 1 epoch stale, "
                     f"{exchange['exact_epochs']} exact")
        print(line)
        if "warning" in exchange:
            print(f"warning: {exchange['warning']}")


