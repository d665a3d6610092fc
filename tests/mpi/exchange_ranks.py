"""One rank of the transport checks of the split-vertex exchange in
``tests/test_distributed.py`` (run under mpirun).

    exchange_ranks.py DIR OUT REF.npz [--comm mpi|gloo|ccl] [--dtype float64|float32]

Rank ``p`` loads partition ``p`` of ``DIR`` and writes ``OUT/rank-p.npz``:

- from ``REF.npz`` (the whole graph's features ``x`` and loss weights ``g``): the cd-0
  aggregate ``y = nbr.reduce(h, "sum")`` (training, epoch 0, key 0) of ``h = x[global_ids]``
  and the gradient ``h.grad`` of ``sum over root clones of y * g[global_ids]``, with the
  flat exchange (``y``, ``grad``), the node-aware one with the ranks told they are on two
  nodes (``y_node``, ``grad_node``: ranks ``p < P/2`` on one), and without any (``y_none``,
  ``grad_none``);
- cd-r with delay 2 (non-blocking alltoallv in flight across epochs) through autograd
  for ``EPOCHS`` epochs (:func:`delayed_run`): the forward outputs (``cdr_fwd``), the
  gradients that come back (``cdr_bwd``) and the bytes sent (``cdr_bytes``), which the test
  compares with the same function run in one process on threads.
"""
import argparse
import sys
from pathlib import Path

import numpy as np
import torch

from distgnn.comm import get_communicator
from distgnn.data.partitions import load
from distgnn.exchange import Exchange, SplitIndex
from distgnn.nn.aggregate import Neighbourhood
from distgnn.nn.backends import get_backend

EPOCHS, WIDTH = 6, 3


def values(rank, epoch, gids, salt):
    """``[n, WIDTH]`` float64, distinct per rank, epoch, vertex, column and ``salt``."""
    base = (epoch + 1) * 10.0 ** rank + np.asarray(gids, np.float64) / 1000 + salt
    return base[:, None] * np.arange(1, WIDTH + 1, dtype=np.float64)


def exchange_check(part, index, comm, ref, dtype, out):
    data = np.load(ref)
    gids = np.asarray(part.global_ids)
    x = torch.from_numpy(data["x"][gids]).to(dtype)
    g = torch.from_numpy(data["g"][gids]).to(dtype)
    root = torch.from_numpy(np.asarray(part.root_rank) == comm.rank)
    # two nodes, so that the two-level sum splits its node and leaders' communicators off
    # this transport's and moves rows through both
    comm.node_ids = lambda: [2 * p // comm.size for p in range(comm.size)]
    for suffix, exchange in (("", Exchange(index=index, comm=comm)),
                             ("_node", Exchange(index=index, comm=comm, topology="node")),
                             ("_none", None)):
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


def delayed_run(part, index, comm) -> dict:
    """cd-r with delay 2 on ``values`` for ``EPOCHS`` epochs, forward and backward."""
    gids = np.asarray(part.global_ids)
    exchange = Exchange(index=index, comm=comm, algo="cd-r", delay=2)
    fwd, bwd, sent = [], [], []
    for e in range(EPOCHS):
        x = torch.from_numpy(values(comm.rank, e, gids, 0)).requires_grad_(True)
        y = exchange(x * 1.0, 0, e, True)  # the exchange edits y in place: not a leaf
        fwd.append(y.detach().numpy().copy())
        y.backward(torch.from_numpy(values(comm.rank, e, gids, 0.5)))
        bwd.append(x.grad.numpy())
        sent.append(exchange.total_bytes_sent)
    exchange.finish()
    return {"cdr_fwd": np.stack(fwd), "cdr_bwd": np.stack(bwd), "cdr_bytes": np.array(sent)}


def main(argv):
    ap = argparse.ArgumentParser()
    ap.add_argument("directory")
    ap.add_argument("out")
    ap.add_argument("ref")
    ap.add_argument("--comm", default="mpi")
    ap.add_argument("--wait", default="poll", choices=("poll", "sleep"))
    ap.add_argument("--dtype", default="float64", choices=("float64", "float32"))
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    comm = get_communicator(args.comm, wait=args.wait)
    part = load(args.directory, comm.rank)
    index = SplitIndex.from_partition(part)
    index.check(comm, part)
    out = {"global_ids": np.asarray(part.global_ids), "size": np.array(comm.size)}
    exchange_check(part, index, comm, args.ref, getattr(torch, args.dtype), out)
    out.update(delayed_run(part, index, comm))
    comm.barrier()
    np.savez(Path(args.out) / f"rank-{comm.rank}.npz", **out)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
