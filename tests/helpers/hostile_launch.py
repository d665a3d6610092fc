"""Hostile and careless uses of distgnn-launch: cluster down, launchers that start nothing,
SLURM scripts that sbatch would refuse, bad input, a killed rank under Hydra.

The cluster cases need CAP_NET_ADMIN and ip, tc and unshare (as tests/test_cluster.py), and
the subnet of the emulated cluster free; where they are not they skip, with the reason.
Each keeps its state under its case directory (DISTGNN_CLUSTER_DIR) and removes whatever
the tool left of its namespaces and links after noting it.
"""
from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

from tests.helpers.hostile import Case, Outcome, Runner, both, tool, user_file

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
    spaces = [line.split()[0] for line in ip_lines("netns", "list")
              if line.startswith(f"{NAME}-")]
    links = [line.split(": ")[1].split("@")[0] for line in ip_lines("-o", "link", "show")
             if f": {NAME}-" in line]
    alive = {int(p) for ns in spaces for p in ip_lines("netns", "pids", ns)}
    alive |= {p for p in pids if running(p)}
    for pid in alive:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    for dev in links:
        subprocess.run(["ip", "link", "delete", dev], capture_output=True)
    for ns in spaces:
        subprocess.run(["ip", "netns", "delete", ns], capture_output=True)
    left = [*spaces, *links, *(f"process {p}" for p in sorted(alive))]
    return Outcome(got.status, got.stdout + "".join(f"left: {x}\n" for x in left), got.stderr)


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


def killed_rank(mpi):
    def go(tmp, run):
        from tests.helpers.mpi import installed, skipped

        reason = skipped(installed(mpi))
        if reason:
            import pytest

            pytest.skip(reason)
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
