"""Scripts of ``distgnn-launch --slurm`` submitted with sbatch to a real SLURM: its daemons
on this host, two nodes of an emulated cluster (tests/helpers/slurm.py).  Every MPI runs
one job of 2 nodes x 2 ranks under each launcher, and a training job cut by its time limit
requeues itself and resumes until it is done, with the loss curve and weights of the same
job never cut; one whose requeued start gets half the nodes goes on with half the ranks,
its loss curve continuous.  Skipped, with the reason, where SLURM is not installed or this
process is not root."""
import json
import sys
import time
from pathlib import Path

import pytest
import torch

from bench.resume import final_state
from distgnn.data.datasets import load
from distgnn.run.config import TrainConfig
from launch import cluster
from launch.cli import main
from partition.vertex_cut import vertex_cut
from partition.write import write_dataset
from tests.helpers.mpi import installed
from tests.helpers.slurm import RATE, missing, running_slurm
from tests.helpers.training import fit_on_threads

BIN = Path(sys.executable).parent
pytestmark = [pytest.mark.mpi, pytest.mark.cluster,  # the emulated cluster's namespaces
              pytest.mark.skipif(missing() is not None, reason=str(missing()))]
# Each rank writes what it sees: the job's size, its node, its thread count, the cores it
# is bound to, its MPI library.
RANK_SCRIPT = """
import json, os, socket, sys
from mpi4py import MPI
world = MPI.COMM_WORLD
with open(os.path.join(sys.argv[1], f"rank{world.Get_rank()}"), "w") as f:
    json.dump({"size": world.Get_size(), "node": socket.gethostname(),
               "threads": os.environ["OMP_NUM_THREADS"],
               "cores": sorted(os.sched_getaffinity(0)),
               "library": MPI.Get_library_version().split()[0]}, f)
"""
LIBRARY = {"openmpi": "Open", "mpich": "MPICH", "impi": "Intel(R)"}
# The time-limit drill: SLURM's shortest limit, 1 minute, and its signal 10 s before it,
# which slurmctld (checking limits every 30 s) sends 20 to 50 s after the start.  The links
# run at DRILL_RATE meanwhile: cora on 2 x 2 ranks then takes about 0.56 s an epoch, most of
# it waiting for the link (the ranks sleep: 4 on 2 cores), so the drill leaves the cores to
# the rest of the suite; its 100 epochs and the 10 s a job takes to start outlast the first
# allocation, and the job goes through two or three.
LIMIT, STOP_BEFORE, EPOCHS, DRILL_RATE = "1", "10", 100, "4mbit"
JOB_S = 600  # how long a job may take, queueing and requeues included


@pytest.fixture(scope="module")
def slurm(tmp_path_factory):
    with running_slurm(tmp_path_factory.mktemp("slurm") / "cluster") as cluster:
        yield cluster


def sbatch_script(path, ranks, command, *flags):
    """``distgnn-launch -n RANKS --nodes 2 --slurm PATH FLAGS -- COMMAND``, as a user runs it."""
    assert main(["-n", str(ranks), "--nodes", "2", "--slurm", str(path), *flags, "--",
                 *map(str, command)]) == 0
    return path


@pytest.mark.parametrize("launcher", ["mpirun", "srun"])
@pytest.mark.parametrize("mpi", [installed(mpi) for mpi in LIBRARY])
def test_every_mpi_under_each_launcher(slurm, tmp_path, mpi, launcher):
    """One job of 4 ranks, 2 on each node, each bound to cores of its own, with the thread
    count and MPI library the script sets; srun under the MPI's default plugin (PMIx for
    Open MPI, PMI-2 for the others)."""
    out = tmp_path / "ranks"
    out.mkdir()
    script = sbatch_script(tmp_path / "job.sbatch", 4,
                           [sys.executable, "-c", RANK_SCRIPT, out], "--mpi", mpi,
                           "--slurm-launcher", launcher, "--time", "5")
    end = slurm.wait(slurm.submit(script, f"--output={tmp_path}/log"), JOB_S)
    log = (tmp_path / "log").read_text()
    if "can not load PMIx library" in log:
        pytest.skip("SLURM's pmix plugin cannot load libpmix (Debian: apt-get install "
                    "libpmix-dev, whose libpmix.so the plugin opens)")
    assert (end["JobState"], end["ExitCode"]) == ("COMPLETED", "0:0"), log + slurm.logs()
    seen = {f.name: json.loads(f.read_text()) for f in out.iterdir()}
    assert {name: {k: v for k, v in rank.items() if k != "cores"}
            for name, rank in seen.items()} == {
        f"rank{r}": {"size": 4, "node": f"node{r // 2}", "threads": "1",
                     "library": LIBRARY[mpi]} for r in range(4)}, log
    for r in (0, 2):  # the two ranks of a node on cores of their own
        first, second = set(seen[f"rank{r}"]["cores"]), set(seen[f"rank{r + 1}"]["cores"])
        assert first and second and not first & second, seen


def test_a_job_cut_by_its_time_limit_requeues_and_resumes_as_if_never_cut(slurm, tmp_path):
    """The drill of a long run on a cluster: SLURM signals the job before its time limit,
    the ranks checkpoint, the script requeues the job, and its next allocation resumes
    (``--resume-if-present``), as often as it takes; the job submitted beside it, with a
    limit it never reaches, gives the same loss at every epoch and the same weights."""
    for i in range(len(slurm.nodes)):
        cluster.shape(slurm.emulated, i, DRILL_RATE)
    try:
        time_limit_drill(slurm, tmp_path)
    finally:
        for i in range(len(slurm.nodes)):
            cluster.shape(slurm.emulated, i, RATE)


def time_limit_drill(slurm, tmp_path):
    """Both jobs of the drill, submitted together, and the checks of the test above."""
    data = load("cora")
    parts = tmp_path / "cora4"
    write_dataset(parts, data, vertex_cut(data.graph, 4, "libra", seed=0),
                  {"method": "libra", "seed": 0})
    jobs = {}
    for name, limit in (("cut", LIMIT), ("whole", "10")):
        script = sbatch_script(
            tmp_path / f"{name}.sbatch", 4,
            [BIN / "distgnn-train", "--partitions", parts, "--epochs", EPOCHS, "--eval-every",
             20, "--checkpoint-every", 5, "--seed", 4, "--no-progress", "--checkpoint-dir",
             tmp_path / name],
            "--time", limit, "--stop-before", STOP_BEFORE)
        jobs[name] = slurm.submit(script, f"--output={tmp_path}/{name}.log")
    ends = {name: slurm.wait(job, JOB_S) for name, job in jobs.items()}
    logs = {name: (tmp_path / f"{name}.log").read_text() for name in jobs}
    for name, end in ends.items():
        assert (end["JobState"], end["ExitCode"]) == ("COMPLETED", "0:0"), logs[name]
    restarts = int(ends["cut"]["Restarts"])
    assert restarts >= 1, f"the job ended within its first allocation: more EPOCHS\n{logs['cut']}"
    assert ends["whole"]["Restarts"] == "0", logs["whole"]
    assert logs["cut"].count("before the time limit (status 138); requeueing") == restarts, \
        logs["cut"]
    assert "resumed from" in logs["cut"] and "resumed from" not in logs["whole"], logs["cut"]
    cut, whole = final_state(tmp_path / "cut"), final_state(tmp_path / "whole")
    assert len(cut["history"]) == EPOCHS
    assert [r["loss"] for r in cut["history"]] == [r["loss"] for r in whole["history"]]
    for name, weights in whole["model"].items():
        assert torch.equal(cut["model"][name], weights), name


def test_a_requeued_job_that_gets_half_the_nodes_goes_on_with_half_the_ranks(slurm, tmp_path):
    """A job that may run on 1 or 2 nodes of 2 ranks, making the partitions of each start's
    rank count from cora: its first start gets both nodes (4 ranks); after 5 epochs the
    second node is drained (lost to the job) and the job is signalled as before its time
    limit; it checkpoints and requeues, is given one node while it waits (as its log says
    how), and its second start resumes the checkpoint of 4 ranks on 2.  Every epoch's loss
    is within 1e-5 (relative) of the same run never cut, on 4 ranks: the loss curve runs on
    across the two allocations."""
    for i in range(len(slurm.nodes)):
        cluster.shape(slurm.emulated, i, DRILL_RATE)
    started = time.monotonic()
    script = sbatch_script(
        tmp_path / "elastic.sbatch", 4,
        [BIN / "distgnn-train", "--partitions", tmp_path / "cora-{ranks}", "--epochs", EPOCHS,
         "--eval-every", 20, "--checkpoint-every", 5, "--seed", 4, "--no-progress",
         "--checkpoint-dir", tmp_path / "ck"],
        "--min-nodes", "1", "--partition-from", "cora", "--time", "10")
    job = slurm.submit(script, f"--output={tmp_path}/elastic.log")
    try:
        while not (tmp_path / "ck" / "epoch-000005").is_dir():
            assert time.monotonic() - started < JOB_S, slurm.job(job)
            time.sleep(0.5)
        assert slurm.job(job)["NumNodes"] == "2", slurm.job(job)
        slurm.run("scontrol", "update", f"NodeName={slurm.nodes[1]}", "State=DRAIN",
                  "Reason=drill")
        slurm.run("scancel", "--batch", "--signal=USR1", str(job))
        while slurm.job(job)["Restarts"] == "0" or slurm.job(job)["JobState"] != "PENDING":
            assert time.monotonic() - started < JOB_S, slurm.job(job)
            time.sleep(0.5)
        slurm.run("scontrol", "update", f"JobId={job}", "NumNodes=1", "NumTasks=2")
        end = slurm.wait(job, JOB_S)
    finally:
        slurm.run("scontrol", "update", f"NodeName={slurm.nodes[1]}", "State=RESUME",
                  check=False)
        for i in range(len(slurm.nodes)):
            cluster.shape(slurm.emulated, i, RATE)
    log = (tmp_path / "elastic.log").read_text()
    assert (end["JobState"], end["ExitCode"]) == ("COMPLETED", "0:0"), log
    assert end["Restarts"] == "1" and end["NumNodes"] == "1", end
    assert "to restart on K nodes: scontrol update" in log, log
    assert "checkpoint of 4 ranks resumed on 2 ranks" in log, log
    assert (tmp_path / "cora-4" / "meta.json").is_file() and \
        (tmp_path / "cora-2" / "meta.json").is_file()
    history = final_state(tmp_path / "ck")["history"]
    assert [r["epoch"] for r in history] == list(range(1, EPOCHS + 1))
    whole = fit_on_threads(tmp_path / "cora-4", 4, TrainConfig(
        epochs=EPOCHS, eval_every=20, seed=4, progress=False, threads=1))[0]
    cut, uncut = (torch.tensor([r["loss"] for r in h]) for h in (history, whole.history))
    gap = ((cut - uncut).abs() / uncut).max().item()
    assert gap <= 1e-5, f"max relative loss difference {gap:.2e}\n{log}"
    (tmp_path.parent / "elastic-drill.json").write_text(json.dumps(
        {"losses": cut.tolist(), "uncut": uncut.tolist(), "log": log}))
