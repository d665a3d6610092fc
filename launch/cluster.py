"""An emulated cluster on one Linux host, and what MPI needs to start ranks on it.

It has one network namespace per node, a bridge between them, and each node's link shaped
to a rate.

    distgnn-launch cluster up --nodes 4 --rate 1gbit
    distgnn-launch --hostfile /run/distgnn-cluster/dgnn/hostfile -n 4 -- distgnn-train ...
    distgnn-launch cluster down

Node ``i`` is namespace ``NAME-n<i>`` with address ``10.77.0.<i+1>`` on its ``eth0``, the
peer of ``NAME-v<i>`` on bridge ``NAME-br`` (which holds ``10.77.0.254``, the address
``mpirun`` on this host talks from).  Both directions of each node's link are shaped with
``tc``'s token bucket (``tbf``) to ``--rate``: this kernel has ``tbf`` and ``htb`` but not
``netem``, so bandwidth is emulated and **latency is not** (it is the veth's, microseconds).
The addresses exist only on these interfaces; nothing is routed elsewhere.

``up`` writes, in the state folder ``STATE_ROOT/NAME``: ``hostfile`` (one line per node,
after a line that marks it as this cluster's), ``agent`` (what MPI runs instead of ``ssh``:
it starts the command inside the node's namespace, with the node's own host name so that
MPI does not take two nodes for one and share memory between them; marked the same way)
and ``cluster.json``.  :func:`mpi_options` gives the launcher options that use them;
``distgnn-launch --hostfile`` adds them by itself.

``up`` records what it makes in ``cluster.json`` as it makes it, by identities that a name
does not give: a random token, written first, which it sets as the alias (``ip link ...
alias``) of the bridge, of every host end of a link and of every node's loopback; the
interface index of each link; the device and inode of each namespace's file (what a
namespace made again under the same name does not keep).  ``down`` removes what that
record proves ``up`` made, and only that, and is idempotent: every process in those
namespaces (a job's MPI daemon can outlive its session when a link is cut), the links, the
namespaces, and of the state folder the files it can prove are this cluster's (the mark, or
the name in ``cluster.json``); the folder goes only once it is empty, and the record only
once nothing it names is left.  Interfaces and namespaces named like the cluster's that the
record does not prove are left alone, and named in its error, as is what it could not
remove; it never follows a symbolic link.  Both need CAP_NET_ADMIN.
"""
from __future__ import annotations

import contextlib
import json
import os
import re
import secrets
import shutil
import signal
import stat
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

from distgnn.errors import DistGNNError
from distgnn.storage import file_head, remove_leftovers, write_atomic

DEFAULT_NAME = "dgnn"
STATE_ROOT = Path(os.environ.get("DISTGNN_CLUSTER_DIR", "/run/distgnn-cluster"))
SUBNET = "10.77.0"  # /24: nodes .1 ... .N, the host's bridge .254
HOST_ADDRESS = f"{SUBNET}.254"
MARK = "# distgnn emulated cluster"
# What TCP/IP adds on a link to the payload it carries, at most: per full segment (MSS 1448
# at MTU 1500) 66 bytes of Ethernet, IPv4 and TCP (with timestamps) headers, plus one
# 66-byte ACK per two segments received.  Less where the counters see GSO super-packets,
# which carry one set of headers for many segments.
TCP_OVERHEAD = 66 / 1448 + 66 / (2 * 1448)
CAP_NET_ADMIN = 12
# tbf's queue: a burst of 64 KiB (more than one 64 KiB TCP segment with offloads) and at
# most 100 ms of backlog
TBF = ("burst", "64kb", "latency", "100ms")
NO_NETEM = ("bandwidth is shaped with tbf; latency cannot be injected (this kernel has no "
            "netem): links have the microseconds of a veth pair")
STATE_FILES = ("agent", "hostfile", "cluster.json")
NETNS_DIR = Path("/run/netns")  # where ip netns keeps a namespace's file
# how long down and kill wait for the processes of a namespace to end after SIGKILL
END_WAIT_S = 5.0


class ClusterError(DistGNNError):
    """The emulated cluster cannot be made, used or removed."""


@dataclass
class Cluster:
    """A cluster as ``up`` records it: its sizes, and what it made (``token``, the alias it
    gave its interfaces; ``links``, each interface's index; ``namespaces``, the device and
    inode of each namespace's file)."""

    name: str
    nodes: int
    rate: str
    slots: int
    token: str | None = None
    links: dict[str, int] = field(default_factory=dict)
    namespaces: dict[str, list[int]] = field(default_factory=dict)

    @property
    def alias(self) -> str:
        """The alias ``up`` gives the interfaces it makes."""
        return f"distgnn cluster {self.name} {self.token}"

    @property
    def state(self) -> Path:
        return STATE_ROOT / self.name

    def namespace(self, i: int) -> str:
        return f"{self.name}-n{i}"

    def host_link(self, i: int) -> str:
        """The host side of node ``i``'s link (its byte counters are the node's traffic)."""
        return f"{self.name}-v{i}"

    @property
    def bridge(self) -> str:
        return f"{self.name}-br"

    @staticmethod
    def address(i: int) -> str:
        return f"{SUBNET}.{i + 1}"


def has_net_admin() -> bool:
    """Whether this process holds CAP_NET_ADMIN (namespaces, links, qdiscs)."""
    try:
        for line in open("/proc/self/status"):
            if line.startswith("CapEff:"):
                return bool(int(line.split()[1], 16) >> CAP_NET_ADMIN & 1)
    except OSError:
        pass
    return os.geteuid() == 0


def _run(*argv: str, check: bool = True) -> subprocess.CompletedProcess:
    proc = subprocess.run(list(argv), capture_output=True, text=True)
    if check and proc.returncode:
        raise ClusterError(f"{' '.join(argv)}: {proc.stderr.strip().splitlines()[-1:]}")
    return proc


def _require_tools() -> None:
    if not has_net_admin():
        raise ClusterError("the emulated cluster needs CAP_NET_ADMIN (run as root, or grant "
                           "the capability) to make network namespaces and shape links")
    for tool in ("ip", "tc", "unshare"):
        if shutil.which(tool) is None:
            raise ClusterError(f"the emulated cluster needs {tool} (Debian: iproute2, "
                               "util-linux)")


def _mark(name: str) -> str:
    """The line that marks the hostfile and the agent as cluster ``name``'s."""
    return f"{MARK} {name}: {STATE_ROOT / name}"


def check_name(name: str) -> str:
    """A cluster name: a plain name, which is also the prefix of its interfaces (at most
    15 characters: ``NAME-v249`` must fit)."""
    if not re.fullmatch(r"[a-z][a-z0-9]{0,7}", name):
        raise ClusterError(f"cluster name {name!r} must be 1-8 lower-case letters or digits, "
                           "starting with a letter")
    return name


def check_rate(rate: str) -> str:
    """A tc rate such as ``10gbit``, ``1gbit``, ``200mbit``."""
    if not re.fullmatch(r"[0-9]+(\.[0-9]+)?([kmg]?bit|[kmg]?bps)", rate):
        raise ClusterError(f"rate {rate!r} is not a tc rate such as 10gbit, 1gbit or 200mbit")
    return rate


def shape(cluster: Cluster, i: int, rate: str) -> None:
    """Both directions of node ``i``'s link at ``rate`` (token bucket)."""
    check_rate(rate)
    check_made(cluster, i)
    for prefix, dev in ((["ip", "netns", "exec", cluster.namespace(i)], "eth0"),
                        ([], cluster.host_link(i))):
        _run(*prefix, "tc", "qdisc", "replace", "dev", dev, "root", "tbf", "rate", rate, *TBF)


AGENT = """#!/bin/sh
{mark}
# written by distgnn-launch cluster up: what MPI runs instead of ssh to reach a node of
# the emulated cluster {name}: the command runs in the node's network namespace, with the
# node's own host name (a UTS namespace).  Like ssh -o ServerAliveInterval=1
# -o ServerAliveCountMax={keepalive}, a session whose node is unreachable (its link down) for
# {keepalive} s ends with status 255 and, like sshd, ends the processes it started there.
host="$1"; shift
case "$host" in
{cases}
  *) echo "distgnn cluster agent: $host is not a node of cluster {name}" >&2; exit 255 ;;
esac
setsid ip netns exec "$ns" unshare --uts sh -c "hostname $node && $*" &
child=$!
trap 'kill -TERM -$child 2>/dev/null' TERM INT HUP
missed=0
while kill -0 $child 2>/dev/null; do
  if [ "$(cat /sys/class/net/$link/operstate 2>/dev/null)" = up ]; then missed=0
  else missed=$((missed + 1)); fi
  if [ $missed -ge {keepalive} ]; then
    echo "distgnn cluster agent: node $node unreachable for {keepalive} s; session closed" >&2
    kill -KILL -$child 2>/dev/null
    exit 255
  fi
  sleep 1
done
wait $child
"""
# seconds a node's link may be down before the agent's session to it ends (ssh's keepalive)
KEEPALIVE_S = 3


def write_record(cluster: Cluster) -> None:
    """``cluster.json``: the cluster and what ``up`` has made of it so far."""
    cluster.state.mkdir(parents=True, exist_ok=True)
    write_atomic(cluster.state / "cluster.json",
                 json.dumps({"name": cluster.name, "nodes": cluster.nodes,
                             "rate": cluster.rate, "slots": cluster.slots,
                             "token": cluster.token, "links": cluster.links,
                             "namespaces": cluster.namespaces}, indent=1))


def write_files(cluster: Cluster) -> None:
    """The agent, the hostfile and the record of a cluster that is up."""
    write_record(cluster)
    cases = "\n".join(f"  {cluster.address(i)}|node{i}) ns={cluster.namespace(i)}; "
                      f"node=node{i}; link={cluster.host_link(i)} ;;"
                      for i in range(cluster.nodes))
    agent = cluster.state / "agent"
    write_atomic(agent, AGENT.format(name=cluster.name, mark=_mark(cluster.name),
                                     cases=cases, keepalive=KEEPALIVE_S))
    agent.chmod(agent.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    write_atomic(cluster.state / "hostfile",
                 f"{_mark(cluster.name)}\n" + "".join(f"{cluster.address(i)} "
                                                     f"slots={cluster.slots}\n"
                                                     for i in range(cluster.nodes)))


def _made_link(cluster: Cluster, dev: str) -> None:
    """Give link ``dev``, just made, the cluster's alias, and record its index."""
    _run("ip", "link", "set", "dev", dev, "alias", cluster.alias)
    cluster.links[dev] = _link_index(dev)
    write_record(cluster)


def _made_namespace(cluster: Cluster, ns: str) -> None:
    """Give namespace ``ns``, just made, the cluster's alias on its loopback, and record
    its file's identity."""
    _run("ip", "-n", ns, "link", "set", "dev", "lo", "alias", cluster.alias)
    cluster.namespaces[ns] = _namespace_file(ns)
    write_record(cluster)


def up(nodes: int, rate: str, slots: int = 1, name: str = DEFAULT_NAME) -> Cluster:
    """Make the cluster (replacing one of the same name that ``up`` made), recording each
    part as it is made (see the module docstring); returns it.  Refused where interfaces or
    namespaces of the cluster's names exist that ``up`` did not make."""
    if not 1 <= nodes <= 250:
        raise ClusterError(f"--nodes must be from 1 to 250, got {nodes}")
    if slots < 1:
        raise ClusterError(f"--slots must be >= 1, got {slots}")
    cluster = Cluster(check_name(name), nodes, check_rate(rate), slots,
                      token=secrets.token_hex(16))
    _require_tools()
    try:
        down(name)
    except ClusterError as e:
        raise ClusterError(f"{e}; cluster up makes nothing over them (remove them, or choose "
                           "another --name)") from None
    for line in _run("ip", "-o", "addr", "show").stdout.splitlines():
        if f" {HOST_ADDRESS}/" in line:  # the subnet is in use: one emulated cluster at a time
            raise ClusterError(f"another emulated cluster holds {SUBNET}.0/24 (on "
                               f"{line.split()[1]}); take it down first")
    try:
        write_record(cluster)  # the token, before anything carries it
        _run("ip", "link", "add", cluster.bridge, "type", "bridge")
        _made_link(cluster, cluster.bridge)
        _run("ip", "addr", "add", f"{HOST_ADDRESS}/24", "dev", cluster.bridge)
        _run("ip", "link", "set", cluster.bridge, "up")
        for i in range(nodes):
            ns, link = cluster.namespace(i), cluster.host_link(i)
            _run("ip", "netns", "add", ns)
            _made_namespace(cluster, ns)
            _run("ip", "link", "add", link, "type", "veth", "peer", "name", f"{link}p")
            _made_link(cluster, link)
            _run("ip", "link", "set", f"{link}p", "netns", ns)
            _run("ip", "link", "set", link, "master", cluster.bridge, "up")
            _run("ip", "-n", ns, "link", "set", f"{link}p", "name", "eth0")
            _run("ip", "-n", ns, "addr", "add", f"{cluster.address(i)}/24", "dev", "eth0")
            _run("ip", "-n", ns, "link", "set", "eth0", "up")
            _run("ip", "-n", ns, "link", "set", "lo", "up")
            shape(cluster, i, rate)
        write_files(cluster)
    except BaseException:
        with contextlib.suppress(ClusterError):  # the error that stopped up comes first
            down(name)
        raise
    return cluster


def load(name: str = DEFAULT_NAME) -> Cluster | None:
    """The cluster ``name`` as ``up`` recorded it (``None`` if it is not up, or if what is
    there is not such a record)."""
    path = STATE_ROOT / check_name(name) / "cluster.json"
    if path.is_symlink():
        return None
    try:
        info = json.loads(file_head(path, 1 << 20))
        found = Cluster(info["name"], info["nodes"], check_rate(info["rate"]), info["slots"],
                        info.get("token"), info.get("links", {}), info.get("namespaces", {}))
    except (ValueError, KeyError, TypeError, AttributeError, ClusterError):  # JSON, a field
        return None
    counts = (found.nodes, found.slots)
    if found.name != name or not all(type(c) is int for c in counts) \
            or not (1 <= found.nodes <= 250 and found.slots >= 1) \
            or not isinstance(found.token, (str, type(None))) \
            or not _record_of_made(found.links, found.namespaces):
        return None
    return found


def _record_of_made(links, namespaces) -> bool:
    """Whether the links and namespaces of a ``cluster.json`` are a record ``up`` wrote."""
    return (isinstance(links, dict) and isinstance(namespaces, dict)
            and all(type(v) is int for v in links.values())
            and all(isinstance(v, list) and len(v) == 2 and all(type(x) is int for x in v)
                    for v in namespaces.values()))


def _link_index(dev: str) -> int:
    return int((Path("/sys/class/net") / dev / "ifindex").read_text())


def _namespace_file(ns: str) -> list[int]:
    """The device and inode of namespace ``ns`` (its file, a bind mount of the namespace)."""
    st = os.stat(NETNS_DIR / ns)
    return [st.st_dev, st.st_ino]


def _links(name: str) -> dict[str, tuple[int, str | None]]:
    """The host's interfaces named like cluster ``name``'s (its bridge and the host ends of
    its links), with their index and alias."""
    found = {}
    for link in json.loads(_run("ip", "-j", "link", "show").stdout or "[]"):
        if re.fullmatch(rf"{re.escape(name)}-(v\d+|br)", link.get("ifname", "")):
            found[link["ifname"]] = (link["ifindex"], link.get("ifalias"))
    return found


def _namespace_alias(ns: str) -> str | None:
    """The alias of the loopback of namespace ``ns`` (``None``: none, or no such namespace)."""
    shown = _run("ip", "-n", ns, "-j", "link", "show", "dev", "lo", check=False).stdout
    try:
        return json.loads(shown)[0].get("ifalias")
    except (ValueError, IndexError, KeyError, AttributeError):
        return None


def _made_by_up(cluster: Cluster | None, links: list[str], namespaces: list[str]
                ) -> dict[str, str]:
    """Of the interfaces ``links`` and namespaces ``namespaces`` (named like ``cluster``'s),
    those the record of ``cluster`` does not prove ``up`` made, each with why (empty: all
    proved)."""
    found = _links(cluster.name) if cluster is not None else {}
    unproved = {}
    for kind, names in (("link", links), ("namespace", namespaces)):
        for item in names:
            if cluster is None or cluster.token is None:
                unproved[f"{kind} {item}"] = "no record of cluster up"
                continue
            recorded = (cluster.links if kind == "link" else cluster.namespaces).get(item)
            if kind == "link":
                index, alias = found.get(item, (None, None))
                same = recorded == index
            else:
                alias = _namespace_alias(item)
                same = (NETNS_DIR / item).exists() and recorded == _namespace_file(item)
            if recorded is None:
                unproved[f"{kind} {item}"] = "not made by cluster up"
            elif not same or alias != cluster.alias:
                unproved[f"{kind} {item}"] = "made again since cluster up made it"
    return unproved


def _namespaces(name: str) -> list[str]:
    return [ns for ns in (line.split(" ")[0] for line in
                          _run("ip", "netns", "list").stdout.split("\n"))
            if re.fullmatch(rf"{re.escape(name)}-n\d+", ns)]


def end_processes(namespace: str) -> tuple[list[int], list[int]]:
    """SIGKILL every process in network namespace ``namespace`` (those it starts meanwhile
    too) until none is left or :data:`END_WAIT_S` has passed; returns the PIDs killed and
    those still there."""
    killed, deadline = set(), time.monotonic() + END_WAIT_S
    while True:
        pids = [int(p) for p in _run("ip", "netns", "pids", namespace,
                                     check=False).stdout.split()]
        if not pids or time.monotonic() > deadline:
            return sorted(killed), pids
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):  # ended meanwhile
                os.kill(pid, signal.SIGKILL)
                killed.add(pid)
        time.sleep(0.05)


def _written_by_up(path: Path, name: str) -> bool:
    """Whether ``path`` (in the state folder) is a file ``up`` wrote for cluster ``name``:
    ``cluster.json`` holding the record of ``name``, any other file marked in its first
    two lines (a link is never one)."""
    if path.is_symlink() or not path.is_file():
        return False
    if path.name == "cluster.json":
        return load(name) is not None
    return _mark(name) in file_head(path, 1024).decode(errors="replace").split("\n")[:2]


def _remove_state(name: str, removed: list[str]) -> str | None:
    """Remove the files ``up`` wrote for cluster ``name`` and, once empty, its state folder
    (appending them to ``removed``); returns what was left and why (``None``: nothing)."""
    state = STATE_ROOT / name
    if state.is_symlink() or (state.exists() and not state.is_dir()):
        return f"{state} (not the folder cluster up made: left alone)"
    if not state.exists():
        return None
    for file in STATE_FILES:
        path = state / file
        removed += map(str, remove_leftovers(path))  # a killed up's temporary files
        if _written_by_up(path, name):
            path.unlink()
            removed.append(str(path))
    try:
        state.rmdir()
    except OSError:
        others = ", ".join(sorted(p.name for p in state.iterdir()))
        return f"{state} (it holds {others}, which cluster up did not write)"
    removed.append(str(state))
    return None


def down(name: str = DEFAULT_NAME) -> dict[str, list[str]]:
    """Remove what the record of cluster ``name`` proves ``up`` made, and only that.

    That is its processes, links, namespaces and files (see the module docstring); returns
    what was removed, by kind.  Raises a :class:`ClusterError` naming what it left alone or
    could not remove, and what it removed, after removing the rest."""
    check_name(name)
    _require_tools()
    record = load(name)
    removed = {"processes": [], "links": [], "namespaces": [], "files": []}
    links, namespaces = list(_links(name)), _namespaces(name)
    unproved = _made_by_up(record, links, namespaces)
    links = [dev for dev in links if f"link {dev}" not in unproved]
    namespaces = [ns for ns in namespaces if f"namespace {ns}" not in unproved]
    left, kept = [], []
    # the processes first: a deleted namespace lives on, unnamed and out of reach, as long
    # as a process holds it
    for ns in namespaces:
        killed, alive = end_processes(ns)
        removed["processes"] += map(str, killed)
        if alive:  # its namespace is kept, where they can still be found
            kept.append(ns)
            left.append(f"processes {', '.join(map(str, alive))} in {ns}")
    # the host ends of the links before the namespaces: deleting one end of a veth pair
    # deletes both at once, while a deleted namespace releases its devices later (an up
    # right after would find the names taken)
    for dev in links:
        _run("ip", "link", "delete", dev, check=False)
    for ns in namespaces:
        if ns not in kept:
            _run("ip", "netns", "delete", ns, check=False)
    still = set(_links(name)) | set(_namespaces(name))
    removed["links"] = [dev for dev in links if dev not in still]
    removed["namespaces"] = [ns for ns in namespaces if ns not in still]
    left += sorted(item for item in [*links, *namespaces] if item in still and item not in kept)
    if left:  # the record stays, for the down that removes them
        left.append(f"so the record {record.state / 'cluster.json'} stays")
    elif (problem := _remove_state(name, removed["files"])) is not None:
        left.append(problem)
    said = []
    for why in dict.fromkeys(unproved.values()):
        said.append(f"left alone {', '.join(k for k, w in unproved.items() if w == why)} "
                    f"({why})")
    if left:
        said.append(f"could not remove {'; '.join(left)}")
    if said:
        done = summary(removed)
        raise ClusterError(f"cluster {name}: {'; '.join(said)}"
                           + (f"; removed {done}" if done else ""))
    return removed


def summary(removed: dict[str, list[str]]) -> str:
    """What :func:`down` removed, counted by kind (``""``: nothing)."""
    return ", ".join(f"{len(items)} {kind}" for kind, items in removed.items() if items)


def check_made(cluster: Cluster, i: int) -> None:
    """Refuse to act on node ``i`` of ``cluster`` unless its link and namespace are those
    ``up`` made (see the module docstring)."""
    unproved = _made_by_up(cluster, [cluster.host_link(i)], [cluster.namespace(i)])
    if unproved:
        raise ClusterError(f"node{i} of cluster {cluster.name}: "
                           + ", ".join(f"{k} {why}" for k, why in unproved.items())
                           + "; left alone")


def link_bytes(cluster: Cluster, i: int) -> dict[str, int]:
    """Bytes node ``i`` sent (``tx``) and received (``rx``), from its link's counters."""
    base = Path("/sys/class/net") / cluster.host_link(i) / "statistics"
    # the host side of the pair: what it receives the node sent, and the reverse
    return {"tx": int((base / "rx_bytes").read_text()), "rx": int((base / "tx_bytes").read_text())}


def set_link(cluster: Cluster, i: int, state: str) -> None:
    """Bring node ``i``'s link ``up`` or ``down`` (a cable pulled, for failure drills)."""
    check_made(cluster, i)
    _run("ip", "link", "set", cluster.host_link(i), state)


def kill_node(cluster: Cluster, i: int) -> int:
    """SIGKILL every process in node ``i``'s namespace (a crashed node); returns how many."""
    check_made(cluster, i)
    killed, alive = end_processes(cluster.namespace(i))
    if alive:
        raise ClusterError(f"node{i}: processes {', '.join(map(str, alive))} did not end")
    return len(killed)


def cluster_of_hostfile(hostfile: str | Path) -> Cluster | None:
    """The emulated cluster a hostfile written by :func:`up` belongs to (``None``: a real
    hostfile)."""
    first = file_head(Path(hostfile), 1024).decode(errors="replace").split("\n", 1)[0]
    if not first.startswith(MARK):
        return None
    try:
        return load(first[len(MARK):].split(":", 1)[0].strip())
    except ClusterError:  # no cluster's name
        return None


def mpi_options(cluster: Cluster, implementation: str) -> list[str]:
    """The launcher options that start ranks on the cluster's nodes over its links.

    They use the agent instead of ssh, and TCP between the nodes (no shared memory between
    emulated nodes), on the cluster's subnet.

    Open MPI: ``plm_rsh_agent``, ``ob1`` over the ``tcp`` BTL and PRRTE's out-of-band
    channel on the subnet, and the ``sm`` BTL between the ranks of one node (Open MPI
    reaches a peer through shared memory only when its runtime started both on one node,
    as a real node's ranks talk).  Hydra (MPICH, Intel MPI): ``-launcher rsh -launcher-exec
    AGENT`` (the agent takes ``HOST COMMAND...`` as rsh does; Hydra's ssh launcher would
    put ``-x``, or Intel's ``-q -x``, before the host); ``-iface BRIDGE`` so the nodes'
    proxies call back to the host's address on the bridge (proxies ignore an interface
    they lack); TCP between the ranks (``UCX_TLS`` for MPICH's UCX, ``FI_PROVIDER`` for
    Intel MPI's libfabric), not a fabric this host may have, and for Intel MPI no shared
    memory (``I_MPI_FABRICS=ofi``: it finds the emulated nodes on one host and would move
    their data through shared memory, off the links).
    """
    agent = str(cluster.state / "agent")
    if implementation == "openmpi":
        subnet = f"{SUBNET}.0/24"
        return ["--mca", "plm_rsh_agent", agent, "--mca", "pml", "ob1", "--mca", "btl",
                "tcp,sm,self", "--mca", "btl_tcp_if_include", subnet,
                "--prtemca", "oob_tcp_if_include", subnet]
    return ["-launcher", "rsh", "-launcher-exec", agent, "-iface", cluster.bridge,
            "-genv", "UCX_TLS", "tcp,self", "-genv", "FI_PROVIDER", "tcp",
            "-genv", "I_MPI_FABRICS", "ofi"]
