"""Shared fixtures (bundled cora, the random-graph builder), the markers that sort the
tests by kind (and the guard that keeps ``mpi`` true), and the options and end-of-session
table of the hostile-input fuzz suite."""
import contextlib
import dataclasses
import functools
import json
import os
import shutil
import signal
import subprocess
import tempfile
import types
from pathlib import Path

import pytest

from tests.helpers import fuzz_report

# The suite's own imports (torch and the rest) come with the fixtures and test modules that
# use them: the controller of a parallel run (-n) imports only this file and starts at once.


@pytest.fixture(autouse=True)
def stop_signal_handlers():
    """SIGINT's and SIGTERM's handlers as they were before each test: an entry point run in
    this process that ended on a stop leaves SIGINT ignored (the process is meant to exit),
    and children started later would inherit that."""
    handlers = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    yield
    for s, handler in handlers.items():
        if handler is not None and signal.getsignal(s) is not handler:
            signal.signal(s, handler)


@pytest.fixture(scope="session")
def cora():
    from distgnn.data.datasets import load

    return load("cora")


@pytest.fixture(scope="session")
def good_partitions(tmp_path_factory):
    """A valid 3-partition directory for the fuzz suite (cases copy it, never change it)."""
    from tests.helpers.fuzz import write_good_partitions

    return write_good_partitions(tmp_path_factory.mktemp("fuzz") / "parts")


@pytest.fixture(scope="module")
def rmat_ds():
    from distgnn.data.datasets import load
    from tests.helpers.partitions import RMAT

    return load(RMAT)


@pytest.fixture(scope="module")
def cora_ds():
    from distgnn.data.datasets import load

    return load("cora")


@pytest.fixture(scope="module")
def small_ds():
    from distgnn.data.datasets import load
    from tests.helpers.partitions import SMALL_RMAT

    return load(SMALL_RMAT)


@pytest.fixture(scope="module")
def datasets(rmat_ds, cora_ds):
    return {"rmat": rmat_ds, "cora": cora_ds}


@pytest.fixture(scope="module")
def good_dir(tmp_path_factory, small_ds):
    """A valid 3-partition directory of a small R-MAT (copy it before damaging it)."""
    from tests.helpers.partitions import write_dir

    out = tmp_path_factory.mktemp("good") / "parts"
    write_dir(small_ds, out, 3, "libra", seed=5)
    return out


@pytest.fixture
def random_graph():
    """The builder :func:`build_random_graph` (fixtures cannot take arguments)."""
    from tests.helpers.graphs import build_random_graph

    return build_random_graph


# ---- the hostile-input fuzz suite (tests/test_fuzz_*.py) ----------------------------------------
# per fuzz test: the 35 fuzz tests take about 50 s on 2 cores.  Not fewer: examples 301 to
# 1000 reach 76 branches of the loaders' checks (graph, datasets, partition format) that the
# first 300 do not (branch coverage, 2026-11-25), and 101 to 300 another 81.
FUZZ_EXAMPLES = 1000


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
    examples, seed = config.getoption("fuzz_examples"), config.getoption("fuzz_seed")
    if not hasattr(config, "workerinput") and config.getoption("dist", "no") != "no" and \
            config.getoption("tx", None) and not config.getoption("collectonly"):
        # the controller of a parallel run, which collects nothing: where its workers say
        # which tests go together
        fuzz_report.EXAMPLES, fuzz_report.SEED = examples, seed
        folder = tempfile.mkdtemp(prefix="distgnn-xdist-")
        os.environ[GROUPS_ENV] = folder  # inherited by the workers it starts
        config.add_cleanup(lambda: shutil.rmtree(folder, ignore_errors=True))
    else:  # before the fuzz tests are collected: their @fuzz reads the settings
        from tests.helpers import fuzz

        fuzz.configure(examples, seed)


def pytest_sessionstart(session):
    """A run killed before its teardowns leaves its emulated clusters up, and the next run's
    first cluster would find their subnet taken: the controller takes down the suite's own
    (a user's, of other names, are left alone) where it may make namespaces at all."""
    if hasattr(session.config, "workerinput") or os.geteuid() != 0:
        return
    from tests.helpers import hostile_launch, slurm

    for name in (hostile_launch.NAME, slurm.NAME):
        # by name: a killed run's record of what it made went with its temporary folder,
        # and these names are the suite's own
        with contextlib.suppress(OSError, subprocess.CalledProcessError):  # no ip here
            hostile_launch.sweep(name=name)


def pytest_sessionfinish(session):
    if hasattr(session.config, "workeroutput"):  # a worker: its cases go to the controller
        session.config.workeroutput["fuzz"] = fuzz_report.export()


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node, error):
    fuzz_report.merge(getattr(node, "workeroutput", {}).get("fuzz"))


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    if not fuzz_report.COUNTS:
        return
    terminalreporter.section("hostile inputs per loader")
    for line in fuzz_report.table():
        terminalreporter.write_line(line)
    if config.getoption("fuzz_report"):
        fuzz_report.write_json(config.getoption("fuzz_report"))
        terminalreporter.write_line(f"written to {config.getoption('fuzz_report')}")


# ---- markers: the tests by kind ----------------------------------------------------------------
# Registered in pyproject.toml (with --strict-markers).  The quick loop is
#     pytest -m "not mpi and not cluster and not fuzz and not slow"
# ``mpi``: a test that starts an MPI job (mpirun, mpiexec, distgnn-launch without --dry-run), or
#   needs the installed launcher's answer to --version (marked by hand in test_launch.py): the
#   quick loop runs where no MPI is installed
# ``cluster``: the emulated multi-node cluster (network namespaces, tc); keep these serial
# ``fuzz``: the hypothesis suites (tests/test_fuzz_*.py)
# ``slow``: anything else over about 5 s on 2 cores (marked where it is written)
#
# ``mpi`` is given here, not written by hand: a parameter of tests.helpers.mpi.installed
# carries it; a test whose code -- its own, its fixtures', its parameters' (the hostile
# cases), and that of the suite's functions they call -- names one of MPI_STARTERS, the
# suite's helpers that start jobs, gets it; so do the modules of MPI_MODULES and the tests of
# MPI_TESTS, whose jobs start where no name shows it.  What none of these catches cannot pass
# silently: every test without the marker runs under tests/helpers/mpi_guard, which refuses
# an MPI job started by the test or by any Python process it starts, and fails the test,
# naming the command.
MPI_STARTERS = frozenset({"mpirun", "mpi_python", "mpi_command", "mpi_launch", "mpi_popen"})
MPI_MODULES = frozenset({"test_reliability"})  # every drill of bench.resume is a job
MPI_TESTS = frozenset({
    "test_placement.py::test_launcher_gives_each_local_rank_its_gpu",  # launch.plan's argv run
    "test_readme.py::test_the_quick_examples_run_in_order",  # distgnn-launch -n 2 in README
})
# tests/helpers/hostile_launch.py: cluster_up makes the suite's emulated cluster, sweep removes
# whatever has its name (test_cluster.py's, the hand-made ones of the hostile cases, the
# SLURM cluster of tests/helpers/slurm.py): a sweep in one worker while another worker's
# cluster is up would take that cluster down under its tests
CLUSTER_STARTERS = frozenset({"cluster_up", "sweep"})
# over about 5 s, in files whose owners have yet to write @pytest.mark.slow on them
SLOW_TESTS = frozenset({"test_distributed.py::test_one_partition_trains_without_mpirun"})
GUARD = Path(__file__).parent / "helpers" / "mpi_guard"


def _code_objects(code):
    yield code
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            yield from _code_objects(const)


def names_any(obj, names: frozenset, seen: set | None = None) -> bool:
    """Whether ``obj`` -- a function of the suite (``tests.*``), a closure's cells, a
    partial, a hostile ``Case``, a list of them -- or a function of the suite it calls by
    name, names one of ``names`` (a global, a method or an attribute) in its code."""
    seen = set() if seen is None else seen
    if id(obj) in seen:
        return False
    seen.add(id(obj))
    if isinstance(obj, functools.partial):
        return names_any([obj.func, *obj.args, *obj.keywords.values()], names, seen)
    if isinstance(obj, (list, tuple)):
        return any(names_any(o, names, seen) for o in obj)
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return names_any([getattr(obj, f.name) for f in dataclasses.fields(obj)], names, seen)
    obj = getattr(getattr(obj, "hypothesis", None), "inner_test", obj)  # @given's test
    while hasattr(obj, "__wrapped__"):
        obj = obj.__wrapped__
    if not isinstance(obj, types.FunctionType) or \
            not (obj.__module__ or "").startswith(("tests.", "test_", "conftest")):
        return False
    called = []
    for code in _code_objects(obj.__code__):
        if names.intersection(code.co_names):
            return True
        called += [g for n in code.co_names if isinstance(
            g := obj.__globals__.get(n), (types.FunctionType, functools.partial))]
    cells = []
    for cell in obj.__closure__ or ():
        with contextlib.suppress(ValueError):  # a cell not filled yet
            cells.append(cell.cell_contents)
    defaults = [*(obj.__defaults__ or ()), *(obj.__kwdefaults__ or {}).values()]
    return names_any([*called, *cells, *defaults], names, seen)


def _parts(item):
    """The test function, its fixtures' functions and its parameters."""
    fixtures = getattr(item, "_fixtureinfo", None)
    defs = [d.func for ds in (fixtures.name2fixturedefs.values() if fixtures else ())
            for d in ds]
    params = list(item.callspec.params.values()) if hasattr(item, "callspec") else []
    return [item.function, *defs, *params]


def pytest_collection_modifyitems(config, items):
    groups = {}
    for item in items:
        module = item.path.stem
        parts = _parts(item)
        if module.startswith("test_fuzz_"):
            item.add_marker(pytest.mark.fuzz)
        if module == "test_cluster" or names_any(parts, CLUSTER_STARTERS):
            item.add_marker(pytest.mark.cluster)
        if item.get_closest_marker("cluster") is not None:
            groups[item.nodeid] = "cluster"
        else:
            shared = sorted(SHARED_JOBS & set(getattr(item, "fixturenames", ())))
            if shared:
                groups[item.nodeid] = f"{item.path.name}::{shared[0]}"
        name = f"{item.path.name}::{item.originalname}"
        if item.get_closest_marker("mpi") is None and (
                module in MPI_MODULES or name in MPI_TESTS or names_any(parts, MPI_STARTERS)):
            item.add_marker(pytest.mark.mpi)
        case = item.callspec.params.get("case") if hasattr(item, "callspec") else None
        if name in SLOW_TESTS or getattr(case, "slow", False):  # a hostile case's own mark
            item.add_marker(pytest.mark.slow)
    if hasattr(config, "workerinput") and os.environ.get(GROUPS_ENV):
        # longest first (the cluster group, then MPI jobs, slow and fuzz tests), so that no
        # worker is left with a long test at the end; the same order in every worker
        items.sort(key=lambda item: 0 if item.nodeid in groups else 1 if any(
            item.get_closest_marker(m) for m in ("mpi", "slow", "fuzz")) else 2)
        worker = config.workerinput["workerid"]
        partial = Path(os.environ[GROUPS_ENV]) / f".groups-{worker}.tmp"
        partial.write_text(json.dumps(groups))
        partial.replace(partial.with_name(f"groups-{worker}.json"))


# ---- parallel runs (pytest-xdist): -n auto in pyproject.toml ------------------------------------
# A worker per core plus one: the suite's CPU time fills about 83 % of two cores with two
# workers, the rest being tests that wait (on MPI jobs, signals, timeouts); a third worker
# computes meanwhile (10 min 4 s -> 9 min 5 s on 2 cores).  Every ``cluster`` test runs in
# one worker, one after another (two at once share the emulated links, and each sees the
# other's traffic); the other tests, MPI jobs included, go one at a time to whichever worker
# is free.  (pytest-xdist's own xdist_group does not group under pytest 9: it renames
# item._nodeid, which pytest 9 no longer reads.)
GROUPS_ENV = "DISTGNN_TEST_GROUPS"  # the folder where each worker writes {node id: group}
# module-scoped fixtures that run the jobs whose results several tests read (on ranks that
# are threads): their tests go to one worker, or each worker would run the jobs again
SHARED_JOBS = frozenset({"model_job", "thread_job"})
MAX_WORKERS = 4


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_auto_num_workers(config):
    """``-n auto``: a worker per core plus one, at most MAX_WORKERS; none (this process) for named
    tests (``file.py::test``), which start faster and can be debugged."""
    if any("::" in str(arg) for arg in config.args):
        return 0
    return min((os.cpu_count() or 1) + 1, MAX_WORKERS)


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config, log):
    """Load balancing one test at a time, but a group's tests (``cluster``, or those reading
    one of ``SHARED_JOBS``) as one unit."""
    if config.getoption("dist") != "load":
        return None  # a mode asked for by name
    from xdist.scheduler import LoadScopeScheduling

    class GroupScheduling(LoadScopeScheduling):
        groups: dict | None = None

        def _split_scope(self, nodeid):
            if self.groups is None:  # every worker has collected (and written) by now
                written = sorted(Path(os.environ[GROUPS_ENV]).glob("groups-*.json"))
                self.groups = json.loads(written[0].read_text()) if written else {}
            return self.groups.get(nodeid, nodeid)

    return GroupScheduling(config, log)


@pytest.fixture(autouse=True)
def _mpi_guard(request, monkeypatch, tmp_path_factory):
    """A test without the ``mpi`` marker starts no MPI job (see tests/helpers/mpi_guard)."""
    if request.node.get_closest_marker("mpi") is not None:
        yield
        return
    from tests.helpers.mpi_guard import sitecustomize as guard

    log = tmp_path_factory.getbasetemp() / "mpi-guard.log"
    log.unlink(missing_ok=True)
    monkeypatch.setattr(subprocess.Popen, "_execute_child",
                        guard.guard(subprocess.Popen._execute_child, str(log)))
    monkeypatch.setenv(guard.ENV, str(log))
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(
        [str(GUARD), *filter(None, [os.environ.get("PYTHONPATH")])]))
    yield
    if log.exists():
        started = sorted(set(log.read_text().splitlines()))
        log.unlink()
        pytest.fail(f"{request.node.nodeid} started an MPI job but is not marked mpi "
                    f"(tests/conftest.py): {started[0]}", pytrace=False)

