"""``python -P launch/rank.py [--watch] G COMMAND...``: what each rank runs before COMMAND.

Every rank of a job that ``distgnn-launch`` starts runs this before COMMAND:

1. It says that the rank started: the line :data:`STARTED` on stderr, which the launcher's
   copy of its stderr counts and removes.  A "launcher" that exits 0 without starting the
   ranks (``--mpirun /bin/true``) is thereby told from a job that ran.
2. With ``G > 0`` it gives the rank one GPU of its node.  Every rank of a node sees all of
   its GPUs unless told otherwise, and frameworks then put every rank on GPU 0; this sets
   ``CUDA_VISIBLE_DEVICES`` to the local rank's share: entry ``local_rank mod n`` of the
   GPUs visible to the job (``CUDA_VISIBLE_DEVICES`` if set, else ``0..G-1``).
3. It replaces itself with COMMAND (same process, so MPI sees the rank it started).

With ``--watch`` (Hydra, the launcher of MPICH and Intel MPI) it runs the steps above in a
child (this file again, without ``--watch``) and stays as its parent, to name the rank
when a signal kills it, as Open MPI's ``mpirun`` does: Hydra's own message gives a PID
only, and often another rank's (the first of those it killed itself when it took the job
down).

It runs by path, not with ``-m``, and imports no more than it needs: under Hydra the
watcher lives as long as the rank, and the ``launch`` package would bring numpy and scipy.
"""
from __future__ import annotations

import os
import resource
import signal
import subprocess
import sys

PROG = "distgnn-launch"
# \x1e (record separator) starts it: no program prints that, so the launcher may hold back
# a chunk of output that ends in one without delaying anyone's progress display
STARTED = b"\x1edistgnn-launch: rank started\n"
# What a launcher or a terminal sends a rank's process group to stop the rank or to ask for
# a checkpoint.  Hydra signals the whole group, COMMAND included, so the watcher only notes
# them (passing them on would deliver each twice: a second Ctrl-C stops distgnn-train
# without a checkpoint).
GROUP_SIGNALS = (signal.SIGHUP, signal.SIGINT, signal.SIGQUIT, signal.SIGTERM,
                 signal.SIGUSR1, signal.SIGUSR2)


def gpu_for(local: int, visible: list[str]) -> str:
    """The ``CUDA_VISIBLE_DEVICES`` entry of local rank ``local``."""
    return visible[local % len(visible)]


def watch(command: list[str]) -> int:
    """Run ``command`` as a child and end as it ended (the same status, or the same
    signal); a signal that kills it and that this process did not receive too is named
    in one line with the rank, the PID and the node."""
    received = set()
    for s in GROUP_SIGNALS:
        signal.signal(s, lambda signum, frame: received.add(signum))
    child = subprocess.Popen(command, close_fds=False)  # Hydra's PMI descriptor stays open
    status = child.wait()
    if status >= 0:
        return status
    sig = -status
    if sig not in received:
        print(f"{PROG}: error: process rank {os.environ.get('PMI_RANK', '?')} with PID "
              f"{child.pid} on node {os.uname().nodename} exited on signal {sig} "
              f"({signal.strsignal(sig)})", file=sys.stderr, flush=True)
    if sig != signal.SIGKILL:  # the one signal whose action cannot be set
        signal.signal(sig, signal.SIG_DFL)
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))  # COMMAND's core dump, not this one's
    os.kill(os.getpid(), sig)
    return 128 + sig  # not reached: the signal ends this process


def main(argv: list[str]) -> int:
    watching = argv[:1] == ["--watch"]
    argv = argv[1:] if watching else argv
    if len(argv) < 2 or not argv[0].isdecimal():
        print("usage: python -P launch/rank.py [--watch] GPUS COMMAND...", file=sys.stderr)
        return 2
    gpus, command = int(argv[0]), argv[1:]
    if watching:
        return watch([sys.executable, "-P", __file__, *argv])
    os.write(sys.stderr.fileno(), STARTED)
    if gpus:
        # here, not at the top: torch comes with it, seconds and memory a rank without
        # GPUs (and the watcher) need not spend
        from distgnn.placement import local_rank

        given = os.environ.get("CUDA_VISIBLE_DEVICES")
        visible = given.split(",") if given else [str(g) for g in range(gpus)]
        os.environ["CUDA_VISIBLE_DEVICES"] = gpu_for(local_rank(), visible)
    try:
        os.execvp(command[0], command)
    except OSError as e:
        print(f"{PROG}: error: cannot run {command[0]}: {e.strerror}", file=sys.stderr)
        return 127


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
