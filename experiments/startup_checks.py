"""What the split-table checks cost at start-up, against the partition load they follow.

    distgnn-partition rmat:scale=20,edge_factor=16 --parts 8 --out runs/rmat20-p8
    distgnn-launch -n 8 -- python experiments/startup_checks.py runs/rmat20-p8

Each rank times, between barriers, (a) loading its partition and building its tensors (what
``distgnn-train --partitions`` does first) and (b) :meth:`distgnn.exchange.SplitIndex.check`;
rank 0 prints the maxima over ranks and their ratio (median of ``--repeats``).
"""
from __future__ import annotations

import argparse
import statistics
import time

import torch

from distgnn.comm import get_communicator
from distgnn.exchange import SplitIndex
from distgnn.run.shard import node_tensors
from partition import load


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("directory")
    p.add_argument("--repeats", type=int, default=3)
    a = p.parse_args()
    comm = get_communicator("mpi")
    rows = []
    for _ in range(a.repeats):
        comm.barrier()
        t0 = time.perf_counter()
        part = load(a.directory, comm.rank)
        node_tensors(part.x, part.y, {"train": part.train_mask}, "row")
        index = SplitIndex.from_partition(part)
        comm.barrier()
        t1 = time.perf_counter()
        index.check(comm, part)
        comm.barrier()
        t2 = time.perf_counter()
        times = torch.tensor([t1 - t0, t2 - t1], dtype=torch.float64)
        comm.allreduce(times, "max")
        rows.append(times.tolist())
    if comm.rank == 0:
        load_s = statistics.median(r[0] for r in rows)
        check_s = statistics.median(r[1] for r in rows)
        print(f"{comm.size} ranks: load {load_s:.3f} s, split-table checks {check_s:.3f} s "
              f"({100 * check_s / load_s:.1f} % of the load)")


if __name__ == "__main__":
    main()
