"""A run whose training state streams through local disk (``--memory-limit``).

When a rank's plan (:func:`distgnn.run.memory.predict`) exceeds its memory limit, its shard
keeps the graph in RAM and its features in a panel-major file of a spill folder of its own
(:class:`Spilled`), and its epochs run through
:class:`~distgnn.nn.streamed.StreamedGNN`: :func:`forward` gives the logits and the function
that takes their gradient back to the weights, :func:`outputs` the logits (and embeddings)
of an evaluation.  All ranks of a job stream or none does, with the same panel width, so
their exchanges pair up (:func:`agree`).
"""
from __future__ import annotations

import dataclasses
import tempfile
from typing import Callable

import numpy as np
import torch

from ..comm import Communicator
from ..data.graph import CSRGraph
from ..kernels.spmm import transpose_csr
from ..nn.streamed import StreamedGNN, StreamLayout
from ..spill import DiskMatrix, SpillFolder, check_spill_room, npy_rows
from ..storage import format_bytes
from ..timing import PhaseTimer
from .memory import keep_freed_blocks

__all__ = ["Spilled", "agree", "describe", "forward", "io_counters", "io_since",
           "kernel_trial", "open_spill", "outputs", "spill_directory", "with_transpose"]


@dataclasses.dataclass
class Spilled:
    """A streamed shard's state on disk: its folder, the features' panel-major copy
    (normalised, in the run's type), the layout of its passes and the plan it follows."""

    folder: SpillFolder
    features: DiskMatrix
    layout: StreamLayout
    plan: dict

    def close(self) -> None:
        """Remove the spill folder and every file in it."""
        self.folder.close()


def spill_directory(spill_dir: str | None) -> str:
    """``--spill-dir``, or the system's temporary directory."""
    return spill_dir or tempfile.gettempdir()


def agree(comm: Communicator, streams: bool, panel: int) -> tuple[bool, int]:
    """``(stream, panel)`` for every rank: streamed when any rank must stream, with the
    narrowest panel any rank chose (a panel pass exchanges once per panel).  Collective."""
    flags = torch.tensor([float(streams), -float(panel if streams else 1 << 20)],
                         dtype=torch.float64)
    comm.allreduce(flags, op="max")
    return bool(flags[0]), int(-flags[1])


def open_spill(x, how: str, dtype: torch.dtype, plan: dict, spill_dir: str | None,
               rank: int, normalize: Callable, timer: PhaseTimer) -> tuple[Spilled, bool]:
    """A spill folder with the features written panel-major: ``(Spilled, negative)``.

    A spill folder under ``spill_dir`` with the features ``x``
    ``[N, F]`` (an array, or a memory-mapped ``.npy`` read with ``pread``) normalised by
    ``normalize(block, how)`` and written panel-major in chunks of rows (its waits in
    ``timer``'s ``io_wait``); ``negative``:
    whether ``x`` has a negative entry.  Refused in one line when the disk lacks the
    plan's room."""
    directory = spill_directory(spill_dir)
    check_spill_room(directory, plan["disk"])
    keep_freed_blocks()  # row chunks reuse the heap blocks the last chunk freed
    layout: StreamLayout = plan["layout"]
    folder = SpillFolder(directory, rank, timer)
    try:
        np_type = torch.empty(0, dtype=dtype).numpy().dtype
        features = folder.matrix("features", x.shape[0], x.shape[1], np_type, layout.panel)
        negative = False
        for r0 in range(0, x.shape[0], layout.rows):
            block = npy_rows(x, r0, min(x.shape[0], r0 + layout.rows))
            negative = negative or bool(block.size and block.min() < 0)
            # float32 first, as the in-memory features are, then the run's type
            block = np.asarray(normalize(block, how), np.float32).astype(np_type, copy=False)
            folder.write_behind(lambda r0=r0, b=block: features.write_rows(r0, b))
        folder.flush()
    except BaseException:
        folder.close()
        raise
    return Spilled(folder, features, layout, plan), negative


def kernel_trial(cfg, spilled: Spilled | None) -> bool:
    """Whether the SpMM kernels time their plans: as ``--no-kernel-trial`` says, and for a
    streamed shard only where its plan left room for the blocked plans."""
    return cfg.kernel_trial and (spilled is None or spilled.plan["kernel_trial"])


def with_transpose(graph: CSRGraph) -> CSRGraph:
    """``graph`` with its transpose made by a counting sort (no ``[E]`` int64 temporaries:
    the transposed SpMM of the backward pass needs it, and a streamed run counts every
    byte)."""
    if "transpose" not in graph.cache:
        indptr_t, indices_t, weight_t = transpose_csr(graph.indptr, graph.indices,
                                                      graph.num_nodes, graph.edge_weight)
        graph.cache["transpose"] = CSRGraph(indptr_t, indices_t, graph.num_nodes, weight_t,
                                            graph.source)
    return graph


def describe(spilled: Spilled, limit_gib: float) -> str:
    """The start-up line of a streamed run's plan."""
    plan, layout = spilled.plan, spilled.layout
    ram = plan["ram"]
    parts = ", ".join(f"{k} {format_bytes(v)}" for k, v in ram.items() if k != "total" and v)
    return (f"memory plan: streamed under --memory-limit {limit_gib:g} GiB: RAM "
            f"{format_bytes(ram['total'])} ({parts}); disk {format_bytes(plan['disk'])} in "
            f"{spilled.folder.path.parent}; each epoch reads {format_bytes(plan['read'])} and "
            f"writes {format_bytes(plan['written'])}; panels of {layout.panel} columns, "
            f"chunks of {layout.rows} rows")


def io_counters(shard) -> tuple[int, int] | None:
    """``(bytes read, bytes written)`` of ``shard``'s spill files so far (``None`` in
    memory)."""
    folder = shard.spilled.folder if shard.spilled is not None else None
    return None if folder is None else (folder.bytes_read, folder.bytes_written)


def io_since(shard, before: tuple[int, int] | None) -> dict[str, int] | None:
    """What ``shard``'s spill files took since :func:`io_counters` gave ``before``: bytes
    ``read`` and ``written``, and the most they held so far (``disk``)."""
    if before is None:
        return None
    folder = shard.spilled.folder
    return {"read": folder.bytes_read - before[0], "written": folder.bytes_written - before[1],
            "disk": folder.peak_bytes}


def _executor(model, shard) -> StreamedGNN:
    spilled = shard.spilled
    return StreamedGNN(model, shard.nbr, spilled.features, spilled.folder, spilled.layout)


def forward(model, shard) -> tuple[torch.Tensor, Callable[[torch.Tensor], None]]:
    """``(logits [N, C], backward)`` of a training epoch of ``model`` on the streamed
    ``shard`` (its neighbourhood set to the epoch); ``backward(grad_logits)`` adds the
    weights' gradients."""
    run = _executor(model, shard)
    logits, tape, _ = run.forward(keep=True)
    return logits, lambda grad: run.backward(tape, grad)


@torch.no_grad()
def outputs(model, shard, layer: int | None = None
            ) -> tuple[torch.Tensor, torch.Tensor | None]:
    """``(logits, embeddings)`` of ``model`` on the streamed ``shard`` in evaluation mode
    (:func:`~distgnn.run.evaluation.forward_eval`'s)."""
    logits, _, embeddings = _executor(model, shard).forward(keep=False, embeddings=layer)
    return logits, embeddings
