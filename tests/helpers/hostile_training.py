"""Hostile and careless uses of distgnn-train: resume with an option that changes the
computation, flags that would change nothing, memory that grows with a flag, refusals
under MPI, huge values reaching arithmetic."""
from __future__ import annotations

import contextlib
import resource
import signal
import subprocess
import sys

import numpy as np

from tests.helpers.hostile import (
    ENTRY,
    TRAIN_QUICK,
    Case,
    Outcome,
    both,
    data,
    mpi_train,
    partition,
    resume_case,
    tool,
    write_npz,
)

CASES: list[Case] = []
add = CASES.append

# 3. resume with an option that changes the computation
GCNII = ("--model", "gcnii", "--layers", 2)
add(resume_case("another --alpha (GCNII)", GCNII, (*GCNII, "--alpha", 0.3), "--alpha"))
add(resume_case("another --theta (GCNII)", GCNII, (*GCNII, "--theta", 1.5), "--theta"))
add(resume_case("another --aggregation-precision", (), ("--aggregation-precision", "bf16"),
                "--aggregation-precision"))
add(resume_case("--train-eps dropped (GIN)", ("--model", "gin", "--train-eps"),
                ("--model", "gin"), "--train-eps"))
add(resume_case("--train-eps added (GIN)", ("--model", "gin"),
                ("--model", "gin", "--train-eps"), "--train-eps"))
add(resume_case("another --heads (GAT)", ("--model", "gat", "--hidden", 8, "--heads", 2),
                ("--model", "gat", "--hidden", 8, "--heads", 4), "--heads"))


def partitions(n=200, parts=2, **arrays):
    return lambda t, r: (write_npz(t / "d.npz", n=n, **arrays),
                         partition(r, t / "d.npz", parts, t / "p"))


# 13. options that change nothing, or change the maths unasked
add(Case(13, "--recompute with a bf16 wire", mpi_train(
    "--partitions", "{tmp}/p", "--recompute", "--exchange-precision", "bf16", *TRAIN_QUICK),
    partitions(), says="error feedback twice"))
for name, flags, says in [
        ("--precompute-first-aggregation with GCNII",
         ("--model", "gcnii", "--precompute-first-aggregation"), "--precompute-first"),
        ("--residual with GCNII", ("--model", "gcnii", "--residual"), "--residual"),
        ("cd-r --delay 3 on one socket", ("--algo", "cd-r", "--delay", 3), "--algo cd-r"),
        ("--smoothing on one socket", ("--algo", "cd-r", "--smoothing", 0.5), "--algo cd-r"),
        ("--exchange-precision bf16 on one socket", ("--exchange-precision", "bf16"),
         "--exchange-precision"),
        ("--heads with GCN", ("--heads", 4), "--heads"),
        ("--alpha with GCN", ("--alpha", 0.3), "--alpha"),
        ("--train-eps with GraphSAGE", ("--model", "sage", "--train-eps"), "--train-eps"),
        ("--aggregator with GIN", ("--model", "gin", "--aggregator", "mean"), "--aggregator")]:
    add(Case(13, name, tool("train", "--dataset", "{tmp}/d.npz", *flags, *TRAIN_QUICK), data(),
             says=says))

add(Case(13, "--split with partitions", mpi_train("--partitions", "{tmp}/p", "--split", 1,
                                                 *TRAIN_QUICK), partitions(), says="--split"))

# 5. memory that grows with a flag is counted before it is allocated
for name, flags in [("GIN --hidden 65536", ("--model", "gin", "--hidden", 65536)),
                    ("GIN --hidden 30000", ("--model", "gin", "--hidden", 30000)),
                    ("GIN 3 layers --hidden 24000",
                     ("--model", "gin", "--layers", 3, "--hidden", 24000))]:
    add(Case(5, name, tool("train", "--dataset", "{tmp}/d.npz", *flags, *TRAIN_QUICK), data(),
             says="needs about"))
for name, flags in [("cd-r --delay 100000 over 40 layers",
                     ("--algo", "cd-r", "--delay", 100000, "--layers", 40)),
                    ("cd-r --delay 60000 over 80 layers, no backward exchange",
                     ("--algo", "cd-r", "--delay", 60000, "--layers", 80,
                      "--no-backward-exchange"))]:
    add(Case(5, name, mpi_train("--partitions", "{tmp}/p", *flags, *TRAIN_QUICK),
             partitions(), says="delayed exchange", lines=2))  # a line per partition size

# 11. refusals under MPI: one line, not one per rank and an abort banner
add(Case(11, "--roc-auc on a 3-class task", mpi_train("--partitions", "{tmp}/p", "--roc-auc",
                                                      *TRAIN_QUICK),
         partitions(), says="--roc-auc needs a binary task"))
add(Case(11, "no training vertex in any partition",
         mpi_train("--partitions", "{tmp}/p", *TRAIN_QUICK),
         partitions(train_mask=np.zeros(200, bool)), says="no training vertices"))
add(Case(11, "a one-class task", mpi_train("--partitions", "{tmp}/p", *TRAIN_QUICK),
         partitions(y=np.zeros(200, np.int64)), says="at least two"))
add(Case(11, "--roc-auc on a one-class task",
         mpi_train("--partitions", "{tmp}/p", "--roc-auc", *TRAIN_QUICK),
         partitions(y=np.zeros(200, np.int64)), says="at least two"))

add(Case(11, "a flag that does not parse under mpirun",
         mpi_train("--partitions", "{tmp}/p", "--lr", "fast", *TRAIN_QUICK), partitions(),
         says="--lr"))

# 15. a huge but finite value reaches arithmetic
add(Case(15, "--comm-budget 1e308", mpi_train("--partitions", "{tmp}/p", "--algo", "cd-r",
                                              "--comm-budget", "1e308", *TRAIN_QUICK),
         partitions(), status=0))
add(Case(15, "--comm-timeout 1e308", mpi_train("--partitions", "{tmp}/p", "--comm-timeout",
                                               "1e308", "--epochs", 3, "--no-progress",
                                               "--threads", 1),
         partitions(), says="--comm-timeout"))


# 18. two outputs of a run on one path, refused before any data is read
def trained_model(rel: str = "m.pt", *flags):
    """The small dataset ``d.npz`` and a model trained on it, saved at ``rel``."""
    def setup(tmp, run):
        write_npz(tmp / "d.npz")
        got = run("train", ["--dataset", tmp / "d.npz", "--save-model", tmp / rel, *flags,
                            *TRAIN_QUICK])
        assert got.status == 0, got.stderr
    return setup


def nothing_at(*rels):
    """A check that the refused run wrote none of ``rels``."""
    def check(tmp, outcome):
        made = [rel for rel in rels if (tmp / rel).exists()]
        assert not made, f"written: {made}"
    return check


def res_folder(tmp, run):
    (tmp / "res").mkdir()


for name, flags, says, made in [
        ("--save-model and --predictions-out on one .npz",
         ("--save-model", "{tmp}/res/c.npz", "--predictions-out", "{tmp}/res/c.npz"),
         "name the same path", ("res/c.npz",)),
        ("--save-model and --embeddings-out on one .npy",
         ("--save-model", "{tmp}/X.npy", "--embeddings-out", "{tmp}/X.npy"),
         "name the same path", ("X.npy",)),
        ("--metrics-out and --predictions-out on one file",
         ("--metrics-out", "{tmp}/F.csv", "--predictions-out", "{tmp}/F.csv"),
         "name the same path", ("F.csv",)),
        ("--metrics-out and --save-model on one file",
         ("--metrics-out", "{tmp}/F", "--save-model", "{tmp}/F"), "name the same path",
         ("F",)),
        ("one file spelled res/./c.pt and res/../res/c.pt",
         ("--metrics-out", "{tmp}/res/./c.pt", "--save-model", "{tmp}/res/../res/c.pt"),
         "name the same path", ("res/c.pt",)),
        ("--save-model onto the checkpoint directory",
         ("--checkpoint-dir", "{tmp}/res", "--save-model", "{tmp}/res"),
         "name the same path", ()),
        ("--predictions-out and --embeddings-out through a symbolic link",
         ("--predictions-out", "{tmp}/res/p.npz", "--embeddings-out", "{tmp}/link/p.npz"),
         "name the same path", ("res/p.npz",))]:
    add(Case(18, name, tool("train", "--dataset", "{tmp}/d.npz", *flags, *TRAIN_QUICK),
             both(data(), res_folder, lambda t, r: (t / "link").symlink_to(t / "res")),
             says=says, check=nothing_at(*made)))

add(Case(18, "--save-model onto the dataset it trains on",
         tool("train", "--dataset", "{tmp}/d.npz", "--save-model", "{tmp}/d.npz",
              *TRAIN_QUICK), data(), says="d.npz", keep=("d.npz",)))
add(Case(18, "--embeddings-out onto the edge list's features file",
         tool("train", "--dataset", "{tmp}/e.txt", "--features", "{tmp}/x.npy", "--labels",
              "{tmp}/y.npy", "--embeddings-out", "{tmp}/x.npy", *TRAIN_QUICK),
         lambda tmp, run: (
             (tmp / "e.txt").write_text("".join(f"{i} {(i + 1) % 30}\n" for i in range(30))),
             np.save(tmp / "x.npy", np.random.default_rng(0).random((30, 4), np.float32)),
             np.save(tmp / "y.npy", np.arange(30) % 2)),
         says="which the run reads", keep=("x.npy",)))
add(Case(18, "distgnn-predict --predictions-out onto the model file",
         tool("predict", "{tmp}/m.npz", "--dataset", "{tmp}/d.npz", "--predictions-out",
              "{tmp}/m.npz"), trained_model("m.npz"), says="MODEL", keep=("m.npz",)))
add(Case(18, "distgnn-predict --predictions-out and --embeddings-out on one path",
         tool("predict", "{tmp}/m.pt", "--dataset", "{tmp}/d.npz", "--predictions-out",
              "{tmp}/o.npy", "--embeddings-out", "{tmp}/./o.npy"), trained_model(),
         says="name the same path", check=nothing_at("o.npy")))
add(Case(18, "distgnn-predict writing inside the partition directory it reads",
         tool("predict", "{tmp}/m.pt", "--partitions", "{tmp}/p", "--predictions-out",
              "{tmp}/p/pred.csv"),
         both(trained_model(), lambda t, r: partition(r, t / "d.npz", 2, t / "p")),
         says="inside --partitions", keep=("p",)))


@contextlib.contextmanager
def files_limited(limit: int):
    """This process's files may not grow past ``limit`` bytes meanwhile: a write fails as on
    a full disk (EFBIG instead of ENOSPC; SIGXFSZ ignored).  The soft limit only, raised
    again after."""
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    previous = signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (limit, hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
        signal.signal(signal.SIGXFSZ, previous)


def file_size_limit(tool_name: str, *argv, limit: int = 4096):
    """``tool_name`` with ``argv`` where files may not grow past ``limit`` bytes: a write
    fails as on a full disk (EFBIG instead of ENOSPC).  In this process for this checkout
    (:func:`files_limited`), else in a process of the tree under test."""
    def go(tmp, run):
        if run.tree is None:
            with files_limited(limit):
                return run.in_process(tool_name, [str(a).replace("{tmp}", str(tmp))
                                                  for a in argv])
        module, func = ENTRY[tool_name]
        code = (run.prelude + "import resource, signal\n"
                "signal.signal(signal.SIGXFSZ, signal.SIG_IGN)\n"
                f"resource.setrlimit(resource.RLIMIT_FSIZE, ({limit}, {limit}))\n"
                f"from {module} import {func}; sys.exit({func}(sys.argv[1:]))")
        proc = subprocess.run([sys.executable, "-c", code,
                               *[str(a).replace("{tmp}", str(tmp)) for a in argv]],
                              env=run.env(), capture_output=True, text=True, timeout=300)
        return Outcome(proc.returncode, proc.stdout, proc.stderr)
    return go


add(Case(18, "a disk that fills while the model is written",
         file_size_limit("train", "--dataset", "{tmp}/d.npz", "--save-model", "{tmp}/m.pt",
                         "--hidden", 256, *TRAIN_QUICK),
         data(), says="nothing was written at m.pt", check=nothing_at("m.pt")))
add(Case(18, "a disk that fills while an earlier model is replaced",
         file_size_limit("train", "--dataset", "{tmp}/d.npz", "--save-model", "{tmp}/m.pt",
                         "--hidden", 256, *TRAIN_QUICK),
         both(data(), trained_model()), says="the earlier m.pt is unchanged", keep=("m.pt",)))
add(Case(18, "a disk that fills while predictions are written",
         file_size_limit("train", "--dataset", "{tmp}/d.npz", "--predictions-out",
                         "{tmp}/p.csv", *TRAIN_QUICK, limit=512),
         data(), says="nothing was written at p.csv", check=nothing_at("p.csv")))


# 19. an empty value, or a flag that does nothing, accepted
for name, tool_name, argv, says in [
        ("train --dataset ''", "train", ("--dataset", ""), "--dataset"),
        ("train --partitions ''", "train", ("--partitions", ""), "--partitions"),
        ("train --metrics-out ''", "train", ("--metrics-out", ""), "--metrics-out"),
        ("train --save-model ''", "train", ("--save-model", ""), "--save-model"),
        ("train --checkpoint-dir ''", "train", ("--checkpoint-dir", ""), "--checkpoint-dir"),
        ("train --resume ''", "train", ("--resume", ""), "--resume"),
        ("train --rank-devices ''", "train", ("--rank-devices", ""), "--rank-devices"),
        ("train --predictions-out=", "train", ("--predictions-out=",), "--predictions-out"),
        ("predict --dataset ''", "predict", ("{tmp}/m.pt", "--dataset", ""), "--dataset"),
        ("predict with an empty model path", "predict", ("", "--dataset", "cora"), "MODEL"),
        ("bench epoch --dataset ''", "bench", ("epoch", "--dataset", ""), "--dataset")]:
    add(Case(19, name, tool(tool_name, *argv, *((TRAIN_QUICK) if tool_name == "train" else ())),
             says=says + ": the value is empty"))

add(Case(19, "--embeddings-layer without --embeddings-out",
         tool("train", "--dataset", "{tmp}/d.npz", "--embeddings-layer", 0, *TRAIN_QUICK),
         data(), says="--embeddings-layer"))
add(Case(19, "--exchange-topology node on one process",
         tool("train", "--dataset", "{tmp}/d.npz", "--exchange-topology", "node",
              *TRAIN_QUICK), data(), says="--exchange-topology node applies to --partitions"))
add(Case(19, "an empty metrics path from Python", lambda tmp, run: run.python(
    "import sys\nfrom distgnn import TrainConfig, DistGNNError\n"
    "try:\n    TrainConfig(metrics_out='')\n"
    "except DistGNNError as e:\n    print(e, file=sys.stderr); sys.exit(2)\n"),
    says="--metrics-out: the value is empty"))


def nan_weights(tmp, run):
    import torch

    trained_model()(tmp, run)
    saved = torch.load(tmp / "m.pt", weights_only=True)
    name = next(k for k, v in saved["state_dict"].items() if v.is_floating_point())
    saved["state_dict"][name].fill_(float("nan"))
    torch.save(saved, tmp / "m.pt")


add(Case(19, "distgnn-predict with NaN weights",
         tool("predict", "{tmp}/m.pt", "--dataset", "{tmp}/d.npz", "--predictions-out",
              "{tmp}/p.csv"), nan_weights, says="not finite", check=nothing_at("p.csv")))


def warned_of_classes(tmp, outcome):
    assert "predicts 3 classes but the data's labels name 5" in outcome.stderr, outcome.stderr


add(Case(19, "distgnn-predict with a model of fewer classes than the labels",
         tool("predict", "{tmp}/m.pt", "--dataset", "{tmp}/five.npz"),
         both(trained_model(), data("five.npz", y=np.arange(60) % 5)), status=0,
         check=warned_of_classes))
