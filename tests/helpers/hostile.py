"""Hostile and careless uses of the command-line tools, one class per kind of harm.

Each :class:`Case` sets up files in an empty directory, runs one tool, and states what a
careful user expects: the exit status, one line on stderr (never a traceback), and files
that must come out byte for byte as they went in.  ``tests/test_hostile.py`` runs them
against this tree; ``python -m tests.helpers.hostile --tree DIR`` runs them against another
checkout (an older commit) and prints a before/after table of the two trees.

Tools run in this process where they can (fast); signal and MPI cases run as processes.
Every MPI job goes through a :class:`Runner` method whose name starts with ``mpi``
(``mpirun``, ``mpi_python``, ``mpi_command``, ``mpi_launch``, ``mpi_popen``): by those
names ``tests/conftest.py`` marks the case ``mpi``, and a case that starts a job otherwise
fails (the marker's guard, ``tests/helpers/mpi_guard``).
The cases of the first eleven classes are below; those of later classes live by area in
``tests/helpers/hostile_{training,partition,launch,api,data}.py`` (:func:`all_cases`).
"""
from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import io
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Callable

import numpy as np

from distgnn.signals import ACKNOWLEDGED_INTERRUPT
from launch.mpirun import ROOT_ENV, SESSION_PARAM, new_session_base

ENTRY = {"train": ("distgnn.cli.train", "train_main"), "bench": ("bench.cli", "bench_main"),
         "predict": ("distgnn.cli.predict", "predict_main"),
         "partition": ("partition.cli", "main"), "launch": ("launch.cli", "main")}
CLASSES = {1: "--force / overwrite deletes what it did not write",
           2: "a refused run truncates an existing output",
           3: "resume accepts other data or options",
           4: "features silently changed",
           5: "flags and sizes reach an allocation",
           6: "output paths checked only after the work",
           7: "Ctrl-C and SIGTERM to mpirun",
           8: "checkpoint manifests and states",
           9: "forged partitions that look consistent",
           10: "leftovers and permissions",
           11: "one line per distinct error; verify exits 1",
           12: "a delete removes only what it made, and all of it",
           13: "an option that changes nothing, or changes the maths unasked",
           14: "the Python API fed the wrong shapes or graph",
           15: "a traceback or crash on bad input",
           16: "a launch or SLURM script that cannot run as written",
           17: "figures printed that cannot be",
           18: "two outputs on one path, or a collision found after the work",
           19: "an empty value, or a flag that does nothing, accepted",
           20: "data read with a silent trap",
           21: "the memory check refuses a run that fits",
           22: "launching, signals and leftovers",
           23: "inference from Python and for own models",
           24: "leftovers and orphans after a signal or a failed start",
           25: "silently wrong: a flag dropped or a result computed without a word",
           26: "a traceback or an unclear line where one line would do"}


@dataclasses.dataclass
class Outcome:
    status: int
    stdout: str
    stderr: str

    def error_lines(self) -> list[str]:
        return [line for line in self.stderr.splitlines() if line.strip()]


def captured(call: Callable[[], int]) -> Outcome:
    """``call()`` as a program run here: its exit status (``SystemExit``'s code, argparse's
    included; ``"raised NAME"`` with a traceback on stderr for any other exception), stdout
    and stderr."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            status = call()
        except SystemExit as e:
            status = e.code if isinstance(e.code, int) else int(e.code is not None)
            if isinstance(e.code, str):
                print(e.code, file=sys.stderr)
        except Exception as e:  # noqa: BLE001 -- a traceback is what the case looks for
            import traceback

            traceback.print_exc(file=err)
            status = f"raised {type(e).__name__}"
    return Outcome(status, out.getvalue(), err.getvalue())


class Runner:
    """Runs a tool of ``tree`` (None: this checkout, in this process where allowed)."""

    def __init__(self, tree: Path | None = None):
        self.tree = tree

    def env(self) -> dict:
        env = {**os.environ, **ROOT_ENV, "PYTHONUNBUFFERED": "1"}
        if self.tree is not None:
            env["PYTHONPATH"] = str(self.tree)
        return env

    @property
    def prelude(self) -> str:
        """What a ``python -c`` program of this runner starts with: ``sys`` imported and,
        for another tree, that tree first (before this checkout's editable install, whose
        finder comes first)."""
        return "import sys\n" + ("" if self.tree is None else
                                 f"sys.path.insert(0, {str(self.tree)!r}); sys.meta_path[:] = "
                                 "[f for f in sys.meta_path if 'editable' not in repr(f)]\n")

    def code_command(self, code: str, argv: list = ()) -> list[str]:
        return [sys.executable, "-c", self.prelude + code, *map(str, argv)]

    def command(self, tool: str, argv: list) -> list[str]:
        module, func = ENTRY[tool]
        return self.code_command(f"from {module} import {func}; "
                                 f"sys.exit({func}(sys.argv[1:]))", argv)

    def __call__(self, tool: str, argv: list, in_process: bool = True,
                 timeout: float = 300) -> Outcome:
        if in_process and self.tree is None:
            return self.in_process(tool, argv)
        proc = subprocess.run(self.command(tool, argv), env=self.env(), capture_output=True,
                              text=True, timeout=timeout)
        return Outcome(proc.returncode, proc.stdout, proc.stderr)

    @staticmethod
    def in_process(tool: str, argv: list) -> Outcome:
        import importlib

        module, func = ENTRY[tool]
        main = getattr(importlib.import_module(module), func)
        return captured(lambda: main([str(a) for a in argv]))

    @property
    def root(self) -> Path:
        """The checkout whose tools run (for its examples and scripts)."""
        return self.tree if self.tree is not None else Path(__file__).resolve().parents[2]

    def python(self, code: str, timeout: float = 300) -> Outcome:
        """``code`` run from this tree's root: in this process for this checkout (fast; a
        fault of its kernels then fails the suite, as it should), else by a new Python
        process (another tree's kernels may fault)."""
        if self.tree is None:
            return self.in_process_code(code)
        proc = subprocess.run(self.code_command(code), env=self.env(), capture_output=True,
                              text=True, timeout=timeout, cwd=self.root)
        return Outcome(proc.returncode, proc.stdout, proc.stderr)

    def in_process_code(self, code: str) -> Outcome:
        """``code`` executed here as a program, from this tree's root (:func:`captured`)."""
        argv, cwd = sys.argv[:], os.getcwd()
        os.chdir(self.root)
        try:
            return captured(lambda: exec(compile(code, "<program>", "exec"),
                                         {"__name__": "__main__"}) or 0)
        finally:
            sys.argv[:] = argv
            os.chdir(cwd)

    def example(self, name: str, argv: list, timeout: float = 300) -> Outcome:
        """``examples/NAME`` of this tree run as a user runs it."""
        return self.python(f"import runpy, sys; sys.argv = {[name, *map(str, argv)]!r}; "
                           f"runpy.run_path('examples/{name}', run_name='__main__')", timeout)

    def popen(self, tool: str, argv: list, **kw) -> subprocess.Popen:
        return subprocess.Popen(self.command(tool, argv), env=self.env(), text=True,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, **kw)

    def mpirun(self, ranks: int, tool: str, argv: list, timeout: float = 180) -> Outcome:
        """``tool`` on ``ranks`` ranks (see :meth:`mpi_command`)."""
        return self.mpi_command(ranks, self.command(tool, argv), timeout)

    def mpi_python(self, ranks: int, code: str, argv: list, timeout: float = 180) -> Outcome:
        """``code`` on ``ranks`` ranks, from this tree's root (see :meth:`mpi_command`)."""
        return self.mpi_command(ranks, self.code_command(code, argv), timeout)

    @staticmethod
    def job_line(ranks: int, command: list[str], session_base: str | Path) -> list[str]:
        """``mpirun`` (Open MPI's, of this environment) starting ``command`` on ``ranks``
        ranks, unbound and oversubscribed, its session directories under ``session_base``
        (a folder no other job uses: ``launch.mpirun.SESSION_PARAM`` says why)."""
        mpirun = Path(sys.executable).parent / "mpirun"
        return [str(mpirun), "-np", str(ranks), "--oversubscribe", "--bind-to", "none",
                "--prtemca", SESSION_PARAM, str(session_base), *command]

    def mpi_command(self, ranks: int, command: list[str], timeout: float = 180) -> Outcome:
        """``command`` on ``ranks`` ranks; stderr without Open MPI's own banner (the block
        between dashed lines that says a rank exited non-zero) and without the NUL byte
        prterun ends its report of an abort with."""
        session_base = new_session_base()
        try:
            proc = subprocess.run(self.job_line(ranks, command, session_base), env=self.env(),
                                  capture_output=True, text=True, timeout=timeout,
                                  cwd=self.root)
        finally:
            shutil.rmtree(session_base, ignore_errors=True)
        ours, banner = [], False
        # the banner's first dashed line can arrive glued to a rank's last line: unglue it
        text = re.sub(r"(?<=[^\n-])(-{20,})", "\n\\1", proc.stderr.replace("\x00", ""))
        for line in text.splitlines():
            if line.startswith("-" * 20):
                banner = not banner
            elif not banner:
                ours.append(line)
        return Outcome(proc.returncode, proc.stdout, "\n".join(ours))

    def mpi_launch(self, argv: list, timeout: float = 300) -> Outcome:
        """``distgnn-launch argv`` starting a job, as a process."""
        return self("launch", argv, in_process=False, timeout=timeout)

    def mpi_popen(self, argv: list[str], **kw) -> subprocess.Popen:
        """An MPI job started as a process and left running: ``argv`` is an
        :meth:`job_line` or a ``distgnn-launch`` :meth:`command` (``kw``: ``Popen``'s,
        over this runner's environment and text pipes)."""
        return subprocess.Popen(argv, **{"env": self.env(), "text": True,
                                         "stdout": subprocess.PIPE, "stderr": subprocess.PIPE,
                                         **kw})


# ---- what the cases build ----------------------------------------------------------------------
def write_npz(path: Path, n: int = 60, features: int = 8, seed: int = 0, splits: int = 0,
              **override) -> Path:
    """A small random graph dataset in the shared .npz format (``override``: arrays)."""
    rng = np.random.default_rng(seed)
    src, dst = rng.integers(0, n, 4 * n), rng.integers(0, n, 4 * n)
    keep = src != dst
    src, dst = np.concatenate([src[keep], dst[keep]]), np.concatenate([dst[keep], src[keep]])
    order = np.lexsort((src, dst))
    indices = src[order].astype(np.int64)
    indptr = np.concatenate([[0], np.cumsum(np.bincount(dst, minlength=n))]).astype(np.int64)
    role = rng.permutation(np.arange(n) % 4)
    y = rng.integers(0, 3, n).astype(np.int64)
    y[:3] = np.arange(3)[:n]  # every class has a vertex (classes are 0..C-1 without gaps)
    arrays = {"indptr": indptr, "indices": indices,
              "x": rng.random((n, features), dtype=np.float32), "y": y,
              "train_mask": role == 0, "val_mask": role == 1, "test_mask": role == 2}
    if splits:
        roles = np.stack([rng.permutation(np.arange(n) % 4) for _ in range(splits)])
        arrays.update(train_masks=roles == 0, val_masks=roles == 1, test_masks=roles == 2)
    arrays.update(override)
    np.savez(path, **arrays)
    return path


def snapshot(path: Path) -> dict:
    """Every file under ``path`` (or ``path`` itself) with its SHA-256; directories listed."""
    if not path.exists():
        return {}
    if path.is_file():
        return {path.name: hashlib.sha256(path.read_bytes()).hexdigest()}
    return {str(p.relative_to(path)): hashlib.sha256(p.read_bytes()).hexdigest()
            if p.is_file() else "dir" for p in sorted(path.rglob("*"))}


def metrics_lines(n: int = 3) -> str:
    return "".join(json.dumps({"epoch": e, "loss": 1.0 - e / 10}) + "\n" for e in range(n))


def partition(run: Runner, data: Path, parts: int, out: Path, *extra) -> None:
    got = run("partition", [data, "--parts", parts, "--out", out, "--no-progress", *extra])
    assert got.status == 0, got.stderr


def reseal(directory: Path) -> None:
    """Recompute meta.json's sizes and checksums: what a careful forger does."""
    meta = json.loads((directory / "meta.json").read_text())
    for rel in meta["files"]:
        data = (directory / rel).read_bytes()
        meta["files"][rel] = {"bytes": len(data), "sha256": hashlib.sha256(data).hexdigest()}
    (directory / "meta.json").write_text(json.dumps(meta))


def edit_array(directory: Path, rel: str, change: Callable[[np.ndarray], np.ndarray]) -> None:
    path = directory / rel
    np.save(path, change(np.load(path)))
    reseal(directory)


def checkpoint_run(run: Runner, tmp: Path, epochs: int, *extra) -> Path:
    """A dataset trained ``epochs`` epochs with a checkpoint every 2; returns the npz."""
    data = tmp / "d.npz"
    if not data.exists():
        write_npz(data)
    got = run("train", ["--dataset", data, "--epochs", epochs, "--checkpoint-dir", tmp / "ck",
                        "--checkpoint-every", 2, "--keep", 5, "--no-progress", "--threads", 1,
                        *extra])
    assert got.status == 0, got.stderr
    return data


def forge_manifest(ck: Path, epoch: int, change: Callable[[dict], None]) -> None:
    path = ck / f"epoch-{epoch:06d}" / "manifest.json"
    manifest = json.loads(path.read_text())
    change(manifest)
    path.write_text(json.dumps(manifest))


def forge_state(ck: Path, epoch: int, change: Callable[[dict], None]) -> None:
    import torch

    folder = ck / f"epoch-{epoch:06d}"
    state = torch.load(folder / "state.pt", weights_only=True)
    change(state)
    torch.save(state, folder / "state.pt")
    data = (folder / "state.pt").read_bytes()
    forge_manifest(ck, epoch, lambda m: m["files"].update(
        {"state.pt": {"bytes": len(data), "sha256": hashlib.sha256(data).hexdigest()}}))


def resumes_from(outcome: Outcome, epoch: int) -> bool:
    return "resumed from" in outcome.stdout + outcome.stderr and \
        f"after epoch {epoch}" in outcome.stdout + outcome.stderr


# ---- the cases ---------------------------------------------------------------------------------
@dataclasses.dataclass
class Case:
    """``run(tmp, runner) -> Outcome`` after ``setup(tmp, runner)``; then the expectations:
    ``status`` (``None``: any failure), one stderr line (at most ``lines`` distinct ones)
    containing ``says`` (when ``status`` is a failure), no traceback, every path of
    ``keep`` unchanged, and ``check(tmp, outcome)`` if given."""

    klass: int
    name: str
    run: Callable[[Path, Runner], Outcome]
    setup: Callable[[Path, Runner], None] = lambda tmp, run: None
    status: int | None = 2
    says: str = ""
    keep: tuple[str, ...] = ()
    check: Callable[[Path, Outcome], None] | None = None
    lines: int = 1  # distinct error lines allowed (one per rank when ranks differ)
    slow: bool = False  # over about 5 s (marked slow: out of the quick loop)

    @property
    def id(self) -> str:
        return f"{self.klass}-{self.name}"


def tool(name: str, *argv, in_process: bool = True) -> Callable[[Path, Runner], Outcome]:
    """A run of ``name`` with ``argv``; ``"{tmp}"`` in an argument is the case directory."""
    return lambda tmp, run: run(name, [str(a).replace("{tmp}", str(tmp)) for a in argv],
                                in_process=in_process)


def user_file(rel: str, text: str = "the user's own data\n"):
    def setup(tmp, run):
        path = tmp / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return setup


def both(*setups):
    def setup(tmp, run):
        for s in setups:
            s(tmp, run)
    return setup


def data(rel: str = "d.npz", **kw):
    return lambda tmp, run: write_npz(tmp / rel, **kw)


TRAIN_QUICK = ("--epochs", 2, "--no-progress", "--threads", 1)

CASES: list[Case] = []
add = CASES.append

# 1. --force and every other overwrite replace only what this tool wrote
add(Case(1, "force onto a folder of notes", tool("partition", "{tmp}/d.npz", "--parts", 2,
                                                 "--out", "{tmp}/notes", "--force"),
         both(data(), user_file("notes/todo.txt")), says="not a partition directory",
         keep=("notes",)))
add(Case(1, "force onto partitions with a user file added",
         tool("partition", "{tmp}/d.npz", "--parts", 2, "--out", "{tmp}/p", "--force"),
         both(data(), lambda tmp, run: partition(run, tmp / "d.npz", 2, tmp / "p"),
              user_file("p/results.csv")), says="not a partition directory", keep=("p",)))
add(Case(1, "force onto a regular file", tool("partition", "{tmp}/d.npz", "--parts", 2,
                                              "--out", "{tmp}/thesis.tex", "--force"),
         both(data(), user_file("thesis.tex")), says="not a partition directory",
         keep=("thesis.tex",)))
add(Case(1, "force onto another tool's meta.json",
         tool("partition", "{tmp}/d.npz", "--parts", 2, "--out", "{tmp}/ds", "--force"),
         both(data(), user_file("ds/meta.json", '{"format": "dgl-partitions", "parts": 2}')),
         says="not a partition directory", keep=("ds",)))
add(Case(1, "--json onto a user's JSON", tool("partition", "inspect", "{tmp}/p", "--json",
                                              "{tmp}/config.json"),
         both(data(), lambda tmp, run: partition(run, tmp / "d.npz", 2, tmp / "p"),
              user_file("config.json", '{"lr": 0.1}')), says="not a JSON result",
         keep=("config.json",)))
add(Case(1, "--slurm onto a user's script", tool("launch", "-n", 2, "--slurm",
                                                 "{tmp}/job.sh", "--", "distgnn-train",
                                                 "--partitions", "{tmp}/p"),
         user_file("job.sh", "#!/bin/bash\nmy_solver --big\n"), says="not an sbatch script",
         keep=("job.sh",)))
add(Case(1, "report --out onto a user's README", tool("bench", "report", "{tmp}/r.json",
                                                      "--out", "{tmp}/README.md"),
         both(user_file("README.md", "# My project\n"),
              user_file("r.json", '{"benchmark": "spmm", "machine": {}, "results": []}')),
         says="not a report", keep=("README.md",)))
add(Case(1, "--plot over a user's picture", tool("bench", "partition", "--dataset",
                                                 "{tmp}/d.npz", "--parts", 2, "--methods",
                                                 "random", "--plot", "{tmp}/figs"),
         both(data(), user_file("figs/partition.png", "\x89PNG holiday photo")),
         says="not a chart", keep=("figs/partition.png",)))
add(Case(1, "a user's epoch-like folder in the checkpoint directory",
         tool("train", "--dataset", "{tmp}/d.npz", "--checkpoint-dir", "{tmp}/ck",
              "--checkpoint-every", 1, "--keep", 1, *TRAIN_QUICK),
         both(data(), user_file("ck/epoch-000001/notes.txt")), says="not a checkpoint",
         keep=("ck/epoch-000001",)))

# 2. a refused run leaves earlier outputs as they were
add(Case(2, "metrics kept when --lr is nan", tool("train", "--dataset", "{tmp}/d.npz",
                                                  "--lr", "nan", "--metrics-out",
                                                  "{tmp}/m.jsonl", *TRAIN_QUICK),
         both(data(), user_file("m.jsonl", metrics_lines())), says="--lr",
         keep=("m.jsonl",)))
add(Case(2, "metrics kept when nothing is to train",
         tool("train", "--dataset", "{tmp}/d.npz", "--metrics-out", "{tmp}/m.jsonl",
              *TRAIN_QUICK),
         both(data(train_mask=np.zeros(60, bool)), user_file("m.jsonl", metrics_lines())),
         says="no training vertices", keep=("m.jsonl",)))
add(Case(2, "metrics kept when resume finds nothing",
         tool("train", "--dataset", "{tmp}/d.npz", "--metrics-out", "{tmp}/m.jsonl",
              "--resume", "{tmp}/empty", *TRAIN_QUICK),
         both(data(), user_file("m.jsonl", metrics_lines()), lambda t, r: (t / "empty").mkdir()),
         says="no checkpoint", keep=("m.jsonl",)))
add(Case(2, "statistics kept when --parts is 0", tool("partition", "{tmp}/d.npz", "--parts", 0,
                                                      "--out", "{tmp}/p", "--json",
                                                      "{tmp}/stats.json"),
         both(data(), user_file("stats.json", json.dumps(
             {"written_by": "distgnn-partition", "replication_factor": 1.5}))),
         says="--parts", keep=("stats.json",)))
add(Case(2, "bench result kept when the dataset is missing",
         tool("bench", "spmm", "--dataset", "{tmp}/absent.npz", "--widths", 4, "--json",
              "{tmp}/spmm.json"),
         user_file("spmm.json", json.dumps({"benchmark": "spmm", "machine": {}})),
         says="absent.npz", keep=("spmm.json",)))
add(Case(2, "metrics kept when the model cannot fit",
         tool("train", "--dataset", "{tmp}/d.npz", "--hidden", 10**7, "--layers", 50,
              "--metrics-out", "{tmp}/m.jsonl", *TRAIN_QUICK),
         both(data(), user_file("m.jsonl", metrics_lines())), says="needs about",
         keep=("m.jsonl",)))


# 3. a checkpoint continues only the run it came from
def resume_case(name: str, first: tuple, then: tuple, says: str, swap_data=None,
                split_data: bool = False):
    def setup(tmp, run):
        write_npz(tmp / "d.npz", splits=3 if split_data else 0)
        checkpoint_run(run, tmp, 2, *first)
        if swap_data:
            swap_data(tmp)

    def go(tmp, run):
        return run("train", ["--dataset", tmp / "d.npz", "--epochs", 4, "--resume", tmp / "ck",
                             "--no-progress", "--threads", 1, *then])
    return Case(3, name, go, setup, says=says)


def perturb_one_feature(tmp):
    z = dict(np.load(tmp / "d.npz"))
    z["x"][7, 3] += 0.25
    np.savez(tmp / "d.npz", **z)


add(resume_case("another --feature-norm", (), ("--feature-norm", "none"), "--feature-norm"))
add(resume_case("another --split", ("--split", 1), ("--split", 2), "--split", split_data=True))
add(resume_case("same name and sizes, one feature changed", (), (), "another data",
                swap_data=perturb_one_feature))
add(resume_case("another --dropout", (), ("--dropout", 0.2), "--dropout"))
add(resume_case("another --lr", (), ("--lr", 0.05), "--lr"))
add(resume_case("another --seed", (), ("--seed", 9), "--seed"))


# 4. no input transformation changes data silently
def normalised_rows(tmp, outcome):
    from distgnn.run.shard import normalize_features

    x = np.load(tmp / "d.npz")["x"]
    out = normalize_features(x, "row")
    assert np.all(np.isfinite(out))
    nonzero = np.abs(x).sum(axis=1, dtype=np.float64) > 0
    np.testing.assert_allclose(np.abs(out).sum(axis=1, dtype=np.float64)[nonzero], 1.0,
                               rtol=1e-5)


def feature_case(name: str, rows: dict, status: int = 0, says: str = ""):
    x = np.random.default_rng(1).random((60, 8), dtype=np.float32)
    for r, values in rows.items():
        x[r] = values
    return Case(4, name, tool("train", "--dataset", "{tmp}/d.npz", *TRAIN_QUICK),
                data(x=x), status=status, says=says,
                check=normalised_rows if status == 0 else None)


add(feature_case("a row at the float32 maximum", {3: np.full(8, 3.4e38, np.float32)}))
add(feature_case("a row of opposite huge values",
                 {5: np.array([3e38, -3e38] * 4, np.float32)}))
add(feature_case("one huge value among ones", {9: np.array([3.3e38] + [1.0] * 7, np.float32)}))
add(feature_case("subnormal values", {11: np.full(8, 1e-44, np.float32)}))
add(Case(4, "float64 features beyond float32", tool("train", "--dataset", "{tmp}/d.npz",
                                                    *TRAIN_QUICK),
         data(x=np.full((60, 8), 1e300)), says="NaN or inf"))

# 5. every flag and size that reaches an allocation is checked first
for name, flags, says in [
        ("--hidden 0", ("--hidden", 0), "--hidden"),
        ("--hidden of a billion", ("--hidden", 10**9), "needs about"),
        ("--layers 100000", ("--layers", 100000), "--layers"),
        ("--lr -0.1", ("--lr", -0.1), "--lr"),
        ("--weight-decay inf", ("--weight-decay", "inf"), "--weight-decay"),
        ("--dropout 1", ("--dropout", 1), "--dropout"),
        ("--dropout nan", ("--dropout", "nan"), "--dropout"),
        ("--threads 0", ("--threads", 0), "--threads"),
        ("--threads a million", ("--threads", 10**6), "--threads"),
        ("--eval-every -1", ("--eval-every", -1), "--eval-every"),
        ("--seed -5", ("--seed", -5), "--seed"),
        ("--delay without cd-r", ("--delay", 3), "--delay")]:
    add(Case(5, name, tool("train", "--dataset", "{tmp}/d.npz", *TRAIN_QUICK, *flags), data(),
             says=says))
add(Case(5, "5000 wide layers on cora", tool("train", "--dataset", "cora", *TRAIN_QUICK,
                                              "--layers", 5000, "--hidden", 512),
         says="needs about"))
add(Case(5, "a label of 2^31", tool("train", "--dataset", "{tmp}/d.npz", *TRAIN_QUICK),
         data(y=np.where(np.arange(60) == 4, 2**31, 1).astype(np.int64)),
         says="labels are 1..2147483648"))
add(Case(5, "zero-width features", tool("train", "--dataset", "{tmp}/d.npz", *TRAIN_QUICK),
         data(x=np.zeros((60, 0), np.float32)), says="width 0"))


def huge_classes(tmp, run):
    write_npz(tmp / "d.npz")
    partition(run, tmp / "d.npz", 1, tmp / "p")
    from distgnn.data.partitions import fields_sha256

    meta = json.loads((tmp / "p" / "meta.json").read_text())
    meta["num_classes"] = 10**9
    meta["fields_sha256"] = fields_sha256(meta)  # past the checksum, to the memory check
    (tmp / "p" / "meta.json").write_text(json.dumps(meta))


add(Case(5, "num_classes 1e9 in meta.json", tool("train", "--partitions", "{tmp}/p",
                                                 *TRAIN_QUICK), huge_classes, says="needs about"))

# 6. output paths are checked before the work
add(Case(6, "--metrics-out in a missing folder", tool("train", "--dataset", "{tmp}/d.npz",
                                                      "--metrics-out", "{tmp}/no/m.jsonl",
                                                      *TRAIN_QUICK), data(),
         says="does not exist", check=lambda tmp, o: _no_training(o)))
add(Case(6, "--metrics-out is a folder", tool("train", "--dataset", "{tmp}/d.npz",
                                              "--metrics-out", "{tmp}", *TRAIN_QUICK), data(),
         says="is a directory", check=lambda tmp, o: _no_training(o)))
add(Case(6, "--checkpoint-dir is a file", tool("train", "--dataset", "{tmp}/d.npz",
                                               "--checkpoint-dir", "{tmp}/d.npz", *TRAIN_QUICK),
         data(), says="which the run reads", keep=("d.npz",),
         check=lambda tmp, o: _no_training(o)))
add(Case(6, "--json is a folder", tool("bench", "spmm", "--dataset",
                                       "rmat:scale=16,edge_factor=16,features=1", "--json",
                                       "{tmp}"), says="is a directory"))
add(Case(6, "--plot onto a file", tool("bench", "partition", "--dataset", "{tmp}/d.npz",
                                       "--parts", 2, "--plot", "{tmp}/d.npz"), data(),
         says="not a directory", keep=("d.npz",)))
add(Case(6, "--json in a missing folder", tool("partition", "{tmp}/d.npz", "--parts", 2,
                                               "--out", "{tmp}/p", "--json",
                                               "{tmp}/no/s.json"), data(),
         says="does not exist", check=lambda tmp, o: _absent(tmp / "p")))
add(Case(6, "--slurm in a missing folder", tool("launch", "-n", 2, "--slurm",
                                                "{tmp}/no/job.sh", "--", "true"),
         says="does not exist"))


def _no_training(outcome: Outcome) -> None:
    assert "epoch" not in outcome.stdout, outcome.stdout


def _absent(path: Path) -> None:
    assert not path.exists(), path


# 7. Ctrl-C and SIGTERM end with one line (and a checkpoint when checkpointing)
def interrupt(signals: list[int], checkpoint: bool, wait_epochs: int = 3,
              nodes: int = 3000):
    def go(tmp, run):
        ck = ["--checkpoint-dir", tmp / "ck", "--checkpoint-every", 10**6] if checkpoint else []
        # SIGINT as a foreground process has it: a shell that runs the suite in the
        # background makes its children ignore SIGINT, and Python keeps an ignored SIGINT
        proc = run.popen("train", ["--dataset", f"sbm:nodes={nodes}", "--epochs", 100000,
                                   "--threads", 1, "--no-progress", "--hidden", 64, *ck],
                         preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
        seen = 0
        while seen < wait_epochs:
            line = proc.stdout.readline()
            if not line:
                break
            seen += line.startswith("epoch ")
        if not wait_epochs:
            time.sleep(1.5)  # into the imports of torch and numba
        for i, s in enumerate(signals):
            proc.send_signal(s)
            if wait_epochs and i == 0:
                # training answers the first at once; the next goes once it did (two that
                # arrive while the interpreter is inside one long call are handled as one)
                while (line := proc.stderr.readline()) and line != ACKNOWLEDGED_INTERRUPT:
                    pass
        out, err = proc.communicate(timeout=120)
        return Outcome(proc.returncode, out, err)
    return go


def checkpointed(tmp, outcome):
    assert (tmp / "ck").is_dir() and any((tmp / "ck").glob("epoch-*/manifest.json"))


add(Case(7, "Ctrl-C with checkpoints", interrupt([signal.SIGINT], True), status=130,
         says="SIGINT received: stopped after epoch", check=checkpointed, slow=True))
add(Case(7, "Ctrl-C without checkpoints", interrupt([signal.SIGINT], False), status=130,
         says="nothing saved", slow=True))
add(Case(7, "Ctrl-C twice", interrupt([signal.SIGINT, signal.SIGINT], True, nodes=30000),
         status=130, says="interrupted", slow=True))
# a graph whose loading outlasts the 1.5 s wait on any CPU: the Ctrl-C lands in the imports
# or the loading, never in an epoch
add(Case(7, "Ctrl-C while starting up", interrupt([signal.SIGINT], False, wait_epochs=0,
                                                  nodes=300000),
         status=130, says="interrupted"))


def sigterm_to_mpirun(tmp, run):
    write_npz(tmp / "d.npz", n=400)
    partition(run, tmp / "d.npz", 2, tmp / "p")
    proc = run.mpi_popen(run.job_line(2, run.command(
        "train", ["--partitions", tmp / "p", "--epochs", 10**6, "--threads", 1, "--no-progress",
                  "--checkpoint-dir", tmp / "ck", "--checkpoint-every", 10**6]), tmp / "mpi"))
    seen = 0
    while seen < 5:
        line = proc.stdout.readline()
        if not line:
            break
        seen += line.startswith("epoch ")
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=120)
    time.sleep(3)  # what the job does after mpirun has answered
    left = subprocess.run(["pgrep", "-f", str(tmp / "p")], capture_output=True, text=True)
    subprocess.run(["pkill", "-f", str(tmp / "p")])
    return Outcome(proc.returncode, out + "".join(f"still running: {pid}\n"
                                                  for pid in left.stdout.split()), err)


def stopped_and_nothing_half_written(tmp, outcome):
    """Open MPI either forwards the SIGTERM to the ranks and kills them (SIGKILL) well
    within a second, so they checkpoint only if they finish the epoch and the write by
    then, or, when only pip's wrapper dies, leaves them running, and they checkpoint and
    end; either way no rank runs on, and every checkpoint that can be seen is whole."""
    assert "still running" not in outcome.stdout, outcome.stdout
    for epoch in (tmp / "ck").glob("epoch-*"):
        assert (epoch / "manifest.json").is_file(), f"{epoch.name} without its manifest"


add(Case(7, "SIGTERM to mpirun itself", sigterm_to_mpirun, status=None,
         check=stopped_and_nothing_half_written))


# 8. checkpoint manifests are checked as strictly as meta.json; resume falls back
def manifest_case(name: str, forge: Callable[[Path], None]):
    def setup(tmp, run):
        checkpoint_run(run, tmp, 4)
        forge(tmp / "ck")

    def go(tmp, run):
        return run("train", ["--dataset", tmp / "d.npz", "--epochs", 5, "--resume", tmp / "ck",
                             "--no-progress", "--threads", 1])

    def falls_back(tmp, outcome):
        assert resumes_from(outcome, 2), outcome.stdout + outcome.stderr
    return Case(8, name, go, setup, status=0, check=falls_back)


add(manifest_case("epoch as a string", lambda ck: forge_manifest(
    ck, 4, lambda m: m.update(epoch="4"))))
add(manifest_case("a negative epoch", lambda ck: forge_manifest(
    ck, 4, lambda m: m.update(epoch=-4))))
add(manifest_case("an epoch of 10^30", lambda ck: forge_manifest(
    ck, 4, lambda m: m.update(epoch=10**30))))
add(manifest_case("an epoch of true", lambda ck: forge_manifest(
    ck, 4, lambda m: m.update(epoch=True))))
add(manifest_case("epoch 3 in epoch-000004", lambda ck: forge_manifest(
    ck, 4, lambda m: m.update(epoch=3))))
add(manifest_case("history records without loss", lambda ck: forge_state(
    ck, 4, lambda s: [r.pop("loss") for r in s["history"]])))
add(manifest_case("history shorter than the epoch", lambda ck: forge_state(
    ck, 4, lambda s: s["history"].pop())))


# 9. forged partitions that pass their checksums are refused before training
def forged(name: str, forge: Callable[[Path], None], says: str):
    def setup(tmp, run):
        write_npz(tmp / "d.npz", n=200)
        partition(run, tmp / "d.npz", 2, tmp / "p")
        forge(tmp / "p")

    def go(tmp, run):
        return run.mpirun(2, "train", ["--partitions", tmp / "p", "--epochs", 2, "--threads", 1,
                                       "--no-progress"])
    return Case(9, name, go, setup, says=says, lines=2)


def swap_leaf_entries(directory):
    def change(a):
        a = a.copy()
        a[[0, 1]] = a[[1, 0]]
        return a
    edit_array(directory, "part-00000/leaf_root_local.npy", change)


def drop_leaf_entry(directory):
    p = directory / "part-00000"
    ptr = np.load(p / "leaf_ptr.npy")
    np.save(p / "leaf_root_local.npy", np.load(p / "leaf_root_local.npy")[:-1])
    np.save(p / "leaf_remote_local.npy", np.load(p / "leaf_remote_local.npy")[:-1])
    ptr[-1] -= 1
    np.save(p / "leaf_ptr.npy", ptr)
    reseal(directory)


def split_vertex(directory) -> int:
    """A local id, on partition 1, of a leaf (a split vertex whose root is elsewhere)."""
    return int(np.flatnonzero(np.load(directory / "part-00001" / "root_rank.npy") != 1)[0])


def change_leaf_degree(directory):
    v = split_vertex(directory)
    edit_array(directory, "part-00001/in_degree.npy", lambda a: a + (np.arange(len(a)) == v))


def change_every_degree(directory):
    for p in ("part-00000", "part-00001"):
        edit_array(directory, f"{p}/in_degree.npy", lambda a: a + 1)


def mix_runs(directory):
    other = directory.parent / "other"
    Runner.in_process("partition", [directory.parent / "d.npz", "--parts", 2, "--out", other,
                                    "--seed", 7, "--no-progress"])
    for name in os.listdir(other / "part-00001"):
        (directory / "part-00001" / name).write_bytes((other / "part-00001" / name).read_bytes())
    reseal(directory)


add(forged("two leaf entries swapped", swap_leaf_entries, "split-vertex table entry"))
add(forged("a leaf entry dropped", drop_leaf_entry, "split-vertex partials"))
add(forged("a leaf's in-degree changed", change_leaf_degree, "global in-degree"))
add(forged("every in-degree raised by one", change_every_degree, "in-edges"))
add(forged("partitions of two different runs", mix_runs, "rank"))


# 10. nothing left behind; the user's umask
def stale(rel: str):
    def setup(tmp, run):
        write_npz(tmp / "d.npz")
        path = tmp / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        if rel.endswith("/"):
            path.mkdir()
            (path / "half.npy").write_bytes(b"\x93NUMPY")
        else:
            path.write_text("half")
    return setup


def gone(rel: str):
    def check(tmp, outcome):
        assert not (tmp / rel.rstrip("/")).exists(), f"{rel} is still there"
    return check


DEAD = 2**22 - 3  # above the default pid_max of many systems: no such process
add(Case(10, "a killed partitioner's temporary folder",
         tool("partition", "{tmp}/d.npz", "--parts", 2, "--out", "{tmp}/p"),
         stale(f".p.tmp-{DEAD}-abc/"), status=0, check=gone(f".p.tmp-{DEAD}-abc/")))
add(Case(10, "a killed partitioner's old folder",
         tool("partition", "{tmp}/d.npz", "--parts", 2, "--out", "{tmp}/p"),
         stale(f".p.old-{DEAD}/"), status=0, check=gone(f".p.old-{DEAD}/")))
add(Case(10, "a killed run's metrics stream",
         tool("train", "--dataset", "{tmp}/d.npz", "--metrics-out", "{tmp}/m.jsonl",
              *TRAIN_QUICK), stale(f".m.jsonl.tmp-{DEAD}"), status=0,
         check=gone(f".m.jsonl.tmp-{DEAD}")))
add(Case(10, "a killed job's partial checkpoint",
         tool("train", "--dataset", "{tmp}/d.npz", "--checkpoint-dir", "{tmp}/ck",
              *TRAIN_QUICK), stale("ck/.partial-epoch-000007/"), status=0,
         check=gone("ck/.partial-epoch-000007/")))
add(Case(10, "a killed writer's JSON",
         tool("partition", "{tmp}/d.npz", "--parts", 2, "--out", "{tmp}/p", "--json",
              "{tmp}/s.json"), stale(f".s.json.tmp-{DEAD}"), status=0,
         check=gone(f".s.json.tmp-{DEAD}")))


def live_writer_kept(tmp, outcome):
    assert (tmp / f".p.tmp-{os.getpid()}-live").exists(), "a live writer's folder was removed"


add(Case(10, "a live writer's temporary folder is left alone",
         tool("partition", "{tmp}/d.npz", "--parts", 2, "--out", "{tmp}/p"),
         stale(f".p.tmp-{os.getpid()}-live/"), status=0, check=live_writer_kept))


def umask_mode(tmp, outcome):
    mode = (tmp / "p").stat().st_mode & 0o777
    assert mode == 0o755, oct(mode)


def with_umask(inner):
    def go(tmp, run):
        old = os.umask(0o022)
        try:
            return inner(tmp, run)
        finally:
            os.umask(old)
    return go


add(Case(10, "partition folders get the umask", with_umask(
    tool("partition", "{tmp}/d.npz", "--parts", 2, "--out", "{tmp}/p", in_process=False)),
    data(), status=0, check=umask_mode))


# 11. one line per distinct error; verify exits 1 on every problem
def mpi_train(*argv):
    return lambda tmp, run: run.mpirun(2, "train", [str(a).replace("{tmp}", str(tmp))
                                                    for a in argv])


add(Case(11, "a bad flag under mpirun", mpi_train("--partitions", "{tmp}/p", "--lr", "nan"),
         both(data(n=200), lambda t, r: partition(r, t / "d.npz", 2, t / "p")), says="--lr"))
add(Case(11, "a missing partition folder under mpirun",
         mpi_train("--partitions", "{tmp}/absent", *TRAIN_QUICK), says="absent"))
add(Case(11, "three ranks for two partitions",
         lambda tmp, run: run.mpirun(3, "train", ["--partitions", tmp / "p", *TRAIN_QUICK]),
         both(data(n=200), lambda t, r: partition(r, t / "d.npz", 2, t / "p")),
         says="holds 2 partitions"))
for name, text in [("meta.json is a list", "[]"),
                   ("format version 99", json.dumps({"format": "distgnn-partitions",
                                                     "format_version": 99})),
                   ("meta.json nested deep", "[" * 100000),
                   ("meta.json not UTF-8", "\udcff")]:
    add(Case(11, f"verify: {name}", tool("partition", "verify", "{tmp}/p"),
             user_file("p/meta.json", text) if "\udcff" not in text else
             (lambda tmp, run: ((tmp / "p").mkdir(), (tmp / "p" / "meta.json")
                                .write_bytes(b"\xff\xfe{"))),
             status=1, says="meta.json"))
add(Case(11, "verify: no such folder", tool("partition", "verify", "{tmp}/absent"), status=1,
         says="absent"))


# ---- every case ---------------------------------------------------------------------------------
AREAS = ("training", "partition", "launch", "api", "data")


def all_cases() -> list[Case]:
    """The cases above, then those of each area's module (they build on this one)."""
    import importlib

    return CASES + [case for area in AREAS
                    for case in importlib.import_module(f"tests.helpers.hostile_{area}").CASES]


# ---- checking and reporting --------------------------------------------------------------------
def run_case(case: Case, tmp: Path, runner: Runner) -> tuple[Outcome, list[str]]:
    """The case's outcome and every expectation it breaks (empty: as expected)."""
    case.setup(tmp, runner)
    before = {rel: snapshot(tmp / rel) for rel in case.keep}
    outcome = case.run(tmp, runner)
    problems = []
    if outcome.status != case.status and not (case.status is None and outcome.status != 0):
        problems.append(f"exit {outcome.status}")
    if "Traceback" in outcome.stderr:
        last = [line for line in outcome.stderr.splitlines() if line.strip()][-1]
        problems.append(f"traceback ({last.strip()[:70]})")
    if case.status and outcome.status == case.status:
        lines = outcome.error_lines()
        if not 1 <= len(lines) <= case.lines or len(set(lines)) < len(lines):
            problems.append(f"{len(lines)} lines on stderr")
        elif not any(case.says in line for line in lines):
            problems.append(f"says {lines[0][:90]!r}")
    for rel, shot in before.items():
        now = snapshot(tmp / rel)
        if now != shot:
            problems.append(f"{rel} {'deleted' if not now else 'changed'}")
    if case.check is not None and not problems:
        try:
            case.check(tmp, outcome)
        except AssertionError as e:
            problems.append(str(e).splitlines()[0][:90] if str(e) else "check failed")
    return outcome, problems


def describe(outcome: Outcome, problems: list[str]) -> str:
    if not problems:
        lines = outcome.error_lines()
        said = f": {lines[-1][:60]}" if lines and outcome.status else ""
        return f"exit {outcome.status}{said}"
    return "; ".join(problems)


def main() -> int:
    import argparse
    import tempfile

    import pytest

    p = argparse.ArgumentParser(description="Run the hostile cases against a source tree and "
                                            "print a Markdown table.")
    p.add_argument("--tree", type=Path, help="checkout to run (default: this one)")
    p.add_argument("--json", type=Path, help="write {case id: cell} here")
    p.add_argument("--only", help="substring of the case ids to run")
    a = p.parse_args()
    runner = Runner(a.tree.resolve() if a.tree else None)
    cells = {}
    for case in all_cases():
        if a.only and a.only not in case.id:
            continue
        with tempfile.TemporaryDirectory() as tmp:
            try:
                outcome, problems = run_case(case, Path(tmp), runner)
                cells[case.id] = describe(outcome, problems)
            except pytest.skip.Exception as e:  # a case that needs what this machine lacks
                cells[case.id] = f"skipped: {e}"
            except Exception as e:  # noqa: BLE001 -- the setup itself failed on that tree
                cells[case.id] = f"could not run: {type(e).__name__}: {str(e)[:80]}"
        print(f"| {case.klass} | {case.name} | {cells[case.id]} |", flush=True)
    if a.json:
        a.json.write_text(json.dumps(cells, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
