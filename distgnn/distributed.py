"""A distributed run: one MPI rank per partition, and the guard that never leaves a rank
waiting for a failed peer.

:func:`train_partitions` is what ``mpirun -np P distgnn-train --partitions DIR`` runs on each
rank: agree on the configuration, place the rank (device, aggregation backend), open the
communicator, load the rank's shard (:mod:`distgnn.shard`), and train (:func:`distgnn.train.fit`).
Set-up failures are agreed on by all ranks (:func:`distgnn.comm.all_or_none`), so every rank
ends with the same one-line error; a failure later in the run aborts the whole job instead
of leaving the other ranks blocked in a collective.
"""
from __future__ import annotations

import os
import sys
import traceback
from typing import Callable

import torch

from .comm import Communicator, RankFailed, all_or_none, get_communicator
from .comm.heartbeat import Heartbeat
from .comm.mpi import MPICommunicator
from .comm.watchdog import Watchdog
from .config import TrainConfig
from .errors import DistGNNError
from .placement import local_size, placement
from .shard import partition_shard
from .timing import PhaseTimer
from .train import ModelFactory, TrainResult, configure_threads, fit


def threads_per_rank(comm: Communicator) -> int:
    """Cores of this node divided among the ranks on it (so ranks never share cores)."""
    return max(1, (os.cpu_count() or 1) // max(local_size(comm.size), 1))


def train_partitions(directory: str, config: Callable[[], TrainConfig],
                     report: Callable[[TrainResult], None],
                     make_model: ModelFactory | None = None,
                     prog: str = "distgnn-train") -> int:
    """One rank of ``mpirun -np P distgnn-train --partitions DIR``: ``config()`` makes the
    run's configuration (checked on every rank), rank 0 hands the result to ``report``;
    ``make_model`` builds a user's model instead of ``cfg.model`` (see
    :func:`~distgnn.train.model_and_optimizer`); errors are printed as ``prog``'s.
    Returns the rank's exit status."""
    world = MPICommunicator()  # the job itself: agreement on set-up errors, and abort

    def main():
        cfg = all_or_none(world, config)
        configure_threads(cfg.threads or threads_per_rank(world))
        device, backend = all_or_none(world, lambda: placement(
            world.rank, cfg.device, cfg.backend, cfg.rank_devices, cfg.rank_backends))
        comm = all_or_none(world, lambda: get_communicator(cfg.comm, device))
        timer = PhaseTimer()
        heartbeat = Heartbeat.start(world) if cfg.comm_timeout and world.size > 1 else None
        watchdog = Watchdog(comm, cfg.comm_timeout, prog, heartbeat)
        shard = partition_shard(directory, cfg, watchdog, timer, device, backend)
        places = torch.tensor([float(device.type == "cuda"), float(backend == "torch")])
        world.allreduce(places)
        if comm.rank == 0:
            delay = ("" if cfg.algo != "cd-r" else f" (adaptive, budget {cfg.comm_budget})"
                     if cfg.comm_budget is not None else f" (delay {shard.nbr.exchange.delay})")
            print(f"{directory}: {comm.size} ranks ({int(places[0])} on GPUs, "
                  f"{int(places[1])} with the torch backend), {cfg.algo}{delay}, "
                  f"{comm.name} communicator", flush=True)
        result = fit(shard, cfg, watchdog, timer, watchdog=watchdog, make_model=make_model)
        if comm.rank == 0:
            report(result)
        return 0

    return run_rank(prog, world, main)


def run_rank(prog: str, comm: Communicator, main: Callable[[], int]) -> int:
    """``main()``'s exit status on this rank, never a hang of the others.

    An error all ranks agreed on ends every rank with one line and its exit status (2, or
    128 + N after stop signal N); any other exception (one rank only, mid-run) is printed
    and aborts the whole MPI job.
    """
    try:
        return main()
    except RankFailed as e:
        if comm.rank == 0:
            for line in str(e).splitlines():  # one line per distinct error
                print(f"{prog}: error: {line}", file=sys.stderr, flush=True)
        return e.exit_status
    except BaseException as e:  # noqa: B036 -- KeyboardInterrupt must also release the peers
        if isinstance(e, (DistGNNError, OSError)):
            print(f"{prog}: error: rank {comm.rank}: {e}", file=sys.stderr, flush=True)
        else:
            print(f"{prog}: rank {comm.rank} failed; aborting the job", file=sys.stderr)
            traceback.print_exc()
            sys.stderr.flush()
        comm.abort(2 if isinstance(e, (DistGNNError, OSError)) else 1)
        raise
