"""Hostile and careless uses of distgnn-train: resume with an option that changes the
computation, flags that would change nothing, memory that grows with a flag, refusals
under MPI, huge values reaching arithmetic."""
from __future__ import annotations

import contextlib
import os
import re
import resource
import signal
import subprocess
import sys
import time

import numpy as np

from tests.helpers.hostile import (
    ENTRY,
    TRAIN_QUICK,
    Case,
    Outcome,
    both,
    checkpoint_run,
    data,
    interrupt,
    metrics_lines,
    mpi_train,
    partition,
    resume_case,
    tool,
    user_file,
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


def late_first_rank(tmp, run):
    """Two ranks given a bad flag, the first starting 3 s after the second: the second's
    failure ends the job, which must not end it before the first has said why."""
    train = run.command("train", ["--partitions", tmp / "p", "--lr", "fast", *TRAIN_QUICK])
    return run.mpi_command(1, ["sh", "-c", 'sleep 3; exec "$@"', "sh", *train,
                               ":", "-np", "1", *train])


add(Case(11, "a bad flag under mpirun, the first rank late", late_first_rank, partitions(),
         says="--lr", slow=True))

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



def nothing_read(tmp, outcome):
    """A check that the refusal came before the data was read (no summary of it printed)."""
    assert not outcome.stdout.strip(), outcome.stdout


# what applies only on partitions, refused on one process by the part that knows it; what
# applies only to checkpoints or outputs, refused without them
for name, flags, says in [
        ("--comm-timeout on one process", ("--comm-timeout", 5),
         "--comm-timeout 5 applies to --partitions"),
        ("--comm mpi on one process", ("--comm", "mpi"), "--comm mpi applies to --partitions"),
        ("--comm-wait sleep on one process", ("--comm-wait", "sleep"),
         "--comm-wait sleep applies to --partitions"),
        ("--no-verify on one process", ("--no-verify",), "--no-verify applies to --partitions"),
        ("--checkpoint-every without a checkpoint directory", ("--checkpoint-every", 5),
         "--checkpoint-every 5 applies to checkpoints, and without --checkpoint-dir"),
        ("--keep without a checkpoint directory", ("--keep", 3),
         "--keep 3 applies to checkpoints, and without --checkpoint-dir"),
        ("--final-weights last without an output", ("--final-weights", "last"),
         "--final-weights last chooses the weights --save-model")]:
    add(Case(19, name, tool("train", "--dataset", "{tmp}/d.npz", *flags, *TRAIN_QUICK), data(),
             says=says, check=nothing_read))
add(Case(19, "--comm-timeout on one process from Python", lambda tmp, run: run.python(
    "import sys\nimport distgnn\n"
    "try:\n    distgnn.train('cora', distgnn.TrainConfig(epochs=1, comm_timeout=5))\n"
    "except distgnn.DistGNNError as e:\n    print(e, file=sys.stderr); sys.exit(2)\n"),
    says="--comm-timeout 5 applies to --partitions", check=nothing_read))
add(Case(19, "distgnn-predict of a model trained with --final-weights last and checkpoints",
         tool("predict", "{tmp}/m.pt", "--dataset", "{tmp}/d.npz"),
         both(data(), tool("train", "--dataset", "{tmp}/d.npz", "--save-model", "{tmp}/m.pt",
                           "--final-weights", "last", "--checkpoint-dir", "{tmp}/ck",
                           "--checkpoint-every", 1, "--keep", 1, *TRAIN_QUICK)), status=0))


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


# 24. leftovers after a signal: a stop removes what the writer made beside its target
def signalled(tool_name: str, argv: tuple, hook: str, signals: tuple = (signal.SIGTERM,),
              after: bool = True, env: dict | None = None):
    """``tool_name`` with ``argv`` as a process whose function ``hook`` (``module:name``)
    sends it ``signals``, in turn, once the real function returned (``after``) or before
    it runs: a signal that lands while a writer is in the middle of its work, every time.
    SIGINT and SIGHUP are a terminal's foreground process's (their defaults), whatever the
    suite's shell did (``&`` ignores SIGINT, ``nohup`` SIGHUP).  ``env``: variables set for
    the process (``"{tmp}"`` in a value is the case directory)."""
    module, name = hook.split(":")
    entry_module, entry = ENTRY[tool_name]

    def go(tmp, run):
        code = (run.prelude + "import importlib, os, time\n"
                f"target = importlib.import_module({module!r})\n"
                f"real = getattr(target, {name!r})\n"
                "def hooked(*args, **kwargs):\n"
                f"    out = real(*args, **kwargs) if {after} else None\n"
                f"    for s in {[int(s) for s in signals]}:\n"
                "        os.kill(os.getpid(), s)\n"
                "        time.sleep(0.2)\n"
                "    time.sleep(5)  # a stop's exception comes here\n"
                f"    return out if {after} else real(*args, **kwargs)\n"
                f"setattr(target, {name!r}, hooked)\n"
                f"from {entry_module} import {entry}; sys.exit({entry}(sys.argv[1:]))")
        proc = subprocess.run([sys.executable, "-c", code,
                               *[str(a).replace("{tmp}", str(tmp)) for a in argv]],
                              env={**run.env(), **{k: v.replace("{tmp}", str(tmp))
                                                   for k, v in (env or {}).items()}},
                              capture_output=True, text=True, timeout=300,
                              preexec_fn=as_in_a_terminal)
        return Outcome(proc.returncode, proc.stdout, proc.stderr)
    return go


def as_in_a_terminal() -> None:
    """SIGINT and SIGHUP at their defaults in a child about to start, as a terminal's
    foreground process has them."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.signal(signal.SIGHUP, signal.SIG_DFL)


def nothing_hidden_in(*folders):
    """A check that no hidden file or folder (a writer's ``.NAME.tmp-PID...``, a checkpoint
    being written) is left in ``folders`` (relative to the case's directory)."""
    def check(tmp, outcome):
        left = [str(p.relative_to(tmp)) for folder in folders
                for p in (tmp / folder).glob(".*") if not p.name.endswith(".lock")]
        assert not left, f"left behind: {left}"
    return check


SIGTERM_143 = dict(status=128 + signal.SIGTERM, says="stopped by SIGTERM")
add(Case(24, "SIGTERM while distgnn-predict writes a .csv",
         signalled("predict", ("{tmp}/m.pt", "--dataset", "{tmp}/d.npz", "--predictions-out",
                               "{tmp}/p.csv"), "distgnn.run.vertex_outputs:_write_csv"),
         trained_model(), check=nothing_hidden_in("."), **SIGTERM_143))
add(Case(24, "SIGTERM while distgnn-predict writes an .npz",
         signalled("predict", ("{tmp}/m.pt", "--dataset", "{tmp}/d.npz", "--predictions-out",
                               "{tmp}/p.npz"), "distgnn.run.vertex_outputs:_write_npz"),
         trained_model(), check=nothing_hidden_in("."), **SIGTERM_143))
add(Case(24, "SIGTERM while distgnn-train writes its predictions",
         signalled("train", ("--dataset", "{tmp}/d.npz", "--predictions-out", "{tmp}/p.csv",
                             *TRAIN_QUICK), "distgnn.run.vertex_outputs:_write_csv"),
         data(), check=nothing_hidden_in("."), **SIGTERM_143))
add(Case(24, "SIGTERM while the model file is written",
         signalled("train", ("--dataset", "{tmp}/d.npz", "--save-model", "{tmp}/m.pt",
                             *TRAIN_QUICK), "distgnn.storage:_commit", after=False),
         data(), check=nothing_hidden_in("."), keep=("m.pt",), **SIGTERM_143))
add(Case(24, "Ctrl-C twice while a checkpoint is written",
         signalled("train", ("--dataset", "{tmp}/d.npz", "--checkpoint-dir", "{tmp}/ck",
                             *TRAIN_QUICK), "distgnn.run.checkpoint_files:write_atomic",
                   (signal.SIGINT, signal.SIGINT)),
         data(), status=130, says="interrupted (Ctrl-C)", check=nothing_hidden_in("ck"),
         lines=2))  # the first Ctrl-C's answer, then the last line


def _proc_text(pid: int, name: str) -> str:
    """``/proc/PID/NAME`` with NULs as spaces ("" once the process is gone or unreadable)."""
    try:
        with open(f"/proc/{pid}/{name}", "rb") as f:
            return f.read().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def _identity(pid: int) -> tuple[int, str] | None:
    """``(pid, start time)``: a process, not a number the kernel may give another later;
    ``None`` once it is gone or a zombie (dead, only not yet reaped)."""
    stat = _proc_text(pid, "stat")
    if not stat:
        return None
    fields = stat.rsplit(")", 1)[1].split()
    return None if fields[0] in ("Z", "X") else (pid, fields[19])


def _children(pid: int) -> list[int]:
    """The children of every thread of ``pid``."""
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return []
    return [int(c) for t in tasks for c in _proc_text(pid, f"task/{t}/children").split()]


def _job_ranks(marker: str) -> dict[int, int]:
    """``{rank: pid}`` of the processes started by mpirun whose command line holds
    ``marker``."""
    ranks = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit() and marker in _proc_text(int(entry), "cmdline"):
            found = re.search(r"(?:^| )OMPI_COMM_WORLD_RANK=(\d+)",
                              _proc_text(int(entry), "environ"))
            if found:
                ranks[int(found.group(1))] = int(entry)
    return ranks


def kill_9_of_one_rank(tmp, run):
    """``kill -9`` of rank 1 of a 2-rank job after its second epoch (the watchdog is armed
    after the first): the job must end within 30 s and leave nothing of it running: no rank
    and no heartbeat process.  The heartbeat runs ``python -I -S -c`` with an empty
    environment and nothing of the job's paths in its arguments, so it is found before the
    kill as a child of a rank (whose command line holds the case's partition directory).
    Every process found is ended here by its pid (and start time) whatever the outcome."""
    write_npz(tmp / "d.npz", n=400)
    partition(run, tmp / "d.npz", 2, tmp / "p")
    marker = str(tmp / "p")
    proc = run.mpi_popen(run.job_line(2, run.command(
        "train", ["--partitions", marker, "--epochs", 10**6, "--threads", 1, "--no-progress"]),
        tmp / "mpi"))
    notes, seen, found = [], 0, {}
    try:
        while seen < 2 and (line := proc.stdout.readline()):
            seen += line.startswith("epoch ")
        ranks = _job_ranks(marker)
        beaters = [c for pid in ranks.values() for c in _children(pid)
                   if "distgnn heartbeat" in _proc_text(c, "cmdline")]
        found = {i: why for pid, why in [*((p, f"rank {r}") for r, p in ranks.items()),
                                         *((b, "heartbeat") for b in beaters)]
                 if (i := _identity(pid))}
        notes.append(f"found {sorted(ranks)} ranks, {len(beaters)} heartbeats")
        if 1 in ranks:
            started = time.monotonic()
            os.kill(ranks[1], signal.SIGKILL)
            try:
                proc.wait(timeout=30)
                notes.append(f"ended after {time.monotonic() - started:.1f} s")
            except subprocess.TimeoutExpired:
                notes.append("the job still ran 30 s after the kill")
        deadline = time.monotonic() + 5  # what the job does after mpirun has answered
        while any(_identity(i[0]) == i for i in found) and time.monotonic() < deadline:
            time.sleep(0.1)
        notes += [f"left behind: {why} (pid {i[0]})" for i, why in found.items()
                  if _identity(i[0]) == i]
    finally:
        for pid, start in found:
            if _identity(pid) == (pid, start):
                os.kill(pid, signal.SIGKILL)
        if proc.poll() is None:
            proc.kill()
        out, err = proc.communicate(timeout=60)
    return Outcome(proc.returncode, out + "".join(f"{n}\n" for n in notes), err)


def nothing_of_the_job_left(tmp, outcome):
    notes = [line for line in outcome.stdout.splitlines()
             if line.startswith(("found", "ended", "the job", "left behind"))]
    assert "found [0, 1] ranks, 2 heartbeats" in notes, "; ".join(notes)
    assert any(n.startswith("ended after") for n in notes), "; ".join(notes)
    left = [n for n in notes if n.startswith("left behind")]
    assert not left, "; ".join(left)


add(Case(24, "kill -9 of one rank of a 2-rank job", kill_9_of_one_rank, status=None,
         check=nothing_of_the_job_left, slow=True))


def subprocess_outcome(run, code: str, argv: list) -> Outcome:
    """``code`` as a program of this tree, a foreground process for SIGINT."""
    proc = subprocess.run(run.code_command(code, argv), env=run.env(), capture_output=True,
                          text=True, timeout=300,
                          preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    return Outcome(proc.returncode, proc.stdout, proc.stderr)


# 7. Ctrl-C: a second one while the program ends is ignored, never a traceback
add(Case(7, "Ctrl-C again while the last line is printed", lambda tmp, run: subprocess_outcome(
    run, "import os, signal, time\n"
         "import distgnn.cli.train as cli\n"
         "class Pressed:  # stderr, where each line written brings a Ctrl-C\n"
         "    def write(self, text):\n"
         "        os.kill(os.getpid(), signal.SIGINT)\n"
         "        time.sleep(0.2)\n"
         "        return sys.__stderr__.write(text)\n"
         "    def flush(self):\n"
         "        sys.__stderr__.flush()\n"
         "def load(*args, **kwargs):  # the first Ctrl-C, while the data is read\n"
         "    sys.stderr = Pressed()\n"
         "    os.kill(os.getpid(), signal.SIGINT)\n"
         "    time.sleep(5)\n"
         "cli.load_dataset = load\n"
         "sys.exit(cli.train_main(sys.argv[1:]))\n",
    ["--dataset", "cora", *TRAIN_QUICK]), status=130, says="interrupted (Ctrl-C)"))
add(Case(7, "Ctrl-C twice at once while starting up",
         interrupt([signal.SIGINT, signal.SIGINT], False, wait_epochs=0, nodes=300000),
         status=130,
         says="interrupted"))


# 18. a second run into the checkpoint directory a run is writing into, refused at once
def second_run_into_one_checkpoint_dir(tmp, run):
    write_npz(tmp / "d.npz")
    first = run.popen("train", ["--dataset", tmp / "d.npz", "--epochs", 10**6, "--threads", 1,
                                "--no-progress", "--checkpoint-dir", tmp / "ck",
                                "--checkpoint-every", 10**6])
    try:
        while (line := first.stdout.readline()) and not line.startswith("epoch "):
            pass
        return run("train", ["--dataset", tmp / "d.npz", "--checkpoint-dir", tmp / "ck",
                             *TRAIN_QUICK])
    finally:
        first.kill()
        first.communicate(timeout=60)


add(Case(18, "two runs into one checkpoint directory at once",
         second_run_into_one_checkpoint_dir, says="is in use by another run (process"))


# 25. silently wrong: a flag dropped, or a result given without a word
add(Case(25, "--resume of a checkpoint past --epochs",
         tool("train", "--dataset", "{tmp}/d.npz", "--resume", "{tmp}/ck", "--epochs", 2,
              "--no-progress", "--threads", 1),
         lambda tmp, run: checkpoint_run(run, tmp, 4), says="give --epochs above 4"))
add(Case(25, "--resume of a checkpoint at --epochs",
         tool("train", "--dataset", "{tmp}/d.npz", "--resume", "{tmp}/ck",
              "--epochs", 4, "--no-progress", "--threads", 1),
         lambda tmp, run: checkpoint_run(run, tmp, 4), says="nothing is left to train"))


def says_nothing_left(tmp, outcome):
    assert "leaves nothing to train: the run ends with it" in outcome.stdout, outcome.stdout


# a job requeued after its last epoch (SLURM's signal came just after it) ends as done
add(Case(25, "--resume-if-present of a checkpoint at --epochs, as a requeued job",
         tool("train", "--dataset", "{tmp}/d.npz", "--resume-if-present", "{tmp}/ck",
              "--epochs", 4, "--no-progress", "--threads", 1),
         lambda tmp, run: checkpoint_run(run, tmp, 4), status=0, check=says_nothing_left))
add(Case(25, "--aggregation-precision fp32 under --precision bf16-mixed",
         tool("train", "--dataset", "{tmp}/d.npz", "--precision", "bf16-mixed",
              "--aggregation-precision", "fp32", *TRAIN_QUICK), data(),
         says="--aggregation-precision fp32 cannot apply"))
add(Case(25, "--rank-backends naming a rank of a one-process run",
         tool("train", "--dataset", "{tmp}/d.npz", "--rank-backends", "1:torch", *TRAIN_QUICK),
         data(), says="--rank-backends names rank 1, but the run has one process"))
add(Case(25, "--rank-devices for a rank the job lacks",
         mpi_train("--partitions", "{tmp}/p", "--rank-devices", "5:cpu", *TRAIN_QUICK),
         partitions(), says="--rank-devices names rank 5, but the run has 2 ranks"))


def median_of_this_run(tmp, outcome):
    """The summary's median epoch is the resumed run's own epochs' (5 and 6), and says so."""
    from distgnn.run.epoch_log import read_metrics

    records, _ = read_metrics(tmp / "m.jsonl")
    own = sorted(r["epoch_s"] for r in records if r["epoch"] > 4)
    line = next(line for line in outcome.stdout.splitlines() if line.startswith("median"))
    assert line.startswith(f"median epoch {(own[0] + own[1]) / 2 * 1e3:.1f} ms over this "
                           "run's 2 epochs (resumed after epoch 4)"), line


add(Case(25, "the summary of a resumed run",
         tool("train", "--dataset", "{tmp}/d.npz", "--resume", "{tmp}/ck", "--epochs", 6,
              "--metrics-out", "{tmp}/m.jsonl", "--no-progress", "--threads", 1),
         lambda tmp, run: checkpoint_run(run, tmp, 4), status=0, check=median_of_this_run))


def wrote_file(rel: str):
    """A check that the run wrote ``rel``."""
    def check(tmp, outcome):
        assert (tmp / rel).is_file(), f"no {rel}"
    return check

def factory(rel: str, text: str):
    """A model file trained on ``d.npz`` and the user's factory module ``rel``."""
    return both(trained_model(), user_file(rel, text))


def predict_with(spec: str, *more):
    return tool("predict", "{tmp}/m.pt", "--dataset", "{tmp}/d.npz", "--model-factory",
                spec, *more)


BUILT_IN = ("from distgnn.nn.config import ModelConfig, build_model\n\n\n"
            "def make(f, c):\n    return build_model(ModelConfig(), f, c)\n")
add(Case(25, "--model-factory that calls sys.exit(0)",
         predict_with("{tmp}/exits.py:make", "--predictions-out", "{tmp}/p.csv"),
         factory("exits.py", "import sys\n\n\ndef make(f, c):\n    sys.exit(0)\n"),
         says="called sys.exit(0) instead of returning a model", check=nothing_at("p.csv")))

# 26. one line where a traceback or an unclear line was
add(Case(26, "--resume given a file of a checkpoint",
         tool("train", "--dataset", "{tmp}/d.npz", "--resume",
              "{tmp}/ck/epoch-000002/manifest.json", "--epochs", 4, "--no-progress",
              "--threads", 1),
         lambda tmp, run: checkpoint_run(run, tmp, 2), says="--resume "))
add(Case(26, "--model-factory a .py path that imports a module beside it",
         predict_with("{tmp}/beside.py:make", "--predictions-out", "{tmp}/p.csv"),
         both(factory("beside.py", "from beside_helper import make  # noqa: F401\n"),
              user_file("beside_helper.py", BUILT_IN)), status=0, check=wrote_file("p.csv")))
for name, rel, text, says in [
        ("that raises", "raises.py", "def make(f, c):\n    raise ValueError('no such width')\n",
         "make(8, 3) raised ValueError: no such width"),
        ("that returns None", "none.py", "def make(f, c):\n    pass\n", "returned None"),
        ("that returns an int", "number.py", "def make(f, c):\n    return 3\n",
         "returned 3 (int)"),
        ("of the wrong signature", "signature.py", "def make(f):\n    return None\n",
         "cannot be called as make(in_channels, num_classes)"),
        ("with a syntax error", "syntax.py", "def make(f, c)\n    return None\n",
         "SyntaxError at line 1"),
        ("whose import fails", "imports.py", "import no_such_package_of_models\n",
         "cannot import"),
        ("whose module raises", "module_raises.py", "raise RuntimeError('config missing')\n",
         "RuntimeError: config missing"),
        ("returning a PyG model as it is", "plain_pyg.py",
         "from torch_geometric.nn import GCN\n\n\ndef make(f, c):\n"
         "    return GCN(f, 16, 2, c)\n", "return distgnn.pyg.distribute(model)")]:
    add(Case(26, f"--model-factory {name}", predict_with(f"{{tmp}}/{rel}:make"),
             factory(rel, text), says=says))


def on_bf16_cpus(inner):
    """``inner``, on a CPU with bf16 units (``--precision bf16-mixed`` refuses others)."""
    def go(tmp, run):
        import pytest

        from distgnn.placement import cpu_has_bf16

        if not cpu_has_bf16():
            pytest.skip("needs a CPU with bf16 units")
        return inner(tmp, run)
    return go


add(Case(26, "--precision bf16-mixed on the torch backend", on_bf16_cpus(
    tool("train", "--dataset", "{tmp}/d.npz", "--precision", "bf16-mixed", "--backend",
         "torch", *TRAIN_QUICK)), data(), status=0))


# 6. what a run writes at its end is refused before it trains: --embeddings-layer
def no_epoch_and_nothing_at(*rels):
    """A check that the refusal came before the first epoch and wrote none of ``rels``."""
    def check(tmp, outcome):
        assert "epoch " not in outcome.stdout, outcome.stdout
        nothing_at(*rels)(tmp, outcome)
    return check


add(Case(6, "--embeddings-layer 9 of a 2-layer model",
         tool("train", "--dataset", "{tmp}/d.npz", "--embeddings-out", "{tmp}/e.npy",
              "--embeddings-layer", 9, "--save-model", "{tmp}/m.pt", "--predictions-out",
              "{tmp}/p.csv", "--metrics-out", "{tmp}/m.jsonl", *TRAIN_QUICK),
         both(data(), user_file("m.jsonl", metrics_lines())),
         says="--embeddings-layer 9: the model has 2 layers (0..1, or -1 for the last)",
         keep=("m.jsonl",), check=no_epoch_and_nothing_at("e.npy", "m.pt", "p.csv")))
add(Case(6, "--embeddings-layer -3 of a 2-layer model",
         tool("train", "--dataset", "{tmp}/d.npz", "--embeddings-out", "{tmp}/e.npy",
              "--embeddings-layer", -3, *TRAIN_QUICK), data(),
         says="--embeddings-layer -3: the model has 2 layers",
         check=no_epoch_and_nothing_at("e.npy")))
add(Case(6, "--embeddings-layer 5 under mpirun",
         mpi_train("--partitions", "{tmp}/p", "--embeddings-out", "{tmp}/e.npy",
                   "--embeddings-layer", 5, *TRAIN_QUICK), partitions(),
         says="--embeddings-layer 5: the model has 2 layers",
         check=no_epoch_and_nothing_at("e.npy")))
add(Case(6, "distgnn-predict --embeddings-layer 4 of a 2-layer model",
         tool("predict", "{tmp}/m.pt", "--dataset", "{tmp}/d.npz", "--embeddings-out",
              "{tmp}/e.npy", "--embeddings-layer", 4), trained_model(),
         says="--embeddings-layer 4: the model has 2 layers",
         check=lambda tmp, outcome: (nothing_read(tmp, outcome),
                                     nothing_at("e.npy")(tmp, outcome))))

# 19. --residual where the model has no layer to skip around
for name, flags, says in [
        ("--residual with the default 2 layers", ("--residual",),
         "--residual would change nothing with --layers 2"),
        ("--residual with --layers 1", ("--residual", "--layers", 1),
         "--residual would change nothing with --layers 1"),
        ("--residual with 2 GAT layers", ("--residual", "--model", "gat"),
         "--residual would change nothing with --layers 2")]:
    add(Case(19, name, tool("train", "--dataset", "{tmp}/d.npz", *flags, *TRAIN_QUICK), data(),
             says=says, check=no_epoch_and_nothing_at()))
add(Case(19, "--residual with 2 layers where the features' width is --hidden",
         tool("train", "--dataset", "{tmp}/d.npz", "--residual", "--hidden", 8, *TRAIN_QUICK),
         data(), status=0))


# 25. distgnn-predict on a graph unlike the one trained on: a warning, not silence
def weighted_copy(rel: str = "w.npz"):
    """``d.npz``'s graph with a random weight on every edge, at ``rel``."""
    def setup(tmp, run):
        arrays = dict(np.load(tmp / "d.npz"))
        arrays["edge_weight"] = np.random.default_rng(0).uniform(
            0, 100, len(arrays["indices"])).astype(np.float32)
        np.savez(tmp / rel, **arrays)
    return setup


def warned(text: str):
    """A check that stderr holds ``text`` on a line of its own that starts ``warning: ``."""
    def check(tmp, outcome):
        assert any(line.startswith("warning: ") and text in line
                   for line in outcome.stderr.splitlines()), outcome.stderr
    return check


add(Case(25, "distgnn-predict of a weighted graph's model on an unweighted graph",
         tool("predict", "{tmp}/m.pt", "--dataset", "{tmp}/d.npz"),
         both(data(), weighted_copy(), tool("train", "--dataset", "{tmp}/w.npz",
                                            "--save-model", "{tmp}/m.pt", *TRAIN_QUICK)),
         status=0, check=warned("m.pt was trained on a graph with edge weights, and this graph "
                                "has none")))
add(Case(25, "distgnn-predict of an unweighted graph's model on a weighted graph",
         tool("predict", "{tmp}/m.pt", "--dataset", "{tmp}/w.npz"),
         both(trained_model(), weighted_copy()), status=0,
         check=warned("m.pt was trained on a graph without edge weights, and this graph has "
                      "them")))
add(Case(25, "distgnn-predict with a model of more classes than the labels",
         tool("predict", "{tmp}/m.pt", "--dataset", "{tmp}/two.npz"),
         both(trained_model(), data("two.npz", y=np.arange(60) % 2)), status=0,
         check=warned("m.pt predicts 3 classes but the data's labels name 2")))


# 26. the line names what the user gave and can change
add(Case(26, "resume with --precompute-first-aggregation names that flag",
         tool("train", "--dataset", "{tmp}/d.npz", "--resume", "{tmp}/ck",
              "--precompute-first-aggregation", "--epochs", 4, "--no-progress", "--threads", 1),
         lambda tmp, run: checkpoint_run(run, tmp, 2),
         says="written for another --precompute-first-aggregation than this run's"))
add(Case(26, "resume with --no-kernel-trial names that flag",
         tool("train", "--dataset", "{tmp}/d.npz", "--resume", "{tmp}/ck", "--no-kernel-trial",
              "--epochs", 4, "--no-progress", "--threads", 1),
         lambda tmp, run: checkpoint_run(run, tmp, 2),
         says="written for another --no-kernel-trial than this run's (default there, True here)"))


def speaks_of_the_model(tmp, outcome):
    """distgnn-predict's warning on negative features (a progress line, on stdout) names
    the model's training, not a flag distgnn-predict lacks."""
    said = outcome.stdout + outcome.stderr
    assert any(line.startswith("warning: ") and "the model was trained with --feature-norm "
               "row" in line for line in said.splitlines()), said
    assert "--feature-norm none trains" not in said, said


add(Case(26, "distgnn-predict on negative features of a model trained with row norms",
         tool("predict", "{tmp}/m.pt", "--dataset", "{tmp}/neg.npz"),
         both(trained_model(), data("neg.npz", x=np.random.default_rng(1).standard_normal(
             (60, 8)).astype(np.float32))), status=0, check=speaks_of_the_model))
add(Case(26, "--metrics-out a symbolic link to a metrics file",
         tool("train", "--dataset", "{tmp}/d.npz", "--metrics-out", "{tmp}/m.jsonl",
              *TRAIN_QUICK),
         both(data(), user_file("real/m.jsonl", metrics_lines()),
              lambda tmp, run: (tmp / "m.jsonl").symlink_to(tmp / "real" / "m.jsonl")),
         says="m.jsonl is a symbolic link (to", keep=("real/m.jsonl",),
         check=no_epoch_and_nothing_at()))


# 24. SIGHUP (a closed terminal or ssh session) ends every tool as SIGTERM does
SIGHUP_129 = dict(status=128 + signal.SIGHUP)


def hangup_in_training(tmp, run):
    """A run checkpointing and streaming its metrics gets SIGHUP after two epochs."""
    proc = subprocess.Popen(run.command("train", [
        "--dataset", tmp / "d.npz", "--epochs", 10**6, "--no-progress", "--threads", 1,
        "--checkpoint-dir", tmp / "ck", "--checkpoint-every", 10**6, "--metrics-out",
        tmp / "m.jsonl"]), env=run.env(), text=True, stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, preexec_fn=as_in_a_terminal)
    seen = 0
    while seen < 2 and (line := proc.stdout.readline()):
        seen += line.startswith("epoch ")
    proc.send_signal(signal.SIGHUP)
    out, err = proc.communicate(timeout=120)
    return Outcome(proc.returncode, out, err)


def checkpointed_and_nothing_hidden(tmp, outcome):
    assert any((tmp / "ck").glob("epoch-*/manifest.json")), "no checkpoint written"
    assert (tmp / "m.jsonl").is_file(), "no metrics file"
    nothing_hidden_in(".", "ck")(tmp, outcome)


add(Case(24, "SIGHUP during training's epochs", hangup_in_training, data(),
         says="SIGHUP received: stopped after epoch", check=checkpointed_and_nothing_hidden,
         **SIGHUP_129))
add(Case(24, "SIGHUP while distgnn-predict writes a .csv",
         signalled("predict", ("{tmp}/m.pt", "--dataset", "{tmp}/d.npz", "--predictions-out",
                               "{tmp}/p.csv"), "distgnn.run.vertex_outputs:_write_csv",
                   (signal.SIGHUP,)),
         trained_model(), says="stopped by SIGHUP; nothing more was written",
         check=nothing_hidden_in("."), **SIGHUP_129))


def hangup_while_partitioning(tmp, run):
    """An in-memory cut into ``{tmp}/p`` that gets SIGHUP while it writes the partitions
    (held before the second, its temporary directory in place)."""
    from tests.helpers.partitions import held_second_item

    held = ("import sys, time\nfrom partition import write\nfrom partition.cli import main\n"
            + held_second_item("write.partition_arrays") + "sys.exit(main(sys.argv[1:]))\n")
    proc = subprocess.Popen(run.code_command(held, [tmp / "d.npz", "--parts", 2, "--out",
                                                    tmp / "p", "--no-progress"]),
                            env=run.env(), text=True, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, preexec_fn=as_in_a_terminal)
    while (line := proc.stdout.readline()) and line != "held\n":
        pass
    proc.send_signal(signal.SIGHUP)
    out, err = proc.communicate(timeout=120)
    return Outcome(proc.returncode, out, err)


def only_the_dataset(tmp, outcome):
    left = sorted(f.name for f in tmp.iterdir() if f.name != "d.npz")
    assert not left, f"left behind: {left}"


add(Case(24, "SIGHUP while distgnn-partition writes in memory", hangup_while_partitioning,
         data(), says="SIGHUP received: stopped partitioning", check=only_the_dataset,
         **SIGHUP_129))


def no_temporary_directory(tmp, outcome):
    left = [f.name for f in tmp.iterdir() if f.name.startswith("tmp")]
    assert not left, f"left behind: {left}"


add(Case(24, "SIGHUP while distgnn-bench spmm times the JIT in a temporary cache",
         signalled("bench", ("spmm", "--dataset", "rmat:scale=8,edge_factor=4,features=1",
                             "--widths", 4, "--threads", 1), "subprocess:run",
                   (signal.SIGHUP,), env={"TMPDIR": "{tmp}"}),
         says="stopped by SIGHUP; nothing more was written", check=no_temporary_directory,
         slow=True, **SIGHUP_129))
