"""Where each rank computes: its device and its aggregation backend.

One ``mpirun`` line serves a job whose ranks differ: ``--device`` and ``--backend`` give
every rank's choice, ``--rank-devices 0:cpu,1:cuda`` and ``--rank-backends 1:torch``
override them for the ranks named.  ``auto`` picks, per rank: the GPU when the rank sees
one (the local rank's share of the visible GPUs), else the CPU; on a GPU the triton backend
(or, where Triton cannot be imported, the torch backend), on a CPU the Numba kernels.
"""
from __future__ import annotations

import os

import torch

from .errors import DistGNNError

DEVICES = ("auto", "cpu", "cuda")
BACKEND_CHOICES = ("auto", "numba", "torch", "triton")
# the node-local rank and the ranks on this node, as each launcher names them (Open MPI,
# MPICH/Hydra and Intel MPI, SLURM)
LOCAL_RANK_VARIABLES = ("OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID", "SLURM_LOCALID")
LOCAL_SIZE_VARIABLES = ("OMPI_COMM_WORLD_LOCAL_SIZE", "MPI_LOCALNRANKS", "SLURM_NTASKS_PER_NODE")


def parse_per_rank(spec: str | None, flag: str, choices: tuple[str, ...]) -> dict[int, str]:
    """``"0:cpu,1:cuda"`` as ``{0: "cpu", 1: "cuda"}`` (each value one of ``choices``)."""
    if not spec:
        return {}
    out = {}
    for item in spec.split(","):
        rank, sep, value = item.strip().partition(":")
        if not sep or not rank.strip().isdigit() or value.strip() not in choices:
            raise DistGNNError(f"{flag}: {item.strip()!r} is not RANK:VALUE with VALUE one "
                               f"of {', '.join(choices)} (e.g. 0:{choices[1]},1:{choices[-1]})")
        if int(rank) in out:
            raise DistGNNError(f"{flag}: rank {int(rank)} is given twice")
        out[int(rank)] = value.strip()
    return out


def local_rank() -> int:
    """This rank's index among the ranks of its node (0 outside a launcher)."""
    return next((int(os.environ[v]) for v in LOCAL_RANK_VARIABLES if v in os.environ), 0)


def local_size(default: int) -> int:
    """The number of ranks on this node, as the launcher says (``default`` without one)."""
    return next((int(os.environ[v]) for v in LOCAL_SIZE_VARIABLES if v in os.environ), default)


def rank_device(choice: str, rank: int) -> torch.device:
    """The device of ``choice`` (``auto``, ``cpu``, ``cuda``: validated by
    :class:`~distgnn.run.config.TrainConfig`) for this rank."""
    gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if choice == "cuda" and gpus == 0:
        raise DistGNNError(f"rank {rank} is to compute on cuda but sees no GPU "
                           "(no CUDA build of torch, no driver, or CUDA_VISIBLE_DEVICES empty)")
    if choice == "cpu" or gpus == 0:
        return torch.device("cpu")
    return torch.device("cuda", local_rank() % gpus)


def gpu_backend() -> str:
    """A GPU rank's default backend: ``triton`` (deterministic kernels) where Triton can be
    imported, else ``torch`` (cuSPARSE)."""
    from .kernels import gpu

    return "triton" if gpu.available() else "torch"


def rank_backend(choice: str, device: torch.device, rank: int) -> str:
    """The aggregation backend of ``choice`` (``auto``, ``numba``, ``torch``, ``triton``) on
    ``device``."""
    if choice == "auto":
        return "numba" if device.type == "cpu" else gpu_backend()
    if choice == "numba" and device.type != "cpu":
        raise DistGNNError(f"rank {rank}: the numba backend runs on CPUs, not {device}; use "
                           "--backend triton, torch (or auto) on GPU ranks")
    if choice == "triton" and device.type != "cuda":
        raise DistGNNError(f"rank {rank}: the triton backend runs on CUDA GPUs, not {device}; "
                           "use --backend numba (or auto) on CPU ranks")
    if choice == "triton" and gpu_backend() != "triton":
        raise DistGNNError(f"rank {rank}: --backend triton needs Triton, which this Python "
                           "cannot import (it comes with CUDA builds of PyTorch)")
    return choice


def gpu_identity(device: torch.device) -> str | None:
    """The physical GPU behind ``device`` (its UUID), or ``None`` for a CPU rank."""
    if device.type != "cuda":
        return None
    return str(torch.cuda.get_device_properties(device).uuid)


def synchronize(device: torch.device | str) -> None:
    """Wait for the work queued on ``device`` (a GPU runs asynchronously; a clock read
    after this counts all of it).  A no-op on the CPU."""
    if torch.device(device).type == "cuda":
        torch.cuda.synchronize(device)


def placement(rank: int, device: str, backend: str, rank_devices: str | None = None,
              rank_backends: str | None = None) -> tuple[torch.device, str]:
    """``(device, backend name)`` of ``rank`` under the flags of ``distgnn-train``."""
    d = parse_per_rank(rank_devices, "--rank-devices", DEVICES).get(rank, device)
    b = parse_per_rank(rank_backends, "--rank-backends", BACKEND_CHOICES).get(rank, backend)
    if d == "auto" and b == "numba":  # the Numba kernels run on CPUs: auto means the CPU
        d = "cpu"
    d = rank_device(d, rank)
    return d, rank_backend(b, d, rank)
