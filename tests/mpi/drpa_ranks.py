"""One rank of the DRPA checks in ``tests/test_distributed.py`` (run under mpirun).

    drpa_ranks.py DIR OUT [--comm mpi|gloo|ccl] [--ref REF.npz]
                  [--dtype float64|float32] [--delays 2,3] [--epochs 10] [--width 3]

Rank ``p`` loads partition ``p`` of ``DIR`` and writes ``OUT/rank-p.npz``:

- with ``--ref`` (an npz holding the whole graph's features ``x`` and loss weights ``g``):
  the cd-0 aggregate ``y = nbr.reduce(h, "sum")`` (training, epoch 0, key 0) of ``h = x[global_ids]``
  and the gradient ``h.grad`` of ``sum over root clones of y * g[global_ids]``, once with
  the DRPA exchange (``y``, ``grad``) and once without any exchange (``y_none``,
  ``grad_none``);
- with ``--delays``: for each ``r``, the output of ``DelayedExchange`` for epochs
  ``0..epochs-1`` on the partial aggregates ``partial(p, e, v)`` (``delayed_r``), its
  cumulative ``bytes_sent`` after each epoch (``bytes_r``), and the same schedule driven
  through ``DRPA(algo="cd-r")`` and autograd: forward output (``drpa_fwd_r``) and the
  gradient that comes back for the upstream gradient ``upstream(p, e, v)`` (``drpa_bwd_r``).
"""
import argparse
import sys
from pathlib import Path

import numpy as np
import torch

from distgnn.aggregate import Neighbourhood
from distgnn.backends import get_backend
from distgnn.comm import get_communicator
from distgnn.drpa import DRPA, DelayedExchange, SplitIndex
from distgnn.timing import PhaseTimer
from partition.format import load


def partial(rank, epoch, gids, width):
    """The partial aggregate rank ``rank`` holds at ``epoch``: distinct per rank, epoch,
    vertex and column, exact in float64.  (``test_distributed.py`` has the same formula.)"""
    base = (epoch + 1) * 10.0 ** rank + gids.astype(np.float64) / 1000
    return base[:, None] * np.arange(1, width + 1, dtype=np.float64)


def upstream(rank, epoch, gids, width):
    """The upstream gradient fed to the cd-r backward (another exact float64 function)."""
    return -2 * partial(rank, epoch, gids, width) + 0.5


def exchange_check(part, index, comm, ref, dtype, out):
    data = np.load(ref)
    gids = np.asarray(part.global_ids)
    x = torch.from_numpy(data["x"][gids]).to(dtype)
    g = torch.from_numpy(data["g"][gids]).to(dtype)
    root = torch.from_numpy(np.asarray(part.root_rank) == comm.rank)
    for suffix, exchange in (("", DRPA(index, comm, "cd-0")), ("_none", None)):
        nbr = Neighbourhood(part.graph, get_backend("torch"), global_ids=gids,
                            exchange=exchange)
        h = x.clone().requires_grad_(True)
        nbr.set_epoch(0)
        nbr.key = 0
        y = nbr.reduce(h, "sum")
        loss = (y * g)[root].sum()
        loss.backward()
        out["y" + suffix] = y.detach().numpy()
        out["grad" + suffix] = h.grad.numpy()


def delayed_check(part, index, comm, delays, epochs, width, out):
    gids = np.asarray(part.global_ids)
    for r in delays:
        d = DelayedExchange(index, r, width, comm, PhaseTimer(), torch.float64, "cpu")
        results, sent = [], []
        for e in range(epochs):
            a = torch.from_numpy(partial(comm.rank, e, gids, width))
            d(a, e)
            results.append(a.numpy())
            sent.append(d.bytes_sent)
        d.finish()
        out[f"delayed_{r}"] = np.stack(results)
        out[f"bytes_{r}"] = np.array(sent, np.int64)

        drpa = DRPA(index, comm, "cd-r", r)
        fwd, bwd = [], []
        for e in range(epochs):
            leaf = torch.from_numpy(partial(comm.rank, e, gids, width)).requires_grad_(True)
            y = drpa(leaf * 1.0, 0, e, True)  # the exchange edits y in place: not a leaf
            fwd.append(y.detach().numpy().copy())
            y.backward(torch.from_numpy(upstream(comm.rank, e, gids, width)))
            bwd.append(leaf.grad.numpy())
        drpa.finish()
        out[f"drpa_fwd_{r}"] = np.stack(fwd)
        out[f"drpa_bwd_{r}"] = np.stack(bwd)


def main(argv):
    ap = argparse.ArgumentParser()
    ap.add_argument("directory")
    ap.add_argument("out")
    ap.add_argument("--comm", default="mpi")
    ap.add_argument("--ref")
    ap.add_argument("--dtype", default="float64", choices=("float64", "float32"))
    ap.add_argument("--delays", type=lambda t: [int(r) for r in t.split(",")], default=[])
    ap.add_argument("--epochs", type=int, default=10)
    ap.add_argument("--width", type=int, default=3)
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    comm = get_communicator(args.comm)
    part = load(args.directory, comm.rank)
    index = SplitIndex.from_partition(part)
    index.check(comm, part)
    out = {"global_ids": np.asarray(part.global_ids), "size": np.array(comm.size)}
    if args.ref:
        exchange_check(part, index, comm, args.ref, getattr(torch, args.dtype), out)
    if args.delays:
        delayed_check(part, index, comm, args.delays, args.epochs, args.width, out)
    comm.barrier()
    np.savez(Path(args.out) / f"rank-{comm.rank}.npz", **out)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
