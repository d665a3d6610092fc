"""``distgnn-bench partition``: replication factor, balance and time per method and P.

Methods: this project's ``libra``, ``random`` and ``dbh`` (:func:`partition.vertex_cut`,
timed from the loaded graph to the finished layout, writing excluded), and ``metis``: a
METIS edge-cut (``pymetis``, when installed) turned into a vertex-cut by giving each edge
to its destination's part and counting the clones that creates, timed the same way.
"""
from __future__ import annotations

import argparse
import importlib.util
import os
import time

import numpy as np

from partition.assign import ORDERS
from partition.layout import build_layout
from partition.stats import counts_from_layout, summarize
from partition.vertex_cut import vertex_cut

from ..cli_common import comma_list
from ..datasets import load
from .machine import machine_info
from .output import finish, output_arguments

METHODS = ("libra", "random", "dbh", "metis")
DEFAULT_DATASET = "rmat:scale=16,edge_factor=16,features=1"
HELP = "replication factor, balance and time of the partitioners"
DESCRIPTION = ("Libra, random, DBH and (with pymetis) METIS-derived vertex-cuts of each dataset "
               "for each P, timed in one run.")


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--dataset", action="append",
                   help=f"dataset or generator spec; repeat for several (default: "
                        f"{DEFAULT_DATASET})")
    p.add_argument("--parts", default=[2, 4, 8, 16], type=comma_list(int),
                   help="comma-separated partition counts P")
    p.add_argument("--methods", default=list(METHODS), type=comma_list(str, METHODS),
                   help="comma-separated methods")
    p.add_argument("--order", choices=ORDERS, default="random", help="Libra stream order")
    p.add_argument("--seed", type=int, default=0, help="partitioning seed")
    p.add_argument("--threads", type=int, default=os.cpu_count(), help="Numba threads")
    output_arguments(p, "partition.png")


def metis_vertex_cut(graph, num_parts: int, seed: int):
    """Layout of the METIS edge-cut of ``graph`` seen as a vertex-cut (edge -> dst's part)."""
    import pymetis

    # METIS wants a symmetric adjacency without self-loops
    sym = graph.symmetrize().remove_self_loops()
    options = pymetis.Options(seed=seed)
    _, vertex_part = pymetis.part_graph(num_parts, xadj=sym.indptr, adjncy=sym.indices,
                                        options=options)
    vertex_part = np.asarray(vertex_part, np.int32)
    part = np.repeat(vertex_part, np.diff(graph.indptr))
    return build_layout(graph.indptr, graph.indices, part, num_parts, "balanced", seed)


def run(args) -> dict:
    import numba

    numba.set_num_threads(min(args.threads, numba.config.NUMBA_NUM_THREADS))
    methods = [m for m in args.methods if m != "metis"]
    if "metis" in args.methods:
        if importlib.util.find_spec("pymetis"):
            methods.append("metis")
        else:
            print("pymetis is not installed (pip install '.[bench]'): skipping metis")
    rows = []
    header = f"{'dataset':>24} {'P':>4} {'method':>7} {'repl.':>7} {'edge bal.':>9} " \
             f"{'root bal.':>9} {'split %':>8} {'seconds':>8}"
    print(header)
    for spec in args.dataset:
        data = load(spec)
        graph = data.graph
        vertex_cut(graph, 1, "libra")  # compile outside the timings
        for P in args.parts:
            for method in methods:
                start = time.perf_counter()
                layout = (metis_vertex_cut(graph, P, args.seed) if method == "metis" else
                          vertex_cut(graph, P, method, args.seed, args.order))
                seconds = time.perf_counter() - start
                clones = layout.clones()
                stats = summarize(counts_from_layout(layout), graph.num_nodes,
                                  int(np.count_nonzero(clones > 1)))
                row = {"dataset": data.name, "num_nodes": graph.num_nodes,
                       "num_edges": graph.num_edges, "parts": P, "method": method,
                       "seconds": seconds,
                       **{k: stats[k] for k in ("replication_factor", "edge_balance",
                                                "root_balance", "split_fraction")}}
                rows.append(row)
                print(f"{data.name:>24} {P:>4} {method:>7} {row['replication_factor']:>7.3f} "
                      f"{row['edge_balance']:>9.3f} {row['root_balance']:>9.3f} "
                      f"{100 * row['split_fraction']:>8.1f} {seconds:>8.2f}", flush=True)
    return {"benchmark": "partition", "order": args.order, "seed": args.seed,
            "machine": machine_info(args.threads), "results": rows}


def main(args) -> int:
    args.dataset = args.dataset or [DEFAULT_DATASET]
    finish(run(args), args)
    return 0
