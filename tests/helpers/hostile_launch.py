"""Hostile and careless uses of distgnn-launch: cluster down, launchers that start nothing,
SLURM scripts that sbatch would refuse, bad input, a killed rank under Hydra; stop signals to
the launcher, jobs that cannot start, what is caught before MPI starts, checkpoint
directories of another run, SLURM scripts for the nodes (22); namespaces and links of the
cluster's names that cluster up did not make (18); a launcher killed outright or hung up on,
and remote shells to a host that never answers (24); SLURM scripts that would resume nothing
(25); launchers' many lines where one would do (26).

The cluster cases need CAP_NET_ADMIN and ip, tc and unshare (as tests/test_cluster.py), and
the subnet of the emulated cluster free; where they are not they skip, with the reason.
Each keeps its state under its case directory (DISTGNN_CLUSTER_DIR) and removes whatever
the tool left of its namespaces and links after noting it.
"""
from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

from tests.helpers.hostile import (
    Case,
    Outcome,
    Runner,
    both,
    partition,
    resumes_from,
    tool,
    user_file,
    write_npz,
)

CASES: list[Case] = []
add = CASES.append
NAME = "dghx"  # the suite's emulated cluster (tests/test_cluster.py's too): not the default
# one a user may have up


def launch(tmp: Path, run: Runner, *argv, timeout: float = 120) -> Outcome:
    """distgnn-launch ``argv`` as a process whose cluster state lives in ``tmp/state``."""
    proc = subprocess.run(run.command("launch", [str(a).replace("{tmp}", str(tmp))
                                                 for a in argv]),
                          env={**run.env(), "DISTGNN_CLUSTER_DIR": str(tmp / "state")},
                          capture_output=True, text=True, timeout=timeout)
    return Outcome(proc.returncode, proc.stdout, proc.stderr)


def cluster_tool(*argv):
    return lambda tmp, run: launch(tmp, run, "cluster", *argv)


def need_namespaces() -> None:
    import pytest

    from launch.cluster import has_net_admin

    if not has_net_admin() or not all(map(shutil.which, ("ip", "tc", "unshare"))):
        pytest.skip("the emulated cluster needs CAP_NET_ADMIN and ip, tc, unshare")


def cluster_up(tmp: Path, run: Runner, nodes: int = 1) -> None:
    need_namespaces()
    sweep()  # what a killed run of the suite left, which cluster up would refuse
    up = launch(tmp, run, "cluster", "up", "--nodes", nodes, "--name", NAME)
    if "another emulated cluster" in up.stderr:
        import pytest

        pytest.skip(f"the emulated cluster's subnet is taken: {up.stderr.strip()}")
    assert up.status == 0, up.stderr


def ip_lines(*argv) -> list[str]:
    return subprocess.run(["ip", *argv], capture_output=True, text=True).stdout.splitlines()


def running(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie, dead and waiting for its parent, does not)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def down_and_sweep(tmp: Path, run: Runner, pids=()) -> Outcome:
    """``cluster down --name NAME``; then every namespace, link and process of NAME still
    there (and of ``pids``, processes started in it) is noted on stdout as ``left: ...``
    and removed, so that no case leaves anything to the next."""
    got = launch(tmp, run, "cluster", "down", "--name", NAME)
    return Outcome(got.status, got.stdout + "".join(f"left: {x}\n" for x in sweep(pids)),
                   got.stderr)


def sweep(pids=(), name: str = NAME) -> list[str]:
    """Remove every namespace, link and process of one of the suite's own clusters (NAME's)
    by its name (and the processes ``pids``), whoever made them; returns what it found."""
    spaces = [line.split()[0] for line in ip_lines("netns", "list")
              if line.startswith(f"{name}-")]
    links = [line.split(": ")[1].split("@")[0] for line in ip_lines("-o", "link", "show")
             if f": {name}-" in line]
    alive = {int(p) for ns in spaces for p in ip_lines("netns", "pids", ns)}
    alive |= {p for p in pids if running(p)}
    for pid in alive:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    for dev in links:
        subprocess.run(["ip", "link", "delete", dev], capture_output=True)
    for ns in spaces:
        subprocess.run(["ip", "netns", "delete", ns], capture_output=True)
    return [*spaces, *links, *(f"process {p}" for p in sorted(alive))]


def nothing_left(tmp: Path, outcome: Outcome) -> None:
    assert "left: " not in outcome.stdout, outcome.stdout.strip().replace("\n", "; ")


def state_dir(tmp: Path, run: Runner) -> None:
    (tmp / "state").mkdir()


# 12. cluster down removes what cluster up made, all of it, and nothing else
add(Case(12, "cluster down --name ../victim", cluster_tool("down", "--name", "../victim"),
         both(state_dir, user_file("victim/thesis.tex")), says="cluster name",
         keep=("victim",)))
add(Case(12, "cluster down --name an absolute path",
         cluster_tool("down", "--name", "{tmp}/victim"),
         both(state_dir, user_file("victim/thesis.tex")), says="cluster name",
         keep=("victim",)))


def link_as_state(tmp, run):
    need_namespaces()
    (tmp / "state").mkdir()
    (tmp / "state" / NAME).symlink_to(tmp / "victim")


add(Case(12, "cluster down where the state folder is a link to the user's",
         cluster_tool("down", "--name", NAME),
         both(user_file("victim/thesis.tex"), link_as_state),
         says="not the folder cluster up made", keep=("victim",)))


def file_as_state(tmp, run):
    need_namespaces()
    user_file(f"state/{NAME}", "the user's own notes\n")(tmp, run)


add(Case(12, "cluster down where the state folder is the user's file",
         cluster_tool("down", "--name", NAME), file_as_state,
         says="not the folder cluster up made", keep=(f"state/{NAME}",)))


def up_then_user_file(tmp, run):
    cluster_up(tmp, run)
    user_file(f"state/{NAME}/notes.txt")(tmp, run)


def only_the_user_file(tmp, outcome):
    nothing_left(tmp, outcome)
    assert [p.name for p in (tmp / "state" / NAME).iterdir()] == ["notes.txt"]


add(Case(12, "cluster down with the user's file in the state folder", down_and_sweep,
         up_then_user_file, says="notes.txt, which cluster up did not write",
         keep=(f"state/{NAME}/notes.txt",), check=only_the_user_file))


def orphan_in_node(tmp, run):
    """A process of node 1 that outlived its session (an MPI daemon whose agent ended at a
    link cut): started in the node's namespace, in a session of its own, parent init."""
    cluster_up(tmp, run, nodes=2)
    subprocess.run(["ip", "netns", "exec", f"{NAME}-n1", "setsid", "-f", "sleep", "300"],
                   check=True)
    deadline = time.monotonic() + 10
    while not ip_lines("netns", "pids", f"{NAME}-n1"):
        assert time.monotonic() < deadline, "the node's process did not start"
        time.sleep(0.05)
    (tmp / "pids").write_text(" ".join(ip_lines("netns", "pids", f"{NAME}-n1")))


def down_after_orphan(tmp, run):
    return down_and_sweep(tmp, run, [int(p) for p in (tmp / "pids").read_text().split()])


add(Case(12, "cluster down with a process that outlived its session", down_after_orphan,
         orphan_in_node, status=0, check=nothing_left))

CUT_JOB = ("import os, sys, time\n"
           "open(os.path.join(sys.argv[1], str(os.getpid())), 'w').close()\n"
           "time.sleep(120)")


def link_cut(tmp, run):
    """A 2-node job under Open MPI whose node 1 loses its link; the job ends (the agent's
    keepalive), then cluster down."""
    cluster_up(tmp, run, nodes=2)
    (tmp / "ranks").mkdir()
    with (tmp / "job.err").open("w") as err:  # the child keeps its own copy of the file
        job = run.mpi_popen(run.command("launch", ["--hostfile",
                                                   tmp / "state" / NAME / "hostfile", "-n", 2,
                                                   "--", sys.executable, "-c", CUT_JOB,
                                                   tmp / "ranks"]),
                            env={**run.env(), "DISTGNN_CLUSTER_DIR": str(tmp / "state")},
                            stdout=subprocess.DEVNULL, stderr=err)
    try:
        # generous: on a loaded machine Open MPI's daemons start slowly through the agents
        deadline = time.monotonic() + 180
        while len(list((tmp / "ranks").iterdir())) < 2:
            said = (tmp / "job.err").read_text()[-1500:]
            assert job.poll() is None, f"the job ended before its ranks started: {said}"
            assert time.monotonic() < deadline, f"the ranks did not start in 180 s: {said}"
            time.sleep(0.1)
        subprocess.run(["ip", "link", "set", f"{NAME}-v1", "down"], check=True)
        job.wait(timeout=60)
    finally:
        if job.poll() is None:
            job.kill()
            job.wait()
    time.sleep(1)  # what the node's daemon does once its session is gone
    pids = [int(p.name) for p in (tmp / "ranks").iterdir()]
    pids += [int(p) for p in ip_lines("netns", "pids", f"{NAME}-n1")]
    return down_and_sweep(tmp, run, pids)


add(Case(12, "cluster down after a link cut", link_cut, status=0, check=nothing_left))


# 16. a launch that did not run, or a SLURM script that cannot run as written, is refused
def absent(rel):
    def check(tmp, outcome):
        assert not (tmp / rel).exists(), f"{rel} was written"
    return check


add(Case(16, "--mpirun /bin/true as Open MPI's launcher",
         tool("launch", "--mpi", "openmpi", "--mpirun", "/bin/true", "-n", 2, "--", "true",
              in_process=False), says="the job did not run"))
add(Case(16, "--mpirun /bin/false as MPICH's launcher",
         tool("launch", "--mpi", "mpich", "--mpirun", "/bin/false", "-n", 2, "--", "true",
              in_process=False), says="before any rank started"))


def slurm(*argv):
    return tool("launch", "-n", 2, "--slurm", "{tmp}/job.sh", *argv, "--", "distgnn-train",
                "--partitions", "{tmp}/p")


add(Case(16, "--slurm --time garbage", slurm("--time", "garbage"), says="--time 'garbage'",
         check=absent("job.sh")))
add(Case(16, "--slurm --stop-before beyond sbatch --signal",
         slurm("--time", "2-00", "--stop-before", 70000), says="--stop-before",
         check=absent("job.sh")))
add(Case(16, "--slurm --time shorter than --stop-before", slurm("--time", "1"),
         says="shorter than --time", check=absent("job.sh")))
add(Case(16, "--slurm with more nodes than ranks", slurm("--nodes", 4), says="--nodes",
         check=absent("job.sh")))
add(Case(16, "--slurm --timeout, which the script cannot keep", slurm("--timeout", 60),
         says="--timeout does not apply to --slurm", check=absent("job.sh")))
add(Case(16, "--time without --slurm", tool("launch", "-n", 1, "--dry-run", "--time", "10:00",
                                            "--", "true"), says="--time applies only"))


# 15. bad input to distgnn-launch: one line, never a traceback
def not_utf8(rel):
    def setup(tmp, run):
        (tmp / rel).write_bytes(b"node\xff1 slots=2\n")
    return setup


add(Case(15, "a hostfile that is not UTF-8",
         tool("launch", "-n", 2, "--dry-run", "--hostfile", "{tmp}/hosts", "--", "true"),
         not_utf8("hosts"), says="hosts is not text"))
add(Case(15, "a hostfile that is not UTF-8, for MPICH",
         tool("launch", "--mpi", "mpich", "--mpirun", "mpiexec", "-n", 2, "--dry-run",
              "--hostfile", "{tmp}/hosts", "--", "true"), not_utf8("hosts"),
         says="hosts is not text"))
add(Case(15, "--gpus-per-node as a superscript digit",
         tool("launch", "-n", 2, "--dry-run", "--gpus-per-node", "²", "--", "true"),
         says="--gpus-per-node"))
add(Case(15, "cluster status with a list for cluster.json", cluster_tool("status", "--name",
                                                                         NAME),
         user_file(f"state/{NAME}/cluster.json", "[]"), says="no emulated cluster"))
add(Case(15, "cluster status with the node count as a string",
         cluster_tool("status", "--name", NAME),
         user_file(f"state/{NAME}/cluster.json",
                   '{"name": "dghx", "nodes": "2", "rate": "1gbit", "slots": 1}'),
         says="no emulated cluster"))


# 11. one line per distinct error: a rank killed by a signal is named under every MPI
KILL_RANK_1 = ("import os, time\n"
               "time.sleep(1)\n"
               "if os.environ.get('PMI_RANK', os.environ.get('OMPI_COMM_WORLD_RANK')) == '1':\n"
               "    os.kill(os.getpid(), 9)\n"
               "time.sleep(5)")


def need_mpi(mpi: str) -> None:
    """Skip, saying how to install it, where MPI implementation ``mpi`` is not installed."""
    from tests.helpers.mpi import installed, skipped

    reason = skipped(installed(mpi))
    if reason:
        import pytest

        pytest.skip(reason)


def killed_rank(mpi):
    def go(tmp, run):
        need_mpi(mpi)
        return run.mpi_launch(["--mpi", mpi, "-n", 2, "--", sys.executable, "-c", KILL_RANK_1])
    return go


def names_rank_1(tmp, outcome):
    lines = outcome.error_lines()
    assert len(lines) == 1 and "process rank 1 with PID" in lines[0] and \
        "signal 9" in lines[0], f"stderr: {' | '.join(lines)[:80]!r}"


add(Case(11, "a rank killed under MPICH", killed_rank("mpich"), status=None,
         check=names_rank_1))
add(Case(11, "a rank killed under Intel MPI", killed_rank("impi"), status=None,
         check=names_rank_1))


# 22. launching, signals and leftovers: a launched job stops as a one-process run does, and
# what could fail only after MPI's start-up is caught before it
def training_job(tmp, run):
    """Partitions of a small graph for 2 ranks (and 4), for jobs that train until stopped."""
    write_npz(tmp / "d.npz", n=400)
    partition(run, tmp / "d.npz", 2, tmp / "p")


# --comm-wait sleep: a rank polling in its collectives while the suite's other workers hold
# the cores waits for a partner that is not running, and spins: in the whole suite a rank of
# the Ctrl-C drill used 43 s of CPU; the drill beside a second one and a busy loop on 2
# cores took 29 s polling, 12 s sleeping
LONG_TRAINING = ("--epochs", 10**6, "--no-progress", "--checkpoint-every", 10**6,
                 "--comm-wait", "sleep")


def leftovers(marker: Path | str) -> list[str]:
    """``still running: PID`` for every process whose command line names ``marker`` (the
    case directory: a rank or a launcher that outlived its job; an address: a remote shell
    to it), after killing it."""
    found = subprocess.run(["pgrep", "-f", str(marker)], capture_output=True,
                           text=True).stdout.split()
    found = [pid for pid in found if int(pid) != os.getpid()]
    for pid in found:
        with contextlib.suppress(ProcessLookupError):
            os.kill(int(pid), signal.SIGKILL)
    return [f"still running: {pid}\n" for pid in found]


def signalled_launch(signals, *flags, epochs: int = 3, command=None, gap: float = 0.3):
    """``distgnn-launch -n 2 FLAGS -- distgnn-train`` (or ``command``) on the case's
    partitions, sent ``signals`` (``gap`` seconds apart) once it has printed ``epochs``
    epoch lines (or lines ``ready``); stdout ends with what was still running as it exited,
    and the seconds from the first signal to its end."""
    def go(tmp, run):
        job = command(tmp) if command else [
            str(Path(sys.executable).parent / "distgnn-train"), "--partitions", tmp / "p",
            "--threads", 1, "--checkpoint-dir", tmp / "ck", *LONG_TRAINING]
        proc = run.mpi_popen(run.command("launch", ["-n", 2, *flags, "--", *job]), cwd=tmp,
                             preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
        seen = 0
        while seen < epochs and (line := proc.stdout.readline()):
            seen += line.startswith("epoch ") or line.strip() == "ready"
        sent = time.monotonic()
        for s in signals:
            proc.send_signal(s)
            time.sleep(gap)
        out, err = proc.communicate(timeout=180)
        took = time.monotonic() - sent
        return Outcome(proc.returncode, out + "".join(leftovers(tmp))
                       + f"stopped in {took:.1f} s\n", err)
    return go


def reported(status: int, says: str, checkpoint: bool = True):
    """The launcher ended with ``status``, its last line says ``says`` and names the
    checkpoint the ranks wrote (which exists, whole) and the command that continues, no
    rank outlived it, and nothing claims that nothing was written."""
    def check(tmp, outcome):
        last = outcome.error_lines()[-1] if outcome.error_lines() else ""
        assert outcome.status == status, f"exit {outcome.status}: {last[:70]}"
        assert "still running" not in outcome.stdout, outcome.stdout
        assert "nothing more was written" not in outcome.stderr, last[:80]
        assert last.startswith("distgnn-launch: error: ") and says in last, last[:90]
        if checkpoint:
            m = re.search(r"wrote checkpoint (\S+) \(after epoch", last)
            assert m and (tmp / m.group(1) / "manifest.json").is_file(), last[:90]
            assert last.endswith(f"--resume {tmp / 'ck'}") and \
                "continue with: distgnn-launch -n 2" in last, last[-90:]
    return check


add(Case(22, "Ctrl-C to distgnn-launch reports the ranks' checkpoint and how to continue",
         signalled_launch([signal.SIGINT]), training_job, status=None,
         check=reported(130, "stopped on Ctrl-C: the ranks wrote checkpoint"), slow=True))
add(Case(22, "SIGUSR1 to distgnn-launch reaches the ranks, which it waits for",
         signalled_launch([signal.SIGUSR1]), training_job, status=None,
         check=reported(128 + signal.SIGUSR1, "stopped on SIGUSR1: the ranks wrote"),
         slow=True))
add(Case(22, "SIGTERM to distgnn-launch reports the checkpoint and how to continue",
         signalled_launch([signal.SIGTERM]), training_job, status=None,
         check=reported(128 + signal.SIGUSR1, "stopped on SIGTERM: the ranks wrote"),
         slow=True))
DEAF_RANK = ("import signal, time\n"
             "signal.signal(signal.SIGUSR1, signal.SIG_IGN)\n"
             "print('ready', flush=True)\n"
             "time.sleep(120)\n")


def stopped_within(seconds: float, says: str, status: int):
    def check(tmp, outcome):
        reported(status, says, checkpoint=False)(tmp, outcome)
        took = float(re.search(r"stopped in ([0-9.]+) s", outcome.stdout).group(1))
        assert took < seconds, f"took {took} s"
    return check


# Ranks that ignore the stop request, so that only the second Ctrl-C can end them (ranks
# that obey may checkpoint and end between the two); the two are 0.5 s apart because the
# kernel merges a signal into one still pending, as a loaded machine leaves it
add(Case(22, "Ctrl-C twice to distgnn-launch ends the ranks at once",
         signalled_launch([signal.SIGINT, signal.SIGINT], epochs=2, gap=0.5,
                          command=lambda tmp: ["python", "-c", DEAF_RANK, tmp]),
         status=None, check=stopped_within(20, "(a second Ctrl-C ended the ranks at once)",
                                           130), slow=True))

add(Case(22, "ranks that ignore the stop request are killed after --stop-grace",
         signalled_launch([signal.SIGTERM], "--stop-grace", 2, epochs=2,
                          command=lambda tmp: ["python", "-c", DEAF_RANK, tmp]),
         status=None, check=stopped_within(20, "did not end within --stop-grace 2 s and were "
                                               "killed", 128 + signal.SIGTERM), slow=True))

# SIGHUP: the terminal distgnn-launch runs in was closed; the job must not run on unwatched
add(Case(24, "SIGHUP to distgnn-launch stops the job as SIGTERM does",
         signalled_launch([signal.SIGHUP], "--stop-grace", 1, epochs=2,
                          command=lambda tmp: ["python", "-c", DEAF_RANK, tmp]),
         status=None, check=stopped_within(20, "stopped on SIGHUP (the ranks did not end within "
                                               "--stop-grace 1 s and were killed)",
                                           128 + signal.SIGHUP)))
add(Case(24, "SIGHUP to distgnn-launch reports the ranks' checkpoint and how to continue",
         signalled_launch([signal.SIGHUP]), training_job, status=None,
         check=reported(128 + signal.SIGUSR1, "stopped on SIGHUP: the ranks wrote"), slow=True))

MPI4PY_RANK = ("import sys\n"
               "from mpi4py import MPI\n"
               "world = MPI.COMM_WORLD\n"
               "open(f'{sys.argv[1]}/rank{world.Get_rank()}', 'w').write(\n"
               "    f'{world.Get_size()} {sys.executable}')\n")


def python_without_mpi4py(tmp, run):
    """A ``python`` first on PATH that is not the one distgnn runs in (no mpi4py)."""
    (tmp / "bin").mkdir()
    (tmp / "bin" / "python").write_text("#!/bin/sh\necho 'a python without mpi4py' >&2\n"
                                        "exit 3\n")
    (tmp / "bin" / "python").chmod(0o755)
    (tmp / "rank.py").write_text(MPI4PY_RANK)
    (tmp / "ranks").mkdir()


def bare_python(tmp, run):
    proc = run.mpi_popen(run.command("launch", ["-n", 2, "--", "python", "-m", "mpi4py",
                                                tmp / "rank.py", tmp / "ranks"]),
                         env={**run.env(), "PATH": f"{tmp / 'bin'}:{os.environ['PATH']}"})
    out, err = proc.communicate(timeout=180)
    return Outcome(proc.returncode, out, err)


def ran_in_this_python(tmp, outcome):
    seen = {p.name: p.read_text() for p in (tmp / "ranks").iterdir()}
    assert seen == {f"rank{r}": f"2 {sys.executable}" for r in range(2)}, seen


add(Case(22, "a bare python is the Python distgnn runs in, not the first on PATH",
         bare_python, python_without_mpi4py, status=0, check=ran_in_this_python))


def dry_run_names(text: str):
    def check(tmp, outcome):
        assert text in outcome.stdout, outcome.stdout[-120:]
    return check


add(Case(22, "--dry-run says which Python a bare python3 is",
         tool("launch", "-n", 2, "--dry-run", "--", "python3", "train.py"), status=0,
         check=dry_run_names(f"  # python3 is {sys.executable}, the Python distgnn runs in")))

@contextlib.contextmanager
def silent_host():
    """An address that never answers a connection, and no packet to it leaves this host:
    a network namespace of its own holds it, behind a veth pair, and drops every answer
    (a blackhole route back); removed at the end.  Skips where namespaces cannot be
    made."""
    need_namespaces()
    tag = os.getpid() % 1000  # one per process of the suite
    space, outer, inner, net = f"dghs{tag}", f"dghs{tag}h", f"dghs{tag}n", f"10.251.{tag % 250}"
    subprocess.run(["ip", "netns", "delete", space], capture_output=True)  # a killed run's
    try:
        for argv in (["netns", "add", space],
                     ["link", "add", outer, "type", "veth", "peer", "name", inner, "netns",
                      space],
                     ["addr", "add", f"{net}.1/24", "dev", outer], ["link", "set", outer, "up"],
                     ["-n", space, "addr", "add", f"{net}.2/24", "dev", inner],
                     ["-n", space, "link", "set", inner, "up"],
                     ["-n", space, "route", "add", "blackhole", f"{net}.1/32"]):
            made = subprocess.run(["ip", *argv], capture_output=True, text=True)
            if made.returncode:
                import pytest

                pytest.skip(f"no silent host: ip {' '.join(argv)}: {made.stderr.strip()}")
        yield f"{net}.2"
    finally:  # the veth pair goes with its end in the namespace
        subprocess.run(["ip", "netns", "delete", space], capture_output=True)


def timed_launch(*argv, resolving: str | None = None, hosts: str | None = None,
                 mpi: str | None = None):
    """``distgnn-launch ARGV`` as a process; stdout ends with what of the job was still
    running as it ended (a remote shell to the silent host included) and the seconds it
    took, less those this host's resolver took to fail on the name ``resolving`` (timed
    before and after: ssh and the launcher each ask it once), which no launcher can
    shorten.  ``hosts``: the text of ``{tmp}/hosts``, ``{silent}`` in it an address that
    never answers (:func:`silent_host`); ``mpi``: the MPI the case needs installed."""
    def go(tmp, run):
        if mpi is not None:
            need_mpi(mpi)
        silent = hosts is not None and "{silent}" in hosts
        with silent_host() if silent else contextlib.nullcontext() as address:
            if hosts is not None:
                (tmp / "hosts").write_text(hosts.replace("{silent}", str(address)))
            lookup = resolver_seconds(resolving) if resolving else 0.0
            start = time.monotonic()
            got = run.mpi_launch([str(a).replace("{tmp}", str(tmp)) for a in argv])
            took = time.monotonic() - start
            if resolving:
                took = max(0.0, took - 2 * max(lookup, resolver_seconds(resolving)))
            left = leftovers(tmp) + (leftovers(address) if silent else [])
        return Outcome(got.status, got.stdout + "".join(left) + f"ended in {took:.1f} s\n",
                       got.stderr)
    return go


def resolver_seconds(name: str) -> float:
    """How long this host's resolver takes to answer for ``name`` (found or not)."""
    start = time.monotonic()
    with contextlib.suppress(OSError):
        socket.getaddrinfo(name, 22)
    return time.monotonic() - start


def ended_within(seconds: float):
    def check(tmp, outcome):
        assert "still running" not in outcome.stdout, outcome.stdout
        took = float(re.search(r"ended in ([0-9.]+) s", outcome.stdout).group(1))
        assert took < seconds, f"took {took} s"
    return check


# ssh says that it cannot reach a host that never answers only when TCP gives up, after
# about two minutes; its connection shows it at once
UNANSWERED = "(no answer to a connection to its port 22 within 3 s)"
add(Case(22, "a hostfile naming a host that never answers ends at once, not at --start-timeout",
         timed_launch("-n", 2, "--hostfile", "{tmp}/hosts", "--start-timeout", 60, "--",
                      "true", "{tmp}", hosts="localhost slots=1\n{silent} slots=1\n"),
         says=UNANSWERED, check=ended_within(20), slow=True))
add(Case(22, "a hostfile naming a host that does not resolve",
         timed_launch("-n", 2, "--hostfile", "{tmp}/hosts", "--", "true", "{tmp}",
                      resolving="nosuch.invalid"),
         user_file("hosts", "localhost slots=1\nnosuch.invalid slots=1\n"),
         says="could not reach nosuch.invalid", check=ended_within(30)))


# 24. a job that outlives what started it, or the start that failed
add(Case(24, "a host that never answers, under MPICH: no remote shell left, no --start-timeout",
         timed_launch("--mpi", "mpich", "-n", 2, "--hostfile", "{tmp}/hosts",
                      "--start-timeout", 60, "--", "true", "{tmp}",
                      hosts="{silent} slots=2\n", mpi="mpich"),
         says=UNANSWERED, check=ended_within(20)))


def killed_launcher(mpi: str, ranks_too: bool = True):
    """``distgnn-launch --mpi MPI -n 2`` of ranks that note their PIDs and sleep, killed
    (SIGKILL) once both started, before any could watch it; stdout names what of the job
    (with ``ranks_too`` false: what of its MPI launcher) still ran 30 s later (the launcher
    goes within a second on a quiet host; the margin is for a host as busy as a test run in
    parallel makes it; an orphan outlives any wait).  Ranks found then are killed either
    way."""
    def go(tmp, run):
        need_mpi(mpi)
        (tmp / "ranks").mkdir()
        job = run.mpi_popen(run.command("launch", ["--mpi", mpi, "-n", 2, "--",
                                                   sys.executable, "-c", CUT_JOB,
                                                   tmp / "ranks"]),
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 120
        while len(list((tmp / "ranks").iterdir())) < 2:
            assert job.poll() is None, f"the job ended before its ranks started ({job.returncode})"
            assert time.monotonic() < deadline, "the ranks did not start in 120 s"
            time.sleep(0.05)
        job.kill()
        job.wait()
        deadline = time.monotonic() + 30
        pattern = str(tmp) if ranks_too else f"(mpirun|prterun).*{re.escape(str(tmp))}"
        while subprocess.run(["pgrep", "-f", pattern], capture_output=True).returncode == 0 \
                and time.monotonic() < deadline:
            time.sleep(0.1)
        left = "".join(leftovers(pattern))
        leftovers(tmp)
        return Outcome(job.returncode, left, "")
    return go


def nothing_running(tmp, outcome):
    assert "still running" not in outcome.stdout, outcome.stdout.strip().replace("\n", "; ")


# Open MPI's prterun, given SIGTERM as its launcher dies, does not always end ranks that are
# still starting; distgnn-train's ranks then end themselves once their launcher is gone
# (distgnn.signals.StopRequests), a plain command does not: the launcher's part is checked
add(Case(24, "SIGKILL to distgnn-launch during start-up leaves no prterun",
         killed_launcher("openmpi", ranks_too=False), status=None, check=nothing_running))
add(Case(24, "SIGKILL to distgnn-launch during start-up under MPICH leaves no rank",
         killed_launcher("mpich"), status=None, check=nothing_running))


# 26. what the launcher of MPICH or Intel MPI prints about a host it cannot reach (a
# traceback of its own, a list of possible reasons) where the launcher's one line names it
add(Case(26, "a host that does not resolve, under MPICH: one line naming it",
         timed_launch("--mpi", "mpich", "-n", 2, "--hostfile", "{tmp}/hosts", "--", "true",
                      "{tmp}", resolving="nosuch.invalid", mpi="mpich"),
         user_file("hosts", "nosuch.invalid slots=2\n"), says="could not reach nosuch.invalid",
         check=ended_within(30)))
add(Case(26, "a host that does not resolve, under Intel MPI: one line naming it",
         timed_launch("--mpi", "impi", "-n", 2, "--hostfile", "{tmp}/hosts", "--", "true",
                      "{tmp}", resolving="nosuch.invalid", mpi="impi"),
         user_file("hosts", "nosuch.invalid slots=2\n"), says="could not reach nosuch.invalid",
         check=ended_within(30)))


def four_partitions(tmp, run):
    write_npz(tmp / "d.npz", n=200)
    partition(run, tmp / "d.npz", 4, tmp / "p4")


add(Case(22, "-n 3 on a directory of 4 partitions, caught before MPI starts",
         tool("launch", "-n", 3, "--", "distgnn-train", "--partitions", "{tmp}/p4"),
         four_partitions, says="holds 4 partitions but -n is 3"))
add(Case(22, "--slurm -n 3 on a directory of 4 partitions",
         tool("launch", "-n", 3, "--slurm", "{tmp}/job.sh", "--", "distgnn-train",
              "--partitions", "{tmp}/p4"),
         four_partitions, says="holds 4 partitions but -n is 3", check=absent("job.sh")))
add(Case(22, "--partitions naming no partition directory, caught before MPI starts",
         tool("launch", "-n", 2, "--", "distgnn-train", "--partitions", "{tmp}/notes"),
         user_file("notes/todo.txt"), says="not a partition directory (no meta.json)",
         keep=("notes",)))


def trained(*flags, directory="ck", data="d.npz"):
    """A run of 2 epochs on the case's dataset that checkpoints into ``directory``."""
    def setup(tmp, run):
        if not (tmp / data).exists():
            write_npz(tmp / data)
        got = run("train", ["--dataset", tmp / data, "--epochs", 2, "--checkpoint-dir",
                            tmp / directory, "--no-progress", "--threads", 1, *flags])
        assert got.status == 0, got.stderr
    return setup


def train(*argv):
    return tool("train", "--dataset", "{tmp}/d.npz", "--no-progress", "--threads", 1, *argv)


add(Case(22, "a new run into another run's checkpoint directory",
         train("--epochs", 4, "--checkpoint-dir", "{tmp}/ck"), trained("--hidden", 8),
         says="holds checkpoints of another run", keep=("ck",)))
add(Case(22, "a new run into the same run's checkpoint directory, without --resume",
         train("--epochs", 4, "--checkpoint-dir", "{tmp}/ck"), trained(),
         says="holds checkpoints of another run", keep=("ck",)))
add(Case(22, "--resume with a --checkpoint-dir of another run's",
         train("--epochs", 4, "--resume", "{tmp}/mine", "--checkpoint-dir", "{tmp}/theirs"),
         both(trained(directory="mine"), trained("--hidden", 8, directory="theirs")),
         says="theirs holds checkpoints of another run", keep=("mine", "theirs")))
add(Case(22, "--resume-if-present of nothing, --checkpoint-dir of another run's",
         train("--epochs", 4, "--resume-if-present", "{tmp}/empty", "--checkpoint-dir",
               "{tmp}/ck"), trained(), says="holds checkpoints of another run", keep=("ck",)))


def resumed_into_its_own(tmp, outcome):
    assert resumes_from(outcome, 2), outcome.stdout[-200:]
    assert sorted(p.name for p in (tmp / "ck").iterdir()  # .lock: the run's, while it runs
                  if p.name != ".lock") == ["epoch-000002", "epoch-000004"]


add(Case(22, "a restart with --resume-if-present into its own checkpoints",
         train("--epochs", 4, "--resume-if-present", "{tmp}/ck"), trained(), status=0,
         check=resumed_into_its_own))


def script_has(*starts: str, warned: tuple[str, ...] = ()):
    """The sbatch script has a line that starts with each of ``starts`` (``{prefix}``: this
    Python's environment), and stderr one warning naming each of ``warned``, besides the
    warning that this Python's environment is on node-local storage, which depends on
    where the checkout is (a clone under /tmp gets it: tests/test_launch.py tests it)."""
    def check(tmp, outcome):
        text = (tmp / "job.sh").read_text().splitlines()
        for start in starts:
            start = start.format(prefix=sys.prefix)
            assert any(line.startswith(start) for line in text), f"no {start[:60]!r} line"
        warnings = [w for w in outcome.error_lines() if "warning: " in w
                    and f"warning: the Python environment {sys.prefix} " not in w]
        assert len(warnings) == len(warned) and all(
            w in line for w, line in zip(warned, warnings)), warnings
    return check


def sbatch(*argv, command=("distgnn-train", "--partitions", "/shared/p")):
    return tool("launch", "-n", 2, "--slurm", "{tmp}/job.sh", *argv, "--", *command)


add(Case(22, "--slurm --env-setup keeps this environment and MPI4PY_LIBMPI",
         sbatch("--env-setup", "module load openmpi"), status=0,
         check=script_has("source {prefix}/bin/activate", "module load openmpi",
                          "export MPI4PY_LIBMPI={prefix}/")))
add(Case(22, "--slurm with partitions and checkpoints on node-local storage",
         sbatch(command=("distgnn-train", "--partitions", "/tmp/p", "--checkpoint-dir",
                         "/dev/shm/ck")), status=0,
         check=script_has(warned=("--partitions /tmp/p is on node-local storage",
                                  "--checkpoint-dir /dev/shm/ck is on node-local storage"))))
add(Case(22, "--slurm with relative partitions", sbatch(command=("distgnn-train",
                                                               "--partitions", "runs/p")),
         status=0, check=script_has(warned=("--partitions runs/p is a relative path",))))
add(Case(22, "--slurm --mem", sbatch("--mem", "64G"), status=0,
         check=script_has("#SBATCH --mem=64G")))
add(Case(22, "--slurm --mem that sbatch would refuse", sbatch("--mem", "64 GB"),
         says="--mem '64 GB' is not a SLURM memory size", check=absent("job.sh")))


def runs_mpiexec(tmp, outcome):
    launch = [line for line in (tmp / "job.sh").read_text().splitlines() if line.endswith(" &")]
    assert launch and os.path.basename(launch[0].split()[0]) == "mpiexec", launch


add(Case(22, "--slurm --mpi mpich needs no MPICH where the script is written",
         sbatch("--mpi", "mpich"), status=0, check=runs_mpiexec))


# 25. an elastic job (--min-nodes) whose checkpoints follow its rank count: a restart on
# fewer nodes finds none and trains again from epoch 0
def elastic(*train):
    return sbatch("--nodes", 2, "--ranks-per-node", 1, "--min-nodes", 1,
                  command=("distgnn-train", "--partitions", "/shared/p-{ranks}", *train))


add(Case(25, "--slurm --min-nodes with {ranks} in --checkpoint-dir",
         elastic("--checkpoint-dir", "/shared/ck-{ranks}"),
         says="--checkpoint-dir /shared/ck-{ranks}", check=absent("job.sh")))


# 18. a collision found after the work: cluster down (and kill) act only on what cluster up
# made, though another namespace, link or bridge carries the name
def hand_made(nodes_up: int, *made: str):
    """After ``cluster up`` of ``nodes_up`` nodes (none: no cluster), ``made`` by hand:
    ``ns:N`` a namespace of that name (replacing up's) running a process, ``link:N`` a
    bridge of that name (replacing up's link); the PIDs go to ``tmp/pids``."""
    def setup(tmp, run):
        need_namespaces()
        if nodes_up:
            cluster_up(tmp, run, nodes=nodes_up)
        pids = []
        for item in made:
            kind, name = item.split(":")
            if kind == "ns":
                subprocess.run(["ip", "netns", "delete", name], capture_output=True)
                subprocess.run(["ip", "netns", "add", name], check=True)
                subprocess.run(["ip", "netns", "exec", name, "setsid", "-f", "sleep", "300"],
                               check=True)
                deadline = time.monotonic() + 10
                while not ip_lines("netns", "pids", name):
                    assert time.monotonic() < deadline, "the hand-made process did not start"
                    time.sleep(0.05)
                pids += map(int, ip_lines("netns", "pids", name))
            else:
                subprocess.run(["ip", "link", "delete", name], capture_output=True)
                subprocess.run(["ip", "link", "add", name, "type", "bridge"], check=True)
        (tmp / "pids").write_text(" ".join(map(str, pids)))
    return setup


def then_sweep(act):
    """``act(tmp, run)``, then what is there of the cluster's names and of the hand-made
    processes noted on stdout (``there: ...``), then everything of the suite's cluster
    removed (:func:`down_and_sweep`)."""
    def go(tmp, run):
        got = act(tmp, run)
        spaces = [line.split()[0] for line in ip_lines("netns", "list")
                  if line.startswith(f"{NAME}-")]
        links = [line.split(": ")[1].split("@")[0] for line in ip_lines("-o", "link", "show")
                 if f": {NAME}-" in line]
        pids = [int(p) for p in (tmp / "pids").read_text().split()]
        there = [*spaces, *links, *(f"process {p}" for p in pids if running(p))]
        down_and_sweep(tmp, run, pids)
        return Outcome(got.status, got.stdout + "".join(f"there: {x}\n" for x in there),
                       got.stderr)
    return go


def there_after(*expected: str, hand_made_processes: int = 0):
    """Exactly ``expected`` of the cluster's names were there after the act, and the
    hand-made processes still ran."""
    def check(tmp, outcome):
        there = [line[len("there: "):] for line in outcome.stdout.splitlines()
                 if line.startswith("there: ")]
        names = sorted(x for x in there if not x.startswith("process "))
        assert names == sorted(expected), f"there after: {names}"
        alive = [x for x in there if x.startswith("process ")]
        assert len(alive) == hand_made_processes, f"hand-made processes alive: {alive}"
    return check


down = then_sweep(cluster_tool("down", "--name", NAME))
add(Case(18, "cluster down where up never ran: a namespace, link and bridge of its names",
         down, hand_made(0, f"ns:{NAME}-n0", f"link:{NAME}-v0", f"link:{NAME}-br"),
         says="(no record of cluster up)",
         check=there_after(f"{NAME}-n0", f"{NAME}-v0", f"{NAME}-br", hand_made_processes=1)))
add(Case(18, "cluster down after a node's namespace was made again under its name",
         down, hand_made(2, f"ns:{NAME}-n1"),
         says=f"left alone namespace {NAME}-n1 (made again since cluster up made it)",
         check=there_after(f"{NAME}-n1", hand_made_processes=1)))
add(Case(18, "cluster down after a node's link was made again under its name",
         down, hand_made(2, f"link:{NAME}-v1"),
         says=f"left alone link {NAME}-v1 (made again since cluster up made it)",
         check=there_after(f"{NAME}-v1")))
add(Case(18, "cluster down beside a bridge named like a further node's link",
         down, hand_made(1, f"link:{NAME}-v5"),
         says=f"left alone link {NAME}-v5 (not made by cluster up)",
         check=there_after(f"{NAME}-v5")))
add(Case(18, "cluster kill of a node whose namespace was made again under its name",
         then_sweep(cluster_tool("kill", "--node", 1, "--name", NAME)),
         hand_made(2, f"ns:{NAME}-n1"),
         says=f"namespace {NAME}-n1 made again since cluster up made it",
         check=there_after(f"{NAME}-n0", f"{NAME}-n1", f"{NAME}-br", f"{NAME}-v0",
                           hand_made_processes=1)))
