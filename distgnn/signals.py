"""Stop requests: finish the epoch, write a checkpoint, exit.

SLURM sends SIGTERM to every task when a job reaches its time limit (``sbatch
--signal=TERM@S`` moves that S seconds earlier); Open MPI's ``mpirun`` forwards SIGUSR1
and SIGUSR2 to its ranks but answers SIGTERM by killing them, so ``distgnn-launch`` turns
a SIGTERM, SIGUSR1 or Ctrl-C it receives into SIGUSR1 for the ranks, and reports the
checkpoint their :func:`stopped_line` names.  A handler can only note the request:
the ranks agree on it at the end of the epoch (any rank's request stops all of them), when
the state is consistent enough to checkpoint.  Ctrl-C (SIGINT) is a stop request too; a
second Ctrl-C stops at once, without a checkpoint.  SIGHUP (the terminal or the ssh session
a tool runs in was closed) is a stop request as SIGTERM is, unless it is ignored when the
tool starts (``nohup``): then it stays ignored (:func:`takes`).

Outside training's epochs (start-up, the results written at the end, distgnn-predict) a
SIGTERM or SIGHUP stops at once, as Ctrl-C does: it raises :class:`Terminated` where the
process is, so that every writer on the way out removes what it made beside its target
(their default would end the process there and then).  Once a stop is on its way out, further
stop signals are not raised again (:func:`stopping`): they would cut its clean-up short.

One request needs no signal: the launcher going away.  pip's Open MPI ``mpirun`` is a
wrapper that starts ``prterun``, which starts the ranks; a SIGTERM to that wrapper ends it
alone, and the job would run on with nobody waiting for it.  Under MPI each rank therefore
also watches its launcher (its parent's parent, as seen at the start): once that process
is gone, the rank asks to stop (:data:`LAUNCHER_GONE`), with SIGHUP's status.
"""
from __future__ import annotations

import os
import re
import signal
import sys
import threading

STOP_SIGNALS = (signal.SIGTERM, signal.SIGUSR1, signal.SIGINT, signal.SIGHUP)
# the stop request of a rank whose launcher is gone (no signal came): above every signal
# number, so that where ranks differ (one got a signal, the others found the launcher gone)
# the highest request, which they agree on, is the launcher's going; it ends the run with
# SIGHUP's status (128 + SIGHUP)
LAUNCHER_GONE = 256 + signal.SIGHUP
# stop signals (Ctrl-C, SIGTERM, SIGHUP) the command-line entry points saw before training
# took the signals over.  A library can swallow the exception one raises (an import's bare ``except:``), so
# training checks here before it starts.
EARLY_INTERRUPTS: list[int] = []
# what the first Ctrl-C of a training run answers at once, on stderr
ACKNOWLEDGED_INTERRUPT = "Ctrl-C: stopping after this epoch (Ctrl-C again stops now)\n"
# the epoch, checkpoint and directory in a line of :func:`stopped_line` (``distgnn-launch``
# reads it from its ranks' output to say what they wrote and how to continue)
STOPPED_CHECKPOINT = re.compile(r"stopped after epoch (\d+); checkpoint (.+); "
                                r"continue with --resume (.+)$")


def takes(signum: int) -> bool:
    """Whether a tool takes the stop signal ``signum`` over now: always, except a SIGHUP
    that is ignored (``nohup``, or a parent that wants the process to outlive its terminal),
    which stays ignored."""
    return signum != signal.SIGHUP or signal.getsignal(signum) != signal.SIG_IGN


def request_signal(request: int) -> int:
    """The signal whose status a stop request ends the run with (SIGHUP for
    :data:`LAUNCHER_GONE`, else the request itself)."""
    return signal.SIGHUP if request == LAUNCHER_GONE else request


class Terminated(BaseException):
    """SIGTERM or SIGHUP (``signum``) outside training's epochs: raised where the process
    is, so that the clean-ups on the way out run.  A ``BaseException``, as
    ``KeyboardInterrupt`` is, so that no ``except Exception`` on the way stops it."""

    def __init__(self, signum: int = signal.SIGTERM):
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


def stop_now(signum: int):
    """Raise the stop of ``signum``: ``KeyboardInterrupt`` for Ctrl-C, else
    :class:`Terminated`."""
    if signum == signal.SIGINT:
        raise KeyboardInterrupt
    raise Terminated(signum)


def stopping() -> bool:
    """Whether a stop (``KeyboardInterrupt``, :class:`Terminated`) is on its way out already.

    That is, being handled or passing through ``finally`` blocks in the code that runs now.
    A stop signal then is not raised again: it would cut short the clean-up (a temporary
    file removed, a staging folder) or the last line the first one started."""
    return isinstance(sys.exception(), (KeyboardInterrupt, Terminated))


def stopped_line(why: str, done: int, checkpoint: str | None, directory: str | None) -> str:
    """What a run that stopped on a request says: ``why``, the epochs done, and the
    checkpoint it wrote in ``directory`` with how to continue from it (``None``: nothing
    saved, as without ``--checkpoint-dir``)."""
    then = (f"checkpoint {checkpoint}; continue with --resume {directory}" if checkpoint
            else "no --checkpoint-dir, nothing saved")
    return f"{why}: stopped after epoch {done}; {then}"


def parent_of(pid: int) -> int | None:
    """The parent process id of ``pid`` (``None`` when it is gone or unreadable)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            # "pid (comm) state ppid ...": comm may hold spaces and parentheses
            return int(f.read().rsplit(")", 1)[1].split()[1])
    except (OSError, IndexError, ValueError):
        return None


class StopRequests:
    """Context manager that records the stop requests received while it is active.

    ``watch_launcher``: also request a stop (:data:`LAUNCHER_GONE`) once the process that
    launched this one's parent is gone (see the module docstring).
    """

    def __init__(self, watch_launcher: bool = False):
        self.received: int | None = None
        self._previous: dict = {}
        self._launcher = None
        if watch_launcher:
            parent = os.getppid()
            launcher = parent_of(parent)
            if launcher not in (None, 0, 1):  # not already an orphan or a daemon's child
                self._launcher = (parent, launcher)

    def _note(self, signum, frame) -> None:
        if stopping():  # a second Ctrl-C's stop is on its way out: let it end in order
            return
        if signum == signal.SIGINT and self.received == signal.SIGINT:
            raise KeyboardInterrupt  # a second Ctrl-C: stop now, without a checkpoint
        first = not self.received
        self.received = signum  # before the answer: the next Ctrl-C may come right after it
        if signum == signal.SIGINT and first:
            # os.write, not print: a handler can interrupt a print to the same stream
            os.write(2, ACKNOWLEDGED_INTERRUPT.encode())

    def request(self) -> int:
        """The signal number of the stop requested so far (0: none; :data:`LAUNCHER_GONE`:
        no signal, the launcher is gone)."""
        if not self.received and self._launcher is not None:
            parent, launcher = self._launcher
            if parent_of(parent) != launcher:
                self.received = LAUNCHER_GONE
        return int(self.received or 0)

    def __enter__(self) -> "StopRequests":
        if EARLY_INTERRUPTS:  # a Ctrl-C or SIGTERM during start-up that did not end it
            stop_now(EARLY_INTERRUPTS[0])
        if threading.current_thread() is threading.main_thread():  # Python's rule for handlers
            for s in filter(takes, STOP_SIGNALS):
                self._previous[s] = signal.signal(s, self._note)
        return self

    def __exit__(self, *exc) -> None:
        for s, handler in self._previous.items():
            signal.signal(s, handler)
        self._previous.clear()
