"""The compute rates of one rank, for the scaling model (:mod:`bench.scaling`).

A rank's epoch computes its local aggregation (its ``E_p`` edges), the dense layers (its
``n_p`` vertices) and the optimizer step.  Their rates are measured here by training a graph
of that size for a few epochs and taking the median phases (the first epoch excluded: it
compiles and allocates):

.. math::
    a = t_{aggregation} / E, \\qquad u = t_{dense} / n, \\qquad o = t_{optimizer}

(forward and backward together).  What a rank computes on is its *partition*
(:func:`partition_graphs`): a graph of its own local edges, vertices and features, whose
sizes set how well it uses the caches, so the rates of a job of ``P`` ranks are measured on
that job's partitions.  Ranks that share a host slow each other: they divide its cores and
its memory bandwidth.  :func:`host_rates` therefore trains ``R`` partitions at once in ``R``
processes, as the ``R`` ranks of one host run, and keeps the slowest of each rate (the rank
an epoch waits for); each process compiles its kernels first, and the measured epochs
start together once all have; of two such measurements, the faster counts.
"""
from __future__ import annotations

import dataclasses
import itertools
import multiprocessing
import queue

import numpy as np

from distgnn.data.graph import NodeDataset
from distgnn.errors import DistGNNError

__all__ = ["RATE_EPOCHS", "directory_graphs", "fitted_rates", "host_rates"]

# epochs each rate measurement trains (the first, which allocates, is not counted): beside
# other processes, fewer left the median at the mercy of when each one started and ended
RATE_EPOCHS = 8
# measurements of processes at once, the fastest kept: the first processes a program starts
# ran 1.4-1.6x slower than those it starts after them (tolokers' 4 partitions on 2 cores,
# 2026-11-27; the cause was not found)
HOST_TRIALS = 2


@dataclasses.dataclass
class Rates:
    """Seconds per unit on one rank of ``T`` threads (see the module docstring)."""

    aggregation_per_edge: float  # forward + backward, all layers
    dense_per_vertex: float  # forward + backward, all layers
    optimizer: float  # one step
    triad_bytes_s: float


def measure_rates(data: NodeDataset, cfg) -> Rates:
    """Train ``cfg`` on ``data`` in this process for ``cfg.epochs`` epochs; the rates from
    the median phases."""
    from bench.machine import triad_bandwidth
    from distgnn.run.training import train

    result = train(data, cfg, log=lambda s: None)
    records = result.history[1:]  # the first epoch compiles and allocates
    med = lambda key: float(np.median([r["phases"][key] for r in records]))  # noqa: E731
    return Rates(aggregation_per_edge=med("aggregation") / max(data.graph.num_edges, 1),
                 dense_per_vertex=med("dense") / data.graph.num_nodes,
                 optimizer=med("optimizer"), triad_bytes_s=triad_bandwidth() * 1e9)


def fitted_rates(samples: list[tuple[int, int, float]], triad_bytes_s: float) -> Rates:
    """Rates fitted to whole epochs of graphs that differ in edges per vertex.

    For a device whose phases are not timed apart (a GPU computes asynchronously):
    ``samples`` of ``(n, E, t_epoch)`` fitted by least squares to ``t = u n + a E`` (the
    optimizer and fixed costs fall into ``u``; with two samples the fit is exact)."""
    a_matrix = np.array([[n, e] for n, e, _ in samples], dtype=np.float64)
    (u, a), *_ = np.linalg.lstsq(a_matrix, np.array([t for *_, t in samples]), rcond=None)
    return Rates(aggregation_per_edge=max(float(a), 0.0), dense_per_vertex=max(float(u), 0.0),
                 optimizer=0.0, triad_bytes_s=triad_bytes_s)


def partition_graphs(data: NodeDataset, layout, count: int) -> list[NodeDataset]:
    """Partitions ``0 .. count - 1`` of ``layout`` (a vertex cut of ``data``), each as a graph
    of its own: its local CSR, and ``data``'s features, labels and masks at its vertices."""
    from partition.layout import partition_arrays

    graph = data.graph
    return [partition_graph(arrays, data.num_classes, f"{data.name} partition {p}")
            for p, arrays in itertools.islice(
                partition_arrays(layout, graph.indptr, graph.indices, data), count)]


def directory_graphs(directory, count: int) -> list[NodeDataset]:
    """Partitions ``0 .. count - 1`` of a partition directory, each as a graph of its own."""
    from distgnn.data.partitions import load, read_meta

    classes = int(read_meta(directory)["num_classes"])
    out = []
    for p in range(count):
        part = load(directory, p, mmap=False)
        out.append(partition_graph(
            {"indptr": part.graph.indptr, "indices": part.graph.indices, "x": part.x,
             "y": part.y}, classes,
            f"{directory} partition {p}"))
    return out


def partition_graph(arrays: dict, num_classes: int, name: str) -> NodeDataset:
    """A partition's arrays (:func:`partition.layout.part_arrays`' names) as a dataset to
    time, in which every labelled vertex trains (a rank's loss covers its roots' only, a
    difference of a few vector operations)."""
    from distgnn.data.graph import CSRGraph

    indptr, indices = np.asarray(arrays["indptr"]), np.asarray(arrays["indices"])
    y = np.asarray(arrays["y"])
    train = y >= 0
    if not train.any():
        raise DistGNNError(f"{name} has no labelled vertex to train on: its rates cannot be "
                           "measured")
    none = np.zeros(len(y), bool)
    return NodeDataset(CSRGraph(indptr, indices, len(indptr) - 1), np.asarray(arrays["x"]),
                       y, train, none, none, num_classes, name=name)


def _measure_beside_others(data: NodeDataset, cfg, barrier, results) -> None:
    """One of :func:`host_rates`' processes: one epoch to compile the kernels, then, once
    every process has, the measured run (a process still compiling would leave the others
    more of the cores than a job's ranks get)."""
    from distgnn.run.training import configure_threads, train

    configure_threads(cfg.threads)
    train(data, cfg.replace(epochs=1, eval_every=1), log=lambda s: None)
    barrier.wait()
    results.put(dataclasses.asdict(measure_rates(data, cfg)))


def host_rates(graphs: list[NodeDataset], cfg, trials: int = HOST_TRIALS) -> Rates:
    """The rates of ``len(graphs)`` ranks sharing this host: each graph trained by a process
    of its own, all started together; the slowest of each rate, in the faster of ``trials``
    such measurements.  One graph is measured in this process."""
    if len(graphs) == 1:
        return measure_rates(graphs[0], cfg)
    measured = [_processes_at_once(graphs, cfg) for _ in range(trials)]
    return min(measured, key=lambda r: r.aggregation_per_edge * graphs[0].graph.num_edges
               + r.dense_per_vertex * graphs[0].graph.num_nodes)


def _processes_at_once(graphs: list[NodeDataset], cfg) -> Rates:
    """One measurement of :func:`host_rates`."""
    ctx = multiprocessing.get_context("spawn")  # torch and Numba threads do not survive fork
    barrier, results = ctx.Barrier(len(graphs)), ctx.Queue()
    workers = [ctx.Process(target=_measure_beside_others, args=(g, cfg, barrier, results),
                           daemon=True) for g in graphs]
    for w in workers:
        w.start()
    got = []
    while len(got) < len(graphs):
        try:
            got.append(results.get(timeout=1.0))
        except queue.Empty:
            failed = [w.exitcode for w in workers if w.exitcode not in (None, 0)]
            if failed:
                for w in workers:
                    w.kill()
                raise DistGNNError(f"measuring the rates of {len(graphs)} ranks at once: a "
                                   f"process failed (exit status {failed[0]})") from None
    for w in workers:
        w.join()
    slowest = {k: max(r[k] for r in got) for k in got[0]}
    slowest["triad_bytes_s"] = min(r["triad_bytes_s"] for r in got)
    return Rates(**slowest)
