"""Distributed training: the split-vertex exchange over each transport in real mpirun jobs
(against the whole graph, and against the same exchange on threads in one process, whose
every mode ``tests/test_exchange.py`` checks), cd-0 training against single-socket
training under Open MPI, MPICH and Intel MPI (where installed), the examples and the
outputs of real jobs, and failure modes.  What the exchange does inside training (0c and
cd-r bytes, cd-r's schedules against their reference, float64, wire precision, the models)
runs on ranks that are threads of this process (:func:`tests.helpers.training.fit_on_threads`):
the same shards and training loop without a job's start-up.

Every job is composed by :func:`launch.plan` (which adds the Open MPI flags this machine
needs) and run with a timeout, so a hang fails the test instead of blocking the suite.
The module builds its partition directories once and runs each job once (the ``*_job``
fixtures memoise them); several tests read one job.
"""
import contextlib
import importlib.util
import io
import math
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import torch

import launch
from distgnn import placement
from distgnn.cli.train import report
from distgnn.data.datasets import load as load_dataset
from distgnn.data.graph import NodeDataset
from distgnn.data.partitions import load as load_partition
from distgnn.data.partitions import read_meta
from distgnn.exchange import SplitIndex
from distgnn.run import epoch_log
from distgnn.run.config import TrainConfig
from partition.cli import main as partition_cli
from partition.layout import order_layout
from partition.vertex_cut import vertex_cut
from partition.write import write_dataset
from tests.helpers.cdr_reference import Simulation
from tests.helpers.graphs import build_random_graph, out_degrees
from tests.helpers.mpi import installed, run_plan
from tests.helpers.threads_comm import run_ranks
from tests.helpers.training import fit_on_threads, train_quietly
from tests.mpi import exchange_ranks

RANK_SCRIPTS = Path(__file__).parent / "mpi"
TRAIN = str(Path(sys.executable).parent / "distgnn-train")
TIMEOUT = 120
# cd-0 against one process under bf16-mixed, max relative loss gap over 30 epochs of cora
# (measured 4e-4 on 3 ranks, AMD EPYC with AVX512-BF16; float32's gap is up to 1e-4)
BF16_MIXED_CD0_GAP = 2e-3


def mpirun(ranks, command, timeout=TIMEOUT, mpi=None):
    """``(CompletedProcess, seconds)`` of ``command`` on ``ranks`` ranks of one thread each,
    under MPI implementation ``mpi`` (``None``: the first ``mpirun`` found)."""
    p = launch.plan(ranks, [str(c) for c in command], threads_per_rank=1, implementation=mpi)
    start = time.monotonic()
    proc = run_plan(p, timeout)
    return proc, time.monotonic() - start


def run_command(argv, env=None, timeout=TIMEOUT):
    start = time.monotonic()
    proc = subprocess.run([str(a) for a in argv], env={**os.environ, **(env or {})},
                          capture_output=True, text=True, timeout=timeout)
    return proc, time.monotonic() - start


def write_parts(ds, out, num_parts, seed=0, order="given"):
    """Libra partitions of ``ds`` in ``out``, local vertices in locality order ``order``."""
    layout = vertex_cut(ds.graph, num_parts, "libra", seed=seed)
    ordering = order_layout(layout, ds.graph.indptr, ds.graph.indices, order)
    write_dataset(out, ds, layout, {"method": "libra", "seed": seed, **ordering})
    return out


def load_parts(directory):
    return [load_partition(directory, p) for p in range(read_meta(directory)["num_parts"])]


# ---- fixtures: graphs, partition directories, memoised jobs ----------------------------------
@pytest.fixture(scope="module")
def random_parts(tmp_path_factory):
    """A weighted random graph (hub, isolated vertices, self-loops, duplicate edges), its
    features ``x`` and loss weights ``g`` (``ref.npz``), and its libra partitions."""
    root = tmp_path_factory.mktemp("random")
    graph, src, dst, weight = build_random_graph(seed=3, n=60, e=400, weighted=True,
                                                 hub_degree=30, isolated=5, self_loops=5,
                                                 duplicates=6)
    n = graph.num_nodes
    rng = np.random.default_rng(7)
    x = rng.standard_normal((n, 4)).astype(np.float32)
    g = rng.standard_normal((n, 4))
    ds = NodeDataset(graph, x, rng.integers(0, 3, n), np.ones(n, bool), np.zeros(n, bool),
                     np.zeros(n, bool), name="random")
    np.savez(root / "ref.npz", x=x.astype(np.float64), g=g)
    # the exchange must not depend on the local order: P = 3 is stored reordered
    dirs = {P: write_parts(ds, root / f"p{P}", P, order=order)
            for P, order in ((2, "given"), (3, "rcm"))}
    # the references, straight from the edge list (not through CSRGraph or the kernels)
    y_ref = np.zeros((n, 4))
    np.add.at(y_ref, dst, weight[:, None].astype(np.float64) * x[src].astype(np.float64))
    grad_ref = np.zeros((n, 4))
    np.add.at(grad_ref, src, weight[:, None].astype(np.float64) * g[dst])
    return {"root": root, "dirs": dirs, "n": n, "y_ref": y_ref, "grad_ref": grad_ref,
            "isolated": np.flatnonzero(graph.in_degrees() + out_degrees(graph) == 0)}


@pytest.fixture(scope="module")
def exchange_job(random_parts):
    """``exchange_job(P, comm, dtype, wait)``: per-rank outputs of
    ``tests/mpi/exchange_ranks.py`` on the P-partition directory, the mpi communicator
    waiting as ``wait`` says (each job runs once)."""
    cache = {}

    def get(P, comm, dtype, wait="poll"):
        key = (P, comm, dtype, wait)
        if key not in cache:
            out = random_parts["root"] / "-".join(map(str, ("out", *key)))
            out.mkdir()
            proc, _ = mpirun(P, [sys.executable, RANK_SCRIPTS / "exchange_ranks.py",
                                 random_parts["dirs"][P], out, random_parts["root"] / "ref.npz",
                                 "--comm", comm, "--dtype", dtype, "--wait", wait])
            assert proc.returncode == 0, proc.stdout + proc.stderr
            cache[key] = [dict(np.load(out / f"rank-{p}.npz")) for p in range(P)]
        return cache[key]

    return get


@pytest.fixture(scope="module")
def cora():
    return load_dataset("cora")


@pytest.fixture(scope="module")
def cora_dirs(tmp_path_factory, cora):
    """Libra partitions of cora into 1, 2, 3 and 4 parts (3 and 4 in locality orders)."""
    root = tmp_path_factory.mktemp("cora")
    orders = {1: "given", 2: "given", 3: "degree", 4: "rcm"}
    return {P: write_parts(cora, root / f"p{P}", P, order=orders[P]) for P in (1, 2, 3, 4)}


def read_metrics(path):
    return epoch_log.read_metrics(path)[0]


@pytest.fixture(scope="module")
def train_job(cora_dirs, tmp_path_factory):
    """``train_job(P, algo, *flags, mpi=None)``: ``(proc, metrics)`` of 30 dropout-free
    epochs of ``mpirun -np P distgnn-train --partitions`` on cora under MPI implementation
    ``mpi`` (each job runs once)."""
    root = tmp_path_factory.mktemp("train")
    cache = {}

    def get(P, algo, *flags, mpi=None):
        key = (P, algo, *flags, mpi)
        if key not in cache:
            metrics = root / ("m-" + "-".join(map(str, key)) + ".jsonl")
            proc, _ = mpirun(P, [TRAIN, "--partitions", cora_dirs[P], "--algo", algo,
                                 *flags, "--dropout", "0", "--epochs", "30", "--threads", "1",
                                 "--no-progress", "--metrics-out", metrics], mpi=mpi)
            assert proc.returncode == 0, proc.stdout + proc.stderr
            cache[key] = proc, read_metrics(metrics)
        return cache[key]

    return get


@pytest.fixture(scope="module")
def thread_job(cora_dirs):
    """``thread_job(P, **config)``: ``(report, history)`` of the same 30 dropout-free epochs
    on cora's P partitions with ranks on threads (:func:`tests.helpers.training.fit_on_threads`),
    ``report`` being the summary lines ``distgnn-train`` prints (each job runs once)."""
    cache = {}

    def get(P, **config):
        key = (P, *sorted(config.items()))
        if key not in cache:
            cfg = TrainConfig(dropout=0.0, epochs=30, threads=1, progress=False, **config)
            result = fit_on_threads(cora_dirs[P], P, cfg)[0]
            printed = io.StringIO()
            with contextlib.redirect_stdout(printed):
                report(result)
            cache[key] = printed.getvalue(), result.history
        return cache[key]

    return get


@pytest.fixture(scope="module")
def single_socket(cora):
    """History of the same 30 epochs trained on the whole of cora in one process."""
    return train_quietly(cora, dropout=0.0, epochs=30).history


# ---- 1. the exchange over each transport -------------------------------------------------------
def check_exchange(random_parts, outs, dtype):
    n, y_ref, grad_ref = random_parts["n"], random_parts["y_ref"], random_parts["grad_ref"]
    P = len(outs)
    assert all(int(o["size"]) == P for o in outs)
    clones = np.zeros(n, np.int64)
    for o in outs:
        clones[o["global_ids"]] += 1
    assert clones.min() == 1  # every vertex (isolated ones too) lives on some rank
    np.testing.assert_array_equal(clones[random_parts["isolated"]], 1)
    split = clones > 1
    assert split.sum() >= 3, "the partition must split vertices for the test to mean much"
    rtol = 1e-5 if dtype == "float32" else 1e-10
    atol_y, atol_g = rtol * np.abs(y_ref).max(), rtol * np.abs(grad_ref).max()
    for topology in ("", "_node"):  # flat, and two-level over communicators split off
        # forward: every clone, root or leaf, holds the whole-graph aggregate A @ X
        for p, o in enumerate(outs):
            np.testing.assert_allclose(o["y" + topology], y_ref[o["global_ids"]], rtol=rtol,
                                       atol=atol_y, err_msg=f"rank {p}: y{topology} is not A X")
        # backward: the clone gradients are partial sums of A^T G (each loss term once)
        grad_sum = np.zeros_like(grad_ref)
        for o in outs:
            np.add.at(grad_sum, o["global_ids"], o["grad" + topology])
        np.testing.assert_allclose(grad_sum, grad_ref, rtol=rtol, atol=atol_g)
    grad_none = np.zeros_like(grad_ref)
    for o in outs:
        np.add.at(grad_none, o["global_ids"], o["grad_none"])
    # the same checks fail without the exchange: local partials are not the aggregate at
    # split vertices (and are exact at the others), and gradient is lost at leaf clones
    wrong = np.zeros(n, bool)
    for o in outs:
        ids = o["global_ids"]
        off = ~np.isclose(o["y_none"], y_ref[ids], rtol=rtol, atol=atol_y).all(axis=1)
        assert not off[~split[ids]].any(), "a vertex on one rank must not need an exchange"
        wrong[ids[off]] = True
    assert wrong[split].any()
    assert not np.allclose(grad_none, grad_ref, rtol=rtol, atol=atol_g)


def check_cdr_against_threads(random_parts, outs):
    """cd-r, whose non-blocking alltoallv stay in flight across epochs, gives over the
    transport the bits (outputs, gradients, bytes) of the same exchange on threads in one
    process."""
    parts = load_parts(random_parts["dirs"][len(outs)])
    want = run_ranks(len(parts), lambda comm: exchange_ranks.delayed_run(
        parts[comm.rank], SplitIndex.from_partition(parts[comm.rank]), comm))
    for o, w in zip(outs, want):
        for name, value in w.items():
            np.testing.assert_array_equal(o[name], value, err_msg=name)
    assert want[0]["cdr_bytes"][-1] > 0


@pytest.mark.parametrize("P, comm, dtype, wait", [(3, "mpi", "float64", "sleep"),
                                                  (2, "gloo", "float32", "poll")])
def test_exchange_over_each_transport(random_parts, exchange_job, P, comm, dtype, wait):
    """Over mpi4py (3 ranks, stored in another local order, its blocking calls waiting by
    sleeping; every other MPI job of the suite polls) and torch.distributed's gloo: cd-0
    forward gives every clone the whole-graph aggregate ``A X``, and its backward makes the
    clone gradients sum to ``A^T G`` (without the exchange both checks fail), flat and
    two-level (the ranks told they are on two nodes: its node and leader communicators are
    the transport's own, split off); cd-r gives what it gives on threads."""
    outs = exchange_job(P, comm, dtype, wait)
    check_exchange(random_parts, outs, dtype)
    check_cdr_against_threads(random_parts, outs)


def test_exchange_over_ccl(random_parts, exchange_job):
    """The same checks over torch.distributed's oneCCL backend (needs the bindings)."""
    pytest.importorskip("oneccl_bindings_for_pytorch")
    outs = exchange_job(2, "ccl", "float32")
    check_exchange(random_parts, outs, "float32")
    check_cdr_against_threads(random_parts, outs)


# ---- 2. training: cd-0 equals single-socket, cd-r its reference; 0c and cd-r run ---------
@pytest.mark.parametrize("P, mpi", [(2, None), (3, None), installed("mpich", 2),
                                    installed("impi", 2)])
def test_cd0_training_follows_the_single_socket_loss_curve(train_job, single_socket, cora, P,
                                                           mpi):
    """With dropout 0, cd-0 on P libra partitions of cora follows the single-socket loss
    curve to float rounding (<= 1e-4 relative over 30 epochs) and ends at the same test
    accuracy to within one vertex; under the default MPI (Open MPI here), MPICH and Intel
    MPI alike."""
    proc, metrics = train_job(P, "cd-0", mpi=mpi)
    assert [r["epoch"] for r in metrics] == list(range(1, 31))
    on_gpus = P if torch.cuda.is_available() else 0  # --device auto: every rank sees the GPU
    # --comm-wait auto: sleeping waits where the job's ranks outnumber this host's cores
    waits = "sleep" if P > os.cpu_count() else "poll"
    gpu_backend = f", {on_gpus} with the {placement.gpu_backend()} backend" if on_gpus else ""
    assert f"{P} ranks ({on_gpus} on GPUs{gpu_backend}), cd-0, mpi " \
        f"communicator (waits: {waits})" in proc.stdout
    diff = max(abs(a["loss"] - b["loss"]) / abs(b["loss"]) for a, b in zip(metrics, single_socket))
    assert diff <= 1e-4, f"max relative loss difference {diff:.3g}"
    assert metrics[-1]["loss"] < metrics[0]["loss"]
    n_test = int(cora.test_mask.sum())
    assert abs(metrics[-1]["test_acc"] - single_socket[-1]["test_acc"]) <= 1 / n_test + 1e-12
    assert all(r["bytes_sent_max"] > 0 for r in metrics)


@pytest.mark.parametrize("algo, flags", [("0c", {}), ("cd-r", {"delay": 2})])
def test_0c_and_cdr_train_and_send_less_than_cd0(thread_job, algo, flags):
    """0c and cd-r (r = 2) on 2 ranks finish cleanly with a finite, decreasing loss; 0c
    sends nothing and cd-r sends less per epoch than cd-0."""
    _, metrics = thread_job(2, algo=algo, **flags)
    losses = [r["loss"] for r in metrics]
    assert len(losses) == 30 and all(math.isfinite(v) for v in losses)
    assert losses[-1] < losses[0]
    sent = [r["bytes_sent_max"] for r in metrics]
    if algo == "0c":
        assert sent == [0] * 30
    else:
        _, cd0 = thread_job(2, algo="cd-0")
        assert 0 < max(sent) < min(r["bytes_sent_max"] for r in cd0)


def test_cdr_default_schedule_reports_its_decisions_and_bytes(thread_job):
    """``--algo cd-r`` alone on 2 ranks: every epoch record says whether the controller ran
    it exact (the first is), both kinds occur, exact epochs send the same bytes and stale
    ones none, at most a quarter of cd-0's in all (the int4 wire), and the summary line says
    so; the loss falls."""
    printed, metrics = thread_job(2, algo="cd-r")
    _, cd0 = thread_job(2, algo="cd-0")
    decided = [r["exact_exchange"] for r in metrics]
    assert decided[0] and not all(decided) and any(decided[1:])
    assert len({r["bytes_sent_max"] for r, exact in zip(metrics, decided) if exact}) == 1
    assert all(r["bytes_sent_max"] == 0 for r, exact in zip(metrics, decided) if not exact)
    share = sum(r["bytes_sent_mean"] for r in metrics) / sum(r["bytes_cd0_mean"] for r in metrics)
    assert 0 < share <= 0.25
    assert sum(r["bytes_cd0_mean"] for r in metrics) == sum(r["bytes_sent_mean"] for r in cd0)
    assert ("cd-r default schedule (each epoch exact or 1 epoch stale), int4 wire): "
            in printed and f"{share:.3f}x cd-0's bytes; {30 - sum(decided)} epochs 1 epoch "
            f"stale, {sum(decided)} exact" in printed), printed
    assert metrics[-1]["loss"] < metrics[0]["loss"]


def test_cd0_in_float64_follows_single_socket_to_float64_rounding(thread_job, cora):
    """In float64, cd-0 on 3 ranks follows single-socket training of cora to 1e-10 relative
    over 30 epochs: the float32 gaps (up to 1e-4) are rounding, not the exchange."""
    _, metrics = thread_job(3, algo="cd-0", dtype="float64")
    single = train_quietly(cora, dropout=0.0, epochs=30, dtype="float64").history
    diff = max(abs(a["loss"] - b["loss"]) / abs(b["loss"]) for a, b in zip(metrics, single))
    assert diff <= 1e-10, f"max relative loss difference {diff:.3g}"


def test_cd0_under_bf16_mixed_follows_single_socket_bf16_mixed(thread_job, cora, monkeypatch):
    """Under ``--precision bf16-mixed`` cd-0 on 3 ranks follows one process's bf16-mixed
    training of cora over 30 epochs to bf16's rounding: the ranks round partial sums where one
    process rounds whole ones, and a bf16 product of inputs that differ in their last float32
    bits can differ in its last bf16 bit (2^-8 relative)."""
    monkeypatch.setattr(placement, "cpu_has_bf16", lambda *a: True)  # emulated where absent
    _, metrics = thread_job(3, algo="cd-0", precision="bf16-mixed")
    single = train_quietly(cora, dropout=0.0, epochs=30, precision="bf16-mixed").history
    diff = max(abs(a["loss"] - b["loss"]) / abs(b["loss"]) for a, b in zip(metrics, single))
    assert diff <= BF16_MIXED_CD0_GAP, f"max relative loss difference {diff:.3g}"


def test_roc_auc_over_ranks_equals_single_socket(tmp_path):
    """``--roc-auc`` on a binary task: cd-0 on 2 ranks (dropout 0) reports the ROC-AUC of
    each split that single-socket training does, every evaluation (to 2e-5: a few of a
    split's ~250,000 (positive, negative) pairs, 4e-6 each, may order differently, the single
    socket summing each aggregate in another order, its self-loop first, in one pass)."""
    spec = "sbm:nodes=3000,blocks=2,noise=4"
    partition_cli([spec, "--parts", "2", "--out", str(tmp_path / "p2"), "--no-progress"])
    common = dict(dropout=0.0, epochs=15, roc_auc=True)
    got = fit_on_threads(tmp_path / "p2", 2, TrainConfig(threads=1, progress=False,
                                                         **common))[0].history
    want = train_quietly(load_dataset(spec), **common).history
    aucs = [(g[f"{m}_roc_auc"], w[f"{m}_roc_auc"]) for g, w in zip(got, want)
            for m in ("train", "val", "test")]
    assert all(0 < w < 1 for _, w in aucs) and len({w for _, w in aucs}) > 3
    assert max(abs(g - w) for g, w in aucs) <= 2e-5


@pytest.fixture(scope="module")
def split_heavy(tmp_path_factory):
    """A random graph cut into 4 random-edge partitions: nearly every vertex is split."""
    root = tmp_path_factory.mktemp("split-heavy")
    graph, *_ = build_random_graph(seed=5, n=150, e=1200)
    n = graph.num_nodes
    rng = np.random.default_rng(1)
    ds = NodeDataset(graph, rng.standard_normal((n, 6)).astype(np.float32),
                     rng.integers(0, 3, n), rng.random(n) < 0.5, np.zeros(n, bool),
                     np.zeros(n, bool), name="split-heavy")
    directory = root / "p4"
    write_dataset(directory, ds, vertex_cut(graph, 4, "random", seed=0),
                  {"method": "random", "seed": 0})
    return directory, n, ds


def test_cdr_training_follows_an_independent_reference(split_heavy):
    """A whole cd-r training run (float64, P = 4 with almost every vertex split, 3 SAGE
    layers, dropout 0.5, 20 epochs, delay 2 with smoothing) gives the loss curve of
    :mod:`tests.helpers.cdr_reference`, which simulates the ranks one by one from the
    schedule's definition, to 1e-12 relative; forward and backward staleness both shape the
    curve, so both are checked (every schedule's exchange is checked against the reference
    in ``tests/test_exchange.py``; this is the trainer's use of it).  The same reference
    with replies that carry the leaf's own partial back misses it by far: the comparison
    can fail."""
    directory, n, _ = split_heavy
    epochs = 20
    flags = dict(model="sage", layers=3, hidden=8, dropout=0.5, lr=0.05, epochs=epochs,
                 algo="cd-r", dtype="float64", feature_norm="none", delay=2, smoothing=0.6)
    cfg = TrainConfig(eval_every=epochs, threads=1, progress=False, **flags)
    got = np.array([r["loss"] for r in fit_on_threads(directory, 4, cfg)[0].history])
    parts = load_parts(directory)
    reference = Simulation(parts, n, cfg)
    assert len(reference.clones.split) > 0.9 * n
    expected = np.array(reference.train(epochs))
    np.testing.assert_allclose(got, expected, rtol=1e-12)
    wrong = np.array(Simulation(parts, n, cfg, subtract_own=False).train(epochs))
    assert np.abs(got - wrong).max() / np.abs(wrong).max() > 1e-3


MODEL_FLAGS = {"gin": dict(model="gin", train_eps=True),
               "gat": dict(model="gat", heads=2, dropout=0.6),
               "sage-max": dict(model="sage", aggregator="max"),
               "sage-min": dict(model="sage", aggregator="min"),
               "gcnii-recompute": dict(model="gcnii", layers=6, recompute=True)}
MODEL_COMMON = dict(layers=3, hidden=8, dropout=0.5, lr=0.05, dtype="float64",
                    feature_norm="none", epochs=15, eval_every=15, progress=False)
GAT_DELAYED = dict(model="gat", heads=2, layers=2, hidden=8, lr=0.05, epochs=10,
                   eval_every=10, progress=False)


@pytest.fixture(scope="module")
def model_job(split_heavy):
    """Histories of every model check, each trained on 4 ranks on threads on the split-heavy
    partitions: ``MODEL_FLAGS`` under cd-0, and GAT under cd-0 and cd-2."""
    directory, _, _ = split_heavy
    configs = {name: dict(MODEL_COMMON, **flags) for name, flags in MODEL_FLAGS.items()}
    configs["gat-cd-0"] = dict(GAT_DELAYED, algo="cd-0")
    configs["gat-cd-2"] = dict(GAT_DELAYED, algo="cd-r", delay=2)
    return {name: fit_on_threads(directory, 4, TrainConfig(threads=1, **flags))[0].history
            for name, flags in configs.items()}


@pytest.mark.parametrize("name", MODEL_FLAGS)
def test_models_under_cd0_follow_single_socket(split_heavy, model_job, name):
    """GIN (learned eps), GAT (2 heads, dropout 0.6 on features and attention), GraphSAGE
    with max and min aggregators and a 6-layer GCNII with recomputed activations, trained
    with cd-0 on 4 ranks where almost every vertex is split (float64, dropout 0.5 elsewhere,
    15 epochs): the loss curve and the final accuracies equal single-socket training of the
    whole graph to 1e-10 relative.  GAT's edge softmax spans the clones of every split
    vertex; max/min send each gradient to the one clone that attained the extreme."""
    from distgnn.run.training import train

    _, _, ds = split_heavy
    got = model_job[name]
    cfg = TrainConfig(threads=1, **dict(MODEL_COMMON, **MODEL_FLAGS[name]))
    want = train(ds, cfg, log=lambda s: None).history
    assert len(got) == len(want) == cfg.epochs
    np.testing.assert_allclose([r["loss"] for r in got], [r["loss"] for r in want], rtol=1e-10)
    assert got[-1]["train_acc"] == pytest.approx(want[-1]["train_acc"], abs=1e-12)


def test_gat_under_cdr_delays_only_the_weighted_sums(model_job):
    """GAT under cd-2 trains (finite, falling loss) and sends less than under cd-0: its
    maximum and sum of exponentials (2 heads: 2 + 2 values per split row) stay exact every
    layer, the 8-wide weighted sums go on the delayed schedule."""
    sent = {}
    for algo in ("cd-0", "cd-2"):
        records = model_job[f"gat-{algo}"]
        losses = [r["loss"] for r in records]
        assert all(math.isfinite(v) for v in losses) and losses[-1] < losses[0]
        sent[algo] = records[-1]["bytes_sent_max"]
    assert 0 < sent["cd-2"] < sent["cd-0"]


def test_own_model_example_trains_alike_on_one_socket_and_two_ranks(cora_dirs, tmp_path):
    """``examples/own_model.py`` (a model defined in the user's file from ``distgnn.nn``
    layers: GAT, GIN, keyed dropout) gives the same losses (<= 1e-4 relative, float32, 20
    epochs, dropout 0.5) in one process and on 2 ranks under cd-0."""
    example = Path(__file__).parent.parent / "examples" / "own_model.py"
    common = ["--epochs", "20", "--metrics-out"]
    proc, _ = run_command([sys.executable, example, "--dataset", "cora", *common,
                           tmp_path / "one.jsonl"])
    assert proc.returncode == 0, proc.stdout + proc.stderr
    proc, _ = mpirun(2, [sys.executable, example, "--partitions", cora_dirs[2], *common,
                         tmp_path / "two.jsonl"])
    assert proc.returncode == 0, proc.stdout + proc.stderr
    one, two = (read_metrics(tmp_path / f"{n}.jsonl") for n in ("one", "two"))
    assert len(one) == len(two) == 20
    diff = max(abs(a["loss"] - b["loss"]) / abs(b["loss"]) for a, b in zip(two, one))
    assert diff <= 1e-4, f"max relative loss difference {diff:.3g}"
    assert one[-1]["loss"] < 0.7 * one[0]["loss"]


def test_pyg_example_trains_alike_on_one_socket_and_two_ranks(cora_dirs, tmp_path):
    """``examples/pyg_distributed.py`` (a PyG GCN, unchanged, through ``distgnn.pyg``) prints
    the same loss every epoch (<= 1e-5 relative, float32, dropout 0.5) in one process and on
    2 ranks under cd-0; its saved ``state_dict`` loads into the plain script's model; and
    ``examples/pyg_plain.py`` (the plain PyG script) and both runs reach Cora's GCN test
    accuracy (> 0.78 after 200 epochs; published: 81.5)."""
    examples = Path(__file__).parent.parent / "examples"
    runs = [run_command([sys.executable, examples / "pyg_distributed.py",
                         "--save-model", tmp_path / "gcn.pt"])[0],
            mpirun(2, [sys.executable, "-m", "mpi4py", examples / "pyg_distributed.py",
                       "--partitions", cora_dirs[2]])[0],
            # the plain script sets no thread count: one thread, so that its OpenMP team does
            # not spin against the suite's other workers (it took over 120 s so on 2 cores)
            run_command([sys.executable, examples / "pyg_plain.py"],
                        {"OMP_NUM_THREADS": "1"})[0]]
    for proc in runs:
        assert proc.returncode == 0, proc.stdout + proc.stderr
    one, two, plain = ([float(line.split()[3]) for line in proc.stdout.splitlines()
                        if line.startswith("epoch")] for proc in runs)
    assert len(one) == len(two) == len(plain) == 200
    np.testing.assert_allclose(two, one, rtol=1e-5)
    for proc in runs:
        assert float(proc.stdout.split("test accuracy")[1]) > 0.78
    sys.path.insert(0, str(examples))
    try:
        import pyg_plain
    finally:
        sys.path.remove(str(examples))
    net = pyg_plain.GCN(1433, 16, 7)
    net.load_state_dict(torch.load(tmp_path / "gcn.pt", weights_only=True))


def test_own_loop_example_trains_alike_on_one_socket_and_two_ranks(cora_dirs):
    """``examples/own_loop.py`` (a hand-written loop: AdamW, a cosine schedule,
    ``run.loss`` and ``run.sync``) prints the same loss every epoch (<= 1e-5 relative,
    float32, dropout 0.5) in one process and on 2 ranks under cd-0, and the loss falls."""
    example = Path(__file__).parent.parent / "examples" / "own_loop.py"
    common = ["--epochs", "20", "--log-every", "1"]
    runs = [run_command([sys.executable, example, "cora", *common])[0],
            mpirun(2, [sys.executable, "-m", "mpi4py", example, cora_dirs[2], *common])[0]]
    for proc in runs:
        assert proc.returncode == 0, proc.stdout + proc.stderr
    one, two = ([float(line.split()[3]) for line in proc.stdout.splitlines()
                 if line.startswith("epoch")] for proc in runs)
    assert len(one) == len(two) == 20
    np.testing.assert_allclose(two, one, rtol=1e-5)
    assert one[-1] < 0.97 * one[0]


def test_precomputed_first_aggregation_is_exchanged_once(thread_job, cora):
    """With ``--precompute-first-aggregation`` (cora: 1433 features > hidden 16, where the
    plain model projects first) cd-0 on 2 ranks follows the same model trained single socket
    and, at dropout 0, the plain model (<= 1e-4 relative over 30 epochs); after the first
    epoch, whose step also exchanges the input's aggregate once, each epoch sends only the
    second layer's exchanges: 7 + 7 of the plain model's 16 + 7 + 16 + 7 values per split
    row."""
    _, plain = thread_job(2, algo="cd-0")
    _, pre = thread_job(2, algo="cd-0", precompute_first=True)
    single = train_quietly(cora, dropout=0.0, epochs=30,
                           precompute_first=True).history
    for reference in (single, plain):  # dropout 0: the same maths as the plain model
        diff = max(abs(a["loss"] - b["loss"]) / abs(b["loss"]) for a, b in zip(pre, reference))
        assert diff <= 1e-4, f"max relative loss difference {diff:.3g}"
    rows = plain[0]["bytes_sent_max"] // (4 * 46)
    assert plain[0]["bytes_sent_max"] == 4 * 46 * rows
    assert all(r["bytes_sent_max"] == 4 * 14 * rows for r in pre[1:])
    assert pre[0]["bytes_sent_max"] == 4 * (14 + 1433) * rows


@pytest.mark.parametrize("algo, flags", [("cd-0", {}), ("cd-r", {"delay": 2})])
def test_bf16_wire_halves_the_bytes_and_keeps_training(thread_job, algo, flags):
    """With ``--exchange-precision bf16`` each training exchange sends exactly half the bytes
    of fp32, and the loss curve stays within 1 % of the fp32 one (cd-0: of the exact one)
    over 30 epochs on 2 ranks while still differing from it (the wire is not exact)."""
    _, fp32 = thread_job(2, algo=algo, **flags)
    _, bf16 = thread_job(2, algo=algo, exchange_precision="bf16", **flags)
    assert [r["bytes_sent_max"] for r in bf16] == [r["bytes_sent_max"] // 2 for r in fp32]
    rel = [abs(a["loss"] - b["loss"]) / b["loss"] for a, b in zip(bf16, fp32)]
    assert 0 < max(rel) <= 1e-2, rel


# ---- 3. failures end the job with a clear error, never a hang ------------------------------------
def assert_quick(seconds):
    assert seconds < TIMEOUT / 2, f"took {seconds:.0f} s: a rank waited for a failed peer"


def test_mixed_backends_and_gloo_follow_the_all_numba_loss_curve(cora_dirs, tmp_path):
    """2 ranks, cd-0, dropout 0.5, 25 epochs: ranks {numba, torch}, and the gloo
    communicator, give the all-numba MPI loss curve (<= 1e-4 relative)."""
    curves, stdout = {}, {}
    for name, flags in [("numba", ["--backend", "numba"]),
                        ("mixed", ["--backend", "numba", "--rank-backends", "1:torch"]),
                        ("gloo", ["--backend", "numba", "--comm", "gloo"])]:
        metrics = tmp_path / f"{name}.jsonl"
        proc, _ = mpirun(2, [TRAIN, "--partitions", cora_dirs[2], *flags, "--epochs", "25",
                             "--threads", "1", "--no-progress", "--metrics-out", metrics])
        assert proc.returncode == 0, proc.stderr
        curves[name] = np.array([r["loss"] for r in read_metrics(metrics)])
        stdout[name] = proc.stdout
    assert "2 ranks (0 on GPUs, 1 with the torch backend), cd-0, mpi" in stdout["mixed"]
    assert "2 ranks (0 on GPUs), cd-0, gloo" in stdout["gloo"]
    assert len(curves["numba"]) == 25
    for name in ("mixed", "gloo"):
        diff = np.max(np.abs(curves[name] - curves["numba"]) / curves["numba"])
        assert diff <= 1e-4, f"{name}: max relative loss difference {diff:.3g}"


def test_ccl_without_its_bindings_says_what_to_install(cora_dirs):
    if importlib.util.find_spec("oneccl_bindings_for_pytorch") is not None:
        pytest.skip("oneCCL bindings installed: the message is not shown")
    proc, _ = mpirun(2, [TRAIN, "--partitions", cora_dirs[2], "--comm", "ccl", "--epochs", "1"])
    assert proc.returncode == 2
    assert "the ccl communicator needs Intel's oneCCL bindings for PyTorch " \
           "(oneccl_bindings_for_pytorch, not on PyPI" in proc.stderr
    assert "Traceback" not in proc.stderr


@pytest.mark.parametrize("mpi", [installed("mpich")])
def test_a_checkpoint_of_four_open_mpi_ranks_resumes_on_two_mpich_ranks_and_one_process(
        cora_dirs, tmp_path, mpi):
    """Killed (ended) after 10 of 20 epochs on 4 ranks under the default MPI, resumed on 2
    ranks under MPICH and in one process: the final weights are the uninterrupted run's
    (1e-5 relative, float32), and each resume says what it accepted."""
    common = ["--epochs", "20", "--threads", "1", "--no-progress"]
    last = ["--final-weights", "last", "--save-model"]  # the model file of the last epoch

    def weights(name):
        saved = torch.load(tmp_path / f"{name}.pt", weights_only=True)["state_dict"]
        return torch.cat([v.flatten() for v in saved.values()])

    whole, _ = mpirun(4, [TRAIN, "--partitions", cora_dirs[4], *common, *last,
                          tmp_path / "whole.pt"])
    assert whole.returncode == 0, whole.stdout + whole.stderr
    first, _ = mpirun(4, [TRAIN, "--partitions", cora_dirs[4], *common, "--epochs", "10",
                          "--checkpoint-dir", tmp_path / "ck"])
    assert first.returncode == 0, first.stdout + first.stderr
    shutil.copytree(tmp_path / "ck", tmp_path / "ck1")
    two, _ = mpirun(2, [TRAIN, "--partitions", cora_dirs[2], *common, *last,
                        tmp_path / "two.pt", "--resume", tmp_path / "ck"], mpi=mpi)
    one, _ = run_command([TRAIN, "--dataset", "cora", *common, *last,
                          tmp_path / "one.pt", "--resume", tmp_path / "ck1"])
    for proc, said in ((two, "checkpoint of 4 ranks resumed on 2 ranks"),
                       (one, "checkpoint of 4 ranks resumed on one process")):
        assert proc.returncode == 0, proc.stdout + proc.stderr
        assert said in proc.stdout, proc.stdout
    reference = weights("whole")
    for name in ("two", "one"):
        gap = ((weights(name) - reference).abs().max() / reference.abs().max()).item()
        assert gap <= 1e-5, f"{name}: {gap:.2e}"


@pytest.mark.mpi
def test_mismatched_rank_count_is_a_clean_error(cora_dirs):
    """``-np 2`` on a 3-partition directory: the launcher refuses before MPI starts, and
    ranks started by a bare ``mpirun`` end with status 2 and one error naming both counts."""
    with pytest.raises(launch.LaunchError, match="holds 3 partitions but -n is 2"):
        launch.plan(2, [str(TRAIN), "--partitions", str(cora_dirs[3])], threads_per_rank=1)
    p = launch.plan(2, [str(TRAIN), "--partitions", str(cora_dirs[2]), "--threads", "1",
                        "--no-progress"], threads_per_rank=1)
    argv = [str(cora_dirs[3]) if a == str(cora_dirs[2]) else a for a in p.argv]
    start = time.monotonic()
    proc = run_plan(p, TIMEOUT, argv=argv)
    assert_quick(time.monotonic() - start)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "3 partitions" in proc.stderr and "2 ranks" in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stderr


def test_corrupted_partition_stops_every_rank(cora_dirs, tmp_path):
    """A damaged ``x.npy`` of partition 1 (same size): one line, from rank 0, names rank 1
    and the checksum mismatch; status 2."""
    bad = tmp_path / "bad"
    shutil.copytree(cora_dirs[2], bad)
    path = bad / "part-00001" / "x.npy"
    size = path.stat().st_size
    with open(path, "r+b") as f:
        f.seek(size // 2)
        chunk = f.read(64)
        f.seek(size // 2)
        f.write(bytes(c ^ 0xFF for c in chunk))
    assert path.stat().st_size == size
    proc, seconds = mpirun(2, [TRAIN, "--partitions", bad, "--epochs", "2", "--threads", "1",
                               "--no-progress"])
    assert_quick(seconds)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    lines = [line for line in proc.stderr.splitlines() if "error" in line]
    assert len(lines) == 1, proc.stderr  # once, from rank 0, naming the rank that failed
    assert lines[0].startswith("distgnn-train: error: rank 1: ") and "checksum mismatch" in \
        lines[0], proc.stderr
    assert "Traceback" not in proc.stderr


def test_rank_failing_mid_run_aborts_the_job():
    """An exception on rank 1 while rank 0 blocks in an allreduce aborts the whole job
    (non-zero status, well before the timeout), and the output names the error and rank."""
    proc, seconds = mpirun(2, [sys.executable, RANK_SCRIPTS / "fail_ranks.py"])
    assert_quick(seconds)
    output = proc.stdout + proc.stderr
    assert proc.returncode != 0, output
    assert "RuntimeError: boom" in output and "rank 1 failed" in output, output
    assert "allreduce returned" not in output


def test_one_partition_trains_without_mpirun(cora_dirs, tmp_path):
    """A 1-partition directory trains with plain ``distgnn-train --partitions`` (no mpirun)."""
    metrics = tmp_path / "m.jsonl"
    proc, _ = run_command([TRAIN, "--partitions", cora_dirs[1], "--epochs", "3", "--threads",
                           "1", "--no-progress", "--metrics-out", metrics])
    assert proc.returncode == 0, proc.stdout + proc.stderr
    records = read_metrics(metrics)
    assert len(records) == 3 and all(math.isfinite(r["loss"]) for r in records)
    assert all(r["bytes_sent_max"] == 0 for r in records)


def test_results_of_four_ranks_equal_single_socket_and_predict_reproduces_them(cora_dirs,
                                                                               tmp_path):
    """cd-0 on 4 ranks (rcm-ordered partitions, dropout on) writes the predictions,
    embeddings and model that single-socket training from the same seed writes: every
    vertex once, the same argmax everywhere, probabilities and embeddings to 1e-5 relative;
    distgnn-predict on 4 ranks with the saved model reports the test accuracy training did."""
    common = ["--epochs", "20", "--threads", "1", "--no-progress"]

    def outputs(name):
        return ["--save-model", tmp_path / f"{name}.pt", "--predictions-out",
                tmp_path / f"{name}.npz", "--embeddings-out", tmp_path / f"{name}.npy"]

    one, _ = run_command([TRAIN, "--dataset", "cora", *common, *outputs("one")])
    assert one.returncode == 0, one.stdout + one.stderr
    four, _ = mpirun(4, [TRAIN, "--partitions", cora_dirs[4], *common, *outputs("four")])
    assert four.returncode == 0, four.stdout + four.stderr
    a, b = np.load(tmp_path / "one.npz"), np.load(tmp_path / "four.npz")
    np.testing.assert_array_equal(b["vertex"], np.arange(2708))
    np.testing.assert_array_equal(a["predicted_class"], b["predicted_class"])
    np.testing.assert_allclose(b["probabilities"], a["probabilities"], rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(np.load(tmp_path / "four.npy"), np.load(tmp_path / "one.npy"),
                               rtol=1e-5, atol=1e-6)
    reported = [line for line in four.stdout.splitlines() if line.startswith("test accuracy")]
    predicted, _ = mpirun(4, [str(Path(sys.executable).parent / "distgnn-predict"),
                              tmp_path / "four.pt", "--partitions", cora_dirs[4]])
    assert predicted.returncode == 0, predicted.stdout + predicted.stderr
    assert reported[0].split(" at epoch")[0] in predicted.stdout
    for out in (four.stdout, predicted.stdout):  # every rank's peak, gathered
        line = next(li for li in out.splitlines() if li.startswith("peak memory per rank"))
        high, mean = (float(w) for w in re.findall(r"([0-9.]+) GiB", line))
        assert high >= mean > 0.1
