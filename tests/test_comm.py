"""Communicator and rank set-up pieces that need no MPI job (multi-rank: test_distributed)."""
import signal
import socket
import subprocess
import sys
import textwrap
import time

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
from distgnn.comm.heartbeat import SILENT_AFTER, Heartbeat
from distgnn.comm.watchdog import SLOW_WAIT_FACTOR, Watchdog
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


def bound_socket() -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.bind(("127.0.0.1", 0))
    return sock


def heard_within(heartbeat: Heartbeat, peer: int, after: float, seconds: float) -> bool:
    """Whether ``heartbeat`` hears ``peer`` later than ``after`` within ``seconds``."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if heartbeat.last_heard()[peer] > after:
            return True
        time.sleep(0.02)
    return False


def test_heartbeats_go_on_while_the_rank_holds_the_gil_and_stop_with_the_peer():
    """Two ranks' heartbeats in this process: while its main thread holds the GIL for a
    second (a long kernel would), both beating processes still send and record, and once
    one is closed the other names it silent."""
    interval = 0.05
    socks = [bound_socket() for _ in range(2)]
    ports = [s.getsockname()[1] for s in socks]
    beats = [Heartbeat(r, 7, socks[r], {1 - r: [("127.0.0.1", ports[1 - r])]},
                       ["hostA", "hostB"], interval) for r in range(2)]
    try:
        assert all(heard_within(b, 1 - b.rank, 0.0, 5.0) for b in beats)
        switch = sys.getswitchinterval()
        sys.setswitchinterval(1000.0)  # no other thread of this process runs meanwhile
        try:
            held = time.monotonic()
            while time.monotonic() < held + 1.0:
                pass
            heard = [b.last_heard()[1 - b.rank] - held for b in beats]
            silent = [b.silent() for b in beats]
        finally:
            sys.setswitchinterval(switch)
        assert min(heard) > 1.0 - SILENT_AFTER * interval, heard
        assert silent == [{}, {}]
        beats[1].close()
        assert beats[1].process.returncode == 0
        time.sleep(SILENT_AFTER * interval * 2)
        assert list(beats[0].silent()) == [1]
        assert "from rank 1 on hostB" in beats[0].describe_silent()
    finally:
        for b in beats:
            b.close()


# A rank of its own: a process with a Heartbeat (rank 1) beating to the port in argv[1]; it
# prints its port and its beating process's pid, then, for each line it reads, when its
# beating process last saw it stopped, until it is killed.
PEER = textwrap.dedent("""
    import socket, sys
    from distgnn.comm.heartbeat import Heartbeat
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    beat = Heartbeat(1, 7, sock, {0: [("127.0.0.1", int(sys.argv[1]))]}, ["a", "b"], 0.05)
    print(port, beat.process.pid, flush=True)
    for line in sys.stdin:
        print(beat.stopped_at(), flush=True)
""")


def ended(pid: int) -> bool:
    """Whether process ``pid`` is gone, or a zombie (its new parent reaps it)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read().rsplit(b")", 1)[1].split()[0] == b"Z"
    except FileNotFoundError:
        return True


def test_a_stopped_rank_falls_silent_and_a_killed_ones_heartbeat_process_ends():
    """SIGSTOP of a rank silences its heartbeat (a hang, not slowness) until SIGCONT, and
    its beating process notes the stop; SIGKILL of the rank ends its heartbeat process at
    once (no orphan beats on)."""
    sock = bound_socket()
    peer = subprocess.Popen([sys.executable, "-c", PEER, str(sock.getsockname()[1])],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        port, beater = map(int, peer.stdout.readline().split())
        beat = Heartbeat(0, 7, sock, {1: [("127.0.0.1", port)]}, ["a", "b"], 0.05)
        try:
            assert heard_within(beat, 1, 0.0, 5.0)
            peer.stdin.write("\n")
            peer.stdin.flush()
            assert float(peer.stdout.readline()) == 0.0  # never stopped yet
            peer.send_signal(signal.SIGSTOP)
            time.sleep(0.1)  # a datagram sent before the stop may still arrive
            stopped = time.monotonic()
            time.sleep(SILENT_AFTER * 0.05 * 2)
            assert list(beat.silent()) == [1] and beat.last_heard()[1] < stopped
            peer.send_signal(signal.SIGCONT)
            assert heard_within(beat, 1, stopped, 5.0) and beat.silent() == {}
            peer.stdin.write("\n")
            peer.stdin.flush()  # its watchdog would not count the stop as a wait
            assert stopped < float(peer.stdout.readline()) < time.monotonic()
        finally:
            beat.close()
        peer.kill()
        peer.wait()
        deadline = time.monotonic() + 2.0
        while not ended(beater) and time.monotonic() < deadline:
            time.sleep(0.02)
        assert ended(beater), "the heartbeat process outlived its rank"
    finally:
        peer.kill()
        peer.wait()


class Peers:
    """A heartbeat stand-in: ``silent`` is what the test sets."""

    interval = 0.05

    def __init__(self):
        self.quiet, self.stopped = {}, 0.0

    def silent(self):
        return self.quiet

    def describe_silent(self):
        return f"no heartbeat from {sorted(self.quiet)}"

    def stopped_at(self):
        return self.stopped


class TwoRanks(SelfCommunicator):
    size = 2


def test_watchdog_waits_on_live_peers_up_to_its_epochs_limit_and_not_on_silent_ones(capsys):
    peers = Peers()
    dog = Watchdog(TwoRanks(), 20.0, "distgnn-train", peers)
    dog.arm(60.0)  # the first epoch, which compiles: it counts until a second one ends
    assert dog.limit() == SLOW_WAIT_FACTOR * 60.0
    dog.arm(25.0)
    dog.arm(3.0)  # a faster epoch leaves the limit
    assert dog.limit() == SLOW_WAIT_FACTOR * 25.0
    assert dog.overdue("alltoallv", 21.0) is None
    assert dog.overdue("alltoallv", 249.0) is None
    warned = capsys.readouterr().err.splitlines()
    assert len(warned) == 1 and "warning: rank 0: alltoallv has waited 20 s" in warned[0]
    assert f"up to {SLOW_WAIT_FACTOR * 25} s" in warned[0]
    line = dog.overdue("allreduce", 250.0)
    assert line.startswith("distgnn-train: error: rank 0: allreduce waited more than 250 s")
    assert "one of them hangs" in line and "25 s" in line
    peers.quiet = {1: 22.0}  # a peer that died: the timeout, not the epochs' limit
    assert "waited more than 20 s" in dog.overdue("alltoallv", 20.5)
    assert "no heartbeat from [1]" in dog.overdue("alltoallv", 20.5)
    quick = Watchdog(TwoRanks(), 20.0, "distgnn-train", Peers())
    quick.arm(0.5)  # epochs shorter than the timeout: the limit is its multiple
    assert quick.limit() == SLOW_WAIT_FACTOR * 20.0
    assert quick.overdue("barrier", 199.0) is None
    assert "waited more than 200 s" in quick.overdue("barrier", 200.0)
    assert "one of them died" in Watchdog(TwoRanks(), 20.0).overdue("barrier", 20.0)


class Slow(TwoRanks):
    """Its alltoallv takes ``seconds``: a peer that arrives late."""

    def __init__(self, seconds):
        self.seconds = seconds

    def alltoallv(self, send, send_counts, recv, recv_counts):
        time.sleep(self.seconds)


class Recorded(Watchdog):
    """Records the line it would abort the job with, and when, instead of aborting."""

    aborted = None

    def _abort(self, line):
        self.aborted = (line, time.monotonic())


@pytest.mark.parametrize("late, stop, ends",
                         [(0.4, None, None), (1.5, None, 0.7), (1.8, 0.5, 1.2)],
                         ids=["slow", "hung", "stopped"])
def test_watchdog_thread_lets_a_slow_peer_arrive_and_ends_a_hung_one(capsys, late, stop, ends):
    """Timeout 0.05 s, epochs of 0.07 s: a wait on live peers may last 0.7 s, counted from
    the end of a stop of this rank (``stop`` s into the wait) if there was one."""
    peers = Peers()
    dog = Recorded(Slow(late), 0.05, "distgnn-train", peers)
    dog.arm(0.07)
    began = time.monotonic()
    if stop is not None:
        peers.stopped = began + stop
    dog.alltoallv(torch.zeros(1), [1, 0], torch.zeros(1), [1, 0])
    if ends is None:
        time.sleep(0.5)  # the wait is over: the thread must not end the job later
        assert dog.aborted is None
    else:
        line, when = dog.aborted
        assert "alltoallv waited more than 0.7 s" in line
        assert ends <= when - began < ends + 0.5
    assert capsys.readouterr().err.count("warning: rank 0: alltoallv has waited 0.05 s") == 1
