"""distgnn: full-batch graph neural network training on CPU clusters under MPI.

``distgnn.train(source, config, make_model)`` trains a model in one call;
``distgnn.setup(source, config)`` gives the data, graph and collectives of a training loop
written by hand (:mod:`distgnn.api`); ``distgnn.load_model(path)`` and
``distgnn.predict(path, source)`` use a saved model (:mod:`distgnn.run.prediction`);
``distgnn.read_metrics(path)`` reads a run's metrics file; ``distgnn.nn`` holds the layers,
:class:`~distgnn.nn.keyed_dropout.KeyedDropout` and the built-in models
(``build_model``); ``distgnn.pyg.distribute(model)`` makes a PyTorch Geometric model train on
partitions as it is (:mod:`distgnn.pyg`).  Names are imported on first use, so that the
command-line tools that need none of them start without loading torch.

A :class:`~distgnn.errors.DistGNNError` that ends a script is printed as the command-line
tools print it, ``PROG: error: MESSAGE``, without a traceback (:func:`excepthook`).
"""
import importlib
import importlib.abc
import os
import sys

__version__ = "0.1.0"

# name -> the module that defines it
EXPORTS = {
    "train": "distgnn.api",
    "setup": "distgnn.api",
    "Run": "distgnn.api",
    "from_pyg": "distgnn.data.pyg",
    "load_model": "distgnn.run.prediction",
    "predict": "distgnn.run.prediction",
    "TrainConfig": "distgnn.run.config",
    "TrainResult": "distgnn.run.training",
    "load": "distgnn.data.datasets",
    "read_metrics": "distgnn.run.epoch_log",
    "NodeDataset": "distgnn.data.graph",
    "CSRGraph": "distgnn.data.graph",
    "Neighbourhood": "distgnn.nn.aggregate",
    "DistGNNError": "distgnn.errors",
}
# submodules reachable as attributes without an import of their own (distgnn.pyg.distribute)
SUBMODULES = ("pyg",)
__all__ = [*EXPORTS, *SUBMODULES, "__version__"]

# module -> where its contents live now (the library was one flat package)
MOVED = {
    "distgnn.aggregate": "distgnn.nn.aggregate",
    "distgnn.backends": "distgnn.nn.backends",
    "distgnn.bench": "bench (the distgnn-bench package)",
    "distgnn.checkpoint": "distgnn.run.checkpoint_files",
    "distgnn.checkpointer": "distgnn.run.checkpointing",
    "distgnn.cli_common": "distgnn.program",
    "distgnn.config": "distgnn.TrainConfig (distgnn.run.config)",
    "distgnn.datasets": "distgnn.load (distgnn.data.datasets)",
    "distgnn.distributed": "distgnn.run.distributed",
    "distgnn.dropout": "distgnn.nn.KeyedDropout (distgnn.nn.keyed_dropout)",
    "distgnn.edge_file": "distgnn.data.binary_edges",
    "distgnn.epoch_log": "distgnn.run.epoch_log",
    "distgnn.generators": "distgnn.data.generators",
    "distgnn.graph": "distgnn.data.graph",
    "distgnn.inference": "distgnn.run.evaluation",
    "distgnn.memory": "distgnn.run.memory",
    "distgnn.model_file": "distgnn.run.saved_model",
    "distgnn.models": "distgnn.nn.models",
    "distgnn.ordering": "distgnn.data.ordering",
    "distgnn.prediction": "distgnn.run.prediction",
    "distgnn.replicas": "distgnn.run.replicas",
    "distgnn.saved_activations": "distgnn.nn.saved_activations",
    "distgnn.shard": "distgnn.run.shard",
    "distgnn.training": "distgnn.run.training",
    "distgnn.vertex_outputs": "distgnn.run.vertex_outputs",
    "partition.format": "distgnn.data.partitions (partition.load, partition.verify)",
}


class MovedModules(importlib.abc.MetaPathFinder):
    """Turns an import of a module that moved into one line naming where it lives now.

    Consulted after every other finder, so only names that exist nowhere reach it."""

    def find_spec(self, fullname, path=None, target=None):
        if fullname in MOVED:
            raise ModuleNotFoundError(f"{fullname} moved: use {MOVED[fullname]}", name=fullname)
        return None


if not any(isinstance(f, MovedModules) for f in sys.meta_path):
    sys.meta_path.append(MovedModules())


def excepthook(kind, error, traceback) -> None:
    """``sys.excepthook`` while distgnn is imported: the library's errors as one line.

    A :class:`~distgnn.errors.DistGNNError` (a user's error, never a bug) that ends a script
    is one line per line of its message, ``PROG: error: MESSAGE``; any other exception goes
    to the hook that was there before.

    Under MPI (``mpirun -np P python -m mpi4py script.py``), an error every rank raised
    together at start-up (:class:`distgnn.comm.RankFailed`, the same message on every rank)
    is printed by rank 0 alone, and the job ends as a failed program does, without
    ``MPI_Abort``: no rank waits for another, so none needs killing (mpi4py's runner would
    abort the job on any exception).  An error of one rank is printed with its rank, and
    the runner aborts the job, since the others may wait for it."""
    errors = sys.modules.get("distgnn.errors")
    if errors is None or not isinstance(error, errors.DistGNNError):
        return _previous_excepthook(kind, error, traceback)
    prog = os.path.basename(sys.argv[0]) if sys.argv and sys.argv[0] else "python"
    mpi = sys.modules.get("mpi4py.MPI")
    world = (mpi.COMM_WORLD if mpi is not None and mpi.Is_initialized()
             and not mpi.Is_finalized() else None)
    rank, size = (world.Get_rank(), world.Get_size()) if world is not None else (0, 1)
    comm = sys.modules.get("distgnn.comm")
    together = size == 1 or (comm is not None and isinstance(error, comm.RankFailed))
    if rank == 0 or not together:
        where = "" if together else f"rank {rank}: "
        for line in str(error).splitlines() or [type(error).__name__]:
            print(f"{prog}: error: {where}{line}", file=sys.stderr)
    sys.stderr.flush()
    if world is not None and together and hasattr(mpi, "_set_abort_status"):
        mpi._set_abort_status(0)  # finalize at exit, as after any failed program
    return None


_previous_excepthook = getattr(sys.excepthook, "previous", sys.excepthook)
excepthook.previous = _previous_excepthook
sys.excepthook = excepthook


def __getattr__(name: str):
    if name in SUBMODULES:
        return importlib.import_module(f"distgnn.{name}")
    if name not in EXPORTS:
        raise AttributeError(f"module 'distgnn' has no attribute {name!r}")
    value = getattr(importlib.import_module(EXPORTS[name]), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(__all__)
