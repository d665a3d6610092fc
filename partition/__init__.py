"""Vertex-cut partitioning (Libra, random, DBH) and the on-disk partition format.

``partition.load(DIR, rank)`` gives a rank its :class:`~partition.format.Partition`.
"""
from .format import (
           FORMAT_VERSION,
           Partition,
           PartitionFormatError,
           load,
           read_meta,
           verify,
)
from .vertex_cut import PartitionError, vertex_cut

__all__ = ["FORMAT_VERSION", "Partition", "PartitionError", "PartitionFormatError", "load",
           "read_meta", "verify", "vertex_cut"]
