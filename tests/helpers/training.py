"""Training in the tests: quiet, single-threaded runs (one socket, or ranks on threads)
and their loss curves."""
import threading
from unittest import mock

import numba
import torch

from distgnn.cli.train import train_parser
from distgnn.run import training
from distgnn.run.config import OWNER, TrainConfig
from distgnn.run.distributed import run_rank
from distgnn.run.shard import partition_shard
from distgnn.run.training import configure_threads, fit, train
from distgnn.timing import PhaseTimer
from tests.helpers.hostile import Outcome, captured
from tests.helpers.threads_comm import run_ranks


def train_quietly(data, log=lambda s: None, **config):
    """Single-socket training of ``data`` on one thread, without progress output."""
    return train(data, TrainConfig(progress=False, threads=1, **config), log=log)


def losses(result):
    return [r["loss"] for r in result.history]


def fit_on_threads(directory, ranks: int, cfg: TrainConfig) -> list:
    """Every rank's :class:`~distgnn.run.training.TrainResult` of training on the
    ``ranks`` partitions in ``directory`` with ranks that are threads of this process
    (:mod:`tests.helpers.threads_comm`): each builds its shard and fits as a rank of
    ``mpirun`` does, without an MPI job's start-up.  For checks of what the exchange does
    in training (bytes, schedules, wire precision, the maths against one socket, resume
    checks); the transports, signals and faults are for real jobs.

    The ranks build their models one at a time: a model is seeded and initialised from
    torch's global generator, which the threads share (processes do not)."""
    return on_threads(ranks, lambda comm: fit_rank(directory, cfg, comm))


def fit_rank(directory, cfg: TrainConfig, comm, log=lambda s: None, backend: str = "numba"):
    """One rank's shard of ``directory`` trained with ``cfg`` on aggregation ``backend``,
    its exchange finished."""
    timer = PhaseTimer()
    shard = partition_shard(directory, cfg, comm, timer, torch.device("cpu"), backend)
    try:
        return fit(shard, cfg, comm, timer, log=log)
    finally:
        shard.nbr.exchange.finish()


def train_on_threads(ranks: int, argv: list[str]) -> Outcome:
    """``distgnn-train ARGV`` (``--partitions DIR ...``) on ``ranks`` ranks that are threads
    of this process: the command's configuration (its own parser), each rank's training
    (:func:`fit_rank`) and its end as :func:`~distgnn.run.distributed.run_rank`
    makes it on each rank (rank 0's error lines on stderr); the status is the first
    failing rank's, as mpirun's."""
    args = train_parser().parse_args([*argv, "--no-progress"])

    def rank(comm):
        def main():
            cfg = TrainConfig(**{name: getattr(args, name) for name in OWNER})
            cfg.check_paths()
            fit_rank(args.partitions, cfg, comm, log=print)
            return 0
        return run_rank("distgnn-train", main, comm)

    return captured(lambda: next((s for s in on_threads(ranks, rank) if s), 0))


def on_threads(ranks: int, work) -> list:
    """``work(comm)`` on ``ranks`` ranks that are threads (one torch thread each), their
    models built one at a time (see :func:`fit_on_threads`)."""
    # the ranks launch parallel kernels at once: Numba's layers that allow it (omp, tbb;
    # workqueue aborts the process), in effect where none was launched in it yet
    numba.config.THREADING_LAYER = "threadsafe"
    configure_threads(1)
    one_at_a_time = threading.Lock()

    def place_model(*args, **kwargs):
        with one_at_a_time:
            return unseeded(*args, **kwargs)

    unseeded = training.place_model
    with mock.patch.object(training, "place_model", place_model):
        return run_ranks(ranks, work)
