"""What one rank trains on: the whole graph in single-socket mode, else its partition.

:func:`dataset_shard` and :func:`partition_shard` load the data, check that the run fits in
memory (:mod:`distgnn.run.memory`), normalise the features and place the tensors on the rank's
device, and wire the neighbourhood the layers aggregate over (with the split-vertex
exchange of :mod:`distgnn.exchange` on a partition).
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
import time
from pathlib import Path
from typing import Callable

import numpy as np
import torch

from ..comm import Communicator, all_or_none
from ..data.graph import NodeDataset
from ..data.identity import digest, partial_lanes
from ..data.ordering import order_vertices, relabel
from ..data.partition_checks import check_files
from ..data.partitions import (
    PartitionFormatError,
    load,
    read_meta,
    read_vertex_ids,
    unchecked_fields_note,
)
from ..errors import DistGNNError
from ..exchange import Exchange, SplitIndex
from ..nn.aggregate import Neighbourhood, NoExchange
from ..nn.backends import get_backend
from ..placement import check_precision, placement
from ..timing import PhaseTimer
from . import memory, streaming
from .config import TrainConfig
from .streaming import Spilled

__all__ = ["Shard", "dataset_shard", "node_tensors", "normalize_features"]


@dataclasses.dataclass
class Shard:
    """What one rank trains on: the whole graph in single-socket mode, else its partition.

    ``x`` ``[n, F]`` of :func:`feature_dtype` (of a streamed shard, ``spilled``: a
    broadcast row of zeros with the features' shape, the features being on disk), ``y``
    ``[n]`` int64, ``masks`` bool ``[n]``
    per split name (under MPI true at root clones only, so each vertex counts once), ``nbr`` the
    neighbourhood the layers aggregate over (with the split-vertex exchange under MPI),
    ``origin`` what the data is, the same on any partitioning of it (a checkpoint of other
    data is refused), ``layout`` how it is split over ranks (a checkpoint of another layout
    resumes with the exchange's state started again); ``owned`` bool
    ``[n]``, the vertices whose results this rank writes (its root clones: each vertex on
    exactly one rank), ``num_vertices`` the whole graph's ``N``, and ``user_ids()`` the
    user's ids of the ``N`` vertices in global order (``None``: ``0..N-1``).
    """

    name: str
    x: torch.Tensor
    y: torch.Tensor
    masks: dict[str, torch.Tensor]
    nbr: Neighbourhood
    num_classes: int
    origin: str
    layout: str
    owned: np.ndarray
    num_vertices: int
    user_ids: Callable[[], np.ndarray | None]
    precision: str = "fp32"
    spilled: Spilled | None = None

    def close(self) -> None:
        """Remove the spill files of a streamed shard (nothing otherwise)."""
        if self.spilled is not None:
            self.spilled.close()

    @property
    def num_features(self) -> int:
        return self.x.shape[1]

    @property
    def dtype(self) -> torch.dtype:
        """The run's float type (``--dtype``): the model's weights, the logits and the loss
        (``x`` is bf16 under ``--precision bf16-mixed``)."""
        return self.nbr.degree.dtype

    @property
    def weighted(self) -> bool:
        """Whether the graph's edges carry weights (what its aggregations multiply by)."""
        return self.nbr.graph.edge_weight is not None


def in_precision(shard: Shard):
    """The context a model's forward pass on ``shard`` runs in.

    Under ``--precision bf16-mixed`` it is torch's autocast to bf16 on the CPU (every matrix
    product of bf16 operands, float32 weights cast once per pass; this project's kernels
    take bf16 rows where they can, float32 elsewhere); nothing under fp32."""
    return torch.autocast("cpu", dtype=torch.bfloat16, enabled=shard.precision == "bf16-mixed")


WHOLE_GRAPH = "the whole graph in one process"  # the layout of a dataset's shard

# rows normalised per block: bounds the float64 temporaries to 2 x 64 MiB
_NORM_BLOCK_ELEMENTS = 1 << 23


def normalize_features(x: np.ndarray, how: str) -> np.ndarray:
    """``row``: divide each row by its L1 norm (Kipf & Welling's preprocessing); ``none``.

    float32 ``[N, F]`` in and out.  The norms and quotients are computed in float64 (in row
    blocks): a float32 sum of large finite values would overflow to inf and zero the row.
    """
    if how == "none":
        return x
    out = np.empty(x.shape, np.float32)
    rows = max(1, _NORM_BLOCK_ELEMENTS // max(x.shape[1], 1))
    for start in range(0, len(x), rows):
        block = np.asarray(x[start:start + rows], dtype=np.float64)
        norm = np.abs(block).sum(axis=1, keepdims=True)
        np.divide(block, np.where(norm == 0, 1.0, norm), out=block)
        out[start:start + rows] = block
    return out


ROW_NORM_WARNING = ("warning: the features have negative entries, and --feature-norm row (the "
                    "default, made for non-negative counts such as bag-of-words) divides each "
                    "row by the sum of its absolute values, which can cost accuracy; "
                    "--feature-norm none trains on the features as they are")
# the same of a saved model applied (distgnn-predict, distgnn.predict): its features are
# normalised as it was trained, which no flag of the prediction changes
MODEL_ROW_NORM_WARNING = ("warning: the features have negative entries, and the model was "
                          "trained with --feature-norm row (the default, made for "
                          "non-negative counts such as bag-of-words): they are normalised "
                          "as in its training, each row divided by the sum of its absolute "
                          "values, which can cost accuracy; a model trained with "
                          "--feature-norm none takes them as they are")


def negative_features(x: np.ndarray) -> bool:
    """Whether features ``x`` ``[N, F]`` (a memory map too) hold a negative entry.

    Row normalisation was made for counts and :data:`ROW_NORM_WARNING` says why it may hurt.
    Checked in the row blocks of :func:`normalize_features`, stopping at the first negative
    block, with no ``[N, F]`` temporary.
    """
    rows = max(1, _NORM_BLOCK_ELEMENTS // max(x.shape[1], 1))
    return any(x[start:start + rows].min(initial=0) < 0 for start in range(0, len(x), rows))


def feature_dtype(cfg: TrainConfig) -> torch.dtype:
    """The type a run keeps its features in: bf16 under ``--precision bf16-mixed`` (every
    kernel that reads them takes bf16 rows), else the run's ``--dtype``."""
    return torch.bfloat16 if cfg.precision == "bf16-mixed" else getattr(torch, cfg.dtype)


def node_tensors(x: np.ndarray, y: np.ndarray, masks: dict[str, np.ndarray], how: str,
                 device: torch.device | str = "cpu", dtype: torch.dtype = torch.float32):
    """Torch tensors of normalised features, labels and masks on ``device``.

    They are copies: the inputs may be read-only memory maps.

    The features are float32, or bf16 for ``dtype`` bf16: normalised and rounded in row
    blocks, so no float32 copy of the whole is made (the input is left as it is)."""
    x = np.asarray(x)
    if dtype == torch.bfloat16:
        features = torch.empty(x.shape, dtype=torch.bfloat16)
        rows = max(1, _NORM_BLOCK_ELEMENTS // max(x.shape[1], 1))
        for start in range(0, len(x), rows):
            block = normalize_features(x[start:start + rows], how)
            features[start:start + rows] = torch.from_numpy(np.asarray(block, np.float32))
        return (features.to(device), *node_tensors(x[:0], y, masks, how, device)[1:])
    normalised = normalize_features(x, how)
    return (torch.from_numpy(np.array(normalised, np.float32, copy=normalised is x)).to(device),
            torch.from_numpy(np.array(y, np.int64)).to(device),
            {name: torch.from_numpy(np.array(m, bool)).to(device) for name, m in masks.items()})


def rank_tensors(x: np.ndarray, y: np.ndarray, masks: dict[str, np.ndarray], cfg: TrainConfig,
                 device, plan: dict | None, rank: int, timer: PhaseTimer):
    """A rank's data as tensors, or its features spilled to disk for a streamed ``plan``.

    Returns ``((x, y, masks), negative, spilled)``: :func:`node_tensors` of the data,
    whether its features have a negative entry under ``--feature-norm row``, and, for a
    streamed ``plan``, its features written to disk instead
    (:func:`~distgnn.run.streaming.open_spill`; ``x`` then has no rows) and the
    :class:`Spilled` state (else ``None``)."""
    if plan is None:
        return (node_tensors(x, y, masks, cfg.feature_norm, device, feature_dtype(cfg)),
                cfg.feature_norm == "row" and negative_features(x), None)
    spilled, negative = streaming.open_spill(x, cfg.feature_norm, getattr(torch, cfg.dtype),
                                             plan, cfg.spill_dir, rank, normalize_features,
                                             timer)
    return (node_tensors(np.zeros((0, x.shape[1]), np.float32), y, masks, cfg.feature_norm,
                         device), negative and cfg.feature_norm == "row", spilled)


def data_origin(num_nodes: int, num_features: int, num_classes: int, lanes: np.ndarray | None
                ) -> str:
    """What a run's data is: its sizes and, when ``lanes`` (every rank's
    :func:`~distgnn.data.identity.partial_lanes` summed) are given, the identity of its
    content, which is the same on the whole graph and on any partitioning of it."""
    origin = f"a graph of {num_nodes} vertices, {num_features} features, {num_classes} classes"
    return origin if lanes is None else f"{origin}, content {digest(lanes)}"


def dataset_shard(data: NodeDataset, cfg: TrainConfig, timer: PhaseTimer,
                  log: Callable[[str], None] = print,
                  row_norm_warning: str = ROW_NORM_WARNING) -> Shard:
    """The whole graph of ``data`` as the single rank's shard, on its device.

    With ``cfg.reorder``, relabelled in that locality order (logged), its global ids being
    ``data``'s.  ``row_norm_warning``: what is logged when row normalisation meets negative
    features (:data:`MODEL_ROW_NORM_WARNING` for a saved model)."""
    device, backend = placement(0, cfg.device, cfg.backend, cfg.rank_devices, cfg.rank_backends,
                                ranks=1)
    check_precision(cfg.precision, device)
    memory.return_freed_blocks()
    plan = memory.require(cfg.network, cfg.exchange, cfg.execution, data.num_nodes,
                          data.graph.num_edges, data.num_features, data.num_classes, device,
                          data.name, data.graph.edge_weight is not None)
    masks = {name: getattr(data, f"{name}_mask") for name in ("train", "val", "test")}
    (x, y, masks), negative, spilled = rank_tensors(data.x, data.y, masks, cfg, "cpu", plan,
                                                    0, timer)
    if spilled is not None:
        log(streaming.describe(spilled, cfg.memory_limit))
        if cfg.reorder != "given":
            log(f"vertex order given: a streamed run trains in the graph's own order "
                f"(--reorder {cfg.reorder} not applied)")
    if negative:
        log(row_norm_warning)
    graph = data.graph
    lanes = None
    if cfg.checkpoint_dir:  # (set when resuming) what is trained on, in its own ids
        every = np.arange(data.num_nodes)
        lanes = partial_lanes(graph.indptr, graph.indices, graph.edge_weight, every, every,
                              data.y, [data.train_mask, data.val_mask, data.test_mask], data.x)
    origin = data_origin(data.num_nodes, data.num_features, data.num_classes, lanes)
    global_ids = None
    if cfg.reorder != "given" and spilled is None:  # a streamed run trains in the given order
        started = time.perf_counter()
        chosen, perm, trial = order_vertices(graph, cfg.reorder, cfg.hidden)
        if chosen != "given":
            graph, global_ids, index = relabel(graph, perm), perm, torch.from_numpy(perm)
            x, y, masks = x[index], y[index], {name: m[index] for name, m in masks.items()}
        log(f"vertex order {chosen}" + (f" ({cfg.reorder})" if chosen != cfg.reorder else "")
            + "".join(f", {k} {v:.3f} s" for k, v in trial.items())
            + f": relabelled in {time.perf_counter() - started:.2f} s")
    nbr = Neighbourhood(graph, get_backend(backend, cfg.gathered_precision,
                                           streaming.kernel_trial(cfg, spilled)), timer=timer,
                        device=device, dtype=getattr(torch, cfg.dtype), global_ids=global_ids,
                        seed=cfg.seed)
    x, y = x.to(device, feature_dtype(cfg)), y.to(device)
    if spilled is not None:
        x = streamed_features(x, data.num_nodes)
        streaming.with_transpose(graph)
    masks = {name: m.to(device) for name, m in masks.items()}
    return Shard(data.name, x, y, masks, nbr, data.num_classes, origin, WHOLE_GRAPH,
                 np.ones(data.num_nodes, bool), data.num_nodes, lambda: data.ids, cfg.precision,
                 spilled)


def streamed_features(empty: torch.Tensor, rows: int) -> torch.Tensor:
    """The ``x`` of a streamed shard: a row of zeros broadcast to ``[rows, F]`` (one row of
    memory), of ``empty``'s type and device."""
    return torch.zeros(1, empty.shape[1], dtype=empty.dtype, device=empty.device).expand(
        rows, empty.shape[1])


def partition_shard(directory: str | Path, cfg: TrainConfig, comm: Communicator,
                    timer: PhaseTimer, device: torch.device, backend: str,
                    row_norm_warning: str = ROW_NORM_WARNING) -> Shard:
    """Rank ``comm.rank``'s partition of ``directory`` as a shard on ``device``.

    Collective.  The shard is aggregated by ``backend``; ``row_norm_warning`` is
    :func:`dataset_shard`'s.  Each rank checks its own partition
    as it loads it (every check of one partition alone, :func:`distgnn.data.partitions.load`),
    then, with its peers, the split tables and the leaves' rows (:meth:`SplitIndex.check`);
    the other checks across partitions are ``distgnn-partition verify``'s.
    """
    directory = Path(directory)
    memory.return_freed_blocks()

    def load_local():
        check_precision(cfg.precision, device)
        delay = cfg.delay_epochs
        meta = read_meta(directory)
        if meta["num_parts"] != comm.size:
            raise DistGNNError(f"{directory} holds {meta['num_parts']} partitions but the job "
                               f"has {comm.size} ranks; start it with -np {meta['num_parts']}")
        if "num_classes" not in meta:  # every rank must build the same output layer
            raise PartitionFormatError(f"{directory}/meta.json: missing field 'num_classes'")
        if cfg.verify:
            problems = check_files(directory, meta, comm.rank)
            if problems:
                raise PartitionFormatError(f"{problems[0]} (`distgnn-partition verify "
                                           f"{directory}` lists every problem)")
        part = load(directory, comm.rank)
        index = SplitIndex.from_partition(part)
        memory.check_features(part.x.shape[1], f"{directory} partition {comm.rank}")
        return part, delay, index

    part, delay, index = all_or_none(comm, load_local)  # memory-mapped: nothing large yet
    need = memory.predict(cfg.network, cfg.exchange, cfg.execution, part.num_nodes,
                          part.graph.num_edges, part.x.shape[1], int(part.meta["num_classes"]),
                          len(index.leaf_ids) + len(index.root_ids))
    where = f"{directory} partition {comm.rank}"

    def streamed_plan(panel=None):
        return memory.limited_plan(
            cfg.network, cfg.exchange, cfg.execution, need, part.num_nodes,
            part.graph.num_edges, part.x.shape[1], int(part.meta["num_classes"]), where,
            part.graph.edge_weight is not None, panel, partitioned=True,
            split_entries=len(index.leaf_ids) + len(index.root_ids))

    plan = all_or_none(comm, streamed_plan)
    streams, panel = streaming.agree(comm, plan is not None,
                                     plan["layout"].panel if plan else 0)
    if streams and (plan is None or plan["layout"].panel != panel):
        plan = all_or_none(comm, lambda: streamed_plan(panel))
    all_or_none(comm, lambda: memory.require_on_node(comm, need if plan is None else plan["ram"],
                                                     device, where))
    split = {"train": part.train_mask, "val": part.val_mask, "test": part.test_mask}
    (x, y, masks), negative, spilled = all_or_none(comm, lambda: rank_tensors(
        part.x, part.y, split, cfg, device, plan, comm.rank, timer))
    if spilled is not None and comm.rank == 0:
        print(f"{directory}: rank 0's " + streaming.describe(spilled, cfg.memory_limit),
              flush=True)
    negative = torch.tensor([float(negative)])
    comm.allreduce(negative)  # a negative entry may sit on any rank; rank 0 says it once
    index.check(comm, part)
    note = unchecked_fields_note(part.meta)
    if comm.rank == 0:
        if negative.item():
            print(row_norm_warning, flush=True)
        if note:
            print(f"{directory}: {note}", flush=True)
    exchange = (NoExchange() if cfg.algo == "0c"
                else Exchange(index=index, comm=comm, timer=timer, algo=cfg.algo, delay=delay,
                              smoothing=cfg.smoothing, comm_budget=cfg.comm_budget,
                              controlled=cfg.default_schedule, exchange_precision=cfg.wire,
                              backward_exchange=cfg.backward_exchange,
                              topology=cfg.exchange_topology,
                              exact_precision=cfg.exchange_precision or "fp32"))
    nbr = Neighbourhood(part.graph, get_backend(backend, cfg.gathered_precision,
                                                streaming.kernel_trial(cfg, spilled)),
                        in_degree=None if cfg.algo == "0c" else part.in_degree, timer=timer,
                        device=device, global_ids=part.global_ids, exchange=exchange,
                        dtype=getattr(torch, cfg.dtype), seed=cfg.seed)
    x = x.to(dtype=feature_dtype(cfg))
    if spilled is not None:
        x = streamed_features(x, part.num_nodes)
        streaming.with_transpose(nbr.graph)
    name = f"{part.meta.get('dataset', directory.name)} partition {comm.rank}/{comm.size}"
    owned = np.asarray(part.root_rank) == comm.rank
    lanes = None
    if cfg.checkpoint_dir:  # every rank's edges and root clones: the whole graph's content
        lanes = torch.from_numpy(all_or_none(comm, lambda: partial_lanes(
            part.graph.indptr, part.graph.indices, part.graph.edge_weight, part.global_ids,
            np.flatnonzero(owned), part.y, [part.train_mask, part.val_mask, part.test_mask],
            part.x)))
        comm.allreduce(lanes)
        lanes = lanes.numpy()
    origin = data_origin(int(part.meta["num_nodes"]), part.x.shape[1],
                         int(part.meta["num_classes"]), lanes)
    files = hashlib.sha256(json.dumps(part.meta["files"], sort_keys=True).encode()).hexdigest()
    layout = f"{comm.size} partitions (files sha256 {files[:16]})"
    return Shard(name, x, y, masks, nbr, int(part.meta["num_classes"]), origin, layout, owned,
                 int(part.meta["num_nodes"]), lambda: read_vertex_ids(directory), cfg.precision,
                 spilled)
