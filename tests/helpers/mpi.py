"""MPI implementations in the tests: parameters for real jobs under each of them, skipped
with the reason (and the command that installs it) where one is not installed."""
import pytest

from launch import LaunchError
from launch.mpirun import find_launcher


def installed(mpi, *before):
    """``pytest.param(*before, mpi)``, skipped where MPI implementation ``mpi`` (a key of
    ``launch.mpirun.IMPLEMENTATIONS``; ``None``: the default launcher) is not installed."""
    if mpi is not None:
        try:
            find_launcher(mpi)
        except LaunchError as e:
            return pytest.param(*before, mpi, marks=pytest.mark.skip(reason=str(e)))
    return pytest.param(*before, mpi)
