"""One rank of a distributed run: its partition as a training shard, and the failure guard.

Each rank loads only its own partition (no rank ever holds the whole graph), checks it,
and wires the split-vertex exchange into its neighbourhood: cd-0 and cd-r normalise by
the global in-degree stored at partition time, 0c by the local one.  Set-up failures are
agreed on by all ranks (:func:`distgnn.comm.all_or_none`), so every rank ends with a
clear error; a failure later in the run aborts the whole job instead of leaving the other
ranks blocked in a collective.
"""
from __future__ import annotations

import hashlib
import json
import os
import sys
import traceback
from pathlib import Path
from typing import Callable

import torch
from partition.format import PartitionFormatError, check_files, load, read_meta

from .aggregate import Neighbourhood, PhaseTimer, get_backend
from .comm import Communicator, RankFailed, all_or_none
from .drpa import DRPA, SplitIndex
from . import memory
from .errors import DistGNNError
from .train import Shard, TrainConfig, node_tensors

def threads_per_rank(comm: Communicator) -> int:
    """Cores of this node divided among the ranks on it (so ranks never share cores)."""
    local = next((int(os.environ[k]) for k in ("OMPI_COMM_WORLD_LOCAL_SIZE", "MPI_LOCALNRANKS",
                                               "SLURM_NTASKS_PER_NODE") if k in os.environ),
                 comm.size)
    return max(1, (os.cpu_count() or 1) // max(local, 1))


def partition_shard(directory: str | Path, cfg: TrainConfig, comm: Communicator,
                    timer: PhaseTimer, device: torch.device, backend: str) -> Shard:
    """Rank ``comm.rank``'s partition of ``directory`` as a shard on ``device``, aggregated
    by ``backend`` (collective)."""
    directory = Path(directory)

    def load_local():
        delay = cfg.delay_epochs
        if cfg.algo != "0c" and cfg.model == "sage" and cfg.aggregator == "max":
            raise DistGNNError("the max aggregator has no exact split-vertex exchange; "
                               "use --algo 0c or another aggregator")
        meta = read_meta(directory)
        if meta["num_parts"] != comm.size:
            raise DistGNNError(f"{directory} holds {meta['num_parts']} partitions but the job "
                               f"has {comm.size} ranks; start it with -np {meta['num_parts']}")
        if "num_classes" not in meta:  # every rank must build the same output layer
            raise PartitionFormatError(f"{directory}/meta.json: missing field 'num_classes'")
        if cfg.verify:
            problems = check_files(directory, meta, comm.rank)
            if problems:
                raise PartitionFormatError(f"{problems[0]} (`distgnn-partition verify "
                                           f"{directory}` lists every problem)")
        part = load(directory, comm.rank)
        memory.require(cfg, part.num_nodes, part.graph.num_edges, part.x.shape[1],
                       int(meta["num_classes"]), device, f"{directory} partition {comm.rank}")
        x, y, masks = node_tensors(part.x, part.y, {"train": part.train_mask,
                                                    "val": part.val_mask,
                                                    "test": part.test_mask}, cfg.feature_norm,
                                  device)
        return part, delay, x, y, masks, SplitIndex.from_partition(part)

    part, delay, x, y, masks, index = all_or_none(comm, load_local)
    index.check(comm, part)
    exchange = (None if cfg.algo == "0c"
                else DRPA(index, comm, cfg.algo, delay, timer, cfg.backward_exchange))
    nbr = Neighbourhood(part.graph, get_backend(backend),
                        in_degree=None if exchange is None else part.in_degree, timer=timer,
                        device=device, global_ids=part.global_ids, exchange=exchange)
    name = f"{part.meta.get('dataset', directory.name)} partition {comm.rank}/{comm.size}"
    files = hashlib.sha256(json.dumps(part.meta["files"], sort_keys=True).encode()).hexdigest()
    origin = (f"{comm.size} partitions of {part.meta.get('dataset', '?')} "
              f"(files sha256 {files[:16]})")
    return Shard(name, x, y, masks, nbr, int(part.meta["num_classes"]), origin)


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
