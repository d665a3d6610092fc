"""A distributed run: one MPI rank per partition, and the guard against failed peers.

The guard never leaves a rank waiting for a failed peer.

:func:`open_partitions` readies one rank of ``mpirun -np P``: agree on the configuration,
place the rank (device, aggregation backend), open the communicator and load the rank's
shard (:mod:`distgnn.run.shard`); :func:`train_partitions` then trains
(:func:`distgnn.run.training.fit`).  Set-up failures are agreed on by all ranks
(:func:`distgnn.comm.all_or_none`), so every rank raises the same one-line error.  Both
raise and never abort the job: the command-line tools wrap them in :func:`run_rank`, which
aborts the whole job on a failure of one rank instead of leaving the others blocked in a
collective.
"""
from __future__ import annotations

import dataclasses
import os
import signal
import sys
import traceback
from typing import Callable

import torch

from ..comm import Communicator, RankFailed, all_or_none, get_communicator, resolve_wait
from ..comm.heartbeat import Heartbeat
from ..comm.mpi import MPICommunicator
from ..comm.watchdog import Watchdog
from ..errors import DistGNNError
from ..nn.backends import BACKENDS
from ..placement import local_size, placement
from ..signals import Terminated
from ..timing import PhaseTimer
from .config import TrainConfig
from .shard import ROW_NORM_WARNING, Shard, partition_shard
from .training import ModelFactory, TrainResult, configure_threads, fit


def threads_per_rank(comm: Communicator) -> int:
    """Cores of this node divided among the ranks on it (so ranks never share cores)."""
    return max(1, (os.cpu_count() or 1) // max(local_size(comm.size), 1))


@dataclasses.dataclass
class RankSetup:
    """One rank of a partitioned run, ready to train: its configuration, shard, the
    communicator behind its watchdog (``comm``: use it for every collective) and timer."""

    cfg: TrainConfig
    shard: Shard
    comm: Watchdog
    timer: PhaseTimer


def checked_paths(cfg: TrainConfig) -> TrainConfig:
    """``cfg`` once its output paths passed :meth:`~distgnn.run.config.TrainConfig.check_paths`."""
    cfg.check_paths()
    return cfg


def open_partitions(directory: str, config: TrainConfig | Callable[[], TrainConfig],
                    log: Callable[[str], None] = print, prog: str = "distgnn",
                    row_norm_warning: str = ROW_NORM_WARNING) -> RankSetup:
    """This rank's part of ``mpirun -np P ...`` on the partitions in ``directory``.

    ``config`` (or, if a callable, what it returns: then it is made on every rank inside
    the agreement, so a flag refused on one rank ends all of them with one line) is
    checked on every rank; rank 0 logs one line describing the run; the watchdog's errors
    name ``prog``; ``row_norm_warning`` is :func:`~distgnn.run.shard.dataset_shard`'s.
    Collective; raises :class:`~distgnn.comm.RankFailed` on every rank when set-up fails on
    any.
    """
    world = MPICommunicator()  # the job itself: agreement on set-up errors
    cfg = all_or_none(world, lambda: checked_paths(config() if callable(config) else config))
    threads = cfg.threads or threads_per_rank(world)
    configure_threads(threads)
    device, backend = all_or_none(world, lambda: placement(
        world.rank, cfg.device, cfg.backend, cfg.rank_devices, cfg.rank_backends, world.size))
    wait = resolve_wait(cfg.comm_wait, threads, world.host_ranks())
    comm = all_or_none(world, lambda: get_communicator(cfg.comm, device, wait))
    timer = PhaseTimer()
    heartbeat = Heartbeat.start(world) if cfg.comm_timeout and world.size > 1 else None
    watchdog = Watchdog(comm, cfg.comm_timeout, prog, heartbeat)
    shard = partition_shard(directory, cfg, watchdog, timer, device, backend,
                            row_norm_warning)
    places = torch.tensor([float(device.type == "cuda")]
                          + [float(backend == name) for name in BACKENDS[1:]])
    world.allreduce(places)
    if comm.rank == 0:
        schedule = shard.nbr.exchange.describe(cfg.exchange_schedule)
        others = "".join(f", {int(count)} with the {name} backend"
                         for name, count in zip(BACKENDS[1:], places[1:].tolist()) if count)
        log(f"{directory}: {comm.size} ranks ({int(places[0])} on GPUs{others}), {schedule}, "
            f"{comm.name} communicator" + (f" (waits: {wait})" if comm.name == "mpi" else ""))
    return RankSetup(cfg, shard, watchdog, timer)


def train_partitions(directory: str, config: TrainConfig | Callable[[], TrainConfig],
                     make_model: ModelFactory | None = None,
                     log: Callable[[str], None] = print, prog: str = "distgnn"
                     ) -> TrainResult:
    """One rank of ``mpirun -np P`` training on the partitions in ``directory``
    (:func:`open_partitions`, then :func:`~distgnn.run.training.fit`); returns the result on
    every rank.  ``make_model`` builds a user's model instead of ``cfg.model``."""
    run = open_partitions(directory, config, log, prog)
    return fit(run.shard, run.cfg, run.comm, run.timer, log, watchdog=run.comm,
               make_model=make_model)


def run_rank(prog: str, main: Callable[[], int], comm: Communicator | None = None) -> int:
    """``main()``'s exit status on this rank of ``comm``, never a hang of the others.

    ``comm`` is the MPI job by default.  An error all ranks agreed on ends every rank with
    one line and its exit status (2, or 128 + N after stop signal N); any other exception
    (one rank only, mid-run) is printed and aborts the whole MPI job (a stop signal that
    reached this rank outside the epochs in one line, with status 128 + N).
    """
    comm = comm if comm is not None else MPICommunicator()
    try:
        return main()
    except RankFailed as e:
        if comm.rank == 0:
            for line in str(e).splitlines():  # one line per distinct error
                print(f"{prog}: error: {line}", file=sys.stderr, flush=True)
        return e.exit_status
    except BaseException as e:  # noqa: B036 -- KeyboardInterrupt must also release the peers
        stop = (signal.SIGINT if isinstance(e, KeyboardInterrupt)
                else e.signum if isinstance(e, Terminated) else None)
        if isinstance(e, (DistGNNError, OSError)):
            print(f"{prog}: error: rank {comm.rank}: {e}", file=sys.stderr, flush=True)
        elif stop is not None:  # a stop signal to this rank, outside the epochs
            print(f"{prog}: rank {comm.rank}: {signal.Signals(stop).name} received; aborting "
                  "the job", file=sys.stderr, flush=True)
        else:
            print(f"{prog}: rank {comm.rank} failed; aborting the job", file=sys.stderr)
            traceback.print_exc()
            sys.stderr.flush()
        comm.abort(2 if isinstance(e, (DistGNNError, OSError))
                   else 1 if stop is None else 128 + stop)
        raise
