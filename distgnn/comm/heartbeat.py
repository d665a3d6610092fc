"""Heartbeats between the ranks of a job over UDP, naming the peers that fell silent.

With them, a rank that waits too long in a collective can name the peers it stopped hearing
from (a node whose link went down, a node whose processes died), not only itself.

Every rank binds one UDP socket; the ranks tell each other their host name, IPv4
addresses and port once (collective).  A daemon thread then sends a 12-byte datagram (the
job's token and the rank) every ``interval`` seconds to every peer: over loopback to
peers with the same host name, to each of the peer's addresses otherwise.  It records when
it last heard from each peer; :meth:`Heartbeat.silent` lists those not heard from for
``SILENT_AFTER`` intervals.  The traffic is about 12 bytes per peer per second, and goes
only to the addresses the peers reported.
"""
from __future__ import annotations

import fcntl
import select
import socket
import struct
import threading
import time

import torch

from . import Communicator, gather_messages, rank_ranges

DEFAULT_INTERVAL_S = 1.0
SILENT_AFTER = 3  # intervals without a datagram before a peer counts as silent
_SIOCGIFADDR = 0x8915  # Linux ioctl: an interface's IPv4 address
_DATAGRAM = struct.Struct("!qi")  # token, rank


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


class Heartbeat:
    """This rank's heartbeat thread and what it heard (see the module docstring).

    Made by :meth:`start` (collective); ``hosts[q]`` is rank ``q``'s host name.
    """

    def __init__(self, rank: int, token: int, sock: socket.socket,
                 targets: dict[int, list[tuple[str, int]]], hosts: list[str],
                 interval: float):
        self.rank, self.token, self.sock = rank, token, sock
        self.targets, self.hosts, self.interval = targets, hosts, interval
        now = time.monotonic()
        self.last_heard = {q: now for q in targets}
        self._lock = threading.Lock()
        threading.Thread(target=self._run, name="heartbeat", daemon=True).start()

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

    def _run(self) -> None:
        beat = _DATAGRAM.pack(self.token, self.rank)
        next_beat = 0.0
        while True:
            now = time.monotonic()
            if now >= next_beat:
                for peer in self.targets.values():
                    for address in peer:
                        try:
                            self.sock.sendto(beat, address)
                        except OSError:  # a link down: what silent() will report
                            pass
                next_beat = now + self.interval
            readable, _, _ = select.select([self.sock], [], [], max(0.0, next_beat - now))
            if readable:
                data = self.sock.recv(64)
                if len(data) == _DATAGRAM.size:
                    token, q = _DATAGRAM.unpack(data)
                    if token == self.token and q in self.last_heard:
                        with self._lock:
                            self.last_heard[q] = time.monotonic()

    def silent(self) -> dict[int, float]:
        """Peers not heard from for ``SILENT_AFTER`` intervals, with the seconds since."""
        now = time.monotonic()
        with self._lock:
            return {q: now - t for q, t in self.last_heard.items()
                    if now - t > SILENT_AFTER * self.interval}

    def describe_silent(self) -> str:
        """One clause for an error line: which peers (and on which hosts) fell silent."""
        silent = self.silent()
        if not silent:
            return "every other rank still answers heartbeats (one of them hangs or is slow)"
        by_host: dict[str, list[int]] = {}
        for q in sorted(silent):
            by_host.setdefault(self.hosts[q], []).append(q)
        where = "; ".join(f"{rank_ranges(ranks)} on {host}" for host, ranks in by_host.items())
        return (f"no heartbeat for {max(silent.values()):.0f} s from {where} (died, or "
                "its node cannot be reached)")
