"""What a training run needs in memory, checked before anything large is allocated.

A run that cannot fit is refused with one line at start-up instead of being killed by the
kernel minutes later.  The prediction is :func:`partition.stats.training_memory` (the peak
resident memory of one process, by part; the same figure ``distgnn-partition inspect``
prints per rank).  Ranks that share a node share its memory: the check adds up the
predictions of all ranks on the node (:func:`require_on_node`).
"""
from __future__ import annotations

import ctypes
import os
import socket
import zlib

import torch

from partition.stats import exchange_widths, training_memory

from .comm import SelfCommunicator
from .errors import DistGNNError
from .exchange.wire import row_bytes
from .graph import format_bytes


def process_mib(field: str = "VmHWM") -> float:
    """``VmHWM`` (the peak resident memory so far) or ``VmRSS`` (now) of this process in MiB.
    Not ``ru_maxrss``: that keeps the parent's peak across fork and exec, so a process
    started by a large one would report its parent's."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) / 1024
    raise RuntimeError(f"no {field} in /proc/self/status")


# glibc's mallopt parameters (malloc.h)
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3
# blocks of at least this many bytes are mapped on their own and unmapped when freed
RETURN_BLOCKS_FROM = 128 << 10


def return_freed_blocks() -> bool:
    """Have malloc give freed blocks of :data:`RETURN_BLOCKS_FROM` bytes and more back to
    the kernel at once, and trim the heap's free top at that size; whether it could (glibc
    only).

    glibc's default serves a block from its own mapping until the first such block is freed,
    then raises that threshold to the freed block's size (up to 32 MiB), so that from then on
    blocks up to 32 MiB (row blocks of the SpMM kernels, exchange buffers, partial gradients)
    come from the heap, and what is freed there stays resident, fragmented, under the next
    epoch's peak.  Fixing the thresholds stops that: on R-MAT 2^20 and 2^21 x 16 (GraphSAGE
    hidden 256, 4 ranks) the peak per rank fell by 240 and 330 MiB and the memory held
    between epochs by 270 and 370 MiB; the epoch times stayed within the machine's noise
    (fresh mappings cost page faults)."""
    try:  # the symbols the process already has: no library search (ldconfig) at start-up
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):  # not glibc (musl, macOS): nothing to set
        return False
    return bool(mallopt(_M_MMAP_THRESHOLD, RETURN_BLOCKS_FROM)
                and mallopt(_M_TRIM_THRESHOLD, RETURN_BLOCKS_FROM))


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


def predict(cfg, num_nodes: int, num_edges: int, num_features: int, num_classes: int,
            split_entries: int = 0) -> dict[str, int]:
    """:func:`~partition.stats.training_memory` of a run of ``cfg`` (a TrainConfig) on this
    data; ``split_entries``: the rank's leaves plus leaf entries on a partition."""
    layers = cfg.layers + (cfg.model == "gcnii")
    delayed = cfg.algo == "cd-r" and cfg.comm_budget is None
    value_bytes = 8 if cfg.dtype == "float64" else 4
    widths = exchange_widths(num_features, cfg.hidden, num_classes, layers,
                             cfg.precompute_first, cfg.backward_exchange) if delayed else ()
    compressed = cfg.wire != "fp32"
    return training_memory(
        num_nodes, num_edges, num_features, num_classes, cfg.hidden, layers,
        # no credit for activations stored in bf16: they halve what autograd keeps, but the
        # measured peak (in the backward pass) stayed the same on R-MAT 2^20
        cfg.model == "sage" and cfg.aggregator != "gcn", value_bytes, cfg.precompute_first,
        cfg.heads if cfg.model == "gat" else 0, cfg.hidden if cfg.model == "gin" else 0,
        split_entries, widths, cfg.delay_epochs if delayed else 0,
        (lambda w: row_bytes(cfg.wire, w, value_bytes)) if compressed else None,
        cfg.recompute)


def _refusal(where: str, need: dict, have: int, device, ranks: int = 1) -> DistGNNError:
    parts = ", ".join(f"{k} {format_bytes(v)}" for k, v in need.items() if k != "total" and v)
    whose = (f"the {ranks} ranks on this node need about {format_bytes(ranks * need['total'])}"
             f" (this one {format_bytes(need['total'])}: {parts})" if ranks > 1 else
             f"the run needs about {format_bytes(need['total'])} ({parts})")
    return DistGNNError(f"{where}: {whose} but {device} has {format_bytes(have)}; reduce "
                        "--hidden, --layers or --delay, or partition the graph over more "
                        "ranks or nodes")


def require(cfg, num_nodes: int, num_edges: int, num_features: int, num_classes: int,
            device, where: str) -> None:
    """Refuse a single-process run of ``cfg`` (a TrainConfig) on this data that cannot start
    (no features) or whose predicted peak (:func:`predict`) exceeds what ``device`` has:
    its available memory plus what this process holds already."""
    check_features(num_features, where)
    need = predict(cfg, num_nodes, num_edges, num_features, num_classes)
    require_on_node(SelfCommunicator(), need, device, where)


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
    """Refuse (on every rank of the node) when the predicted peaks of the ranks that share
    this node's memory exceed what it has: its available memory plus what those ranks hold
    already (their predictions include it).  Ranks on a GPU share nothing here but their
    own device.  Collective."""
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
