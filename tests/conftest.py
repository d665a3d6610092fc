"""Shared fixtures: a seeded random-graph builder with the awkward cases kernels get wrong;
the options and end-of-session table of the hostile-input fuzz suite."""
import numpy as np
import pytest

import fuzz_report
from distgnn.graph import CSRGraph


def build_random_graph(seed=0, n=40, e=160, weighted=False, hub_degree=0, isolated=4,
                       self_loops=4, duplicates=4):
    """``(graph, src, dst, weight)`` for a random directed graph on ``n`` vertices.

    The raw edge arrays (``weight`` is None when unweighted) are returned so that tests
    can build references without going through CSRGraph.  The last ``isolated`` vertices
    have no edges at all; ``self_loops`` edges are ``v -> v``; ``duplicates`` edges are
    repeated; vertex 0 receives ``hub_degree`` extra in-edges.  Weights are in
    [-1.5, 1.5] (negative ones flip max and min).
    """
    rng = np.random.default_rng(seed)
    live = n - isolated
    src = rng.integers(0, live, e)
    dst = rng.integers(0, live, e)
    src[:self_loops] = dst[:self_loops]
    src[self_loops:self_loops + duplicates] = src[-duplicates:] if duplicates else []
    dst[self_loops:self_loops + duplicates] = dst[-duplicates:] if duplicates else []
    src = np.concatenate([src, rng.integers(0, live, hub_degree)])
    dst = np.concatenate([dst, np.zeros(hub_degree, np.int64)])
    weight = rng.uniform(-1.5, 1.5, len(src)).astype(np.float32) if weighted else None
    return CSRGraph.from_edges(src, dst, n, weight), src, dst, weight


def train_quietly(data, log=lambda s: None, **config):
    """Single-socket training of ``data`` on one thread, without progress output."""
    from distgnn.config import TrainConfig
    from distgnn.train import train

    return train(data, TrainConfig(progress=False, threads=1, **config), log=log)


def losses(result):
    return [r["loss"] for r in result.history]


@pytest.fixture(scope="session")
def cora():
    from distgnn.datasets import load

    return load("cora")


@pytest.fixture
def random_graph():
    """The builder :func:`build_random_graph` (fixtures cannot take arguments)."""
    return build_random_graph


# ---- the hostile-input fuzz suite (tests/test_fuzz.py) ----------------------------------------
FUZZ_EXAMPLES = 1000  # per fuzz test: tests/test_fuzz.py in about a minute on 2 cores


def pytest_addoption(parser):
    group = parser.getgroup("fuzz", "hostile-input fuzz suite (tests/test_fuzz.py)")
    group.addoption("--fuzz-examples", type=int, default=FUZZ_EXAMPLES, metavar="N",
                    help=f"hostile cases per fuzz test (default {FUZZ_EXAMPLES}, bounded for "
                         "CI; e.g. 5000 for a long run)")
    group.addoption("--fuzz-seed", type=int, metavar="S",
                    help="draw cases from seed S (default: the same derandomized cases "
                         "every run)")
    group.addoption("--fuzz-report", metavar="FILE",
                    help="write the cases tried and their outcomes per loader as JSON")


def pytest_configure(config):
    fuzz_report.configure(config.getoption("fuzz_examples"), config.getoption("fuzz_seed"))


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    if not fuzz_report.COUNTS:
        return
    terminalreporter.section("hostile inputs per loader")
    for line in fuzz_report.table():
        terminalreporter.write_line(line)
    if config.getoption("fuzz_report"):
        fuzz_report.write_json(config.getoption("fuzz_report"))
        terminalreporter.write_line(f"written to {config.getoption('fuzz_report')}")
