"""The emulated cluster (``distgnn-launch cluster``): network namespaces with shaped links,
MPI ranks started in them through the launcher, traffic on the links.  Skipped, with the
reason, where this process cannot make network namespaces (no CAP_NET_ADMIN)."""
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from launch import cluster
from tests.helpers.training import losses, train_quietly

BIN = Path(sys.executable).parent
NAME = "dgtest"
pytestmark = pytest.mark.skipif(
    not cluster.has_net_admin() or not all(map(shutil.which, ("ip", "tc", "unshare"))),
    reason="the emulated cluster needs CAP_NET_ADMIN and ip, tc, unshare")


def launch(*argv):
    return subprocess.run([str(BIN / "distgnn-launch"), *map(str, argv)], capture_output=True,
                          text=True, timeout=300)


@pytest.fixture(scope="module")
def two_nodes(tmp_path_factory):
    state = tmp_path_factory.mktemp("state")
    saved = os.environ.get("DISTGNN_CLUSTER_DIR"), cluster.STATE_ROOT
    os.environ["DISTGNN_CLUSTER_DIR"] = str(state)  # for the subprocesses
    cluster.STATE_ROOT = state
    proc = launch("cluster", "up", "--nodes", 2, "--rate", "1gbit", "--name", NAME)
    assert proc.returncode == 0, proc.stderr
    assert "latency cannot be injected" in proc.stdout
    yield cluster.load(NAME)
    assert launch("cluster", "down", "--name", NAME).returncode == 0
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


def test_cd0_across_emulated_nodes_follows_single_socket(two_nodes, cora, tmp_path):
    """2 ranks on 2 emulated nodes over TCP: the single-socket loss curve (<= 1e-4 over 30
    epochs), and the links carried at least the split-vertex exchange the trainer counts."""
    parts = tmp_path / "p2"
    assert subprocess.run([str(BIN / "distgnn-partition"), "cora", "--parts", "2", "--out",
                           str(parts)], capture_output=True).returncode == 0
    before = [cluster.link_bytes(two_nodes, i)["tx"] for i in range(2)]
    metrics = tmp_path / "m.jsonl"
    proc = launch("--hostfile", two_nodes.state / "hostfile", "-n", 2, "--",
                  BIN / "distgnn-train", "--partitions", parts, "--dropout", 0, "--epochs", 30,
                  "--metrics-out", metrics)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    sent = [cluster.link_bytes(two_nodes, i)["tx"] - before[i] for i in range(2)]
    records = [json.loads(line) for line in metrics.read_text().splitlines()]
    reference = losses(train_quietly(cora, dropout=0.0, epochs=30, device="cpu"))
    got = np.array([r["loss"] for r in records])
    assert np.max(np.abs(got - reference) / np.abs(reference)) <= 1e-4
    exchanged = sum(r["bytes_sent_mean"] for r in records)
    assert min(sent) >= exchanged  # the exchange went over the links (plus allreduces)


def test_cluster_refuses_bad_input(two_nodes):
    for argv, message in [(["up", "--nodes", 0], "--nodes must be"),
                          (["up", "--nodes", 2, "--rate", "fast"], "not a tc rate"),
                          (["shape", "--node", 5, "--rate", "1gbit", "--name", NAME],
                           "--node must be from 0 to 1"),
                          (["status", "--name", "nosuch"], "no emulated cluster")]:
        proc = launch("cluster", *argv)
        lines = proc.stderr.strip().splitlines()
        assert proc.returncode == 2 and len(lines) == 1 and message in lines[0], proc.stderr
