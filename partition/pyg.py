"""PyTorch Geometric data partitioned in one call."""
from __future__ import annotations

from pathlib import Path

from distgnn.data.pyg import from_pyg


def to_partitions(data, out: str | Path, parts: int, *, name: str = "graph", split: int = 0,
                  **partition_options):
    """Partition the PyG ``Data`` ``data`` into the partition directory ``out``.

    ``data`` is read by :func:`from_pyg` with ``name`` and ``split``, and cut into ``parts``
    partitions as ``distgnn-partition`` does; ``partition_options`` are
    :func:`partition.cli.partition_dataset`'s keywords (``method``, ``seed``, ``order``,
    ``roots``, ``keep_pairs``, ``weights``, ``order_vertices``, ``force``, ...).  Returns its
    :class:`~partition.cli.Partitioned` (statistics, vertex order, seconds)."""
    from partition.cli import partition_dataset

    return partition_dataset(from_pyg(data, name, split), out, parts, **partition_options)
