"""Training in the tests: quiet, single-threaded runs and their loss curves."""
from distgnn.run.config import TrainConfig
from distgnn.run.training import train


def train_quietly(data, log=lambda s: None, **config):
    """Single-socket training of ``data`` on one thread, without progress output."""
    return train(data, TrainConfig(progress=False, threads=1, **config), log=log)


def losses(result):
    return [r["loss"] for r in result.history]
