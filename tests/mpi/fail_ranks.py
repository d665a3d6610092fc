"""A job whose rank 1 raises mid-run while rank 0 waits in a collective (run under mpirun).

Both ranks meet at a barrier; then rank 1 raises ``RuntimeError("boom")`` and rank 0 enters
a blocking allreduce that rank 1 never joins.  :func:`distgnn.run.distributed.run_rank` must
turn the exception into an abort of the whole job instead of leaving rank 0 blocked.
"""
import sys

import torch

from distgnn.comm.mpi import MPICommunicator
from distgnn.run.distributed import run_rank


def main():
    comm = MPICommunicator()

    def body():
        comm.barrier()
        if comm.rank == 1:
            raise RuntimeError("boom")
        t = torch.ones(4)
        comm.allreduce(t)  # never completes: rank 1 is gone
        print(f"rank {comm.rank}: allreduce returned {t.tolist()}", flush=True)
        return 0

    return run_rank("probe", body, comm)


if __name__ == "__main__":
    sys.exit(main())
