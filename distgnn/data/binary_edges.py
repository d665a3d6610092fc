"""Binary edge files: a NumPy ``.npy`` array ``[E, 2]`` of int32 or int64.

Row ``k`` is the edge ``src -> dst`` (``edges[k, 0]``, ``edges[k, 1]``), vertex ids
``0..N-1``.

They are read in chunks with plain file reads (not a memory map, whose pages would count
as the process's resident memory), so a graph larger than memory can be streamed
(:mod:`partition.stream`), and written in chunks (:class:`EdgeFileWriter`) by a generator
that never holds the graph.
"""
from __future__ import annotations

from pathlib import Path
from typing import Iterator

import numpy as np

from .graph import GraphError

EDGE_DTYPES = (np.dtype("<i4"), np.dtype("<i8"))


def edge_file_header(path: str | Path) -> tuple[int, np.dtype, int]:
    """``(E, dtype, offset of the data)`` of the edge file ``path``; anything but a C-order
    little-endian int32/int64 ``[E, 2]`` array is refused in one line."""
    try:
        with open(path, "rb") as f:
            version = np.lib.format.read_magic(f)
            read = (np.lib.format.read_array_header_1_0 if version == (1, 0)
                    else np.lib.format.read_array_header_2_0)
            shape, fortran, dtype = read(f)
            offset = f.tell()
    except (OSError, ValueError) as e:
        raise GraphError(f"not a readable .npy edge file: {e}", path) from None
    if any(d < 0 for d in shape):  # numpy's header reader accepts them
        raise GraphError(f"negative dimension in shape {list(shape)}", path)
    if dtype not in EDGE_DTYPES or len(shape) != 2 or shape[1] != 2 or fortran:
        raise GraphError(f"an edge file holds an int32 or int64 [E, 2] array in C order; "
                         f"this one holds {dtype} {list(shape)}"
                         + (" in Fortran order" if fortran else ""), path)
    expected = offset + shape[0] * 2 * dtype.itemsize
    size = Path(path).stat().st_size
    if size < expected:
        raise GraphError(f"truncated: {size} bytes, the header promises {expected}", path)
    return shape[0], dtype, offset


def edge_count(path: str | Path) -> int:
    """The number of edges ``E`` of the edge file ``path``."""
    return edge_file_header(path)[0]


def iter_edges(path: str | Path, chunk: int) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """``(src, dst)`` of up to ``chunk`` edges at a time, in file order, in the file's
    integer type; a negative id is refused."""
    total, dtype, offset = edge_file_header(path)
    with open(path, "rb") as f:
        f.seek(offset)
        for start in range(0, total, chunk):
            pairs = np.fromfile(f, dtype, 2 * min(chunk, total - start)).reshape(-1, 2)
            if len(pairs) and pairs.min() < 0:
                raise GraphError(f"negative vertex id {int(pairs.min())} in edges "
                                 f"{start}..{start + len(pairs) - 1}", path)
            yield pairs[:, 0].copy(), pairs[:, 1].copy()


class EdgeFileWriter:
    """Writes an edge file of ``num_edges`` edges in pieces (:meth:`write`), into
    ``path``; refused at :meth:`close` unless exactly ``num_edges`` were written."""

    def __init__(self, path: str | Path, num_edges: int, dtype=np.int32):
        self.path, self.num_edges, self.written = Path(path), num_edges, 0
        self.dtype = np.dtype(dtype).newbyteorder("<")
        self.file = open(self.path, "wb")
        np.lib.format.write_array_header_1_0(
            self.file, {"descr": np.lib.format.dtype_to_descr(self.dtype),
                        "fortran_order": False, "shape": (num_edges, 2)})

    def write(self, src: np.ndarray, dst: np.ndarray) -> None:
        pairs = np.empty((len(src), 2), self.dtype)
        pairs[:, 0], pairs[:, 1] = src, dst
        pairs.tofile(self.file)
        self.written += len(src)

    def close(self) -> None:
        self.file.close()
        if self.written != self.num_edges:
            raise GraphError(f"{self.written} edges written, the header says "
                             f"{self.num_edges}", self.path)
