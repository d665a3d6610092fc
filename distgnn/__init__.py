"""distgnn: full-batch graph neural network training on CPU clusters under MPI."""

__version__ = "0.1.0"
