"""Where each rank computes: its device and its aggregation backend.

One ``mpirun`` line serves a job whose ranks differ: ``--device`` and ``--backend`` give
every rank's choice, ``--rank-devices 0:cpu,1:cuda`` and ``--rank-backends 1:torch``
override them for the ranks named.  ``auto`` picks, per rank: the GPU when the rank sees
one (the local rank's share of the visible GPUs), else the CPU; on a GPU the triton backend
(or, where Triton cannot be imported, the torch backend), on a CPU the Numba kernels.
"""
from __future__ import annotations

import dataclasses
import numbers
import os

import torch

from .errors import DistGNNError
from .options import option

DEVICES = ("auto", "cpu", "cuda")
BACKEND_CHOICES = ("auto", "numba", "torch", "triton")
AGGREGATION_PRECISIONS = ("fp32", "bf16")
PRECISIONS = ("fp32", "bf16-mixed")
# /proc/cpuinfo flags of a CPU that multiplies bf16 matrices in hardware: AVX512-BF16 (Intel
# Cooper Lake and later, AMD Zen 4 and later), AMX (Intel Sapphire Rapids and later), Arm's
# BF16 extension
BF16_CPU_FLAGS = ("avx512_bf16", "amx_bf16", "bf16")
DTYPES = ("float32", "float64")
# More threads than this is a typo, not a machine: torch would try to start them all.
MAX_THREADS = 4096
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


def check_ranks_named(devices: dict[int, str], backends: dict[int, str], ranks: int) -> None:
    """Refuse a rank that ``--rank-devices`` or ``--rank-backends`` (parsed:
    :func:`parse_per_rank`) names but a run of ``ranks`` ranks lacks: a choice for no rank
    would be dropped without a word."""
    for flag, named in (("--rank-devices", devices), ("--rank-backends", backends)):
        absent = sorted(r for r in named if r >= ranks)
        if absent:
            job = ("one process (rank 0)" if ranks == 1
                   else f"{ranks} ranks (0-{ranks - 1})")
            raise DistGNNError(f"{flag} names rank {', '.join(map(str, absent))}, but the run "
                               f"has {job}: name ranks that exist")


def placement(rank: int, device: str, backend: str, rank_devices: str | None = None,
              rank_backends: str | None = None, ranks: int | None = None
              ) -> tuple[torch.device, str]:
    """``(device, backend name)`` of ``rank`` under the flags of ``distgnn-train``, in a job
    of ``ranks`` ranks (``None``: not checked), where a rank named by ``--rank-devices`` or
    ``--rank-backends`` must exist: a choice for no rank would be dropped without a word."""
    devices = parse_per_rank(rank_devices, "--rank-devices", DEVICES)
    backends = parse_per_rank(rank_backends, "--rank-backends", BACKEND_CHOICES)
    if ranks is not None:
        check_ranks_named(devices, backends, ranks)
    d = devices.get(rank, device)
    b = backends.get(rank, backend)
    if d == "auto" and b == "numba":  # the Numba kernels run on CPUs: auto means the CPU
        d = "cpu"
    d = rank_device(d, rank)
    return d, rank_backend(b, d, rank)


@dataclasses.dataclass
class ExecutionConfig:
    """Where and how each rank computes: device, kernels, threads, precision, two trades.

    Device and aggregation kernels (per rank where a job mixes them), threads,
    floating-point type and the precision of aggregation, and two trades of time for memory
    or start-up (recomputing activations, the kernels' timed trial)."""

    device: str = option("auto", "where each rank computes: cpu, cuda (the local rank's "
                         "GPU) or auto (cuda when the rank sees a GPU)", choices=DEVICES)
    backend: str = option("auto", "aggregation kernels: numba (cache-blocked CPU kernels), "
                          "torch (torch.sparse, any device), triton (deterministic GPU "
                          "kernels) or auto (triton on a GPU, torch there without Triton; "
                          "else numba)", choices=BACKEND_CHOICES)
    rank_devices: str | None = option(
        None, "per-rank --device for the ranks named, e.g. 0:cpu,1:cuda (a job may mix CPU "
        "and GPU ranks)", metavar="R:DEV,...")
    rank_backends: str | None = option(
        None, "per-rank --backend for the ranks named, e.g. 1:triton,3:triton",
        metavar="R:BACKEND,...")
    threads: int | None = option(
        None, "torch and Numba threads (default: the libraries' own on one socket; under "
        "MPI, this node's cores divided by its ranks)", type=int)
    dtype: str = option("float32", "floating-point type of features, weights, activations "
                        "and the exchanged partials; float64 is for checking results against "
                        "a reference (about 2x the memory and time)", choices=DTYPES)
    aggregation_precision: str | None = option(
        None, "what sum/mean aggregations gather, forward and backward: fp32, or bf16 "
        "(features and gradients rounded to bf16, accumulated in fp32: half the bytes the "
        "Numba kernels move; max/min stay fp32; the activations kept for the backward pass "
        "are stored in bf16 too) (default: bf16 under --precision bf16-mixed, else fp32)",
        choices=AGGREGATION_PRECISIONS)
    precision: str = option(
        "fp32", "bf16-mixed: every matrix product of the model in bf16 (torch's CPU kernels "
        "use the CPU's bf16 units: AVX512-BF16 or AMX), sum/mean aggregations gathering bf16 "
        "rows as --aggregation-precision bf16 does, and the activations kept for the backward "
        "pass in bf16; weights, optimizer state, the loss and every sum stay fp32. A CPU "
        "without bf16 units is refused (it would emulate them, slower than fp32); CPU ranks "
        "only", choices=PRECISIONS)
    recompute: bool = option(
        False, "keep only each layer's input for the backward pass and run the layer again "
        "there (activation checkpointing): activation memory of one tensor per layer for "
        "about a third more compute; cd-0 and 0c only", action="store_true")
    kernel_trial: bool = option(
        True, "take the Numba SpMM's untimed plan (no hub blocking) instead of timing a few "
        "block sizes per feature width on graphs of 2M edges or more: the trial costs about "
        "20 SpMMs per width (20-40 s on 31M edges) and gains 10-20 %% per SpMM, worth it over "
        "many epochs, not for a run of a few", flag="--no-kernel-trial", action="store_false")
    memory_arena: bool = option(
        True, "let each CPU rank allocate its epochs from malloc instead of the planned "
        "memory arena, which records the first epoch's large blocks, plans them into one "
        "slab and serves every later epoch from it (no page faults, no mapping calls; "
        "compiled on first use with the system's C++ compiler, skipped without one)",
        flag="--no-memory-arena", action="store_false")
    memory_limit: float | None = option(
        None, "RAM each rank may take, in GiB. A rank whose plan fits runs as without it; "
        "one whose plan does not keeps the graph in RAM and its feature and activation "
        "matrices in files under --spill-dir, aggregating one panel of columns at a time "
        "and computing the dense work in chunks of rows, so that its peak stays under the "
        "limit (GCN and GraphSAGE-gcn, fp32 or float64, cd-0 or 0c; the SpMM's timed "
        "plans only where the limit leaves room for them); the start-up line gives the "
        "plan: RAM, disk, and the bytes each epoch reads and writes",
        type=float, metavar="GIB")
    spill_dir: str | None = option(
        None, "with --memory-limit: the local directory for a rank's spill files, a folder "
        "of its own removed when the run ends (default: the system's temporary directory, "
        "$TMPDIR or /tmp; under SLURM name a node-local disk)", metavar="DIR")

    def __post_init__(self):
        for flag, choices in (("device", DEVICES), ("backend", BACKEND_CHOICES),
                              ("dtype", DTYPES), ("precision", PRECISIONS),
                              ("aggregation-precision", AGGREGATION_PRECISIONS)):
            value = getattr(self, flag.replace("-", "_"))
            if value not in choices and not (flag == "aggregation-precision" and value is None):
                raise DistGNNError(f"--{flag} must be one of {', '.join(choices)}, got "
                                   f"{value!r}")
        if self.threads is not None and not (
                isinstance(self.threads, numbers.Integral) and not isinstance(self.threads, bool)
                and 1 <= self.threads <= MAX_THREADS):
            raise DistGNNError(f"--threads must be an integer from 1 to {MAX_THREADS}, got "
                               f"{self.threads!r}")
        for flag, value in (("rank-devices", self.rank_devices),
                            ("rank-backends", self.rank_backends)):
            if value == "":  # "" would read as not given
                raise DistGNNError(f"--{flag}: the value is empty; give one, or leave it out")
        parse_per_rank(self.rank_devices, "--rank-devices", DEVICES)
        parse_per_rank(self.rank_backends, "--rank-backends", BACKEND_CHOICES)
        if self.aggregation_precision == "bf16" and self.dtype == "float64":
            raise DistGNNError("--aggregation-precision bf16 rounds float32 operands; --dtype "
                               "float64 is for exact checks: use fp32 with it")
        if self.precision == "bf16-mixed" and self.dtype == "float64":
            raise DistGNNError("--precision bf16-mixed computes in bf16 beside float32 "
                               "weights; --dtype float64 is for exact checks: use one or "
                               "the other")
        if self.memory_limit is not None and (
                not isinstance(self.memory_limit, numbers.Real)
                or isinstance(self.memory_limit, bool) or not self.memory_limit > 0
                or self.memory_limit == float("inf")):
            raise DistGNNError(f"--memory-limit must be a positive number of GiB, got "
                               f"{self.memory_limit!r}")
        if self.spill_dir is not None and self.memory_limit is None:
            raise DistGNNError("--spill-dir names where --memory-limit puts a run's spill "
                               "files; give --memory-limit with it")
        if self.spill_dir == "":
            raise DistGNNError("--spill-dir: the value is empty; give a directory, or leave "
                               "it out")
        if self.precision == "bf16-mixed" and self.aggregation_precision == "fp32":
            raise DistGNNError("--precision bf16-mixed gathers bf16 rows in its aggregations "
                               "and keeps bf16 activations; --aggregation-precision fp32 "
                               "cannot apply under it: leave that flag out, or use "
                               "--precision fp32")

    def check_single_socket(self) -> None:
        """Refuse, for a run on one socket (one process: rank 0), a per-rank choice for a rank
        other than 0.  Rank 0's is that process's, as it would be in a job (``--rank-devices
        0:cpu`` keeps it on the CPU where ``auto`` would take a GPU), so it stays allowed."""
        check_ranks_named(parse_per_rank(self.rank_devices, "--rank-devices", DEVICES),
                          parse_per_rank(self.rank_backends, "--rank-backends",
                                         BACKEND_CHOICES), 1)

    @property
    def bf16_aggregation(self) -> bool:
        """Whether sum/mean aggregations gather bf16 rows (and activations are kept in bf16):
        ``--aggregation-precision bf16``, or ``--precision bf16-mixed``, which implies it
        (and refuses ``fp32`` given with it)."""
        return self.aggregation_precision == "bf16" or self.precision == "bf16-mixed"

    @property
    def gathered_precision(self) -> str:
        """What the aggregation backend gathers (:func:`~distgnn.nn.backends.get_backend`'s
        ``aggregation_precision``): ``bf16`` where :attr:`bf16_aggregation`, else ``fp32``."""
        return "bf16" if self.bf16_aggregation else "fp32"


def cpu_has_bf16(cpuinfo: str = "/proc/cpuinfo") -> bool:
    """Whether this CPU multiplies bf16 in hardware (one of :data:`BF16_CPU_FLAGS` among its
    flags; False where ``cpuinfo`` cannot be read)."""
    try:
        with open(cpuinfo) as f:
            for line in f:
                name, _, value = line.partition(":")
                if name.strip() in ("flags", "Features"):
                    return bool(set(value.split()) & set(BF16_CPU_FLAGS))
    except OSError:
        pass
    return False


def check_precision(precision: str, device: torch.device, cpuinfo: str = "/proc/cpuinfo"
                    ) -> None:
    """Refuse ``--precision bf16-mixed`` where it cannot run as it says: on a GPU rank, or on
    a CPU without bf16 units."""
    if precision != "bf16-mixed":
        return
    if device.type != "cpu":
        raise DistGNNError(f"--precision bf16-mixed runs on CPU ranks; this rank computes on "
                           f"{device}: use --precision fp32 there")
    if not cpu_has_bf16(cpuinfo):
        raise DistGNNError("--precision bf16-mixed: this CPU has no bf16 matrix units (none "
                           f"of {', '.join(BF16_CPU_FLAGS)} in {cpuinfo}); torch would "
                           "emulate them, slower than fp32: use --precision fp32")
