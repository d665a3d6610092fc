"""``distgnn-bench comm``: alltoallv and allreduce of each communicator, under mpirun.

Run as ``distgnn-launch -n P -- distgnn-bench comm``.  Every rank sends ``s`` bytes to every
other rank in one ``alltoallv`` (the shape of a split-vertex exchange: one block per peer), and
allreduces ``s`` bytes (the shape of the gradient sum), for sizes ``s`` from ``--min-bytes``
to ``--max-bytes``; with ``--partitions DIR`` it also times the exact cd-0 exchange of that
partitioning at ``--width`` (its per-peer counts).  Reported per communicator and size:
median seconds over ``--reps`` (max over ranks), latency-bound small sizes and bandwidth
``bytes sent per rank / time``.  A two-point fit ``t = alpha + bytes / beta`` (smallest and
largest size) is printed; ``distgnn-bench predict --network FILE`` takes this command's JSON
(its sizes, ranks and ranks per node) and derives the latency and a node link's bandwidth
from it (:func:`bench.scaling.measured_network`).
"""
from __future__ import annotations

import argparse
import statistics
import time

import torch

from bench.machine import machine_info
from bench.output import finish, output_arguments
from distgnn.comm import get_communicator, resolve_wait
from distgnn.comm.config import COMMUNICATORS, WAITS
from distgnn.program import comma_list

HELP = "alltoallv and allreduce of each communicator (under mpirun)"
DESCRIPTION = ("Latency and bandwidth of alltoallv (one block per peer, as the split-vertex "
               "exchange sends) and allreduce (as the gradient sum) for each communicator; "
               "run it under distgnn-launch -n P.")


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--comms", default=["mpi", "gloo"],
                   type=comma_list(str, COMMUNICATORS[1:]),
                   help=f"comma-separated communicators ({', '.join(COMMUNICATORS[1:])})")
    p.add_argument("--min-bytes", type=int, default=1024, help="smallest message per peer")
    p.add_argument("--max-bytes", type=int, default=16 << 20,
                   help="largest message per peer (sizes grow by 4x)")
    p.add_argument("--reps", type=int, default=10, help="timed repetitions (median)")
    p.add_argument("--partitions", metavar="DIR",
                   help="also time the cd-0 exchange of this partition directory (P ranks)")
    p.add_argument("--width", type=int, default=16,
                   help="feature width of the --partitions exchange")
    p.add_argument("--threads", type=int, default=1, help="threads per rank")
    p.add_argument("--comm-wait", choices=WAITS, default="auto",
                   help="how the mpi communicator's blocking calls wait, as distgnn-train's "
                        "--comm-wait: poll, sleep, or auto (sleep when this host's ranks "
                        "times --threads outnumber its cores)")
    output_arguments(p, "comm.png")

def timed(comm, operation, reps: int) -> float:
    """Median seconds of ``operation()`` over ``reps`` runs, the slowest rank's."""
    operation()
    times = []
    for _ in range(reps):
        comm.barrier()
        start = time.perf_counter()
        operation()
        times.append(time.perf_counter() - start)
    t = torch.tensor([statistics.median(times)], dtype=torch.float64)
    comm.allreduce(t, "max")
    return float(t[0])


def sizes(lo: int, hi: int) -> list[int]:
    out, s = [], lo
    while s <= hi:
        out.append(s)
        s *= 4
    return out


def fit_alpha_beta(points: list[tuple[int, float]]) -> tuple[float, float]:
    """``t = alpha + bytes / beta`` (seconds, bytes/s): alpha is the smallest message's time,
    beta the largest message's bytes over its time beyond alpha.  (A least-squares line is
    dominated by the large messages and puts alpha at or below zero.)"""
    (b0, t0), (b1, t1) = min(points), max(points)
    return t0, (b1 - b0) / (t1 - t0) if t1 > t0 else float("inf")


def split_counts(directory: str, rank: int) -> tuple[list[int], list[int]]:
    """Rank ``rank``'s split-vertex rows per peer in partition directory ``directory``:
    ``(leaves, leaf entries)`` (what its cd-0 exchange sends up, and down)."""
    from distgnn.data.partitions import load
    from distgnn.exchange import SplitIndex

    index = SplitIndex.from_partition(load(directory, rank))
    return index.leaf_counts, index.root_counts


def run_communicator(comm, args) -> dict:
    P = comm.size
    rows = []
    for s in sizes(args.min_bytes, args.max_bytes):
        floats = max(1, s // 4)
        send = torch.ones(P, floats)
        recv = torch.empty(P, floats)
        ones = [1] * P
        t_a2a = timed(comm, lambda: comm.alltoallv(send, ones, recv, ones), args.reps)
        grad = torch.ones(floats)
        t_ar = timed(comm, lambda: comm.allreduce(grad), args.reps)
        rows.append({"bytes": floats * 4, "alltoallv_s": t_a2a, "allreduce_s": t_ar,
                     "alltoallv_gb_s": floats * 4 * (P - 1) / t_a2a / 1e9})
    result = {"communicator": comm.name, "sizes": rows}
    if P > 1:
        result["alltoallv_alpha_s"], result["alltoallv_beta_b_s"] = fit_alpha_beta(
            [(r["bytes"] * (P - 1), r["alltoallv_s"]) for r in rows])
    if args.partitions:
        up, down = split_counts(args.partitions, comm.rank)
        leaf = torch.empty(sum(up), args.width)
        root = torch.empty(sum(down), args.width)

        def exchange():
            comm.alltoallv(leaf, up, root, down)
            comm.alltoallv(root, down, leaf, up)

        result["drpa_cd0_layer_s"] = timed(comm, exchange, args.reps)
        sent = torch.tensor([float((sum(up) + sum(down)) * args.width * 4)],
                            dtype=torch.float64)
        comm.allreduce(sent, "max")
        result["drpa_cd0_layer_bytes_max"] = int(sent[0])
    return result


def format_result(result: dict, P: int) -> str:
    lines = [f"{result['communicator']} ({P} ranks)",
             f"  {'bytes/peer':>12} {'alltoallv us':>13} {'GB/s':>7} {'allreduce us':>13}"]
    for r in result["sizes"]:
        lines.append(f"  {r['bytes']:>12,} {r['alltoallv_s'] * 1e6:>13.1f} "
                     f"{r['alltoallv_gb_s']:>7.2f} {r['allreduce_s'] * 1e6:>13.1f}")
    if "alltoallv_alpha_s" in result:
        lines.append(f"  fit: alpha {result['alltoallv_alpha_s'] * 1e6:.1f} us, beta "
                     f"{result['alltoallv_beta_b_s'] / 1e9:.2f} GB/s per rank")
    if "drpa_cd0_layer_s" in result:
        lines.append(f"  cd-0 exchange of one layer at d={result.get('width', '')}: "
                     f"{result['drpa_cd0_layer_s'] * 1e3:.2f} ms "
                     f"({result['drpa_cd0_layer_bytes_max']:,} bytes from the busiest rank)")
    return "\n".join(lines)


def main(args) -> int:
    from distgnn.comm.mpi import MPICommunicator

    wait = resolve_wait(args.comm_wait, args.threads, MPICommunicator().host_ranks())
    results, per_node = [], None
    for name in args.comms:
        comm = get_communicator(name, wait=wait)
        if per_node is None:  # what distgnn-bench predict needs of the layout
            nodes = comm.node_ids()
            per_node = max(nodes.count(n) for n in set(nodes))
        result = run_communicator(comm, args)
        result["width"] = args.width
        if comm.rank == 0:
            print(format_result(result, comm.size), flush=True)
        results.append(result)
    if comm.rank == 0:
        finish({"benchmark": "comm", "ranks": comm.size, "ranks_per_node": per_node,
                "comm_wait": wait,
                "machine": machine_info(args.threads), "results": results}, args)
    return 0

