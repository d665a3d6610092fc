"""What a training run needs in memory, checked before anything large is allocated.

A run that cannot fit is refused with one line at start-up instead of being killed by the
kernel minutes later.  The prediction is :func:`distgnn.run.memory.training_memory` (the peak
resident memory of one process, by part; the same figure ``distgnn-partition inspect``
prints per rank).  Ranks that share a node share its memory: the check adds up the
predictions of all ranks on the node (:func:`require_on_node`).
"""
from __future__ import annotations

import ctypes
import os
import resource
import socket
import zlib

import numpy as np
import torch

from ..comm import SelfCommunicator
from ..errors import DistGNNError
from ..exchange.config import ExchangeConfig
from ..exchange.wire import row_bytes
from ..nn.config import ModelConfig, build_model
from ..nn.streamed import STREAMABLE, StreamLayout, schedule_bytes, streaming_problem
from ..nn.widths import exchange_widths, layer_widths
from ..placement import ExecutionConfig
from ..storage import format_bytes


def process_mib(field: str = "VmHWM") -> float:
    """``VmHWM`` (the peak resident memory so far) or ``VmRSS`` (now) of this process in MiB.
    Not ``ru_maxrss``: that keeps the parent's peak across fork and exec, so a process
    started by a large one would report its parent's."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) / 1024
    raise RuntimeError(f"no {field} in /proc/self/status")


def minor_faults() -> int:
    """Minor page faults of this process so far: pages the kernel had to map on first touch
    (a freshly allocated block faults once per page; a reused one does not)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt


# glibc's mallopt parameters (malloc.h)
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3
# blocks of at least this many bytes are mapped on their own and unmapped when freed
RETURN_BLOCKS_FROM = 128 << 10


def return_freed_blocks() -> bool:
    """Have malloc give large freed blocks back to the kernel at once; whether it could.

    Large: :data:`RETURN_BLOCKS_FROM` bytes and more; the heap's free top is also trimmed at
    that size (glibc only).

    glibc's default serves a block from its own mapping until the first such block is freed,
    then raises that threshold to the freed block's size (up to 32 MiB), so that from then on
    blocks up to 32 MiB (row blocks of the SpMM kernels, exchange buffers, partial gradients)
    come from the heap, and what is freed there stays resident, fragmented, under the next
    epoch's peak.  Fixing the thresholds stops that, at the cost of the page faults of fresh
    mappings (measured in ``docs/results/training-ladder.md``)."""
    return _malloc_thresholds(RETURN_BLOCKS_FROM)


def keep_freed_blocks() -> bool:
    """Have malloc keep freed blocks of up to 32 MiB for reuse; whether it could.

    For the epochs after the memory arena's plan (:mod:`distgnn.run.arena`): torch's large
    blocks come from the arena's slab then, and what is left to malloc, the MPI library's
    own buffers for the exchange and the gradient sum, would otherwise be mapped afresh,
    and faulted in, every epoch (1,300-4,200 pages per epoch and rank at R-MAT 2^19-2^21 on
    4 ranks)."""
    return _malloc_thresholds(KEEP_BLOCKS_UP_TO)


KEEP_BLOCKS_UP_TO = 32 << 20  # glibc's largest mmap threshold on 64-bit


def _malloc_thresholds(size: int) -> bool:
    """Blocks of ``size`` bytes and more mapped on their own, the heap's free top trimmed
    from that size (glibc only); whether both were set."""
    try:  # the symbols the process already has: no library search (ldconfig) at start-up
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):  # not glibc (musl, macOS): nothing to set
        return False
    return bool(mallopt(_M_MMAP_THRESHOLD, size) and mallopt(_M_TRIM_THRESHOLD, size))


def available_bytes(device) -> int:
    """Memory a new allocation can take on ``device``: ``MemAvailable`` of the host, or the
    GPU's free memory."""
    if getattr(device, "type", device) == "cuda":
        return int(torch.cuda.mem_get_info(device)[0])
    try:
        with open("/proc/meminfo") as f:
            fields = dict(line.split(":", 1) for line in f)
        return int(fields["MemAvailable"].split()[0]) * 1024
    except (OSError, KeyError, ValueError):
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_AVPHYS_PAGES")


def predict(network: ModelConfig, exchange: ExchangeConfig, execution: ExecutionConfig,
            num_nodes: int, num_edges: int, num_features: int, num_classes: int,
            split_entries: int = 0) -> dict[str, int]:
    """:func:`training_memory` of a run of the model ``network`` on this data.

    The run exchanges as ``exchange`` says and computes as ``execution`` says (the parts of a
    :class:`~distgnn.run.config.TrainConfig`); ``split_entries``: the rank's leaves plus leaf
    entries on a partition.
    """
    layers = network.layers + (network.model == "gcnii")
    delayed = exchange.may_delay and exchange.comm_budget is None
    value_bytes = 8 if execution.dtype == "float64" else 4
    widths = exchange_widths(num_features, network.hidden, num_classes, layers,
                             network.precompute_first,
                             exchange.backward_exchange) if delayed else ()
    compressed = exchange.wire != "fp32"
    return training_memory(
        num_nodes, num_edges, num_features, num_classes, network.hidden, layers,
        # no credit for activations stored in bf16: they halve what autograd keeps, but the
        # measured peak (in the backward pass) stayed the same on R-MAT 2^20
        network.model == "sage" and network.aggregator != "gcn", value_bytes,
        network.precompute_first, network.heads if network.model == "gat" else 0,
        network.hidden if network.model == "gin" else 0, split_entries, widths,
        exchange.delay_epochs if delayed else 0,
        (lambda w: row_bytes(exchange.wire, w, value_bytes)) if compressed else None,
        delayed and exchange.default_schedule, execution.recompute, saved_activation_bytes(execution.precision),
        saved_activation_bytes(execution.precision),
        fused=((network.model == "gcn" or (network.model, network.aggregator) == ("sage", "gcn"))
               and not network.residual and not execution.recompute),
        folded_scales=scaled_plans(network, exchange, execution, split_entries))


def scaled_plans(network: ModelConfig, exchange: ExchangeConfig, execution: ExecutionConfig,
                 split_entries: int) -> int:
    """How many plans with a source scale in their edge weights a run of ``network`` makes.

    Such plans (:meth:`~distgnn.nn.backends.NumbaBackend.plan`) are made where the Numba
    kernels' fused normalised sum runs (a whole graph or 0c, in float32 or bf16): GCN folds
    ``q`` into a plan for each direction, GraphSAGE-gcn its backward pass's ``r`` into one
    (a directed graph's count; a symmetric graph's GCN needs one)."""
    if (execution.dtype == "float64" or execution.device == "cuda"
            or execution.backend not in ("auto", "numba")
            or (split_entries and exchange.algo != "0c")):
        return 0
    return {"gcn": 2, "sage": int(network.aggregator == "gcn")}.get(network.model, 0)


def saved_activation_bytes(precision: str) -> int | None:
    """Bytes of a saved activation's (and a feature's) element under ``--precision``.

    That is ``training_memory``'s ``saved_bytes`` and ``feature_bytes``: 2 under bf16-mixed,
    whose products keep their bf16 operands and whose features are kept in bf16; ``None``
    (the run's value type) otherwise."""
    return 2 if precision == "bf16-mixed" else None


def _refusal(where: str, need: dict, have: int, device, ranks: int = 1) -> DistGNNError:
    parts = ", ".join(f"{k} {format_bytes(v)}" for k, v in need.items() if k != "total" and v)
    whose = (f"the {ranks} ranks on this node need about {format_bytes(ranks * need['total'])}"
             f" (this one {format_bytes(need['total'])}: {parts})" if ranks > 1 else
             f"the run needs about {format_bytes(need['total'])} ({parts})")
    return DistGNNError(f"{where}: {whose} but {device} has {format_bytes(have)}; reduce "
                        "--hidden, --layers or --delay, give --memory-limit to stream the "
                        "training state through local disk, or partition the graph over "
                        "more ranks or nodes")


def require(network: ModelConfig, exchange: ExchangeConfig, execution: ExecutionConfig,
            num_nodes: int, num_edges: int, num_features: int, num_classes: int,
            device, where: str, weighted: bool = False) -> dict | None:
    """Refuse a single-process run that cannot start or would not fit in memory.

    Returns its streamed plan (:func:`limited_plan`), ``None`` when it runs in memory.

    Refused: a run of ``network`` (exchanging and computing as :func:`predict` takes them)
    on this data that cannot start (no features) or whose predicted peak (the streamed
    plan's under a memory limit it exceeds) exceeds what ``device`` has: its available
    memory plus what this process holds already.
    """
    check_features(num_features, where)
    need = predict(network, exchange, execution, num_nodes, num_edges, num_features,
                   num_classes)
    plan = limited_plan(network, exchange, execution, need, num_nodes, num_edges,
                        num_features, num_classes, where, weighted)
    require_on_node(SelfCommunicator(), need if plan is None else plan["ram"], device, where)
    return plan


def check_features(num_features: int, where: str) -> None:
    if num_features < 1:
        raise DistGNNError(f"{where}: the features have width 0; a model needs at least one "
                           "input feature per vertex")


def held_bytes(device) -> int:
    """What this process holds now on ``device``: ``VmRSS``, or the GPU memory torch has."""
    if getattr(device, "type", device) == "cuda":
        return int(torch.cuda.memory_reserved(device))
    return int(process_mib("VmRSS") * (1 << 20))


def require_on_node(comm, need: dict, device, where: str) -> None:
    """Refuse, on every rank of the node, ranks whose predicted peaks exceed its memory.

    Refused when the predicted peaks of the ranks that share this node's memory exceed what
    it has: its available memory plus what those ranks hold already (their predictions
    include it).  Ranks on a GPU share nothing here but their own device.  Collective.
    """
    host = zlib.crc32(socket.gethostname().encode()) if getattr(device, "type",
                                                                 device) != "cuda" else -1
    table = torch.zeros(comm.size, 4, dtype=torch.float64)
    table[comm.rank] = torch.tensor([host, need["total"], held_bytes(device),
                                     available_bytes(device)], dtype=torch.float64)
    comm.allreduce(table)
    mine = table[:, 0] == host if host != -1 else torch.arange(comm.size) == comm.rank
    ranks = int(mine.sum())
    total = float(table[mine, 1].sum())
    have = int(float(table[mine, 3].min()) + float(table[mine, 2].sum()))
    if total > have:
        raise _refusal(where, need, have, device, ranks)


# bytes of one cd-r bin's index tensors and bookkeeping (measured: 4.3 to 6.3 KiB)
DELAY_BIN_BYTES = 6 * 1024


#: resident memory of a rank apart from its data: Python, torch, Numba, mpi4py and the MPI
#: library (300 MiB after the imports) and the kernels Numba compiles in the first epoch
#: (fitted with the other terms on R-MAT 2^19 to 2^21, 4 ranks, fp32, 2026-11-25)
RUNTIME_BYTES = 450 << 20


def training_memory(num_nodes: int, num_edges: int, num_features: int, num_classes: int,
                    hidden: int, layers: int, two_weights: bool = False,
                    value_bytes: int = 4,
                    precompute_first: bool = False, heads: int = 0, mlp: int = 0,
                    split_entries: int = 0, delayed_widths: tuple[int, ...] = (),
                    delay: int = 0, wire_row_bytes=None, controlled: bool = False,
                    recompute: bool = False, saved_bytes: int | None = None,
                    feature_bytes: int | None = None, fused: bool = False,
                    folded_scales: int = 0) -> dict[str, int]:
    r"""Predicted peak memory (bytes) of a training process, by part, and their ``total``.

    The peak resident memory of a process over ``N`` vertices and ``E`` edges (a whole graph,
    or a rank's partition with ``S`` split entries: its leaves plus its leaf entries).

    With layer widths ``d_0 = F, d_1 .. d_{L-1} = H, d_L = C`` (:func:`layer_widths`),
    ``s``-byte floats (``value_bytes``: 4, or 8 under ``--dtype float64``) and ``t``-byte
    saved activations (``saved_bytes``: ``s``, or 2 under ``--precision bf16-mixed``, whose
    products keep their bf16 operands):

    .. math::
        \text{runtime} = 450\ \text{MiB} \qquad
        \text{model} = 5 s \sum_{l=1}^{L} w_l
            \quad\text{(weights, gradients, two Adam moments, best weights)}

        \text{activations} = t N \sum_{l=1}^{L} (d_{l-1} + 3 m) + t N d_L
            + a N \sum_{l=1}^{L-1} d_l + (1 + \rho)\, s N \max_l d_l + 3 s N C + 6 s E H' L
            + s S \max_l w_l'

        \text{activations}_\text{fused} = \max\Big(t N \sum_{l=1}^{L} d_{l-1} + t N d_L
            + \tfrac{N}{8} \sum_{l=1}^{L-1} d_l + [L > 2]\, s N \max_l d_l + 3 s N C
            + s S \max_{l \ge 2} w_l',\;
            [\neg\,\text{precomputed}]\, \big([F \le d_1]\, (f + s) N F + s S w_1'\big)\Big)

        \text{graph} = 22 E + 40 N \qquad \text{features} = c\, f N F + 24 N
        \qquad \text{exchange} = 80 S

        \text{delayed exchange} = \sum_{w \in W} \Big(B\, r + S\, \big(3 s w + u(w)
            + [\text{compressed}]\, (s w + u(w)) + [\text{controlled}]\, (s w + 16)\big)\Big)

    with ``w_l = k (d_{l-1} + 1) d_l`` parameters per layer (``k = 2`` for GraphSAGE's
    mean/sum/max aggregators, a root and a neighbour weight, else 1), except GIN, whose MLP
    of width ``m = H`` has ``w_l = d_{l-1} m + m + (m + 1) d_l`` (``m = 0`` for the other
    models).  Activations: autograd keeps per layer its input (the linear layer's, or the
    aggregate it projects), the output layer's output, per hidden layer the mask of its
    ReLU (``a = 1`` byte per element, :func:`distgnn.nn.graph_layer.relu`; the fused
    epilogue of GCN, GraphSAGE and GIN keeps a bit, but the measured peaks did not fall with
    it: the mask is not alive at the peak) or the output of
    GAT's ELU (``a = s``), and GIN three ``m``-wide tensors in its MLP; the backward pass holds a
    gradient at the widest width besides them, and one more with ``recompute`` (``\rho = 1``,
    else 0): it recomputes a layer's forward while its output's gradient is held (at 2
    layers recompute raises the peak rather than lowering it:
    ``docs/results/training-ladder.md``); the logits, their softmax and their gradient
    add ``3 N C``; GAT keeps six ``[E, H']`` per-edge tensors per layer (``H'`` =
    ``heads``: logits, exponentials, coefficients, dropped coefficients, two gradients).
    Graph: the CSR and its transpose (int32 indices), the SpMM kernels' plans for both
    directions (about 4.6 bytes per edge each, measured), 4 bytes per edge more at the peak
    (fitted; the kernels' trial in the first epoch times the operand itself and holds two
    candidate plans at a time, and stays under the later epochs' peak), per-vertex row
    pointers and ids; ``folded_scales`` plans more whose edge weights hold a source scale
    (:meth:`~distgnn.nn.backends.NumbaBackend.plan`), 4 bytes per edge each.  Features:
    the normalised copy the
    model reads, of ``f``-byte elements (``feature_bytes``: ``s``, or 2 under ``--precision
    bf16-mixed``, which keeps them in bf16; ``c = 2`` with ``--precompute-first-aggregation``,
    which keeps their aggregate too), labels, masks and degrees.  Exchange: the split
    tables; the exact exchange's buffers, a row per split entry at the width ``w_l' =
    min(d_{l-1}, d_l)`` of the layer exchanging (a layer aggregates on its narrower side),
    are alive only during its round trip (:class:`~distgnn.exchange.exact.RoundTrip`), so
    they are counted with the activations of that moment: at the widest width in the
    backward pass's peak.  cd-r keeps, for each of its exchanges, of the
    widths ``W`` it really carries (``delayed_widths``: :func:`exchange_widths`), ``r`` bins
    (``delay``) of ``B`` = 6 KiB of index tensors and bookkeeping each (measured), and per
    split entry three rows of ``w`` values in the run's type (the kept partials or
    complement, the staged messages, the roots' own partials) and a received row of ``u(w)``
    bytes on the wire (``wire_row_bytes(w)``; default: the run's type), twice as much with a
    compressed wire (its error-feedback residual and encoded send buffer); the default
    schedule (``controlled``) one more row per split entry, what its remote terms moved
    (:meth:`~distgnn.exchange.delayed.DelayedSum.refresh`), and the int64 positions of the
    entries among the split rows (at most 16 bytes per entry).  GCNII counts as
    ``L + 1`` layers of width ``H``.

    ``fused``: GCN and GraphSAGE without residual connections or recomputation
    (:meth:`~distgnn.nn.models.GNN.fused_forward`), whose epilogues write over the tensors
    they consume: a hidden layer's activation over its product's output, which is all the
    next product keeps (and its bits of ``[h > 0]``), the input gradient of the last
    layer's fused projection over that activation, the normalised aggregate over its sums,
    cast to bf16 before the product under bf16-mixed.  The first layer drops its input
    itself and frees the dropped copy once aggregated: the copy and the float32 sums
    (``(f + s) N F``, where the first layer aggregates its input, ``F <= d_1``, and the
    aggregate is not precomputed) and the first layer's exchange buffers are the peak only if
    they are above what the products keep, beside the later layers' exchange buffers; a
    gradient at the widest width is held only between hidden layers (``L > 2``).  Checked against R-MAT 2^20 and 2^22 (4 ranks, GraphSAGE-gcn hidden 256,
    fp32 and bf16-mixed: docs/results/training-ladder.md).

    The runtime and the graph's bytes per edge were fitted on R-MAT 2^19 to 2^21
    (GraphSAGE-gcn, hidden 256, 4 ranks, fp32); R-MAT 2^22 and the runs with activations in
    bf16 check them (docs/results/training-ladder.md).
    Python ints: no overflow for absurd sizes.
    """
    d = layer_widths(num_features, hidden, num_classes, layers)
    k = 2 if two_weights else 1
    s = value_bytes
    t = s if saved_bytes is None else saved_bytes
    N, E, S = num_nodes, num_edges, split_entries
    weights = (i * mlp + mlp + (mlp + 1) * o if mlp else k * (i + 1) * o
               for i, o in zip(d[:-1], d[1:]))
    f = s if feature_bytes is None else feature_bytes
    exchanged = [min(i, o) for i, o in zip(d[:-1], d[1:])]  # w_l': each layer's narrower side
    if fused:
        first = (d[0] <= d[1]) * (f + s) * N * d[0] + s * S * exchanged[0]
        activations = max(t * N * sum(d[:-1]) + t * N * d[-1] + N * sum(d[1:-1]) // 8
                          + (len(d) > 3) * s * N * max(d) + 3 * s * N * num_classes
                          + s * S * max(exchanged[1:], default=0),
                          (not precompute_first) * first)
    else:
        activations = (t * N * sum(i + 3 * mlp for i in d[:-1]) + t * N * d[-1]
                       + (t if heads else 1) * N * sum(d[1:-1])
                       + (1 + recompute) * s * N * max(d) + 3 * s * N * num_classes
                       + 6 * s * E * heads * layers + s * S * max(exchanged))
    parts = {
        "runtime": RUNTIME_BYTES,
        "model": s * 5 * sum(weights),
        "activations": activations,
        "graph": (22 + 4 * folded_scales) * E + 40 * N,
        "features": (2 if precompute_first else 1) * f * N * num_features + 24 * N,
        "exchange": 80 * S,
        "delayed exchange": sum(delayed_exchange_bytes(w, S, delay, s, wire_row_bytes,
                                                       controlled) for w in delayed_widths),
    }
    return {**parts, "total": sum(parts.values())}


def delayed_exchange_bytes(width: int, split_entries: int, delay: int, value_bytes: int = 4,
                           wire_row_bytes=None, controlled: bool = False) -> int:
    """What one delayed exchange of ``width`` keeps (the term of :func:`training_memory`).

    It keeps ``delay`` bins of bookkeeping, and per split entry three rows of values and a
    received row on the wire (``wire_row_bytes(width)``, ``None``: uncompressed), twice that
    with a compressed wire; under the default schedule (``controlled``) a row of values and
    16 bytes of positions more, for the drift it measures.
    """
    values = value_bytes * width
    wire = values if wire_row_bytes is None else wire_row_bytes(width)
    compressed = wire_row_bytes is not None
    return (DELAY_BIN_BYTES * delay
            + split_entries * (3 * values + wire + compressed * (values + wire)
                               + controlled * (values + 16)))


def memory_rates(num_features: int, num_classes: int, hidden: int, layers: int,
                 **options) -> dict[str, int]:
    """:func:`training_memory` as a fixed part and a rate per vertex, edge and split entry.

    The prediction is linear in a process's vertices ``N``, edges ``E`` and split entries
    ``S`` (the model's widths held fixed), so ``total = fixed + vertex N + edge E +
    split_entry S`` exactly; except the fused plan's (``fused``), whose activations are the
    larger of two moments' (each linear): each rate is then the larger of the two, and the
    sum bounds the prediction from above.  ``fixed`` is what a rank holds whatever its share of the
    graph (the runtime, the model, cd-r's bins), ``runtime`` the part of it that is
    :data:`RUNTIME_BYTES`.  For sizing a job before any cut exists
    (``distgnn-partition --parts auto``); ``options`` are :func:`training_memory`'s
    keywords other than ``split_entries``."""
    def total(n: int, e: int, s: int) -> int:
        return training_memory(n, e, num_features, num_classes, hidden, layers,
                               split_entries=s, **options)["total"]

    fixed = total(0, 0, 0)
    return {"fixed": fixed, "runtime": RUNTIME_BYTES, "vertex": total(1, 0, 0) - fixed,
            "edge": total(0, 1, 0) - fixed, "split_entry": total(0, 0, 1) - fixed}


#: panel widths a streamed run tries, widest first (64 bytes, a cache line, per gathered
#: row at 16 float32 columns; narrower panels gather part-lines)
PANEL_WIDTHS = (64, 32, 16, 8, 4)
#: what the Numba SpMM's hub-blocked plans take per edge: one edge copy for each direction
#: (forward and transposed) kept, and the trial's candidate beside them
KERNEL_PLAN_BYTES = 24
#: bytes of a streamed run's widest row-chunk buffer: under malloc's largest mmap threshold
#: (:data:`KEEP_BLOCKS_UP_TO`), so that each chunk reuses the heap blocks the last one freed
#: instead of mapping, and faulting in, fresh pages (which made the products and epilogues
#: of R-MAT 2^21's row passes 1.4-5x slower with chunks of 64 MiB)
CHUNK_BYTES = 16 << 20


def stream_plan(network: ModelConfig, execution: ExecutionConfig, num_nodes: int,
                num_edges: int, num_features: int, num_classes: int, limit: int,
                where: str, weighted: bool = False, panel: int | None = None,
                split_entries: int = 0) -> dict:
    r"""The plan of a run whose state is streamed through disk under a memory ``limit``.

    Returns ``{"ram": parts and total, "disk": bytes, "read": bytes, "written": bytes,
    "layout": StreamLayout}``: the predicted peak resident memory, the spill files' most
    (the features' copy and what the epoch keeps), and what one training epoch reads and
    writes on disk (:func:`distgnn.nn.streamed.schedule_bytes`, ``N`` times its bytes per
    vertex).  Matrices at most ``C`` wide stay in RAM; the panel width is the widest of
    :data:`PANEL_WIDTHS` under ``limit``:

    .. math::
        \text{RAM} = \text{runtime} + \text{model} + (8 + 2 w) E + 56 N
            + N b + S (s (p + C) + 80)
            + \max(6 s N p,\; 3 s R (F + 2 H),\; 5 s N C)

    with ``w`` = 4 bytes of an edge weight where there are any (a graph and its transpose,
    int32 indices); per vertex the row pointers of both, degrees, ids, labels and masks;
    the ReLU's bits the backward pass keeps (``b`` bytes per vertex, measured with the
    traffic); on a partition of ``S`` split entries, the split tables and the exact sums'
    buffers at the panel's and the classes' widths; and the largest of a panel pass's buffers (its input,
    the next panel read ahead, the sums, the output and two written behind), a row pass's
    (chunks of ``R`` rows read ahead, computed and written behind) and the loss's (the
    logits, their gradient and the softmax's temporaries).  ``panel``: that width only (what
    the ranks of a job agreed on).  With the SpMM kernels' timed trial
    (``execution.kernel_trial``), a width is tried with the hub-blocked plans first
    (:data:`KERNEL_PLAN_BYTES` per edge more; ``"kernel_trial"`` says which was taken).
    Refused in one line when no panel width fits.
    """
    s = 8 if execution.dtype == "float64" else 4
    model = build_model(network, num_features, num_classes, False)
    problem = streaming_problem(model)
    if problem is not None:
        raise DistGNNError(f"{where}: the run does not fit under --memory-limit, and its "
                           f"training state streams through disk for {STREAMABLE} only, "
                           f"not {problem}")
    d = layer_widths(num_features, network.hidden, num_classes, network.layers)
    per_vertex = schedule_bytes(model, num_classes, np.float64 if s == 8 else np.float32)
    N, E, C = num_nodes, num_edges, num_classes
    fixed = {"runtime": RUNTIME_BYTES,
             "model": s * 5 * sum((i + 1) * o for i, o in zip(d[:-1], d[1:])),
             "graph": (16 if weighted else 8) * E + 56 * N,
             "activation bits": N * per_vertex["bits"]}
    trials = (True, False) if execution.kernel_trial else (False,)
    for panel, trial in ((p, t) for p in (PANEL_WIDTHS if panel is None else (panel,))
                         for t in trials):
        # whole 4096-row blocks (the bias gradient's, so its partial sums fall as in one
        # pass), the widest buffer within CHUNK_BYTES
        rows = max(4096, CHUNK_BYTES // (s * max(d)) >> 12 << 12)
        work = max(6 * s * N * min(panel, max(d)),
                   3 * s * min(rows, N) * (d[0] + 2 * max(d[1:])),
                   5 * s * N * C)
        ram = {**fixed, **({"kernel plans": KERNEL_PLAN_BYTES * E} if trial else {}),
               "exchange": split_entries * (s * (min(panel, max(d)) + C) + 80),
               "passes": work}
        ram["total"] = sum(ram.values())
        if ram["total"] <= limit:
            break
    else:
        raise DistGNNError(
            f"{where}: even streamed, the run needs about {format_bytes(ram['total'])} "
            f"({', '.join(f'{k} {format_bytes(v)}' for k, v in ram.items() if k != 'total')}) "
            f"but --memory-limit is {format_bytes(limit)}; raise it, or partition the graph "
            "over more ranks")
    return {"ram": ram, "disk": N * (per_vertex["disk"] + s * num_features),
            "read": N * per_vertex["read"], "written": N * per_vertex["written"],
            "layout": StreamLayout(panel, rows, C), "kernel_trial": trial}


def limited_plan(network: ModelConfig, exchange: ExchangeConfig, execution: ExecutionConfig,
                 need: dict, num_nodes: int, num_edges: int, num_features: int,
                 num_classes: int, where: str, weighted: bool = False,
                 panel: int | None = None, partitioned: bool = False,
                 split_entries: int = 0) -> dict | None:
    """The streamed plan of a run whose in-memory plan exceeds its memory limit, or ``None``.

    That is :func:`stream_plan` when ``execution.memory_limit`` is set and the in-memory
    plan ``need`` exceeds it (or ``panel`` is given: the job streams).

    Refused in one line: a streamed run of a precision the streamed execution does not have
    (fp32 or float64), or, on a ``partitioned`` graph, of an exchange it does not have (it
    sums over clones exactly)."""
    limit = execution.memory_limit
    if limit is None or (panel is None and need["total"] <= limit * (1 << 30)):
        return None
    for flag, allowed, on in (
            (f"--algo {exchange.algo}", "--algo cd-0 or 0c",
             partitioned and exchange.algo not in ("cd-0", "0c")),
            (f"--exchange-precision {exchange.exchange_precision}", "an fp32 wire",
             partitioned and exchange.exchange_precision not in (None, "fp32")),
            ("--no-backward-exchange", "the backward exchange",
             partitioned and not exchange.backward_exchange),
            (f"--precision {execution.precision}", "--precision fp32",
             execution.precision != "fp32"),
            ("--aggregation-precision bf16", "fp32 aggregations", execution.bf16_aggregation)):
        if on:
            raise DistGNNError(f"{where}: the run needs about {format_bytes(need['total'])}, "
                               f"over --memory-limit {limit:g} GiB, so its training state "
                               f"would stream through disk, which takes {allowed} only, not "
                               f"{flag}")
    return stream_plan(network, execution, num_nodes, num_edges, num_features, num_classes,
                       int(limit * (1 << 30)), where, weighted, panel, split_entries)
