"""Communicator and rank set-up pieces that need no MPI job (multi-rank: test_distributed)."""
import pytest
import torch

from distgnn.comm import (
    RankFailed,
    SelfCommunicator,
    all_or_none,
    get_communicator,
    rank_ranges,
    resolve_wait,
)
from distgnn.errors import DistGNNError
from distgnn.exchange.config import DEFAULT_DELAY
from distgnn.run.config import TrainConfig
from distgnn.run.distributed import threads_per_rank


def test_self_communicator_copies_and_refuses_mismatched_counts():
    comm = SelfCommunicator()
    send, recv = torch.arange(6.0).view(3, 2), torch.zeros(3, 2)
    comm.ialltoallv(send, [3], recv, [3]).wait()
    assert torch.equal(recv, send)
    with pytest.raises(DistGNNError, match="sends"):
        comm.alltoallv(send, [3], torch.zeros(2, 2), [2])


def test_all_or_none_passes_results_and_turns_user_errors_into_rank_failures():
    comm = SelfCommunicator()
    assert all_or_none(comm, lambda: 7) == 7

    def broken():
        raise DistGNNError("part-00000/x.npy: checksum mismatch")

    with pytest.raises(RankFailed, match="checksum mismatch"):
        all_or_none(comm, broken)
    with pytest.raises(ZeroDivisionError):  # a bug is not a user error: it propagates
        all_or_none(comm, lambda: 1 / 0)


def test_all_or_none_names_each_distinct_error_once_with_its_ranks():
    class FourRanks(SelfCommunicator):
        """Rank 0 of four; ranks 1-3 fail, 1 and 3 with the same message."""
        size = 4

        def allreduce(self, tensor, op="sum"):
            if tensor.dim() == 1:
                tensor[1:] = 1
                return
            for rank, text in ((1, "x.npy: missing"), (2, "y.npy: missing"),
                               (3, "x.npy: missing")):
                tensor[rank, 0] = 1
                tensor[rank, 1:1 + len(text)] = torch.tensor(list(text.encode()))

    with pytest.raises(RankFailed) as failure:
        all_or_none(FourRanks(), lambda: 0)
    assert str(failure.value).splitlines() == ["ranks 1, 3: x.npy: missing",
                                               "rank 2: y.npy: missing"]
    assert rank_ranges([0, 1, 2, 5, 7, 8]) == "ranks 0-2, 5, 7-8"


def test_delay_defaults_and_checks():
    default = TrainConfig(algo="cd-r")  # the default schedule: exact or one epoch stale
    assert default.default_schedule and default.delay_epochs == 1 and default.wire == "int4"
    smoothed = TrainConfig(algo="cd-r", smoothing=0.5)
    assert smoothed.delay_epochs == DEFAULT_DELAY and not smoothed.default_schedule
    assert smoothed.wire == "fp32" and TrainConfig(algo="cd-0").wire == "fp32"
    assert TrainConfig(algo="cd-r", delay=2).delay_epochs == 2
    assert TrainConfig(algo="cd-0").delay_epochs == 0
    assert TrainConfig(algo="0c", delay=0).delay_epochs == 0
    for algo, delay, message in [("cd-r", 0, "from 1 to"), ("cd-0", 3, "cd-r only"),
                                 ("cd-7", None, "--algo must be one of")]:
        with pytest.raises(DistGNNError, match=message):
            TrainConfig(algo=algo, delay=delay)


def test_threads_per_rank_divides_the_node(monkeypatch):
    monkeypatch.setattr("os.cpu_count", lambda: 16)
    monkeypatch.delenv("MPI_LOCALNRANKS", raising=False)
    monkeypatch.delenv("SLURM_NTASKS_PER_NODE", raising=False)
    monkeypatch.setenv("OMPI_COMM_WORLD_LOCAL_SIZE", "4")
    assert threads_per_rank(SelfCommunicator()) == 4
    monkeypatch.setenv("OMPI_COMM_WORLD_LOCAL_SIZE", "32")  # oversubscribed: still one
    assert threads_per_rank(SelfCommunicator()) == 1
    monkeypatch.delenv("OMPI_COMM_WORLD_LOCAL_SIZE")
    assert threads_per_rank(SelfCommunicator()) == 16  # one rank, not under MPI


def test_unknown_communicator():
    with pytest.raises(DistGNNError, match="unknown communicator"):
        get_communicator("carrier-pigeon")


def test_comm_wait_auto_sleeps_only_where_ranks_times_threads_outnumber_the_cores():
    assert resolve_wait("auto", threads=1, host_ranks=2, cores=2) == "poll"
    assert resolve_wait("auto", threads=1, host_ranks=3, cores=2) == "sleep"
    assert resolve_wait("auto", threads=4, host_ranks=2, cores=8) == "poll"
    assert resolve_wait("auto", threads=4, host_ranks=4, cores=8) == "sleep"
    assert resolve_wait("poll", threads=8, host_ranks=8, cores=1) == "poll"
    assert resolve_wait("sleep", threads=1, host_ranks=1, cores=64) == "sleep"
    with pytest.raises(DistGNNError, match="comm-wait sleep applies to the mpi"):
        TrainConfig(comm="gloo", comm_wait="sleep")
    with pytest.raises(DistGNNError, match="--comm-wait must be one of auto, poll, sleep"):
        TrainConfig(comm_wait="spin")
    assert TrainConfig(comm="gloo", comm_wait="poll").comm_wait == "poll"
