"""A SLURM cluster of real daemons on this host, for tests/test_slurm.py: munged, slurmctld,
and one slurmd per node of an emulated cluster (:mod:`launch.cluster`).

The nodes are the emulated cluster's network namespaces, so jobs span nodes as on a real
cluster: each node has its own address, host name and ``srun`` daemons, and MPI reaches the
other node over its link.  Each slurmd runs

* in its node's network namespace, entered with ``nsenter`` rather than ``ip netns exec``:
  the latter mounts a fresh ``/sys``, without the cgroup filesystem slurmd needs to start;
* in mount and UTS namespaces of its own, where the node has its own host name, a hosts
  file that names every node and the controller (Hydra's proxies find each other by
  name), and a node-local TmpFS (the PMIx plugin makes per-step folders there, which two
  nodes sharing one folder would both claim).

Everything else is shared, as on a cluster with a shared filesystem: this host's files
(the virtual environment, partitions, checkpoints) and its cores (each node declares all
of them, so the nodes oversubscribe the host; Open MPI is told to yield when idle).
Authentication is MUNGE with a key of its own; the daemons log to ``ROOT/log``.  Needs
root (namespaces, mounts) and the Debian packages of :data:`PACKAGES`.
"""
from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from launch import cluster
from tests.helpers.hostile_launch import sweep

PACKAGES = "slurmctld slurmd slurm-client munge"
TOOLS = ("munged", "slurmctld", "slurmd", "sbatch", "scontrol", "sinfo", "srun", "nsenter",
         "unshare", "ip", "tc")
NAME = "dgslurm"  # the emulated cluster's name
START_S = 60  # how long the nodes may take to register with slurmctld
RATE = "10gbit"  # the nodes' links
STOP_S = 10  # how long a daemon gets to end after SIGTERM
CONF = """\
ClusterName={name}
SlurmctldHost={host}({address})
SlurmctldPort={port}
SlurmdPort=6818
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket={root}/run/munge.socket,cred_expire=10
CredType=cred/munge
StateSaveLocation={root}/state
SlurmdSpoolDir={root}/spool/%n
SlurmctldPidFile={root}/run/slurmctld.pid
SlurmdPidFile={root}/run/slurmd-%n.pid
SlurmctldLogFile={root}/log/slurmctld.log
SlurmdLogFile={root}/log/slurmd-%n.log
TmpFS={root}/nodetmp
ProctrackType=proctrack/linuxproc
TaskPlugin=task/affinity
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SchedulerType=sched/builtin
SchedulerParameters=sched_interval=1
MpiDefault=none
ReturnToService=2
KillWait=5
MinJobAge=600
{nodes}
PartitionName=test Nodes={names} Default=YES MaxTime=INFINITE State=UP
"""
# slurmd on a cgroup v2 host without systemd (a container) would fail to make its scope
CGROUP_CONF = "IgnoreSystemdOnFailure=yes\n"


class SlurmError(RuntimeError):
    """The test cluster did not come up, or a job did not end as expected."""


def missing() -> str | None:
    """Why SLURM cannot run here (``None``: it can)."""
    absent = [t for t in TOOLS if shutil.which(t) is None]
    if absent:
        return (f"SLURM needs {', '.join(absent)} (Debian: apt-get install {PACKAGES}; "
                "iproute2, util-linux)")
    if os.geteuid() != 0:
        return "the SLURM test cluster needs root (network, mount and UTS namespaces)"
    return None


@dataclass
class Slurm:
    """A running test cluster: its configuration, the environment that points the SLURM
    commands at it, and the emulated cluster its nodes run on (whose links can be shaped)."""

    root: Path
    nodes: list[str]
    env: dict[str, str]
    emulated: cluster.Cluster

    def run(self, *argv: str, check: bool = True) -> subprocess.CompletedProcess:
        proc = subprocess.run(list(argv), capture_output=True, text=True, env=self.env,
                              timeout=60)
        if check and proc.returncode:
            raise SlurmError(f"{' '.join(argv)}: {proc.stderr.strip()}")
        return proc

    def submit(self, script: Path, *options: str) -> int:
        """``sbatch OPTIONS SCRIPT`` from the script's folder; returns the job id."""
        proc = subprocess.run(["sbatch", "--parsable", *options, str(script)],
                              capture_output=True, text=True, env=self.env, timeout=60,
                              cwd=script.parent)
        if proc.returncode:
            raise SlurmError(f"sbatch {script}: {proc.stderr.strip()}")
        return int(proc.stdout.split(";")[0])

    def job(self, job: int) -> dict[str, str]:
        """The fields of ``scontrol show job`` (``JobState``, ``Restarts``, ...)."""
        text = self.run("scontrol", "show", "job", "--oneliner", str(job)).stdout
        return dict(field.split("=", 1) for field in text.split() if "=" in field)

    def wait(self, job: int, timeout: float) -> dict[str, str]:
        """The fields of ``job`` once it has ended (SLURM's final states)."""
        deadline = time.monotonic() + timeout
        while True:
            fields = self.job(job)
            if fields["JobState"] in ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT",
                                      "NODE_FAIL", "OUT_OF_MEMORY", "BOOT_FAIL", "DEADLINE"):
                return fields
            if time.monotonic() > deadline:
                self.run("scancel", str(job), check=False)
                raise SlurmError(f"job {job} still {fields['JobState']} after {timeout:g} s")
            time.sleep(1)

    def logs(self) -> str:
        """The last lines of every daemon's log (for a failure's message)."""
        return "\n".join(f"--- {log.name}\n" + "\n".join(log.read_text().splitlines()[-15:])
                         for log in sorted((self.root / "log").glob("*.log")))


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("", 0))
        return s.getsockname()[1]


def _start(argv: list[str], log: Path) -> subprocess.Popen:
    with open(log, "ab") as out:
        return subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, start_new_session=True)


def _stop(daemons: list[subprocess.Popen]) -> None:
    for proc in reversed(daemons):
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
    for proc in daemons:
        try:
            proc.wait(timeout=STOP_S)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@contextlib.contextmanager
def running_slurm(root: Path, nodes: int = 2):
    """A :class:`Slurm` of ``nodes`` nodes, each with all of this host's cores, made in
    ``root`` (a new folder) and taken down on exit, with its emulated cluster."""
    root.mkdir(parents=True)
    for folder in ("run", "log", "state", "spool", "nodetmp", "cluster"):
        (root / folder).mkdir()
    saved_state_root = cluster.STATE_ROOT
    cluster.STATE_ROOT = root / "cluster"
    daemons: list[subprocess.Popen] = []
    try:
        sweep(name=NAME)  # what a killed run of the suite left, which cluster up would refuse
        emulated = cluster.up(nodes, RATE, 1, NAME)
        names = [f"node{i}" for i in range(nodes)]
        host = socket.gethostname().split(".")[0]
        cpus = os.cpu_count() or 1
        (root / "slurm.conf").write_text(CONF.format(
            name=NAME, host=host, address=cluster.HOST_ADDRESS, port=_free_port(), root=root,
            names=",".join(names),
            nodes="\n".join(f"NodeName={n} NodeAddr={emulated.address(i)} CPUs={cpus} "
                            "State=UNKNOWN" for i, n in enumerate(names))))
        (root / "cgroup.conf").write_text(CGROUP_CONF)
        (root / "hosts").write_text("127.0.0.1 localhost\n" + "".join(
            f"{emulated.address(i)} {n}\n" for i, n in enumerate(names))
            + f"{cluster.HOST_ADDRESS} {host}\n")
        key = root / "run" / "munge.key"
        key.write_bytes(os.urandom(1024))
        key.chmod(0o400)
        conf = str(root / "slurm.conf")
        # -f: munged refuses a socket folder that not everyone can search (pytest's are 0700)
        daemons.append(_start(["munged", "-F", "-f", f"--key-file={key}",
                               f"--socket={root}/run/munge.socket",
                               f"--pid-file={root}/run/munged.pid",
                               f"--log-file={root}/log/munged.log",
                               f"--seed-file={root}/run/munged.seed"],
                              root / "log" / "munged.out"))
        daemons.append(_start(["slurmctld", "-D", "-f", conf], root / "log" / "slurmctld.out"))
        for i, n in enumerate(names):
            local_tmp = root / f"nodetmp-{n}"
            local_tmp.mkdir()
            node = (f"mount --bind {root}/hosts /etc/hosts && mount --bind {local_tmp} "
                    f"{root}/nodetmp && hostname {n} && exec slurmd -D -f {conf} -N {n}")
            daemons.append(_start(["nsenter", f"--net=/run/netns/{emulated.namespace(i)}",
                                   "unshare", "--uts", "--mount", "sh", "-c", node],
                                  root / "log" / f"slurmd-{n}.out"))
        # the nodes share this host's cores: ranks that spin while they wait would take
        # them from the ranks of the other node
        env = {**os.environ, "SLURM_CONF": conf, "OMPI_MCA_mpi_yield_when_idle": "1"}
        slurm = Slurm(root, names, env, emulated)
        deadline = time.monotonic() + START_S
        while slurm.run("sinfo", "--noheader", "--format=%T", check=False).stdout.split() \
                != ["idle"]:
            if time.monotonic() > deadline or any(d.poll() is not None for d in daemons):
                raise SlurmError(f"the SLURM nodes did not come up in {START_S} s:\n"
                                 + slurm.logs())
            time.sleep(0.5)
        yield slurm
    finally:
        _stop(daemons)
        try:
            cluster.down(NAME)  # what the jobs left in the nodes, then the nodes
        finally:
            cluster.STATE_ROOT = saved_state_root
