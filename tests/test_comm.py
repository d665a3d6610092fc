"""Communicator and rank set-up pieces that need no MPI job (multi-rank: test_distributed)."""
import pytest
import torch

from distgnn.comm import RankFailed, SelfCommunicator, all_or_none, get_communicator
from distgnn.distributed import DEFAULT_DELAY, resolve_delay, threads_per_rank
from distgnn.drpa import DRPA
from distgnn.errors import DistGNNError


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


def test_all_or_none_names_the_failed_rank_on_the_others():
    class TwoRanks(SelfCommunicator):
        size = 2

        def allreduce(self, tensor, op="sum"):
            tensor[1] = 1  # rank 1 reports a failure

    with pytest.raises(RankFailed, match="stopping because rank 1 failed"):
        all_or_none(TwoRanks(), lambda: 0)


def test_delay_defaults_and_checks():
    assert resolve_delay("cd-r", None) == DEFAULT_DELAY
    assert resolve_delay("cd-r", 2) == 2
    assert resolve_delay("cd-0", None) == resolve_delay("0c", 0) == 0
    for algo, delay, message in [("cd-r", 0, ">= 1"), ("cd-0", 3, "cd-r only"),
                                 ("cd-7", None, "unknown --algo")]:
        with pytest.raises(DistGNNError, match=message):
            resolve_delay(algo, delay)


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


def test_drpa_refuses_0c_and_a_zero_delay():
    with pytest.raises(DistGNNError, match="0c"):
        DRPA(None, SelfCommunicator(), "0c")
    with pytest.raises(DistGNNError, match="delay"):
        DRPA(None, SelfCommunicator(), "cd-r", 0)


def test_unknown_communicator():
    with pytest.raises(DistGNNError, match="unknown communicator"):
        get_communicator("carrier-pigeon")
