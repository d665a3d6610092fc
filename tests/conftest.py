"""Shared fixtures (bundled cora, the random-graph builder) and the options and
end-of-session table of the hostile-input fuzz suite."""
import pytest

from distgnn.datasets import load as load_dataset
from tests.helpers import fuzz as fuzz_report
from tests.helpers.graphs import build_random_graph
from tests.helpers.partitions import RMAT, SMALL_RMAT, write_dir


@pytest.fixture(scope="session")
def cora():
    from distgnn.datasets import load

    return load("cora")


@pytest.fixture(scope="session")
def good_partitions(tmp_path_factory):
    """A valid 3-partition directory for the fuzz suite (cases copy it, never change it)."""
    from tests.helpers.fuzz import write_good_partitions

    return write_good_partitions(tmp_path_factory.mktemp("fuzz") / "parts")


@pytest.fixture(scope="module")
def rmat_ds():
    return load_dataset(RMAT)


@pytest.fixture(scope="module")
def cora_ds():
    return load_dataset("cora")


@pytest.fixture(scope="module")
def small_ds():
    return load_dataset(SMALL_RMAT)


@pytest.fixture(scope="module")
def datasets(rmat_ds, cora_ds):
    return {"rmat": rmat_ds, "cora": cora_ds}


@pytest.fixture(scope="module")
def good_dir(tmp_path_factory, small_ds):
    """A valid 3-partition directory of a small R-MAT (copy it before damaging it)."""
    out = tmp_path_factory.mktemp("good") / "parts"
    write_dir(small_ds, out, 3, "libra", seed=5)
    return out


@pytest.fixture
def random_graph():
    """The builder :func:`build_random_graph` (fixtures cannot take arguments)."""
    return build_random_graph


# ---- the hostile-input fuzz suite (tests/test_fuzz_*.py) ----------------------------------------
FUZZ_EXAMPLES = 1000  # per fuzz test: the fuzz tests in about two minutes on 2 cores


def pytest_addoption(parser):
    group = parser.getgroup("fuzz", "hostile-input fuzz suite (tests/test_fuzz_*.py)")
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
