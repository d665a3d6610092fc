"""MPI implementations in the tests: parameters for real jobs under each of them, marked
``mpi`` and skipped with the reason (and the command that installs it) where one is not
installed."""
import os
import subprocess

import pytest

from launch import LaunchError
from launch.mpirun import find_launcher


def installed(mpi, *before):
    """``pytest.param(*before, mpi)`` marked ``mpi`` (a real job under it), skipped where MPI
    implementation ``mpi`` (a key of ``launch.mpirun.IMPLEMENTATIONS``; ``None``: the default
    launcher) is not installed."""
    marks = [pytest.mark.mpi]
    if mpi is not None:
        try:
            find_launcher(mpi)
        except LaunchError as e:
            marks.append(pytest.mark.skip(reason=str(e)))
    return pytest.param(*before, mpi, marks=marks)


def skipped(param) -> str | None:
    """The reason an :func:`installed` parameter is skipped (``None``: it is installed)."""
    return next((m.kwargs["reason"] for m in param.marks if m.name == "skip"), None)


def run_plan(plan, timeout, argv=None, env=None):
    """The finished ``subprocess.run`` of launch plan ``plan`` (``argv``: its command line
    altered; ``env``: the whole environment, by default this one with the plan's), output
    captured as text; the job's session directories removed afterwards, as
    ``launch.job.run`` removes them."""
    try:
        return subprocess.run(plan.argv if argv is None else argv,
                              env={**os.environ, **plan.env} if env is None else env,
                              capture_output=True, text=True, timeout=timeout)
    finally:
        plan.remove_session()
