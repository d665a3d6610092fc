"""Running a planned job: the launcher started, watched and ended.

:func:`run` starts the :class:`~launch.mpirun.LaunchPlan`'s command line, copies the
launcher's stderr while noting what it tells (:class:`StderrCopy`: ranks started, nodes lost
or unreachable, the checkpoint stopped ranks wrote), watches the connections its remote
shells open (:class:`Connecting`: a node that does not answer), passes stop requests on to
the ranks, ends a job whose ranks do not start, and reports how a stopped job continues.
The launcher dies with ``distgnn-launch``, killed outright included
(:func:`dying_with_this_process`).
"""
from __future__ import annotations

import concurrent.futures
import contextlib
import ctypes
import math
import os
import re
import shlex
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

from distgnn.signals import STOPPED_CHECKPOINT
from launch.cluster import cluster_of_hostfile
from launch.mpirun import (
    LaunchError,
    LaunchPlan,
    check_partitions,
    flag_value,
    hostfile_hosts,
)
from launch.rank import STARTED

# Time the ranks get after the stop request (SIGUSR1) to finish the epoch, checkpoint and
# exit, before they are terminated.
DEFAULT_STOP_GRACE_S = 60.0


# Time mpirun gets after SIGTERM to take its ranks down before it is killed outright.
KILL_GRACE_S = 10


# ... and to tidy up when it could not start the job (it may wait on a node that does not
# answer)
START_KILL_GRACE_S = 2


# Stop requests distgnn-launch passes on to its ranks as SIGUSR1 (docs/reliability.md);
# SIGHUP is what a closed terminal sends, whose job would otherwise run on unwatched
FORWARDED = (signal.SIGTERM, signal.SIGUSR1, signal.SIGINT, signal.SIGHUP)


TIMED_OUT = 0  # what stopped a job at its --timeout (no signal has number 0)


# how long the ranks get to say that they started (0: no limit); the daemons of Open MPI
# and Hydra start through ssh, whose connect to a host that does not answer waits for
# TCP's retries (about 2 minutes), after which prterun waits on for ever
DEFAULT_START_TIMEOUT_S = 120.0


POLL_S = 0.05  # how often run() looks at the job, its signals and its clock


# how long a node that did not start may take to answer on ssh's port, and a connection
# of the job's remote shells to a node (TCP has sent its SYN twice more by then)
PROBE_S = 3.0


CONNECT_SCAN_S = 0.5  # how often run() looks at the connections of the job's processes


SSH_PORT = 22


def check_times(timeout: float | None, stop_grace: float,
                start_timeout: float = 0) -> None:
    """A ``timeout`` (None: none) must be finite and > 0, a ``stop_grace`` and a
    ``start_timeout`` finite and >= 0 (each refused naming its flag)."""
    if timeout is not None and not (math.isfinite(timeout) and timeout > 0):
        raise LaunchError(f"--timeout must be a finite number of seconds > 0, got "
                          f"{timeout:g}")
    for flag, value in (("--stop-grace", stop_grace), ("--start-timeout", start_timeout)):
        if not (math.isfinite(value) and value >= 0):
            raise LaunchError(f"{flag} must be a finite number of seconds >= 0, got "
                              f"{value:g}")


class JobStopped(LaunchError):
    """A job that :func:`run` stopped on a request (a signal, its timeout).

    The message says why, what the ranks wrote and how to continue.  ``exit_status``: 2
    after the timeout, 130 after Ctrl-C, 128 + the signal when the ranks had to be killed,
    else the job's (128 + SIGUSR1 from ranks that stopped on the request)."""

    def __init__(self, message: str, status: int):
        super().__init__(message)
        self.exit_status = status


def run(plan: LaunchPlan, timeout: float | None = None,
        stop_grace: float = DEFAULT_STOP_GRACE_S,
        start_timeout: float = DEFAULT_START_TIMEOUT_S,
        relaunch: list[str] | None = None) -> int:
    """Run ``plan`` and return its exit status (128 + N for a launcher killed by signal N).

    A ``distgnn-train --partitions DIR`` of another partition count is refused before
    anything starts (:func:`check_partitions`).

    Stop requests -- SIGTERM (what SLURM sends at the time limit), SIGUSR1, Ctrl-C
    (SIGINT) and SIGHUP (a closed terminal) to this process, and ``timeout`` -- stop the job
    in steps: SIGUSR1 to the launcher, which forwards it to every rank (``distgnn-train``
    then finishes its epoch, writes a checkpoint and exits; Open MPI would answer a SIGTERM
    by killing the ranks at once); after ``stop_grace`` seconds, or at a second Ctrl-C,
    the launcher is ended (:func:`_end`).  Once the job has ended, :class:`JobStopped` says
    what stopped it, the checkpoint the ranks said they wrote
    (:data:`distgnn.signals.STOPPED_CHECKPOINT`) and the command that continues
    (``relaunch``: the ``distgnn-launch`` words before the command; ``None``: the
    ``--resume`` to add).  A job that ended with status 0 meanwhile had finished: its
    status is returned.

    Start-up: every rank must say that it started (:mod:`launch.rank`) within
    ``start_timeout`` seconds (0: no limit), before a node's remote shell says that it
    cannot reach the node, and before a connection of the job's processes to a node has
    gone unanswered for :data:`PROBE_S` seconds (:class:`Connecting`); otherwise the job is
    ended, with a :class:`LaunchError` naming the nodes.  A launcher that ends by itself
    before every rank started is an error too: with status 0, the job did not run; with
    another, it could not start.  Should this process die, killed outright included, the
    launcher gets the plan's ``orphan_signal`` (:func:`dying_with_this_process`).  Once
    the launcher has ended, the job's session directories go (:meth:`LaunchPlan.remove_session`).
    """
    check_times(timeout, stop_grace, start_timeout)
    check_partitions(plan.ranks, plan.command, missing_ok=False)
    received: list[int] = []
    handlers = {}
    if threading.current_thread() is threading.main_thread():  # Python's rule for handlers
        for s in FORWARDED:
            handlers[s] = signal.signal(s, lambda signum, frame: received.append(signum))
    proc = None
    try:
        proc = subprocess.Popen(plan.argv, env={**os.environ, **plan.env},
                                start_new_session=True, stderr=subprocess.PIPE,
                                preexec_fn=dying_with_this_process(plan.orphan_signal))
        copy = StderrCopy(proc.stderr, plan.ranks)
        copy.start()
        connecting = Connecting(proc.pid)
        began, why, deadline, failed, ended = time.monotonic(), None, 0.0, None, None
        while proc.poll() is None:
            now = time.monotonic()
            if why is None and copy.started < plan.ranks:
                failed = _start_failure(plan, copy, now - began, start_timeout,
                                        connecting.unanswered(now, plan.hostfile))
                if failed is not None:
                    copy.muted = True  # what the launcher says as it is ended: ours says why
                    _end(proc, START_KILL_GRACE_S)  # no rank has work to save
                    break
            if why is None and (received or timeout is not None and now - began >= timeout):
                why, deadline = (received[0] if received else TIMED_OUT), now + stop_grace
                if stop_grace > 0:
                    proc.send_signal(signal.SIGUSR1)
            if why is not None and (now >= deadline or received.count(signal.SIGINT) > 1):
                if now < deadline:
                    ended = "a second Ctrl-C ended the ranks at once"
                elif stop_grace > 0:
                    ended = (f"the ranks did not end within --stop-grace {stop_grace:g} s "
                             "and were killed")
                else:
                    ended = "the ranks were killed at once"
                _end(proc)
                break
            time.sleep(POLL_S)
    finally:
        for s, handler in handlers.items():
            signal.signal(s, handler)
        if proc is not None and proc.poll() is None:  # an exception on the way out
            _end(proc)
        plan.remove_session()
    copy.join(timeout=STDERR_DRAIN_S)
    status = proc.returncode if proc.returncode >= 0 else 128 - proc.returncode
    if failed is not None:
        raise LaunchError(failed)
    if why is not None and status:  # (status 0: the job had finished meanwhile)
        if why == TIMED_OUT:
            code = 2
        elif why == signal.SIGINT or ended:  # Ctrl-C's status, or that of the signal
            code = 128 + why
        else:  # the ranks', which stopped on the request
            code = status
        raise JobStopped(_stop_report(plan, copy, why, ended, timeout, relaunch), code)
    launcher = Path(plan.argv[0]).name
    if status == 0 and copy.lost:
        raise LaunchError(f"{launcher} lost the daemon of {', '.join(copy.lost)} (node down or "
                          "its processes killed) and ended the job early, yet exited 0: the "
                          "job did not finish")
    if status == 0 and copy.started < plan.ranks:
        raise LaunchError(f"{plan.argv[0]} exited 0 having started {copy.started} of the "
                          f"{plan.ranks} ranks: the job did not run (is it an MPI launcher?)")
    if status and not copy.started:
        unreachable = dict(copy.unreachable)
        reach = (f" could not reach {', '.join(unreachable)} "
                 f"({next(iter(unreachable.values()))}) and" if unreachable else "")
        raise LaunchError(f"{plan.argv[0]}{reach} exited with status {status} before any rank "
                          "started")
    return status


def _start_failure(plan: LaunchPlan, copy: "StderrCopy", elapsed: float,
                   start_timeout: float, unanswered: dict[str, str]) -> str | None:
    """Why the job could not start (``None``: it may yet): a node that a remote shell said
    it cannot reach or that did not answer its connection (``unanswered``: host -> what
    was seen), or ranks that did not all start within ``start_timeout`` seconds."""
    launcher = Path(plan.argv[0]).name
    unreachable = {**unanswered, **copy.unreachable}
    if unreachable:
        return (f"{launcher} could not reach {', '.join(unreachable)} "
                f"({next(iter(unreachable.values()))}); {copy.started} of the {plan.ranks} "
                "ranks started; stopped the job")
    if not start_timeout or elapsed < start_timeout:
        return None
    where = ""
    if plan.hostfile is not None and cluster_of_hostfile(plan.hostfile) is None:
        silent = silent_hosts(plan.hostfile)
        where = (f": no ssh server answered from {', '.join(silent)} within {PROBE_S:g} s"
                 if silent else f" on the nodes of {plan.hostfile}")
    return (f"{launcher} started {copy.started} of the {plan.ranks} ranks within "
            f"{start_timeout:g} s (--start-timeout){where}; stopped the job")


def _stop_report(plan: LaunchPlan, copy: "StderrCopy", why: int, ended: str | None,
                 timeout: float | None, relaunch: list[str] | None) -> str:
    """The line of a job stopped on a request: why (and ``ended``: how the ranks ended, if
    they were killed), what the ranks wrote, how to go on."""
    if why == TIMED_OUT:
        line = f"{plan.argv[0]} did not finish within {timeout:g} s; stopped it and its ranks"
    else:
        line = "stopped on " + ("Ctrl-C" if why == signal.SIGINT else signal.Signals(why).name)
    if ended is not None:
        line += f" ({ended})"
    if copy.checkpoint is None:
        return line + ": the ranks reported no checkpoint"
    epoch, path, directory = copy.checkpoint
    line += f": the ranks wrote checkpoint {path} (after epoch {epoch}); continue with"
    command = plan.command
    if relaunch is None or not command or os.path.basename(command[0]) != "distgnn-train":
        return f"{line} --resume {directory}"
    given = flag_value(command, "--resume-if-present")
    if given is None or os.path.normpath(given) != os.path.normpath(directory):
        command = [*without_flag(without_flag(command, "--resume"), "--resume-if-present"),
                   "--resume", directory]
    return f"{line}: {shlex.join([*relaunch, '--', *command])}"


def without_flag(argv: list[str], flag: str) -> list[str]:
    """``argv`` less every ``FLAG VALUE`` and ``FLAG=VALUE`` of option ``flag``."""
    out, skip = [], False
    for arg in argv:
        if skip:
            skip = False
        elif arg == flag:
            skip = True
        elif not arg.startswith(flag + "="):
            out.append(arg)
    return out


def silent_hosts(hostfile: str) -> list[str]:
    """The hosts of ``hostfile``, other than this one, that do not greet as an ssh server
    does (``SSH-...``) within :data:`PROBE_S` seconds of a connection to its port (asked
    all at once; a connection alone proves little where a proxy accepts every one)."""
    def silent(host: str) -> bool:
        try:
            infos = socket.getaddrinfo(host, SSH_PORT, type=socket.SOCK_STREAM)
        except OSError:
            return True
        if any(_is_local(info) for info in infos):
            return False
        try:
            with socket.create_connection((host, SSH_PORT), timeout=PROBE_S) as s:
                return not s.recv(4).startswith(b"SSH-")
        except OSError:
            return True

    hosts = list(dict.fromkeys(hostfile_hosts(hostfile)))
    with concurrent.futures.ThreadPoolExecutor(max_workers=min(64, len(hosts) or 1)) as pool:
        return [host for host, quiet in zip(hosts, pool.map(silent, hosts)) if quiet]


def _is_local(info: tuple) -> bool:
    """Whether the address of a ``getaddrinfo`` entry is this host's (binding to it works)."""
    family, kind, _, _, address = info
    try:
        with socket.socket(family, kind) as s:
            s.bind((address[0], 0))
        return True
    except OSError:
        return False


def _end(proc: subprocess.Popen, grace: float = KILL_GRACE_S) -> None:
    """End the launcher and every process of its job (:func:`job_pids`).

    SIGTERM first, which the launcher answers by taking its ranks down; after ``grace``
    seconds SIGKILL to every process of the job, those seen before the SIGTERM included
    (its ranks and remote shells each run in a process group of their own, some in a
    session of their own, and outlive a killed launcher); then a wait of up to
    :data:`KILLED_WAIT_S` until they are gone, as SIGKILL takes effect asynchronously."""
    # taken while the launcher lives: once it is gone, its children in sessions of their
    # own are no one's descendants
    known = job_pids(proc.pid)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(timeout=grace)
    except subprocess.TimeoutExpired:
        pass
    left = {**known, **job_pids(proc.pid)}
    for pid, started in left.items():
        if _alive(pid, started):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
    proc.wait()
    deadline = time.monotonic() + KILLED_WAIT_S
    while any(_alive(pid, started) for pid, started in left.items()) and \
            time.monotonic() < deadline:
        time.sleep(0.01)


# how long _end waits for the processes it killed to be gone
KILLED_WAIT_S = 2.0


def job_pids(launcher: int) -> dict[int, str]:
    """The live processes of the job of ``launcher``, as ``{pid: start time}``.

    ``launcher`` leads a session of its own; the job is that session's processes and their
    descendants, which a launcher may put in sessions of their own (Hydra's remote
    shells).  The start time tells a process from a later one given the same PID.
    Zombies, dead and waiting to be reaped, are not counted."""
    table = {}
    for entry in os.listdir("/proc"):
        if entry.isdecimal() and (fields := _stat(int(entry))) is not None:
            table[int(entry)] = fields
    children: dict[int, list[int]] = {}
    for pid, fields in table.items():
        children.setdefault(int(fields[1]), []).append(pid)
    found = {pid for pid, fields in table.items() if int(fields[3]) == launcher}
    todo = list(found)
    while todo:
        for child in children.get(todo.pop(), ()):
            if child not in found:
                found.add(child)
                todo.append(child)
    return {pid: table[pid][19] for pid in found if table[pid][0] != "Z"}


def _stat(pid: int) -> list[str] | None:
    """The fields of ``/proc/PID/stat`` after the command name (state, ppid, pgrp,
    session, ..., start time at index 19); ``None`` for a process that is gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            # "pid (comm) state ppid pgrp session ...": comm may hold spaces
            return f.read().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None


def _alive(pid: int, started: str) -> bool:
    """Whether process ``pid`` that started at ``started`` (:func:`job_pids`) still runs."""
    fields = _stat(pid)
    return fields is not None and fields[0] != "Z" and fields[19] == started


# prctl(2)'s option that has the kernel signal a process once its parent dies
PR_SET_PDEATHSIG = 1


def dying_with_this_process(sig: int):
    """A ``preexec_fn`` under which the child gets ``sig`` once this process is gone.

    A ``distgnn-launch`` killed outright (SIGKILL, the OOM killer) ends before it can end
    its launcher, which would run on, re-parented to init, with its ranks; the kernel sends
    ``sig`` instead (``prctl(PR_SET_PDEATHSIG)``, kept across the launcher's ``exec``), and
    the launcher answers it by ending its ranks.  The child signals itself where this
    process died before the request was made.  ``None`` (nothing done) where there is no
    ``prctl`` (not Linux)."""
    try:
        prctl = ctypes.CDLL(None, use_errno=True).prctl  # looked up here, not after fork
    except AttributeError:
        return None
    prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong,
                      ctypes.c_ulong]
    parent = os.getpid()

    def request() -> None:
        prctl(PR_SET_PDEATHSIG, int(sig), 0, 0, 0)
        if os.getppid() != parent:
            os.kill(os.getpid(), sig)
    return request


class Connecting:
    """The connections that the job's processes are still opening.

    The job is that of ``launcher`` (:func:`job_pids`).  A remote shell (ssh) to a node
    that does not answer says so only when TCP gives up, after about two minutes, and the
    launcher then waits on; the socket shows it at once: its SYN sent, no answer
    (``SYN_SENT`` in ``/proc/PID/net/tcp``).  :meth:`unanswered` names the nodes of the
    hostfile whose connections have gone unanswered for :data:`PROBE_S` seconds; other
    addresses (a server a rank asks for its data) are not the job's nodes.  A node that
    refuses the connection, or that answers at all, is not named: a remote shell says what
    went wrong there."""

    def __init__(self, launcher: int):
        self.launcher = launcher
        self.first_seen: dict[tuple[int, int], float] = {}  # (pid, socket inode) -> when
        self.scanned = -math.inf
        self.names: dict[str, str] | None = None  # address -> hostfile host, once needed
        self.found: dict[str, str] = {}

    def unanswered(self, now: float, hostfile: str | None) -> dict[str, str]:
        """``{host: what was seen}`` of the nodes that have not answered a connection.

        A connection to a host of ``hostfile`` (``None``: there are none) counts once
        unanswered for :data:`PROBE_S` seconds (the processes are looked at every
        :data:`CONNECT_SCAN_S`); the host is named as ``hostfile`` names it."""
        if hostfile is None or now - self.scanned < CONNECT_SCAN_S:
            return self.found
        self.scanned = now
        opening = {(pid, inode): peer for pid in job_pids(self.launcher)
                   for inode, peer in syn_sent(pid).items()}
        self.first_seen = {key: self.first_seen.get(key, now) for key in opening}
        late = dict.fromkeys(opening[key] for key, since in self.first_seen.items()
                             if now - since >= PROBE_S)
        if late and self.names is None:  # resolved once, and only then: it may take a while
            self.names = _addresses_of(hostfile)
        self.found = {self.names[address]:
                      f"no answer to a connection to its port {port} within {PROBE_S:g} s"
                      for address, port in late if address in self.names}
        return self.found


def syn_sent(pid: int) -> dict[int, tuple[str, int]]:
    """``{socket inode: (address, port)}`` of the TCP connections process ``pid`` has asked
    for and not had answered (state ``SYN_SENT``; an IPv4 address mapped into IPv6 written
    as IPv4); empty for a process that is gone."""
    try:
        inodes = {int(link[8:-1]) for fd in os.listdir(f"/proc/{pid}/fd")
                  if (link := _readlink(f"/proc/{pid}/fd/{fd}")).startswith("socket:[")}
    except OSError:
        return {}
    found = {}
    for table in ("tcp", "tcp6"):
        try:
            with open(f"/proc/{pid}/net/{table}") as f:
                rows = f.read().splitlines()[1:]
        except OSError:
            continue
        for row in rows:
            # "sl local_address rem_address st tx:rx tr:when retrnsmt uid timeout inode ..."
            fields = row.split()
            if len(fields) > 9 and fields[3] == "02" and int(fields[9]) in inodes:
                address, port = fields[2].split(":")
                found[int(fields[9])] = (proc_address(address), int(port, 16))
    return found


def _readlink(path: str) -> str:
    try:
        return os.readlink(path)
    except OSError:  # closed since it was listed
        return ""


def proc_address(text: str) -> str:
    """An address as ``/proc/net/tcp*`` writes it (hex, each 32-bit word in this machine's
    byte order) in the usual notation."""
    raw = bytes.fromhex(text)
    if sys.byteorder == "little":
        raw = b"".join(raw[i:i + 4][::-1] for i in range(0, len(raw), 4))
    if len(raw) == 16 and raw[:12] == bytes(10) + b"\xff\xff":  # ::ffff:a.b.c.d
        raw = raw[12:]
    return socket.inet_ntop(socket.AF_INET if len(raw) == 4 else socket.AF_INET6, raw)


def _addresses_of(hostfile: str) -> dict[str, str]:
    """``{address: host}`` of the hosts of ``hostfile`` that resolve (asked all at once)."""
    def resolve(host: str) -> list[str]:
        try:
            return [info[4][0] for info in socket.getaddrinfo(host, SSH_PORT,
                                                              type=socket.SOCK_STREAM)]
        except OSError:
            return []

    hosts = list(dict.fromkeys(hostfile_hosts(hostfile)))
    with concurrent.futures.ThreadPoolExecutor(max_workers=min(64, len(hosts) or 1)) as pool:
        return {address: host for host, addresses in zip(hosts, pool.map(resolve, hosts))
                for address in addresses}


# Open MPI 5.0's prterun exits 0 after it loses a node's daemon (a crashed node) and takes
# the job down: the job did not finish, and the status must not say it did.
LOST_DAEMON = re.compile(rb"Remote daemon: \S+ on node (\S+)")

# Open MPI's ssh starter warns when its child ssh has exec'd before the parent could move
# it to its own process group: a harmless race, and noise on an error the user must read
SETPGID_RACE = re.compile(rb"\[[^\]\n]*\] plm:ssh: Warning: setpgid\([^\n]*\n")


# what a remote shell says when it cannot reach a node: ssh's words, the emulated
# cluster's agent's (launch/cluster.py), and Intel MPI's mpiexec's once its ssh failed
UNREACHABLE = re.compile(rb"ssh: connect to host (\S+) port \d+: .*|ssh: Could not resolve "
                         rb"hostname (\S+?): .*|distgnn cluster agent: (?:node )?(\S+) "
                         rb"(?:unreachable|is not a node).*|\[mpiexec@[^\]]*\] Error: Unable "
                         rb"to run bstrap_proxy on (\S+?)(?::\d+)? \(.*")
# how the lines of UNREACHABLE start
UNREACHABLE_STARTS = (b"ssh: ", b"distgnn cluster agent: ", b"[mpiexec@")


# how long the copy of mpirun's stderr may go on after mpirun has ended
STDERR_DRAIN_S = 5.0


class StderrCopy(threading.Thread):
    """A thread that copies the launcher's stderr to ours and notes what it tells.

    It copies as the text comes (a partial line too, so that no progress display is held
    back, unless it starts as a line of :data:`UNREACHABLE` does; nothing once ``muted``),
    counting and removing the ranks' :data:`STARTED` lines and Open MPI's
    :data:`SETPGID_RACE` warning, and noting the nodes whose daemon it lost (``lost``),
    those a remote shell could not reach (``unreachable``: host -> what it said) and the
    last checkpoint a stopped rank named (``checkpoint``: epoch, path, directory).  A node
    not reached before all ``ranks`` started mutes the rest, the remote shell's line that
    says so included: the launcher's account of a job that could not start, which
    :func:`run` gives in one line."""

    def __init__(self, stream, ranks: int = 0):
        super().__init__(name="mpirun-stderr", daemon=True)
        self.stream, self.ranks, self.started, self.lost = stream, ranks, 0, []
        self.muted = False
        self.unreachable: dict[str, str] = {}
        self.checkpoint: tuple[int, str, str] | None = None

    def run(self) -> None:
        tail = held = b""
        while chunk := os.read(self.stream.fileno(), 1 << 16):
            data = held + chunk
            # a STARTED line cut by the end of this read waits for the rest
            cut = data.rfind(STARTED[:1])
            unfinished = cut >= 0 and len(data) - cut < len(STARTED)
            held = data[cut:] if unfinished and STARTED.startswith(data[cut:]) else b""
            # ... and so does the start of a line that may say a node cannot be reached,
            # which mutes the copy once it ends
            last = data[data.rfind(b"\n") + 1:]
            if not held and 0 < len(last) < 4096 and any(
                    start.startswith(last[:len(start)]) for start in UNREACHABLE_STARTS):
                held = last
            data = data[:len(data) - len(held)]
            self.started += data.count(STARTED)
            data = SETPGID_RACE.sub(b"", data.replace(STARTED, b""))
            lines = (tail + data).split(b"\n")
            tail = lines.pop()[-4096:]  # an unfinished line: searched once it ends
            for line in lines:  # first: the line that mutes the copy is not passed on
                self.note(line)
            self.write(data)
        self.write(held)  # the launcher ended within a line held back

    def write(self, data: bytes) -> None:
        """``data`` on our stderr, unless ``muted``; a stderr that cannot be written (the
        terminal closed) mutes the copy, which reads on, or the launcher would block."""
        if self.muted or not data:
            return
        try:
            sys.stderr.buffer.write(data)
            sys.stderr.buffer.flush()
        except OSError:
            self.muted = True

    def note(self, line: bytes) -> None:
        """What ``line`` of the launcher's stderr tells (see the class docstring)."""
        if m := LOST_DAEMON.search(line):
            self.lost.append(m.group(1).decode(errors="replace"))
        if m := UNREACHABLE.search(line):
            host = next(filter(None, m.groups())).decode(errors="replace")
            self.unreachable.setdefault(host, m.group(0).decode(errors="replace").strip())
            self.muted = self.muted or self.started < self.ranks
        if b"stopped after epoch" in line and \
                (m := STOPPED_CHECKPOINT.search(line.decode(errors="replace").rstrip())):
            self.checkpoint = int(m.group(1)), m.group(2), m.group(3)
