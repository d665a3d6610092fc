"""One rank of the model checks in ``tests/test_distributed.py`` (run under mpirun).

    model_ranks.py DIR OUT CONFIGS

Trains, one after another in the same job (one start-up for all), each configuration of
the JSON object ``CONFIGS`` (name -> ``TrainConfig`` fields) on partition ``rank`` of
``DIR``; rank 0 writes ``OUT/NAME.json`` with the run's history.
"""
import json
import sys
from pathlib import Path

import torch

from distgnn.comm.mpi import MPICommunicator
from distgnn.run.config import TrainConfig
from distgnn.run.shard import partition_shard
from distgnn.run.training import configure_threads, fit
from distgnn.timing import PhaseTimer


def main(directory: str, out: str, configs: str) -> None:
    comm = MPICommunicator()
    configure_threads(1)
    for name, flags in json.loads(configs).items():
        cfg = TrainConfig(**flags)
        timer = PhaseTimer()
        shard = partition_shard(directory, cfg, comm, timer, torch.device("cpu"), "numba")
        result = fit(shard, cfg, comm, timer, log=lambda s: None)
        shard.nbr.exchange.finish()
        if comm.rank == 0:
            (Path(out) / f"{name}.json").write_text(json.dumps(result.history))


if __name__ == "__main__":
    main(*sys.argv[1:4])
