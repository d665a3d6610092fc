"""``distgnn-bench partition``: replication factor, balance and time per method and P.

Methods: this project's ``libra``, ``hdrf``, ``random``, ``dbh`` and ``ne``
(:func:`partition.assign.assign_edges`), and ``metis``: a METIS edge-cut (``pymetis``, when
installed) turned into a vertex-cut by giving each edge to its destination's part and
counting the clones that creates.  Each is timed in two parts from the loaded graph:
the assignment of every CSR entry (also given in ns per entry, ``1e9 * seconds / E``) and
the layout built from it (:func:`partition.layout.build_layout`); writing is excluded.
The peak memory of each is what the process's resident memory rose to above what it held
before (``VmHWM`` reset through ``/proc/self/clear_refs``): the cut's own working memory
besides the loaded graph.
"""
from __future__ import annotations

import argparse
import importlib.util
import os
import time

import numpy as np

from bench.machine import machine_info
from bench.output import finish, output_arguments
from distgnn.data.datasets import load
from distgnn.data.partitions import EDGE_ORDERS
from distgnn.program import comma_list
from distgnn.run.memory import process_mib
from partition.assign import assign_edges, stream_order_name
from partition.layout import build_layout
from partition.stats import counts_from_layout, summarize

METHODS = ("libra", "hdrf", "random", "dbh", "ne", "metis")
DEFAULT_DATASET = "rmat:scale=16,edge_factor=16,features=1"
HELP = "replication factor, balance and time of the partitioners"
DESCRIPTION = ("Libra, HDRF, random, DBH, neighbourhood expansion and (with pymetis) "
               "METIS-derived vertex-cuts of each "
               "dataset for each P, timed in one run.")


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--dataset", action="append",
                   help=f"dataset or generator spec; repeat for several (default: "
                        f"{DEFAULT_DATASET})")
    p.add_argument("--parts", default=[2, 4, 8, 16], type=comma_list(int),
                   help="comma-separated partition counts P")
    p.add_argument("--methods", default=list(METHODS), type=comma_list(str, METHODS),
                   help="comma-separated methods")
    p.add_argument("--order", choices=EDGE_ORDERS,
                   help="Libra and HDRF stream order (default: each method's own)")
    p.add_argument("--seed", type=int, default=0, help="partitioning seed")
    p.add_argument("--threads", type=int, default=os.cpu_count(), help="Numba threads")
    output_arguments(p, "partition.png")


def metis_assign(graph, num_parts: int, seed: int) -> np.ndarray:
    """Partition of every CSR entry from the METIS edge-cut of ``graph``: its dst's part."""
    import pymetis

    # METIS wants a symmetric adjacency without self-loops
    sym = graph.symmetrize().remove_self_loops()
    options = pymetis.Options(seed=seed)
    _, vertex_part = pymetis.part_graph(num_parts, xadj=sym.indptr, adjncy=sym.indices,
                                        options=options)
    return np.repeat(np.asarray(vertex_part, np.int32), np.diff(graph.indptr))


def reset_peak() -> float | None:
    """Restart the process's peak resident memory (``VmHWM``) at its present size; that
    size in MiB, or None where the kernel refuses (then no peak is measured)."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
    except OSError:
        return None
    return process_mib("VmRSS")


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
             f"{'root bal.':>9} {'split %':>8} {'ns/edge':>8} {'layout s':>8} {'seconds':>8} " \
             f"{'peak MiB':>8}"
    print(header)
    for spec in args.dataset:
        data = load(spec)
        graph = data.graph
        tiny = (np.array([0, 1, 2], graph.indptr.dtype), np.array([1, 0], graph.indices.dtype))
        for method in set(methods) - {"metis"}:  # compile outside the timings
            build_layout(*tiny, assign_edges(*tiny, 2, method), 2, "balanced", 0)
        for P in args.parts:
            for method in methods:
                before = reset_peak()
                start = time.perf_counter()
                part = (metis_assign(graph, P, args.seed) if method == "metis" else
                        assign_edges(graph.indptr, graph.indices, P, method, args.seed,
                                     args.order))
                assigned = time.perf_counter()
                layout = build_layout(graph.indptr, graph.indices, part, P, "balanced",
                                      args.seed)
                done = time.perf_counter()
                # the kernel batches its resident-page counts, so the peak of a cut that
                # added nothing can read a little below the size at the reset
                peak = None if before is None else max(0.0, process_mib("VmHWM") - before)
                clones = layout.clones()
                stats = summarize(counts_from_layout(layout), graph.num_nodes,
                                  int(np.count_nonzero(clones > 1)))
                row = {"dataset": data.name, "num_nodes": graph.num_nodes,
                       "num_edges": graph.num_edges, "parts": P, "method": method,
                       "order": stream_order_name(method, args.order),
                       "seconds": done - start, "assign_seconds": assigned - start,
                       "layout_seconds": done - assigned,
                       "ns_per_edge": 1e9 * (assigned - start) / max(graph.num_edges, 1),
                       "peak_mib": peak,
                       **{k: stats[k] for k in ("replication_factor", "edge_balance",
                                                "root_balance", "split_fraction")}}
                rows.append(row)
                print(f"{data.name:>24} {P:>4} {method:>7} {row['replication_factor']:>7.3f} "
                      f"{row['edge_balance']:>9.3f} {row['root_balance']:>9.3f} "
                      f"{100 * row['split_fraction']:>8.1f} {row['ns_per_edge']:>8.0f} "
                      f"{row['layout_seconds']:>8.2f} {row['seconds']:>8.2f} "
                      f"{'-' if peak is None else f'{peak:.0f}':>8}", flush=True)
    return {"benchmark": "partition", "order": args.order, "seed": args.seed,
            "machine": machine_info(args.threads), "results": rows}


def main(args) -> int:
    args.dataset = args.dataset or [DEFAULT_DATASET]
    finish(run(args), args)
    return 0
