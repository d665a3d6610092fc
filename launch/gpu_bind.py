"""``python -m launch.gpu_bind G COMMAND...``: run COMMAND on one GPU of this node.

Every rank of a node sees all of its GPUs unless told otherwise, and frameworks then put
every rank on GPU 0.  This wrapper, which :func:`launch.plan` puts in front of each rank's
command when the node has GPUs, sets ``CUDA_VISIBLE_DEVICES`` to the local rank's share:
entry ``local_rank mod n`` of the GPUs visible to the job (``CUDA_VISIBLE_DEVICES`` if
set, else ``0..G-1``), then replaces itself with COMMAND (same process, so MPI sees the
rank it started).
"""
from __future__ import annotations

import os
import sys

from distgnn.placement import local_rank


def gpu_for(local: int, visible: list[str]) -> str:
    """The ``CUDA_VISIBLE_DEVICES`` entry of local rank ``local``."""
    return visible[local % len(visible)]


def main(argv: list[str]) -> int:
    if len(argv) < 2 or not argv[0].isdigit() or int(argv[0]) < 1:
        print("usage: python -m launch.gpu_bind GPUS COMMAND...", file=sys.stderr)
        return 2
    gpus, command = int(argv[0]), argv[1:]
    given = os.environ.get("CUDA_VISIBLE_DEVICES")
    visible = given.split(",") if given else [str(g) for g in range(gpus)]
    os.environ["CUDA_VISIBLE_DEVICES"] = gpu_for(local_rank(), visible)
    try:
        os.execvp(command[0], command)
    except OSError as e:
        print(f"launch.gpu_bind: cannot run {command[0]}: {e.strerror}", file=sys.stderr)
        return 127


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
