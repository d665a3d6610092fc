"""The guard of the ``mpi`` marker: a test not marked ``mpi`` cannot start an MPI job.

``tests/conftest.py`` installs :func:`guard` in the pytest process for every test without
the marker, and puts this folder first on ``PYTHONPATH`` with ``DISTGNN_TEST_NO_MPI`` naming
a log file, so that every Python process the test starts (``distgnn-launch``, a tool run as
a program) imports this module as its ``sitecustomize`` and guards itself too.  Starting an
installed launcher (``mpirun``, ``mpiexec``, ``prterun`` ...) with a job then raises
``PermissionError`` and the command is appended to the log, which the fixture reads after
the test: the test fails, naming the command and the marker it lacks.

Launchers that the tests write themselves (fakes in the session's temporary folder) pass.
Standard library only: this runs at the start-up of every process of a guarded test.
"""
import os
import subprocess

ENV = "DISTGNN_TEST_NO_MPI"
LAUNCHERS = frozenset({"mpirun", "mpiexec", "mpiexec.hydra", "orterun", "prterun", "prte"})
# questions, not jobs: launch.mpirun asks a launcher what it is once per process (cached), so
# whether a given test asks depends on the tests before it; the tests that need the answer
# carry the marker by hand (test_launch.py)
QUERIES = (["--version"], ["-V"])


def _resolve(program: str) -> str | None:
    if os.sep not in program:
        import shutil

        program = shutil.which(program)
    return os.path.realpath(program) if program else None


def launcher_call(args, executable=None, fakes: str | None = None) -> str | None:
    """The command line, when ``args`` (as ``Popen`` passes them on) starts an installed MPI
    launcher with a job (not only to ask its ``--version``); a launcher under ``fakes`` (the
    session's temporary folder) is a test's own."""
    argv = [args] if isinstance(args, (str, bytes, os.PathLike)) else list(args)
    argv = [os.fsdecode(a) for a in argv]
    if executable is None and len(argv) == 3 and argv[1] == "-c" and \
            os.path.basename(argv[0]) in ("sh", "bash", "dash"):
        import shlex

        try:  # a shell line: its first word
            argv = shlex.split(argv[2])
        except ValueError:
            return None
    if not argv:
        return None
    program = os.fsdecode(executable) if executable else argv[0]
    if os.path.basename(program) not in LAUNCHERS or argv[1:] in QUERIES:
        return None
    path = _resolve(program)
    if path is None or fakes and path.startswith(os.path.realpath(fakes) + os.sep):
        return None
    return " ".join(argv)


def guard(execute_child, log: str):
    """``Popen._execute_child`` refusing MPI jobs (and logging them to ``log``, in the
    session's temporary folder, where the tests write their fake launchers)."""
    fakes = os.path.dirname(log)

    def guarded(self, args, executable, *rest, **kw):
        command = launcher_call(args, executable, fakes)
        if command is not None:
            with open(log, "a", encoding="utf-8") as f:
                f.write(command.replace("\n", " ") + "\n")
            raise PermissionError(f"an MPI job in a test not marked mpi: {command}")
        return execute_child(self, args, executable, *rest, **kw)

    guarded.mpi_guard = True
    return guarded


if os.environ.get(ENV) and not getattr(subprocess.Popen._execute_child, "mpi_guard", False):
    subprocess.Popen._execute_child = guard(subprocess.Popen._execute_child, os.environ[ENV])
