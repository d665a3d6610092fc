"""NumPy's binary files, read without unpickling: ``.npy`` arrays and ``.npz`` archives.

Every header is read before any data, so an object array is refused before it could be
unpickled and the total size is checked against free memory before anything is
allocated (:func:`~distgnn.data.graph.require_memory`)."""
from __future__ import annotations

import math
import zipfile
from pathlib import Path

import numpy as np

from ..errors import one_line
from .graph import GraphError, require_memory
from .text_files import READ_ERRORS


def read_npz(path: Path) -> dict[str, np.ndarray]:
    """Every ``NAME.npy`` member of the archive ``path``, by ``NAME``.

    All headers are read first, so a member holding Python objects is refused before any
    unpickling and the members' total size is checked against free memory before any is
    allocated.
    """
    try:
        with zipfile.ZipFile(path) as archive:
            names = [name for name in archive.namelist() if name.endswith(".npy")]
            nbytes = 0
            for name in names:
                with archive.open(name) as f:
                    nbytes += npy_nbytes(f, path, name)
            require_memory(nbytes, path)
            arrays = {}
            for name in names:
                with archive.open(name) as f:
                    arrays[name[:-4]] = np.lib.format.read_array(f, allow_pickle=False)
            return arrays
    except GraphError:
        raise
    # RuntimeError: an encrypted member; NotImplementedError: an unknown compression method
    except (*READ_ERRORS, ValueError, zipfile.BadZipFile, RuntimeError,
            NotImplementedError) as e:
        raise GraphError(f"unreadable .npz archive: {one_line(e)}", path) from None


def npy_nbytes(f, path: Path, member: str | None = None) -> int:
    """Bytes of the array whose ``.npy`` header starts ``f``, read from ``path`` (its
    archive member ``member``); refuses object dtypes and negative dimensions."""
    where = f"member {member}: " if member else ""
    version = np.lib.format.read_magic(f)
    if version == (1, 0):
        shape, _, dtype = np.lib.format.read_array_header_1_0(f)
    elif version == (2, 0):
        shape, _, dtype = np.lib.format.read_array_header_2_0(f)
    else:
        raise GraphError(f"{where}.npy format version {version[0]}.{version[1]} is not "
                         "supported", path)
    if dtype.hasobject:
        raise GraphError(f"{where}holds Python objects (dtype {dtype}); refused because "
                         "loading it would unpickle them (allow_pickle=False)", path)
    if any(d < 0 for d in shape):
        raise GraphError(f"{where}negative dimension in shape {shape}", path)
    return math.prod(shape) * dtype.itemsize


def read_npy(path: Path) -> np.ndarray:
    """The array of the ``.npy`` file ``path``, header checked first (see :func:`npy_nbytes`)."""
    with open(path, "rb") as f:
        require_memory(npy_nbytes(f, path), path)
        f.seek(0)
        return np.lib.format.read_array(f, allow_pickle=False)
