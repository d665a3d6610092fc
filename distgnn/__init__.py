"""distgnn: full-batch graph neural network training on CPU clusters under MPI.

``distgnn.train(source, config, make_model)`` trains a model in one call;
``distgnn.setup(source, config)`` gives the data, graph and collectives of a training loop
written by hand (:mod:`distgnn.api`); ``distgnn.load_model(path)`` and
``distgnn.predict(path, source)`` use a saved model (:mod:`distgnn.run.prediction`);
``distgnn.read_metrics(path)`` reads a run's metrics file; ``distgnn.nn`` holds the layers,
:class:`~distgnn.nn.keyed_dropout.KeyedDropout` and the built-in models
(``build_model``).  Names are imported on first use, so that the
command-line tools that need none of them start without loading torch.
"""
import importlib

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
__all__ = [*EXPORTS, "__version__"]


def __getattr__(name: str):
    if name not in EXPORTS:
        raise AttributeError(f"module 'distgnn' has no attribute {name!r}")
    value = getattr(importlib.import_module(EXPORTS[name]), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(__all__)
