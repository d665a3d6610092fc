r"""The Python entry points: :func:`train` a model, or :func:`setup` a hand-written loop.

:func:`train` trains a model in one call; :func:`setup` prepares the data, and the training
loop is yours to write.  Both take the same ``source`` and run unchanged on one socket and
under ``mpirun`` (one rank per partition).

``source`` is a dataset (a name such as ``"cora"``, a path to an ``.npz``, edge-list or OGB
directory, or a :class:`~distgnn.data.graph.NodeDataset`: trained whole, in this process) or a
partition directory written by ``distgnn-partition`` (trained under ``mpirun -np P``, one
rank per partition: every rank makes the same call).

The loss of a partitioned run is the whole graph's: each rank sums the cross-entropy over
the vertices it is the root clone of and divides by the global count,

.. math::
    \mathcal{L} = \frac{1}{|V_{m}|} \sum_{p} \sum_{v \in V^p_{m}}
        \operatorname{CE}(\mathbf{z}_v, y_v),

and the gradients are summed over ranks before every step, so the replicas stay one model.
Errors raise :class:`~distgnn.errors.DistGNNError`: set-up errors on every rank together,
with the same message, raised alone (not chained to what found them).  A script they end
prints one line, ``script.py: error: ...`` (:func:`distgnn.excepthook`).  The library never
aborts the MPI job itself; run your own script as ``python -m mpi4py script.py`` so that an
exception on one rank ends the job instead of leaving the other ranks waiting (the
watchdog, ``comm_timeout``, ends them otherwise); a set-up error of every rank ends it
without ``MPI_Abort``, printed once.
"""
from __future__ import annotations

from pathlib import Path
from typing import Callable

import torch

from .comm import Communicator, SelfCommunicator
from .data.datasets import load
from .data.graph import NodeDataset
from .data.partitions import is_partition_source
from .errors import DistGNNError
from .nn.loss import masked_cross_entropy
from .nn.prepare import prepare
from .run.config import TrainConfig
from .run.distributed import open_partitions, train_partitions
from .run.evaluation import check_logits
from .run.replicas import ReplicaSync
from .run.shard import Shard, dataset_shard, in_precision
from .run.training import (
    ModelFactory,
    TrainResult,
    checked_factory,
    checked_model,
    configure_threads,
)
from .run.training import train as train_whole
from .timing import PhaseTimer

Source = str | Path | NodeDataset
Config = TrainConfig | Callable[[], TrainConfig] | None


def _config(config: Config) -> TrainConfig:
    cfg = config() if callable(config) else config
    if cfg is None:
        return TrainConfig()
    if not isinstance(cfg, TrainConfig):
        raise DistGNNError(f"config must be a distgnn.TrainConfig, got {type(cfg).__name__}")
    return cfg


def check_source(source) -> None:
    """Refuse, in one line, a ``source`` that is none of what :func:`train` takes (a PyTorch
    Geometric ``Data`` gets the call that converts it)."""
    if isinstance(source, (str, Path, NodeDataset)):
        return
    if hasattr(source, "edge_index"):
        raise DistGNNError(f"source is a PyTorch Geometric {type(source).__name__}: convert "
                           "it first, distgnn.train(distgnn.from_pyg(data), ...), or "
                           "partition it, partition.pyg.to_partitions(data, DIR, P)")
    raise DistGNNError(f"source must be a dataset name, a path or a distgnn.NodeDataset, "
                       f"got {type(source).__name__}")


def _dataset(source: Source, cfg: TrainConfig) -> NodeDataset:
    return source if isinstance(source, NodeDataset) else load(source, split=cfg.split)


def train(source: Source, config: Config = None, make_model: ModelFactory | None = None, *,
          log: Callable[[str], None] = print) -> TrainResult:
    """Train a model on ``source`` as ``config`` says; returns the result on every rank.

    The model is ``config.model`` (or the model ``make_model(in_channels, num_classes)``
    returns: any ``torch.nn.Module`` called as ``model(g, x)``, returning logits ``[N, C]``);
    ``source`` is as the module docstring says.  Checkpointing, evaluating and stopping are
    as ``config`` says (``None``: the defaults).  ``config`` may be a callable returning the
    configuration: on partitions it is then made on every rank inside the set-up agreement.

    Returns the :class:`~distgnn.run.training.TrainResult` on every rank; ``log`` receives the
    progress lines (rank 0's only under MPI).  Collective under MPI."""
    check_source(source)
    make_model = checked_factory(make_model)
    if is_partition_source(source):
        return train_partitions(str(source), config if callable(config) else _config(config),
                                make_model, log)
    cfg = _config(config)
    cfg.check_single_socket()  # before the data is read
    cfg.check_paths()
    return train_whole(_dataset(source, cfg), cfg, log, make_model)


class Run:
    """The data of one rank and what a hand-written training loop needs besides it.

    Attributes:
        g (Neighbourhood): the graph a model is called with (``model(g, x)``).
        x (torch.Tensor): features ``[N, F]`` (normalised as ``config.feature_norm`` says;
            bf16 under ``--precision bf16-mixed``, read inside :meth:`autocast`).
        y (torch.Tensor): labels ``[N]`` int64.
        masks (dict[str, torch.Tensor]): bool ``[N]`` per split (``train``, ``val``,
            ``test``); on a partition true at root clones only, so each vertex counts once.
        num_features (int), num_classes (int): ``F`` and ``C`` of the whole dataset.
        rank (int), size (int): this rank and the number of ranks (0 and 1 on one socket).
        comm (Communicator): the ranks' collectives.
        config (TrainConfig): the run's configuration.
    """

    def __init__(self, cfg: TrainConfig, shard: Shard, comm: Communicator):
        self.config, self.shard, self.comm = cfg, shard, comm
        self.g, self.x, self.y, self.masks = shard.nbr, shard.x, shard.y, shard.masks
        self.num_features, self.num_classes = shard.num_features, shard.num_classes
        self.rank, self.size = comm.rank, comm.size
        self.counts: dict[str, float] = {}
        self.syncs: dict[int, ReplicaSync] = {}

    def place(self, model: torch.nn.Module) -> torch.nn.Module:
        """``model`` placed on this rank, made ready to train.  Collective.

        That is ``model`` on this rank's device and floating type, with rank 0's initial
        weights on every rank, its layers and dropouts keyed
        (:func:`distgnn.nn.prepare.prepare`, which also refuses torch's own dropout on
        partitions); a PyTorch Geometric model not wrapped by ``distgnn.pyg.distribute`` is
        refused."""
        model = checked_model(model, "run.place").to(self.x.device, self.shard.dtype)
        prepare(model, self.g, self.config.bf16_aggregation)
        sync = ReplicaSync(model, self.comm)
        sync.broadcast_parameters()
        self.syncs[id(model)] = sync
        return model

    def start_epoch(self, model: torch.nn.Module, epoch: int, training: bool = True) -> None:
        """``model.train(training)`` and the epoch on ``g``, which keys the dropout masks
        and the delayed exchange's schedule
        (:meth:`~distgnn.nn.aggregate.Neighbourhood.set_epoch`)."""
        model.train(training)
        self.g.set_epoch(epoch, training)

    def autocast(self):
        """The context a hand-written loop runs the model's forward pass (and loss) in.

        It is ``torch.autocast`` to bf16 on the CPU under ``--precision bf16-mixed``,
        nothing under fp32 (see :func:`~distgnn.run.shard.in_precision`)::

            with run.autocast():
                loss = run.loss(model(run.g, run.x))
        """
        return in_precision(self.shard)

    def mask(self, name: str) -> torch.Tensor:
        """The mask called ``name`` (refused in one line when the data has none)."""
        if name not in self.masks:
            raise DistGNNError(f"no mask {name!r}; the data has {', '.join(self.masks)}")
        return self.masks[name]

    def count(self, mask: str) -> float:
        """``|V_mask|`` over all ranks.  Collective on first use of each mask."""
        if mask not in self.counts:
            t = torch.tensor([float(self.mask(mask).sum())], dtype=torch.float64)
            self.comm.allreduce(t)
            self.counts[mask] = float(t[0])
        return self.counts[mask]

    def loss(self, logits: torch.Tensor, mask: str = "train") -> torch.Tensor:
        """This rank's share of the whole graph's mean cross-entropy over ``mask`` (see the
        module docstring): summed over ranks, it is the whole graph's loss."""
        total = self.count(mask)
        if not total:
            raise DistGNNError(f"the {mask} mask is empty on every rank")
        check_logits(logits, self.shard)
        m = self.mask(mask)
        # bf16 logits (under autocast) widened: the loss is summed in the run's type
        return masked_cross_entropy(logits.to(self.shard.dtype), self.y, m, total)

    def sync(self, model: torch.nn.Module, loss: torch.Tensor) -> float:
        """Sum ``model``'s gradients over ranks (call it after ``loss.backward()``, before
        the optimizer's step); returns the global loss.  Collective."""
        if id(model) not in self.syncs:
            raise DistGNNError("sync a model placed with run.place(model)")
        return self.syncs[id(model)].allreduce_gradients(loss)

    @torch.no_grad()
    def accuracy(self, logits: torch.Tensor, mask: str) -> float:
        """The fraction of ``mask``'s vertices, over all ranks, whose largest logit is
        their label.  Collective."""
        m = self.mask(mask)
        t = torch.tensor([float((logits[m].argmax(1) == self.y[m]).sum()), float(m.sum())],
                         dtype=torch.float64)
        self.comm.allreduce(t)
        return float(t[0] / t[1]) if t[1] else float("nan")

    def close(self) -> None:
        """Complete the exchanges still in flight (before the communicator goes away)."""
        self.g.exchange.finish()

    def __enter__(self) -> "Run":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def setup(source: Source, config: Config = None, *, log: Callable[[str], None] = print
          ) -> Run:
    """This rank's data and graph for a training loop written by hand (see :class:`Run`).

    ``source`` is as :func:`train` takes it.  Seeds torch with ``config.seed`` last, so a
    model built next starts from the same weights on one socket and on partitions.
    Collective under MPI."""
    check_source(source)
    if is_partition_source(source):
        rank = open_partitions(str(source), config if callable(config) else _config(config),
                               log)
        run = Run(rank.cfg, rank.shard, rank.comm)
    else:
        cfg = _config(config)
        cfg.check_single_socket()
        cfg.check_paths()
        configure_threads(cfg.threads)
        run = Run(cfg, dataset_shard(_dataset(source, cfg), cfg, PhaseTimer(), log),
                  SelfCommunicator())
    if run.shard.spilled is not None:  # the same on every rank: all stream, or none
        run.shard.close()
        raise DistGNNError("the run does not fit under --memory-limit, and a streamed run "
                           "(features and activations on disk) trains inside distgnn.train "
                           "only: a loop written by hand takes run.x and the model's whole "
                           "tensors in memory; raise the limit, or train with distgnn.train")
    torch.manual_seed(run.config.seed)
    return run
