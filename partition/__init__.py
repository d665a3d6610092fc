"""Vertex-cut partitioning (Libra, HDRF, random, DBH, NE) and the on-disk partition format.

``partition.load(DIR, rank)`` gives a rank its :class:`~distgnn.data.partitions.Partition`.
"""
from distgnn.data.partition_checks import verify
from distgnn.data.partitions import (
           FORMAT_VERSION,
           Partition,
           PartitionFormatError,
           load,
           read_meta,
)
from partition.vertex_cut import PartitionError, vertex_cut

__all__ = ["FORMAT_VERSION", "Partition", "PartitionError", "PartitionFormatError", "load",
           "read_meta", "verify", "vertex_cut"]
