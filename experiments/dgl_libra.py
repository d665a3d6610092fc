"""DGL's own Libra (``dgl.distgnn.partition``'s C++ ``libra_vertex_cut``) on this machine:
replication factor, edge balance and seconds, in the columns of ``distgnn-bench partition``.

Runs in a separate environment holding DGL (PyPI ``dgl`` 2.1.0 with the CPU ``torch``), not
in this project's one::

    python -m venv /work/dglenv
    /work/dglenv/bin/pip install dgl==2.1.0 torch "setuptools<70" torchdata==0.9.0 pandas
    # (dgl 2.1.0 ships no graphbolt for torch > 2.2: its load_graphbolt() call was wrapped
    #  in try/except in that environment; Libra does not use graphbolt)
    python -c "from distgnn.data.datasets import load; import numpy as np; \
        g = load('rmat:scale=20,edge_factor=16,features=1').graph; \
        np.savez('/tmp/rmat20.npz', indptr=g.indptr, indices=g.indices)"
    /work/dglenv/bin/python experiments/dgl_libra.py /work/shared/datasets/tolokers.npz \
        /work/shared/datasets/squirrel_filtered.npz /tmp/rmat20.npz --parts 2,4,8,16

Each ``.npz`` holds a CSR (``indptr``, ``indices``; rows = destinations).  DGL streams
every CSR entry as its own edge ``(indices[e], row(e))`` (the two directions of an
undirected edge are two items), in CSR order (``--order given``) or a seeded permutation
(``--order random``).  Replication factor = ``sum_p n_p / N`` with ``n_p`` the vertices
holding an edge in ``p``, an isolated vertex counting once (as ``partition.stats`` does);
edge balance = ``max_p E_p / mean_p E_p``.  Seconds are those of the one C++ call, which
also writes each partition's edge list as text (to a tmpfs directory here): an upper bound
on its assignment time.
"""
from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path

import numpy as np
import torch
from dgl._sparse_ops import libra_vertex_cut


def dgl_libra(indptr, indices, num_parts, order, seed):
    """``(part, seconds)``: DGL's Libra partition of every CSR entry, int32 ``[E]``."""
    n, num_edges = len(indptr) - 1, len(indices)
    dst = np.repeat(np.arange(n, dtype=np.int64), np.diff(indptr))
    src = indices.astype(np.int64)
    stream = (np.arange(num_edges) if order == "given" else
              np.random.default_rng(seed).permutation(num_edges))
    u, v = torch.from_numpy(src[stream]), torch.from_numpy(dst[stream])
    degree = torch.from_numpy(np.bincount(src, minlength=n) + np.diff(indptr))
    out = torch.zeros(num_edges, dtype=torch.int32)
    with tempfile.TemporaryDirectory(dir="/dev/shm" if os.path.isdir("/dev/shm") else None) as d:
        start = time.perf_counter()
        libra_vertex_cut(num_parts, degree, degree.clone(),
                         torch.zeros(num_parts, dtype=torch.int64), u, v,
                         torch.ones(num_edges, dtype=torch.int64), out, n, num_edges, d)
        seconds = time.perf_counter() - start
    part = np.empty(num_edges, np.int32)
    part[stream] = out.numpy()
    return part, seconds


def replication(indptr, indices, part, num_parts):
    """``(replication factor, edge balance)`` of the vertex-cut ``part``."""
    n = len(indptr) - 1
    dst = np.repeat(np.arange(n, dtype=np.int64), np.diff(indptr))
    ends = np.concatenate([indices.astype(np.int64), dst]) * num_parts + np.tile(part, 2)
    clones = np.bincount(np.unique(ends) // num_parts, minlength=n)
    edges = np.bincount(part, minlength=num_parts)
    return float(np.maximum(clones, 1).mean()), float(edges.max() / edges.mean())


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("graphs", nargs="+", type=Path, help=".npz files holding indptr, indices")
    p.add_argument("--parts", default="2,4,8,16", help="comma-separated partition counts P")
    p.add_argument("--order", choices=("given", "random"), default="given")
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args()
    print(f"{'dataset':>24} {'P':>4} {'method':>9} {'repl.':>7} {'edge bal.':>9} "
          f"{'seconds':>8} {'ns/edge':>8}")
    for path in args.graphs:
        z = np.load(path)
        indptr, indices = z["indptr"], z["indices"]
        for num_parts in map(int, args.parts.split(",")):
            part, seconds = dgl_libra(indptr, indices, num_parts, args.order, args.seed)
            rf, balance = replication(indptr, indices, part, num_parts)
            print(f"{path.stem:>24} {num_parts:>4} {'dgl-libra':>9} {rf:>7.3f} {balance:>9.3f} "
                  f"{seconds:>8.2f} {1e9 * seconds / len(indices):>8.0f}", flush=True)


if __name__ == "__main__":
    main()
