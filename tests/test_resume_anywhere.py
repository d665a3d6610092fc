"""A checkpoint of P ranks resumes on P' ranks, in one process, on another backend.

A run killed after ``KILLED`` of ``EPOCHS`` epochs on 4 ranks (ranks are threads of this
process) and resumed elsewhere ends with the weights of the uninterrupted 4-rank run (cd-0:
the same maths on any partitioning, up to the order of sums); under cd-r's default schedule
the exchange starts again with an exact epoch and the run ends as accurate.

``python -m tests.test_resume_anywhere [--dataset cora] [--epochs 40]`` prints the resume
matrix (from P to P', backend, type: max relative weight difference).
"""
import argparse
import shutil

import pytest
import torch

from distgnn.comm import RankFailed
from distgnn.data.datasets import load
from distgnn.run.config import TrainConfig
from distgnn.run.training import train
from tests.helpers.training import fit_rank, losses, on_threads
from tests.test_distributed import write_parts

EPOCHS, KILLED = 40, 20
FROM = 4
# (ranks, backend) the 4-rank checkpoint resumes on; 1: one process on the dataset
TARGETS = [(2, "numba"), (1, "numba"), (8, "numba"), (4, "torch"), (2, "torch")]
TOLERANCE = {"float32": 1e-5, "float64": 1e-10}


def options(**extra) -> dict:
    return {"model": "sage", "hidden": 16, "seed": 3, "lr": 0.01, "progress": False,
            "threads": 1, **extra}


class Jobs:
    """Runs on ``data``'s partitions (written once per rank count in ``root``)."""

    def __init__(self, data, root):
        self.data, self.root, self.parts = data, root, {}

    def partitions(self, ranks: int):
        if ranks not in self.parts:
            self.parts[ranks] = write_parts(self.data, self.root / f"p{ranks}", ranks)
        return self.parts[ranks]

    def run(self, ranks: int, backend: str = "numba", log=lambda s: None, **config):
        """The model of a run on ``ranks`` (1: the dataset in this process)."""
        cfg = TrainConfig(**options(**config))
        if ranks == 1:
            return train(self.data, cfg.replace(backend=backend), log=log)
        directory = self.partitions(ranks)
        results = on_threads(ranks, lambda comm: fit_rank(directory, cfg, comm, log=log,
                                                          backend=backend))
        return results[0]

    def killed(self, directory, **config):
        """The checkpoint after ``KILLED`` epochs of the 4-rank run, in ``directory``."""
        self.run(FROM, epochs=KILLED, checkpoint_dir=str(directory), checkpoint_every=KILLED,
                 **config)
        return directory


def difference(a: torch.nn.Module, b: torch.nn.Module) -> float:
    """Max relative difference over every parameter (to the parameter's largest entry)."""
    worst = 0.0
    for (name, p), q in zip(a.state_dict().items(), b.state_dict().values()):
        worst = max(worst, ((p - q).abs().max() / q.abs().max().clamp_min(1e-30)).item())
    return worst


@pytest.fixture(scope="module")
def jobs(cora_ds, tmp_path_factory):
    return Jobs(cora_ds, tmp_path_factory.mktemp("resume-anywhere"))


@pytest.mark.slow
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_a_checkpoint_of_4_ranks_resumes_on_2_1_and_8_and_on_torch(jobs, tmp_path, dtype):
    whole = jobs.run(FROM, epochs=EPOCHS, dtype=dtype).model
    killed = jobs.killed(tmp_path / "ck", dtype=dtype)
    for ranks, backend in TARGETS:
        here = tmp_path / f"to-{ranks}-{backend}"
        shutil.copytree(killed, here)
        said = []
        resumed = jobs.run(ranks, backend, log=said.append, epochs=EPOCHS, resume=str(here),
                           dtype=dtype)
        assert len(resumed.history) == EPOCHS
        assert difference(resumed.model, whole) <= TOLERANCE[dtype], (ranks, backend)
        moved = f"checkpoint of 4 ranks resumed on {'one process' if ranks == 1 else ranks}"
        assert any(moved in line for line in said) == (ranks != FROM), said


@pytest.mark.slow
def test_the_delayed_exchange_starts_again_with_an_exact_epoch(jobs, tmp_path):
    whole = jobs.run(FROM, epochs=EPOCHS, algo="cd-r")
    killed = jobs.killed(tmp_path / "ck", algo="cd-r")
    said = []
    resumed = jobs.run(2, log=said.append, epochs=EPOCHS, resume=str(killed), algo="cd-r")
    assert any("checkpoint of 4 ranks resumed on 2 ranks; the cd-r exchange starts again "
               "with an exact epoch" in line for line in said), said
    # epoch 21 (an odd epoch: stale in the uninterrupted run unless the loss rose) is exact
    assert resumed.history[KILLED]["exact_exchange"] is True
    assert losses(resumed)[:KILLED] == losses(whole)[:KILLED]
    assert abs(resumed.history[-1]["test_acc"] - whole.history[-1]["test_acc"]) <= 0.02


def test_a_delayed_runs_checkpoint_resumes_exact_in_one_process(jobs, tmp_path):
    """One process has no split vertices: a cd-r checkpoint resumes there (without the
    exchange's options, which one process refuses) and the run goes on exact."""
    killed = jobs.killed(tmp_path / "ck", algo="cd-r")
    said = []
    resumed = jobs.run(1, log=said.append, epochs=EPOCHS, resume=str(killed))
    assert any("checkpoint of 4 ranks resumed on one process" in line for line in said), said
    assert len(resumed.history) == EPOCHS


@pytest.mark.slow
def test_the_same_layout_still_restores_every_rank_exactly(jobs, tmp_path):
    whole = jobs.run(FROM, epochs=30, algo="cd-r", delay=2)
    killed = jobs.run(FROM, epochs=15, algo="cd-r", delay=2, checkpoint_dir=str(tmp_path),
                      checkpoint_every=15)
    assert losses(killed) == losses(whole)[:15]
    resumed = jobs.run(FROM, epochs=30, algo="cd-r", delay=2, resume=str(tmp_path))
    assert losses(resumed) == losses(whole)


@pytest.mark.parametrize("change, fragment", [
    ({"hidden": 32}, "--hidden"), ({"model": "gcn"}, "--model"),
    ({"algo": "cd-r"}, "split-vertex exchange"), ({"dtype": "float64"}, "--dtype")])
def test_another_model_or_maths_is_still_refused_on_another_rank_count(jobs, tmp_path, change,
                                                                       fragment):
    killed = jobs.killed(tmp_path / "ck")
    with pytest.raises(RankFailed, match=f"written for another {fragment} than this run's"):
        jobs.run(2, epochs=EPOCHS, resume=str(killed), **change)


def test_other_data_is_refused_on_another_rank_count(jobs, tmp_path, small_ds):
    killed = jobs.killed(tmp_path / "ck")
    with pytest.raises(RankFailed, match="written for another data"):
        train(small_ds, TrainConfig(**options(epochs=EPOCHS, resume=str(killed))))


def resume_matrix(dataset: str, epochs: int, algo: str) -> None:
    """Print the resume matrix of the module docstring (under cd-r: test accuracies)."""
    global EPOCHS, KILLED
    EPOCHS, KILLED = epochs, epochs // 2
    import tempfile
    from pathlib import Path

    with tempfile.TemporaryDirectory() as root:
        root = Path(root)
        jobs = Jobs(load(dataset), root)
        exact = algo == "cd-0"
        print("| from | to | backend | type | " + ("max relative weight difference |"
              if exact else "test accuracy uninterrupted | resumed | difference (points) |"))
        print("|---|---|---|---|---|" + ("" if exact else "---|---|"))
        for dtype in TOLERANCE if exact else ["float32"]:
            whole = jobs.run(FROM, epochs=EPOCHS, dtype=dtype, algo=algo)
            killed = jobs.killed(root / f"ck-{dtype}", dtype=dtype, algo=algo)
            for ranks, backend in TARGETS:
                here = root / f"to-{ranks}-{backend}-{dtype}"
                shutil.copytree(killed, here)
                resumed = jobs.run(ranks, backend, epochs=EPOCHS, resume=str(here),
                                   dtype=dtype, **({} if ranks == 1 else {"algo": algo}))
                to = "one process" if ranks == 1 else f"{ranks} ranks"
                a, b = whole.history[-1]["test_acc"], resumed.history[-1]["test_acc"]
                shown = (f"{difference(resumed.model, whole.model):.1e}" if exact else
                         f"{100 * a:.1f} % | {100 * b:.1f} % | {100 * (b - a):+.1f}")
                print(f"| {FROM} ranks (numba) | {to} | {backend} | {dtype} | {shown} |",
                      flush=True)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=resume_matrix.__doc__)
    parser.add_argument("--dataset", default="cora")
    parser.add_argument("--epochs", type=int, default=EPOCHS)
    parser.add_argument("--algo", choices=("cd-0", "cd-r"), default="cd-0")
    args = parser.parse_args()
    resume_matrix(args.dataset, args.epochs, args.algo)
