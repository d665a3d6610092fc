"""Hostile input for the command lines and for checkpoint manifests, in the harness and table
of ``tests/helpers/fuzz.py``: each case is ``clean`` (one line naming the flag or the file),
``accepted`` (a result that satisfies the invariants below) or a failure.

- **train flags**: every flag of ``distgnn-train`` that takes a value gets hostile values;
  parsing and :class:`~distgnn.run.config.TrainConfig` either refuse with one line naming the
  flag or give a configuration whose every size, rate and choice is usable.
- **launch flags**: ``distgnn-launch --dry-run`` with hostile counts, times and commands.
- **checkpoint manifests**: one hostile change to a good checkpoint's ``manifest.json`` or
  to the files it lists (digests fixed, as a careful forger would); reading it either
  refuses with one line naming the checkpoint or gives a manifest whose epoch, ranks and
  files are exactly what this tool writes, and resuming a run from the directory either
  refuses with one line or continues from an intact checkpoint.
"""
import contextlib
import hashlib
import io
import json
import math
import shutil
from pathlib import Path

import pytest
from hypothesis import strategies as st

from distgnn.cli.train import train_parser
from distgnn.errors import DistGNNError
from distgnn.nn.config import MAX_LAYERS
from distgnn.placement import MAX_THREADS
from distgnn.run import checkpoint_files as checkpoint
from distgnn.run.config import OWNER, TrainConfig
from launch.cli import main as launch_main
from tests.helpers.fuzz import HOSTILE_JSON, fuzz, run_case
from tests.helpers.training import train_quietly

HOSTILE_VALUES = ("-1", "0", "1", "3", "-0", "1e309", "-1e309", "nan", "inf", "-inf", "1e-320",
                  "0x10", "1_000", "", " ", "\uff13", "2147483648", "99999999999999999999",
                  "0.5", "1.0", "abc", "--epochs", "/dev/null", "../x", "10" * 40)
TRAIN_VALUE_FLAGS = ("--layers", "--hidden", "--dropout", "--lr", "--weight-decay", "--epochs",
                     "--seed", "--eval-every", "--patience", "--threads", "--checkpoint-every",
                     "--keep", "--comm-timeout", "--delay", "--split", "--algo", "--model",
                     "--aggregator", "--feature-norm", "--backend", "--device", "--comm",
                     "--nan-policy", "--rank-devices", "--rank-backends")


def quiet(call):
    """``call()`` with argparse's exit turned into a one-line DistGNNError."""
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        try:
            return call()
        except SystemExit as e:
            raise DistGNNError(err.getvalue().strip() or f"exit {e.code}") from None


def check_config(cfg: TrainConfig) -> None:
    assert 1 <= cfg.layers <= MAX_LAYERS and cfg.hidden >= 1 and cfg.epochs >= 1
    assert math.isfinite(cfg.lr) and cfg.lr >= 0
    assert math.isfinite(cfg.weight_decay) and cfg.weight_decay >= 0
    assert 0 <= cfg.dropout < 1 and cfg.eval_every >= 1 and cfg.keep >= 1
    assert cfg.threads is None or 1 <= cfg.threads <= MAX_THREADS
    assert 0 <= cfg.seed < 2**63 and math.isfinite(cfg.comm_timeout) and cfg.comm_timeout >= 0
    assert cfg.delay_epochs >= (1 if cfg.algo == "cd-r" else 0)


@st.composite
def train_flag_cases(draw):
    flags = draw(st.lists(st.sampled_from(TRAIN_VALUE_FLAGS), min_size=1, max_size=4,
                          unique=True))
    return [item for flag in flags for item in (flag, draw(st.sampled_from(HOSTILE_VALUES)))]


@fuzz(train_flag_cases())
def test_train_flags(argv):
    def call():
        args = quiet(lambda: train_parser().parse_args(argv))
        return TrainConfig(**{k: v for k, v in vars(args).items()
                              if k in OWNER})

    run_case("train flags", " ".join(argv), call, check_config,
             names=[a for a in argv if a.startswith("--")])


@st.composite
def launch_cases(draw):
    argv = ["--dry-run", "--mpi", "openmpi"]
    for flag in draw(st.lists(st.sampled_from(("-n", "--threads-per-rank", "--timeout",
                                               "--stop-grace", "--gpus-per-node")),
                              min_size=1, max_size=3, unique=True)):
        argv += [flag, draw(st.sampled_from(HOSTILE_VALUES))]
    if "-n" not in argv:
        argv += ["-n", "2"]
    return argv + ["--", draw(st.sampled_from(("distgnn-train", "true", "", "-x")))]


@fuzz(launch_cases())
def test_launch_flags(argv):
    def call():
        out, err = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                status = launch_main(argv)
            except SystemExit as e:  # argparse
                status = e.code
        if status != 0:
            raise DistGNNError(err.getvalue().strip() or f"exit {status} and no message")
        return out.getvalue()

    def check(text):
        assert text.count("\n") == 1 and "mpirun" in text, text

    run_case("launch flags", " ".join(argv), call, check, names=["distgnn-launch"])


# ---- checkpoint manifests ----------------------------------------------------------------------
SMALL = "sbm:nodes=200,features=8,seed=3"


@pytest.fixture(scope="module")
def small():
    from distgnn.data.datasets import load

    return load(SMALL)


@pytest.fixture(scope="module")
def good_checkpoints(tmp_path_factory, small):
    """A checkpoint directory with epochs 2 and 4 of a short run (copied by each case)."""

    ck = tmp_path_factory.mktemp("fuzz-ck") / "ck"
    train_quietly(small, epochs=4, checkpoint_dir=str(ck), checkpoint_every=2, keep=5,
                  device="cpu")
    return ck


MANIFEST_KEYS = ("format", "version", "epoch", "ranks", "fingerprint", "files")


@st.composite
def manifest_cases(draw):
    target = draw(st.sampled_from(("field", "field", "file entry", "file name", "bytes")))
    plan = {"target": target, "epoch": draw(st.sampled_from((2, 4)))}
    if target == "field":
        plan.update(key=draw(st.sampled_from(MANIFEST_KEYS)),
                    value=draw(st.sampled_from(HOSTILE_JSON + ("delete",))))
    elif target == "file entry":
        plan.update(name=draw(st.sampled_from(("state.pt", "rank-00000.pt"))),
                    key=draw(st.sampled_from(("bytes", "sha256"))),
                    value=draw(st.sampled_from(HOSTILE_JSON)))
    elif target == "file name":
        plan.update(name=draw(st.sampled_from(("../state.pt", "/etc/passwd", "rank-00001.pt",
                                               "state.pt/", "manifest.json", ""))))
    else:
        plan.update(how=draw(st.sampled_from(("truncate", "garbage", "deep", "empty"))),
                    cut=draw(st.floats(0, 1)))
    return plan


def forge(ck: Path, plan: dict) -> str:
    path = ck / checkpoint.checkpoint_name(plan["epoch"]) / "manifest.json"
    raw = path.read_bytes()
    manifest = json.loads(raw)
    if plan["target"] == "field":
        if plan["value"] == "delete":
            manifest.pop(plan["key"], None)
        else:
            manifest[plan["key"]] = plan["value"]
    elif plan["target"] == "file entry":
        manifest["files"][plan["name"]][plan["key"]] = plan["value"]
    elif plan["target"] == "file name":
        data = (path.parent / "state.pt").read_bytes()
        manifest["files"][plan["name"]] = {"bytes": len(data),
                                           "sha256": hashlib.sha256(data).hexdigest()}
    else:
        raw = {"truncate": raw[:int(plan["cut"] * len(raw))], "garbage": b"\xff\x00{",
               "deep": b"[" * 100000, "empty": b""}[plan["how"]]
        path.write_bytes(raw)
        return f"manifest of epoch {plan['epoch']}: {plan['how']}"
    path.write_text(json.dumps(manifest))
    return f"manifest of epoch {plan['epoch']}: {plan}"


def check_manifest(manifest: dict) -> None:
    assert manifest["format"] == checkpoint.FORMAT and manifest["version"] == checkpoint.VERSION
    assert type(manifest["epoch"]) is int and manifest["epoch"] in (2, 4)
    assert manifest["ranks"] == 1 and set(manifest["files"]) == {"state.pt", "rank-00000.pt"}


# each case also resumes a short run (about 40 ms): a quarter of --fuzz-examples
@fuzz(manifest_cases(), share=0.25)
def test_checkpoint_manifest(good_checkpoints, small, tmp_path_factory, plan):
    ck = tmp_path_factory.mktemp("case") / "ck"
    shutil.copytree(good_checkpoints, ck)
    what = forge(ck, plan)
    folder = ck / checkpoint.checkpoint_name(plan["epoch"])
    run_case("checkpoint manifest", what, lambda: checkpoint.read_manifest(folder),
             check_manifest, names=[str(folder)])

    def resumed():

        return train_quietly(small, epochs=5, resume=str(ck), device="cpu")

    def check_resumed(result):
        assert [r["epoch"] for r in result.history] == list(range(1, 6))

    run_case("checkpoint resume", what, resumed, check_resumed, names=[str(ck)])
