"""``distgnn-bench phases``: each phase of a training epoch against the machine's limit.

One process trains ``--model`` on ``--dataset`` with this project's trainer (the Numba
kernels, the memory arena): ``--warmup`` epochs untimed, ``--epochs`` epochs timed (the
epoch's time, the aggregation's from the trainer's phase timer), then ``--epochs`` epochs
under torch's profiler (which slows every operator's call: it gives the other phases'
operators, their own times, flops and shapes).  The same run measures the machine's two
limits on ``--threads`` threads (the triad before and after the epochs, the better):
the float32 matrix-product rate (``torch.mm`` of two ``--matmul-size`` square matrices,
:func:`bench.machine.matmul_gflops`) and the streaming bandwidth (STREAM triad,
:func:`bench.machine.triad_bandwidth`).  Each phase of the epoch, per epoch:

* **aggregation**: the SpMM kernels, forward and backward (the trainer's own phase timer);
  the bytes each call needs: the graph's indices, one gathered row per edge, the output (and,
  for a fused loop sum, the vertex's own row) in the element size of the rows it reads and
  writes (:class:`CountingBackend`), against the triad bandwidth.
* **matrix products**: the profiler's ``aten::mm``, ``addmm``, ``bmm`` and ``baddbmm``
  (their own time; flops as the profiler counts them, ``2 m k n``), against the
  matrix-product rate (of bf16 products under ``--precision bf16-mixed``); and against
  their roofline: a product of ``[m, k] x [k, n]`` cannot take less than
  ``max(2 m k n / rate, (m k + k n + m n) * itemsize / triad)`` seconds, so a product with
  few columns may be bound by its bytes rather than by the rate (``roofline_fraction``: the
  sum of these bounds over the measured time).
* **elementwise**: every other operator that computes (bias, activation, dropout masks,
  sums, the loss, their gradients), and this project's elementwise kernels (the keyed
  dropout, the fused bias-ReLU-dropout epilogue, the self-loop normalisation, the masked
  cross-entropy), forward and backward (the epilogue that also makes the last layer's
  narrow projection, with that product's time); against the triad bandwidth by the bytes
  the work *needs* (:func:`elementwise_needed_bytes`: each step fused into the pass that
  makes its input), so that a pass the code makes of its own lowers the fraction.  Its
  bound (``bound_fraction``) adds the folded projection's flops at the matrix-product rate
  (:func:`folded_projection_flops`): ``needed bytes / triad + flops / rate`` over the
  measured time.  The bytes the operators themselves read and write (their inputs, one
  output the size of the largest) are reported beside it (``moved_gb_per_epoch``).  GCN and
  GraphSAGE only; for the other models the operators' bytes stand in for the needed ones.
* **optimizer**: the operators inside the optimizer's step, by the bytes the operators read
  and write.

``fraction`` is the achieved rate over the limit that applies; what no phase holds
(Python, autograd's bookkeeping, and the profiler's overhead on the operators' times) is
``other``.  One process has no exchange and no
gradient sum: those phases are those of a distributed run (``docs/exchange.md``).
"""
from __future__ import annotations

import argparse
import math
import os
import time
from contextlib import contextmanager

import torch

from bench.machine import machine_info, matmul_gflops, triad_bandwidth
from bench.output import finish, output_arguments
from bench.spmm import moved_bytes
from distgnn.comm import SelfCommunicator
from distgnn.data.datasets import load
from distgnn.nn.backends import LINEAR
from distgnn.nn.models import GNN
from distgnn.placement import PRECISIONS
from distgnn.run.config import TrainConfig
from distgnn.run.replicas import ReplicaSync
from distgnn.run.shard import dataset_shard
from distgnn.run.training import (
    configure_threads,
    epoch_arena,
    in_arena,
    model_and_optimizer,
    step,
    training_vertices,
)
from distgnn.timing import PhaseTimer

HELP = "each phase of an epoch against the machine's matmul rate and bandwidth"
DESCRIPTION = ("Profile training epochs of this project's trainer and report each phase "
               "(aggregation, matrix products, elementwise, optimizer) as a fraction of "
               "the machine's limit that applies to it, both limits measured in the same run.")
DEFAULT_DATASET = "rmat:scale=18,edge_factor=16,features=128"
# this project's elementwise kernels: autograd functions, not aten operators
# (the epilogue that also makes the last layer's projection counts here with that product)
ELEMENTWISE_KERNELS = {"VertexDropout", "BiasReLUDropout", "BiasReLUDropoutProject",
                       "SelfLoopNorm", "MaskedCrossEntropy"}
MATMULS = {"aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm"}
# operators that move no data (views, flags, allocation): no bytes
NO_DATA = {"aten::resolve_conj", "aten::resolve_neg", "aten::view", "aten::reshape",
           "aten::_reshape_alias", "aten::t", "aten::transpose", "aten::as_strided",
           "aten::expand", "aten::detach", "aten::empty", "aten::empty_like",
           "aten::empty_strided", "aten::unsqueeze", "aten::squeeze", "aten::select",
           "aten::slice", "aten::permute", "aten::alias", "aten::_unsafe_view",
           "aten::lift_fresh", "aten::result_type", "aten::is_nonzero", "aten::item",
           "aten::_local_scalar_dense"}
# bytes per element of the profiler's dtype names; others (e.g. complex) count as 4
ITEMSIZE = {"float": 4, "double": 8, "c10::Half": 2, "c10::BFloat16": 2, "long int": 8,
            "int": 4, "short int": 2, "bool": 1, "unsigned char": 1, "signed char": 1}


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--dataset", default=DEFAULT_DATASET, help="dataset or generator spec")
    p.add_argument("--model", choices=("sage", "gcn", "gin", "gcnii"), default="sage",
                   help="the model (sage: GraphSAGE with the gcn aggregator)")
    p.add_argument("--hidden", type=int, default=256, help="hidden width")
    p.add_argument("--layers", type=int, default=2, help="number of layers")
    p.add_argument("--dropout", type=float, default=0.5, help="dropout probability")
    p.add_argument("--warmup", type=int, default=2,
                   help="untimed epochs first (the first compiles the kernels, times their "
                        "plans and plans the memory arena)")
    p.add_argument("--epochs", type=int, default=3, help="profiled epochs")
    p.add_argument("--threads", type=int, default=os.cpu_count(), help="threads")
    p.add_argument("--precision", choices=PRECISIONS, default="fp32",
                   help="the trainer's --precision; under bf16-mixed the matrix products are "
                        "measured against the bf16 product's rate")
    p.add_argument("--matmul-size", type=int, default=4096,
                   help="side of the square matrices whose product measures the machine's "
                        "matrix-product rate (smaller ones run below it)")
    output_arguments(p, "phases.png")


class CountingBackend:
    """An aggregation backend that adds up the bytes its aggregations need.

    It counts forward and backward, and otherwise is ``inner``.

    An SpMM needs its indices, one gathered row per edge and its output
    (:func:`bench.spmm.moved_bytes`); a fused loop sum (``propagate``) also the vertex's
    own row, in the element size of its rows (2 for bf16 rows in and out)."""

    def __init__(self, inner):
        self.inner, self.bytes = inner, 0

    def __getattr__(self, name):
        return getattr(self.inner, name)

    def itemsize(self, x, reduce) -> int:
        """Bytes per gathered element: 2 where the kernels gather bf16 rows."""
        return 2 if getattr(self.inner, "bf16", False) and reduce in LINEAR else x.element_size()

    def spmm(self, graph, x, reduce):
        self.bytes += moved_bytes(graph, x.shape[1], self.itemsize(x, reduce))
        return self.inner.spmm(graph, x, reduce)

    def spmm_backward(self, graph, grad_y, reduce, arg):
        self.bytes += moved_bytes(graph.transpose(), grad_y.shape[1],
                                  self.itemsize(grad_y, reduce))
        return self.inner.spmm_backward(graph, grad_y, reduce, arg)

    def propagate(self, graph, x, source_scale, row_scale, transposed=False):
        g, size = (graph.transpose() if transposed else graph), x.element_size()
        # the indices, a row per edge, and the self row and the output in the rows' size
        self.bytes += g.indices.nbytes + (g.num_edges + 2 * g.num_nodes) * x.shape[1] * size
        return self.inner.propagate(graph, x, source_scale, row_scale, transposed)


def elementwise_needed_bytes(cfg: TrainConfig, n: int, num_features: int, num_classes: int
                             ) -> int | None:
    """Bytes an epoch's elementwise work needs at least (``None``: not GCN or GraphSAGE).

    Every step is taken as fused into the pass that makes its input.

    Per hidden layer of width ``H``: forward, its product read and its activation written
    (bias, ReLU and the next dropout in that pass) and a bit per element kept; backward, the
    gradient and the bits read and the gradient written: ``2 (2 N H s + N H / 8)`` with
    ``s`` the activations' element size (2 under bf16-mixed, else 4).  The input dropout:
    the features read and written (``2 N F s``, when it drops).  The loss: the logits read
    and their gradient written in float32, with the labels and the mask (``8 N C + 9 N``).
    The normalisations, the self-loops and the last layer's bias need no pass of their
    own (they fit into the aggregation's, or the loss's)."""
    if cfg.model not in ("gcn", "sage"):
        return None
    s = 2 if cfg.precision == "bf16-mixed" else 4
    hidden = (cfg.layers - 1) * (2 * (2 * n * cfg.hidden * s + n * cfg.hidden // 8))
    dropout = 2 * n * num_features * s if cfg.dropout else 0
    return hidden + dropout + 8 * n * num_classes + 9 * n


def folded_projection_flops(model, n: int, hidden: int, num_classes: int) -> int:
    """Flops of the last layer's narrow projection that the epilogue before it makes.

    ``0`` where it does not (:meth:`~distgnn.nn.models.GNN.projects_last`: GCN and
    GraphSAGE-gcn of two or more layers with ``C`` below the hidden width ``H``).  There
    the hidden layer's epilogue multiplies each row by ``W`` ``[C, H]`` while it is in
    registers (:mod:`distgnn.kernels.projection`): ``z = h W^T`` forward, ``g W`` and
    ``g^T h`` backward, ``3 x 2 N H C`` an epoch, a matrix product's flops timed inside the
    elementwise phase."""
    if not (isinstance(model, GNN) and model.projects_last()):
        return 0
    return 6 * n * hidden * num_classes


def operator_bytes(event) -> int:
    """Bytes an operator reads (its tensor inputs) and writes (one output the size of its
    largest input)."""
    sizes = [math.prod(shape) * n for shape, n in tensor_sizes(event)]
    return sum(sizes) + max(sizes, default=0)


def tensor_sizes(event) -> list[tuple[list[int], int]]:
    """(shape, bytes per element) of each tensor input of a profiled operator."""
    return [(shape, ITEMSIZE.get(dtype, 4))
            for shape, dtype in zip(event.input_shapes, event.input_dtypes)
            if isinstance(shape, list) and shape and all(isinstance(n, int) for n in shape)]


def product_bytes(event) -> int:
    """Bytes a matrix product must move at least: its operands (and an ``addmm``'s bias)
    read once, its output ``[..., m, n]`` written once."""
    sizes = tensor_sizes(event)
    (a, itemsize), (b, _) = [t for t in sizes if len(t[0]) >= 2][-2:]
    return sum(math.prod(shape) * n for shape, n in sizes) + math.prod(a[:-1]) * b[-1] * itemsize


def split_profile(events) -> dict:
    """Seconds, flops and bytes of the profiled operators by phase: ``matmul``,
    ``elementwise`` and ``optimizer`` (operators inside the ``optimizer`` range); for
    ``matmul`` also ``products``, the (flops, bytes) of each product."""
    totals = {phase: {"s": 0.0, "flops": 0, "bytes": 0}
              for phase in ("matmul", "elementwise", "optimizer")}
    totals["matmul"]["products"] = []
    for event in events:
        if event.name.removesuffix("Backward") in ELEMENTWISE_KERNELS:
            t = totals["elementwise"]  # with the operators it calls (buffers, views)
            t["s"] += event.cpu_time_total / 1e6
            t["bytes"] += operator_bytes(event)
            continue
        if event.is_user_annotation or not event.name.startswith("aten::"):
            continue
        parent, phase = event, None
        while parent is not None and phase is None:
            if parent.name.removesuffix("Backward") in ELEMENTWISE_KERNELS:
                phase = "kernel"  # counted with the kernel
            elif parent.name.startswith("aggregation"):
                phase = "aggregation"  # the SpMM's own operators: timed as aggregation
            elif parent.name == "optimizer":
                phase = "optimizer"
            elif parent.name in MATMULS:
                phase = "matmul"  # with the operators a product calls
            parent = parent.cpu_parent
        if phase in ("aggregation", "kernel"):
            continue
        t = totals[phase or "elementwise"]
        t["s"] += event.self_cpu_time_total / 1e6
        t["flops"] += event.flops or 0
        if event.name in MATMULS:
            t["products"].append((event.flops or 0, product_bytes(event)))
        if phase != "matmul" and not event.cpu_children and event.name not in NO_DATA:
            t["bytes"] += operator_bytes(event)
    return totals


class ProfiledTimer(PhaseTimer):
    """The trainer's phase timer, each phase also a profiler range of its name."""

    @contextmanager
    def __call__(self, name: str):
        with torch.profiler.record_function(name), super().__call__(name):
            yield


def profile_epochs(args) -> dict:
    cfg = TrainConfig(model=args.model, hidden=args.hidden, layers=args.layers,
                      dropout=args.dropout, threads=args.threads, backend="numba",
                      precision=args.precision,
                      device="cpu", progress=False, epochs=args.warmup + 2 * args.epochs)
    configure_threads(args.threads)
    data = load(args.dataset)
    timer, comm = ProfiledTimer(), SelfCommunicator()
    shard = dataset_shard(data, cfg, timer, log=lambda s: None)
    counting = CountingBackend(shard.nbr.backend)
    shard.nbr.backend = counting
    model, optimizer = model_and_optimizer(cfg, shard)
    sync, num_train = ReplicaSync(model, comm), training_vertices(shard, comm)
    arena = epoch_arena(cfg, shard, comm, log=print)

    def epoch(k):
        with in_arena(arena, "train"):
            step(model, optimizer, shard, sync, num_train, k, timer)
            with timer("optimizer"):
                optimizer.step()

    for k in range(args.warmup):
        epoch(k)
    # timed without the profiler (it slows every operator's call), then profiled
    timer.reset()
    counting.bytes = 0
    started = time.perf_counter()
    for k in range(args.warmup, args.warmup + args.epochs):
        epoch(k)
    wall = (time.perf_counter() - started) / args.epochs
    aggregation = {"s": timer.seconds["aggregation_forward"]
                   + timer.seconds["aggregation_backward"], "bytes": counting.bytes}
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU],
                                record_shapes=True, with_flops=True) as prof:
        for k in range(args.warmup + args.epochs, args.warmup + 2 * args.epochs):
            epoch(k)
    if arena:
        arena.release()
    measured = split_profile(prof.events())
    needed = elementwise_needed_bytes(cfg, data.num_nodes, data.num_features,
                                      data.num_classes)
    # the fraction is of the bytes the work needs; the operators' own, "moved", beside it
    measured["elementwise"]["moved_bytes"] = measured["elementwise"]["bytes"]
    if needed is not None:
        measured["elementwise"]["bytes"] = needed * args.epochs
        measured["elementwise"]["folded_flops"] = args.epochs * folded_projection_flops(
            model, data.num_nodes, cfg.hidden, data.num_classes)
    return {"epoch_s": wall, "aggregation": aggregation, **measured,
            "epochs": args.epochs,
            "graph": {"vertices": data.num_nodes, "edges": data.graph.num_edges,
                      "features": data.num_features}}


def roofline_rows(matmul: dict, triad_gb_s: float, matmul_gflops_: float,
                  epochs: int) -> dict:
    """The matrix products' roofline: the sum over products of ``max(flops / rate, bytes /
    triad)`` over their measured time, and how many of them (per epoch) their bytes bound."""
    bounds = [(f / (matmul_gflops_ * 1e9), b / (triad_gb_s * 1e9))
              for f, b in matmul["products"]]
    roofline_s = sum(max(pair) for pair in bounds)
    return {"roofline_fraction": round(roofline_s / matmul["s"], 3) if matmul["s"] > 0 else 0.0,
            "products": len(bounds) // epochs,
            "bytes_bound_products": sum(by_bytes > by_flops
                                        for by_flops, by_bytes in bounds) // epochs}


def phase_rows(measured: dict, triad_gb_s: float, matmul_gflops_: float) -> list[dict]:
    """One row per phase, per epoch: seconds, share of the epoch, achieved rate, limit and
    their ratio."""
    epochs, epoch_s = measured["epochs"], measured["epoch_s"]
    rows = []
    for phase, name, unit, limit in (("aggregation", "aggregation", "GB/s", triad_gb_s),
                                     ("matmul", "matrix products", "GFLOP/s", matmul_gflops_),
                                     ("elementwise", "elementwise", "GB/s", triad_gb_s),
                                     ("optimizer", "optimizer", "GB/s", triad_gb_s)):
        m = measured[phase]
        amount = m["flops"] if unit == "GFLOP/s" else m["bytes"]
        rate = amount / m["s"] / 1e9 if m["s"] > 0 else 0.0
        rows.append({"phase": name, "s": round(m["s"] / epochs, 4),
                     "share": round(m["s"] / epochs / epoch_s, 3), "unit": unit,
                     "achieved": round(rate, 2), "limit": round(limit, 2),
                     "fraction": round(rate / limit, 3)})
        if unit == "GB/s":
            rows[-1]["gb_per_epoch"] = round(amount / epochs / 1e9, 3)
        if "moved_bytes" in m:
            rows[-1]["moved_gb_per_epoch"] = round(m["moved_bytes"] / epochs / 1e9, 3)
        if phase == "matmul":
            rows[-1].update(roofline_rows(m, triad_gb_s, matmul_gflops_, epochs))
        if "folded_flops" in m and m["s"] > 0:
            bound_s = m["bytes"] / (triad_gb_s * 1e9) + m["folded_flops"] / (matmul_gflops_ * 1e9)
            rows[-1]["folded_gflop_per_epoch"] = round(m["folded_flops"] / epochs / 1e9, 3)
            rows[-1]["bound_fraction"] = round(bound_s / m["s"], 3)
    # from the unrounded seconds: on a short epoch the rows' rounding adds up to percents
    other = epoch_s - sum(measured[phase]["s"] / epochs
                          for phase in ("aggregation", "matmul", "elementwise", "optimizer"))
    rows.append({"phase": "other", "s": round(other, 4), "share": round(other / epoch_s, 3),
                 "unit": "", "achieved": "", "limit": "", "fraction": ""})
    return rows


def main(args) -> int:
    info = machine_info(args.threads)
    configure_threads(args.threads)
    low = args.precision == "bf16-mixed"
    info["matmul_gflops"] = round(matmul_gflops(
        args.matmul_size, dtype=torch.bfloat16 if low else torch.float32), 1)
    print(f"{info['cpu']}; {args.threads} threads; triad {info['triad_gb_s']} GB/s; "
          f"{'bf16' if low else 'fp32'} matmul {info['matmul_gflops']} GFLOP/s; "
          f"THP_MEM_ALLOC_ENABLE={info['thp_mem_alloc_enable']}", flush=True)
    measured = profile_epochs(args)
    # the machine's bandwidth again after the epochs: the better of the two is its limit
    info["triad_gb_s"] = max(info["triad_gb_s"], round(triad_bandwidth(), 2))
    rows = phase_rows(measured, info["triad_gb_s"], info["matmul_gflops"])
    g = measured["graph"]
    print(f"{args.dataset} ({g['vertices']:,} vertices, {g['edges']:,} edges, {g['features']} "
          f"features): {args.model}, {args.layers} layers, hidden {args.hidden}; epoch "
          f"{measured['epoch_s']:.3f} s (mean of {args.epochs}; then {args.epochs} profiled); "
          f"triad {info['triad_gb_s']} GB/s (the better of before and after)")
    print(f"{'phase':>16} {'s/epoch':>8} {'share':>6} {'achieved':>16} {'limit':>16} "
          f"{'fraction':>8}")
    for r in rows:
        unit = r["unit"]
        print(f"{r['phase']:>16} {r['s']:>8.3f} {r['share']:>6.1%} "
              + (f"{r['achieved']:>8.2f} {unit:<7} {r['limit']:>8.2f} {unit:<7} "
                 f"{r['fraction']:>8.1%}" if unit else ""))
    elementwise = rows[2]
    if "moved_gb_per_epoch" in elementwise:
        print(f"elementwise: {elementwise['gb_per_epoch']:.3f} GB an epoch needed (the fraction "
              f"above), {elementwise['moved_gb_per_epoch']:.3f} GB read and written by its "
              f"operators")
    if "bound_fraction" in elementwise:
        print(f"elementwise: {elementwise['bound_fraction']:.1%} of its bound (the needed bytes "
              f"at the triad and the folded projection's "
              f"{elementwise['folded_gflop_per_epoch']:.2f} GFLOP at the matmul rate)")
    products = rows[1]
    print(f"matrix products: {products['roofline_fraction']:.1%} of their roofline (each "
          f"product's max(flops / matmul rate, bytes / triad); "
          f"{products['bytes_bound_products']} of {products['products']} products bound by "
          f"their bytes)")
    finish({"benchmark": "phases", "machine": info, "dataset": args.dataset,
            "model": args.model, "hidden": args.hidden, "layers": args.layers,
            "precision": args.precision,
            "threads": args.threads, "epoch_s": round(measured["epoch_s"], 4),
            "results": rows}, args)
    return 0
