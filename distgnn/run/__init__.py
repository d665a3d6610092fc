"""A training or inference run: its configuration, data, loop, checkpoints and outputs.

The run's parts: its configuration (``config``), the rank's shard of data (``shard``), its
device (:mod:`distgnn.placement`) and memory check (``memory``), the training loop
(``training``) over identical replicas (``replicas``), the epoch records (``epoch_log``),
checkpoints (``checkpointing``: when; ``checkpoint_files``: the on-disk format), evaluation
(``evaluation``), the saved model (``saved_model``) and a saved model applied
(``prediction``), per-vertex outputs (``vertex_outputs``), and one MPI rank's set-up and
failure guard (``distributed``).

It imports everything below it in the core (data, kernels, nn, comm, exchange), nothing of
the command lines, the partitioner or the launcher.
"""
