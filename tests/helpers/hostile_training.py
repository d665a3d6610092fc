"""Hostile and careless uses of distgnn-train: resume with an option that changes the
computation, flags that would change nothing, memory that grows with a flag, refusals
under MPI, huge values reaching arithmetic."""
from __future__ import annotations

import numpy as np

from tests.helpers.hostile import (
    TRAIN_QUICK,
    Case,
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
