"""Per-rank device and backend choice, GPU binding by the launcher, and the device paths
that need a GPU (skipped without one)."""
import json
import os
import subprocess
import sys

import numpy as np
import pytest
import torch

import launch
from distgnn.errors import DistGNNError
from distgnn.placement import gpu_backend, parse_per_rank, placement, rank_backend
from launch.rank import gpu_for
from tests.helpers.mpi import run_plan

CUDA = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs an NVIDIA GPU")


def test_parse_per_rank():
    assert parse_per_rank("0:cpu, 3:cuda", "--rank-devices", ("auto", "cpu", "cuda")) == \
        {0: "cpu", 3: "cuda"}
    assert parse_per_rank(None, "--rank-devices", ("cpu",)) == {}
    for bad, message in [("0=cpu", "not RANK:VALUE"), ("x:cpu", "not RANK:VALUE"),
                         ("0:tpu", "not RANK:VALUE"), ("1:cpu,1:cuda", "rank 1 is given twice")]:
        with pytest.raises(DistGNNError, match=message):
            parse_per_rank(bad, "--rank-devices", ("auto", "cpu", "cuda"))


def test_auto_placement_and_per_rank_overrides():
    if not torch.cuda.is_available():
        assert placement(0, "auto", "auto") == (torch.device("cpu"), "numba")
    else:
        assert placement(0, "auto", "auto") == (placement(0, "cuda", "torch")[0],
                                                 gpu_backend())
    assert placement(1, "cpu", "numba", rank_backends="1:torch,3:torch") == \
        (torch.device("cpu"), "torch")
    assert placement(2, "cpu", "numba", rank_backends="1:torch,3:torch") == \
        (torch.device("cpu"), "numba")
    # the Numba kernels run on CPUs: an automatic device follows them there, GPU or not
    assert placement(0, "auto", "numba") == (torch.device("cpu"), "numba")
    assert placement(3, "auto", "auto", rank_backends="3:numba") == (torch.device("cpu"), "numba")


def test_numba_on_a_gpu_is_refused():
    with pytest.raises(DistGNNError, match="numba backend runs on CPUs"):
        rank_backend("numba", torch.device("cuda", 0), 3)


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the error of a GPU-less rank")
def test_cuda_without_a_gpu_is_a_one_line_error():
    proc = subprocess.run([os.path.join(os.path.dirname(sys.executable), "distgnn-train"),
                           "--device", "cuda", "--epochs", "1"], capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [
        "distgnn-train: error: rank 0 is to compute on cuda but sees no GPU (no CUDA build "
        "of torch, no driver, or CUDA_VISIBLE_DEVICES empty)"]


def test_gpu_for_shares_the_visible_gpus_round_robin():
    assert [gpu_for(i, ["0", "1"]) for i in range(5)] == ["0", "1", "0", "1", "0"]
    assert gpu_for(1, ["3", "5", "7"]) == "5"


@pytest.mark.parametrize("given, expected", [(None, ["0", "1", "2"]), ("5,6", ["5", "6", "5"])])
def test_launcher_gives_each_local_rank_its_gpu(given, expected):
    """A real 3-rank mpirun job under launch.rank (no GPU needed to set the variable)."""
    show = ("import json, os; print(json.dumps([os.environ['OMPI_COMM_WORLD_RANK'], "
            "os.environ['CUDA_VISIBLE_DEVICES']]))")
    job = launch.plan(3, [sys.executable, "-c", show], gpus_per_node=3)
    env = {**os.environ, **job.env}
    env.pop("CUDA_VISIBLE_DEVICES", None)
    if given:
        env["CUDA_VISIBLE_DEVICES"] = given
    proc = run_plan(job, timeout=120, env=env)
    assert proc.returncode == 0, proc.stderr
    seen = dict(json.loads(line) for line in proc.stdout.splitlines())
    assert [seen[str(r)] for r in range(3)] == expected


@CUDA
def test_staged_communicator_moves_gpu_tensors_through_the_host():
    from distgnn.comm import SelfCommunicator
    from distgnn.comm.staging import Staged

    comm = Staged(SelfCommunicator())
    send = torch.arange(12.0, device="cuda").view(6, 2)
    recv = torch.zeros(6, 2, device="cuda")
    comm.ialltoallv(send, [6], recv, [6]).wait()
    assert torch.equal(recv, send)
    t = torch.ones(3, device="cuda")
    comm.allreduce(t)
    assert t.device.type == "cuda" and torch.equal(t.cpu(), torch.ones(3))


@CUDA
def test_a_gpu_run_follows_the_cpu_loss_curve(cora):
    from tests.helpers.training import losses, train_quietly

    cpu = train_quietly(cora, epochs=20, device="cpu")
    gpu = train_quietly(cora, epochs=20, device="cuda")
    diff = np.max(np.abs(np.array(losses(gpu)) - losses(cpu)) / np.array(losses(cpu)))
    assert diff <= 1e-4
