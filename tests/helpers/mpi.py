"""MPI implementations in the tests: parameters for real jobs under each of them, marked
``mpi`` and skipped with the reason (and the command that installs it) where one is not
installed."""
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
