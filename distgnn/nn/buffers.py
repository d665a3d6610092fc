"""Numpy buffers in torch's memory.

The Numba kernels write their outputs into numpy arrays.  Allocated by numpy, those come
from malloc; allocated here, from torch's CPU allocator, which is the planned memory arena
once a training run has installed it (:mod:`distgnn.run.arena`): an epoch's kernel outputs
are then planned and reused with the rest of its activations and gradients.
"""
from __future__ import annotations

import numpy as np
import torch


def empty(shape: tuple[int, ...], dtype) -> np.ndarray:
    """An uninitialised C-contiguous numpy array of ``shape`` and ``dtype`` whose memory a
    torch tensor owns (64-byte aligned: torch's CPU alignment, a cache line)."""
    tensor = torch.empty(shape, dtype=torch.from_numpy(np.empty(0, dtype)).dtype)
    return tensor.numpy()


def empty_like(x: np.ndarray) -> np.ndarray:
    """:func:`empty` of ``x``'s shape and dtype."""
    return empty(x.shape, x.dtype)
