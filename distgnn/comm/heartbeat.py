"""Heartbeats between the ranks of a job over UDP, naming the peers that fell silent.

With them, a rank that waits too long in a collective can name the peers it stopped hearing
from (a node whose link went down, a node whose processes died), not only itself, and tell
a dead peer from a slow one (:mod:`distgnn.comm.watchdog` waits longer for the latter).

Every rank binds one UDP socket; the ranks tell each other their host name, IPv4
addresses and port once (collective).  The beating is then done by a small process of the
rank's own (``python -I -S``, the standard library only, about 10 MB resident): a thread of
the rank would need its GIL, which a kernel of the rank may hold for many seconds on a
loaded host, so a rank alive and computing would look dead.  The process gets the socket
(``pass_fds``), sends a 12-byte datagram (the job's token and the rank) every ``interval``
seconds to every peer (over loopback to peers with the same host name, to each of the
peer's addresses otherwise), and writes the monotonic time it last heard from each peer
into memory shared with the rank (a memfd), which :meth:`Heartbeat.silent` reads:
peers not heard from for ``SILENT_AFTER`` intervals are silent.  It does not beat while
the rank is stopped (``SIGSTOP``: a hang, not slowness), and notes when it saw it stopped
(:meth:`Heartbeat.stopped_at`: the rank's own waits do not count that time); it ends with
the rank: the rank holds the write end of the process's stdin, which the kernel closes when
the rank dies.  The traffic is about 12 bytes per peer per second, and goes only to the
addresses the peers reported.
"""
from __future__ import annotations

import fcntl
import mmap
import os
import socket
import struct
import subprocess
import sys
import time
import weakref

import torch

from . import Communicator, gather_messages, rank_ranges

DEFAULT_INTERVAL_S = 1.0
# Intervals without a datagram before a peer counts as silent.  The beating process
# sleeps between beats, so the scheduler wakes it within milliseconds even on a host
# loaded many times over: three missed beats mean a dead or stopped rank, or a lost link.
SILENT_AFTER = 3
_SIOCGIFADDR = 0x8915  # Linux ioctl: an interface's IPv4 address

# The beating process.  argv: socket fd, table fd, the rank's pid, rank, interval, token;
# stdin: the peers' "address:port" targets on one line, then end-of-file when the rank ends.
# The table holds one float64 per rank (time.monotonic): when its last datagram came, and
# in the rank's own entry, when the rank was last seen stopped.
_BEATER = r"""# distgnn heartbeat
import mmap, os, select, signal, socket, struct, sys, time
# the rank's signals are not ours: SLURM and launchers signal every process of a job, and the
# rank may checkpoint after SIGTERM while its peers wait; the end of stdin ends this one
for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGUSR1, signal.SIGUSR2):
    signal.signal(s, signal.SIG_IGN)
sock_fd, table_fd, parent, rank = map(int, sys.argv[1:5])
interval, token = float(sys.argv[5]), int(sys.argv[6])
line = b""
while not line.endswith(b"\n"):
    chunk = os.read(0, 65536)
    if not chunk:
        sys.exit(0)
    line += chunk
targets = [(a, int(p)) for a, p in (t.rsplit(":", 1) for t in line.decode().split())]
sock = socket.socket(fileno=sock_fd)
table = memoryview(mmap.mmap(table_fd, 0)).cast("d")
datagram = struct.Struct("!qi")  # token, rank
beat = datagram.pack(token, rank)
stat = "/proc/%d/stat" % parent

def running():
    # not stopped (T, t) nor ended (Z, X): a stopped rank is a hang, its silence the sign
    try:
        with open(stat, "rb") as f:
            return f.read().rsplit(b")", 1)[1].split()[0] not in (b"T", b"t", b"Z", b"X")
    except OSError:
        return False

next_beat = 0.0
while True:
    now = time.monotonic()
    if now >= next_beat:
        if os.getppid() != parent:  # another holder of our stdin kept it open
            sys.exit(0)
        if running():
            for address in targets:
                try:
                    sock.sendto(beat, address)
                except OSError:  # a link down: what the peers' silence will show
                    pass
        else:
            table[rank] = now
        next_beat = now + interval
    readable, _, _ = select.select([sock, 0], [], [], max(0.0, next_beat - now))
    if 0 in readable and not os.read(0, 1):
        sys.exit(0)
    if sock in readable:
        data = sock.recv(64)
        if len(data) == datagram.size:
            got, q = datagram.unpack(data)
            if got == token and 0 <= q < len(table) and q != rank:
                table[q] = time.monotonic()
"""


def ipv4_addresses() -> list[str]:
    """This host's IPv4 interface addresses, loopback excepted (Linux)."""
    found = []
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        for _, name in socket.if_nameindex():
            try:
                reply = fcntl.ioctl(s.fileno(), _SIOCGIFADDR,
                                    struct.pack("256s", name.encode()[:15]))
            except OSError:  # an interface without an IPv4 address
                continue
            address = socket.inet_ntoa(reply[20:24])
            if not address.startswith("127."):
                found.append(address)
    return found


def _stop(process: subprocess.Popen) -> None:
    """End the beating ``process``: close its stdin (its signal to exit) and reap it."""
    process.stdin.close()
    try:
        process.wait(timeout=5)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


class Heartbeat:
    """This rank's beating process and what it heard (see the module docstring).

    Made by :meth:`start` (collective), or from a bound ``sock`` (which it takes over) and
    ``targets[q]``, the addresses of each peer ``q``; ``hosts[q]`` is rank ``q``'s host
    name.  :meth:`close` ends the process (so does the end of this one).
    """

    def __init__(self, rank: int, token: int, sock: socket.socket,
                 targets: dict[int, list[tuple[str, int]]], hosts: list[str],
                 interval: float):
        self.rank, self.hosts, self.interval = rank, hosts, interval
        self.peers = sorted(targets)
        table_fd = os.memfd_create("distgnn-heartbeat")
        try:
            os.ftruncate(table_fd, 8 * len(hosts))
            self._table = memoryview(mmap.mmap(table_fd, 8 * len(hosts))).cast("d")
            now = time.monotonic()  # every peer counts as heard at the start
            for q in self.peers:
                self._table[q] = now
            self.process = subprocess.Popen(
                [sys.executable, "-I", "-S", "-c", _BEATER, str(sock.fileno()), str(table_fd),
                 str(os.getpid()), str(rank), repr(interval), str(token)],
                stdin=subprocess.PIPE, stdout=subprocess.DEVNULL,
                pass_fds=(sock.fileno(), table_fd),
                env={})  # it needs none, and is no rank to tools that find ranks by theirs
        finally:
            os.close(table_fd)
            sock.close()  # the beating process holds its own copy
        self.process.stdin.write(" ".join(f"{a}:{p}" for q in self.peers
                                          for a, p in targets[q]).encode() + b"\n")
        self.process.stdin.flush()
        self.close = weakref.finalize(self, _stop, self.process)

    @classmethod
    def start(cls, comm: Communicator, interval: float = DEFAULT_INTERVAL_S) -> "Heartbeat":
        sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        sock.bind(("0.0.0.0", 0))
        host = socket.gethostname()
        token = torch.randint(1, 2**62, (1,), dtype=torch.int64)
        comm.broadcast(token, root=0)
        me = f"{host} {sock.getsockname()[1]} {','.join(ipv4_addresses())}"
        hosts, targets = [""] * comm.size, {}
        for text, ranks in gather_messages(comm, me).items():
            peer_host, port, addresses = (text.split(" ") + [""])[:3]
            for q in ranks:
                hosts[q] = peer_host
                if q == comm.rank:
                    continue
                same = peer_host == host
                targets[q] = [("127.0.0.1" if same else a, int(port))
                              for a in (["127.0.0.1"] if same else addresses.split(",")) if a]
        return cls(comm.rank, int(token), sock, targets, hosts, interval)

    def last_heard(self) -> dict[int, float]:
        """When each peer's last datagram came (``time.monotonic()``; the start if none)."""
        return {q: self._table[q] for q in self.peers}

    def stopped_at(self) -> float:
        """When the beating process last saw this rank stopped (``time.monotonic()``; 0.0:
        never): a watchdog does not count the time of a stop as a wait on the others."""
        return self._table[self.rank]

    def silent(self) -> dict[int, float]:
        """Peers not heard from for ``SILENT_AFTER`` intervals, with the seconds since."""
        now = time.monotonic()
        return {q: now - t for q, t in self.last_heard().items()
                if now - t > SILENT_AFTER * self.interval}

    def describe_silent(self) -> str:
        """One clause for an error line: which peers (and on which hosts) fell silent."""
        ended = self.process.poll()
        if ended is not None:
            return (f"this rank's heartbeat process ended (status {ended}), so which peers "
                    "still live is unknown")
        silent = self.silent()
        if not silent:
            return "every other rank still answers heartbeats (one of them hangs or is slow)"
        by_host: dict[str, list[int]] = {}
        for q in sorted(silent):
            by_host.setdefault(self.hosts[q], []).append(q)
        where = "; ".join(f"{rank_ranges(ranks)} on {host}" for host, ranks in by_host.items())
        return (f"no heartbeat for {max(silent.values()):.0f} s from {where} (died, stopped, "
                "or its node cannot be reached)")
